"""Active OLU (ActiveD2D, ActiveAnchor), the Newton ridge variant and the example store.

Formulas are checked against values computed here by hand from docs/calibration.md 4.2, docs/calibration.md 4.3; the
deterministic part of a deletion is checked exactly by re-drawing the seeded test noise.
"""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

from tests.olu.helpers import synthetic_stream
from worker.compiled import jit
from worker.olu import ALGORITHMS, load_model
from worker.olu.algorithms.active import ActiveAnchor, ActiveD2D
from worker.olu.algorithms.baselines import PlainOGD
from worker.olu.algorithms.descent import iterations_for
from worker.olu.algorithms.newton import (
    ExactSums,
    RidgeNewton,
    ball_constrained_quadratic_min,
    quantise,
)
from worker.olu.algorithms.passive import PassiveOLU
from worker.olu.core.examples import ExampleStore
from worker.olu.exceptions import BudgetExhausted, ConfigError, InvalidState

# logistic, R = 1, lam = 0.1, r = 5: L = 1.5, mu = 0.1, beta = 0.35, gamma* = 5/9, D = 10, t0 = 1.25
KW = dict(dim=5, loss="logistic", l2=0.1, radius=5.0, feature_bound=1.0, rho=1.0)
L, MU, BETA, D, T0 = 1.5, 0.1, 0.35, 10.0, 1.25
G = (BETA - MU) / (BETA + MU)
ETA_GD = 2 / (BETA + MU)


def eta(t, t0=T0):
    return 1 / (MU * (t + t0))


def fed(cls, n=200, seed=0, rng_seed=7, learn=None, **kw):
    """A model of ``cls`` fed the first ``learn`` (default n) of n synthetic examples."""
    kw = {**KW, **kw}
    ids, X, y = synthetic_stream(n, kw["dim"], seed, kw["loss"])
    m = cls(**kw, noise_rng=np.random.default_rng(rng_seed))
    k = n if learn is None else learn
    m.learn_many(ids[:k], X[:k], y[:k])
    return m, ids, X, y


def masked_ogd(kw, ids, X, y, skip_steps, n=None):
    """A fresh model fed the masked stream: identity (⊥) steps at ``skip_steps``, time kept."""
    ref = PlainOGD(**{k: v for k, v in kw.items() if k in KW or k in ("t0",)})
    for j in range(len(ids) if n is None else n):
        if j + 1 in skip_steps:
            ref.t += 1
        else:
            ref.learn_one(ids[j], X[j], y[j])
    return ref.z


def redraw(seed, sigma, d):
    """The first noise vector a model with noise_rng=default_rng(seed) draws."""
    return np.random.default_rng(seed).normal(0.0, sigma, size=d)


def logistic_erm(X, y, lam, iters=50):
    """High-accuracy minimiser of the regularised average logistic loss (Newton's method)."""
    z = np.zeros(X.shape[1])
    n = len(y)
    for _ in range(iters):
        m = y * (X @ z)
        p = np.exp(-np.logaddexp(0.0, m))  # sigma(-m)
        g = X.T @ (-y * p) / n + lam * z
        H = (X * (p * (1 - p))[:, None]).T @ X / n + lam * np.eye(len(z))
        z = z - np.linalg.solve(H, g)
    return z


# ---------------------------------------------------------------------------------- registry
def test_algorithms_are_registered_and_validate_their_options():
    assert ALGORITHMS["active-d2d"] is ActiveD2D and ALGORITHMS["active-anchor"] is ActiveAnchor
    assert ALGORITHMS["active-newton"] is RidgeNewton
    with pytest.raises(ConfigError, match="order_fallback"):
        ActiveD2D(dim=2, order_fallback="ignore")
    with pytest.raises(ConfigError, match="max_deletions"):
        ActiveD2D(dim=2, max_deletions=0)
    with pytest.raises(ConfigError, match="strongly convex"):
        ActiveAnchor(dim=2, l2=0.0)
    with pytest.raises(ConfigError, match="'active-newton' does not support loss 'logistic'.*quadratic"):
        RidgeNewton(dim=2, loss="logistic")
    m = ActiveD2D(dim=2, max_deletions=7)
    assert m.accountant.capacity == 7 and m.config["max_deletions"] == 7
    assert ActiveD2D(dim=2, max_deletions=7, capacity=20).accountant.capacity == 20


