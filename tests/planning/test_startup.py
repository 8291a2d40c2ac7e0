"""``olu-worker run`` says at start when the all-deletions unit at the expected deletion rate is
predicted to leave a release that is mostly noise (worker/planning/startup.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from worker.config import load_settings
from worker.planning.startup import unit_warning

ROOT = Path(__file__).resolve().parents[2]


def settings(*flags: str):
    return load_settings(["--dim", "10", *flags], {"OLU_KAFKA_BOOTSTRAP_SERVERS": "k:1"})


@pytest.mark.parametrize("flags,warned", [
    (("--privacy-unit", "all-deletions", "--expected-deletion-rate", "0.005"), True),
    (("--privacy-unit", "all-deletions", "--expected-deletion-rate", "0.00001"), False),  # 10 in a million
    (("--privacy-unit", "all-deletions"), False),  # no rate stated: nothing to predict
    (("--privacy-unit", "per-request", "--expected-deletion-rate", "0.02"), False),  # its noise fades
    (("--privacy-unit", "all-deletions", "--expected-deletion-rate", "0.005", "--rho", "1000"), False),
])
def test_the_warning_follows_the_noise_formula(flags, warned):
    found = unit_warning(settings(*flags))
    assert (found is not None) is warned
    if warned:
        assert "times the radius" in found and "OLU_PRIVACY_UNIT=per-request" in found and "olu-worker plan" in found


def test_run_says_it_in_one_warning_line_at_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLU_")}
    proc = subprocess.Popen([sys.executable, "-m", "worker.cli", "run", "--bootstrap-servers", "127.0.0.1:1", "--dim",
                             "10", "--state-url", f"file://{tmp_path}", "--http-port", "0", "--privacy-unit",
                             "all-deletions", "--expected-deletion-rate", "0.01"], cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, text=True)
    seen: list[str] = []

    def read() -> None:  # the start-up lines, up to the one that says the worker started
        for line in proc.stderr:
            seen.append(line)
            if '"worker started"' in line:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=120)  # a safety net on a hung start, not a timing: the line ends the wait
    proc.terminate()
    _, rest = proc.communicate(timeout=60)
    err = "".join(seen) + (rest or "")
    warnings = [orjson.loads(line) for line in err.splitlines()
                if line.startswith("{") and '"WARNING"' in line and "OLU_EXPECTED_DELETION_RATE" in line]
    assert len(warnings) == 1, err[-3000:]
    assert warnings[0]["logger"] == "olu.cli" and "5.90 times the radius" in warnings[0]["msg"]
