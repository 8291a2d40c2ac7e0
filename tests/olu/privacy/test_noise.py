"""Tests of worker.olu.privacy.analysis.noise: the formulas, the indices, and the planner.

The engine measurements (the prediction against the std of 200 seeded runs) are in
test_noise_engine.py.
"""

import math

import numpy as np
import pytest

from tests.olu.helpers import synthetic_stream
from worker.olu import PassiveOLU
from worker.olu.core.schedules import Constant, Convex, StronglyConvex
from worker.olu.privacy.analysis.noise import (
    noise_to_signal,
    plan_deletions,
    predicted_noise_growth,
    predicted_noise_std,
    release_noise_std,
)
from worker.olu.privacy.ledger import Ledger

SCHEDULES = {
    "strongly-convex": StronglyConvex(mu=0.1, beta=1.1),
    "strongly-convex-t0=0": StronglyConvex(mu=0.1, beta=1.1, t0=0.0),  # irregular early steps
    "convex": Convex(diameter=4.0, lipschitz=1.0, beta=1.0),
    "constant": Constant(eta=0.3, mu=0.5, beta=1.5),
}


def brute_force(entries, schedule, t):
    return math.sqrt(math.fsum(math.exp(2 * schedule.log_contraction(e["tau"], t)) * e["sigma"] ** 2
                               for e in entries))


# ---------------------------------------------------------------- release_noise_std
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_release_std_is_the_contracted_sum(name):
    schedule = SCHEDULES[name]
    rng = np.random.default_rng(1)
    taus = sorted(int(v) for v in rng.integers(1, 400, 30))
    entries = [{"tau": tau, "sigma": float(s), "epoch": 0} for tau, s in zip(taus, rng.uniform(0, 2, 30))]
    for t in (taus[-1], taus[-1] + 1, 500, 2000):
        assert math.isclose(release_noise_std(entries, schedule, t), brute_force(entries, schedule, t),
                            rel_tol=1e-12)
    # order of the entries does not matter (a ledger is in order; a caller's list may not be)
    assert release_noise_std(entries[::-1], schedule, 500) == release_noise_std(entries, schedule, 500)


def test_the_indices_noise_after_step_tau_is_contracted_by_steps_tau_plus_1_to_t():
    s = SCHEDULES["strongly-convex-t0=0"]
    entries = [{"tau": 7, "sigma": 2.0}]
    assert release_noise_std(entries, s, 7) == 2.0  # released right after the deletion: undamped
    assert math.isclose(release_noise_std(entries, s, 8), 2.0 * s.gamma(8), rel_tol=1e-14)
    assert math.isclose(release_noise_std(entries, s, 10), 2.0 * s.gamma(8) * s.gamma(9) * s.gamma(10),
                        rel_tol=1e-14)
    # not gamma(7) (the step that applied example tau, before the noise)
    assert not math.isclose(s.gamma(7), s.gamma(8), rel_tol=1e-3)


def test_release_std_on_an_engine_ledger_by_epoch():
    ids, X, y = synthetic_stream(300, 3, seed=4)
    m = PassiveOLU(dim=3, l2=0.1, radius=5.0, rho=1.0, noise_rng=np.random.default_rng(0))
    m.ledger = Ledger(segment_entries=2)  # sealed segments are read like open entries
    m.learn_many(ids[:100], X[:100], y[:100])
    for r in ids[:5]:
        m.unlearn_one(r)
    m.learn_many(ids[100:], X[100:], y[100:])
    entries = list(m.ledger)
    assert len(entries) == 5 and m.ledger.sealed == 2
    value = release_noise_std(m.ledger, m.schedule, m.t, epoch=m.epoch)
    assert math.isclose(value, brute_force(entries, m.schedule, m.t), rel_tol=1e-12) and value > 0
    assert release_noise_std(m.ledger, m.schedule, m.t, epoch=m.epoch + 1) == 0.0
    assert release_noise_std([], m.schedule, m.t) == 0.0


