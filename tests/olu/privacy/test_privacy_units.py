"""The privacy units in the engine (docs/accounting.md 8): calibration, charges, requests of several records."""

import math

import numpy as np
import pytest

from tests.olu.helpers import (
    halve_sigma,
    released_law_is_private,
    synthetic_stream,
    tight_last_deletion,
)
from worker.olu import PassiveOLU, load_model, record_key
from worker.olu.exceptions import ConfigError
from worker.olu.privacy.accountant import PerRequestAccountant, PrivacyAccountant
from worker.olu.privacy.analysis.gaussian import gaussian_epsilon
from worker.olu.privacy.analysis.rdp import noise_multiplier, rdp_to_dp, rho_for_epsilon
from worker.olu.privacy.analysis.units import per_request_sigma
from worker.olu.registry import ALGORITHMS

KW = dict(dim=4, loss="logistic", l2=0.05, radius=5.0, feature_bound=1.0)


def fed(n=400, unit="per-request", rho=0.3, seed=0, **extra):
    ids, X, y = synthetic_stream(n, 4, seed=seed)
    m = PassiveOLU(**KW, rho=rho, privacy_unit=unit, noise_rng=np.random.default_rng(seed), **extra)
    m.learn_many(ids, X, y)
    return m, ids


def test_per_request_sigma_is_the_formula_exactly_and_every_request_is_charged_rho_once():
    m, ids = fed(rho=0.3)
    for r in ids[:60:3]:
        before = m.accountant.deletions
        d = m.unlearn_one(r)
        assert d.outcome == "noised" and d.index == before + 1
        assert d.sigma == per_request_sigma([d.shift], 0.3) == d.shift / math.sqrt(0.6)
        assert m.ledger[-1]["rho"] == 0.3  # the slope of this request's guarantee, not a running sum
    p = m.privacy()
    assert (p["unit"], p["rho"], p["requests"], p["budget_used"]) == ("per-request", 0.3, 20, 0.0)
    # constant (the same for the first and the 20th request): the exact curve of mu = sqrt(2 rho)
    assert p["epsilon"] == gaussian_epsilon(math.sqrt(0.6), 1e-5) < rdp_to_dp(0.3, 1e-5)


def test_all_deletions_keeps_the_lifetime_split():
    m, ids = fed(unit="all-deletions", rho=0.3)
    for i, r in enumerate(ids[:10], 1):
        d = m.unlearn_one(r)
        assert d.sigma == d.shift * noise_multiplier(i, 0.3, 1.2)
    assert m.privacy()["unit"] == "all-deletions" and 0 < m.privacy()["budget_used"] < 1


def test_the_same_request_gets_the_same_sigma_whatever_came_before():
    """The per-request proof's premise (docs/accounting.md 8.2), on the engine's own unit."""
    sigmas = []
    for before in (0, 5, 40):
        m, ids = fed(n=300, rho=0.2, seed=2)
        for r in ids[:before]:
            assert m.unlearn_one(r).outcome == "noised"
        d = m.unlearn_request([ids[150], ids[151]])
        assert d.index == before + 1 and d.records == 2
        sigmas.append(d.sigma)
    assert sigmas == [per_request_sigma([m.shift([151, 152], 300)], 0.2)] * 3


@pytest.mark.parametrize("unit", ["per-request", "all-deletions"])
def test_a_request_for_unseen_ids_adds_no_noise_and_charges_nothing(unit):
    m, ids = fed(unit=unit)
    m.unlearn_one(ids[0])
    z, ledger, charged = m.z.copy(), len(m.ledger), m.accountant.deletions
    d = m.unlearn_request(["never-1", "never-2"])
    assert (d.outcome, d.records, d.not_applied, d.sigma) == ("not_applied", 0, ("never-1", "never-2"), 0.0)
    assert np.array_equal(m.z, z) and len(m.ledger) == ledger and m.accountant.deletions == charged
    again = m.unlearn_request([ids[0]])
    assert (again.outcome, again.duplicates) == ("duplicate", (ids[0],))
    assert np.array_equal(m.z, z) and m.accountant.deletions == charged


@pytest.mark.parametrize("unit", ["per-request", "all-deletions"])
@pytest.mark.parametrize("size", [1, 2, 10_000])
def test_a_request_of_several_records_is_one_draw_for_the_summed_shift(unit, size):
    ids, X, y = synthetic_stream(size + 50, 4, seed=size)
    m = PassiveOLU(**KW, rho=0.5, privacy_unit=unit, noise_rng=np.random.default_rng(1))
    m.learn_many(ids, X, y)
    named = list(ids[:size]) + ["unseen-a"]
    draws = []
    original = m._noise
    m._noise = lambda sigma: draws.append(sigma) or original(sigma)
    d = m.unlearn_request(named)
    assert len(draws) == 1 and len(m.ledger) == 1 and m.accountant.deletions == 1
    assert (d.records, d.not_applied, d.outcome) == (size, ("unseen-a",), "noised")
    assert m.deletions_applied == 1  # one request changed the model once
    assert d.shift == m.shift(list(range(1, size + 1)), m.t)  # record j was applied at step j + 1
    multiplier = 1 / math.sqrt(2 * 0.5) if unit == "per-request" else noise_multiplier(1, 0.5, 1.2)
    assert d.sigma == pytest.approx(d.shift * multiplier, rel=1e-15)
    assert all(m.unlearn_one(r).outcome == "duplicate" for r in ids[: min(size, 50)])


