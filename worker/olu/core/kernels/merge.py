"""Compiled merge of two key-sorted runs of the applied-record index (:mod:`worker.olu.core.index`)."""

from __future__ import annotations

import numpy as np

from .jit import jit


@jit
def merge_runs(ak, as_, adead, bk, bs, bdead):
    """Merge two key-sorted runs of the applied index, skipping their dead positions (sorted).

    Among equal keys the entries of ``a`` come first, each run's own order kept; the numpy
    reference is ``index.merge_runs_reference``. Returns (keys, steps).
    """
    n = ak.shape[0] - adead.shape[0] + bk.shape[0] - bdead.shape[0]
    keys = np.empty(n, np.uint64)
    steps = np.empty(n, np.uint32)
    i = j = da = db = out = 0
    na, nb = ak.shape[0], bk.shape[0]
    while True:
        while i < na and da < adead.shape[0] and adead[da] == i:
            i += 1
            da += 1
        while j < nb and db < bdead.shape[0] and bdead[db] == j:
            j += 1
            db += 1
        if i < na and (j >= nb or ak[i] <= bk[j]):
            keys[out] = ak[i]
            steps[out] = as_[i]
            i += 1
        elif j < nb:
            keys[out] = bk[j]
            steps[out] = bs[j]
            j += 1
        else:
            break
        out += 1
    return keys, steps


# ------------------------------------------------------------------ record keys, vectorised
