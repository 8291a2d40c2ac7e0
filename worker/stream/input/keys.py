"""The 64-bit keys the engine works with, hashed for a whole poll batch at once: the record ids each
delete names, and each message's partitioning key (its Kafka key) for ``max_records_per_key``."""

from __future__ import annotations

import numpy as np

from ...compiled.blake2b import blake2b64_many
from ...olu import record_keys
from ...olu.exceptions import InvalidExample
from .decode import Delete
from .scan import joined

__all__ = ["delete_keys", "partitioning_keys"]


def delete_keys(events: dict) -> dict[int, list[int]]:
    """The ``record_key`` s of each delete among ``events`` ({position: event}), by position; none
    on an id the hashing refuses (the delete itself says why, when its turn comes)."""
    deletes = [(j, e.ids) for j, e in events.items() if isinstance(e, Delete) and e.ids]
    if not deletes:
        return {}
    try:
        flat = record_keys([r for _, ids in deletes for r in ids]).tolist()
    except InvalidExample:
        return {}
    by_event, at = {}, 0
    for j, ids in deletes:
        by_event[j], at = flat[at:at + len(ids)], at + len(ids)
    return by_event


def partitioning_keys(messages: list, keys: list | None = None) -> np.ndarray:
    """BLAKE2b-64 of each message's Kafka key bytes: the engine's key of the record's subject (the
    same value as ``record_key`` of the key's UTF-8 text). A missing key hashes as empty: such a
    record is a dead letter (``key_mismatch``) and is never learned. ``keys``: the messages' keys
    when the caller read them already (each read is a call into librdkafka's message).

    >>> from confluent_kafka import Message
    >>> from worker.olu import record_key
    >>> keys = partitioning_keys([Message(key=b"user-7"), Message(key=None)])
    >>> int(keys[0]) == record_key("user-7"), len(keys)
    (True, 2)
    """
    return blake2b64_many(*joined(keys if keys is not None else [m.key() for m in messages]))
