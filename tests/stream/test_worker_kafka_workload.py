"""The worker watches its own deletion workload, on the real broker: records per request and the ages
of deleted records equal an independent count of what was produced, the plan's assumptions are
exported as set, and a per-key cap's refusals are counted (docs/accounting.md 13)."""

from __future__ import annotations

import uuid

import numpy as np
import orjson
import pytest

from tests.stream.kafka_harness import (
    DIM,
    Topics,
    WorkerProcess,
    covered,
    create_topics,
    delete_topics,
    end_offsets,
    insert,
    produce,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.kafka
SUBJECTS, CAP = 12, 6


def _workload():
    """Inserts keyed by a subject, single-record deletes and account deletes (``ids``), with the
    independent count: per request the records named, and the age (insert steps) of each deleted
    record the model holds."""
    rng = np.random.default_rng(11)
    events, sizes, ages = [], [], []
    step, learned, arrived = 0, {}, {}  # learned: id -> its insert step; arrived: subject -> count
    held_by: dict[str, list[str]] = {}
    for j in range(600):
        subject = f"user-{int(rng.integers(SUBJECTS))}"
        rid = f"r-{j}"
        x = rng.normal(size=DIM)
        x *= 0.9 / max(1.0, float(np.linalg.norm(x)))
        events.append(insert(rid, x, int(x[0] > 0), key=subject))
        arrived[subject] = arrived.get(subject, 0) + 1
        if arrived[subject] <= CAP:  # admitted by arrival: the model learns it
            step += 1
            learned[rid] = step
            held_by.setdefault(subject, []).append(rid)
        if j % 50 == 49:  # an account deletion: all of one subject's records so far, learned or not
            victim = f"user-{(j // 50) % SUBJECTS}"
            ids = [f"r-{i}" for i in range(j + 1) if events[i][0] == victim.encode()]
            if ids:
                events.append((victim.encode(), orjson.dumps({"op": "delete", "ids": ids}), "delete"))
                sizes.append(len(ids))
                ages += [step - learned.pop(r) for r in ids if r in learned]
        elif j % 37 == 36 and learned:  # a single-record delete of a learned record
            rid = next(iter(learned))
            events.append((events[int(rid[2:])][0], orjson.dumps({"op": "delete", "id": rid}), "delete"))
            sizes.append(1)
            ages.append(step - learned.pop(rid))
    return events, sizes, ages


def _histogram(text: str, name: str, topic: str) -> tuple[float, float, dict[float, float]]:
    from prometheus_client.parser import text_string_to_metric_families

    count = total = 0.0
    buckets = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("topic") != topic:
                continue
            if s.name == f"{name}_count":
                count += s.value
            elif s.name == f"{name}_sum":
                total += s.value
            elif s.name == f"{name}_bucket":
                buckets[float(s.labels["le"])] = buckets.get(float(s.labels["le"]), 0.0) + s.value
    return count, total, buckets


def test_the_observed_workload_is_exported_as_produced(kafka_bootstrap, tmp_path):
    name = f"workload-{uuid.uuid4().hex[:8]}"
    topics = Topics(f"{name}.events", f"{name}.params", f"{name}.dlq", 1)
    create_topics(kafka_bootstrap, {topics.input: 1, topics.params: 1, topics.dlq: 1})
    # one poll batch per few events, so an age is measured at most a handful of steps late
    env = worker_env(kafka_bootstrap, topics, name, f"file://{tmp_path}/state", OLU_PRIVACY_UNIT="per-request",
                     OLU_MAX_RECORDS_PER_KEY=str(CAP), OLU_EXPECTED_DELETION_RATE="0.02",
                     OLU_PLANNED_RECORDS_PER_REQUEST="1.5", OLU_PLANNED_DELETION_AGE_EVENTS="300",
                     OLU_BATCH_SIZE="1")
    events, sizes, ages = _workload()
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        worker.start()
        worker.wait_assigned({0})
        produce(kafka_bootstrap, topics.input, events)
        end = end_offsets(kafka_bootstrap, topics.input)[0]
        wait_for(covered(kafka_bootstrap, topics, {0: end}), 90, "the input consumed and released", interval=0.3)
        text = worker.metrics()
        count, total, _ = _histogram(text, "olu_deletion_request_records", topics.input)
        assert (count, total) == (len(sizes), sum(sizes))
        count, total, buckets = _histogram(text, "olu_deleted_record_age_events", topics.input)
        assert count == len(ages) > 10
        for le, n in buckets.items():  # each age counted in its bucket, as the independent count has it
            assert n == sum(a <= le for a in ages), (le, n)
        assert total == sum(ages)
        for metric, value in (("olu_plan_deletion_rate", 0.02), ("olu_plan_records_per_request", 1.5),
                              ("olu_plan_deletion_age_events", 300), ("olu_max_records_per_key", CAP)):
            assert worker.metric_sum(metric, topic=topics.input) == value, metric
        refused = 600 - sum(min(CAP, n) for n in _arrivals(events).values())
        assert worker.metric_sum("olu_records_over_key_cap", topic=topics.input) == refused > 0
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        worker.cleanup()
        delete_topics(kafka_bootstrap, [topics.input, topics.params, topics.dlq])


def _arrivals(events) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for key, _value, kind in events:
        if kind == "insert":
            out[key] = out.get(key, 0) + 1
    return out