# ------------------------------------------------------------------------ formulas (3.1, 3.2)
def test_iterations_for_is_the_smallest_sufficient_count():
    for log_ratio in (0.3, 1.0, 7.2, 40.0):
        for g in (0.1, 0.5, 0.99):
            n = iterations_for(log_ratio, g)
            assert g**n <= math.exp(-log_ratio) * (1 + 1e-12)
            assert n == 0 or g ** (n - 1) > math.exp(-log_ratio)
    assert iterations_for(-1.0, 0.5) == 0


def test_d2d_iteration_counts_and_sigma_match_the_hand_computed_values():
    m, ids, X, y = fed(ActiveD2D, n=250, max_deletions=10, learn=200)
    assert m.gamma_star == pytest.approx(5 / 9) and m.eta_gd == pytest.approx(ETA_GD)
    assert m.schedule.t0 == pytest.approx(T0)
    # deletion 1 at tau = 200 of the record applied at u = 200
    i1 = math.ceil(math.log(MU * D * 200 / L) / math.log(1 / G))
    i2 = math.ceil(2.2 * math.log(10) / math.log(1 / G))
    assert (i1, i2) == (9, 9) == m.iterations(200)
    d = m.unlearn_one(ids[199])
    a = G**i2 * 2 * (1 + 1) * L / (MU * 200) + G ** (i1 + i2) * 1.0 * eta(200) * L
    assert d.outcome == "noised" and d.index == 1
    assert d.shift == pytest.approx(a, rel=1e-12)
    assert d.sigma == pytest.approx(a * math.sqrt(1.2 * 1**1.2 / (2 * 0.2 * 1.0)), rel=1e-12)
    e = m.ledger[-1]
    assert (e["I1"], e["I2"], e["order"], e["retained"]) == (9, 9, "ordered", 199)
    # deletion 2 at tau = 250 of the record applied at u = 230: Gamma^OGD = (u + t0)/(tau + t0)
    m.learn_many(ids[200:250], X[200:250], y[200:250])
    d = m.unlearn_one(ids[229])
    i1 = math.ceil(math.log(MU * D * 250 / L) / math.log(1 / G))
    gamma_ogd = (230 + T0) / (250 + T0)
    a = G**i2 * 2 * (2 + 1) * L / (MU * 250) + G ** (i1 + i2) * gamma_ogd * eta(230) * L
    assert d.index == 2 and m.ledger[-1]["I1"] == i1
    assert d.shift == pytest.approx(a, rel=1e-12)
    assert d.sigma == pytest.approx(a * math.sqrt(3 * 2**1.2 / 1.0), rel=1e-12)


def test_anchor_iteration_count_and_sigma_match_the_paper():
    m, ids, X, y = fed(ActiveAnchor, n=200, order_fallback="passive")
    d = m.unlearn_one(ids[199])
    I = math.ceil((1.2 * math.log(1) + 2 * math.log(200) + 2 * math.log(L)) / (2 * math.log(1 / G)))
    assert I == 10 and m.ledger[-1]["I"] == I and m.ledger[-1]["anchor"] == 1
    # [P1] Alg. 2 line 13: sigma^2 = omega i^omega gamma^(2I) L^2 / (2 (omega - 1) eps)
    assert d.sigma**2 == pytest.approx(1.2 * 1**1.2 * G ** (2 * I) * L**2 / (2 * 0.2 * 1.0), rel=1e-12)
    d2 = m.unlearn_one(ids[198])  # u = 199 <= tau[1] = 200: not in arrival order
    assert m.ledger[-1]["order"] == "fallback-passive" and d2.index == 2


