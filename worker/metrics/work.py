"""The worker's work and state: events consumed and skipped, dead letters, releases and their
delay, snapshots, restores, rebalances and the partitions assigned."""

from __future__ import annotations

import time

from ..wire import RECEIPT_STATUSES, TRIGGERS
from .labels import KINDS, OPS, REBALANCE_TYPES, code


class WorkCounters:
    """The work and state part of :class:`worker.metrics.Metrics`, on its families
    (:class:`~worker.metrics.families.MetricFamilies`) and its ``series``
    (:class:`~worker.metrics.series.PartitionSeries`)."""

    def count_events(self, topic: str, partition: int, op: str, n: int = 1) -> None:
        if n:
            self.series.child(self.events, topic, partition, code(op, OPS)).inc(n)

    def count_skipped(self, topic: str, partition: int, reason: str, n: int = 1) -> None:
        if n:
            self.series.child(self.events_skipped, topic, partition, code(reason)).inc(n)

    def record_dead_letter(self, topic: str, reason: str) -> None:
        # Topic-level only (no partition label): dead letters are rare and alerting is per topic.
        self.dead_letters.labels(str(topic), code(reason)).inc()

    def count_release(self, topic: str, partition: int, trigger: str,
                      version: int | None = None) -> None:
        self.series.child(self.releases, topic, partition, code(trigger, TRIGGERS)).inc()
        if version is not None:
            self.series.child(self.model_version, topic, partition).set(version)

    def count_receipt(self, topic: str, partition: int, status: str) -> None:
        self.series.child(self.receipts, topic, partition, code(status, RECEIPT_STATUSES)).inc()

    def observe_delete_to_release(self, seconds: float) -> None:
        self.delete_to_release.observe(max(0.0, seconds))

    def record_snapshot_success(self, topic: str, partition: int, kind: str, seconds: float,
                                size: int) -> None:
        kind = code(kind, KINDS)
        self.snapshot_duration.labels(kind).observe(max(0.0, seconds))
        self.snapshot_bytes.labels(kind).set(size)
        if kind == "full":
            now = time.time()
            self.series.child(self.snapshot_last_success, topic, partition).set(now)
            age = self.series.child(self.snapshot_age, topic, partition)
            age.set_function(lambda at=now: max(0.0, time.time() - at))

    def snapshot_failure(self, kind: str) -> None:
        self.snapshot_failures.labels(code(kind, KINDS)).inc()

    def observe_restore(self, seconds: float) -> None:
        self.restore_duration.observe(max(0.0, seconds))

    def rebalance(self, type_: str) -> None:
        self.rebalances.labels(code(type_, REBALANCE_TYPES)).inc()

    def set_assigned(self, n: int) -> None:
        self.assigned_partitions.set(n)
