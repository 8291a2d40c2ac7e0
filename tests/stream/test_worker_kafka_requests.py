"""Deletion requests naming several records (``ids``), end to end on the real broker.

Events are keyed by data subject, not by record id, over two partitions: a subject's inserts and
its requests land in one partition. Requests name 1, 2 and 10,000 records; one names ids never
seen and one already deleted; one changes nothing. Every malformed request (and an unkeyed
record) is dead-lettered with its reason while the worker goes on consuming. Each request that
changed the model is one ledger entry (one noise draw, one charge) and one release whose
``request`` object reports it; an in-process replay of the input reproduces every release and
snapshot bit for bit (``kafka_harness.verify_against_oracle``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from types import SimpleNamespace

import numpy as np
import orjson
import pytest

from tests.infra.schema_samples import decode_headers, validate
from tests.stream.kafka_harness import (
    DIM,
    SnapshotStore,
    Topics,
    WorkerProcess,
    covered,
    create_topics,
    delete_topics,
    end_offsets,
    insert,
    newest_full,
    produce,
    read_topic,
    releases,
    verify_against_oracle,
    wait_for,
    worker_env,
)
from tests.stream.subjects import request
from worker.state.store import open_store

pytestmark = pytest.mark.kafka

BIG = [f"c-{i:05d}" for i in range(10_000)]


def _x(rng) -> list[float]:
    x = rng.normal(size=DIM)
    return (x * 0.9 / np.linalg.norm(x)).tolist()


def _labelled(record, label: str):
    key, value, _ = record
    return key, value, label


def _j(obj) -> bytes:
    return orjson.dumps(obj)


# label -> (key, value, expected dead-letter reason): every malformed request, and unkeyed records
BAD = {
    "bad:empty": (b"s-e", _j({"op": "delete", "ids": []}), "bad_ids"),
    "bad:string": (b"s-e", _j({"op": "delete", "ids": "e-0"}), "bad_ids"),
    "bad:object": (b"s-e", _j({"op": "delete", "ids": {"0": "e-0"}}), "bad_ids"),
    "bad:too-many": (b"s-e", _j({"op": "delete", "ids": [f"e-{i}" for i in range(10_001)]}), "too_many_ids"),
    "bad:duplicate": (b"s-e", _j({"op": "delete", "ids": ["e-0", "e-1", "e-0"]}), "duplicate_ids"),
    "bad:id-and-ids": (b"s-e", _j({"op": "delete", "id": "e-0", "ids": ["e-1"]}), "id_and_ids"),
    "bad:number-item": (b"s-e", _j({"op": "delete", "ids": ["e-0", 7]}), "bad_id"),
    "bad:empty-item": (b"s-e", _j({"op": "delete", "ids": ["e-0", ""]}), "bad_id"),
    "bad:long-item": (b"s-e", _j({"op": "delete", "ids": ["e-0", "e" * 257]}), "bad_id"),
    "bad:unkeyed-request": (None, _j({"op": "delete", "ids": ["e-0"]}), "key_mismatch"),
    "bad:unkeyed-insert": (None, _j({"op": "insert", "id": "e-9", "x": [0.1] * DIM, "y": 1}), "key_mismatch"),
}


def _stream():
    """(key, value, label): subjects' inserts, the requests, the bad records, more inserts, a last request."""
    rng = np.random.default_rng(17)
    out = [_labelled(insert(rid, _x(rng), int(rng.integers(0, 2)), key="s-c"), "insert") for rid in BIG]
    for subject, ids in (("s-a", ["a-0"]), ("s-b", ["b-0", "b-1"]), ("s-d", ["d-0", "d-1", "d-2"]),
                         ("s-e", [f"e-{i}" for i in range(5)])):
        out += [_labelled(insert(rid, _x(rng), int(rng.integers(0, 2)), key=subject), "insert") for rid in ids]
    out += [_labelled(insert(f"r-{i}", _x(rng), int(rng.integers(0, 2))), "insert") for i in range(300)]
    out += [
        _labelled(request("s-a", ["a-0"]), "req:one"),
        _labelled(request("s-b", ["b-0", "b-1"]), "req:two"),
        _labelled(request("s-c", BIG), "req:10000"),
        # d-1 applied; ghost never inserted (not applied); d-0 ... deleted just below first
        _labelled(request("s-d", ["d-0"]), "req:d0"),
        _labelled(request("s-d", ["d-1", "d-ghost", "d-0"]), "req:mixed"),
        _labelled(request("s-d", ["d-0", "d-never"]), "req:nothing"),  # changes nothing: no release
    ]
    for label, (key, value, _) in BAD.items():
        out.append((key, value, label))
        out += [_labelled(insert(f"{label}-{i}", _x(rng), 1), "insert") for i in range(3)]
    out += [_labelled(insert(f"t-{i}", _x(rng), int(rng.integers(0, 2))), "insert") for i in range(200)]
    out.append(_labelled(request("s-d", ["d-2"]), "req:last"))  # the worker kept consuming
    return out


EXPECTED = {  # label -> the release's request object
    "req:one": {"ids": 1, "applied": 1, "not_applied": [], "duplicates": 0},
    "req:two": {"ids": 2, "applied": 2, "not_applied": [], "duplicates": 0},
    "req:10000": {"ids": 10_000, "applied": 10_000, "not_applied": [], "duplicates": 0},
    "req:d0": {"ids": 1, "applied": 1, "not_applied": [], "duplicates": 0},
    "req:mixed": {"ids": 3, "applied": 1, "not_applied": ["d-ghost"], "duplicates": 1},
    "req:last": {"ids": 1, "applied": 1, "not_applied": [], "duplicates": 0},
}


