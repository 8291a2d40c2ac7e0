"""Where one consumer group's objects live and what each carries: a directory per partition,
names that give kind and offset, the envelope, and the plain store calls (list, get, delete, fsync)
that the writer, restore and gc all make (docs/worker.md 5.2)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import obstore
from obstore.exceptions import GenericError, JoinError

from .backends import sync_local
from .blobs import DELETE_BATCH, StoredGroups
from .exceptions import StorageUnavailable

LAYOUT_VERSION = 1  # delta groups have their own layout versions (.groups)
FULL, DELTA = "full", "delta"
_NAME = re.compile(r"(full|delta)-(\d{20})\.snap")


@dataclass(frozen=True)
class SnapshotRef:
    key: str
    kind: str  # "full" or "delta"
    offset: int
    size: int  # bytes
    duration: float = 0.0  # seconds the write took (0 for listed objects)


def call_store(op: str, key: str, fn, *args, **kwargs):
    """Run one obstore call; outages become :class:`StorageUnavailable` (the caller retries)."""
    try:
        return fn(*args, **kwargs)
    except (GenericError, JoinError, TimeoutError, ConnectionError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise StorageUnavailable(key, f"{op} failed: {first}") from exc


class GroupObjects:
    """The objects of one consumer group's partitions in ``store``, and what this process already
    knows of them: the sizes of objects known valid and the blobs each full snapshot names (kept
    by the writer and restore, read by gc, forgotten on delete)."""

    def __init__(self, store, prefix: str = "", group: str = "", keep: int = 2) -> None:
        if not group:
            raise ValueError("group must be a non-empty consumer group id")
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.store, self.prefix, self.group, self.keep = store, prefix.strip("/"), group, keep
        self._good: dict[str, int] = {}  # key -> size of objects known valid (they are immutable)
        self._stored_groups = StoredGroups()  # shared groups written or loaded: not written again
        self._blob_names: dict[str, frozenset] = {}  # full snapshot key -> blob names it refers to
        # full snapshot key -> its "shared" header (last loads)
        self._blob_refs: dict[str, dict] = {}

    # ------------------------------------------------------------------ naming
    def directory(self, topic: str, partition: int) -> str:
        if not topic or "/" in topic or not isinstance(partition, int) or partition < 0:
            raise ValueError(f"bad topic/partition {topic!r}/{partition!r}")
        return "/".join(p for p in (self.prefix, self.group, topic, str(partition)) if p) + "/"

    def key(self, topic: str, partition: int, kind: str, offset: int) -> str:
        if not isinstance(offset, int) or not 0 <= offset < 10**20:
            raise ValueError(f"bad offset {offset!r}")
        return f"{self.directory(topic, partition)}{kind}-{offset:020d}.snap"

    def _envelope(self, kind, topic, partition, offset, layout: int = LAYOUT_VERSION) -> dict:
        return {"layout": layout, "kind": kind, "group": self.group, "topic": topic,
                "partition": partition, "offset": offset}

    def list(self, topic: str, partition: int) -> list[SnapshotRef]:
        """Snapshots and deltas of one partition, by offset (a delta before a full at the same
        offset)."""
        where = self.directory(topic, partition)
        metas = self._list_objects(where)
        refs = []
        for meta in metas:
            match = _NAME.fullmatch(meta["path"][len(where):])  # skips nested and foreign names
            if meta["path"].startswith(where) and match:
                refs.append(SnapshotRef(meta["path"], match[1], int(match[2]), meta["size"]))
        return sorted(refs, key=lambda r: (r.offset, r.kind))

    # ------------------------------------------------------------------ plain calls
    def _list_objects(self, where: str) -> list[dict]:
        return call_store("list", where,
                          lambda: [m for chunk in obstore.list(self.store, where) for m in chunk])

    def _get(self, key: str) -> bytes:
        return call_store("get", key, lambda: obstore.get(self.store, key).bytes())

    def _sync(self, key: str) -> None:
        try:
            sync_local(self.store, key)
        except OSError as exc:
            raise StorageUnavailable(key, f"fsync failed: {exc}") from exc

    def _delete(self, refs: list[SnapshotRef]) -> int:
        return self._delete_keys([r.key for r in refs])

    def _delete_keys(self, keys: list[str]) -> int:
        # One request per DELETE_BATCH keys (S3 DeleteObjects) instead of one per key: a GC after
        # each full snapshot removes every delta it covers, hundreds at 50 deletions/s.
        for start in range(0, len(keys), DELETE_BATCH):
            batch = keys[start:start + DELETE_BATCH]
            try:
                call_store("delete", batch[0], obstore.delete, self.store, batch)
            except FileNotFoundError:  # LocalStore: an object was missing (the rest are deleted)
                pass
            for key in batch:
                self._good.pop(key, None)
                self._blob_names.pop(key, None)
                self._blob_refs.pop(key, None)
        return len(keys)
