"""Bad input to ``olu-worker run`` ends in one configuration-error line and exit 2, not a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = ["run", "--bootstrap-servers", "127.0.0.1:1", "--dim", "3", "--state-url", "file:///nonexistent/olu",
        "--privacy-unit", "per-request"]


def _run(*args: str) -> tuple[int, list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLU_")}
    proc = subprocess.run([sys.executable, "-m", "worker.cli", *BASE, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, [line for line in proc.stderr.splitlines() if not line.startswith("{")]


def test_an_unknown_librdkafka_property_is_one_line():
    code, lines = _run("--http-port", "0", "--kafka", "bogus.key=1")
    assert code == 2 and len(lines) == 1, lines
    assert "configuration error" in lines[0] and '"bogus.key"' in lines[0]


def test_a_busy_http_port_is_one_line_naming_the_setting():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, lines = _run("--http-host", "127.0.0.1", "--http-port", str(port))
    assert code == 2 and len(lines) == 1, lines
    assert "OLU_HTTP_PORT (--http-port)" in lines[0] and str(port) in lines[0]


def test_run_without_a_privacy_unit_is_one_line_naming_both_units_and_the_planner():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLU_")}
    proc = subprocess.run([sys.executable, "-m", "worker.cli", *BASE[:-2], "--http-port", "0"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert "OLU_PRIVACY_UNIT (--privacy-unit) is required" in lines[0]
    assert "per-request" in lines[0] and "all-deletions" in lines[0] and "olu-worker plan" in lines[0]
    code, lines = _run("--http-port", "0", "--kafka", "bogus.key=1")  # with the unit, it gets further
    assert code == 2 and "bogus.key" in lines[0]


COMMANDS_WITH_CLIENTS = {  # every command that builds a Kafka client (no broker needed: refused at creation)
    "demo": ["demo", "--events", "100", "--http-port", "0"],
    "produce": ["produce", "--generate", "10", "--bootstrap-servers", "127.0.0.1:1"],
    "follow": ["follow", "--once", "--bootstrap-servers", "127.0.0.1:1"],
    "plan --from-topic": ["plan", "--from-topic", "100", "--bootstrap-servers", "127.0.0.1:1", "--dim", "3"],
}


def test_every_command_refuses_an_unknown_librdkafka_property_in_one_line():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLU_")}
    for name, argv in COMMANDS_WITH_CLIENTS.items():
        proc = subprocess.run([sys.executable, "-m", "worker.cli", *argv, "--kafka", "bogus.key=1"], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=180)
        lines = [line for line in proc.stderr.splitlines()
                 if not line.startswith(("{", "starting:"))]  # JSON log lines, the demo's compile notice
        assert proc.returncode == 2, (name, proc.stderr[-2000:])
        assert len(lines) == 1 and "bogus.key" in lines[0] and "refused" in lines[0], (name, lines)
        assert "Traceback" not in proc.stderr, name
