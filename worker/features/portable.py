"""cos, log and Gaussian draws from + - * / and rounding only: the same bits on every CPU.

The C library's ``cos`` and ``log`` pick code paths by the CPU (glibc has FMA variants), and
numpy's dispatch on SIMD width; a feature map whose bits differ between the worker and a
subscriber breaks docs/worker.md 4.3. These are written in Python floats (IEEE doubles, each
operation rounded once, no fused multiply-add), so every reader that calls them gets the same
bits. Accuracy is a few ulps over the ranges the feature spec uses (|x| < 1e6 for ``cos``), which
is all a random-feature map needs: what must hold is sameness, not correct rounding.

>>> abs(cos(1.0) - 0.5403023058681398) < 1e-15, abs(log(10.0) - 2.302585092994046) < 1e-15
(True, True)
>>> gaussians(7, 0, 3) == gaussians(7, 0, 3)
True
"""

from __future__ import annotations

import math

__all__ = ["cos", "gaussians", "log", "uniform"]

_MASK = (1 << 64) - 1
# pi/2 in three parts (Cody and Waite): k * _P1 and k * _P2 are exact for |k| < 2^20.
_P1 = 1.5707963267341256
_P2 = 6.077100506303966e-11
_P3 = 2.0222662487959506e-21
_TWO_OVER_PI = 0.6366197723675814
# Taylor coefficients of sin and cos on [-pi/4, pi/4] (to x^15 and x^16: truncation < 1e-17)
_SIN = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(8))
_COS = tuple((-1) ** k / math.factorial(2 * k) for k in range(9))
_LN2_HI, _LN2_LO = 0.6931471803691238, 1.9082149292705877e-10


def _poly(coefficients, x2: float) -> float:
    acc = 0.0
    for c in reversed(coefficients):
        acc = acc * x2 + c
    return acc


def cos(x: float) -> float:
    """cos(x) for finite |x| < 1e6 (ValueError otherwise)."""
    if not abs(x) < 1e6:
        raise ValueError(f"portable cos takes |x| < 1e6, got {x!r}")
    k = round(x * _TWO_OVER_PI)
    r = ((x - k * _P1) - k * _P2) - k * _P3  # x - k pi/2, in [-pi/4, pi/4] (a little beyond)
    r2 = r * r
    quadrant = k & 3
    if quadrant == 0:
        return _poly(_COS, r2)
    if quadrant == 1:
        return -(r * _poly(_SIN, r2))
    if quadrant == 2:
        return -_poly(_COS, r2)
    return r * _poly(_SIN, r2)


def log(x: float) -> float:
    """The natural logarithm of a positive finite x."""
    if not (x > 0.0 and math.isfinite(x)):
        raise ValueError(f"portable log takes a positive finite number, got {x!r}")
    m, e = math.frexp(x)  # x = m 2^e, m in [0.5, 1): exact
    if m < 0.7071067811865476:
        m, e = m * 2.0, e - 1
    s = (m - 1.0) / (m + 1.0)  # m in [0.707, 1.414): |s| < 0.172
    s2 = s * s
    acc, term, k = 0.0, s, 1
    while k < 40:
        acc += term / k
        term *= s2
        k += 2
    return 2.0 * acc + e * _LN2_LO + e * _LN2_HI


def _splitmix(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def uniform(seed: int, stream: int, i: int) -> float:
    """The i-th uniform in (0, 1) of (seed, stream): 53 random bits, never 0."""
    h = _splitmix((_splitmix((seed & _MASK) ^ (stream * 0xD1B54A32D192ED03 & _MASK)) + i) & _MASK)
    return ((h >> 11) + 0.5) * 2.0 ** -53


def gaussians(seed: int, stream: int, n: int) -> list[float]:
    """n standard normal draws of (seed, stream), by Box and Muller from :func:`uniform`."""
    out = []
    for j in range((n + 1) // 2):
        radius = math.sqrt(-2.0 * log(uniform(seed, stream, 2 * j)))  # sqrt is exact in IEEE
        angle = 6.283185307179586 * uniform(seed, stream, 2 * j + 1)
        out.append(radius * cos(angle))
        out.append(radius * cos(angle - 1.5707963267948966))  # sin(a) = cos(a - pi/2)
    return out[:n]
