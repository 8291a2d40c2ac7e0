"""Consumer lag per partition: from the offsets the worker asks for itself, and from librdkafka's
statistics as they arrive."""

from __future__ import annotations

import orjson


def _known_count(value) -> bool:
    """A known, non-negative number in librdkafka statistics (-1 and -1001 mean unknown)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


class ConsumerLag:
    """The lag part of :class:`worker.metrics.Metrics`, on its families
    (:class:`~worker.metrics.families.MetricFamilies`) and its ``series``
    (:class:`~worker.metrics.series.PartitionSeries`)."""

    def set_lag(self, topic: str, partition: int, *, committed: int | None,
                processing: int | None) -> None:
        """Both lags, from offsets the worker asked for itself (at assignment: librdkafka's
        statistics know neither until the worker consumes and commits)."""
        if committed is not None and committed >= 0:
            self.series.child(self.consumer_lag, topic, partition).set(committed)
        if processing is not None and processing >= 0:
            self.series.child(self.consumer_processing_lag, topic, partition).set(processing)

    def update_from_stats(self, stats_json: str | bytes) -> int:
        """Consumer lag from librdkafka's statistics JSON (``stats_cb``); returns the lags set.

        Reads ``topics -> {topic} -> partitions -> {p}``: ``consumer_lag`` (the group lag against
        the committed offset, -1 until the first commit) into ``olu_consumer_lag``, and
        ``ls_offset - app_offset`` (what the worker has not received yet) into
        ``olu_consumer_processing_lag``. Skips the internal partition -1, unknown (negative)
        values, and partitions the consumer does not want (``desired`` false: their series are
        dropped). Never raises: it runs inside ``poll()``.
        """
        try:
            stats = orjson.loads(stats_json)
            topics = stats.get("topics") or {}
        except (orjson.JSONDecodeError, TypeError, AttributeError):
            return 0
        updated = 0
        for topic, tstats in topics.items() if isinstance(topics, dict) else ():
            partitions = tstats.get("partitions") if isinstance(tstats, dict) else None
            for pstats in (partitions or {}).values() if isinstance(partitions, dict) else ():
                try:
                    partition = int(pstats["partition"])
                    lag = pstats.get("consumer_lag", -1)
                except (KeyError, TypeError, ValueError, AttributeError):
                    continue
                if partition < 0:
                    continue
                if pstats.get("desired") is False:
                    for gauge in (self.consumer_lag, self.consumer_processing_lag):
                        self.series.drop(gauge, topic, partition)
                    continue
                if _known_count(lag):
                    self.series.child(self.consumer_lag, topic, partition).set(lag)
                    updated += 1
                end, position = pstats.get("ls_offset"), pstats.get("app_offset")
                if _known_count(end) and _known_count(position):
                    behind = max(0, end - position)
                    self.series.child(self.consumer_processing_lag, topic, partition).set(behind)
        return updated
