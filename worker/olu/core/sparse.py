"""Sparse rows: a batch of (indices, values) rows, checked like dense ones, learned in O(non-zeros).

A batch is CSR: row j's non-zeros are ``indices[indptr[j]:indptr[j + 1]]`` (strictly increasing,
each in [0, d)) with ``values`` alongside. Its checks are the dense rows' bit for bit: a row's
squared norm is the engine's lane sum (worker/olu/arith.py) over its non-zeros, each in the lane
of its coordinate (a zero term adds nothing to a lane), and a row over the bound is clipped by
``FeatureBound`` itself on its dense form.

The step (docs/worker.md 4.3) keeps the iterate as ``z = a w`` (core/iterate.py):

    a' = a (1 - eta lam);  w_i <- w_i - (eta / a') (s x_i) on the row's non-zeros;
    ||w||^2 kept by adding (w_i' - w_i)(w_i' + w_i), recomputed exactly every resync_steps(d) steps;
    projection: a' <- a' r / (a' ||w||) when a' ||w|| > r.

x.z = a (x.w) in the dense lanes' order, so with lam = 0 (a stays 1) and the projection idle the
sparse iterate equals the dense one coordinate for coordinate. Otherwise the two are the same map
rounded differently (the shrinkage is applied once to ``a`` rather than to each coordinate); the
certificate depends on the map, its constants and the ball, never on those roundings, and the
projection keeps ``||z|| <= r`` up to the drift of the kept norm (at most resync_steps(d) steps of
rounding, ~1e-12 relative; tests check it). A scale that falls below ``MIN_SCALE`` (or a step whose
shrinkage is not in (0, 1]) is folded into ``w`` first, an O(d) step at a point fixed by the events.

:func:`learn_reference` is the pure-Python step the compiled
``sparse_ogd.sparse_steps`` follows bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import chain

import numpy as np

from ..arith import LANES, fold, sqnorm
from ..exceptions import DimensionMismatch, InvalidExample, InvalidFeatures, NonFiniteInput
from .domain import Ball
from .index import step_overflow
from .kernels.loader import compiled
from .losses import Logistic, Ridge

MIN_SCALE = 1e-150


def resync_steps(dim: int) -> int:
    """The kept ||w||^2 is recomputed exactly (O(d)) at every step t that is a multiple of this:
    256, or the power of two at least d / 64 for a wide model, so the refresh costs about 64
    coordinates a step whatever d (the drift it bounds: one rounding a non-zero a step).

    >>> resync_steps(10), resync_steps(4096), resync_steps(65_536)
    (256, 256, 1024)
    """
    steps = 256
    while steps * 64 < dim:
        steps *= 2
    return steps


@dataclass(frozen=True)
class SparseRows:
    """A CSR batch of rows (``indptr`` n + 1 int64, ``indices`` int64, ``values`` float64).

    >>> rows = SparseRows.from_rows([([0, 3], [0.5, 0.5]), ([], [])])
    >>> len(rows), rows.to_dense(4).tolist()
    (2, [[0.5, 0.0, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0]])
    """

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray

    @classmethod
    def from_rows(cls, rows) -> SparseRows:
        """From ``[(indices, values), ...]`` (lists or arrays), each column made in one pass."""
        lengths = [len(i) for i, _ in rows]
        indptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        total = int(indptr[-1])
        indices = np.fromiter(chain.from_iterable(i for i, _ in rows), np.int64, total)
        values = np.fromiter(chain.from_iterable(v for _, v in rows), np.float64, total)
        return cls(indptr, indices, values)

    @classmethod
    def from_dense(cls, X) -> SparseRows:
        """The non-zeros of a dense matrix's rows (a -0.0 is a zero: it moves no sparse step).

        >>> SparseRows.from_dense([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0]]).indices.tolist()
        [1, 0, 2]
        """
        X = np.asarray(X, np.float64)
        rows, cols = np.nonzero(X)
        indptr = np.zeros(len(X) + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=len(X)), out=indptr[1:])
        return cls(indptr, cols.astype(np.int64), X[rows, cols])

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def row(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.indptr[j], self.indptr[j + 1]
        return self.indices[lo:hi], self.values[lo:hi]

    def __getitem__(self, which) -> SparseRows:
        """Rows by a slice (step 1), a boolean mask or
        positions, as numpy indexes a matrix's rows."""
        if isinstance(which, slice):
            start, stop, step = which.indices(len(self))
            if step != 1:
                raise ValueError("sparse rows are sliced with step 1")
            stop = max(start, stop)
            lo, hi = self.indptr[start], self.indptr[stop]
            return SparseRows(self.indptr[start:stop + 1] - lo, self.indices[lo:hi],
                              self.values[lo:hi])
        positions = np.arange(len(self))[which]
        starts, lengths = self.indptr[positions], np.diff(self.indptr)[positions]
        indptr = np.zeros(len(positions) + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        take = np.repeat(starts - indptr[:-1], lengths) + np.arange(int(indptr[-1]))
        return SparseRows(indptr, self.indices[take], self.values[take])

    def to_dense(self, dim: int) -> np.ndarray:
        X = np.zeros((len(self), dim))
        X[np.repeat(np.arange(len(self)), np.diff(self.indptr)), self.indices] = self.values
        return X


def lane_sum(indices: np.ndarray, terms: np.ndarray, dim: int) -> float:
    """The engine's sum (arith.py) of a dense vector whose non-zero terms are ``terms`` at the
    increasing coordinates ``indices``: each in the lane of its coordinate (a zero term changes no
    lane), the tail's after the fold."""
    full = dim - dim % LANES
    lanes = [0.0] * LANES
    total = None
    for i, term in zip(indices.tolist(), terms.tolist()):
        if i >= full and total is None:
            total = float(fold(np.array(lanes)))
        if total is None:
            lanes[i % LANES] += term
        else:
            total += term
    return float(fold(np.array(lanes))) if total is None else total


def sparse_dot(w: np.ndarray, indices: np.ndarray, values: np.ndarray, dim: int) -> float:
    """arith.dot of ``w`` and the dense row, over the row's non-zeros."""
    return lane_sum(indices, w[indices] * values, dim)


def row_sqnorms(rows: SparseRows, dim: int) -> np.ndarray:
    """||x_j||^2 of every row, as ``arith.row_sqnorms`` gives it for the dense rows."""
    kernels = compiled()
    if kernels is not None:
        return kernels.sparse_sqnorms(rows.indptr, rows.indices, rows.values, dim)
    return np.array([lane_sum(i, v * v, dim) for i, v in map(rows.row, range(len(rows)))])


def check_rows(features, rows: SparseRows) -> SparseRows:
    """``features.check_many`` of the dense rows, on the sparse form: the same errors, the same
    clipped values (raises a subclass of ``InvalidExample``)."""
    kernels = compiled()
    if kernels is not None and _typed(rows) and kernels.sparse_rows_pass(
            rows.indptr, rows.indices, rows.values, features.dim, features.untouched_sqnorm):
        return rows  # the common batch: one compiled pass, nothing to clip
    indptr, indices, values = (np.asarray(a) for a in (rows.indptr, rows.indices, rows.values))
    n = len(indptr) - 1
    if (indptr.ndim != 1 or n < 0 or indices.shape != values.shape or indices.ndim != 1
            or indptr[0] != 0 or indptr[-1] != len(indices) or (np.diff(indptr) < 0).any()):
        raise InvalidFeatures(
            "sparse rows need indptr (n + 1, from 0 to nnz, non-decreasing), and indices and "
            "values of nnz entries each")
    if not (np.issubdtype(indices.dtype, np.integer) and np.issubdtype(values.dtype, np.number)):
        raise InvalidFeatures("sparse rows need integer indices and numeric values")
    indices, values = indices.astype(np.int64), values.astype(np.float64)
    if len(indices) and (indices.min() < 0 or indices.max() >= features.dim):
        raise DimensionMismatch(f"a sparse index lies outside [0, {features.dim})")
    starts = np.zeros(len(indices), np.bool_)
    starts[indptr[:-1][np.diff(indptr) > 0]] = True
    if (np.diff(indices) <= 0)[~starts[1:]].any():
        raise InvalidFeatures("a sparse row's indices must be strictly increasing")
    if not np.isfinite(values).all():
        row = int(np.searchsorted(indptr, int(np.argmin(np.isfinite(values))), side="right")) - 1
        raise NonFiniteInput(f"row {row} contains NaN or infinity")
    out = values
    checked_rows = SparseRows(indptr.astype(np.int64), indices, values)
    near = row_sqnorms(checked_rows, features.dim) > features.untouched_sqnorm
    for j in np.flatnonzero(near).tolist():
        # FeatureBound on the dense row (rare): it passes, raises or clips
        lo, hi = indptr[j], indptr[j + 1]
        dense = np.zeros(features.dim)
        dense[indices[lo:hi]] = values[lo:hi]
        try:
            checked = features.check_many(dense[None, :])[0]
        except InvalidExample as exc:  # the dense row's own error, with this row's number
            raise type(exc)(str(exc).replace("row 0", f"row {j}", 1)) from None
        if out is values:
            out = values.copy()
        out[lo:hi] = checked[indices[lo:hi]]
    return checked_rows if out is values else SparseRows(checked_rows.indptr, indices, out)


def learn_batch(model, keys: np.ndarray, rows: SparseRows, y: np.ndarray, *, plain: bool) -> int:
    """``OnlineUnlearner._learn_batch`` for checked sparse rows: the compiled sparse step or its
    reference where the model's step is the ``plain`` OGD step (no override, no rows kept) of a
    logistic or ridge loss on a ball; the dense rows for any other model."""
    if not (plain and takes_sparse_steps(model)):
        return model._learn_batch(keys, rows.to_dense(model.dim), y)
    return learn_rows(model, keys, rows, y)[0]


def takes_sparse_steps(model) -> bool:
    """Whether the sparse step is ``model``'s OGD step: a logistic or ridge loss on a ball."""
    return type(model.loss) in (Logistic, Ridge) and type(model.ball) is Ball


def learn_rows(model, keys: np.ndarray, rows: SparseRows, y: np.ndarray):
    """The sparse step over checked rows, the compiled kernel or its reference: (rows applied,
    each row's step, 0 where it was skipped as deleted)."""
    plan = model.kernel_plan()
    if plan is None:
        steps = np.zeros(len(keys), np.int64)
        for j, k in enumerate(keys):
            if learn_reference(model, int(k), *rows.row(j), float(y[j])):
                steps[j] = model.t
        return int(np.count_nonzero(steps)), steps
    kernels = compiled()
    w = np.array(model.unscaled, dtype=np.float64)  # a new array: readers of z keep theirs
    t, steps, consumed, reason, scale, sq = kernels.run_sparse(
        plan, w, model.scale, model.unscaled_sqnorm, model.t,
        model.index, model.tombstones, keys, rows, y,
        resync_steps(model.dim))
    model.set_scaled(w, scale, sq)
    applied = model._took_steps(t, consumed)
    if reason == kernels.STEP_OVERFLOW:
        raise step_overflow(t + 1)
    return applied, steps


def _typed(rows) -> bool:
    """The arrays as the compiled pass takes them (int64, int64, float64, contiguous, 1-D)."""
    return all(type(a) is np.ndarray and a.dtype == dt and a.ndim == 1 and a.flags.c_contiguous
               for a, dt in ((rows.indptr, np.int64), (rows.indices, np.int64),
                             (rows.values, np.float64)))


def learn_reference(model, key: int, indices: np.ndarray, values: np.ndarray, y: float) -> bool:
    """One sparse step on ``model`` (a plain OGD step, the kernel's plan), in pure Python."""
    if key in model.tombstones:
        model.counters["skipped_deleted"] += 1
        return False
    model.t += 1
    state = (model.unscaled.copy(), model.scale, model.unscaled_sqnorm)
    model.set_scaled(*reference_step(model, state, model.t, indices, values, y))
    model.index.add(key, model.t)
    model.counters["applied"] += 1
    return True


def reference_step(model, state: tuple, t: int, indices: np.ndarray, values: np.ndarray,
                   y: float) -> tuple[np.ndarray, float, float]:
    """One sparse step at step ``t`` from ``state`` = (w, scale, ||w||^2 or None): the next
    state (``w`` is written in place unless the scale is folded in)."""
    lam, radius = model.loss.lam, model.ball.radius
    eta = model.schedule.eta(t)
    w, a, sq = state
    if sq is None:
        sq = sqnorm(w)
    s = model.loss.derivative(a * sparse_dot(w, indices, values, model.dim), y)  # x.z = a (x.w)
    a_next = a * (1.0 - eta * lam)
    if not a_next >= MIN_SCALE:  # fold the scale in first (O(d), at a point fixed by the events)
        w, a_next = w * a_next, 1.0
        sq = sqnorm(w)
    g = eta / a_next
    for i, v in zip(indices.tolist(), values.tolist()):
        old = w[i]
        new = old - g * (s * v)
        w[i] = new
        sq += (new - old) * (new + old)
    if t % resync_steps(model.dim) == 0:
        sq = sqnorm(w)
    norm = a_next * math.sqrt(max(sq, 0.0))
    if not norm <= radius:
        a_next = a_next * (radius / norm)
    return w, a_next, sq
