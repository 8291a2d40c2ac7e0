"""Snapshot store: round trips, newest-valid selection, deltas, conflicts, corruption, gc, purge,
URL parsing and a real storage outage -- on memory://, file:// and a real S3 server."""

from __future__ import annotations

import uuid

import numpy as np
import obstore
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from obstore.store import LocalStore, MemoryStore, S3Store

import worker.state.layout as layout_module
from worker.devtools.s3_local import SeaweedS3
from worker.state.backends import DEFAULT_RETRY
from worker.state.codec import decode, encode
from worker.state.exceptions import SnapshotConflict, SnapshotCorrupt, StorageUnavailable
from worker.state.layout import LAYOUT_VERSION
from worker.state.store import (
    GROUP_LAYOUT_VERSION,
    STACKED_GROUP_LAYOUT_VERSION,
    SnapshotStore,
    open_store,
)

T = "events"  # topic


@pytest.fixture(params=["memory", "file", pytest.param("s3", marks=pytest.mark.s3)])
def raw(request, tmp_path):
    """The bare obstore store under test."""
    if request.param == "memory":
        return MemoryStore()
    if request.param == "file":
        return open_store(f"file://{tmp_path}/snapshots")
    return request.getfixturevalue("s3_store")


@pytest.fixture
def snaps(raw):
    return SnapshotStore(raw, prefix="olu", group="g1", keep=2)


