"""The applied index's runs: immutable key-sorted arrays of (key, step), and how they merge.

A :class:`Run` never changes once built (snapshots refer to it without copying); removals only
mark its positions dead. Runs merge pairwise into one (:func:`merge_all`, dead entries dropped)
or, for the index's paced merges (index.py "Paced merges"), a key-range slice at a time
(:class:`PacedMerge`, dead entries kept). The compiled kernels that sort, merge and search them
(``kernels.merge``) load on first use, here.
"""

from __future__ import annotations

import numpy as np

MERGE_SLICE = 1 << 14  # entries of the largest run per slice of a paced merge (~0.3 ms of work)


class Run:
    """An immutable key-sorted array of (key, step) entries, with the positions removed since."""

    __slots__ = ("keys", "steps", "dead")

    def __init__(self, keys: np.ndarray, steps: np.ndarray, dead=()):
        keys.flags.writeable = False  # shared with snapshots in flight: never changed in place
        steps.flags.writeable = False
        self.keys, self.steps, self.dead = keys, steps, set(dead)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def live(self) -> int:
        return len(self.keys) - len(self.dead)

    def dead_positions(self) -> np.ndarray:
        return np.array(sorted(self.dead), np.int64)


def checked_run(name: str, keys, steps, dead) -> Run:
    """A run read back from a snapshot, every array checked (ValueError names ``name``)."""
    keys, steps = np.asarray(keys, np.uint64), np.asarray(steps, np.uint32)
    dead = np.asarray(dead, np.int64)
    if keys.shape != steps.shape or keys.ndim != 1:
        raise ValueError(f"{name}: keys and steps must be 1-D and of equal length")
    if len(keys) > 1 and not np.all(keys[1:] >= keys[:-1]):
        raise ValueError(f"{name}: keys are not sorted")
    if not steps.all():
        raise ValueError(f"{name}: a zero step")
    if (dead.ndim != 1 or (len(dead) and (dead.min() < 0 or dead.max() >= len(keys)))
            or len(np.unique(dead)) != len(dead)):
        raise ValueError(f"{name}: dead positions out of range or repeated")
    return Run(keys, steps, dead.tolist())


def merge_all(runs: list[Run]) -> Run:
    """One run from several, merged pairwise (oldest first among equal keys)."""
    while len(runs) > 1:
        pairs = [merge_pair(runs[i], runs[i + 1]) for i in range(0, len(runs) - 1, 2)]
        runs = pairs + ([runs[-1]] if len(runs) % 2 else [])
    return runs[0]


def merge_pair(a: Run, b: Run | None) -> Run:
    """One run with the live entries of ``a`` and ``b`` (``a`` first among equal keys)."""
    from .kernels.merge import merge_runs  # on first use: importing numba takes ~0.2 s

    empty_keys, empty_steps = np.zeros(0, np.uint64), np.zeros(0, np.uint32)
    no_dead = np.zeros(0, np.int64)
    if b is not None:
        bk, bs, bd = b.keys, b.steps, b.dead_positions()
    else:
        bk, bs, bd = empty_keys, empty_steps, no_dead
    keys, steps = merge_runs(a.keys, a.steps, a.dead_positions(), bk, bs, bd)
    return Run(keys, steps)


def merge_runs_reference(ak, as_, adead, bk, bs, bdead):
    """numpy form of ``kernels.merge_runs`` (tests compare them)."""
    ka, sa = np.delete(ak, adead), np.delete(as_, adead)
    kb, sb = np.delete(bk, bdead), np.delete(bs, bdead)
    keys, steps = np.concatenate([ka, kb]), np.concatenate([sa, sb])
    order = np.argsort(keys, kind="stable")
    return keys[order], steps[order]


