"""A restarted partition publishes nothing older than what its predecessor may have published.

A release's version is the input position it follows. A dead process published versions up to
the position it had reached, never past the end of its input partition; its successor replays from
an older snapshot, and its poll batches are cut differently, so its releases (a poll batch's
coalesced deletion release, an interval release) can land on versions the dead process never
published, below ones it did. A reader that keeps the last record of a key (a log-compacted
parameter topic, a plain consumer) would then hold a state from before deletions already released.

So on assignment of a partition with stored state (a snapshot or deltas) the worker reads the input
partition's end (the floor): no process can have published past it. Until the replay reaches it,
every release is held back, and the strongest one held (a deletion's, else the latest) is made
once, at the first poll batch that reaches the floor:
its version is at or above every version the dead process published, and its state includes every
deletion the held ones did. A repeat of the newest version is possible (the dead process stopped at
the floor and released there), and byte-identical: everything before it is deterministic and every
deletion adopts its stored noise (docs/worker.md 4.3, 5.4).

Why the input's end and not the parameter topic's last record for the key: reading that needs the
key's partition of the parameter topic (any partitioner), a decoder for every release format, and a
bounded scan back over other partitions' releases; the end offset is one metadata request, exact
in every delivery mode. What it costs: until the position reaches the floor nothing is published
(those releases would repeat or go back), backlog included, and the deletions met on the way are
released together there. So the floor is the lower of the input's end and the predecessor's
newest release mark (worker/state/marks.py: no release ever passes it), which stops a backlog's
deletions from waiting for the whole catch-up (worker/stream/assignment.py).

A partition with no stored state starts without a floor: a first start on a backlog publishes as
it goes. Its predecessor, if any, died before storing anything of the partition, so each of its
releases showed a state without deletions (a deletion's delta is stored before its release); a
replay may publish such versions again below the newest, never a state from before a deletion.

>>> floor = ReplayFloor(100)
>>> floor.holds(40), floor.holds(100)
(True, False)
>>> floor.hold("deletion", 1.0, False); floor.hold("events", None, False)
>>> floor.due(99) is None, floor.due(120)
(True, ('deletion', 1.0, False))
>>> floor.holds(50), floor.due(130)
(False, None)
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaException, TopicPartition

from ..logs import get_logger
from ..wire import TRIGGER_DELETION
from .exceptions import ReplayFloorUnknown

log = get_logger("olu.partition")

#: How long an assignment may ask the broker for an input partition's end before the worker stops.
FLOOR_QUERY_TIMEOUT_S = 30.0


def input_end(consumer, topic: str, partition: int, timeout: float = FLOOR_QUERY_TIMEOUT_S) -> int:
    """The input partition's end offset, asked of the broker (never librdkafka's cached value)."""
    deadline = time.monotonic() + timeout
    while True:
        error = None
        try:
            got = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5.0,
                                                 cached=False)
            if got is not None:
                return int(got[1])
        except KafkaException as exc:
            error = exc
        if time.monotonic() >= deadline:
            raise ReplayFloorUnknown(
                f"{topic}/{partition}: end offset unknown after {timeout:.0f} s ({error})")
        time.sleep(0.2)


class ReplayFloor:
    """The version below which a replaying partition holds its releases (None: nothing held)."""

    __slots__ = ("count", "floor", "held", "where")

    def __init__(self, floor: int | None = None, where: dict | None = None):
        self.floor, self.where = floor, where or {}  # where: the partition, for the log
        # (trigger, deletion started, retrained)
        self.held: tuple[str, float | None, bool] | None = None
        self.count = 0  # releases held back

    def holds(self, version: int | None) -> bool:
        return self.floor is not None and version is not None and version < self.floor

    def hold(self, trigger: str, deletion_started: float | None, retrained: bool) -> None:
        """Keep the strongest release held: a deletion's (its first start time; retrained if any
        was), else the latest."""
        self.count += 1
        held = self.held
        if held is not None and held[0] == TRIGGER_DELETION:
            if trigger == TRIGGER_DELETION:
                self.held = (TRIGGER_DELETION, held[1] if held[1] is not None else deletion_started,
                             held[2] or retrained)
            return
        self.held = (trigger, deletion_started, retrained)

    def due(self, position: int | None) -> tuple[str, float | None, bool] | None:
        """Once ``position`` reaches the floor: the release to
        make now (None: none), and no floor."""
        if self.floor is None or position is None or position < self.floor:
            return None
        held, floor, self.floor, self.held = self.held, self.floor, None, None
        if self.count:
            log.info("replay reached its floor; held releases made as one", extra={
                **self.where, "floor": floor, "position": position, "held": self.count,
                "trigger": held[0] if held else None})
        return held