def state(seed: int, n: int = 50) -> tuple[dict, dict]:
    """A header and arrays shaped like a model's export_state (every codec dtype, edge floats)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=8)
    z[:3] = [-0.0, np.nan, 5e-324]
    header = {"event_time_ms": 1_700_000_000_000 + seed, "model": {"t": n, "ledger": [{"eps": 0.1 * seed}]}}
    arrays = {
        "z": z,
        "keys": rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64),
        "slots": rng.integers(0, 2**32 - 1, size=n, dtype=np.uint32),
        "steps": rng.integers(-(2**40), 2**40, size=n, dtype=np.int64),
        "flags": rng.integers(0, 255, size=n, dtype=np.uint8),
        "X": rng.normal(size=(n, 3)),
        "empty": np.zeros((0, 4)),
    }
    return header, arrays


def delta(offset: int) -> tuple[dict, dict]:
    return {"kind": "delta", "t": offset, "deletions": offset // 2}, {"z": np.full(8, offset / 7.0)}


def assert_bit_exact(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name, arr in want.items():
        assert got[name].dtype == arr.dtype and got[name].shape == arr.shape, name
        assert got[name].tobytes() == arr.tobytes(), name


def raw_get(store, key: str) -> bytes:
    return bytes(obstore.get(store, key).bytes())


def keys_of(snaps: SnapshotStore, partition: int = 0) -> list[tuple[str, int]]:
    return [(r.kind, r.offset) for r in snaps.list(T, partition)]


# ------------------------------------------------------------------ round trips and selection
def test_round_trip_is_bit_exact(snaps, raw):
    header, arrays = state(1)
    ref = snaps.write_full(T, 0, 42, header, arrays)
    assert ref.key == f"olu/g1/{T}/0/full-{42:020d}.snap"
    assert (ref.kind, ref.offset) == ("full", 42) and ref.duration >= 0
    assert ref.size == len(raw_get(raw, ref.key)) == snaps.list(T, 0)[0].size

    got = snaps.restore(T, 0)
    assert (got.key, got.offset, got.header, got.deltas, got.skipped) == (ref.key, 42, header, [], [])
    assert_bit_exact(got.arrays, arrays)
    assert got.created_at.endswith("+00:00")


def test_nothing_stored_restores_to_none(snaps):
    assert snaps.restore(T, 0) is None
    assert snaps.list(T, 0) == []


def test_newest_full_and_only_later_deltas_in_order(snaps):
    for off in (10, 30, 20):
        snaps.write_full(T, 0, off, *state(off))
    for off in (31, 5, 20, 44, 25, 38):  # out of order on purpose
        snaps.write_delta(T, 0, off, *delta(off))
    snaps.write_full(T, 1, 99, *state(99))  # another partition: invisible here

    assert keys_of(snaps) == [("delta", 5), ("full", 10), ("delta", 20), ("full", 20), ("delta", 25),
                              ("full", 30), ("delta", 31), ("delta", 38), ("delta", 44)]
    got = snaps.restore(T, 0)
    assert got.offset == 30 and got.header == state(30)[0]
    assert [off for off, _, _ in got.deltas] == [31, 38, 44]
    for off, header, arrays in got.deltas:
        assert header == delta(off)[0]
        assert_bit_exact(arrays, delta(off)[1])
    assert snaps.restore(T, 1).offset == 99


def test_deltas_before_any_full_snapshot_are_returned(snaps):
    snaps.write_delta(T, 0, 8, *delta(8))
    snaps.write_delta(T, 0, 3, *delta(3))
    got = snaps.restore(T, 0)
    assert got.key is None and got.offset is None and got.header == {} and got.arrays == {}
    assert [off for off, _, _ in got.deltas] == [3, 8]


def test_unrelated_and_nested_objects_are_ignored(snaps, raw):
    snaps.write_full(T, 0, 10, *state(10))
    where = snaps.directory(T, 0)
    header, arrays = state(20)
    nested = SnapshotStore(raw, prefix=f"olu/g1/{T}/0", group="x")  # .../0/x/events/0/full-...
    nested.write_full(T, 0, 20, header, arrays)
    obstore.put(raw, where + "README.txt", b"hello")
    obstore.put(raw, where + "full-20.snap", b"short name")
    assert keys_of(snaps) == [("full", 10)]
    assert snaps.restore(T, 0).offset == 10


def test_real_model_state_survives(snaps):
    from tests.olu.helpers import synthetic_stream
    from worker.olu import load_model
    from worker.olu.algorithms.passive import PassiveOLU

    kw = dict(dim=4, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)
    ids, X, y = synthetic_stream(200, 4, seed=3)
    model = PassiveOLU(**kw, noise_rng=np.random.default_rng(0))
    model.learn_many(ids, X, y)
    model.unlearn_one(ids[5])
    exported = model.export_state()
    snaps.write_full(T, 0, 200, {"model": exported["meta"]}, exported["arrays"])
    got = snaps.restore(T, 0)
    again = load_model({"meta": got.header["model"], "arrays": got.arrays})
    assert again.z.tobytes() == model.z.tobytes()
    assert again.export_state()["meta"] == exported["meta"]


array_dtypes = st.sampled_from([np.float64, np.uint64, np.uint32, np.int64, np.uint8])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arrays=st.dictionaries(st.text("abcxyz_", min_size=1, max_size=6),
                              array_dtypes.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3,
                                                                                             min_side=0, max_side=5))),
                              max_size=4),
       offset=st.integers(0, 10**19))
def test_any_arrays_round_trip_bit_exactly(arrays, offset):
    snaps = SnapshotStore(MemoryStore(), group="g")
    snaps.write_full(T, 3, offset, {"x": 1}, arrays)
    snaps.write_full(T, 3, offset, {"x": 1}, arrays)  # identical rewrite: fine, even with NaNs
    got = snaps.restore(T, 3)
    assert got.offset == offset
    assert_bit_exact(got.arrays, arrays)


# ------------------------------------------------------------------ delta groups (group commit)
def test_a_delta_group_is_one_object_named_by_its_first_delta_and_restores_as_each(snaps, raw):
    snaps.write_full(T, 0, 10, *state(10))
    snaps.write_deltas(T, 0, [(12, *delta(12))])  # one delta: the plain format
    group = snaps.write_deltas(T, 0, [(off, *delta(off)) for off in (13, 15, 16)])
    assert keys_of(snaps) == [("full", 10), ("delta", 12), ("delta", 13)] and group.offset == 13
    got = snaps.restore(T, 0)
    assert [off for off, _, _ in got.deltas] == [12, 13, 15, 16]
    for off, header, arrays in got.deltas:
        want_header, want_arrays = delta(off)
        assert header == ({**want_header, "offset": off} if off != 12 else want_header)
        assert_bit_exact(arrays, want_arrays)
    single = SnapshotStore(raw, prefix="olu", group="g1")
    assert single.write_delta(T, 0, 12, *delta(12)).key == snaps.key(T, 0, "delta", 12)  # same bytes: no conflict
    # A group has its own layout version: a build from before group commit refuses it (unknown
    # layout, so the partition stops) instead of reading it as one delta without its fields.
    # Members alike (same names, dtypes, shapes): the stacked layout, one array per name.
    stored, stored_arrays = decode(raw_get(raw, group.key))
    assert stored["snapshot"]["layout"] == STACKED_GROUP_LAYOUT_VERSION not in (LAYOUT_VERSION, GROUP_LAYOUT_VERSION)
    assert {k: a.shape for k, a in stored_arrays.items()} == {"all.z": (3, 8)}
    assert decode(raw_get(raw, snaps.key(T, 0, "delta", 12)))[0]["snapshot"]["layout"] == LAYOUT_VERSION


def deltas_alike(offsets, seed: int = 0) -> list[tuple[int, dict, dict]]:
    """Deltas whose arrays agree in names, dtypes and shapes (so they are stacked), with edge
    floats: -0.0, NaNs with distinct payloads, a subnormal, infinities."""
    rng = np.random.default_rng(seed)
    out = []
    for j, off in enumerate(offsets):
        z = rng.normal(size=10)
        z[:3] = [-0.0, 5e-324, -np.inf]
        z.view(np.uint64)[3:5] = [0x7FF8_0000_0000_0000 + j + 1, 0xFFF0_0000_0000_0001 + j]  # NaN payloads
        out.append((off, {"kind": "delta", "offset": off, "event_time_ms": 1, "t": 5 + j, "epoch": 0,
                          "deletions": j, "deletions_applied": j, "request": {"ids": 1, "not_applied": 0,
                                                                             "duplicates": 0}},
                    {"z": z, "z_standby": rng.normal(size=(2, 3)), "counts": rng.integers(0, 9, 4, dtype=np.uint32),
                     "scalar": np.array(j, dtype=np.int64), "none": np.zeros((0, 2), dtype=np.uint8)}))
    return out


def assert_restores_as(snaps, deltas, first_full: int = 10) -> None:
    got = SnapshotStore(snaps.store, prefix=snaps.prefix, group=snaps.group).restore(T, 0)  # nothing cached
    assert [off for off, _, _ in got.deltas] == [off for off, _, _ in deltas]
    for (off, header, arrays), (want_off, want_header, want_arrays) in zip(got.deltas, deltas):
        assert (off, header) == (want_off, {**want_header, "offset": want_off})
        assert_bit_exact(arrays, want_arrays)
        assert all(a.flags.c_contiguous for a in arrays.values())


def test_a_stacked_group_round_trips_bit_exactly(snaps, raw):
    snaps.write_full(T, 0, 10, *state(10))
    deltas = deltas_alike([12, 13, 17, 18])
    ref = snaps.write_deltas(T, 0, deltas)
    stored, arrays = decode(raw_get(raw, ref.key))
    assert stored["snapshot"]["layout"] == STACKED_GROUP_LAYOUT_VERSION and stored["meta"]["kind"] == "delta-group"
    assert {k: a.shape for k, a in arrays.items()} == {"all.z": (4, 10), "all.z_standby": (4, 2, 3),
                                                       "all.counts": (4, 4), "all.scalar": (4,), "all.none": (4, 0, 2)}
    assert_restores_as(snaps, deltas)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), members=st.integers(2, 5),
       specs=st.dictionaries(st.text("abz_.", min_size=0, max_size=4),
                             st.tuples(array_dtypes, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)),
                             max_size=3))
def test_any_alike_members_stack_and_round_trip_bit_exactly(data, members, specs):
    deltas = [(off, {"j": off}, {name: data.draw(hnp.arrays(dtype, shape)) for name, (dtype, shape) in specs.items()})
              for off in range(5, 5 + members)]
    snaps = SnapshotStore(MemoryStore(), group="g")
    ref = snaps.write_deltas(T, 0, deltas)
    stored, _ = decode(raw_get(snaps.store, ref.key))
    assert stored["snapshot"]["layout"] == STACKED_GROUP_LAYOUT_VERSION
    snaps.write_deltas(T, 0, [(off, h, {k: a.copy() for k, a in arrs.items()}) for off, h, arrs in deltas])  # no conflict
    assert_restores_as(snaps, deltas)


@pytest.mark.parametrize("differ", ["extra array", "missing array", "dtype", "shape"])
def test_members_that_differ_are_stored_one_array_each(snaps, raw, differ):
    """A group whose members' arrays do not line up keeps layout 2 (d{j}.{name}), as before."""
    snaps.write_full(T, 0, 10, *state(10))
    deltas = deltas_alike([12, 13, 14])
    arrays = deltas[1][2]
    if differ == "extra array":
        arrays["w"] = np.ones(3)
    elif differ == "missing array":
        del arrays["z_standby"]
    elif differ == "dtype":
        arrays["counts"] = arrays["counts"].astype(np.uint64)
    else:
        arrays["z"] = arrays["z"][:9]
    ref = snaps.write_deltas(T, 0, deltas)
    stored, stored_arrays = decode(raw_get(raw, ref.key))
    assert stored["snapshot"]["layout"] == GROUP_LAYOUT_VERSION
    assert {name.split(".")[0] for name in stored_arrays} == {"d0", "d1", "d2"}
    assert_restores_as(snaps, deltas)


