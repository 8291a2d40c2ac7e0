"""Conversions of a linear Rényi curve ``D_alpha <= alpha * rho`` to (epsilon, delta)-DP, and the
budget split over deletions. Pure math; the accountant (:mod:`..accountant`) calls it.

Converting to (epsilon, delta)-DP: why not Gaussian DP
------------------------------------------------------
PAI only yields the Rényi curve ``alpha * rho``; the released model is NOT a composition of
plain Gaussian mechanisms of the deleted points (the noise is added to an iterate, and the
bound comes from shifted divergences). The exact mu-GDP / privacy-loss-distribution conversion
is therefore not justified here. We use conversions valid for ANY mechanism with that curve:

* ``"improved"`` (default): Canonne-Kamath-Steinke 2020 Prop. 12 / Asoodeh et al. 2020 /
  Balle et al. 2020 Thm 21, ``eps = eps(alpha) + ln(1 - 1/alpha) - (ln delta + ln
  alpha)/(alpha-1)``, minimised over ``alpha > 1``, and ``0`` when the KL bound ``delta >= sqrt(1 -
  exp(-KL))`` already holds (``KL <= rho`` because ``D_1 <= D_alpha <= alpha*rho`` for all ``alpha >
  1``). This is what ``dp_accounting.rdp.RdpAccountant`` computes,
  except that it searches a fixed grid of orders
  >= 1.1 (and uses ``r(1.1) = 1.1 rho`` in the KL test), while we optimise ``alpha`` exactly.
* ``"classic"``: Mironov 2017 Prop. 3, ``eps = eps(alpha) + ln(1/delta)/(alpha-1)``, at its
  closed-form optimum ``alpha = 1 + sqrt(ln(1/delta)/rho)``.
* ``"zcdp"``: Bun-Steinke ``rho + 2 sqrt(rho ln(1/delta))`` (docs/accounting.md 2.4 with ``rho = eps
  W``). For a linear Rényi curve this is algebraically the same number as ``"classic"``.

How alpha is optimised (continuously, exactly)
----------------------------------------------
With ``h = alpha - 1`` and ``L = ln(1/delta)`` the improved bound is
``f(h) = (1+h) rho + ln h - ln(1+h) + (L - ln(1+h))/h``, and ``f'(h) = rho - (L - ln(1+h))/h**2``.
The stationarity condition ``rho h**2 + ln(1+h) = L`` has a strictly increasing left side, so
``f`` has a unique minimiser, found by bisection in ``ln h`` to machine precision. The reverse
bound ``ln delta = h((1+h) rho - eps + ln(h/(1+h))) - ln(1+h)`` is convex in ``h`` with the
increasing derivative ``(1+2h) rho - eps + ln(h/(1+h))``, solved the same way. Every ``h > 0``
gives a valid bound, so numerical error can only cost tightness, never soundness; the
``h``-form stays accurate as ``alpha -> 1`` (no 1.01 cut-off is needed). Results are monotone in
``rho`` and ``delta`` up to a few ulps of rounding (the optimal order moves with them).

Inverting the conversion: the slope for a target (epsilon, delta)
-------------------------------------------------------------------
:func:`rho_for_epsilon` gives the largest ``rho`` whose reported epsilon, ``rdp_to_dp(rho, delta,
method)`` itself, does not exceed the target. For ``"zcdp"`` and ``"classic"`` (one number for a
linear curve) ``eps = rho + 2 sqrt(rho L)`` is a quadratic in ``sqrt(rho)``, so
``rho = (sqrt(L + eps) - sqrt(L))**2 = eps**2 / (sqrt(L + eps) + sqrt(L))**2`` (the second form has
no cancellation). ``"improved"`` has no closed form. As a function of ``rho`` it is the minimum over
``alpha`` of the affine maps ``alpha rho + c(alpha)``: concave and increasing, with slope the
optimal order alpha* (envelope theorem). Newton's method ``rho += (eps - f(rho)) / alpha*`` from
the zCDP value (a lower point: improved <= zcdp at every order) therefore climbs monotonically,
never past the root (the tangent of a concave function lies above it), and converges
quadratically. Then the answer is made exact on the float grid: bracket the root between a float
that passes ``rdp_to_dp(rho) <= eps`` and one that fails, and bisect on the integer
representation of positive floats (ordered like the floats) until the two are neighbours. The
returned ``rho`` passed the forward test itself, so the reported epsilon never exceeds the target,
whatever the rounding; and the next float up fails it, so no larger slope is reported within the
target (up to the few-ulp non-monotonicity of the forward conversion noted above).
"""

from __future__ import annotations

import functools
import math

from .checks import count, positive, real
from .floatgrid import last_passing

__all__ = ["METHODS", "budget_weight", "dp_delta", "noise_multiplier", "optimal_order", "rdp_to_dp",
           "rho_for_epsilon"]

