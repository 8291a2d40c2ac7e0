"""Exact retraining over sparse retained rows (Retrain(retained_rows="sparse")) and its store."""

from __future__ import annotations

import contextlib

import numpy as np
import orjson
import pytest

from worker.compiled import jit
from worker.olu import load_model
from worker.olu.algorithms.baselines import PlainOGD
from worker.olu.algorithms.retrain import Retrain
from worker.olu.core.sparse import SparseRows
from worker.olu.core.sparse_examples import SparseExampleStore
from worker.olu.exceptions import ConfigError, InvalidState

D = 64
KW = dict(dim=D, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)


def sparse_stream(n: int, seed: int, nonzeros: int = 6, loss: str = "logistic"):
    """n rows of ``nonzeros`` non-zeros of D, norms in (0, 1], labels from a sparse linear rule."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n, D))
    for j in range(n):
        cols = rng.choice(D, nonzeros, replace=False)
        v = rng.standard_normal(nonzeros)
        X[j, cols] = v / np.linalg.norm(v) * rng.uniform(0.2, 1.0)
    score = X @ rng.standard_normal(D) + 0.1 * rng.standard_normal(n)
    y = np.clip(score, -1, 1) if loss == "ridge" else np.where(score >= 0, 1.0, -1.0)
    return [f"r-{j}" for j in range(n)], X, y


def fresh_masked(kw, ids, X, y, skip_steps, upto):
    """A fresh model taking the sparse step, fed the masked stream: ⊥ (identity, time index kept)
    at ``skip_steps``."""
    ref = PlainOGD(**kw)
    for j in range(upto):
        if j + 1 in skip_steps:
            ref.t += 1
        else:
            ref.learn_many([ids[j]], SparseRows.from_dense(X[j:j + 1]), [y[j]])
    return ref


def _feed(model, ids, X, y, lo, hi):
    """Rows lo..hi in the three forms a caller uses: sparse batches, dense batches, single rows."""
    third = lo + (hi - lo) // 3
    model.learn_many(ids[lo:third], SparseRows.from_dense(X[lo:third]), y[lo:third])
    model.learn_many(ids[third:third + 20], X[third:third + 20], y[third:third + 20])
    for j in range(third + 20, hi):
        model.learn_one(ids[j], X[j], y[j])


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("loss", ["logistic", "ridge"])
def test_sparse_retrain_equals_a_fresh_sparse_model_on_the_masked_stream_bit_for_bit(reference,
                                                                                      loss):
    kw = {**KW, "loss": loss}
    ids, X, y = sparse_stream(500, seed=1, loss=loss)
    ctx = jit.reference() if reference else contextlib.nullcontext()
    with ctx:
        m = Retrain(**kw, retained_rows="sparse", checkpoint_every=32)
        _feed(m, ids, X, y, 0, 300)
        deleted = set()
        for k in (0, 299, 150):
            d = m.unlearn_one(ids[k])
            deleted.add(k + 1)
            assert d.outcome == "exact" and d.sigma == 0.0
            ref = fresh_masked(kw, ids, X, y, deleted, 300)
            assert np.array_equal(m.z, ref.z) and m.scale == ref.scale
        _feed(m, ids, X, y, 300, 500)
        m.unlearn_one(ids[480])
        deleted.add(481)
        ref = fresh_masked(kw, ids, X, y, deleted, 500)
        assert np.array_equal(m.z, ref.z) and m.t == ref.t == 500
        assert m.scale != 1.0  # the scaled iterate was kept through the deletions


def test_compiled_and_reference_sparse_retraining_agree():
    ids, X, y = sparse_stream(300, seed=2)
    out = []
    for ctx in (contextlib.nullcontext(), jit.reference()):
        with ctx:
            m = Retrain(**KW, retained_rows="sparse", checkpoint_every=16)
            _feed(m, ids, X, y, 0, 300)
            for k in (7, 260, 100):
                m.unlearn_one(ids[k])
            out.append((m.z.copy(), m.scale, m.unscaled_sqnorm))
    assert np.array_equal(out[0][0], out[1][0]) and out[0][1:] == out[1][1:]


@pytest.mark.parametrize("every", [1, 7, 64])
def test_a_sparse_replay_from_a_checkpoint_gives_the_bits_of_one_from_scratch(every):
    ids, X, y = sparse_stream(400, seed=3)
    rng = np.random.default_rng(every)
    m = Retrain(**KW, retained_rows="sparse", checkpoint_every=every)
    scratch = Retrain(**KW, retained_rows="sparse", checkpoint_every=10**9)
    deleted = set()
    for lo in range(0, 400, 50):
        for model in (m, scratch):
            _feed(model, ids, X, y, lo, lo + 50)
        for k in rng.choice(lo + 50, size=3, replace=False).tolist():
            for model in (m, scratch):
                model.unlearn_one(ids[k])
            deleted.add(k + 1)
            assert np.array_equal(m.z, scratch.z)
    assert np.array_equal(m.z, fresh_masked(KW, ids, X, y, deleted, 400).z)
    assert m.counters["replayed_steps"] < scratch.counters["replayed_steps"]


def test_a_request_with_nothing_to_unlearn_leaves_no_trace():
    """No fold of the scale at a request: the state is the masked stream's, whatever was asked."""
    ids, X, y = sparse_stream(200, seed=4)
    m, ref = (Retrain(**KW, retained_rows="sparse") for _ in range(2))
    for model in (m, ref):
        model.learn_many(ids[:100], X[:100], y[:100])
    assert m.unlearn_one("never-seen").outcome == "not_applied"
    for model in (m, ref):
        model.learn_many(ids[100:], X[100:], y[100:])
    assert np.array_equal(m.z, ref.z) and m.scale == ref.scale != 1.0


