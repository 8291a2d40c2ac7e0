"""Smoke tests proving the session Kafka is a real broker, not librdkafka's mock cluster.

The transaction test is the point: the mock cluster hands aborted records to a
``read_committed`` consumer, a real broker does not.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from worker.devtools import kafka_jars

pytestmark = pytest.mark.kafka

_DEADLINE_S = 60.0  # a hang guard, not a performance assertion


def _drain(bootstrap: str, topic: str, isolation: str) -> list[str]:
    """All values of a 1-partition topic, read from offset 0 up to the end (EOF)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"drain-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    deadline = time.monotonic() + _DEADLINE_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return values
                raise AssertionError(f"consumer error: {msg.error()}")
            values.append(msg.value().decode())
    finally:
        consumer.close()
    raise AssertionError(f"no end of partition within {_DEADLINE_S:.0f} s; got {values}")


def _transactional_batch(producer: Producer, topic: str, values: list[str], *, commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value.encode())
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def test_transactions_hide_aborted_records_from_read_committed(kafka_bootstrap: str, kafka_topic) -> None:
    topic = kafka_topic(partitions=1)
    committed = [f"committed-{i}" for i in range(5)]
    aborted = [f"aborted-{i}" for i in range(5)]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"smoke-{uuid.uuid4().hex}"})
    producer.init_transactions(30)

    _transactional_batch(producer, topic, committed, commit=True)
    _transactional_batch(producer, topic, aborted, commit=False)

    assert _drain(kafka_bootstrap, topic, "read_committed") == committed
    assert _drain(kafka_bootstrap, topic, "read_uncommitted") == committed + aborted


def test_committed_group_offsets_survive_the_consumer(kafka_bootstrap: str, kafka_topic) -> None:
    topic = kafka_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for i in range(4):
        producer.produce(topic, value=f"m{i}".encode())
    assert producer.flush(30) == 0

    group = f"smoke-group-{uuid.uuid4().hex}"
    config = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    first = Consumer(config)
    first.subscribe([topic])
    seen = [_next_value(first), _next_value(first)]
    first.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    first.close()
    assert seen == ["m0", "m1"]

    second = Consumer(config)
    try:
        [stored] = second.committed([TopicPartition(topic, 0)], timeout=30)
        assert stored.error is None
        assert stored.offset == 2
        second.subscribe([topic])
        assert _next_value(second) == "m2"  # resumes from the committed offset
    finally:
        second.close()


def _next_value(consumer: Consumer) -> str:
    deadline = time.monotonic() + _DEADLINE_S
    while time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            raise AssertionError(f"consumer error: {msg.error()}")
        return msg.value().decode()
    raise AssertionError(f"no record within {_DEADLINE_S:.0f} s")


# ------------------------------------------------------------------ jar resolving


def test_broker_jars_are_cached_and_not_fetched_again(kafka_broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # resolved by the broker's start
    libs = kafka_jars.resolve_jars(kafka_broker.version, kafka_broker.cache_dir)
    assert (libs / f"kafka_2.13-{kafka_broker.version}.jar").is_file()
    assert (libs.parent / ".resolved").is_file()

    def no_maven(*args, **kwargs):
        raise AssertionError("resolve_jars ran Maven although the cache is complete")

    monkeypatch.setattr(kafka_jars, "_run_maven", no_maven)
    assert kafka_jars.resolve_jars(kafka_broker.version, kafka_broker.cache_dir) == libs


def _fake_maven(calls: list[Path], *, fail: bool = False, pause: float = 0.0):
    def run(pom: Path, libs: Path) -> None:
        calls.append(pom)
        time.sleep(pause)  # widens the race window for the concurrency test
        libs.mkdir(parents=True)  # fails if a previous attempt's leftovers were not cleared
        (libs / "kafka_2.13-9.9.9.jar").write_bytes(b"jar")
        if fail:
            raise RuntimeError("network down")

    return run


def test_interrupted_resolve_is_redone_then_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(kafka_jars, "_run_maven", _fake_maven(calls, fail=True))
    with pytest.raises(RuntimeError, match="network down"):
        kafka_jars.resolve_jars("9.9.9", cache_dir=tmp_path)
    assert not (tmp_path / "kafka-9.9.9" / ".resolved").exists()

    monkeypatch.setattr(kafka_jars, "_run_maven", _fake_maven(calls))
    libs = kafka_jars.resolve_jars("9.9.9", cache_dir=tmp_path)
    assert libs == tmp_path / "kafka-9.9.9" / "libs"
    assert (libs.parent / ".resolved").read_text().strip() == "9.9.9"
    assert "<kafka.version>9.9.9</kafka.version>" in calls[-1].read_text()

    kafka_jars.resolve_jars("9.9.9", cache_dir=tmp_path)
    assert len(calls) == 2  # the failed attempt and the good one; the third call hit the cache


def test_concurrent_resolvers_run_maven_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(kafka_jars, "_run_maven", _fake_maven(calls, pause=0.3))
    results: list[Path] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(kafka_jars.resolve_jars("9.9.9", cache_dir=tmp_path)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert results == [tmp_path / "kafka-9.9.9" / "libs"] * 4


def test_cluster_ids_never_look_like_an_option(monkeypatch):
    import uuid

    from worker.devtools import kafka_broker as local_broker

    ids = iter([uuid.UUID(bytes=b"\xfb" + bytes(15)), uuid.UUID(int=7)])  # the first encodes to "-..."
    monkeypatch.setattr(local_broker.uuid, "uuid4", lambda: next(ids))
    cluster_id = local_broker._new_cluster_id()
    assert not cluster_id.startswith("-") and len(cluster_id) == 22
