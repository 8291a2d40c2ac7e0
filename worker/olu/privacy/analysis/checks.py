"""The one input checker of the privacy math: every public function validates its numbers here,
so the bounds and the messages are the same everywhere.

>>> real("delta", 1e-5, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
1e-05
>>> real("eps", -1, lo=0.0, lo_open=True)
Traceback (most recent call last):
...
ValueError: eps must be in (0.0, inf), got -1
>>> count("capacity", 3, minimum=1), count("k", True, minimum=0)
Traceback (most recent call last):
...
ValueError: k must be an integer >= 0, got True
"""

from __future__ import annotations

import math


def real(name: str, x, *, lo: float = -math.inf, hi: float = math.inf, lo_open: bool = False,
         hi_open: bool = False, allow_inf: bool = False,
         error: type[Exception] = ValueError) -> float:
    """``x`` as a float in the interval (open or closed ends); +inf only when ``allow_inf``."""
    if type(x) is float and lo < x < hi:
        # the common case, checked first: finite and inside both ends
        return x
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise error(f"{name} must be a real number, got {x!r}")
    value = float(x)
    if value == math.inf and allow_inf:
        return value
    if (math.isnan(value) or math.isinf(value) or value < lo or (lo_open and value == lo)
            or value > hi or (hi_open and value == hi)):
        left = "(" if lo_open or math.isinf(lo) else "["
        right = ")" if hi_open or math.isinf(hi) else "]"
        raise error(f"{name} must be in {left}{lo}, {hi}{right}, got {x!r}")
    return value


def positive(name: str, x, *, upper: float = math.inf,
             error: type[Exception] = ValueError) -> float:
    """A finite number > 0 (and < ``upper``)."""
    return real(name, x, lo=0.0, hi=upper, lo_open=True, hi_open=True, error=error)


def count(name: str, x, *, minimum: int = 0, maximum: int | None = None,
          error: type[Exception] = ValueError) -> int:
    """An int (not a bool) in [minimum, maximum]."""
    if isinstance(x, bool) or not isinstance(x, int) or x < minimum or (
            maximum is not None and x > maximum):
        upper = "" if maximum is None else f" and <= {maximum}"
        raise error(f"{name} must be an integer >= {minimum}{upper}, got {x!r}")
    return x
