"""``olu-worker plan --from-topic N``: the last ``N``
records of the input topic as the plan's sample.

The records are read with ``run``'s connection settings (bootstrap servers, ``OLU_KAFKA_*``, the
input format and its Schema Registry) by a consumer of a group of its own that commits nothing, and
decoded by the worker's own decoder (worker/stream/input/decode.py, worker/stream/input/framed.py),
so the sample is what the worker would see: inserts (under a softmax over string classes, naming
their class), deletes and tombstones, with their keys. Records the worker would dead-letter are
counted and left out. Partitions are read from ``end - N / P`` each and merged by Kafka timestamp (a
subject's records share a partition, so each one's order holds).
"""

from __future__ import annotations

import math
import time
import uuid

from ..kafka_log import client_logger
from .exceptions import PlanError
from .target import classes_of

__all__ = ["read_topic_records"]

READ_TIMEOUT_S = 60.0


def read_topic_records(settings, count: int) -> tuple[list[tuple[str, bytes, dict | None]], int]:
    """((where, key, event or None for a tombstone) in stream order, records left out)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    topic = settings.input_topics[0]
    conf = {**settings.consumer_config(), "group.id": f"olu-plan-{uuid.uuid4().hex[:12]}",
            "enable.partition.eof": True, "logger": client_logger()}
    consumer = Consumer(conf)
    try:
        try:
            meta = consumer.list_topics(topic, timeout=15).topics.get(topic)
        except KafkaException as exc:
            raise PlanError(
                f"--from-topic: no answer from the Kafka broker at {settings.bootstrap_servers} "
                f"({exc.args[0].str()})") from None
        if meta is None or meta.error is not None or not meta.partitions:
            raise PlanError(
                f"--from-topic: topic {topic!r} not found on {settings.bootstrap_servers}")
        per = math.ceil(count / len(meta.partitions))
        starts = []
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
            if high > low:
                starts.append(TopicPartition(topic, p, max(low, high - per)))
        if not starts:
            raise PlanError(f"--from-topic: topic {topic!r} is empty")
        consumer.assign(starts)
        messages = _fetch(consumer, {tp.partition for tp in starts})
    finally:
        consumer.close()
    return _decoded(settings, messages)


def _fetch(consumer, pending: set[int]) -> list:
    from confluent_kafka import KafkaError

    out = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    while pending:
        if time.monotonic() > deadline:
            raise PlanError(
                f"--from-topic: the topic was not read to its end within {READ_TIMEOUT_S:.0f} s")
        for msg in consumer.consume(1000, timeout=0.5):
            if msg.error() is None:
                out.append(msg)
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                pending.discard(msg.partition())
            else:
                raise PlanError(f"--from-topic: {msg.error().str()}")
    return sorted(out, key=lambda m: (m.timestamp()[1], m.partition(), m.offset()))


def _decoded(settings, messages: list) -> tuple[list[tuple[str, bytes, dict | None]], int]:
    from ..stream.exceptions import DeadLetter
    from ..stream.input.decode import Insert
    from ..stream.input.framed import RegistryInput, decode_message, original

    classes = classes_of(settings) if settings.loss == "softmax" else None
    # inserts name their class, as the worker reads them
    labels = bool(classes) and type(classes[0]) is str
    registry = RegistryInput.from_settings(settings)
    if registry is not None:
        from ..formats.input import transcode

        messages, stop, error = transcode(registry.decoder, messages)
        if error is not None:
            raise PlanError(
                f"--from-topic: the Schema Registry could not decode the records ({error})")
    records, left_out = [], 0
    for msg in messages:
        try:
            event = decode_message(msg, dim=settings.dim, max_bytes=settings.max_record_bytes,
                                   features=settings.feature_spec, labels=labels)
        except DeadLetter:
            left_out += 1
            continue
        src = original(msg)
        where = f"record {src.topic()}/{src.partition()}@{src.offset()}"
        if isinstance(event, Insert):
            records.append(
                (where, msg.key(), {"op": "insert", "id": event.id, "x": event.x, "y": event.y}))
        elif event.tombstone:
            records.append((where, msg.key(), None))
        elif event.subject is not None:
            records.append((where, msg.key(), {"op": "delete", "subject": event.subject}))
        else:
            records.append((where, msg.key(), {"op": "delete", "ids": list(event.ids)}))
    return records, left_out
