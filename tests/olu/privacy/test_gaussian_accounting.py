"""The per-request unit's exact Gaussian accounting (docs/accounting.md 2.6), against two oracles:
dp_accounting's privacy-loss-distribution accountant and the closed form in 50-digit arithmetic."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld

from tests.olu.helpers import synthetic_stream
from worker.olu import PassiveOLU, load_model
from worker.olu.privacy.accountant import PerRequestAccountant
from worker.olu.privacy.analysis.gaussian import (
    gaussian_delta,
    gaussian_epsilon,
    gaussian_rho_for_epsilon,
    mu_for_rho,
)
from worker.olu.privacy.analysis.rdp import rdp_to_dp, rho_for_epsilon
from worker.olu.privacy.analysis.units import unit_epsilon, unit_rho_for_epsilon
from worker.olu.rotation import Rotation

GRID = [(eps, delta) for eps in (0.1, 0.5, 1.0, 2.0, 4.0, 8.0) for delta in (1e-3, 1e-5, 1e-8, 1e-12)]
mpmath.mp.dps = 50


def exact_delta(mu: float, eps: float) -> mpmath.mpf:
    """Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), in 50 digits (no cancellation to speak of)."""
    mu, eps = mpmath.mpf(mu), mpmath.mpf(eps)
    return mpmath.ncdf(mu / 2 - eps / mu) - mpmath.exp(eps) * mpmath.ncdf(-mu / 2 - eps / mu)


def pld_epsilon(mu: float, delta: float) -> float:
    """dp_accounting's epsilon for one Gaussian mechanism of sensitivity 1 and noise 1/mu (an
    upper estimate, within its discretisation of the exact value)."""
    dist = pld.from_gaussian_mechanism(standard_deviation=1.0 / mu, sensitivity=1.0,
                                       value_discretization_interval=1e-5)
    return dist.get_epsilon_for_delta(delta)


@pytest.mark.parametrize("eps,delta", GRID)
def test_the_slope_for_a_target_is_the_exact_curve_and_the_pld_oracle_agrees(eps, delta):
    rho = gaussian_rho_for_epsilon(eps, delta)
    mu = mu_for_rho(rho)
    # the closed form in 50 digits: this mu meets delta, a mu larger by 1e-9 does not
    assert exact_delta(mu, eps) <= delta < exact_delta(mu * (1 + 1e-9), eps)
    # the PLD accountant reads back the target (its estimate is pessimistic, within 1e-3)
    assert eps - 1e-6 <= pld_epsilon(mu, delta) <= eps + 1e-3
    # and the Rényi conversion it replaces is looser: less slope for the same target
    assert rho > rho_for_epsilon(eps, delta)
    assert unit_rho_for_epsilon("per-request", eps, delta) == rho
    assert unit_rho_for_epsilon("all-deletions", eps, delta) == rho_for_epsilon(eps, delta)


@pytest.mark.parametrize("mu", [0.01, 0.1, 0.5, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-10])
def test_the_reported_epsilon_is_the_exact_one_never_below_it(mu, delta):
    eps = gaussian_epsilon(mu, delta)
    if eps == 0.0:
        assert exact_delta(mu, 0.0) <= delta
        return
    assert exact_delta(mu, eps) <= delta  # sound: the reported epsilon holds at delta
    assert exact_delta(mu, eps * (1 - 1e-9)) > delta  # tight: a hair less does not
    assert abs(pld_epsilon(mu, delta) - eps) <= 1e-3
    assert eps < rdp_to_dp(mu * mu / 2, delta)
    assert gaussian_delta(mu, eps) >= float(exact_delta(mu, eps)) * (1 - 1e-12)  # never understated


def test_the_figures_the_issue_names_at_epsilon_1_delta_1e5():
    renyi, exact = rho_for_epsilon(1.0, 1e-5), gaussian_rho_for_epsilon(1.0, 1e-5)
    assert math.sqrt(renyi / exact) == pytest.approx(1 - 0.0777, abs=5e-4)  # sigma 7.8% smaller
    assert gaussian_epsilon(mu_for_rho(renyi), 1e-5) == pytest.approx(0.915, abs=5e-4)  # old sigma certifies


def test_a_per_request_model_calibrates_and_reports_by_the_exact_curve():
    ids, X, y = synthetic_stream(600, 4, seed=3)
    kw = dict(dim=4, l2=0.05, radius=5.0, privacy_unit="per-request", target_epsilon=1.0, delta=1e-5)
    m = PassiveOLU(**kw, noise_rng=np.random.default_rng(0))
    m.learn_many(ids, X, y)
    rho = gaussian_rho_for_epsilon(1.0, 1e-5)
    assert m.accountant.budget == rho
    d = m.unlearn_one(ids[10])
    assert d.sigma == d.shift / math.sqrt(2 * rho)
    p = m.privacy()
    assert p["epsilon"] <= 1.0 and p["epsilon"] == pytest.approx(1.0, abs=1e-12)
    assert p["epsilon"] == unit_epsilon("per-request", rho, 1e-5)
    back = load_model(m.export_state())
    assert back.accountant.budget == rho and back.privacy()["epsilon"] == p["epsilon"]
    # the all-deletions unit keeps the Rényi conversion (docs/accounting.md 2.6)
    other = PassiveOLU(**{**kw, "privacy_unit": "all-deletions"})
    assert other.accountant.budget == rho_for_epsilon(1.0, 1e-5)


def test_a_rotated_request_composes_to_the_same_exact_epsilon():
    ids, X, y = synthetic_stream(300, 4, seed=5)
    for variant in ("overlap", "disjoint"):
        r = Rotation(PassiveOLU, lifetime_events=200, variant=variant, dim=4, l2=0.05, radius=5.0,
                     privacy_unit="per-request", target_epsilon=1.0, delta=1e-5,
                     noise_rng=np.random.default_rng(1))
        r.learn_many(ids[:280], X[:280], y[:280])  # generation 1 active, 2 standby since 200
        assert r.unlearn_request([ids[250]]).outcome == "noised"
        # the models' mu**2 add up to 2 rho: the charges split rho, the epsilon is the one target
        assert r.privacy()["epsilon"] == gaussian_epsilon(mu_for_rho(r.rho), 1e-5) <= 1.0


def test_delta_for_is_the_curve_and_the_renyi_method_stays_available():
    acc = PerRequestAccountant(budget=0.5)
    acc.charge(0.3, acc.sigma_for_next(0.3))
    eps = acc.epsilon()
    assert acc.delta_for(eps) <= 1e-5 < acc.delta_for(eps * (1 - 1e-6))
    assert acc.epsilon(method="improved") == rdp_to_dp(0.5, 1e-5) > eps
