"""PartitionRunner.process: the batch fast path and the record-by-record path give the same model."""

from __future__ import annotations

import numpy as np
import orjson
from confluent_kafka import Message

from worker.config import load_settings
from worker.olu import PassiveOLU
from worker.state.store import SnapshotStore, open_store
from worker.stream import partition as partition_mod
from worker.stream.decode import InsertRun
from worker.stream.partition import PartitionRunner


def _stream(n=300, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    msgs = []
    for i in range(n):
        if i % 50 == 49:  # a delete of an earlier record, and now and then a poison record
            rid = f"r-{i - 20}"
            value = orjson.dumps({"op": "delete", "id": rid}) if i % 100 != 99 else b"{not json"
        else:
            rid = f"r-{i}"
            x = rng.normal(size=dim)
            x /= 2 * np.linalg.norm(x)
            fields = {"op": "insert", "id": rid, "x": x.tolist(), "y": int(rng.integers(0, 2))}
            if i % 7 == 0:
                fields["ts"] = 1_700_000_000_000 + i  # an optional field: the general decoder's case
            value = orjson.dumps(fields)
        msgs.append(Message(topic="t", partition=0, offset=i, key=rid.encode(), value=value,
                            timestamp=(1, 1_700_000_000_000 + (i * 31) % 1000)))
    return msgs


def _run(msgs, dim=3):
    settings = load_settings([], env={"OLU_DIM": str(dim), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                                      "OLU_RELEASE_EVERY_EVENTS": "64"})
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    model = PassiveOLU(dim=dim, noise_rng=np.random.default_rng(7))
    runner = PartitionRunner("t", 0, model, snapshots=snapshots, settings=settings, model_name="m")
    outs = [runner.process(msgs[j:j + 37]) for j in range(0, len(msgs), 37)]
    return runner, outs


def test_record_by_record_fallback_matches_the_batch_path(monkeypatch):
    msgs = _stream()
    fast, fast_outs = _run(msgs)
    # Force every insert through the fallback: the fast path finds no run at all.
    monkeypatch.setattr(partition_mod, "decode_inserts",
                        lambda messages, start, **_: InsertRun(start, [], np.empty((0, 3)), np.empty(0), 0))
    slow, slow_outs = _run(msgs)
    assert slow.model.t == fast.model.t > 0
    assert np.array_equal(slow.model.z, fast.model.z)
    assert slow.next_offset == fast.next_offset == len(msgs)
    assert slow.event_time_ms == fast.event_time_ms
    for name in ("inserts", "deletes", "skipped"):
        assert sum(getattr(o, name) for o in slow_outs) == sum(getattr(o, name) for o in fast_outs)
    assert [d.reason for o in slow_outs for d in o.dead_letters] == [d.reason for o in fast_outs
                                                                     for d in o.dead_letters] == ["not_json"] * 3
    assert ([(r.trigger, r.version) for o in slow_outs for r in o.releases]
            == [(r.trigger, r.version) for o in fast_outs for r in o.releases])


def test_every_offset_is_accounted_for():
    msgs = _stream()
    runner, outs = _run(msgs)
    accounted = sum(o.inserts + o.deletes + o.skipped + len(o.dead_letters) for o in outs)
    assert accounted == len(msgs)
    assert runner.model.counters["applied"] == sum(o.inserts for o in outs)