def _json_roundtrip(state):
    meta = orjson.loads(orjson.dumps(state["meta"]))
    arrays = {k: np.frombuffer(v.tobytes(), dtype=v.dtype).reshape(v.shape)
              for k, v in state["arrays"].items()}
    return {"meta": meta, "arrays": arrays}


def test_sparse_state_round_trips_and_continues_identically():
    ids, X, y = sparse_stream(500, seed=5)
    m = Retrain(**KW, retained_rows="sparse", checkpoint_every=40)
    _feed(m, ids, X, y, 0, 250)
    for k in (3, 200, 249):
        m.unlearn_one(ids[k])
    state = m.export_state()
    assert not any(k.startswith("examples_") for k in state["arrays"])  # no dense rows stored
    m2 = load_model(_json_roundtrip(state))
    assert m2.config["retained_rows"] == "sparse" and m2.sparse_steps
    assert (m2.scale, m2.unscaled_sqnorm) == (m.scale, m.unscaled_sqnorm)
    for k, a in state["arrays"].items():
        assert np.array_equal(a, m2.export_state()["arrays"][k]), k
    for model in (m, m2):
        _feed(model, ids, X, y, 250, 500)
        model.unlearn_one(ids[100])
        model.unlearn_one(ids[400])
    assert np.array_equal(m.z, m2.z) and m.scale == m2.scale and m.t == m2.t == 500


def test_a_durable_sparse_deletion_replays_to_the_stored_bits_and_checks_them():
    ids, X, y = sparse_stream(120, seed=6)
    m = Retrain(**KW, retained_rows="sparse", checkpoint_every=16)
    m.learn_many(ids, X, y)
    snapshot = m.export_state()
    m.unlearn_one(ids[5])
    stored = m.deletion_state()
    replayed = load_model(snapshot)
    assert replayed.unlearn_one(ids[5], post_state=stored).outcome == "exact"
    assert np.array_equal(replayed.z, m.z) and replayed.scale == m.scale
    other = load_model(snapshot)
    with pytest.raises(InvalidState, match="stored iterate"):
        other.unlearn_one(ids[5], post_state={**stored, "z": stored["z"] + 1e-9})


def test_deleted_sparse_rows_are_zeroed_at_once_and_never_exported():
    ids, X, y = sparse_stream(300, seed=7)
    m = Retrain(**KW, retained_rows="sparse")
    m.learn_many(ids, X, y)
    gone = (0, 120, 299)
    for k in gone:
        m.unlearn_one(ids[k])
    values = m.examples.raw_buffers()[1].tobytes()
    for k in gone:
        assert X[k][X[k] != 0].tobytes() not in values
    assert X[1][X[1] != 0].tobytes() in values
    blob = b"".join(a.tobytes() for a in m.export_state()["arrays"].values())
    assert X[120][X[120] != 0].tobytes() not in blob and X[121][X[121] != 0].tobytes() in blob


