"""Recovery against the real broker: rebalances between two workers, SIGKILL crashes, restarts.

Each test compares the worker's final state with an in-process replay of the same input that
adopts the post-noise states the worker made durable (see ``kafka_harness.replay_partition``):
bit-identical weights, step counter, applied index, tombstones, deletion counter and ledger show
that every event was applied exactly once and no deletion's noise was drawn twice.
"""

from __future__ import annotations

import random
import time

import pytest

from tests.infra.schema_samples import validate
from tests.stream.kafka_harness import (
    BackgroundProducer,
    assert_identical_duplicates,
    assert_versions_never_go_back,
    covered,
    event_stream,
    insert,
    newest_full,
    read_topic,
    releases,
    releases_by_partition,
    settings_of,
    wait_for,
)
from tests.stream.subjects import subject_stream
from worker.olu.privacy.accountant import noise_multiplier

pytestmark = pytest.mark.kafka


# --------------------------------------------------------------------------- two workers, one group

def test_two_workers_share_partitions_and_hand_them_over_exactly_once(kafka_run):
    run = kafka_run("pair", partitions=4)
    stream = event_stream(2400, seed=21, delete_rate=0.08)
    first, second = stream[:1200], stream[1200:]
    a = run.worker("a.log")
    b = run.worker("b.log")
    a.start()
    assert set(a.wait_assigned({0, 1, 2, 3})) == {0, 1, 2, 3}
    run.produce(first)
    run.wait_covered(what="worker A caught up with the first half")

    b.start()  # rebalance: cooperative-sticky moves some of A's partitions to B
    moved = set(b.wait_assigned())
    assert moved and moved < {0, 1, 2, 3}
    for p in moved:  # B took over from A's final snapshot, not from the log start
        assert b.assigned()[p]["snapshot"] is not None, b.assigned()[p]
    assert set(a.assigned()) == {0, 1, 2, 3}
    feeder = BackgroundProducer(run.bootstrap, run.topics.input, second, chunk=100, pause=0.05)
    feeder.start()
    time.sleep(random.uniform(0.3, 1.0))
    assert a.terminate() == 0, a.log_text()[-3000:]  # A's partitions move to B, mid-stream
    feeder.result()
    handed = b.wait_assigned({0, 1, 2, 3})
    for p in set(handed) - moved:  # the second handover also restored A's final snapshot
        assert handed[p]["snapshot"] is not None, handed[p]
    run.wait_covered(what="worker B caught up with everything")
    assert b.terminate() == 0, b.log_text()[-3000:]
    # Both workers did part of the work.
    for w in (a, b):
        [stopped] = w.log_lines("worker stopped", all_runs=True)
        assert stopped["events"] > 0 and stopped["releases"] > 0

    records = run.releases()
    for rec in records:
        validate("release", rec.json())
    assert_identical_duplicates(records)
    results = run.verify(records)
    inserts = sum(1 for k, v, kind in stream if kind == "insert")
    assert sum(r.inserts_applied + r.inserts_skipped for r in results.values()) == inserts
    assert all(r.noised_deletes for r in results.values())
    assert set(releases_by_partition(records)) == {0, 1, 2, 3}


# --------------------------------------------------------------------------- SIGKILL

@pytest.mark.parametrize(("transactional", "subjects"), [(False, 0), (True, 0), (False, 40)],
                         ids=["plain", "transactional", "plain-requests"])
