"""The compiled readers' JSON lexing: whitespace, separators, plain ASCII and UTF-8 strings.

Shared by the insert parsers (insert_kernel.py, named_kernel.py) and the sparse ``x`` reader
(sparse_x_kernel.py).
The helpers take raw pointers, not arrays (insert_kernel.py says why).
"""

from __future__ import annotations

import numba

__all__ = ["separator", "skip_ws", "string_end", "utf8_string_end"]

_QUOTE, _BACKSLASH = 34, 92
_helper = numba.njit(nogil=True)


@_helper
def skip_ws(buf, p, end):
    """Past JSON whitespace from ``buf[p]``."""
    while p < end and (buf[p] == 32 or buf[p] == 10 or buf[p] == 13 or buf[p] == 9):
        p += 1
    return p


@_helper
def separator(buf, p, end):
    """The next byte after whitespace and the position after it; 0 at the end of the record."""
    p = skip_ws(buf, p, end)
    if p >= end:
        return end, 0
    return p + 1, buf[p]


@_helper
def string_end(buf, p, end):
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
def _continuation(c):
    return 0x80 <= c <= 0xBF


@_helper
def utf8_string_end(buf, p, end):
    """:func:`string_end` for a string of any characters written as UTF-8 (RFC 3629: no overlong
    form, no surrogate, nothing past U+10FFFF), still without escapes or control characters: the
    index of its closing quote, or -1 (orjson refuses what is not UTF-8; an escape is the Python
    decoder's to read)."""
    while p < end:
        c = buf[p]
        if c == _QUOTE:
            return p
        if c < 0x80:
            if c == _BACKSLASH or c < 32:
                return -1
            p += 1
            continue
        # the second byte's range depends on the first (no overlong, no surrogate, <= U+10FFFF)
        lo, hi, size = 0x80, 0xBF, 0
        if 0xC2 <= c <= 0xDF:
            size = 2
        elif 0xE0 <= c <= 0xEF:
            size = 3
            lo, hi = (0xA0, 0xBF) if c == 0xE0 else ((0x80, 0x9F) if c == 0xED else (lo, hi))
        elif 0xF0 <= c <= 0xF4:
            size = 4
            lo, hi = (0x90, 0xBF) if c == 0xF0 else ((0x80, 0x8F) if c == 0xF4 else (lo, hi))
        if size == 0 or p + size > end or not lo <= buf[p + 1] <= hi:
            return -1
        for k in range(2, size):
            if not _continuation(buf[p + k]):
                return -1
        p += size
    return -1
