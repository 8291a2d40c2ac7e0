"""``rewind`` (R2D, [R2D]) against the real broker.

The worker retrains every 100 steps, honours a deletion of a record learned online since the last
retraining by an exact replay and one of a retrained record by a noised rewind, publishes a release
for each, is killed, restores from its snapshot (replaying the deletions' deltas if the snapshot
predates them), rewinds again in the next generation, and retrains at once when a second fitted
deletion would exceed the generation's capacity (OLU_MAX_DELETIONS=1; release header
``olu.budget: retrained``). Every release, snapshot and delta must equal the in-process oracle bit
for bit: R2D is deterministic between deletions here (noise only at deletions, see
worker/olu/algorithms/rewind.py), so a replay reproduces the retrainings exactly.
"""

from __future__ import annotations

import pytest

from tests.stream.kafka_harness import delete, event_stream, stored_objects, wait_for

pytestmark = pytest.mark.kafka


def test_rewind_worker_unlearns_releases_and_restores(kafka_run):
    run = kafka_run("rewind", OLU_ALGORITHM="rewind", OLU_RETRAIN_EVERY="100", OLU_TRAIN_STEPS="20",
                    OLU_NOISE_SIGMA="1.0", OLU_MAX_DELETIONS="1", OLU_L2="0.05", OLU_RADIUS="10",
                    OLU_SNAPSHOT_EVERY_EVENTS="0", OLU_SNAPSHOT_EVERY_SECONDS="1")
    inserts = [ev for ev in event_stream(400, seed=83, delete_rate=0.0) if ev[2] == "insert"][:330]
    online, fitted, later, over = (inserts[k][0].decode() for k in (230, 10, 20, 30))  # steps 231, 11, 21, 31
    worker = run.worker()
    worker.start()
    worker.wait_assigned({0})
    run.produce(inserts[:250])  # retrainings at steps 100 and 200
    end1 = run.end_offsets()[0]
    wait_for(lambda: [o for o in stored_objects(run.snapshots, run.topics.input, 0)
                      if o.kind == "full" and o.offset == end1], 60, "a full snapshot of the inserts", interval=0.2)
    run.produce([delete(online), delete(fitted)])
    end2 = run.end_offsets()[0]
    run.wait_covered({0: end2}, 60, "the deletions released")
    released = [r for r in run.releases() if r.headers.get("olu.trigger") == b"deletion"]
    last = max((r.json() for r in released), key=lambda v: v["version"])
    assert last["algorithm"] == "rewind" and last["deletions"] == 2 and last["version"] == end2
    assert 0.0 < last["privacy"]["epsilon"] <= 1.0  # the rewind spent epsilon(1) of the docs/calibration.md 6.2 target
    assert last["privacy"]["deletions_capacity_left"] == 0

    worker.kill()  # no final snapshot: the restart restores the newest one and replays the rest
    worker.start()
    assigned = worker.wait_assigned({0})[0]
    assert assigned["snapshot"] is not None and assigned["snapshot"] >= end1
    # a retraining at step 300, a rewind, then one fitted deletion more than the noise covers
    run.produce(inserts[250:] + [delete(later), delete(over)])
    end3 = run.end_offsets()[0]
    run.wait_covered({0: end3}, 60, "the restarted worker caught up")
    retrained = [r for r in run.releases() if r.json()["version"] == end3]
    assert retrained and all(r.headers.get("olu.budget") == b"retrained" for r in retrained)
    assert retrained[0].json()["epoch"] == 1 and retrained[0].json()["privacy"]["epsilon"] == 0.0
    assert worker.terminate() == 0, worker.log_text()[-3000:]

    results = run.verify()
    model = results[0].model
    assert [e["route"] for e in model.ledger] == ["replay", "rewind", "rewind", "refit"]
    assert [e["outcome"] for e in model.ledger] == ["exact", "noised", "noised", "retrained"]
    assert [e["generation"] for e in model.ledger] == [2, 2, 3, 4]
    assert model.counters["fits"] == 4 and model.t == 330 and len(model.examples) == 326
