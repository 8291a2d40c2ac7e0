"""worker.memory: large freed buffers go back to the OS (glibc's dynamic mmap threshold pinned)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Free a 16 MiB block (glibc then raises its mmap threshold to 16 MiB), then allocate, touch and free
# an 8 MiB one: from the heap it stays resident, mmapped it is returned. Prints the RSS growth in KiB.
PROBE = """
import sys
from worker.memory import fix_malloc_thresholds
if sys.argv[1] == "fixed":
    assert fix_malloc_thresholds()
def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
big = bytearray(16 << 20); del big
base = rss_kib()
for _ in range(4):
    block = bytearray(8 << 20)  # zero-filled: every page touched
    del block
print(rss_kib() - base)
"""


def _growth_kib(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_large_freed_blocks_return_to_the_os_only_with_the_fix():
    assert _growth_kib("default") > 4 * 1024  # the probe does show glibc keeping the block
    assert _growth_kib("fixed") < 1024
