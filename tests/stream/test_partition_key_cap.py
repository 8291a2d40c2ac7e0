"""OLU_MAX_RECORDS_PER_KEY through the runner: the subject is the Kafka key, every decode path
(compiled scan, one pass with deletes, Python decoder, record by record) admits the same rows as
the engine fed directly, and the releases carry the cap's figures."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import orjson
import pytest
from confluent_kafka import Message

from worker.config import load_settings
from worker.config.model import build_model
from worker.olu import record_key
from worker.state.store import SnapshotStore, open_store
from worker.stream.input import batch as batch_mod
from worker.stream.input import scan
from worker.stream.input.decode import InsertRun
from worker.stream.partition import PartitionRunner

from ..olu.test_contract import assert_same_state

ROOT = Path(__file__).resolve().parents[2]
DIM, CAP = 3, 3


def account_stream(n: int = 900, seed: int = 0):
    """(messages, the engine's operations): inserts keyed by a skewed subject, single-record
    deletes and, now and then, a request naming every record of one subject so far."""
    rng = np.random.default_rng(seed)
    msgs, ops, by_subject = [], [], {}
    for j in range(n):
        subject = f"user-{int(rng.zipf(1.3)) % 300}"
        if j % 41 == 40 and by_subject.get(subject):
            ids = by_subject[subject]
            value, op = orjson.dumps({"op": "delete", "ids": ids}), ("delete", list(ids))
            by_subject[subject] = []
        elif j % 17 == 16:
            record = f"r-{int(rng.integers(j))}"
            subject = next((s for s, ids in by_subject.items() if record in ids), subject)
            value, op = orjson.dumps({"op": "delete", "id": record}), ("delete", [record])
        else:
            x = rng.normal(size=DIM)
            x /= 2 * np.linalg.norm(x)
            y = int(rng.integers(0, 2))
            value = orjson.dumps({"op": "insert", "id": f"r-{j}", "x": x.tolist(), "y": y})
            op = ("insert", f"r-{j}", x, y, subject)
            by_subject.setdefault(subject, []).append(f"r-{j}")
        msgs.append(Message(topic="t", partition=0, offset=j, key=subject.encode(), value=value,
                            timestamp=(1, 1_700_000_000_000 + j)))
        ops.append(op)
    return msgs, ops


def _settings(unit: str):
    return load_settings([], env={"OLU_DIM": str(DIM), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                                  "OLU_RELEASE_EVERY_EVENTS": "100", "OLU_PRIVACY_UNIT": unit,
                                  "OLU_MAX_RECORDS_PER_KEY": str(CAP)})


def _fixed_noise(monkeypatch):
    """The same noise whatever the path (the one pass draws rows, the others one vector)."""
    from worker.olu.core import entropy

    monkeypatch.setattr(entropy.OsEntropy, "gaussian", lambda self, dim: np.linspace(-1.0, 1.0, dim))
    monkeypatch.setattr(entropy.OsEntropy, "gaussian_rows",
                        lambda self, n, dim: np.tile(np.linspace(-1.0, 1.0, dim), (n, 1)))


def _run(msgs, settings, batch: int = 128):
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    snapshots.write_deltas = lambda topic, partition, entries: None
    runner = PartitionRunner("t", 0, build_model(settings), snapshots=snapshots, settings=settings, model_name="m")
    outs = [runner.process(msgs[j:j + batch]) for j in range(0, len(msgs), batch)]
    return runner, outs


@pytest.mark.parametrize("unit", ["all-deletions", "per-request"])
def test_every_path_admits_what_the_engine_admits(unit, monkeypatch):
    _fixed_noise(monkeypatch)
    msgs, ops = account_stream()
    settings = _settings(unit)
    direct = build_model(settings)
    for op in ops:
        if op[0] == "insert":
            direct.learn_one(op[1], op[2], op[3], subject=op[4])
        else:
            direct.unlearn_request(op[1])
    runs = {"compiled": _run(msgs, settings)}
    with scan.python_decoder():
        runs["python"] = _run(msgs, settings)
        monkeypatch.setattr(batch_mod, "decode_inserts",  # every insert record by record
                            lambda messages, start, **_: InsertRun(start, [], np.empty((0, DIM)), np.empty(0), 0))
        runs["one by one"] = _run(msgs, settings)
    assert direct.key_cap.refused > 100 and direct.deletions_applied > 20
    for name, (runner, outs) in runs.items():
        assert_same_state(runner.model, direct)
        assert runner.next_offset == len(msgs), name
        inserts = sum(op[0] == "insert" for op in ops)
        assert sum(o.inserts + o.skipped for o in outs) == inserts, name  # capped rows: consumed, not learned
    # releases follow each batch's last delete candidate, which the decoder decides: compare like with like
    assert ([(r.version, r.value) for o in runs["python"][1] for r in o.releases]
            == [(r.version, r.value) for o in runs["one by one"][1] for r in o.releases])


def test_a_release_states_the_cap_and_what_it_left_unlearned():
    msgs, _ = account_stream(400)
    runner, outs = _run(msgs, _settings("per-request"))
    schema = json.loads((ROOT / "schemas" / "release.schema.json").read_text())
    values = [orjson.loads(r.value) for o in outs for r in o.releases]
    assert values
    for value in values:
        jsonschema.validate(value, schema)
    last = values[-1]["privacy"]
    assert last["max_records_per_key"] == CAP
    assert 0 < last["records_over_key_cap"] <= runner.model.key_cap.refused  # counted as of that release
    held = {r for r in (f"r-{j}" for j in range(400)) if runner.model.index.holds(record_key(r))}
    per_subject: dict[bytes, int] = {}
    for m in msgs:
        value = orjson.loads(m.value())
        if value["op"] == "insert" and value["id"] in held:
            per_subject[m.key()] = per_subject.get(m.key(), 0) + 1
    assert max(per_subject.values()) <= CAP


def test_the_cap_and_what_it_refused_are_exported():
    from tests.test_metrics_http import value
    from worker.metrics import Metrics

    msgs, _ = account_stream(300)
    runner, _ = _run(msgs, _settings("per-request"))
    metrics = Metrics()
    metrics.update_privacy("t", 0, runner.model)
    assert value(metrics, "olu_max_records_per_key", topic="t", partition=0) == CAP
    assert value(metrics, "olu_records_over_key_cap", topic="t", partition=0) == runner.model.key_cap.refused > 0
    uncapped = Metrics()
    uncapped.update_privacy("t", 0, build_model(load_settings([], env={"OLU_KAFKA_BOOTSTRAP_SERVERS": "k:1", "OLU_DIM": "3"})))
    assert value(uncapped, "olu_max_records_per_key", topic="t", partition=0) is None  # only where it is set
