"""Incremental full snapshots: the applied index's runs are written once as shared blobs.

On memory://, file:// and the real S3 server: a model's runs round-trip through blobs, a later
snapshot writes only the runs built since, gc keeps every blob a kept snapshot names (and a blob
another writer has just created), and a missing or damaged blob invalidates its snapshot like
any other corruption.
"""

from __future__ import annotations

import numpy as np
import obstore
import pytest
from obstore.store import MemoryStore

from tests.olu.helpers import synthetic_stream
from tests.state.test_snapshots import raw, snaps  # noqa: F401  (fixtures)
from worker.olu import load_model
from worker.olu.algorithms.passive import PassiveOLU
from worker.olu.core import index as index_module
from worker.olu.core import tombstones as tombstones_module
from worker.olu.privacy import ledger as ledger_module
from worker.state import writer as writer_module
from worker.state.exceptions import SnapshotCorrupt
from worker.state.store import SnapshotStore

T = "events"
KW = dict(dim=4, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)


@pytest.fixture(autouse=True)
def small_runs(monkeypatch):
    """Runs of 64 entries (tails of 16), so a few hundred records make several."""
    monkeypatch.setattr(index_module, "TAIL_SIZE", 16)
    monkeypatch.setattr(index_module, "MAX_RUN", 64)


class Stream:
    def __init__(self, n=2000):
        self.ids, self.X, self.y = synthetic_stream(n, 4, seed=3)
        self.model = PassiveOLU(**KW, noise_rng=np.random.default_rng(0))
        self.done = 0

    def advance(self, n, delete=()):
        self.model.learn_many(self.ids[self.done:self.done + n], self.X[self.done:self.done + n],
                              self.y[self.done:self.done + n])
        self.done += n
        for j in delete:
            self.model.unlearn_one(self.ids[j])

    def snapshot(self, store: SnapshotStore, partition: int = 0):
        state = self.model.export_state()
        return store.write_full(T, partition, self.done, {"model": state["meta"]}, state["arrays"], state["shared"])


def blobs(store: SnapshotStore, partition: int = 0) -> dict[str, int]:
    where = store.directory(T, partition)
    return {m["path"][len(where):]: m["size"] for chunk in obstore.list(store.store, where) for m in chunk
            if m["path"][len(where):].startswith("blob-")}


def object_size(store: SnapshotStore, ref) -> int:
    """The full snapshot object alone (``ref.size`` adds the blobs written for it)."""
    return obstore.head(store.store, ref.key)["size"]


def restored_model(store: SnapshotStore, partition: int = 0, on_corrupt="fallback"):
    got = store.restore(T, partition, on_corrupt=on_corrupt)
    return got, load_model({"meta": got.header["model"], "arrays": got.arrays, "shared": got.shared})


def same_model(a, b) -> bool:
    x, y = a.export_state(), b.export_state()
    return (a.z.tobytes() == b.z.tobytes() and x["meta"] == y["meta"]
            and all(np.array_equal(x["arrays"][k], y["arrays"][k]) for k in x["arrays"])
            and all(np.array_equal(a.index.to_arrays()[k], b.index.to_arrays()[k]) for k in ("applied_keys",
                                                                                               "applied_steps")))


def test_runs_round_trip_through_blobs(snaps):
    s = Stream()
    s.advance(500, delete=(3, 70, 400))
    assert len(s.model.index.runs) >= 3
    s.snapshot(snaps)
    assert len(blobs(snaps)) == len(s.model.index.runs)
    got, model = restored_model(snaps)
    assert set(got.shared) == {f"applied_run{i}" for i in range(len(s.model.index.runs))}
    assert same_model(model, s.model)
    assert [r.dead for r in model.index.runs] == [r.dead for r in s.model.index.runs]


