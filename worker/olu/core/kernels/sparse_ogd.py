"""Compiled (numba) OGD steps on sparse rows (core/sparse.py's ``SparseRows``): the iterate kept
as ``scale * w``, each step O(non-zeros) where the model takes the plain OGD step, the same
formulas in the same order as ``sparse.learn_reference`` (bit for bit, on every CPU: see
:mod:`.ogd` for the arithmetic rules the kernels keep)."""

from __future__ import annotations

import math

import numpy as np

from ....compiled.intrinsics import data_pointer
from ....compiled.jit import jit
from ....compiled.lanes import LANES, lane_sqnorm
from ....compiled.sorted_keys import filter_shift
from .ogd import (
    DONE,
    MAX_STEP,
    STEP_OVERFLOW,
    TAIL_FULL,
    check_iterate,
    derivative,
    paced,
    step_size,
    tombstone_arrays,
    tombstoned,
)

MIN_SCALE = 1e-150  # core/sparse.py's


@jit
def _sparse_lane_sum(indices, terms_w, values, lo, hi, dim, squares, lanes):
    """core/sparse.py's ``lane_sum``: sum of w[i] x_i (or x_i^2 when ``squares``) over the non-zeros
    lo..hi-1, each in the lane of its coordinate (``lanes``: 8 doubles of scratch), the tail's
    after the fold."""
    full = dim - dim % LANES
    lanes[:] = 0.0
    p = lo
    while p < hi and indices[p] < full:
        i = indices[p]
        lanes[i & 7] += values[p] * values[p] if squares else terms_w[i] * values[p]
        p += 1
    total = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + (
        (lanes[1] + lanes[5]) + (lanes[3] + lanes[7]))
    while p < hi:
        total += values[p] * values[p] if squares else terms_w[indices[p]] * values[p]
        p += 1
    return total


@jit
def sparse_sqnorms(indptr, indices, values, dim):
    """||x_j||^2 of each sparse row, as ``arith.row_sqnorms`` of the dense rows."""
    n = indptr.shape[0] - 1
    out, lanes = np.empty(n), np.empty(LANES)
    for j in range(n):
        out[j] = _sparse_lane_sum(indices, values, values, indptr[j], indptr[j + 1], dim, True,
                                  lanes)
    return out


@jit
def sparse_rows_pass(indptr, indices, values, dim, sq_limit):
    """True when a CSR batch needs nothing of core/sparse.py's ``check_rows``: well formed, each
    row's indices strictly increasing in [0, dim), its values finite, its squared norm at most
    ``sq_limit`` (a hair under the bound's square). False: the checks there decide.

    A row of at most 2,048 non-zeros sums its squares in four running sums: any order of n
    positive terms is within n eps of the true sum, so one that passes ``sq_limit`` (1e-12 under
    the bound) has a lane sum (the engine's) under the bound too; only a wider row takes the
    lanes. The checks run without an early exit, so the loops run in SIMD lanes."""
    n = indptr.shape[0] - 1
    if (n < 0 or indptr[0] != 0 or indptr[n] != indices.shape[0]
        or indices.shape[0] != values.shape[0]):
        return False
    lanes = np.empty(LANES)
    for j in range(n):
        lo, hi = indptr[j], indptr[j + 1]
        if hi < lo:
            return False
        if hi == lo:
            continue
        # strictly increasing from >= 0 to < dim: every index in range, each once
        bad = indices[lo] < 0 or indices[hi - 1] >= dim
        for p in range(lo + 1, hi):
            bad |= indices[p] <= indices[p - 1]
        s0 = s1 = s2 = s3 = 0.0
        p = lo
        while p + 4 <= hi:
            s0 += values[p] * values[p]
            s1 += values[p + 1] * values[p + 1]
            s2 += values[p + 2] * values[p + 2]
            s3 += values[p + 3] * values[p + 3]
            p += 4
        while p < hi:
            s0 += values[p] * values[p]
            p += 1
        sq = (s0 + s1) + (s2 + s3)  # NaN or inf when a value is not finite
        if bad or not sq < np.inf:
            return False
        if hi - lo > 2048:
            sq = _sparse_lane_sum(indices, values, values, lo, hi, dim, True, lanes)
        if not sq <= sq_limit:
            return False
    return True


