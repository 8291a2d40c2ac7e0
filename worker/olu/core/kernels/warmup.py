"""Compile every kernel before the first batch, with the argument types production passes."""

from __future__ import annotations

import time

import numpy as np

from ....compiled.blake2b import blake2b64_many
from ..domain import FeatureBound
from ..index import AppliedIndex
from ..losses import Logistic, Ridge
from ..runs import Run, merge_pair
from ..tombstones import KeySet
from .ingest import checked_rows, ingest_batch
from .mixed_pass import plan_pass, run_mixed
from .ogd import LOSS_LOGISTIC, SCHED_STRONGLY_CONVEX, run_batch
from .sparse_ogd import run_sparse, sparse_rows_pass, sparse_sqnorms

compile_seconds: float | None = None  # set by warm_up()


def warm_up() -> float:
    """Compile (or load from the cache) every kernel with the
    types production passes; seconds taken.

    numba compiles a separate version for read-only arrays, and the index's runs and the
    tombstone base are read-only (frozen: snapshots in flight share them). So the kernels are
    driven here through the same classes, a tiny index and key set, rather than with hand-made
    arrays: a version missed here is compiled inside the first batch that needs it (a 0.1-0.3 s
    stall of the loop, measured in bench/delete_latency.py).
    """
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
    # a run reclaimed alone
    merge_pair(Run(keys[:2].copy(), np.array([1, 2], np.uint32), dead=(0,)), None)
    deleting = AppliedIndex(tail_size=4)  # a deletion's lookups: in a frozen run and in the tail
    deleting.add(7, 1)
    deleting.add(8, 2)
    deleting.merge()
    deleting.add(9, 3)
    for key in (7, 9):
        deleting.pop(key)
    deleting.holds(8)
    # a batch's deletes: one lookup in the runs for all
    deleting.prefetch(np.array([8, 9], np.uint64))
    deleting.holds(8)  # then the tail alone
    for key in (2, 9):  # the recent keys (a writable buffer) and the frozen base
        _ = key in tombstones
    tombstones.prefetch(np.array([2, 9], np.uint64))
    # a poll batch's inserts and deletes in one pass (core/mixed.py): its plan, the pass, the pops
    # and the tombstones of the whole batch
    ops, here = np.empty((3, 3), np.int64), np.empty(1, np.int64)
    batch_keys = np.arange(30, 34, dtype=np.uint64)
    plan_pass(batch_keys, np.array([[0, 2], [3, 4]], np.int64), np.array([2], np.int64),
              np.array([10], np.uint64),
              ops, here)
    run_mixed(plan, np.zeros(2), 100, index, tombstones, batch_keys, X[:4], y[:4], ops, 1.0, 2.0,
              np.array([5], np.int64), np.ones(1), np.zeros((1, 2)))
    deleting.pop_each([8, 9])
    tombstones.add_many(np.array([4, 5], np.uint64))
    raw = b"r-1"
    blake2b64_many(np.frombuffer(raw, np.uint8), np.array([0, len(raw)], np.int64))
    for loss in (Logistic(0.1), Ridge(0.1)):  # learn_many's front: both label kinds
        ingest_batch(loss, FeatureBound(2, 1.0), ["r-1", "r-2"], X[:2], y[:2])
        # the stream's batches (keys known)
        checked_rows(loss, FeatureBound(2, 1.0), keys[:2], X[:2], y[:2])
    # rows clipped
    checked_rows(Logistic(0.1), FeatureBound(2, 0.5, "clip"), keys[:2], X[:2], y[:2])
    compile_seconds = time.perf_counter() - start
    return compile_seconds


def warm_up_sparse() -> float:
    """:func:`warm_up` for a worker that learns sparse rows (OLU_SPARSE_INPUT): the sparse step on
    a tiny index and key set, its checks; seconds taken."""
    from ..sparse import SparseRows  # the batch type (core/sparse.py imports the kernels' loader)

    start = time.perf_counter()
    plan = (LOSS_LOGISTIC, 0.1, SCHED_STRONGLY_CONVEX, 0.1, 1.0, 1.0)
    index, tombstones = AppliedIndex(tail_size=2, max_run=64), KeySet(recent_keys=1)
    for key in (1, 2, 3):  # a frozen base and a recent array, as in warm_up
        tombstones.add(key)
    rows = SparseRows.from_rows([([0, 9], [0.6, 0.8]), ([3], [0.5])] * 3)
    keys, y = np.arange(10, 16, dtype=np.uint64), np.tile([1.0, -1.0], 3)
    run_sparse(plan, np.zeros(10), 1.0, None, 0, index, tombstones, keys, rows, y, 256)
    run_sparse(plan, np.zeros(10), 0.5, 0.0, 0, index, tombstones, keys[:1], rows[:1], y[:1], 256)
    sparse_rows_pass(rows.indptr, rows.indices, rows.values, 10, 1.0)
    sparse_sqnorms(rows.indptr, rows.indices, rows.values, 10)
    return time.perf_counter() - start
