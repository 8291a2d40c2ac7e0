"""Noise generators seeded from OS entropy (invariant 1, docs/worker.md 4.1).

Seeding a generator from OS entropy costs ~20 us, a third of a passive deletion's own work, so one
generator serves ``ENTROPY_DRAWS`` draws before the next is seeded. It lives in memory only, like
a deletion's pre-noise state: never stored, logged or released, and never reproducible.
"""

from __future__ import annotations

import os

import numpy as np

#: Noise draws per generator seeded from OS entropy.
ENTROPY_DRAWS = 64


class OsEntropy:
    """A generator seeded from OS entropy, renewed every ``ENTROPY_DRAWS`` draws and in a forked
    child (which must never repeat its parent's noise).

    >>> source = OsEntropy()
    >>> first = source.generator()
    >>> all(source.generator() is first for _ in range(ENTROPY_DRAWS - 1)), source.generator() is first
    (True, False)
    """

    __slots__ = ("_held", "_pid", "_left", "_rows", "_row", "_rows_pid")

    def __init__(self):
        self._held: np.random.Generator | None = None
        self._pid, self._left = -1, 0
        self._rows = np.zeros((0, 0))  # standard-normal rows for the next deletions (gaussian)
        self._row, self._rows_pid = 0, -1

    def gaussian(self, dim: int) -> np.ndarray:
        """A fresh N(0, I_dim) draw: one of ``ENTROPY_DRAWS`` rows drawn at once from a new
        OS-seeded generator, handed out once as an array of its own and zeroed here (a new
        block in a forked child). The caller may scale it in place.

        Why a block: numpy releases the GIL while it fills an array, and a busy thread (the delta
        writer, in a burst of deletions) then takes it; a draw of ten numbers per deletion cost
        the loop ~15 us of waiting for it to come back.

        >>> source = OsEntropy()
        >>> a, b = source.gaussian(3), source.gaussian(3)
        >>> a.shape, bool((a != b).any())
        ((3,), True)
        """
        return self.gaussian_rows(1, dim)[0]

    def gaussian_rows(self, n: int, dim: int) -> np.ndarray:
        """``n`` draws of :meth:`gaussian` as the rows of one array (a poll batch's deletions,
        noised in one compiled pass), from as many blocks as they need; the caller zeroes it
        once the noise is added.

        >>> OsEntropy().gaussian_rows(2, 3).shape
        (2, 3)
        """
        out = np.empty((n, dim))
        k = 0
        while k < n:
            rows, j = self._block(dim)
            take = min(n - k, len(rows) - j)
            out[k:k + take] = rows[j:j + take]
            rows[j:j + take] = 0.0  # handed out once: a used row is not kept here (invariant 1)
            self._row, k = j + take, k + take
        return out

    def _block(self, dim: int) -> tuple[np.ndarray, int]:
        """The current block and its next row to hand out (a new block if it is spent, of another
        dimension, or the parent's)."""
        rows, j = self._rows, self._row
        if j >= len(rows) or rows.shape[1] != dim or self._rows_pid != os.getpid():
            rows = self._rows = np.random.default_rng().standard_normal((ENTROPY_DRAWS, dim))
            j, self._row, self._rows_pid = 0, 0, os.getpid()
        return rows, j

    def generator(self) -> np.random.Generator:
        """The generator for the next draw."""
        if self._held is None or self._left <= 0 or self._pid != os.getpid():
            self._held = np.random.default_rng()  # a SeedSequence from os.urandom
            self._pid, self._left = os.getpid(), ENTROPY_DRAWS
        self._left -= 1
        return self._held
