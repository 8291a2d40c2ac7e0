"""Crash equivalence: many SIGKILLs at seeded points of a long stream change nothing.

The worker consumes a live stream of inserts and deletes (JSON deletes, tombstones, duplicate
deletes, deletes of ids never seen, deletes before their insert) and is SIGKILLed at seeded points
(Kafka's ``transactions_test`` shape, docs/streaming.md 2), each time restarted at once
(static membership, so the new process takes its predecessor's partitions without a session
timeout) under another CPU personality (OpenBLAS kernel, numpy dispatch, numba target). Two kinds of kill point alternate, chosen by the seed: mid-stream (once the producer has
reached a seeded position, after a seeded delay) and during recovery (a seeded moment right after
the restarted process was assigned its partitions, while it replays from its snapshot).

The reference is an uninterrupted run: the in-process replay of the same input
(``kafka_harness.replay_partition``) that adopts the post-noise state of each deletion the worker
made durable. Noise comes from OS entropy and is never stored (invariant 1), so no second run
could reproduce it: the deletions' stored post-noise states are the only non-deterministic input,
and between deletions everything must match bit for bit (invariant 3). ``verify_end_state``
asserts the rest: final parameters, ledger, counters, applied index and tombstones bit-identical;
every delete honoured; every published version unique or an identical duplicate; every deletion
release produced after its delta; the group offset never past a durable snapshot.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass

import numpy as np
import orjson
import pytest

from tests.stream.kafka_harness import (
    HANG_GUARD_S,
    BackgroundProducer,
    Topics,
    WorkerProcess,
    covered,
    end_offsets,
    event_stream,
    produce,
    read_topic,
    releases_by_partition,
    topics_for,
    verify_end_state,
    wait_for,
    worker_env,
    worker_on_s3,
)
from worker.state.store import SnapshotStore, open_store

from .personality import PERSONALITIES

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2


@dataclass(frozen=True)
class Variant:
    events: int
    kills: int
    transactional: bool
    state: str  # "s3" (SeaweedFS) or "file"
    seed: int
    deletion_releases: str = "batch"  # one release per poll batch's deletions, or one per request
    sparse_input: bool = False  # OLU_SPARSE_INPUT: the rows learned by the sparse step (a scaled iterate)
    # Releases a restart's replay holds back (published before the kill), per kill, at least. The
    # sparse decoder (Python) runs behind the producer, so less is published before each kill: 19 in
    # 20 kills on the CI machine, against one or more per kill for the compiled scan.
    held_per_kill: float = 1.0
    classes: tuple = ()  # a softmax model over these class names (OLU_LOSS=softmax, OLU_CLASSES)


VARIANTS = {
    # The full run: >= 100,000 events, >= 20 SIGKILLs, state on the real S3 server.
    "plain-s3": Variant(events=100_000, kills=20, transactional=False, state="s3", seed=1001),
    # Releases, dead letters and offsets in Kafka transactions: each restart fences its
    # predecessor's transactional.id and aborts its open transaction; its replay publishes nothing
    # a committed transaction holds (exactly once at read_committed).
    "transactional-file": Variant(events=60_000, kills=20, transactional=True, state="file", seed=2002),
    # One release per deletion request, in both delivery modes (shorter streams, as many kills).
    "each-file": Variant(events=24_000, kills=20, transactional=False, state="file", seed=3003,
                         deletion_releases="each"),
    "transactional-each-file": Variant(events=24_000, kills=20, transactional=True, state="file", seed=4004,
                                       deletion_releases="each"),
    # The sparse step's state (iterate = scale x vector, its kept norm) through kills and restores.
    "sparse-file": Variant(events=24_000, kills=20, transactional=False, state="file", seed=5005, sparse_input=True,
                           held_per_kill=0.5),
    # A K x d softmax over class names (the Python decoder reads them, as it reads sparse rows).
    "softmax-file": Variant(events=24_000, kills=20, transactional=False, state="file", seed=6006,
                            held_per_kill=0.5, classes=("billing", "fraud", "login", "other")),
}

ROTATING_PERSONALITIES = list(PERSONALITIES.values())

BURST = 400  # deletes in a row before each mid-stream kill point

# Transactional variant: every this many events one poison record, dead-lettered exactly once.
POISON_EVERY = 997
POISON = (b"poison", b"{not json", "poison")

# Fewer, larger objects than the harness defaults: the check reads every one of them back.
TUNING = {
    "OLU_BATCH_SIZE": "500",
    "OLU_SNAPSHOT_EVERY_EVENTS": "2000",
    "OLU_SNAPSHOT_EVERY_SECONDS": "1",
    "OLU_RELEASE_EVERY_EVENTS": "1000",
    "OLU_RELEASE_EVERY_SECONDS": "0.5",
    # Write each snapshot at once: a run between two kills lasts a few seconds, and the upload
    # spread (a production smoothing) would often leave it without any durable snapshot.
    "OLU_SNAPSHOT_UPLOAD_SPREAD": "0",
}


@dataclass(frozen=True)
class KillPoint:
    kind: str  # "mid-stream" or "recovering"
    limit: int  # the producer may go up to here until the next kill point
    position: int  # mid-stream: kill once the producer has handed over this many events
    delay: float  # seconds after the trigger


def kill_points(variant: Variant, chunk: int) -> list[KillPoint]:
    """The seeded plan: the stream is cut into ``kills + 1`` phases, one kill in each of the first ``kills``."""
    rnd = random.Random(variant.seed)
    phase = variant.events // (variant.kills + 1)
    points = []
    for i in range(variant.kills):
        start, limit = i * phase, (i + 1) * phase
        kind = "recovering" if i and rnd.random() < 0.3 else "mid-stream"
        points.append(KillPoint(kind, limit, rnd.randint(start + chunk, limit - 2 * chunk),
                                rnd.uniform(0.0, 0.25) if kind == "recovering" else rnd.uniform(0.0, 0.5)))
    return points


def _setup(variant: Variant, kafka_bootstrap, kafka_topic, s3_server, tmp_path, name: str):
    extra = {**TUNING, "OLU_TRANSACTIONAL": str(variant.transactional).lower(),
             "OLU_DELETION_RELEASES": variant.deletion_releases, "OLU_SPARSE_INPUT": str(variant.sparse_input).lower()}
    if variant.classes:
        extra.update(OLU_LOSS="softmax", OLU_CLASSES=",".join(variant.classes))
    if variant.state == "s3":
        run = worker_on_s3(kafka_bootstrap, kafka_topic, s3_server, name, root=tmp_path, partitions=PARTITIONS,
                           stoppable=False, **extra)
        topics, group, env, snapshots = run.topics, run.group, run.env, run.snapshots
    else:
        topics = topics_for(kafka_topic, partitions=PARTITIONS)
        group = f"{name}-{uuid.uuid4().hex[:8]}"
        env = worker_env(kafka_bootstrap, topics, group, f"file://{tmp_path}/state", **extra)
        snapshots = SnapshotStore(open_store(f"file://{tmp_path}/state"), prefix="olu", group=group)
    # Static membership and a stable transactional.id: a restarted process replaces the dead one at once.
    env.update(OLU_KAFKA_GROUP_INSTANCE_ID=f"{group}-0", OLU_TRANSACTIONAL_ID=f"{group}-0")
    return topics, group, env, snapshots


def _snapshotted(worker) -> bool:
    """This process has stored a full snapshot of every partition."""
    return sum(1 for p in range(PARTITIONS)
               if worker.metric_sum("olu_snapshot_last_success_timestamp_seconds", partition=str(p)) > 0) == PARTITIONS


def run_with_kills(bootstrap, topics, env, stream, plan: list[KillPoint], chunk: int, tmp_path):
    """Feed ``stream`` phase by phase, SIGKILL the worker at each of ``plan``'s points and restart it
    at once (under the next CPU personality), until the last process has caught up and stopped.
    Returns (the worker, (point, producer position, producer waiting) per kill, each restart's
    ``partition assigned`` lines)."""
    feeder = BackgroundProducer(bootstrap, topics.input, stream, chunk=chunk, pause=0.05, limit=plan[0].limit)
    worker = WorkerProcess(env, tmp_path / "worker.log")
    done: list[tuple[KillPoint, int, bool]] = []
    restarts: list[dict] = []
    try:
        worker.start()
        worker.wait_assigned(set(range(PARTITIONS)), timeout=HANG_GUARD_S)
        feeder.start()
        for point in plan:
            feeder.allow(point.limit)
            if point.kind == "mid-stream":
                wait_for(lambda: feeder.error or feeder.position >= point.position, HANG_GUARD_S,
                         f"the producer at {point.position}", interval=0.02)
                # On a loaded machine a process may spend its whole phase starting up: let it store
                # one snapshot of each partition first, so every later restart resumes from one.
                wait_for(lambda: _snapshotted(worker), HANG_GUARD_S, "a snapshot of each partition", interval=0.05)
            time.sleep(point.delay)
            worker.check_alive()  # it must not have died on its own
            done.append((point, feeder.position, feeder.waiting))
            worker.kill()
            # Each restart under another CPU personality: a replay on another kind of node must
            # reach the same bits (docs/worker.md 4.3).
            worker.start(personality=ROTATING_PERSONALITIES[len(done) % len(ROTATING_PERSONALITIES)])
            restarts.append(worker.wait_assigned(set(range(PARTITIONS)), timeout=HANG_GUARD_S))
        feeder.hurry()
        feeder.result(timeout=300)
        wait_for(covered(bootstrap, topics, end_offsets(bootstrap, topics.input)), 300,
                 "the last process caught up with the whole stream", interval=0.5)
        assert worker.terminate() == 0, worker.log_text(all_runs=False)[-3000:]
    finally:
        feeder.hurry()
        feeder.join(30)
        worker.cleanup()
    return worker, done, restarts


@pytest.fixture
def s3_server_if_needed(request):
    """The session S3 server only for the variants that keep their state there."""
    variant = VARIANTS[request.node.callspec.params["variant"]]
    return request.getfixturevalue("s3_server") if variant.state == "s3" else None


@pytest.mark.parametrize("variant", [pytest.param(name, marks=[pytest.mark.s3] if v.state == "s3" else [])
                                     for name, v in VARIANTS.items()])
def test_sigkills_at_seeded_points_leave_the_uninterrupted_result(kafka_bootstrap, kafka_topic, s3_server_if_needed,
                                                                   tmp_path, variant):
    v = VARIANTS[variant]
    topics, group, env, snapshots = _setup(v, kafka_bootstrap, kafka_topic, s3_server_if_needed, tmp_path, "crash")
    chunk = 250
    plan = kill_points(v, chunk)
    # A burst of deletes (an account purge) right before each mid-stream kill point: the kill then
    # tends to land while the worker is inside it, with a poll batch's deletions coalesced into
    # one release and some of their deltas not yet durable.
    bursts = {p.position - BURST: BURST for p in plan if p.kind == "mid-stream"}
    stream = event_stream(v.events, seed=v.seed, delete_rate=0.03, bursts=bursts)
    if v.transactional:
        stream = [POISON if j and j % POISON_EVERY == 0 else event for j, event in enumerate(stream)]
    if v.classes:
        stream = with_class_names(stream, v.classes, v.seed)
    assert len(plan) >= 20
    worker, done, restarts = run_with_kills(kafka_bootstrap, topics, env, stream, plan, chunk, tmp_path)

    assert len(done) == v.kills
    assert all(position < v.events for _, position, _ in done), "a kill came after the whole stream was out"
    assert len(worker.log_lines("worker stopped", all_runs=True)) == 1  # only the last run stopped cleanly
    # After the first kill every restart resumed from a stored snapshot (and the deltas after
    # it), not from the log start.
    for assigned in restarts[1:]:
        for p in range(PARTITIONS):
            assert assigned[p]["snapshot"] is not None, assigned[p]

    results, records = verify_end_state(kafka_bootstrap, topics, snapshots, env, group)

    inserts = sum(1 for _, _, kind in stream if kind == "insert")
    assert sum(r.inserts_applied + r.inserts_skipped for r in results.values()) == inserts
    poison = sum(1 for _, _, kind in stream if kind == "poison")
    assert sum(r.dead for r in results.values()) == poison
    for replayed in results.values():
        assert replayed.noised_deletes and replayed.noop_deletes and replayed.inserts_skipped
    if v.transactional:
        assert_exactly_once(kafka_bootstrap, topics, records, poison, worker)
    if v.classes:  # every release carries the K x d matrix and the class names
        dim = int(env["OLU_DIM"])
        assert all(r.json()["classes"] == list(v.classes) and len(r.json()["weights"]) == len(v.classes) * dim
                   for r in records)
    # verify_end_state found no release older than one before it, at either isolation level. The
    # check had something to catch: restarts replayed releases below their floor (the input's end
    # at assignment), held them back and made one when the replay reached it.
    caught_up = worker.log_lines("replay reached its floor; held releases made as one", all_runs=True)
    assert sum(line["held"] for line in caught_up) >= v.kills * v.held_per_kill, caught_up[:5]
    assert any(line["trigger"] == "deletion" for line in caught_up), caught_up[:5]


def with_class_names(stream, classes, seed: int):
    """The stream with each insert's label replaced by the class name a fixed random K x d rule
    gives its features (the nearest of K directions), everything else as it was."""
    rule = None
    out = []
    for key, value, kind in stream:
        if kind == "insert":
            event = orjson.loads(value)
            x = np.asarray(event["x"], np.float64)
            if rule is None:
                rule = np.random.default_rng(seed).normal(size=(len(classes), len(x)))
            event["y"] = classes[int(np.argmax(rule @ x))]
            value = orjson.dumps(event)
        out.append((key, value, kind))
    return out


def assert_exactly_once(bootstrap, topics, records, poison: int, worker) -> None:
    """read_committed shows every release version and every dead letter exactly once, although
    the killed runs published some of them before their transactions were aborted."""
    versions = [(r.json()["partition"], r.json()["version"]) for r in records]
    repeated = sorted({v for v in versions if versions.count(v) > 1})
    assert not repeated, f"release versions seen twice at read_committed: {repeated[:10]}"
    for p, values in releases_by_partition(records).items():
        assert [v["version"] for v in values] == sorted({v["version"] for v in values}), f"partition {p} not monotone"
    dead = read_topic(bootstrap, topics.dlq)
    sources = [(r.headers["olu.source.partition"], r.headers["olu.source.offset"]) for r in dead]
    assert len(sources) == len(set(sources)) == poison, f"{len(sources)} dead letters, {len(set(sources))} " \
                                                        f"distinct, {poison} poison records"
    assert all(r.value == POISON[1] for r in dead)
    assert len(read_topic(bootstrap, topics.params, isolation="read_uncommitted")) >= len(records)
    # The check had something to catch: restarts replayed input whose output was committed already.
    lines = worker.log_lines("output committed by earlier transactions", all_runs=True)
    assert any(line["offset"] > (line["replay_from"] or 0) for line in lines), lines[:5]


# Compaction as soon as a segment rolls: the local broker's cleaner looks every second
# (worker/devtools/kafka_broker.py), and these settings make every closed segment cleanable.
COMPACTED = dict(cleanup_policy="compact", segment_ms=200, min_cleanable_dirty_ratio=0.001,
                 min_compaction_lag_ms=0, delete_retention_ms=100)


def test_a_compacted_parameter_topic_keeps_each_keys_newest_version(kafka_bootstrap, kafka_topic, tmp_path):
    """The natural "latest model per partition" topic: after SIGKILLs and log compaction, each
    key's last record is the newest version ever published for it (docs/worker.md 5.4)."""
    topics = Topics(kafka_topic(partitions=PARTITIONS), kafka_topic(partitions=1, **COMPACTED),
                    kafka_topic(partitions=1), PARTITIONS)
    group = f"compacted-{uuid.uuid4().hex[:8]}"
    env = worker_env(kafka_bootstrap, topics, group, f"file://{tmp_path}/state", **TUNING)
    env.update(OLU_KAFKA_GROUP_INSTANCE_ID=f"{group}-0")
    v = Variant(events=16_000, kills=6, transactional=False, state="file", seed=5005)
    chunk = 250
    stream = event_stream(v.events, seed=v.seed, delete_rate=0.03)
    run_with_kills(kafka_bootstrap, topics, env, stream, kill_points(v, chunk), chunk, tmp_path)

    # The newest version of each partition's key: its input's end (the last process caught up).
    ends = end_offsets(kafka_bootstrap, topics.input)
    newest = {f"{topics.input}/{p}".encode(): end for p, end in ends.items()}
    # One more record rolls the last segment (segment.ms has passed), so the cleaner may take
    # everything the worker wrote; then wait for it (it runs during the stream too).
    time.sleep(0.5)
    produce(kafka_bootstrap, topics.params, [(b"roll", b"{}", "roll")])
    compacted: list = []

    def cleaned() -> bool:
        compacted[:] = read_topic(kafka_bootstrap, topics.params, isolation="read_uncommitted")
        return len([r for r in compacted if r.key in newest]) == PARTITIONS

    wait_for(cleaned, 120, "the log cleaner compacted the parameter topic", interval=1.0)
    assert {rec.key: rec.json()["version"] for rec in compacted if rec.key in newest} == newest
    # and the cleaner had many older versions to drop (the topic's offsets count every record written)
    assert max(rec.offset for rec in compacted) > 20 * PARTITIONS
