"""Deletion requests as a privacy team makes them, end to end on the real broker: forget a subject by
key, name records with request ids, and audit each request by its receipt.

Inserts under 200 subjects over two partitions (keyed by subject); then 20 subjects forgotten by
key, 20 requests naming records with request ids, 4 without (their id is their position), one
unknown subject, one malformed request id, with a SIGKILL of the worker in the middle. The
receipts topic then holds exactly one receipt per request (at-least-once duplicates are
byte-identical), each verified by ``olu-worker receipts --verify`` against the params topic; the
forgotten subjects' records are out of the model; an in-process replay of the input reproduces
every release and snapshot bit for bit (``kafka_harness.verify_against_oracle``).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import orjson
import pytest

from tests.infra.schema_samples import validate
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
    stored_model,
    verify_against_oracle,
    wait_for,
    worker_env,
)
from worker.cli import main
from worker.olu import record_key
from worker.state.store import open_store

pytestmark = pytest.mark.kafka

SUBJECTS, PER_SUBJECT = 200, 5
FORGOTTEN = [f"u-{k}" for k in range(0, 200, 10)]  # 20 subjects forgotten by key
NAMED = {f"I-{k}": (f"u-{k}", [f"u-{k}/r-0", f"u-{k}/r-3"]) for k in range(5, 200, 10)}  # 20 by ids
UNNAMED = {k: (f"u-{k}", [f"u-{k}/r-1"]) for k in (1, 2, 3, 4)}  # no request id: derived


def _x(rng) -> list[float]:
    x = rng.normal(size=DIM)
    return (x * 0.9 / np.linalg.norm(x)).tolist()


def _delete(key: str, kind: str, **body):
    return key.encode(), orjson.dumps({"op": "delete", **body}), kind


def _inserts(rng, rounds: range):
    return [insert(f"u-{k}/r-{j}", _x(rng), int(rng.integers(0, 2)), key=f"u-{k}")
            for j in rounds for k in range(SUBJECTS)]


def _first_half(rng):
    out = _inserts(rng, range(PER_SUBJECT - 1))
    out += [_delete(s, f"forget:{s}", subject=s, request_id=f"F-{s}") for s in FORGOTTEN[:10]]
    out += [_delete(s, f"named:{rid}", ids=ids, request_id=rid) for rid, (s, ids) in list(NAMED.items())[:10]]
    return out


def _second_half(rng):
    out = _inserts(rng, range(PER_SUBJECT - 1, PER_SUBJECT))
    out += [_delete(s, f"forget:{s}", subject=s, request_id=f"F-{s}") for s in FORGOTTEN[10:]]
    out += [_delete(s, f"named:{rid}", ids=ids, request_id=rid) for rid, (s, ids) in list(NAMED.items())[10:]]
    out += [_delete(s, f"unnamed:{k}", ids=ids) for k, (s, ids) in UNNAMED.items()]
    out.append(_delete("ghost", "forget:ghost", subject="ghost", request_id="F-ghost"))
    out.append(_delete("u-7", "bad:request-id", ids=["u-7/r-2"], request_id=""))
    out += [insert(f"late-{i}", _x(rng), 1, key=f"u-{i % SUBJECTS}") for i in range(200)]  # learned normally
    return out


@pytest.fixture(scope="module")
def run(kafka_bootstrap, tmp_path_factory):
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"rcp-{tag}.events", f"rcp-{tag}.params", f"rcp-{tag}.dlq", 2)
    receipts_topic = f"rcp-{tag}.receipts"
    names = {topics.input: 2, topics.params: 1, topics.dlq: 1, receipts_topic: 1}
    create_topics(kafka_bootstrap, names)
    root = tmp_path_factory.mktemp("receipts")
    env = worker_env(kafka_bootstrap, topics, f"rcp-{tag}", f"file://{root}/state",
                     OLU_RECEIPTS_TOPIC=receipts_topic, OLU_PRIVACY_UNIT="per-request",
                     OLU_ROTATION="off")  # the in-process oracle replays one model
    worker = WorkerProcess(env, root / "worker.log")
    rng = np.random.default_rng(23)
    try:
        worker.start()
        worker.wait_assigned({0, 1})
        produced = produce(kafka_bootstrap, topics.input, _first_half(rng))
        wait_for(lambda: len(read_topic(kafka_bootstrap, receipts_topic)) >= 5, 120, "some receipts")
        worker.kill()  # SIGKILL with receipts, releases and snapshots in flight
        worker.start()
        produced += produce(kafka_bootstrap, topics.input, _second_half(rng))
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 180,
                 "releases up to the end of the input", interval=0.3)
        wait_for(lambda: len({r.key for r in read_topic(kafka_bootstrap, receipts_topic)})
                 >= len(FORGOTTEN) + len(NAMED) + len(UNNAMED) + 1, 60, "every receipt")
        worker.check_alive()
        out = SimpleNamespace(topics=topics, env=env, produced=produced, receipts_topic=receipts_topic)
        out.exit_code = worker.terminate()
        out.log = worker.log_text()
        out.releases = releases(kafka_bootstrap, topics.params)
        out.receipts = read_topic(kafka_bootstrap, receipts_topic)
        out.dead_letters = read_topic(kafka_bootstrap, topics.dlq)
        out.snapshots = SnapshotStore(open_store(f"file://{root}/state"), prefix="olu", group=f"rcp-{tag}")
        yield out
    finally:
        worker.cleanup()
        delete_topics(kafka_bootstrap, names)


def _receipts(run) -> dict[str, list[bytes]]:
    by_id = defaultdict(list)
    for rec in run.receipts:
        by_id[rec.key.decode()].append(rec.value)
    return by_id


def test_exactly_one_receipt_per_request_and_duplicates_are_identical(run):
    assert run.exit_code == 0, run.log[-3000:]
    by_id = _receipts(run)
    where = {p.kind: p for p in run.produced if p.kind.startswith(("unnamed:", "forget:", "named:"))}
    expected = {f"F-{s}" for s in FORGOTTEN} | set(NAMED) | {"F-ghost"} | {
        f"{run.topics.input}/{where[f'unnamed:{k}'].partition}@{where[f'unnamed:{k}'].offset}" for k in UNNAMED}
    assert set(by_id) == expected
    for rid, values in by_id.items():
        assert len(set(values)) == 1, f"{rid}: {len(set(values))} different receipts"
        receipt = orjson.loads(values[0])
        validate("receipt", receipt)
        assert receipt["request_id"] == rid
    for n, subject in enumerate(FORGOTTEN):  # the first ten before each subject's last record
        receipt = orjson.loads(by_id[f"F-{subject}"][0])
        assert (receipt["status"], receipt["subject"]) == ("honoured", subject)
        assert receipt["records"]["applied"] == (PER_SUBJECT - 1 if n < 10 else PER_SUBJECT)
        assert receipt["guarantee"]["unit"] == "per-request" and receipt["guarantee"]["sigma"] > 0
    assert orjson.loads(by_id["F-ghost"][0])["status"] == "nothing_to_unlearn"
    assert all(orjson.loads(by_id[rid][0])["records"]["applied"] == 2 for rid in NAMED)


def test_every_receipt_verifies_against_the_params_topic(run, kafka_bootstrap, capsys, monkeypatch):
    for name, value in run.env.items():
        monkeypatch.setenv(name, value)
    assert main(["receipts", "--verify", "--json", "--timeout", "60"]) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == len(_receipts(run)) and all(line["verified"] for line in lines)
    assert main(["receipts", "--id", "F-u-10", "--verify"]) == 0
    assert "F-u-10: honoured (subject u-10" in capsys.readouterr().out
    assert main(["receipts", "--id", "no-such-request"]) == 3
    assert main(["receipts", "--pending", "--timeout", "60"]) == 0
    assert "0 pending" in capsys.readouterr().out
    assert main(["receipts", "--late", "--timeout", "60"]) == 0  # within the 300 s default
    assert "0 late (deadline 300 s)" in capsys.readouterr().out
    # a deadline no release can meet: every answered request is late, and the exit code says so
    assert main(["receipts", "--late", "--json", "--deletion-deadline-seconds", "0.000001"]) == 3
    late = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {row["request_id"] for row in late} == set(_receipts(run))
    assert {row["status"] for row in late} == {"answered_late"}


def test_the_forgotten_subjects_records_are_out_of_the_model(run):
    """Every record a subject had when it was forgotten is out of the model; a record that arrived
    after the request (the first ten subjects' last one) is learned normally."""
    seen = 0
    for p in (0, 1):
        full = newest_full(run.snapshots, run.topics.input, p)
        model = stored_model(full)
        for k in range(SUBJECTS):
            subject = f"u-{k}"
            if model.subject_records(record_key(subject)).size == 0:
                continue  # the subject lives in the other partition
            seen += 1
            held = [model.index.holds(record_key(f"{subject}/r-{j}")) for j in range(PER_SUBJECT)]
            if subject in FORGOTTEN[:10]:
                assert held == [False] * (PER_SUBJECT - 1) + [True], subject
            elif subject in FORGOTTEN:
                assert not any(held), subject
            elif subject not in [s for s, _ in list(NAMED.values()) + list(UNNAMED.values())]:
                assert all(held), subject
    assert seen == SUBJECTS


def test_a_malformed_request_id_is_dead_lettered(run):
    where = {(p.partition, p.offset): p.kind for p in run.produced}
    reasons = {where[(int(r.headers["olu.source.partition"]), int(r.headers["olu.source.offset"]))]:
               r.headers["olu.error.reason"].decode() for r in run.dead_letters}
    assert reasons == {"bad:request-id": "bad_request_id"}


def test_the_worker_output_replays_bit_for_bit(kafka_bootstrap, run):
    results = verify_against_oracle(kafka_bootstrap, run.topics, run.snapshots, run.env, run.releases)
    assert sum(len(r.noised_deletes) for r in results.values()) == len(FORGOTTEN) + len(NAMED) + len(UNNAMED)
