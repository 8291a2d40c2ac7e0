"""Compiled (numba) micro-batch kernel for the OGD step of :class:`~worker.olu.core.base.OnlineUnlearner`.

The per-event step is sequential (z_{t+1} depends on z_t), so speed comes from keeping Python out
of the inner loop: :func:`ogd_steps` runs a whole micro-batch of projected OGD steps in one call,
including the tombstone check (the tombstones' filter, then a binary search in the two sorted
tombstone arrays for a key it passes), the step size, the gradient, the projection onto the ball
and the append of (key, step) to the applied index's tail.

The pure-numpy ``OnlineUnlearner._learn`` stays the reference implementation. The kernel follows
its formulas operation by operation (same eta expression, same overflow-free logistic form,
projection ``z * (r / ||z||)``), and its two length-d reductions (x.z and ||z||^2) add in the
engine's eight lanes (``lanes.py``), as the reference's ``worker.olu.arith`` does: the two agree
bit for bit, at any d, on every CPU, and the update writes z and sums its squares in one pass.
``fastmath=False`` keeps LLVM from reordering those sums or fusing a multiply and an add, so the
host's code generation (AVX2, AVX-512 or generic) changes the speed, never the bits
(``tests/olu/core/test_kernels.py`` checks the generated code holds no fused multiply-add).
Compilation, the disk cache and the reference switch: :mod:`.jit`.
"""

from __future__ import annotations

import math

import numpy as np

from ....compiled.intrinsics import data_pointer
from ....compiled.jit import inline, jit
from ....compiled.lanes import LANES, lane_axpy, lane_dot, lane_sqnorm, lane_step
from ....compiled.sorted_keys import contains, filter_passes, filter_shift, lower_bound
from ... import formulas
from ...exceptions import InvalidLabel
from ..domain import Ball
from ..index import AppliedIndex
from ..losses import Logistic, Ridge, Softmax
from ..schedules import Constant, Convex, StronglyConvex
from ..tombstones import KeySet

LOSS_LOGISTIC, LOSS_RIDGE, LOSS_SOFTMAX = 0, 1, 2
SCHED_STRONGLY_CONVEX, SCHED_CONVEX, SCHED_CONSTANT = 0, 1, 2

# kernel stop reasons (second-to-last field of ogd_steps' result)
DONE, TAIL_FULL, STEP_OVERFLOW = 0, 1, 2
_MAX_STEP = 2**32 - 1  # the index stores steps as uint32


# --------------------------------------------------------------------------- the OGD kernel
@jit
def _project(z, sq, radius):
    """``Ball.project`` in place, given ``sq`` = ||z||^2: z * (r / ||z||) outside the ball."""
    norm = math.sqrt(sq)
    if not norm <= radius:
        scale = radius / norm
        for i in range(z.shape[0]):
            z[i] = z[i] * scale


@jit
def _tombstoned(key, fshift, tomb_filter, tombstones, recent_tombstones):
    """The key is a tombstone (an insert after its delete, docs/guarantee.md 1.3): a key the
    filter passes is searched in both tombstone arrays; "no" from the filter is certain (most inserts)."""
    if not filter_passes(tomb_filter, fshift, key):
        return False
    return ((tombstones.shape[0] > 0 and contains(tombstones, key))
            or (recent_tombstones.shape[0] > 0 and contains(recent_tombstones, key)))


# The engine's formulas (worker/olu/formulas.py), compiled from the very functions the reference
# calls: inlined into each kernel, which the disk cache then keys by formulas.py too.
_strongly_convex_step = inline(formulas.strongly_convex_step)
_convex_step = inline(formulas.convex_step)
_shifted_log_contraction = inline(formulas.shifted_log_contraction)
_sensitivity = inline(formulas.sensitivity)
_passive_shift = inline(formulas.passive_shift)
_deletion_sigma = inline(formulas.deletion_sigma)
_logistic_derivative = inline(formulas.logistic_derivative)
_ridge_derivative = inline(formulas.ridge_derivative)


