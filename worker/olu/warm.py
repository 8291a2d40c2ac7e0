"""Compile the engine's kernels before the first batch (or load them from numba's cache)."""

from __future__ import annotations

import time

import numpy as np


def warm_up(*, sparse: bool = False) -> float | None:
    """Compile every engine kernel with the types production passes (``sparse``: the sparse-row
    ones too, for OLU_SPARSE_INPUT); seconds taken, or None where numba is not installed (the
    engine then takes its numpy reference steps)."""
    try:
        from .core.kernels import warmup
    except ImportError:
        return None
    seconds = warmup.warm_up() + (warmup.warm_up_sparse() if sparse else 0.0)
    started = time.perf_counter()
    # the prequential loss of every insert run
    from .batches.quality import ALL_ROWS, batch_mean_loss, sparse_batch_mean_loss

    csr = (np.array([0, 1]), np.zeros(1, np.int64), np.ones(1))  # one row, one non-zero
    for ridge in (False, True):
        for rows in (np.ones(1, np.bool_), ALL_ROWS):
            batch_mean_loss(np.zeros((1, 1)), np.ones(1), np.zeros(1), ridge, rows)
            if sparse:
                sparse_batch_mean_loss(*csr, np.ones(1), np.zeros(1), ridge, rows)
    return seconds + time.perf_counter() - started
