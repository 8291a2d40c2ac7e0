"""Every bench still runs, and what it writes is well-formed (bench/README.md, "Running them").

Each ``bench/*.py`` that is not a helper (found by ``bench._catalog.scripts``, so a new bench is
covered without editing this file) runs as ``python bench/NAME.py --quick --out <tmp>`` with the
session's broker, S3 server and Schema Registry when it declares them in ``SERVICES``; it may not start its own
(``OLU_TEST_NO_OWN_SERVERS``). Checked: exit status 0, strict JSON with the common keys and the
bench's ``REPORT_KEYS``, every number finite, every MET / NOT MET line in ``_targets.LINE`` and one
per ``target_checks`` entry, and the README's tables rendered from the quick JSON and, unchanged,
from bench/results. Never a speed: timing goals are the benches' own.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import _catalog
from bench._harness import COMMON_KEYS, NO_OWN_SERVERS
from bench._targets import LINE, MET_WORD
from worker.devtools.s3_local import SeaweedS3, external_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = _catalog.scripts()
SERVICES = {"kafka": "kafka_bootstrap", "s3": "s3_server",  # declared name -> session fixture
            "registry": "schema_registry_url"}
RUN_TIMEOUT_S = 300


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float
    json_path: Path

    def tail(self, lines: int = 40) -> str:
        return "\n".join((self.stdout + "\n" + self.stderr).splitlines()[-lines:])


def bench_param(name: str):
    try:
        services = _catalog.declared(name)["SERVICES"]
    except LookupError:  # reported by the bench's own test, not as a collection error of them all
        services = ()
    return pytest.param(name, marks=[getattr(pytest.mark, s) for s in services if s in SERVICES], id=name)


def environment(name: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """Ours, without servers of its own, plus the session's servers the bench declares."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("KAFKA_BOOTSTRAP_SERVERS", "OLU_TEST_S3_ENDPOINT", "OLU_TEST_SCHEMA_REGISTRY_URL")}
    env[NO_OWN_SERVERS] = "1"
    services = _catalog.declared(name)["SERVICES"]
    if "kafka" in services:
        env["KAFKA_BOOTSTRAP_SERVERS"] = request.getfixturevalue("kafka_bootstrap")
    if "registry" in services:
        env["OLU_TEST_SCHEMA_REGISTRY_URL"] = request.getfixturevalue("schema_registry_url")
    if "s3" in services:
        server = request.getfixturevalue("s3_server")
        if isinstance(server, SeaweedS3):  # an earlier test may have left it stopped or paused
            server.resume()
            server.start()
        env.update(external_env(server))
    return env


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """``quick(name)``: the bench's quick run into one directory, run once per module."""
    out = tmp_path_factory.mktemp("bench-quick")
    runs: dict[str, Run] = {}

    def run(name: str) -> Run:
        if name not in runs:
            started = time.monotonic()
            proc = subprocess.run([sys.executable, f"bench/{name}.py", "--quick", "--out", str(out)], cwd=ROOT,
                                  env=environment(name, request), capture_output=True, text=True,
                                  timeout=RUN_TIMEOUT_S)
            runs[name] = Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started,
                             out / f"{name}.json")
        return runs[name]

    run.out = out
    return run


