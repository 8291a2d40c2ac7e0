"""Record keys: the stable 64-bit key of a record id, one at a time (:func:`record_key`, the
reference) or a batch at once (:func:`record_keys`, compiled BLAKE2b lanes, the same values).

A key is BLAKE2b with an 8-byte digest of the id's UTF-8 bytes, read little-endian, 0 mapped to 1
(0 marks a free slot). Every reader of the package (the engine, the stream's decoders, the
planner, the subscriber) derives keys here.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..exceptions import InvalidRecordId

MAX_ID_BYTES = 1024


def record_key(record_id: str) -> int:
    """Stable 64-bit key of a record id (never 0, which marks a free slot).

    >>> record_key("r-42") == record_key("r-42") != record_key("r-43")
    True
    """
    if not isinstance(record_id, str) or not record_id:
        raise InvalidRecordId(
            f"record id must be a non-empty string, got {type(record_id).__name__}"
            f"{' (empty)' if record_id == '' else ''}")
    # the content: a subclass's encode is not asked
    raw = str.encode(record_id, "utf-8", "surrogatepass")
    if len(raw) > MAX_ID_BYTES:
        raise InvalidRecordId(f"record id is {len(raw)} bytes, more than {MAX_ID_BYTES}")
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") or 1


def record_keys(record_ids) -> np.ndarray:
    """``np.array([record_key(r) for r in record_ids], np.uint64)``, vectorised.

    Same values and the same :class:`InvalidRecordId` (for the first bad id) as the loop; ids
    that are not exactly ``str`` go through ``record_key`` one by one.
    """
    ids = record_ids if isinstance(record_ids, list) else list(record_ids)
    n = len(ids)
    if n == 0:
        return np.zeros(0, np.uint64)
    if set(map(type, ids)) != {str}:
        return np.fromiter((record_key(r) for r in ids), np.uint64, n)
    joined = "".join(ids)
    raw = joined.encode("utf-8", "surrogatepass")  # UTF-8 is per code point: join then encode
    if len(raw) == len(joined):  # all ASCII: byte length == character length
        lengths = np.fromiter(map(len, ids), np.int64, n)
    else:
        lengths = np.fromiter((len(r.encode("utf-8", "surrogatepass")) for r in ids), np.int64, n)
    bad = (lengths == 0) | (lengths > MAX_ID_BYTES)
    if bad.any():
        record_key(ids[int(np.argmax(bad))])  # raises the exact error of the loop
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    from ...compiled.blake2b import blake2b64_many  # on first use: importing numba takes ~0.2 s

    return blake2b64_many(np.frombuffer(raw, np.uint8), offsets)
