"""Receipts and forgetting by subject through PartitionRunner in process (no broker).

One receipt per delete record: honoured ones ride behind the first release at or above their
version, the others go out with their batch; every receipt is a pure function of the input (the
same bytes however the stream is cut into poll batches); a snapshot keeps the undelivered ones so
a restore sends them again; a model without the subject map refuses a subject delete.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from tests.infra.schema_samples import validate
from worker.config import load_settings
from worker.devtools.messages import messages
from worker.olu import PassiveOLU
from worker.state.store import SnapshotStore, open_store
from worker.stream.partition import PartitionRunner

DIM = 3
SETTINGS = load_settings([], env={"OLU_DIM": str(DIM), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                                  "OLU_RELEASE_EVERY_EVENTS": "100000"})
SUBJECTS = 6


def _insert(rid: str, subject: str, rng) -> tuple[bytes, bytes]:
    x = rng.normal(size=DIM)
    x *= 0.9 / np.linalg.norm(x)
    return subject.encode(), orjson.dumps({"op": "insert", "id": rid, "x": x.tolist(), "y": int(rng.integers(0, 2))})


def _delete(key: str, **body) -> tuple[bytes, bytes]:
    return key.encode(), orjson.dumps({"op": "delete", **body})


def _stream() -> list:
    rng = np.random.default_rng(5)
    records = [_insert(f"r-{i}", f"s-{i % SUBJECTS}", rng) for i in range(60)]
    records.append(_delete("s-1", subject="s-1", request_id="DSR-1"))  # 60: ten records of s-1
    records.append(_delete("s-2", ids=["r-2", "r-8", "ghost"]))  # 61: no request id: derived
    records.append(_delete("nobody", subject="nobody", request_id="DSR-2"))  # 62: nothing to unlearn
    records.append(_delete("s-1", subject="s-1", request_id="DSR-3"))  # 63: all unlearned before
    records += [_insert(f"r-{i}", f"s-{i % SUBJECTS}", rng) for i in range(60, 70)]
    records.append((b"r-3", None))  # 74: a tombstone
    records += [_insert(f"r-{i}", f"s-{i % SUBJECTS}", rng) for i in range(70, 75)]
    return records


def _runner(model=None, snapshots=None) -> PartitionRunner:
    model = model or PassiveOLU(dim=DIM, forget_by_key=True, noise_rng=np.random.default_rng(1))
    return PartitionRunner("t", 0, model, snapshots=snapshots or SnapshotStore(open_store("memory://"),
                                                                               prefix="p", group="g", keep=3),
                           settings=SETTINGS, model_name="m")


def _run(runner, msgs, cut: int) -> tuple[list, list]:
    """(receipts behind releases, with their release's version; standalone receipts)."""
    behind, alone = [], []
    for j in range(0, len(msgs), cut):
        out = runner.process(msgs[j:j + cut])
        alone += out.receipts
        behind += [(r.version, made) for r in out.releases + runner.outbox.ready() for made in r.receipts]
    runner.final_release()
    behind += [(r.version, made) for r in runner.outbox.ready() for made in r.receipts]
    return behind, alone


def test_one_receipt_per_request_each_behind_a_release_that_reflects_it():
    msgs = messages("t", 0, _stream())
    behind, alone = _run(_runner(), msgs, cut=len(msgs))
    receipts = {orjson.loads(r.value)["request_id"]: orjson.loads(r.value) for _, r in behind} | {
        orjson.loads(r.value)["request_id"]: orjson.loads(r.value) for r in alone}
    assert sorted(receipts) == ["DSR-1", "DSR-2", "DSR-3", "t/0@61", "t/0@74"]
    for receipt in receipts.values():
        validate("receipt", receipt)
    assert all(version >= made.version for version, made in behind)
    by_key = receipts["DSR-1"]
    assert (by_key["status"], by_key["subject"], by_key["version"]) == ("honoured", "s-1", 61)
    assert by_key["records"] == {"named": 10, "applied": 10, "not_applied": 0, "duplicates": 0}
    assert by_key["guarantee"]["outcome"] == "noised" and by_key["guarantee"]["sigma"] > 0
    by_ids = receipts["t/0@61"]
    assert (by_ids["status"], by_ids["ids"]) == ("honoured", ["r-2", "r-8", "ghost"])
    assert by_ids["records"] == {"named": 3, "applied": 2, "not_applied": 1, "duplicates": 0}
    assert receipts["DSR-2"]["status"] == receipts["DSR-3"]["status"] == "nothing_to_unlearn"
    assert receipts["DSR-3"]["records"] == {"named": 10, "applied": 0, "not_applied": 0, "duplicates": 10}
    assert receipts["t/0@74"]["ids"] == ["r-3"] and receipts["t/0@74"]["status"] == "honoured"
    assert {r.key for _, r in behind} == {b"DSR-1", b"t/0@61", b"t/0@74"}


def test_a_forgotten_subjects_records_leave_the_model():
    runner = _runner()
    msgs = messages("t", 0, _stream())
    _run(runner, msgs, cut=len(msgs))
    from worker.olu import record_key
    keys = [record_key(f"r-{i}") for i in range(1, 60, SUBJECTS)]
    assert all(not runner.model.index.holds(k) for k in keys)
    assert runner.model.index.holds(record_key("r-61"))  # a later record of s-1 is learned normally


@pytest.mark.parametrize("cut", [1, 7, 23])
def test_receipts_are_the_same_bytes_however_the_stream_is_cut(cut):
    msgs = messages("t", 0, _stream())
    whole = _run(_runner(), msgs, cut=len(msgs))
    pieces = _run(_runner(), msgs, cut=cut)
    strip = lambda run: sorted(made.value for _, made in run[0]) + sorted(made.value for made in run[1])  # noqa: E731
    assert strip(whole) == strip(pieces)


def test_a_snapshot_keeps_undelivered_receipts_and_a_restore_sends_them_again():
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    runner = _runner(snapshots=snapshots)
    msgs = messages("t", 0, _stream())
    behind, alone = _run(runner, msgs, cut=len(msgs))
    runner.receipts.delivered(alone[0])  # one of them is known delivered: not kept
    runner.snapshot()
    again, _ = PartitionRunner.restore("t", 0, snapshots=snapshots, settings=SETTINGS, model_name="m",
                                       model_factory=lambda: PassiveOLU(dim=DIM, forget_by_key=True),
                                       on_corrupt="fail")
    out = again.process(messages("t", 0, [], start=len(msgs)))
    assert [r.value for r in out.receipts] == [r.value for r in alone[1:]]
    more = again.process(messages("t", 0, [_insert("r-99", "s-0", np.random.default_rng(0))], start=len(msgs)))
    again.final_release()
    resent = [made for r in more.releases + again.outbox.ready() for made in r.receipts]
    assert sorted(r.value for r in resent) == sorted(made.value for _, made in behind)
    for made in resent + out.receipts:
        again.receipts.delivered(made)
    assert not again.receipts.unconfirmed


def test_a_model_without_the_subject_map_refuses_a_subject_delete():
    runner = _runner(PassiveOLU(dim=DIM, noise_rng=np.random.default_rng(1)))
    rng = np.random.default_rng(0)
    msgs = messages("t", 0, [_insert("r-0", "s-0", rng), _delete("s-0", subject="s-0", request_id="DSR-9")])
    out = runner.process(msgs)
    assert [(d.message.offset(), d.reason) for d in out.dead_letters] == [(1, "forget_by_key_off")]
    (made,) = out.receipts
    receipt = orjson.loads(made.value)
    validate("receipt", receipt)
    assert (receipt["status"], receipt["reason"], receipt["version"]) == ("refused", "forget_by_key_off", None)
    assert runner.next_offset == 2 and runner.model.t == 1
