"""Deletion requests naming several records, through PartitionRunner in process (no broker).

A delete with ``ids`` is one request: one engine call, one ledger entry (one noise draw), one
durable delta whose header carries the request's counts, one release whose ``request`` object
reports what happened to each id. A runner restored from the store replays the same input to the
same state and republishes byte-identical releases (docs/worker.md 5.4).
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
from worker.stream.exceptions import PartialRequest
from worker.stream.input import scan
from worker.stream.partition import PartitionRunner

DIM = 3
SETTINGS = load_settings([], env={"OLU_DIM": str(DIM), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                                  "OLU_RELEASE_EVERY_EVENTS": "100000"})
# one release per deletion request (each reports its request); the default coalesces per poll batch
EACH = load_settings([], env={"OLU_DIM": str(DIM), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                              "OLU_RELEASE_EVERY_EVENTS": "100000", "OLU_DELETION_RELEASES": "each"})


def _insert(rid: str, subject: str, rng) -> tuple[bytes, bytes]:
    x = rng.normal(size=DIM)
    x *= 0.9 / np.linalg.norm(x)
    return subject.encode(), orjson.dumps({"op": "insert", "id": rid, "x": x.tolist(), "y": int(rng.integers(0, 2))})


def _request(subject: str, ids) -> tuple[bytes, bytes]:
    return subject.encode(), orjson.dumps({"op": "delete", "ids": list(ids)})


def _records() -> tuple[list, dict]:
    """Inserts keyed by subject (s-0 .. s-5), the requests below, more inserts; expected reports."""
    rng = np.random.default_rng(5)
    records = [_insert(f"r-{i}", f"s-{i % 6}", rng) for i in range(60)]
    expected = {}

    def req(subject, ids, report):
        records.append(_request(subject, ids))
        if report is not None:  # release version = the request's offset + 1; the id: its position
            expected[len(records)] = {"request_id": f"t/0@{len(records) - 1}", **report}

    req("s-0", ["r-0"], {"ids": 1, "applied": 1, "not_applied": [], "duplicates": 0})
    req("s-1", ["r-1", "r-7"], {"ids": 2, "applied": 2, "not_applied": [], "duplicates": 0})
    records.append(_insert("r-60", "s-2", rng))
    # r-0 went in the first request: a no-op here; ghost-1 was never inserted: listed as not applied
    req("s-2", ["r-2", "ghost-1", "r-8", "r-0", "r-60"],
        {"ids": 5, "applied": 3, "not_applied": ["ghost-1"], "duplicates": 1})
    req("s-3", ["ghost-2", "r-1"], None)  # changes nothing: no release
    records.append((b"r-3", None))  # a tombstone still deletes the record its key names
    expected[len(records)] = {"request_id": f"t/0@{len(records) - 1}", "ids": 1, "applied": 1,
                              "not_applied": [], "duplicates": 0}
    records += [_insert(f"r-{i}", f"s-{i % 6}", rng) for i in range(61, 80)]
    return records, expected


def _runner(snapshots, seed: int, settings=EACH) -> PartitionRunner:
    return PartitionRunner("t", 0, PassiveOLU(dim=DIM, noise_rng=np.random.default_rng(seed)), snapshots=snapshots,
                           settings=settings, model_name="m")


def _deletion_releases(outs) -> list:
    return [r for o in outs for r in o.releases if r.trigger == "deletion"]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled-decoder", "python-decoder"])
def test_each_request_is_one_deletion_one_delta_and_one_release_reporting_it(compiled):
    records, expected = _records()
    msgs = messages("t", 0, records)
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    runner = _runner(snapshots, seed=7)
    if compiled:
        outs = [runner.process(msgs[j:j + 16]) for j in range(0, len(msgs), 16)]
    else:
        with scan.python_decoder():
            outs = [runner.process(msgs[j:j + 16]) for j in range(0, len(msgs), 16)]
    assert not [d for o in outs for d in o.dead_letters]
    released = _deletion_releases(outs)
    values = [orjson.loads(r.value) for r in released]
    for value in values:
        validate("release", value)
    assert {v["version"]: v["request"] for v in values} == expected
    # an insert keyed by its subject is learned under its own id (the requests found r-60 by it)
    model = runner.model
    assert model.t == sum(o.inserts for o in outs) == 80
    # one ledger entry, one charge per request that changed the model (passive: every one noised)
    assert len(list(model.ledger)) == model.accountant.lifetime_deletions == len(expected) == 4
    assert sum(o.deletes for o in outs) == 5 and [d.records for o in outs for d in o.deletions] == [1, 2, 3, 0, 1]
    # the deltas' headers carry the counts, never the ids
    restored = snapshots.restore("t", 0)
    requests = {off: header["request"] for off, header, _ in restored.deltas}
    assert requests == {off: {**r, "not_applied": len(r["not_applied"])} for off, r in expected.items()}

    # replay after a crash: a fresh runner with other noise adopts the stored states, bit for bit
    again, _ = PartitionRunner.restore("t", 0, snapshots=snapshots, settings=EACH, model_name="m",
                                       model_factory=lambda: PassiveOLU(dim=DIM, noise_rng=np.random.default_rng(99)),
                                       on_corrupt="fail")
    outs_again = [again.process(msgs[j:j + 23]) for j in range(0, len(msgs), 23)]
    assert not again.replay_deltas  # every stored state adopted
    assert [r.value for r in _deletion_releases(outs_again)] == [r.value for r in released]
    assert again.model.z.tobytes() == model.z.tobytes()
    assert list(again.model.ledger) == list(model.ledger)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled-decoder", "python-decoder"])
def test_a_poll_batch_of_deletions_makes_one_release_behind_all_their_deltas(compiled):
    """OLU_DELETION_RELEASES=batch (the default): each request still has its own noise draw, ledger
    entry and delta; the batch has one deletion release, after its last deletion, reporting it."""
    records, expected = _records()
    msgs = messages("t", 0, records)
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    runner = _runner(snapshots, seed=7, settings=SETTINGS)
    if compiled:
        outs = [runner.process(msgs)]
    else:
        with scan.python_decoder():
            outs = [runner.process(msgs)]
    (release,) = _deletion_releases(outs)
    last = max(expected)  # the version after the batch's last deletion that changed the model
    value = orjson.loads(release.value)
    validate("release", value)
    assert value["deletions"] == 4
    if compiled:  # the scan knows where the batch's last delete is: the release directly follows it
        assert release.version == last and value["request"] == expected[last]
    else:  # the Python decoder cannot look ahead: the release follows the batch, reporting no request
        assert release.version == len(msgs) and "request" not in value
    assert len(list(runner.model.ledger)) == runner.model.accountant.lifetime_deletions == 4
    restored = snapshots.restore("t", 0)
    assert sorted(off for off, _, _ in restored.deltas) == sorted(expected)  # one delta per request

    # the state does not depend on how the input is batched: smaller batches, same noise, same z
    other = _runner(SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3), seed=7,
                    settings=SETTINGS)
    outs_small = [other.process(msgs[j:j + 16]) for j in range(0, len(msgs), 16)]
    assert other.model.z.tobytes() == runner.model.z.tobytes()
    assert len(_deletion_releases(outs_small)) == 2  # the requests fall into two batches of 16


def test_a_deletion_release_waits_for_every_delta_of_its_batch():
    """A delta whose write has not finished holds the batch's release (invariant 2)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    records, expected = _records()
    msgs = messages("t", 0, records)
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    gate, write = threading.Event(), snapshots.write_deltas

    def gated(*args):
        gate.wait(10)
        return write(*args)

    snapshots.write_deltas = gated
    with ThreadPoolExecutor(1) as pool:
        runner = PartitionRunner("t", 0, PassiveOLU(dim=DIM, noise_rng=np.random.default_rng(7)),
                                 snapshots=snapshots, settings=SETTINGS, model_name="m", delta_writer=pool.submit)
        out = runner.process(msgs)
        assert not _deletion_releases([out])  # held: no delta is durable yet
        gate.set()
        assert runner.outbox.settle(10)
        (release,) = [r for r in runner.ready_releases() if r.trigger == "deletion"]
        assert release.version == max(expected)
        assert len(snapshots.restore("t", 0).deltas) == 4