def sorted_tail(keys: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tail's entries in (key, step) order, new arrays: the compiled bucket sort, or numpy's
    when the keys are too clustered for it (not record keys: tests and hand-made keys)."""
    from .kernels.merge import sort_tail  # on first use: importing numba takes ~0.2 s

    out = sort_tail(keys, steps)
    if len(out[0]) == len(keys):
        return out
    order = _key_step_order(keys, steps)
    return keys[order], steps[order]


def _key_step_order(keys: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The (key, step) order of the tail: numpy's quicksort on the keys (0.8 ms for a full tail,
    where a lexsort takes 4.6 ms), unless two keys are equal (a record applied twice, or a hash
    collision): then the lexsort, which orders them by step."""
    order = np.argsort(keys)
    ordered = keys[order]
    if len(ordered) > 1 and (ordered[1:] == ordered[:-1]).any():
        order = np.lexsort((steps, keys))
    return order


class PacedMerge:
    """Runs being merged into one, a key-range slice at a time (index.py "Paced merges").

    The merged run holds every entry of the sources, dead ones included, in the order of
    :func:`merge_all` (by key; among equal keys, source by source and in position order), so
    each slice is a merge of the sources' sub-ranges and the slices simply follow each other.
    """

    def __init__(self, start: int, sources: list[Run]):
        self.start, self.sources = start, list(sources)
        largest = max(sources, key=len)
        slices = max(1, -(-len(largest) // MERGE_SLICE))
        cuts = largest.keys[[len(largest) * k // slices for k in range(1, slices)]]
        # bounds[i][k]: where slice k starts in source i (equal keys never straddle a cut)
        self.bounds = [np.concatenate(([0], np.searchsorted(r.keys, cuts, "left"), [len(r)]))
                       for r in sources]
        total = sum(len(r) for r in sources)
        self.keys, self.steps = np.empty(total, np.uint64), np.empty(total, np.uint32)
        self.slices, self.done, self.filled = slices, 0, 0

    def advance(self, fraction: float) -> None:
        """Merge slices until ``fraction`` of them are done."""
        due = min(self.slices, int(np.ceil(fraction * self.slices)))
        while self.done < due:
            self._merge_slice(self.done)
            self.done += 1

    def _merge_slice(self, k: int) -> None:
        parts = [Run(r.keys[b[k]:b[k + 1]], r.steps[b[k]:b[k + 1]])
                 for r, b in zip(self.sources, self.bounds)]
        merged = merge_all(parts)
        n = len(merged)
        self.keys[self.filled:self.filled + n] = merged.keys
        self.steps[self.filled:self.filled + n] = merged.steps
        self.filled += n

    def finish(self) -> Run:
        """The merged run, with the dead marks of the sources as they are now."""
        self.advance(1.0)
        dead = []
        for i, run in enumerate(self.sources):
            positions = run.dead_positions()
            if len(positions) == 0:
                continue
            keys = run.keys[positions]
            earlier = sum(np.searchsorted(r.keys, keys, "right")
                          - np.searchsorted(r.keys, keys, "left") for r in self.sources[:i])
            within = positions - np.searchsorted(run.keys, keys, "left")
            dead.append(np.searchsorted(self.keys, keys, "left") + earlier + within)
        return Run(self.keys, self.steps, np.concatenate(dead).tolist() if dead else ())


_MERGE_KERNELS = None


def merge_kernels():
    """kernels.merge, imported on first use (importing numba takes ~0.2 s), then one global read
    (an import statement in a function costs ~1 us a call, and a deletion makes a dozen)."""
    global _MERGE_KERNELS
    if _MERGE_KERNELS is None:
        from .kernels import merge

        _MERGE_KERNELS = merge
    return _MERGE_KERNELS


def typed_list(arrays: list[np.ndarray]):
    """The arrays as a numba typed list (what ``find_key`` takes); [] holds no type, so an empty
    index hands over one empty array."""
    from numba.typed import List

    return List(arrays or [frozen(np.zeros(0, np.uint64))])


def frozen(keys: np.ndarray) -> np.ndarray:
    """``keys``, made read-only (the sorted arrays of the index and the tombstones)."""
    keys.flags.writeable = False  # shared with snapshots in flight: never changed in place
    return keys
