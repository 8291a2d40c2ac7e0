"""The model's count of deletions applied (the release's ``deletions``), for every algorithm.

The release schema defines ``deletions`` as deletions applied. It used to be the accountant's
count, which only sees deletions that were charged noise: exact (retrain, active-newton, the active
fallbacks), restarted and retrained deletions were missing, so ``retrain`` reported 0 forever.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import worker.olu  # noqa: F401  (registers every algorithm)
from tests.olu.helpers import synthetic_stream
from worker.olu import ALGORITHMS, load_model
from worker.olu.exceptions import InvalidState

ALGORITHM_NAMES = sorted(name for name in ALGORITHMS if not name.startswith("test-"))
RELEASE_SCHEMA = Path(__file__).resolve().parents[3] / "schemas" / "release.schema.json"
#: Algorithms whose deletions leave the model as it is (ogd ignores them, dp-tofw's releases are
#: private anyway): nothing is applied, so nothing is counted.
NOT_APPLIED = {"ogd", "dp-tofw"}
K = 6


def new_model(name: str):
    kwargs = dict(dim=3, loss="ridge" if name == "active-newton" else "logistic", l2=0.1, radius=5.0,
                  noise_rng=np.random.default_rng(7))
    # Small capacities so the budget paths (memory-pair's retrain, rewind's refit) run too.
    kwargs.update({"memory-pair": {"max_deletions": 2},
                   "rewind": {"retrain_every": 60, "train_steps": 20, "max_deletions": 2}}.get(name, {}))
    return ALGORITHMS[name](**kwargs)


def learn_and_delete(model, rounds: int, start: int = 0) -> tuple[list, int]:
    """Per round: learn 30 records, delete one of them, then one of the first round (out of
    arrival order: the active algorithms' fallback; already gone after a restart). Returns the
    outcomes and how many of the deletes hit a record the model had applied and not forgotten."""
    loss = "ridge" if model.loss.name == "ridge" else "logistic"
    ids, X, y = synthetic_stream(30 * (start + rounds), model.dim, seed=3, loss=loss)
    outcomes, live = [], 0
    for r in range(start, start + rounds):
        chunk = slice(30 * r, 30 * (r + 1))
        model.learn_many(ids[chunk], X[chunk], y[chunk])
        for victim in (ids[30 * r + (7 * r + 5) % 30], ids[10 + r]):
            before = len(model.index)
            outcomes.append(model.unlearn_one(victim).outcome)
            live += len(model.index) < before  # it held the record: the delete took it out
            # neither counts: the same id again, and an id the model never saw
            assert model.unlearn_one(victim).outcome == "duplicate"
            assert model.unlearn_one(f"never-seen-{victim}").outcome == "not_applied"
    return outcomes, live


def applied(name: str, live: int) -> int:
    return 0 if name in NOT_APPLIED else live


def test_every_released_algorithm_is_covered():
    enum = json.loads(RELEASE_SCHEMA.read_text())["properties"]["algorithm"]["enum"]
    assert set(ALGORITHM_NAMES) == set(enum)


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_deletions_applied_counts_every_deletion_that_changed_the_model(name):
    model = new_model(name)
    assert model.deletions_applied == 0
    outcomes, live = learn_and_delete(model, K)
    assert live >= K  # at least every round's new record
    changed = sum(o in ("noised", "exact", "restarted", "retrained") for o in outcomes)
    assert changed == applied(name, live), outcomes
    assert model.deletions_applied == applied(name, live)


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_deletions_applied_survives_export_and_import(name):
    model = new_model(name)
    _, live = learn_and_delete(model, K)
    state = model.export_state()
    assert state["meta"]["deletions_applied"] == applied(name, live)
    restored = load_model(state, noise_rng=np.random.default_rng(8))
    assert restored.deletions_applied == applied(name, live)
    _, more = learn_and_delete(restored, 2, start=K)  # and it goes on counting from there
    assert more >= 2 and restored.deletions_applied == applied(name, live + more)


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_a_state_saved_before_the_count_existed_still_restores_with_it(name):
    model = new_model(name)
    _, live = learn_and_delete(model, K)
    state = model.export_state()
    del state["meta"]["deletions_applied"]  # as written by the previous release of the worker
    assert load_model(state).deletions_applied == applied(name, live)


@pytest.mark.parametrize("stored", [-1, 1.5, True, "3", 0])
def test_a_stored_count_below_what_the_ledger_proves_is_rejected(stored):
    model = new_model("passive")
    learn_and_delete(model, 2)
    state = model.export_state()
    state["meta"]["deletions_applied"] = stored  # the ledger holds four noised deletions
    with pytest.raises(InvalidState, match="deletions_applied"):
        load_model(state)
