"""Invariant 2 against the real broker and a real S3 server: a deletion's post-noise state is
durable in object storage before its release is published and before the group offset passes it.

The worker runs with its state on SeaweedFS. With the S3 server stopped, a delete of an applied
record must stall its partition: no release at or past it, no committed offset past it, failures
counted. Once the server is back, the delta is stored and only then the release appears, holding
exactly the stored post-noise iterate.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.infra.schema_samples import validate
from tests.stream.kafka_harness import (
    committed_offsets,
    delete,
    event_stream,
    insert,
    releases_by_partition,
    stored_objects,
    wait_for,
)
from tests.stream.kafka_harness import latest_version as _latest_version

pytestmark = [pytest.mark.kafka, pytest.mark.s3]

OUTAGE_S = 4.0  # how long the partition must stay stalled while S3 is down


def test_deletion_delta_is_durable_before_its_release(kafka_bootstrap, s3_kafka_run, s3_server):
    run = s3_kafka_run("durable", OLU_SNAPSHOT_EVERY_EVENTS="100")
    topics, group, snapshots = run.topics, run.group, run.snapshots
    first = [ev for ev in event_stream(200, seed=51, delete_rate=0.0) if ev[2] == "insert"][:150]
    victim = first[5][0].decode()
    worker = run.worker()
    try:
        worker.start()
        worker.wait_assigned({0})
        run.produce(first)
        end = run.end_offsets()[0]
        run.wait_covered({0: end}, what="the inserts released")
        wait_for(lambda: any(o.kind == "full" and o.offset == end for o in stored_objects(snapshots, topics.input, 0)),
                 30, "a full snapshot of the inserts")
        wait_for(lambda: committed_offsets(kafka_bootstrap, group, topics.input, 1)[0] == end, 30,
                 "the committed offset at the snapshot")

        s3_server.stop()
        failures_before = worker.metric_sum("olu_snapshot_failures_total", kind="delta")
        tail = [insert(f"after-{j}", [0.1 * j % 0.9, -0.2, 0.3, 0.05], j % 2) for j in range(20)]
        placed = run.produce([delete(victim)] + tail)
        delete_offset = placed[0].offset
        assert delete_offset == end
        final_end = run.end_offsets()[0]

        # Stalled: failures are counted and retried, nothing past the delete is published or committed.
        wait_for(lambda: worker.metric_sum("olu_snapshot_failures_total", kind="delta") >= failures_before + 2,
                 30, "delta write failures while S3 is down")
        deadline = time.monotonic() + OUTAGE_S
        while time.monotonic() < deadline:
            assert _latest_version(kafka_bootstrap, topics) <= delete_offset, "a release passed the stalled delete"
            assert committed_offsets(kafka_bootstrap, group, topics.input, 1)[0] <= delete_offset
            assert worker.get("/healthz")[0] == 200  # stalled on storage is not dead
            worker.check_alive()
            time.sleep(0.3)
        assert _latest_version(kafka_bootstrap, topics) == end
        assert worker.metric_sum("olu_snapshot_failures_total", kind="delta") > failures_before + 2

        s3_server.start()
        run.wait_covered({0: final_end}, what="releases after S3 came back")
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        if not s3_server.running:
            s3_server.start()

    records = run.releases()
    values = releases_by_partition(records)[0]
    for v in values:
        validate("release", v)
    deletion = [v for v in values if v["version"] == delete_offset + 1]
    assert deletion, "no release for the deletion"
    trigger = {r.json()["version"]: r.headers["olu.trigger"] for r in records}
    assert trigger[delete_offset + 1] == b"deletion"
    delta = [o for o in stored_objects(snapshots, topics.input, 0) if o.kind == "delta"]
    assert [o.offset for o in delta] == [delete_offset + 1]
    stored = delta[0]
    assert stored.arrays["z"].tobytes() == np.array(deletion[0]["weights"], np.float64).tobytes()
    assert (stored.header["t"], stored.header["deletions"]) == (deletion[0]["t"], deletion[0]["deletions"]) == (150, 1)
    # The first release past the inserts is the deletion's own, published once the delta was stored.
    versions = [v["version"] for v in values]
    assert versions == sorted(set(versions))
    assert min(v for v in versions if v > end) == delete_offset + 1
    run.verify(records)


def test_shutdown_during_an_outage_publishes_nothing_of_the_unstored_deletion(kafka_bootstrap, s3_kafka_run,
                                                                             s3_server):
    """SIGTERM while a deletion waits for storage: a clean exit that publishes and commits nothing
    past the delete; the next run draws the deletion's noise afresh (its first view was never
    published) and releases it once, after storing it, at its replay floor."""
    run = s3_kafka_run("durable-stop", OLU_SNAPSHOT_EVERY_EVENTS="50")
    topics, group, snapshots = run.topics, run.group, run.snapshots
    first = [ev for ev in event_stream(150, seed=52, delete_rate=0.0) if ev[2] == "insert"][:100]
    worker = run.worker()
    try:
        worker.start()
        worker.wait_assigned({0})
        run.produce(first)
        end = run.end_offsets()[0]
        run.wait_covered({0: end}, what="the inserts released")
        wait_for(lambda: committed_offsets(kafka_bootstrap, group, topics.input, 1)[0] == end, 30,
                 "the committed offset at the snapshot")

        s3_server.stop()
        later = [ev for ev in event_stream(20, seed=53, delete_rate=0.0, prefix="late") if ev[2] == "insert"][:10]
        run.produce([delete(first[3][0].decode())] + later)
        final_end = run.end_offsets()[0]
        wait_for(lambda: worker.metric_sum("olu_snapshot_failures_total", kind="delta") >= 1, 30,
                 "a delta write failure")
        assert worker.terminate(timeout=60) == 0, worker.log_text()[-3000:]
        assert worker.log_lines("worker stopped")
        assert _latest_version(kafka_bootstrap, topics) == end
        assert committed_offsets(kafka_bootstrap, group, topics.input, 1)[0] == end

        s3_server.start()
        assert all(o.offset <= end for o in stored_objects(snapshots, topics.input, 0))  # nothing stored past it
        worker.start()
        assert worker.wait_assigned({0})[0]["snapshot"] == end
        run.wait_covered({0: final_end}, what="the restarted worker caught up")
        assert worker.terminate() == 0
    finally:
        if not s3_server.running:
            s3_server.start()

    records = run.releases()
    # The restarted run replays the deletion below its floor (the input's end when it was assigned):
    # its release is held and made once, with the state at the floor (docs/worker.md 5.4).
    after = [r for r in records if r.json()["version"] > end]
    assert after and after[0].headers.get("olu.trigger") == b"deletion"
    assert after[0].json()["version"] == final_end and after[0].json()["deletions"] == 1
    assert len({r.json()["version"] for r in after}) == len(after)  # once
    run.verify(records)



def test_the_deadline_alert_condition_holds_on_a_stalled_worker_and_not_on_a_healthy_one(s3_kafka_run,
                                                                                        s3_server):
    """OluDeletionRequestLate's condition (helm/olu-worker/files/alerts.yaml), read off the live
    worker's /metrics: oldest pending request older than olu_deletion_deadline_seconds. A healthy
    worker releases its deletions at once (never past the 3 s deadline); with storage down a
    deletion's delta cannot be stored, its release and receipt wait, and the age passes the
    deadline; when storage is back the request is released and nothing is pending."""
    run = s3_kafka_run("deadline", OLU_DELETION_DEADLINE_SECONDS="3")
    first = [ev for ev in event_stream(200, seed=54, delete_rate=0.0) if ev[2] == "insert"][:120]
    worker = run.worker()

    def late() -> tuple[float, float]:
        return (worker.metric_sum("olu_deletion_request_oldest_pending_seconds"),
                worker.metric_sum("olu_deletion_deadline_seconds"))

    try:
        worker.start()
        worker.wait_assigned({0})
        run.produce(first + [delete(first[4][0].decode())])
        run.wait_covered(what="the healthy deletion released")
        wait_for(lambda: worker.metric_sum("olu_deletion_requests_pending") == 0, 30, "its receipt delivered")
        age, deadline = late()
        assert deadline == 3.0 and age <= deadline  # healthy: silent

        s3_server.stop()
        run.produce([delete(first[7][0].decode())])
        wait_for(lambda: worker.metric_sum("olu_deletion_requests_pending") == 1, 30, "the stalled request pending")
        wait_for(lambda: late()[0] > late()[1], 30, "the pending request past the deadline")  # fires
        s3_server.start()
        wait_for(lambda: worker.metric_sum("olu_deletion_requests_pending") == 0, 90, "released once storage is back")
        assert late()[0] == 0.0
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        worker.cleanup()
