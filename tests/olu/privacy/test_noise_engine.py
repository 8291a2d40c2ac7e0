"""The noise predictions against the real engine: 200 seeded runs of PassiveOLU on one stream with
one set of deletions, only the noise seed varying; the measured value is the per-coordinate std of
the final released parameters across seeds, pooled over coordinates (sqrt of the mean variance).

What the predictions are, and where they are exact (derivation in
worker/olu/privacy/analysis/noise.py): ``release_noise_std`` of the run's own ledger, and the
planner ``predicted_noise_std`` of the same plan (they agree to rounding here), are the variance sum
``sum_i Gamma_{tau_i,T}**2 sigma_i**2`` with the schedule's contraction gamma_r = 1 - eta_r lambda.

* Ridge with the projection inactive: the release is affine in the noises, ``sum_i A_i xi_i`` with
  ``A_i = prod (I - eta_r (x_r x_r^T + lambda I))``, and the prediction is exact for components no
  later feature moves; for features of mean square norm s**2 in d dimensions each term is over
  by about ``Gamma**(-2 s**2 / (d lambda))``. With ``||x|| <= 0.5``, d = 10, lambda = 1 that is
  s**2 / (d lambda) = 0.025: a few percent, and the prediction is within 10% (the test).
* Ridge with features of norm 0.01: exact (to 1e-4), which pins the indices (the noise of a
  deletion at step tau is contracted by the steps tau + 1 .. t, not tau .. t or tau + 2 .. t).
* Logistic: the prediction is an upper bound only (the data's curvature contracts the noise
  faster than lambda alone); the test checks the bound and the measured pessimism.
"""

import math

import numpy as np
import pytest

from tests.olu.helpers import PlannedCalibration, synthetic_stream
from worker.olu import PassiveOLU
from worker.olu.privacy.analysis.noise import plan_deletions, predicted_noise_std, release_noise_std
from worker.olu.privacy.analysis.units import per_request_sigma
from worker.olu.privacy.analysis.zcdp import gaussian_sigma

SEEDS = range(200)


def install(model, unit, split, rho, k):
    if unit == "per-request":
        model.accountant = PlannedCalibration(lambda j, a: per_request_sigma([a], rho))
    elif split == "even":
        model.accountant = PlannedCalibration(lambda j, a: gaussian_sigma(a, rho / k))
    # all-deletions weighted: the engine's own accountant, eps = rho


def measure(*, loss, dim, l2, rho, events, rate, unit, split=None, x_scale=1.0, seeds=SEEDS):
    """Run the engine once per seed on the plan; return (measured std, ledger std, planned std,
    largest post-noise norm / radius)."""
    steps, taus = plan_deletions(events, rate)
    ids, X, y = synthetic_stream(steps, dim, seed=3, loss=loss)
    X = X * x_scale
    pick = np.random.default_rng(11)  # which earlier record each deletion names: public, fixed
    victims, used = [], set()
    for tau in taus:
        u = int(pick.integers(1, tau + 1))
        while u in used:
            u = int(pick.integers(1, tau + 1))
        used.add(u)
        victims.append(ids[u - 1])
    finals, largest, model = [], 0.0, None
    for seed in seeds:
        model = PassiveOLU(dim=dim, loss=loss, l2=l2, radius=10.0, feature_bound=1.0, rho=rho,
                           noise_rng=np.random.default_rng(seed))
        install(model, unit, split, rho, len(taus))
        start = 0
        for tau, victim in zip(taus, victims):
            model.learn_many(ids[start:tau], X[start:tau], y[start:tau])
            start = tau
            assert model.unlearn_one(victim).outcome == "noised"
            largest = max(largest, float(np.linalg.norm(model.z)) / model.ball.radius)
        model.learn_many(ids[start:], X[start:], y[start:])
        finals.append(model.weights)
    measured = math.sqrt(np.var(np.array(finals), axis=0, ddof=1).mean())
    ledger = release_noise_std(model.ledger, model.schedule, model.t, epoch=model.epoch)
    c = model.constants
    planned = predicted_noise_std(unit=unit, split=split, L=c.L, mu=c.mu, t0=model.schedule.t0, rho=rho,
                                  deletion_rate=rate, events=events, diameter=model.ball.diameter)
    return measured, ledger, planned, largest


RIDGE = dict(loss="ridge", dim=10, l2=1.0, rho=2.0, events=2000, rate=0.01, x_scale=0.5)