@jit
def _eta(sched_kind, sa, sb, t):
    """The step size at step ``t`` (the schedules' formulas, see :func:`ogd_steps`)."""
    if sched_kind == SCHED_STRONGLY_CONVEX:
        return _strongly_convex_step(sa, sb, t)
    if sched_kind == SCHED_CONVEX:
        return _convex_step(sa, sb, t)
    return sa


@jit
def _derivative(loss_kind, yj, dot):
    """The data term's derivative in x.z (``Loss.derivative``): the gradient is this times x, plus lam z."""
    if loss_kind == LOSS_LOGISTIC:
        return _logistic_derivative(dot, yj)
    return _ridge_derivative(dot, yj)


@jit
def _softmax_step(z, xp, x0, d, y_pos, eta, lam, radius, scores):
    """``Softmax.grad`` and the step, formula by formula: the K margins (lanes), exp(m_k - max)
    through the C library, their sum class by class, s = p - e_y; z_k <- z_k - eta (s_k x + lam
    z_k) element by element; then ||z||^2 over all K d coordinates in the lanes and the projection."""
    k_classes = z.shape[0] // d
    zp = data_pointer(z)
    for k in range(k_classes):
        scores[k] = lane_dot(xp, x0, zp, k * d, d)
    top = scores[0]
    for k in range(1, k_classes):
        if scores[k] > top:
            top = scores[k]
    total = 0.0
    for k in range(k_classes):
        scores[k] = math.exp(scores[k] - top)
        total += scores[k]
    for k in range(k_classes):
        s = scores[k] / total
        if k == y_pos:
            s = s - 1.0
        base = k * d
        for i in range(d):
            zi = z[base + i]
            z[base + i] = zi - eta * (s * xp[x0 + i] + lam * zi)
    _project(z, lane_sqnorm(zp, 0, z.shape[0]), radius)


@jit
def ogd_steps(loss_kind, lam, sched_kind, sa, sb, radius, z, X, y, keys, tombstones, recent_tombstones,
              tomb_filter, tail_keys, tail_steps, tail_len, t, steps_out, start):
    """Run OGD steps for rows ``start..`` of a micro-batch; ``z`` and the tail are updated in place.

    loss_kind: LOSS_LOGISTIC (``lam`` >= 0), LOSS_RIDGE or LOSS_SOFTMAX (``z`` the K x d matrix,
    flat; ``y`` the class positions). sched_kind and its two parameters:
    SCHED_STRONGLY_CONVEX (sa = mu, sb = t0): eta = 1/(mu (t + t0)); SCHED_CONVEX (sa = D,
    sb = L): eta = D/(L sqrt t); SCHED_CONSTANT (sa = eta). ``steps_out[j]`` gets the step that
    applied row j, or 0 when its key is tombstoned (the insert is skipped and counted, not
    applied): a key the tombstones' filter ``tomb_filter`` (``KeySet.filter``) passes is searched
    in both tombstone arrays. Stops early, before the row, when the tail is full (the caller
    merges the index and resumes at the returned row) or when the step would not fit uint32.

    Returns (next row, t, tail length, rows applied, stop reason).
    """
    n, d = X.shape
    cap = tail_keys.shape[0]
    any_tomb = tombstones.shape[0] + recent_tombstones.shape[0] > 0
    fshift = filter_shift(tomb_filter)
    xp, zp = data_pointer(X), data_pointer(z)  # both C-contiguous (run_batch, run_mixed)
    scores = np.empty(z.shape[0] // d if loss_kind == LOSS_SOFTMAX else 0)
    applied = 0
    j = start
    while j < n:
        key = keys[j]
        if any_tomb and _tombstoned(key, fshift, tomb_filter, tombstones, recent_tombstones):
            steps_out[j] = 0  # skipped and counted, not applied
            j += 1
            continue
        if tail_len == cap:
            return j, t, tail_len, applied, TAIL_FULL
        if t >= _MAX_STEP:
            return j, t, tail_len, applied, STEP_OVERFLOW
        t += 1
        eta = _eta(sched_kind, sa, sb, t)
        if loss_kind == LOSS_SOFTMAX:
            _softmax_step(z, xp, j * d, d, int(y[j]), eta, lam, radius, scores)
        else:
            s = _derivative(loss_kind, y[j], lane_dot(xp, j * d, zp, 0, d))
            _project(z, lane_step(zp, xp, j * d, d, eta, s, lam), radius)
        tail_keys[tail_len] = key
        tail_steps[tail_len] = np.uint32(t)
        tail_len += 1
        steps_out[j] = t
        applied += 1
        j += 1
    return j, t, tail_len, applied, DONE


# --------------------------------------------------------------------------- sparse rows
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
    total = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]))
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
        out[j] = _sparse_lane_sum(indices, values, values, indptr[j], indptr[j + 1], dim, True, lanes)
    return out


