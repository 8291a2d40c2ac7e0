"""The compiled front of ``learn_many``: a batch's ids hashed to record keys
(:mod:`worker.compiled.blake2b`), its rows and labels checked, in one call.

Rows a hair over the norm bound (a normaliser's output, rounded) are clipped in compiled code
exactly as ``FeatureBound`` clips them; anything else :func:`ingest` does not pass (a bad or
NUL-holding id, a row far over the bound, a non-finite value, a bad label) sends the batch down the
general path, which raises or clips exactly as before.
"""

from __future__ import annotations

import math

import numpy as np

from ....compiled.blake2b import EVERY, hash_ranges
from ....compiled.intrinsics import data_pointer
from ....compiled.jit import jit
from ....compiled.lanes import lane_sqnorm
from ...exceptions import InvalidLabel
from ..domain import FeatureBound
from ..losses import Logistic, Ridge, Softmax
from ..record_keys import MAX_ID_BYTES

# ingest statuses: OK (CLIP: OK once the rows marked over the bound are clipped), or why the
# batch takes the general path
INGEST_OK, INGEST_IDS, INGEST_ROWS, INGEST_CLIP = 0, 1, 2, 3
_TINY, _MAX = np.finfo(np.float64).tiny, np.finfo(np.float64).max
_SIGN_BIT = np.int64(-(2**63))  # the bits of -0.0


@jit
def check_rows(X, y, logistic, label_bound, bound, sq_limit, far, over, labels):
    """The rows and labels of :func:`ingest` (callers with keys use it alone): INGEST_OK when every
    row passes untouched, INGEST_CLIP when some are over the bound but by no more than ``far``
    (marked in ``over``), INGEST_ROWS otherwise; ``labels`` gets the labels. A squared norm at most
    ``sq_limit`` (``FeatureBound.untouched_sqnorm``) passes at once; above it a row's norm is
    ``row_norms``' (the lanes' sum of squares, its square root) wherever that is exact: a sum of
    squares outside [tiny, max] goes the general way."""
    n, d = X.shape
    xp = data_pointer(X)
    # no branch per label (random labels would mispredict half of them): one test at the end
    ok = True
    status = INGEST_OK
    for j in range(n):
        yj = y[j]
        if logistic:
            labels[j] = 1.0 if yj == 1.0 else -1.0
            ok &= (yj == 1.0) | (yj == -1.0) | (yj == 0.0)
        else:
            labels[j] = yj
            ok &= (abs(yj) <= label_bound) & (abs(yj) < np.inf)
        sq = lane_sqnorm(xp, j * d, d)
        over[j] = False
        if sq <= sq_limit:
            continue
        if not _TINY <= sq <= _MAX:  # NaN, inf, overflow or underflow: the general path decides
            return INGEST_ROWS
        norm = math.sqrt(sq)
        if norm > bound:
            if norm > far or not bound / norm >= _TINY:
                return INGEST_ROWS
            over[j] = True
            status = INGEST_CLIP
    return status if ok else INGEST_ROWS


@jit
def clip_rows(X, over, bound, out):
    """``out`` = ``X`` with the rows marked ``over`` as ``FeatureBound._clip`` makes them, bit for
    bit: x * (R / ||x||), then one ulp towards zero, coordinate by coordinate, while the norm is
    still over R. One pass: a row is copied or clipped where it is read. False (``out`` partly
    written: dropped) where the general path must decide."""
    n, d = X.shape
    xp, op = data_pointer(X), data_pointer(out)
    bits = out.reshape(n * d).view(np.int64)
    for j in range(n):
        if not over[j]:
            for i in range(d):
                out[j, i] = X[j, i]
            continue
        factor = bound / math.sqrt(lane_sqnorm(xp, j * d, d))
        for i in range(d):
            out[j, i] = X[j, i] * factor
        for _ in range(64):
            sq = lane_sqnorm(op, j * d, d)
            if not _TINY <= sq <= _MAX:
                return False
            if math.sqrt(sq) <= bound:
                break
            for p in range(j * d, (j + 1) * d):
                # nextafter(v, 0.0) of a finite double: its bit pattern less one (either sign,
                # subnormals too), a zero stays +0.0
                b = bits[p]
                bits[p] = 0 if (b == 0 or b == _SIGN_BIT) else b - 1
        else:
            return False
    return True


