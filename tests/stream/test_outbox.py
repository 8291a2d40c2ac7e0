"""worker.stream.outbox: releases held behind deletion deltas until those are durable (invariant 2).

The writes run on a real single-thread executor, as in the worker; a gate (threading.Event) holds a
write "in flight" so the test can look at the outbox meanwhile. Nothing here depends on timing:
every wait is on an event or a future.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from confluent_kafka import Message

import worker.stream.outbox as outbox_module
from worker.config import load_settings
from worker.olu import PassiveOLU
from worker.state.exceptions import SnapshotConflict, StorageUnavailable
from worker.state.store import SnapshotStore, open_store
from worker.stream.exceptions import NotAttempted
from worker.stream.outbox import Outbox
from worker.stream.partition import MARK_STRETCH, PartitionRunner


class Store:
    """A delta sink: records writes in order; fails while ``down``; blocks while ``gate`` is clear.

    ``calls`` holds the offsets of each write call (a group: several), ``written`` every offset stored.
    """

    def __init__(self):
        self.written: list[int] = []
        self.calls: list[list[int]] = []
        self.down = False
        self.fail: set[int] = set()  # offsets whose (next) write fails, with the rest of their group
        self.error: Exception | None = None
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # a write call has started

    def write(self, deltas):
        offsets = [off for off, _, _ in deltas]
        self.calls.append(offsets)
        self.entered.set()
        self.gate.wait()
        if self.error is not None:
            raise self.error
        if self.down or self.fail & set(offsets):
            self.fail -= set(offsets)
            raise StorageUnavailable(f"delta {offsets[0]}", "store down")
        self.written.extend(offsets)


@pytest.fixture
def executor():
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool


def test_releases_without_deltas_pass_in_order():
    box = Outbox(Store().write)
    box.release("a")
    box.release("b")
    assert box.ready() == ["a", "b"] and box.ready() == []
    assert not box.pending and box.failed is None


def test_a_release_behind_an_in_flight_delta_waits_for_it(executor):
    store = Store()
    box = Outbox(store.write, executor.submit)
    box.release("before")
    store.gate.clear()
    assert box.delta(10, {}, {}, "deletion") is True  # queued, not failed
    box.release("after")
    assert box.ready() == ["before"]  # the deletion and everything after it are held
    assert box.pending and store.written == []
    store.gate.set()
    assert box.settle(None)
    assert box.ready() == ["deletion", "after"]
    assert store.written == [10]


def test_a_failed_delta_blocks_and_later_deltas_are_not_written_before_it(executor):
    store = Store()
    box = Outbox(store.write, executor.submit)
    store.gate.clear()
    store.fail = {10}  # only the first write fails: the second must still not be written
    box.delta(10, {}, {}, "d10")
    box.release("r11")
    box.delta(12, {}, {}, "d12")
    store.gate.set()
    box.settle(None)
    assert box.ready() == [] and box.failed is not None and box.failed.offset == 10
    assert store.written == []  # 12 was not attempted: 10 is not durable
    assert isinstance(box._items[-2].future.exception(), NotAttempted)
    assert box.retry() == ["d10", "r11", "d12"]
    assert store.written == [10, 12] and box.failed is None and not box.pending


def test_retry_raises_while_storage_is_down_and_keeps_everything():
    store = Store()
    store.down = True
    box = Outbox(store.write)  # synchronous writes: the failure is known at once
    assert box.delta(5, {}, {}, "d5") is False
    assert box.ready() == [] and box.failed.offset == 5
    with pytest.raises(StorageUnavailable):
        box.retry()
    assert box.ready() == [] and box.pending
    store.down = False
    assert box.retry() == ["d5"]


def test_a_conflicting_object_is_raised_not_retried():
    store = Store()
    store.error = SnapshotConflict("k", "a different snapshot already exists")
    box = Outbox(store.write)
    box.delta(5, {}, {}, "d5")
    with pytest.raises(SnapshotConflict):
        box.ready()


def test_backpressure_waits_for_the_oldest_delta(executor):
    store = Store()
    box = Outbox(store.write, executor.submit, max_in_flight=2)
    store.gate.clear()
    box.delta(1, {}, {}, "d1")
    box.delta(2, {}, {}, "d2")
    third = threading.Thread(target=box.delta, args=(3, {}, {}, "d3"))
    third.start()
    third.join(0.3)
    assert third.is_alive()  # two in flight: the third deletion waits
    store.gate.set()
    third.join(30)
    assert not third.is_alive()
    box.settle(None)
    assert box.ready() == ["d1", "d2", "d3"] and store.written == [1, 2, 3]


def _first_write_held(executor) -> tuple[Store, Outbox]:
    """An outbox whose first delta (offset 1) is being written, held at the gate: deltas added now
    queue behind it."""
    store = Store()
    box = Outbox(store.write, executor.submit)
    store.gate.clear()
    box.delta(1, {}, {}, "d1")
    assert store.entered.wait(30)
    return store, box


def test_cancel_drops_writes_not_started(executor):
    store, box = _first_write_held(executor)  # the write of 1 is running (held at the gate)
    box.delta(2, {}, {}, "d2")
    threading.Timer(0.2, store.gate.set).start()
    box.cancel(timeout=30)  # waits for the running write (1), drops the queued one (2)
    assert store.written == [1] and store.calls == [[1]]
    assert box.ready() == [] and not box.pending


# --------------------------------------------------------------------------- group commit
def test_deltas_queued_behind_a_write_are_stored_together_in_order(executor):
    store, box = _first_write_held(executor)  # 1 is being written alone
    for off in (2, 3, 4):
        box.delta(off, {}, {}, f"d{off}")
        box.release(f"r{off}")
    store.gate.set()
    assert box.settle(None)
    assert store.calls == [[1], [2, 3, 4]] and store.written == [1, 2, 3, 4]
    assert box.ready() == ["d1", "d2", "r2", "d3", "r3", "d4", "r4"]


def test_a_failed_group_stores_none_of_it_and_retry_writes_the_same_group(executor):
    store, box = _first_write_held(executor)
    box.delta(2, {}, {}, "d2")
    box.delta(3, {}, {}, "d3")
    store.fail = {3}  # the group [2, 3] fails as a whole
    store.gate.set()
    box.settle(None)
    assert store.written == [1] and store.calls == [[1], [2, 3]]
    assert box.ready() == ["d1"] and box.failed.offset == 2
    assert isinstance(box._items[-2].future.exception(), NotAttempted)  # 3: its predecessor is not durable
    assert box.retry() == ["d2", "d3"]
    assert store.calls[2:] == [[2, 3]] and store.written == [1, 2, 3]  # the same object again


def test_retry_of_a_group_whose_put_landed_finds_it_identical(executor):
    """A PUT that times out may have stored the object: the retry writes the very same group, which
    the real store takes as a retry (identical content), not as another writer's object."""
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g")
    landed_then_failed = []

    def write(deltas):
        snapshots.write_deltas("t", 0, deltas)
        if len(deltas) > 1 and not landed_then_failed:
            landed_then_failed.append(deltas)
            raise StorageUnavailable("k", "timeout after the PUT landed")

    gate = threading.Event()
    box = Outbox(lambda deltas: (gate.wait(), write(deltas)), executor.submit)
    box.delta(1, {"n": 1}, {"z": np.zeros(2)}, "d1")
    box.delta(2, {"n": 2}, {"z": np.ones(2)}, "d2")
    box.delta(3, {"n": 3}, {"z": np.full(2, 3.0)}, "d3")
    gate.set()
    box.settle(None)
    assert landed_then_failed and box.ready() in (["d1"], [])
    assert box.failed is not None
    released = box.retry()
    assert "d3" in released and box.failed is None and not box.pending
    assert [off for off, _, _ in snapshots.restore("t", 0).deltas] == [1, 2, 3]