def test_anchor_pays_the_exact_shift_when_eta_u_exceeds_one():
    # t0 = 0: eta_2 = 1/(mu 2) = 5, so Delta_2 = min(5 L, D) = 7.5 > L; the paper's L would be too small
    m, ids, X, y = fed(ActiveAnchor, n=2, t0=0.0, order_fallback="passive")
    d = m.unlearn_one(ids[1])
    I = math.ceil((2 * math.log(2) + 2 * math.log(L)) / (2 * math.log(1 / G)))
    assert m.ledger[-1]["anchor"] == 1 and m.ledger[-1]["I"] == I == 2
    assert d.shift == pytest.approx(G**I * min(eta(2, 0.0) * L, D), rel=1e-12)
    assert d.shift > G**I * L


# ----------------------------------------------------------------- deterministic part, exactly
def test_d2d_output_is_the_descent_on_the_retained_average_loss_plus_the_drawn_noise():
    m, ids, X, y = fed(ActiveD2D, n=150, max_deletions=5, rng_seed=11)
    z0 = m.weights
    d = m.unlearn_one(ids[149])
    iters = sum(m.iterations(150))
    Xr, yr = X[:149], y[:149]
    z = z0
    for _ in range(iters):  # GD on (1/n) sum f, step 2/(beta + mu), projected
        g = Xr.T @ (-yr * np.exp(-np.logaddexp(0.0, yr * (Xr @ z)))) / 149 + MU * z
        z = m.ball.project(z - ETA_GD * g)
    expected = m.ball.project(z + redraw(11, d.sigma, 5))
    np.testing.assert_allclose(m.z, expected, rtol=0, atol=1e-12)


def test_anchor_output_is_I_steps_on_the_anchor_plus_the_drawn_noise():
    m, ids, X, y = fed(ActiveAnchor, n=120, rng_seed=5)
    z = m.weights
    d = m.unlearn_one(ids[100])
    I = m.ledger[-1]["I"]
    assert m.ledger[-1]["anchor"] == 1 and I > 0
    for _ in range(I):
        z = m.ball.project(z - ETA_GD * m.loss.grad(z, X[0], float(y[0])))
    assert np.array_equal(m.z, m.ball.project(z + redraw(5, d.sigma, 5)))


def test_d2d_is_much_closer_to_the_retrained_erm_than_passive_before_noise():
    """Descent-to-delete targets the retrained solution, argmin of the retained average loss
    (docs/algorithms.md 5); sigma is made negligible (eps huge) so the outputs are the pre-noise maps."""
    kw = dict(KW, rho=1e12)
    ids, X, y = synthetic_stream(2000, 5, seed=4)
    active, passive = ActiveD2D(**kw, max_deletions=10, noise_rng=np.random.default_rng(0)), \
        PassiveOLU(**kw, noise_rng=np.random.default_rng(0))
    for m in (active, passive):
        m.learn_many(ids, X, y)
    da, dp = active.unlearn_one(ids[-1]), passive.unlearn_one(ids[-1])
    erm = logistic_erm(X[:-1], y[:-1], MU)
    assert np.linalg.norm(erm) < KW["radius"]
    gap_active, gap_passive = np.linalg.norm(active.z - erm), np.linalg.norm(passive.z - erm)
    assert gap_active < 1e-3 * gap_passive, (gap_active, gap_passive)
    assert gap_passive > 1e-3  # the OGD iterate is genuinely away from the retrained solution
    # and, at the same deletion number, the active noise is much smaller than passive's
    assert da.index == dp.index == 1 and da.sigma < 0.1 * dp.sigma


