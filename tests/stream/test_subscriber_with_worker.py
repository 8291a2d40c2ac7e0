"""The subscriber against a running worker on the real broker (issue: deploy and consume)."""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest

from tests.stream.kafka_harness import (
    WorkerProcess,
    covered,
    end_offsets,
    event_stream,
    produce,
    releases,
    releases_by_partition,
    topics_for,
    wait_for,
    worker_env,
)
from worker.client import ParamsSubscriber

pytestmark = pytest.mark.kafka


def test_subscriber_follows_a_running_worker_and_predicts_with_its_latest_release(kafka_bootstrap, kafka_topic,
                                                                                   tmp_path):
    topics = topics_for(kafka_topic, partitions=2)
    group = f"follow-{uuid.uuid4().hex[:8]}"
    env = worker_env(kafka_bootstrap, topics, group, f"file://{tmp_path}/state")
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        worker.start()
        worker.wait_assigned({0, 1})
        produce(kafka_bootstrap, topics.input, event_stream(600, seed=5, delete_rate=0.05))
        ends = end_offsets(kafka_bootstrap, topics.input)
        wait_for(covered(kafka_bootstrap, topics, ends), 60, "the stream released", interval=0.3)

        with ParamsSubscriber(kafka_bootstrap, topic=topics.params) as sub:
            assert sub.run_until(caught_up=True, timeout=30)
            published = releases_by_partition(releases(kafka_bootstrap, topics.params))
            for partition, records in published.items():
                newest = max(records, key=lambda r: r["version"])
                held = sub.latest(topics.input, partition)
                assert held is not None and held.version == newest["version"] == ends[partition]
                assert list(held.weights) == newest["weights"]  # deduplicated to the newest version
            x = np.linspace(-0.3, 0.3, len(newest["weights"]))
            for partition, records in published.items():
                w = np.array(max(records, key=lambda r: r["version"])["weights"])
                assert sub.predict(x, partition=partition) == pytest.approx(1 / (1 + math.exp(-float(w @ x))))
            mean_w = np.mean([max(r, key=lambda v: v["version"])["weights"] for r in published.values()], axis=0)
            assert sub.predict(x) == pytest.approx(1 / (1 + math.exp(-float(mean_w @ x))))
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        worker.cleanup()