def test_a_layout_2_group_of_an_older_build_still_restores(snaps, raw):
    """Groups written before stacking (one array per member, even when they are alike) restore."""
    snaps.write_full(T, 0, 10, *state(10))
    deltas = deltas_alike([12, 14, 15], seed=3)
    header = {"kind": "delta-group", "deltas": [{**h, "offset": off} for off, h, _ in deltas]}
    arrays = {f"d{j}.{name}": a for j, (_, _, arrs) in enumerate(deltas) for name, a in arrs.items()}
    ref = snaps._write("delta", T, 0, 12, header, arrays, layout=GROUP_LAYOUT_VERSION)  # as the older build did
    assert decode(raw_get(raw, ref.key))[0]["snapshot"]["layout"] == GROUP_LAYOUT_VERSION
    later = deltas_alike([16, 17], seed=4)
    snaps.write_deltas(T, 0, later)  # this build's next group: stacked
    assert_restores_as(snaps, deltas + later)


def test_rewriting_a_stacked_group_is_idempotent_and_a_different_one_conflicts(snaps, raw):
    deltas = deltas_alike([20, 21, 22])
    first = snaps.write_deltas(T, 0, deltas)
    before = raw_get(raw, first.key)
    replay = SnapshotStore(raw, prefix="olu", group="g1")  # after a crash: a later created_at, same content
    again = replay.write_deltas(T, 0, [(off, dict(h), {k: a.copy() for k, a in arrs.items()})
                                       for off, h, arrs in deltas])
    assert (again.key, again.size) == (first.key, first.size) and raw_get(raw, first.key) == before
    for change in ("one ulp", "header", "fewer members", "-0.0 as 0.0"):
        other = [(off, dict(h), {k: a.copy() for k, a in arrs.items()}) for off, h, arrs in deltas]
        if change == "one ulp":
            other[1][2]["z"][7] = np.nextafter(other[1][2]["z"][7], np.inf)  # another noise draw
        elif change == "header":
            other[2][1]["deletions"] += 1
        elif change == "fewer members":
            other = other[:2]
        else:
            other[0][2]["z"][0] = 0.0
        with pytest.raises(SnapshotConflict, match="another writer"):
            replay.write_deltas(T, 0, other)
        assert raw_get(raw, first.key) == before


