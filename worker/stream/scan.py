"""Compiled fast path of the decoder: a whole fetched batch of common inserts in one call.

:func:`scan_batch` joins the batch's keys and values into two byte buffers and runs one numba
kernel over them. For each record the kernel either *accepts* it, writing its features, label and
record key (``record_key`` of its id, hashed from the bytes) straight into arrays, or *declines*
it. A declined record goes to the Python decoder (decode.py), which makes the decision and names
the reason; the kernel never rejects anything itself.

What is accepted is a strict subset of what :func:`decode.decode_event` accepts as an insert, with
the very same values:

- the value is ASCII JSON (no escapes, no control characters): ``{"op": "insert", "id": ...,
  "x": [...], "y": ..., "ts": ...}`` with ``ts`` optional, fields in any order, each once,
  JSON whitespace anywhere; the key is 1 to 256 bytes and equals ``id``; key + value fit
  ``max_bytes``; ``x`` has exactly ``dim`` numbers; ``ts`` is a plain non-negative integer;
- every number is one jsonnumber.py is certain of: the double orjson reads, bit for bit (when it
  is not certain, the record is declined instead of approximated).

Anything else (a delete, a tombstone, unicode or escapes in the id, a dead letter, ...) is
declined, so correctness only needs "accepted => decode_event accepts it with these values"; a
differential test (tests/stream/test_scan.py) checks that on generated and adversarial records.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from itertools import chain

import numba
import numpy as np
from numba.core import types
from numba.extending import intrinsic

from ..olu import kernels
from ..olu.kernels import _jit, blake2b64
from .decode import MAX_ID_CHARS
from .jsonnumber import is_digit, read_number

__all__ = ["BatchScan", "compiled_decoder", "python_decoder", "scan_batch"]

# Parser helpers: plain compiled functions on raw pointers and scalars (LLVM inlines them).
_helper = numba.njit(nogil=True)

# bytes of the grammar
_QUOTE, _BACKSLASH, _COMMA, _COLON = 34, 92, 44, 58
_LBRACE, _RBRACE, _LBRACKET, _RBRACKET = 123, 125, 91, 93
_ZERO = 48

# fields, as bits of a mask
_OP, _ID, _X, _Y, _TS = 1, 2, 4, 8, 16
_REQUIRED = _OP | _ID | _X | _Y


@_helper
def _skip_ws(buf, p, end):
    while p < end and (buf[p] == 32 or buf[p] == 10 or buf[p] == 13 or buf[p] == 9):
        p += 1
    return p


@_helper
def _string_end(buf, p, end):
    """Index of the closing quote of a plain ASCII string starting at ``buf[p]``, else -1."""
    while p < end:
        c = buf[p]
        if c == _QUOTE:
            return p
        if c == _BACKSLASH or c < 32 or c >= 128:
            return -1
        p += 1
    return -1


@_helper
def _field(buf, p, stop):
    """The bit of the field name ``buf[p:stop]``, 0 for any other name."""
    size = stop - p
    if size == 1:
        return _X if buf[p] == 120 else (_Y if buf[p] == 121 else 0)
    if size == 2:
        a, b = buf[p], buf[p + 1]
        if a == 111 and b == 112:
            return _OP
        if a == 105 and b == 100:
            return _ID
        if a == 116 and b == 115:
            return _TS
    return 0


@_helper
def _is_insert(buf, p, stop):
    word = (105, 110, 115, 101, 114, 116)  # "insert"
    if stop - p != 6:
        return False
    for k in range(6):
        if buf[p + k] != word[k]:
            return False
    return True


@_helper
def _insert(buf, p, end, kbuf, kp, kend, dim, max_bytes, X, y_out, r):
    """Accept record r (value ``buf[p:end]``, key ``kbuf[kp:kend]``) as a common insert?"""
    klen = kend - kp
    if klen == 0 or klen > MAX_ID_CHARS or klen + (end - p) > max_bytes:
        return False
    p = _skip_ws(buf, p, end)
    if p >= end or buf[p] != _LBRACE:
        return False
    p += 1
    seen = 0
    while True:
        p = _skip_ws(buf, p, end)
        if p >= end or buf[p] != _QUOTE:
            return False
        stop = _string_end(buf, p + 1, end)
        if stop < 0:
            return False
        field = _field(buf, p + 1, stop)
        if field == 0 or seen & field:
            return False
        seen |= field
        p = _skip_ws(buf, stop + 1, end)
        if p >= end or buf[p] != _COLON:
            return False
        p = _skip_ws(buf, p + 1, end)
        if p >= end:
            return False
        if field == _OP or field == _ID:
            if buf[p] != _QUOTE:
                return False
            stop = _string_end(buf, p + 1, end)
            if stop < 0:
                return False
            if field == _OP:
                if not _is_insert(buf, p + 1, stop):
                    return False
            else:
                if stop - (p + 1) != klen:
                    return False
                for k in range(klen):
                    if buf[p + 1 + k] != kbuf[kp + k]:
                        return False
            p = stop + 1
        elif field == _X:
            if buf[p] != _LBRACKET:
                return False
            p += 1
            count = 0
            while True:
                p = _skip_ws(buf, p, end)
                p, value, ok = read_number(buf, p, end)
                if not ok:
                    return False
                if count < dim:
                    X[r * dim + count] = value
                count += 1
                p = _skip_ws(buf, p, end)
                if p >= end:
                    return False
                c = buf[p]
                p += 1
                if c == _RBRACKET:
                    break
                if c != _COMMA:
                    return False
            if count != dim:
                return False
        elif field == _Y:
            p, value, ok = read_number(buf, p, end)
            if not ok:
                return False
            y_out[r] = value
        else:  # ts: a plain non-negative integer of at most 18 digits
            first = p
            while p < end and is_digit(buf[p]):
                p += 1
            if p == first or p - first > 18 or (buf[first] == _ZERO and p - first > 1):
                return False
        p = _skip_ws(buf, p, end)
        if p >= end:
            return False
        c = buf[p]
        p += 1
        if c == _RBRACE:
            break
        if c != _COMMA:
            return False
    return seen & _REQUIRED == _REQUIRED and _skip_ws(buf, p, end) == end


@intrinsic
def _data_pointer(typingctx, array):
    """The raw pointer to an array's first element (valid while the array is alive)."""
    def codegen(context, builder, signature, args):
        return context.make_array(signature.args[0])(context, builder, args[0]).data

    return types.CPointer(array.dtype)(array), codegen


