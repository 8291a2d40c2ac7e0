"""The lag gauges of newly assigned partitions, read from the broker at assignment."""

from __future__ import annotations

import time

from confluent_kafka import KafkaException, TopicPartition

from ..logs import get_logger

log = get_logger("olu.worker")

#: Longest wait at assignment for the offsets the lag gauges start from.
LAG_QUERY_TIMEOUT_S = 5.0


def export_lag(metrics, consumer, runners, committed=None) -> None:
    """Both lag gauges from the restored offsets: librdkafka's statistics know neither until
    this worker has consumed (application offset) and committed (committed offset), so a
    restarted worker with nothing left to consume would never export them. ``committed``: the
    group's offsets by (topic, partition) when already read, else they are asked for here."""
    deadline = time.monotonic() + LAG_QUERY_TIMEOUT_S
    try:
        if committed is None:
            committed = {(tp.topic, tp.partition): tp for tp in consumer.committed(
                [TopicPartition(r.topic, r.partition) for r in runners],
                timeout=LAG_QUERY_TIMEOUT_S)}
        for r in runners:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            # the last stable offset (read_committed): what librdkafka's own lag is measured to
            _, end = consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition),
                                                    timeout=remaining,
                                                    cached=False)
            tp = committed.get((r.topic, r.partition))
            done, position = (tp.offset if tp is not None else -1), r.next_offset or 0
            metrics.set_lag(r.topic, r.partition, committed=end - done if done >= 0 else None,
                        processing=max(0, end - position) if end >= 0 else None)
    except KafkaException as exc:  # only the gauges wait for the statistics then
        log.warning("consumer lag unknown at assignment", extra={"error": str(exc)})
