"""The prequential (test-then-train) loss of a batch in one compiled pass (a metric only).

The numpy form (a matrix product, logaddexp, a select, a mean, under errstate) cost ~15 us of
fixed price per insert run, and a stream with 1% deletes has one run per deletion.
"""

from __future__ import annotations

import math

import numpy as np

from ..olu.core.kernels.jit import jit


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
        if ridge:
            r = margin - y[j]
            total += 0.5 * r * r
        else:
            m = -(-1.0 if y[j] == 0.0 else y[j]) * margin  # log(1 + e^m), stable for either sign
            total += (m + math.log1p(math.exp(-m))) if m > 0.0 else math.log1p(math.exp(m))
    return total / counted if counted else np.nan


ALL_ROWS = np.zeros(0, np.bool_)


def sparse_mean_loss(rows, y: np.ndarray, z: np.ndarray, ridge: bool) -> float:
    """:func:`batch_mean_loss` of sparse rows (``SparseRows``), in numpy: each margin summed over the
    row's non-zeros (a metric: no order promised)."""
    if len(y) == 0:
        return np.nan
    with np.errstate(all="ignore"):
        owner = np.repeat(np.arange(len(y)), np.diff(rows.indptr))
        margins = np.bincount(owner, weights=z[rows.indices] * rows.values, minlength=len(y))
        if ridge:
            losses = 0.5 * (margins - y) ** 2
        else:
            m = -np.where(y == 0.0, -1.0, y) * margins
            losses = np.logaddexp(0.0, m)
        mean = float(losses.mean())
    return mean
