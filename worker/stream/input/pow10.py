"""The powers of ten of the JSON number reader
(insert_kernel.py): 128-bit mantissas for Eisel-Lemire.

Pure data, computed once at import with Python's integers; the compiled reader captures the two
arrays as constants (they never change, so numba's cache of insert_kernel.py cannot go stale).
"""

from __future__ import annotations

import numpy as np

__all__ = ["POW10_HI", "POW10_LO", "POW10_MAX", "POW10_MIN"]

POW10_MIN, POW10_MAX = -348, 347


def _powers_of_ten() -> tuple[np.ndarray, np.ndarray]:
    """128-bit mantissas of 10^e, e in [-348, 347], normalised (top bit set) and rounded down."""
    lo, hi = [], []
    for e in range(POW10_MIN, POW10_MAX + 1):
        if e >= 0:
            v = 10**e
            bits = v.bit_length()
            m = v << (128 - bits) if bits <= 128 else v >> (bits - 128)
        else:
            v = 10**-e
            m = (1 << (127 + v.bit_length())) // v
        assert 1 << 127 <= m < 1 << 128
        lo.append(m & (2**64 - 1))
        hi.append(m >> 64)
    return np.array(lo, np.uint64), np.array(hi, np.uint64)


POW10_LO, POW10_HI = _powers_of_ten()
