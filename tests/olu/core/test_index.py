"""The applied-record index (runs + tail) against a plain dict, and its snapshot layout."""

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.olu.core import index as index_module
from worker.olu.core import runs as runs_module
from worker.olu.core.index import AppliedIndex
from worker.olu.core.kernels import merge
from worker.olu.core.runs import merge_runs_reference
from worker.olu.core.tombstones import FILTER_BITS_PER_KEY, KeySet


def small_index():
    return AppliedIndex(tail_size=4, max_run=16)


# keys from a small pool, so pops hit runs, the tail and duplicate keys
ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(1, 12)),
    st.tuples(st.just("pop"), st.integers(1, 12)),
    st.tuples(st.just("pop_undo"), st.integers(1, 12)),
    st.tuples(st.just("merge"), st.just(0)),
    st.tuples(st.just("reload"), st.just(0)),
    st.tuples(st.just("prefetch"), st.just(0)),
    st.tuples(st.just("holds"), st.integers(1, 12)),
), max_size=200)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_index_behaves_like_a_dict_of_step_lists(operations):
    idx, expected, step = small_index(), defaultdict(list), 0
    for op, key in operations:
        if op == "add":
            step += 1
            idx.add(key, step)
            expected[key].append(step)
        elif op == "pop":
            assert idx.pop(key) == sorted(expected.pop(key, []))
        elif op == "pop_undo":
            before = idx.to_arrays()
            idx.pop(key)
            idx.undo_pop()
            after = idx.to_arrays()
            assert all(np.array_equal(before[k], after[k]) for k in before)
        elif op == "merge":
            idx.merge()
        elif op == "prefetch":  # a run of deletes looked up at once: pops after it must not differ
            idx.prefetch(np.arange(1, 13, dtype=np.uint64))
        elif op == "holds":
            assert idx.holds(key) == bool(expected.get(key))
        else:  # a snapshot round trip keeps the exact layout
            arrays, shared = idx.export()
            copy = AppliedIndex.load(arrays, {g: {k: v.copy() for k, v in a.items()} for g, a in shared.items()})
            assert [len(r) for r in copy.runs] == [len(r) for r in idx.runs]
            assert all(r.dead == s.dead for r, s in zip(copy.runs, idx.runs))
            idx = copy
            idx._max_run, idx._tail_keys, idx._tail_steps = 16, idx._tail_keys[:4].copy(), idx._tail_steps[:4].copy()
        assert len(idx) == sum(len(v) for v in expected.values())
        assert all(len(r) <= 16 or not r.dead for r in idx.runs)
    live = idx.to_arrays()
    pairs = sorted((k, s) for k, steps in expected.items() for s in steps)
    assert list(zip(live["applied_keys"].tolist(), live["applied_steps"].tolist())) == pairs
    assert idx.live_steps().tolist() == sorted(s for _, s in pairs)


def test_runs_merge_four_of_a_tier_at_a_time_and_stop_at_the_cap():
    idx = AppliedIndex(tail_size=4, max_run=32)
    for step in range(1, 4 * 64 + 1):
        idx.add(step * 7919 % 1000 + 1, step)
    idx.merge()
    sizes = [len(r) for r in idx.runs]
    assert sizes == [16] * 16  # 256 entries: four 16s would make 64 > 32, so runs stop at 16
    assert all(np.all(r.keys[1:] >= r.keys[:-1]) for r in idx.runs)
    for tails, expected in ((3, [4, 4, 4]), (7, [16, 4, 4, 4]), (21, [64, 16, 4])):
        idx = AppliedIndex(tail_size=4, max_run=1 << 20)
        for step in range(1, 4 * tails + 1):
            idx.add(step, step)
        idx.merge()
        assert [len(r) for r in idx.runs] == expected  # tails counted in base 4: 3 = 3, 7 = 13, 21 = 111


