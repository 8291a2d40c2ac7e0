"""Keep the allocator from holding on to the worker's large transient buffers.

glibc raises its mmap threshold each time a large mmapped block is freed, up to 32 MiB; after that,
the snapshot's transient copies of the state (export, encoded blob: tens of MB at millions of
records) come from the heap and stay resident after they are freed. Measured with bench/soak.py
(20,000 inserts/s, 3 minutes): RSS beyond the state itself grew 457 MiB per 10 minutes by default,
7.5 MiB per 10 minutes with a fixed threshold. Setting the threshold explicitly turns the dynamic
adjustment off, so large blocks are always mmapped and returned to the OS when freed.

The threshold is 1 MiB, not glibc's starting 128 KiB: every poll batch allocates a few buffers
between the two (the batch's values joined, ~520 KB for 2,000 records of 260 bytes; its features,
160 KB at d = 10), and each mmapped one costs a page fault per 4 KiB page when first written:
~205 faults a batch, and the scan of a 2,000-record batch took ~25% longer (2.5 against 1.9-2.0
ms, bench machine). From the heap they are reused batch after batch. The snapshot's copies are
far larger, so they are still mmapped and returned.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 1 << 20  # above a poll batch's buffers, far below a snapshot's copies


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
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES))
