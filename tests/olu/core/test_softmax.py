"""The K-class softmax loss: its public constants hold, its gradient is the value's, a deletion's
released law is the masked run plus the calibrated Gaussian over all K x d coordinates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.olu.helpers import halve_sigma, masked_run, released_law_is_private
from worker.olu import PassiveOLU
from worker.olu.core.losses import Softmax
from worker.olu.exceptions import ConfigError, InvalidLabel

CLASSES = ["ham", "spam", "phish", "promo"]


def _points(rng, n, d, radius, feature_bound):
    """Matrices in the ball of ``radius`` (flat K d) and rows of norm ``feature_bound``."""
    W = rng.normal(size=(n, len(CLASSES) * d)) * rng.uniform(0.1, 3.0, size=(n, 1))
    W *= np.minimum(1.0, radius / np.linalg.norm(W, axis=1))[:, None]
    X = rng.normal(size=(n, d))
    X *= (feature_bound / np.linalg.norm(X, axis=1))[:, None]
    return W, X


@pytest.mark.parametrize("lam", [0.0, 0.05])
def test_the_constants_bound_the_gradient_its_changes_and_the_curvature(lam):
    """||grad|| <= L on the ball, ||grad(W1) - grad(W2)|| <= beta ||W1 - W2||, and (lam > 0) the
    gradient's monotonicity <g1 - g2, W1 - W2> >= mu ||W1 - W2||^2 (docs/calibration.md 2.3)."""
    rng = np.random.default_rng(0)
    loss, d, r, R = Softmax(lam, CLASSES), 5, 8.0, 1.0
    c = loss.constants(radius=r, feature_bound=R)
    W1, X = _points(rng, 2000, d, r, R)
    W2, _ = _points(rng, 2000, d, r, R)
    worst_norm = worst_smooth = 0.0
    for w1, w2, x in zip(W1, W2, X):
        y = float(rng.integers(len(CLASSES)))
        g1, g2 = loss.grad(w1, x, y), loss.grad(w2, x, y)
        worst_norm = max(worst_norm, np.linalg.norm(g1) / c.L)
        worst_smooth = max(worst_smooth, np.linalg.norm(g1 - g2) / (c.beta * np.linalg.norm(w1 - w2)))
        assert (g1 - g2) @ (w1 - w2) >= c.mu * np.sum((w1 - w2) ** 2) * (1 - 1e-9) - 1e-12
    assert worst_norm <= 1.0 and worst_smooth <= 1.0
    assert worst_norm > 0.9  # the bound is nearly attained (p_y -> 0 with one class near 1)
    # sqrt(2) R is needed: a confident wrong class has ||(p - e_y) x|| -> sqrt(2) R
    w = np.zeros(len(CLASSES) * d)
    x = np.eye(d)[0]
    w[0] = 40.0  # class 0 certain; label 1
    assert np.linalg.norm(loss.grad(w, x, 1.0) - lam * w) > 1.41 * R


def test_the_gradient_is_the_values_derivative():
    rng = np.random.default_rng(1)
    loss, d = Softmax(0.03, CLASSES), 4
    W, X = _points(rng, 20, d, 3.0, 1.0)
    for w, x in zip(W, X):
        y, h = 2.0, 1e-6
        numeric = np.array([(loss.value(w + h * e, x, y) - loss.value(w - h * e, x, y)) / (2 * h)
                            for e in np.eye(len(w))])
        assert np.allclose(loss.grad(w, x, y), numeric, atol=1e-7)
        assert math.isclose(loss.predict(w, x).sum(), 1.0, rel_tol=1e-12)


def test_classes_are_declared_and_a_label_outside_them_is_refused():
    loss = Softmax(0.01, [3, 1, 2])
    assert loss.labels(np.array([2.0, 3.0, 1.0])).tolist() == [2.0, 0.0, 1.0]
    assert loss.label(3) == 0.0 and loss.label(np.int64(1)) == 1.0
    for bad in (4, 2.5, "3", True, None, float("nan")):
        with pytest.raises(InvalidLabel, match="not one of the 3 declared classes"):
            loss.label(bad)
    with pytest.raises(InvalidLabel, match="label 7.0 is not one"):
        loss.labels(np.array([1.0, 7.0]))
    with pytest.raises(InvalidLabel):
        Softmax(0.01, ["a", "b"]).label(0)
    for classes in (None, ["a"], ["a", "a"], ["a", 1], [1.5, 2.5], "ab", ["", "b"]):
        with pytest.raises(ConfigError, match="classes"):
            Softmax(0.01, classes)
    with pytest.raises(ConfigError, match="classes is for loss 'softmax'"):
        PassiveOLU(dim=2, classes=["a", "b"])


