"""Replaying projected OGD over retained examples, and the state helpers of the algorithms that
keep examples (retrain, the active algorithms, memory-pair, rewind).

:func:`replay_ogd` re-runs OGD from the data-independent start z = 0 over the retained rows at
their **original step indices** (a deleted step is the skip element, an identity update; later
steps are not re-indexed). It follows the model's own learning path operation for operation (the
compiled kernel when the model uses it, else the numpy reference ``OnlineUnlearner._learn``), so
it is bit-for-bit equal to a fresh model fed the masked stream.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import InvalidState
from .base import OnlineUnlearner
from .examples import ExampleStore
from .kernels.loader import compiled
from .sparse import SparseRows, reference_step, resync_steps
from .tombstones import KeySet

_STORE_PREFIX = "examples_"


def replay_ogd(model: OnlineUnlearner, store: ExampleStore) -> np.ndarray:
    """Projected OGD from z = 0 over ``store``'s retained rows at their own steps (gaps are ⊥)."""
    X, y, steps = store.live_rows()
    return replay_rows(model, np.zeros(model.param_dim), X, y, steps)


def _runs(at: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the runs of rows ``at`` (increasing positions, non-empty) that sit next
    to each other at consecutive steps."""
    cut = np.flatnonzero((np.diff(at) != 1) | (np.diff(steps[at]) != 1))
    return at[np.concatenate(([0], cut + 1))], at[np.append(cut, len(at) - 1)] + 1


def replay_rows(model: OnlineUnlearner, z: np.ndarray, X: np.ndarray, y: np.ndarray,
                steps: np.ndarray) -> np.ndarray:
    """Projected OGD from ``z`` over rows (writeable, increasing ``steps``) at their own steps."""
    z = np.array(z, dtype=np.float64)
    n = len(steps)
    if n == 0:
        return z
    plan = model.kernel_plan()
    if plan is None:  # the numpy reference step of OnlineUnlearner._learn, verbatim
        ball, loss, schedule = model.ball, model.loss, model.schedule
        for j in range(n):
            eta = schedule.eta(int(steps[j]))
            z = ball.project(z - eta * loss.grad(z, X[j], float(y[j])))
        return z
    kernels = compiled()
    lk, lam, sk, sa, sb, radius = plan
    # One compiled call per run of consecutive steps; t is set to the step before each run.
    starts, ends = _runs(np.arange(n), steps)
    keys = np.zeros(n, np.uint64)
    # an empty one, so the call types match learn_many's (one compiled version)
    no_tombstones = KeySet()
    tail_keys, tail_steps = np.zeros(n, np.uint64), np.zeros(n, np.uint32)
    steps_out = np.zeros(n, np.int64)
    for s, e in zip(starts.tolist(), ends.tolist()):
        j, t, _, _, reason = kernels.ogd_steps(
            lk, lam, sk, sa, sb, radius, z, X[s:e], y[s:e], keys[s:e], no_tombstones.base,
            no_tombstones.recent,
            no_tombstones.filter, tail_keys, tail_steps, 0, int(steps[s]) - 1, steps_out[s:e], 0)
        if reason != kernels.DONE or j != e - s or t != int(steps[e - 1]):
            raise RuntimeError(f"replay kernel stopped early (reason {reason})")
    return z


def replay_sparse_rows(model: OnlineUnlearner, state: tuple, rows: SparseRows, y: np.ndarray,
                       steps: np.ndarray, live: np.ndarray | None = None
                       ) -> tuple[np.ndarray, float, float | None]:
    """The sparse step (core/sparse.py) from ``state`` = (w, scale, ||w||^2 or None) over rows
    at their own steps (increasing), skipping those ``live`` marks False: the state after the
    last, ``w`` a new array. The model's own path operation for operation, as
    :func:`replay_rows` is for dense rows."""
    w, scale, sq = np.array(state[0], dtype=np.float64), float(state[1]), state[2]
    at = np.arange(len(steps)) if live is None else np.flatnonzero(live)
    if not len(at):
        return w, scale, sq
    plan = model.kernel_plan()
    if plan is None:
        for j in at.tolist():
            w, scale, sq = reference_step(model, (w, scale, sq), int(steps[j]), *rows.row(j),
                                          float(y[j]))
        return w, scale, sq
    kernels = compiled()
    lk, lam, sk, sa, sb, radius = plan
    starts, ends = _runs(at, steps)  # one compiled call each
    n = len(steps)
    keys, steps_out = np.zeros(n, np.uint64), np.zeros(n, np.int64)
    no_tombstones = KeySet()
    tail_keys, tail_steps = np.zeros(n, np.uint64), np.zeros(n, np.uint32)
    sq = np.nan if sq is None else float(sq)
    resync = resync_steps(model.dim)
    for s, e in zip(starts.tolist(), ends.tolist()):  # rows s to e: keys[:e] ends the run
        j, t, _, _, reason, scale, sq = kernels.sparse_steps(
            lk, lam, sk, sa, sb, radius, w, scale, sq, resync, rows.indptr, rows.indices,
            rows.values, y, keys[:e], no_tombstones.base, no_tombstones.recent,
            no_tombstones.filter, tail_keys, tail_steps, 0, int(steps[s]) - 1, steps_out, s)
        if reason != kernels.DONE or j != e or t != int(steps[e - 1]):
            raise RuntimeError(f"sparse replay kernel stopped early (reason {reason})")
    return w, scale, (None if not sq == sq else sq)


def record_outcome(model: OnlineUnlearner, outcome: str, steps, **extra) -> None:
    """Ledger entry for a deletion that added no noise (``exact`` or ``restarted``).

    Same keys as the entries of ``_release_with_noise`` (shift and sigma 0), plus ``outcome``;
    ``i`` is the epoch's deletion counter, which such deletions do not advance.
    """
    model.ledger.append({
        "i": model.accountant.deletions, "epoch": model.epoch, "tau": model.t,
        "u": [int(s) for s in steps], "shift": 0.0, "sigma": 0.0, "rho": model.accountant.spent,
        "outcome": outcome, **extra,
    })


def store_arrays(store: ExampleStore, prefix: str = _STORE_PREFIX) -> dict[str, np.ndarray]:
    return {prefix + k: v for k, v in store.to_arrays().items()}


def load_store(model: OnlineUnlearner, arrays: dict, prefix: str = _STORE_PREFIX) -> ExampleStore:
    """The store saved by :func:`store_arrays`, checked against the model's applied index."""
    try:
        store = ExampleStore.from_arrays(
            {k: arrays[prefix + k] for k in ("X", "y", "steps", "keys")}, model.dim)
    except ValueError as exc:
        raise InvalidState(f"retained examples are inconsistent: {exc}") from None
    if len(store) and store.last_step > model.t:
        raise InvalidState("a retained example has a step after the step counter")
    return store
