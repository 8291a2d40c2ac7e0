"""What the worker's loop records: a batch's outcome, a release, a snapshot and a restore, read
off the partition's runner (:class:`RunnerView`); :class:`Metrics` joins this to the other parts.

These methods read only the runner's ``topic``, ``partition``, ``model`` (``privacy()``, ``t``,
``release_noise_std()``, ``noise_to_signal()``), ``settings``, ``released_version``,
``next_offset`` and ``receipts`` (its pending requests, at each scrape), and of a release its
``trigger``, ``version``, ``noise_std``, ``noise_to_signal`` and ``prequential_loss`` (the quality
figure as of that release: outside the certificate, docs/guarantee.md 2.4).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from ..olu import Model
from ..stream.outcome import Outcome, Release
from .families import MetricFamilies
from .lag import ConsumerLag
from .privacy import PrivacyGauges
from .series import PartitionSeries
from .work import WorkCounters


class RunnerView(Protocol):
    """What the metrics read of a partition's runner
    (``worker.stream.partition.PartitionRunner``)."""

    topic: str
    partition: int
    model: Model  # the engine model (worker.olu.Model)
    settings: Any  # worker.config.settings.Settings, or None
    released_version: int | None
    next_offset: int | None
    receipts: Any  # worker.stream.receipt_book.ReceiptBook: pending and oldest


class Metrics(PrivacyGauges, WorkCounters, ConsumerLag, MetricFamilies):
    """The worker's metrics; ``render()`` gives the Prometheus text exposition."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        self.series = PartitionSeries()

    def remove_partition(self, topic: str, partition: int) -> None:
        """Drop every series labelled with this partition (on revoke or loss)."""
        self.series.remove_partition(topic, partition)

    def record_outcome(self, runner: RunnerView, outcome: Outcome) -> None:
        """Counters and gauges after ``runner.process(batch)``.

        ``outcome.inserts`` (applied) + ``outcome.skipped`` (inserts of ids deleted before they
        arrived) are the insert events; ``outcome.deletes`` the delete events, of which
        ``outcome.tombstones`` were tombstones.
        """
        topic, partition = runner.topic, runner.partition
        skipped = outcome.skipped
        self.count_events(topic, partition, "insert", outcome.inserts + skipped)
        self.count_skipped(topic, partition, "deleted_before_insert", skipped)
        self.count_events(topic, partition, "delete", outcome.deletes - outcome.tombstones)
        self.count_events(topic, partition, "tombstone", outcome.tombstones)
        now = runner.model.t
        for d in outcome.deletions:
            self.record_deletion(topic, partition, d.outcome, d.sigma)
            self.record_request(topic, partition, d, now)
        if outcome.refused:
            self.series.child(self.deletions_refused, topic, partition).inc(outcome.refused)
        for name, count in outcome.clipped.items():
            self.features_clipped.labels(str(topic), name).inc(count)
        self._update_model(runner, privacy=bool(outcome.deletions) or bool(outcome.refused))

    def record_release(self, runner: RunnerView, release: Release) -> None:
        self.count_release(runner.topic, runner.partition, release.trigger, release.version)
        # the figures in the release's value, not the model's now
        self.set_noise(runner.topic, runner.partition, release.noise_std, release.noise_to_signal)
        # the quality figure as of this release, never of a state not yet released
        self.set_model(runner.topic, runner.partition, prequential_loss=release.prequential_loss)

    def record_snapshot(self, runner: RunnerView, kind: str, seconds: float, size: int) -> None:
        self.record_snapshot_success(runner.topic, runner.partition, kind, seconds, size)

    def record_restore(self, runner: RunnerView, seconds: float) -> None:
        """A partition was assigned and restored: its privacy spend and model are exported at
        once, so a worker with nothing left to consume still shows them."""
        self.observe_restore(seconds)
        self.watch_receipts(runner)
        self._update_model(runner, privacy=True)
        self.set_plan(runner.topic, runner.partition, runner.settings)
        model = runner.model
        self.set_noise(runner.topic, runner.partition, model.release_noise_std(),
                       model.noise_to_signal())
        if runner.released_version is None and runner.next_offset is not None:
            version = self.series.child(self.model_version, runner.topic, runner.partition)
            version.set(runner.next_offset)

    def watch_receipts(self, runner: RunnerView) -> None:
        """The partition's pending requests, read off its receipt book at each scrape."""
        book = runner.receipts
        self.series.child(self.requests_pending, runner.topic, runner.partition).set_function(
            lambda: book.pending)
        self.series.child(self.oldest_pending, runner.topic, runner.partition).set_function(
            lambda: book.oldest_age(time.time() * 1000.0))
        if runner.settings is not None:
            self.deletion_deadline.set(runner.settings.deletion_deadline_seconds)

    def _update_model(self, runner: RunnerView, *, privacy: bool) -> None:
        topic, partition, model = runner.topic, runner.partition, runner.model
        known = self.series.privacy_exported(topic, partition)
        # dp-tofw spends with every record learned, not only with deletions.
        if privacy or not known or model.spends_on_learn:
            self.update_privacy(topic, partition, model)
        self.set_model(topic, partition, steps=model.t, version=runner.released_version,
                       applied_records=len(model.index),
                       deletions=model.deletions_applied)
