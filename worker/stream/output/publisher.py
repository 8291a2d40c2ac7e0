"""Producing a partition's output: its releases to the params topic, its dead letters to the DLQ.

Each output is produced once: a replay after a crash skips what an earlier process committed
(transactional mode, exactly_once.py), and under at-least-once an output waits while the
member's lease is broken (ownership.py). A delivery failure is kept, and raised by
:meth:`Publisher.check` at the start of the next round: the worker stops and the successor
replays the output from the last snapshot.
"""

from __future__ import annotations

import time
from collections import defaultdict

from ... import __version__
from ...kafka_log import client_logger
from ...wire import WORKER_VERSION_HEADER
from ..exceptions import DeliveryFailed
from ..input.framed import original
from .dlq import DeadLetters, TopicLimit


class Publisher:
    """The worker's producer side. ``producer`` and ``release_encoder`` are set at start."""

    def __init__(self, settings, metrics, fence, summary: defaultdict):
        self.params_topic = settings.params_topic
        self.receipts_topic = settings.receipts_topic
        self.transactional = settings.transactional
        self.metrics, self.fence, self.summary = metrics, fence, summary
        self.producer = None
        self.release_encoder = None  # OLU_RELEASE_FORMAT avro / json-schema; None: JSON releases
        self.receipt_encoder = None  # receipts in the releases' format; None: JSON
        self.delivery_error: str | None = None
        self.latest_release: dict[tuple[str, int], object] = {}  # for the demo's terminal view
        limit = TopicLimit({**settings.admin_config(), "logger": client_logger()},
                           settings.dlq_topic)
        self._dead_letters = DeadLetters(settings.dlq_topic, limit,
                                         transactional=settings.transactional)

    def check(self) -> None:
        """Raise the first delivery failure met (the worker must stop and replay the output)."""
        if self.delivery_error:
            raise DeliveryFailed(self.delivery_error)

    def flush(self, timeout: float) -> bool:
        """True when everything produced so far is delivered; raises a delivery failure."""
        remaining = self.producer.flush(timeout)
        self.check()
        return remaining == 0

    def _fenced(self, runner, produce) -> bool:
        """True if an output of ``runner`` must wait for the coordinator (ownership.py)."""
        return self.fence is not None and self.fence.holding((runner, produce))

    def _failed(self, runner, failure: str) -> None:
        """A delivery failure, unless its partition was lost since (the successor publishes it) or
        the lease is broken and the coordinator will decide (ownership.py)."""
        if self.fence is None or not self.fence.undelivered(runner.lost, failure):
            self.delivery_error = failure

    def release(self, runner, release) -> None:
        if self._fenced(runner, lambda: self.release(runner, release)):
            return
        committed = runner.committed_output
        receipts = release.receipts
        if committed is not None:
            # A receipt rides with the first release at or above its version, in its transaction:
            # one whose version a committed release covers was committed with that release.
            sent = [r for r in receipts if committed.has_release(r.version)]
            for made in sent:
                runner.receipts.delivered(made)
            receipts = [r for r in receipts if not committed.has_release(r.version)]
        if committed is not None and committed.has_release(release.version):
            self.summary["releases_already_committed"] += 1  # replay after a crash: published once
            return
        started = release.deletion_started
        behind = receipts and not self.transactional  # produced once the release is delivered

        def delivered(err, _msg):
            if err is not None:
                self._failed(runner,
                             f"release {runner.topic}/{runner.partition}@{release.version}: {err}")
                return
            if started is not None:
                self.metrics.observe_delete_to_release(time.monotonic() - started)
            if behind:
                self._produce_receipts(runner, receipts)

        value = (release.value if self.release_encoder is None
                 else self.release_encoder.encode(release.value))
        self.producer.produce(self.params_topic, key=release.key, value=value,
                              headers=release.headers,
                              on_delivery=delivered)
        runner.published_version = release.version
        if receipts and self.transactional:  # one transaction: never visible before the release
            self._produce_receipts(runner, receipts)
        self.metrics.record_release(runner, release)
        self.summary["releases"] += 1
        self.latest_release[(runner.topic, runner.partition)] = release

    def receipts(self, runner, receipts: list) -> None:
        """Receipts that wait for no release (nothing to unlearn, refused), in input order."""
        if self._fenced(runner, lambda: self.receipts(runner, receipts)):
            return
        committed = runner.committed_output
        if committed is not None:  # a replay after a crash: those at committed offsets were sent
            for made in [r for r in receipts if committed.has_dead_letter(r.offset)]:
                runner.receipts.delivered(made)
            receipts = [r for r in receipts if not committed.has_dead_letter(r.offset)]
        self._produce_receipts(runner, receipts)

    def _produce_receipts(self, runner, receipts: list) -> None:
        for made in receipts:
            def delivered(err, _msg, made=made):
                if err is not None:
                    self._failed(runner, f"receipt {made.key.decode()!r} of {runner.topic}/"
                                         f"{runner.partition}@{made.offset}: {err}")
                else:
                    runner.receipts.delivered(made)

            value = (made.value if self.receipt_encoder is None
                     else self.receipt_encoder.encode(made.value))
            self.producer.produce(self.receipts_topic, key=made.key, value=value,
                                  headers=[(WORKER_VERSION_HEADER, __version__.encode())],
                                  on_delivery=delivered)
            self.metrics.count_receipt(runner.topic, runner.partition, made.status)
        self.summary["receipts"] += len(receipts)

    def dead_letter(self, runner, dead) -> None:
        if self._fenced(runner, lambda: self.dead_letter(runner, dead)):
            return
        msg = original(dead.message)
        committed = runner.committed_output
        if committed is not None and committed.has_dead_letter(msg.offset()):
            self.summary["dead_letters_already_committed"] += 1  # replay after a crash: sent once
            return

        def failed(err):
            self._failed(runner,
                         f"dead letter {msg.topic()}/{msg.partition()}@{msg.offset()}: {err}")

        self._dead_letters.publish(self.producer, msg, dead.reason, dead.detail, failed)
        self.metrics.record_dead_letter(msg.topic(), dead.reason)
        self.summary["dead_letters"] += 1
