"""``olu-worker demo --input-format avro|json-schema|protobuf`` against a real registry (Apicurio).

The demo's producer serializes its synthetic stream with confluent-kafka's serializer of the format;
the worker decodes it through the registry. Its poison records stay raw JSON: they, and only they,
are dead-lettered. Without a registry URL a registry format fails before anything starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from worker.stream.demo import POISON_EVERY

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 3_000


def _demo(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLU_")}
    return subprocess.run([sys.executable, "-m", "worker.cli", "demo", "--http-port", "0", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.registry
@pytest.mark.parametrize("fmt", ["avro", "json-schema", "protobuf"])
def test_demo_runs_in_each_registry_format(fmt, schema_registry_url, tmp_path):
    topic = f"demo-{fmt}-{uuid.uuid4().hex[:6]}"  # a subject of its own: one schema type per subject
    proc = _demo("--events", str(EVENTS), "--json", "--input-format", fmt, "--schema-registry-url",
                 schema_registry_url, "--input-topics", topic, "--state-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = orjson.loads(proc.stdout)
    assert report["events"] == EVENTS
    assert report["dead_letters"] == (EVENTS - 1) // POISON_EVERY == 3  # the poison records, nothing else
    assert report["releases"] > 0 and report["deletions_honoured"] > 0
    assert report["events_applied"] > EVENTS * 0.9


def test_a_registry_format_without_a_registry_fails_at_once():
    proc = _demo("--input-format", "protobuf", timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "needs a Schema Registry: pass --schema-registry-url (or OLU_SCHEMA_REGISTRY_URL)" in proc.stderr
