"""Exact retraining (Retrain) and the shared OGD replay."""

from __future__ import annotations

import contextlib

import numpy as np
import orjson
import pytest

from tests.olu.helpers import masked_run, synthetic_stream
from worker.compiled import jit
from worker.olu import ALGORITHMS, load_model
from worker.olu.algorithms.baselines import PlainOGD
from worker.olu.algorithms.retrain import Retrain
from worker.olu.core.examples import ExampleStore
from worker.olu.core.replay import replay_ogd
from worker.olu.exceptions import ConfigError, InvalidState

KW = dict(dim=5, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)


def fresh_masked(kw, ids, X, y, skip_steps, upto):
    """A fresh model fed the masked stream: ⊥ (identity, time index kept) at ``skip_steps``."""
    ref = PlainOGD(**kw)
    for j in range(upto):
        if j + 1 in skip_steps:
            ref.t += 1
        else:
            ref.learn_one(ids[j], X[j], y[j])
    return ref


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("loss", ["logistic", "ridge"])
def test_retrain_equals_a_fresh_model_on_the_masked_stream_bit_for_bit(reference, loss):
    kw = {**KW, "loss": loss}
    ids, X, y = synthetic_stream(600, 5, seed=2, loss=loss)
    ctx = jit.reference() if reference else contextlib.nullcontext()
    with ctx:
        m = Retrain(**kw)
        m.learn_many(ids[:300], X[:300], y[:300])
        deleted = set()
        for k in (0, 299, 150):
            d = m.unlearn_one(ids[k])
            deleted.add(k + 1)
            assert d.outcome == "exact" and d.sigma == 0.0 and d.shift == 0.0
            assert np.array_equal(m.z, fresh_masked(kw, ids, X, y, deleted, 300).z)
        for j in range(300, 600):  # learn_one this time: the same kernel step
            m.learn_one(ids[j], X[j], y[j])
        m.unlearn_one(ids[598])
        deleted.add(599)
        ref = fresh_masked(kw, ids, X, y, deleted, 600)
        assert np.array_equal(m.z, ref.z) and m.t == ref.t == 600
    if reference:  # and the pure-numpy reference process of the test helpers agrees exactly
        assert np.array_equal(m.z, masked_run(Retrain, kw, X, y, skip=deleted))


def test_step_sizes_are_not_reindexed_after_a_deletion():
    ids, X, y = synthetic_stream(50, 5, seed=3)
    m = Retrain(**KW)
    m.learn_many(ids, X, y)
    m.unlearn_one(ids[0])
    shifted = PlainOGD(**KW)  # the wrong semantics: the stream without the record, re-indexed
    shifted.learn_many(ids[1:], X[1:], y[1:])
    assert not np.allclose(m.z, shifted.z, rtol=1e-6)
    assert np.array_equal(m.z, fresh_masked(KW, ids, X, y, {1}, 50).z)


def test_a_record_applied_twice_loses_both_copies():
    ids, X, y = synthetic_stream(80, 5, seed=4)
    m = Retrain(**KW)
    m.learn_many(ids[:60], X[:60], y[:60])
    m.learn_one(ids[10], X[10], y[10])  # the same id again at step 61
    d = m.unlearn_one(ids[10])
    assert d.steps == (11, 61) and len(m.examples) == 59
    ref = PlainOGD(**KW)
    for j in range(60):
        if j == 10:
            ref.t += 1
        else:
            ref.learn_one(ids[j], X[j], y[j])
    ref.t += 1
    assert np.array_equal(m.z, ref.z)


def test_retrain_spends_no_budget_and_logs_exact_outcomes():
    ids, X, y = synthetic_stream(100, 5, seed=5)
    m = Retrain(**KW, capacity=1)
    m.learn_many(ids, X, y)
    for k in range(5):
        m.unlearn_one(ids[k])
    assert m.accountant.deletions == 0 and m.accountant.spent == 0.0
    assert [e["outcome"] for e in m.ledger] == ["exact"] * 5
    assert m.ledger[-1]["retained"] == 95 and m.counters["retrains"] == 5
    assert m.unlearn_one(ids[3]).outcome == "duplicate"
    assert m.unlearn_one("never").outcome == "not_applied"
    assert m.learn_one(ids[3], X[3], y[3]) is False  # an insert after its delete stays skipped


def test_deleting_everything_returns_to_the_start():
    ids, X, y = synthetic_stream(20, 5, seed=6)
    m = Retrain(**KW)
    m.learn_many(ids, X, y)
    for r in ids:
        m.unlearn_one(r)
    assert np.array_equal(m.z, np.zeros(5)) and len(m.examples) == 0
    assert np.array_equal(replay_ogd(m, ExampleStore(5)), np.zeros(5))


def test_deleted_rows_are_zeroed_and_never_exported():
    ids, X, y = synthetic_stream(300, 5, seed=7)
    m = Retrain(**KW)
    m.learn_many(ids, X, y)
    for k in (0, 120, 299):
        m.unlearn_one(ids[k])
    buf = m.examples.raw_buffers()[0]
    for k in (0, 120, 299):
        assert X[k].tobytes() not in buf.tobytes()
    assert X[1].tobytes() in buf.tobytes()
    blob = b"".join(a.tobytes() for a in m.export_state()["arrays"].values())
    assert X[120].tobytes() not in blob and X[121].tobytes() in blob


def _json_roundtrip(state):
    meta = orjson.loads(orjson.dumps(state["meta"]))
    arrays = {k: np.frombuffer(v.tobytes(), dtype=v.dtype).reshape(v.shape) for k, v in state["arrays"].items()}
    return {"meta": meta, "arrays": arrays}


