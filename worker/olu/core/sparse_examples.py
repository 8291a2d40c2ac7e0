"""Retained examples kept sparse: the :class:`~worker.olu.core.examples.ExampleStore` of rows
with few non-zeros (hashed, binned and crossed features), in 16 bytes a non-zero.

Rows are CSR in append buffers that grow geometrically: each row's start in ``indptr``, its
non-zeros' coordinates and values (int64 and float64: the compiled step's own types, so a replay
reads the buffers as they are), beside the label, the step u at which it was applied and the
record key. A model of d = 5,000 coordinates whose rows hold ~50 non-zeros keeps a row in ~0.8 KB
instead of 40 KB, and a replay over it costs O(non-zeros) a step (worker/olu/core/sparse.py).

Deletion follows ExampleStore (docs/worker.md 4.6): :meth:`SparseExampleStore.remove_steps`
**zeroes the row's values, coordinates, label and key in the buffers at once** (which coordinates
a row has are its raw features too) and marks it dead, keeping only its public step so the step
column stays sorted. Dead rows are squeezed out by :meth:`compact` once they are a quarter of the
rows (a compaction moves every non-zero: once per deletion it would cost more than the replay), and
:meth:`replay_rows` hands a replay the buffers with the live mask instead.

>>> from worker.olu.core.sparse import SparseRows
>>> s = SparseExampleStore(dim=4)
>>> rows = SparseRows.from_rows([([0, 3], [0.6, 0.8]), ([1], [1.0]), ([2], [-1.0]),
...                              ([3], [0.5]), ([0], [0.25])])
>>> s.extend([11, 12, 13, 14, 15], [1, 2, 4, 5, 7], rows, [1.0, -1.0, 1.0, 1.0, -1.0])
>>> s.remove_steps([2])
1
>>> s.raw_buffers()[1][:6].tolist()  # the row's value is zeroed at once, before any compaction
[0.6, 0.8, 0.0, -1.0, 0.5, 0.25]
>>> rows, y, steps = s.live_rows()
>>> len(s), steps.tolist(), rows.to_dense(4)[:2].tolist()
(4, [1, 4, 5, 7], [[0.6, 0.0, 0.0, 0.8], [0.0, 0.0, -1.0, 0.0]])
>>> t = SparseExampleStore.from_arrays(s.to_arrays(), dim=4)
>>> all(np.array_equal(a, b) for a, b in zip(t.to_arrays().values(), s.to_arrays().values()))
True
"""

from __future__ import annotations

import numpy as np

from .examples import check_new_steps, step_positions
from .sparse import SparseRows

_MIN_ROWS, _MIN_NONZEROS = 64, 1024
#: the arrays of :meth:`SparseExampleStore.to_arrays`
ARRAY_NAMES = ("indptr", "indices", "values", "y", "steps", "keys")