@pytest.mark.parametrize("entries,t,name", [
    ([{"tau": 5, "sigma": 1.0}], 4, r"entries\[0\]\.tau"),
    ([{"tau": 1, "sigma": 1.0}, {"tau": 2, "sigma": -1.0}], 4, r"entries\[1\]\.sigma"),
    ([{"tau": 1, "sigma": math.nan}], 4, r"entries\[0\]\.sigma"),
    ([{"sigma": 1.0}], 4, r"entries\[0\]\.tau"),
    ([{"tau": 1.5, "sigma": 1.0}], 4, r"entries\[0\]\.tau"),
    ([], -1, "t"),
])
def test_release_std_bad_input(entries, t, name):
    with pytest.raises(ValueError, match=name):
        release_noise_std(entries, SCHEDULES["constant"], t)


# ---------------------------------------------------------------- noise_to_signal
def test_noise_to_signal_formula_and_conventions():
    assert noise_to_signal(0.5, 9, 3.0) == 0.5
    assert math.isclose(noise_to_signal(0.01, 100, 0.2), 0.5, rel_tol=1e-15)
    assert noise_to_signal(0.0, 9, 3.0) == 0.0
    assert noise_to_signal(1e-9, 9, 0.0) == math.inf
    assert noise_to_signal(0.0, 9, 0.0) is None
    for args, name in (((-1.0, 3, 1.0), "std"), ((1.0, 0, 1.0), "dim"), ((1.0, 3, -1.0), "weights_norm"),
                       ((1.0, 3, math.nan), "weights_norm"), ((math.inf, 3, 1.0), "std")):
        with pytest.raises(ValueError, match=name):
            noise_to_signal(*args)


# ---------------------------------------------------------------- plan_deletions
def test_plan_places_deletions_uniformly():
    steps, taus = plan_deletions(10_000, 0.02)
    assert steps == 9800 and len(taus) == 200
    gaps = np.diff(taus)
    # midpoints (j - 1/2) * 49, rounded half up: 24.5 -> 25, 73.5 -> 74, ...
    assert taus[:3] == [25, 74, 123] and set(gaps) == {49} and taus[-1] == 9776
    assert plan_deletions(5, 0.0) == (5, [])
    assert plan_deletions(3, 0.4) == (2, [1])  # k = floor(1.2 + 0.5) = 1 deletion, 2 steps
    for args, name in (((0, 0.1), "events"), ((10, 1.0), "deletion_rate"), ((10, -0.1), "deletion_rate"),
                       ((2, 0.75), "deletion_rate")):
        with pytest.raises(ValueError, match=name):
            plan_deletions(*args)


# ---------------------------------------------------------------- predicted_noise_std
BASE = dict(L=2.0, mu=0.5, t0=3.0, deletion_rate=0.01)


def test_closed_forms_under_the_shifted_strongly_convex_schedule():
    """Every deletion costs L / (mu (T + t0)) times its multiplier at the end (module doc)."""
    events, rho = 50_000, 0.7
    steps, taus = plan_deletions(events, 0.01)
    k, unit_cost = len(taus), 2.0 / (0.5 * (steps + 3.0))
    per_request = predicted_noise_std(unit="per-request", rho=rho, events=events, **BASE)
    assert math.isclose(per_request, unit_cost * math.sqrt(k / (2 * rho)), rel_tol=1e-9)
    even = predicted_noise_std(unit="all-deletions", split="even", rho=rho, events=events, capacity=3 * k, **BASE)
    assert math.isclose(even, unit_cost * math.sqrt(k * 3 * k / (2 * rho)), rel_tol=1e-9)
    weighted = predicted_noise_std(unit="all-deletions", rho=rho, events=events, omega=1.5, **BASE)
    assert math.isclose(weighted, unit_cost * math.sqrt(math.fsum(1.5 * j**1.5 / (2 * 0.5 * rho)
                                                                  for j in range(1, k + 1))), rel_tol=1e-9)
    # the even split over the exact k beats the omega split, and per-request beats both
    assert per_request < predicted_noise_std(unit="all-deletions", split="even", rho=rho, events=events, **BASE) \
        < predicted_noise_std(unit="all-deletions", rho=rho, events=events, **BASE)


def test_the_engine_schedule_gives_the_same_prediction_as_t0():
    s = StronglyConvex(mu=0.5, beta=3.0)  # default t0 = 2.5: every step regular
    kw = dict(unit="per-request", L=2.0, rho=1.0, deletion_rate=0.02, events=3000)
    assert math.isclose(predicted_noise_std(schedule=s, **kw), predicted_noise_std(mu=0.5, t0=s.t0, **kw),
                        rel_tol=1e-12)