@jit
def ingest(buf, X, y, logistic, label_bound, bound, sq_limit, far, over, keys, labels):
    """Check and hash one ``learn_many`` batch: ``buf`` holds its ids' UTF-8 bytes joined by NUL
    bytes (one id per row of ``X``), ``keys`` gets their keys and ``labels`` the labels as
    ``check_labels`` returns them. Returns INGEST_OK when every row passes untouched: each norm at
    most ``bound``, each label valid, each id 1 to MAX_ID_BYTES bytes with no NUL; INGEST_CLIP
    when, besides, rows over the bound by at most ``far`` are marked in ``over`` (``check_many``
    clips them: :func:`clip_rows`). Otherwise INGEST_ROWS or INGEST_IDS, and nothing is hashed."""
    n = X.shape[0]
    rows = check_rows(X, y, logistic, label_bound, bound, sq_limit, far, over, labels)
    if rows == INGEST_ROWS:
        return INGEST_ROWS
    ends = np.empty(n, np.int64)
    k = 0
    for i in range(buf.shape[0]):
        # a branch per byte, taken once an id: cheaper than a store per byte
        if buf[i] == 0:
            if k == n - 1:
                return INGEST_IDS  # a NUL inside an id
            ends[k] = i
            k += 1
    if k != n - 1:
        return INGEST_IDS  # a NUL inside an id
    ends[n - 1] = buf.shape[0]
    starts = np.empty(n, np.int64)
    starts[0] = 0
    for k in range(1, n):
        starts[k] = ends[k - 1] + 1
    for k in range(n):
        if not 0 < ends[k] - starts[k] <= MAX_ID_BYTES:
            return INGEST_IDS  # an empty id, or one too long
    hash_ranges(buf, starts, ends, EVERY, keys)
    return rows


def _label_kind(loss, features):
    """(logistic, label_bound) for the compiled checks, or None where they do not apply. A softmax
    batch's labels are its class positions by then
    (:func:`_class_positions`): finite, passed as they are."""
    if type(features) is not FeatureBound:
        return None
    if type(loss) is Logistic:
        return True, 1.0
    if type(loss) is Ridge:
        return False, loss.label_bound
    if type(loss) is Softmax:
        return False, np.inf
    return None


def _class_positions(loss, y):
    """A softmax batch's labels as class positions (``Softmax.labels``), other losses' as they
    are; None when a label is not a class (the general path then raises the exact error)."""
    if type(loss) is not Softmax:
        return y
    try:
        return loss.labels(y)
    except (InvalidLabel, TypeError, ValueError):
        return None


def _far(features) -> float:
    """The norm past which ``check_many`` rejects a row instead of clipping it (inf: never)."""
    return features.rounding_limit if features.policy == "reject" else np.inf


def _clipped(status, X, over, bound):
    """The batch's rows as ``check_many`` returns them for a passing ``status``, or None."""
    if status == INGEST_OK:
        return X
    if status == INGEST_CLIP:
        out = np.empty_like(X)
        return out if clip_rows(X, over, bound, out) else None
    return None


def checked_rows(loss, features, keys, X, y):
    """``(keys, X, labels)`` of a batch whose keys the caller has (the stream decoder's), when
    :func:`check_rows` passes it: what ``check_many`` and ``check_labels`` give; None otherwise
    (the general path then raises the exact error). One compiled pass instead of ~8 numpy calls:
    a batch of 100 rows cost ~40 us of checks, the fixed price of every insert run between two
    deletes."""
    kind = _label_kind(loss, features)
    y = _class_positions(loss, y)
    if (kind is None or y is None or type(X) is not np.ndarray or type(y) is not np.ndarray
            or X.dtype != np.float64 or y.dtype != np.float64 or X.ndim != 2
            or not X.flags.c_contiguous):
        return None
    n = len(keys)
    if X.shape != (n, features.dim) or y.shape != (n,):
        return None
    labels, over = np.empty(n, np.float64), np.empty(n, np.bool_)
    status = check_rows(X, y, kind[0], kind[1], features.bound, features.untouched_sqnorm,
                        _far(features), over,
                        labels)
    X = _clipped(status, X, over, features.bound)
    return None if X is None else (np.asarray(keys, np.uint64), X, labels)


def ingest_batch(loss, features, record_ids, X, y):
    """``(keys, X, labels)`` of a ``learn_many`` batch when :func:`ingest` passes it, the values
    the general path (``record_keys``, ``check_many``, ``check_labels``) gives; None otherwise."""
    kind = _label_kind(loss, features)
    if kind is None or not isinstance(record_ids, (list, tuple)) or not record_ids:
        return None
    logistic, label_bound = kind
    y = _class_positions(loss, y)
    if y is None:
        return None
    try:
        raw = "\x00".join(record_ids).encode("utf-8", "surrogatepass")
        X = np.ascontiguousarray(X, dtype=np.float64)
        y = np.ascontiguousarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    n = len(record_ids)
    if X.shape != (n, features.dim) or y.shape != (n,):
        return None
    keys, labels, over = np.empty(n, np.uint64), np.empty(n, np.float64), np.empty(n, np.bool_)
    status = ingest(np.frombuffer(raw, np.uint8), X, y, logistic, label_bound, features.bound,
                    features.untouched_sqnorm, _far(features), over, keys, labels)
    X = _clipped(status, X, over, features.bound)
    return None if X is None else (keys, X, labels)
