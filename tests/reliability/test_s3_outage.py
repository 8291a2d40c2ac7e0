"""A 30-second object-store outage under a live stream with deletes: invariant 2 holds throughout,
and the worker heals by itself once storage returns.

The worker runs with its state on SeaweedFS over two partitions. Once it has caught up with a
first part of the stream, the S3 server is stopped for 30 s while inserts and deletes keep
arriving. The shorter outage tests (tests/stream/test_worker_kafka_s3.py) stall one hand-placed
delete with nothing else moving; here the stream keeps flowing, several deletes of each
partition arrive during the outage, and the full snapshot path fails too.

While storage is down, per partition: no release past the first deletion that changed the model
and could not be stored (its release is version ``offset + 1``, docs/worker.md 4.2), no committed group offset past the last snapshot stored before the outage (so none past that
deletion either), and ``olu_snapshot_failures_total{kind="delta"}`` keeps rising (the paused
partition retries every second). Once the server is back the same process (no restart) stores
the deltas in order, resumes the partitions and releases every deletion, each release produced
after its delta was created and after storage came back. The end state then equals the
in-process replay bit for bit (``verify_end_state``).
"""

from __future__ import annotations

import time

import pytest

from tests.stream.kafka_harness import (
    HANG_GUARD_S,
    BackgroundProducer,
    WorkerProcess,
    committed_offsets,
    covered,
    end_offsets,
    event_stream,
    latest_versions,
    model_changing_deletes,
    settings_of,
    verify_end_state,
    wait_for,
    worker_on_s3,
)

pytestmark = [pytest.mark.kafka, pytest.mark.s3]

PARTITIONS = 2
OUTAGE_S = 30.0
BEFORE = 1_500  # events released and snapshotted before the outage
DURING = 2_500  # events produced once the server is down (paced to take most of the outage)
CHUNK, PAUSE = 50, 0.3

# Few objects (the final check reads them all back); releases often enough that the partitions
# have published well past the pre-outage snapshot before they reach their first blocked delete.
TUNING = {
    "OLU_BATCH_SIZE": "200",
    "OLU_SNAPSHOT_EVERY_EVENTS": "500",
    "OLU_SNAPSHOT_EVERY_SECONDS": "1",
    "OLU_RELEASE_EVERY_EVENTS": "100",
    "OLU_RELEASE_EVERY_SECONDS": "0.3",
}


def _first_blocked_deletes(settings, produced, outage_from: dict[int, int]) -> dict[int, int]:
    """Per partition, the offset of the first delete that must change the model among the records
    produced once the server was down (absent until the producer has handed one over)."""
    by_part: dict[int, list] = {}
    for rec in sorted(produced, key=lambda r: (r.partition, r.offset)):
        by_part.setdefault(rec.partition, []).append((rec.offset, rec.key, rec.value))
    out = {}
    for p, records in by_part.items():
        # Offsets must be contiguous from 0 for the input-only analysis to see every earlier insert.
        if [o for o, _, _ in records] != list(range(len(records))):
            continue
        later = [o for o in model_changing_deletes(settings, records) if o >= outage_from[p]]
        if later:
            out[p] = later[0]
    return out