# ------------------------------------------------------------------------ arrival-order fallback
@pytest.mark.parametrize("cls", [ActiveD2D, ActiveAnchor])
def test_fallback_triggers_exactly_when_the_order_condition_fails(cls):
    m, ids, X, y = fed(cls, n=200, learn=100, order_fallback="retrain")
    assert m.unlearn_one(ids[49]).outcome == "noised"  # u = 50 > tau[0] = 0
    assert m.ledger[-1]["order"] == "ordered"
    m.learn_many(ids[100:150], X[100:150], y[100:150])
    assert m.unlearn_one(ids[100]).outcome == "noised"  # u = 101 > tau[1] = 100 (strict)
    assert m.counters["order_fallbacks"] == 0
    assert m.unlearn_one(ids[149]).outcome == "exact"  # u = 150 <= tau[2] = 150: same-step delete
    assert m.ledger[-1]["order"] == "fallback-retrain" and m.counters["order_fallbacks"] == 1
    m.learn_many(ids[150:151], X[150:151], y[150:151])
    assert m.unlearn_one(ids[150]).outcome == "noised"  # u = 151 > tau[3] = 150
    assert m.unlearn_one(ids[99]).outcome == "exact"  # u = 100 <= 151: old record
    assert m.counters["order_fallbacks"] == 2 and m.accountant.deletions == 3


@pytest.mark.parametrize("cls", [ActiveD2D, ActiveAnchor])
def test_retrain_fallback_equals_a_fresh_model_on_the_masked_stream(cls):
    m, ids, X, y = fed(cls, n=300, learn=200)
    m.unlearn_one(ids[199])  # ordered, noised
    m.learn_many(ids[200:300], X[200:300], y[200:300])
    d = m.unlearn_one(ids[10])  # old: exact retrain, every noise and descent forgotten
    assert d.outcome == "exact" and d.sigma == 0.0
    assert np.array_equal(m.z, masked_ogd(KW, ids, X, y, {11, 200}))
    # the deleted rows are gone from every store
    for store in (s for s in (getattr(m, "examples", None), getattr(m, "anchors", None)) if s is not None):
        assert not store.has_step(11) and not store.has_step(200)


def test_restart_fallback_starts_a_new_epoch_and_forgets_the_examples():
    m, ids, X, y = fed(ActiveD2D, n=120, learn=100, order_fallback="restart")
    m.unlearn_one(ids[99])
    m.learn_many(ids[100:120], X[100:120], y[100:120])
    d = m.unlearn_one(ids[3])
    assert d.outcome == "restarted" and m.ledger[-1]["outcome"] == "restarted"
    assert m.epoch == 1 and m.t == 0 and len(m.index) == 0 and len(m.examples) == 0
    assert np.array_equal(m.z, np.zeros(5)) and m.accountant.deletions == 0 and m.accountant.epochs == 2
    assert not m.examples.raw_buffers()[0].any()  # zeroed, not just forgotten
    assert m.unlearn_one(ids[50]).outcome == "not_applied"  # consumed before the restart
    m.learn_many(ids[120:], X[120:], y[120:])


def test_d2d_passive_fallback_charges_the_descent_phases_the_record_took_part_in():
    m, ids, X, y = fed(ActiveD2D, n=150, learn=100, order_fallback="passive", max_deletions=10)
    m.unlearn_one(ids[99])  # phase at tau = 100 with I = I1(100) + I2
    I_100 = sum(m.iterations(100))
    m.learn_many(ids[100:150], X[100:150], y[100:150])
    d = m.unlearn_one(ids[9])  # u = 10 took part in that phase
    e = (10 + T0) / (100 + T0) * eta(10) * L
    e = min(D, G**I_100 * e + 2 * L / MU * (1 - G**I_100))
    e *= (100 + T0) / (150 + T0)
    assert d.outcome == "noised" and m.ledger[-1]["order"] == "fallback-passive"
    assert d.shift == pytest.approx(G ** sum(m.iterations(150)) * e, rel=1e-12)
    assert d.index == 2


