"""The compiled parser of an insert of named fields under a feature spec (worker/features).

:func:`parse_named_kernel` walks each record as insert_kernel.py's parser does (the same grammar,
the same acceptance rule: what it accepts, decode.py accepts with the same values) and writes the
fields' coordinates in worker/features/transform.py's arithmetic, from the spec's tables
(worker/features/tables.py); derived_kernel.py adds the derived blocks' coordinates after it.
The helpers take raw pointers, not arrays (insert_kernel.py says why).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ...compiled.intrinsics import data_pointer
from ...compiled.jit import jit
from .json_lex import separator as _separator
from .json_lex import skip_ws as _skip_ws
from .json_lex import utf8_string_end
from .json_number import read_number
from .record_fields import ID as _ID
from .record_fields import OP as _OP
from .record_fields import TS as _TS
from .record_fields import X as _X
from .record_fields import Y as _Y
from .record_fields import field_bit as _field
from .record_fields import label as _label
from .record_fields import op_id_ts as _op_id_ts

__all__ = ["parse_named_entries_kernel", "parse_named_kernel", "scaled"]

_U0, _U1, _U63 = np.uint64(0), np.uint64(1), np.uint64(63)
_helper = numba.njit(nogil=True)
_QUOTE, _COMMA, _COLON, _LBRACE, _RBRACE, _LBRACKET, _RBRACKET = 34, 44, 58, 123, 125, 91, 93


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
def _put(out, i, v):
    """Coordinate i of the row is v: ``out`` = (x, base, entries, ei, ev, q); dense, x[base + i]
    (the row zeroed first); as entries, (i, v) appended at ei/ev[q] (unsorted: fields come in the
    record's order; the caller sorts them). Returns the next q."""
    x, base, entries, ei, ev, q = out
    if entries:
        ei[q], ev[q] = i, v
        return q + 1
    x[base + i] = v
    return q


@_helper
def _named_value(buf, p, end, row, par, table, vocab, vocab_offsets, out, vals, toks, at_k):
    """Parse the value of a spec field at ``p`` into its coordinates (written by :func:`_put`):
    (position after it, 1 when set, 0 when null, -1 when not certain; clipped; the next q). What
    derived blocks read of it goes to ``vals[at_k]`` (a number, before its clipping) or
    ``toks[at_k]`` (a boolean's 0 or 1, a category's slot, a hashed value's hash), transform.py's
    ``tokens``."""
    kind, slot, q = row[0], row[1], out[5]
    if buf[p] == 110:  # null: missing
        after = _literal(buf, p, end, _NULL)
        return after, (0 if after >= 0 else -1), False, q
    if kind <= _K_SCALE:
        after, value, ok = read_number(buf, p, end)
        if not ok:
            return after, -1, False, q
        z, clipped = scaled(value, kind, par)
        q = _put(out, slot, z * par[4])
        vals[at_k] = value
        return after, 1, clipped, q
    if kind == _K_BOOL:
        after = _literal(buf, p, end, _TRUE)
        if after >= 0:
            q = _put(out, slot, par[4])
            toks[at_k] = _U1
            return after, 1, False, q
        after = _literal(buf, p, end, _FALSE)
        toks[at_k] = _U0
        return after, (1 if after >= 0 else -1), False, q
    if buf[p] != _QUOTE:
        return p, -1, False, q
    stop = utf8_string_end(buf, p + 1, end)  # the category's UTF-8 bytes, as transform.py hashes
    if stop < 0:
        return p, -1, False, q
    if kind == _K_CAT:
        at = _vocabulary_slot(buf, p + 1, stop, row, table, vocab, vocab_offsets)
        q = _put(out, slot + at, par[4])
        toks[at_k] = np.uint64(at)
    else:
        h = _category_hash(buf, p + 1, stop)
        q = _put(out, slot + np.int64(h % np.uint64(row[7])),
                 par[4] if h >> _U63 == _U0 else -par[4])
        toks[at_k] = h
    return stop + 1, 1, False, q


@_helper
def _skip_scalar(buf, p, end):
    """Past a string, literal or number at ``p``, or -1."""
    c = buf[p]
    if c == _QUOTE:
        stop = utf8_string_end(buf, p + 1, end)
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
def _key_colon(buf, p, end):
    """Past an object's ``"key":`` at ``p`` (whitespace around), or -1."""
    p = _skip_ws(buf, p, end)
    if p >= end or buf[p] != _QUOTE:
        return -1
    stop = utf8_string_end(buf, p + 1, end)
    if stop < 0:
        return -1
    p = _skip_ws(buf, stop + 1, end)
    if p >= end or buf[p] != _COLON:
        return -1
    return _skip_ws(buf, p + 1, end)


@_helper
def _skip_value(buf, p, end):
    """Past a value of a field the spec does not name, nested arrays and objects too (at most
    60 deep, each level's kind a bit of ``objects``), or -1 where it is not JSON the fast path
    is sure of (the Python decoder then decides)."""
    depth, objects = 0, np.uint64(0)
    while True:
        if p >= end:
            return -1
        c = buf[p]
        if c == _LBRACKET or c == _LBRACE:
            depth += 1
            if depth > 60:
                return -1
            is_object = c == _LBRACE
            bit = _U1 << np.uint64(depth)
            objects = objects | bit if is_object else objects & ~bit
            p = _skip_ws(buf, p + 1, end)
            if p < end and buf[p] == (_RBRACE if is_object else _RBRACKET):
                p += 1
                depth -= 1
            elif is_object:
                p = _key_colon(buf, p, end)
                if p < 0:
                    return -1
                continue
            else:
                continue
        else:
            p = _skip_scalar(buf, p, end)
            if p < 0:
                return -1
        # after a value (or an empty container): the enclosing level's separator
        while True:
            if depth == 0:
                return p
            in_object = objects & (_U1 << np.uint64(depth)) != _U0
            p, c = _separator(buf, p, end)
            if c == _COMMA:
                if in_object:
                    p = _key_colon(buf, p, end)
                    if p < 0:
                        return -1
                else:
                    p = _skip_ws(buf, p, end)
                break
            if c == (_RBRACE if in_object else _RBRACKET):
                depth -= 1
                continue
            return -1


@_helper
def _named_insert(buf, p, end, klen, max_bytes, names, name_offsets, ints, floats, table, vocab,
                  vocab_offsets, intercept, bound, dim, x, y_out, spans, r, vals, toks, labels,
                  entries, ei, ev, q):
    """As insert_kernel's ``_insert`` for an insert whose features are the spec's named fields:
    (accepted, the mask of the fields clipped, the entries' end). Fields the spec does not name
    are skipped; ``x`` is declined; ``labels`` as there. The coordinates go to row r of ``x`` or,
    with ``entries``, to ``ei/ev`` from ``q`` (:func:`_put`)."""
    if klen == 0 or klen + (end - p) > max_bytes:
        return False, 0, q
    base = r * dim
    if not entries:
        for i in range(dim):
            x[base + i] = 0.0
    out = (x, base, entries, ei, ev, q)
    if intercept != 0.0:
        q = _put(out, 0, intercept)
    p = _skip_ws(buf, p, end)
    if p >= end or buf[p] != _LBRACE:
        return False, 0, q
    p += 1
    seen, present, valued, clipped = 0, np.int64(0), np.int64(0), np.int64(0)
    while True:
        p = _skip_ws(buf, p, end)
        if p >= end or buf[p] != _QUOTE:
            return False, 0, q
        stop = utf8_string_end(buf, p + 1, end)  # a spec field's name may be any text
        if stop < 0:
            return False, 0, q
        field = _field(buf, p + 1, stop)
        k = -1 if field else _spec_field(buf, p + 1, stop, names, name_offsets)
        p = _skip_ws(buf, stop + 1, end)
        if p >= end or buf[p] != _COLON:
            return False, 0, q
        p = _skip_ws(buf, p + 1, end)
        if p >= end or field == _X or seen & field:
            return False, 0, q
        seen |= field
        if field == _OP or field == _ID or field == _TS:
            p = _op_id_ts(buf, p, end, field, spans, r)
            if p < 0:
                return False, 0, q
        elif field == _Y:
            p = _label(buf, p, end, labels[0], labels[1], labels[2], y_out, r)
            if p < 0:
                return False, 0, q
        elif k >= 0:
            bit = np.int64(1) << k
            if present & bit:
                return False, 0, q
            present |= bit
            p, state, clip, q = _named_value(buf, p, end, ints[k], floats[k], table, vocab,
                                             vocab_offsets, (x, base, entries, ei, ev, q), vals,
                                             toks, r * ints.shape[0] + k)
            if state < 0:
                return False, 0, q
            if state:
                valued |= bit
            if clip:
                clipped |= bit
        else:
            p = _skip_value(buf, p, end)
            if p < 0:
                return False, 0, q
        p, c = _separator(buf, p, end)
        if c == _RBRACE:
            break
        if c != _COMMA:
            return False, 0, q
    if seen & (_OP | _ID | _Y) != _OP | _ID | _Y or _skip_ws(buf, p, end) != end:
        return False, 0, q
    for k in range(ints.shape[0]):
        # the missing fields: their fill, or the Python decoder names them
        row, par = ints[k], floats[k]
        if not valued & (np.int64(1) << k) and not row[3]:
            return False, 0, q
        if valued & (np.int64(1) << k):
            continue
        slot, at_k = row[1], r * ints.shape[0] + k
        if row[4]:
            q = _put((x, base, entries, ei, ev, q), slot + row[2] - 1, 1.0)
        if row[0] <= _K_SCALE:
            z, clip = scaled(par[5], row[0], par)
            q = _put((x, base, entries, ei, ev, q), slot, z * par[4])
            vals[at_k] = par[5]
            if clip:
                clipped |= np.int64(1) << k
        elif row[0] == _K_BOOL:
            q = _put((x, base, entries, ei, ev, q), slot, par[4] if par[5] != 0.0 else 0.0)
            toks[at_k] = _U1 if par[5] != 0.0 else _U0
        else:
            q = _put((x, base, entries, ei, ev, q), slot + row[5],
                     par[4] if row[0] == _K_CAT else par[5] * par[4])
            toks[at_k] = np.uint64(row[5]) if row[0] == _K_CAT else np.uint64(row[9])
    if bound < np.inf and not entries:
        sq = 0.0
        for i in range(dim):
            sq += x[base + i] * x[base + i]
        norm = math.sqrt(sq)
        if norm > bound:
            factor = bound / norm
            for i in range(dim):
                x[base + i] = x[base + i] * factor
    return True, clipped, q



@jit
def parse_named_kernel(vbuf, voff, klen, max_bytes, names, name_offsets, ints, floats, table, vocab,
                       vocab_offsets,
                       intercept, bound, X, y_out, spans, clipped, accepted, values, tokens,
                       classes, class_offsets):
    """insert_kernel's ``parse_kernel`` for inserts of named fields under a feature spec (its
    tables: worker/features/tables.py): ``clipped[r]``, the mask of the fields whose value was
    clipped; ``values`` and ``tokens`` (n, fields): what the spec's derived blocks read of each
    field (derived_kernel.py writes those coordinates, then scales onto the bound: pass ``inf``
    here); ``classes``, ``class_offsets`` as there."""
    v, x, y, s = data_pointer(vbuf), data_pointer(X), data_pointer(y_out), data_pointer(spans)
    vals, toks = data_pointer(values), data_pointer(tokens)
    labels = (data_pointer(classes), data_pointer(class_offsets), class_offsets.shape[0] - 1)
    unused_i = data_pointer(spans)  # no entries
    dim = X.shape[1]
    for r in range(accepted.shape[0]):
        accepted[r], clipped[r], _ = _named_insert(v, voff[r], voff[r + 1], klen[r], max_bytes,
                                                   names, name_offsets, ints, floats, table, vocab,
                                                   vocab_offsets, intercept, bound, dim, x, y, s,
                                                   r, vals, toks, labels, False, unused_i, x, 0)


@jit
def parse_named_entries_kernel(vbuf, voff, klen, max_bytes, names, name_offsets, ints, floats,
                               table, vocab, vocab_offsets, intercept, y_out, spans, clipped,
                               accepted, values, tokens, classes, class_offsets, room, counts,
                               entry_index, entry_value):
    """:func:`parse_named_kernel` writing each record's field coordinates as entries, not a dense
    row: record r's ``counts[r]`` (index, value) pairs at ``entry_index/entry_value[r * room:]``,
    unsorted, zeros included (derived_kernel.sparse_rows_kernel sorts them and drops the zeros).
    ``room``: the most a record writes, one a field and one its missing indicator, and the
    intercept (``1 + 2 * fields``). O(fields) a record, however wide a hashed field is."""
    v, y, s = data_pointer(vbuf), data_pointer(y_out), data_pointer(spans)
    vals, toks = data_pointer(values), data_pointer(tokens)
    ei, ev = data_pointer(entry_index), data_pointer(entry_value)
    labels = (data_pointer(classes), data_pointer(class_offsets), class_offsets.shape[0] - 1)
    for r in range(accepted.shape[0]):
        ok, mask, end = _named_insert(v, voff[r], voff[r + 1], klen[r], max_bytes, names,
                                      name_offsets, ints, floats, table, vocab, vocab_offsets,
                                      intercept, np.inf, 0, ev, y, s, r, vals, toks, labels, True,
                                      ei, ev, r * room)
        accepted[r], clipped[r], counts[r] = ok, mask, end - r * room
