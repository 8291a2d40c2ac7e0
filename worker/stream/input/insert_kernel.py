"""The compiled parser of the common insert record: JSON bytes to features, label and acceptance.

Used by scan.py (see there for what is accepted and why a record is only ever accepted or
declined). Each number is read by json_number.py's :func:`read_number`, which says whether it is
*certain* of its value (the double orjson gives); when it is not, the record is declined and
orjson decides.

:func:`parse_kernel` walks the object of each record (fields in any order, each once,
JSON whitespace anywhere) and notes where its id lies in the value buffer (the caller hashes the id
from there: the Kafka key is the partitioning key and need not equal the id).
:func:`parse_sparse_kernel` does it under OLU_SPARSE_INPUT (sparse_x_kernel.py reads ``x``);
named_kernel.py for named fields under a feature spec.

The helpers take raw pointers, not arrays: numba counts references to an array argument around every
call of a helper (the parser has many exits), and that cost more than the parsing.
"""

from __future__ import annotations

import numba

from ...compiled.intrinsics import data_pointer
from ...compiled.jit import jit
from .json_lex import separator as _separator
from .json_lex import skip_ws as _skip_ws
from .json_lex import string_end as _string_end
from .json_number import read_number
from .record_fields import ID as _ID
from .record_fields import OP as _OP
from .record_fields import REQUIRED as _REQUIRED
from .record_fields import TS as _TS
from .record_fields import X as _X
from .record_fields import field_bit as _field
from .record_fields import label as _label
from .record_fields import op_id_ts as _op_id_ts
from .sparse_x_kernel import dense_nonzeros, sparse_x

__all__ = ["parse_kernel", "parse_sparse_kernel", "read_number"]

# plain compiled functions on scalars and raw pointers (LLVM inlines them)
_helper = numba.njit(nogil=True)


# bytes of the grammar
_QUOTE, _COMMA, _COLON, _ZERO = 34, 44, 58, 48
_LBRACE, _RBRACE, _LBRACKET, _RBRACKET = 123, 125, 91, 93

@_helper
def _insert(buf, p, end, klen, dim, max_bytes, X, y_out, spans, r, sparse, ip, vp, q, labels):
    """Accept record r (value ``buf[p:end]``, a key of ``klen`` bytes) as a common insert? Its id is
    then ``buf[spans[2r]:spans[2r + 1]]``. Returns -1 to decline; else its ``x`` is row r of
    ``X`` (returns 0), or with ``sparse`` its entries from ``q`` (sparse_x_kernel.py: returns
    their end). ``labels``: (class names' bytes, their offsets, how many; 0: ``y`` a number)."""
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
            p = _label(buf, p, end, labels[0], labels[1], labels[2], y_out, r)
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


@jit
def parse_kernel(vbuf, voff, klen, dim, max_bytes, X, y_out, spans, accepted, framing, classes,
                 class_offsets):
    """Fill ``accepted[r]`` for every record, and for accepted ones its row of ``X``, ``y_out[r]``
    and its id's place ``vbuf[spans[r, 0]:spans[r, 1]]`` (value r is ``vbuf[voff[r]:voff[r + 1]]``,
    its key ``klen[r]`` bytes long; the JSON text starts ``framing`` bytes in, after a Schema
    Registry framing, which counts towards ``max_bytes``). ``classes``, ``class_offsets``: the
    named classes' bytes (record_fields.label; one offset: ``y`` a number)."""
    v, x, y, s = data_pointer(vbuf), data_pointer(X), data_pointer(y_out), data_pointer(spans)
    unused_i, unused_v = data_pointer(spans), data_pointer(y_out)  # no sparse entries
    labels = (data_pointer(classes), data_pointer(class_offsets), class_offsets.shape[0] - 1)
    for r in range(accepted.shape[0]):
        start = voff[r] + framing
        accepted[r] = start <= voff[r + 1] and _insert(v, start, voff[r + 1], klen[r], dim,
                                                       max_bytes - framing, x, y, s, r, False,
                                                       unused_i, unused_v, 0, labels) >= 0


@jit
def parse_sparse_kernel(vbuf, voff, klen, dim, max_bytes, y_out, spans, accepted, indptr,
                        indices, values, classes, class_offsets):
    """:func:`parse_kernel` under OLU_SPARSE_INPUT: each accepted record's ``x`` (the sparse form
    or an array) as CSR row r, ``indices/values[indptr[r]:indptr[r + 1]]`` (a declined record's
    row is empty). ``indices`` and ``values`` hold at least ``len(vbuf) // 2 + 1`` entries: every
    number takes two bytes or more with its separator."""
    v, y, s = data_pointer(vbuf), data_pointer(y_out), data_pointer(spans)
    ip, vp = data_pointer(indices), data_pointer(values)
    labels = (data_pointer(classes), data_pointer(class_offsets), class_offsets.shape[0] - 1)
    q = 0
    indptr[0] = 0
    for r in range(accepted.shape[0]):
        got = _insert(v, voff[r], voff[r + 1], klen[r], dim, max_bytes, vp, y, s, r, True, ip, vp,
                      q, labels)
        accepted[r] = got >= 0
        q = got if got >= 0 else q
        indptr[r + 1] = q
