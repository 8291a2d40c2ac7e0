"""Exact unlearning by retraining from scratch (the "Retraining" baseline of docs/algorithms.md 8).

At each deletion of an applied record, :class:`Retrain` zeroes the record's rows in its
:class:`~worker.olu.core.examples.ExampleStore` and re-runs projected OGD from the data-independent
start z_init = 0 over the retained examples, in their original order and with their **original
step indices**: a deleted step becomes the skip element ⊥ (identity update), and the step size of
every later example is not re-indexed (docs/guarantee.md 2.2). The result is exactly the
reference process of the OLU definition, so the deletion needs no noise and no budget: outcome
``exact``. It costs O(t) sequential OGD steps per deletion and O(t d) memory.

The replay itself (:func:`~worker.olu.core.replay.replay_ogd`) is shared with the active
algorithms' "retrain" order fallback.
"""

from __future__ import annotations

import numpy as np

from ..core.base import Deletion, OnlineUnlearner
from ..core.examples import ExampleStore
from ..core.replay import load_store, record_outcome, replay_ogd, store_arrays
from ..exceptions import InvalidState


class Retrain(OnlineUnlearner):
    """Exact unlearning: on each deletion, re-run OGD from z_init over the retained examples.

    >>> m = Retrain(dim=2, l2=0.1, radius=5.0)
    >>> _ = m.learn_many(["a", "b", "c"], [[0.6, 0.8], [0.8, -0.6], [1.0, 0.0]], [1, -1, 1])
    >>> d = m.unlearn_one("b")
    >>> d.outcome, d.sigma, d.index, len(m.examples), m.t
    ('exact', 0.0, 0, 2, 3)
    """

    algorithm = "retrain"
    keeps_examples = True

    def __init__(self, dim: int, **kwargs):
        super().__init__(dim, **kwargs)
        self.examples = ExampleStore(dim)
        self.counters["retrains"] = 0

    def _after_learn(self, key: int, step: int, x: np.ndarray, y: float) -> None:
        self.examples.append(key, step, x, y)

    def _after_learn_batch(self, keys, steps, X, y) -> None:
        self.examples.extend(keys, steps, X, y)

    def _delete(self, key: int, steps: list[int]) -> Deletion:
        self.examples.remove_steps(steps)
        self.z = replay_ogd(self, self.examples)
        self.counters["retrains"] += 1
        record_outcome(self, "exact", steps, retained=len(self.examples))
        return Deletion("exact", self.accountant.deletions, 0.0, 0.0, tuple(steps))

    def _export_arrays(self) -> dict[str, np.ndarray]:
        return store_arrays(self.examples)

    def _import(self, meta: dict, arrays: dict) -> None:
        self.examples = load_store(self, arrays)
        if not np.array_equal(self.index.live_steps(), self.examples.steps):
            raise InvalidState("retained examples do not match the applied-record index")
