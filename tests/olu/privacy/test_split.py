"""The planned-capacity budget split (docs/accounting.md 11): its sigma, its total, its state."""

import math

import numpy as np
import pytest
from scipy import stats

from tests.olu.helpers import synthetic_stream
from worker.olu import PassiveOLU, load_model
from worker.olu.algorithms.active import ActiveD2D
from worker.olu.exceptions import ConfigError
from worker.olu.privacy.accountant import (
    InvalidAccountantState,
    PlannedAccountant,
    PrivacyAccountant,
    load_accountant,
    make_accountant,
)
from worker.olu.privacy.analysis.rdp import budget_weight, noise_multiplier
from worker.olu.privacy.analysis.split import (
    capacity_for_rate,
    planned_multiplier,
    planned_spent,
    planned_weight,
)

KW = dict(dim=4, loss="logistic", l2=0.05, radius=1e3, feature_bound=1.0)


def test_sigma_is_the_formula_inside_the_plan_and_in_the_reserve():
    rho, K, r = 0.7, 50, 0.1
    acc = PlannedAccountant(rho, planned=K, reserve=r)
    for i in range(1, K + 30):
        shift = 0.01 * i
        sigma = acc.sigma_for_next(shift)
        if i <= K:
            expected = shift * math.sqrt(K / (2 * rho * (1 - r)))
        else:
            j = i - K
            expected = shift * math.sqrt(1.2 * j ** 1.2 / (2 * rho * r * 0.2))
        assert math.isclose(sigma, expected, rel_tol=1e-12), i
        before = acc.spent
        acc.charge(shift, sigma)
        assert math.isclose(acc.spent - before, rho * planned_weight(i, capacity=K, reserve=r), rel_tol=1e-9)
    assert (acc.capacity_used, acc.overflow) == (K, 29)


@pytest.mark.parametrize("K,r,omega", [(1, 0.1, 1.2), (100, 0.1, 1.2), (7, 0.5, 1.05), (1000, 0.01, 2.0)])
def test_the_total_never_exceeds_the_budget_across_the_plan_and_any_overflow(K, r, omega):
    rng = np.random.default_rng(K)
    acc = PlannedAccountant(1.0, omega=omega, planned=K, reserve=r)
    for i in range(K + 20_000):  # never refused, never over
        shift = float(rng.uniform(0.0, 3.0))
        acc.charge(shift, acc.sigma_for_next(shift))
        if i + 1 == K:
            assert math.isclose(acc.spent, 1 - r, rel_tol=1e-9)
    assert acc.spent <= 1.0
    assert acc.spent == pytest.approx(planned_spent(K + 20_000, capacity=K, reserve=r, omega=omega), rel=1e-9)
    # the overflow's limit (omega - 1) zeta(omega) / omega is below 1: the reserve is never used up
    assert (1 - r) + r * (omega - 1) * _zeta(omega) / omega < 1.0


def _zeta(s: float) -> float:
    n = 10**6  # tail by the integral: sum_{j>n} j^-s ~ n^(1-s) / (s - 1)
    return float(np.sum(np.arange(1, n + 1, dtype=np.float64) ** -s)) + n ** (1 - s) / (s - 1)


def test_the_even_split_is_the_cheapest_inside_the_plan():
    """sum_i m_i**2 (the final noise variance, docs/accounting.md 11) for k = K deletions."""
    rho, K = 1.0, 1000
    planned = sum(planned_multiplier(i, rho, capacity=K) ** 2 for i in range(1, K + 1))
    weighted = sum(noise_multiplier(i, rho) ** 2 for i in range(1, K + 1))
    assert math.isclose(planned, K * K / (2 * rho * 0.9), rel_tol=1e-9)
    assert planned < weighted / 9  # 1.36 K**2.2 against K**2 / 1.8: 9.8x at K = 1000


