"""Broker restart mid-stream: the worker rides out the broker going away and coming back.

A dedicated single-node broker (not the session one, which other tests share) is stopped twice
while the worker runs and a producer keeps writing, and is started again on the same ports with
its data. The same worker process must reconnect by itself (no restart, no crash loop), and lose
nothing: its final state equals the in-process replay of the whole input bit for bit, every
delete is honoured, every release is unique or an identical duplicate (``verify_end_state``).

While the broker is down the worker can neither fetch nor deliver releases nor commit: its
snapshots wait for the producer flush, its releases queue in the idempotent producer (which keeps
their order and drops the duplicates of retried batches) and its group membership is re-established
with the restarted coordinator.
"""

from __future__ import annotations

import random
import time
import uuid

import pytest

from tests.stream.kafka_harness import (
    HANG_GUARD_S,
    BackgroundProducer,
    Topics,
    WorkerProcess,
    covered,
    create_topics,
    end_offsets,
    event_stream,
    latest_versions,
    produce,
    verify_end_state,
    wait_for,
    worker_env,
)
from worker.devtools.kafka_broker import KafkaBroker
from worker.state.store import SnapshotStore, open_store

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SEED = 4004
EVENTS = 12_000
OUTAGES = 2


@pytest.fixture(scope="module")
def own_broker():
    """A broker of this module's own: it is stopped and restarted here, the session one never is."""
    broker = KafkaBroker()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _connection_failures(worker: WorkerProcess) -> int:
    """librdkafka's own FAIL lines (disconnected, connection refused) in the worker's log (level 3,
    kept by the ``kafka.log_level`` of 4 that :func:`worker_env` sets), as the worker logs them
    (logger ``olu.kafka``, repeats held back: worker/kafka_log.py; a new outage shows at once).

    The worker does not log transient broker errors itself: librdkafka hands them to the error
    callback, which only acts on fatal ones, and retries (``Worker._on_client_error``); a
    ``consumer error`` line is logged for per-message errors only, never for a broker outage.
    """
    return sum(1 for line in worker.log_lines(all_runs=False)
               if line.get("logger") == "olu.kafka" and line.get("msg", "").startswith("FAIL"))


def _released_beyond(bootstrap: str, topics: Topics, version: int):
    """Predicate: the lowest of the partitions' newest release versions, once it is above ``version``.

    Input produced after that version was read lands at higher offsets on both partitions, so
    the worker processing it is bound to pass it (releases every 150 events or 0.5 s).
    """
    def check():
        lowest = min(latest_versions(bootstrap, topics).values())
        return lowest if lowest > version else None
    return check


