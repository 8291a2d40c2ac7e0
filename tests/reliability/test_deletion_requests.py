"""Deletion requests as privacy teams make them, through crashes and a backlog, on the real broker.

Inserts under 1,000 subjects (keyed by subject, two partitions); 50 subjects forgotten by key and
50 requests naming records with request ids, spread over six stretches of the stream, with a
SIGKILL of the worker after each of the first five. Then, the worker stopped, a backlog of 300,000
events with deletions in it, and a restart. For each delivery mode:

- exactly one receipt per request (at-least-once: duplicates byte-identical; under transactions,
  read_committed: no duplicate at all), each verified by ``olu-worker receipts --verify`` against
  the params topic, none pending;
- the forgotten subjects' records are out of the model, and an in-process replay of the input
  (the masked reference run: ``kafka_harness.verify_against_oracle``, which adopts each stored
  post-noise state) reproduces every release and snapshot bit for bit;
- the backlog's deletions are released as the replay meets them (the release marks' floor,
  docs/worker.md 5.4), not at the backlog's end, and their receipts say so.
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
from worker.stream.partition import MARK_STRETCH

pytestmark = pytest.mark.kafka

SUBJECTS, ROUNDS, STRETCHES = 1_000, 6, 6
FORGET = [f"u-{k}" for k in range(0, SUBJECTS, 20)]  # 50 subjects forgotten by key
NAMED = [f"u-{k}" for k in range(7, SUBJECTS, 20)]  # 50 requests naming two records each
BACKLOG = 300_000


def _x(rng) -> list[float]:
    x = rng.normal(size=DIM)
    return (x * 0.9 / np.linalg.norm(x)).tolist()


def _stretch(n: int, rng) -> list:
    """Round ``n`` of every subject's inserts, then the requests of the n-th sixth of each list."""
    out = [insert(f"u-{k}/r-{n}", _x(rng), int(rng.integers(0, 2)), key=f"u-{k}") for k in range(SUBJECTS)]
    share = len(FORGET) // STRETCHES + 1
    for s in FORGET[n * share:(n + 1) * share]:
        out.append((s.encode(), orjson.dumps({"op": "delete", "subject": s, "request_id": f"F-{s}"}), f"forget:{s}"))
    for s in NAMED[n * share:(n + 1) * share]:
        ids = [f"{s}/r-0", f"{s}/r-{n}"] if n else [f"{s}/r-0"]
        out.append((s.encode(), orjson.dumps({"op": "delete", "ids": ids, "request_id": f"N-{s}"}), f"named:{s}"))
    return out


def _backlog(rng) -> list:
    """300,000 events of 2,000 new subjects' records, and every 5,000th a request for the subject
    of the record just before it: forget it by key, or (every other time) name that record."""
    out = []
    for i in range(BACKLOG):
        if i % 5_000 == 4_999:
            subject = f"b-{(i - 1) % 2_000}"
            body = ({"op": "delete", "subject": subject, "request_id": f"B-{i}"} if i % 10_000 == 4_999
                    else {"op": "delete", "ids": [f"{subject}/r-{i - 1}"], "request_id": f"B-{i}"})
            out.append((subject.encode(), orjson.dumps(body), f"backlog:{i}"))
        else:
            subject = f"b-{i % 2_000}"
            out.append(insert(f"{subject}/r-{i}", _x(rng), int(rng.integers(0, 2)), key=subject))
    return out


def _requests_produced(produced) -> dict[str, object]:
    return {p.kind: p for p in produced if p.kind.split(":")[0] in ("forget", "named", "backlog")}


def _run(kafka_bootstrap, tmp_path_factory, transactional: bool, topics: Topics, receipts_topic: str):
    tag = topics.input.split(".")[0]
    root = tmp_path_factory.mktemp(f"dsr-{transactional}")
    env = worker_env(kafka_bootstrap, topics, tag, f"file://{root}/state",
                     OLU_RECEIPTS_TOPIC=receipts_topic, OLU_PRIVACY_UNIT="per-request", OLU_ROTATION="off",
                     OLU_TRANSACTIONAL=str(transactional).lower(), OLU_BATCH_SIZE="2000",
                     OLU_RELEASE_EVERY_EVENTS="20000")
    worker = WorkerProcess(env, root / "worker.log")
    rng = np.random.default_rng(31)
    produced = []
    try:
        worker.start()
        worker.wait_assigned({0, 1})
        for n in range(STRETCHES):
            seen = len(read_topic(kafka_bootstrap, receipts_topic))
            produced += produce(kafka_bootstrap, topics.input, _stretch(n, rng))
            if n < STRETCHES - 1:  # five kills, each with receipts, releases and state in flight
                wait_for(lambda s=seen: len(read_topic(kafka_bootstrap, receipts_topic)) > s, 120, "a receipt")
                worker.kill()
                worker.start()
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 180,
                 "releases up to the end of the stretches", interval=0.5)
        assert worker.terminate() == 0, worker.log_text()[-3000:]
        backlog_from = end_offsets(kafka_bootstrap, topics.input)
        produced += produce(kafka_bootstrap, topics.input, _backlog(rng))  # while the worker is down
        worker.start()
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 300,
                 "releases up to the end of the backlog", interval=1.0)
        expected = len(FORGET) + len(NAMED) + BACKLOG // 5_000
        wait_for(lambda: len({r.key for r in read_topic(kafka_bootstrap, receipts_topic)}) >= expected, 60,
                 "every receipt")
        out = SimpleNamespace(topics=topics, env=env, produced=produced, backlog_from=backlog_from,
                              transactional=transactional)
        out.exit_code = worker.terminate()
        out.log = worker.log_text()
        out.releases = releases(kafka_bootstrap, topics.params)
        out.receipts = read_topic(kafka_bootstrap, receipts_topic)
        out.snapshots = SnapshotStore(open_store(f"file://{root}/state"), prefix="olu", group=tag)
        return out
    finally:
        worker.cleanup()


