"""Hostile input: random bytes, huge arrays, NaN and infinity, deep nesting, wrong types, odd and
empty ids, duplicate ids and fields, deletes before inserts, oversized payloads.

Every record must end in the model (applied), be skipped because its id was deleted first, be a
delete, or be dead-lettered with a reason from the dead-letter schema; nothing crashes and the
partition never stalls (docs/worker.md 3). Tested through public behaviour only --
``decode_event``, ``PartitionRunner.process`` and the running worker -- so a faster decoder
behind them must pass unchanged.

``tests/stream/test_decode.py`` already fuzzes ``decode_event`` with raw bytes and byte-level
mutations of valid records; this file fuzzes record *families* and checks the accounting of a
whole partition against an oracle (``tests/reliability/hostile.py``), in process and on the real
broker, where the worker's memory must also stay bounded under a large hostile volume.
"""

from __future__ import annotations

import math
import random
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from obstore.store import MemoryStore
from prometheus_client.parser import text_string_to_metric_families

from tests.infra.schema_samples import decode_headers, validate
from tests.reliability.hostile import BUILDERS, DIM, expected_outcomes, hostile_batch, new_engine
from tests.stream.kafka_harness import (
    WorkerProcess,
    covered,
    end_offsets,
    input_by_partition,
    newest_full,
    produce,
    read_topic,
    settings_of,
    topics_for,
    wait_for,
    worker_env,
)
from worker.config import load_settings
from worker.devtools.messages import messages
from worker.state.store import SnapshotStore, open_store
from worker.stream.deadletter import DETAIL_MAX_CHARS, REASONS, dead_letter_headers
from worker.stream.exceptions import DeadLetter
from worker.stream.input.decode import MAX_ID_CHARS, Delete, Insert, decode_event
from worker.stream.partition import PartitionRunner

T = "hostile"
GIANT = (b"giant", b"\x00not json" * 115_000, "giant")  # 1 035 000 bytes
MAX_RECORD_BYTES = 16_384
SETTINGS = load_settings([], {"OLU_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "OLU_DIM": str(DIM),
                              "OLU_MAX_RECORD_BYTES": str(MAX_RECORD_BYTES), "OLU_RELEASE_EVERY_EVENTS": "25"},
                         command="run")
FAMILIES = sorted(BUILDERS)
PROPERTY = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Families whose records are never accepted, with the reasons they may get.
ALWAYS_DEAD = {
    "bad requests": {"bad_ids", "too_many_ids", "duplicate_ids", "id_and_ids", "bad_id", "oversized"},
    "huge array": {"wrong_dimension", "oversized"},
    "oversized": {"oversized"},
    "non-finite": {"not_json", "non_finite"},
    "random bytes": set(REASONS),
}


def _batch(families, rnd) -> list[tuple]:
    pool: list[str] = []
    return [BUILDERS[family](rnd, pool) for family in families]


# --------------------------------------------------------------------------- decode_event

@PROPERTY
@given(families=st.lists(st.sampled_from(FAMILIES), min_size=1, max_size=30), rnd=st.randoms(use_true_random=False))
def test_decode_event_accepts_only_well_formed_events_and_names_a_reason_otherwise(families, rnd):
    for family, (key, value, _) in zip(families, _batch(families, rnd)):
        try:
            event = decode_event(key, value, dim=DIM, max_bytes=MAX_RECORD_BYTES)
        except DeadLetter as dead:
            assert dead.reason in REASONS and len(dead.detail) <= DETAIL_MAX_CHARS
            assert dead.reason in ALWAYS_DEAD.get(family, REASONS), (family, dead.reason)
            validate("dead-letter", decode_headers(dead_letter_headers(
                source_topic=T, partition=0, offset=0, reason=dead.reason, detail=dead.detail,
                worker_version="0", failed_at_ms=0)))
            continue
        assert family not in ALWAYS_DEAD, f"a {family} record was accepted"
        assert isinstance(event, (Insert, Delete))
        ids = [event.id] if isinstance(event, Insert) else event.ids
        assert ids and all(type(i) is str and 0 < len(i) <= MAX_ID_CHARS for i in ids)
        assert len(set(ids)) == len(ids)  # a request names each record once
        assert key  # the key routes the record (the partitioning key; a tombstone's is its id)
        assert len(key) + (len(value) if value is not None else 0) <= MAX_RECORD_BYTES
        if isinstance(event, Insert):
            assert len(event.x) == DIM and all(type(v) is float and math.isfinite(v) for v in event.x)
            assert type(event.y) is float and math.isfinite(event.y)
        else:
            assert event.tombstone == (value is None)


# --------------------------------------------------------------------------- PartitionRunner.process