def test_anchor_passive_fallback_charges_only_phases_that_used_the_record():
    m, ids, X, y = fed(ActiveAnchor, n=150, learn=100, order_fallback="passive")
    m.unlearn_one(ids[99])  # anchor = step 1
    I1 = m.ledger[-1]["I"]
    m.learn_many(ids[100:150], X[100:150], y[100:150])
    # step 3 was retained but not the anchor: only contraction, no discrepancy
    d = m.unlearn_one(ids[2])
    I2 = m.ledger[-1]["I"]
    e = (3 + T0) / (100 + T0) * eta(3) * L * G**I1 * (100 + T0) / (150 + T0)
    assert d.shift == pytest.approx(G**I2 * e, rel=1e-12)
    # step 1, the anchor of both phases: each adds (2L/mu)(1 - gamma^I)
    d = m.unlearn_one(ids[0])
    e = (1 + T0) / (100 + T0) * eta(1) * L
    e = min(D, G**I1 * e + 2 * L / MU * (1 - G**I1)) * (150 + T0) / (150 + T0)
    e = min(D, G**I2 * e + 2 * L / MU * (1 - G**I2))
    I3 = m.ledger[-1]["I"]
    assert d.shift == pytest.approx(G**I3 * e, rel=1e-12)
    assert m.ledger[-1]["anchor"] == 2  # re-selected: the next retained candidate


# ------------------------------------------------------------------------------- anchors
def test_anchor_is_reselected_from_the_public_candidates_when_deleted():
    m, ids, X, y = fed(ActiveAnchor, n=300, learn=200, spare_anchors=3, order_fallback="passive")
    assert m.anchors.steps.tolist() == [1, 2, 3, 4, 8, 16, 32, 64, 128]  # {1..3} and powers of two
    for k in range(3):  # delete the anchors one by one (each is an old record: fallback)
        m.unlearn_one(ids[k])
        assert m.anchor_step() == [2, 3, 4][k]
    assert m.ledger[-1]["anchor"] == 4
    for k in (3, 7, 15, 31, 63, 127):
        m.unlearn_one(ids[k])
    assert m.anchor_step() == 0 and m.ledger[-1]["anchor"] == 0 and m.ledger[-1]["I"] == 0
    m.learn_many(ids[200:300], X[200:300], y[200:300])  # step 256 becomes a candidate
    assert m.anchor_step() == 256
    m.unlearn_one(ids[299])
    assert m.ledger[-1]["anchor"] == 256 and m.ledger[-1]["order"] == "ordered"


def test_anchor_store_keeps_only_the_candidates():
    m, *_ = fed(ActiveAnchor, n=5000, order_fallback="passive")
    assert len(m.anchors) == 4 + 10 and m.examples is None  # 1..4 and 8..4096
    r, *_ = fed(ActiveAnchor, n=50, order_fallback="retrain")
    assert len(r.examples) == 50


# ------------------------------------------------------------------ invariant 6: rows are zeroed
@pytest.mark.parametrize("cls,kw", [(ActiveD2D, {}), (ActiveAnchor, {"order_fallback": "retrain"}),
                                    (RidgeNewton, {"loss": "ridge"})])
def test_deleted_rows_are_zeroed_in_the_buffers_and_absent_from_state(cls, kw):
    m, ids, X, y = fed(cls, n=100, **kw)
    gone = [0, 1, 50, 99]  # the first two are also anchor candidates
    for k in gone:
        m.unlearn_one(ids[k])
    stores = [s for s in (getattr(m, "examples", None), getattr(m, "anchors", None)) if s is not None]
    for store in stores:
        buf = store.raw_buffers()[0].tobytes()
        for k in gone:
            assert X[k].tobytes() not in buf
        assert X[2].tobytes() in buf  # retained rows are really there
    state = m.export_state()
    blob = b"".join(a.tobytes() for a in state["arrays"].values())
    assert all(X[k].tobytes() not in blob for k in gone)