def test_sigkill_mid_stream_restarts_to_bit_identical_state(kafka_run, transactional, subjects):
    """``subjects``: events keyed by data subject, deleted by requests naming several records."""
    run = kafka_run("kill", partitions=2, OLU_BATCH_SIZE="50", OLU_TRANSACTIONAL=str(transactional).lower(),
                    # at least once (plain): one release per deletion, so the replay's republished
                    # deletion releases can be found below; coalesced releases (the default) are
                    # SIGKILLed in tests/reliability/test_crash_equivalence.py and transactionally here
                    OLU_DELETION_RELEASES="batch" if transactional else "each")
    # Static membership: a restarted process takes its predecessor's place at once, no session timeout.
    # Transactional: the restarted process has the same transactional.id and fences the dead one.
    run.env.update(OLU_KAFKA_GROUP_INSTANCE_ID=f"{run.group}-0", OLU_TRANSACTIONAL_ID=f"{run.group}-0")
    if subjects:
        stream = subject_stream(5000, seed=31, subjects=subjects, delete_rate=0.1)
    else:
        stream = event_stream(5000, seed=31, delete_rate=0.1)
    rnd = random.Random()
    # The stream goes out in phases (up to 1800, 3400, then the rest) so it is live at each kill.
    feeder = BackgroundProducer(run.bootstrap, run.topics.input, stream[200:], chunk=50, pause=0.2, limit=1600)
    worker = run.worker()
    kills, restarts = [], []
    try:
        worker.start()
        worker.wait_assigned({0, 1})
        run.produce(stream[:200])  # warm-up: the worker publishes at all
        wait_for(covered(run.bootstrap, run.topics, run.end_offsets()), 60, "the warm-up")
        replayed = worker.metric_sum("olu_deletions_total")
        feeder.start()
        for phase_end in (3200, None):
            # Kill once this process has honoured a few new deletions (beyond those it replayed from
            # their deltas on restore), at a random moment after that.
            wait_for(lambda: worker.metric_sum("olu_deletions_total") >= replayed + 5, 60,
                     "deletions honoured before the kill", interval=0.05)
            delay = rnd.uniform(0.0, 1.0)
            time.sleep(delay)
            kills.append((delay, feeder.position, feeder.waiting))
            worker.kill()
            worker.start()
            restarts.append(worker.wait_assigned({0, 1}))
            replayed = sum(line["deltas"] for line in restarts[-1].values())
            if phase_end is not None:
                feeder.allow(phase_end)
        feeder.hurry()
        feeder.result()
        run.wait_covered(what="the restarted worker caught up")
        assert worker.terminate() == 0, worker.log_text(all_runs=False)[-3000:]
    finally:
        feeder.hurry()
        feeder.join(30)

    assert not any(waiting for _, _, waiting in kills), f"the stream was not live at a kill: {kills}"
    # Each restart resumed from a stored snapshot (and the deltas after it), not the log start.
    for assigned in restarts:
        for p in (0, 1):
            assert assigned[p]["snapshot"] is not None, assigned[p]
    assert len(worker.log_lines("worker stopped", all_runs=True)) == 1  # only the last run stopped cleanly

    committed = releases(run.bootstrap, run.topics.params, isolation="read_committed")
    uncommitted = releases(run.bootstrap, run.topics.params, isolation="read_uncommitted")
    assert_identical_duplicates(committed)
    assert_identical_duplicates(uncommitted)
    assert_identical_duplicates(committed + uncommitted)
    assert len(uncommitted) >= len(committed)  # transactional: the killed runs' open transactions were aborted
    replayed_deltas = sum(a[p]["deltas"] for a in restarts for p in a)
    if transactional:
        # Exactly once: the replay after each restart publishes nothing a committed transaction holds.
        versions = [(r.json()["partition"], r.json()["version"]) for r in committed]
        repeated = sorted({v for v in versions if versions.count(v) > 1})
        assert not repeated, f"versions seen twice at read_committed: {repeated[:10]}"
        assert worker.log_lines("output committed by earlier transactions", all_runs=True)
    # In both modes no release goes back (docs/worker.md 5.4): each restart replayed deletions from
    # their deltas below its floor, held their releases and made one when the replay reached it.
    assert_versions_never_go_back(uncommitted)
    if replayed_deltas:
        caught_up = worker.log_lines("replay reached its floor; held releases made as one", all_runs=True)
        assert any(line["trigger"] == "deletion" for line in caught_up), caught_up[:5]
    results = run.verify(committed)
    for replayed in results.values():
        assert replayed.noised_deletes and replayed.from_delta
        assert [e["i"] for e in replayed.model.ledger] == list(range(1, len(replayed.noised_deletes) + 1))
    if subjects:  # requests named several records, some never seen: their releases say so
        # (a release made at a replay floor follows held deletions, not always a request: no report)
        reports = [r.json()["request"] for r in committed if r.headers.get("olu.trigger") == b"deletion"
                   and "request" in r.json()]
        assert max(q["ids"] for q in reports) > 1 and any(q["not_applied"] for q in reports)