def test_a_request_that_fails_leaves_the_model_exactly_as_it_was():
    m, ids = fed(unit="all-deletions", capacity=1)
    m.unlearn_one(ids[0])
    before = m.export_state()
    with pytest.raises(Exception, match="capacity"):
        m.unlearn_request([ids[1], ids[2]])
    after = m.export_state()
    assert np.array_equal(before["arrays"]["z"], after["arrays"]["z"])
    assert after["meta"]["accountant"] == before["meta"]["accountant"]
    assert m.index.pop(record_key(ids[1])) and m.index.pop(record_key(ids[2]))  # both still applied


@pytest.mark.parametrize("bad", [[], ["a", "a"], [1], "abc"])
def test_a_malformed_request_is_refused(bad):
    m, _ = fed()
    with pytest.raises((ValueError, TypeError)):
        m.unlearn_request(bad)


def test_states_keep_the_unit_and_old_states_restore_as_all_deletions():
    m, ids = fed(rho=0.3)
    m.unlearn_request([ids[3], ids[4]])
    back = load_model(m.export_state())
    assert isinstance(back.accountant, PerRequestAccountant) and back.accountant.to_state() == m.accountant.to_state()
    assert back.privacy() == m.privacy()
    old = PassiveOLU(**KW, rho=0.7).export_state()
    old["meta"]["config"] = {k: v for k, v in old["meta"]["config"].items()
                             if k not in ("rho", "target_epsilon", "privacy_unit")} | {"eps": 0.7}
    acc = old["meta"]["accountant"]
    old["meta"]["accountant"] = {"version": 1, "eps": 0.7, **{k: v for k, v in acc.items()
                                                              if k not in ("version", "unit", "budget")}}
    legacy = load_model(old)
    assert type(legacy.accountant) is PrivacyAccountant and legacy.accountant.budget == 0.7
    assert legacy.config["rho"] == 0.7 and legacy.privacy()["unit"] == "all-deletions"


def test_a_target_is_the_exact_inverse_and_survives_a_restore():
    m = PassiveOLU(**KW, target_epsilon=1.0, delta=1e-5)
    assert m.accountant.budget == rho_for_epsilon(1.0, 1e-5)
    assert m.privacy()["target_epsilon"] == 1.0
    back = load_model(m.export_state())
    assert back.accountant.budget == m.accountant.budget and back.target_epsilon == 1.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(eps=1.0), "eps= was removed.*rho=.*target_epsilon="),
    (dict(rho=1.0, target_epsilon=1.0), "not both"),
    (dict(privacy_unit="per-record"), "privacy_unit must be one of"),
    (dict(rho=0.0), "rho"),
    (dict(target_epsilon=-1.0), "epsilon"),
])
def test_bad_privacy_arguments_fail_fast(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        PassiveOLU(**KW, **kwargs)


def test_per_request_is_declared_only_where_its_proof_holds():
    supported = {name for name, cls in ALGORITHMS.items() if "per-request" in cls.privacy_units}
    assert supported == {"passive"}
    for name, cls in ALGORITHMS.items():
        if name not in supported:
            with pytest.raises(ConfigError, match="not available"):
                cls(**{**KW, **cls.example_params}, privacy_unit="per-request")


@pytest.mark.slow
@pytest.mark.parametrize("halve", [None, "calibration", "draw"])
def test_per_request_release_matches_the_masked_run_plus_the_same_noise(halve, monkeypatch):
    """The released law after a request vs the masked reference run + the same noise: for equal
    Gaussians D_alpha = alpha ||m0 - m1||^2 / (2 s^2) <= alpha rho, i.e. ||m0 - m1|| / s <= sqrt(2 rho).
    A last record misclassified along z makes the shift bound nearly attained; halving sigma,
    in the calibration or in the draw, must be caught."""
    rho = 0.5
    _, ids, base, reference, tightness = tight_last_deletion(rho=rho, privacy_unit="per-request")
    assert tightness > 0.9
    halve_sigma(halve, monkeypatch)
    private, figures = released_law_is_private(base.export_state(), [ids[-1]], reference, rho)
    assert private is (halve is None), figures


def test_a_one_by_one_request_that_runs_out_counts_the_records_it_did_delete():
    """Algorithms that unlearn a request's records one after another: when the budget runs out on
    the second record, the first stays deleted (and counted); the second is untouched."""
    from worker.olu.exceptions import BudgetExhausted

    class OneByOne(PassiveOLU):
        algorithm = "test-one-by-one"
        groups_requests = False

    ids, X, y = synthetic_stream(200, 4, seed=5)
    m = OneByOne(**KW, rho=1.0, capacity=1, noise_rng=np.random.default_rng(0))
    m.learn_many(ids, X, y)
    with pytest.raises(BudgetExhausted):
        m.unlearn_request([ids[10], ids[20]])
    assert m.deletions_applied == 1 and m.accountant.deletions == 1
    assert m.unlearn_one(ids[10]).outcome == "duplicate"
    assert m.index.pop(record_key(ids[20]))  # still applied
