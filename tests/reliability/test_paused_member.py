"""A member paused past its session timeout publishes nothing after its successor (docs/worker.md 5.6).

At-least-once delivery, passive OLU under per-request, a 3-partition input fed steadily with 3%
deletions. Worker A owns every partition and is publishing when it is SIGSTOPped, with releases
in its producer's queue and a batch in hand; worker B joins, takes the partitions over once A's
session has timed out, and releases deletions; A is SIGCONTed 12 s after it stopped. A must not
publish a state from before the deletions B released: read in topic order, no key's version may
go back, and compaction (which keeps each key's last record) must keep each key's newest version.
Before the fence (ownership.py) a resumed A published its queued and in-hand releases after B's.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from tests.stream.kafka_harness import (
    HANG_GUARD_S,
    BackgroundProducer,
    Topics,
    WorkerProcess,
    assert_identical_duplicates,
    assert_versions_never_go_back,
    covered,
    end_offsets,
    event_stream,
    latest_versions,
    releases,
    wait_for,
    worker_env,
)
from worker.stream.output.params_policy import COMPACTED_AT_LEAST_ONCE

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 3
EVENTS = 120_000
STOP_AT = 30_000  # A is stopped mid-stream, busy behind the producer
PAUSE_S = 12.0  # twice the session timeout of worker_env (6 s)


def _deletion_releases_after(bootstrap: str, topics: Topics, versions: dict[int, int]) -> bool:
    """B released a deletion on some partition beyond every version A had published there."""
    for rec in releases(bootstrap, topics.params):
        value = rec.json()
        if rec.headers.get("olu.trigger") == b"deletion" and value["version"] > versions.get(value["partition"], -1):
            return True
    return False


def _stopped_by_design(w, code: int) -> bool:
    """Transactional mode: exit 1 on a transaction error of the rebalance (see below)."""
    failed = w.log_lines("worker failed")
    return code == 1 and bool(failed) and failed[-1]["error"].startswith("KafkaError{")


def _restart_stopped(*workers) -> bool:
    """Transactional mode: a worker whose transaction met the rebalance (its offsets' generation
    is stale: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, then an abortable producer) stops by design and
    is restarted, as the chart's Deployment does; it then replays from its committed position.
    Returns False (never the end of a wait)."""
    for w in workers:
        if w.proc.poll() is not None:
            assert _stopped_by_design(w, w.proc.returncode), w.log_text()[-3000:]
            w.start()
            # SIGTERM before the worker's handler is installed would kill it outright (exit -15)
            wait_for(lambda: w.check_alive() or w.log_lines("worker started"), HANG_GUARD_S,
                     "the restarted worker running")
    return False


def _caught_up_or_why(caught_up, bootstrap: str, topics: Topics, ends: dict[int, int], *workers):
    """``caught_up``, whose timeout names what was missing: each partition's newest version
    against its end, and each worker's last log lines."""
    def check():
        if caught_up():
            return True
        check.why = (f"newest versions {latest_versions(bootstrap, topics)} against ends {ends}\n"
                     + "\n".join(f"--- worker {i}:\n{w.log_text(True)[-2500:]}" for i, w in enumerate(workers)))
        return False
    check.why = ""
    return check


