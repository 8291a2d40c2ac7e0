"""Compact indexes of which records the model applied (and when) and which ids were deleted.

The applied-record index maps a record to the step(s) u at which it was applied; passive OLU needs
nothing else per record (docs/guarantee.md 1.4). To stay within 16 bytes per applied record we keep

- a 64-bit BLAKE2b key of the record id instead of the id (8 bytes; raw ids never reach snapshots),
- the step as uint32 (4 bytes).

Layout: a log-structured merge of immutable sorted **runs** plus a small unsorted **tail** of
recent inserts. When the tail fills (65,536 entries) it is sorted into a new run, and runs of
similar size are merged four at a time (O(log n) runs, each entry rewritten log_4(n) times),
never into a run above 2,097,152 entries. A removal marks the entry's position dead in its run
(runs never change after they are built); a merge drops dead entries, and a run that is mostly
dead is rewritten on its own. The runs, and how they are merged, are runs.py's.

**Paced merges.** When the tail fills during learning, a merge of four runs is not done on the
spot (a million entries held the stream ~20 ms, 100+ ms on a busy machine). It is *started*, and
done a key-range slice at a time as the next tail fills (``advance_merge``, called by the
learning loop), then adopted when that tail is full. The four runs stay searchable until then.
The merged run keeps every entry of the four, dead ones included (their dead marks carried
over), so its content depends only on the four runs, never on how far the merge had got when a
deletion came: a replay adopts the very same run. A snapshot taken meanwhile records which runs
are being merged (``applied_merging``), and a restore starts that merge again. ``merge()`` called
directly still does everything at once.

Why runs rather than one sorted array: an insert into one big sorted array rewrites it (tens of
milliseconds at a million records), and a snapshot of it copies and rewrites all of it. Runs are
immutable, so a snapshot refers to them without copying, and the state store writes each run
once and shares it between snapshots (``export`` marks them ``shared``); only the tail, the dead
positions and the runs built since the last snapshot are new.

Lookups are a binary search per run plus a look into a hash table of the tail's positions
(filled as the tail fills), all in one compiled call: a deletion used to scan the whole tail. A
pop from the tail clears the entry's key to 0 (a *hole*, never a record key) instead of moving
the entries after it (a 65,536-entry tail made that a ~40 us memmove per deletion); holes are
exported as they are, so a restored index has the very same layout, and dropped when the tail
is sorted into a run.

Hash collisions (about n^2 / 2^65: 3e-8 at a million records) can only err towards more noise,
never less (invariant 7): a key that matches several records returns all their steps, and the
deletion's shift covers every one of them. A colliding *insert* is never dropped: a key already
present is applied again. Only an insert whose key matches a *deleted* id is skipped, and the
caller counts that skip.
"""

from __future__ import annotations

import re

import numpy as np

from .runs import (
    PacedMerge,
    Run,
    checked_run,
    merge_all,
    merge_kernels,
    merge_pair,
    sorted_tail,
    typed_list,
)

TAIL_SIZE = 1 << 16  # entries buffered before they become a run (768 KB)
MAX_RUN = 1 << 21  # runs stop growing by merges here (24 MB; the largest merge stalls ~40 ms)
# Runs merge MERGE_FANIN at a time once that many of one size tier exist. Each merge's output is a
# new run a snapshot writes in full, so the fan-in sets the write amplification: an entry is
# rewritten log_F(n / TAIL_SIZE) times (F = 2, a binary counter, wrote ~2x the bytes of F = 4).
MERGE_FANIN = 4
_RUN_GROUP = re.compile(r"applied_run(\d+)")


def step_overflow(step: int) -> OverflowError:
    """The error of a step that does not fit the index's uint32 steps (the epoch must restart)."""
    return OverflowError(f"step {step} does not fit the index (restart the epoch)")