@pytest.mark.parametrize(("bad", "reason"), [
    ("one row short", "'all.z' has shape (1, 8), not one row per each of the group's 2 deltas"),
    ("one row too many", "'all.t' has shape (3, 8)"),
    ("0-d stacked array", "'all.t' has shape ()"),
    ("stray array name", "array 'z' of a stacked delta group is not named all.<name>"),
    ("member array name", "array 'd1.z' of a stacked delta group"),  # layout 2's naming in layout 3
    ("not a group header", "corrupt: layout 3 with a 'delta' header"),
])
def test_a_malformed_stacked_group_is_corrupt(snaps, bad, reason):
    snaps.write_full(T, 0, 10, *state(10))
    members = [{**delta(off)[0], "offset": off} for off in (12, 13)]
    header = {"kind": "delta-group", "deltas": members}
    arrays = {"all.z": np.zeros((2, 8))}
    if bad == "one row short":
        arrays["all.z"] = np.zeros((1, 8))
    elif bad == "one row too many":
        arrays["all.t"] = np.zeros((3, 8))
    elif bad == "0-d stacked array":
        arrays["all.t"] = np.zeros(())
    elif bad == "stray array name":
        arrays["z"] = np.zeros((2, 8))
    elif bad == "member array name":
        arrays["d1.z"] = np.zeros(8)
    else:
        header = {**delta(12)[0], "offset": 12}
    snaps._write("delta", T, 0, 12, header, arrays, layout=STACKED_GROUP_LAYOUT_VERSION)
    with pytest.raises(SnapshotCorrupt, match="must not be redrawn") as info:
        snaps.restore(T, 0)
    assert info.value.reason.startswith("corrupt: ") and reason in info.value.reason


def test_write_deltas_refuses_nothing_and_unordered_offsets(snaps):
    with pytest.raises(ValueError, match="at least one"):
        snaps.write_deltas(T, 0, [])
    with pytest.raises(ValueError, match="increase"):
        snaps.write_deltas(T, 0, [(5, *delta(5)), (5, *delta(5))])
    assert keys_of(snaps) == []


def test_a_competing_writers_delta_at_a_groups_first_offset_is_a_conflict(snaps, raw):
    snaps.write_deltas(T, 0, [(off, *delta(off)) for off in (20, 21)])
    other = SnapshotStore(raw, prefix="olu", group="g1")
    header, arrays = delta(20)
    arrays["z"] = arrays["z"] + 1.0  # its own noise draw for the same deletion
    with pytest.raises(SnapshotConflict):
        other.write_delta(T, 0, 20, header, arrays)


def test_two_different_stored_states_for_one_deletion_stop_the_restore(snaps, raw):
    snaps.write_full(T, 0, 10, *state(10))
    snaps.write_deltas(T, 0, [(off, *delta(off)) for off in (12, 14)])
    header, arrays = delta(14)
    arrays["z"] = arrays["z"] * 2
    SnapshotStore(raw, prefix="olu", group="g1").write_delta(T, 0, 14, {**header, "offset": 14}, arrays)
    with pytest.raises(SnapshotConflict, match="offset 14"):
        snaps.restore(T, 0)


def test_the_same_stored_state_twice_is_compared_bit_exactly(snaps, raw):
    """A deletion stored in two objects is compared as the codec stores it: the very same state
    with a NaN in it is one state; 0.0 against -0.0 is two."""
    snaps.write_full(T, 0, 10, *state(10))
    header, arrays = delta(14)
    arrays["z"][0] = np.nan
    snaps.write_deltas(T, 0, [(12, *delta(12)), (14, header, arrays)])
    other = SnapshotStore(raw, prefix="olu", group="g1")
    other.write_delta(T, 0, 14, {**header, "offset": 14}, {"z": arrays["z"].copy()})
    assert [off for off, _, _ in snaps.restore(T, 0).deltas] == [12, 14]
    header, arrays = delta(17)
    arrays["z"][0] = 0.0
    snaps.write_deltas(T, 0, [(16, *delta(16)), (17, header, arrays)])
    arrays["z"][0] = -0.0
    other.write_delta(T, 0, 17, {**header, "offset": 17}, arrays)
    with pytest.raises(SnapshotConflict, match="offset 17"):
        snaps.restore(T, 0)


@pytest.mark.parametrize("bad", ["offsets out of order", "first offset", "stray array", "no members",
                                 "single-delta layout"])
