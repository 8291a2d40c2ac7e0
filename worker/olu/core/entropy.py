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

    __slots__ = ("_held", "_pid", "_left")

    def __init__(self):
        self._held: np.random.Generator | None = None
        self._pid, self._left = -1, 0

    def generator(self) -> np.random.Generator:
        """The generator for the next draw."""
        if self._held is None or self._left <= 0 or self._pid != os.getpid():
            self._held = np.random.default_rng()  # a SeedSequence from os.urandom
            self._pid, self._left = os.getpid(), ENTROPY_DRAWS
        self._left -= 1
        return self._held
