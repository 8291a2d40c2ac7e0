"""Invariant 6 against the real broker: with an active algorithm (which keeps retained examples in
its snapshots), every stored object holding a deleted record's raw features is gone within the
configured purge bound after the delete; the other retained examples stay.
"""

from __future__ import annotations

import time

import numpy as np
import orjson
import pytest

from tests.stream.kafka_harness import delete, event_stream, stored_objects, wait_for

pytestmark = pytest.mark.kafka

PURGE_BOUND_S = 4.0


def _row(value: bytes) -> bytes:
    return np.array(orjson.loads(value)["x"], np.float64).tobytes()


def test_active_algorithm_purges_a_deleted_records_features_within_the_bound(kafka_run):
    run = kafka_run("purge", OLU_ALGORITHM="active-d2d", OLU_MAX_DELETIONS="50",
                    OLU_PURGE_BOUND_SECONDS=str(PURGE_BOUND_S), OLU_SNAPSHOT_EVERY_EVENTS="0",
                    OLU_SNAPSHOT_EVERY_SECONDS="1")
    inserts = [ev for ev in event_stream(200, seed=61, delete_rate=0.0) if ev[2] == "insert"][:150]
    victim, keeper = inserts[7], inserts[8]
    worker = run.worker()
    worker.start()
    worker.wait_assigned({0})
    run.produce(inserts)
    end = run.end_offsets()[0]
    run.wait_covered({0: end}, 60, "the inserts released")
    held = wait_for(lambda: [o for o in stored_objects(run.snapshots, run.topics.input, 0)
                             if o.kind == "full" and o.offset == end], 30, "a full snapshot of the inserts")
    assert _row(victim[1]) in held[0].blob  # active OLU retains the examples: the test can see them

    run.produce([delete(victim[0].decode())])
    acknowledged = time.monotonic()  # the worker handles the delete after this
    gone = wait_for(lambda: not any(_row(victim[1]) in o.blob
                                    for o in stored_objects(run.snapshots, run.topics.input, 0)),
                    PURGE_BOUND_S + 10, "the deleted record's features purged", interval=0.1)
    elapsed = time.monotonic() - acknowledged
    assert gone and elapsed <= PURGE_BOUND_S, f"purged after {elapsed:.2f} s, bound {PURGE_BOUND_S} s"
    objects = stored_objects(run.snapshots, run.topics.input, 0)
    newest = [o for o in objects if o.kind == "full"][-1]
    assert newest.offset == end + 1
    assert _row(keeper[1]) in newest.blob  # the other retained examples stay
    assert all(o.offset >= end + 1 for o in objects)  # nothing older survives the purge
    run.wait_covered({0: end + 1}, 30, "the deletion released")
    assert worker.terminate() == 0, worker.log_text()[-3000:]

    run.verify()