def test_worker_reconnects_after_broker_restarts_and_loses_nothing(own_broker, tmp_path):
    bootstrap = own_broker.bootstrap_servers
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"restart-{tag}.events", f"restart-{tag}.params", f"restart-{tag}.dlq", 2)
    create_topics(bootstrap, {topics.input: 2, topics.params: 1, topics.dlq: 1})
    group = f"restart-{tag}"
    # A session long enough to outlast the outages: the producer's message timeout is kept below
    # it (a paused member's queued releases expire first, docs/worker.md 5.6), and a release must
    # not expire while the broker is down for a few seconds.
    env = worker_env(bootstrap, topics, group, f"file://{tmp_path}/state",
                     OLU_KAFKA_SESSION_TIMEOUT_MS=45000, OLU_KAFKA_HEARTBEAT_INTERVAL_MS=3000)
    snapshots = SnapshotStore(open_store(f"file://{tmp_path}/state"), prefix="olu", group=group)
    stream = event_stream(EVENTS, seed=SEED, delete_rate=0.06)
    rnd = random.Random(SEED)
    phase = EVENTS // (OUTAGES + 1)
    # Deliveries stall while the broker is down: the producer waits for it (no lost input).
    feeder = BackgroundProducer(bootstrap, topics.input, stream, chunk=100, pause=0.05, limit=phase,
                                flush_timeout=240)
    worker = WorkerProcess(env, tmp_path / "worker.log")
    outages = []
    try:
        worker.start()
        worker.wait_assigned({0, 1}, timeout=HANG_GUARD_S)
        pid = worker.proc.pid
        feeder.start()
        released = -1  # the lowest partition's newest release version, last seen before an outage
        for i in range(OUTAGES):
            # The worker is working: it released on every partition beyond what it had released
            # before the previous outage. The reference is that earlier reading, not one taken now:
            # the producer is held at its limit here, so a worker already done with the allowed
            # input would release nothing newer and the wait could never end.
            released = wait_for(_released_beyond(bootstrap, topics, released), HANG_GUARD_S,
                                "releases on every partition before the outage", interval=0.3)
            feeder.allow((i + 2) * phase)  # the producer is mid-phase when the broker goes
            target = rnd.randint((i + 1) * phase - phase // 2, (i + 1) * phase + phase // 2)
            wait_for(lambda: feeder.error or feeder.position >= target, HANG_GUARD_S,
                     f"the producer at {target}", interval=0.02)
            failures = _connection_failures(worker)
            own_broker.stop(keep_data=True)
            down_at = time.monotonic()
            wait_for(lambda: _connection_failures(worker) > failures, HANG_GUARD_S,
                     "the worker noticing the broker is gone", interval=0.2)
            time.sleep(rnd.uniform(2.0, 6.0))  # the seeded outage, beyond the worker noticing it
            worker.check_alive()
            own_broker.start()
            outages.append((feeder.position, time.monotonic() - down_at))
        feeder.hurry()
        feeder.result(timeout=300)
        wait_for(covered(bootstrap, topics, end_offsets(bootstrap, topics.input)), 240,
                 "the worker caught up after the restarts", interval=0.5)
        assert worker.proc.pid == pid
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        feeder.hurry()
        feeder.join(30)
        worker.cleanup()
        if not own_broker.is_running:
            own_broker.start()

    assert len(outages) == OUTAGES
    # One process from start to end: it started once and stopped cleanly once.
    assert len(worker.log_lines("worker started", all_runs=True)) == 1
    assert len(worker.log_lines("worker stopped", all_runs=True)) == 1
    # The worker says so itself when it loses every broker (librdkafka reports it once per outage).
    assert len(worker.log_lines("all Kafka brokers are down; the client keeps retrying", all_runs=True)) >= 1
    results, _ = verify_end_state(bootstrap, topics, snapshots, env, group)
    inserts = sum(1 for _, _, kind in stream if kind == "insert")
    assert sum(r.inserts_applied + r.inserts_skipped for r in results.values()) == inserts
    assert all(r.noised_deletes for r in results.values())


def test_sigterm_while_the_broker_is_down_stops_in_bounded_time(own_broker, tmp_path):
    """With every broker gone, librdkafka's synchronous commit and its consumer close never return;
    the worker waits for each a bounded time (``SYNC_COMMIT_TIMEOUT_S``, ``CLOSE_TIMEOUT_S``),
    says so, and exits cleanly with its state durable, instead of hanging until SIGKILL."""
    bootstrap = own_broker.bootstrap_servers
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"sigterm-{tag}.events", f"sigterm-{tag}.params", f"sigterm-{tag}.dlq", 1)
    create_topics(bootstrap, {topics.input: 1, topics.params: 1, topics.dlq: 1})
    group = f"sigterm-{tag}"
    # librdkafka's default group timings (the suite shortens them): close() then waits on the group
    # coordinator well past our bound, as in a deployment.
    env = worker_env(bootstrap, topics, group, f"file://{tmp_path}/state",
                     OLU_KAFKA_SESSION_TIMEOUT_MS=45000, OLU_KAFKA_HEARTBEAT_INTERVAL_MS=3000)
    produce(bootstrap, topics.input, event_stream(1500, seed=SEED + 1, delete_rate=0.05))
    ends = end_offsets(bootstrap, topics.input)
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        worker.start()
        worker.wait_assigned({0}, timeout=HANG_GUARD_S)
        wait_for(covered(bootstrap, topics, ends), HANG_GUARD_S, "the worker caught up", interval=0.3)
        failures = _connection_failures(worker)
        own_broker.stop(keep_data=True)
        wait_for(lambda: _connection_failures(worker) > failures, HANG_GUARD_S,
                 "the worker noticing the broker is gone", interval=0.2)
        assert worker.terminate(timeout=HANG_GUARD_S) == 0, worker.log_text()[-3000:]
    finally:
        worker.cleanup()
        if not own_broker.is_running:
            own_broker.start()
    assert worker.log_lines("offset commit unanswered; going on without it (the snapshot is durable)")
    assert worker.log_lines("consumer close unanswered; leaving without it")
    assert len(worker.log_lines("worker stopped")) == 1
    # Nothing is lost by leaving without the commit: the newest full snapshot covers the whole input.
    snapshots = SnapshotStore(open_store(f"file://{tmp_path}/state"), prefix="olu", group=group)
    assert snapshots.restore(topics.input, 0).offset == ends[0]
