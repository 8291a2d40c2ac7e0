"""Full snapshots written off the loop thread, and the offset commits that follow them.

A snapshot is captured on the loop thread (``PartitionRunner.begin_snapshot``), written on one
writer thread, and finished on the loop thread once durable; only then is the group offset
committed up to it, never further (invariant 1). Transactional mode commits offsets inside its
transactions instead (exactly_once.py).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from confluent_kafka import KafkaException, TopicPartition

from ..logs import get_logger
from ..state.exceptions import StorageUnavailable

log = get_logger("olu.worker")

# Longest wait for a synchronous offset commit (revoke, shutdown) before going on without it.
SYNC_COMMIT_TIMEOUT_S = 5.0


def finished_within(call, seconds: float, name: str) -> bool:
    """Run a blocking client call on a daemon thread; False if it has not returned in ``seconds``
    (librdkafka's synchronous commit and close never return while no broker answers)."""
    thread = threading.Thread(target=call, name=name, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def durable_offsets(runners) -> list[TopicPartition]:
    """Each runner's next offset covered by a durable full snapshot: never commit past it."""
    return [TopicPartition(r.topic, r.partition, r.snapshot_offset) for r in runners
            if r.snapshot_offset is not None]


class Checkpoints:
    """The snapshots in flight (one writer thread) and the commits after them. ``consumer`` is
    set at start."""

    def __init__(self, metrics, *, bytes_per_second: float, upload_spread: float,
                 transactional: bool):
        self.metrics = metrics
        self.bytes_per_second, self.upload_spread = bytes_per_second, upload_spread
        self.transactional = transactional
        self.consumer = None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="olu-snapshot")
        self._writing: dict[tuple[str, int], tuple[object, object, float, Future]] = {}

    @classmethod
    def from_settings(cls, settings, metrics) -> Checkpoints:
        return cls(metrics, bytes_per_second=settings.snapshot_max_bytes_per_second,
                   upload_spread=settings.snapshot_upload_spread,
                   transactional=settings.transactional)

    def writing(self, key: tuple[str, int]) -> bool:
        return key in self._writing

    def forget(self, key: tuple[str, int]) -> None:
        """Drop the partition's snapshot in flight from view (lost: another member owns it)."""
        self._writing.pop(key, None)

    def start(self, runner) -> None:
        """Capture the state now (loop thread; its deltas settled, its output flushed), write it
        in the background; :meth:`collect` commits once it is durable."""
        pending = runner.begin_snapshot()
        future = self._writer.submit(runner.write_snapshot, pending, self.bytes_per_second,
                                     self.upload_spread)
        self._writing[(runner.topic, runner.partition)] = (
            runner, pending, time.monotonic(), future)

    def collect(self, keys=None, timeout: float = 0.0) -> None:
        """Finish written snapshots (those of ``keys`` only,
        waiting up to ``timeout``), then commit."""
        done = []
        for key in list(self._writing if keys is None else keys):
            entry = self._writing.get(key)
            if entry is None:
                continue
            runner, pending, started, future = entry
            try:
                ref = future.result(timeout=timeout) if timeout else (
                    future.result() if future.done() else None)
            except TimeoutError:
                ref = None
            except StorageUnavailable as exc:
                del self._writing[key]
                runner.finish_snapshot(pending, durable=False)
                self.failed(runner, exc)
                continue
            if ref is None:
                continue
            del self._writing[key]
            runner.finish_snapshot(pending, durable=True)
            self.metrics.record_snapshot(runner, "full", time.monotonic() - started, ref.size)
            done.append(runner)
        self.commit(done, asynchronous=True)

    def failed(self, runner, exc: Exception) -> None:
        self.metrics.snapshot_failure("full")
        log.warning("snapshot failed", extra={"topic": runner.topic, "partition": runner.partition,
                                              "error": str(exc)})

    def snapshot_and_commit(self, runner) -> bool:
        """Synchronous snapshot and commit (revoke and shutdown: its output flushed already)."""
        started = time.monotonic()
        try:
            ref = runner.snapshot()
        except StorageUnavailable as exc:
            self.failed(runner, exc)
            return False
        self.metrics.record_snapshot(runner, "full", time.monotonic() - started, ref.size)
        self.commit([runner])
        return True

    def commit(self, runners, asynchronous: bool = False) -> None:
        """Commit up to each runner's durable snapshot. In the steady state asynchronously (a
        synchronous commit held the loop, and every deletion behind it, for up to 140 ms); on
        revoke and shutdown synchronously, before the partition is handed over, but waiting at
        most SYNC_COMMIT_TIMEOUT_S: with the brokers down librdkafka's synchronous commit never
        returns, and a shutdown stuck there outlives its grace period. Giving up loses nothing:
        the next owner restores the same snapshot and seeks to its offset; the group offset is
        only a lag gauge."""
        offsets = durable_offsets(runners)
        if not offsets or self.transactional:
            return  # transactional mode commits offsets inside the transaction

        def commit():
            try:
                self.consumer.commit(offsets=offsets, asynchronous=asynchronous)
            except KafkaException as exc:
                log.warning("offset commit failed", extra={"error": str(exc)})
            except RuntimeError as exc:
                # given up on, still running when shutdown closed the consumer
                log.info("offset commit abandoned at shutdown", extra={"error": str(exc)})

        if asynchronous:
            commit()
        elif not finished_within(commit, SYNC_COMMIT_TIMEOUT_S, "olu-commit"):
            log.warning("offset commit unanswered; going on without it (the snapshot is durable)",
                        extra={"seconds": SYNC_COMMIT_TIMEOUT_S,
                               "partitions": [f"{o.topic}/{o.partition}" for o in offsets]})

    @staticmethod
    def on_commit(err, partitions) -> None:
        """Result of an asynchronous commit (served by consume/poll): a failure is only logged, the
        next snapshot's commit covers the same offsets and more."""
        failed = [p for p in partitions or () if p.error is not None]
        if err is not None or failed:
            log.warning("offset commit failed", extra={
                "error": str(err) if err is not None else str(failed[0].error),
                "partitions": [f"{p.topic}/{p.partition}" for p in failed]})

    def shutdown(self) -> None:
        self._writer.shutdown(wait=True)
