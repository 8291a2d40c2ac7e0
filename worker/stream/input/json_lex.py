"""The compiled readers' JSON lexing: whitespace, separators and plain ASCII strings.

Shared by the insert parsers (insert_kernel.py, named_kernel.py) and the sparse ``x`` reader
(sparse_x_kernel.py).
The helpers take raw pointers, not arrays (insert_kernel.py says why).
"""

from __future__ import annotations

import numba

__all__ = ["separator", "skip_ws", "string_end"]

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
