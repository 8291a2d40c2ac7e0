"""The write side of the store: full snapshots (their shared groups first, as blobs), deletion
deltas and delta groups, each created once; a create that finds its key taken is judged a replay,
a damaged or misplaced object to replace, or another writer's (docs/worker.md 5.2, 5.3)."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import obstore
import orjson
from obstore.exceptions import AlreadyExistsError

from .blobs import BLOB_PIECE_BYTES, Pacer, row_pieces
from .codec import decode, encode
from .exceptions import CorruptSnapshot, SnapshotConflict
from .groups import pack_group
from .layout import DELTA, FULL, LAYOUT_VERSION, GroupObjects, SnapshotRef, call_store
from .objects import misplaced, newer_format, same_arrays

log = logging.getLogger(__name__)


class SnapshotWriter(GroupObjects):
    """Writes one consumer group's full snapshots, shared blobs and deltas, create-only."""

    def write_full(self, topic: str, partition: int, offset: int, header: dict, arrays: dict,
                   shared: dict | None = None, bytes_per_second: float = 0.0,
                   spread_seconds: float = 0.0) -> SnapshotRef:
        """The complete state; ``offset`` is the next input offset to consume.

        ``shared``: {group: {name: array}} of arrays that never change (docs/worker.md 5.2); each
        group not stored yet is written first, as blobs of at most ``BLOB_PIECE_BYTES``.
        ``bytes_per_second`` (0: no limit) paces those blob uploads; ``spread_seconds`` (0: off)
        slows them further, to spread the blobs still to write over that many seconds. The
        returned size counts the snapshot object and the blobs written for it, not the blobs
        reused.
        """
        where = self.directory(topic, partition)
        pacer = Pacer(bytes_per_second)
        if spread_seconds > 0:
            pacer.spread(sum(sum(a.nbytes for a in g.values()) for g in (shared or {}).values()
                             if not self._stored_groups.blob_names(where, g)), spread_seconds)
        refs, written = {}, 0
        for group, group_arrays in (shared or {}).items():
            names, size = self._put_group(where, group_arrays, pacer)
            refs[group] = {"blobs": list(names)}
            written += size
        ref = self._write(FULL, topic, partition, offset, header, arrays, refs)
        self._blob_names[ref.key] = frozenset(n for r in refs.values() for n in r["blobs"])
        return SnapshotRef(ref.key, ref.kind, ref.offset, ref.size + written, ref.duration)

    def _put_group(self, where: str, arrays: dict, pacer: Pacer) -> tuple[tuple[str, ...], int]:
        """Store one shared group (once), in row pieces; returns (blob names, bytes written now)."""
        known = self._stored_groups.blob_names(where, arrays)
        if known is not None:
            return known, 0
        names, written = [], 0
        for piece in row_pieces(arrays, BLOB_PIECE_BYTES):
            pacer.wait()
            name, size = self._put_blob(where, piece)
            pacer.sent(size)
            names.append(name)
            written += size
        self._stored_groups.remember(where, arrays, tuple(names))
        return tuple(names), written

    def _put_blob(self, where: str, arrays: dict) -> tuple[str, int]:
        """Store one blob (content-addressed); returns (blob name, bytes written)."""
        blob = encode({"blob": {"layout": LAYOUT_VERSION}}, arrays)
        name = f"blob-{blob[-32:].hex()}.snap"  # the codec's SHA-256: the name is the checksum
        key = where + name
        try:
            call_store("put", key, obstore.put, self.store, key, blob, mode="create")
        except AlreadyExistsError:  # same name, same content -- unless the stored copy is damaged
            if call_store("head", key, obstore.head, self.store, key)["size"] != len(blob):
                log.warning("replacing damaged blob %s", key)
                self._delete_keys([key])
                try:
                    call_store("put", key, obstore.put, self.store, key, blob, mode="create")
                except AlreadyExistsError:
                    pass  # a racing writer stored it again: same name, same content
        self._sync(key)
        return name, len(blob)

    def write_delta(self, topic: str, partition: int, offset: int, header: dict,
                    arrays: dict) -> SnapshotRef:
        """A deletion's post-noise state; ``offset`` is the delete event's offset + 1."""
        return self._write(DELTA, topic, partition, offset, header, arrays)

    def write_deltas(self, topic: str, partition: int,
                     deltas: list[tuple[int, dict, dict]]) -> SnapshotRef:
        """Consecutive deletions' deltas ``[(offset, header, arrays), ...]`` in one object named
        by the first (group commit, docs/worker.md 5.3), so a competing writer's next delta still
        lands on that key and is caught as a conflict. One delta is written exactly as
        :meth:`write_delta` does."""
        if not deltas:
            raise ValueError("write_deltas needs at least one delta")
        offsets = [off for off, _, _ in deltas]
        if offsets != sorted(set(offsets)):
            raise ValueError(f"delta offsets must increase: {offsets}")
        if len(deltas) == 1:
            return self.write_delta(topic, partition, *deltas[0])
        header, arrays, layout = pack_group(deltas)  # stacked arrays unless the members differ
        return self._write(DELTA, topic, partition, offsets[0], header, arrays, layout=layout)

    def _write(self, kind, topic, partition, offset, header, arrays, shared_refs=None,
               layout: int = LAYOUT_VERSION) -> SnapshotRef:
        key = self.key(topic, partition, kind, offset)
        started = time.monotonic()
        envelope = self._envelope(kind, topic, partition, offset, layout)
        created_at = datetime.now(UTC).isoformat(timespec="microseconds")
        content = {"meta": header, **({"shared": shared_refs} if shared_refs else {})}
        blob = encode({"snapshot": {**envelope, "created_at": created_at}, **content}, arrays)
        size = len(blob)
        try:
            call_store("put", key, obstore.put, self.store, key, blob, mode="create")
        except AlreadyExistsError:
            size = self._same_or_conflict(key, envelope, content, arrays, replacement=blob)
        self._sync(key)
        self._good[key] = size
        return SnapshotRef(key, kind, offset, size, time.monotonic() - started)

    def _same_or_conflict(self, key, envelope, header, arrays, replacement: bytes | None) -> int:
        """The existing object's size if it holds what we meant to write; else SnapshotConflict.

        ``header`` is the content next to the envelope: {"meta": ..., "shared": ...}.

        A damaged object (bad checksum, truncated, not a snapshot) is useless to everyone and
        typically lies exactly where a replay after a fallback snapshots again: it is deleted
        and ``replacement`` created in its place (still create-only, so a racing writer is
        caught). So is a misplaced one (a valid object another writer's key names: copied or
        restored there; restore skips it as foreign). An object in a newer format is not ours to
        judge: conflict.
        """
        existing = self._get(key)
        try:
            stored, stored_arrays = decode(existing)
        except CorruptSnapshot as exc:
            if replacement is None or newer_format(existing):
                raise SnapshotConflict(
                    key, f"an unreadable object already holds this key ({exc})") from None
            log.warning("replacing damaged snapshot object %s (%s)", key, exc)
            return self._replace(key, envelope, header, arrays, replacement)
        if isinstance(stored.get("snapshot"), dict):
            stored["snapshot"].pop("created_at", None)
        foreign = misplaced(stored.get("snapshot"), envelope)
        if foreign and replacement is not None:
            log.warning("replacing misplaced snapshot object %s (%s)", key, foreign)
            return self._replace(key, envelope, header, arrays, replacement)
        wanted = orjson.loads(orjson.dumps({"snapshot": envelope, **header}))
        if stored != wanted or not same_arrays(arrays, stored_arrays):
            raise SnapshotConflict(key, "a different snapshot already exists at this offset: "
                                        "another writer (a zombie?) owns this partition")
        return len(existing)

    def _replace(self, key, envelope, header, arrays, replacement: bytes) -> int:
        """Delete the useless object at ``key`` and create ``replacement`` (still create-only)."""
        try:
            call_store("delete", key, obstore.delete, self.store, key)
        except FileNotFoundError:
            pass
        try:
            call_store("put", key, obstore.put, self.store, key, replacement, mode="create")
        except AlreadyExistsError:  # a racing writer got there first: judge what it wrote
            return self._same_or_conflict(key, envelope, header, arrays, replacement=None)
        return len(replacement)
