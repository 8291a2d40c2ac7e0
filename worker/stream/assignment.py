"""A partition newly assigned: its runner restored from the
newest valid snapshot, its replay floor."""

from __future__ import annotations

from ..logs import get_logger
from .partition import PartitionRunner
from .replay_floor import ReplayFloor, input_end

log = get_logger("olu.worker")


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
        runner.replay_floor = ReplayFloor(input_end(consumer, topic, partition),
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
