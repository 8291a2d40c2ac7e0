"""Exact answers on the float grid: the last float that passes a monotone test. Pure.

The inversions of the privacy math (a slope for a target epsilon, an epsilon for a slope) must
never report past the edge by rounding: they bracket the edge between a float that passes and one
that fails, and bisect on the integer representation of non-negative floats (ordered like the
floats themselves) until the two are neighbours.

>>> # 1.4142135623730951 squares to 2.0000000000000004
>>> last_passing(lambda x: x * x <= 2.0, 1.0, 2.0)
1.414213562373095
>>> first_passing(lambda x: x >= 0.1, 0.0, 1.0), last_passing(lambda x: x < 0.1, 0.0, 1.0) < 0.1
(0.1, True)
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

__all__ = ["first_passing", "last_passing"]


def _bits(x: float) -> int:  # for x >= 0 the bit patterns are ordered like the floats
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _float(b: int) -> float:
    return struct.unpack("<d", struct.pack("<q", b))[0]


def last_passing(passes: Callable[[float], bool], lo: float, hi: float) -> float:
    """The largest float in [lo, hi) that passes, given ``passes(lo)`` and not ``passes(hi)``
    (0 <= lo < hi) and a test that holds below its edge and fails above it."""
    a, b = _bits(lo), _bits(hi)
    while b - a > 1:
        mid = (a + b) // 2
        a, b = (mid, b) if passes(_float(mid)) else (a, mid)
    return _float(a)


def first_passing(passes: Callable[[float], bool], lo: float, hi: float) -> float:
    """The smallest float in (lo, hi] that passes, given ``passes(hi)`` and not ``passes(lo)``
    (0 <= lo < hi) and a test that fails below its edge and holds above it: the float after the
    last one that fails."""
    return math.nextafter(last_passing(lambda x: not passes(x), lo, hi), math.inf)
