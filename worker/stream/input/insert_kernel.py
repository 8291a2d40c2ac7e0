"""The compiled parser of the common insert record: JSON bytes to features, label and acceptance.

Used by scan.py (see there for what is accepted and why a record is only ever accepted or
declined). Each number is read by json_number.py's :func:`read_number`, which says whether it is
*certain* of its value (the double orjson gives); when it is not, the record is declined and
orjson decides.

:func:`parse_kernel` walks the object of each record (fields in any order, each once,
JSON whitespace anywhere) and notes where its id lies in the value buffer (the caller hashes the id
from there: the Kafka key is the partitioning key and need not equal the id).
:func:`parse_named_kernel` does it for named fields under a feature spec, in
worker/features/transform.py's arithmetic.

The helpers take raw pointers, not arrays: numba counts references to an array argument around every
call of a helper (the parser has many exits), and that cost more than the parsing.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ...compiled.intrinsics import data_pointer
from ...compiled.jit import jit
from .decode import MAX_ID_CHARS
from .json_lex import separator as _separator
from .json_lex import skip_ws as _skip_ws
from .json_lex import string_end as _string_end
from .json_number import is_digit, read_number
from .sparse_x_kernel import dense_nonzeros, sparse_x

__all__ = ["parse_kernel", "parse_named_kernel", "parse_sparse_kernel", "read_number"]

# uint64 constants: numba would mix uint64 and int64 into float64
_U0, _U1, _U63 = np.uint64(0), np.uint64(1), np.uint64(63)
# plain compiled functions on scalars and raw pointers (LLVM inlines them)
_helper = numba.njit(nogil=True)


# bytes of the grammar
_QUOTE, _BACKSLASH, _COMMA, _COLON, _ZERO = 34, 92, 44, 58, 48
_LBRACE, _RBRACE, _LBRACKET, _RBRACKET = 123, 125, 91, 93

# fields, as bits of a mask
_OP, _ID, _X, _Y, _TS = 1, 2, 4, 8, 16
_REQUIRED = _OP | _ID | _X | _Y


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
def _op_id_ts(buf, p, end, field, spans, r):
    """Past the value of ``op`` (must be "insert"), ``id`` (its place into ``spans``) or ``ts`` (a
    plain non-negative integer of at most 18 digits); -1 when it is not one the fast path takes."""
    if field == _TS:
        first = p
        while p < end and is_digit(buf[p]):
            p += 1
        return -1 if p == first or p - first > 18 or (buf[first] == _ZERO and p - first > 1) else p
    if buf[p] != _QUOTE:
        return -1
    stop = _string_end(buf, p + 1, end)
    if stop < 0 or (field == _OP and not _is_insert(buf, p + 1, stop)):
        return -1
    if field == _ID:
        if stop == p + 1 or stop - (p + 1) > MAX_ID_CHARS:  # ASCII: bytes are characters
            return -1
        spans[2 * r], spans[2 * r + 1] = p + 1, stop
    return stop + 1


@_helper
def _insert(buf, p, end, klen, dim, max_bytes, X, y_out, spans, r, sparse, ip, vp, q):
    """Accept record r (value ``buf[p:end]``, a key of ``klen`` bytes) as a common insert? Its id is
    then ``buf[spans[2r]:spans[2r + 1]]``. Returns -1 to decline; else its ``x`` is row r of
    ``X`` (returns 0), or with ``sparse`` its entries from ``q`` (sparse_x_kernel.py: returns
    their end)."""
    if klen == 0 or klen + (end - p) > max_bytes:  # no key (or an empty one): decode.py names it
        return -1
    p = _skip_ws(buf, p, end)
    if p >= end or buf[p] != _LBRACE:
        return -1
    p += 1
    seen, entries = 0, 0
    while True:
        p = _skip_ws(buf, p, end)
        if p >= end or buf[p] != _QUOTE:
            return -1
        stop = _string_end(buf, p + 1, end)
        if stop < 0:
            return -1
        field = _field(buf, p + 1, stop)
        if field == 0 or seen & field:
            return -1
        seen |= field
        p = _skip_ws(buf, stop + 1, end)
        if p >= end or buf[p] != _COLON:
            return -1
        p = _skip_ws(buf, p + 1, end)
        if p >= end:
            return -1
        if field == _OP or field == _ID or field == _TS:
            p = _op_id_ts(buf, p, end, field, spans, r)
        elif field == _X and sparse and buf[p] == _LBRACE:
            p, entries = sparse_x(buf, p, end, dim, ip, vp, q)
        elif field == _X and sparse:
            p, entries = dense_nonzeros(buf, p, end, dim, ip, vp, q)
        elif field == _X:
            p = _dense_x(buf, p, end, dim, X, r)
        else:
            p, value, ok = read_number(buf, p, end)
            p = p if ok else -1
            y_out[r] = value
        if p < 0:
            return -1
        p, c = _separator(buf, p, end)
        if c == _RBRACE:
            break
        if c != _COMMA:
            return -1
    if seen & _REQUIRED != _REQUIRED or _skip_ws(buf, p, end) != end:
        return -1
    return entries


@_helper
def _dense_x(buf, p, end, dim, X, r):
    """An array of exactly ``dim`` numbers at ``p`` into row r of ``X``: the position after it,
    or -1."""
    if buf[p] != _LBRACKET:
        return -1
    p += 1
    count = 0
    while True:
        p = _skip_ws(buf, p, end)
        p, value, ok = read_number(buf, p, end)
        if not ok:
            return -1
        if count < dim:
            X[r * dim + count] = value
        count += 1
        p, c = _separator(buf, p, end)
        if c == _RBRACKET:
            break
        if c != _COMMA:
            return -1
    return p if count == dim else -1


# ------------------------------------------------------- named fields (worker/features: the spec)
# worker/features/tables.py's kind codes (4: hashed)
_K_RANGE, _K_SCALE, _K_BOOL, _K_CAT = 0, 1, 2, 3
_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)
_MIX1, _MIX2, _U27, _U30, _U31 = (np.uint64(v)
                                  for v in (0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 27, 30, 31))
_NULL, _TRUE, _FALSE = (110, 117, 108, 108), (116, 114, 117, 101), (102, 97, 108, 115, 101)


@_helper
def _category_hash(buf, p, stop):
    """worker.features.transform.category_hash of ``buf[p:stop]``."""
    h = _FNV_OFFSET
    for i in range(p, stop):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    h = (h ^ (h >> _U30)) * _MIX1
    h = (h ^ (h >> _U27)) * _MIX2
    return h ^ (h >> _U31)


@_helper
def _same(buf, p, size, other, start):  # buf[p:p + size] == other[start:start + size]
    for i in range(size):
        if buf[p + i] != other[start + i]:
            return False
    return True


@_helper
def _literal(buf, p, end, word):
    """The position after ``word`` at ``p``, or -1."""
    for i in range(len(word)):
        if p + i >= end or buf[p + i] != word[i]:
            return -1
    return p + len(word)


@_helper
def _spec_field(buf, p, stop, names, offsets):
    """The spec field named ``buf[p:stop]``, or -1."""
    for k in range(offsets.shape[0] - 1):
        if offsets[k + 1] - offsets[k] == stop - p and _same(buf, p, stop - p, names, offsets[k]):
            return k
    return -1


@_helper
def _vocabulary_slot(buf, p, stop, row, table, vocab, vocab_offsets):
    """The slot of the category ``buf[p:stop]`` in its field (the "other" slot when not listed)."""
    size, first, count = row[7], row[8], row[2] - 1 - row[4]
    at = np.int64(_category_hash(buf, p, stop) & np.uint64(size - 1))
    while True:
        g = table[row[6] + at]
        if g < 0:
            return count
        a = vocab_offsets[g]
        if vocab_offsets[g + 1] - a == stop - p and _same(buf, p, stop - p, vocab, a):
            return g - first
        at = (at + 1) & (size - 1)


@_helper
def scaled(v, kind, par):
    """A numeric field's coordinate (before the weight) and whether its value was clipped."""
    clipped = False
    if kind == _K_RANGE:
        if v < par[0]:
            v, clipped = par[0], True
        elif v > par[1]:
            v, clipped = par[1], True
        return (v - par[2]) / par[3], clipped
    z = (v - par[2]) / par[3]
    if z < par[0]:
        z, clipped = par[0], True
    elif z > par[1]:
        z, clipped = par[1], True
    return z, clipped