@_jit
def parse_kernel(vbuf, voff, kbuf, koff, dim, max_bytes, X, y_out, accepted):
    """Fill ``accepted[r]`` for every record, and for accepted ones its row of ``X`` and ``y_out[r]``.

    The helpers get raw pointers, not arrays: numba would count references to an array argument
    around every helper call (the parser has many exits), and that cost more than the parsing.
    """
    v, k, x, y = _data_pointer(vbuf), _data_pointer(kbuf), _data_pointer(X), _data_pointer(y_out)
    for r in range(accepted.shape[0]):
        accepted[r] = _insert(v, voff[r], voff[r + 1], k, koff[r], koff[r + 1], dim, max_bytes, x, y, r)


@_jit
def hash_kernel(kbuf, koff, accepted, keys):
    """``keys[r]`` = ``record_key`` of the key (= the id) of every accepted record."""
    h = np.empty(8, np.uint64)
    m = np.empty(16, np.uint64)
    for r in range(accepted.shape[0]):
        if accepted[r]:
            keys[r] = blake2b64(kbuf, koff[r], koff[r + 1] - koff[r], h, m)


# ------------------------------------------------------------------ the Python side
@dataclass(slots=True)
class BatchScan:
    """Per record of a batch: accepted by the fast path or not; arrays hold the accepted rows."""

    accepted: np.ndarray  # (n,) bool
    X: np.ndarray  # (n, dim) float64
    y: np.ndarray  # (n,) float64
    keys: np.ndarray  # (n,) uint64, record_key of the id
    stamps: np.ndarray  # (n, 2) int64: the Kafka timestamp (type, ms) of each message

    def stretches(self):
        """(start, stop, accepted) for the maximal stretches of equal ``accepted``, in order."""
        n = len(self.accepted)
        if n == 0:
            return []
        cuts = [0, *(np.flatnonzero(self.accepted[1:] != self.accepted[:-1]) + 1).tolist(), n]
        first = bool(self.accepted[0])
        return [(cuts[k], cuts[k + 1], first ^ bool(k & 1)) for k in range(len(cuts) - 1)]

    def newest_ts(self, start: int, stop: int) -> int:
        """The largest available Kafka timestamp among records ``start:stop`` (0: none)."""
        kinds, ts = self.stamps[start:stop, 0], self.stamps[start:stop, 1]
        return int(ts[kinds != 0].max(initial=0))