def test_a_later_snapshot_writes_only_the_new_runs(snaps):
    s = Stream()
    s.advance(640)  # ten full runs of 64
    first = s.snapshot(snaps)
    before = blobs(snaps)
    s.advance(64 + 5, delete=(10,))  # one more run, a tail of 5, a dead entry in an old run
    second = s.snapshot(snaps)
    after = blobs(snaps)
    new = set(after) - set(before)
    # the runs built since: the one the tails merged into, and the four being merged now (paced)
    assert [len(r) for r in s.model.index.runs] == [64] * 10 + [16] * 4 and s.model.index._merging is not None
    assert len(new) == 5
    blob_bytes = [ref.size - object_size(snaps, ref) for ref in (first, second)]
    assert blob_bytes[1] == sum(after[b] for b in new) < blob_bytes[0] / 3
    _, model = restored_model(snaps)
    assert same_model(model, s.model)


def test_sealed_ledger_segments_are_written_once(snaps, monkeypatch):
    """The ledger grows by one entry per deletion for the model's whole life: a full snapshot
    carries only the open segment; each sealed one is a blob written once (invariant 4 at scale)."""
    monkeypatch.setattr(ledger_module, "SEGMENT_ENTRIES", 4)
    s = Stream()
    s.advance(630, delete=range(0, 90, 9))  # ten deletions: two sealed segments, two open entries
    first = s.snapshot(snaps)
    assert s.model.ledger.sealed == 2 and len(s.model.ledger) == 10
    got, model = restored_model(snaps)
    assert {"ledger_seg0", "ledger_seg1"} <= set(got.shared) and len(got.header["model"]["ledger"]) == 2
    assert model.ledger == s.model.ledger and same_model(model, s.model)
    before = blobs(snaps)
    s.advance(1, delete=(91, 92))  # a third segment is sealed; the index only gains a tail entry
    second = s.snapshot(snaps)
    new = set(blobs(snaps)) - set(before)
    assert len(new) == 1  # the new segment only; the runs and the two sealed segments are reused
    assert second.size - object_size(snaps, second) == blobs(snaps)[new.pop()]
    assert object_size(snaps, second) < object_size(snaps, first) + 200
    _, model = restored_model(snaps)
    assert [e["i"] for e in model.ledger] == list(range(1, 13)) and same_model(model, s.model)


def test_the_tombstone_base_is_written_once(snaps, monkeypatch):
    """One tombstone per deletion for the model's whole life: a full snapshot carries the recent
    ones; the base they are merged into is a blob, written again only when it changes."""
    monkeypatch.setattr(tombstones_module, "RECENT_KEYS", 4)
    s = Stream()
    s.advance(630, delete=range(0, 90, 9))  # ten deletions: a base of 8, two recent
    s.snapshot(snaps)
    assert len(s.model.tombstones.base) == 8 and len(s.model.tombstones.recent) == 2
    got, model = restored_model(snaps)
    assert "tombstones_base" in got.shared and got.arrays["tombstones"].tolist() == s.model.tombstones.recent.tolist()
    assert model.tombstones.keys.tolist() == s.model.tombstones.keys.tolist() and same_model(model, s.model)
    before = blobs(snaps)
    s.advance(1, delete=(91,))  # a third recent tombstone: the base is unchanged
    s.snapshot(snaps)
    assert blobs(snaps) == before
    s.advance(1, delete=(92,))  # the fourth: recent is merged into a new base, one new blob
    s.snapshot(snaps)
    assert len(set(blobs(snaps)) - set(before)) == 1 and len(s.model.tombstones.base) == 12
    _, model = restored_model(snaps)
    assert len(model.tombstones) == 12 and same_model(model, s.model)


def test_a_restarted_store_reuses_the_blobs_it_restored(raw):  # noqa: F811
    s = Stream()
    s.advance(640)
    s.snapshot(SnapshotStore(raw, prefix="olu", group="g1"))
    fresh = SnapshotStore(raw, prefix="olu", group="g1")
    got, model = restored_model(fresh)
    state = model.export_state()
    before = blobs(fresh)
    ref = fresh.write_full(T, 0, 700, {"model": state["meta"]}, state["arrays"], state["shared"])
    assert ref.size == object_size(fresh, ref) and blobs(fresh) == before  # no run rewritten


