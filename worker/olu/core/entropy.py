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

    __slots__ = ("_held", "_pid", "_left", "_block", "_row", "_block_pid")

    def __init__(self):
        self._held: np.random.Generator | None = None
        self._pid, self._left = -1, 0
        self._block: np.ndarray | None = None  # standard normals of the next deletions (gaussian)
        self._row, self._block_pid = 0, -1

    def gaussian(self, dim: int) -> np.ndarray:
        """A fresh N(0, I_dim) draw: a row of ``ENTROPY_DRAWS`` rows drawn at once from a new
        OS-seeded generator, each row handed out once and cleared (a new block in a forked child).

        Why a block: numpy releases the GIL while it fills an array, and a busy thread (the delta
        writer, in a burst of deletions) then takes it; a draw of ten numbers per deletion cost
        the loop ~15 us of waiting for it to come back.

        >>> source = OsEntropy()
        >>> a, b = source.gaussian(3), source.gaussian(3)
        >>> a.shape, bool((a != b).any())
        ((3,), True)
        """
        block = self._block
        if block is None or self._row >= len(block) or block.shape[1] != dim or self._block_pid != os.getpid():
            block = self._block = np.random.default_rng().standard_normal((ENTROPY_DRAWS, dim))
            self._row, self._block_pid = 0, os.getpid()
        row = block[self._row].copy()
        block[self._row] = 0.0  # handed out once: no used noise lingers in the block (invariant 1)
        self._row += 1
        return row

    def generator(self) -> np.random.Generator:
        """The generator for the next draw."""
        if self._held is None or self._left <= 0 or self._pid != os.getpid():
            self._held = np.random.default_rng()  # a SeedSequence from os.urandom
            self._pid, self._left = os.getpid(), ENTROPY_DRAWS
        self._left -= 1
        return self._held
