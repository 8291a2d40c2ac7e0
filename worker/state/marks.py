"""Release marks: how far a partition's releases may have gone, for a successor's replay floor.

A restarted partition publishes nothing below what its predecessor may have published (the replay
floor, worker/stream/replay_floor.py). The input partition's end bounds that, but then a backlog's
deletions wait for the whole catch-up. A mark bounds it tighter: before a partition hands the
producer a release above its newest mark, it stores a new mark ``mark-{M:020d}.mark`` (an empty
object, create-only) with M a stretch ahead of that release's version, behind the deltas before
it and ahead of the release (the outbox orders the three). So every version the partition ever
published is at most its newest mark, and its successor holds releases only below the smaller of
the input's end and that mark. Marks are written once per stretch of progress
(``worker.stream.partition.MARK_STRETCH`` events), one PUT each; the older ones go with the
snapshots' garbage collection.

>>> from obstore.store import MemoryStore
>>> marks = ReleaseMarks(MemoryStore(), "olu", "g")
>>> marks.newest_mark("t", 0) is None
True
>>> marks.write_mark("t", 0, 50_000); marks.write_mark("t", 0, 100_000)
>>> marks.newest_mark("t", 0), len(marks.list("t", 0))  # marks are not snapshots
(100000, 0)
>>> marks.drop_old_marks("t", 0), marks.drop_old_marks("t", 0)
(1, 0)
"""

from __future__ import annotations

import re

import obstore
from obstore.exceptions import AlreadyExistsError

from .layout import GroupObjects, call_store

_MARK = re.compile(r"mark-(\d{20})\.mark")
_MARK_KEY = "release_mark"  # an outbox entry (offset, header, arrays) that stores a mark


def mark_entry(version: int, mark: int) -> tuple[int, dict, dict]:
    """The outbox entry that stores ``mark`` ahead of the release at ``version``: it is written
    in order with the deltas before it (:meth:`ReleaseMarks.write_entries`)."""
    return version, {_MARK_KEY: mark}, {}


class ReleaseMarks(GroupObjects):
    def _marks(self, topic: str, partition: int) -> dict[int, str]:
        where = self.directory(topic, partition)
        return {int(m[1]): meta["path"] for meta in self._list_objects(where)
                if (m := _MARK.fullmatch(meta["path"][len(where):]))}

    def write_entries(self, topic: str, partition: int, entries: list) -> None:
        """Store an outbox's entries in order: deltas (consecutive ones in one object, as
        ``write_deltas``) and marks."""
        run: list = []
        for entry in entries:
            if _MARK_KEY not in entry[1]:
                run.append(entry)
                continue
            if run:
                self.write_deltas(topic, partition, run)
                run = []
            self.write_mark(topic, partition, entry[1][_MARK_KEY])
        if run:
            self.write_deltas(topic, partition, run)

    def newest_mark(self, topic: str, partition: int) -> int | None:
        """The largest version the partition's releases may have reached (None: no mark)."""
        return max(self._marks(topic, partition), default=None)

    def write_mark(self, topic: str, partition: int, version: int) -> None:
        """Store the mark ``version``, durable on return: one create-only PUT (on the delta
        writer's thread, so deltas queued behind it wait no longer than that)."""
        key = f"{self.directory(topic, partition)}mark-{version:020d}.mark"
        try:
            call_store("put", key, obstore.put, self.store, key, b"", mode="create")
        except AlreadyExistsError:
            pass  # a replay writing the same mark again: it holds what we meant
        self._sync(key)

    def drop_old_marks(self, topic: str, partition: int) -> int:
        """Delete every mark but the newest (with the snapshots' gc: a LIST and a DELETE once per
        full snapshot, not per mark); the number deleted."""
        marks = self._marks(topic, partition)
        older = [k for v, k in marks.items() if v < max(marks, default=0)]
        return self._delete_keys(older) if older else 0
