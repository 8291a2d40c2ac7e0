"""The prequential loss of a batch (a metric outside the certificate): the same mean on dense and
sparse rows, over the rows the batch's mask names."""

from __future__ import annotations

import numpy as np
import pytest

from worker.olu import SparseRows
from worker.olu.batches.quality import ALL_ROWS, batch_mean_loss, sparse_batch_mean_loss


def _by_hand(X, y, z, ridge, rows):
    margins = X @ z
    losses = 0.5 * (margins - y) ** 2 if ridge else np.logaddexp(0.0, -np.where(y == 0, -1, y) * margins)
    return float(losses[rows].mean())


@pytest.mark.parametrize("ridge", [False, True])
def test_sparse_rows_give_the_dense_rows_mean_loss_over_the_masked_rows(ridge):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 30)) * (rng.random((40, 30)) < 0.2)  # mostly zeros
    y = rng.choice([0.0, 1.0], 40) if not ridge else rng.normal(size=40)
    z = rng.normal(size=30)
    rows = rng.random(40) < 0.6
    rows_sparse = SparseRows.from_dense(X)
    for mask in (ALL_ROWS, rows):
        expected = _by_hand(X, y, z, ridge, slice(None) if mask is ALL_ROWS else mask)
        dense = batch_mean_loss(X, y, z, ridge, mask)
        sparse = sparse_batch_mean_loss(rows_sparse.indptr, rows_sparse.indices, rows_sparse.values,
                                        y, z, ridge, mask)
        assert dense == pytest.approx(expected, rel=1e-12)
        assert sparse == pytest.approx(expected, rel=1e-12)
    # a mask that counts no row has no mean
    assert np.isnan(sparse_batch_mean_loss(rows_sparse.indptr, rows_sparse.indices, rows_sparse.values,
                                           y, z, ridge, np.zeros(40, np.bool_)))
