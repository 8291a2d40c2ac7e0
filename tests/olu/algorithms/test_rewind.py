"""Rewind-to-Delete (docs/calibration.md 6.2, docs/algorithms.md 10.2, docs/algorithms.md 10.4, docs/accounting.md 4): calibration, routes, state, replay."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from scipy.stats import norm

from tests.olu.helpers import masked_run, synthetic_stream
from worker.olu import ALGORITHMS, load_model
from worker.olu.algorithms.passive import PassiveOLU
from worker.olu.algorithms.rewind import RewindToDelete
from worker.olu.exceptions import ConfigError, InvalidState
from worker.olu.privacy.analysis import rewind as r2d

DIM = 3
RADIUS = 10.0  # the iterates stay far inside: the projection is inactive, released = pre-noise + noise


# --------------------------------------------------------------------------- docs/calibration.md 6.2 by hand
def direct_sigma(K, *, n, m, T, eta, L, G, eps, delta):
    """Theorem 3.1's boxed sigma with plain floats (no log space), for small T."""
    a = eta * L * n / (n - m)
    h = ((1 + a) ** (T - K) - 1) * (1 + eta * L) ** K
    return 2 * m * G * h * math.sqrt(2 * math.log(1.25 / delta)) / (L * n * eps)


HAND = dict(n=1000, m=1, T=50, eta=0.1, L=1.0, G=1.0, eps=1.0, delta=1e-5)


def _kw(p):
    return dict(n=p["n"], m=p["m"], T=p["T"], eta=p["eta"], smooth=p["L"], grad_bound=p["G"])


def test_boxed_sigma_matches_theorem_3_1_by_hand():
    # K = 47: a = 0.1 * 1000/999, h = ((1+a)^3 - 1) * 1.1^47, sigma = 2 h sqrt(2 ln 125000)/1000
    a = 0.1 * 1000 / 999
    h = ((1 + a) ** 3 - 1) * 1.1 ** 47
    expected = 2 * h * math.sqrt(2 * math.log(125000)) / 1000
    assert r2d.noise_sigma(47, eps=1.0, delta=1e-5, **_kw(HAND)) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.28318, rel=1e-4)
    for K in (0, 10, 25, 49):
        assert r2d.noise_sigma(K, eps=1.0, delta=1e-5, **_kw(HAND)) == pytest.approx(direct_sigma(K, **HAND), rel=1e-10)
    assert r2d.noise_sigma(50, eps=1.0, delta=1e-5, **_kw(HAND)) == 0.0  # h(T) = 0: a noiseless retrain


@pytest.mark.parametrize("sigma,K", [(0.05, 50), (0.3, 47), (1.0, 29), (3.0, 0)])
def test_rewind_depth_is_the_smallest_K_whose_sigma_fits(sigma, K):
    p = HAND
    assert r2d.rewind_depth(sigma, eps=1.0, delta=1e-5, **_kw(p)) == K
    assert direct_sigma(K, **p) <= sigma
    if K > 0:
        assert direct_sigma(K - 1, **p) > sigma
    # Corollary 3.2 (closed form) is sufficient, i.e. never below the exact K; here it is tight
    assert r2d.rewind_depth_bound(sigma, eps=1.0, delta=1e-5, **_kw(p)) == K