@jit
def sparse_rows_pass(indptr, indices, values, dim, sq_limit):
    """True when a CSR batch needs nothing of core/sparse.py's ``check_rows``: well formed, each
    row's indices strictly increasing in [0, dim), its values finite, its squared norm at most
    ``sq_limit`` (a hair under the bound's square). False: the checks there decide.

    A row of at most 2,048 non-zeros sums its squares left to right: any order of n positive terms
    is within n eps of the true sum, so one that passes ``sq_limit`` (1e-12 under the bound) has a
    lane sum (the engine's) under the bound too; only a wider row takes the lanes."""
    n = indptr.shape[0] - 1
    if n < 0 or indptr[0] != 0 or indptr[n] != indices.shape[0] or indices.shape[0] != values.shape[0]:
        return False
    lanes = np.empty(LANES)
    for j in range(n):
        lo, hi = indptr[j], indptr[j + 1]
        if hi < lo:
            return False
        last = -1
        sq = 0.0
        for p in range(lo, hi):
            i = indices[p]
            if i <= last or i >= dim or not abs(values[p]) < np.inf:
                return False
            last = i
            sq += values[p] * values[p]
        if hi - lo > 2048:
            sq = _sparse_lane_sum(indices, values, values, lo, hi, dim, True, lanes)
        if not sq <= sq_limit:
            return False
    return True


