"""Rebalance storm: three worker processes join and leave again and again while events flow.

Six input partitions, one consumer group, three worker slots. A seeded schedule starts stopped
slots and stops running ones, by SIGTERM (clean revoke: final snapshot, commit, hand over) or
SIGKILL (the partitions stay orphaned until the group's session timeout, then move to a survivor
that restores the dead process's last snapshot and the deltas after it). Each action waits for the
producer to reach a seeded position, so the stream is flowing throughout.

The end state must equal that of a single worker over the same input: per partition the in-process
replay (``kafka_harness.replay_partition``, one uninterrupted engine fed the partition in offset
order) adopting the post-noise state of each deletion the workers made durable (noise is never
stored, so nothing else could reproduce it). ``verify_end_state`` compares final parameters,
ledger, counters, applied index and tombstones bit for bit, and checks every delete honoured,
every version unique or an identical duplicate, and invariant 2.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from tests.stream.kafka_harness import (
    HANG_GUARD_S,
    BackgroundProducer,
    WorkerProcess,
    covered,
    end_offsets,
    event_stream,
    topics_for,
    verify_end_state,
    wait_for,
    worker_env,
)
from worker.state.store import SnapshotStore, open_store

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SEED = 3010  # 4 SIGKILLs and 3 SIGTERMs, each slot killed or stopped at least once
PARTITIONS = 6
SLOTS = 3
ACTIONS = 14
EVENTS = 24_000


def storm_schedule(seed: int, actions: int, slots: int) -> list[tuple[str, int]]:
    """Seeded (action, slot) pairs, action in start / term / kill. Slot 0 runs at the start; at
    least one slot keeps running (a stop needs two running); every slot starts at least once."""
    rnd = random.Random(seed)
    running = {0}
    out = []
    for i in range(actions):
        stopped = [s for s in range(slots) if s not in running]
        never = [s for s in stopped if all(slot != s for _, slot in out)]
        if never and i >= 1:
            action, slot = "start", never[0]
        elif len(running) >= 2 and (not stopped or rnd.random() < 0.5):
            action, slot = rnd.choice(["term", "kill"]), rnd.choice(sorted(running))
        else:
            action, slot = "start", rnd.choice(stopped)
        (running.add if action == "start" else running.discard)(slot)
        out.append((action, slot))
    return out


def test_rebalance_storm_ends_in_the_single_worker_state(kafka_bootstrap, kafka_topic, tmp_path):
    topics = topics_for(kafka_topic, partitions=PARTITIONS)
    group = f"storm-{uuid.uuid4().hex[:8]}"
    env = worker_env(kafka_bootstrap, topics, group, f"file://{tmp_path}/state")
    snapshots = SnapshotStore(open_store(f"file://{tmp_path}/state"), prefix="olu", group=group)
    stream = event_stream(EVENTS, seed=SEED, delete_rate=0.06)
    schedule = storm_schedule(SEED, ACTIONS, SLOTS)
    kinds = Counter(a for a, _ in schedule)
    assert kinds["kill"] >= 3 and kinds["term"] >= 3 and kinds["start"] >= 6, kinds
    rnd = random.Random(SEED + 1)
    phase = EVENTS // (ACTIONS + 1)
    chunk = 100
    feeder = BackgroundProducer(kafka_bootstrap, topics.input, stream, chunk=chunk, pause=0.05, limit=phase)
    workers = [WorkerProcess(env, tmp_path / f"worker-{s}.log") for s in range(SLOTS)]
    running: set[int] = set()
    exits: list[int] = []
    try:
        workers[0].start()
        running.add(0)
        workers[0].wait_assigned(set(range(PARTITIONS)), timeout=HANG_GUARD_S)
        feeder.start()
        for i, (action, slot) in enumerate(schedule):
            feeder.allow((i + 2) * phase)
            target = rnd.randint((i + 1) * phase, (i + 2) * phase - chunk)
            wait_for(lambda: feeder.error or feeder.position >= target, HANG_GUARD_S,
                     f"the producer at {target}", interval=0.02)
            for s in running:
                workers[s].check_alive()
            w = workers[slot]
            if action == "start":
                w.start()
                running.add(slot)
                w.wait_assigned(timeout=HANG_GUARD_S)  # it joined and took over some partitions
            elif action == "term":
                running.discard(slot)
                exits.append(w.terminate(timeout=HANG_GUARD_S))
            else:
                running.discard(slot)
                w.kill()
        feeder.hurry()
        feeder.result(timeout=HANG_GUARD_S)
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 180,
                 "the survivors caught up with the whole stream", interval=0.5)
        for s in sorted(running):
            exits.append(workers[s].terminate(timeout=HANG_GUARD_S))
    finally:
        feeder.hurry()
        feeder.join(30)
        for w in workers:
            w.cleanup()

    assert exits and all(code == 0 for code in exits), [w.log_text()[-2000:] for w in workers]
    # The storm did move partitions around: every slot owned some at some point, and partitions
    # were handed over many times, mostly from a stored snapshot.
    assignments = Counter()
    for s, w in enumerate(workers):
        lines = w.log_lines("partition assigned", all_runs=True)
        assert lines, f"slot {s} never owned a partition"
        assignments.update(line["partition"] for line in lines)
    assert set(assignments) == set(range(PARTITIONS))
    assert sum(assignments.values()) >= 2 * PARTITIONS
    handed = [line for w in workers for line in w.log_lines("partition assigned", all_runs=True)
              if line["snapshot"] is not None]
    assert handed, "no partition was ever taken over from a snapshot"

    results, _ = verify_end_state(kafka_bootstrap, topics, snapshots, env, group)
    inserts = sum(1 for _, _, kind in stream if kind == "insert")
    assert sum(r.inserts_applied + r.inserts_skipped for r in results.values()) == inserts
    assert all(r.noised_deletes for r in results.values())