def _run(records, batch: int, settings=SETTINGS):
    """Feed ``records`` to a fresh runner in batches of ``batch``; the summed outcome."""
    msgs = messages(T, 0, records)
    runner = PartitionRunner(T, 0, new_engine(settings), snapshots=SnapshotStore(MemoryStore(), group="g"),
                             settings=settings, model_name="m")
    total = Counter()
    dead: dict[int, tuple] = {}
    for i in range(0, len(msgs), batch):
        out = runner.process(msgs[i:i + batch])
        assert out.resume_at is None  # memory:// never fails a delta write: nothing may stall
        total.update(inserts=out.inserts, skipped=out.skipped, deletes=out.deletes, tombstones=out.tombstones,
                     releases=len(out.releases))
        for d in out.dead_letters:
            assert d.message.offset() not in dead, "a record was dead-lettered twice"
            assert d.message is msgs[d.message.offset()]  # the original message: its own bytes go out
            dead[d.message.offset()] = (d.reason, d.detail)
        for release in out.releases:
            value = orjson.loads(release.value)
            assert all(math.isfinite(w) for w in value["weights"])
    return runner, msgs, total, dead


@PROPERTY
@given(families=st.lists(st.sampled_from(FAMILIES), min_size=1, max_size=60), rnd=st.randoms(use_true_random=False),
       batch=st.integers(1, 64))
def test_partition_runner_accounts_for_every_record(families, rnd, batch):
    records = _batch(families, rnd)
    runner, msgs, total, dead = _run(records, batch)
    expected = expected_outcomes(SETTINGS, [(m.offset(), m.key(), m.value()) for m in msgs])
    assert {off: reason for off, (reason, _) in dead.items()} == expected.dead
    assert all(reason in REASONS and len(detail) <= DETAIL_MAX_CHARS for reason, detail in dead.values())
    assert (total["inserts"], total["skipped"], total["deletes"], total["tombstones"]) == \
        (expected.applied, expected.skipped, expected.deletes, expected.tombstones)
    # Every offset is accounted for exactly once, and the partition moved past all of them.
    assert total["inserts"] + total["skipped"] + total["deletes"] + len(dead) == len(msgs)
    assert runner.next_offset == len(msgs)
    model = runner.model
    assert model.t == expected.applied and np.all(np.isfinite(model.z))
    assert np.linalg.norm(model.z) <= SETTINGS.radius * (1 + 1e-12)


def test_a_large_hostile_batch_in_one_call_is_fully_accounted():
    """The same accounting on one seeded batch of every family, with big micro-batches."""
    records = hostile_batch(random.Random(1234), 3000, valid_share=0.4)
    runner, msgs, total, dead = _run(records, batch=500)
    expected = expected_outcomes(SETTINGS, [(m.offset(), m.key(), m.value()) for m in msgs])
    assert {off: reason for off, (reason, _) in dead.items()} == expected.dead
    assert total["inserts"] == expected.applied > 100 and total["skipped"] == expected.skipped > 0
    assert total["deletes"] == expected.deletes > 50 and total["tombstones"] == expected.tombstones > 0
    reasons = expected.reasons
    for reason in ("not_json", "not_utf8", "wrong_dimension", "oversized", "bad_id", "key_mismatch", "bad_ids",
                   "duplicate_ids", "id_and_ids", "bad_features", "bad_label", "norm_exceeded", "schema_violation",
                   "missing_id", "not_object"):
        assert reasons[reason] > 0, f"the batch produced no {reason}"


# --------------------------------------------------------------------------- the worker, real broker

def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS line")


