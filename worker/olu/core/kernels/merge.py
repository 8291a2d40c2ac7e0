"""Compiled sort and merge of the key-sorted runs of the applied-record index
(:mod:`worker.olu.core.index`)."""

from __future__ import annotations

import numpy as np

from ....compiled.jit import jit
from ....compiled.sorted_keys import filter_shift, filter_slot, lower_bound


@jit
def merge_runs(ak, as_, adead, bk, bs, bdead):
    """Merge two key-sorted runs of the applied index, skipping their dead positions (sorted).

    Among equal keys the entries of ``a`` come first, each run's own order kept; the numpy
    reference is ``runs.merge_runs_reference``. Returns (keys, steps). Between dead positions the
    choice is a select, not a branch (random keys mispredict half the branches): ~2x faster.
    """
    n = ak.shape[0] - adead.shape[0] + bk.shape[0] - bdead.shape[0]
    keys = np.empty(n, np.uint64)
    steps = np.empty(n, np.uint32)
    i = j = da = db = out = 0
    na, nb, nda, ndb = ak.shape[0], bk.shape[0], adead.shape[0], bdead.shape[0]
    while i < na and j < nb:
        lim_a = adead[da] if da < nda else na  # merge up to the next dead position of either run
        lim_b = bdead[db] if db < ndb else nb
        while i < lim_a and j < lim_b:
            ka, kb = ak[i], bk[j]
            take_b = kb < ka  # among equal keys a first
            keys[out] = kb if take_b else ka
            steps[out] = bs[j] if take_b else as_[i]
            j += np.int64(take_b)
            i += np.int64(not take_b)
            out += 1
        if i == lim_a and i < na:
            i += 1
            da += 1
        if j == lim_b and j < nb:
            j += 1
            db += 1
    while i < na:
        if da < nda and adead[da] == i:
            da += 1
        else:
            keys[out] = ak[i]
            steps[out] = as_[i]
            out += 1
        i += 1
    while j < nb:
        if db < ndb and bdead[db] == j:
            db += 1
        else:
            keys[out] = bk[j]
            steps[out] = bs[j]
            out += 1
        j += 1
    return keys, steps


_BUCKET_LIMIT = 64  # a fuller bucket (keys far from uniform): the caller sorts with numpy


@jit
def sort_tail(keys, steps):
    """``keys`` and ``steps`` ordered by (key, step), new arrays; two empty arrays when the keys
    are too clustered for this sort (the caller falls back to numpy).

    Record keys are BLAKE2b values, uniform over 64 bits: a scatter into about one bucket per
    entry by the top bits, then an insertion sort that moves each entry within its bucket only
    (~0.6 ms for a 65,536-entry tail against ~3 ms for ``np.argsort``; a bucket per four entries
    took ~1 ms: fewer, longer moves win over counts that stay in the L1 cache). The order is the
    same total order as the lexsort, so the run is the same.
    """
    n = keys.shape[0]
    bits = 1
    while (1 << bits) < n:  # about one entry a bucket
        bits += 1
    shift = np.uint64(64 - bits)
    starts = np.zeros((1 << bits) + 1, np.int32)
    for i in range(n):
        starts[(keys[i] >> shift) + 1] += 1
    for b in range(1 << bits):
        if starts[b + 1] > _BUCKET_LIMIT:
            return np.empty(0, np.uint64), np.empty(0, np.uint32)
        starts[b + 1] += starts[b]
    out_keys = np.empty(n, np.uint64)
    out_steps = np.empty(n, np.uint32)
    for i in range(n):
        b = keys[i] >> shift
        p = starts[b]
        starts[b] = p + 1
        out_keys[p] = keys[i]
        out_steps[p] = steps[i]
    for i in range(1, n):
        k, s = out_keys[i], out_steps[i]
        j = i
        while j > 0 and (out_keys[j - 1] > k or (out_keys[j - 1] == k and out_steps[j - 1] > s)):
            out_keys[j] = out_keys[j - 1]
            out_steps[j] = out_steps[j - 1]
            j -= 1
        out_keys[j] = k
        out_steps[j] = s
    return out_keys, out_steps


