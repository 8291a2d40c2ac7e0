"""Exact unlearning by retraining from scratch (the "Retraining" baseline of olu-spec section 4).

At each deletion of an applied record, :class:`Retrain` zeroes the record's rows in its
:class:`~worker.olu.examples.ExampleStore` and re-runs projected OGD from the data-independent
start z_init = 0 over the retained examples, in their original order and with their **original
step indices**: a deleted step becomes the skip element ⊥ (identity update), and the step size of
every later example is not re-indexed (olu-spec 1.4, pitfall 6.6.15). The result is exactly the
reference process of the OLU definition, so the deletion needs no noise and no budget: outcome
``exact``. It costs O(t) sequential OGD steps per deletion and O(t d) memory.

:func:`replay_ogd` is that replay, shared with the active algorithms' "retrain" order fallback. It
follows the model's own learning path operation for operation (the compiled kernel when the model
uses it, else the numpy reference ``OnlineUnlearner._learn``), so it is bit-for-bit equal to a
fresh model fed the masked stream.
"""

from __future__ import annotations

import numpy as np

from .base import Deletion, OnlineUnlearner, _kernels
from .errors import InvalidState
from .examples import ExampleStore
from .index import KeySet

_STORE_PREFIX = "examples_"


def replay_ogd(model: OnlineUnlearner, store: ExampleStore) -> np.ndarray:
    """Projected OGD from z = 0 over ``store``'s retained rows at their own steps (gaps are ⊥)."""
    X, y, steps = store.live_rows()
    return replay_rows(model, np.zeros(model.dim), X, y, steps)


def replay_rows(model: OnlineUnlearner, z: np.ndarray, X: np.ndarray, y: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Projected OGD from ``z`` over rows (writeable, increasing ``steps``) at their own steps."""
    z = np.array(z, dtype=np.float64)
    n = len(steps)
    if n == 0:
        return z
    plan = model._kernel_plan()
    if plan is None:  # the numpy reference step of OnlineUnlearner._learn, verbatim
        ball, loss, schedule = model.ball, model.loss, model.schedule
        for j in range(n):
            eta = schedule.eta(int(steps[j]))
            z = ball.project(z - eta * loss.grad(z, X[j], float(y[j])))
        return z
    kernels = _kernels()
    lk, lam, sk, sa, sb, radius = plan
    # One compiled call per run of consecutive steps; t is set to the step before each run.
    starts = np.concatenate(([0], np.flatnonzero(np.diff(steps) != 1) + 1))
    ends = np.append(starts[1:], n)
    keys = np.zeros(n, np.uint64)
    no_tombstones = KeySet()  # an empty one, so the call types match learn_many's (one compiled version)
    tail_keys, tail_steps = np.zeros(n, np.uint64), np.zeros(n, np.uint32)
    steps_out = np.zeros(n, np.int64)
    for s, e in zip(starts.tolist(), ends.tolist()):
        j, t, _, _, reason = kernels.ogd_steps(
            lk, lam, sk, sa, sb, radius, z, X[s:e], y[s:e], keys[s:e], no_tombstones.base, no_tombstones.recent,
            tail_keys, tail_steps, 0, int(steps[s]) - 1, steps_out[s:e], 0)
        if reason != kernels.DONE or j != e - s or t != int(steps[e - 1]):
            raise RuntimeError(f"replay kernel stopped early (reason {reason})")
    return z


def record_outcome(model: OnlineUnlearner, outcome: str, steps, **extra) -> None:
    """Ledger entry for a deletion that added no noise (``exact`` or ``restarted``).

    Same keys as the entries of ``_release_with_noise`` (shift and sigma 0), plus ``outcome``;
    ``i`` is the epoch's deletion counter, which such deletions do not advance.
    """
    model.ledger.append({
        "i": model.accountant.deletions, "epoch": model.epoch, "tau": model.t,
        "u": [int(s) for s in steps], "shift": 0.0, "sigma": 0.0, "rho": model.accountant.rho,
        "outcome": outcome, **extra,
    })


def store_arrays(store: ExampleStore, prefix: str = _STORE_PREFIX) -> dict[str, np.ndarray]:
    return {prefix + k: v for k, v in store.to_arrays().items()}


def load_store(model: OnlineUnlearner, arrays: dict, prefix: str = _STORE_PREFIX) -> ExampleStore:
    """The store saved by :func:`store_arrays`, checked against the model's applied index."""
    try:
        store = ExampleStore.from_arrays({k: arrays[prefix + k] for k in ("X", "y", "steps", "keys")}, model.dim)
    except ValueError as exc:
        raise InvalidState(f"retained examples are inconsistent: {exc}") from None
    if len(store) and store.last_step > model.t:
        raise InvalidState("a retained example has a step after the step counter")
    return store


class Retrain(OnlineUnlearner):
    """Exact unlearning: on each deletion, re-run OGD from z_init over the retained examples.

    >>> m = Retrain(dim=2, l2=0.1, radius=5.0)
    >>> _ = m.learn_many(["a", "b", "c"], [[0.6, 0.8], [0.8, -0.6], [1.0, 0.0]], [1, -1, 1])
    >>> d = m.unlearn_one("b")
    >>> d.outcome, d.sigma, d.index, len(m.examples), m.t
    ('exact', 0.0, 0, 2, 3)
    """

    algorithm = "retrain"

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