def test_a_sparse_store_takes_sixteen_bytes_a_non_zero():
    ids, X, y = sparse_stream(4_000, seed=8, nonzeros=50)
    m = Retrain(**KW, retained_rows="sparse")
    m.learn_many(ids, X, y)
    dense = Retrain(**KW)
    dense.learn_many(ids, X, y)
    per_row = 8 + 8 + 8 + 8 + 1  # indptr, label, step, key, live flag
    assert m.examples.nonzeros == 200_000
    used = 16 * m.examples.nonzeros + per_row * len(m.examples)
    assert m.examples.nbytes <= 2 * used  # geometric growth: at most twice what is in use
    assert np.array_equal(m.examples.live_rows()[0].to_dense(D), dense.examples.X)


@pytest.mark.parametrize("bad", ["csr", "", None, 1])
def test_a_bad_retained_rows_setting_is_refused_by_name(bad):
    with pytest.raises(ConfigError, match="retained_rows"):
        Retrain(**KW, retained_rows=bad)


def test_sparse_steps_need_a_loss_the_sparse_step_knows():
    with pytest.raises(ConfigError, match="retained_rows=sparse"):
        Retrain(**{**KW, "loss": "softmax", "classes": [0, 1, 2]}, retained_rows="sparse")


# ---------------------------------------------------------------------------- the store

def _rows(*rows):
    return SparseRows.from_rows(rows)


def test_the_store_compacts_in_step_order_and_zeroes_what_it_vacates():
    s = SparseExampleStore(dim=8)
    s.extend([1, 2, 3, 4], [1, 2, 5, 9],
             _rows(([0, 7], [0.1, 0.2]), ([3], [0.3]), ([1, 2, 4], [0.4, 0.5, 0.6]), ([6], [0.7])),
             [1.0, -1.0, 1.0, -1.0])
    assert s.remove_steps([2, 9, 42]) == 2 and s.remove_steps([2]) == 0
    rows, y, steps = s.live_rows()
    assert steps.tolist() == [1, 5] and y.tolist() == [1.0, 1.0]
    assert rows.to_dense(8)[1].tolist() == [0, 0.4, 0.5, 0, 0.6, 0, 0, 0]
    indices, values, labels, keys = s.raw_buffers()
    assert not values[5:].any() and not indices[5:].any() and not keys[2:].any()
    s.extend([5], [10], _rows(([5], [0.9])), [1.0])  # appends after compaction
    assert s.live_rows()[2].tolist() == [1, 5, 10] and s.nonzeros == 6


def test_a_growing_store_zeroes_the_buffers_it_drops():
    s = SparseExampleStore(dim=4)
    dropped = []
    for k in range(1, 200):
        before = s.raw_buffers()[1]
        s.extend([k], [k], _rows(([k % 4], [0.5 + k / 1000])), [1.0])
        if s.raw_buffers()[1] is not before:
            dropped.append(before)
    assert dropped and all(not b.any() for b in dropped)
    assert len(s) == 199 and s.live_rows()[0].values[-1] == 0.5 + 199 / 1000


def test_a_store_refuses_rows_out_of_order_and_bad_saved_arrays():
    s = SparseExampleStore(dim=4)
    s.extend([1], [3], _rows(([0], [0.5])), [1.0])
    with pytest.raises(ValueError, match="strictly increase"):
        s.extend([2], [3], _rows(([1], [0.5])), [1.0])
    good = s.to_arrays()
    for name, bad in [("indices", np.array([4], np.int64)), ("values", np.array([np.nan])),
                      ("keys", np.array([0], np.uint64)), ("indptr", np.array([0, 2], np.int64))]:
        with pytest.raises(ValueError):
            SparseExampleStore.from_arrays({**good, name: bad}, dim=4)


def test_deleting_most_rows_compacts_on_the_way_and_stays_exact():
    ids, X, y = sparse_stream(120, seed=9)
    m = Retrain(**KW, retained_rows="sparse", checkpoint_every=8)
    m.learn_many(ids, X, y)
    deleted = set()
    for k in range(0, 120, 2):  # past a quarter of the rows dead: the store compacts
        m.unlearn_one(ids[k])
        deleted.add(k + 1)
        assert np.array_equal(m.z, fresh_masked(KW, ids, X, y, deleted, 120).z), k
    assert len(m.examples) == 60 and m.examples.replay_rows()[3].sum() == 60 <= len(m.examples.steps)
    for k in range(1, 120, 2):
        m.unlearn_one(ids[k])
    assert not m.z.any() and len(m.examples) == 0 and m.examples.nonzeros == 0
