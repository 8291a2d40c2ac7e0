"""The names a reader of the worker's output depends on: releases, receipts and dead letters.

The parameter topic's default name, the release schema version, the release key, the Kafka header
names and their closed sets of values live here once, so the worker (``worker/stream``), the
subscriber (``worker/client/``, ``worker/follow.py``) and the settings (``worker/config``)
cannot drift apart. ``schemas/release.schema.json`` and ``schemas/dead-letter.schema.json``
describe the same records for other languages; ``tests/test_wire.py`` checks that no other module
under ``worker/`` spells these names itself.

Constants and string helpers only: no Kafka client and no I/O, so anything may import it.
"""

from __future__ import annotations

#: Default parameter topic: the worker's ``params_topic`` and the subscriber's ``topic``.
PARAMS_TOPIC = "olu.params"
#: ``schema_version`` of a release value.
RELEASE_SCHEMA_VERSION = 1

#: Default receipts topic: one receipt per deletion request, keyed by its request id.
RECEIPTS_TOPIC = "olu.receipts"
#: ``schema_version`` of a receipt value.
RECEIPT_SCHEMA_VERSION = 1
#: A receipt's ``status``: the request was unlearned; it named nothing the model learned (or only
#: records an earlier request had unlearned); it could not be honoured (``reason`` says why).
STATUS_HONOURED = "honoured"
STATUS_NOTHING = "nothing_to_unlearn"
STATUS_REFUSED = "refused"
RECEIPT_STATUSES = (STATUS_HONOURED, STATUS_NOTHING, STATUS_REFUSED)

#: Every header the worker sets is in this namespace; a dead letter carries exactly
#: :data:`DEAD_LETTER_HEADERS` of it and drops the original record's ``olu.*`` headers.
HEADER_PREFIX = "olu."

# ------------------------------------------------------------------ release headers
#: Why a release was published: one of :data:`TRIGGERS`.
TRIGGER_HEADER = "olu.trigger"
#: The worker's version, on releases and dead letters.
WORKER_VERSION_HEADER = "olu.worker.version"
#: On a deletion's release when the privacy budget ran out: one of :data:`BUDGET_OUTCOMES`.
BUDGET_HEADER = "olu.budget"

TRIGGER_DELETION = "deletion"
TRIGGER_EVENTS = "events"
TRIGGER_INTERVAL = "interval"
TRIGGER_FINAL = "final"
TRIGGERS = (TRIGGER_DELETION, TRIGGER_EVENTS, TRIGGER_INTERVAL, TRIGGER_FINAL)

#: The model was rebuilt from the retained data instead of noised (memory-pair, on_budget=retrain).
BUDGET_RETRAINED = "retrained"
BUDGET_OUTCOMES = (BUDGET_RETRAINED,)

# ------------------------------------------------------------------ dead-letter headers
SOURCE_TOPIC_HEADER = "olu.source.topic"
SOURCE_PARTITION_HEADER = "olu.source.partition"
SOURCE_OFFSET_HEADER = "olu.source.offset"
ERROR_REASON_HEADER = "olu.error.reason"
ERROR_DETAIL_HEADER = "olu.error.detail"
FAILED_AT_HEADER = "olu.failed.at"
#: A dead letter's ``olu.*`` headers, in the order they are written.
DEAD_LETTER_HEADERS: tuple[str, ...] = (
    SOURCE_TOPIC_HEADER,
    SOURCE_PARTITION_HEADER,
    SOURCE_OFFSET_HEADER,
    ERROR_REASON_HEADER,
    ERROR_DETAIL_HEADER,
    WORKER_VERSION_HEADER,
    FAILED_AT_HEADER,
)
#: Only on a dead letter larger than its topic accepts: the original key + value size in bytes.
TRUNCATED_HEADER = "olu.truncated"


# ------------------------------------------------------------------ keys
def derived_request_id(topic: str, partition: int, offset: int) -> str:
    """The id of a deletion request that carries none: its record's position, stable on replay.

    >>> derived_request_id("olu.events", 3, 1234)
    'olu.events/3@1234'
    """
    return f"{topic}/{partition}@{offset}"



def release_key_text(topic: str, partition: int) -> str:
    """The key of a release of input partition ``(topic, partition)``, as text.

    A topic name never contains ``/``, so the key is unambiguous.

    >>> release_key_text("olu.events", 3)
    'olu.events/3'
    """
    return f"{topic}/{partition}"


def release_key(topic: str, partition: int) -> bytes:
    """The Kafka key of a release of input partition ``(topic, partition)``.

    >>> release_key("olu.events", 3)
    b'olu.events/3'
    """
    return release_key_text(topic, partition).encode()


def decode_key(key: bytes | bytearray | str) -> str:
    """A received key as text; bytes that are not UTF-8 are replaced, so a bad key compares
    unequal to every release key instead of raising.

    >>> decode_key(b"olu.events/3"), decode_key(b"\\xff/0")
    ('olu.events/3', '\\ufffd/0')
    """
    return key.decode("utf-8", "replace") if isinstance(key, (bytes, bytearray)) else str(key)