def test_example_store_zeroes_at_once_and_compacts_lazily():
    s = ExampleStore(3)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    s.extend(np.arange(1, 201, dtype=np.uint64), np.arange(1, 201) * 2, X, np.ones(200))
    assert s.remove_steps([4, 6, 400, 401]) == 3 and s.remove_key(100) == 1
    Xb, yb, steps, keys = s.raw_buffers()
    assert not Xb[[1, 2, 99, 199]].any() and not yb[[1, 2, 99, 199]].any() and not keys[[1, 2, 99, 199]].any()
    assert steps[1] == 4  # the public step stays until compaction, the data does not
    assert len(s) == 196 and s._dead == 4  # not compacted yet
    pX, py = s.padded()
    assert pX.shape == (200, 3) and not pX.flags.writeable
    assert s.steps.tolist() == [int(v) for v in np.delete(np.arange(1, 201) * 2, [1, 2, 99, 199])]
    assert s._dead == 0 and not Xb[196:].any() and not keys[196:].any()  # vacated tail zeroed
    assert np.array_equal(s.X, np.delete(X, [1, 2, 99, 199], axis=0))
    with pytest.raises(ValueError):
        s.X[0, 0] = 1.0
    with pytest.raises(ValueError, match="increase"):
        s.append(7, 10, np.zeros(3), 0.0)
    before = s.capacity
    s.extend(np.arange(1000, 1300, dtype=np.uint64), np.arange(1000, 1300), rng.normal(size=(300, 3)), np.ones(300))
    assert s.capacity > before and len(s) == 496 and s.nbytes >= s.capacity * (3 * 8 + 8 + 8 + 8)
    t = ExampleStore.from_arrays(s.to_arrays(), dim=3)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(t.to_arrays().values(), s.to_arrays().values()))
    s.clear()
    assert len(s) == 0 and not s.raw_buffers()[0].any()
    with pytest.raises(ValueError):
        ExampleStore.from_arrays({"X": np.zeros((2, 3)), "y": np.zeros(2), "steps": np.array([2, 1]),
                                  "keys": np.array([1, 2], np.uint64)})


# --------------------------------------------------------------------------------- Newton
RIDGE = dict(dim=5, loss="ridge", l2=0.1, radius=50.0, feature_bound=1.0, label_bound=1.0)


def ridge_solution(X, y, lam):
    n = len(y)
    return np.linalg.solve(X.T @ X / n + lam * np.eye(X.shape[1]), X.T @ y / n)


def grid_stream(n, d, seed):
    """Features and labels on the 2^-20 grid (exactly representable after quantisation)."""
    ids, X, y = synthetic_stream(n, d, seed, "ridge")
    return ids, np.round(X * 2**20) / 2**20 * 0.999, np.round(y * 2**20) / 2**20


@pytest.mark.parametrize("grid", [True, False])
def test_newton_removal_equals_a_from_scratch_solve_on_the_retained_data(grid):
    ids, X, y = grid_stream(400, 5, 1) if grid else synthetic_stream(400, 5, 1, "ridge")
    m = RidgeNewton(**RIDGE)
    m.learn_many(ids, X, y)
    gone = [3, 17, 399, 200]
    for k in gone:
        d = m.unlearn_one(ids[k])
        assert d.outcome == "exact" and d.sigma == 0.0
    keep = np.setdiff1d(np.arange(400), gone)
    w = ridge_solution(X[keep], y[keep], 0.1)
    assert np.linalg.norm(w) < RIDGE["radius"]
    np.testing.assert_allclose(m.z, w, rtol=0, atol=1e-10)
    assert m.accountant.deletions == 0 and m.accountant.spent == 0.0 and len(m.examples) == 396


def test_newton_statistics_after_removal_are_bit_identical_to_never_seeing_the_record():
    ids, X, y = synthetic_stream(300, 5, 2, "ridge")
    m, ref = RidgeNewton(**RIDGE), RidgeNewton(**RIDGE)
    m.learn_many(ids[:150], X[:150], y[:150])
    for j in range(150, 300):  # a different batching: exactness must not depend on it
        m.learn_one(ids[j], X[j], y[j])
    for k in (5, 77, 299):
        m.unlearn_one(ids[k])
    keep = [j for j in range(300) if j not in (5, 77, 299)]
    ref.learn_many([ids[j] for j in keep[::-1]], X[keep[::-1]], y[keep[::-1]])  # any order
    for a, b in ((m.gram, ref.gram), (m.moment, ref.moment)):
        assert np.array_equal(a.hi, b.hi) and np.array_equal(a.lo, b.lo)
    assert np.array_equal(m.erm(), ref.erm())


