"""The exact (epsilon, delta) curve of a Gaussian mechanism: the accounting of the per-request unit.

Why it applies (docs/accounting.md 2.6)
---------------------------------------
Under the per-request unit a request R is one Gaussian mechanism: couple the real run with R's
reference run (the same stream, R's records masked, every other noise shared); at R's deletion the
two iterates are at most the shift ``a`` apart whatever the shared randomness, and the noise
``N(0, sigma**2 I)`` is added once. For one value of the shared randomness the release is the
Gaussian mechanism with sensitivity at most ``a``, i.e. ``mu``-Gaussian-DP with ``mu = a / sigma``;
the real and reference laws are mixtures of those pairs with the same weights, and the hockey-stick
divergence is jointly convex, so the mixture is ``mu``-GDP too. Every later release applies the same
maps in both runs (post-processing). Models that each add their own noise for R compose to
``mu = sqrt(mu_1**2 + mu_2**2)`` (Dong, Roth and Su 2022, Corollary 3.3). With ``sigma = a / sqrt(2
rho)`` the mechanism is ``mu = sqrt(2 rho)``: the Rényi slope ``rho`` stays the ledger's number (it
adds exactly like ``mu**2 / 2``), and only its conversion to (epsilon, delta) changes.

The curve (Balle and Wang 2018, Theorem 8; Dong, Roth and Su 2022, Corollary 2.13)
------------------------------------------------------------------------------------
A ``mu``-GDP mechanism is (epsilon, delta(epsilon))-DP for every epsilon >= 0 with, and only with,

    delta(epsilon) = Phi(mu / 2 - epsilon / mu) - e**epsilon Phi(-mu / 2 - epsilon / mu),

decreasing in epsilon and increasing in mu. The Rényi conversions of :mod:`.rdp` are valid for any
mechanism with the curve ``alpha rho`` and so are looser for this one: at epsilon 1, delta 1e-5 the
same guarantee allows a ``mu`` 8.4% larger (sigma 7.8% smaller).

Rounding never understates delta: :func:`gaussian_delta` adds 1e-14 of the two terms it is the
difference of (erfc and exp are accurate to a few ulps, 2.2e-16 each), so the epsilon reported and
the slope derived from a target stay on the safe side of the true curve. Both inversions are exact
on the float grid, as :func:`.rdp.rho_for_epsilon` is: the value returned passes the forward test
and its float neighbour on the other side fails it.

>>> round(gaussian_epsilon(1.0, 1e-5), 4), round(gaussian_delta(1.0, 1.0), 6)
(4.3772, 0.126937)
>>> rho = gaussian_rho_for_epsilon(1.0, 1e-5); round(rho, 6)
0.035926
>>> gaussian_epsilon(math.sqrt(2 * rho), 1e-5) <= 1.0
True
"""

from __future__ import annotations

import functools
import math

from .checks import positive, real
from .floatgrid import first_passing, last_passing
from .rdp import rdp_to_dp, rho_for_epsilon

__all__ = ["gaussian_delta", "gaussian_epsilon", "gaussian_rho_for_epsilon", "mu_for_rho"]

_ROUNDING = 1e-14  # relative allowance for the rounding of each term of the delta curve
_SQRT2 = math.sqrt(2.0)


def _phi(x: float) -> float:
    """The standard normal CDF, accurate in the lower tail (erfc, not 1 - erf)."""
    return 0.5 * math.erfc(-x / _SQRT2)


def mu_for_rho(rho: float) -> float:
    """The Gaussian-DP parameter of a Gaussian mechanism of Rényi slope ``rho``: ``sqrt(2 rho)``.

    >>> mu_for_rho(0.5), mu_for_rho(0.0)
    (1.0, 0.0)
    """
    return math.sqrt(2.0 * real("rho", rho, lo=0.0, allow_inf=True))


def gaussian_delta(mu: float, epsilon: float) -> float:
    """The smallest delta of a ``mu``-GDP mechanism at ``epsilon`` (module doc), never below the
    exact value by rounding; in [0, 1].

    >>> gaussian_delta(0.0, 1.0), gaussian_delta(math.inf, 1.0), gaussian_delta(2.0, math.inf)
    (0.0, 1.0, 0.0)
    """
    mu = real("mu", mu, lo=0.0, allow_inf=True)
    eps = real("epsilon", epsilon, lo=0.0, allow_inf=True)
    if mu == 0.0 or math.isinf(eps):
        return 0.0
    if math.isinf(mu):
        return 1.0
    p = _phi(mu / 2.0 - eps / mu)
    tail = _phi(-mu / 2.0 - eps / mu)
    q = math.exp(eps + math.log(tail)) if tail > 0.0 else 0.0  # e**eps Phi(.), no overflow
    # an underflowed tail leaves q = 0, which only raises delta
    return min(1.0, max(0.0, p - q) + _ROUNDING * (p + q))


@functools.lru_cache(maxsize=256)
def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest epsilon >= 0 with ``gaussian_delta(mu, epsilon) <= delta``: the exact
    (epsilon, delta)-DP of a ``mu``-GDP mechanism. Memoised: releases convert the same mu.

    >>> gaussian_epsilon(0.0, 1e-5), gaussian_epsilon(1e-9, 0.5)
    (0.0, 0.0)
    """
    mu = real("mu", mu, lo=0.0, allow_inf=True)
    delta = real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    if math.isinf(mu):
        return math.inf

    def fits(eps: float) -> bool:
        return gaussian_delta(mu, eps) <= delta

    if fits(0.0):
        return 0.0
    # mu-GDP implies the Rényi curve alpha mu**2 / 2, whose conversion is an upper bound
    hi = max(rdp_to_dp(mu * mu / 2.0, delta), 1e-300)
    while not fits(hi):  # only by rounding at the edge of the float range
        hi *= 2.0
    return first_passing(fits, 0.0, hi)


@functools.lru_cache(maxsize=64)
def gaussian_rho_for_epsilon(epsilon: float, delta: float) -> float:
    """The largest Rényi slope ``rho`` whose Gaussian mechanism (``mu = sqrt(2 rho)``) is
    (epsilon, delta)-DP by the exact curve; the next float up is not.

    At least :func:`.rdp.rho_for_epsilon`'s slope (the Rényi conversion is valid, only looser).

    >>> gaussian_rho_for_epsilon(1.0, 1e-5) > rho_for_epsilon(1.0, 1e-5)
    True
    """
    eps = positive("epsilon", epsilon)
    delta = real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)

    def fits(rho: float) -> bool:
        return gaussian_delta(mu_for_rho(rho), eps) <= delta

    lo = rho_for_epsilon(eps, delta)
    while not fits(lo):  # the Rényi slope fits up to the rounding allowance
        lo *= 0.5
    hi = max(2.0 * lo, 1e-300)
    while fits(hi):
        lo, hi = hi, 2.0 * hi
    return last_passing(fits, lo, hi)
