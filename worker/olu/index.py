"""Compact indexes of which records the model applied (and when) and which ids were deleted.

The applied-record index maps a record to the step(s) u at which it was applied; passive OLU needs
nothing else per record (olu-spec 6.2). To stay within 16 bytes per applied record we keep

- a 64-bit BLAKE2b key of the record id instead of the id (8 bytes; raw ids never reach snapshots),
- the step as uint32 (4 bytes),

in key-sorted arrays, plus a small unsorted tail of recent inserts that is merged in when full.
Lookups are a binary search plus a scan of the tail.

Hash collisions (about n^2 / 2^65: 3e-8 at a million records) can only err towards more noise,
never less (invariant 7): a key that matches several records returns all their steps, and the
deletion's shift covers every one of them. A colliding *insert* is never dropped: a key already
present is applied again. Only an insert whose key matches a *deleted* id is skipped, and the
caller counts that skip.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .errors import InvalidRecordId

MAX_ID_BYTES = 1024
_MIN_TAIL = 1 << 14


def record_key(record_id: str) -> int:
    """Stable 64-bit key of a record id (never 0, which marks a free slot).

    >>> record_key("r-42") == record_key("r-42") != record_key("r-43")
    True
    """
    if not isinstance(record_id, str) or not record_id:
        raise InvalidRecordId(f"record id must be a non-empty string, got {type(record_id).__name__}"
                              f"{' (empty)' if record_id == '' else ''}")
    raw = record_id.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_ID_BYTES:
        raise InvalidRecordId(f"record id is {len(raw)} bytes, more than {MAX_ID_BYTES}")
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") or 1


class AppliedIndex:
    """key -> applied steps, about 12 bytes per live record.

    >>> idx = AppliedIndex()
    >>> idx.add(7, 1); idx.add(9, 2); idx.add(7, 3)
    >>> idx.pop(7), idx.pop(7), len(idx)
    ([1, 3], [], 1)
    """

    def __init__(self):
        self.keys = np.zeros(0, np.uint64)
        self.steps = np.zeros(0, np.uint32)  # 0 marks an entry removed since the last merge
        self._removed = 0
        self._tail_keys = np.zeros(_MIN_TAIL, np.uint64)
        self._tail_steps = np.zeros(_MIN_TAIL, np.uint32)
        self._tail_len = 0

    def __len__(self) -> int:
        return len(self.keys) - self._removed + self._tail_len

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.steps.nbytes + self._tail_keys.nbytes + self._tail_steps.nbytes

    def add(self, key: int, step: int) -> None:
        if not 0 < step < 2**32:
            raise OverflowError(f"step {step} does not fit the index (restart the epoch)")
        if self._tail_len == len(self._tail_keys):
            self.merge()
        self._tail_keys[self._tail_len] = key
        self._tail_steps[self._tail_len] = step
        self._tail_len += 1

    def tail_buffers(self):
        """(keys, steps, length) of the tail, for a compiled kernel that appends in place."""
        return self._tail_keys, self._tail_steps, self._tail_len

    def set_tail_len(self, length: int) -> None:
        self._tail_len = length

    def pop(self, key: int) -> list[int]:
        """Remove and return every step applied under ``key`` (ascending)."""
        found: list[int] = []
        k = np.uint64(key)
        lo, hi = np.searchsorted(self.keys, k, "left"), np.searchsorted(self.keys, k, "right")
        for pos in range(lo, hi):
            if self.steps[pos]:
                found.append(int(self.steps[pos]))
                self.steps[pos] = 0
                self._removed += 1
        n = self._tail_len
        hits = np.flatnonzero(self._tail_keys[:n] == k)
        if len(hits):
            found.extend(int(s) for s in self._tail_steps[hits])
            keep = np.ones(n, bool)
            keep[hits] = False
            m = n - len(hits)
            self._tail_keys[:m] = self._tail_keys[:n][keep]
            self._tail_steps[:m] = self._tail_steps[:n][keep]
            self._tail_len = m
        return sorted(found)

    def merge(self) -> None:
        """Fold the tail into the sorted arrays, dropping removed entries; grow the tail with n."""
        n = self._tail_len
        live = self.steps != 0
        keys, steps = self.keys[live], self.steps[live]
        if n:
            order = np.lexsort((self._tail_steps[:n], self._tail_keys[:n]))
            tk, ts = self._tail_keys[:n][order], self._tail_steps[:n][order]
            at = np.searchsorted(keys, tk, "right")
            keys, steps = np.insert(keys, at, tk), np.insert(steps, at, ts)
        self.keys, self.steps, self._removed, self._tail_len = keys, steps, 0, 0
        # A tail of ~n/8 keeps merges amortised O(1) per insert and adds ~1.5 bytes per record.
        size = max(_MIN_TAIL, len(keys) // 8)
        if size > len(self._tail_keys):
            self._tail_keys = np.zeros(size, np.uint64)
            self._tail_steps = np.zeros(size, np.uint32)

    def clear(self) -> None:
        self.__init__()

    def to_arrays(self) -> dict[str, np.ndarray]:
        self.merge()
        return {"applied_keys": self.keys.copy(), "applied_steps": self.steps.copy()}

    @classmethod
    def from_arrays(cls, keys: np.ndarray, steps: np.ndarray) -> "AppliedIndex":
        keys, steps = np.asarray(keys, np.uint64), np.asarray(steps, np.uint32)
        if keys.shape != steps.shape or keys.ndim != 1:
            raise ValueError("applied index arrays must be 1-D and of equal length")
        if len(keys) > 1 and not np.all(keys[1:] >= keys[:-1]):
            raise ValueError("applied index keys are not sorted")
        if not steps.all():
            raise ValueError("applied index holds a zero step")
        idx = cls()
        idx.keys, idx.steps = keys.copy(), steps.copy()
        return idx


class KeySet:
    """A sorted set of 64-bit keys (the tombstones of deleted record ids).

    >>> s = KeySet()
    >>> s.add(5), s.add(3), s.add(5)
    (True, True, False)
    >>> 3 in s, 4 in s, len(s)
    (True, False, 2)
    """

    def __init__(self, keys: np.ndarray | None = None):
        self.keys = np.zeros(0, np.uint64) if keys is None else np.asarray(keys, np.uint64).copy()
        if len(self.keys) > 1 and not np.all(self.keys[1:] > self.keys[:-1]):
            raise ValueError("tombstone keys are not strictly sorted")

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, key: int) -> bool:
        k = np.uint64(key)
        pos = np.searchsorted(self.keys, k)
        return bool(pos < len(self.keys) and self.keys[pos] == k)

    def add(self, key: int) -> bool:
        """Insert; False if it was already there."""
        k = np.uint64(key)
        pos = np.searchsorted(self.keys, k)
        if pos < len(self.keys) and self.keys[pos] == k:
            return False
        self.keys = np.insert(self.keys, pos, k)
        return True
