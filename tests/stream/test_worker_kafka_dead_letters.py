"""Large poison records on the real broker: the dead letter is the original record, whole.

The input topic here accepts records of several MB (max.message.bytes = 10 MB). Such a record is
``oversized`` for the worker (OLU_MAX_RECORD_BYTES, 1 MiB by default) and used to be cut to a
64 KiB prefix because the worker's producer kept librdkafka's 1,000,000-byte limit. Now it goes to
the dead-letter topic byte for byte when that topic takes it; when the topic cannot (its own
max.message.bytes is smaller), the dead letter is cut to the documented prefix and the header
``olu.truncated`` says so, and the partition goes on: the refusal never becomes a poison pill, in
a transaction neither (where a refusal would abort the transaction and come back on every replay).
"""

from __future__ import annotations

import os
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.infra.schema_samples import decode_headers, validate
from tests.stream.kafka_harness import (
    Topics,
    WorkerProcess,
    covered,
    end_offsets,
    event_stream,
    read_topic,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.kafka

TEN_MB = 10_000_000
PREFIX = 65_536
ORIGINAL_HEADERS = [("traceparent", b"00-0af7651916cd43dd-01")]


def _topics(kafka_topic, dlq_max_bytes: int) -> Topics:
    return Topics(kafka_topic(partitions=1, max_message_bytes=TEN_MB), kafka_topic(partitions=1),
                  kafka_topic(partitions=1, max_message_bytes=dlq_max_bytes), 1)


def _poison(label: str, size: int) -> tuple[bytes, bytes]:
    """Random bytes (not UTF-8 for sure): any change to them would show."""
    return f"{label}-{uuid.uuid4().hex[:6]}".encode(), b"\xff" + os.urandom(size - 1)


def _produce(bootstrap: str, topic: str, records) -> None:
    """(key, value, headers) records in order, allowing records up to 10 MB."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "message.max.bytes": TEN_MB,
                         "log_level": 3})
    errors = []
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(60) == 0 and not errors, errors


def _valid(n: int, seed: int) -> list:
    return [(key, value, None) for key, value, kind in event_stream(n, seed=seed, delete_rate=0.0)]


def _dead_letters(bootstrap: str, topic: str) -> dict[bytes, tuple[object, dict]]:
    """By the original key's first bytes: (record, decoded headers), each validated."""
    out = {}
    for rec in read_topic(bootstrap, topic, timeout=60):
        headers = decode_headers(list(rec.headers.items()))
        validate("dead-letter", headers)
        out[rec.key] = (rec, headers)
    return out


def _set_topic_limit(bootstrap: str, topic: str, max_bytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(max_bytes), incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def test_a_multi_mb_poison_record_reaches_the_dead_letter_topic_byte_for_byte(kafka_bootstrap, kafka_topic,
                                                                             tmp_path):
    topics = _topics(kafka_topic, dlq_max_bytes=TEN_MB)
    env = worker_env(kafka_bootstrap, topics, f"dlq-{uuid.uuid4().hex[:8]}", f"file://{tmp_path}/state")
    whole_key, whole_value = _poison("whole", 4_800_000)
    cut_key, cut_value = _poison("cut", 3_000_000)
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        worker.start()
        worker.wait_assigned({0})
        _produce(kafka_bootstrap, topics.input,
                 _valid(50, 1) + [(whole_key, whole_value, ORIGINAL_HEADERS)] + _valid(50, 2))
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 60,
                 "the worker past the 4.8 MB record", interval=0.3)
        # The topic's limit drops below the next one (whether the worker still believes the old
        # limit or has asked again, the broker must not see the record whole).
        _set_topic_limit(kafka_bootstrap, topics.dlq, 200_000)
        _produce(kafka_bootstrap, topics.input, [(cut_key, cut_value, ORIGINAL_HEADERS)] + _valid(50, 3))
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 60,
                 "the worker past the 3 MB record", interval=0.3)
        worker.check_alive()
        assert worker.metric_sum("olu_dead_letters_total", reason="oversized") == 2
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        worker.cleanup()

    dead = _dead_letters(kafka_bootstrap, topics.dlq)
    assert len(dead) == 2
    rec, headers = dead[whole_key]
    assert rec.value == whole_value  # 4.8 MB, byte for byte
    assert headers["olu.error.reason"] == "oversized" and "olu.truncated" not in headers
    assert headers["traceparent"] == ORIGINAL_HEADERS[0][1].decode()  # the original headers, carried over
    rec, headers = dead[cut_key]
    assert rec.value == cut_value[:PREFIX]
    assert headers["olu.truncated"] == str(len(cut_key) + len(cut_value))
    assert headers["olu.error.reason"] == "oversized" and headers["olu.error.detail"].startswith("[truncated:")
    assert "traceparent" not in headers
    assert headers["olu.source.offset"] == "101"


def test_a_transactional_worker_cuts_what_its_dead_letter_topic_cannot_take(kafka_bootstrap, kafka_topic,
                                                                            tmp_path):
    topics = _topics(kafka_topic, dlq_max_bytes=300_000)
    group = f"dlq-tx-{uuid.uuid4().hex[:8]}"
    env = worker_env(kafka_bootstrap, topics, group, f"file://{tmp_path}/state",
                     OLU_TRANSACTIONAL="true", OLU_TRANSACTIONAL_ID=f"{group}-0")
    key, value = _poison("tx", 2_000_000)
    fits_key, fits_value = _poison("fits", 250_000)  # not UTF-8: a dead letter the topic takes whole
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        worker.start()
        worker.wait_assigned({0})
        _produce(kafka_bootstrap, topics.input, _valid(40, 4) + [(key, value, None)] + _valid(40, 5)
                 + [(fits_key, fits_value, None)] + _valid(40, 6))
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 60,
                 "the worker past both records", interval=0.3)
        worker.check_alive()
        assert not worker.log_lines("worker failed", all_runs=True)
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        worker.cleanup()

    dead = _dead_letters(kafka_bootstrap, topics.dlq)  # read_committed
    assert len(dead) == 2
    rec, headers = dead[key]
    assert rec.value == value[:PREFIX] and headers["olu.truncated"] == str(len(key) + len(value))
    rec, headers = dead[fits_key]
    assert rec.value == fits_value and "olu.truncated" not in headers