@pytest.mark.slow
@pytest.mark.parametrize("unit,split,halve", [
    ("per-request", None, False), ("all-deletions", "weighted", False), ("all-deletions", "even", False),
    ("per-request", None, True),
])
def test_ridge_prediction_within_ten_percent_of_the_engine(unit, split, halve, monkeypatch):
    """20 deletions over 1980 steps, 200 seeds. Measured/predicted: 0.976 (per-request), 0.993
    (weighted: its noise sits on late deletions, barely contracted), 0.976 (even: the per-request
    sigmas times one constant, same seeds, linear dynamics); the sampling error of a pooled std
    over 200 x 10 draws is ~1.6%. With features of norm 1 instead of 0.5 (s**2 / (d lambda) = 0.1)
    per-request measures 0.914: the slack of the bound grows with the data's curvature.
    Drawing half the calibrated sigma (the ledger unchanged) must fail the same check."""
    if halve:
        original = PassiveOLU._noise
        monkeypatch.setattr(PassiveOLU, "_noise", lambda self, sigma: original(self, sigma / 2))
    measured, ledger, planned, largest = measure(unit=unit, split=split, **RIDGE)
    # the projection never acted: after a noise the norm stayed below the radius (a projection
    # would leave it exactly there), and between noises the ridge step keeps
    # ||z|| <= max(||z||, |y| ||x|| / lambda = 0.5) (eta (||x||^2 + 2 lambda) <= 2 here)
    assert largest < 0.9
    assert math.isclose(ledger, planned, rel_tol=1e-9)  # the planner is the ledger's sum on this plan
    accurate = abs(measured / planned - 1) <= 0.10
    assert accurate is (not halve), (measured, planned, measured / planned)
    assert measured <= planned * 1.05  # the bound side, with the sampling error


@pytest.mark.slow
def test_the_indices_against_the_engine_where_the_prediction_is_exact():
    """Features of norm 0.01 make every step's noise map (1 - eta lambda) I to 1e-4: the prediction
    is exact. One deletion at tau = 2, releases at t = 2, 3 and 10 (50 coordinates x 300 seeds:
    ~0.6% sampling error); the neighbouring indices (contraction from tau - 1 or tau + 1) are off by
    29% or more and fail the 4% check."""
    dim, seeds = 50, range(300)
    ids, X, y = synthetic_stream(10, dim, seed=5, loss="ridge")
    X = X * 0.01
    releases = {2: [], 3: [], 10: []}
    model = None
    for seed in seeds:
        model = PassiveOLU(dim=dim, loss="ridge", l2=1.0, radius=10.0, rho=1e3,
                           noise_rng=np.random.default_rng(seed))
        for t in range(1, 11):
            model.learn_one(ids[t - 1], X[t - 1], y[t - 1])
            if t == 2:
                assert model.unlearn_one(ids[0]).outcome == "noised"
            if t in releases:
                releases[t].append(model.weights)
        assert float(np.linalg.norm(model.z)) < 0.5 * model.ball.radius
    (entry,) = list(model.ledger)
    assert entry["tau"] == 2
    s = model.schedule
    for t, rows in releases.items():
        measured = math.sqrt(np.var(np.array(rows), axis=0, ddof=1).mean())
        predicted = release_noise_std(model.ledger, s, t)
        assert abs(measured / predicted - 1) < 0.04, (t, measured, predicted)
        if t > 2:
            for wrong in (entry["tau"] - 1, entry["tau"] + 1):
                off = entry["sigma"] * math.exp(s.log_contraction(wrong, t))
                assert abs(measured / off - 1) > 0.04, (t, wrong, measured, off)


@pytest.mark.slow
def test_logistic_prediction_is_an_upper_bound():
    """Logistic, lambda 0.01 (t0 12.5): the contraction bound ignores the data's curvature
    (p (1 - p) x x^T), so the prediction is pessimistic. Measured/predicted: 0.475 (0.823 with
    lambda 0.1, where lambda is a larger share of the curvature); the bound holds with the
    sampling margin, and it is not absurdly loose (> 0.3)."""
    measured, ledger, planned, largest = measure(loss="logistic", dim=10, l2=0.01, rho=4.0, events=2000,
                                                 rate=0.01, unit="per-request")
    assert largest < 0.9 and math.isclose(ledger, planned, rel_tol=1e-9)
    assert 0.3 < measured / planned <= 1.05, measured / planned
