"""Shared blobs: immutable array groups stored once, as content-addressed row pieces, and named by
every later full snapshot; which groups are stored already; and the pacing of their uploads."""

from __future__ import annotations

import re
import time
import weakref

import numpy as np

BLOB_NAME = re.compile(r"blob-([0-9a-f]{64})\.snap")

DELETE_BATCH = 1000  # keys per delete request: S3's DeleteObjects limit

# A shared group is stored as row pieces of at most this size: an upload is never one long burst
# (on a shared machine a 24 MB PUT held the local S3 server on both cores for ~0.2 s), pacing has
# something to space out, and restore fetches the pieces in parallel.
BLOB_PIECE_BYTES = 2 << 20
BLOB_FETCH_THREADS = 8


def row_pieces(arrays: dict[str, np.ndarray], max_bytes: int) -> list[dict[str, np.ndarray]]:
    """``arrays`` cut along their first axis into pieces of at most ``max_bytes`` (at least one
    row each); arrays of different lengths or 0-d stay whole.

    >>> pieces = row_pieces(
    ...     {"k": np.arange(10, dtype=np.uint64), "s": np.arange(10, dtype=np.uint32)}, 48)
    >>> [len(p["k"]) for p in pieces]
    [4, 4, 2]
    """
    lengths = {a.shape[0] if a.ndim else None for a in arrays.values()}
    if len(lengths) != 1 or None in lengths:
        return [arrays]
    (rows,) = lengths
    row_bytes = sum(a.itemsize * int(np.prod(a.shape[1:])) for a in arrays.values())
    step = max(1, max_bytes // max(1, row_bytes))
    if rows <= step:
        return [arrays]
    return [{k: a[i:i + step] for k, a in arrays.items()} for i in range(0, rows, step)]


def blob_lists(refs) -> dict[str, list[str]] | None:
    """A full snapshot's "shared" header as {group: [blob name, ...]}; None if malformed. Reads
    the single-blob form ``{"blob": name}`` of earlier snapshots too."""
    if not isinstance(refs, dict):
        return None
    out = {}
    for group, ref in refs.items():
        if not isinstance(ref, dict):
            return None
        names = [ref["blob"]] if "blob" in ref else ref.get("blobs")
        if not isinstance(names, list) or not names or not all(
                isinstance(n, str) and BLOB_NAME.fullmatch(n) for n in names):
            return None
        out[group] = names
    return out


def group_ident(where: str, arrays: dict) -> tuple:
    """The identity cache key of a shared group: its directory and the ids of its arrays."""
    return where, tuple((k, id(v)) for k, v in sorted(arrays.items()))


class StoredGroups:
    """The shared groups this process has written or loaded, and their blob names, by identity
    (the group's directory and the ids of its arrays), not content: re-hashing a 48 MB run per
    snapshot is what blobs avoid."""

    def __init__(self) -> None:
        self._known: dict[tuple, tuple[list, tuple[str, ...]]] = {}  # ident -> (weak refs, names)

    def blob_names(self, where: str, arrays: dict) -> tuple[str, ...] | None:
        """The blob names of this very group if it is stored already, else None."""
        ident = group_ident(where, arrays)
        known = self._known.get(ident)
        if known and all(r() is arrays[k] for (k, _), r in zip(ident[1], known[0])):
            return known[1]
        return None

    def remember(self, where: str, arrays: dict, names: tuple[str, ...]) -> None:
        for ident in [i for i, (refs, _) in self._known.items() if any(r() is None for r in refs)]:
            del self._known[ident]  # groups the model has merged away
        self._known[group_ident(where, arrays)] = (
            [weakref.ref(v) for _, v in sorted(arrays.items())], names)


class Pacer:
    """Spaces uploads out to an average of ``rate`` bytes per second (0: no limit), like
    Elasticsearch's ``max_snapshot_bytes_per_sec``: a background snapshot should not take the
    network, or a co-located object store's CPU, away from the deletions behind it."""

    def __init__(self, rate: float) -> None:
        self.rate, self.started, self.bytes = rate, time.monotonic(), 0

    def spread(self, total: int, seconds: float) -> None:
        """Send ``total`` bytes over ``seconds`` if that is slower than the limit: a snapshot's
        uploads then run at about twice the average rate its new data arrives at (with the
        default spread of half the interval), not in bursts at the limit."""
        if total > 0 and seconds > 0:
            even = total / seconds
            self.rate = min(self.rate, even) if self.rate > 0 else even

    def sent(self, size: int) -> None:
        self.bytes += size

    def wait(self) -> None:
        if self.rate > 0:
            delay = self.started + self.bytes / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
