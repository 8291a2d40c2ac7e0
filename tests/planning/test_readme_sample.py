"""The ``olu-worker plan`` example of docs/planning.md: its commands, run as shown, print exactly the
output the page shows (the planner's arithmetic is the engine's fixed-order one, so this holds on every CPU)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _example() -> tuple[str, str, str]:
    """(sample command's Python code, plan command, shown output) of docs/planning.md."""
    text = (ROOT / "docs" / "planning.md").read_text()
    match = re.search(r'```bash\n# a sample of .*?\n\.venv/bin/python -c "(.*?)" > sample\.jsonl\n'
                      r"(\.venv/bin/olu-worker plan [^\n]*)\n```\n\n```\n(.*?)```", text, flags=re.S)
    assert match, "docs/planning.md's plan example moved: update this test with it"
    return match.group(1), match.group(2), match.group(3)


def test_the_readme_plan_example_prints_what_the_readme_shows(tmp_path):
    code, plan, shown = _example()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLU_")}
    sample = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120, check=True).stdout
    (tmp_path / "sample.jsonl").write_text(sample)
    argv = shlex.split(plan)[1:]  # after .venv/bin/olu-worker
    out = subprocess.run([sys.executable, "-m", "worker.cli", *argv], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == shown
