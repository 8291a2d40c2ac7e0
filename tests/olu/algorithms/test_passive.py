"""Passive OLU: calibration formulas, contraction, indistinguishability, stream cases, state."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

from tests.olu.helpers import masked_run, synthetic_stream, tight_last_deletion
from worker.olu import load_model
from worker.olu.algorithms.passive import PassiveOLU, PassiveRestartOLU
from worker.olu.core.schedules import StronglyConvex
from worker.olu.exceptions import (
    DimensionMismatch,
    InvalidLabel,
    InvalidRecordId,
    NonFiniteInput,
    NormExceeded,
)

BASE = dict(dim=5, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)


def fed(n=300, seed=0, **overrides):
    kw = {**BASE, **overrides}
    ids, X, y = synthetic_stream(n, kw["dim"], seed, kw["loss"])
    m = PassiveOLU(**kw, noise_rng=np.random.default_rng(seed))
    m.learn_many(ids, X, y)
    return m, ids, X, y


# ------------------------------------------------------------------ formula tests (docs/calibration.md 8)
@pytest.mark.parametrize("eps", [0.1, 1.0, 10.0])
def test_sigma_over_shift_is_sqrt_3_i_pow_1_2_over_eps(eps):
    m, ids, _, _ = fed(rho=eps)
    for i, rid in enumerate(ids[:6], start=1):
        d = m.unlearn_one(rid)
        assert d.outcome == "noised" and d.index == i
        assert d.sigma / d.shift == pytest.approx(math.sqrt(3 * i**1.2 / eps), rel=1e-12)


def test_gamma_is_u_over_tau_for_eta_one_over_mu_t():
    s = StronglyConvex(mu=0.5, beta=0.5, t0=0.0)  # eta_t = 1/(mu t) exactly
    assert s.eta(7) == pytest.approx(1 / (0.5 * 7))
    for u, tau in [(50, 500), (1, 10), (999, 1000), (7, 7)]:
        assert math.exp(s.log_contraction(u, tau)) == pytest.approx(u / tau, rel=1e-12)


def test_shifted_schedule_gamma_and_sensitivity():
    m = PassiveOLU(**BASE)
    t0 = m.schedule.t0
    assert t0 == pytest.approx((m.constants.beta / m.constants.mu - 1) / 2)
    assert m.shift([40], 400) == pytest.approx((40 + t0) / (400 + t0) * m.constants.L / (m.constants.mu * (40 + t0)))


def test_paper_schedule_counts_expansive_early_steps():
    # t0 = 0 with beta/mu = 26: steps r < 13.5 are not (1 - 1/r)-contractive; Gamma must include
    # their true factors, which are larger, so the noise can only grow (invariant 7).
    m = PassiveOLU(**BASE, t0=0.0)
    s = m.schedule
    exact = math.fsum(math.log(max(abs(1 - s.eta(r) * s.mu), abs(1 - s.eta(r) * s.beta))) for r in range(3, 101))
    assert s.log_contraction(2, 100) == pytest.approx(exact, rel=1e-12)
    assert s.log_contraction(2, 100) > math.log(2 / 100)


def test_cumulative_budget_stays_below_one():
    m, ids, _, _ = fed(n=400)
    for rid in ids[:200]:
        m.unlearn_one(rid)
    assert m.accountant.deletions == 200
    assert 0 < m.accountant.budget_used < 1
    w = sum((1.2 - 1) / (1.2 * j**1.2) for j in range(1, 201))
    assert m.accountant.budget_used == pytest.approx(w, rel=1e-9)


# ------------------------------------------------------------------ contraction (docs/guarantee.md 3.2)
@pytest.mark.parametrize("loss,l2", [("logistic", 0.01), ("ridge", 0.05), ("logistic", 0.0)])
@pytest.mark.parametrize("seed", range(5))
def test_runs_with_and_without_a_record_stay_within_gamma_delta(loss, l2, seed):
    kw = {**BASE, "loss": loss, "l2": l2, "radius": 2.0}
    ids, X, y = synthetic_stream(400, kw["dim"], seed, loss)
    rng = np.random.default_rng(seed)
    u, tau = sorted(int(v) for v in rng.integers(1, 401, size=2))
    real = masked_run(PassiveOLU, kw, X[:tau], y[:tau], skip=set())
    without = masked_run(PassiveOLU, kw, X[:tau], y[:tau], skip={u})
    model = PassiveOLU(**kw)
    assert np.linalg.norm(real - without) <= model.shift([u], tau) * (1 + 1e-9) + 1e-12


# ------------------------------------------------------------------ indistinguishability
def _tight_deletion_setup():
    """:func:`tests.olu.helpers.tight_last_deletion`, its model as an exported state."""
    kw, ids, base, reference, tightness = tight_last_deletion()
    return kw, ids, base.export_state(), reference, tightness


@pytest.mark.slow
@pytest.mark.parametrize("halve", [None, "calibration", "draw"])
def test_output_after_deletion_matches_retraining_plus_matched_noise(halve, monkeypatch):
    """Over many noise draws, real-run outputs vs retrain-without-the-record + the same noise.

    For Gaussians with equal covariance the Renyi divergence is alpha ||m0 - m1||^2 / (2 s^2);
    the first deletion may spend alpha * eps * w_1 (w_1 = 1/6 at omega = 1.2), i.e.
    ||m0 - m1|| / s <= sqrt(eps / 3). We estimate both sides from samples. Halving sigma, either
    in the calibration or in the draw, must be caught.
    """
    from worker.olu.privacy.accountant import PrivacyAccountant

    kw, ids, state, reference, tightness = _tight_deletion_setup()
    assert tightness > 0.9
    if halve == "calibration":
        calibrated = PrivacyAccountant.sigma_for_next
        monkeypatch.setattr(PrivacyAccountant, "sigma_for_next", lambda self, a: calibrated(self, a) / 2)
    elif halve == "draw":
        original = PassiveOLU._noise
        monkeypatch.setattr(PassiveOLU, "_noise", lambda self, s: original(self, s / 2))
    n = 3000
    real = np.empty((n, 2))
    sigma = None
    for k in range(n):
        m = load_model(state, noise_rng=np.random.default_rng(10_000 + k))
        d = m.unlearn_one(ids[-1])
        real[k], sigma = m.z, d.sigma
    retrained = reference + np.random.default_rng(99).normal(0.0, sigma, size=(n, 2))
    gap = np.linalg.norm(real.mean(0) - retrained.mean(0))
    spread = math.sqrt((real.var(0, ddof=1).mean() + retrained.var(0, ddof=1).mean()) / 2)
    ratio, bound = gap / spread, math.sqrt(kw["rho"] / 3)
    # The construction makes the true gap ~0.95 of the worst case, so the check is near-tight.
    private = bool(ratio <= bound * 1.15 and abs(spread / sigma - 1) < 0.05)
    assert private is (halve is None), (ratio, bound, spread / sigma)


# ------------------------------------------------------------------ stream cases (docs/guarantee.md 1.3)
def test_delete_of_a_record_never_applied_costs_nothing():
    m, *_ = fed()
    z, rho = m.weights, m.accountant.spent
    d = m.unlearn_one("never-seen")
    assert d.outcome == "not_applied" and not d.changed_model
    assert np.array_equal(m.z, z) and m.accountant.spent == rho and m.accountant.deletions == 0


def test_duplicate_delete_is_a_no_op():
    m, ids, _, _ = fed()
    m.unlearn_one(ids[3])
    z, state_i = m.weights, m.accountant.deletions
    assert m.unlearn_one(ids[3]).outcome == "duplicate"
    assert np.array_equal(m.z, z) and m.accountant.deletions == state_i == 1


def test_record_applied_twice_pays_for_both_copies():
    m, ids, X, y = fed(n=50)
    m.learn_one(ids[10], X[10], y[10])  # the same id again at step 51
    d = m.unlearn_one(ids[10])
    assert d.steps == (11, 51)
    assert d.shift == pytest.approx(m.shift([11], 51) + m.shift([51], 51), rel=1e-12)
    assert len(m.index) == 49


def test_several_deletes_at_one_step_get_their_own_noise():
    m, ids, _, _ = fed()
    t = m.t
    results = [m.unlearn_one(r) for r in ids[:3]]
    assert [d.index for d in results] == [1, 2, 3] and m.t == t
    assert len({d.sigma for d in results}) == 3
    assert [e["tau"] for e in m.ledger] == [t, t, t]


def test_insert_after_its_delete_is_skipped_and_counted():
    m, ids, X, y = fed(n=20)
    assert m.unlearn_one("late").outcome == "not_applied"
    z, t = m.weights, m.t
    assert m.learn_one("late", X[0], y[0]) is False
    assert np.array_equal(m.z, z) and m.t == t and m.counters["skipped_deleted"] == 1


# ------------------------------------------------------------------ privacy invariants in the engine
def test_noise_comes_from_fresh_os_entropy_and_is_never_in_state():
    kw = {**BASE}
    ids, X, y = synthetic_stream(100, 5)
    a, b = PassiveOLU(**kw), PassiveOLU(**kw)
    a.learn_many(ids, X, y), b.learn_many(ids, X, y)
    assert np.array_equal(a.z, b.z)  # deterministic between deletions (invariant 3)
    a.unlearn_one(ids[5]), b.unlearn_one(ids[5])
    assert not np.array_equal(a.z, b.z)  # independent OS-entropy draws
    blob = orjson.dumps(a.export_state()["meta"]).lower()
    for word in (b"rng", b"seed", b"noise", b"pre_noise", b"xi"):
        assert word not in blob
    assert set(a.export_state()["arrays"]) == {"z", "tombstones", "applied_tail_keys", "applied_tail_steps"}


def test_production_noise_bits_are_aes_ctr_under_a_fresh_os_entropy_key(monkeypatch):
    """docs/accounting.md 14.1: the bits are cryptographic (not PCG64), each block under its own key."""
    from worker.olu.core import entropy

    keys = []
    real = entropy.os.urandom

    def spy(n):
        keys.append(n)
        return real(n)

    monkeypatch.setattr(entropy.os, "urandom", spy)
    m = PassiveOLU(**BASE)
    gen = m._entropy()
    assert type(gen.bit_generator).__name__ == "AESCounter" and keys == [16]
    source = entropy.OsEntropy()
    first = source.gaussian_rows(entropy.ENTROPY_DRAWS + 1, 3)  # two blocks: two keys
    assert keys == [16, 16, 16] and len({r.tobytes() for r in first}) == len(first)


def test_the_os_entropy_generator_is_renewed_every_64_draws_and_in_a_forked_child(monkeypatch):
    from worker.olu.core import entropy

    m = PassiveOLU(**BASE)
    first = m._entropy()
    assert all(m._entropy() is first for _ in range(entropy.ENTROPY_DRAWS - 1))
    second = m._entropy()  # the 65th draw: a new generator, seeded from OS entropy again
    assert second is not first
    monkeypatch.setattr(entropy.os, "getpid", lambda: -1)  # a forked child must not repeat the parent's noise
    assert m._entropy() is not second


def test_deletion_noise_comes_from_os_entropy_blocks_one_row_each(monkeypatch):
    """Each deletion's noise is its own standard-normal row of a block drawn from a new OS-seeded
    generator, scaled by its sigma; never a row twice, and a forked child draws a new block."""
    from worker.olu.core import entropy

    ids, X, y = synthetic_stream(300, BASE["dim"], 0, BASE["loss"])
    m = PassiveOLU(**BASE)  # no test generator: production's noise source
    m.learn_many(ids, X, y)
    rows = []
    real = entropy.OsEntropy.gaussian

    def spy(self, dim):
        row = real(self, dim)
        rows.append(row.copy())
        return row

    monkeypatch.setattr(entropy.OsEntropy, "gaussian", spy)
    for r in ids[:entropy.ENTROPY_DRAWS + 2]:  # into a second block
        d = m.unlearn_one(r)
        assert d.outcome == "noised" and d.sigma > 0
    noise = np.array(rows)
    assert len(noise) == entropy.ENTROPY_DRAWS + 2 and len({r.tobytes() for r in noise}) == len(noise)
    assert abs(noise.mean()) < 0.2 and 0.8 < noise.std() < 1.2  # N(0, 1) rows, scaled by each sigma
    source = entropy.OsEntropy()
    handed = source.gaussian(3)
    assert not source._rows[0].any() and handed.any()  # a used row is not kept by the source
    assert source._rows[1:].any(axis=1).all() and not np.shares_memory(handed, source._rows)
    pending = source._rows[1:].copy()
    monkeypatch.setattr(entropy.os, "getpid", lambda: -1)  # a forked child must not repeat the parent's rows
    child = source.gaussian(3)
    assert source._row == 1 and not (pending == child).all(axis=1).any()
    assert source._rows[1:].any(axis=1).all()  # a new block, not the parent's rest


def test_noise_rows_for_a_batch_are_rows_of_the_same_source_handed_out_once(monkeypatch):
    """``gaussian_rows`` (a poll batch's deletions in one pass) takes the source's rows, across
    blocks when it needs more than one holds, each once; a forked child draws a new block."""
    from worker.olu.core import entropy

    source = entropy.OsEntropy()
    first = source.gaussian(4)
    rows = source.gaussian_rows(entropy.ENTROPY_DRAWS + 5, 4)  # the rest of one block, then a new one
    assert rows.shape == (entropy.ENTROPY_DRAWS + 5, 4) and source._row == 6
    assert len({r.tobytes() for r in np.vstack([first, rows])}) == entropy.ENTROPY_DRAWS + 6
    assert not source._rows[:6].any() and source._rows[6:].any(axis=1).all()  # handed out once
    assert abs(rows.mean()) < 0.2 and 0.8 < rows.std() < 1.2
    pending = source._rows[6:].copy()
    monkeypatch.setattr(entropy.os, "getpid", lambda: -1)
    child = source.gaussian_rows(2, 4)
    assert source._row == 2 and not any((pending == row).all(axis=1).any() for row in child)


def test_counter_and_ledger_survive_export_import():
    m, ids, _, _ = fed()
    for r in ids[:4]:
        m.unlearn_one(r)
    m2 = load_model(m.export_state())
    assert m2.accountant.deletions == 4 and m2.ledger == m.ledger
    d = m2.unlearn_one(ids[4])
    assert d.index == 5  # the counter did not reset (invariant 4)


# ------------------------------------------------------------------ state round trip
def _json_roundtrip(state):
    meta = orjson.loads(orjson.dumps(state["meta"]))
    arrays = {k: np.frombuffer(v.tobytes(), dtype=v.dtype).reshape(v.shape) for k, v in state["arrays"].items()}
    return {"meta": meta, "arrays": arrays}


@pytest.mark.parametrize("cls,extra", [(PassiveOLU, {}), (PassiveRestartOLU, {"restart_c": 1e6, "max_deletions": 50})])
def test_state_round_trips_bit_exactly_and_continues_identically(cls, extra):
    ids, X, y = synthetic_stream(600, 5, seed=7)
    m = cls(**BASE, **extra, noise_rng=np.random.default_rng(1))
    m.learn_many(ids[:300], X[:300], y[:300])
    for r in ids[:30:3]:
        m.unlearn_one(r)
    state = m.export_state()
    m2 = load_model(_json_roundtrip(state))
    s2 = m2.export_state()
    assert s2["meta"] == state["meta"]
    assert all(np.array_equal(state["arrays"][k], s2["arrays"][k]) for k in state["arrays"])
    m.learn_many(ids[300:], X[300:], y[300:])
    m2.learn_many(ids[300:], X[300:], y[300:])
    assert np.array_equal(m.z, m2.z) and m.t == m2.t


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s["meta"].update(format=99),
        lambda s: s["meta"].update(algorithm="nope"),
        lambda s: s["arrays"].update(z=np.zeros(3)),
        lambda s: s["arrays"].update(z=np.full(5, np.nan)),
        lambda s: s["arrays"].update(z=np.full(5, 100.0)),
        lambda s: s["meta"].update(t=0),
        lambda s: s["meta"].pop("accountant"),
    ],
)
def test_bad_state_is_rejected(mutate):
    from worker.olu.exceptions import InvalidState

    m, *_ = fed(n=30)
    state = m.export_state()
    mutate(state)
    with pytest.raises(InvalidState):
        load_model(state)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "rid,x,y,error",
    [
        ("a", [np.nan, 0, 0, 0, 0], 1, NonFiniteInput),
        ("a", [np.inf, 0, 0, 0, 0], 1, NonFiniteInput),
        ("a", [0.1, 0.1, 0.1, 0.1], 1, DimensionMismatch),
        ("a", [[0.1] * 5], 1, DimensionMismatch),
        ("a", [1.0, 1.0, 0, 0, 0], 1, NormExceeded),
        ("a", [0.1] * 5, float("nan"), InvalidLabel),
        ("a", [0.1] * 5, 0.5, InvalidLabel),
        ("a", [0.1] * 5, "yes", InvalidLabel),
        ("", [0.1] * 5, 1, InvalidRecordId),
        (None, [0.1] * 5, 1, InvalidRecordId),
    ],
)
def test_bad_input_raises_a_typed_error_and_changes_nothing(rid, x, y, error):
    m, *_ = fed(n=30)
    before = m.export_state()
    with pytest.raises(error) as info:
        m.learn_one(rid, x, y)
    assert info.value.reason  # a dead-letter reason code
    after = m.export_state()
    assert after["meta"] == before["meta"]
    assert all(np.array_equal(before["arrays"][k], after["arrays"][k]) for k in before["arrays"])


def test_bad_row_in_a_batch_changes_nothing():
    m, ids, X, y = fed(n=30)
    z, t = m.weights, m.t
    Xb = np.vstack([X[:3], [[np.nan] * 5]])
    with pytest.raises(NonFiniteInput, match="row 3"):
        m.learn_many(["n1", "n2", "n3", "n4"], Xb, [1, 1, 1, 1])
    assert np.array_equal(m.z, z) and m.t == t


def test_clip_policy_rescales_instead_of_rejecting():
    m = PassiveOLU(**{**BASE, "feature_policy": "clip"})
    ref = PassiveOLU(**BASE)
    m.learn_one("a", [3.0, 4.0, 0, 0, 0], 1)
    ref.learn_one("a", [0.6, 0.8, 0, 0, 0], 1)
    np.testing.assert_allclose(m.z, ref.z, rtol=1e-12)


# ------------------------------------------------------------------ restart variant (docs/algorithms.md 3.2)
def test_restart_variant_restarts_on_expensive_deletions_and_resets_the_epoch():
    ids, X, y = synthetic_stream(500, 5, seed=2)
    m = PassiveRestartOLU(**BASE, restart_c=1.0, max_deletions=10, noise_rng=np.random.default_rng(0))
    m.learn_many(ids, X, y)
    assert not m.noise_is_affordable(1, 500)  # an early record deleted late: tau/u^2 = 500
    d = m.unlearn_one(ids[0])
    assert d.outcome == "restarted" and m.epoch == 1 and m.t == 0 and len(m.index) == 0
    assert m.accountant.deletions == 0 and np.linalg.norm(m.z) <= m.ball.radius
    # Records applied before the restart no longer influence the model: free to delete.
    assert m.unlearn_one(ids[1]).outcome == "not_applied"


def test_restart_variant_adds_noise_when_affordable():
    ids, X, y = synthetic_stream(500, 5, seed=2)
    m = PassiveRestartOLU(**BASE, restart_c=1e9, max_deletions=10, noise_rng=np.random.default_rng(0))
    m.learn_many(ids, X, y)
    d = m.unlearn_one(ids[400])
    assert d.outcome == "noised" and m.epoch == 0
    assert d.shift == pytest.approx(m.shift([401], 500))


# ------------------------------------------------------------------ replay of a durable deletion
@pytest.mark.parametrize("cls,extra", [(PassiveOLU, {}), (PassiveRestartOLU, {"restart_c": 1.0, "max_deletions": 5})])
def test_replay_adopts_the_stored_post_noise_state_instead_of_drawing(cls, extra, monkeypatch):
    ids, X, y = synthetic_stream(400, 5, seed=4)
    first = cls(**BASE, **extra)
    first.learn_many(ids[:300], X[:300], y[:300])
    snapshot = first.export_state()
    stored = []
    for r in (ids[250], ids[0]):  # a late record (noise), an early one (restart under the variant)
        assert first.unlearn_one(r).changed_model
        stored.append(first.deletion_state())
    first.learn_many(ids[300:], X[300:], y[300:])

    replay = load_model(snapshot)
    monkeypatch.setattr(np.random, "default_rng", lambda *a: pytest.fail("replay drew fresh noise"))
    if cls is PassiveRestartOLU:
        monkeypatch.setattr(cls, "_random_point", lambda self: np.zeros(self.dim))
    for r, post in zip((ids[250], ids[0]), stored):
        replay.unlearn_one(r, post_state=post)
    replay.learn_many(ids[300:], X[300:], y[300:])
    assert np.array_equal(replay.z, first.z) and replay.ledger == first.ledger


def test_replay_that_diverges_is_refused():
    from worker.olu.exceptions import InvalidState

    m, ids, _, _ = fed(n=50)
    state = m.export_state()
    m.unlearn_one(ids[1])
    post = m.deletion_state()
    other = load_model(state)
    other.learn_one("extra", [0.1] * 5, 1)  # the replayed stream differs
    with pytest.raises(InvalidState, match="diverged"):
        other.unlearn_one(ids[1], post_state=post)