# --------------------------------------------------------------------------- counter continuity

def test_deletion_counter_and_ledger_continue_after_restart(kafka_run):
    # Features over the bound are clipped at ingest (invariant 5), never the gradients: the oracle
    # clips the same way, so the final states can only agree if the worker did exactly that.
    run = kafka_run("counter", OLU_FEATURE_POLICY="clip")
    topics, snapshots = run.topics, run.snapshots
    live: list[str] = []
    phase1 = event_stream(500, seed=41, delete_rate=0.1, prefix="a", deletable=live)
    big = [insert(f"clip-{j}", [1.5 * (j % 2) - 0.75, 0.9, -1.1, 0.4 * j], 1) for j in range(10)]
    # and features whose plain sum of squares overflows: clipped and learned like the others
    big += [insert("clip-1e155", [1e155, 0.0, 0.0, 0.0], 1), insert("clip-max", [-1.7e308, 1.7e308, 0.5, 0.0], 0)]
    phase1[100:100] = big[:5]
    phase1[300:300] = big[5:]
    live += [f"clip-{j}" for j in range(10)] + ["clip-1e155", "clip-max"]
    phase2 = event_stream(500, seed=42, delete_rate=0.1, prefix="b", deletable=live, start=500)
    worker = run.worker()
    run.produce(phase1)
    end1 = run.end_offsets()
    worker.start()
    run.wait_covered(end1, what="phase 1 processed")
    assert worker.terminate() == 0
    before = newest_full(snapshots, topics.input, 0)
    assert before.offset == end1[0]
    k1 = before.header["model"]["accountant"]["deletions"]
    rho1 = before.header["model"]["accountant"]["rho"]
    assert k1 > 5 and len(before.header["model"]["ledger"]) == k1

    worker.start()
    assert worker.wait_assigned({0})[0]["snapshot"] == end1[0]  # restored, not started afresh
    run.produce(phase2)
    end2 = run.end_offsets()
    run.wait_covered(end2, what="phase 2 processed")
    assert worker.terminate() == 0

    after = newest_full(snapshots, topics.input, 0)
    meta = after.header["model"]
    ledger = meta["ledger"]
    k = meta["accountant"]["deletions"]
    assert k > k1 and [e["i"] for e in ledger] == list(range(1, k + 1))
    assert ledger[:k1] == before.header["model"]["ledger"]  # the old entries are kept as they were
    first_new = ledger[k1]
    assert first_new["i"] == k1 + 1 and first_new["tau"] > before.header["model"]["t"]
    eps, omega = meta["accountant"]["budget"], meta["accountant"]["omega"]
    # Its noise was calibrated for deletion k1 + 1, not for a counter restarted at 1 (invariant 4).
    assert first_new["sigma"] == pytest.approx(first_new["shift"] * noise_multiplier(k1 + 1, eps, omega), rel=1e-12)
    assert first_new["sigma"] > first_new["shift"] * noise_multiplier(1, eps, omega)
    assert meta["accountant"]["rho"] > rho1
    records = run.releases()
    values = releases_by_partition(records)[0]
    phase2_deletions = [v for v in values if v["version"] > end1[0] and v["deletions"] > k1]
    # the count goes on from k1 (a poll batch's deletions share one release, so the first one
    # after the restart may already count several)
    assert phase2_deletions and min(v["deletions"] for v in values if v["version"] > end1[0]) >= k1
    assert phase2_deletions[0]["privacy"]["eps_rdp_slope"] > max(
        v["privacy"]["eps_rdp_slope"] for v in values if v["version"] <= end1[0])
    assert [v["deletions"] for v in values] == sorted(v["deletions"] for v in values)
    results = run.verify(records)
    assert settings_of(run.env).feature_policy == "clip"
    assert results[0].dead == 0 and read_topic(run.bootstrap, topics.dlq) == []
    assert results[0].inserts_applied + results[0].inserts_skipped == sum(
        1 for _, _, kind in phase1 + phase2 if kind == "insert")