def test_runs_are_immutable_and_mostly_dead_runs_are_rewritten():
    idx = AppliedIndex(tail_size=2, max_run=8)  # four tails of 2 merge into one run of 8
    for step in range(1, 9):
        idx.add(step, step)
    idx.merge()
    run = idx.runs[0]
    with pytest.raises(ValueError):
        run.keys[0] = 99  # snapshots in flight share these arrays
    for key in (1, 2, 3, 4, 5):
        idx.pop(key)
    idx.merge()  # more than half dead: rewritten without them
    assert [len(r) for r in idx.runs] == [3] and not idx.runs[0].dead
    assert run.keys.tolist() == list(range(1, 9))  # the old run an earlier snapshot holds is untouched


def test_export_shares_runs_without_copying():
    idx = AppliedIndex(tail_size=4)
    for step in range(1, 7):
        idx.add(step, step)
    arrays, shared = idx.export()
    assert set(shared) == {"applied_run0"}
    assert shared["applied_run0"]["keys"] is idx.runs[0].keys
    assert arrays["applied_tail_keys"].tolist() == [5, 6]
    assert arrays["applied_run0_dead"].tolist() == []


def test_load_reads_the_one_array_layout_of_state_format_1():
    idx = AppliedIndex.load({"applied_keys": np.array([3, 5, 5], np.uint64),
                             "applied_steps": np.array([2, 1, 3], np.uint32)})
    assert idx.pop(5) == [1, 3] and len(idx) == 1


@pytest.mark.parametrize("bad", [
    lambda a, s: s["applied_run0"].update(keys=np.array([9, 1, 2, 3], np.uint64)),
    lambda a, s: a.update(applied_run0_dead=np.array([4], np.int64)),
    lambda a, s: a.update(applied_run0_dead=np.array([1, 1], np.int64)),
    lambda a, s: s.update(applied_run2=s["applied_run0"]),
    lambda a, s: a.update(applied_tail_steps=np.array([0, 6], np.uint32)),
])
def test_load_rejects_inconsistent_layouts(bad):
    idx = AppliedIndex(tail_size=4)
    for step in range(1, 7):
        idx.add(step, step)
    arrays, shared = idx.export()
    shared = {g: dict(a) for g, a in shared.items()}
    bad(arrays, shared)
    with pytest.raises(ValueError):
        AppliedIndex.load(arrays, shared)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 20), max_size=40), st.lists(st.integers(1, 20), max_size=40), st.data())
def test_compiled_merge_matches_numpy_reference(a, b, data):
    ak, bk = np.sort(np.array(a, np.uint64)), np.sort(np.array(b, np.uint64))
    as_ = np.arange(1, len(a) + 1, dtype=np.uint32)
    bs = np.arange(100, 100 + len(b), dtype=np.uint32)
    adead = np.array(sorted(data.draw(st.sets(st.integers(0, max(len(a) - 1, 0)))) if a else []), np.int64)
    bdead = np.array(sorted(data.draw(st.sets(st.integers(0, max(len(b) - 1, 0)))) if b else []), np.int64)
    got = merge.merge_runs(ak, as_, adead, bk, bs, bdead)
    want = merge_runs_reference(ak, as_, adead, bk, bs, bdead)
    assert all(np.array_equal(g, w) and g.dtype == w.dtype for g, w in zip(got, want))


def test_module_defaults_are_the_documented_sizes():
    assert index_module.TAIL_SIZE == 65_536 and index_module.MAX_RUN == 2_097_152



def test_a_prefetched_answer_serves_one_lookup_and_the_tail_is_looked_up_afresh():
    idx = AppliedIndex(tail_size=8)
    idx.add(5, 1), idx.add(6, 2), idx.merge(), idx.add(7, 3)  # 5 and 6 in a run, 7 in the tail
    idx.prefetch(np.array([5, 7, 8], np.uint64))
    assert idx.pop(7) == [3] and idx.pop(7) == []  # its answer is used once: the hole is not popped again
    assert idx.pop(5) == [1] and idx.pop(5) == []
    idx.undo_pop(), idx.undo_pop()
    assert idx.pop(5) == [1] and idx.pop(8) == [] and len(idx) == 1
    idx.prefetch(np.array([6], np.uint64))
    idx.add(6, 4)  # an entry added goes to the tail, which is looked up afresh
    assert idx.pop(6) == [2, 4]


