"""Sparse rows (core/sparse.py): checked as their dense form is, learned in O(non-zeros) on the
iterate ``a w``, the compiled step bit for bit its reference, equal to the dense step where the
arithmetic allows and within rounding elsewhere, the ball kept, and the same bits whatever the
batching or a snapshot in between."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.olu import arith
from worker.olu.algorithms.active import ActiveD2D
from worker.olu.algorithms.passive import PassiveOLU
from worker.olu.core.base import OnlineUnlearner
from worker.olu.core.domain import FeatureBound
from worker.olu.core.sparse import SparseRows, check_rows, resync_steps, row_sqnorms
from worker.olu.exceptions import DimensionMismatch, InvalidExample, InvalidFeatures, NonFiniteInput
from worker.olu.rotation import Rotation


def sparse_stream(n: int, d: int, nnz: int, seed: int, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        idx = np.sort(rng.choice(d, min(nnz, d), replace=False))
        v = rng.normal(size=len(idx))
        rows.append((idx, v / np.linalg.norm(v) * rng.random() * scale))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return SparseRows.from_rows(rows), y, [f"r-{seed}-{j}" for j in range(n)]


def model(d: int, reference: bool = False, cls=PassiveOLU, **kw) -> OnlineUnlearner:
    config = dict(loss="logistic", l2=0.05, radius=10.0, rho=1.0)
    config.update(kw)
    m = cls(dim=d, noise_rng=np.random.default_rng(5), **config)
    m.use_kernel = not reference
    return m


def feed(m, rows, y, ids, batch: int) -> None:
    for s in range(0, len(ids), batch):
        m.learn_many(ids[s:s + batch], rows[s:s + batch], y[s:s + batch])


def same_state(a, b) -> None:
    assert a.unscaled.tobytes() == b.unscaled.tobytes()
    assert (a.scale, a.unscaled_sqnorm, a.t, a.counters) == (b.scale, b.unscaled_sqnorm, b.t, b.counters)
    assert a.z.tobytes() == b.z.tobytes()


# ------------------------------------------------------------------ checks
rows_strategy = st.integers(1, 70).flatmap(lambda d: st.tuples(st.just(d), st.lists(
    st.tuples(st.sets(st.integers(0, d - 1), max_size=12), st.floats(0.0, 1.3), st.integers(0, 2**32)),
    min_size=1, max_size=6)))


@settings(max_examples=200, deadline=None)
@given(rows_strategy, st.sampled_from(["clip", "reject"]))
def test_checks_are_the_dense_rows_checks(case, policy):
    d, spec = case
    rows = []
    for idx, norm, seed in spec:
        idx = np.array(sorted(idx), np.int64)
        v = np.random.default_rng(seed).normal(size=len(idx))
        if len(idx):
            v *= norm / max(np.linalg.norm(v), 1e-300)
        rows.append((idx, v))
    sparse = SparseRows.from_rows(rows)
    dense = sparse.to_dense(d)
    features = FeatureBound(d, 1.0, policy)
    assert row_sqnorms(sparse, d).tobytes() == arith.row_sqnorms(dense).tobytes()
    try:
        want = features.check_many(dense)
    except InvalidExample as exc:
        with pytest.raises(type(exc)):
            check_rows(features, sparse)
        return
    assert check_rows(features, sparse).to_dense(d).tobytes() == want.tobytes()


@pytest.mark.parametrize("rows, error", [
    (SparseRows.from_rows([([3, 1], [0.1, 0.1])]), InvalidFeatures),          # not increasing
    (SparseRows.from_rows([([1, 1], [0.1, 0.1])]), InvalidFeatures),          # repeated
    (SparseRows.from_rows([([0, 9], [0.1, 0.1])]), DimensionMismatch),        # outside [0, d)
    (SparseRows.from_rows([([-1], [0.1])]), DimensionMismatch),
    (SparseRows.from_rows([([2], [np.nan])]), NonFiniteInput),
    (SparseRows(np.array([0, 2]), np.array([1]), np.array([0.1])), InvalidFeatures),  # indptr past the entries
])
def test_bad_sparse_rows_are_refused_and_change_nothing(rows, error):
    m = model(8)
    with pytest.raises(error):
        m.learn_many(["a"], rows, [1.0])
    assert m.t == 0 and not m.z.any()


# ------------------------------------------------------------------ the step
CONFIGS = {
    "logistic": dict(loss="logistic", l2=0.05, radius=10.0),
    "logistic-clipped": dict(loss="logistic", l2=0.01, radius=0.2),
    "logistic-t0=0": dict(loss="logistic", l2=0.5, radius=0.3, t0=0.0),  # eta lam = 1 at the first step
    "ridge-clipped": dict(loss="ridge", l2=0.1, radius=0.25, label_bound=1.0),
    "logistic-convex": dict(loss="logistic", l2=0.02, radius=0.5, schedule="convex"),
    "ridge-constant": dict(loss="ridge", l2=0.1, radius=0.3, schedule="constant", step=0.3),
}


@pytest.mark.parametrize("d", [5, 64, 1000])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_compiled_sparse_step_is_its_reference(name, d):
    rows, y, ids = sparse_stream(1200, d, 30, seed=d)
    fast, ref = model(d, **CONFIGS[name]), model(d, reference=True, **CONFIGS[name])
    for m in (fast, ref):
        m.unlearn_one(ids[700])  # a tombstone: that insert is skipped
        feed(m, rows, y, ids, 257)
    same_state(fast, ref)
    assert fast.counters["skipped_deleted"] == 1
    for name_, array in fast.index.to_arrays().items():
        assert np.array_equal(array, ref.index.to_arrays()[name_])


def test_without_l2_and_inside_the_ball_sparse_is_the_dense_step():
    """lam = 0 keeps the scale at 1 and the projection idle: the same arithmetic as the dense step."""
    rows, y, ids = sparse_stream(800, 300, 20, seed=3)
    kw = dict(l2=0.0, radius=1e6, schedule="constant", step=0.1)
    sparse, dense = model(300, **kw), model(300, **kw)
    feed(sparse, rows, y, ids, 100)
    feed(dense, rows.to_dense(300), y, ids, 100)
    assert sparse.scale == 1.0 and np.array_equal(sparse.z, dense.z)


@pytest.mark.parametrize("name", ["logistic", "logistic-clipped", "ridge-clipped", "logistic-t0=0"])
def test_with_l2_sparse_is_the_dense_step_up_to_rounding(name):
    rows, y, ids = sparse_stream(3000, 200, 15, seed=4)
    sparse, dense = model(200, **CONFIGS[name]), model(200, **CONFIGS[name])
    feed(sparse, rows, y, ids, 500)
    feed(dense, rows.to_dense(200), y, ids, 500)
    assert sparse.t == dense.t
    assert np.abs(sparse.z - dense.z).max() <= 1e-10 * max(1.0, np.abs(dense.z).max())
    assert not np.array_equal(sparse.z, dense.z) or name == "logistic-t0=0"  # the rounding does differ


def test_the_ball_holds_through_the_kept_norm():
    """A small radius, so the projection acts at most steps: the true norm of a w never exceeds r by
    more than rounding, across several exact recomputations of the kept norm."""
    d, r = 4096, 0.05
    rows, y, ids = sparse_stream(4 * resync_steps(d) + 37, d, 30, seed=6)
    m = model(d, l2=0.01, radius=r)
    for s in range(0, len(ids), 50):
        m.learn_many(ids[s:s + 50], rows[s:s + 50], y[s:s + 50])
        assert arith.norm(m.z) <= r * (1 + 1e-12)
        assert abs(m.unscaled_sqnorm - arith.sqnorm(m.unscaled)) <= 1e-12 * arith.sqnorm(m.unscaled)
    assert arith.norm(m.z) > r * (1 - 1e-9)  # the projection was acting


def test_the_same_bits_whatever_the_batching_or_a_snapshot_between():
    """What crash equivalence needs: the state is a function of the events, not of the batches, and
    a restored snapshot continues exactly (its scale and kept norm included)."""
    rows, y, ids = sparse_stream(2000, 512, 25, seed=8)
    whole = model(512)
    feed(whole, rows, y, ids, 2000)
    pieces = model(512)
    feed(pieces, rows[:1313], y[:1313], ids[:1313], 97)
    assert pieces.scale != 1.0
    restored = OnlineUnlearner.from_state(pieces.export_state(), noise_rng=np.random.default_rng(5))
    same_state(restored, pieces)
    feed(restored, rows[1313:], y[1313:], ids[1313:], 211)
    same_state(restored, whole)


def test_a_deletion_stores_the_iterate_with_scale_one_and_matches_the_reference():
    rows, y, ids = sparse_stream(600, 256, 20, seed=9)
    fast, ref = model(256), model(256, reference=True)
    for m in (fast, ref):
        feed(m, rows, y, ids, 200)
        assert m.scale != 1.0
        m.unlearn_one(ids[10])
        assert m.scale == 1.0 and m.deletion_state()["z"].tobytes() == m.z.tobytes()
    same_state(fast, ref)


def test_models_that_keep_rows_learn_the_dense_form():
    rows, y, ids = sparse_stream(300, 40, 6, seed=10)
    a, b = model(40, cls=ActiveD2D), model(40, cls=ActiveD2D)
    feed(a, rows, y, ids, 100)
    feed(b, rows.to_dense(40), y, ids, 100)
    assert a.z.tobytes() == b.z.tobytes() and a.scale == 1.0


def test_a_rotation_takes_sparse_rows():
    rows, y, ids = sparse_stream(900, 128, 10, seed=11)
    kw = dict(dim=128, l2=0.05, radius=5.0, rho=1.0)
    a = Rotation(PassiveOLU, lifetime_events=400, **kw, noise_rng=np.random.default_rng(1))
    b = Rotation(PassiveOLU, lifetime_events=400, **kw, noise_rng=np.random.default_rng(1))
    feed(a, rows, y, ids, 128)
    feed(b, rows, y, ids, 900)
    assert a.z.tobytes() == b.z.tobytes() and a.generation == b.generation > 0


learn_cases = st.integers(1, 40).flatmap(lambda d: st.tuples(
    st.just(d), st.lists(st.tuples(st.sets(st.integers(0, d - 1), max_size=8), st.floats(0.0, 1.0),
                                   st.integers(0, 2**32), st.booleans()), min_size=1, max_size=60),
    st.sampled_from(["exact", "logistic", "logistic-clipped", "ridge-clipped"])))


@settings(max_examples=120, deadline=None)
@given(learn_cases)
def test_sparse_and_dense_learning_agree_on_generated_rows(case):
    """Bit for bit without l2 and inside the ball (``exact``); otherwise within 1e-10 of the dense
    iterate's scale, the ball kept in both."""
    d, spec, name = case
    rows, labels = [], []
    for idx, norm, seed, label in spec:
        v = np.random.default_rng(seed).normal(size=len(idx))
        rows.append((np.array(sorted(idx), np.int64), v * norm / max(np.linalg.norm(v), 1e-300) if len(idx) else v))
        labels.append(1.0 if label else -1.0)
    sparse_rows, y, ids = SparseRows.from_rows(rows), np.array(labels), [f"r-{j}" for j in range(len(rows))]
    config = dict(l2=0.0, radius=1e6, schedule="constant", step=0.1) if name == "exact" else CONFIGS[name]
    sparse, dense = model(d, **config), model(d, **config)
    feed(sparse, sparse_rows, y, ids, 7)
    feed(dense, sparse_rows.to_dense(d), y, ids, 7)
    if name == "exact":
        assert sparse.scale == 1.0 and np.array_equal(sparse.z, dense.z)
    else:
        assert np.abs(sparse.z - dense.z).max() <= 1e-10 * max(1.0, np.abs(dense.z).max())
    assert arith.norm(sparse.z) <= sparse.ball.radius * (1 + 1e-12)


def test_a_snapshot_keeps_the_kept_norm_when_the_scale_is_one():
    """Without l2 the scale stays exactly 1 while the kept norm drifts from the exact one: a
    snapshot must store it even then, or the restored model refreshes it early and diverges."""
    rows, y, ids = sparse_stream(700, 512, 25, seed=12)
    kw = dict(l2=0.0, radius=1e6, schedule="constant", step=0.1)
    whole = model(512, **kw)
    feed(whole, rows, y, ids, 700)
    pieces = model(512, **kw)
    feed(pieces, rows[:300], y[:300], ids[:300], 100)  # past one refresh (t = 256), before the next
    assert pieces.scale == 1.0 and pieces.unscaled_sqnorm is not None
    assert pieces.unscaled_sqnorm != arith.sqnorm(pieces.unscaled)  # the kept norm has drifted: worth keeping
    restored = OnlineUnlearner.from_state(pieces.export_state(), noise_rng=np.random.default_rng(5))
    same_state(restored, pieces)
    feed(restored, rows[300:], y[300:], ids[300:], 100)
    same_state(restored, whole)