def test_a_request_naming_10000_records_is_one_noise_draw():
    rng = np.random.default_rng(3)
    ids = [f"c-{i:05d}" for i in range(10_000)]
    records = [_insert(rid, "s-c", rng) for rid in ids] + [_insert("other", "s-o", rng), _request("s-c", ids)]
    msgs = messages("t", 0, records)
    runner = _runner(SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3), seed=1)
    outs = [runner.process(msgs[j:j + 2000]) for j in range(0, len(msgs), 2000)]
    (release,) = _deletion_releases(outs)
    assert orjson.loads(release.value)["request"] == {"request_id": "t/0@10001", "ids": 10_000, "applied": 10_000,
                                                      "not_applied": [], "duplicates": 0}
    assert len(list(runner.model.ledger)) == runner.model.accountant.lifetime_deletions == 1


def _runner_of(model) -> PartitionRunner:
    return PartitionRunner("t", 0, model, snapshots=SnapshotStore(open_store("memory://"), prefix="p", group="g"),
                           settings=SETTINGS, model_name="m")


def test_a_request_the_budget_cannot_cover_is_refused_whole_or_stops_the_worker():
    """Passive charges a request once: with one deletion left it takes a request of several records.
    An algorithm applying the records one by one can run out in the middle: the records before are
    then unlearned with noise no delta holds, so the worker stops rather than publish that state."""
    rng = np.random.default_rng(2)
    inserts = [_insert(f"r-{i}", "s-0", rng) for i in range(6)]
    requests = [_request("s-0", ["r-0", "r-1"]), _request("s-0", ["r-2"]), _request("s-0", ["r-3", "r-4"])]
    msgs = messages("t", 0, inserts + requests)

    grouped = _runner_of(PassiveOLU(dim=DIM, capacity=1, noise_rng=np.random.default_rng(1)))
    out = grouped.process(msgs)
    assert [d.records for d in out.deletions] == [2]  # the first request: one charge for both records
    assert [(d.message.offset(), d.reason) for d in out.dead_letters] == [(7, "budget_exhausted"), (8, "budget_exhausted")]
    assert grouped.next_offset == len(msgs)  # refused whole: the model unchanged, the partition goes on

    one_by_one = type("OneByOne", (PassiveOLU,), {"groups_requests": False})
    each = _runner_of(one_by_one(dim=DIM, capacity=1, noise_rng=np.random.default_rng(1)))
    with pytest.raises(PartialRequest, match="middle of a deletion request of 2 records"):
        each.process(msgs)
    assert not [r for r in each.outbox.ready() if r.trigger == "deletion"]  # nothing of that state published


