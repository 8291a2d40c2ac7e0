"""Keep the allocator from holding on to the worker's large transient buffers.

glibc raises its mmap threshold each time a large mmapped block is freed, up to 32 MiB; after that,
the snapshot's transient copies of the state (export, encoded blob: tens of MB at millions of
records) come from the heap and stay resident after they are freed. Measured with bench/soak.py
(20,000 inserts/s, 3 minutes): RSS beyond the state itself grew 457 MiB per 10 minutes by default,
7.5 MiB per 10 minutes with a fixed threshold. Setting the threshold explicitly turns the dynamic
adjustment off, so large blocks are always mmapped and returned to the OS when freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value


def fix_malloc_thresholds() -> bool:
    """Pin glibc's mmap and trim thresholds; False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl, macOS: no mallopt, and no dynamic threshold to pin
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES))
