"""The formulas the engine's guarantee rests on, each written once: the step sizes, the contraction
of the shifted strongly convex schedule, a step's sensitivity and a passive deletion's shift.

The reference (``core/schedules.py``, ``algorithms/passive.py``), the compiled kernels
(``core/kernels/ogd.py`` compiles these very functions), the noise prediction
(``privacy/analysis/noise.py``) and the planner call them, so the four agree bit for bit by
construction. Plain floats and ``math`` only: numba compiles them as they are.

>>> strongly_convex_step(mu=0.5, t0=1.0, t=3)
0.5
>>> round(math.exp(shifted_log_contraction(t0=0.0, u=50, tau=500)), 12)
0.1
>>> passive_shift(0.0, sensitivity(step=0.5, lipschitz=4.0, diameter=1.0))
1.0
"""

from __future__ import annotations

import math


def strongly_convex_step(mu, t0, t):
    """eta_t = 1 / (mu (t + t0)) ([P1] Thm 3.3 with the shift t0 of docs/calibration.md 2.3)."""
    return 1.0 / (mu * (t + t0))


def convex_step(diameter, lipschitz, t):
    """eta_t = D / (L sqrt(t)), the merely convex schedule."""
    return diameter / (lipschitz * math.sqrt(t))


def shifted_log_contraction(t0, u, tau):
    """log Gamma_{u,tau} = log(u + t0) - log(tau + t0): the product of the regular steps' factors
    (1 - 1/(r + t0)) for r in (u, tau], which telescopes
    (docs/calibration.md 3.2); 0 for tau <= u."""
    if tau <= u:
        return 0.0
    return math.log(u + t0) - math.log(tau + t0)


def sensitivity(step, lipschitz, diameter):
    """Delta_u = min(eta_u L, D): the most one example can move
    the iterate (docs/calibration.md 3.1)."""
    bound = step * lipschitz
    return diameter if diameter < bound else bound


def passive_shift(log_contraction, sensitivity_u):
    """What a record applied at step u can still shift the iterate by at tau: Gamma_{u,tau} Delta_u
    (docs/calibration.md 3.4)."""
    return math.exp(log_contraction) * sensitivity_u


#: The smallest normal float (``sys.float_info.min``): a per-request sigma never goes below it.
SMALLEST_NORMAL = 2.2250738585072014e-308


def deletion_sigma(shift, factor):
    """The noise std of a deletion that moved the iterate by ``shift`` > 0, for either privacy unit
    in one argument (the compiled pass takes one such factor per deletion): all-deletions passes
    the accountant's next noise multiplier, ``shift * factor``; per-request minus its divisor,
    ``factor = -sqrt(2 rho)``, for ``shift / sqrt(2 rho)`` but never below the smallest normal
    float (a subnormal quotient would lose the relative precision the charge relies on, or
    underflow to 0, no noise for a real shift; a larger sigma is always safe)."""
    if factor < 0.0:
        return max(shift / -factor, SMALLEST_NORMAL)
    return shift * factor


def log1pexp(m):
    """log(1 + e^m) without overflow: the logistic loss at margin -m."""
    return m + math.log1p(math.exp(-m)) if m > 0 else math.log1p(math.exp(m))


def logistic_derivative(margin, y):
    """d/d(x.z) of log(1 + e^{-y x.z}) at ``margin`` = x.z: the gradient is this times x, plus
    lam z. d/dm log(1 + e^{-m}) = -1/(1 + e^m), written to avoid overflow for large |m|."""
    m = y * margin
    if m < 0:
        return -y / (1.0 + math.exp(m))
    e = math.exp(-m)
    return -y * e / (1.0 + e)


def ridge_derivative(margin, y):
    """d/d(x.z) of (x.z - y)^2 / 2 at ``margin`` = x.z."""
    return margin - y