def test_a_model_predicts_classes_and_their_probabilities():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, 3000)
    X = np.eye(3)[labels] * 0.9 + rng.normal(scale=0.05, size=(3000, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    m = PassiveOLU(dim=3, loss="softmax", classes=CLASSES[:3], l2=0.01, rho=1.0)
    m.learn_many([f"r-{j}" for j in range(3000)], X, [CLASSES[k] for k in labels])
    assert m.z.shape == (9,) and m.param_dim == 9 and m.dim == 3
    accuracy = np.mean([m.predict_one(x) == CLASSES[k] for x, k in zip(X[:500], labels[:500])])
    assert accuracy > 0.95
    proba = m.predict_proba_one(X[0])
    assert list(proba) == CLASSES[:3] and math.isclose(sum(proba.values()), 1.0)
    assert max(proba, key=proba.get) == m.predict_one(X[0])


def _tight_softmax_deletion(rho):
    """A passive softmax model whose last record has a confident wrong class: its gradient's norm
    is nearly sqrt(2) R, so the shift bound eta_u L is nearly attained by the last step."""
    kw = dict(dim=3, loss="softmax", classes=CLASSES, l2=1e-3, radius=60.0, rho=rho, privacy_unit="per-request")
    rng = np.random.default_rng(4)
    labels = rng.integers(0, len(CLASSES), 400)
    X = rng.normal(size=(400, 3))
    X /= np.linalg.norm(X, axis=1)[:, None]
    y = [CLASSES[k] for k in labels]
    ids = [f"r-{j}" for j in range(400)]
    base = PassiveOLU(**kw)
    base.learn_many(ids[:-1], X[:-1], y[:-1])
    W = base.z.reshape(len(CLASSES), 3)
    top, other = 0, 1
    X[-1] = (W[top] - W[other]) / np.linalg.norm(W[top] - W[other])
    y[-1] = CLASSES[other]
    base.learn_one(ids[-1], X[-1], y[-1])
    reference = masked_run(PassiveOLU, kw, X, y, skip={base.t})
    return ids, base, reference, np.linalg.norm(base.z - reference) / base.shift([base.t], base.t)


@pytest.mark.slow
@pytest.mark.parametrize("halve", [None, "calibration", "draw"])
def test_a_softmax_deletion_releases_the_masked_run_plus_the_calibrated_noise(halve, monkeypatch):
    """As for the binary losses (tests/olu/privacy/test_privacy_units.py): the released law after a
    deletion vs the masked reference run plus the same noise on all K x d coordinates, with the
    softmax constants; halving sigma, in the calibration or in the draw, is caught."""
    rho = 0.5
    ids, base, reference, tightness = _tight_softmax_deletion(rho)
    assert tightness > 0.75, tightness
    halve_sigma(halve, monkeypatch)
    private, figures = released_law_is_private(base.export_state(), [ids[-1]], reference, rho, n=2000)
    assert private is (halve is None), figures


@pytest.mark.parametrize("unit,variant,split", [("all-deletions", "overlap", "planned"),
                                                ("per-request", "disjoint", "weighted")])
def test_a_softmax_rotation_with_the_planned_split_round_trips_bit_for_bit(unit, variant, split):
    """Rotation, both privacy units and the planned split (all-deletions' only) take the K x d model: deletions are noised
    on every coordinate of the matrix, a generation change starts a fresh matrix, and a restore
    goes on with the same bits."""
    from worker.olu import load_model
    from worker.olu.rotation import Rotation

    rng = np.random.default_rng(6)
    X = rng.normal(size=(3000, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = [CLASSES[k] for k in rng.integers(0, len(CLASSES), 3000)]
    kw = dict(dim=3, loss="softmax", classes=CLASSES, l2=0.01, target_epsilon=1.0, privacy_unit=unit,
              budget_split=split, deletion_capacity=40 if split == "planned" else None)
    r = Rotation(PassiveOLU, lifetime_events=1000, variant=variant, noise_rng=np.random.default_rng(1), **kw)
    noised = 0
    for start in range(0, 2400, 200):
        r.learn_many([f"r-{j}" for j in range(start, start + 200)], X[start:start + 200], y[start:start + 200])
        d = r.unlearn_request([f"r-{start + 5}"])
        noised += d.outcome == "noised"
    assert noised >= 6 and r.weights.shape == (12,) and r.privacy()["epsilon"] <= 1.0 + 1e-9
    again = load_model(r.export_state(), noise_rng=np.random.default_rng(1))
    for m in (r, again):
        m.learn_many([f"s-{j}" for j in range(600)], X[2400:], y[2400:])
    assert r.weights.tobytes() == again.weights.tobytes()
