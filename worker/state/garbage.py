"""Garbage collection of a partition's objects: full snapshots past the newest ``keep`` valid ones,
the deltas they cover and the blobs nothing kept names; and the purge of everything below an
offset (docs/worker.md 5.2, 5.8)."""

from __future__ import annotations

from .blobs import BLOB_NAME
from .layout import DELTA, FULL, SnapshotRef
from .restore import SnapshotReader


class GarbageCollector(SnapshotReader):
    """Deletes what a partition's restore no longer needs (it reads to tell what is valid)."""

    def gc(self, topic: str, partition: int) -> int:
        """Keep the newest ``keep`` valid full snapshots and the deltas after the oldest kept one.

        Unreadable full snapshots newer than that are left for inspection (and fall out later).
        Returns the number of objects deleted.
        """
        refs = self.list(topic, partition)
        kept: list[SnapshotRef] = []
        for ref in (r for r in reversed(refs) if r.kind == FULL):
            if len(kept) == self.keep:
                break
            if self._valid(ref, topic, partition):
                kept.append(ref)
        if not kept:
            return 0
        cutoff = kept[-1].offset
        deleted = self._delete([r for r in refs
                                if r.offset < cutoff or (r.kind == DELTA and r.offset == cutoff)])
        return deleted + self._gc_blobs(topic, partition, kept)

    def _gc_blobs(self, topic: str, partition: int, kept: list[SnapshotRef]) -> int:
        """Delete the blobs no kept full snapshot names that are older than all of them: a blob is
        written before the snapshot that names it, so one another writer has just created for
        its next snapshot is never taken."""
        where = self.directory(topic, partition)
        metas = self._list_objects(where)
        blobs = {m["path"]: m for m in metas if BLOB_NAME.fullmatch(m["path"][len(where):])}
        if not blobs:
            return 0
        modified = {m["path"]: m["last_modified"] for m in metas}
        if any(r.key not in modified for r in kept):
            return 0  # a kept snapshot vanished meanwhile: someone else is cleaning up
        oldest_kept = min(modified[r.key] for r in kept)
        named: set[str] = set()
        for ref in kept:
            names = self._named_blobs(ref, topic, partition)
            if names is None:
                return 0  # cannot tell what it needs: keep every blob
            named |= {where + name for name in names}
        garbage = [k for k, m in blobs.items()
                   if k not in named and m["last_modified"] < oldest_kept]
        return self._delete_keys(garbage)

    def purge_before(self, topic: str, partition: int, offset: int) -> int:
        """Delete every snapshot and delta below ``offset`` (invariant 6: after a full snapshot at
        ``offset`` that no longer holds a deleted record). Refuses unless a valid full snapshot at
        or after ``offset`` exists. Returns the number of objects deleted."""
        refs = self.list(topic, partition)
        if not any(r.kind == FULL and r.offset >= offset and self._valid(r, topic, partition)
                   for r in reversed(refs)):
            raise ValueError(f"no valid full snapshot at or after offset {offset} for "
                             f"{topic}/{partition}: refusing to purge the older ones")
        deleted = self._delete([r for r in refs if r.offset < offset])
        kept = [r for r in refs
                if r.kind == FULL and r.offset >= offset and self._valid(r, topic, partition)]
        return deleted + self._gc_blobs(topic, partition, kept)
