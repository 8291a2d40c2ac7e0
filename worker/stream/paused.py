"""Partitions paused on a deletion delta that could not be stored, and their retries.

Invariant 2: nothing of the state after a deletion is published before its post-noise state is
durable. A partition whose delta write failed stops where it is (the consumer paused and sought
back, so what was fetched past it comes again on resume) and its delta is retried every second;
once stored, the releases it held are handed back and the partition resumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import TopicPartition

from ..logs import get_logger
from ..state.exceptions import SnapshotConflict, StorageUnavailable

log = get_logger("olu.worker")

RETRY_EVERY_S = 1.0


@dataclass
class Retried:
    """A paused partition's delta stored at last: its ``releases`` may go out (``conflict``: another
    member stored this partition's deletion first, it owns the partition now)."""

    runner: object
    releases: list = field(default_factory=list)
    conflict: SnapshotConflict | None = None


class PausedPartitions:
    """The partitions paused on a delta; ``consumer`` is set at start."""

    def __init__(self, metrics):
        self.metrics = metrics
        self.consumer = None
        self.keys: set[tuple[str, int]] = set()
        self._retry_at: dict[tuple[str, int], float] = {}

    def pause(self, runner) -> None:
        """Stop ``runner``'s partition where it is until its delta is durable."""
        key = (runner.topic, runner.partition)
        if key in self.keys:
            return
        self.keys.add(key)
        tp = TopicPartition(runner.topic, runner.partition, runner.next_offset)
        self.consumer.pause([tp])
        self.consumer.seek(tp)  # messages fetched past this point are fetched again on resume
        self.metrics.snapshot_failure("delta")
        log.warning("deletion delta not durable; partition paused",
                    extra={"topic": runner.topic, "partition": runner.partition,
                           "offset": runner.next_offset})

    def forget(self, key: tuple[str, int]) -> None:
        self.keys.discard(key)
        self._retry_at.pop(key, None)

    def retry(self, runners: dict, now: float) -> list[Retried]:
        """Retry the deltas of the blocked runners whose time has come; those stored (or lost to a
        conflict) come back, the stored ones resumed."""
        out = []
        for key, runner in list(runners.items()):
            if not runner.blocked or now < self._retry_at.get(key, 0.0):
                continue
            try:
                releases = runner.retry_durable()
            except StorageUnavailable:
                self.metrics.snapshot_failure("delta")
                self._retry_at[key] = now + RETRY_EVERY_S
                continue
            except SnapshotConflict as exc:
                out.append(Retried(runner, conflict=exc))
                continue
            self._retry_at.pop(key, None)
            self.keys.discard(key)
            self.consumer.resume([TopicPartition(runner.topic, runner.partition)])
            log.info("deletion delta stored after retry; partition resumed",
                     extra={"topic": runner.topic, "partition": runner.partition})
            out.append(Retried(runner, releases))
        return out