class AppliedIndex:
    """key -> applied steps, about 12 bytes per live record.

    >>> idx = AppliedIndex()
    >>> idx.add(7, 1); idx.add(9, 2); idx.add(7, 3)
    >>> idx.pop(7), idx.pop(7), len(idx)
    ([1, 3], [], 1)
    >>> idx.merge(); len(idx.runs), idx.pop(9), len(idx)
    (1, [2], 0)
    """

    def __init__(self, tail_size: int | None = None, max_run: int | None = None):
        self.runs: list[Run] = []
        self._tail_keys = np.zeros(tail_size or TAIL_SIZE, np.uint64)
        self._tail_steps = np.zeros(tail_size or TAIL_SIZE, np.uint32)
        self._tail_len = 0
        # tail entries removed by a pop: key 0, dropped when the tail becomes a run
        self._tail_holes = 0
        self._max_run = max_run or MAX_RUN
        self._undo: list[tuple] = []  # what the pops since begin_pops removed (see undo_pop)
        self._merging: PacedMerge | None = None  # runs being merged a slice at a time
        self._lookup_runs: tuple | None = None  # the runs ``_lookup_keys`` was built from
        self._lookup_keys = None
        self._hit_buffers = (np.empty(8, np.int64), np.empty(8, np.int64), np.empty(8, np.int64))
        # The tail's first ``_slotted`` positions by key hash (``kernels.merge.find_key``): twice
        # the tail's length, a power of two, so at most half full (512 KB for the default tail).
        self._tail_slots = np.zeros(1 << (2 * len(self._tail_keys) - 1).bit_length(), np.int32)
        self._slotted = 0
        self._prefetched: dict[int, list] = {}  # key -> its positions in the runs (see prefetch)

    def __len__(self) -> int:
        return sum(r.live for r in self.runs) + self._tail_len - self._tail_holes

    @property
    def nbytes(self) -> int:
        """Bytes of the runs and the tail with its slot table (a paced merge in progress also holds
        the merged copy of its four runs until it is adopted, as an
        immediate merge does for the length of the call)."""
        return (sum(r.keys.nbytes + r.steps.nbytes for r in self.runs)
                + self._tail_keys.nbytes + self._tail_steps.nbytes + self._tail_slots.nbytes)

    def add(self, key: int, step: int) -> None:
        if not 0 < key < 2**64:
            raise ValueError(
                f"key {key} is not a record key (1 .. 2**64 - 1; 0 marks a removed tail entry)")
        if not 0 < step < 2**32:
            raise step_overflow(step)
        if self._tail_len == len(self._tail_keys):
            self.merge(paced=True)
        self._tail_keys[self._tail_len] = key
        self._tail_steps[self._tail_len] = step
        self._tail_len += 1
        self.advance_merge()

    def advance_merge(self) -> None:
        """Do the slices of a paced merge that are due by now: all of them by the time the tail
        is full (the share of the tail filled since the merge started)."""
        if self._merging is not None:
            self._merging.advance(self._tail_len / len(self._tail_keys))

    def tail_room(self) -> int:
        """Entries the tail takes before it must be merged (a pass
        that stays within it merges nothing)."""
        return len(self._tail_keys) - self._tail_len

    def tail_buffers(self):
        """(keys, steps, length) of the tail, for a compiled kernel that appends in place."""
        return self._tail_keys, self._tail_steps, self._tail_len

    def set_tail_len(self, length: int) -> None:
        self._tail_len = length

    def prefetch(self, keys: np.ndarray) -> None:
        """Look ``keys`` (uint64) up in the runs in one compiled call: the deletes of a poll batch.
        Until the runs change (a merge), :meth:`pop` and :meth:`holds` take a key's run positions
        from here, once, and look in the tail alone (a call with no typed list to type: the runs'
        list is most of a lookup's dispatch). The answers stay true meanwhile: entries added go
        to the tail, and a pop of another key marks only its own positions dead. Keys with more
        than one position in the runs are left out."""
        if not len(keys):
            return
        self._lookup_list()
        out = np.empty((len(keys), 3), np.int64)
        merge_kernels().find_keys(self._lookup_keys, keys, out)
        self._prefetched = {k: [(run, pos)] if m else [] for k,
                            (m, run, pos) in zip(keys.tolist(), out.tolist())
                            if m <= 1}

    def pop(self, key: int) -> list[int]:
        """Remove and return every step applied under ``key`` (ascending)."""
        k = np.uint64(key)
        return self._remove(k, *self._find(k))

    def _remove(self, k: np.uint64, hits: list[tuple[int, int]], in_tail: list[int]) -> list[int]:
        """:meth:`pop` of key ``k`` found at ``hits`` (run, position; dead ones included) and at the
        tail positions ``in_tail``."""
        found: list[int] = []
        marked: list[tuple[Run, int]] = []
        runs = self.runs
        for r, pos in hits:
            run = runs[r]
            if pos not in run.dead:
                found.append(int(run.steps[pos]))
                run.dead.add(pos)
                marked.append((run, pos))
        for pos in in_tail:
            # a hole, not a compaction: the tail's other entries stay where they are
            found.append(int(self._tail_steps[pos]))
            self._tail_keys[pos] = 0
        self._tail_holes += len(in_tail)
        self._undo.append((marked, k, in_tail))
        if len(found) > 1:
            found.sort()
        return found

    def pop_each(self, keys: list[int]) -> list[list[int]]:
        """:meth:`pop` of each of the distinct ``keys`` in order, each undoable like one, with the
        runs and the tail searched for all of them in one compiled call (a poll batch's deletes:
        a call each cost ~2 us of dispatch apiece). A key found
        more than once goes through pop()."""
        if not keys:
            return []
        self._lookup_list()
        found = np.empty((len(keys), 5), np.int64)
        merge_kernels().find_each(self._lookup_keys, np.array(keys, np.uint64), self._tail_keys,
                                  self._tail_len,
                                  self._tail_slots, self._slotted, found)
        self._slotted = self._tail_len
        if self._prefetched:  # answered here: pop() must not take these stale positions later
            for key in keys:
                self._prefetched.pop(key, None)
        popped = []
        for key, (m, r, pos, count, tail_pos) in zip(keys, found.tolist()):
            if m > 1 or count > 1 or not key:  # the positions beyond the first are not in ``found``
                popped.append(self.pop(key))
            else:
                popped.append(self._remove(np.uint64(key), [(r, pos)] if m else [], [tail_pos]
                                           if count else []))
        return popped

    def holds(self, key: int) -> bool:
        """Whether a live step is applied under ``key`` (read-only :meth:`pop`)."""
        hits, in_tail = self._find(np.uint64(key))
        return bool(in_tail) or any(pos not in self.runs[r].dead for r, pos in hits)

    def _find(self, k: np.uint64) -> tuple[list[tuple[int, int]], list[int]]:
        """([(run number, position)] of ``k`` in the runs, dead ones included; [tail positions]).

        One compiled call over every run and the tail; the runs' key arrays are handed to it as a
        typed list, rebuilt only when the runs change (once per filled tail)."""
        if not k:  # never a record key: 0 marks the tail's holes
            return [], []
        kernels = merge_kernels()
        hits = self._prefetched.pop(int(k), None) if self._prefetched else None
        if hits is not None:
            count, tail0 = kernels.find_tail(k, self._tail_keys, self._tail_len, self._tail_slots,
                                             self._slotted,
                                             self._hit_buffers[2])
            self._slotted = self._tail_len
            if count <= len(self._hit_buffers[2]):
                return hits, _positions(count, tail0, self._hit_buffers[2])
        self._lookup_list()
        while True:
            out_run, out_pos, out_tail = self._hit_buffers
            m, count, run0, pos0, tail0 = kernels.find_key(
                self._lookup_keys, k, self._tail_keys, self._tail_len,
               self._tail_slots, self._slotted, out_run, out_pos, out_tail)
            self._slotted = self._tail_len
            if m <= len(out_run) and count <= len(out_tail):
                break
            size = 2 * max(m, count)
            self._hit_buffers = (np.empty(size, np.int64), np.empty(size, np.int64),
                                 np.empty(size, np.int64))
        # a single hit (the common case) comes back as plain ints: no numpy indexing on this path
        hits = [] if m == 0 else [(run0, pos0)] if m == 1 else list(
            zip(out_run[:m].tolist(), out_pos[:m].tolist()))
        return hits, _positions(count, tail0, out_tail)

    def _lookup_list(self) -> None:
        """The runs' key arrays as a numba typed list for the lookup kernels, rebuilt only when
        the runs change (once per filled tail)."""
        runs = tuple(self.runs)
        if runs != self._lookup_runs:  # identity compare of the Run objects: ~0.3 us
            self._lookup_keys = typed_list([run.keys for run in runs])
            self._lookup_runs = runs

    def begin_pops(self) -> None:
        """Forget the undo records of earlier pops: the pops from here on may be undone together."""
        self._undo.clear()

    def undo_pop(self) -> None:
        """Put back what the latest :meth:`pop` not yet undone removed, exactly where it was (only
        pops may happen in between: undo them newest first)."""
        if not self._undo:
            return
        marked, k, in_tail = self._undo.pop()
        for run, pos in marked:
            run.dead.discard(pos)
        for pos in in_tail:  # the key back in its hole (its slot still points there)
            self._tail_keys[pos] = k
        self._tail_holes -= len(in_tail)

    def merge(self, paced: bool = False) -> None:
        """Sort the tail into a new run, then merge runs of similar size (see the module doc).

        ``paced`` (the tail filled while learning): first adopt the paced merge in progress, then
        start at most one new one instead of merging on the spot.
        """
        self._adopt_merge()
        keys, steps = self._tail_live()
        if len(keys):
            self.runs.append(Run(*sorted_tail(keys, steps)))
        self._empty_tail()
        runs, fanin = self.runs, MERGE_FANIN
        for i, run in enumerate(runs):  # deletions concentrated in one run: reclaim it alone
            if len(run.dead) * 2 > len(run):
                runs[i] = merge_pair(run, None)
        self.runs = runs = [r for r in runs if len(r)]
        if paced:
            start = self._mergeable(runs)
            if start is not None:
                self._merging = PacedMerge(start, runs[start:start + fanin])
            return
        while (len(runs) >= fanin and _same_tier(runs[-fanin:])
               and sum(r.live for r in runs[-fanin:]) <= self._max_run):
            group = runs[-fanin:]
            del runs[-fanin:]
            runs.append(merge_all(group))

    def _mergeable(self, runs: list[Run]) -> int | None:
        """Where the next paced merge starts: the first four neighbouring runs, oldest first, of
        one tier whose entries (dead ones included: they are kept) fit ``max_run``."""
        fanin = MERGE_FANIN
        for start in range(len(runs) - fanin + 1):
            group = runs[start:start + fanin]
            if _same_tier(group) and sum(len(r) for r in group) <= self._max_run:
                return start
        return None

    def _adopt_merge(self) -> None:
        """Finish the paced merge in progress and put its run in place of the four."""
        merging, self._merging = self._merging, None
        self._prefetched.clear()
        if merging is not None:
            merged = merging.finish()
            self.runs[
                merging.start:merging.start + len(merging.sources)] = [
                    merged] if len(merged) else []

    def clear(self) -> None:
        self.runs, self._merging = [], None
        self._empty_tail()

    def _tail_live(self) -> tuple[np.ndarray, np.ndarray]:
        """The tail's entries without its holes, in tail order (views when it has none)."""
        keys, steps = self._tail_keys[:self._tail_len], self._tail_steps[:self._tail_len]
        if self._tail_holes:
            live = keys != 0
            keys, steps = keys[live], steps[live]
        return keys, steps

    def _empty_tail(self) -> None:
        self._prefetched.clear()
        self._tail_len = self._tail_holes = 0
        self._tail_slots[:] = 0
        self._slotted = 0

    def live_steps(self) -> np.ndarray:
        """Every live entry's step, ascending (int64)."""
        parts = [np.delete(r.steps, r.dead_positions()) for r in self.runs]
        parts.append(self._tail_live()[1])
        return np.sort(np.concatenate(parts).astype(np.int64))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Every live entry in one canonical (key, step)-sorted view; the index is not changed."""
        tail_keys, tail_steps = self._tail_live()
        keys = [np.delete(r.keys, r.dead_positions()) for r in self.runs] + [tail_keys]
        steps = [np.delete(r.steps, r.dead_positions()) for r in self.runs] + [tail_steps]
        keys, steps = np.concatenate(keys), np.concatenate(steps)
        order = np.lexsort((steps, keys))
        return {"applied_keys": keys[order], "applied_steps": steps[order]}

    # ---------------------------------------------------------------- state
    def export(self) -> tuple[dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]:
        """(arrays, shared) for a snapshot, without copying the runs.

        ``shared`` holds each run's (keys, steps) as group ``applied_run{i}``: immutable, so a
        store may write each once and refer to it from later snapshots. ``arrays`` holds what
        changes: the tail and each run's dead positions (copies).
        """
        arrays = {"applied_tail_keys": self._tail_keys[:self._tail_len].copy(),
                  "applied_tail_steps": self._tail_steps[:self._tail_len].copy()}
        if self._merging is not None:  # (first run, number of runs) being merged
            arrays["applied_merging"] = np.array([self._merging.start, len(self._merging.sources)],
                                                 np.int64)
        shared = {}
        for i, run in enumerate(self.runs):
            arrays[f"applied_run{i}_dead"] = run.dead_positions()
            shared[f"applied_run{i}"] = {"keys": run.keys, "steps": run.steps}
        return arrays, shared

    @classmethod
    def load(cls, arrays: dict, shared: dict | None = None) -> AppliedIndex:
        """Inverse of :meth:`export` (also reads the older
        one-array layout); ValueError if inconsistent.

        The shared run arrays are adopted, not copied: the caller hands them over.
        """
        idx = cls()
        shared = shared or {}
        if "applied_keys" in arrays:  # state format 1: one sorted array, no tail
            idx.runs = [checked_run("applied", arrays["applied_keys"], arrays["applied_steps"], ())]
            idx.runs = [r for r in idx.runs if len(r)]
            return idx
        numbers = []
        for group in shared:
            match = _RUN_GROUP.fullmatch(group)
            if match:
                numbers.append(int(match[1]))
        if sorted(numbers) != list(range(len(numbers))):
            raise ValueError(f"applied index runs are not numbered 0..n-1: {sorted(numbers)}")
        for i in range(len(numbers)):
            group = shared[f"applied_run{i}"]
            idx.runs.append(checked_run(f"applied_run{i}", group["keys"], group["steps"],
                                        arrays[f"applied_run{i}_dead"]))
        tail_keys = np.asarray(arrays["applied_tail_keys"], np.uint64)
        tail_steps = np.asarray(arrays["applied_tail_steps"], np.uint32)
        if (tail_keys.shape != tail_steps.shape or tail_keys.ndim != 1
                or len(tail_keys) > len(idx._tail_keys)):
            raise ValueError(
                "applied index tail arrays must be 1-D, of equal length and fit the tail")
        if not tail_steps.all():
            raise ValueError("applied index tail holds a zero step")
        n = len(tail_keys)
        idx._tail_keys[:n], idx._tail_steps[:n], idx._tail_len = tail_keys, tail_steps, n
        # entries a pop removed (kept: same layout)
        idx._tail_holes = int(np.count_nonzero(tail_keys == 0))
        if "applied_merging" in arrays:  # start that merge again: it is adopted at the same point
            start, count = (int(v)
                            for v in np.asarray(arrays["applied_merging"], np.int64).reshape(2))
            if count != MERGE_FANIN or not 0 <= start <= len(idx.runs) - count:
                raise ValueError(
                    f"applied index merges runs {start}..{start + count - 1} of {len(idx.runs)}")
            idx._merging = PacedMerge(start, idx.runs[start:start + count])
        return idx

    @property
    def max_step(self) -> int:
        """The largest live step (0 when empty)."""
        tail_steps = self._tail_live()[1]
        best = int(tail_steps.max()) if len(tail_steps) else 0
        for run in self.runs:
            if run.live:
                best = max(best, int(np.delete(run.steps, run.dead_positions()).max()))
        return best


def _positions(count: int, first: int, buffer: np.ndarray) -> list[int]:
    """The tail positions a lookup found: none, its first (a plain int), or the buffer's."""
    return [] if count == 0 else [first] if count == 1 else buffer[:count].tolist()


def _same_tier(runs: list[Run]) -> bool:
    """Runs of one tier: none more than twice the newest (dead entries shrink runs a little)."""
    return all(r.live <= 2 * runs[-1].live for r in runs)
