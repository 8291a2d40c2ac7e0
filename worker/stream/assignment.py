"""A partition newly assigned: its runner restored from the
newest valid snapshot, its replay floor."""

from __future__ import annotations

from ..logs import get_logger
from .partition import PartitionRunner
from .replay_floor import ReplayFloor, input_end

log = get_logger("olu.worker")


def replay_floor_at(end: int, marked: int | None) -> int:
    """Where a restored partition's replay may publish again: no predecessor published past the
    input's ``end`` (it never read further), nor past its newest release mark (state/marks.py),
    whichever is lower.

    >>> replay_floor_at(300_000, None), replay_floor_at(300_000, 52_000), replay_floor_at(900, 5e4)
    (300000, 52000, 900)
    """
    return end if marked is None else int(min(end, marked))


def restore_partition(consumer, topic: str, partition: int, *, snapshots, settings, model_factory,
                      delta_writer) -> PartitionRunner:
    """The partition's runner, restored; a predecessor's state gets a replay floor (no process
    published past the input's end, so the replay holds its releases below it: replay_floor.py)."""
    runner, restored = PartitionRunner.restore(
        topic, partition, snapshots=snapshots, settings=settings, model_factory=model_factory,
        model_name=settings.model_name or settings.group_id,
        on_corrupt=settings.on_corrupt_snapshot,
        delta_writer=delta_writer)
    if restored is not None:
        runner.replay_floor = ReplayFloor(replay_floor_at(input_end(consumer, topic, partition),
                                                          runner.marked),
                                          {"topic": topic, "partition": partition})
    skipped = [] if restored is None else [{"key": k, "reason": r} for k, r in restored.skipped]
    for entry in skipped:  # on_corrupt_snapshot=fallback: name each object passed over
        log.warning("corrupt snapshot skipped",
                    extra={"topic": topic, "partition": partition, **entry})
    log.info("partition assigned", extra={
        "topic": topic, "partition": partition, "offset": runner.next_offset,
        "replay_floor": runner.replay_floor.floor,
        "snapshot": None if restored is None else restored.offset,
        "deltas": 0 if restored is None else len(restored.deltas),
        "skipped_snapshots": skipped,
    })
    return runner