METHODS = ("improved", "classic", "zcdp")
_X_MAX = 700.0  # cap on ln(alpha - 1), keeps e**x finite


def budget_weight(i: int, omega: float = 1.2) -> float:
    """Fraction ``(omega-1)/(omega i**omega)`` of ``eps`` that calibrated deletion ``i`` spends.

    >>> round(budget_weight(1, 1.2), 12)
    0.166666666667
    """
    i, omega = count("i", i, minimum=1), real("omega", omega, lo=1.0, lo_open=True)
    return (omega - 1.0) / (omega * float(i) ** omega)


def noise_multiplier(i: int, eps: float, omega: float = 1.2) -> float:
    """``sigma_i / a_i = sqrt(omega i**omega / (2 (omega-1) eps))`` for deletion ``i``
    (docs/calibration.md 3.4).

    >>> math.isclose(noise_multiplier(1, 1.0, 1.2), math.sqrt(3), rel_tol=1e-12)
    True
    >>> math.isclose(noise_multiplier(10, 0.5, 1.2), math.sqrt(3 * 10**1.2 / 0.5), rel_tol=1e-12)
    True
    """
    eps = real("eps", eps, lo=0.0, lo_open=True)
    return math.sqrt(1.0 / (2.0 * eps * budget_weight(i, omega)))


def _softplus(x: float) -> float:  # ln(1 + e^x) without overflow
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def _scaled_exp(x: float, rho: float) -> float:  # rho * e^x for rho > 0, without OverflowError
    z = x + math.log(rho)
    return math.exp(z) if z < 709.0 else math.inf


def _root(g, x0: float) -> float:
    """Root of a strictly increasing g on the real line (bracket expansion, then bisection)."""
    lo, hi, step = x0 - 1.0, x0 + 1.0, 1.0
    while g(lo) > 0:
        lo, step = lo - step, step * 2
    step = 1.0
    while g(hi) < 0:
        hi, step = hi + step, step * 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if g(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def _newton_root(g, dg, x0: float) -> float:
    """:func:`_root` of an increasing convex ``g`` with derivative ``dg``, in ~8 evaluations of
    each against bisection's ~60 (a release after a deletion converts a new slope): Newton's
    steps, then float by float to the pair bisection ends with (the last x with g(x) < 0 and the
    next float). Bisection where Newton leaves the finite floats."""
    x = x0
    for _ in range(100):
        step = g(x) / dg(x)
        if not math.isfinite(step):
            return _root(g, x0)
        if abs(step) <= 4 * math.ulp(x):
            break
        x -= step
    lo = x
    while g(lo) >= 0:
        lo = math.nextafter(lo, -math.inf)
    hi = math.nextafter(lo, math.inf)
    while g(hi) < 0:
        lo, hi = hi, math.nextafter(hi, math.inf)
    return 0.5 * (lo + hi)


def _check(rho: float, delta: float, method: str) -> tuple[float, float]:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return real("rho", rho, lo=0.0,
                allow_inf=True), real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)


@functools.lru_cache(maxsize=256)
def _improved(rho: float, delta: float) -> tuple[float, float]:
    """(epsilon, alpha) for the improved conversion; alpha = 1.0 marks the KL shortcut.

    Memoised: every release converts the slope, and between deletions it does not change."""
    if rho == 0.0 or 2.0 * math.log(delta) > math.log(-math.expm1(-rho)):  # KL: delta**2 > 1-e^-rho
        return 0.0, 1.0
    if math.isinf(rho):
        return math.inf, math.inf
    L, log_rho = -math.log(delta), math.log(rho)
    exp, log1p, inf = math.exp, math.log1p, math.inf

    def g(x):  # _scaled_exp(2 x, rho) + _softplus(x) - L, inlined
        y = 2 * x + log_rho
        return (exp(y) if y < 709.0 else inf) + (x + log1p(exp(-x)) if x > 0 else log1p(exp(x))) - L

    def dg(x):  # 2 rho e^{2x} + sigmoid(x)
        y = 2 * x + log_rho
        return 2.0 * (exp(y) if y < 709.0 else inf) + (1.0 / (1.0 + exp(-x)) if x > -700.0 else 0.0)

    # the cap: any h > 0 gives a valid bound; it only matters for denormal rho
    x = min(_newton_root(g, dg, 0.5 * (math.log(L) - log_rho)), _X_MAX)
    h, sp = math.exp(x), _softplus(x)
    return max(0.0, (1 + h) * rho - _softplus(-x) + (L - sp) / h), 1.0 + h