def test_the_engine_calibrates_with_the_planned_split():
    ids, X, y = synthetic_stream(300, 4, seed=2)
    m = PassiveOLU(**KW, rho=0.5, budget_split="planned", deletion_capacity=3, budget_reserve=0.2,
                   noise_rng=np.random.default_rng(0))
    m.learn_many(ids, X, y)
    for i, r in enumerate(ids[:5], 1):
        d = m.unlearn_one(r)
        w = 0.8 / 3 if i <= 3 else 0.2 * budget_weight(i - 3)
        assert math.isclose(d.sigma, d.shift / math.sqrt(2 * 0.5 * w), rel_tol=1e-12)
    p = m.privacy()
    assert (p["split"], p["capacity_planned"], p["capacity_used"], p["overflow_deletions"]) == ("planned", 3, 3, 2)
    assert p["budget_used"] <= 1.0
    restored = load_model(m.export_state())
    assert restored.accountant.to_state() == m.accountant.to_state()
    assert isinstance(restored.accountant, PlannedAccountant)


def test_active_algorithms_take_the_planned_split():
    ids, X, y = synthetic_stream(200, 4, seed=3)
    m = ActiveD2D(**KW, rho=1.0, budget_split="planned", deletion_capacity=10, noise_rng=np.random.default_rng(1))
    m.learn_many(ids, X, y)
    d = m.unlearn_one(ids[150])
    assert d.outcome == "noised"
    assert math.isclose(d.sigma, d.shift * math.sqrt(10 / (2 * 0.9)), rel_tol=1e-12)


def _noise_fits(draws: np.ndarray, sigma: float) -> bool:
    """Two-sided chi-square test at level 1e-6 of N(0, sigma**2) for every entry of ``draws``."""
    n = draws.size
    q = float(np.sum(draws ** 2) / sigma ** 2)
    return bool(stats.chi2.sf(q, n) > 5e-7 and stats.chi2.cdf(q, n) > 5e-7)


@pytest.mark.parametrize("halve", [False, True])
def test_a_halved_sigma_fails_the_statistical_test(halve, monkeypatch):
    """The noise the engine adds has the planned sigma: 300 draws x 4 coordinates of the post-noise
    minus pre-noise iterate (the ball is large, the projection never acts)."""
    if halve:
        original = PassiveOLU._noise
        monkeypatch.setattr(PassiveOLU, "_noise", lambda self, sigma: original(self, sigma / 2))
    ids, X, y = synthetic_stream(200, 4, seed=4)
    base = PassiveOLU(**KW, rho=0.5, budget_split="planned", deletion_capacity=40)
    base.learn_many(ids, X, y)
    state = base.export_state()
    draws, sigma = [], None
    for seed in range(300):
        m = load_model(state, noise_rng=np.random.default_rng(seed))
        before = m.weights
        d = m.unlearn_one(ids[120])
        draws.append(m.weights - before)
        sigma = d.sigma
    assert math.isclose(sigma, d.shift * math.sqrt(40 / 0.9), rel_tol=1e-12)
    assert _noise_fits(np.array(draws), sigma) is (not halve)


def test_states_and_choices():
    acc = make_accountant("all-deletions", 1.0, split="planned", planned=5, reserve=0.3)
    acc.charge(1.0, acc.sigma_for_next(1.0))
    state = acc.to_state()
    assert load_accountant(state).to_state() == state and type(load_accountant(state)) is PlannedAccountant
    assert type(load_accountant(PrivacyAccountant(1.0).to_state())) is PrivacyAccountant  # weighted: unchanged
    with pytest.raises(InvalidAccountantState):
        load_accountant({**state, "split": "nope"})
    with pytest.raises(InvalidAccountantState):
        load_accountant({**state, "reserve": 1.0})
    with pytest.raises(ValueError, match="all-deletions privacy_unit only"):
        make_accountant("per-request", 1.0, split="planned", planned=5)
    with pytest.raises(ValueError, match="deletion capacity"):
        make_accountant("all-deletions", 1.0, split="planned")
    with pytest.raises(ConfigError):
        PassiveOLU(dim=2, budget_split="planned")
    with pytest.raises(ConfigError):
        PassiveOLU(dim=2, budget_split="even", deletion_capacity=3)
    assert capacity_for_rate(0.01, 1000) == 10 and capacity_for_rate(0.0101, 1000) == 11
