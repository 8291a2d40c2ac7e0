"""A per-key contribution bound: a model learns at most ``limit`` records of each partitioning key.

A deletion request that names all of a subject's records shifts the model by the sum of their
shifts, so under the per-request unit its noise grows with the subject's activity inside the model
and a heavy subject's requests never fade (docs/accounting.md 13). Bounding what one key (the data
subject: the Kafka key) may contribute bounds that sum by ``limit`` records' worth, the standard
tool of user-level differential privacy.

Admission is by ARRIVAL: a key's first ``limit`` records to arrive in the model's lifetime are
learned, every later one is consumed and not learned, and a deleted record still counts as arrived.
So the admitted set is a function of the keys and the order of the stream only (public, like the
request times and slot counts the units already make public), never of which records were deleted:
the reference run of a request (its records masked in place) admits exactly the same rows as the
real run. Counting records *held* instead would let the reference run admit a record the real run
refused once one of the key's records was deleted, and the proof would not hold.

Keys are 64-bit hashes (``record_key`` of the key's text, or BLAKE2b-64 of the Kafka key's bytes:
the same value for a UTF-8 key). A count stops at ``limit``, so the state is at most a key and a
count per distinct key of the lifetime: a sorted base (two arrays, searched for a batch at once)
and a small dict of recent keys merged into it when it fills.

>>> cap = ContributionCap(2)
>>> cap.admit(np.array([7, 7, 9, 7, 9, 9], np.uint64)).tolist()
[True, True, True, False, True, False]
>>> cap.admit(np.array([9, 4], np.uint64)).tolist(), cap.refused, cap.keys_at_limit
([False, True], 3, 2)
>>> again = ContributionCap.load(2, *cap.export())
>>> again.admit(np.array([7, 4, 4], np.uint64)).tolist()
[False, True, False]
"""

from __future__ import annotations

import numpy as np

from .record_keys import record_key

__all__ = ["ContributionCap", "RECENT_KEYS", "subject_keys"]

RECENT_KEYS = 1 << 14  # keys counted in the dict before it is merged into the sorted base


class ContributionCap:
    """Admission of rows by key: at most ``limit`` rows of one key over the model's lifetime."""

    def __init__(self, limit: int, *, recent_keys: int = RECENT_KEYS):
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
            raise ValueError(f"max_records_per_key must be a whole number >= 1, got {limit!r}")
        self.limit = int(limit)
        self.recent_keys = recent_keys
        self._keys = np.zeros(0, np.uint64)  # sorted, disjoint from _recent
        self._counts = np.zeros(0, np.uint32)
        self._recent: dict[int, int] = {}
        self.refused = 0  # rows not learned because their key was at the limit

    @property
    def keys_at_limit(self) -> int:
        return int(np.count_nonzero(self._counts >= self.limit)) + sum(
            c >= self.limit for c in self._recent.values())

    def admit(self, keys: np.ndarray) -> np.ndarray:
        """Count the rows of ``keys`` (stream order) as arrived; True for each one learned."""
        admitted, commit = self.plan(keys)
        commit()
        return admitted

    def plan(self, keys: np.ndarray) -> tuple[np.ndarray, callable]:
        """:meth:`admit` without counting yet: (admitted mask, a function that counts the rows). A
        caller whose work may still be called off (a one-pass
        batch, core/mixed.py) counts on success."""
        keys = np.asarray(keys, np.uint64)
        if len(keys) == 0:
            return np.zeros(0, np.bool_), lambda: None
        unique, inverse, per_key = np.unique(keys, return_inverse=True, return_counts=True)
        before, in_base, where = self._lookup(unique)
        order = np.argsort(inverse, kind="stable")  # the rows of each key together, in stream order
        # how many rows of the same key come before, in this batch
        rank = np.empty(len(keys), np.int64)
        rank[order] = np.arange(len(keys)) - np.repeat(np.cumsum(per_key) - per_key, per_key)
        admitted = before[inverse] + rank < self.limit
        after = np.minimum(before + per_key, self.limit)
        refused = int(len(keys) - np.count_nonzero(admitted))

        def commit() -> None:
            self._counts[where[in_base]] = after[in_base]
            self._recent.update(zip(unique[~in_base].tolist(), after[~in_base].tolist()))
            self.refused += refused
            if len(self._recent) >= self.recent_keys:
                self._merge()

        return admitted, commit

    def _lookup(self, unique: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(count so far, held in the base?, position in the
        base) of each of the sorted ``unique``."""
        where = np.searchsorted(self._keys, unique)
        in_base = where < len(self._keys)
        in_base[in_base] = self._keys[where[in_base]] == unique[in_base]
        before = np.zeros(len(unique), np.int64)
        before[in_base] = self._counts[where[in_base]]
        if self._recent:
            rest = np.flatnonzero(~in_base)
            get = self._recent.get
            before[rest] = [get(k, 0) for k in unique[rest].tolist()]
        return before, in_base, where

    def _merge(self) -> None:
        self._keys, self._counts = self.export()
        self._recent = {}

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys sorted, counts): every key that arrived and its count (at most the limit)."""
        if not self._recent:
            return self._keys.copy(), self._counts.copy()
        recent = np.fromiter(self._recent, np.uint64, len(self._recent))
        counts = np.fromiter(self._recent.values(), np.uint32, len(self._recent))
        keys = np.concatenate([self._keys, recent])
        order = np.argsort(keys, kind="stable")
        return keys[order], np.concatenate([self._counts, counts])[order]

    @classmethod
    def load(cls, limit: int, keys, counts, refused: int = 0) -> ContributionCap:
        """The cap of :meth:`export` (and the ``refused`` count,
        stored with the model's counters)."""
        cap = cls(limit)
        keys, counts = np.asarray(keys, np.uint64), np.asarray(counts, np.uint32)
        if keys.shape != counts.shape or keys.ndim != 1:
            raise ValueError(f"key cap arrays have shapes {keys.shape} and {counts.shape}")
        if len(keys) > 1 and not np.all(keys[1:] > keys[:-1]):
            raise ValueError("key cap keys are not strictly sorted")
        if len(counts) and (counts.min() < 1 or counts.max() > cap.limit):
            raise ValueError(f"key cap counts outside [1, {cap.limit}]")
        cap._keys, cap._counts, cap.refused = keys.copy(), counts.copy(), int(refused)
        return cap


def subject_keys(subjects, keys: np.ndarray) -> np.ndarray:
    """The 64-bit key of each row's subject: ``subjects`` as hashes (uint64), or as strings (hashed
    as record ids are), or None when each record is its own subject (the key is its id: ``keys``).

    >>> subject_keys(["user-7"], np.zeros(1, np.uint64)).tolist() == [record_key("user-7")]
    True
    """
    if subjects is None:
        return np.asarray(keys, np.uint64)
    if isinstance(subjects, np.ndarray) and subjects.dtype == np.uint64:
        return subjects
    return np.array([record_key(s) if isinstance(s, str) else int(s) for s in subjects], np.uint64)