@_helper
def _named_value(buf, p, end, row, par, table, vocab, vocab_offsets, x, base, vals, toks, at_k):
    """Parse the value of a spec field at ``p`` into its coordinates: (position after it, 1 when
    set, 0 when null, -1 when not certain; clipped). What derived blocks read of it goes to
    ``vals[at_k]`` (a number, before its clipping) or ``toks[at_k]`` (a boolean's 0 or 1, a
    category's slot, a hashed value's hash), transform.py's ``tokens``."""
    kind, slot = row[0], base + row[1]
    if buf[p] == 110:  # null: missing
        q = _literal(buf, p, end, _NULL)
        return q, (0 if q >= 0 else -1), False
    if kind <= _K_SCALE:
        q, value, ok = read_number(buf, p, end)
        if not ok:
            return q, -1, False
        z, clipped = scaled(value, kind, par)
        x[slot] = z * par[4]
        vals[at_k] = value
        return q, 1, clipped
    if kind == _K_BOOL:
        q = _literal(buf, p, end, _TRUE)
        if q >= 0:
            x[slot] = par[4]
            toks[at_k] = _U1
            return q, 1, False
        q = _literal(buf, p, end, _FALSE)
        toks[at_k] = _U0
        return q, (1 if q >= 0 else -1), False
    if buf[p] != _QUOTE:
        return p, -1, False
    stop = _string_end(buf, p + 1, end)
    if stop < 0:
        return p, -1, False
    if kind == _K_CAT:
        at = _vocabulary_slot(buf, p + 1, stop, row, table, vocab, vocab_offsets)
        x[slot + at] = par[4]
        toks[at_k] = np.uint64(at)
    else:
        h = _category_hash(buf, p + 1, stop)
        x[slot + np.int64(h % np.uint64(row[7]))] = par[4] if h >> _U63 == _U0 else -par[4]
        toks[at_k] = h
    return stop + 1, 1, False