def test_exact_contraction_counts_irregular_steps_the_cap_and_the_age():
    kw = dict(unit="per-request", L=2.0, rho=1.0, deletion_rate=0.2, events=400)  # tau_1 = 2
    regular = StronglyConvex(mu=0.1, beta=1.1)  # t0 = 5
    paper = StronglyConvex(mu=0.1, beta=1.1, t0=0.0)  # gamma_r = |1 - 11/r| > 1 - 1/r for r < 6
    assert predicted_noise_std(schedule=paper, **kw) != predicted_noise_std(mu=0.1, t0=0.0, **kw)
    # a cap on Delta_u (the diameter) can only lower the prediction
    assert predicted_noise_std(schedule=regular, diameter=1.0, **kw) < predicted_noise_std(schedule=regular, **kw)
    # under a constant step, older records have contracted more: smaller shift, less noise
    const = SCHEDULES["constant"]
    young, old = (predicted_noise_std(schedule=const, age=a, **kw) for a in (0, 5))
    assert math.isclose(old, young * const.gamma(1) ** 5, rel_tol=1e-12)


def test_growth_with_the_stream_length():
    """At a fixed deletion rate: per request ~ T^-1/2, even (K = k) constant, omega = 1.2 ~ T^0.1."""
    kw = dict(L=1.0, mu=0.01, t0=12.5, rho=0.03, deletion_rate=0.01)
    lengths = [10**4, 10**5, 10**6]
    per_request = predicted_noise_growth(lengths, unit="per-request", **kw)
    even = predicted_noise_growth(lengths, unit="all-deletions", split="even", **kw)
    weighted = predicted_noise_growth(lengths, unit="all-deletions", **kw)
    assert list(weighted) == lengths
    for a, b in zip(lengths, lengths[1:]):
        assert math.isclose(per_request[b] / per_request[a], math.sqrt(a / b), rel_tol=0.01)
        assert math.isclose(even[b] / even[a], 1.0, rel_tol=0.01)
        assert math.isclose(weighted[b] / weighted[a], (b / a) ** 0.1, rel_tol=0.01)
    # the asymptotic weighted value (L/mu) sqrt(1.36/rho) p^1.1 T^0.1 at T = 1e6 (p = 1%)
    steps = 10**6 - 10**4
    asymptotic = (1.0 / 0.01) * math.sqrt(3 / 2.2 / 0.03) * (10**4) ** 1.1 / steps
    assert math.isclose(weighted[10**6], asymptotic, rel_tol=0.01)
    # at 1e6 events and 1% deletions the omega split is about 4x the even split
    assert 3.5 < weighted[10**6] / even[10**6] < 4.5


@pytest.mark.parametrize("kwargs,name", [
    (dict(unit="all", split=None), "unit"),
    (dict(unit="per-request", split="even"), "split"),
    (dict(unit="all-deletions", split="uneven"), "split"),
    (dict(unit="all-deletions", split="even", capacity=5), "capacity"),
    (dict(unit="all-deletions", split="even", capacity=0), "capacity"),
    (dict(unit="all-deletions", omega=1.0), "omega"),
    (dict(unit="all-deletions", capacity=50), "capacity applies to the even split"),
    (dict(unit="per-request", capacity=50), "capacity"),
    (dict(unit="per-request", rho=0.0), "rho"),
    (dict(unit="per-request", L=-1.0), "L"),
    (dict(unit="per-request", age=-1), "age"),
    (dict(unit="per-request", diameter=0.0), "diameter"),
    (dict(unit="per-request", t0=None), "schedule, or mu and t0"),
    (dict(unit="per-request", mu=0.0), "mu"),
    (dict(unit="per-request", deletion_rate=2.0), "deletion_rate"),
])
def test_predictor_bad_arguments(kwargs, name):
    plan = dict(L=1.0, mu=0.1, t0=5.0, rho=1.0, deletion_rate=0.01, events=2000)
    plan.update(kwargs)
    with pytest.raises(ValueError, match=name):
        predicted_noise_std(**plan)