class SparseExampleStore:
    """Retained sparse examples (row, y, step u, key) in increasing step order; deleted rows are
    zeroed. ``live_rows`` gives them as :class:`~worker.olu.core.sparse.SparseRows`."""

    def __init__(self, dim: int, rows: int = 0, nonzeros: int = 0):
        if not (isinstance(dim, int) and dim >= 1):
            raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
        self.dim = dim
        self._alloc_rows(max(int(rows), 0))
        self._alloc_nonzeros(max(int(nonzeros), 0))
        self._n = 0  # rows in use (live and dead)
        self._nnz = 0  # non-zeros in use
        self._dead = 0

    def _alloc_rows(self, capacity: int) -> None:
        self._ptr = np.zeros(capacity + 1, np.int64)
        self._y = np.zeros(capacity, np.float64)
        self._steps = np.zeros(capacity, np.int64)
        self._keys = np.zeros(capacity, np.uint64)
        self._live = np.zeros(capacity, bool)

    def _alloc_nonzeros(self, capacity: int) -> None:
        self._indices = np.zeros(capacity, np.int64)
        self._values = np.zeros(capacity, np.float64)

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        """Number of retained (live) examples."""
        return self._n - self._dead

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers (the allocated capacity, not only the live rows)."""
        return sum(a.nbytes for a in self._buffers())

    @property
    def nonzeros(self) -> int:
        """Non-zeros held by the retained rows (after compaction)."""
        self.compact()
        return self._nnz

    @property
    def last_step(self) -> int:
        """Step of the last appended row (0 when empty); new rows must come after it."""
        return int(self._steps[self._n - 1]) if self._n else 0

    def _buffers(self) -> tuple[np.ndarray, ...]:
        return (self._ptr, self._indices, self._values, self._y, self._steps, self._keys,
                self._live)

    # ----------------------------------------------------------------- append
    def _reserve(self, rows: int, nonzeros: int) -> None:
        if self._n + rows > len(self._y) or self._nnz + nonzeros > len(self._values):
            self.compact()
        if self._n + rows > len(self._y):
            old = (self._ptr, self._y, self._steps, self._keys, self._live)
            self._alloc_rows(max(_MIN_ROWS, self._n + rows, 2 * len(self._y)))
            n = self._n
            self._ptr[:n + 1] = old[0][:n + 1]
            self._y[:n], self._steps[:n], self._keys[:n], self._live[:n] = (
                old[1][:n], old[2][:n], old[3][:n], old[4][:n])
            for arr in old:  # no copy of retained data lingers in a dropped buffer
                arr.fill(0)
        if self._nnz + nonzeros > len(self._values):
            old = (self._indices, self._values)
            self._alloc_nonzeros(max(_MIN_NONZEROS, self._nnz + nonzeros, 2 * len(self._values)))
            m = self._nnz
            self._indices[:m], self._values[:m] = old[0][:m], old[1][:m]
            for arr in old:
                arr.fill(0)

    def extend(self, keys, steps, rows: SparseRows, y) -> None:
        """Add checked rows (``SparseRows``) in step order."""
        keys = np.asarray(keys, np.uint64)
        steps = np.asarray(steps, np.int64)
        y = np.asarray(y, np.float64)
        m = len(steps)
        if len(rows) != m or keys.shape != (m,) or y.shape != (m,):
            raise ValueError(f"{m} steps need {m} rows, keys and labels, got {len(rows)} rows")
        if m == 0:
            return
        check_new_steps(steps, self.last_step)
        lo, hi = int(rows.indptr[0]), int(rows.indptr[-1])
        self._reserve(m, hi - lo)
        n, nnz = self._n, self._nnz
        self._ptr[n + 1:n + m + 1] = rows.indptr[1:] - lo + nnz
        self._indices[nnz:nnz + hi - lo] = rows.indices[lo:hi]
        self._values[nnz:nnz + hi - lo] = rows.values[lo:hi]
        self._y[n:n + m], self._steps[n:n + m] = y, steps
        self._keys[n:n + m], self._live[n:n + m] = keys, True
        self._n, self._nnz = n + m, nnz + hi - lo

    # ----------------------------------------------------------------- remove
    def remove_steps(self, steps) -> int:
        """Zero and drop the live rows applied at ``steps``; returns how many were removed."""
        pos = step_positions(self._steps[:self._n], steps)
        pos = pos[self._live[pos]]
        for j in pos.tolist():  # invariant 6: the raw features leave memory now
            lo, hi = self._ptr[j], self._ptr[j + 1]
            self._indices[lo:hi] = 0
            self._values[lo:hi] = 0.0
        self._y[pos], self._keys[pos], self._live[pos] = 0.0, 0, False
        self._dead += len(pos)
        if 4 * self._dead > self._n:
            self.compact()
        return len(pos)

    def clear(self) -> None:
        """Drop everything (zeroing the buffers first)."""
        for arr in self._buffers():
            arr.fill(0)
        self._n = self._nnz = self._dead = 0

    def compact(self) -> None:
        """Squeeze out dead rows (keeping step order) and zero the vacated tails."""
        if not self._dead:
            return
        n, nnz = self._n, self._nnz
        keep = np.flatnonzero(self._live[:n])
        rows = self.replay_rows()[0][keep]  # the kept rows, gathered (copies)
        m, kept = len(keep), int(rows.indptr[-1])
        self._indices[:kept], self._values[:kept] = rows.indices, rows.values
        self._indices[kept:nnz], self._values[kept:nnz] = 0, 0.0
        self._ptr[:m + 1] = rows.indptr
        self._ptr[m + 1:n + 1] = 0
        for arr in (self._y, self._steps, self._keys):
            arr[:m] = arr[keep]
            arr[m:n] = 0
        self._live[:m], self._live[m:n] = True, False
        self._n, self._nnz, self._dead = m, kept, 0

    # ------------------------------------------------------------------ views
    @property
    def steps(self) -> np.ndarray:
        """Steps of the retained rows, read-only, in order (compacts first)."""
        self.compact()
        v = self._steps[:self._n]
        v.flags.writeable = False
        return v

    def live_rows(self) -> tuple[SparseRows, np.ndarray, np.ndarray]:
        """(rows, y, steps) of the retained rows after compaction, views of the buffers (callers
        must not modify them)."""
        self.compact()
        rows, y, steps, _ = self.replay_rows()
        return rows, y, steps

    def replay_rows(self) -> tuple[SparseRows, np.ndarray, np.ndarray, np.ndarray]:
        """(rows, y, steps, live) of every used row, dead ones zeroed and marked False in
        ``live`` (no compaction, no copy): views of the buffers, not to be modified."""
        n, nnz = self._n, self._nnz
        rows = SparseRows(self._ptr[:n + 1], self._indices[:nnz], self._values[:nnz])
        return rows, self._y[:n], self._steps[:n], self._live[:n]

    def raw_buffers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The underlying (indices, values, y, keys) buffers, full capacity (tests and audits)."""
        return self._indices, self._values, self._y, self._keys

    # ------------------------------------------------------------------ state
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Copies of the retained rows (:data:`ARRAY_NAMES`); round-trips bit-exactly."""
        self.compact()
        n, nnz = self._n, self._nnz
        return {"indptr": self._ptr[:n + 1].copy(), "indices": self._indices[:nnz].copy(),
                "values": self._values[:nnz].copy(), "y": self._y[:n].copy(),
                "steps": self._steps[:n].copy(), "keys": self._keys[:n].copy()}

    @classmethod
    def from_arrays(cls, arrays: dict, dim: int) -> SparseExampleStore:
        """Rebuild from :meth:`to_arrays`; raises ``ValueError`` on anything inconsistent."""
        indptr, indices, values = (np.asarray(arrays[k]) for k in ("indptr", "indices", "values"))
        y, steps, keys = (np.asarray(arrays[k]) for k in ("y", "steps", "keys"))
        n = len(steps)
        if (indptr.ndim != 1 or len(indptr) != n + 1 or indptr.dtype.kind not in "iu"
                or int(indptr[0]) != 0 or int(indptr[-1]) != len(indices)
                or (np.diff(indptr) < 0).any()):
            raise ValueError("retained sparse rows need indptr of n + 1 offsets from 0 to nnz")
        if len(indices) != len(values) or indices.dtype.kind not in "iu":
            raise ValueError("retained sparse rows need integer coordinates, one per value")
        if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= dim):
            raise ValueError(f"a retained coordinate lies outside [0, {dim})")
        if values.dtype != np.float64 or not np.all(np.isfinite(values)):
            raise ValueError("retained values must be finite float64")
        if steps.dtype.kind not in "iu" or keys.dtype != np.uint64 or not len(keys) == len(y) == n:
            raise ValueError("retained steps must be integers and keys uint64, one per row")
        if n and not keys.all():
            raise ValueError("a retained row has the free-slot key 0")
        store = cls(dim, rows=n, nonzeros=len(values))
        store.extend(keys, steps.astype(np.int64),
                     SparseRows(indptr.astype(np.int64), indices.astype(np.int64), values),
                     np.asarray(y, np.float64))
        return store
