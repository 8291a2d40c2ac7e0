"""Tests of the per-request calibration (worker.olu.privacy.analysis.units)."""

import math
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.olu.helpers import PlannedCalibration, masked_run, synthetic_stream
from worker.olu import PassiveOLU
from worker.olu.privacy.analysis.units import per_request_charge, per_request_sigma, request_shift
from worker.olu.privacy.analysis.zcdp import gaussian_rho

shift_lists = st.lists(st.floats(min_value=0.0, max_value=1e6), max_size=20)
rhos = st.floats(min_value=1e-9, max_value=1e6)


@settings(max_examples=300, deadline=None)
@given(shift_lists, rhos)
def test_sigma_is_the_formula_exactly(shifts, rho):
    total = math.fsum(shifts)
    sigma = per_request_sigma(shifts, rho)
    formula = total / math.sqrt(2.0 * rho) if total > 0 else 0.0
    # the formula, floored at the smallest normal float for a positive shift (subnormal quotients)
    assert sigma == (max(formula, sys.float_info.min) if total > 0 else 0.0)
    assert request_shift(shifts) == total
    if total > 0:
        assert per_request_charge(shifts, rho) == rho
        assert gaussian_rho(total, sigma) <= rho * (1 + 1e-12)  # never charges more than rho
    if formula >= sys.float_info.min:
        # what the accountant will charge for (shift, sigma) is rho, up to rounding
        assert math.isclose(gaussian_rho(total, sigma), rho, rel_tol=1e-12)


@pytest.mark.parametrize("shifts", [[], [0.0], [0.0, 0.0, 0.0]])
def test_a_request_that_moves_nothing_adds_no_noise_and_charges_nothing(shifts):
    assert per_request_sigma(shifts, 0.5) == 0.0
    assert per_request_charge(shifts, 0.5) == 0.0


def test_the_same_request_gets_the_same_sigma_whatever_came_before():
    """Request R (record r-150, applied at step 151) at step 300, after 0, 5 or 40 other requests,
    on the engine: with the per-request rule as its calibration R's sigma is the same every time
    (and the formula on public metadata); with the engine's all-deletions split it grows."""
    ids, X, y = synthetic_stream(300, 4, seed=2)
    rho, per_request, all_deletions = 0.2, [], []
    for before in (0, 5, 40):
        for sigmas in (per_request, all_deletions):
            m = PassiveOLU(dim=4, l2=0.05, radius=5.0, rho=1.0, noise_rng=np.random.default_rng(before))
            if sigmas is per_request:
                m.accountant = PlannedCalibration(lambda j, a: per_request_sigma([a], rho))
            m.learn_many(ids, X, y)
            for r in ids[:before]:  # other requests: noise added, deletion index advanced
                assert m.unlearn_one(r).outcome == "noised"
            deletion = m.unlearn_one(ids[150])
            assert deletion.index == before + 1
            sigmas.append(deletion.sigma)
    assert per_request == [per_request_sigma([m.shift([151], 300)], rho)] * 3
    assert all_deletions[0] < all_deletions[1] < all_deletions[2]


def test_a_requests_shift_is_the_sum_of_its_records_shifts():
    ids, X, y = synthetic_stream(200, 3, seed=3)
    m = PassiveOLU(dim=3, l2=0.1, radius=5.0, rho=1.0)
    m.learn_many(ids, X, y)
    steps = [[5], [60, 61], [199]]
    union = m.shift([u for s in steps for u in s], m.t)
    assert math.isclose(request_shift([m.shift(s, m.t) for s in steps]), union, rel_tol=1e-15)


@pytest.mark.parametrize("seed", range(6))
def test_the_coupled_runs_stay_within_the_request_shift(seed):
    """The real run vs the masked reference run without all of the request's records: their
    distance at tau (before any noise) is at most the request's shift (the PAI coupling)."""
    d, kw = 3, dict(dim=3, loss="ridge", l2=0.5, radius=2.0, feature_bound=1.0, rho=1.0)
    ids, X, y = synthetic_stream(120, d, seed=seed, loss="ridge")
    rng = np.random.default_rng(seed)
    masked = sorted(int(u) for u in rng.choice(np.arange(1, 121), size=3, replace=False))
    real = PassiveOLU(**kw)
    real.learn_many(ids, X, y)
    reference = masked_run(PassiveOLU, kw, X, y, skip=set(masked))
    distance = float(np.linalg.norm(real.z - reference))
    shift = request_shift([real.shift([u], real.t) for u in masked])
    assert 0.0 < distance <= shift


@pytest.mark.parametrize("call,name", [
    (lambda: per_request_sigma([0.1], 0.0), "rho"), (lambda: per_request_sigma([0.1], math.inf), "rho"),
    (lambda: per_request_sigma([math.nan], 1.0), r"shifts\[0\]"),
    (lambda: per_request_charge([0.1, -1.0], 1.0), r"shifts\[1\]"),
    (lambda: request_shift([0.1, math.inf]), r"shifts\[1\]"), (lambda: request_shift(["0.1"]), r"shifts\[0\]"),
])
def test_bad_arguments_name_themselves(call, name):
    with pytest.raises(ValueError, match=name):
        call()