@jit
def sparse_steps(loss_kind, lam, sched_kind, sa, sb, radius, w, scale, sq, resync, indptr, indices,
                 values, y,
                 keys, tombstones, recent_tombstones, tomb_filter, tail_keys, tail_steps, tail_len,
                 t, steps_out,
                 start):
    """:func:`ogd_steps` for sparse rows on the iterate ``scale * w`` (core/sparse.py, the step
    formula by formula; ``sq`` = ||w||^2 as kept, NaN: compute it; ``resync``: core/sparse.py's
    ``resync_steps(d)``). ``w`` is updated in place.

    Returns (next row, t, tail length, rows applied, stop reason, scale, sq)."""
    n, d = keys.shape[0], w.shape[0]
    cap = tail_keys.shape[0]
    any_tomb = tombstones.shape[0] + recent_tombstones.shape[0] > 0
    fshift = filter_shift(tomb_filter)
    wp, lanes = data_pointer(w), np.empty(LANES)
    if not sq == sq:
        sq = lane_sqnorm(wp, 0, d)
    applied = 0
    j = start
    while j < n:
        key = keys[j]
        if any_tomb and tombstoned(key, fshift, tomb_filter, tombstones, recent_tombstones):
            steps_out[j] = 0
            j += 1
            continue
        if tail_len == cap:
            return j, t, tail_len, applied, TAIL_FULL, scale, sq
        if t >= MAX_STEP:
            return j, t, tail_len, applied, STEP_OVERFLOW, scale, sq
        t += 1
        eta = step_size(sched_kind, sa, sb, t)
        lo, hi = indptr[j], indptr[j + 1]
        s = derivative(loss_kind, y[j],
                       scale * _sparse_lane_sum(indices, w, values, lo, hi, d, False, lanes))
        scale_next = scale * (1.0 - eta * lam)
        if not scale_next >= MIN_SCALE:  # the scale folded into w first (O(d))
            for i in range(d):
                w[i] = w[i] * scale_next
            scale_next = 1.0
            sq = lane_sqnorm(wp, 0, d)
        g = eta / scale_next
        for p in range(lo, hi):
            i = indices[p]
            old = w[i]
            new = old - g * (s * values[p])
            w[i] = new
            sq += (new - old) * (new + old)
        if t % resync == 0:
            sq = lane_sqnorm(wp, 0, d)
        norm = scale_next * math.sqrt(sq if sq > 0.0 else 0.0)
        if not norm <= radius:
            scale_next = scale_next * (radius / norm)
        scale = scale_next
        tail_keys[tail_len] = key
        tail_steps[tail_len] = np.uint32(t)
        tail_len += 1
        steps_out[j] = t
        applied += 1
        j += 1
    return j, t, tail_len, applied, DONE, scale, sq


def run_sparse(plan, w, scale, sq, t, index, tombstones, keys, rows, y, resync):
    """:func:`run_batch` for sparse rows (core/sparse.py's ``SparseRows``) on the iterate
    ``scale * w`` (``w`` updated in place; ``sq``: ||w||^2 as kept, or None; ``resync``:
    ``sparse.resync_steps(d)``). Returns
    (t, steps, rows consumed, stop reason, scale, sq)."""
    lk, lam, sk, sa, sb, radius = plan
    check_iterate(w)
    keys, y = np.ascontiguousarray(keys, dtype=np.uint64), np.ascontiguousarray(y, dtype=np.float64)
    tomb, recent, tomb_filter = tombstone_arrays(tombstones)
    steps = np.zeros(len(keys), np.int64)
    j, t, reason, sq = 0, int(t), DONE, np.nan if sq is None else float(sq)
    while j < len(keys):
        tail_keys, tail_steps, tail_len = index.tail_buffers()
        j, t, tail_len, _, reason, scale, sq = sparse_steps(
            lk, lam, sk, sa, sb, radius, w, float(scale), sq, int(resync), rows.indptr,
            rows.indices, rows.values, y,
            keys, tomb, recent, tomb_filter, tail_keys, tail_steps, tail_len, t, steps, j)
        if paced(index, tail_len, reason):
            break
    return t, steps, j, reason, scale, (None if not sq == sq else sq)
