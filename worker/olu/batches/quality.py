"""The prequential (test-then-train) loss of a batch, before it is learned: a metric of incoming
records (later deleted ones included), outside the certificate (docs/guarantee.md 2.4).

:func:`mean_loss` picks the form: one compiled pass for dense rows (:func:`batch_mean_loss`) and
for sparse ones (:func:`sparse_batch_mean_loss`), numpy for the softmax's mean cross-entropy.

The numpy form (a matrix product, logaddexp, a select, a mean, under errstate) cost ~15 us of
fixed price per insert run, and a stream with 1% deletes has one run per deletion.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ...compiled.jit import inline, jit
from ..core.sparse import SparseRows
from ..exceptions import InvalidExample
from ..formulas import log1pexp

_log1pexp = inline(log1pexp)  # the engine's loss, compiled from its definition

ALL_ROWS = np.zeros(0, np.bool_)


@jit
def batch_mean_loss(X, y, z, ridge, rows):
    """Mean loss of the model ``z`` on rows ``X`` with labels ``y`` (logistic labels -1/+1 or 0/1),
    over the rows j with ``rows[j]`` (an empty ``rows``: all of them; a poll batch's inserts among
    its deletes, in place); NaN when a value is not finite (raw features may be huge: the caller
    skips the batch) or no row counts."""
    n, d = X.shape
    every = rows.shape[0] == 0
    total = 0.0
    counted = 0
    for j in range(n):
        if not every and not rows[j]:
            continue
        counted += 1
        margin = 0.0
        for i in range(d):
            margin += X[j, i] * z[i]
        total += _row_loss(margin, y[j], ridge)
    return total / counted if counted else np.nan


@jit
def sparse_batch_mean_loss(indptr, indices, values, y, z, ridge, rows):
    """:func:`batch_mean_loss` of sparse rows (CSR), each margin over the row's non-zeros in four
    running sums (a metric: no order promised, and one sum's latency was most of its cost)."""
    every = rows.shape[0] == 0
    total = 0.0
    counted = 0
    for j in range(indptr.shape[0] - 1):
        if not every and not rows[j]:
            continue
        counted += 1
        m0 = m1 = m2 = m3 = 0.0
        k, stop = indptr[j], indptr[j + 1]
        while k + 4 <= stop:
            m0 += values[k] * z[indices[k]]
            m1 += values[k + 1] * z[indices[k + 1]]
            m2 += values[k + 2] * z[indices[k + 2]]
            m3 += values[k + 3] * z[indices[k + 3]]
            k += 4
        while k < stop:
            m0 += values[k] * z[indices[k]]
            k += 1
        total += _row_loss((m0 + m1) + (m2 + m3), y[j], ridge)
    return total / counted if counted else np.nan


@inline
def _row_loss(margin, label, ridge):
    if ridge:
        r = margin - label
        return 0.5 * r * r
    m = -(-1.0 if label == 0.0 else label) * margin  # log(1 + e^m), stable for either sign
    return _log1pexp(m)


def _positions(loss, y) -> np.ndarray:
    """Each label's class position, NaN for one the loss
    refuses (that row is left out of the metric)."""
    try:
        return loss.labels(y)
    except InvalidExample:
        out = np.full(len(y), np.nan)
        for j, v in enumerate(y):
            with contextlib.suppress(InvalidExample):
                out[j] = loss.label(v)
        return out


def softmax_mean_loss(loss, X, y, z: np.ndarray, rows: np.ndarray = ALL_ROWS,
                      positions: bool = False) -> float:
    """Mean cross-entropy, log(sum_k exp(w_k.x)) - w_y.x, of the softmax model ``z`` (K x d, flat,
    row k = class k) on rows ``X`` (dense or ``SparseRows``) with labels ``y``: the classes, or
    their ``positions`` (a batch the model checked already); over ``rows`` (empty: all), leaving out
    rows whose label is none of the classes. NaN when nothing counts or a value is not finite. In
    numpy: a metric, no order promised (it never reaches the model)."""
    if len(y) == 0:
        return np.nan
    at = np.asarray(y, np.float64) if positions else _positions(loss, y)
    keep = np.isfinite(at) if rows.shape[0] == 0 else np.isfinite(at) & rows
    if not keep.any():
        return np.nan
    k = loss.k
    W = np.asarray(z, np.float64).reshape(k, -1)
    with np.errstate(all="ignore"):
        if hasattr(X, "indptr"):  # SparseRows: each class's margins over the rows' non-zeros
            owner = np.repeat(np.arange(len(y)), np.diff(X.indptr))
            margins = np.stack(
                [np.bincount(owner, weights=W[c, X.indices] * X.values, minlength=len(y))
                 for c in range(k)], axis=1)
        else:
            margins = np.asarray(X, np.float64) @ W.T
        margins, at = margins[keep], at[keep].astype(np.int64)
        top = margins.max(axis=1)
        lse = top + np.log(np.exp(margins - top[:, None]).sum(axis=1))
        mean = float((lse - margins[np.arange(len(at)), at]).mean())
    return mean


def mean_loss(model, X, y, rows: np.ndarray = ALL_ROWS, positions: bool = False) -> float:
    """The mean loss of ``model`` as it is now on rows ``X`` with labels ``y`` (over ``rows``, a
    mask; empty: all of them); ``positions``: softmax labels already mapped to class positions.
    NaN when nothing counts or a value is not finite."""
    if len(y) == 0:
        return np.nan
    loss = model.loss
    if loss.name == "softmax":
        return softmax_mean_loss(loss, X, y, model.z, rows, positions)
    ridge = loss.name == "ridge"
    y, z = np.ascontiguousarray(y, np.float64), np.ascontiguousarray(model.z, np.float64)
    if isinstance(X, SparseRows):
        return sparse_batch_mean_loss(*(np.ascontiguousarray(a) for a in (
            X.indptr, X.indices, X.values)), y, z, ridge, rows)
    return batch_mean_loss(np.ascontiguousarray(X, np.float64), y, z, ridge, rows)
