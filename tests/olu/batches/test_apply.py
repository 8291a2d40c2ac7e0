"""``worker.olu.apply_batch``: one call a poll batch, one outcome per step, the route chosen inside
and the state the same bit for bit as record by record."""

from __future__ import annotations

import numpy as np
import pytest

from tests.olu.test_contract import assert_same_state
from worker.olu import (
    Batch,
    BudgetExhausted,
    Columns,
    Forget,
    Forgotten,
    Learn,
    Learned,
    MemoryPair,
    PassiveOLU,
    Published,
    apply_batch,
)
from worker.olu.rotation import Rotation


def _rows(n: int, seed: int = 0, dim: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dim))
    X /= 2 * np.linalg.norm(X, axis=1, keepdims=True)
    return X, (rng.random(n) < 0.5).astype(np.float64)


def _model(kind: str):
    if kind == "rotation":
        return Rotation(PassiveOLU, lifetime_events=400, variant="disjoint", privacy_unit="per-request", dim=3,
                        noise_rng=np.random.default_rng(5))
    return PassiveOLU(dim=3, noise_rng=np.random.default_rng(5), privacy_unit=kind)


def _steps(X, y):
    """Inserts split by single-record deletes (of earlier, later-unknown and repeated ids)."""
    ids = [f"r-{j}" for j in range(len(y))]
    steps, start = [], 0
    for cut, victim in ((40, "r-3"), (41, "r-3"), (90, "nobody"), (150, "r-77")):
        steps.append(Learn(start, cut, X[start:cut], y[start:cut], ids[start:cut]))
        steps.append(Forget(cut, (victim,)))
        start = cut
    steps.append(Learn(start, len(y), X[start:], y[start:], ids[start:]))
    return steps


def _as_columns(steps, dim: int = 3) -> Batch:
    """``steps`` (Learn steps with their own rows) as the compiled scan hands them: the whole
    batch as columns, row j for position j."""
    from worker.olu import record_keys
    n = sum(s.stop - s.start if isinstance(s, Learn) else 1 for s in steps)
    CX, cy, keys, accepted = np.zeros((n, dim)), np.zeros(n), np.zeros(n, np.uint64), np.zeros(n, bool)
    shifted, position = [], 0
    for step in steps:
        if isinstance(step, Learn):
            m = step.stop - step.start
            CX[position:position + m], cy[position:position + m] = step.X, step.y
            keys[position:position + m] = record_keys(step.ids)
            accepted[position:position + m] = True
            shifted.append(Learn(position, position + m))
            position += m
        else:
            shifted.append(Forget(position, step.ids))
            position += 1
    return Batch(shifted, Columns(CX, cy, keys, accepted))


@pytest.mark.parametrize("kind", ["all-deletions", "per-request", "rotation"])
@pytest.mark.parametrize("columns", [False, True], ids=["own-rows", "columns"])
def test_a_batch_gives_the_state_record_by_record_gives(kind, columns):
    X, y = _rows(200)
    steps = _steps(X, y)
    batch_model, reference = _model(kind), _model(kind)
    if columns:  # the compiled scan's form: the whole batch as columns, row j for position j
        done = apply_batch(batch_model, _as_columns(steps))
    else:
        done = apply_batch(batch_model, Batch(steps))
    for step in steps:
        if isinstance(step, Learn):
            reference.learn_many(step.ids, step.X, step.y)
        else:
            reference.unlearn_request(list(step.ids))
    assert np.asarray(batch_model.z).tobytes() == np.asarray(reference.z).tobytes()
    assert batch_model.deletions_applied == reference.deletions_applied == 2
    assert [type(o) for o in done.outcomes] == [type(s) is Learn and Learned or Forgotten for s in steps]
    assert [o.deletion.outcome for o in done.outcomes if isinstance(o, Forgotten)] == \
        ["noised", "duplicate", "not_applied", "noised"]
    assert done.applied == 200 and done.skipped == 0
    assert all(np.isfinite(loss) for loss in done.losses) and done.losses


class _NoNoise:
    """A noise source of zeros: the rotation's two models draw in another order in one pass than
    one by one, so only noiseless states compare bit for bit (test_mixed checks the draws)."""

    def standard_normal(self, size):
        return np.zeros(size)

    def normal(self, loc, scale, size):
        return np.zeros(size)