def test_gc_keeps_named_blobs_and_drops_the_rest(raw):  # noqa: F811
    store = SnapshotStore(raw, prefix="olu", group="g1", keep=1)
    s = Stream()
    for _ in range(6):
        s.advance(64 * 3)
        s.snapshot(store)
        store.gc(T, 0)
        got = store.restore(T, 0)
        named = {n for names in store._blob_refs[got.key].values() for n in names}
        where = store.directory(T, 0)
        listed = {m["path"][len(where):]: m["last_modified"] for chunk in obstore.list(raw, where) for m in chunk}
        assert named <= set(listed)
        # the rest: merged-away runs, gone unless written in the same clock tick as the snapshot
        # (S3 stamps whole seconds; gc only takes blobs strictly older than every kept snapshot)
        snapshot_time = listed[got.key[len(where):]]
        assert all(listed[b] >= snapshot_time for b in set(blobs(store)) - named)
        if isinstance(raw, MemoryStore):
            assert set(blobs(store)) == named
    _, model = restored_model(store)
    assert same_model(model, s.model)


def test_gc_never_takes_a_blob_newer_than_every_kept_snapshot():
    store = SnapshotStore(MemoryStore(), prefix="olu", group="g1", keep=1)
    s = Stream()
    s.advance(128)
    s.snapshot(store)
    other = SnapshotStore(store.store, prefix="olu", group="g1")  # the partition's next owner
    s.advance(64)
    name, _ = other._put_blob(other.directory(T, 0), {"keys": s.model.index.runs[-1].keys,
                                                      "steps": s.model.index.runs[-1].steps})
    store.gc(T, 0)
    assert name in blobs(store)


@pytest.mark.parametrize("damage", ["delete", "overwrite"])
@pytest.mark.parametrize("on_corrupt", ["fallback", "fail"])
def test_a_missing_or_damaged_blob_invalidates_its_snapshot(damage, on_corrupt):
    store = SnapshotStore(MemoryStore(), prefix="olu", group="g1", keep=3)
    s = Stream()
    s.advance(128)
    s.snapshot(store)
    older = s.model.export_state()
    s.advance(64)
    s.snapshot(store)
    newest_blob = (set(blobs(store)) - {n for names in store._blob_refs.get(
        store.key(T, 0, "full", 128), {}).values() for n in names})
    newest_blob = sorted(newest_blob)[0]
    key = store.directory(T, 0) + newest_blob
    if damage == "delete":
        obstore.delete(store.store, key)
    else:
        obstore.put(store.store, key, b"not a blob at all, but the same name")
    fresh = SnapshotStore(store.store, prefix="olu", group="g1")
    if on_corrupt == "fail":
        with pytest.raises(SnapshotCorrupt, match="shared blob"):
            fresh.restore(T, 0, on_corrupt="fail")
        return
    got, model = restored_model(fresh)
    assert got.offset == 128 and "shared blob" in got.skipped[0][1]
    assert model.export_state()["meta"] == older["meta"]


def test_a_damaged_blob_is_replaced_when_written_again():
    store = SnapshotStore(MemoryStore(), prefix="olu", group="g1")
    s = Stream()
    s.advance(64)
    s.snapshot(store)
    name = sorted(blobs(store))[0]
    key = store.directory(T, 0) + name
    obstore.put(store.store, key, b"truncated")
    fresh = SnapshotStore(store.store, prefix="olu", group="g1")  # knows nothing of it
    state = s.model.export_state()
    fresh.write_full(T, 0, 70, {"model": state["meta"]}, state["arrays"], state["shared"])
    _, model = restored_model(SnapshotStore(store.store, prefix="olu", group="g1"), on_corrupt="fail")
    assert same_model(model, s.model)


# --------------------------------------------------------------------------- pieces and pacing

