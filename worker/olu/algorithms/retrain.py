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

``retained_rows="sparse"`` is for rows with few non-zeros (hashed, binned, crossed features):
every step, learning and replay, is then the sparse step of core/sparse.py (the iterate kept as
a scale times a vector, O(non-zeros) a step), the rows are kept sparse
(:class:`~worker.olu.core.sparse_examples.SparseExampleStore`, 16 bytes a non-zero) and a
checkpoint is that scaled state. The map is still projected OGD on the masked stream, rounded
as the sparse step rounds, and a replay follows it operation for operation, so a deletion stays
exact: the state equals a fresh sparse-step model fed the masked stream, bit for bit.
"""

from __future__ import annotations

import bisect

import numpy as np

from ..core import sparse
from ..core.base import Deletion, OnlineUnlearner
from ..core.examples import ExampleStore
from ..core.replay import (
    load_store,
    record_outcome,
    replay_rows,
    replay_sparse_rows,
    store_arrays,
)
from ..core.sparse import SparseRows
from ..core.sparse_examples import ARRAY_NAMES as SPARSE_ARRAYS
from ..core.sparse_examples import SparseExampleStore
from ..exceptions import ConfigError, InvalidState

#: Steps between checkpoints unless ``checkpoint_every`` says otherwise.
CHECKPOINT_EVERY = 256
#: How the retained rows are kept (and so which step the model takes): module docstring.
RETAINED_ROWS = ("dense", "sparse")
_SPARSE_PREFIX = "sparse_examples_"


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
    settings = {"checkpoint_every": "checkpoint_every", "retained_rows": "retained_rows"}

    def __init__(self, dim: int, *, checkpoint_every: int = CHECKPOINT_EVERY,
                 retained_rows: str = "dense", **kwargs):
        if isinstance(checkpoint_every, bool) or not (
                isinstance(checkpoint_every, int) and checkpoint_every >= 1):
            raise ConfigError(
                f"checkpoint_every must be an integer >= 1, got {checkpoint_every!r}")
        if retained_rows not in RETAINED_ROWS:
            raise ConfigError(
                f"retained_rows must be one of {', '.join(RETAINED_ROWS)}, got {retained_rows!r}")
        super().__init__(dim, **kwargs)
        self.sparse_steps = retained_rows == "sparse"
        if self.sparse_steps and not sparse.takes_sparse_steps(self):
            raise ConfigError("retained_rows=sparse takes the sparse step: a logistic or ridge "
                              f"loss on a ball, not {self.config.get('loss')!r}")
        self.config.update(checkpoint_every=checkpoint_every)
        if self.sparse_steps:  # stored only when on: older states' configs (digests) unchanged
            self.config.update(retained_rows=retained_rows)
        self.examples = SparseExampleStore(dim) if self.sparse_steps else ExampleStore(dim)
        self.counters["retrains"] = 0
        self.counters["replayed_steps"] = 0
        self._checkpoint_steps: list[int] = []  # increasing
        # the iterate at each: z, or (w, scale, ||w||^2) under retained_rows=sparse
        self._checkpoints: list = []

    # ------------------------------------------------------------------ learning
    def _after_learn(self, key: int, step: int, x: np.ndarray, y: float) -> None:
        self.examples.append(key, step, x, y)
        self._maybe_checkpoint()

    def _after_learn_batch(self, keys, steps, X, y) -> None:
        self.examples.extend(keys, steps, X, y)
        self._maybe_checkpoint()

    def _learn_batch(self, keys: np.ndarray, X, y: np.ndarray) -> int:
        if not self.sparse_steps:
            return super()._learn_batch(keys, X, y)
        rows = X if isinstance(X, SparseRows) else SparseRows.from_dense(X)
        applied, steps = sparse.learn_rows(self, keys, rows, y)
        if applied:
            kept = slice(None) if applied == len(steps) else np.flatnonzero(steps)
            self.examples.extend(np.asarray(keys, np.uint64)[kept], steps[kept], rows[kept],
                                 np.asarray(y, np.float64)[kept])
            self._maybe_checkpoint()
        return applied

    def fold_scale(self) -> None:
        """A no-op under sparse steps: a deletion request replays, a request with nothing to
        unlearn must leave the state as a model that never saw it (dense: the scale is 1)."""
        if not self.sparse_steps:
            super().fold_scale()

    def _state(self):
        """The iterate as the replay restarts from it."""
        if self.sparse_steps:
            return self.unscaled.copy(), self.scale, self.unscaled_sqnorm
        return self.z

    def _maybe_checkpoint(self) -> None:
        # the hooks run with z and t those after the rows just applied; the state (a copy of w
        # under sparse steps) is taken only when a checkpoint is due
        if self._due(self.t):
            self._checkpoint_if_due(self.t, self._state())

    def _last_checkpoint(self) -> int:
        return self._checkpoint_steps[-1] if self._checkpoint_steps else 0

    def _due(self, step: int) -> bool:
        return step - self._last_checkpoint() >= self.config["checkpoint_every"]

    def _checkpoint_if_due(self, step: int, state) -> None:
        """Keep ``state``, the iterate at ``step``, when that is an interval past the last one."""
        if self._due(step):
            self._checkpoint_steps.append(step)
            self._checkpoints.append(state if self.sparse_steps
                                     else np.array(state, dtype=np.float64))

    # ------------------------------------------------------------------ unlearning
    def _delete(self, key: int, steps: list[int]) -> Deletion:
        self.examples.remove_steps(steps)
        state = self._replay_from(min(steps))
        if self.sparse_steps:
            self.set_scaled(state[0].copy(), state[1], state[2])
        else:
            self.z = np.array(state, dtype=np.float64)
        self.counters["retrains"] += 1
        record_outcome(self, "exact", steps, retained=len(self.examples))
        return Deletion("exact", self.accountant.deletions, 0.0, 0.0, tuple(steps))

    def _replay_from(self, first: int):
        """OGD over the retained rows after the newest checkpoint before step ``first``, taking
        the checkpoints it passes again; the iterate at step t (as :meth:`_state` gives it)."""
        keep = bisect.bisect_left(self._checkpoint_steps, first)
        del self._checkpoint_steps[keep:], self._checkpoints[keep:]
        if keep:
            state = self._checkpoints[-1]
        elif self.sparse_steps:
            state = (np.zeros(self.param_dim), 1.0, None)
        else:
            state = np.zeros(self.param_dim)
        if self.sparse_steps:  # the buffers as they are, dead rows skipped (no compaction)
            X, y, steps, live = self.examples.replay_rows()
        else:
            (X, y, steps), live = self.examples.live_rows(), None
        lo = int(np.searchsorted(steps, self._last_checkpoint(), side="right"))
        every = self.config["checkpoint_every"]
        while lo < len(steps):
            # the rows up to the next checkpoint's step (at least one), then that checkpoint
            target = self._last_checkpoint() + every
            hi = max(int(np.searchsorted(steps, target, side="right")), lo + 1)
            if live is None:
                state = replay_rows(self, state, X[lo:hi], y[lo:hi], steps[lo:hi])
                self.counters["replayed_steps"] += hi - lo
            else:
                state = replay_sparse_rows(self, state, X[lo:hi], y[lo:hi], steps[lo:hi],
                                           live[lo:hi])
                self.counters["replayed_steps"] += int(np.count_nonzero(live[lo:hi]))
            self._checkpoint_if_due(int(steps[hi - 1]), state)
            lo = hi
        return state

    # ------------------------------------------------------------------ durable deletions
    def _adopt(self, post_state: dict) -> None:
        """Under sparse steps the replay's own scaled state, checked against the stored iterate
        (a deletion is exact: its replay gives the stored bits, and continues as the run that
        stored it did)."""
        scaled = self._state() if self.sparse_steps else None
        super()._adopt(post_state)  # checks the counters, sets z
        if scaled is None:
            return
        stored = self.z
        self.set_scaled(*scaled)  # the replay's own state, which must give the stored iterate
        if not np.array_equal(self.z, stored):
            raise InvalidState("the replayed deletion does not give the stored iterate")

    # ------------------------------------------------------------------ state
    def _export_arrays(self) -> dict[str, np.ndarray]:
        if self.sparse_steps:
            return store_arrays(self.examples, _SPARSE_PREFIX)
        return store_arrays(self.examples)

    def _import(self, meta: dict, arrays: dict) -> None:
        if self.sparse_steps:
            self.examples = _load_sparse_store(self, arrays)
        else:
            self.examples = load_store(self, arrays)
        self._checkpoint_steps, self._checkpoints = [], []  # a cache: the next deletion rebuilds it
        if not np.array_equal(self.index.live_steps(), self.examples.steps):
            raise InvalidState("retained examples do not match the applied-record index")


def _load_sparse_store(model: Retrain, arrays: dict) -> SparseExampleStore:
    """The sparse store saved by ``store_arrays``, checked against the step counter."""
    try:
        store = SparseExampleStore.from_arrays(
            {k: arrays[_SPARSE_PREFIX + k] for k in SPARSE_ARRAYS}, model.dim)
    except (KeyError, ValueError) as exc:
        raise InvalidState(f"retained sparse examples are inconsistent: {exc}") from None
    if len(store) and store.last_step > model.t:
        raise InvalidState("a retained example has a step after the step counter")
    return store