def test_seal_keeps_deltas_before_a_snapshot_out_of_later_groups(executor):
    store, box = _first_write_held(executor)
    box.delta(2, {}, {}, "d2")
    box.seal()  # a full snapshot is captured here
    box.delta(3, {}, {}, "d3")
    box.delta(4, {}, {}, "d4")
    store.gate.set()
    assert box.settle(None)
    assert store.calls == [[1], [2], [3, 4]]


def test_groups_are_capped(executor, monkeypatch):
    monkeypatch.setattr(outbox_module, "MAX_GROUP", 2)
    store, box = _first_write_held(executor)
    for off in (2, 3, 4, 5, 6):
        box.delta(off, {"n": off}, {"z": np.zeros(3)}, f"d{off}")
    store.gate.set()
    assert box.settle(None)
    assert store.calls == [[1], [2, 3], [4, 5], [6]]


def test_groups_are_capped_by_bytes_but_a_big_delta_still_goes(executor, monkeypatch):
    monkeypatch.setattr(outbox_module, "MAX_GROUP_BYTES", 100)
    store, box = _first_write_held(executor)
    box.delta(2, {}, {"z": np.zeros(5)}, "d2")  # 40 bytes
    box.delta(3, {}, {"z": np.zeros(5)}, "d3")  # 80 together
    box.delta(4, {}, {"z": np.zeros(5)}, "d4")  # 120: next group
    box.delta(5, {}, {"z": np.zeros(50)}, "d5")  # 400 alone: written alone
    store.gate.set()
    assert box.settle(None)
    assert store.calls == [[1], [2, 3], [4], [5]]