def test_a_release_after_a_restore_at_a_requests_offset_is_byte_identical():
    """A snapshot right after a request keeps its report: the final release a restored runner makes
    at that version equals the request's own release (consumers see identical duplicates)."""
    rng = np.random.default_rng(4)
    msgs = messages("t", 0, [_insert(f"r-{i}", "s-0", rng) for i in range(5)]
                    + [_request("s-0", ["r-1", "r-3", "ghost"])])
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    runner = _runner(snapshots, seed=3)
    (release,) = _deletion_releases([runner.process(msgs)])
    assert orjson.loads(release.value)["request"]["not_applied"] == ["ghost"]
    runner.snapshot()
    again, restored = PartitionRunner.restore("t", 0, snapshots=snapshots, settings=SETTINGS, model_name="m",
                                              model_factory=lambda: PassiveOLU(dim=DIM), on_corrupt="fail")
    assert restored.offset == release.version == len(msgs)
    again.final_release()
    (final,) = again.outbox.ready()
    assert (final.trigger, final.version, final.value) == ("final", release.version, release.value)
    # one event later the state no longer follows the request: no report
    more = again.process(messages("t", 0, [_insert("r-9", "s-0", rng)], start=len(msgs)))
    again.final_release()
    later = more.releases + again.outbox.ready()
    assert later and all("request" not in orjson.loads(r.value) for r in later)


def test_the_compiled_prequential_loss_equals_numpy():
    from worker.olu.batches.quality import ALL_ROWS, batch_mean_loss

    rng = np.random.default_rng(0)
    X, z = rng.normal(size=(40, 5)), rng.normal(size=5) * 30  # large margins: the stable branches
    y = rng.choice([0.0, 1.0, -1.0], size=40)
    logistic = np.mean(np.logaddexp(0.0, -np.where(y == 0, -1.0, y) * (X @ z)))
    assert batch_mean_loss(X, y, z, False, ALL_ROWS) == pytest.approx(logistic, rel=1e-12)
    assert batch_mean_loss(X, y, z, True, ALL_ROWS) == pytest.approx(np.mean(0.5 * (X @ z - y) ** 2), rel=1e-12)
    # a poll batch's inserts among its deletes: the masked rows in place, bit for bit their copy's loss
    rows = rng.random(40) < 0.7
    for ridge in (False, True):
        assert batch_mean_loss(X, y, z, ridge, rows) == batch_mean_loss(X[rows], y[rows], z, ridge, ALL_ROWS)
    assert np.isnan(batch_mean_loss(X, y, z, False, np.zeros(40, np.bool_)))  # no row: no loss
    X[3, 1] = np.nan  # not finite: the caller skips the batch
    assert np.isnan(batch_mean_loss(X, y, z, False, ALL_ROWS)) and np.isnan(batch_mean_loss(X, y, z, True, ALL_ROWS))
