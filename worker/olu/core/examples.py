"""Retained raw examples for the algorithms that revisit data (active OLU, exact retraining).

An :class:`ExampleStore` keeps, in step order, one row per applied example: the features x
(float64, length d), the label y, the step u at which the example was applied (docs/guarantee.md
1.3) and the 64-bit record key. Rows are appended into buffers that grow geometrically (amortised
O(d) per append).

Deletion (docs/worker.md 4.6: after a delete is acknowledged, the record's raw features are
gone from worker memory): :meth:`ExampleStore.remove_steps` / :meth:`ExampleStore.remove_key`
**overwrite the row with zeros in the buffer immediately** (features, label and key; only the
public step index u is kept so the step column stays sorted) and mark it dead. Dead rows are
squeezed out lazily, by :meth:`compact`, which also zeroes the vacated tail; reading the views
:attr:`X`, :attr:`y`, :attr:`steps`, :attr:`keys` compacts first, so the views only ever show
retained rows. Buffers that are replaced when the store grows are zeroed before they are dropped.

There is deliberately no "all examples seen" view: the store never keeps deleted rows, so the
literal [P0] Algorithm 2 phase 1 (GD on all points, deleted ones included) cannot be run from it
(docs/algorithms.md 5.3; see ``active.py``).

A zeroed row contributes exactly zero to the data gradient of the logistic and squared losses
(x = 0 and y = 0), so full-batch kernels may work on :meth:`padded` (all rows up to the last
appended one, dead ones zero) and skip the compaction copy.

>>> s = ExampleStore(dim=2)
>>> rows = [(11, 1, [0.6, 0.8], 1.0), (12, 2, [0.8, -0.6], -1.0), (13, 4, [1.0, 0.0], 1.0)]
>>> for key, step, x, y in rows:
...     s.append(key, step, np.array(x), y)
>>> s.remove_key(12)
1
>>> s.raw_buffers()[0][:3].tolist()  # the row is zeroed at once, before any compaction
[[0.6, 0.8], [0.0, 0.0], [1.0, 0.0]]
>>> len(s), s.steps.tolist(), s.X.tolist()
(2, [1, 4], [[0.6, 0.8], [1.0, 0.0]])
>>> t = ExampleStore.from_arrays(s.to_arrays())
>>> all(np.array_equal(a, b) for a, b in zip(t.to_arrays().values(), s.to_arrays().values()))
True
"""

from __future__ import annotations

import numpy as np

_MIN_CAPACITY = 64
_ARRAY_NAMES = ("X", "y", "steps", "keys")


def step_positions(used: np.ndarray, steps) -> np.ndarray:
    """The positions in ``used`` (increasing steps) of those of ``steps`` it holds."""
    want = np.unique(np.asarray(list(steps), np.int64))
    if not len(want) or not len(used):
        return np.zeros(0, np.int64)
    pos = np.searchsorted(used, want)
    ok = pos < len(used)
    pos, want = pos[ok], want[ok]
    return pos[used[pos] == want]


def check_new_steps(steps: np.ndarray, last_step: int) -> None:
    """Rows appended at ``steps`` (non-empty) must come after ``last_step``, in increasing order."""
    if steps[0] <= last_step or (len(steps) > 1
                                 and not np.all(steps[1:] > steps[:-1])) or steps[0] < 1:
        raise ValueError("steps must be >= 1 and strictly increase after the last stored step")


