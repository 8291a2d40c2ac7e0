"""Memory-Pair online L-BFGS learner-unlearner (docs/algorithms.md 9)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.olu.helpers import synthetic_stream
from worker.olu import ALGORITHMS, BudgetExhausted, MemoryPair, PassiveOLU, load_model
from worker.olu.algorithms.memorypair import CurvaturePairs
from worker.olu.exceptions import ConfigError, InvalidState

BASE = dict(dim=4, loss="logistic", l2=0.1, radius=100.0, feature_bound=1.0, rho=1.0, max_deletions=5)


def dense_bfgs_inverse(S, Y, gamma0):
    """The L-BFGS inverse Hessian in matrix form: H <- (I - rho s y^T) H (I - rho y s^T) + rho s s^T."""
    d = S.shape[1]
    H = gamma0 * np.eye(d)
    for s, y in zip(S, Y):
        rho = 1.0 / (y @ s)
        V = np.eye(d) - rho * np.outer(y, s)
        H = V.T @ H @ V + rho * np.outer(s, s)
    return H


def fed(cls=MemoryPair, n=300, seed=0, loss="logistic", **kw):
    ids, X, y = synthetic_stream(n, 4, seed=seed, loss=loss)
    m = cls(**{**BASE, "loss": loss, **kw})
    m.learn_many(ids, X, y)
    return m, ids, X, y


def same_state(a, b) -> bool:
    sa, sb = a.export_state(), b.export_state()
    return sa["meta"] == sb["meta"] and set(sa["arrays"]) == set(sb["arrays"]) and all(
        sa["arrays"][k].dtype == sb["arrays"][k].dtype and sa["arrays"][k].tobytes() == sb["arrays"][k].tobytes()
        for k in sa["arrays"])


# --------------------------------------------------------------------------- configuration
def test_registered_and_options_validated():
    assert ALGORITHMS["memory-pair"] is MemoryPair
    for bad, word in [(dict(l2=0.0), "l2"), (dict(on_budget="ignore"), "on_budget"), (dict(removal="x"), "removal"),
                      (dict(max_deletions=0), "max_deletions"), (dict(lbfgs_memory=0), "lbfgs_memory"),
                      (dict(schedule="convex"), "schedule"), (dict(capacity=7), "capacity")]:
        with pytest.raises(ConfigError, match=word):
            MemoryPair(**{**BASE, **bad})


# --------------------------------------------------------------------------- L-BFGS
def test_two_loop_direction_equals_the_dense_bfgs_inverse_and_satisfies_the_secant():
    rng = np.random.default_rng(1)
    d, lam = 6, 0.05
    Q = rng.normal(size=(d, d))
    A = Q @ Q.T / d + lam * np.eye(d)  # SPD with curvature >= lambda
    pairs = CurvaturePairs(d, memory=4, lam=lam)
    S = rng.normal(size=(7, d))
    for i, s in enumerate(S):
        assert pairs.add(100 + i, i + 1, s, A @ s)
    assert len(pairs) == 4 and pairs.keys.tolist() == [103, 104, 105, 106]  # the oldest aged out
    Sm, Ym = S[3:], S[3:] @ A.T
    H = dense_bfgs_inverse(Sm, Ym, min(Sm[-1] @ Ym[-1] / (Ym[-1] @ Ym[-1]), 1 / lam))
    g = rng.normal(size=d) * 1e-3  # small: the clip ||d|| <= ||g||/lambda stays inactive
    np.testing.assert_allclose(pairs.direction(g), -H @ g, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(-pairs.direction(Ym[-1]), Sm[-1], rtol=1e-9)  # H y_newest = s_newest
    assert pairs.direction(g) @ g < 0  # a descent direction


def test_direction_is_clipped_to_norm_g_over_lambda():
    lam = 0.1
    pairs = CurvaturePairs(2, memory=3, lam=lam)
    # curvature exactly lambda along e1 and a pair that inflates H beyond 1/lambda along e2
    assert pairs.add(1, 1, np.array([1.0, 0.0]), np.array([lam, 0.0]))
    assert pairs.add(2, 2, np.array([1.0, 1.0]), np.array([0.06, 0.06]))
    g = np.array([1.0, -0.3])
    unclipped = dense_bfgs_inverse(pairs.S[:2], pairs.Y[:2], 1 / lam) @ g
    assert np.linalg.norm(unclipped) > np.linalg.norm(g) / lam  # the clip is active here
    d = pairs.direction(g)
    assert np.linalg.norm(d) == pytest.approx(np.linalg.norm(g) / lam, rel=1e-12)
    np.testing.assert_allclose(d / np.linalg.norm(d), -unclipped / np.linalg.norm(unclipped), rtol=1e-12)
    empty = CurvaturePairs(2, memory=3, lam=lam)
    np.testing.assert_allclose(empty.direction(g), -g / lam)  # no curvature yet: H = I / lambda


def test_pairs_without_enough_curvature_are_skipped():
    pairs = CurvaturePairs(2, memory=3, lam=0.1)
    assert not pairs.add(1, 1, np.zeros(2), np.ones(2))  # no move
    assert not pairs.add(1, 1, np.array([1.0, 0.0]), np.array([0.01, 0.0]))  # y.s < lambda/2 ||s||^2
    assert not pairs.add(1, 1, np.array([1.0, 0.0]), np.array([np.nan, 0.0]))
    assert len(pairs) == 0


@pytest.mark.parametrize("loss", ["logistic", "ridge"])
def test_insert_is_algorithm_1_with_projection(loss):
    ids, X, y = synthetic_stream(40, 4, seed=2, loss=loss)
    m = MemoryPair(**{**BASE, "loss": loss, "radius": 2.0})
    z, S, Y = np.zeros(4), [], []
    lam = m.loss.lam
    for t in range(1, 41):
        x, yt = X[t - 1], float(y[t - 1])
        g_old = m.loss.grad(z, x, yt)
        Sm, Ym = np.array(S[-10:]).reshape(-1, 4), np.array(Y[-10:]).reshape(-1, 4)
        gamma0 = min(Sm[-1] @ Ym[-1] / (Ym[-1] @ Ym[-1]), 1 / lam) if len(Sm) else 1 / lam
        d = -dense_bfgs_inverse(Sm, Ym, gamma0) @ g_old
        d *= min(1.0, np.linalg.norm(g_old) / lam / np.linalg.norm(d))
        new = z + min(1.0, 4 / (t + m.schedule.t0)) * d
        new = new * min(1.0, 2.0 / np.linalg.norm(new))  # projection onto the ball of radius 2
        s, yv = new - z, m.loss.grad(new, x, yt) - g_old
        if s @ yv >= 0.5 * lam * (s @ s) > 0:
            S.append(s)
            Y.append(yv)
        z = new
        assert m.learn_one(ids[t - 1], x, yt)
        np.testing.assert_allclose(m.z, z, rtol=1e-8, atol=1e-12)
    assert np.linalg.norm(m.z) <= 2.0 * (1 + 1e-12)
    np.testing.assert_allclose(m.pairs.S[:len(m.pairs)], np.array(S[-10:]), rtol=1e-7, atol=1e-12)


def test_learn_one_and_learn_many_agree_bit_for_bit():
    ids, X, y = synthetic_stream(200, 4, seed=4)
    a, b = MemoryPair(**BASE), MemoryPair(**BASE)
    a.learn_many(ids, X, y)
    for j in range(200):
        b.learn_one(ids[j], X[j], y[j])
    assert same_state(a, b)


@pytest.mark.parametrize("loss,metric,bound", [("logistic", "accuracy", 0.85), ("ridge", "mse", 0.2)])
def test_learns_about_as_well_as_ogd(loss, metric, bound):
    ids, X, y = synthetic_stream(3000, 8, seed=1, loss=loss)
    kw = dict(dim=8, loss=loss, l2=0.01, radius=10.0, rho=1.0)
    scores = []
    for model in (MemoryPair(**kw), PassiveOLU(**kw)):
        model.learn_many(ids[:2500], X[:2500], y[:2500])
        pred = X[2500:] @ model.z
        scores.append(np.mean(np.sign(pred) == y[2500:]) if metric == "accuracy" else np.mean((pred - y[2500:]) ** 2))
    mp, ogd = scores
    assert (mp >= bound and mp >= ogd - 0.03) if metric == "accuracy" else (mp <= bound and mp <= ogd * 1.2)


# --------------------------------------------------------------------------- deletion
def test_a_deleted_records_curvature_pairs_and_features_are_gone():
    m, ids, X, y = fed(n=60, lbfgs_memory=10)
    victim = ids[55]  # among the last tau inserts: its pair is in the memory
    key = int(m.pairs.keys[list(m.pairs.steps[:len(m.pairs)]).index(56)])
    row = list(m.pairs.steps[:len(m.pairs)]).index(56)
    s_bytes, y_bytes = m.pairs.S[row].tobytes(), m.pairs.Y[row].tobytes()
    before = len(m.pairs)
    m.unlearn_one(victim)
    assert len(m.pairs) == before - 1 and key not in m.pairs.keys[:len(m.pairs)].tolist()
    assert 56 not in m.pairs.steps.tolist()
    assert not m.pairs.S[len(m.pairs):].any() and not m.pairs.Y[len(m.pairs):].any()  # vacated rows zeroed
    assert m.ledger[-1]["pairs_purged"] == 1
    state = m.export_state()
    for blob in [m.pairs.S.tobytes(), m.pairs.Y.tobytes(), *[a.tobytes() for a in m.examples.raw_buffers()],
                 *[a.tobytes() for a in state["arrays"].values()]]:
        assert s_bytes not in blob and y_bytes not in blob and X[55].tobytes() not in blob


def test_the_purge_happens_before_the_direction_is_computed(monkeypatch):
    m, ids, X, y = fed(n=30)
    seen = []
    real = CurvaturePairs.direction
    def spy(self, g):
        seen.append(self.steps[:self.n].copy())
        return real(self, g)

    monkeypatch.setattr(CurvaturePairs, "direction", spy)
    m.unlearn_one(ids[29])
    assert seen and 30 not in seen[0].tolist()


def test_noise_is_calibrated_to_the_fixed_sensitivity_not_to_the_data():
    # L = R + lambda r = 1 + 0.1 * 100 = 11; L / lambda = 110 < D = 200: Delta = 110 per copy.
    sigmas = []
    for seed in (1, 2):
        m, ids, X, y = fed(n=100, seed=seed)
        sigmas.append([m.unlearn_one(ids[k]).sigma for k in (3, 90, 40)])
    rho_step = 1.0 / 5
    assert sigmas[0] == sigmas[1] == [pytest.approx(110.0 / math.sqrt(2 * rho_step), rel=1e-12)] * 3
    m, ids, X, y = fed(n=20, radius=5.0)  # L/lambda = 1.5/0.1 = 15 > D = 10: capped at the diameter
    assert m.unlearn_one(ids[0]).shift == pytest.approx(10.0)
    m, _, X, y = fed(n=20)
    m.learn_one("twice", X[0], y[0])
    m.learn_one("twice", X[1], y[1])  # the same id applied twice: two copies, min(2 L/lambda, D)
    assert m.sensitivity_bound(2) == m.unlearn_one("twice").shift == pytest.approx(min(220.0, 200.0))


def test_deletion_is_the_removal_step_plus_the_drawn_noise():
    for removal in ("unit", "inverse-n"):
        m, ids, X, y = fed(n=80, removal=removal, noise_rng=np.random.default_rng(9))
        twin = load_model(m.export_state())
        x, yv = X[10], float(y[10])
        # pre-noise update computed by hand from the twin (pair purge first, then the direction)
        twin.pairs.purge(int(twin.examples.keys[10]))
        d = twin.pairs.direction(twin.loss.grad(twin.z, x, yv))
        scale = 1.0 / 79 if removal == "inverse-n" else 1.0
        z_hat = twin.ball.project(twin.z - scale * d)
        deletion = m.unlearn_one(ids[10])
        noise = np.random.default_rng(9).normal(0.0, deletion.sigma, size=4)
        np.testing.assert_allclose(m.z, m.ball.project(z_hat + noise), rtol=1e-12)
        assert m.accountant.spent == pytest.approx(1.0 / 5, rel=1e-12)  # one rho_step charged


def test_odometer_capacity_and_privacy_report():
    m, ids, X, y = fed(n=50)
    p = m.privacy()
    assert {"eps_rdp_slope", "budget_used", "epsilon", "delta", "deletions_capacity_left"} <= set(p)
    assert p["deletions_capacity_left"] == 5 and p["eps_rdp_slope"] == 0.0 and p["epsilon"] == 0.0
    for k in range(5):
        m.unlearn_one(ids[k])
        p = m.privacy()
        assert p["deletions_capacity_left"] == 4 - k
        assert p["eps_rdp_slope"] == pytest.approx((k + 1) / 5, rel=1e-12)
        rho = p["eps_rdp_slope"]
        assert p["epsilon_zcdp"] == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e5)))
        assert 0 < p["epsilon"] <= p["epsilon_zcdp"]  # the engine's tighter conversion of the same curve
    assert m.privacy()["budget_used"] == pytest.approx(1.0)
    assert m.unlearn_one(ids[0]).outcome == "duplicate" and m.unlearn_one("never").outcome == "not_applied"
    assert m.privacy()["deletions_capacity_left"] == 0  # no-ops cost nothing


def test_refuse_raises_and_leaves_the_model_unchanged():
    m, ids, X, y = fed(n=50, on_budget="refuse", max_deletions=2)
    m.unlearn_one(ids[0])
    m.unlearn_one(ids[1])
    before = m.export_state()
    with pytest.raises(BudgetExhausted, match="on_budget=refuse"):
        m.unlearn_one(ids[2])
    after = m.export_state()
    assert before["meta"] == after["meta"]
    assert all(before["arrays"][k].tobytes() == after["arrays"][k].tobytes() for k in before["arrays"])
    with pytest.raises(BudgetExhausted):  # still refused, not tombstoned as a duplicate
        m.unlearn_one(ids[2])


def test_retrain_starts_a_new_epoch_from_the_retained_data_only():
    def run(deleted_x_seed):
        ids, X, y = synthetic_stream(120, 4, seed=5)
        X = X.copy()
        deleted = [3, 50, 117]
        X[deleted] = np.random.default_rng(deleted_x_seed).normal(size=(3, 4)) * 0.2  # what is forgotten
        m = MemoryPair(**{**BASE, "max_deletions": 2}, noise_rng=np.random.default_rng(deleted_x_seed))
        m.learn_many(ids, X, y)
        out = [m.unlearn_one(ids[k]) for k in deleted]
        return m, out

    a, out_a = run(1)
    b, _ = run(2)
    assert [d.outcome for d in out_a] == ["noised", "noised", "retrained"]
    assert out_a[-1].changed_model and out_a[-1].sigma == 0.0
    assert a.epoch == 1 and a.accountant.deletions == 0 and a.accountant.spent == 0.0
    assert a.accountant.history == ((2, pytest.approx(1.0)),) and a.counters["retrains"] == 1
    assert a.privacy()["deletions_capacity_left"] == 2 and a.ledger[-1]["outcome"] == "retrained"
    assert len(a.examples) == 117 and a.t == 120
    # the deleted records (and the noise of the earlier deletions) left no trace: same state either way
    assert a.z.tobytes() == b.z.tobytes()
    assert a.pairs.S.tobytes() == b.pairs.S.tobytes() and a.pairs.Y.tobytes() == b.pairs.Y.tobytes()
    assert a.grad_sq_sum == b.grad_sq_sum


def test_retrain_with_a_constant_step_equals_a_fresh_model_on_the_retained_examples():
    kw = {**BASE, "schedule": "constant", "step": 0.5, "max_deletions": 1}
    ids, X, y = synthetic_stream(60, 4, seed=6)
    m = MemoryPair(**kw, noise_rng=np.random.default_rng(0))
    m.learn_many(ids, X, y)
    m.unlearn_one(ids[7])
    assert m.unlearn_one(ids[30]).outcome == "retrained"
    keep = [j for j in range(60) if j not in (7, 30)]
    fresh = MemoryPair(**kw)
    fresh.learn_many([ids[j] for j in keep], X[keep], y[keep])
    assert m.z.tobytes() == fresh.z.tobytes()
    assert m.pairs.S[:len(m.pairs)].tobytes() == fresh.pairs.S[:len(fresh.pairs)].tobytes()


# --------------------------------------------------------------------------- state and replay
def test_state_round_trips_bit_exactly_and_continues_identically():
    m, ids, X, y = fed(n=150, max_deletions=2, noise_rng=np.random.default_rng(3))
    for k in (4, 99, 140):  # two noised, then a retrain
        m.unlearn_one(ids[k])
    copy = load_model(m.export_state(), noise_rng=np.random.default_rng(4))
    assert isinstance(copy, MemoryPair) and same_state(m, copy)
    m._noise_rng = np.random.default_rng(4)
    more_ids, X2, y2 = synthetic_stream(50, 4, seed=8)
    more_ids = [f"n-{r}" for r in more_ids]
    for model in (m, copy):
        model.learn_many(more_ids, X2, y2)
        model.unlearn_one(more_ids[10])
        model.unlearn_one(ids[20])
    assert same_state(m, copy)


def test_inconsistent_state_is_rejected():
    m, ids, X, y = fed(n=30)
    state = m.export_state()
    bad = {**state, "arrays": {**state["arrays"], "pairs_steps": state["arrays"]["pairs_steps"] + 1000}}
    with pytest.raises(InvalidState):
        load_model(bad)
    Y = state["arrays"]["pairs_Y"].copy()
    Y[0] = -state["arrays"]["pairs_S"][0]  # negative curvature
    with pytest.raises(InvalidState):
        load_model({**state, "arrays": {**state["arrays"], "pairs_Y": Y}})
    S = np.zeros((11, 4))
    with pytest.raises(InvalidState):
        load_model({**state, "arrays": {**state["arrays"], "pairs_S": S}})


@pytest.mark.parametrize("max_deletions,outcome", [(5, "noised"), (1, "retrained")])
def test_replay_adopts_the_stored_post_noise_state_without_drawing_noise(max_deletions, outcome):
    m, ids, X, y = fed(n=100, max_deletions=max_deletions, noise_rng=np.random.default_rng(11))
    if outcome == "retrained":
        m.unlearn_one(ids[1])
    snapshot = m.export_state()
    deletion = m.unlearn_one(ids[42])
    assert deletion.outcome == outcome
    post = m.deletion_state()

    class NoDraws:
        def normal(self, *a, **k):
            raise AssertionError("a replayed deletion drew fresh noise")

    replica = load_model(snapshot, noise_rng=NoDraws())
    assert replica.unlearn_one(ids[42], post_state=post).outcome == outcome
    assert same_state(m, replica)
    wrong = {**post, "deletions": post["deletions"] + 1}
    with pytest.raises(InvalidState):
        load_model(snapshot, noise_rng=NoDraws()).unlearn_one(ids[42], post_state=wrong)