def test_corollary_3_2_bounds_the_exact_search_from_above():
    rng = np.random.default_rng(3)
    for _ in range(200):
        p = dict(n=int(rng.integers(50, 5000)), T=int(rng.integers(1, 80)), eta=float(rng.uniform(0.001, 0.5)),
                 L=float(rng.uniform(0.1, 2.0)), G=float(rng.uniform(0.1, 3.0)), eps=float(rng.uniform(0.05, 1.0)),
                 delta=1e-5)
        p["m"] = int(rng.integers(1, max(2, p["n"] // 20)))
        sigma = float(np.exp(rng.uniform(-6, 2)))
        exact = r2d.rewind_depth(sigma, eps=p["eps"], delta=p["delta"], **_kw(p))
        scan = next(K for K in range(p["T"] + 1) if direct_sigma(K, **p) <= sigma * (1 + 1e-12))
        assert abs(exact - scan) <= (1 if abs(direct_sigma(scan, **p) - sigma) < 1e-9 * sigma else 0)
        assert r2d.rewind_depth_bound(sigma, eps=p["eps"], delta=p["delta"], **_kw(p)) >= exact


def test_edge_cases_of_the_search():
    kw = _kw(HAND)
    assert r2d.rewind_depth(0.0, eps=1.0, delta=1e-5, **kw) == 50  # no noise: full retrain
    assert r2d.rewind_depth(1e9, eps=1.0, delta=1e-5, **kw) == 0  # output perturbation suffices
    assert r2d.rewind_depth(0.1, eps=1.0, delta=1e-5, **(kw | {"m": 0})) == 0
    # (1 + a)^T overflows a float here; the log-space search still answers (docs/calibration.md 6.2)
    big = dict(n=10_000, m=5, T=100_000, eta=0.5, smooth=1.0, grad_bound=1.0)
    assert r2d.rewind_depth(0.1, eps=1.0, delta=1e-5, **big) > 99_900
    assert math.isinf(r2d.sensitivity(0, **big))
    with pytest.raises(ValueError):
        r2d.rewind_depth(0.1, eps=1.0, delta=1e-5, **(kw | {"m": 1000}))


def test_gaussian_mechanisms():
    c = math.sqrt(2 * math.log(1.25 / 1e-5))
    assert r2d.max_ratio(0.5, 1e-5) == pytest.approx(0.5 / c)  # auto = classic for eps <= 1
    for eps in (0.5, 1.0, 4.0, 40.0):  # Balle-Wang: delta(r*) == delta, checked with scipy
        r = r2d.max_ratio(eps, 1e-5, "analytic")
        got = norm.cdf(r / 2 - eps / r) - math.exp(eps) * norm.cdf(-r / 2 - eps / r)
        assert got == pytest.approx(1e-5, rel=1e-6)
        assert r2d.epsilon_for_ratio(r, 1e-5) == pytest.approx(eps, rel=1e-9)
    assert r2d.max_ratio(4.0, 1e-5) == r2d.max_ratio(4.0, 1e-5, "analytic")  # auto above 1
    assert r2d.max_ratio(1.0, 1e-5, "analytic") > r2d.max_ratio(1.0, 1e-5, "classic")


def test_epsilon_spent_grows_with_m_and_capacity_is_its_inverse():
    kw = dict(n=2000, T=40, eta=0.05, smooth=1.0, grad_bound=1.0)
    sigma, K = 0.02, 30
    eps = [r2d.epsilon_spent(sigma, K, delta=1e-5, m=m, **kw) for m in range(0, 30)]
    assert eps[0] == 0.0 and all(b > a for a, b in zip(eps, eps[1:]))
    cap = r2d.deletion_capacity(sigma, K, eps=1.0, delta=1e-5, **kw)
    assert 0 < cap < 29
    assert eps[cap] <= 1.0 < eps[cap + 1]


# --------------------------------------------------------------------------- the model
def gd(z, X, y, lam, eta, steps, radius):
    """Projected full-batch GD on the regularised average logistic loss, written out."""
    z = np.array(z, np.float64)
    for _ in range(steps):
        margin = y * (X @ z)
        grad = -(X.T @ (y / (1.0 + np.exp(margin)))) / len(y) + lam * z
        z = z - eta * grad
        nrm = np.linalg.norm(z)
        if nrm > radius:
            z *= radius / nrm
    return z


def make(**kw):
    base = dict(dim=DIM, l2=0.05, radius=RADIUS, retrain_every=200, train_steps=30, noise_sigma=1.0,
                max_deletions=3, target_epsilon=1.0, delta=1e-5)
    return RewindToDelete(**(base | kw))


def fed(n=260, seed=0, **kw):
    ids, X, y = synthetic_stream(n, DIM, seed=seed)
    m = make(**kw)
    assert m.learn_many(ids, X, y) == n
    return m, ids, X, y


def same_state(a, b):
    sa, sb = a.export_state(), b.export_state()
    assert orjson.dumps(sa["meta"]) == orjson.dumps(sb["meta"])
    assert set(sa["arrays"]) == set(sb["arrays"])
    for k, v in sa["arrays"].items():
        assert v.dtype == sb["arrays"][k].dtype and v.tobytes() == sb["arrays"][k].tobytes(), k


def no_noise(model):
    model._noise = lambda sigma, d=model.dim: np.zeros(d)
    return model


def test_registered_and_validates_its_settings():
    assert ALGORITHMS["rewind"] is RewindToDelete
    for bad in (dict(retrain_every=0), dict(train_steps=0), dict(noise_sigma=-1.0), dict(max_deletions=0),
                dict(train_step=100.0), dict(noise_at_fit="yes"), dict(capacity=5)):
        with pytest.raises(ConfigError):
            make(**bad)


def test_retrains_every_retrain_every_steps_with_the_A3_depth():
    m, ids, X, y = fed(n=450)
    assert m.counters["fits"] == 2 and m.t_fit == m.t_base == 400 and m.fit["n"] == 400
    lam, beta, L = 0.05, m.constants.beta, m.constants.L
    eta = min(1 / (2 * beta), 2 / (beta * 30))
    assert m.eta_gd == pytest.approx(eta)
    K = r2d.rewind_depth(1.0, eps=1.0, delta=1e-5, n=400, m=3, T=30, eta=eta, smooth=beta, grad_bound=L)
    assert m.fit["K"] == K and 0 < K < 30
    theta_cp = gd(np.zeros(DIM), X[:400], y[:400], lam, eta, 30 - K, RADIUS)
    np.testing.assert_allclose(m.checkpoint, theta_cp, rtol=0, atol=1e-12)  # theta_{T-K} (docs/algorithms.md 10.4)
    # the model is theta_T, then OGD over the 50 online rows
    expected = masked_run(RewindToDelete, dict(dim=DIM, l2=lam, radius=RADIUS), X, y, skip=set())
    assert not np.allclose(m.z, expected)  # the retraining really replaced the OGD iterate
    p = m.privacy()
    assert p["rewind_depth"] == K and p["rewind_fraction"] == K / 30 and p["epsilon"] == 0.0
    assert p["deletions_capacity_left"] == m.fit["m"] == 3 <= m.fit["a3_capacity"]


def test_learn_many_equals_learn_one_across_retrain_boundaries():
    ids, X, y = synthetic_stream(430, DIM, seed=4)
    one = make()
    for i, x, t in zip(ids, X, y):
        one.learn_one(i, x, t)
    many = make()
    for chunk in (slice(0, 137), slice(137, 390), slice(390, 430)):
        many.learn_many(ids[chunk], X[chunk], y[chunk])
    same_state(one, many)
    assert one.counters["fits"] == 2


def test_rewind_pre_noise_model_is_K_steps_from_the_checkpoint_without_the_record():
    m, ids, X, y = fed(n=200)  # exactly one retraining, no online rows
    K, eta = m.fit["K"], m.eta_gd
    checkpoint = m.checkpoint.copy()
    victim = 17
    twin = no_noise(load_model(m.export_state()))
    d = twin.unlearn_one(ids[victim])
    keep = np.arange(200) != victim
    expected = gd(checkpoint, X[keep], y[keep], 0.05, eta, K, RADIUS)  # Algorithm 2 on D' = D \ {z}
    np.testing.assert_allclose(twin.z, expected, rtol=0, atol=1e-12)
    assert d.outcome == "noised" and twin.ledger[-1]["route"] == "rewind" and twin.ledger[-1]["K"] == K
    # |theta''_K - theta'_T| <= Delta(K, 1) (Lemmas B.2 + B.3): the retrain without the record from theta_0
    retrained = gd(np.zeros(DIM), X[keep], y[keep], 0.05, eta, 30, RADIUS)
    assert np.linalg.norm(twin.z - retrained) <= d.shift
    assert d.shift == pytest.approx(r2d.sensitivity(K, n=200, m=1, T=30, eta=eta, smooth=m.constants.beta,
                                                    grad_bound=m.constants.L))


def test_with_K_equal_T_a_rewind_is_the_retrain_without_the_record():
    m, ids, X, y = fed(n=200, noise_sigma=0.0)
    assert m.fit["K"] == 30
    d = m.unlearn_one(ids[3])
    keep = np.arange(200) != 3
    np.testing.assert_allclose(m.z, gd(np.zeros(DIM), X[keep], y[keep], 0.05, m.eta_gd, 30, RADIUS), rtol=0,
                               atol=1e-12)
    assert d.outcome == "exact" and d.sigma == 0.0


def test_deleted_record_leaves_the_retained_set_and_the_next_checkpoint():
    m, ids, X, y = fed(n=200)
    victim = 42
    row = X[victim].tobytes()
    m.unlearn_one(ids[victim])
    arrays = m.export_state()["arrays"]
    assert all(row not in np.asarray(v).tobytes() for v in arrays.values())
    assert not any(row in np.asarray(b).tobytes() for b in m.examples.raw_buffers())  # zeroed at once
    assert len(m.examples) == 199 and m.m_cum == 1
    # the checkpoint of the generation still descends from D (docs/algorithms.md 10.2, docs/algorithms.md 10.4) until
    # the next retraining...
    ids2, X2, y2 = synthetic_stream(200, DIM, seed=9)
    m.learn_many([f"n-{i}" for i in range(200)], X2, y2)
    assert m.counters["fits"] == 2 and m.m_cum == 0
    keep = np.arange(200) != victim
    Xr, yr = np.vstack([X[keep], X2]), np.concatenate([y[keep], y2])
    # ...which trains on the retained rows only
    expected = gd(np.zeros(DIM), Xr, yr, 0.05, m.eta_gd, 30 - m.fit["K"], RADIUS)
    np.testing.assert_allclose(m.checkpoint, expected, rtol=0, atol=1e-12)


def test_online_record_is_replayed_away_exactly():
    # before any retraining: the replay from base = 0 is the masked OGD run (docs/guarantee.md 2.2)
    ids, X, y = synthetic_stream(150, DIM, seed=2)
    m = make()
    m.learn_many(ids, X, y)
    d = m.unlearn_one(ids[30])
    assert d.outcome == "exact" and d.sigma == 0.0 and m.ledger[-1]["route"] == "replay"
    expected = masked_run(RewindToDelete, dict(dim=DIM, l2=0.05, radius=RADIUS), X, y, skip={31})
    np.testing.assert_allclose(m.z, expected, rtol=0, atol=1e-12)
    assert m.privacy()["epsilon"] == 0.0 and m.accountant.lifetime_deletions == 1


def test_online_record_after_a_retraining_replays_from_theta_T():
    m, ids, X, y = fed(n=260)
    base = m.base.copy()
    d = m.unlearn_one(ids[230])
    assert m.ledger[-1]["route"] == "replay" and d.outcome == "exact"
    ref = PassiveOLU(dim=DIM, l2=0.05, radius=RADIUS)  # the same OGD schedule, no retraining
    ref.z = base
    for j in range(200, 260):
        if j != 230:
            ref.t = j  # keep the original step index (the deleted step is the identity)
            ref._learn(j + 1, X[j], float(y[j]))
    np.testing.assert_allclose(m.z, ref.z, rtol=0, atol=1e-12)


def test_rewind_replays_online_rows_and_baked_rows_then_refit():
    m, ids, X, y = fed(n=260)
    twin = no_noise(load_model(m.export_state()))
    twin.unlearn_one(ids[10])
    assert twin.ledger[-1]["route"] == "rewind" and twin.t_base == 260 and np.array_equal(twin.base, twin.z)
    # Algorithm 2's output, then OGD over the 60 online rows at their own steps
    keep = np.arange(200) != 10
    theta = gd(twin.checkpoint, X[:200][keep], y[:200][keep], 0.05, twin.eta_gd, twin.fit["K"], RADIUS)
    ref = PassiveOLU(dim=DIM, l2=0.05, radius=RADIUS)
    ref.z, ref.t = theta, 200
    for j in range(200, 260):
        ref._learn(j + 1, X[j], float(y[j]))
    np.testing.assert_allclose(twin.z, ref.z, rtol=0, atol=1e-12)
    # an online row applied before that rewind is now baked into base: an immediate retraining
    gen = twin.generation
    d = twin.unlearn_one(ids[220])
    assert d.outcome == "exact" and twin.ledger[-1]["route"] == "refit" and twin.ledger[-1]["reason"] == "baked"
    assert twin.generation == gen + 1 and twin.fit["n"] == 258 and twin.m_cum == 0
    assert twin.t_fit == twin.t == 260


def test_capacity_exhaustion_retrains_and_privacy_tracks_m_cum():
    m, ids, X, y = fed(n=200, max_deletions=2)
    cap = m.fit["m"]
    assert cap == 2 and m.fit["a3_capacity"] >= 2
    eps_seen = []
    for j in range(cap):
        d = m.unlearn_one(ids[j])
        assert d.outcome == "noised" and d.sigma == 1.0
        p = m.privacy()
        eps_seen.append(p["epsilon"])
        assert p["deletions_capacity_left"] == cap - j - 1
        assert p["eps_rdp_slope"] == pytest.approx(0.5 * d.shift ** 2)
        assert p["budget_used"] == pytest.approx(p["epsilon"] / 1.0)
    assert all(b > a for a, b in zip(eps_seen, eps_seen[1:])) and eps_seen[-1] <= 1.0
    d = m.unlearn_one(ids[cap])  # one more than the noise covers: docs/calibration.md 6.2, retrain at once
    assert d.outcome == "retrained" and d.changed_model and m.epoch == 1
    assert m.ledger[-1]["route"] == "refit" and m.ledger[-1]["reason"] == "capacity"
    assert m.privacy()["epsilon"] == 0.0 and m.fit["n"] == 200 - cap - 1
    assert [e["i"] for e in m.ledger] == list(range(1, cap + 2)) and m.accountant.lifetime_deletions == cap + 1


def test_released_noise_is_gaussian_with_the_calibrated_sigma():
    m, ids, X, y = fed(n=200)
    state = m.export_state()
    pre = no_noise(load_model(state))
    pre.unlearn_one(ids[5])
    rng = np.random.default_rng(11)
    samples = []
    for _ in range(300):
        copy = load_model(state, noise_rng=rng)
        copy.unlearn_one(ids[5])
        samples.append(copy.z - pre.z)
    noise = np.array(samples).ravel()
    assert abs(noise.mean()) < 4 * 1.0 / math.sqrt(len(noise))
    assert noise.std() == pytest.approx(1.0, rel=0.1)


def test_duplicate_and_unknown_deletions_change_nothing():
    m, ids, X, y = fed(n=200)
    m.unlearn_one(ids[0])
    before = m.export_state()
    assert m.unlearn_one(ids[0]).outcome == "duplicate" and m.unlearn_one("never").outcome == "not_applied"
    assert before["arrays"]["z"].tobytes() == m.z.tobytes() and m.accountant.lifetime_deletions == 1
    assert not m.learn_one(ids[0], X[0], y[0])  # an insert after its delete is skipped


@pytest.mark.parametrize("loss", ["logistic", "ridge"])
def test_export_import_round_trip_is_bit_exact_at_every_stage(loss):
    ids, X, y = synthetic_stream(470, DIM, seed=5, loss=loss)
    m = make(loss=loss, label_bound=1.0)
    stages = []
    m.learn_many(ids[:150], X[:150], y[:150])  # no generation yet
    stages.append(m.export_state())
    m.learn_many(ids[150:260], X[150:260], y[150:260])
    stages.append(m.export_state())
    m.unlearn_one(ids[3])  # rewind
    m.unlearn_one(ids[250])  # refit (baked)
    m.learn_many(ids[260:430], X[260:430], y[260:430])
    m.unlearn_one(ids[425])  # replay
    stages.append(m.export_state())
    for state in stages:
        again = load_model(state)
        assert type(again) is RewindToDelete
        same_state(again, load_model(again.export_state()))
        assert orjson.dumps(again.export_state()["meta"]) == orjson.dumps(state["meta"])
    # a restored model continues exactly like the original
    restored = load_model(m.export_state())
    for model in (m, restored):
        model.learn_many(ids[430:], X[430:], y[430:])
        no_noise(model).unlearn_one(ids[300])
    same_state(m, restored)


def test_import_rejects_inconsistent_state():
    m, ids, X, y = fed(n=260)
    state = m.export_state()
    bad = orjson.loads(orjson.dumps(state["meta"]))
    bad["extra"]["t_fit"] = 300
    with pytest.raises(InvalidState):
        load_model({"meta": bad, "arrays": state["arrays"]})
    bad = orjson.loads(orjson.dumps(state["meta"]))
    bad["extra"]["m_cum"] = 2  # no rows missing from the generation
    with pytest.raises(InvalidState):
        load_model({"meta": bad, "arrays": state["arrays"]})
    arrays = dict(state["arrays"], rewind_checkpoint=np.full(DIM, np.nan))
    with pytest.raises(InvalidState):
        load_model({"meta": state["meta"], "arrays": arrays})


@pytest.mark.parametrize("route", ["rewind", "replay", "refit-baked", "refit-capacity", "noise-at-fit"])
def test_replay_with_post_state_adopts_the_stored_iterate_and_draws_no_noise(route):
    ids, X, y = synthetic_stream(1100, DIM, seed=6)
    kw = {"refit-capacity": {"max_deletions": 1}, "noise-at-fit": {"noise_at_fit": True}}.get(route, {})
    first = make(noise_rng=np.random.default_rng(1), **kw)
    first.learn_many(ids[:260], X[:260], y[:260])
    if route in ("refit-baked", "refit-capacity", "noise-at-fit"):
        first.unlearn_one(ids[5])  # a rewind first: row 240 is now baked, the capacity 1 used up
    victim = {"rewind": 10, "replay": 230, "refit-baked": 240, "refit-capacity": 20, "noise-at-fit": 240}[route]
    before = first.export_state()
    d1 = first.unlearn_one(ids[victim])
    assert d1.changed_model and first.ledger[-1]["route"] == route.split("-")[0].replace("noise", "refit")
    assert d1.outcome == {"rewind": "noised", "refit-capacity": "retrained"}.get(route, "exact")
    post = first.deletion_state()

    replayed = load_model(before)
    replayed._entropy = lambda: (_ for _ in ()).throw(AssertionError("fresh noise drawn during a replay"))
    d2 = replayed.unlearn_one(ids[victim], post_state=post)
    assert (d2.outcome, d2.index, d2.sigma, d2.shift) == (d1.outcome, d1.index, d1.sigma, d1.shift)
    same_state(first, replayed)  # the iterate, the segment start and every counter
    for model in (first, replayed):  # later steps and exact replays continue identically
        model.learn_many(ids[260:300], X[260:300], y[260:300])
        model.unlearn_one(ids[290])
    same_state(first, replayed)


def test_noise_at_fit_publishes_the_noised_theta_T():
    m = make(noise_at_fit=True, noise_rng=np.random.default_rng(0))
    plain = make()
    ids, X, y = synthetic_stream(200, DIM, seed=8)
    m.learn_many(ids, X, y)
    plain.learn_many(ids, X, y)
    np.testing.assert_array_equal(m.checkpoint, plain.checkpoint)  # the trajectory is noiseless
    assert 0.1 < np.linalg.norm(m.z - plain.z) / (1.0 * math.sqrt(DIM)) < 3


def test_worker_settings_reach_the_model():
    from worker.config import ConfigError as SettingsError
    from worker.config import load_settings

    env = {"OLU_KAFKA_BOOTSTRAP_SERVERS": "k:9092", "OLU_DIM": "3", "OLU_ALGORITHM": "rewind",
           "OLU_RETRAIN_EVERY": "50", "OLU_TRAIN_STEPS": "40", "OLU_NOISE_SIGMA": "0.2", "OLU_MAX_DELETIONS": "4"}
    s = load_settings([], env, command="run")
    m = ALGORITHMS[s.algorithm](**s.model_kwargs())
    assert (m.retrain_every, m.train_steps, m.noise_sigma, m.config["max_deletions"]) == (50, 40, 0.2, 4)
    with pytest.raises(SettingsError, match="OLU_NOISE_SIGMA"):
        load_settings([], env | {"OLU_NOISE_SIGMA": "-1"}, command="run")