def test_a_merge_drops_the_prefetched_positions():
    idx = AppliedIndex(tail_size=8)
    for key, step in ((5, 1), (6, 2), (7, 3)):
        idx.add(key, step)
    idx.merge()
    idx.prefetch(np.array([6], np.uint64))  # 6 at position 1 of run 0
    assert idx.pop(5) == [1] and idx.pop(7) == [3]
    idx.merge()  # a run mostly dead is rewritten: 6 moves to position 0
    assert [len(r) for r in idx.runs] == [1]
    assert idx.pop(6) == [2] and len(idx) == 0

@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 30), st.booleans()), min_size=1, max_size=80),
       st.lists(st.integers(1, 32), min_size=1, max_size=12, unique=True), st.booleans())
def test_pop_each_is_pop_in_a_loop(adds, keys, undo):
    """A poll batch's deletes popped at once: the same steps and the same index afterwards as
    one pop() each, through runs, the tail, holes, keys applied twice and undo."""
    def build():
        idx = AppliedIndex(tail_size=8)
        for step, (key, merge_now) in enumerate(adds, 1):
            idx.add(key, step)
            if merge_now:
                idx.merge()
        idx.pop(adds[0][0])  # a hole or a dead position to step over
        return idx

    one, many = build(), build()
    one.begin_pops(), many.begin_pops()
    assert many.pop_each(keys) == [one.pop(k) for k in keys]
    if undo:
        for _ in keys:
            one.undo_pop(), many.undo_pop()
    assert one.to_arrays()["applied_keys"].tolist() == many.to_arrays()["applied_keys"].tolist()
    assert one.to_arrays()["applied_steps"].tolist() == many.to_arrays()["applied_steps"].tolist()
    assert [sorted(r.dead) for r in one.runs] == [sorted(r.dead) for r in many.runs]
    assert one._tail_keys.tolist() == many._tail_keys.tolist() and len(one) == len(many)


# ------------------------------------------------------------------ tombstones: base + recent
@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("add"), st.integers(1, 40)),
                          st.tuples(st.just("reload"), st.just(0)),
                          st.tuples(st.just("prefetch"), st.just(0))), max_size=120))
def test_keyset_behaves_like_a_set_and_round_trips_its_layout(operations):
    keys, expected = KeySet(recent_keys=4), set()
    for op, key in operations:
        if op == "add":
            assert keys.add(key) == (key not in expected)
            expected.add(key)
        elif op == "prefetch":  # a run of deletes looked up at once: answers after it must not differ
            keys.prefetch(np.arange(1, 42, dtype=np.uint64))
        else:  # a snapshot round trip keeps base and recent exactly (a replay must rebuild them)
            recent, shared = keys.export()
            copy = KeySet.load(recent, {g: {k: v.copy() for k, v in a.items()} for g, a in shared.items()})
            assert copy.base.tolist() == keys.base.tolist() and copy.recent.tolist() == keys.recent.tolist()
            keys = copy
            keys.recent_keys = 4
        assert len(keys) == len(expected) and keys.keys.tolist() == sorted(expected)
        assert all(k in keys for k in expected) and 41 not in keys
        assert len(keys.recent) < 4 and not set(keys.base.tolist()) & set(keys.recent.tolist())
        # the learning kernel trusts the filter's "no": it must pass every key, after adds and reloads
        assert all(filter_passes(keys.filter, k) for k in expected)
        assert len(keys.filter) * 64 >= len(keys) * FILTER_BITS_PER_KEY


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(1, 3_000), max_size=60), max_size=12), st.integers(2, 50))
def test_keyset_add_many_is_add_in_a_loop(batches, recent_keys):
    """A poll batch's tombstones in one call: the same base, recent and filter as one by one,
    through merges and filter rebuilds in the middle of a batch."""
    one, many = KeySet(recent_keys=recent_keys), KeySet(recent_keys=recent_keys)
    for batch in batches:
        many.prefetch(np.array(batch[:5], np.uint64))  # answers "absent" that the adds make stale
        for k in batch:
            one.add(k)
        many.add_many(np.array(batch, np.uint64))
        assert many.base.tolist() == one.base.tolist() and many.recent.tolist() == one.recent.tolist()
        assert np.array_equal(many.filter, one.filter)
        assert all(k in many for k in batch)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 400), max_size=80), st.lists(st.integers(1, 500), max_size=40), st.integers(2, 30))
