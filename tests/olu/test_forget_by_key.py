"""Forgetting a data subject by key: every algorithm, its state, rotation (core/subjects.py)."""

from __future__ import annotations

import numpy as np
import pytest

from worker.olu import Batch, Forget, Learn, apply_batch, load_model, record_key
from worker.olu.core.subjects import SubjectIndex
from worker.olu.rotation import Rotation

from .test_contract import CASES, DIM, algorithm, assert_same_state, params, stream

SUBJECTS = 7


def owners(n: int) -> list[str]:
    return [f"user-{i % SUBJECTS}" for i in range(n)]


def learned(case: str, seed: int = 1, **extra):
    model = algorithm(case)(dim=DIM, noise_rng=np.random.default_rng(seed), forget_by_key=True,
                            **params(case), **extra)
    ids, X, y = stream(case)
    model.learn_many(ids, X, y, subjects=owners(len(ids)))
    return model, ids


def forget(model, step: Forget):
    return apply_batch(model, Batch([step])).outcomes[0]


@pytest.mark.parametrize("name", CASES)
def test_forgetting_a_subject_is_the_request_naming_its_records(name):
    """The same noise draw, charge and state as one request naming the subject's ids."""
    by_key, ids = learned(name)
    by_ids, _ = learned(name)
    mine = [r for r, who in zip(ids, owners(len(ids))) if who == "user-3"]
    a = forget(by_key, Forget(0, (), subject=record_key("user-3")))
    b = forget(by_ids, Forget(0, tuple(mine)))
    assert a.refused is None and b.refused is None
    assert a.deletion.records == b.deletion.records  # all but restart's: every one of them
    assert len(a.deletion.not_applied) == len(b.deletion.not_applied) == len(mine) - a.deletion.records
    assert (a.deletion.outcome, a.deletion.sigma) == (b.deletion.outcome, b.deletion.sigma)
    assert_same_state(by_key, by_ids)
    again = forget(by_key, Forget(0, (), subject=record_key("user-3")))
    assert not again.deletion.changed_model and len(again.deletion.duplicates) == len(mine)


@pytest.mark.parametrize("name", ["passive", "memory-pair", "retrain"])
def test_the_subject_map_survives_export_and_restore(name):
    model, ids = learned(name)
    back = load_model(model.export_state())
    assert back.forgets_by_key
    for who in ("user-0", "user-6", "nobody"):
        assert back.subject_records(record_key(who)).tolist() == \
            model.subject_records(record_key(who)).tolist()
    assert len(back.subject_records(record_key("user-0"))) == len(range(0, len(ids), SUBJECTS))


def test_an_unknown_subject_is_nothing_to_unlearn_and_costs_nothing():
    model, _ = learned("passive")
    spent = model.accountant.spent
    answer = forget(model, Forget(0, (), subject=record_key("nobody")))
    assert answer.refused is None and answer.deletion.outcome == "not_applied"
    assert answer.deletion.records == 0 and model.accountant.spent == spent


def test_a_model_without_the_map_refuses_and_changes_nothing():
    model = algorithm("passive")(dim=DIM, **params("passive"))
    ids, X, y = stream("passive")
    model.learn_many(ids, X, y, subjects=owners(len(ids)))
    z = model.z
    answer = forget(model, Forget(0, (), subject=record_key("user-1")))
    assert answer.refused is not None and "forget_by_key" in str(answer.refused)
    assert model.z is z and not model.forgets_by_key


def test_only_admitted_records_are_mapped_under_a_key_cap():
    model, ids = learned("passive", max_records_per_key=3)
    assert len(model.subject_records(record_key("user-2"))) == 3


def test_the_one_pass_batch_maps_what_it_learns():
    """A poll batch of inserts and single-record deletes (core/mixed.py) pairs its learned rows as
    learn_many does, in stream order."""
    ids, X, y = stream("passive")
    subjects = np.array([record_key(s) for s in owners(len(ids))], np.uint64)
    one = algorithm("passive")(dim=DIM, forget_by_key=True, **params("passive"))
    apply_batch(one, Batch([Learn(0, 30, X[:30], y[:30], ids[:30]), Forget(30, (ids[3],)),
                            Learn(31, 60, X[31:], y[31:], ids[31:])], subjects=subjects))
    each = algorithm("passive")(dim=DIM, forget_by_key=True, **params("passive"))
    each.learn_many(ids[:30], X[:30], y[:30], subjects=subjects[:30])
    each.unlearn_request([ids[3]])
    each.learn_many(ids[31:], X[31:], y[31:], subjects=subjects[31:])
    for who in set(owners(len(ids))):
        assert one.subject_records(record_key(who)).tolist() == \
            each.subject_records(record_key(who)).tolist()


def test_each_rotated_model_knows_its_own_records():
    cls = algorithm("passive")
    rotation = Rotation(cls, lifetime_events=48, noise_rng=np.random.default_rng(2),
                        forget_by_key=True, dim=DIM, **params("passive"))
    ids, X, y = stream("passive")
    rotation.learn_many(ids, X, y, subjects=owners(len(ids)))
    key = record_key("user-4")
    held = [set(m.subject_records(key).tolist()) for m in rotation.models]
    assert len(rotation.models) == 2 and held[1] and held[1] < held[0]  # the standby: since its birth
    assert set(rotation.subject_records(key).tolist()) == held[0] | held[1]
    answer = forget(rotation, Forget(0, (), subject=key))
    assert answer.deletion.changed_model
    assert all(not m.index.holds(k) for m in rotation.models for k in held[0] | held[1])


def test_sixteen_bytes_a_record():
    index = SubjectIndex()
    n = 1 << 20
    index.add(np.arange(n, dtype=np.uint64) % 1000, np.arange(n, dtype=np.uint64))
    assert index.nbytes / n <= 16.0 * (1 + 1 / 16)  # the open chunk's slack at most
    assert len(index.records(7)) == n // 1000 + (7 < n % 1000)