@_helper
def _skip_value(buf, p, end):
    """Past a value of a field the spec does not name (flat values only), or -1."""
    c = buf[p]
    if c == _QUOTE:
        stop = _string_end(buf, p + 1, end)
        return stop + 1 if stop >= 0 else -1
    if c == 110:
        return _literal(buf, p, end, _NULL)
    if c == 116:
        return _literal(buf, p, end, _TRUE)
    if c == 102:
        return _literal(buf, p, end, _FALSE)
    q, _, ok = read_number(buf, p, end)
    return q if ok else -1


@_helper
def _named_insert(buf, p, end, klen, max_bytes, names, name_offsets, ints, floats, table, vocab,
                  vocab_offsets,
                  intercept, bound, dim, x, y_out, spans, r, vals, toks):
    """As :func:`_insert` for an insert whose features are the spec's named fields: (accepted, the
    mask of the fields clipped). Fields the spec does not name are skipped; ``x`` is declined."""
    if klen == 0 or klen + (end - p) > max_bytes:
        return False, 0
    base = r * dim
    for i in range(dim):
        x[base + i] = 0.0
    if intercept != 0.0:
        x[base] = intercept
    p = _skip_ws(buf, p, end)
    if p >= end or buf[p] != _LBRACE:
        return False, 0
    p += 1
    seen, present, valued, clipped = 0, np.int64(0), np.int64(0), np.int64(0)
    while True:
        p = _skip_ws(buf, p, end)
        if p >= end or buf[p] != _QUOTE:
            return False, 0
        stop = _string_end(buf, p + 1, end)
        if stop < 0:
            return False, 0
        field = _field(buf, p + 1, stop)
        k = -1 if field else _spec_field(buf, p + 1, stop, names, name_offsets)
        p = _skip_ws(buf, stop + 1, end)
        if p >= end or buf[p] != _COLON:
            return False, 0
        p = _skip_ws(buf, p + 1, end)
        if p >= end or field == _X or seen & field:
            return False, 0
        seen |= field
        if field == _OP or field == _ID or field == _TS:
            p = _op_id_ts(buf, p, end, field, spans, r)
            if p < 0:
                return False, 0
        elif field == _Y:
            p, value, ok = read_number(buf, p, end)
            if not ok:
                return False, 0
            y_out[r] = value
        elif k >= 0:
            bit = np.int64(1) << k
            if present & bit:
                return False, 0
            present |= bit
            p, state, clip = _named_value(buf, p, end, ints[k], floats[k], table, vocab,
                                          vocab_offsets, x, base, vals, toks,
                                          r * ints.shape[0] + k)
            if state < 0:
                return False, 0
            if state:
                valued |= bit
            if clip:
                clipped |= bit
        else:
            p = _skip_value(buf, p, end)
            if p < 0:
                return False, 0
        p, c = _separator(buf, p, end)
        if c == _RBRACE:
            break
        if c != _COMMA:
            return False, 0
    if seen & (_OP | _ID | _Y) != _OP | _ID | _Y or _skip_ws(buf, p, end) != end:
        return False, 0
    for k in range(ints.shape[0]):
        # the missing fields: their fill, or the Python decoder names them
        row, par = ints[k], floats[k]
        if not valued & (np.int64(1) << k) and not row[3]:
            return False, 0
        if valued & (np.int64(1) << k):
            continue
        slot, at_k = base + row[1], r * ints.shape[0] + k
        if row[4]:
            x[slot + row[2] - 1] = 1.0
        if row[0] <= _K_SCALE:
            z, clip = scaled(par[5], row[0], par)
            x[slot] = z * par[4]
            vals[at_k] = par[5]
            if clip:
                clipped |= np.int64(1) << k
        elif row[0] == _K_BOOL:
            x[slot] = par[4] if par[5] != 0.0 else 0.0
            toks[at_k] = _U1 if par[5] != 0.0 else _U0
        else:
            x[slot + row[5]] = par[4] if row[0] == _K_CAT else par[5] * par[4]
            toks[at_k] = np.uint64(row[5]) if row[0] == _K_CAT else np.uint64(row[9])
    if bound < np.inf:
        sq = 0.0
        for i in range(dim):
            sq += x[base + i] * x[base + i]
        norm = math.sqrt(sq)
        if norm > bound:
            factor = bound / norm
            for i in range(dim):
                x[base + i] = x[base + i] * factor
    return True, clipped


