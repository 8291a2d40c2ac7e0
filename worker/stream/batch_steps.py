"""A decoded poll batch read for the engine: its steps, and each insert stretch's newest Kafka
timestamp (the event time the runner records after the stretch)."""

from __future__ import annotations

import numpy as np

from ..olu import Forget, Learn, SparseRows, record_key
from .input.batch import DecodedBatch
from .input.decode import Delete, Insert
from .stored_forms import post_state


def engine_steps(batch: DecodedBatch, replay_deltas: dict, settings) -> list:
    """The batch as the engine's steps: a stretch of inserts each, a deletion request each (with
    the post-noise state an earlier process stored for it, taken out of ``replay_deltas``, and
    whether its release follows it: the batch's last possible delete releases for all of them,
    docs/worker.md 3.4)."""
    steps, each = [], settings.deletion_releases == "each"
    for start, stop, accepted in batch.stretches:
        if accepted:
            run = batch.runs.get(start)  # the Python decoder's; None: the scan's columns
            steps.append(Learn(start, stop) if run is None
                         else Learn(start, stop, run.X, run.y, run.ids, run.keys))
            continue
        for j in range(start, stop):
            event = batch.events[j]
            if isinstance(event, Insert):  # not expected (the runs mirror decode_event), never lost
                row = (SparseRows.from_rows([event.x]) if settings.sparse_input
                       else np.array([event.x]))
                # a class name as the label, or a number
                label = np.array([event.y], object if isinstance(event.y, str) else np.float64)
                steps.append(Learn(j, j + 1, row, label, [event.id]))
            elif isinstance(event, Delete):
                stored = replay_deltas.pop(batch.messages[j].offset() + 1, None)
                subject = None if event.subject is None else record_key(event.subject)
                steps.append(Forget(j, tuple(event.ids), batch.keys.get(j),
                                    None if stored is None else post_state(stored),
                                    publish=each or j >= batch.last_candidate, subject=subject))
    return steps


class NewestStamps:
    """The newest Kafka timestamp of an insert stretch: the decoder's run's, or from the scan's
    stamps (over the whole batch so far, in one pass, when deletes split it: the records before a
    stretch moved event time already, so the figure is the same)."""

    def __init__(self, batch: DecodedBatch):
        self.batch, self.so_far = batch, None

    def __call__(self, start: int, stop: int) -> int:
        scan = self.batch.scan
        if scan is None:
            return self.batch.runs[start].newest_ts
        if len(self.batch.stretches) == 1:
            return scan.newest_ts(start, stop)
        if self.so_far is None:
            self.so_far = scan.newest_ts_so_far()
        return int(self.so_far[stop - 1])