@pytest.mark.parametrize("variant", ["disjoint", "overlap"])
@pytest.mark.parametrize("unit", ["per-request", "all-deletions"])
def test_a_batch_across_promotions_takes_one_pass_per_stretch(variant, unit, monkeypatch):
    """A rotation renews between two rows; the batch is split there, each stretch in one pass
    (no delete one by one), and the state is record by record's, promotions included."""
    def rotation():
        return Rotation(PassiveOLU, lifetime_events=60, variant=variant, privacy_unit=unit, dim=3,
                        noise_rng=_NoNoise())

    X, y = _rows(200, seed=3)
    ids = [f"r-{j}" for j in range(200)]
    # after 10 events, a promotion every 30: the delete at 52 comes right after the row reaching
    # event 60; stretches between promotions with one delete, two, or none
    cuts = {20: "r-3", 45: "r-30", 52: "r-50", 53: "r-7", 95: "r-90", 130: "r-121", 185: "r-170"}
    steps, start = [], 0
    for cut, victim in cuts.items():
        steps += [Learn(start, cut, X[start:cut], y[start:cut], ids[start:cut]), Forget(cut, (victim,))]
        start = cut
    steps.append(Learn(start, 200, X[start:], y[start:], ids[start:]))
    batch_model, reference = rotation(), rotation()
    batch_model.learn_many([f"w-{j}" for j in range(10)], X[:10], y[:10])
    reference.learn_many([f"w-{j}" for j in range(10)], X[:10], y[:10])

    def one_by_one(*args, **kwargs):
        raise AssertionError("a delete went one by one")

    monkeypatch.setattr(batch_model, "unlearn_request", one_by_one)
    done = apply_batch(batch_model, _as_columns(steps))
    answers = [reference.unlearn_request(list(step.ids)) if isinstance(step, Forget)
               else reference.learn_many(step.ids, step.X, step.y) for step in steps]
    assert batch_model.generation == reference.generation == 6
    assert_same_state(batch_model, reference)
    assert len(done.outcomes) == len(steps)
    outcomes = [o.deletion.outcome for o in done.outcomes if isinstance(o, Forgotten)]
    assert outcomes == [a.outcome for a in answers if not isinstance(a, int)]
    assert outcomes.count("noised") >= 5  # the others' records left with a retired model
    assert done.applied == 200 and done.skipped == 0


def test_a_refused_row_is_named_and_the_rest_are_learned():
    X, y = _rows(10)
    X[4] *= 10.0  # over the feature bound
    model, reference = PassiveOLU(dim=3, feature_policy="reject"), PassiveOLU(dim=3, feature_policy="reject")
    done = apply_batch(model, Batch([Learn(7, 17, X, y, [f"r-{j}" for j in range(10)])]))
    assert [(position, bad.reason) for position, bad in done.outcomes[0].rejected] == [(11, "norm_exceeded")]
    keep = [j for j in range(10) if j != 4]
    reference.learn_many([f"r-{j}" for j in keep], X[keep], y[keep])
    assert model.z.tobytes() == reference.z.tobytes() and done.applied == 9 and done.skipped == 0


def test_the_published_state_is_the_one_right_after_the_deletion():
    """A release right after a deletion shows the state there, though the batch learns on."""
    X, y = _rows(60)
    ids = [f"r-{j}" for j in range(60)]
    model = PassiveOLU(dim=3, noise_rng=np.random.default_rng(1))
    twin = PassiveOLU(dim=3, noise_rng=np.random.default_rng(1))
    done = apply_batch(model, Batch([Learn(0, 30, X[:30], y[:30], ids[:30]), Forget(30, ("r-2",), publish=True),
                                     Learn(31, 61, X[30:], y[30:], ids[30:])]))
    twin.learn_many(ids[:30], X[:30], y[:30])
    twin.unlearn_request(["r-2"])
    published = done.outcomes[1].published
    assert isinstance(published, Published) and published.t == twin.t == 30
    assert published.weights.tobytes() == twin.weights.tobytes() != model.weights.tobytes()
    assert done.outcomes[1].state["z"].tobytes() == twin.z.tobytes()  # the delta to make durable


def test_a_request_the_budget_cannot_cover_is_refused_and_changes_nothing():
    X, y = _rows(20)
    model = MemoryPair(dim=3, **{**MemoryPair.example_params, "max_deletions": 2, "on_budget": "refuse"})
    ids = [f"r-{j}" for j in range(20)]
    model.learn_many(ids, X, y)
    spent = 0
    while True:  # use the budget up, then one more
        before = model.z.copy()
        done = apply_batch(model, Batch([Forget(0, (ids[spent],))]))
        outcome = done.outcomes[0]
        if outcome.refused is not None:
            assert isinstance(outcome.refused, BudgetExhausted) and not outcome.partial
            assert model.z.tobytes() == before.tobytes()
            break
        spent += 1
        assert spent <= 2


def test_without_the_quality_metric_no_loss_is_measured():
    X, y = _rows(10)
    done = apply_batch(PassiveOLU(dim=3), Batch([Learn(0, 10, X, y, [f"r-{j}" for j in range(10)])], quality=False))
    assert done.losses == [] and done.applied == 10
