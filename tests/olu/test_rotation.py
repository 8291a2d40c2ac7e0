"""Warm-standby rotation (docs/accounting.md 12): schedule, budgets, charges, state, replay."""

import math

import numpy as np
import pytest
from scipy import stats

from tests.olu.helpers import synthetic_stream
from worker.olu import ActiveD2D, MemoryPair, PassiveOLU, load_model, record_key
from worker.olu.exceptions import ConfigError, InvalidState
from worker.olu.privacy.analysis.rdp import noise_multiplier, rdp_to_dp
from worker.olu.rotation import Rotation, model_budget, planned_capacity

KW = dict(dim=4, loss="logistic", l2=0.05, radius=1e3, feature_bound=1.0)


def rotation(variant="overlap", E=100, seed=0, cls=PassiveOLU, **extra):
    return Rotation(cls, lifetime_events=E, variant=variant, noise_rng=np.random.default_rng(seed),
                    **{**KW, "rho": 1.0, **extra})


def same_state(a, b):
    sa, sb = a.export_state(), b.export_state()
    assert sa["meta"] == sb["meta"]
    assert sa["arrays"].keys() == sb["arrays"].keys() and sa["shared"].keys() == sb["shared"].keys()
    for k in sa["arrays"]:
        assert np.asarray(sa["arrays"][k]).tobytes() == np.asarray(sb["arrays"][k]).tobytes(), k


@pytest.mark.parametrize("variant", ["overlap", "disjoint"])
def test_rotation_points_are_a_function_of_the_event_count_whatever_the_batching(variant):
    ids, X, y = synthetic_stream(530, 4, seed=1)
    one, many = rotation(variant), rotation(variant)
    for j in range(len(ids)):
        one.learn_one(ids[j], X[j], y[j])
    cuts = np.sort(np.random.default_rng(3).choice(np.arange(1, 530), 40, replace=False))
    for a, b in zip([0, *cuts], [*cuts, 530]):
        many.learn_many(ids[a:b], X[a:b], y[a:b])
    same_state(one, many)
    # H = 50: generation g >= 1 born at 50 g; at 530 the active is generation 9, born at 450
    assert (many.generation, many.rotations, many.model_age, many.standby.t if variant == "overlap" else 0) == (
        9, 9, 80, 30 if variant == "overlap" else 0)
    assert many.standby is not None and many.events == 530


def test_promotion_happens_at_the_exact_row():
    ids, X, y = synthetic_stream(200, 4, seed=2)
    r = rotation(E=100)
    r.learn_many(ids[:49], X[:49], y[:49])
    assert r.standby is None and r.generation == 0
    r.learn_many(ids[49:50], X[49:50], y[49:50])
    assert r.standby is not None and r.standby.t == 0 and r.active.t == 50
    r.learn_many(ids[50:100], X[50:100], y[50:100])
    # at 100 the standby (50 rows) is promoted; the new standby is fresh, at the origin
    assert (r.generation, r.active.t, r.standby.t) == (1, 50, 0)
    assert not r.standby.z.any()


@pytest.mark.parametrize("variant", ["overlap", "disjoint"])
def test_each_model_has_half_the_budget_under_all_deletions(variant):
    r = rotation(variant, target_epsilon=1.0, rho=None)
    target = r.rho
    assert math.isclose(target, 0.030557, rel_tol=1e-4)
    ids, X, y = synthetic_stream(80, 4, seed=3)
    r.learn_many(ids, X, y)
    for m in r.models:
        assert m.accountant.budget == target / 2
    d = r.unlearn_one(ids[60])  # held by both (overlap) or by one (disjoint)
    assert math.isclose(d.sigma, d.shift * noise_multiplier(1, target / 2), rel_tol=1e-12)
    p = r.privacy()
    assert p["eps_rdp_slope"] == sum(m.accountant.spent for m in r.models) <= target
    assert p["epsilon"] == rdp_to_dp(p["eps_rdp_slope"], 1e-5) <= 1.0


@pytest.mark.parametrize("variant", ["overlap", "disjoint"])
def test_the_reported_slope_keeps_the_retired_generation_across_promotions(variant):
    """Subscribers saw the retired generation's post-deletion releases: its spend stays in the
    figure (the worst pair of consecutive generations, docs/accounting.md 12.2), never dropping."""
    ids, X, y = synthetic_stream(420, 4, seed=8)
    r = rotation(variant, E=100, target_epsilon=1.0, rho=None)
    reported, current, spends = [], [], {}
    for j in range(len(ids)):
        r.learn_one(ids[j], X[j], y[j])
        if j % 7 == 3:
            r.unlearn_one(ids[j - 2])
        for g, m in ((r.generation, r.active), (r.generation + 1, r.standby)):
            if m is not None:
                spends[g] = m.accountant.spent
        reported.append(r.privacy()["eps_rdp_slope"])
        current.append(sum(m.accountant.spent for m in r.models))
        pairs = [spends[g] + spends.get(g + 1, 0.0) for g in spends]
        assert reported[-1] == pytest.approx(max(pairs), rel=1e-12, abs=0)  # the worst pair so far
    assert r.rotations >= 6 and all(b >= a for a, b in zip(reported, reported[1:]))  # never drops
    assert reported[-1] <= r.rho * (1 + 1e-9)  # each model has rho / 2
    # the two current models' sum (the figure before) falls at promotions: this stream tests it
    assert any(b < a for a, b in zip(current, current[1:]))
    back = load_model(r.export_state())
    assert back.privacy()["eps_rdp_slope"] == reported[-1]


