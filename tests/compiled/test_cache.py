"""The kernels' disk cache is keyed by every compiled source, so a kernel may call a helper of
another module and still never load stale machine code after that module changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from worker.compiled import cache

ROOT = Path(__file__).resolve().parents[2]
PROBE = "probe_kernel"  # a module only the copied package has

HELPER = '''from .jit import jit


@jit
def value():
    return {value}
'''
KERNEL = '''from .jit import jit
from .probe_helper import value


@jit
def kernel():
    return value() + 100
'''


def test_the_sources_cover_the_kernels_and_every_module_they_import():
    names = {str(p.relative_to(cache.PACKAGE)) for p in cache.compiled_sources()}
    for kernel_module in ("compiled/sorted_keys.py", "olu/core/kernels/ogd.py", "olu/core/kernels/merge.py",
                          "olu/core/kernels/sparse_ogd.py", "olu/core/kernels/mixed_pass.py",
                          "stream/input/insert_kernel.py", "stream/input/json_number.py", "formats/framed_kernel.py",
                          "olu/batches/quality.py"):
        assert kernel_module in names
    # what ogd.py folds in at compile time: the loss and schedule classes it reads constants of
    assert {"olu/core/losses.py", "olu/core/schedules.py", "olu/core/index.py"} <= names
    # nothing a kernel could see: the command line, the worker's loop
    assert not names & {"cli.py", "stream/app.py", "metrics/loop.py"}


def test_a_kernel_stamp_carries_the_digest_of_all_sources():
    from worker.compiled.sorted_keys import contains

    stamp = contains._cache._impl.locator.get_source_stamp()
    assert stamp[1] == cache.sources_digest() and len(stamp[1]) == 64


def _run(package_root: Path, cache_dir: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(package_root), "NUMBA_CACHE_DIR": str(cache_dir)}
    code = f"from worker.compiled.{PROBE} import kernel; print(kernel())"
    out = subprocess.run([sys.executable, "-c", code], cwd=package_root, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_changing_a_helper_in_another_module_recompiles_the_kernel_that_calls_it(tmp_path):
    """numba alone stamps a kernel with its own file: the second run would load the cached 101."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "worker", copy / "worker", ignore=shutil.ignore_patterns("__pycache__"))
    compiled = copy / "worker" / "compiled"
    (compiled / f"{PROBE}.py").write_text(KERNEL)
    (compiled / "probe_helper.py").write_text(HELPER.format(value=1))
    assert _run(copy, tmp_path / "cache") == "101"
    assert list((tmp_path / "cache").rglob("*.nbi")), "the kernel was cached"
    (compiled / "probe_helper.py").write_text(HELPER.format(value=2))
    assert _run(copy, tmp_path / "cache") == "102"
