"""Engine-level checks of the privacy invariants of docs/worker.md 4 (the worker-level ones
run against the real broker in tests/stream)."""

from __future__ import annotations

import numpy as np
import pytest

from worker.olu.algorithms.passive import PassiveOLU
from worker.olu.core import learning, unlearning
from worker.olu.core.losses import Logistic, Ridge

from .helpers import synthetic_stream

BASE = dict(dim=4, loss="logistic", l2=0.01, radius=3.0, feature_bound=1.0, rho=1.0)


# Invariant 5: calibration uses only public constants, and they are valid for the data allowed in.
@pytest.mark.parametrize("loss", [Logistic(0.05), Logistic(0.0), Ridge(0.05, label_bound=2.0)])
def test_lipschitz_and_smoothness_constants_hold_on_all_of_k(loss):
    radius, R, d = 3.0, 1.5, 6
    c = loss.constants(radius, R)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        z = rng.normal(size=d)
        z *= radius * rng.random() ** (1 / d) / np.linalg.norm(z)
        if rng.random() < 0.3:  # the boundary of K, where the regulariser's gradient is largest
            z *= radius / np.linalg.norm(z)
        x = rng.normal(size=d)
        x *= R / np.linalg.norm(x)
        y = float(rng.choice([-1.0, 1.0])) if isinstance(loss, Logistic) else float(rng.uniform(-2, 2))
        assert np.linalg.norm(loss.grad(z, x, y)) <= c.L * (1 + 1e-12)
        # smoothness and strong convexity along a random direction (finite differences)
        v = rng.normal(size=d)
        v /= np.linalg.norm(v)
        h = 1e-4
        curvature = (loss.grad(z + h * v, x, y) - loss.grad(z - h * v, x, y)) @ v / (2 * h)
        assert c.mu - 1e-6 <= curvature <= c.beta + 1e-6


def test_noise_scale_depends_only_on_public_positions_not_on_data():
    # Two different streams, the same deletion positions (u, tau, i): the same sigma.
    sigmas = []
    for seed in (1, 2):
        ids, X, y = synthetic_stream(200, 4, seed=seed)
        m = PassiveOLU(**BASE)
        m.learn_many(ids, X, y)
        sigmas.append([m.unlearn_one(ids[k]).sigma for k in (5, 150, 60)])
    assert sigmas[0] == sigmas[1]


def test_features_are_bounded_at_ingest_not_by_clipping_gradients():
    m = PassiveOLU(**BASE, feature_policy="clip")
    m.learn_one("big", [30.0, 40.0, 0.0, 0.0], 1)
    ref = PassiveOLU(**BASE)
    ref.learn_one("big", [0.6, 0.8, 0.0, 0.0], 1)  # the clipped x, through the unmodified update
    np.testing.assert_allclose(m.z, ref.z, rtol=1e-12)


# Invariant 6: passive keeps no raw features.
def test_passive_model_holds_no_raw_features_in_memory_or_state():
    ids, X, y = synthetic_stream(500, 4, seed=3)
    m = PassiveOLU(**BASE)
    m.learn_many(ids, X, y)
    m.unlearn_one(ids[7])
    state = m.export_state()
    assert {k: a.dtype.kind for k, a in state["arrays"].items()} == {
        "z": "f", "tombstones": "u", "applied_tail_keys": "u", "applied_tail_steps": "u"}
    floats_in_memory = [v for v in vars(m).values() if isinstance(v, np.ndarray) and v.dtype.kind == "f"]
    assert all(a.shape == (4,) for a in floats_in_memory)  # only the iterate
    for row in X[:50]:
        for arr in state["arrays"].values():
            assert row.tobytes() not in arr.tobytes()


# Invariant 7: approximations err towards more noise and never drop an insert silently.
def test_an_index_collision_applies_both_inserts_and_pays_for_both(monkeypatch):
    real = learning.record_key

    def colliding(rid):
        return real("same") if rid in ("a", "b") else real(rid)

    monkeypatch.setattr(learning, "record_key", colliding)  # the insert's key
    monkeypatch.setattr(unlearning, "record_key", colliding)  # the deletion's
    m = PassiveOLU(**BASE)
    m.use_kernel = False
    assert m.learn_one("a", [0.5, 0, 0, 0], 1) and m.learn_one("b", [0, 0.5, 0, 0], -1)
    assert m.t == 2 and len(m.index) == 2  # neither insert was dropped
    d = m.unlearn_one("a")
    assert d.steps == (1, 2)
    assert d.shift == pytest.approx(m.shift([1], 2) + m.shift([2], 2))  # noise covers both records
    assert d.shift > m.shift([1], 2)


def test_early_expansive_steps_only_increase_the_shift():
    paper = PassiveOLU(**BASE, t0=0.0)  # t0 = 0: the first steps are expansive (eta > 2/beta)
    shifted = PassiveOLU(**BASE)
    for u in (1, 2, 5):
        exact_contraction_only = (u / 50) * paper.sensitivity(u)  # what [P1]'s u/tau would give
        assert paper.shift([u], 50) >= exact_contraction_only
    assert shifted.schedule.t0 >= (shifted.constants.beta / shifted.constants.mu - 1) / 2