def strict_json(path: Path):
    def refuse(constant: str):
        raise ValueError(f"{path.name}: {constant} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def not_finite(value, where: str = "$") -> list[str]:
    """Paths of every number in ``value`` that is not finite (1e999 parses to inf)."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [where]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in not_finite(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in not_finite(v, f"{where}[{i}]")]
    return []


@pytest.mark.parametrize("name", [bench_param(n) for n in SCRIPTS])
def test_quick_run_writes_a_well_formed_report(name: str, quick):
    declared = _catalog.declared(name)
    assert set(declared["SERVICES"]) <= set(SERVICES), f"{name}: unknown SERVICES {declared['SERVICES']}"
    run = quick(name)
    assert run.code == 0, f"bench/{name}.py --quick exited {run.code}:\n{run.tail()}"
    report = strict_json(run.json_path)

    missing = [k for k in (*COMMON_KEYS, *declared["REPORT_KEYS"]) if k not in report]
    assert not missing, f"{name}.json lacks {missing} (REPORT_KEYS / _harness.COMMON_KEYS)"
    assert report["bench"] == name
    assert report["command"].startswith(f"python bench/{name}.py "), report["command"]
    assert str(ROOT) not in report["command"] and "--quick" in report["command"], report["command"]
    assert not not_finite(report), f"{name}.json: not finite at {not_finite(report)}"

    lines = [line for line in run.stdout.splitlines() if MET_WORD.search(line)]
    malformed = [line for line in lines if not LINE.match(line)]
    assert not malformed, f"{name}: target lines not in the format of _targets.LINE: {malformed}"
    printed = [LINE.match(line)["verdict"] == "MET" for line in lines]
    assert printed == [c["met"] for c in report["target_checks"]], (
        f"{name}: {len(lines)} MET / NOT MET lines on stdout, {len(report['target_checks'])} target_checks")


def render(tmp_path: Path, results: Path) -> str:
    """``python -m bench --render-only`` from ``results`` into a copy of the README."""
    readme = tmp_path / "README.md"
    readme.write_text(_catalog.README.read_text())
    proc = subprocess.run([sys.executable, "-m", "bench", "--render-only", "--out", str(results), "--readme",
                           str(readme)], cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return readme.read_text()


def test_readme_has_one_results_block_per_bench():
    found = _catalog.blocks(_catalog.README.read_text())
    assert sorted(found) == SCRIPTS, "bench/README.md needs a results block for each bench, and no other"


def test_readme_tables_are_what_the_results_render(tmp_path: Path):
    """Text and numbers cannot drift: the committed tables are bench/results rendered as is."""
    committed = _catalog.blocks(_catalog.README.read_text())
    rendered = _catalog.blocks(render(tmp_path, _catalog.BENCH / "results"))
    stale = [name for name in SCRIPTS if rendered.get(name) != committed.get(name)]
    assert not stale, f"README tables differ from bench/results (run python -m bench --render-only): {stale}"
    for name in SCRIPTS:
        keys = ", ".join(f"`{k}`" for k in _catalog.declared(name)["REPORT_KEYS"])
        assert f"JSON keys (besides the common ones): {keys}." in rendered[name], name


def test_tables_render_from_the_quick_reports(quick, tmp_path: Path):
    failed = [name for name in SCRIPTS if quick(name).code != 0]
    assert not failed, f"no quick report to render for {failed} (see their own tests)"
    rendered = _catalog.blocks(render(tmp_path, quick.out))
    for name in SCRIPTS:
        block = rendered[name]
        assert f"`python bench/{name}.py --quick --out " in block, f"{name}: not rendered from the quick run"
        assert re.search(r"^\|.*\|$", block, re.M), f"{name}: no table rendered:\n{block}"


@pytest.mark.parametrize("sets", [[], ["--set", "sparse_input=true"]], ids=["dense", "sparse"])
def test_feature_throughput_runs_under_a_spec_with_derived_blocks(tmp_path: Path, request: pytest.FixtureRequest,
                                                                    sets: list[str]):
    """``--spec``: the named stream alone, under a spec whose derived blocks the compiled reader
    computes, as dense or sparse rows (no dead letters: the bench refuses them), and a report that
    renders."""
    proc = subprocess.run([sys.executable, "bench/feature_throughput.py", "--quick", "--spec", "examples/agrawal.yaml",
                           *sets, "--out", str(tmp_path)], cwd=ROOT, env=environment("feature_throughput", request),
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]  # 1: a target not met
    report = strict_json(tmp_path / "feature_throughput.json")
    assert [r["stream"] for r in report["rows"]] == ["named"] and report["rows"][0]["events"] == 10_000
    assert report["config"]["dim"] == 5260 and report["named_x_vector"] is None
    assert report["config"]["settings"] == ({"sparse_input": True} if sets else {})
    assert [c["target"] for c in report["target_checks"]] == ["rich_spec_events_per_s"]
    sys.path.insert(0, str(ROOT / "bench"))
    import feature_throughput
    assert "Under examples/agrawal.yaml (d = 5260)" in feature_throughput.render(report)