class ExampleStore:
    """Retained examples (x, y, step u, key) in increasing step order; deleted rows are zeroed."""

    def __init__(self, dim: int, capacity: int = 0):
        if not (isinstance(dim, int) and dim >= 1):
            raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
        self.dim = dim
        self._alloc(max(int(capacity), 0))
        self._n = 0  # rows in use (live and dead), all below this index
        self._dead = 0

    def _alloc(self, capacity: int) -> None:
        self._X = np.zeros((capacity, self.dim), np.float64)
        self._y = np.zeros(capacity, np.float64)
        self._steps = np.zeros(capacity, np.int64)
        self._keys = np.zeros(capacity, np.uint64)
        self._live = np.zeros(capacity, bool)

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        """Number of retained (live) examples."""
        return self._n - self._dead

    @property
    def count(self) -> int:
        return len(self)

    @property
    def capacity(self) -> int:
        return len(self._y)

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers (the allocated capacity, not only the live rows)."""
        buffers = (self._X, self._y, self._steps, self._keys, self._live)
        return sum(buffer.nbytes for buffer in buffers)

    @property
    def last_step(self) -> int:
        """Step of the last appended row (0 when empty); new rows must come after it."""
        return int(self._steps[self._n - 1]) if self._n else 0

    # ----------------------------------------------------------------- append
    def _reserve(self, extra: int) -> None:
        need = self._n + extra
        if need <= self.capacity:
            return
        if self._dead:
            self.compact()
            need = self._n + extra
            if need <= self.capacity:
                return
        old = (self._X, self._y, self._steps, self._keys, self._live)
        self._alloc(max(_MIN_CAPACITY, need, 2 * self.capacity))
        n = self._n
        self._X[:n], self._y[:n], self._steps[:n] = old[0][:n], old[1][:n], old[2][:n]
        self._keys[:n], self._live[:n] = old[3][:n], old[4][:n]
        for arr in old:  # no copy of retained data lingers in a dropped buffer
            arr.fill(0)

    def append(self, key: int, step: int, x: np.ndarray, y: float) -> None:
        """Add one example applied at ``step`` (strictly after every stored step)."""
        self.extend(np.array([key], np.uint64), np.array([step], np.int64),
                    np.asarray(x, np.float64)[None, :], np.array([y], np.float64))

    def extend(self, keys, steps, X, y) -> None:
        """Add rows in step order (vectorised ``append``)."""
        keys = np.asarray(keys, np.uint64)
        steps = np.asarray(steps, np.int64)
        X = np.asarray(X, np.float64)
        y = np.asarray(y, np.float64)
        m = len(steps)
        if X.shape != (m, self.dim) or keys.shape != (m,) or y.shape != (m,):
            raise ValueError(
                f"rows must be ({m}, {self.dim}) with {m} keys and labels, got {X.shape}")
        if m == 0:
            return
        check_new_steps(steps, self.last_step)
        self._reserve(m)
        n = self._n
        self._X[n:n + m], self._y[n:n + m], self._steps[n:n + m] = X, y, steps
        self._keys[n:n + m], self._live[n:n + m] = keys, True
        self._n = n + m

    # ----------------------------------------------------------------- remove
    def _kill(self, rows: np.ndarray) -> int:
        rows = rows[self._live[rows]]
        self._X[rows] = 0.0  # invariant 6: the raw features leave memory now, not at compaction
        self._y[rows] = 0.0
        self._keys[rows] = 0
        self._live[rows] = False
        self._dead += len(rows)
        return len(rows)

    def remove_steps(self, steps) -> int:
        """Zero and drop the live rows applied at ``steps``; returns how many were removed."""
        return self._kill(step_positions(self._steps[:self._n], steps))

    def remove_key(self, key: int) -> int:
        """Zero and drop every live row of record ``key``; returns how many were removed."""
        rows = np.flatnonzero(self._keys[:self._n] == np.uint64(key))
        return self._kill(rows)

    def has_step(self, step: int) -> bool:
        pos = int(np.searchsorted(self._steps[:self._n], step))
        return pos < self._n and int(self._steps[pos]) == step and bool(self._live[pos])

    def clear(self) -> None:
        """Drop everything (zeroing the buffers first)."""
        for arr in (self._X, self._y, self._steps, self._keys, self._live):
            arr.fill(0)
        self._n = self._dead = 0

    def compact(self) -> None:
        """Squeeze out dead rows (keeping step order) and zero the vacated tail."""
        if not self._dead:
            return
        n = self._n
        keep = np.flatnonzero(self._live[:n])
        m = len(keep)
        self._X[:m] = self._X[keep]
        self._y[:m] = self._y[keep]
        self._steps[:m] = self._steps[keep]
        self._keys[:m] = self._keys[keep]
        self._live[:m] = True
        self._X[m:n] = 0.0
        self._y[m:n] = 0.0
        self._steps[m:n] = 0
        self._keys[m:n] = 0
        self._live[m:n] = False
        self._n, self._dead = m, 0

    # ------------------------------------------------------------------ views
    def _view(self, arr: np.ndarray) -> np.ndarray:
        self.compact()
        v = arr[:self._n]
        v.flags.writeable = False
        return v

    @property
    def X(self) -> np.ndarray:
        """Retained features, (count, d), read-only view in step order (compacts first)."""
        return self._view(self._X)

    @property
    def y(self) -> np.ndarray:
        return self._view(self._y)

    @property
    def steps(self) -> np.ndarray:
        return self._view(self._steps)

    @property
    def keys(self) -> np.ndarray:
        return self._view(self._keys)

    def live_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(X, y, steps) of the retained rows after compaction, as writeable slices of the buffers.

        For compiled kernels that reject read-only arrays; callers must not modify them.
        """
        self.compact()
        n = self._n
        return self._X[:n], self._y[:n], self._steps[:n]

    def padded(self) -> tuple[np.ndarray, np.ndarray]:
        """(X, y) of every used row, dead rows included as zeros (no compaction); read-only."""
        X, y = self._X[:self._n], self._y[:self._n]
        X.flags.writeable = False
        y.flags.writeable = False
        return X, y

    def first_live_step(self) -> int:
        """Smallest retained step (0 when empty)."""
        live = np.flatnonzero(self._live[:self._n])
        return int(self._steps[live[0]]) if len(live) else 0

    def row_of_step(self, step: int) -> tuple[np.ndarray, float]:
        """(x, y) of the live row applied at ``step`` (copies)."""
        pos = int(np.searchsorted(self._steps[:self._n], step))
        if not (pos < self._n and int(self._steps[pos]) == step and self._live[pos]):
            raise KeyError(step)
        return self._X[pos].copy(), float(self._y[pos])

    def raw_buffers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The underlying (X, y, steps, keys) buffers, full capacity (for tests and audits)."""
        return self._X, self._y, self._steps, self._keys

    # ------------------------------------------------------------------ state
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Copies of the retained rows: {'X', 'y', 'steps', 'keys'}; round-trips bit-exactly."""
        self.compact()
        n = self._n
        return {"X": self._X[:n].copy(), "y": self._y[:n].copy(), "steps": self._steps[:n].copy(),
                "keys": self._keys[:n].copy()}

    @classmethod
    def from_arrays(cls, arrays: dict, dim: int | None = None) -> ExampleStore:
        """Rebuild from :meth:`to_arrays`; raises ``ValueError`` on anything inconsistent."""
        X = np.asarray(arrays["X"])
        if X.ndim != 2 or X.dtype != np.float64:
            raise ValueError(
                f"retained features must be a 2-D float64 array, got {X.dtype} {X.shape}")
        if dim is not None and X.shape[1] != dim:
            raise ValueError(f"retained features have {X.shape[1]} columns, expected {dim}")
        if not np.all(np.isfinite(X)):
            raise ValueError("retained features are not finite")
        y = np.asarray(arrays["y"], np.float64)
        steps = np.asarray(arrays["steps"])
        keys = np.asarray(arrays["keys"])
        if steps.dtype.kind not in "iu" or keys.dtype != np.uint64:
            raise ValueError("retained steps must be integers and keys uint64")
        store = cls(int(X.shape[1]), capacity=len(X))
        if len(keys) and not keys.all():
            raise ValueError("a retained row has the free-slot key 0")
        store.extend(keys, steps.astype(np.int64), X, y)
        return store