def test_a_malformed_delta_group_is_corrupt(snaps, bad):
    snaps.write_full(T, 0, 10, *state(10))
    members = [{**delta(off)[0], "offset": off} for off in (12, 13)]
    arrays = {"d0.z": np.zeros(8), "d1.z": np.ones(8)}
    if bad == "offsets out of order":
        members = members[::-1]
    elif bad == "first offset":
        members[0]["offset"] = 11
    elif bad == "stray array":
        arrays["d2.z"] = np.zeros(8)
    elif bad == "no members":
        members = []
    layout = LAYOUT_VERSION if bad == "single-delta layout" else GROUP_LAYOUT_VERSION
    snaps._write("delta", T, 0, 12 if bad != "offsets out of order" else 13,
                 {"kind": "delta-group", "deltas": members}, arrays, layout=layout)
    with pytest.raises(SnapshotCorrupt, match="must not be redrawn"):
        snaps.restore(T, 0)


# ------------------------------------------------------------------ create-only conflicts
@pytest.mark.parametrize("kind", ["full", "delta"])
def test_identical_rewrite_is_success(snaps, raw, kind):
    write = snaps.write_full if kind == "full" else snaps.write_delta
    header, arrays = state(7)
    first = write(T, 0, 7, header, arrays)
    before = raw_get(raw, first.key)
    second = SnapshotStore(raw, prefix="olu", group="g1").write_full if kind == "full" else \
        SnapshotStore(raw, prefix="olu", group="g1").write_delta
    again = second(T, 0, 7, header, {k: v.copy() for k, v in arrays.items()})  # a replay, later created_at
    assert (again.key, again.size) == (first.key, first.size)
    assert raw_get(raw, first.key) == before  # the original object is untouched


@pytest.mark.parametrize("change", ["header", "array bit", "array dtype", "array missing", "extra array"])
@pytest.mark.parametrize("kind", ["full", "delta"])
def test_different_content_is_a_conflict(snaps, raw, kind, change):
    write = snaps.write_full if kind == "full" else snaps.write_delta
    header, arrays = state(7)
    first = write(T, 0, 7, header, arrays)
    before = raw_get(raw, first.key)
    other_header, other = dict(header), dict(arrays)
    if change == "header":
        other_header["event_time_ms"] += 1
    elif change == "array bit":
        other["z"] = arrays["z"].copy()
        other["z"][4] = np.nextafter(other["z"][4], np.inf)  # one ulp: a different noise draw
    elif change == "array dtype":
        other["flags"] = arrays["flags"].astype(np.uint32)
    elif change == "array missing":
        del other["X"]
    else:
        other["more"] = np.zeros(1)
    with pytest.raises(SnapshotConflict) as info:
        write(T, 0, 7, other_header, other)
    assert info.value.key == first.key and "another writer" in info.value.reason
    assert raw_get(raw, first.key) == before


def test_damaged_object_in_the_way_is_replaced(snaps, raw):
    key = snaps.key(T, 0, "full", 7)
    obstore.put(raw, key, b"not a snapshot at all, but longer than the minimum size of one")
    header, arrays = state(7)
    ref = snaps.write_full(T, 0, 7, header, arrays)
    assert ref.size == len(raw_get(raw, key))
    assert_bit_exact(SnapshotStore(raw, prefix="olu", group="g1").restore(T, 0).arrays, arrays)


def test_object_in_a_newer_format_in_the_way_is_a_conflict(snaps, raw):
    ref = snaps.write_full(T, 0, 7, *state(7))
    newer = _future_format(raw_get(raw, ref.key))
    obstore.delete(raw, ref.key)
    obstore.put(raw, ref.key, newer)
    with pytest.raises(SnapshotConflict, match="unreadable"):
        snaps.write_full(T, 0, 7, *state(7))
    assert raw_get(raw, ref.key) == newer


def test_replay_after_fallback_rewrites_the_damaged_snapshot(snaps, raw):
    snaps.write_full(T, 0, 10, *state(10))
    newest = snaps.write_full(T, 0, 20, *state(20))
    obstore.put(raw, newest.key, _flipped(raw_get(raw, newest.key)))
    replica = SnapshotStore(raw, prefix="olu", group="g1")
    assert replica.restore(T, 0).offset == 10
    replica.write_full(T, 0, 20, *state(20))  # the deterministic replay reaches 20 again
    got = replica.restore(T, 0, on_corrupt="fail")
    assert got.offset == 20 and got.skipped == []


