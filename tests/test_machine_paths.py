"""No file in the repository names one machine's directories.

Rule: no tracked text file (``git ls-files``; a file with a NUL byte in its first 8 KiB is binary
and skipped) contains an absolute path into a home or work directory: one starting with the work
root or root's home (``/`` + ``work/``, ``/`` + ``root/``), or with ``/home/`` or ``/Users/``, a user
name and a slash, where no path character comes right before the first slash (``bench/work/x`` is
relative). Commands
use ``.venv/bin/python`` or ``python`` from the repository root, and caches ``~`` or
``$XDG_CACHE_HOME``. ``/tmp`` is allowed everywhere: it is the same on every machine (temporary
directories in tests, the container's emptyDir).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:(?:work|root)/|(?:home|Users)/[^/\s]+/)")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout ({e}): nothing to list")
    return [ROOT / name for name in out.decode().split("\0") if name]


def machine_paths(path: Path) -> list[str]:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return []
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()[:160]}"
            for n, line in enumerate(data.decode(errors="replace").splitlines(), 1) if MACHINE_PATH.search(line)]


def test_the_rule_catches_machine_paths_and_spares_the_rest():
    assert all(MACHINE_PATH.search(t) for t in ("/" "work/venv/bin/python bench/x.py", '"/' 'root/.cache/x"',
                                                "cd /" "home/alice/olu", "`/" "Users/bob/src`"))
    assert not any(MACHINE_PATH.search(t) for t in ("bench/work/x", "/tmp/numba", "~/.cache/olu-worker/",
                                                    ".venv/bin/python bench/x.py", "/home", "/home/ alone"))


def test_no_tracked_file_names_a_machines_directories():
    found = [hit for path in tracked_files() if path.is_file() for hit in machine_paths(path)]
    assert not found, "absolute home or work-directory paths (use .venv/bin/python, python or ~):\n" + "\n".join(found)