@jit
def _slot(key, mask):
    """Where a key's chain starts in the tail's slot table (Fibonacci hashing: test keys are small
    integers, record keys are random; both spread)."""
    return np.int64(((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask)


@jit
def _index_tail(tail_keys, tail_len, slots, indexed):
    """Add the tail's entries from ``indexed`` on (appended since the last lookup) to ``slots``."""
    mask = np.uint64(slots.shape[0] - 1)
    for i in range(indexed, tail_len):
        key = tail_keys[i]
        if key == 0:
            continue
        h = _slot(key, mask)
        while slots[h] != 0:
            h = (h + 1) & np.int64(mask)
        slots[h] = i + 1


@jit
def _find_in_runs(runs, k, out_run, out_pos):
    """(hits, first run, first position) of ``k`` in the sorted runs; hits beyond the buffers are
    counted, not written."""
    m, first_run, first_pos = 0, -1, -1
    for r in range(len(runs)):
        keys = runs[r]
        n = keys.shape[0]
        lo = lower_bound(keys, n, k)
        while lo < n and keys[lo] == k:
            if m == 0:
                first_run, first_pos = r, lo
            if m < out_run.shape[0]:
                out_run[m] = r
                out_pos[m] = lo
            m += 1
            lo += 1
    return m, first_run, first_pos


@jit
def _find_in_tail(k, tail_keys, slots, out_tail):
    """(hits, first position) of ``k`` in the tail through its slot table; positions go to
    ``out_tail`` in ascending order (beyond the buffer: counted, not written)."""
    mask = np.uint64(slots.shape[0] - 1)
    count, first_tail = 0, -1
    h = _slot(k, mask)
    while slots[h] != 0:
        pos = slots[h] - 1
        if tail_keys[pos] == k:
            if count == 0 or pos < first_tail:
                first_tail = pos
            if count < out_tail.shape[0]:
                out_tail[count] = pos
            count += 1
        h = (h + 1) & np.int64(mask)
    if count > 1:  # probing order is not position order
        top = min(count, out_tail.shape[0])
        out_tail[:top].sort()
    return count, first_tail


@jit(nogil=False)
def find_key(runs, k, tail_keys, tail_len, slots, indexed, out_run, out_pos, out_tail):
    """Every position of key ``k`` in the sorted ``runs`` (a typed list of key arrays) and in the
    unsorted tail ``tail_keys[:tail_len]``, in one call: a deletion searched each run with its own
    call (~2 us of dispatch apiece, eight runs and more) and scanned the whole tail (up to 512 KB,
    mostly out of cache by the time a delete comes).

    The tail's positions come from ``slots``, an open-addressing table (position + 1, 0 empty;
    linear probing, at most half full) over its entries: those from ``indexed`` on (appended since
    the last call) are added first. A removed entry keeps its slot: its key is 0 then (a hole),
    which never matches. Hits go to ``out_run``/``out_pos`` in run order, the tail's positions to
    ``out_tail``; returns (hits, tail hits, first run, first position, first tail position; -1
    for none), so the common single hit needs no read of the buffers. More hits than the buffers
    hold are counted but not written (the caller retries with larger buffers)."""
    m, first_run, first_pos = _find_in_runs(runs, k, out_run, out_pos)
    _index_tail(tail_keys, tail_len, slots, indexed)
    count, first_tail = _find_in_tail(k, tail_keys, slots, out_tail)
    return m, count, first_run, first_pos, first_tail


@jit(nogil=False)
def find_keys(runs, ks, out):
    """The runs' part of :func:`find_key` for each key of ``ks`` in one call (a poll batch's
    deletes): row j of ``out`` gets (hits, first run, first position) of ``ks[j]``."""
    none = np.empty(0, np.int64)
    for j in range(ks.shape[0]):
        out[j, 0], out[j, 1], out[j, 2] = _find_in_runs(runs, ks[j], none, none)


@jit(nogil=False)
def find_each(runs, ks, tail_keys, tail_len, slots, indexed, out):
    """:func:`find_key` for each key of ``ks`` in one call (a poll batch's deletes, popped
    together): row j of ``out`` gets (hits, first run, first position, tail hits, first tail
    position) of ``ks[j]``."""
    none = np.empty(0, np.int64)
    _index_tail(tail_keys, tail_len, slots, indexed)
    for j in range(ks.shape[0]):
        out[j, 0], out[j, 1], out[j, 2] = _find_in_runs(runs, ks[j], none, none)
        out[j, 3], out[j, 4] = _find_in_tail(ks[j], tail_keys, slots, none)


@jit(nogil=False)
def find_tail(k, tail_keys, tail_len, slots, indexed, out_tail):
    """The tail's part of :func:`find_key`: (hits, first position); positions go to ``out_tail``."""
    _index_tail(tail_keys, tail_len, slots, indexed)
    return _find_in_tail(k, tail_keys, slots, out_tail)


@jit(nogil=False)
def keyset_find(base, recent, n, k):
    """Where key ``k`` is in a tombstone set: 1 in the frozen
    ``base``, 2 in ``recent[:n]``, else 0."""
    lo = lower_bound(base, base.shape[0], k)
    if lo < base.shape[0] and base[lo] == k:
        return 1
    lo = lower_bound(recent, n, k)
    if lo < n and recent[lo] == k:
        return 2
    return 0


@jit(nogil=False)
def keyset_find_many(base, recent, n, ks, out):
    """:func:`keyset_find` for each key of ``ks`` into ``out`` (a poll batch's deletes)."""
    for j in range(ks.shape[0]):
        out[j] = keyset_find(base, recent, n, ks[j])


@jit(nogil=False)
def keyset_insert(base, recent, n, k, words):
    """Insert ``k`` into the sorted ``recent[:n]`` in place (room for one more is the caller's) and
    into the filter ``words``; the new length, or -1 if ``k``
    is in ``base`` or ``recent`` already."""
    if keyset_find(base, recent, n, k) != 0:
        return -1
    pos = n
    while pos > 0 and recent[pos - 1] > k:
        recent[pos] = recent[pos - 1]
        pos -= 1
    recent[pos] = k
    word, mask = filter_slot(k, filter_shift(words))
    words[word] |= mask
    return n + 1


@jit(nogil=False)
def keyset_insert_many(base, recent, n, ks, start, words, stop_at):
    """:func:`keyset_insert` of ``ks[start], ks[start + 1], ...`` in order, until the set's
    ``recent`` length reaches ``stop_at`` (where the caller merges or rebuilds the filter) or the
    keys run out; (the new length, the next key's position)."""
    j = start
    while j < ks.shape[0] and n < stop_at:
        m = keyset_insert(base, recent, n, ks[j], words)
        if m >= 0:
            n = m
        j += 1
    return n, j


# The tombstone filter (``KeySet.filter``, worker/compiled/sorted_keys.py): a blocked Bloom filter,
# two bits of one 64-bit word per key, so that the learning kernel binary-searches the tombstones
# only for the few inserts the filter cannot rule out.
@jit(nogil=False)
def filter_add(words, keys):
    """Set the bits of every key of ``keys`` in the filter ``words``."""
    shift = filter_shift(words)
    for j in range(keys.shape[0]):
        word, mask = filter_slot(keys[j], shift)
        words[word] |= mask