def test_newton_state_after_deletions_equals_the_reference_process_bit_for_bit():
    """The property the zero-noise rule relies on: the same algorithm run on the masked stream
    (⊥ at deleted steps, re-solved at the same deletion times) produces the same outputs."""
    ids, X, y = synthetic_stream(300, 5, 3, "ridge")
    schedule = {100: [39], 200: [149, 10]}  # tau -> records deleted then (0-based)
    real = RidgeNewton(**RIDGE)
    ref = RidgeNewton(**RIDGE)
    skip = {40, 150, 11}
    for j in range(300):
        real.learn_one(ids[j], X[j], y[j])
        if j + 1 in skip:
            ref.t += 1
        else:
            ref.learn_one(ids[j], X[j], y[j])
        for k in schedule.get(j + 1, []):
            real.unlearn_one(ids[k])
            ref.refit()
        if j + 1 >= 200:  # interval 2: every output equal
            assert np.array_equal(real.z, ref.z)
    assert real.t == ref.t == 300


def test_newton_constrained_solution_satisfies_the_kkt_conditions():
    ids, X, y = synthetic_stream(300, 5, 4, "ridge")
    m = RidgeNewton(**{**RIDGE, "radius": 0.2})
    m.learn_many(ids, X, y)
    m.unlearn_one(ids[0])
    z = m.z
    A, b, n = m.statistics()
    H, c = A / n + 0.1 * np.eye(5), b / n
    g = H @ z - c
    assert np.linalg.norm(z) == pytest.approx(0.2, rel=1e-9)
    nu = -(g @ z) / (z @ z)
    assert nu > 0 and np.linalg.norm(g + nu * z) < 1e-9  # gradient points along -z
    obj = lambda v: 0.5 * v @ H @ v - c @ v  # noqa: E731
    rng = np.random.default_rng(0)
    for _ in range(200):
        v = rng.normal(size=5)
        v *= 0.2 * rng.random() ** 0.2 / np.linalg.norm(v)
        assert obj(z) <= obj(v) + 1e-12
    unconstrained = ball_constrained_quadratic_min(H, c, 1e9)
    np.testing.assert_allclose(unconstrained, np.linalg.solve(H, c), atol=1e-12)


def test_exact_sums_are_exact_for_extreme_values():
    rng = np.random.default_rng(0)
    Q = rng.integers(-(2**31), 2**31 + 1, size=(500, 4)).astype(np.float64)
    Q[:3] = 2.0**31
    s = ExactSums((4, 4))
    s.add_cross(Q, Q)
    exact = [[sum(int(Q[i, a]) * int(Q[i, b]) for i in range(500)) for b in range(4)] for a in range(4)]
    assert s.value().tolist() == exact
    assert quantise(np.array([1.0, -1.0]), 1.0).tolist() == [2.0**31, -(2.0**31)]


# ------------------------------------------------------------------ state round trip
def _json_roundtrip(state):
    meta = orjson.loads(orjson.dumps(state["meta"]))
    arrays = {k: np.frombuffer(v.tobytes(), dtype=v.dtype).reshape(v.shape) for k, v in state["arrays"].items()}
    return {"meta": meta, "arrays": arrays}


CASES = [
    (ActiveD2D, {"max_deletions": 50}),
    (ActiveD2D, {"max_deletions": 50, "order_fallback": "passive"}),
    (ActiveAnchor, {"order_fallback": "passive", "spare_anchors": 2}),
    (ActiveAnchor, {"order_fallback": "retrain"}),
    (RidgeNewton, {"loss": "ridge"}),
]


