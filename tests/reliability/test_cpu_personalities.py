"""Deterministic on every CPU: one stream with deletions gives the same bits whatever BLAS kernel,
numpy SIMD dispatch or numba target the process gets (docs/worker.md 4.3).

Each personality is a subprocess running ``tests/reliability/personality.py`` with an environment
that changes what the libraries pick on this very machine: OpenBLAS's kernel
(``OPENBLAS_CORETYPE``: Prescott's SSE2 ones, Sandybridge's AVX ones, Haswell's AVX2 and FMA ones,
SkylakeX's AVX-512 ones where the CPU has them), numpy's dispatch (``NPY_DISABLE_CPU_FEATURES``)
and numba's code generation (``NUMBA_CPU_NAME=generic``). A cluster mixes such nodes, and a replay
after a crash may run on any of them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from worker.olu import ALGORITHMS

from .personality import PERSONALITIES, PERSONALITY_VARIABLES

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

# Deletion-time solves that may use LAPACK: their outcome is stored as a delta and adopted on
# replay, never computed twice (declared on the class, docs/worker.md 4.3).
NOT_PORTABLE = {f"engine:{name}" for name, cls in ALGORITHMS.items() if not cls.portable_deletions}


def run(personality: str, *args: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OLU_") and k not in PERSONALITY_VARIABLES}
    env.update(PERSONALITIES[personality])
    done = subprocess.run([sys.executable, "-m", "tests.reliability.personality", *args], cwd=REPO, env=env,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return orjson.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def digests() -> dict[str, dict[str, str]]:
    return {name: run(name) for name in PERSONALITIES}


def test_every_personality_gives_the_same_bits(digests):
    host = digests["host"]
    assert len(host) >= 15
    for name, found in digests.items():
        differ = sorted(k for k in host if found[k] != host[k] and k not in NOT_PORTABLE)
        assert not differ, f"{name} differs from host in {differ}"


def test_within_a_process_every_path_gives_the_same_bits(digests):
    for found in digests.values():
        assert found["runner:passive:one-pass"] == found["runner:passive:one-by-one"]
        assert found["engine:passive:reference"] == found["engine:passive"]
        assert found["engine:ogd:reference"] == found["engine:ogd"]


def test_the_comparison_catches_a_blas_product_in_the_reference_step():
    """With numpy's BLAS dot back in the reference step, the one-by-one path (its deletions project
    with it) leaves the one pass's bits, and two kernels of OpenBLAS disagree."""
    prescott = run("openblas-prescott", "--blas-products")
    host = run("host", "--blas-products")
    assert prescott["runner:passive:one-pass"] != prescott["runner:passive:one-by-one"]
    assert prescott["engine:passive:reference"] != prescott["engine:passive"]
    assert prescott["engine:passive:reference"] != host["engine:passive:reference"]


def test_a_partition_restored_on_another_cpu_replays_to_the_same_bits(tmp_path):
    """The first half on one personality, snapshotted; the rest restored on another: the same
    state, deltas and releases as when one node ran both halves."""
    one, two = [name for name in PERSONALITIES if name != "host"][:2]
    run("host", "--half", str(tmp_path / "host.state"))
    run(one, "--half", str(tmp_path / "other.state"))
    same_node = run("host", "--resume", str(tmp_path / "host.state"))
    assert run(two, "--resume", str(tmp_path / "other.state")) == same_node
    assert run("host", "--resume", str(tmp_path / "other.state")) == same_node
