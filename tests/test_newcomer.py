"""A newcomer's first hour, scripted: the installed ``olu-worker`` command as a user runs it.

Feed a local broker with ``olu-worker produce``, run the worker on it, watch its releases with
``follow``, stop it; each step's output is what a person would read. The other first-hour checks
live beside the code they test (README examples in tests/helm and tests/planning, one-line errors
in test_cli_errors.py and test_config.py, the demo in tests/stream/test_demo.py); this module
holds what only the whole command shows: help that fits a screen, a dead broker in a few lines,
and the produce -> run -> follow loop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest

from tests.stream.kafka_harness import read_topic

ROOT = Path(__file__).resolve().parents[1]
OLU_WORKER = Path(sys.executable).with_name("olu-worker")  # the console script pip installed


def _env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith(("OLU_", "KAFKA_"))}, **extra}


def _cli(*args: str, input: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    assert OLU_WORKER.exists(), f"the olu-worker command is not installed next to {sys.executable}"
    return subprocess.run([str(OLU_WORKER), *args], env=_env(), cwd=ROOT, capture_output=True, input=input,
                          timeout=timeout)


def test_demo_help_fits_a_screen_and_shows_its_defaults():
    out = _cli("demo", "--help").stdout.decode()
    assert len(out.splitlines()) <= 80, len(out.splitlines())  # was 315: every setting of run
    assert "(default 0.01)" in " ".join(out.split()) and "--privacy-unit" in out and "run --help" in out
    assert "--snapshot-keep" not in out  # accepted, not listed
    full = _cli("run", "--help").stdout.decode()
    assert "--snapshot-keep" in full


def test_follow_on_a_dead_broker_says_so_in_a_few_lines():
    proc = _cli("follow", "--bootstrap-servers", "127.0.0.1:1", "--timeout", "8")
    lines = proc.stderr.decode().splitlines()
    # librdkafka retries every ~50 ms: 155 raw lines in 8 s before; now one, then once per doubling window
    assert 1 <= len(lines) <= 6, lines
    assert all(line.startswith("olu-worker follow: kafka:") for line in lines)
    assert "127.0.0.1:1" in lines[0] and "held back" in lines[-1]


def test_produce_refuses_a_dead_broker_and_bad_lines_in_one_line(kafka_bootstrap, kafka_topic):
    proc = _cli("produce", "--bootstrap-servers", "127.0.0.1:1", "--generate", "5")
    lines = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "no answer from the Kafka broker at 127.0.0.1:1" in lines[0]

    topic = kafka_topic(partitions=2)
    sample = b'{"op": "insert", "id": "a", "x": [0.1], "y": 1}\n["not", "an", "event"]\n'
    proc = _cli("produce", "--bootstrap-servers", kafka_bootstrap, "--input-topics", topic, "--file", "-", input=sample)
    lines = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert "line 2: expected a JSON object" in lines[0] and "1 events before it were sent" in lines[0]
    assert [r.key for r in read_topic(kafka_bootstrap, topic)] == [b"a"]  # what came before it is not lost


def test_produce_sends_keyed_lines_as_records(kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=3)
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join([
        b'{"op": "insert", "id": "r-1", "x": [0.1, 0.2], "y": 1}',
        b'{"key": "user-7", "value": {"op": "insert", "id": "user-7/a", "x": [0.3, 0.1], "y": 0}}',
        b'',
        b'{"key": "user-7", "value": {"op": "delete", "ids": ["user-7/a"]}}',
        b'{"key": "r-1", "value": null}',
        b'{"op": "insert", "id": "bad", "x": "not a vector"}',  # the worker's to judge (a dead letter)
    ]) + b"\n")
    proc = _cli("produce", "--bootstrap-servers", kafka_bootstrap, "--input-topics", topic, "--file", str(events),
                "--json")
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    summary = orjson.loads(proc.stdout)
    assert summary | {"seconds": 0} == {"topic": topic, "bootstrap_servers": kafka_bootstrap, "format": "json",
                                        "sent": 5, "inserts": 3, "deletes": 1, "tombstones": 1, "other": 0,
                                        "seconds": 0, "all_delivered": True, "failure": None}
    records = read_topic(kafka_bootstrap, topic)
    by_key: dict[bytes, list] = {}
    for r in sorted(records, key=lambda r: r.offset):
        by_key.setdefault(r.key, []).append(None if r.value is None else orjson.loads(r.value))
    assert by_key[b"user-7"] == [{"op": "insert", "id": "user-7/a", "x": [0.3, 0.1], "y": 0},
                                 {"op": "delete", "ids": ["user-7/a"]}]
    assert by_key[b"r-1"] == [{"op": "insert", "id": "r-1", "x": [0.1, 0.2], "y": 1}, None]
    assert len({r.partition for r in records if r.key == b"user-7"}) == 1  # one key, one partition


def test_first_hour_produce_run_follow_stop(kafka_bootstrap, kafka_topic, tmp_path):
    """The loop the README shows: feed a broker, run the worker on it, follow its releases, stop it."""
    run_id = uuid.uuid4().hex[:8]
    topic, params, dlq = kafka_topic(partitions=2), kafka_topic(), kafka_topic()
    events = 6_000
    produced = _cli("produce", "--bootstrap-servers", kafka_bootstrap, "--input-topics", topic, "--generate",
                    str(events), "--poison", "--json")
    assert produced.returncode == 0, produced.stderr.decode()[-2000:]
    sent = orjson.loads(produced.stdout)
    assert sent["sent"] == events and sent["all_delivered"] and sent["other"] == (events - 1) // 997

    worker = subprocess.Popen(
        [str(OLU_WORKER), "run", "--bootstrap-servers", kafka_bootstrap, "--input-topics", topic,
         "--params-topic", params, "--dlq-topic", dlq, "--group-id", f"g-{run_id}", "--dim", "10",
         "--privacy-unit", "per-request", "--state-url", f"file://{tmp_path}/state", "--http-port", "0",
         "--release-every-events", "1000", "--log-format", "text"],
        env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        latest: dict[int, dict] = {}
        while time.monotonic() < deadline:
            follow = _cli("follow", "--bootstrap-servers", kafka_bootstrap, "--topic", params, "--once", "--json",
                          "--timeout", "20")
            for line in follow.stdout.splitlines():  # each new version in turn: keep each partition's newest
                version = orjson.loads(line)
                latest[version["partition"]] = version
            versions = list(latest.values())
            if len(versions) == 2 and sum(v["t"] for v in versions) >= sent["inserts"] - sent["deletes"] - 50:
                break
            time.sleep(1)
        assert len(versions) == 2, versions  # one model per input partition
        assert sum(v["t"] for v in versions) >= sent["inserts"] - sent["deletes"] - 50
        assert all(v["privacy"]["unit"] == "per-request" for v in versions)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err.decode()[-3000:]
    assert b"Traceback" not in err and b"Exception in thread" not in err
    dead = read_topic(kafka_bootstrap, dlq)
    assert len(dead) == sent["other"]  # the poison records, each with its reason
    assert all(r.headers.get("olu.error.reason") for r in dead)


@pytest.mark.registry
def test_produce_frames_events_in_a_registry_format(kafka_bootstrap, kafka_topic, schema_registry_url):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = kafka_topic(partitions=1)
    proc = _cli("produce", "--bootstrap-servers", kafka_bootstrap, "--input-topics", topic, "--generate", "50",
                "--delete-rate", "0.1", "--input-format", "avro", "--schema-registry-url", schema_registry_url)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    records = read_topic(kafka_bootstrap, topic)
    assert len(records) == 50 and all(r.value[:1] == b"\x00" for r in records)  # Confluent framing
    decode = AvroDeserializer(SchemaRegistryClient({"url": schema_registry_url}))
    first = decode(records[0].value, SerializationContext(topic, MessageField.VALUE))
    assert first["op"] == "insert" and len(first["x"]) == 10 and records[0].key == first["id"].encode()
