"""Compiled (numba) micro-batch kernel for the OGD step of
:class:`~worker.olu.core.base.OnlineUnlearner`.

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
from ....compiled.lanes import lane_dot, lane_sqnorm, lane_step
from ....compiled.sorted_keys import contains, filter_passes, filter_shift
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
MAX_STEP = 2**32 - 1  # the index stores steps as uint32


# --------------------------------------------------------------------------- the OGD kernel
@jit
def project(z, sq, radius):
    """``Ball.project`` in place, given ``sq`` = ||z||^2: z * (r / ||z||) outside the ball."""
    norm = math.sqrt(sq)
    if not norm <= radius:
        scale = radius / norm
        for i in range(z.shape[0]):
            z[i] = z[i] * scale


@jit
def tombstoned(key, fshift, tomb_filter, tombstones, recent_tombstones):
    """The key is a tombstone (an insert after its delete, docs/guarantee.md 1.3): a key the
    filter passes is searched in both tombstone arrays; "no"
    from the filter is certain (most inserts)."""
    if not filter_passes(tomb_filter, fshift, key):
        return False
    return ((tombstones.shape[0] > 0 and contains(tombstones, key))
            or (recent_tombstones.shape[0] > 0 and contains(recent_tombstones, key)))


# The engine's formulas (worker/olu/formulas.py), compiled from the very functions the reference
# calls: inlined into each kernel, which the disk cache then keys by formulas.py too.
_strongly_convex_step = inline(formulas.strongly_convex_step)
_convex_step = inline(formulas.convex_step)
_logistic_derivative = inline(formulas.logistic_derivative)
_ridge_derivative = inline(formulas.ridge_derivative)


@jit
def step_size(sched_kind, sa, sb, t):
    """The step size at step ``t`` (the schedules' formulas, see :func:`ogd_steps`)."""
    if sched_kind == SCHED_STRONGLY_CONVEX:
        return _strongly_convex_step(sa, sb, t)
    if sched_kind == SCHED_CONVEX:
        return _convex_step(sa, sb, t)
    return sa


@jit
def derivative(loss_kind, yj, dot):
    """The data term's derivative in x.z (``Loss.derivative``):
    the gradient is this times x, plus lam z."""
    if loss_kind == LOSS_LOGISTIC:
        return _logistic_derivative(dot, yj)
    return _ridge_derivative(dot, yj)


@jit
def _softmax_step(z, xp, x0, d, y_pos, eta, lam, radius, scores):
    """``Softmax.grad`` and the step, formula by formula: the K margins (lanes), exp(m_k - max)
    through the C library, their sum class by class, s = p - e_y; z_k <- z_k - eta (s_k x + lam
    z_k) element by element; then ||z||^2 over all K d
    coordinates in the lanes and the projection."""
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
    project(z, lane_sqnorm(zp, 0, z.shape[0]), radius)


@jit
def ogd_steps(loss_kind, lam, sched_kind, sa, sb, radius, z, X, y, keys, tombstones,
              recent_tombstones,
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
        if any_tomb and tombstoned(key, fshift, tomb_filter, tombstones, recent_tombstones):
            steps_out[j] = 0  # skipped and counted, not applied
            j += 1
            continue
        if tail_len == cap:
            return j, t, tail_len, applied, TAIL_FULL
        if t >= MAX_STEP:
            return j, t, tail_len, applied, STEP_OVERFLOW
        t += 1
        eta = step_size(sched_kind, sa, sb, t)
        if loss_kind == LOSS_SOFTMAX:
            _softmax_step(z, xp, j * d, d, int(y[j]), eta, lam, radius, scores)
        else:
            s = derivative(loss_kind, y[j], lane_dot(xp, j * d, zp, 0, d))
            project(z, lane_step(zp, xp, j * d, d, eta, s, lam), radius)
        tail_keys[tail_len] = key
        tail_steps[tail_len] = np.uint32(t)
        tail_len += 1
        steps_out[j] = t
        applied += 1
        j += 1
    return j, t, tail_len, applied, DONE


def plan_for(model):
    """Kernel parameters (loss_kind, lam, sched_kind, sa, sb, radius) for ``model``, or None.

    None (use the reference) for any loss, schedule, domain or index type the kernel does not
    reproduce exactly, including subclasses of the known ones (they may override a formula).
    """
    loss, sched = model.loss, model.schedule
    if (type(model.ball) is not Ball or type(model.index) is not AppliedIndex
            or type(model.tombstones) is not KeySet):
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


def check_iterate(z) -> None:
    """The iterate the kernels update in place through its data pointer: it must already be a
    contiguous 1-D float64 array (a copy would leave the caller's unchanged)."""
    if not (type(z) is np.ndarray and z.dtype == np.float64 and z.ndim == 1
            and z.flags.c_contiguous):
        raise ValueError("the iterate must be a contiguous 1-D float64 array")


def contiguous(keys, X, y, z):
    """A batch as the kernels take it, its iterate checked (:func:`check_iterate`)."""
    check_iterate(z)
    return (np.ascontiguousarray(keys, dtype=np.uint64), np.ascontiguousarray(X, dtype=np.float64),
            np.ascontiguousarray(y, dtype=np.float64))


def tombstone_arrays(tombstones):
    """What the kernels read of a ``KeySet``: its sorted base and recent keys and its filter."""
    return tombstones.base, tombstones.recent, tombstones.filter


def paced(index, tail_len: int, reason: int) -> bool:
    """After a kernel call: the index's tail as the kernel left it and its merge paced (a full tail
    merged, the batch then goes on); True when the batch stops there (a step overflow)."""
    index.set_tail_len(tail_len)
    index.advance_merge()
    if reason == TAIL_FULL:
        index.merge(paced=True)
    return reason == STEP_OVERFLOW


def run_batch(plan, z, t, index, tombstones, keys, X, y):
    """Drive :func:`ogd_steps` over a whole batch, pacing the index's merges as its tail fills.

    ``tombstones``: the model's ``KeySet``. ``z`` (float64, contiguous) is updated in place and
    the index in place. Returns
    (t, steps, rows consumed, stop reason) where ``steps[j]`` is row j's step or 0 (skipped);
    rows from ``consumed`` on were not touched (only when the step counter would overflow).
    """
    lk, lam, sk, sa, sb, radius = plan
    (keys, X, y), (tomb, recent,
                   tomb_filter) = contiguous(keys, X, y, z), tombstone_arrays(tombstones)
    n = len(keys)
    steps = np.zeros(n, np.int64)
    j, t, reason = 0, int(t), DONE
    while j < n:
        tail_keys, tail_steps, tail_len = index.tail_buffers()
        j, t, tail_len, _, reason = ogd_steps(lk, lam, sk, sa, sb, radius, z, X, y, keys, tomb,
                                              recent, tomb_filter,
                                              tail_keys, tail_steps, tail_len, t, steps, j)
        if paced(index, tail_len, reason):
            break
    return t, steps, j, reason


def check_labels(loss, y) -> np.ndarray:
    """Vectorised ``loss.label`` for a numeric 1-D array (Logistic or Ridge); float64 out."""
    if type(loss) not in (Logistic, Ridge):
        return loss.labels(y) if hasattr(loss, "labels") else np.array(
            [loss.label(v) for v in y], np.float64)
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