# --------------------------------------------------------------------------- through PartitionRunner
def _Msg(offset, key, value):
    """A real confluent-kafka Message (constructible since 2.x), as the loop hands them in."""
    return Message(topic="t", partition=0, offset=offset, key=key, value=value,
                   timestamp=(1, 1_700_000_000_000 + offset))


class GatedSnapshots(SnapshotStore):
    """The real snapshot store (memory://) with delta writes held at a gate."""

    def __init__(self):
        super().__init__(open_store("memory://"), prefix="p", group="g", keep=3)
        self.gate = threading.Event()

    def write_delta(self, *args, **kwargs):
        self.gate.wait()
        return super().write_delta(*args, **kwargs)


def test_runner_holds_the_deletion_release_and_later_ones_until_the_delta_is_stored(executor):
    settings = load_settings([], env={"OLU_DIM": "2", "OLU_RELEASE_EVERY_EVENTS": "1",
                                      "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1"})
    snapshots = GatedSnapshots()
    model = PassiveOLU(dim=2, noise_rng=np.random.default_rng(0))
    runner = PartitionRunner("t", 0, model, snapshots=snapshots, settings=settings, model_name="m",
                             delta_writer=executor.submit)
    ins = [_Msg(i, f"r-{i}".encode(), b'{"op":"insert","id":"r-%d","x":[0.5,0.5],"y":1}' % i) for i in range(3)]
    out = runner.process(ins)
    runner.outbox.settle(None)  # the first release waits for its release mark (state/marks.py)
    assert [r.version for r in out.releases + runner.ready_releases()] == [3]  # one per batch
    assert snapshots.newest_mark("t", 0) == 3 + MARK_STRETCH
    out = runner.process([_Msg(3, b"r-1", None)])  # a tombstone: delete r-1
    assert out.releases == [] and snapshots.list("t", 0) == []  # the deletion's release waits
    more = runner.process([_Msg(4, b"r-9", b'{"op":"insert","id":"r-9","x":[0.1,0.2],"y":-1}')])
    assert more.releases == []  # so does every later release
    assert runner.outbox.pending and not runner.blocked
    snapshots.gate.set()
    runner.outbox.settle(None)
    released = runner.ready_releases()
    assert [(r.trigger, r.version) for r in released] == [("deletion", 4), ("events", 5)]
    assert [ref.offset for ref in snapshots.list("t", 0)] == [4]