@pytest.mark.parametrize("transactional", [False, True], ids=["at-least-once", "transactional"])
def test_a_paused_member_publishes_nothing_after_its_successor(kafka_bootstrap, kafka_topic, tmp_path, transactional):
    """At-least-once: the worker fences itself; transactional: the broker does (read_committed)."""
    topics = Topics(kafka_topic(partitions=PARTITIONS), kafka_topic(partitions=1, cleanup_policy="compact"),
                    kafka_topic(partitions=1), PARTITIONS)
    group = f"paused-{uuid.uuid4().hex[:8]}"
    env = worker_env(kafka_bootstrap, topics, group, f"file://{tmp_path}/state", OLU_ALGORITHM="passive",
                     OLU_PRIVACY_UNIT="per-request", OLU_RELEASE_EVERY_EVENTS="5", OLU_RELEASE_EVERY_SECONDS="0.2",
                     OLU_BATCH_SIZE="50", OLU_TRANSACTIONAL=str(transactional).lower())
    isolation = "read_committed" if transactional else "read_uncommitted"
    feeder = BackgroundProducer(kafka_bootstrap, topics.input, event_stream(EVENTS, seed=5151, delete_rate=0.03),
                                chunk=200, pause=0.02, limit=3_000)
    a = WorkerProcess({**env, "OLU_TRANSACTIONAL_ID": f"{group}-a"}, tmp_path / "a.log")
    b = WorkerProcess({**env, "OLU_TRANSACTIONAL_ID": f"{group}-b"}, tmp_path / "b.log")
    try:
        a.start()
        a.wait_assigned(set(range(PARTITIONS)), timeout=HANG_GUARD_S)
        feeder.start()
        # A is publishing on every partition when it stops (releases every 5 events or 0.2 s)
        wait_for(lambda: all(v >= 300 for v in latest_versions(kafka_bootstrap, topics).values()), HANG_GUARD_S,
                 "A releasing on every partition", interval=0.2)
        feeder.allow(EVENTS)  # ~8,000 events/s: A is learning and publishing right behind it when it stops
        wait_for(lambda: feeder.position >= STOP_AT, HANG_GUARD_S, "the stream flowing", interval=0.005)
        os.kill(a.proc.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        before = latest_versions(kafka_bootstrap, topics)
        b.start()
        b.wait_assigned(set(range(PARTITIONS)), timeout=HANG_GUARD_S)  # after A's session timed out
        wait_for(lambda: _deletion_releases_after(kafka_bootstrap, topics, before), HANG_GUARD_S,
                 "B releasing a deletion beyond A's last versions", interval=0.3)
        time.sleep(max(0.0, PAUSE_S - (time.monotonic() - stopped_at)))
        os.kill(a.proc.pid, signal.SIGCONT)
        # A runs again: it finds its lease broken, holds everything, and learns it lost the partitions
        # (transactional: its transaction is fenced and the worker stops to replay, as designed)
        wait_for(lambda: a.log_lines("partitions lost; dropped without a commit") or a.log_lines("worker failed"),
                 HANG_GUARD_S, "A learning it lost its partitions", interval=0.2)
        feeder.result(timeout=HANG_GUARD_S)
        ends = end_offsets(kafka_bootstrap, topics.input)
        caught_up = _caught_up_or_why(covered(kafka_bootstrap, topics, ends), kafka_bootstrap, topics, ends, a, b)
        try:
            wait_for(lambda: (transactional and _restart_stopped(a, b)) or caught_up(), HANG_GUARD_S,
                     "the group caught up", interval=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{caught_up.why}") from None
        code = b.terminate()
        # transactional: B may have met the rebalance itself after the last look (stopped by design)
        assert code == 0 or (transactional and _stopped_by_design(b, code)), b.log_text()[-3000:]
        if not transactional:
            a.check_alive()  # the fenced member carries on: it rejoined the group
            assert a.terminate() == 0, a.log_text()[-3000:]
    finally:
        feeder.hurry()
        feeder.join(30)
        for w in (a, b):
            if w.proc is not None:
                try:
                    os.kill(w.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            w.cleanup()

    records = releases(kafka_bootstrap, topics.params, isolation=isolation)
    assert assert_versions_never_go_back(records) > 100
    assert_identical_duplicates(records)
    newest: dict[bytes, int] = {}
    last: dict[bytes, int] = {}
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):  # compaction keeps each key's last
        version = rec.json()["version"]
        newest[rec.key] = max(newest.get(rec.key, -1), version)
        last[rec.key] = version
    assert last == newest and len(last) == PARTITIONS
    held = a.log_lines("the loop went unheard for longer than its lease; holding releases until the group "
                       "coordinator confirms membership", all_runs=True)
    print(f"A held its output after the pause: {bool(held)}; {len(records)} releases checked")
    # A said at start what a compacted params topic keeps under at-least-once delivery (only then)
    assert bool(a.log_lines(COMPACTED_AT_LEAST_ONCE, all_runs=True)) is not transactional
