"""Noise generators keyed from OS entropy (invariant 1, docs/worker.md 4.1; docs/accounting.md 14).

What the noise is, exactly: standard normals from numpy's ziggurat (float64), whose bits come from
AES-128 in counter mode (``randomgen.AESCounter``, AES-NI where the CPU has it) under a 128-bit key
read from the OS's random source (``os.urandom``: getrandom on Linux). AES in counter mode is a
standard cryptographic generator (the core of NIST SP 800-90A's CTR_DRBG): seeing some of its
output does not help predict the rest, so learning one deletion's noise (an adversary who knows
everything else) says nothing about another's. numpy's default PCG64, used before, is a
statistical generator whose state can be recovered from its output. The Gaussian transform and
the addition to the iterate are plain floating point: docs/accounting.md 14 says what that leaves.

Keying a generator costs ~20 us, a third of a passive deletion's own work, so one generator serves
``ENTROPY_DRAWS`` draws before the next is keyed. It lives in memory only, like a deletion's
pre-noise state: never stored, logged or released, and never reproducible.
"""

from __future__ import annotations

import os

import numpy as np
from randomgen import AESCounter

#: Noise draws per generator keyed from OS entropy.
ENTROPY_DRAWS = 64
_KEY_BYTES = 16  # AES-128


def fresh_generator() -> np.random.Generator:
    """A generator over AES-128 in counter mode, keyed with 128 bits of OS entropy.

    >>> type(fresh_generator().bit_generator).__name__
    'AESCounter'
    """
    return np.random.Generator(AESCounter(key=int.from_bytes(os.urandom(_KEY_BYTES), "little")))


class OsEntropy:
    """A generator keyed from OS entropy, renewed every ``ENTROPY_DRAWS`` draws and in a forked
    child (which must never repeat its parent's noise).

    >>> source = OsEntropy()
    >>> first = source.generator()
    >>> (all(source.generator() is first for _ in range(ENTROPY_DRAWS - 1)),
    ...  source.generator() is first)
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
        OS-keyed generator, handed out once as an array of its own and zeroed here (a new
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
            rows = self._rows = fresh_generator().standard_normal((ENTROPY_DRAWS, dim))
            j, self._row, self._rows_pid = 0, 0, os.getpid()
        return rows, j

    def generator(self) -> np.random.Generator:
        """The generator for the next draw."""
        if self._held is None or self._left <= 0 or self._pid != os.getpid():
            self._held = fresh_generator()
            self._pid, self._left = os.getpid(), ENTROPY_DRAWS
        self._left -= 1
        return self._held
