"""``memory-pair`` against the real broker, with a deletion budget (capacity 2) that runs out.

- ``OLU_ON_BUDGET=retrain``: the third deletion rebuilds the model from the retained data; its
  release carries ``olu.budget: retrained``, a new odometer epoch starts (capacity back to 2), the
  worker logs it, and nothing is dead-lettered.
- ``OLU_ON_BUDGET=refuse``: the third deletion is refused without touching the model: the worker
  logs an error naming the partition, counts it, sends the delete to the dead-letter topic with
  reason ``budget_exhausted`` (original key and bytes) and keeps going (no crash loop).

Either way every release, snapshot and delta equals the in-process oracle bit for bit.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from tests.infra.schema_samples import decode_headers, validate
from tests.stream.kafka_harness import delete, event_stream, read_topic, stored_objects

pytestmark = pytest.mark.kafka

CAPACITY = 2


def _stream():
    inserts = [ev for ev in event_stream(200, seed=73, delete_rate=0.0) if ev[2] == "insert"]
    head, tail = inserts[:120], inserts[120:150]
    victims = [head[k][0].decode() for k in (5, 60, 100)]
    return head + [delete(v) for v in victims] + tail, victims


@pytest.mark.parametrize("policy", ["retrain", "refuse"])
def test_memory_pair_budget_policy(policy, kafka_run):
    run = kafka_run(f"mp-{policy}", OLU_ALGORITHM="memory-pair", OLU_MAX_DELETIONS=str(CAPACITY),
                    OLU_ON_BUDGET=policy, OLU_L2="0.1", OLU_RADIUS="5",
                    OLU_DELETION_RELEASES="each")  # the three deletions in a row: a release each
    records, victims = _stream()
    produced = run.produce(records)
    deletes = [p for p in produced if p.kind == "delete"]
    worker = run.worker()
    worker.start()
    worker.wait_assigned({0})
    end = run.end_offsets()[0]
    run.wait_covered({0: end}, 90)
    worker.check_alive()  # a refused deletion must not stop the worker
    metrics = {name: worker.metric_sum(name, partition="0") for name in
               ("olu_deletions_total", "olu_deletion_capacity_left", "olu_deletions_refused_total")}
    dead_metric = worker.metric_sum("olu_dead_letters_total", reason="budget_exhausted")
    assert worker.terminate() == 0, worker.log_text()[-3000:]

    records_out = run.releases()
    for rec in records_out:
        validate("release", rec.json())
    by_delete = {rec.json()["version"]: rec for rec in records_out if rec.headers.get("olu.trigger") == b"deletion"}
    dead = read_topic(run.bootstrap, run.topics.dlq)
    first, second, third = (d.offset + 1 for d in deletes)
    for version, left in ((first, 1), (second, 0)):  # two noised deletions spend the budget
        value = by_delete[version].json()
        assert value["privacy"]["deletions_capacity_left"] == left and value["epoch"] == 0
        assert "olu.budget" not in by_delete[version].headers
    final = max((rec.json() for rec in records_out), key=lambda v: v["version"])
    assert final["version"] == end and final["algorithm"] == "memory-pair"

    if policy == "retrain":
        rec = by_delete[third]
        assert rec.headers.get("olu.budget") == b"retrained"
        assert rec.json()["epoch"] == 1 and rec.json()["privacy"]["deletions_capacity_left"] == CAPACITY
        assert rec.json()["privacy"]["eps_rdp_slope"] == 0.0  # a new odometer epoch
        assert not dead and dead_metric == 0 and metrics["olu_deletions_refused_total"] == 0
        assert metrics["olu_deletions_total"] == 3 and metrics["olu_deletion_capacity_left"] == CAPACITY
        lines = worker.log_lines("deletion budget exhausted; model retrained on the retained data", all_runs=True)
        assert [(e["level"], e["partition"], e["offset"]) for e in lines] == [("WARNING", 0, deletes[2].offset)]
        assert final["epoch"] == 1
    else:
        assert third not in by_delete and set(by_delete) == {first, second}
        assert len(dead) == 1
        headers = decode_headers(list(dead[0].headers.items()))
        validate("dead-letter", headers)
        assert headers["olu.error.reason"] == "budget_exhausted"
        assert int(headers["olu.source.offset"]) == deletes[2].offset
        assert (dead[0].key, dead[0].value) == (deletes[2].key, deletes[2].value)  # the delete is not lost
        assert dead[0].key.decode() == victims[2]
        assert metrics["olu_deletions_refused_total"] == 1 and dead_metric == 1
        assert metrics["olu_deletions_total"] == 2 and metrics["olu_deletion_capacity_left"] == 0
        lines = worker.log_lines("deletion refused: privacy budget exhausted", all_runs=True)
        assert [(e["level"], e["partition"], e["offset"], e["reason"]) for e in lines] == [
            ("ERROR", 0, deletes[2].offset, "budget_exhausted")]
        assert final["epoch"] == 0 and final["privacy"]["deletions_capacity_left"] == 0
        assert final["t"] == 150  # the inserts after the refusal were learned

    # invariant 6: stored state keeps the raw features of retained records only (rows and curvature pairs)
    features = {rid: np.array(orjson.loads(value)["x"], np.float64).tobytes()
                for key, value, kind in records if kind == "insert" for rid in [key.decode()]}
    forgotten = victims if policy == "retrain" else victims[:2]
    blobs = [o.blob for o in stored_objects(run.snapshots, run.topics.input, 0)]
    assert blobs and not any(features[v] in b for v in forgotten for b in blobs)
    if policy == "refuse":
        assert features[victims[2]] in blobs[-1]  # refused: the model still holds the record

    replayed = run.verify(records_out)
    assert replayed[0].dead == (1 if policy == "refuse" else 0)
    assert len(replayed[0].noised_deletes) == (3 if policy == "retrain" else 2)
