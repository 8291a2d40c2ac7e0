"""A poll batch's inserts and deletes in one pass (core/mixed.py) against the one-by-one path."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.olu.test_contract import assert_same_state
from worker.olu import record_key
from worker.olu.algorithms.passive import PassiveOLU, PassiveRestartOLU
from worker.olu.core.mixed import learn_and_unlearn

DIM = 6
CLASSES = None  # a softmax model's classes, where a test sets them


def _model(seed: int, **kw) -> PassiveOLU:
    cls = kw.pop("cls", PassiveOLU)
    if CLASSES is not None:
        kw.update(loss="softmax", classes=CLASSES)
    return cls(dim=DIM, l2=0.01, radius=5.0, rho=kw.pop("rho", 1.0), noise_rng=np.random.default_rng(seed), **kw)


def _rows(rng, n):
    X = rng.normal(size=(n, DIM))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    return X, rng.choice([-1.0, 1.0] if CLASSES is None else CLASSES, n)


def _fed(seed: int, n0: int, **kw) -> tuple[PassiveOLU, list[str]]:
    rng = np.random.default_rng(1000 + seed)
    model = _model(seed, **kw)
    ids = [f"r-{i}" for i in range(n0)]
    model.learn_many(ids, *_rows(rng, n0))
    return model, ids


def _batch(model, rng, b: int, earlier: list[str], n: int = 500, deletes: int = 12, pool=None):
    """A batch of ``n`` rows, ``deletes`` of them deletes (of earlier records, of this batch's own
    inserts before them, of ids never seen, or ``pool``'s); the rest inserts."""
    ids = [f"s-{b}-{i}" for i in range(n)]
    X, y = _rows(rng, n)
    rows = sorted(rng.choice(np.arange(1, n), deletes, replace=False).tolist())
    names = []
    for k, row in enumerate(rows):
        kind = k % 4 if pool is None else 4
        names.append(earlier[int(rng.integers(len(earlier)))] if kind in (0, 1) else
                     ids[int(rng.integers(row))] if kind == 2 else f"never-{b}-{k}" if kind == 3 else pool[k])
    names = list(dict.fromkeys(names))  # a key deleted twice in one batch is not this path's case
    rows = rows[:len(names)]
    keys, X, y = model.prepare_batch(ids, X, y)
    spans, prev = [], 0
    for row in rows:
        if row > prev:
            spans.append((prev, row))
        prev = row + 1
    spans.append((prev, n))
    return keys, X, y, spans, rows, names


def _one_by_one(model, keys, X, y, spans, rows, names):
    ops = sorted([(first, stop, None) for first, stop in spans] + [(r, r, k) for k, r in enumerate(rows)])
    done = []
    for first, stop, k in ops:
        if k is None:
            model.learn_prepared(keys[first:stop], X[first:stop], y[first:stop])
        else:
            done.append(model.unlearn_request([names[k]]))
    return done


def _assert_same(a, b):
    assert_same_state(a, b)  # z, t, index, tombstones, ledger, accountant, counters: bit for bit
    assert (a.noise_meter.tau, a.noise_meter.var) == (b.noise_meter.tau, b.noise_meter.var)
    assert a.deletions_applied == b.deletions_applied


@pytest.mark.parametrize("seed", range(6))
def test_the_pass_changes_the_model_exactly_as_one_by_one(seed, monkeypatch):
    if seed >= 4:  # widths the kernels' eight lanes reach: blocks and a tail, blocks only
        monkeypatch.setattr(sys.modules[__name__], "DIM", [19, 64][seed - 4])
    _pass_against_one_by_one(seed, [300, 5_000, 40_000, 64_000, 1_000, 20_000][seed])


@pytest.mark.parametrize("classes", [["x", "y", "z", "w"], [5, 3]])
def test_the_pass_of_a_softmax_model_changes_it_exactly_as_one_by_one(classes, monkeypatch):
    """The K x d parameter through the same pass: its steps, K d coordinates of noise per deletion."""
    monkeypatch.setattr(sys.modules[__name__], "CLASSES", classes)
    monkeypatch.setattr(sys.modules[__name__], "DIM", 11)
    _pass_against_one_by_one(7, 3_000)


@pytest.mark.parametrize("seed", range(3))
def test_the_pass_under_per_request_changes_the_model_exactly_as_one_by_one(seed):
    """Per-request sigma (shift / sqrt(2 rho)) through the pass's factor, bit for bit."""
    _pass_against_one_by_one(seed, [300, 5_000, 20_000][seed], privacy_unit="per-request")


def _pass_against_one_by_one(seed: int, n0: int, **kw) -> None:
    rng = np.random.default_rng(seed)
    fast, earlier = _fed(seed, n0, **kw)
    slow, _ = _fed(seed, n0, **kw)
    taken = 0
    for b in range(4):
        batch = _batch(fast, rng, b, earlier)
        keys, X, y, spans, rows, names = batch
        mixed = learn_and_unlearn(fast, keys, X, y, spans, rows, [record_key(r) for r in names], names)
        if mixed is None:
            _one_by_one(fast, *batch)
        taken += mixed is not None
        expected = _one_by_one(slow, *batch)
        _assert_same(fast, slow)
        if mixed is not None:
            assert mixed.deletions == expected
            assert mixed.applied + mixed.skipped == sum(stop - first for first, stop in spans)
            states = [s for s in mixed.states if s is not None]
            assert len(states) == sum(d.changed_model for d in expected) > 0
            assert states[-1]["t"] <= fast.t and np.array_equal(states[-1]["z"], states[-1]["z"])
        earlier += [f"s-{b}-{i}" for i in range(500)]
    assert taken >= 3  # the tail filled at most once


def test_each_state_is_the_deletion_state_right_after_its_deletion():
    rng = np.random.default_rng(9)
    fast, earlier = _fed(9, 2_000)
    slow, _ = _fed(9, 2_000)
    keys, X, y, spans, rows, names = _batch(fast, rng, 0, earlier)
    mixed = learn_and_unlearn(fast, keys, X, y, spans, rows, [record_key(r) for r in names], names)
    ops = sorted([(first, stop, None) for first, stop in spans] + [(r, r, k) for k, r in enumerate(rows)])
    for first, stop, k in ops:
        if k is None:
            slow.learn_prepared(keys[first:stop], X[first:stop], y[first:stop])
            continue
        done = slow.unlearn_request([names[k]])
        state = mixed.states[k]
        if not done.changed_model:
            assert state is None
            continue
        expected = slow.deletion_state()
        assert state.keys() == expected.keys()
        assert np.asarray(state["z"]).tobytes() == expected["z"].tobytes()
        assert {k: v for k, v in state.items() if k != "z"} == {k: v for k, v in expected.items() if k != "z"}


def test_every_deletion_draws_its_own_noise_and_none_of_it_is_kept():
    model, earlier = _fed(3, 3_000)
    model._noise_rng = None  # OS entropy, as in production
    drawn = []
    rows_of = model._noise_rows
    model._noise_rows = lambda n: drawn.append(rows_of(n)) or drawn[-1]
    keys, X, y, spans, rows, names = _batch(model, np.random.default_rng(3), 0, earlier, pool=earlier[:12])
    mixed = learn_and_unlearn(model, keys, X, y, spans, rows, [record_key(r) for r in names], names)
    assert [d.outcome for d in mixed.deletions] == ["noised"] * 12
    assert [d.index for d in mixed.deletions] == list(range(1, 13))  # one charge and one ledger entry each
    assert len(model.ledger) == 12 and model.accountant.deletions == 12
    assert drawn[0].shape == (12, DIM) and not drawn[0].any()  # zeroed once added (invariant 1)
    steps = [np.asarray(s["z"]) for s in mixed.states]
    assert all(not np.array_equal(a, b) for a, b in zip(steps, steps[1:]))


def _untouched(model, before):
    after = model.export_state()
    assert after["meta"] == before["meta"]
    for k, v in before["arrays"].items():
        assert np.asarray(after["arrays"][k]).tobytes() == np.asarray(v).tobytes(), k


@pytest.mark.parametrize("case", ["inserted after its delete", "deleted twice", "per-request capacity",
                                  "another rule", "a subclass with its own deletion", "capacity", "tail fills"])
def test_where_the_pass_cannot_keep_the_order_it_changes_nothing(case):
    kw = {"privacy_unit": "per-request", "capacity": 5} if case == "per-request capacity" else {
        "cls": PassiveRestartOLU} if case == "another rule" else {"capacity": 5} if case == "capacity" else {}
    if case == "a subclass with its own deletion":  # the fact inherits, a changed step opts out
        kw = {"cls": type("Tuned", (PassiveOLU,), {"_delete": lambda self, key, steps: PassiveOLU._delete(
            self, key, steps)})}
    model, earlier = _fed(4, 65_336 if case == "tail fills" else 2_000, **kw)  # 200 of room
    keys, X, y, spans, rows, names = _batch(model, np.random.default_rng(4), 0, earlier, n=500, deletes=8,
                                            pool=earlier[:8])
    if case == "inserted after its delete":
        names[0] = "s-0-499"
    elif case == "deleted twice":
        names[1] = names[0]
    before = model.export_state()
    assert learn_and_unlearn(model, keys, X, y, spans, rows, [record_key(r) for r in names], names) is None
    _untouched(model, before)


def test_a_subclass_that_keeps_the_steps_inherits_the_pass():
    model, earlier = _fed(4, 2_000, cls=type("Renamed", (PassiveOLU,), {"algorithm": "test-renamed"}))
    keys, X, y, spans, rows, names = _batch(model, np.random.default_rng(4), 0, earlier, n=500, deletes=8,
                                            pool=earlier[:8])
    assert learn_and_unlearn(model, keys, X, y, spans, rows, [record_key(r) for r in names], names) is not None


def test_a_record_applied_twice_is_left_to_the_one_by_one_path():
    model, earlier = _fed(5, 1_000)
    model.learn_one(earlier[10], np.full(DIM, 0.1), 1)  # r-10 applied a second time
    keys, X, y, spans, rows, names = _batch(model, np.random.default_rng(5), 0, earlier, deletes=4,
                                            pool=[earlier[3], earlier[10], earlier[20], earlier[30]])
    before = model.export_state()
    assert learn_and_unlearn(model, keys, X, y, spans, rows, [record_key(r) for r in names], names) is None
    _untouched(model, before)


def test_a_rotation_whose_standby_cannot_take_the_pass_changes_no_model(monkeypatch):
    """Both models' passes are prepared before either runs: where the standby's does not apply,
    the active model's index pops are undone and nothing changes in either model."""
    from worker.olu.rotation import Rotation
    from worker.olu.rotation import mixed as rotation_mixed

    rng = np.random.default_rng(8)
    model = Rotation(PassiveOLU, lifetime_events=4_000, dim=DIM, l2=0.01, radius=5.0, rho=1.0,
                     noise_rng=np.random.default_rng(8))
    earlier = [f"r-{i}" for i in range(2_500)]
    model.learn_many(earlier, *_rows(rng, 2_500))  # a standby since event 2,000
    keys, X, y, spans, rows, names = _batch(model, rng, 0, earlier, n=300, deletes=6, pool=earlier[-6:])
    real, asked = rotation_mixed.prepare_pass, []

    def standby_declines(m, *args):
        asked.append(m)
        return None if m is model.standby else real(m, *args)

    monkeypatch.setattr(rotation_mixed, "prepare_pass", standby_declines)
    before = [m.export_state() for m in model.models]
    assert model.learn_and_unlearn(keys, X, y, spans, rows, [record_key(r) for r in names], names) is None
    assert asked == model.models  # the active's pass was prepared (its records popped), then undone
    for m, state in zip(model.models, before):
        _untouched(m, state)
    monkeypatch.setattr(rotation_mixed, "prepare_pass", real)
    done = model.learn_and_unlearn(keys, X, y, spans, rows, [record_key(r) for r in names], names)
    assert done is not None and [d.outcome for d in done.deletions] == ["noised"] * 6
    assert all(len(m.ledger) == 6 for m in model.models)  # each model its own draw and charge
