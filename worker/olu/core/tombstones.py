"""The tombstones: a compact set of the 64-bit keys of every deleted record id (index.py keys)."""

from __future__ import annotations

import numpy as np

from .runs import frozen, merge_kernels

RECENT_KEYS = 1 << 14  # tombstones added before they are merged into the base (128 KB): see KeySet
# the filter's bits a key at its fullest (~1.5% of absent keys pass it then)
FILTER_BITS_PER_KEY = 16
_MIN_FILTER_WORDS = 64


class KeySet:
    """A set of 64-bit keys (the tombstones of deleted record ids): a large sorted immutable
    ``base`` plus a small sorted ``recent`` array (the two never share a key).

    One key per deletion, for the model's whole life: in one sorted array each add rewrote all
    of it (0.9 ms at a million keys) and every full snapshot copied and stored all of it. Now an
    add rewrites at most ``RECENT_KEYS`` keys; when ``recent`` fills it is merged into a new base,
    which a snapshot exports as the shared group ``tombstones_base`` (stored once, like the
    applied-index runs); only ``recent`` goes into each snapshot. The layout depends only on the
    sequence of adds, so a replay rebuilds it exactly.

    Every insert the model learns is checked against the tombstones. A binary search in both
    arrays cost ~30 ns an insert at 5,000 tombstones and ~200 ns at a million (the base out of
    cache), more than the OGD step itself; so the key set also keeps ``filter``, a Bloom filter
    (two bits of one 64-bit word per key, at least ``FILTER_BITS_PER_KEY`` bits a key) that the
    learning kernel reads first: a key it rules out is certainly no tombstone, and the few it
    cannot rule out (~1.5% at its fullest) go to the binary search. It is derived from the keys
    (never stored), set by each add and rebuilt at twice the size when it fills (2 to 4 bytes a
    key).

    >>> s = KeySet(recent_keys=2)
    >>> s.add(5), s.add(3), s.add(5), s.add(9)
    (True, True, False, True)
    >>> 3 in s, 4 in s, len(s), s.base.tolist(), s.recent.tolist(), s.keys.tolist()
    (True, False, 3, [3, 5], [9], [3, 5, 9])
    """

    def __init__(self, keys: np.ndarray | None = None, *, recent_keys: int | None = None):
        self.recent_keys = recent_keys or RECENT_KEYS
        self._recent = np.zeros(self.recent_keys, np.uint64)  # ``recent`` is its first _n keys
        self._n = 0
        self._absent: set[int] = set()  # keys known not to be here (see prefetch)
        keys = np.zeros(0, np.uint64) if keys is None else np.asarray(keys, np.uint64).copy()
        if len(keys) > 1 and not np.all(keys[1:] > keys[:-1]):
            raise ValueError("tombstone keys are not strictly sorted")
        # one sorted array (state formats 1 and 2, tests): the base if it is too big to be recent
        big = len(keys) >= self.recent_keys
        empty = np.zeros(0, np.uint64)
        self._set(keys if big else empty, empty if big else keys)

    def _set(self, base: np.ndarray, recent: np.ndarray, words: np.ndarray | None = None) -> None:
        """Replace the keys (sorted, disjoint ``base`` and ``recent``); the filter is rebuilt from
        them unless its ``words`` (a filter that holds every one of them) are given."""
        self._base = frozen(base)
        self._absent = set()
        if len(recent) >= len(self._recent):  # an older state's array, longer than our buffer
            self._recent = np.zeros(len(recent) + 1, np.uint64)
        self._recent[:len(recent)] = recent
        self._n = len(recent)
        if words is None:
            self._rebuild_filter()
        else:
            self.filter = words

    def _rebuild_filter(self) -> None:
        """A filter of every key: the fewest words (a power of two) that give each key more than
        ``FILTER_BITS_PER_KEY`` bits, so 2 to 4 bytes a key (each rebuild at least doubles it)."""
        words = _MIN_FILTER_WORDS
        while words * 64 <= len(self) * FILTER_BITS_PER_KEY:
            words *= 2
        self.filter = np.zeros(words, np.uint64)
        for part in (self._base, self.recent):
            merge_kernels().filter_add(self.filter, part)

    @property
    def base(self) -> np.ndarray:
        """The frozen sorted keys merged so far (shared with snapshots: never changed in place)."""
        return self._base

    @property
    def recent(self) -> np.ndarray:
        """The sorted keys added since the last merge (a view: copy it to keep it)."""
        return self._recent[:self._n]

    @property
    def keys(self) -> np.ndarray:
        """All keys, sorted (a new array)."""
        return np.sort(np.concatenate([self.base, self.recent]))

    def __len__(self) -> int:
        return len(self.base) + len(self.recent)

    def __contains__(self, key: int) -> bool:
        if self._absent and int(key) in self._absent:
            return False
        return merge_kernels().keyset_find(self._base, self._recent, self._n, np.uint64(key)) != 0

    def holds_each(self, keys: np.ndarray) -> list[bool]:
        """``[k in self for k in keys]`` (uint64) in one compiled call (a poll batch's deletes)."""
        found = np.empty(len(keys), np.int64)
        merge_kernels().keyset_find_many(self._base, self._recent, self._n, keys, found)
        return (found != 0).tolist()

    def prefetch(self, keys: np.ndarray) -> None:
        """Look ``keys`` (uint64) up in one compiled call (a poll batch's deletes): the absent ones
        are answered from a set until they are added (adds of other keys leave the answers true)."""
        found = np.empty(len(keys), np.int64)
        merge_kernels().keyset_find_many(self.base, self._recent, self._n, keys, found)
        self._absent = {k for k, f in zip(keys.tolist(), found.tolist()) if f == 0}

    def add(self, key: int) -> bool:
        """Insert; False if it was already there."""
        self._absent.discard(int(key))
        # in place, no new array; the key's filter bits too
        n = merge_kernels().keyset_insert(self._base, self._recent, self._n, np.uint64(key),
                                          self.filter)
        if n < 0:
            return False
        self._n = n
        self._after_adds()
        return True

    def add_many(self, keys: np.ndarray) -> None:
        """:meth:`add` of each of ``keys`` (uint64) in order, the same layout, in one compiled call
        between the merges and filter rebuilds (a poll batch's deletes)."""
        keys = np.ascontiguousarray(keys, np.uint64)
        if self._absent:
            self._absent.difference_update(keys.tolist())
        j = 0
        while j < len(keys):
            # the length at which add() would merge or rebuild the filter: stop there, do it, go on
            stop_at = min(self.recent_keys,
                          len(self.filter) * 64 // FILTER_BITS_PER_KEY + 1 - len(self._base))
            before = j
            self._n, j = merge_kernels().keyset_insert_many(
                self._base, self._recent, self._n, keys, j, self.filter,
                stop_at)
            if j == before:  # never expected: the one-key path cannot stall
                self.add(int(keys[j]))
                j += 1
            self._after_adds()

    def _after_adds(self) -> None:
        """What follows an add: the merge of a full ``recent`` into the
        base, a filter that grew too full rebuilt."""
        if self._n >= self.recent_keys:
            # one pass (~4 ms at a million keys), not a sort of
            # both (~20 ms); same keys, same filter
            recent = self.recent
            self._base = frozen(np.insert(self._base, np.searchsorted(self._base, recent), recent))
            self._n = 0
            self._absent = set()
        if len(self) * FILTER_BITS_PER_KEY > len(self.filter) * 64:
            self._rebuild_filter()

    def export(self) -> tuple[np.ndarray, dict[str, dict[str, np.ndarray]]]:
        """(a copy of ``recent``, shared group ``tombstones_base`` if the base is not empty)."""
        shared = {"tombstones_base": {"keys": self.base}} if len(self.base) else {}
        return self.recent.copy(), shared

    def copy(self) -> KeySet:
        """What ``KeySet.load(*self.export())`` gives, the same keys in the same layout, without
        rebuilding the filter from every key: the frozen base is shared and the filter copied (a
        rotation's new model takes the tombstones every lifetime / 2 events; a rebuild cost 5 ms
        at a million keys and 33 ms at four million, a copy of the filter 0.1 and 0.7 ms)."""
        twin = type(self)()
        twin._set(self._base, self.recent, words=self.filter.copy())
        return twin

    @classmethod
    def load(cls, recent, shared: dict | None = None) -> KeySet:
        """Inverse of :meth:`export` (``recent`` alone: the one sorted array of older states).
        The base is adopted, not copied; ValueError if the two are inconsistent."""
        group = (shared or {}).get("tombstones_base")
        if group is None:
            return cls(recent)
        base, recent = np.asarray(group["keys"], np.uint64), np.asarray(recent, np.uint64)
        for name, arr in (("base", base), ("recent", recent)):
            if arr.ndim != 1 or (len(arr) > 1 and not np.all(arr[1:] > arr[:-1])):
                raise ValueError(f"tombstone {name} keys are not 1-D and strictly sorted")
        if len(recent) and len(base):
            # a binary search per recent key (np.isin would sort the base)
            pos = np.minimum(np.searchsorted(base, recent), len(base) - 1)
            if (base[pos] == recent).any():
                raise ValueError("a tombstone key is both in the base and recent")
        keyset = cls()
        keyset._set(base, recent.copy())
        return keyset
