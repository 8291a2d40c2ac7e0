"""Deletion counts and metrics of an exact algorithm across a restart, on the real broker.

``retrain`` honours deletions exactly (no noise, no privacy charge). Its releases used to say
``"deletions": 0`` however many it honoured, because the count came from the privacy accountant.
And a worker restarted with nothing left to consume exported no ``olu_model_version`` nor either
lag gauge until new input arrived; ``olu_model_deletions`` (the model's lifetime count, from its
state) must be there at once and equal the release's ``deletions``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.infra.schema_samples import validate
from tests.stream.kafka_harness import (
    DIM,
    Topics,
    WorkerProcess,
    covered,
    create_topics,
    delete,
    delete_topics,
    end_offsets,
    insert,
    produce,
    releases,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.kafka

DELETED = [3, 17, 40, 41, 77, 99, 118]  # of the 120 inserts below


def _events() -> list:
    rng = np.random.default_rng(5)
    out = []
    for j in range(120):
        x = rng.normal(size=DIM)
        x *= 0.9 / max(1.0, float(np.linalg.norm(x)))
        out.append(insert(f"r-{j}", x, int(x[0] > 0)))
    out += [delete(f"r-{j}", tombstone=j % 2 == 1) for j in DELETED]
    out += [delete("r-40"), delete("never-inserted")]  # a duplicate and a stranger: not applied
    return out


def _series(text: str, topic: str) -> dict[str, float]:
    """Every per-partition sample of partition 0 of ``topic``, by name (privacy gauges also carry ``unit``)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if (s.labels.get("topic") == topic and s.labels.get("partition") == "0"
                    and set(s.labels) <= {"topic", "partition", "unit"}):
                out[s.name] = s.value
    return out


@dataclass
class FirstRun:
    topics: Topics
    env: dict
    log: Path
    end: int  # the input's end offset: everything was consumed
    values: list[dict]  # every release
    metrics: dict[str, float]  # partition 0's series just before shutdown


@pytest.fixture(scope="module")
def first_run(kafka_bootstrap, tmp_path_factory):
    """A retrain worker that consumed the whole input, then stopped (final snapshot and commit)."""
    tmp = tmp_path_factory.mktemp("restart-metrics")
    name = f"restart-metrics-{uuid.uuid4().hex[:8]}"
    topics = Topics(f"{name}.events", f"{name}.params", f"{name}.dlq", 1)
    create_topics(kafka_bootstrap, {topics.input: 1, topics.params: 1, topics.dlq: 1})
    # a release per deletion (not one per poll batch): the test reads each deletion's count
    env = worker_env(kafka_bootstrap, topics, name, f"file://{tmp}/state", OLU_ALGORITHM="retrain",
                     OLU_DELETION_RELEASES="each")
    worker = WorkerProcess(env, tmp / "worker.log")
    try:
        worker.start()
        worker.wait_assigned({0})
        produce(kafka_bootstrap, topics.input, _events())
        end = end_offsets(kafka_bootstrap, topics.input)[0]
        wait_for(covered(kafka_bootstrap, topics, {0: end}), 60, "the deletions released", interval=0.3)
        metrics = _series(worker.metrics(), topics.input)
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        worker.cleanup()
    values = [r.json() for r in releases(kafka_bootstrap, topics.params)]
    yield FirstRun(topics, env, tmp / "worker.log", end, values, metrics)
    delete_topics(kafka_bootstrap, [topics.input, topics.params, topics.dlq])


def test_retrain_releases_count_the_deletions_they_honoured(first_run):
    for v in first_run.values:
        validate("release", v)
    by_version = {v["version"]: v["deletions"] for v in first_run.values}  # duplicates are identical
    # a release after each honoured deletion, counting 1..7; the duplicate and the stranger add none
    assert [by_version[121 + k] for k in range(len(DELETED))] == list(range(1, len(DELETED) + 1))
    last = max(first_run.values, key=lambda v: v["version"])
    assert last["version"] == first_run.end and last["algorithm"] == "retrain"
    assert (last["deletions"], last["t"], last["epoch"]) == (len(DELETED), 120, 0)
    assert first_run.metrics["olu_deletions_total"] == len(DELETED)
    assert first_run.metrics["olu_model_deletions"] == len(DELETED)
    # exact deletions carry no noise: the release says so, and the gauges follow the release
    assert last["privacy"]["noise_std"] == 0.0 == first_run.metrics["olu_release_noise_std"]
    assert last["privacy"]["noise_to_signal"] == 0.0 == first_run.metrics["olu_noise_to_signal_ratio"]


def test_a_worker_restarted_with_nothing_to_consume_exports_the_restored_state(first_run):
    topic = first_run.topics.input
    last = max(first_run.values, key=lambda v: v["version"])
    worker = WorkerProcess(first_run.env, first_run.log)
    try:
        worker.start()
        assert worker.wait_assigned({0})[0]["snapshot"] == first_run.end  # restored, nothing to replay
        wait_for(lambda: worker.get("/readyz")[0] == 200, 30, "the assignment to finish", interval=0.2)
        restored = _series(worker.metrics(), topic)
        assert "olu_privacy_epsilon" in restored  # always set at assignment
        for name in ("olu_model_version", "olu_consumer_lag", "olu_consumer_processing_lag", "olu_model_deletions",
                     "olu_release_noise_std", "olu_noise_to_signal_ratio"):
            assert name in restored, f"{name} is not exported after the restore"
        assert restored["olu_model_version"] == first_run.end
        assert restored["olu_consumer_lag"] == 0 and restored["olu_consumer_processing_lag"] == 0
        assert restored["olu_model_deletions"] == last["deletions"] == len(DELETED)
        assert restored["olu_model_steps"] == 120
        assert restored["olu_release_noise_std"] == last["privacy"]["noise_std"]
        assert restored["olu_noise_to_signal_ratio"] == last["privacy"]["noise_to_signal"]
        assert "olu_deletions_total" not in restored  # this process honoured none: the counter restarts
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        worker.cleanup()
