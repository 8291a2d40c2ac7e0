"""The compiled reader of an insert's ``x`` under OLU_SPARSE_INPUT: its non-zeros, as entries.

:func:`sparse_x` reads the sparse form ``{"indices": [...], "values": [...]}`` (sparse_x.py's
contract: the keys in either order, each once; indices plain integers, strictly increasing, in
[0, dim); one number a value), its entries as given (an explicit zero stays, as parse_sparse keeps
it); :func:`dense_nonzeros` reads an array of ``dim`` numbers and keeps its non-zeros (a -0.0 is a
zero: decode.py's from_dense). Both write entry k at ``ip[q + k]``, ``vp[q + k]`` and return the
position after the value and the entries' end; position -1 declines the record (the Python decoder
then decides, and names what is wrong). A number is read by json_number.py's :func:`read_number`
(the double orjson gives, or a decline); an index is a plain run of at most 18 digits.
"""

from __future__ import annotations

import numba

from .json_lex import separator, skip_ws, string_end
from .json_number import is_digit, read_number

__all__ = ["dense_nonzeros", "sparse_x"]

_QUOTE, _COLON, _COMMA, _ZERO = 34, 58, 44, 48
_LBRACE, _RBRACE, _LBRACKET, _RBRACKET = 123, 125, 91, 93
_INDICES, _VALUES = 1, 2
_helper = numba.njit(nogil=True)


@_helper
def _key(buf, p, stop):
    """_INDICES, _VALUES or 0 for the key ``buf[p:stop]``."""
    word_i = (105, 110, 100, 105, 99, 101, 115)  # "indices"
    word_v = (118, 97, 108, 117, 101, 115)  # "values"
    if stop - p == 7:
        for k in range(7):
            if buf[p + k] != word_i[k]:
                return 0
        return _INDICES
    if stop - p == 6:
        for k in range(6):
            if buf[p + k] != word_v[k]:
                return 0
        return _VALUES
    return 0


@_helper
def _index(buf, p, end):
    """A plain non-negative integer of at most 18 digits at ``p`` (no sign, no leading zero):
    (position after it, its value), or (-1, 0)."""
    first, value = p, 0
    while p < end and is_digit(buf[p]):
        value = value * 10 + (buf[p] - _ZERO)
        p += 1
    if p == first or p - first > 18 or (buf[first] == _ZERO and p - first > 1):
        return -1, 0
    return p, value


@_helper
def _items(buf, p, end, which, ip, vp, q):
    """An array of indices or values at ``p`` into entries ``q``, ``q + 1``, ...: (position after
    it, how many), or (-1, 0)."""
    if buf[p] != _LBRACKET:
        return -1, 0
    p = skip_ws(buf, p + 1, end)
    if p < end and buf[p] == _RBRACKET:
        return p + 1, 0
    count = 0
    while True:
        p = skip_ws(buf, p, end)
        if which == _INDICES:
            p, index = _index(buf, p, end)
            if p < 0:
                return -1, 0
            ip[q + count] = index
        else:
            p, value, ok = read_number(buf, p, end)
            if not ok:
                return -1, 0
            vp[q + count] = value
        count += 1
        p, c = separator(buf, p, end)
        if c == _RBRACKET:
            return p, count
        if c != _COMMA:
            return -1, 0


@_helper
def sparse_x(buf, p, end, dim, ip, vp, q):
    """The sparse form at ``p`` (module doc): (position after it, entries' end), or (-1, q)."""
    if buf[p] != _LBRACE:
        return -1, q
    p += 1
    seen, n_indices, n_values = 0, 0, 0
    while True:
        p = skip_ws(buf, p, end)
        if p >= end or buf[p] != _QUOTE:
            return -1, q
        stop = string_end(buf, p + 1, end)
        if stop < 0:
            return -1, q
        which = _key(buf, p + 1, stop)
        if which == 0 or seen & which:
            return -1, q
        seen |= which
        p = skip_ws(buf, stop + 1, end)
        if p >= end or buf[p] != _COLON:
            return -1, q
        p = skip_ws(buf, p + 1, end)
        if p >= end:
            return -1, q
        p, count = _items(buf, p, end, which, ip, vp, q)
        if p < 0:
            return -1, q
        if which == _INDICES:
            n_indices = count
        else:
            n_values = count
        p, c = separator(buf, p, end)
        if c == _RBRACE:
            break
        if c != _COMMA:
            return -1, q
    if seen != _INDICES | _VALUES or n_indices != n_values:
        return -1, q
    for k in range(1, n_indices):
        if ip[q + k] <= ip[q + k - 1]:
            return -1, q
    if n_indices and ip[q + n_indices - 1] >= dim:
        return -1, q
    return p, q + n_indices


@_helper
def dense_nonzeros(buf, p, end, dim, ip, vp, q):
    """An array of exactly ``dim`` numbers at ``p``, its non-zeros as entries: (position after
    it, entries' end), or (-1, q)."""
    if buf[p] != _LBRACKET:
        return -1, q
    p += 1
    count, at = 0, q
    while True:
        p = skip_ws(buf, p, end)
        p, value, ok = read_number(buf, p, end)
        if not ok:
            return -1, q
        if count < dim:
            ip[at], vp[at] = count, value
            at += value != 0.0  # branch-free: a zero is written over by the next entry
        count += 1
        p, c = separator(buf, p, end)
        if c == _RBRACKET:
            break
        if c != _COMMA:
            return -1, q
    return (p, at) if count == dim else (-1, q)
