"""Fixtures of the stream tests that run ``olu-worker run`` against the real broker."""

from __future__ import annotations

import pytest

from tests.stream.kafka_harness import KafkaRun, start_run, worker_on_s3


@pytest.fixture
def kafka_run(kafka_bootstrap, kafka_topic, tmp_path):
    """Factory: ``kafka_run(name, partitions=1, **OLU_settings) -> KafkaRun`` with new topics, a
    fresh group and file state under the test's tmp_path; every worker it made is killed after
    the test (a failing test leaves none running)."""
    runs: list[KafkaRun] = []

    def make(name: str, *, partitions: int = 1, **settings) -> KafkaRun:
        run = start_run(kafka_bootstrap, kafka_topic, tmp_path / f"{name}-{len(runs)}", name,
                        partitions=partitions, **settings)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.cleanup()


@pytest.fixture
def s3_kafka_run(kafka_bootstrap, kafka_topic, s3_server, tmp_path):
    """Factory: ``s3_kafka_run(name, partitions=1, stoppable=True, **OLU_settings) -> KafkaRun`` with
    its state on the S3 server (:func:`worker_on_s3`) and its logs under the test's tmp_path; every
    worker it made is killed after the test."""
    runs: list[KafkaRun] = []

    def make(name: str, **kwargs) -> KafkaRun:
        run = worker_on_s3(kafka_bootstrap, kafka_topic, s3_server, name, root=tmp_path / f"{name}-{len(runs)}",
                           **kwargs)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.cleanup()