# ------------------------------------------------------------------ corrupt full snapshots
def _truncated(blob, **_):
    return blob[: len(blob) // 2]


def _stub(blob, **_):
    return blob[:20]


def _flipped(blob, **_):
    i = len(blob) // 3
    return blob[:i] + bytes([blob[i] ^ 0x01]) + blob[i + 1:]


def _future_format(blob, **_):
    return blob[:7] + bytes([blob[7] + 1]) + blob[8:]


def _future_layout(blob, **_):
    header, arrays = state(20)
    return encode({"snapshot": {"layout": LAYOUT_VERSION + 1, "kind": "full", "group": "g1", "topic": T,
                                "partition": 0, "offset": 20, "created_at": "x"}, "meta": header}, arrays)


def _other_partition(blob, snaps, raw):
    return raw_get(raw, snaps.write_full(T, 1, 20, *state(20)).key)


def _other_group(blob, snaps, raw):
    return raw_get(raw, SnapshotStore(raw, prefix="olu", group="g2").write_full(T, 0, 20, *state(20)).key)


def _other_offset(blob, snaps, raw):
    return raw_get(raw, snaps.key(T, 0, "full", 10))  # a valid snapshot of ours, under the wrong name


def _a_delta(blob, snaps, raw):
    elsewhere = SnapshotStore(raw, prefix="scratch", group="g1")  # same identity, other directory
    return raw_get(raw, elsewhere.write_delta(T, 0, 20, *delta(20)).key)


CORRUPTIONS = {
    "truncated": (_truncated, "checksum mismatch"),
    "stub": (_stub, "too short"),
    "flipped byte": (_flipped, "checksum mismatch"),
    "unknown format version": (_future_format, "unknown snapshot format version"),
    "unknown layout version": (_future_layout, "unknown snapshot layout version"),
    "other partition": (_other_partition, "foreign snapshot: partition=1 (expected 0)"),
    "other group": (_other_group, "foreign snapshot: group='g2' (expected 'g1')"),
    "wrong offset": (_other_offset, "foreign snapshot: offset=10 (expected 20)"),
    "delta as full": (_a_delta, "foreign snapshot: kind='delta' (expected 'full')"),
}


def _with_corrupt_newest(snaps, raw, corruption):
    snaps.write_full(T, 0, 10, *state(10))
    good = snaps.write_full(T, 0, 20, *state(20))
    for off in (15, 23):
        snaps.write_delta(T, 0, off, *delta(off))
    damage, _ = CORRUPTIONS[corruption]
    bad = damage(raw_get(raw, good.key), snaps=snaps, raw=raw)
    obstore.delete(raw, good.key)
    obstore.put(raw, good.key, bad)
    return good.key


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_corrupt_newest_falls_back_to_older(snaps, raw, corruption):
    bad_key = _with_corrupt_newest(snaps, raw, corruption)
    fresh = SnapshotStore(raw, prefix="olu", group="g1")  # another replica: nothing cached
    got = fresh.restore(T, 0, on_corrupt="fallback")
    assert got.offset == 10 and got.header == state(10)[0]
    assert_bit_exact(got.arrays, state(10)[1])
    # The deltas after the older base are needed too, including the one the newer snapshot covered.
    assert [off for off, _, _ in got.deltas] == [15, 23]
    assert len(got.skipped) == 1 and got.skipped[0][0] == bad_key
    assert CORRUPTIONS[corruption][1] in got.skipped[0][1]


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_corrupt_newest_fails_under_fail_policy(snaps, raw, corruption):
    bad_key = _with_corrupt_newest(snaps, raw, corruption)
    with pytest.raises(SnapshotCorrupt) as info:
        SnapshotStore(raw, prefix="olu", group="g1").restore(T, 0, on_corrupt="fail")
    assert info.value.key == bad_key and CORRUPTIONS[corruption][1] in info.value.reason


def test_fail_policy_ignores_damage_older_than_the_newest(snaps, raw):
    old = snaps.write_full(T, 0, 10, *state(10))
    snaps.write_full(T, 0, 20, *state(20))
    obstore.put(raw, old.key, b"garbage")
    assert snaps.restore(T, 0, on_corrupt="fail").offset == 20


@pytest.mark.parametrize("on_corrupt", ["fallback", "fail"])
def test_no_valid_full_snapshot_is_fatal(snaps, raw, on_corrupt):
    for off in (10, 20):
        obstore.put(raw, snaps.write_full(T, 0, off, *state(off)).key, b"x" * 100)
    with pytest.raises(SnapshotCorrupt):
        snaps.restore(T, 0, on_corrupt=on_corrupt)


# ------------------------------------------------------------------ corrupt deltas
@pytest.mark.parametrize("on_corrupt", ["fallback", "fail"])
@pytest.mark.parametrize("damage", ["flipped byte", "other partition"])
def test_corrupt_needed_delta_is_fatal_under_any_policy(snaps, raw, on_corrupt, damage):
    snaps.write_full(T, 0, 10, *state(10))
    needed = snaps.write_delta(T, 0, 14, *delta(14))
    snaps.write_delta(T, 0, 18, *delta(18))
    if damage == "flipped byte":
        bad = _flipped(raw_get(raw, needed.key))
    else:
        bad = raw_get(raw, snaps.write_delta(T, 1, 14, *delta(14)).key)
    obstore.delete(raw, needed.key)
    obstore.put(raw, needed.key, bad)
    with pytest.raises(SnapshotCorrupt) as info:
        SnapshotStore(raw, prefix="olu", group="g1").restore(T, 0, on_corrupt=on_corrupt)
    assert info.value.key == needed.key and "invariant 2" in info.value.reason


def test_delta_needed_after_fallback_is_fatal_too(snaps, raw):
    snaps.write_full(T, 0, 10, *state(10))
    between = snaps.write_delta(T, 0, 15, *delta(15))
    newest = snaps.write_full(T, 0, 20, *state(20))
    for key in (between.key, newest.key):
        obstore.put(raw, key, _flipped(raw_get(raw, key)))
    with pytest.raises(SnapshotCorrupt) as info:
        snaps.restore(T, 0, on_corrupt="fallback")
    assert info.value.key == between.key


def test_corrupt_delta_older_than_the_base_is_not_read(snaps, raw):
    old = snaps.write_delta(T, 0, 5, *delta(5))
    snaps.write_full(T, 0, 10, *state(10))
    obstore.put(raw, old.key, b"garbage")
    assert snaps.restore(T, 0, on_corrupt="fail").offset == 10


def test_restore_lists_again_when_objects_vanish(monkeypatch):
    raw = MemoryStore()
    ours, theirs = SnapshotStore(raw, group="g"), SnapshotStore(raw, group="g", keep=1)
    ours.write_full(T, 0, 10, *state(10))
    real_get = obstore.get
    calls = []

    def racing_get(store, key, *args, **kwargs):
        if not calls:  # between our listing and our read, the old owner snapshots and collects
            theirs.write_full(T, 0, 20, *state(20))
            theirs.gc(T, 0)
        calls.append(key)
        return real_get(store, key, *args, **kwargs)

    monkeypatch.setattr(obstore, "get", racing_get)
    got = SnapshotStore(raw, group="g").restore(T, 0)
    assert got.offset == 20 and calls[0].endswith(f"full-{10:020d}.snap")


# ------------------------------------------------------------------ garbage collection
def test_gc_keeps_newest_fulls_and_later_deltas(snaps, raw):
    for off in (10, 20, 30, 40):
        snaps.write_full(T, 0, off, *state(off))
    for off in (5, 15, 25, 30, 35, 45):
        snaps.write_delta(T, 0, off, *delta(off))
    fresh = SnapshotStore(raw, prefix="olu", group="g1", keep=2)  # validates by reading
    assert fresh.gc(T, 0) == 6
    assert keys_of(snaps) == [("full", 30), ("delta", 35), ("full", 40), ("delta", 45)]
    assert fresh.gc(T, 0) == 0
    got = snaps.restore(T, 0)
    assert got.offset == 40 and [o for o, _, _ in got.deltas] == [45]


def test_gc_skips_corrupt_and_never_drops_the_newest_valid(snaps, raw):
    for off in (10, 20, 30):
        snaps.write_full(T, 0, off, *state(off))
    snaps.write_delta(T, 0, 25, *delta(25))
    newest = snaps.key(T, 0, "full", 30)
    obstore.put(raw, newest, _flipped(raw_get(raw, newest)))
    fresh = SnapshotStore(raw, prefix="olu", group="g1", keep=1)
    assert fresh.gc(T, 0) == 1  # full 10 only; 20 is the newest valid, 25 is needed after it
    assert keys_of(snaps) == [("full", 20), ("delta", 25), ("full", 30)]
    got = snaps.restore(T, 0)
    assert got.offset == 20 and [o for o, _, _ in got.deltas] == [25]


def test_gc_with_nothing_valid_deletes_nothing(snaps, raw):
    for off in (10, 20):
        obstore.put(raw, snaps.key(T, 0, "full", off), b"garbage")
    snaps.write_delta(T, 0, 5, *delta(5))
    assert snaps.gc(T, 0) == 0
    assert len(snaps.list(T, 0)) == 3


def test_gc_deletes_in_batches_and_tolerates_a_vanished_key(snaps, raw, monkeypatch):
    """Deltas covered by a kept full snapshot go in batches of DELETE_BATCH keys per request; a key
    another worker already removed (LocalStore then reports it) does not stop the rest."""
    monkeypatch.setattr(layout_module, "DELETE_BATCH", 3)
    calls = []
    real_delete = obstore.delete

    def counting_delete(store, paths):
        calls.append(list(paths) if isinstance(paths, list) else [paths])
        if len(calls) == 2:  # another worker's GC removes one of this batch first
            real_delete(store, paths[1])
        return real_delete(store, paths)

    monkeypatch.setattr(obstore, "delete", counting_delete)
    snaps.write_full(T, 0, 10, *state(10))
    for off in range(11, 19):
        snaps.write_delta(T, 0, off, *delta(off))
    snaps.write_full(T, 0, 20, *state(20))
    snaps.write_full(T, 0, 30, *state(30))
    assert snaps.gc(T, 0) == 9  # full 10 and the eight deltas after it
    assert [len(c) for c in calls] == [3, 3, 3]
    assert keys_of(snaps) == [("full", 20), ("full", 30)]


# ------------------------------------------------------------------ purge (invariant 6)
def test_purge_before_deletes_everything_older(snaps):
    for off in (10, 20):
        snaps.write_full(T, 0, off, *state(off))
    for off in (5, 15, 25, 30):
        snaps.write_delta(T, 0, off, *delta(off))
    snaps.write_full(T, 0, 30, *state(30))
    snaps.write_delta(T, 0, 33, *delta(33))
    assert snaps.purge_before(T, 0, 30) == 5
    assert keys_of(snaps) == [("delta", 30), ("full", 30), ("delta", 33)]
    assert snaps.restore(T, 0).offset == 30


def test_purge_refuses_without_a_covering_full_snapshot(snaps, raw):
    snaps.write_full(T, 0, 10, *state(10))
    bad = snaps.key(T, 0, "full", 30)
    obstore.put(raw, bad, b"garbage")
    with pytest.raises(ValueError, match="refusing"):
        snaps.purge_before(T, 0, 30)
    assert keys_of(snaps) == [("full", 10), ("full", 30)]


# ------------------------------------------------------------------ arguments
def test_bad_arguments():
    store = MemoryStore()
    with pytest.raises(ValueError):
        SnapshotStore(store, group="g", keep=0)
    with pytest.raises(ValueError):
        SnapshotStore(store, group="")
    snaps = SnapshotStore(store, group="g")
    with pytest.raises(ValueError):
        snaps.restore(T, 0, on_corrupt="ignore")
    for topic, partition, offset in [("a/b", 0, 1), ("", 0, 1), (T, -1, 1), (T, 0, -1), (T, 0, 10**20)]:
        with pytest.raises(ValueError):
            snaps.write_full(topic, partition, offset, {}, {})
    assert SnapshotStore(store, prefix="", group="g").key(T, 2, "delta", 3) == f"g/{T}/2/delta-{3:020d}.snap"


# ------------------------------------------------------------------ open_store
def test_open_store_memory_and_file(tmp_path, monkeypatch):
    assert isinstance(open_store("memory://"), MemoryStore)
    absolute = open_store(f"file://{tmp_path}/a/b")
    assert isinstance(absolute, LocalStore) and (tmp_path / "a" / "b").is_dir()
    monkeypatch.chdir(tmp_path)
    relative = open_store("file://./rel/dir")
    assert isinstance(relative, LocalStore) and (tmp_path / "rel" / "dir").is_dir()
    SnapshotStore(relative, group="g").write_full(T, 0, 1, {}, {"z": np.zeros(1)})
    assert SnapshotStore(open_store(f"file://{tmp_path}/rel/dir"), group="g").restore(T, 0).offset == 1


def test_open_store_s3_from_environment(monkeypatch):
    for var in ("AWS_ENDPOINT", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    store = open_store("s3://my-bucket/some/prefix/")
    assert isinstance(store, S3Store) and store.prefix == "some/prefix"
    assert store.config["bucket"] == "my-bucket" and store.config["endpoint"] == "http://127.0.0.1:9"
    assert store.config["region"] == "eu-west-3"
    assert str(store.config["virtual_hosted_style_request"]).lower() == "false"  # path-style
    assert str(store.client_options["allow_http"]).lower() == "true" and store.retry_config == DEFAULT_RETRY
    quick = {"max_retries": 0}
    store = open_store("s3://my-bucket", retry_config=quick, client_options={"timeout": "1s"})
    assert store.prefix is None and store.retry_config["max_retries"] == 0 and store.client_options["timeout"] == "1s"


@pytest.mark.parametrize("url", ["", "memory", "/abs/path", "ftp://host/x", "gs://bucket/x", "s3://",
                                 "s3:///prefix", "s3://A_bad_Bucket/x", "file://", "memory://named",
                                 "s3://user:pw@host/bucket"])
def test_open_store_rejects_bad_urls(url):
    with pytest.raises(ValueError) as info:
        open_store(url)
    assert repr(url) in str(info.value)


def _s3_env(monkeypatch, server):
    for var in ("AWS_ENDPOINT", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    for var, value in server.env().items():
        monkeypatch.setenv(var, value)


def _empty(store) -> None:
    keys = [m["path"] for m in obstore.list(store).collect()]
    if keys:
        obstore.delete(store, keys)


def test_open_store_s3_against_the_server(s3_server, monkeypatch):
    _s3_env(monkeypatch, s3_server)
    store = open_store(f"s3://{s3_server.bucket}/tests/open-store-{uuid.uuid4().hex[:8]}")
    try:
        snaps = SnapshotStore(store, prefix="olu", group="g")
        header, arrays = state(3)
        snaps.write_full(T, 0, 3, header, arrays)
        assert_bit_exact(snaps.restore(T, 0).arrays, arrays)
    finally:
        _empty(store)


def test_outage_raises_storage_unavailable_then_recovers(s3_server, monkeypatch):
    if not isinstance(s3_server, SeaweedS3):
        pytest.skip("external S3 server: not ours to stop")
    _s3_env(monkeypatch, s3_server)
    s3_server.resume()
    s3_server.start()
    store = open_store(f"s3://{s3_server.bucket}/tests/outage-{uuid.uuid4().hex[:8]}")  # fail-fast defaults
    snaps = SnapshotStore(store, prefix="olu", group="g")
    snaps.write_full(T, 0, 10, *state(10))
    try:
        s3_server.stop()
        with pytest.raises(StorageUnavailable) as info:
            snaps.write_delta(T, 0, 12, *delta(12))
        assert info.value.key == snaps.key(T, 0, "delta", 12) and "put failed" in info.value.reason
        with pytest.raises(StorageUnavailable):
            snaps.restore(T, 0)
        with pytest.raises(StorageUnavailable):
            snaps.gc(T, 0)
    finally:
        s3_server.start()
    try:
        snaps.write_delta(T, 0, 12, *delta(12))  # the caller's retry
        got = snaps.restore(T, 0)
        assert got.offset == 10 and [o for o, _, _ in got.deltas] == [12]
    finally:
        _empty(store)
