"""The worker watches its own deletion workload, on the real broker: records per request and the ages
of deleted records equal an independent count of what was produced, the plan's assumptions are
exported as set, and a per-key cap's refusals are counted (docs/accounting.md 13)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from tests.stream.kafka_harness import DIM, insert

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


def test_the_observed_workload_is_exported_as_produced(kafka_run):
    # one poll batch per few events, so an age is measured at most a handful of steps late
    run = kafka_run("workload", OLU_PRIVACY_UNIT="per-request", OLU_MAX_RECORDS_PER_KEY=str(CAP),
                    OLU_EXPECTED_DELETION_RATE="0.02", OLU_PLANNED_RECORDS_PER_REQUEST="1.5",
                    OLU_PLANNED_DELETION_AGE_EVENTS="300", OLU_BATCH_SIZE="1")
    topic = run.topics.input
    events, sizes, ages = _workload()
    worker = run.worker()
    worker.start()
    worker.wait_assigned({0})
    run.produce(events)
    end = run.end_offsets()[0]
    run.wait_covered({0: end}, 90, "the input consumed and released")
    text = worker.metrics()
    count, total, _ = _histogram(text, "olu_deletion_request_records", topic)
    assert (count, total) == (len(sizes), sum(sizes))
    count, total, buckets = _histogram(text, "olu_deleted_record_age_events", topic)
    assert count == len(ages) > 10
    for le, n in buckets.items():  # each age counted in its bucket, as the independent count has it
        assert n == sum(a <= le for a in ages), (le, n)
    assert total == sum(ages)
    for metric, value in (("olu_plan_deletion_rate", 0.02), ("olu_plan_records_per_request", 1.5),
                          ("olu_plan_deletion_age_events", 300), ("olu_max_records_per_key", CAP)):
        assert worker.metric_sum(metric, topic=topic) == value, metric
    refused = 600 - sum(min(CAP, n) for n in _arrivals(events).values())
    assert worker.metric_sum("olu_records_over_key_cap", topic=topic) == refused > 0
    assert worker.terminate() == 0, worker.log_text()[-3000:]


def _arrivals(events) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for key, _value, kind in events:
        if kind == "insert":
            out[key] = out.get(key, 0) + 1
    return out
