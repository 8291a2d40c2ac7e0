"""Exact unlearning by retraining (the "Retraining" baseline of docs/algorithms.md 8), from the
nearest checkpoint instead of from scratch.

At each deletion of an applied record, :class:`Retrain` zeroes the record's rows in its
:class:`~worker.olu.core.examples.ExampleStore` and re-runs projected OGD over the retained
examples, in their original order and with their **original step indices**: a deleted step becomes
the skip element ⊥ (identity update), and the step size of every later example is not re-indexed
(docs/guarantee.md 2.2). The result is exactly the reference process of the OLU definition, so the
deletion needs no noise and no budget: outcome ``exact``, whatever the privacy unit.

Checkpoints make a deletion cost what follows the record, not the whole stream. OGD is sequential:
its iterate after step c depends only on the rows applied at steps <= c. So the model keeps the
iterate every ``checkpoint_every`` steps; a deletion of the rows at steps u drops the checkpoints
at or after min(u), restarts from the newest one before it (or from z_init = 0) and replays only
the later rows, taking the dropped checkpoints again on the way. Every kept checkpoint is, at all
times, the iterate of OGD from 0 over the rows still retained up to its step, so the replay from
it gives the bits a replay from scratch gives (tests/olu/algorithms/test_retrain.py checks both
against a fresh model fed the masked stream). A deletion costs O((t - c) d) for its checkpoint c;
the checkpoints cost d floats per ``checkpoint_every`` rows (0.4 % of the rows' memory at the
default 256). They are a cache, not state: a restored model has none, and its first deletion
replays from scratch and takes them again.

The replay itself (:func:`~worker.olu.core.replay.replay_rows`) is shared with the active
algorithms' "retrain" order fallback.
"""

from __future__ import annotations

import bisect

import numpy as np

from ..core.base import Deletion, OnlineUnlearner
from ..core.examples import ExampleStore
from ..core.replay import load_store, record_outcome, replay_rows, store_arrays
from ..exceptions import ConfigError, InvalidState

#: Steps between checkpoints unless ``checkpoint_every`` says otherwise.
CHECKPOINT_EVERY = 256


class Retrain(OnlineUnlearner):
    """Exact unlearning: on each deletion, re-run OGD over the retained examples from the newest
    checkpoint before the record.

    >>> m = Retrain(dim=2, l2=0.1, radius=5.0)
    >>> _ = m.learn_many(["a", "b", "c"], [[0.6, 0.8], [0.8, -0.6], [1.0, 0.0]], [1, -1, 1])
    >>> d = m.unlearn_one("b")
    >>> d.outcome, d.sigma, d.index, len(m.examples), m.t
    ('exact', 0.0, 0, 2, 3)
    """

    algorithm = "retrain"
    keeps_examples = True
    settings = {"checkpoint_every": "checkpoint_every"}

    def __init__(self, dim: int, *, checkpoint_every: int = CHECKPOINT_EVERY, **kwargs):
        if isinstance(checkpoint_every, bool) or not (
                isinstance(checkpoint_every, int) and checkpoint_every >= 1):
            raise ConfigError(
                f"checkpoint_every must be an integer >= 1, got {checkpoint_every!r}")
        super().__init__(dim, **kwargs)
        self.config.update(checkpoint_every=checkpoint_every)
        self.examples = ExampleStore(dim)
        self.counters["retrains"] = 0
        self.counters["replayed_steps"] = 0
        self._checkpoint_steps: list[int] = []  # increasing
        self._checkpoints: list[np.ndarray] = []

    # ------------------------------------------------------------------ learning
    def _after_learn(self, key: int, step: int, x: np.ndarray, y: float) -> None:
        self.examples.append(key, step, x, y)
        self._maybe_checkpoint()

    def _after_learn_batch(self, keys, steps, X, y) -> None:
        self.examples.extend(keys, steps, X, y)
        self._maybe_checkpoint()

    def _maybe_checkpoint(self) -> None:
        # the hooks run with z and t those after the rows just applied
        self._checkpoint_if_due(self.t, self.z)

    def _last_checkpoint(self) -> int:
        return self._checkpoint_steps[-1] if self._checkpoint_steps else 0

    def _checkpoint_if_due(self, step: int, z: np.ndarray) -> None:
        """Keep ``z``, the iterate at ``step``, when that is an interval past the last one."""
        if step - self._last_checkpoint() >= self.config["checkpoint_every"]:
            self._checkpoint_steps.append(step)
            self._checkpoints.append(np.array(z, dtype=np.float64))

    # ------------------------------------------------------------------ unlearning
    def _delete(self, key: int, steps: list[int]) -> Deletion:
        self.examples.remove_steps(steps)
        self.z = self._replay_from(min(steps))
        self.counters["retrains"] += 1
        record_outcome(self, "exact", steps, retained=len(self.examples))
        return Deletion("exact", self.accountant.deletions, 0.0, 0.0, tuple(steps))

    def _replay_from(self, first: int) -> np.ndarray:
        """OGD over the retained rows after the newest checkpoint before step ``first``, taking
        the checkpoints it passes again; the iterate at step t."""
        keep = bisect.bisect_left(self._checkpoint_steps, first)
        del self._checkpoint_steps[keep:], self._checkpoints[keep:]
        z = self._checkpoints[-1] if keep else np.zeros(self.param_dim)
        X, y, steps = self.examples.live_rows()
        lo = int(np.searchsorted(steps, self._last_checkpoint(), side="right"))
        every = self.config["checkpoint_every"]
        while lo < len(steps):
            # the rows up to the next checkpoint's step (at least one), then that checkpoint
            target = self._last_checkpoint() + every
            hi = max(int(np.searchsorted(steps, target, side="right")), lo + 1)
            z = replay_rows(self, z, X[lo:hi], y[lo:hi], steps[lo:hi])
            self.counters["replayed_steps"] += hi - lo
            self._checkpoint_if_due(int(steps[hi - 1]), z)
            lo = hi
        return np.array(z, dtype=np.float64)

    # ------------------------------------------------------------------ state
    def _export_arrays(self) -> dict[str, np.ndarray]:
        return store_arrays(self.examples)

    def _import(self, meta: dict, arrays: dict) -> None:
        self.examples = load_store(self, arrays)
        self._checkpoint_steps, self._checkpoints = [], []  # a cache: the next deletion rebuilds it
        if not np.array_equal(self.index.live_steps(), self.examples.steps):
            raise InvalidState("retained examples do not match the applied-record index")