@jit
def parse_kernel(vbuf, voff, klen, dim, max_bytes, X, y_out, spans, accepted, framing=0):
    """Fill ``accepted[r]`` for every record, and for accepted ones its row of ``X``, ``y_out[r]``
    and its id's place ``vbuf[spans[r, 0]:spans[r, 1]]`` (value r is ``vbuf[voff[r]:voff[r + 1]]``,
    its key ``klen[r]`` bytes long; the JSON text starts ``framing`` bytes in, after a Schema
    Registry framing, which counts towards ``max_bytes``)."""
    v, x, y, s = data_pointer(vbuf), data_pointer(X), data_pointer(y_out), data_pointer(spans)
    unused_i, unused_v = data_pointer(spans), data_pointer(y_out)  # no sparse entries
    for r in range(accepted.shape[0]):
        start = voff[r] + framing
        accepted[r] = start <= voff[r + 1] and _insert(v, start, voff[r + 1], klen[r], dim,
                                                       max_bytes - framing, x, y, s, r, False,
                                                       unused_i, unused_v, 0) >= 0


@jit
def parse_sparse_kernel(vbuf, voff, klen, dim, max_bytes, y_out, spans, accepted, indptr,
                        indices, values):
    """:func:`parse_kernel` under OLU_SPARSE_INPUT: each accepted record's ``x`` (the sparse form
    or an array) as CSR row r, ``indices/values[indptr[r]:indptr[r + 1]]`` (a declined record's
    row is empty). ``indices`` and ``values`` hold at least ``len(vbuf) // 2 + 1`` entries: every
    number takes two bytes or more with its separator."""
    v, y, s = data_pointer(vbuf), data_pointer(y_out), data_pointer(spans)
    ip, vp = data_pointer(indices), data_pointer(values)
    q = 0
    indptr[0] = 0
    for r in range(accepted.shape[0]):
        got = _insert(v, voff[r], voff[r + 1], klen[r], dim, max_bytes, vp, y, s, r, True, ip, vp,
                      q)
        accepted[r] = got >= 0
        q = got if got >= 0 else q
        indptr[r + 1] = q


@jit
def parse_named_kernel(vbuf, voff, klen, max_bytes, names, name_offsets, ints, floats, table, vocab,
                       vocab_offsets,
                       intercept, bound, X, y_out, spans, clipped, accepted, values, tokens):
    """:func:`parse_kernel` for inserts of named fields under a feature spec (its tables:
    worker/features/tables.py): ``clipped[r]``, the mask of the fields whose value was clipped;
    ``values`` and ``tokens`` (n, fields): what the spec's derived blocks read of each field
    (derived_kernel.py writes those coordinates, then scales onto the bound: pass ``inf`` here)."""
    v, x, y, s = data_pointer(vbuf), data_pointer(X), data_pointer(y_out), data_pointer(spans)
    vals, toks = data_pointer(values), data_pointer(tokens)
    dim = X.shape[1]
    for r in range(accepted.shape[0]):
        accepted[r], clipped[r] = _named_insert(v, voff[r], voff[r + 1], klen[r], max_bytes, names,
                                                name_offsets, ints,
                                                floats, table, vocab, vocab_offsets, intercept,
                                                bound, dim, x, y, s, r, vals, toks)
