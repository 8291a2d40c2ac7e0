"""The container image's install path, without a Docker engine.

The Dockerfile builds a wheel from pyproject.toml, README.md and worker/ only, then installs
just that wheel (its dependencies from the package index) into python:3.11-slim and runs the
``olu-worker`` entry point as uid 10001. The slow test repeats those steps here: copy exactly
what the Dockerfile copies, ``pip wheel --no-deps``, install the wheel into a fresh virtualenv,
run ``olu-worker --help`` and ``olu-worker run --help``. A quick test reads the Dockerfile itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


def _stages(text: str) -> dict[str, list[str]]:
    """Dockerfile instructions per stage name (continuation lines joined)."""
    lines = re.sub(r"\\\n", " ", text).splitlines()
    stages: dict[str, list[str]] = {}
    current = None
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.IGNORECASE)
        if match:
            current = match.group(1)
            stages[current] = [line]
        elif current is not None:
            stages[current].append(line)
    return stages


def _copy_sources() -> list[str]:
    """Paths the builder stage COPYs from the build context."""
    sources = []
    for line in _stages(DOCKERFILE.read_text())["builder"]:
        if line.upper().startswith("COPY ") and "--from" not in line:
            parts = line.split()[1:]
            sources += parts[:-1]
    return sources


def test_dockerfile_builds_a_wheel_and_runs_it_as_non_root():
    text = DOCKERFILE.read_text()
    stages = _stages(text)
    assert set(stages) == {"builder", "runtime"}
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    builder = " ".join(stages["builder"])
    assert "pip wheel --no-deps" in builder
    runtime = stages["runtime"]
    joined = " ".join(runtime)
    assert "NUMBA_CACHE_DIR=/tmp/numba" in joined and "PYTHONDONTWRITEBYTECODE=1" in joined
    assert "--uid 10001" in joined and "USER 10001:10001" in runtime
    assert "EXPOSE 9464" in runtime
    assert runtime[-2:] == ['ENTRYPOINT ["olu-worker"]', 'CMD ["run"]']
    # the runtime stage installs the wheel only: it copies nothing from the build context
    assert not [line for line in runtime if line.upper().startswith(("COPY", "ADD")) and "--from" not in line]
    assert re.search(r"pip install /dist/olu_worker-\*\.whl", joined)
    assert sorted(_copy_sources()) == ["README.md", "pyproject.toml", "worker"]


def test_dockerignore_lets_in_only_what_the_builder_copies():
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == set(_copy_sources())


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{cmd} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def _subcommands() -> list[str]:
    """The subcommands of the in-tree ``olu-worker`` (run, demo, and any added since)."""
    import argparse

    from worker.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(sub.choices)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_wheel_installs_into_a_fresh_virtualenv_and_runs(tmp_path):
    # 1. the build context the Dockerfile uses, and nothing else
    context = tmp_path / "context"
    context.mkdir()
    for source in _copy_sources():
        src = ROOT / source
        if src.is_dir():
            shutil.copytree(src, context / source, ignore=shutil.ignore_patterns("__pycache__", "*.py[cod]"))
        else:
            shutil.copy2(src, context / source)

    # 2. builder stage: the wheel only
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
          "--wheel-dir", str(dist), str(context)], timeout=600)
    (wheel,) = dist.glob("olu_worker-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "worker/devtools/kafka-pom.xml" in names  # package data the local broker needs
    assert "worker/cli.py" in names and "worker/client/__init__.py" in names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "helm/", "scripts/", "schemas/"))]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "olu-worker = worker.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()

    # 3. runtime stage: a fresh environment with the wheel (dependencies from the index)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    python, command = venv / "bin" / "python", venv / "bin" / "olu-worker"
    _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(wheel)], timeout=1200)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLU_", "PYTHON", "KAFKA_"))}
    env.update(PYTHONDONTWRITEBYTECODE="1", NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    where = _run([str(python), "-c", "import worker; print(worker.__file__)"], cwd=tmp_path, env=env, timeout=120)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # the installed copy, not the tree

    top = _run([str(command), "--help"], cwd=tmp_path, env=env, timeout=120)
    for name in _subcommands():
        assert re.search(rf"\b{re.escape(name)}\b", top.stdout), (name, top.stdout)
    run = _run([str(command), "run", "--help"], cwd=tmp_path, env=env, timeout=120)
    for flag in ("--bootstrap-servers", "--dim", "--state-url", "--target-epsilon", "--rho", "--privacy-unit", "--kafka"):
        assert flag in run.stdout, flag
    version = _run([str(command), "--version"], cwd=tmp_path, env=env, timeout=120)
    assert version.stdout.strip().startswith("olu-worker ")


def test_the_local_service_scripts_run_without_an_activated_virtualenv():
    """``scripts/kafka-local`` as the README shows it, from a shell whose python3 lacks the project's
    dependencies: it takes the checkout's .venv (``--resolve-only``: the jars are cached by then)."""
    root = Path(__file__).resolve().parents[1]
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    proc = subprocess.run(["bash", str(root / "scripts" / "kafka-local"), "--resolve-only"], env=env, cwd="/",
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "kafka" in proc.stdout