def test_a_record_is_charged_in_every_model_that_holds_it_and_nowhere_else():
    ids, X, y = synthetic_stream(80, 4, seed=4)
    r = rotation("overlap")
    r.learn_many(ids, X, y)  # the standby was born at 50
    old, new = ids[10], ids[70]
    d = r.unlearn_one(old)
    assert d.outcome == "noised"
    assert (r.active.accountant.deletions, r.standby.accountant.deletions) == (1, 0)  # the standby never saw it
    r.unlearn_one(new)
    assert (r.active.accountant.deletions, r.standby.accountant.deletions) == (2, 1)
    assert [e["u"] for e in r.standby.ledger] == [[21]]  # its own step: row 71, the 21st after its birth
    assert r.deletions_applied == 2 and r.privacy()["requests"] == 2
    # both keep the tombstone: a later insert of a deleted id is skipped by both
    assert r.learn_many([new], X[:1], y[:1]) == 0


def test_a_promotion_never_ships_a_deleted_record_without_its_noise():
    ids, X, y = synthetic_stream(100, 4, seed=5)
    r = rotation("overlap")
    r.learn_many(ids[:90], X[:90], y[:90])
    r.unlearn_one(ids[80])
    noised = r.standby.z.copy()
    assert r.standby.ledger[-1]["sigma"] > 0
    r.learn_many(ids[90:], X[90:], y[90:])  # promotion at 100
    assert r.generation == 1
    assert not r.active.index.holds(record_key(ids[80]))
    assert r.active.ledger[-1]["u"] == [31]  # the deletion's noise is in the released model's ledger
    assert not np.array_equal(noised, r.active.z)  # it has trained on since, from the noised state


def test_disjoint_routes_by_key_and_keeps_a_request_in_one_model_under_per_request():
    ids, X, y = synthetic_stream(200, 4, seed=6)
    r = rotation("disjoint", privacy_unit="per-request", rho=0.4)
    r.learn_many(ids[:120], X[:120], y[:120])  # generation 1 active since 100, generation 2 standby
    assert all(m.accountant.budget == 0.4 for m in r.models)
    for rid in ids[100:120]:
        k = record_key(rid)
        holder = r.standby if (k & 1) == (r.generation + 1) & 1 else r.active
        other = r.active if holder is r.standby else r.standby
        assert holder.index.holds(k) and not other.index.holds(k)  # by the key, never alternating
    same = [rid for rid in ids[100:120] if record_key(rid) & 1 == record_key(ids[100]) & 1][:3]
    before = [m.accountant.deletions for m in r.models]
    d = r.unlearn_request(same)
    charged = [m.accountant.deletions - b for m, b in zip(r.models, before)]
    assert sorted(charged) == [0, 1] and d.records == 3  # the request stayed in one model
    assert math.isclose(d.sigma, d.shift / math.sqrt(0.8), rel_tol=1e-12)  # charged rho there
    mixed = [rid for rid in ids[100:120] if rid not in same]
    both = [next(i for i in mixed if record_key(i) & 1 == b) for b in (0, 1)]
    d = r.unlearn_request(both)
    entries = [m.ledger[-1] for m in r.models]
    for e in entries:  # held by both: half the slope in each, rho in all
        assert e["share"] == 0.5 and math.isclose(e["sigma"], e["shift"] / math.sqrt(0.4), rel_tol=1e-12)


def test_overlap_halves_the_per_request_slope():
    r = rotation("overlap", privacy_unit="per-request", rho=0.4)
    assert model_budget("per-request", "overlap", 0.4) == 0.2 == r.active.accountant.budget


@pytest.mark.parametrize("variant", ["overlap", "disjoint"])
def test_export_restore_round_trips_bit_exactly_across_a_promotion(variant):
    ids, X, y = synthetic_stream(260, 4, seed=7)
    r = rotation(variant, budget_split="planned", deletion_capacity=5)
    r.learn_many(ids[:140], X[:140], y[:140])
    r.unlearn_one(ids[130])
    restored = load_model(r.export_state(), noise_rng=np.random.default_rng(0))
    assert isinstance(restored, Rotation)
    same_state(r, restored)
    for m in (r, restored):
        m.learn_many(ids[140:], X[140:], y[140:])  # through the promotions at 150, 200, 250
    same_state(r, restored)
    assert restored.generation == 4 and restored.privacy()["split"] == "planned"


