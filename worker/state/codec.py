"""Snapshot encoding: one immutable, self-checking object per snapshot.

Layout (little-endian)::

    b"OLUSNAP" + format byte | u32 header length | header (JSON) | array bytes ... | sha256 (32 B)

The header names the partition the snapshot belongs to, its offset, the model meta, and for each
array its dtype, shape and byte range. The trailing SHA-256 covers everything before it, so a
truncated or corrupted object is detected before anything is parsed (never loaded silently).
Arrays are raw bytes, not JSON: a million-record index stays a few megabytes and decodes in
milliseconds; floats round-trip bit-exactly. Nothing here unpickles anything.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import orjson

from .exceptions import CorruptSnapshot

MAGIC = b"OLUSNAP"
FORMAT_VERSION = 1
_DTYPES = {"f8": np.float64, "u8": np.uint64, "u4": np.uint32, "i8": np.int64, "u1": np.uint8}
_HEAD = struct.Struct("<7sBI")


def encode(header: dict, arrays: dict[str, np.ndarray]) -> bytes:
    """Serialise ``header`` (JSON-able) and named arrays into one checksummed blob.

    >>> blob = encode({"offset": 7}, {"z": np.array([0.1, -2.5])})
    >>> h, a = decode(blob)
    >>> h["offset"], a["z"].tolist()
    (7, [0.1, -2.5])
    """
    layout, chunks, position = [], [], 0
    for name, arr in arrays.items():
        code = np.dtype(arr.dtype).str.lstrip("<|=")
        if code not in _DTYPES:
            raise TypeError(f"array {name!r} has unsupported dtype {arr.dtype}")
        data = np.ascontiguousarray(arr, dtype=np.dtype(_DTYPES[code]).newbyteorder("<")).tobytes()
        layout.append({"name": name, "dtype": code, "shape": list(arr.shape), "start": position,
                       "size": len(data)})
        chunks.append(data)
        position += len(data)
    head = orjson.dumps({**header, "arrays": layout})
    body = b"".join([_HEAD.pack(MAGIC, FORMAT_VERSION, len(head)), head, *chunks])
    return body + hashlib.sha256(body).digest()


def decode(blob: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    """Inverse of :func:`encode`; raises :class:`CorruptSnapshot` on any inconsistency."""
    blob = bytes(blob)
    if len(blob) < _HEAD.size + 32:
        raise CorruptSnapshot(f"object is {len(blob)} bytes, too short to be a snapshot")
    body, digest = blob[:-32], blob[-32:]
    magic, version, head_len = _HEAD.unpack_from(body)
    if magic != MAGIC:
        raise CorruptSnapshot("not a snapshot (bad magic)")
    if version != FORMAT_VERSION:
        raise CorruptSnapshot(
            f"unknown snapshot format version {version} (this build reads {FORMAT_VERSION})")
    if hashlib.sha256(body).digest() != digest:
        raise CorruptSnapshot("checksum mismatch (truncated or corrupted object)")
    try:
        header = orjson.loads(body[_HEAD.size:_HEAD.size + head_len])
        data = memoryview(body)[_HEAD.size + head_len:]
        arrays = {}
        for spec in header.pop("arrays"):
            dtype = np.dtype(_DTYPES[spec["dtype"]]).newbyteorder("<")
            chunk = data[spec["start"]:spec["start"] + spec["size"]]
            if len(chunk) != spec["size"]:
                raise CorruptSnapshot(f"array {spec['name']!r} runs past the end of the object")
            arr = np.frombuffer(chunk, dtype=dtype).reshape(spec["shape"])
            # native, canonical dtype
            arrays[spec["name"]] = arr.astype(_DTYPES[spec["dtype"]], copy=True)
    except CorruptSnapshot:
        raise
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptSnapshot(f"malformed snapshot header: {exc!r}") from None
    return header, arrays
