"""Compiled sort and merge of the key-sorted runs of the applied-record index (:mod:`worker.olu.core.index`)."""

from __future__ import annotations

import numpy as np

from .jit import jit


@jit
def merge_runs(ak, as_, adead, bk, bs, bdead):
    """Merge two key-sorted runs of the applied index, skipping their dead positions (sorted).

    Among equal keys the entries of ``a`` come first, each run's own order kept; the numpy
    reference is ``index.merge_runs_reference``. Returns (keys, steps). Between dead positions the
    choice is a select, not a branch (random keys mispredict half the branches): ~2x faster.
    """
    n = ak.shape[0] - adead.shape[0] + bk.shape[0] - bdead.shape[0]
    keys = np.empty(n, np.uint64)
    steps = np.empty(n, np.uint32)
    i = j = da = db = out = 0
    na, nb, nda, ndb = ak.shape[0], bk.shape[0], adead.shape[0], bdead.shape[0]
    while i < na and j < nb:
        lim_a = adead[da] if da < nda else na  # merge up to the next dead position of either run
        lim_b = bdead[db] if db < ndb else nb
        while i < lim_a and j < lim_b:
            ka, kb = ak[i], bk[j]
            take_b = kb < ka  # among equal keys a first
            keys[out] = kb if take_b else ka
            steps[out] = bs[j] if take_b else as_[i]
            j += np.int64(take_b)
            i += np.int64(not take_b)
            out += 1
        if i == lim_a and i < na:
            i += 1
            da += 1
        if j == lim_b and j < nb:
            j += 1
            db += 1
    while i < na:
        if da < nda and adead[da] == i:
            da += 1
        else:
            keys[out] = ak[i]
            steps[out] = as_[i]
            out += 1
        i += 1
    while j < nb:
        if db < ndb and bdead[db] == j:
            db += 1
        else:
            keys[out] = bk[j]
            steps[out] = bs[j]
            out += 1
        j += 1
    return keys, steps


_BUCKET_LIMIT = 64  # a fuller bucket (keys far from uniform): the caller sorts with numpy


@jit
def sort_tail(keys, steps):
    """``keys`` and ``steps`` ordered by (key, step), new arrays; two empty arrays when the keys
    are too clustered for this sort (the caller falls back to numpy).

    Record keys are BLAKE2b values, uniform over 64 bits: a scatter into about one bucket per
    four entries by the top bits, then an insertion sort that moves each entry within its bucket only
    (~0.2 ms for a 65,536-entry tail against ~0.8 ms for ``np.argsort``). The order is the same
    total order as the lexsort, so the run is the same.
    """
    n = keys.shape[0]
    bits = 1
    while (4 << bits) < n:  # about four entries a bucket: the counts stay in the L1 cache
        bits += 1
    shift = np.uint64(64 - bits)
    starts = np.zeros((1 << bits) + 1, np.int32)
    for i in range(n):
        starts[(keys[i] >> shift) + 1] += 1
    for b in range(1 << bits):
        if starts[b + 1] > _BUCKET_LIMIT:
            return np.empty(0, np.uint64), np.empty(0, np.uint32)
        starts[b + 1] += starts[b]
    out_keys = np.empty(n, np.uint64)
    out_steps = np.empty(n, np.uint32)
    for i in range(n):
        b = keys[i] >> shift
        p = starts[b]
        starts[b] = p + 1
        out_keys[p] = keys[i]
        out_steps[p] = steps[i]
    for i in range(1, n):
        k, s = out_keys[i], out_steps[i]
        j = i
        while j > 0 and (out_keys[j - 1] > k or (out_keys[j - 1] == k and out_steps[j - 1] > s)):
            out_keys[j] = out_keys[j - 1]
            out_steps[j] = out_steps[j - 1]
            j -= 1
        out_keys[j] = k
        out_steps[j] = s
    return out_keys, out_steps


@jit
def tail_count(keys, n, k):
    """How many of ``keys[:n]`` (the index's unsorted tail) equal ``k``."""
    m = 0
    for i in range(n):
        if keys[i] == k:
            m += 1
    return m


@jit
def tail_take(keys, steps, n, k, taken_pos, taken_steps):
    """Remove every entry of key ``k`` from ``keys[:n]`` / ``steps[:n]`` in place, the others' order
    kept; their positions and steps go to ``taken_*`` (sized by :func:`tail_count`). Returns the
    new length. One pass over the tail, no temporary arrays (a deletion's lookup in the tail was
    a comparison, a mask and two copies of the whole tail)."""
    first = 0
    while keys[first] != k:  # a tight search first (usually one hit, often none in most of the tail)
        first += 1
    m = 0
    j = first
    for i in range(first, n):
        if keys[i] == k:
            taken_pos[m] = i
            taken_steps[m] = steps[i]
            m += 1
        else:
            keys[j] = keys[i]
            steps[j] = steps[i]
            j += 1
    return j


@jit
def lower_bound(keys, k):
    """The first position of ``keys`` (sorted) whose key is not below ``k``: a binary search without
    numpy's per-call overhead (a deletion searches every run of the index and the tombstones)."""
    lo, hi = 0, keys.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < k:
            lo = mid + 1
        else:
            hi = mid
    return lo