@jit
def sparse_steps(loss_kind, lam, sched_kind, sa, sb, radius, w, scale, sq, resync, indptr, indices, values, y,
                 keys, tombstones, recent_tombstones, tomb_filter, tail_keys, tail_steps, tail_len, t, steps_out,
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
        if any_tomb and _tombstoned(key, fshift, tomb_filter, tombstones, recent_tombstones):
            steps_out[j] = 0
            j += 1
            continue
        if tail_len == cap:
            return j, t, tail_len, applied, TAIL_FULL, scale, sq
        if t >= _MAX_STEP:
            return j, t, tail_len, applied, STEP_OVERFLOW, scale, sq
        t += 1
        eta = _eta(sched_kind, sa, sb, t)
        lo, hi = indptr[j], indptr[j + 1]
        s = _derivative(loss_kind, y[j], scale * _sparse_lane_sum(indices, w, values, lo, hi, d, False, lanes))
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


# --------------------------------------------------------------------------- deletions in the pass
@jit
def _unlearn_step(z, radius, tau, mu, t0, lipschitz, diameter, u, multiplier, noise_row):
    """One passive deletion of the record applied at step ``u``, at step ``tau``, on ``z`` in place:
    ``PassiveOLU._delete`` for a StronglyConvex schedule past its irregular head, formula by formula.

    log Gamma_{u,tau} = log(u + t0) - log(tau + t0), Delta_u = min(eta_u L, D),
    shift = Gamma * Delta_u, sigma from ``multiplier`` (``formulas.deletion_sigma``: the accountant's
    next multiplier, or minus a per-request divisor), then
    z <- Proj(z + sigma * noise_row). A shift of 0 (every influence contracted away) adds no noise.
    Returns (shift, sigma)."""
    lc = _shifted_log_contraction(t0, u, tau)
    shift = _passive_shift(lc, _sensitivity(_strongly_convex_step(mu, t0, u), lipschitz, diameter))
    if shift == 0.0:
        return 0.0, 0.0
    sigma = _deletion_sigma(shift, multiplier)
    _project(z, lane_axpy(data_pointer(z), data_pointer(noise_row), 0, z.shape[0], sigma), radius)
    return shift, sigma


@jit(nogil=False)
def plan_pass(keys, spans, rows, dkeys, ops, here):
    """The program of :func:`mixed_steps` for a poll batch, or False where the pass cannot keep
    the one-by-one order: a key deleted twice, inserted twice in the learned rows, or inserted
    after its delete. ``spans`` (m x 2: first, stop) are the rows to learn and ``rows`` (ascending)
    the deletes' rows, ``dkeys`` their keys. Fills ``ops`` (m + len(rows) entries, row order: see
    :func:`mixed_steps`) and ``here[k]``, the learned row that inserts delete k's key before it
    (-1: none, the usual case)."""
    n_del = dkeys.shape[0]
    order = np.argsort(dkeys)
    wanted = dkeys[order]
    for i in range(1, n_del):
        if wanted[i] == wanted[i - 1]:
            return False
    here[:] = -1
    for s in range(spans.shape[0]):
        for j in range(spans[s, 0], spans[s, 1]):
            key = keys[j]
            if key < wanted[0] or key > wanted[n_del - 1]:
                continue
            lo = lower_bound(wanted, n_del, key)
            if wanted[lo] == key:
                k = order[lo]
                if here[k] >= 0 or j > rows[k]:
                    return False
                here[k] = j
    a, b, m = 0, 0, 0
    while a < spans.shape[0] or b < n_del:
        if b >= n_del or (a < spans.shape[0] and spans[a, 0] < rows[b]):
            ops[m, 0], ops[m, 1], ops[m, 2] = spans[a, 0], spans[a, 1], -1
            a += 1
        else:
            ops[m, 0], ops[m, 1], ops[m, 2] = rows[b], rows[b], b
            b += 1
        m += 1
    return True


@jit
def mixed_steps(loss_kind, lam, sched_kind, sa, sb, radius, z, X, y, keys, tombstones, recent_tombstones,
                tomb_filter, tail_keys, tail_steps, tail_len, t, steps_out, ops, op, start, lipschitz, diameter,
                steps_u, multipliers, noise, drawn, taus, shifts, sigmas, z_after):
    """A poll batch of inserts and passive deletions in one call, from ``ops[op]`` and row ``start``
    (a StronglyConvex schedule: ``sa`` = mu, ``sb`` = t0).

    ``ops[m] = (first, stop, k)``: learn rows first..stop-1 as :func:`ogd_steps` does, then, when
    k >= 0, apply deletion k (:func:`_unlearn_step`) of the record applied at step ``steps_u[k]``,
    or, where that is -(r + 1), of the record row r of this batch applied (0: nothing to apply). The ``drawn``-th
    deletion that adds noise takes ``noise[drawn]`` and ``multipliers[drawn]`` (the accountant's
    next ones). Deletion k leaves its record's step in ``steps_u[k]``, ``shifts[k]`` and ``sigmas[k]``;
    every delete k, applied or not, the step it happens at in ``taus[k]`` and the (post-noise)
    iterate after it in ``z_after[k]``. Stops like
    :func:`ogd_steps` (tail full, step overflow), before a row.

    Returns (next op, next row, t, tail length, noise rows used, stop reason).
    """
    m = ops.shape[0]
    j = start
    while op < m:
        stop = ops[op, 1]
        if j < stop:
            j, t, tail_len, _, reason = ogd_steps(loss_kind, lam, sched_kind, sa, sb, radius, z, X[:stop], y[:stop],
                                                  keys[:stop], tombstones, recent_tombstones, tomb_filter,
                                                  tail_keys, tail_steps, tail_len, t, steps_out, j)
            if reason != DONE:
                return op, j, t, tail_len, drawn, reason
        k = ops[op, 2]
        if k >= 0 and steps_u[k] != 0:  # 0: a delete that changes nothing (duplicate, never applied)
            if steps_u[k] < 0:  # applied in this batch, at the step the pass gave its row
                steps_u[k] = steps_out[-steps_u[k] - 1]
            shift, sigma = _unlearn_step(z, radius, t, sa, sb, lipschitz, diameter, steps_u[k], multipliers[drawn],
                                         noise[drawn])
            shifts[k], sigmas[k] = shift, sigma
            if shift != 0.0:
                drawn += 1
        if k >= 0:  # where the model stands at every delete, changed or not (a rotation's other model)
            taus[k] = t
            z_after[k, :] = z
        op += 1
        if op < m:
            j = ops[op, 0]
    return op, j, t, tail_len, drawn, DONE


def plan_for(model):
    """Kernel parameters (loss_kind, lam, sched_kind, sa, sb, radius) for ``model``, or None.

    None (use the reference) for any loss, schedule, domain or index type the kernel does not
    reproduce exactly, including subclasses of the known ones (they may override a formula).
    """
    loss, sched = model.loss, model.schedule
    if type(model.ball) is not Ball or type(model.index) is not AppliedIndex or type(model.tombstones) is not KeySet:
        return None
    if type(loss) is Logistic:
        lk = LOSS_LOGISTIC
    elif type(loss) is Ridge:
        lk = LOSS_RIDGE
    elif type(loss) is Softmax:
        lk = LOSS_SOFTMAX
    else:
        return None
    if type(sched) is StronglyConvex:
        sk, sa, sb = SCHED_STRONGLY_CONVEX, sched.mu, sched.t0
    elif type(sched) is Convex:
        sk, sa, sb = SCHED_CONVEX, sched.diameter, sched.lipschitz
    elif type(sched) is Constant:
        sk, sa, sb = SCHED_CONSTANT, sched.step, 0.0
    else:
        return None
    return lk, float(loss.lam), sk, float(sa), float(sb), float(model.ball.radius)


def _check_iterate(z) -> None:
    """The iterate the kernels update in place through its data pointer: it must already be a
    contiguous 1-D float64 array (a copy would leave the caller's unchanged)."""
    if not (type(z) is np.ndarray and z.dtype == np.float64 and z.ndim == 1 and z.flags.c_contiguous):
        raise ValueError("the iterate must be a contiguous 1-D float64 array")


def _contiguous(keys, X, y, z):
    """A batch as the kernels take it, its iterate checked (:func:`_check_iterate`)."""
    _check_iterate(z)
    return (np.ascontiguousarray(keys, dtype=np.uint64), np.ascontiguousarray(X, dtype=np.float64),
            np.ascontiguousarray(y, dtype=np.float64))


def _tombstone_arrays(tombstones):
    """What the kernels read of a ``KeySet``: its sorted base and recent keys and its filter."""
    return tombstones.base, tombstones.recent, tombstones.filter


def run_batch(plan, z, t, index, tombstones, keys, X, y):
    """Drive :func:`ogd_steps` over a whole batch, pacing the index's merges as its tail fills.

    ``tombstones``: the model's ``KeySet``. ``z`` (float64, contiguous) is updated in place and
    the index in place. Returns
    (t, steps, rows consumed, stop reason) where ``steps[j]`` is row j's step or 0 (skipped);
    rows from ``consumed`` on were not touched (only when the step counter would overflow).
    """
    lk, lam, sk, sa, sb, radius = plan
    (keys, X, y), (tomb, recent, tomb_filter) = _contiguous(keys, X, y, z), _tombstone_arrays(tombstones)
    n = len(keys)
    steps = np.zeros(n, np.int64)
    j, t, reason = 0, int(t), DONE
    while j < n:
        tail_keys, tail_steps, tail_len = index.tail_buffers()
        j, t, tail_len, _, reason = ogd_steps(lk, lam, sk, sa, sb, radius, z, X, y, keys, tomb, recent, tomb_filter,
                                              tail_keys, tail_steps, tail_len, t, steps, j)
        index.set_tail_len(tail_len)
        index.advance_merge()
        if reason == TAIL_FULL:
            index.merge(paced=True)
        elif reason == STEP_OVERFLOW:
            break
    return t, steps, j, reason


def run_sparse(plan, w, scale, sq, t, index, tombstones, keys, rows, y, resync):
    """:func:`run_batch` for sparse rows (core/sparse.py's ``SparseRows``) on the iterate
    ``scale * w`` (``w`` updated in place; ``sq``: ||w||^2 as kept, or None; ``resync``:
    ``sparse.resync_steps(d)``). Returns
    (t, steps, rows consumed, stop reason, scale, sq)."""
    lk, lam, sk, sa, sb, radius = plan
    _check_iterate(w)
    keys, y = np.ascontiguousarray(keys, dtype=np.uint64), np.ascontiguousarray(y, dtype=np.float64)
    tomb, recent, tomb_filter = _tombstone_arrays(tombstones)
    steps = np.zeros(len(keys), np.int64)
    j, t, reason, sq = 0, int(t), DONE, np.nan if sq is None else float(sq)
    while j < len(keys):
        tail_keys, tail_steps, tail_len = index.tail_buffers()
        j, t, tail_len, _, reason, scale, sq = sparse_steps(
            lk, lam, sk, sa, sb, radius, w, float(scale), sq, int(resync), rows.indptr, rows.indices, rows.values, y,
            keys, tomb, recent, tomb_filter, tail_keys, tail_steps, tail_len, t, steps, j)
        index.set_tail_len(tail_len)
        index.advance_merge()
        if reason == TAIL_FULL:
            index.merge(paced=True)
        elif reason == STEP_OVERFLOW:
            break
    return t, steps, j, reason, scale, (None if not sq == sq else sq)


def run_mixed(plan, z, t, index, tombstones, keys, X, y, ops, lipschitz, diameter, steps_u, multipliers, noise):
    """:func:`run_batch` for a batch with deletions (:func:`mixed_steps`), pacing the index's merges
    the same way. ``steps_u`` is updated in place. Returns (t, steps, taus, shifts, sigmas, z_after,
    stop reason); on a step overflow the ops from the stopping one on were not applied."""
    lk, lam, sk, sa, sb, radius = plan
    (keys, X, y), (tomb, recent, tomb_filter) = _contiguous(keys, X, y, z), _tombstone_arrays(tombstones)
    noise = np.ascontiguousarray(noise, dtype=np.float64)
    k = len(steps_u)
    steps = np.zeros(len(keys), np.int64)
    taus, shifts, sigmas = np.zeros(k, np.int64), np.zeros(k), np.zeros(k)
    z_after = np.empty((k, len(z)))
    op, j, t, drawn, reason = 0, int(ops[0, 0]) if len(ops) else 0, int(t), 0, DONE
    while True:
        tail_keys, tail_steps, tail_len = index.tail_buffers()
        op, j, t, tail_len, drawn, reason = mixed_steps(
            lk, lam, sk, sa, sb, radius, z, X, y, keys, tomb, recent, tomb_filter, tail_keys, tail_steps, tail_len, t,
            steps, ops, op, j, lipschitz, diameter, steps_u, multipliers, noise, drawn, taus, shifts, sigmas, z_after)
        index.set_tail_len(tail_len)
        index.advance_merge()
        if reason != TAIL_FULL:
            return t, steps, taus, shifts, sigmas, z_after, reason
        index.merge(paced=True)


def check_labels(loss, y) -> np.ndarray:
    """Vectorised ``loss.label`` for a numeric 1-D array (Logistic or Ridge); float64 out."""
    if type(loss) not in (Logistic, Ridge):
        return loss.labels(y) if hasattr(loss, "labels") else np.array([loss.label(v) for v in y], np.float64)
    try:
        arr = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([loss.label(v) for v in y], np.float64)  # raises the loop's error
    if arr.ndim != 1:
        raise InvalidLabel(f"labels must be a 1-D sequence, got shape {arr.shape}")
    if type(loss) is Logistic:
        bad = ~((arr == 1.0) | (arr == -1.0) | (arr == 0.0))
    else:
        bad = ~(np.abs(arr) <= loss.label_bound)  # NaN is bad too
    bad |= ~np.isfinite(arr)
    if bad.any():
        loss.label(y[int(np.argmax(bad))])  # raises the exact error of the loop
    return np.where(arr == 0.0, -1.0, arr) if type(loss) is Logistic else arr