def test_keyset_holds_each_is_membership_key_by_key(added, asked, recent_keys):
    keys = KeySet(recent_keys=recent_keys)
    for k in added:
        keys.add(k)
    asked_keys = np.array(asked, np.uint64)
    keys.prefetch(asked_keys[:3])  # a prefetch's answers do not change the truth
    assert keys.holds_each(asked_keys) == [k in keys for k in asked] == [k in set(added) for k in asked]


def filter_passes(words: np.ndarray, key: int) -> bool:
    """The filter's answer for ``key``, in plain Python (worker.compiled.sorted_keys.filter_slot's formula)."""
    h = (key * 0x9E3779B97F4A7C15) % 2**64
    word = h >> (64 - (len(words).bit_length() - 1))
    mask = (1 << (h & 63)) | (1 << ((h >> 6) & 63))
    return int(words[word]) & mask == mask


def test_keyset_filter_grows_and_rules_out_most_absent_keys():
    rng = np.random.default_rng(5)
    keys = KeySet(recent_keys=1000)
    added = rng.integers(1, 2**64 - 1, 20_000, dtype=np.uint64, endpoint=True)
    for k in added.tolist():
        keys.add(k)
    assert len(keys.filter) * 64 >= len(keys) * FILTER_BITS_PER_KEY  # rebuilt as it filled
    assert all(filter_passes(keys.filter, k) for k in added.tolist())
    absent = rng.integers(1, 2**64 - 1, 20_000, dtype=np.uint64).tolist()
    passed = sum(filter_passes(keys.filter, k) for k in absent)
    assert passed < 0.05 * len(absent)  # ~1.5% at the fullest, less after a rebuild
    copy = KeySet.load(*keys.export())  # never stored: rebuilt from the keys
    assert all(filter_passes(copy.filter, k) for k in added.tolist())


def test_keyset_copy_is_a_reload_without_rebuilding_its_filter():
    """A rotation's new model takes the tombstones by copy(): the layout load(export()) gives,
    the base shared, the filter copied (passing every key) and independent of the original's."""
    rng = np.random.default_rng(2)
    keys = KeySet(recent_keys=RECENT)
    added = rng.integers(1, 2**64 - 1, 3 * RECENT + 7, dtype=np.uint64, endpoint=True).tolist()
    for k in added:
        keys.add(k)
    twin, reloaded = keys.copy(), KeySet.load(*keys.export())
    assert twin.base is keys.base and len(twin.base) and len(twin.recent)
    assert twin.recent.tolist() == reloaded.recent.tolist() and twin.recent_keys == reloaded.recent_keys
    assert twin.filter is not keys.filter and all(filter_passes(twin.filter, k) for k in added)
    before = keys.filter.copy()
    twin.add(12345), twin.add(added[0])
    assert 12345 in twin and 12345 not in keys and np.array_equal(keys.filter, before)
    assert len(keys) == len(added) and keys.recent.tolist() == reloaded.recent.tolist()


RECENT = 1000