@pytest.mark.parametrize("cls,kw", CASES)
def test_state_round_trips_bit_exactly_and_continues_identically(cls, kw):
    kw = {**KW, **kw}
    ids, X, y = synthetic_stream(700, 5, seed=9, loss=kw["loss"])
    m = cls(**kw, noise_rng=np.random.default_rng(1))
    m.learn_many(ids[:300], X[:300], y[:300])
    for k in (299, 5, 150):  # one ordered deletion, then two old records
        m.unlearn_one(ids[k])
    m.learn_many(ids[300:400], X[300:400], y[300:400])
    state = m.export_state()
    m2 = load_model(_json_roundtrip(state), noise_rng=np.random.default_rng(2))
    m._noise_rng = np.random.default_rng(2)
    s2 = m2.export_state()
    assert s2["meta"] == state["meta"]
    assert set(s2["arrays"]) == set(state["arrays"])
    for k, a in state["arrays"].items():
        assert a.dtype == s2["arrays"][k].dtype and np.array_equal(a, s2["arrays"][k]), k
    for model in (m, m2):
        model.learn_many(ids[400:600], X[400:600], y[400:600])
        model.unlearn_one(ids[599])
        model.unlearn_one(ids[350])
        model.learn_many(ids[600:], X[600:], y[600:])
    assert np.array_equal(m.z, m2.z) and m.t == m2.t and m.ledger == m2.ledger


def test_inconsistent_retained_examples_are_rejected():
    m, ids, X, y = fed(ActiveD2D, n=50)
    state = m.export_state()
    state["arrays"]["examples_X"] = state["arrays"]["examples_X"][:-1]
    with pytest.raises(InvalidState):
        load_model(state)
    state = m.export_state()
    state["arrays"]["examples_steps"] = state["arrays"]["examples_steps"] + 1
    with pytest.raises(InvalidState):
        load_model(state)


# ------------------------------------------------------------------ budget exhaustion
@pytest.mark.parametrize("cls", [ActiveD2D, ActiveAnchor])
def test_budget_exhausted_leaves_the_model_unchanged(cls):
    m, ids, X, y = fed(cls, n=100, learn=60, max_deletions=2, order_fallback="passive")
    m.unlearn_one(ids[59])
    m.learn_many(ids[60:80], X[60:80], y[60:80])
    m.unlearn_one(ids[79])
    m.learn_many(ids[80:100], X[80:100], y[80:100])
    before = m.export_state()
    stores = [s.raw_buffers()[0].copy() for s in m._stores()]
    for k in (99, 3):  # ordered, and an old record through the passive fallback
        with pytest.raises(BudgetExhausted):
            m.unlearn_one(ids[k])
    after = m.export_state()
    assert after["meta"] == before["meta"]
    assert all(np.array_equal(before["arrays"][k], after["arrays"][k]) for k in before["arrays"])
    assert all(np.array_equal(a, s.raw_buffers()[0]) for a, s in zip(stores, m._stores()))
    with pytest.raises(BudgetExhausted):  # not tombstoned as a duplicate: still refused, not lost
        m.unlearn_one(ids[99])


@pytest.mark.parametrize("cls", [ActiveD2D, ActiveAnchor])
def test_exact_fallbacks_need_no_budget(cls):
    m, ids, X, y = fed(cls, n=100, learn=60, max_deletions=1, order_fallback="retrain")
    m.unlearn_one(ids[59])
    d = m.unlearn_one(ids[3])  # old record: exact retrain, capacity is irrelevant
    assert d.outcome == "exact" and m.accountant.deletions == 1


def test_kernel_and_reference_paths_agree_for_the_retrain_fallback():
    ids, X, y = synthetic_stream(200, 5, seed=6)
    zs = []
    for force in (False, True):
        m = ActiveD2D(**KW)
        if force:
            with jit.reference():
                m.learn_many(ids, X, y)
                m.unlearn_one(ids[199])
                m.unlearn_one(ids[7])
        else:
            m.learn_many(ids, X, y)
            m.unlearn_one(ids[199])
            m.unlearn_one(ids[7])
        zs.append(m.z)
    np.testing.assert_allclose(zs[0], zs[1], rtol=1e-12, atol=1e-14)