def test_a_replayed_deletion_adopts_both_stored_iterates():
    ids, X, y = synthetic_stream(120, 4, seed=8)
    r = rotation("overlap", seed=1)
    r.learn_many(ids[:90], X[:90], y[:90])
    saved = r.export_state()
    r.unlearn_one(ids[70])
    durable = r.deletion_state()
    replay = load_model(saved, noise_rng=np.random.default_rng(99))  # other noise: must not be used
    replay.unlearn_one(ids[70], post_state=durable)
    same_state(r, replay)
    with pytest.raises(InvalidState):
        load_model(saved).unlearn_one(ids[70], post_state={**durable, "events": 1})


def test_the_per_model_noise_has_the_half_budget_sigma_statistically():
    """300 draws x 4 coordinates of one deletion's noise in the active model: the sigma of rho/2.
    The sigma of the full rho (what a rotation that forgot to halve would draw) fails the test."""
    ids, X, y = synthetic_stream(90, 4, seed=9)
    base = rotation("overlap", rho=0.5)
    base.learn_many(ids, X, y)
    state = base.export_state()
    draws, shift = [], None
    for seed in range(300):
        r = load_model(state, noise_rng=np.random.default_rng(seed))
        before = r.weights
        d = r.unlearn_one(ids[80])
        draws.append(r.weights - before)
        shift = d.shift
    q = float(np.sum(np.square(draws)))
    n = len(draws) * 4
    for rho, fits in ((0.25, True), (0.5, False)):
        s = shift * noise_multiplier(1, rho)
        p = stats.chi2.sf(q / s ** 2, n)
        assert bool(5e-7 < p < 1 - 5e-7) is fits, (rho, p)


def test_active_algorithms_rotate_and_the_others_refuse():
    ids, X, y = synthetic_stream(160, 4, seed=10)
    r = rotation("overlap", cls=ActiveD2D, max_deletions=50)
    r.learn_many(ids, X, y)
    assert r.unlearn_one(ids[120]).changed_model and r.generation == 2
    same_state(r, load_model(r.export_state()))
    with pytest.raises(ConfigError, match="does not rotate"):
        rotation(cls=MemoryPair)
    with pytest.raises(ConfigError):
        rotation(E=1)
    with pytest.raises(ConfigError):
        rotation("sideways")


def test_planned_capacity_per_model():
    assert planned_capacity(0.01, 200_000, "overlap") == 2000
    assert planned_capacity(0.01, 200_000, "disjoint") == 1000


def test_planned_capacity_counts_only_records_the_model_holds():
    """With the deletion age, a model younger than it is charged only for requests naming records
    inserted since its birth: rate E^2 / (2 age) up to the age, rate (E - age/2) beyond."""
    from worker.olu.rotation import charged_deletions

    assert charged_deletions(0.01, 20_000, None) == 200
    assert charged_deletions(0.01, 20_000, 100_000) == 20
    assert charged_deletions(0.01, 400_000, 100_000) == 3500
    assert planned_capacity(0.01, 20_000, "overlap", age=100_000) == 20
    assert planned_capacity(0.01, 20_000, "disjoint", age=100_000) == 10
    assert planned_capacity(0.001, 2_000, "overlap", age=100_000) == 1  # at least one
    assert planned_capacity(0.01, 200_000, "overlap", age=None) == 2000  # unchanged without an age


def test_a_short_lifetime_is_charged_about_its_planned_capacity():
    """The engine agrees with charged_deletions: requests naming records older than both models
    are not_applied there and charge nothing (docs/accounting.md 12.2)."""
    from worker.olu.rotation import charged_deletions

    rate, age, E, n = 0.01, 20_000, 4_000, 60_000
    rng = np.random.default_rng(3)
    r = Rotation(PassiveOLU, lifetime_events=E, dim=2, rho=1.0, budget_split="planned",
                 deletion_capacity=planned_capacity(rate, E, "overlap", age=age), noise_rng=rng)
    every = round(1 / rate)
    for i in range(n):
        r.learn_one(f"r{i}", [0.6, 0.8] if i % 2 else [0.8, -0.6], 1 if i % 2 else -1)
        if (i + 1) % every == 0:
            r.unlearn_request([f"r{int(rng.integers(max(0, i + 1 - age), i + 1))}"])
    # the retiring models' charges: each about rate E^2 / (2 age) = 4 over its whole life
    lives = [s["deletions"] for s in r.retired[1:]]
    assert lives and abs(np.mean(lives) - charged_deletions(rate, E, age)) < 1.5