def test_keyset_base_is_immutable_and_exported_without_a_copy():
    keys = KeySet(recent_keys=3)
    for k in (9, 4, 7, 1):
        keys.add(k)
    base = keys.base
    assert base.tolist() == [4, 7, 9] and not base.flags.writeable and keys.recent.tolist() == [1]
    recent, shared = keys.export()
    assert shared["tombstones_base"]["keys"] is base and recent.tolist() == [1]
    keys.add(2)
    assert keys.base is base  # below the merge point the base is the same object: stored once
    assert KeySet(recent_keys=3).export()[1] == {}  # no base yet: nothing shared


def test_one_sorted_array_of_an_older_state_becomes_the_base_when_large():
    assert KeySet(np.arange(1, 10, dtype=np.uint64), recent_keys=4).base.tolist() == list(range(1, 10))
    small = KeySet(np.array([3, 5], np.uint64), recent_keys=4)
    assert small.base.tolist() == [] and small.recent.tolist() == [3, 5]
    with pytest.raises(ValueError, match="not strictly sorted"):
        KeySet(np.array([5, 3], np.uint64))


@pytest.mark.parametrize("bad", ["unsorted_base", "unsorted_recent", "overlap"])
def test_keyset_load_refuses_inconsistent_parts(bad):
    base, recent = np.array([2, 4, 6], np.uint64), np.array([3], np.uint64)
    if bad == "unsorted_base":
        base = base[::-1].copy()
    elif bad == "unsorted_recent":
        recent = np.array([5, 1], np.uint64)
    else:
        recent = np.array([4], np.uint64)
    with pytest.raises(ValueError):
        KeySet.load(recent, {"tombstones_base": {"keys": base}})


# ------------------------------------------------------------------ paced merges
def _layout(idx):
    arrays, shared = idx.export()
    return ({k: v.tolist() for k, v in arrays.items()},
            {g: {k: v.tolist() for k, v in a.items()} for g, a in shared.items()})


def _reloaded(idx):
    arrays, shared = idx.export()
    copy = AppliedIndex.load(arrays, {g: {k: v.copy() for k, v in a.items()} for g, a in shared.items()})
    tail = len(idx._tail_keys)
    copy._max_run, copy._tail_keys, copy._tail_steps = idx._max_run, copy._tail_keys[:tail].copy(), copy._tail_steps[:tail].copy()
    if copy._merging is not None:  # restarted with the slices of this test's size
        copy._merging = runs_module.PacedMerge(copy._merging.start, copy._merging.sources)
    return copy


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("add"), st.integers(1, 30)),
                          st.tuples(st.just("pop"), st.integers(1, 30)),
                          st.tuples(st.just("reload"), st.just(0))), max_size=300))
def test_paced_merges_are_a_dict_and_a_replay_rebuilds_the_same_layout(operations):
    """Against a dict, with merges of many small slices; and an index reloaded from its
    snapshot at random points (mid-merge too) ends with exactly the uninterrupted layout."""
    saved = runs_module.MERGE_SLICE
    runs_module.MERGE_SLICE = 1
    try:
        plain, reloaded = AppliedIndex(tail_size=4, max_run=64), AppliedIndex(tail_size=4, max_run=64)
        expected, step, merging_seen = defaultdict(list), 0, False
        for op, key in operations:
            if op == "add":
                step += 1
                plain.add(key, step)
                reloaded.add(key, step)
                expected[key].append(step)
            elif op == "pop":
                want = sorted(expected.pop(key, []))
                assert plain.pop(key) == want and reloaded.pop(key) == want
            else:
                reloaded = _reloaded(reloaded)
            merging_seen |= plain._merging is not None
            assert _layout(plain) == _layout(reloaded)
            assert len(plain) == sum(len(v) for v in expected.values())
        live = plain.to_arrays()
        pairs = sorted((k, s) for k, steps in expected.items() for s in steps)
        assert list(zip(live["applied_keys"].tolist(), live["applied_steps"].tolist())) == pairs
        if step > 40:
            assert merging_seen
    finally:
        runs_module.MERGE_SLICE = saved