def test_deletions_behind_a_slow_write_are_one_object_and_a_restore_adopts_every_one(executor):
    """Group commit end to end: four deletions while the first one's write is held; the other three
    go in one object named by the first of them; a runner restored from the store replays the input,
    adopts all four stored post-noise states (no new noise, no new object) and ends bit-identical."""
    settings = load_settings([], env={"OLU_DIM": "2", "OLU_RELEASE_EVERY_EVENTS": "1000",
                                      "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1"})
    snapshots = GatedSnapshots()
    model = PassiveOLU(dim=2, noise_rng=np.random.default_rng(0))
    runner = PartitionRunner("t", 0, model, snapshots=snapshots, settings=settings, model_name="m",
                             delta_writer=executor.submit)
    msgs = [_Msg(i, f"r-{i}".encode(), b'{"op":"insert","id":"r-%d","x":[0.5,0.5],"y":1}' % i) for i in range(6)]
    msgs += [_Msg(6 + j, f"r-{j}".encode(), None) for j in range(4)]  # tombstones: delete r-0 .. r-3
    runner.process(msgs[:7])  # the inserts and the first deletion: its write waits at the gate
    for m in msgs[7:]:
        runner.process([m])
    snapshots.gate.set()
    assert runner.outbox.settle(None)
    assert [r.trigger for r in runner.ready_releases()] == ["deletion"] * 4
    stored = snapshots.list("t", 0)
    assert [r.offset for r in stored] == [7, 8]  # delta 7 alone, then 8, 9, 10 as one group
    restored = snapshots.restore("t", 0)
    assert [off for off, _, _ in restored.deltas] == [7, 8, 9, 10]

    again, _ = PartitionRunner.restore("t", 0, snapshots=snapshots, settings=settings, model_name="m",
                                       model_factory=lambda: PassiveOLU(dim=2, noise_rng=np.random.default_rng(99)),
                                       on_corrupt="fail", delta_writer=executor.submit)
    again.process(msgs)
    assert again.outbox.settle(None) and not again.replay_deltas  # every stored state adopted
    assert np.array_equal(again.model.z, runner.model.z)
    assert [r.offset for r in snapshots.list("t", 0)] == [7, 8]  # nothing new written


def test_no_snapshot_inside_an_earlier_processs_delta_group(executor):
    """A process restored before a stored delta group takes no full snapshot until its replay has
    passed the group's last deletion. A snapshot in the middle would make the next restore skip
    the group (named before the snapshot) and draw its later deletions' noise again."""
    settings = load_settings([], env={"OLU_DIM": "2", "OLU_RELEASE_EVERY_EVENTS": "1000",
                                      "OLU_SNAPSHOT_EVERY_EVENTS": "1", "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1"})
    snapshots = GatedSnapshots()
    first = PartitionRunner("t", 0, PassiveOLU(dim=2, noise_rng=np.random.default_rng(0)), snapshots=snapshots,
                            settings=settings, model_name="m", delta_writer=executor.submit)
    msgs = [_Msg(i, f"r-{i}".encode(), b'{"op":"insert","id":"r-%d","x":[0.5,0.5],"y":1}' % i) for i in range(6)]
    msgs += [_Msg(6 + j, f"r-{j}".encode(), None) for j in range(4)]  # deletions stored after 7, 8, 9, 10
    first.process(msgs[:7])
    for m in msgs[7:]:
        first.process([m])
    snapshots.gate.set()
    assert first.outbox.settle(None)
    assert [r.offset for r in snapshots.list("t", 0)] == [7, 8]  # the group named 8 holds 8, 9 and 10

    def restored():
        return PartitionRunner.restore("t", 0, snapshots=snapshots, settings=settings, model_name="m",
                                       model_factory=lambda: PassiveOLU(dim=2, noise_rng=np.random.default_rng(5)),
                                       on_corrupt="fail", delta_writer=executor.submit)[0]

    second = restored()
    second.process(msgs[:9])  # in the middle of the group: 8 adopted, 9 and 10 ahead
    assert second.replaying_stored and not second.snapshot_due(now=1e12)
    second.process(msgs[9:])
    assert not second.replaying_stored and second.snapshot_due(now=1e12)
    second.snapshot()
    third = restored()  # from the snapshot at 10, which no group spans
    third.process(msgs)
    assert np.array_equal(third.model.z, first.model.z)  # no deletion's noise drawn again