def test_state_round_trips_bit_exactly_and_continues_identically():
    ids, X, y = synthetic_stream(500, 5, seed=8)
    m = Retrain(**KW)
    m.learn_many(ids[:250], X[:250], y[:250])
    for k in (3, 200, 249):
        m.unlearn_one(ids[k])
    state = m.export_state()
    m2 = load_model(_json_roundtrip(state))
    assert type(m2) is Retrain and ALGORITHMS["retrain"] is Retrain
    s2 = m2.export_state()
    assert s2["meta"] == state["meta"] and set(s2["arrays"]) == set(state["arrays"])
    for k, a in state["arrays"].items():
        assert a.dtype == s2["arrays"][k].dtype and np.array_equal(a, s2["arrays"][k]), k
    for model in (m, m2):
        model.learn_many(ids[250:], X[250:], y[250:])
        model.unlearn_one(ids[100])
        model.unlearn_one(ids[400])
    assert np.array_equal(m.z, m2.z) and m.t == m2.t == 500


def test_state_with_examples_that_do_not_match_the_index_is_rejected():
    ids, X, y = synthetic_stream(40, 5, seed=9)
    m = Retrain(**KW)
    m.learn_many(ids, X, y)
    state = m.export_state()
    for name in ("examples_X", "examples_y", "examples_steps", "examples_keys"):
        state["arrays"][name] = state["arrays"][name][1:]
    with pytest.raises(InvalidState):
        load_model(state)


def test_replay_of_a_durable_deletion_adopts_the_stored_state():
    ids, X, y = synthetic_stream(60, 5, seed=10)
    m = Retrain(**KW)
    m.learn_many(ids, X, y)
    snapshot = m.export_state()
    m.unlearn_one(ids[5])
    stored = m.deletion_state()
    replayed = load_model(snapshot)
    d = replayed.unlearn_one(ids[5], post_state=stored)
    assert d.outcome == "exact" and np.array_equal(replayed.z, m.z)
    assert not replayed.examples.has_step(6)


# ---------------------------------------------------------------------------- checkpoints

@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("every", [1, 7, 64])
def test_a_replay_from_a_checkpoint_gives_the_bits_of_a_replay_from_scratch(reference, every):
    ids, X, y = synthetic_stream(400, 5, seed=11)
    ctx = jit.reference() if reference else contextlib.nullcontext()
    rng = np.random.default_rng(every)
    with ctx:
        m = Retrain(**KW, checkpoint_every=every)
        scratch = Retrain(**KW, checkpoint_every=10**9)  # never a checkpoint: always from 0
        deleted = set()
        for lo in range(0, 400, 50):  # batches and single rows, deletions in between
            for model in (m, scratch):
                model.learn_many(ids[lo:lo + 45], X[lo:lo + 45], y[lo:lo + 45])
                for j in range(lo + 45, lo + 50):
                    model.learn_one(ids[j], X[j], y[j])
            for k in rng.choice(lo + 50, size=3, replace=False).tolist():
                for model in (m, scratch):
                    model.unlearn_one(ids[k])
                deleted.add(k + 1)
                assert np.array_equal(m.z, scratch.z)
        assert np.array_equal(m.z, fresh_masked(KW, ids, X, y, deleted, 400).z)
        assert m.counters["replayed_steps"] < scratch.counters["replayed_steps"]


def test_a_recent_deletion_replays_only_what_follows_its_checkpoint():
    ids, X, y = synthetic_stream(2_000, 5, seed=12)
    m = Retrain(**KW, checkpoint_every=100)
    for lo in range(0, 2_000, 50):
        m.learn_many(ids[lo:lo + 50], X[lo:lo + 50], y[lo:lo + 50])
    m.unlearn_one(ids[1_949])  # step 1950: 50 steps old
    assert m.counters["replayed_steps"] <= 50 + 100
    before = m.counters["replayed_steps"]
    m.unlearn_one(ids[0])  # the oldest record: everything after it
    assert m.counters["replayed_steps"] - before == 1_998


def test_every_kept_checkpoint_is_the_iterate_over_the_retained_rows_up_to_its_step():
    ids, X, y = synthetic_stream(600, 5, seed=13)
    m = Retrain(**KW, checkpoint_every=40)
    m.learn_many(ids[:300], X[:300], y[:300])
    for k in (250, 20, 299):
        m.unlearn_one(ids[k])
    for lo in range(300, 600, 20):
        m.learn_many(ids[lo:lo + 20], X[lo:lo + 20], y[lo:lo + 20])
    deleted = {251, 21, 300}
    assert len(m._checkpoint_steps) == 15  # 40, ..., 280 taken by the replays, then 320, ..., 600
    for step, z in zip(m._checkpoint_steps, m._checkpoints):
        assert np.array_equal(z, fresh_masked(KW, ids, X, y, deleted, step).z), step


def test_a_restored_model_has_no_checkpoints_and_still_deletes_exactly():
    ids, X, y = synthetic_stream(500, 5, seed=14)
    m = Retrain(**KW, checkpoint_every=32)
    m.learn_many(ids, X, y)
    m2 = load_model(_json_roundtrip(m.export_state()))
    assert m2.config["checkpoint_every"] == 32 and m2._checkpoint_steps == []
    for model in (m, m2):
        model.unlearn_one(ids[480])
        model.unlearn_one(ids[7])
    assert np.array_equal(m.z, m2.z)
    assert np.array_equal(m.z, fresh_masked(KW, ids, X, y, {481, 8}, 500).z)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "64"])
def test_a_bad_checkpoint_interval_is_refused_by_name(bad):
    with pytest.raises(ConfigError, match="checkpoint_every"):
        Retrain(**KW, checkpoint_every=bad)