def rdp_to_dp(rho: float, delta: float, method: str = "improved") -> float:
    """Smallest epsilon with (epsilon, delta)-DP implied by
    ``D_alpha <= alpha*rho`` for all alpha > 1.

    >>> round(rdp_to_dp(1.0, 1e-5, "zcdp"), 4), round(rdp_to_dp(1.0, 1e-5, "classic"), 4)
    (7.7861, 7.7861)
    >>> round(rdp_to_dp(1.0, 1e-5), 4)  # improved (dp-accounting's grid gives 7.0773)
    7.0772
    >>> round(rdp_to_dp(0.1, 1e-5, "zcdp"), 2), rdp_to_dp(0.0, 1e-5)
    (2.25, 0.0)
    """
    rho, delta = _check(rho, delta, method)
    L = -math.log(delta)
    if method == "zcdp":
        return rho + 2.0 * math.sqrt(rho * L)
    if method == "classic":
        if rho == 0.0 or math.isinf(rho):
            return rho
        h = math.sqrt(L) / math.sqrt(rho)  # Mironov's bound at its optimal order 1 + h
        return rho * (1.0 + h) + L / h
    return _improved(rho, delta)[0]


def optimal_order(rho: float, delta: float, method: str = "improved") -> float:
    """The order alpha at which :func:`rdp_to_dp` is attained (1.0: improved KL shortcut).

    >>> round(optimal_order(1.0, 1e-5, "classic"), 4)
    4.3931
    """
    rho, delta = _check(rho, delta, method)
    if method != "improved":
        return 1.0 + math.sqrt(-math.log(delta)) / math.sqrt(rho) if rho > 0 else math.inf
    return _improved(rho, delta)[1]


def dp_delta(rho: float, epsilon: float) -> float:
    """Smallest delta with (epsilon, delta)-DP from the curve ``alpha*rho`` (improved + KL bound).

    >>> dp_delta(1.0, 7.0772) < 1e-5 < dp_delta(1.0, 7.0771)
    True
    """
    rho = real("rho", rho, lo=0.0, allow_inf=True)
    eps = real("epsilon", epsilon, lo=0.0, allow_inf=True)
    if rho == 0.0 or math.isinf(eps):
        return 0.0
    if math.isinf(rho):
        return 1.0
    log_kl = 0.5 * math.log(-math.expm1(-rho))
    x = _root(lambda x: rho + _scaled_exp(x + math.log(2.0), rho) - eps - _softplus(-x),
              math.log(max(eps - rho, rho)) - math.log(2.0 * rho))
    x = min(x, _X_MAX)  # any h > 0 gives a valid bound; delta underflows to 0 there anyway
    h, sp = math.exp(x), _softplus(x)
    log_rdp = h * ((1 + h) * rho - eps - _softplus(-x)) - sp
    return min(1.0, math.exp(min(log_kl, log_rdp)))


def rho_for_epsilon(epsilon: float, delta: float, method: str = "improved") -> float:
    """The largest Rényi slope ``rho`` with ``rdp_to_dp(rho, delta, method) <= epsilon``.

    Exact inversion of :func:`rdp_to_dp` on the float grid (see the module doc): the forward
    conversion of the result never exceeds ``epsilon``, and the next float up does.

    >>> rho = rho_for_epsilon(1.0, 1e-5); round(rho, 6)
    0.030557
    >>> rdp_to_dp(rho, 1e-5) <= 1.0 < rdp_to_dp(math.nextafter(rho, 1.0), 1e-5)
    True
    >>> round(rho_for_epsilon(1.0, 1e-5, "zcdp"), 6), round(rho_for_epsilon(7.0772, 1e-5), 4)
    (0.02082, 1.0)
    >>> rho_for_epsilon(0.0, 1e-5)
    Traceback (most recent call last):
    ...
    ValueError: epsilon must be in (0.0, inf), got 0.0
    """
    eps = positive("epsilon", epsilon)
    _, delta = _check(0.0, delta, method)
    L = -math.log(delta)

    def fits(rho: float) -> bool:
        return rdp_to_dp(rho, delta, method) <= eps

    rho = (eps / (math.sqrt(L + eps) + math.sqrt(L))) ** 2  # exact for zcdp and classic
    if method == "improved":
        for _ in range(100):  # Newton from below on a concave increasing function
            value, alpha = _improved(rho, delta)
            if not (value < eps and alpha > 1.0):  # reached, or the KL region (slope 0 there)
                break
            nxt = rho + (eps - value) / alpha
            if not nxt > rho:
                break
            rho = nxt
    # Bracket [lo, hi] with fits(lo) and not fits(hi), by steps doubling away from rho (rounding
    # leaves rho a few ulps from the edge; fits(0.0) always holds since epsilon > 0).
    step = max(rho * 1e-15, 5e-324)
    if fits(rho):
        lo, hi = rho, rho + step
        while fits(hi):
            lo, hi, step = hi, hi + step, step * 2.0
    else:
        lo, hi = max(0.0, rho - step), rho
        while not fits(lo):
            lo, hi, step = max(0.0, lo - step), lo, step * 2.0
    return last_passing(fits, lo, hi)  # bisect on the float grid: fits(lo) holds, fits(hi) fails
