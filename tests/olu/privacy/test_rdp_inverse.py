"""Tests of rho_for_epsilon: the exact inverse of rdp_to_dp, checked against dp-accounting."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.olu.privacy.analysis.rdp import optimal_order, rdp_to_dp, rho_for_epsilon
from worker.olu.privacy.analysis.zcdp import dp_to_zcdp

EPSILONS = [float(e) for e in np.geomspace(0.05, 20.0, 40)]
DELTAS = [float(d) for d in np.geomspace(1e-10, 1e-3, 8)]
SWEEP = [(e, d) for e in EPSILONS for d in DELTAS]


@pytest.mark.parametrize("method", ["improved", "classic", "zcdp"])
def test_forward_of_the_inverse_meets_the_target_from_below(method):
    worst = 0.0
    for eps, delta in SWEEP:
        rho = rho_for_epsilon(eps, delta, method)
        reported = rdp_to_dp(rho, delta, method)
        assert reported <= eps, (eps, delta, rho, reported)
        # the largest such float: one ulp more already reports above the target
        assert rdp_to_dp(math.nextafter(rho, math.inf), delta, method) > eps
        worst = max(worst, (eps - reported) / eps)
    assert worst < 1e-9  # measured: 2.1e-16 (improved, zcdp), 1.8e-16 (classic)


@pytest.mark.parametrize("eps,delta", SWEEP[::7])
def test_zcdp_and_classic_are_the_closed_form(eps, delta):
    closed = dp_to_zcdp(eps, delta)
    for method in ("zcdp", "classic"):
        assert math.isclose(rho_for_epsilon(eps, delta, method), closed, rel_tol=1e-14)
    # the improved conversion is tighter at every order, so it affords a larger slope
    assert rho_for_epsilon(eps, delta) > closed


def test_known_values():
    # epsilon 1 at delta 1e-5 under the improved conversion: rho ~ 0.0306 (0.0208 under zCDP)
    assert round(rho_for_epsilon(1.0, 1e-5), 6) == 0.030557
    assert round(rho_for_epsilon(1.0, 1e-5, "zcdp"), 6) == 0.02082
    # round trip with the forward doctest value rdp_to_dp(1.0, 1e-5) = 7.0772...
    assert math.isclose(rho_for_epsilon(rdp_to_dp(1.0, 1e-5), 1e-5), 1.0, rel_tol=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1e-3, max_value=1e3), st.floats(min_value=1e-300, max_value=0.5),
       st.sampled_from(["improved", "classic", "zcdp"]))
def test_largest_slope_within_the_target_everywhere(eps, delta, method):
    rho = rho_for_epsilon(eps, delta, method)
    assert rho > 0.0
    assert rdp_to_dp(rho, delta, method) <= eps < rdp_to_dp(math.nextafter(rho, math.inf), delta, method)


def test_extreme_targets_still_invert():
    for eps in (1e-300, 1e-8, 1e6, 1e300):
        for delta in (1e-300, 1e-5, 0.9):
            for method in ("improved", "classic", "zcdp"):
                rho = rho_for_epsilon(eps, delta, method)
                assert rdp_to_dp(rho, delta, method) <= eps \
                    < rdp_to_dp(math.nextafter(rho, math.inf), delta, method), (eps, delta, method)
    # below the KL threshold delta >= sqrt(1 - e^-rho) the reported epsilon is 0: the inverse of
    # a tiny target lies above that threshold
    assert rho_for_epsilon(1e-8, 1e-5) > -math.log1p(-1e-10)


@pytest.mark.parametrize("kwargs,name", [
    (dict(epsilon=0.0, delta=1e-5), "epsilon"), (dict(epsilon=-1.0, delta=1e-5), "epsilon"),
    (dict(epsilon=math.nan, delta=1e-5), "epsilon"), (dict(epsilon=math.inf, delta=1e-5), "epsilon"),
    (dict(epsilon="1", delta=1e-5), "epsilon"), (dict(epsilon=1.0, delta=0.0), "delta"),
    (dict(epsilon=1.0, delta=1.0), "delta"), (dict(epsilon=1.0, delta=1e-5, method="gdp"), "method"),
])
def test_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        rho_for_epsilon(**kwargs)


# ---------------------------------------------------------------- dp-accounting oracle

dpa = pytest.importorskip("dp_accounting")
from dp_accounting.rdp import rdp_privacy_accountant as rdp_mod  # noqa: E402

GRID = np.array(rdp_mod.DEFAULT_RDP_ORDERS, dtype=np.float64)
DENSE_ORDERS = 1.0 + np.geomspace(0.5, 1e3, 2000)  # alpha* lies in [1.9, 650] over the sweep


def grid_excess_bound(rho: float, delta: float) -> float:
    """How far above the continuous optimum dp-accounting's order grid can put epsilon.

    It reports min over its orders of phi(alpha) = alpha rho + ln(1 - 1/alpha) + (L - ln alpha) /
    (alpha - 1) (the same improved formula; its per-order KL test is weaker than ours, never
    triggered here). phi is convex in alpha where ln alpha < L (phi'' = 1/(alpha (alpha-1)^2) +
    2 (L - ln alpha)/(alpha-1)^3 > 0), so for a grid order g, phi(g) - phi(alpha*) <= phi'(g)
    (g - alpha*) with phi'(g) = rho - (L - ln g)/(g - 1)^2. The bound is the smaller of that over
    the two grid orders around alpha* (the one there is, when alpha* is off the grid's ends).
    """
    L, a = -math.log(delta), optimal_order(rho, delta)
    below, above = GRID[GRID <= a], GRID[GRID >= a]
    bounds = [(rho - (L - math.log(g)) / (g - 1.0) ** 2) * (g - a)
              for g in ([below[-1]] if len(below) else []) + ([above[0]] if len(above) else [])]
    return min(bounds)


def test_dp_accounting_reports_the_target_up_to_its_grid():
    """A Gaussian with noise multiplier sqrt(1/(2 rho)) and sensitivity 1 has the Rényi curve
    alpha * rho exactly, so RdpAccountant prices our rho on its own order grid.

    Soundness: its epsilon is >= ours = the target (a grid minimum is never below the continuous
    one), so a rho that reported under the target only through an error of our conversion would
    show here. Tightness: it is <= target + grid_excess_bound (derived above: the tolerance), and
    a dense grid of orders through its compute_epsilon gives the target to 1e-5 (2000 orders with
    alpha - 1 0.38% apart: relative excess about (0.0038)^2 / 8 ~ 2e-6). Measured over the sweep
    (alpha* from 1.9 to 644): its grid puts epsilon at most 0.12% above the target where alpha* <= 64
    (orders 0.1 or 1 apart) and at most 7.0% above where alpha* falls in the gaps 63-128-256-512-1024
    (small epsilon); the derived bound is at most 13.6% and at most 2.4x the actual excess.
    """
    worst_excess, worst_bound, worst_dense_band = 0.0, 0.0, 0.0
    for eps, delta in SWEEP:
        rho = rho_for_epsilon(eps, delta)
        acc = dpa.rdp.RdpAccountant()
        acc.compose(dpa.GaussianDpEvent(math.sqrt(1.0 / (2.0 * rho))))
        theirs = acc.get_epsilon(delta)
        bound = grid_excess_bound(rho, delta)
        assert theirs >= eps * (1 - 1e-12), (eps, delta, theirs)
        assert theirs <= eps + bound * (1 + 1e-9) + 1e-12, (eps, delta, theirs, bound)
        worst_excess = max(worst_excess, theirs / eps - 1)
        worst_bound = max(worst_bound, bound / eps)
        if optimal_order(rho, delta) <= 63:
            worst_dense_band = max(worst_dense_band, theirs / eps - 1)
        dense, _ = rdp_mod.compute_epsilon(DENSE_ORDERS, DENSE_ORDERS * rho, delta)
        assert eps * (1 - 1e-12) <= dense <= eps * (1 + 1e-5), (eps, delta, dense)
    assert worst_dense_band < 0.005 and 0.0 < worst_excess <= worst_bound < 0.15, \
        (worst_dense_band, worst_excess, worst_bound)


def test_the_oracle_catches_a_slope_one_percent_too_large():
    """The same checks fail for 1.01 rho: the inverse is checked, not merely consistent."""
    caught = 0
    for eps, delta in SWEEP[::9]:
        rho = 1.01 * rho_for_epsilon(eps, delta)
        dense, _ = rdp_mod.compute_epsilon(DENSE_ORDERS, DENSE_ORDERS * rho, delta)
        caught += dense > eps * (1 + 1e-5)
    assert caught == len(SWEEP[::9])


def test_the_improved_conversion_is_the_bisection_of_its_stationarity_condition_bit_for_bit():
    # The oracle is the conversion as first written (root of rho e^(2x) + softplus(x) = L by the
    # module's bisection, through its helpers); the one in use inlines it for speed and is memoised.
    from worker.olu.privacy.analysis.rdp import _X_MAX, _root, _scaled_exp, _softplus

    def oracle(rho, delta):
        L = -math.log(delta)
        x = min(_root(lambda x: _scaled_exp(2 * x, rho) + _softplus(x) - L, 0.5 * (math.log(L) - math.log(rho))),
                _X_MAX)
        h, sp = math.exp(x), _softplus(x)
        return max(0.0, (1 + h) * rho - _softplus(-x) + (L - sp) / h)

    rng = np.random.default_rng(7)
    checked = 0
    for rho, delta in zip(10.0 ** rng.uniform(-9, 3, 3000), 10.0 ** rng.uniform(-15, -1, 3000)):
        rho, delta = float(rho), float(delta)
        if 2.0 * math.log(delta) > math.log(-math.expm1(-rho)):
            continue  # the KL shortcut answers 0 without a root
        for _ in range(2):  # computed, then from the memo
            assert rdp_to_dp(rho, delta) == oracle(rho, delta), (rho, delta)
        checked += 1
    assert checked > 2000