@pytest.fixture(scope="module")
def run(kafka_bootstrap, tmp_path_factory):
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"req-{tag}.events", f"req-{tag}.params", f"req-{tag}.dlq", 2)
    names = {topics.input: 2, topics.params: 1, topics.dlq: 1}
    create_topics(kafka_bootstrap, names)
    root = tmp_path_factory.mktemp("requests")
    # one release per request, each reporting it (the default coalesces a poll batch's deletions)
    env = worker_env(kafka_bootstrap, topics, f"req-{tag}", f"file://{root}/state", OLU_DELETION_RELEASES="each")
    worker = WorkerProcess(env, root / "worker.log")
    try:
        worker.start()
        worker.wait_assigned({0, 1})
        produced = produce(kafka_bootstrap, topics.input, _stream())
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 120,
                 "releases up to the end of the input", interval=0.3)
        worker.check_alive()
        out = SimpleNamespace(topics=topics, env=env, produced=produced, metrics=worker.metrics(),
                              dead_by_reason={reason: worker.metric_sum("olu_dead_letters_total", reason=reason)
                                              for reason in {r for *_, r in BAD.values()}})
        out.exit_code = worker.terminate()
        out.log = worker.log_text()
        out.releases = releases(kafka_bootstrap, topics.params)
        out.dead_letters = read_topic(kafka_bootstrap, topics.dlq)
        out.snapshots = SnapshotStore(open_store(f"file://{root}/state"), prefix="olu", group=f"req-{tag}")
        yield out
    finally:
        worker.cleanup()
        delete_topics(kafka_bootstrap, names)


def _by_label(run) -> dict[str, object]:
    return {p.kind: p for p in run.produced if p.kind != "insert"}


def test_each_request_gets_one_release_reporting_it_in_its_subjects_partition(run):
    assert run.exit_code == 0, run.log[-3000:]
    where = _by_label(run)
    deletion = {}
    for rec in run.releases:
        value = rec.json()
        validate("release", value)
        if rec.headers.get("olu.trigger") == b"deletion":
            deletion[(value["partition"], value["version"])] = value
        else:
            assert "request" not in value
    for label, report in EXPECTED.items():
        p = where[label]  # a request without a request_id is named by its position
        assert deletion[(p.partition, p.offset + 1)]["request"] == {
            "request_id": f"{run.topics.input}/{p.partition}@{p.offset}", **report}, label
    assert {(where[label].partition, where[label].offset + 1) for label in EXPECTED} == set(deletion)
    nothing = where["req:nothing"]
    assert (nothing.partition, nothing.offset + 1) not in deletion
    # the subject key routed each request to the partition of its records' inserts
    inserts = {orjson.loads(p.value)["id"]: p.partition for p in run.produced if p.kind == "insert"}
    for label in EXPECTED:
        p = where[label]
        assert {inserts[rid] for rid in orjson.loads(p.value)["ids"] if rid in inserts} == {p.partition}


def test_one_ledger_entry_and_one_charge_per_request(run):
    where = _by_label(run)
    for p in (0, 1):
        meta = newest_full(run.snapshots, run.topics.input, p).header["model"]
        changed = sorted(where[label].offset for label in EXPECTED if where[label].partition == p)
        ledger = meta["ledger"]
        # one entry (one noise draw, one charge) per request that changed the model, however many ids
        assert len(ledger) == meta["accountant"]["deletions"] == len(changed), p
        assert [e["i"] for e in ledger] == list(range(1, len(changed) + 1))
        # each entry's noise covers every applied record of its request (one step each here):
        # the 10,000 records of one request are one draw, not 10,000
        applied = [EXPECTED[label]["applied"] for label in sorted(EXPECTED, key=lambda lb: where[lb].offset)
                   if where[label].partition == p]
        assert [len(e["u"]) for e in ledger] == applied, p
    assert 10_000 in [len(e["u"]) for p in (0, 1)
                      for e in newest_full(run.snapshots, run.topics.input, p).header["model"]["ledger"]]


def test_every_bad_request_is_a_dead_letter_and_the_worker_kept_consuming(run):
    where = {(p.partition, p.offset): p for p in run.produced}
    got = {}
    for rec in run.dead_letters:
        headers = decode_headers(list(rec.headers.items()))
        validate("dead-letter", headers)
        source = where[(int(headers["olu.source.partition"]), int(headers["olu.source.offset"]))]
        assert (rec.key, rec.value) == (source.key, source.value)  # the original bytes
        got[source.kind] = headers["olu.error.reason"]
    assert got == {label: reason for label, (_, _, reason) in BAD.items()}
    assert run.dead_by_reason == Counter(reason for *_, reason in BAD.values())
    assert "req:last" in _by_label(run)  # produced after every bad record, and released (above)


def test_the_worker_output_replays_bit_for_bit(kafka_bootstrap, run):
    results = verify_against_oracle(kafka_bootstrap, run.topics, run.snapshots, run.env, run.releases)
    assert sum(len(r.noised_deletes) for r in results.values()) == len(EXPECTED)
    assert sum(r.dead for r in results.values()) == len(BAD)