def test_a_paced_merge_spreads_its_slices_over_the_next_tail(monkeypatch):
    monkeypatch.setattr(runs_module, "MERGE_SLICE", 4)
    idx, step = AppliedIndex(tail_size=16, max_run=1 << 20), 0
    for _ in range(4 * 16 + 1):  # four tails: the fifth add starts a merge of their four runs
        step += 1
        idx.add(step * 7919 % 1000 + 1, step)
    merging = idx._merging
    assert merging is not None and merging.slices == 4 and [len(r) for r in merging.sources] == [16] * 4
    done = []
    for _ in range(15):
        step += 1
        idx.add(step * 7919 % 1000 + 1, step)
        done.append(merging.done)
    assert done == sorted(done) and 0 < done[3] < 4 and done[-1] == 4  # a slice now and then, all by the end
    assert [len(r) for r in idx.runs] == [16] * 4  # not adopted before the tail is full
    step += 1
    idx.add(step, step)
    assert [len(r) for r in idx.runs] == [64, 16] and idx._merging is None


def test_deletions_during_a_paced_merge_are_carried_into_the_merged_run(monkeypatch):
    monkeypatch.setattr(runs_module, "MERGE_SLICE", 2)
    idx = AppliedIndex(tail_size=8, max_run=1 << 20)
    for step in range(1, 34):  # 4 runs of 8 and a merge started at step 33
        idx.add(step % 11 + 1, step)
    assert idx._merging is not None
    gone = idx.pop(3) + idx.pop(7)  # keys with entries in every source run
    assert len(gone) >= 4
    idx.merge()  # adopts: the merged run keeps all 32 entries, those popped marked dead
    merged = idx.runs[0]
    assert len(merged) == 32 and len(merged.dead) == len([s for s in gone if s <= 32])
    assert sorted(merged.steps[sorted(merged.dead)].tolist()) == sorted(s for s in gone if s <= 32)
    assert idx.pop(3) == [] and idx.pop(7) == [] and idx.pop(4) == list(range(3, 34, 11))


def test_a_snapshot_naming_a_merge_that_cannot_be_is_refused():
    idx = AppliedIndex(tail_size=4, max_run=64)
    for step in range(1, 18):
        idx.add(step, step)
    arrays, shared = idx.export()
    assert arrays["applied_merging"].tolist() == [0, 4]
    arrays["applied_merging"] = np.array([1, 4], np.int64)
    with pytest.raises(ValueError, match="merges runs"):
        AppliedIndex.load(arrays, shared)


@pytest.mark.parametrize("n", [1, 2, 3, 1000, 65536])
def test_compiled_tail_sort_gives_the_lexsort_order(n):
    rng = np.random.default_rng(n)
    keys = rng.integers(1, 2**64, size=n, dtype=np.uint64)
    keys[rng.integers(0, n, size=min(n // 10, 40))] = keys[0]  # a record applied again, or a collision
    steps = rng.permutation(np.arange(1, n + 1, dtype=np.uint32))
    order = np.lexsort((steps, keys))
    out_keys, out_steps = merge.sort_tail(keys, steps)
    assert np.array_equal(out_keys, keys[order]) and np.array_equal(out_steps, steps[order])
    got = runs_module.sorted_tail(keys, steps)
    assert np.array_equal(got[0], keys[order]) and np.array_equal(got[1], steps[order])


def test_clustered_keys_fall_back_to_numpy_sort():
    keys = np.arange(5000, 0, -1, dtype=np.uint64)  # all in the first bucket
    steps = np.arange(1, 5001, dtype=np.uint32)
    assert len(merge.sort_tail(keys, steps)[0]) == 0
    got_keys, got_steps = runs_module.sorted_tail(keys, steps)
    assert np.array_equal(got_keys, keys[::-1]) and np.array_equal(got_steps, steps[::-1])