def _joined(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """One buffer of all parts and the offsets of each (a None or non-bytes part counts as empty,
    which the kernel never accepts: tombstones and unkeyed records go to the Python decoder)."""
    try:
        raw = b"".join(parts)
    except TypeError:
        parts = [p if isinstance(p, (bytes, bytearray)) else b"" for p in parts]
        raw = b"".join(parts)
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=offsets[1:])
    return np.frombuffer(raw, np.uint8), offsets


def scan_batch(messages: list, *, dim: int, max_bytes: int) -> BatchScan:
    """Run the compiled fast path over ``messages`` (see the module doc).

    >>> from confluent_kafka import Message
    >>> msgs = [Message(key=b"r-1", value=b'{"op":"insert","id":"r-1","x":[0.5,1],"y":1}'),
    ...         Message(key=b"r-1", value=None)]
    >>> scan = scan_batch(msgs, dim=2, max_bytes=4096)
    >>> scan.accepted.tolist(), scan.X[0].tolist(), float(scan.y[0]), scan.stretches()
    ([True, False], [0.5, 1.0], 1.0, [(0, 1, True), (1, 2, False)])
    """
    n = len(messages)
    # comprehensions, not map(methodcaller(...)): ~15 against ~50 ns per message
    vbuf, voff = _joined([m.value() for m in messages])
    kbuf, koff = _joined([m.key() for m in messages])
    X = np.empty((n, dim), np.float64)
    y = np.empty(n, np.float64)
    keys = np.zeros(n, np.uint64)
    accepted = np.zeros(n, np.bool_)
    parse_kernel(vbuf, voff, kbuf, koff, dim, max_bytes, X, y, accepted)
    hash_kernel(kbuf, koff, accepted, keys)
    stamps = np.fromiter(chain.from_iterable([m.timestamp() for m in messages]), np.int64, 2 * n).reshape(n, 2)
    return BatchScan(accepted, X, y, keys, stamps)


_python_only = False


def compiled_decoder() -> bool:
    """Use this fast path? Not under ``OLU_REFERENCE_KERNEL=1`` / ``kernels.reference()``, nor
    inside :func:`python_decoder`: then every record goes through decode.py."""
    return not (_python_only or kernels.FORCE_REFERENCE)


@contextlib.contextmanager
def python_decoder():
    """Within the block the runner decodes every record in Python (for tests)."""
    global _python_only
    saved, _python_only = _python_only, True
    try:
        yield
    finally:
        _python_only = saved


def warm_up() -> None:
    """Compile (or load from the numba cache) the kernel with the production types."""
    from confluent_kafka import Message

    scan_batch([Message(key=b"r", value=b'{"op":"insert","id":"r","x":[0.5],"y":1}')], dim=1, max_bytes=64)
