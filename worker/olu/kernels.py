"""Compiled (numba) micro-batch kernels for the OGD step of :class:`~worker.olu.base.OnlineUnlearner`.

The per-event step is sequential (z_{t+1} depends on z_t), so speed comes from keeping Python out
of the inner loop: :func:`ogd_steps` runs a whole micro-batch of projected OGD steps in one call,
including the tombstone check (binary search in the two sorted tombstone arrays), the step size, the
gradient, the projection onto the ball and the append of (key, step) to the applied index's tail.

The pure-numpy ``OnlineUnlearner._learn`` stays the reference implementation. The kernel follows
its formulas operation by operation (same eta expression, same overflow-free logistic form,
projection ``z * (r / ||z||)``, ``fastmath=False``); the only difference is the summation order of
the two length-d reductions (x.z and ||z||^2: a plain loop here, BLAS in numpy), so results agree
to ~1e-13 relative or better (bit for bit in our d = 10 runs, but that is not guaranteed).
``learn_one`` and ``learn_many`` both go through this kernel when it is enabled, so *they* agree
bit for bit.

Switches
--------
- ``OnlineUnlearner.use_kernel = False`` (class or instance attribute): always use the reference.
- ``OLU_REFERENCE_KERNEL=1`` in the environment (read at import) or ``with kernels.reference():``
  (tests): force the reference for every model.

Compilation and the numba cache
-------------------------------
Kernels compile lazily on first use (about 1.6 to 2.2 s for all of them, plus ~0.2 s to import
numba; ~0.3 s when loaded from the cache; the stream decoder's kernel adds ~1.9 s, ~0.03 s cached)
and are cached on disk (``cache=True``). numba looks for a writable cache
directory in this order: ``$NUMBA_CACHE_DIR``, the package's ``__pycache__``, then the user cache
(``~/.cache/numba``). When none is writable (a read-only root file system), numba would raise
``RuntimeError`` at import; we then compile without the disk cache and log a warning once: the
kernels work, but every process pays the compile time. In read-only containers set
``NUMBA_CACHE_DIR`` to a writable volume (e.g. an ``emptyDir``) and call :func:`warm_up` at
startup, before consuming, so the first message does not wait for the compiler.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time

import numba
import numpy as np

from .domain import Ball
from .index import MAX_ID_BYTES, AppliedIndex, KeySet, record_key
from .losses import Logistic, Ridge
from .schedules import Constant, Convex, StronglyConvex

log = logging.getLogger(__name__)

LOSS_LOGISTIC, LOSS_RIDGE = 0, 1
SCHED_STRONGLY_CONVEX, SCHED_CONVEX, SCHED_CONSTANT = 0, 1, 2

# kernel stop reasons (second-to-last field of ogd_steps' result)
DONE, TAIL_FULL, STEP_OVERFLOW = 0, 1, 2
_MAX_STEP = 2**32 - 1  # the index stores steps as uint32

FORCE_REFERENCE = os.environ.get("OLU_REFERENCE_KERNEL", "").strip().lower() in ("1", "true", "yes", "on")
CACHE_ENABLED = True
compile_seconds: float | None = None  # set by warm_up()


def _jit(func):
    """njit(cache=True, nogil=True, fastmath=False), without the disk cache if no dir is writable."""
    global CACHE_ENABLED
    opts = dict(nogil=True, fastmath=False)
    if CACHE_ENABLED:
        try:
            return numba.njit(cache=True, **opts)(func)
        except RuntimeError as exc:  # "cannot cache function ...: no locator available"
            CACHE_ENABLED = False
            log.warning("numba cache disabled (%s); kernels compile in every process. "
                        "Set NUMBA_CACHE_DIR to a writable directory.", exc)
    return numba.njit(cache=False, **opts)(func)


@contextlib.contextmanager
def reference():
    """Within the block every model uses the pure-numpy reference step (for tests)."""
    global FORCE_REFERENCE
    saved, FORCE_REFERENCE = FORCE_REFERENCE, True
    try:
        yield
    finally:
        FORCE_REFERENCE = saved


# --------------------------------------------------------------------------- the OGD kernel
@_jit
def _contains(sorted_keys, key):
    """Binary search in a sorted uint64 array."""
    lo, hi = 0, sorted_keys.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if sorted_keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo < sorted_keys.shape[0] and sorted_keys[lo] == key


@_jit
def ogd_steps(loss_kind, lam, sched_kind, sa, sb, radius, z, X, y, keys, tombstones, recent_tombstones,
              tail_keys, tail_steps, tail_len, t, steps_out, start):
    """Run OGD steps for rows ``start..`` of a micro-batch; ``z`` and the tail are updated in place.

    loss_kind: LOSS_LOGISTIC (``lam`` >= 0) or LOSS_RIDGE. sched_kind and its two parameters:
    SCHED_STRONGLY_CONVEX (sa = mu, sb = t0): eta = 1/(mu (t + t0)); SCHED_CONVEX (sa = D,
    sb = L): eta = D/(L sqrt t); SCHED_CONSTANT (sa = eta). ``steps_out[j]`` gets the step that
    applied row j, or 0 when its key is tombstoned (the insert is skipped and counted, not
    applied). Stops early, before the row, when the tail is full (the caller merges the index
    and resumes at the returned row) or when the step would not fit uint32.

    Returns (next row, t, tail length, rows applied, stop reason).
    """
    n, d = X.shape
    cap = tail_keys.shape[0]
    n_tomb, n_recent = tombstones.shape[0], recent_tombstones.shape[0]
    applied = 0
    j = start
    while j < n:
        key = keys[j]
        if (n_tomb > 0 and _contains(tombstones, key)) or (n_recent > 0 and _contains(recent_tombstones, key)):
            steps_out[j] = 0  # an insert after its delete (olu-spec 6.1)
            j += 1
            continue
        if tail_len == cap:
            return j, t, tail_len, applied, TAIL_FULL
        if t >= _MAX_STEP:
            return j, t, tail_len, applied, STEP_OVERFLOW
        t += 1
        if sched_kind == SCHED_STRONGLY_CONVEX:
            eta = 1.0 / (sa * (t + sb))
        elif sched_kind == SCHED_CONVEX:
            eta = sa / (sb * math.sqrt(t))
        else:
            eta = sa
        yj = y[j]
        dot = 0.0
        for i in range(d):
            dot += X[j, i] * z[i]
        if loss_kind == LOSS_LOGISTIC:
            m = yj * dot
            # d/dm log(1+e^{-m}) = -1/(1+e^m), in the reference's overflow-free form
            if m < 0:
                s = -yj / (1.0 + math.exp(m))
            else:
                e = math.exp(-m)
                s = -yj * e / (1.0 + e)
        else:
            s = dot - yj
        sq = 0.0
        for i in range(d):
            zi = z[i] - eta * (s * X[j, i] + lam * z[i])
            z[i] = zi
            sq += zi * zi
        norm = math.sqrt(sq)
        if not norm <= radius:  # Ball.project: z * (r / ||z||)
            scale = radius / norm
            for i in range(d):
                z[i] = z[i] * scale
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
    if type(model.ball) is not Ball or type(model.index) is not AppliedIndex or type(model.tombstones) is not KeySet:
        return None
    if type(loss) is Logistic:
        lk = LOSS_LOGISTIC
    elif type(loss) is Ridge:
        lk = LOSS_RIDGE
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


def run_batch(plan, z, t, index, tombstones, keys, X, y):
    """Drive :func:`ogd_steps` over a whole batch, pacing the index's merges as its tail fills.

    ``tombstones``: the model's ``KeySet``. ``z`` (float64, contiguous) is updated in place and
    the index in place. Returns
    (t, steps, rows consumed, stop reason) where ``steps[j]`` is row j's step or 0 (skipped);
    rows from ``consumed`` on were not touched (only when the step counter would overflow).
    """
    lk, lam, sk, sa, sb, radius = plan
    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    tomb, recent = tombstones.base, tombstones.recent
    n = len(keys)
    steps = np.zeros(n, np.int64)
    j, t, reason = 0, int(t), DONE
    while j < n:
        tail_keys, tail_steps, tail_len = index.tail_buffers()
        j, t, tail_len, _, reason = ogd_steps(lk, lam, sk, sa, sb, radius, z, X, y, keys, tomb, recent,
                                              tail_keys, tail_steps, tail_len, t, steps, j)
        index.set_tail_len(tail_len)
        index.advance_merge()
        if reason == TAIL_FULL:
            index.merge(paced=True)
        elif reason == STEP_OVERFLOW:
            break
    return t, steps, j, reason


@_jit
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
# BLAKE2b (RFC 7693) with an 8-byte digest and no key, i.e. hashlib.blake2b(raw, digest_size=8),
# read little-endian: the same 64-bit value as index.record_key (tests compare them).
_IV = np.array([
    0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
    0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179,
], dtype=np.uint64)
_SIGMA = np.array([
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
    [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
    [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
    [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
    [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
    [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
    [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
    [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
], dtype=np.int64)
_PARAM0 = np.uint64(0x01010008)  # depth 1, fanout 1, key length 0, digest length 8
_U8, _U16, _U24, _U32, _U40, _U63, _U64 = (np.uint64(v) for v in (8, 16, 24, 32, 40, 63, 64))


@numba.njit(inline="always", nogil=True)
def _rotr(x, n):
    return (x >> n) | (x << (_U64 - n))


@numba.njit(inline="always", nogil=True)
def _mix(a, b, c, d, x, y):
    a = a + b + x
    d = _rotr(d ^ a, _U32)
    c = c + d
    b = _rotr(b ^ c, _U24)
    a = a + b + y
    d = _rotr(d ^ a, _U16)
    c = c + d
    b = _rotr(b ^ c, _U63)
    return a, b, c, d


@_jit
def _compress(h, m, counter, last):
    v0, v1, v2, v3, v4, v5, v6, v7 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    v8, v9, v10, v11 = _IV[0], _IV[1], _IV[2], _IV[3]
    v12 = _IV[4] ^ counter  # the high 64 bits of the byte counter are 0 here
    v13 = _IV[5]
    v14 = ~_IV[6] if last else _IV[6]
    v15 = _IV[7]
    for r in range(12):
        s = _SIGMA[r]
        v0, v4, v8, v12 = _mix(v0, v4, v8, v12, m[s[0]], m[s[1]])
        v1, v5, v9, v13 = _mix(v1, v5, v9, v13, m[s[2]], m[s[3]])
        v2, v6, v10, v14 = _mix(v2, v6, v10, v14, m[s[4]], m[s[5]])
        v3, v7, v11, v15 = _mix(v3, v7, v11, v15, m[s[6]], m[s[7]])
        v0, v5, v10, v15 = _mix(v0, v5, v10, v15, m[s[8]], m[s[9]])
        v1, v6, v11, v12 = _mix(v1, v6, v11, v12, m[s[10]], m[s[11]])
        v2, v7, v8, v13 = _mix(v2, v7, v8, v13, m[s[12]], m[s[13]])
        v3, v4, v9, v14 = _mix(v3, v4, v9, v14, m[s[14]], m[s[15]])
    h[0] ^= v0 ^ v8
    h[1] ^= v1 ^ v9
    h[2] ^= v2 ^ v10
    h[3] ^= v3 ^ v11
    h[4] ^= v4 ^ v12
    h[5] ^= v5 ^ v13
    h[6] ^= v6 ^ v14
    h[7] ^= v7 ^ v15


@_jit
def blake2b64(buf, begin, length, h, m):
    """Key of the byte string buf[begin:begin + length] (``record_key``'s value); h and m are
    scratch arrays of 8 and 16 uint64."""
    for i in range(8):
        h[i] = _IV[i]
    h[0] ^= _PARAM0
    pos = 0
    while True:
        block = min(128, length - pos)
        for i in range(16):
            m[i] = 0
        for i in range(block):
            m[i >> 3] |= np.uint64(buf[begin + pos + i]) << np.uint64((i & 7) * 8)
        pos += block
        _compress(h, m, np.uint64(pos), pos == length)
        if pos == length:
            break
    return h[0] if h[0] != 0 else np.uint64(1)  # record_key's "or 1": 0 marks a free slot


@_jit
def blake2b64_many(buf, offsets):
    """Keys of the byte strings buf[offsets[k]:offsets[k+1]] (same value as ``record_key``)."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.uint64)
    h = np.empty(8, np.uint64)
    m = np.empty(16, np.uint64)
    for k in range(n):
        out[k] = blake2b64(buf, offsets[k], offsets[k + 1] - offsets[k], h, m)
    return out


@_jit
def blake2b64_where(buf, offsets, selected, out):
    """``out[k]`` = key of ``buf[offsets[k]:offsets[k+1]]`` for every selected k (others untouched)."""
    h = np.empty(8, np.uint64)
    m = np.empty(16, np.uint64)
    for k in range(selected.shape[0]):
        if selected[k]:
            out[k] = blake2b64(buf, offsets[k], offsets[k + 1] - offsets[k], h, m)


def record_keys(record_ids) -> np.ndarray:
    """``np.array([record_key(r) for r in record_ids], np.uint64)``, vectorised.

    Same values and the same :class:`InvalidRecordId` (for the first bad id) as the loop; ids
    that are not exactly ``str`` go through ``record_key`` one by one.
    """
    ids = record_ids if isinstance(record_ids, list) else list(record_ids)
    n = len(ids)
    if n == 0:
        return np.zeros(0, np.uint64)
    if set(map(type, ids)) != {str}:
        return np.fromiter((record_key(r) for r in ids), np.uint64, n)
    joined = "".join(ids)
    raw = joined.encode("utf-8", "surrogatepass")  # UTF-8 is per code point: join then encode
    if len(raw) == len(joined):  # all ASCII: byte length == character length
        lengths = np.fromiter(map(len, ids), np.int64, n)
    else:
        lengths = np.fromiter((len(r.encode("utf-8", "surrogatepass")) for r in ids), np.int64, n)
    bad = (lengths == 0) | (lengths > MAX_ID_BYTES)
    if bad.any():
        record_key(ids[int(np.argmax(bad))])  # raises the exact error of the loop
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return blake2b64_many(np.frombuffer(raw, np.uint8), offsets)


def check_labels(loss, y) -> np.ndarray:
    """Vectorised ``loss.label`` for a numeric 1-D array (Logistic or Ridge); float64 out."""
    from .errors import InvalidLabel

    if type(loss) not in (Logistic, Ridge):
        return np.array([loss.label(v) for v in y], np.float64)
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


# ------------------------------------------------------------------------------- warm-up
def warm_up() -> float:
    """Compile (or load from the cache) every kernel with the types production passes; seconds taken.

    numba compiles a separate version for read-only arrays, and the index's runs and the
    tombstone base are read-only (frozen: snapshots in flight share them). So the kernels are
    driven here through the same classes, a tiny index and key set, rather than with hand-made
    arrays: a version missed here is compiled inside the first batch that needs it (a 0.1-0.3 s
    stall of the loop, measured in bench/delete_latency.py).
    """
    from .index import AppliedIndex, KeySet, Run, _merged

    global compile_seconds
    start = time.perf_counter()
    plan = (LOSS_LOGISTIC, 0.1, SCHED_STRONGLY_CONVEX, 0.1, 1.0, 1.0)
    index = AppliedIndex(tail_size=2, max_run=64)
    tombstones = KeySet(recent_keys=1)
    for key in (1, 2, 3):  # some keys in the frozen base, one in the recent array
        tombstones.add(key)
    n = 12  # fills the 2-slot tail six times: paced merges of frozen runs
    keys = np.arange(10, 10 + n, dtype=np.uint64)
    X = np.tile([[0.6, 0.8], [0.8, -0.6]], (n // 2, 1))
    y = np.tile([1.0, -1.0], n // 2)
    run_batch(plan, np.zeros(2), 0, index, tombstones, keys, X, y)
    index.merge()
    _merged(Run(keys[:2].copy(), np.array([1, 2], np.uint32), dead=(0,)), None)  # a run reclaimed alone
    raw = b"r-1"
    blake2b64_many(np.frombuffer(raw, np.uint8), np.array([0, len(raw)], np.int64))
    compile_seconds = time.perf_counter() - start
    return compile_seconds