def test_a_large_run_is_stored_in_pieces_that_restore_joins(raw, monkeypatch):  # noqa: F811
    # 10 entries of 12 bytes per piece
    monkeypatch.setattr(writer_module, "BLOB_PIECE_BYTES", 12 * 10)
    store = SnapshotStore(raw, prefix="olu", group="g1")
    s = Stream()
    s.advance(200, delete=[3, 150])
    s.snapshot(store)
    refs = _shared_header(store, 200)  # the writer keeps no parsed header: read the stored one
    run_sizes = [len(r) for r in s.model.index.runs]
    assert [len(names) for names in refs.values()] == [-(-n // 10) for n in run_sizes]  # ceil(n / 10)
    assert all(size <= 12 * 10 + 1024 for size in blobs(store).values())  # piece + header and checksum
    got, model = restored_model(SnapshotStore(raw, prefix="olu", group="g1"), on_corrupt="fail")
    assert same_model(model, s.model)
    assert [len(r) for r in model.index.runs] == run_sizes  # joined back into the same runs
    # and a later snapshot of the restored model rewrites none of those pieces
    again = SnapshotStore(raw, prefix="olu", group="g1")
    again.restore(T, 0)
    before = blobs(again)
    state = model.export_state()
    again.write_full(T, 0, 201, {"model": state["meta"]}, state["arrays"], state["shared"])
    assert blobs(again) == before


def _shared_header(store: SnapshotStore, offset: int) -> dict:
    from worker.state.codec import decode
    head, _ = decode(bytes(obstore.get(store.store, store.key(T, 0, "full", offset)).bytes()))
    return {g: r["blobs"] for g, r in head["shared"].items()}


def test_a_missing_piece_invalidates_the_snapshot(monkeypatch):
    monkeypatch.setattr(writer_module, "BLOB_PIECE_BYTES", 12 * 10)
    store = SnapshotStore(MemoryStore(), prefix="olu", group="g1")
    s = Stream()
    s.advance(64)
    s.snapshot(store)
    pieces = _shared_header(store, 64)["applied_run0"]
    assert len(pieces) > 1
    obstore.delete(store.store, store.directory(T, 0) + pieces[-1])
    with pytest.raises(SnapshotCorrupt, match=f"shared blob {pieces[-1]} is missing"):
        SnapshotStore(store.store, prefix="olu", group="g1").restore(T, 0, on_corrupt="fail")


def test_pieces_of_another_group_swapped_in_are_refused(monkeypatch):
    """A header naming valid blobs that do not fit together (wrong arrays) is corruption."""
    store = SnapshotStore(MemoryStore(), prefix="olu", group="g1")
    where = store.directory(T, 0)
    a, _ = store._put_blob(where, {"keys": np.arange(3, dtype=np.uint64), "steps": np.ones(3, np.uint32)})
    b, _ = store._put_blob(where, {"other": np.arange(3, dtype=np.uint64)})
    store._write("full", T, 0, 9, {"model": {}}, {}, {"applied_run0": {"blobs": [a, b]}})
    with pytest.raises(SnapshotCorrupt, match="pieces hold different arrays"):
        SnapshotStore(store.store, prefix="olu", group="g1").restore(T, 0, on_corrupt="fail")


def test_the_single_blob_form_of_earlier_snapshots_still_restores():
    store = SnapshotStore(MemoryStore(), prefix="olu", group="g1")
    where = store.directory(T, 0)
    keys, steps = np.array([5, 9], np.uint64), np.array([1, 2], np.uint32)
    name, _ = store._put_blob(where, {"keys": keys, "steps": steps})
    store._write("full", T, 0, 2, {"model": {}}, {}, {"applied_run0": {"blob": name}})
    got = SnapshotStore(store.store, prefix="olu", group="g1").restore(T, 0, on_corrupt="fail")
    assert got.shared["applied_run0"]["keys"].tolist() == [5, 9]
    assert got.shared["applied_run0"]["steps"].tolist() == [1, 2]


@pytest.fixture
def slept(monkeypatch) -> list[float]:
    """The store's clock is fake: it moves only when the store sleeps; the sleeps, in order."""
    clock = {"now": 100.0}
    slept: list[float] = []
    monkeypatch.setattr(writer_module.time, "monotonic", lambda: clock["now"])

    def sleep(seconds):
        slept.append(seconds)
        clock["now"] += seconds

    monkeypatch.setattr(writer_module.time, "sleep", sleep)
    return slept


def test_uploads_are_paced_to_the_rate_limit(monkeypatch, slept):
    """Between pieces the writer sleeps so that bytes sent / elapsed stays at the limit."""
    monkeypatch.setattr(writer_module, "BLOB_PIECE_BYTES", 12 * 10)
    store = SnapshotStore(MemoryStore(), prefix="olu", group="g1")
    s = Stream()
    s.advance(64)
    state = s.model.export_state()
    ref = store.write_full(T, 0, 64, {"model": state["meta"]}, state["arrays"], state["shared"],
                           bytes_per_second=1000.0)
    pieces = len(blobs(store))
    assert pieces > 1 and len(slept) == pieces - 1  # nothing before the first piece
    piece_bytes = ref.size - object_size(store, ref)
    last_piece = min(blobs(store).values())
    assert sum(slept) == pytest.approx((piece_bytes - last_piece) / 1000.0)
    # no limit: no sleeping at all
    slept.clear()
    s.advance(64)
    state = s.model.export_state()
    store.write_full(T, 0, 128, {"model": state["meta"]}, state["arrays"], state["shared"])
    assert slept == []


def test_uploads_are_spread_over_the_given_time_and_count_only_new_blobs(monkeypatch, slept):
    """spread_seconds: the new blobs' bytes go out evenly over that time (slower than the limit),
    and blobs stored by an earlier snapshot do not count."""
    monkeypatch.setattr(writer_module, "BLOB_PIECE_BYTES", 12 * 10)
    store = SnapshotStore(MemoryStore(), prefix="olu", group="g1")
    s = Stream()
    for offset in (64, 128):
        slept.clear()
        s.advance(64)
        state = s.model.export_state()
        before = blobs(store)
        new_bytes = sum(sum(a.nbytes for a in g.values()) for g in state["shared"].values()
                        if not store._stored_groups.blob_names(store.directory(T, 0), g))
        store.write_full(T, 0, offset, {"model": state["meta"]}, state["arrays"], state["shared"],
                         bytes_per_second=1e9, spread_seconds=4.0)
        written = {k: v for k, v in blobs(store).items() if k not in before}
        assert new_bytes > 0 and len(written) > 1 and len(slept) == len(written) - 1
        # every piece but the last, sent at new_bytes / 4 s (blob sizes: these tiny pieces carry
        # the codec's header too, so together they take longer than 4 s here)
        sent_before_last = sum(written.values()) - min(written.values())
        assert sum(slept) == pytest.approx(sent_before_last / (new_bytes / 4.0), rel=0.05)  # which piece is last
        assert sum(slept) > 1.0  # the 1e9 B/s limit alone would not have waited
    # the limit still wins when it is slower
    slept.clear()
    s.advance(64)
    state = s.model.export_state()
    store.write_full(T, 0, 192, {"model": state["meta"]}, state["arrays"], state["shared"],
                     bytes_per_second=100.0, spread_seconds=0.001)
    assert sum(slept) > 1.0


def test_a_spread_ignores_groups_stored_before(monkeypatch, slept):
    monkeypatch.setattr(writer_module, "BLOB_PIECE_BYTES", 8 * 1000)
    store = SnapshotStore(MemoryStore(), prefix="olu", group="g1")
    old = {"k": np.arange(50_000, dtype=np.uint64)}  # 400 kB, stored by the first snapshot
    new = {"k": np.arange(5_000, dtype=np.uint64) * 3}  # 40 kB: five pieces
    store.write_full(T, 0, 1, {"model": {}}, {}, {"old": old})
    slept.clear()
    store.write_full(T, 0, 2, {"model": {}}, {}, {"old": old, "new": new}, spread_seconds=10.0)
    assert len(slept) == 4  # between the new group's five pieces only
    assert sum(slept) == pytest.approx(10.0 * 4 / 5, rel=0.02)  # 40 kB over 10 s, not 440 kB