@pytest.fixture(scope="module", params=[False, True], ids=["at-least-once", "transactional"])
def run(request, kafka_bootstrap, tmp_path_factory):
    tag = f"dsr-{uuid.uuid4().hex[:8]}"
    topics = Topics(f"{tag}.events", f"{tag}.params", f"{tag}.dlq", 2)
    names = {topics.input: 2, topics.params: 1, topics.dlq: 1, f"{tag}.receipts": 1}
    create_topics(kafka_bootstrap, names)
    try:
        yield _run(kafka_bootstrap, tmp_path_factory, request.param, topics, f"{tag}.receipts")
    finally:
        delete_topics(kafka_bootstrap, names)


def test_one_receipt_per_request_through_five_kills(run):
    assert run.exit_code == 0, run.log[-3000:]
    by_id = defaultdict(list)
    for rec in run.receipts:
        by_id[rec.key.decode()].append(rec.value)
    wanted = {f"F-{s}" for s in FORGET} | {f"N-{s}" for s in NAMED} | {
        f"B-{i}" for i in range(4_999, BACKLOG, 5_000)}
    assert set(by_id) == wanted
    for rid, values in by_id.items():
        assert len(set(values)) == 1, rid  # at-least-once duplicates are byte-identical
        if run.transactional:
            assert len(values) == 1, rid  # read_committed: exactly one
        receipt = orjson.loads(values[0])
        validate("receipt", receipt)
        assert receipt["status"] == "honoured", receipt


def test_every_receipt_verifies_and_none_is_pending(run, capsys, monkeypatch):
    for name, value in run.env.items():
        monkeypatch.setenv(name, value)
    assert main(["receipts", "--verify", "--json", "--timeout", "120"]) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == len({r.key for r in run.receipts}) and all(line["verified"] for line in lines)
    assert main(["receipts", "--pending", "--timeout", "120"]) == 0


def test_the_forgotten_subjects_records_are_out_of_the_model(run):
    found = 0
    for p in (0, 1):
        full = newest_full(run.snapshots, run.topics.input, p)
        model = stored_model(full)
        for n, subject in enumerate(FORGET):
            if model.subject_records(record_key(subject)).size == 0:
                continue  # the other partition's
            found += 1
            forgotten_in = n // (len(FORGET) // STRETCHES + 1)  # the stretch its request came in
            for r in range(ROUNDS):
                assert model.index.holds(record_key(f"{subject}/r-{r}")) == (r > forgotten_in), (subject, r)
    assert found == len(FORGET)


def test_the_backlogs_deletions_are_released_as_the_replay_meets_them(run):
    """Each backlog request's first release comes at most a mark's stretch (plus a few poll
    batches) after it: the floor is the predecessor's newest mark, not the backlog's end."""
    requests = _requests_produced(run.produced)
    versions = defaultdict(list)
    for rec in run.releases:
        value = rec.json()
        versions[value["partition"]].append(value["version"])
    ends = _end_offsets(run.produced)
    waited = []
    for i in range(4_999, BACKLOG, 5_000):
        p = requests[f"backlog:{i}"]
        first = min(v for v in versions[p.partition] if v > p.offset)
        waited.append((first - p.offset, ends[p.partition] - p.offset))
    assert all(events <= MARK_STRETCH + 10_000 for events, _ in waited), waited
    # without the marks' floor the early ones would have waited for their partition's whole backlog
    assert any(left > MARK_STRETCH + 50_000 for _, left in waited)


def _end_offsets(produced) -> dict[int, int]:
    ends: dict[int, int] = defaultdict(int)
    for p in produced:
        ends[p.partition] = max(ends[p.partition], p.offset + 1)
    return ends


def test_the_worker_output_replays_bit_for_bit(kafka_bootstrap, run):
    results = verify_against_oracle(kafka_bootstrap, run.topics, run.snapshots, run.env, run.releases)
    assert sum(len(r.noised_deletes) for r in results.values()) == len(FORGET) + len(NAMED) + BACKLOG // 5_000