def test_worker_rides_out_a_30s_s3_outage_with_deletes_flowing(kafka_bootstrap, kafka_topic, s3_server, tmp_path):
    run = worker_on_s3(kafka_bootstrap, kafka_topic, s3_server, "s3-outage", root=tmp_path, partitions=PARTITIONS,
                       **TUNING)
    topics, group, env, snapshots = run.topics, run.group, run.env, run.snapshots
    settings = settings_of(env)
    stream = event_stream(BEFORE + DURING, seed=4242, delete_rate=0.06)
    feeder = BackgroundProducer(kafka_bootstrap, topics.input, stream, chunk=CHUNK, pause=PAUSE, limit=BEFORE,
                                flush_timeout=HANG_GUARD_S)
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        worker.start()
        worker.wait_assigned(set(range(PARTITIONS)), timeout=HANG_GUARD_S)
        pid = worker.proc.pid
        feeder.start()
        wait_for(lambda: feeder.error or feeder.waiting, HANG_GUARD_S, "the first part of the stream produced")
        assert feeder.error is None, feeder.error
        before = end_offsets(kafka_bootstrap, topics.input)
        assert all(before[p] > 0 for p in range(PARTITIONS))
        wait_for(covered(kafka_bootstrap, topics, before), HANG_GUARD_S, "the first part released", interval=0.3)
        wait_for(lambda: committed_offsets(kafka_bootstrap, group, topics.input, PARTITIONS) == before,
                 HANG_GUARD_S, "the offsets committed at a snapshot of the first part", interval=0.3)

        # ------------------------------------------------------------ the outage
        s3_server.stop()
        outage_started = time.monotonic()
        failures_before = worker.metric_sum("olu_snapshot_failures_total", kind="delta")
        feeder.allow(len(stream))
        blocked = wait_for(
            lambda: (b := _first_blocked_deletes(settings, feeder.produced, before)) and len(b) == PARTITIONS and b,
            HANG_GUARD_S, "a model-changing delete produced on every partition during the outage", interval=0.2)
        wait_for(lambda: worker.metric_sum("olu_snapshot_failures_total", kind="delta") >= failures_before + 2,
                 HANG_GUARD_S, "delta write failures counted while S3 is down", interval=0.3)
        checks = 0
        while checks < 3 or time.monotonic() - outage_started < OUTAGE_S:
            worker.check_alive()
            latest = latest_versions(kafka_bootstrap, topics)
            committed = committed_offsets(kafka_bootstrap, group, topics.input, PARTITIONS)
            for p in range(PARTITIONS):
                # Version first_blocked + 1 would be the blocked deletion's own release.
                assert latest[p] <= blocked[p], f"partition {p}: release {latest[p]} passed the delete at {blocked[p]}"
                # No snapshot can be stored, so no commit past the last one before the outage.
                assert committed[p] <= before[p] <= blocked[p], f"partition {p}: committed {committed[p]}"
            assert worker.get("/healthz")[0] == 200  # stalled on storage is not dead
            checks += 1
            time.sleep(0.5)
        failures_during = worker.metric_sum("olu_snapshot_failures_total", kind="delta")
        assert failures_during > failures_before + 2
        assert not worker.log_lines("deletion delta stored after retry; partition resumed")
        assert {e["partition"] for e in worker.log_lines("deletion delta not durable; partition paused")} \
            == set(range(PARTITIONS))

        # ------------------------------------------------------------ storage returns
        storage_back_ms = int(time.time() * 1000)  # taken before the server can accept a PUT
        s3_server.start()
        feeder.result(timeout=HANG_GUARD_S)
        ends = end_offsets(kafka_bootstrap, topics.input)
        wait_for(covered(kafka_bootstrap, topics, ends), 2 * HANG_GUARD_S, "the worker caught up after the outage",
                 interval=0.5)
        resumed = {e["partition"] for e in worker.log_lines("deletion delta stored after retry; partition resumed")}
        assert resumed == set(range(PARTITIONS)), resumed
        assert worker.proc.pid == pid, "the worker was restarted"
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        feeder.hurry()
        feeder.join(30)
        worker.cleanup()
        if not s3_server.running:
            s3_server.start()

    # One process throughout (it recovered without a restart), stopped cleanly once.
    assert len(worker.log_lines("worker stopped", all_runs=True)) == 1
    assert {e["partition"] for e in worker.log_lines("partition assigned", all_runs=True)} == set(range(PARTITIONS))

    results, records = verify_end_state(kafka_bootstrap, topics, snapshots, env, group)

    # Nothing past the first blocked deletion was produced before storage came back: the polls
    # above sample the outage, the releases' CreateTime covers all of it.
    for rec in records:
        value = rec.json()
        if value["version"] > blocked[value["partition"]]:
            assert rec.timestamp_ms >= storage_back_ms, (f"release {value['partition']}@{value['version']} was "
                                                         f"produced during the outage")
    # Every deletion that changed the model is released: by its own release or, coalesced, by its
    # poll batch's (the first deletion release at or after offset + 1), the outage's ones included
    # (so produced after storage came back, by the loop above).
    deletion_releases = {(r.json()["partition"], r.json()["version"]) for r in records
                         if r.headers.get("olu.trigger") == b"deletion"}
    for p, replayed in results.items():
        assert replayed.noised_deletes, f"partition {p}: no deletion changed the model"
        versions = sorted(v for q, v in deletion_releases if q == p)
        for offset in replayed.noised_deletes:
            assert versions and versions[-1] >= offset + 1, f"partition {p}: no release for the deletion at {offset}"
        outage_deletes = [o for o in replayed.noised_deletes if o >= blocked[p]]
        assert len(outage_deletes) >= 2 and outage_deletes[0] == blocked[p]  # several held, not just one