def _metric_samples(text: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _produce_fast(bootstrap: str, topic: str, records, partitions: int) -> None:
    """Bulk produce without per-record bookkeeping (the volume phase); keys spread by hash."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "log_level": 3, "message.max.bytes": 2_000_000})
    for i, (key, value, _) in enumerate(records):
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.5)
        producer.poll(0)
    assert producer.flush(120) == 0


@pytest.mark.kafka
def test_worker_survives_a_hostile_stream_accounts_for_every_offset_and_keeps_memory_bounded(
        kafka_bootstrap, kafka_topic, tmp_path):
    topics = topics_for(kafka_topic, partitions=2)
    group = f"hostile-{uuid.uuid4().hex[:8]}"
    env = worker_env(kafka_bootstrap, topics, group, f"file://{tmp_path}/state",
                     OLU_MAX_RECORD_BYTES=str(MAX_RECORD_BYTES),
                     # librdkafka's prefetch buffer is configuration, not a leak: keep it small so
                     # what the worker itself holds on to would show.
                     OLU_KAFKA_QUEUED_MAX_MESSAGES_KBYTES="4096")
    rnd = random.Random(20261122)
    worker = WorkerProcess(env, tmp_path / "worker.log")
    volume_bytes = 0
    try:
        worker.start()
        worker.wait_assigned({0, 1})
        # Warm-up: a mixed batch (every family) through the normal producer path.
        produce(kafka_bootstrap, topics.input, hostile_batch(rnd, 2500, valid_share=0.5))
        # Larger than librdkafka's default producer limit (message.max.bytes, 1 000 000) yet accepted
        # by the broker: the worker's producer is sized for it, and its dead letter arrives whole.
        _produce_fast(kafka_bootstrap, topics.input, [GIANT] * 2, topics.partitions)
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 120,
                 "the worker to get through the warm-up batch", interval=0.5)
        rss = [_rss_kib(worker.proc.pid)]
        # Volume: two equal rounds of oversized payloads and huge arrays among other hostile
        # records. A worker that held on to what it rejected would grow by the volume each round.
        for _ in range(2):
            batch = hostile_batch(rnd, 1500, valid_share=0.2, families=["oversized", "huge array"]) + \
                hostile_batch(rnd, 1500, valid_share=0.4)
            volume_bytes = sum(len(v or b"") for _, v, _ in batch)
            _produce_fast(kafka_bootstrap, topics.input, batch, topics.partitions)
            wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 180,
                     "the worker to get through a hostile round", interval=0.5)
            worker.check_alive()
            rss.append(_rss_kib(worker.proc.pid))
        metrics = worker.metrics()
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        worker.cleanup()

    # Memory: the second round of the same volume adds far less than its size, and the whole
    # run stays within a generous bound of the warm process.
    volume_kib = volume_bytes // 1024
    print(f"worker VmRSS after warm-up and after each round: {rss} KiB; {volume_kib} KiB per round")
    assert volume_kib > 30_000, "the rounds should move tens of megabytes"
    # (Observed: +3 to +27 MiB for 85 MiB rounds; holding on to the rejected records would add more
    # than the round's volume, since the payloads alone are that large.)
    assert rss[2] - rss[1] < volume_kib * 3 // 4, f"RSS {rss} KiB grows with the volume ({volume_kib} KiB per round)"
    assert rss[2] - rss[0] < 300_000, f"RSS {rss} KiB"

    # Accounting: every offset of every partition is applied, skipped, a delete or a dead letter.
    settings = settings_of(env)
    inputs = input_by_partition(kafka_bootstrap, topics.input)
    dead_letters = read_topic(kafka_bootstrap, topics.dlq, timeout=120)
    dlq: dict[tuple[int, int], object] = {}
    for rec in dead_letters:
        headers = decode_headers(list(rec.headers.items()))
        validate("dead-letter", headers)
        source = (int(headers["olu.source.partition"]), int(headers["olu.source.offset"]))
        assert headers["olu.source.topic"] == topics.input
        if source in dlq:  # at-least-once: a duplicate must be the same record and reason
            assert dlq[source][1] == headers["olu.error.reason"]
            continue
        dlq[source] = (rec, headers["olu.error.reason"])
    samples = _metric_samples(metrics)

    def metric(name, **labels):
        return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    all_reasons = Counter()
    for p in range(topics.partitions):
        records = inputs[p]
        assert [off for off, _, _ in records] == list(range(len(records)))
        expected = expected_outcomes(settings, records)
        got_dead = {off: reason for (part, off), (_, reason) in dlq.items() if part == p}
        assert got_dead == expected.dead, f"partition {p}: dead letters differ from the oracle"
        by_offset = {off: (key, value) for off, key, value in records}
        for off in got_dead:  # the original key and value bytes, untouched (the giant ones too)
            rec = dlq[(p, off)][0]
            assert (rec.key, rec.value) == by_offset[off] and "olu.truncated" not in rec.headers
        p_label = {"topic": topics.input, "partition": str(p)}
        assert metric("olu_events_total", op="insert", **p_label) == expected.applied + expected.skipped
        assert metric("olu_events_skipped_total", reason="deleted_before_insert", **p_label) == expected.skipped
        assert metric("olu_events_total", op="tombstone", **p_label) == expected.tombstones
        assert metric("olu_events_total", op="delete", **p_label) == expected.deletes - expected.tombstones
        assert expected.applied + expected.skipped + expected.deletes + len(expected.dead) == len(records)
        full = newest_full(SnapshotStore(open_store(f"file://{tmp_path}/state"), prefix="olu", group=group),
                           topics.input, p)
        assert full.offset == len(records) and full.header["model"]["t"] == expected.applied
        all_reasons += expected.reasons
    for reason, n in all_reasons.items():
        assert metric("olu_dead_letters_total", topic=topics.input, reason=reason) == n
    assert sum(all_reasons.values()) == metric("olu_dead_letters_total")
    assert {"oversized", "wrong_dimension", "not_json", "key_mismatch", "norm_exceeded"} <= set(all_reasons)
