"""Per-partition snapshots in object storage (obstore): create-only, checked, garbage-collected.

Layout, per partition, under ``{prefix}/{group}/{topic}/{partition}/``::

    full-{offset:020d}.snap    the whole model state; every event below ``offset`` is reflected
    delta-{offset:020d}.snap   the post-noise state right after one deletion (delete offset + 1)
    blob-{sha256}.snap         an immutable array group shared by full snapshots (named by content)

Shared blobs make full snapshots incremental. A model marks the parts of its state that never
change once built (the applied index's sorted runs) as ``shared``; each group is written once, as
content-addressed blobs of at most ``BLOB_PIECE_BYTES`` (row pieces), and later snapshots name them
instead of rewriting them, so a snapshot costs the state that changed since the last one, not the
whole index (a million-record index is 12 MB; re-encoding and re-uploading it every few seconds was
the worker's largest pause). A full snapshot lists each group's pieces in order; restore fetches
them in parallel and checks each (the name is the checksum), and a missing or damaged piece makes
that full snapshot invalid like any other corruption. Background snapshots may pace their uploads
(``bytes_per_second``).

Every object is written once with ``mode="create"`` (put-if-absent works on Memory, Local and
S3) and is then immutable. Each carries an envelope -- layout version, kind, group, topic,
partition, offset, ``created_at`` -- next to the caller's header, and the codec's checksum.

Decisions:

* **Conflicts.** A create that finds the key taken reads the object back. Same content
  ignoring ``created_at`` (a deterministic replay, or a retried PUT that had in fact landed)
  is success; different content, or an object in an unknown (newer) format, is
  :class:`SnapshotConflict`: another writer owns the partition, the caller must stop. A
  *damaged* object (checksum, truncation) is replaced: after a fallback past it, the replay
  snapshots at the same offsets again and would otherwise be stuck there. So is a *misplaced*
  one -- a valid object whose envelope names another group, topic, partition, kind or offset
  (copied or restored to the wrong key): no writer of this partition can have produced it, so
  it says nothing about a competing owner, and restore already skips it as foreign.
* **Corrupt full snapshots.** Skipped under ``on_corrupt="fallback"`` (the next older valid one
  is loaded and the deltas after *it* are returned, so nothing is redrawn); raised under
  ``"fail"``. "Corrupt" includes a valid snapshot of another group/topic/partition or kind
  found under this prefix, or one whose header offset disagrees with its name.
* **Group commit.** Deletions that queue up behind a delta write are stored together:
  :meth:`SnapshotStore.write_deltas` puts consecutive deltas of one partition in one object
  named by the *first* one's offset (header kind ``delta-group``), so a competing writer's next
  delta still lands on the same key and is caught as a conflict. One delta alone is written as
  before. A group never spans a full snapshot's offset (the writer seals its queue at each
  capture), so restore, ``gc`` and ``purge_before`` go by the name's offset as for single
  deltas. Restore expands groups; two different stored states for one deletion are a
  :class:`SnapshotConflict`.
* **Stacked groups** (layout 3, :mod:`.groups`). The delta writer is a background thread, and
  every microsecond of CPU it spends is taken from the loop, which needs the same GIL. The codec
  works per array, so a group stored one array per member (``d{j}.{name}``, layout 2) cost the
  loop ~20 us per delta in a burst of deletions (bench/README.md). When every member has the same
  array names and, per name, the same dtype and shape (the normal case: one ``z`` each), each
  name is stored once, the members' arrays stacked: ``all.{name}`` of shape (members, *shape).
  Members that differ keep layout 2. Restore reads layouts 1, 2 and 3 and gives each member its
  own row, with the dtype, shape and bytes it was written with.
* **Corrupt deltas** always raise :class:`SnapshotCorrupt`: the post-noise state of
  that deletion is lost, and replaying it would draw a second, independent noise sample for a
  deletion whose release may already be public (invariant 2). An older full snapshot does not
  help -- the delta is needed from any base. Operators must decide (e.g. retire the partition).
* **No valid full snapshot.** Nothing stored at all: ``restore`` returns ``None`` (fresh
  partition). Full snapshots exist but none is valid: :class:`SnapshotCorrupt` under either
  policy (starting fresh would reset the deletion counter, invariant 4). Only deltas (a
  deletion before the first full snapshot): a :class:`Restored` with ``key=None``,
  ``offset=None``, empty state, and the deltas -- start a fresh model at the log start and
  apply them.
* **Objects that vanish** between listing and reading (another replica's ``gc`` after writing a
  newer snapshot) make ``restore`` list again; if that keeps happening, another writer is
  active and ``restore`` raises :class:`SnapshotConflict`.
* **Durability on file://**: obstore's LocalStore does not fsync, so every write here syncs
  the file and its directories itself; a delta must survive an OS crash, not just ours.
* **Blob garbage.** ``gc`` deletes a blob only when no kept full snapshot names it *and* it is
  older than the oldest kept full snapshot: a blob is written before the snapshot that names it,
  so a blob another writer has just created for its next snapshot is never taken.
* **Outages** (network, timeouts, 5xx after obstore's bounded retries) raise
  :class:`StorageUnavailable`; nothing is half-written (puts are atomic), so retrying is safe.
"""

from __future__ import annotations

import logging
import re
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import obstore
import orjson
from obstore.exceptions import AlreadyExistsError, GenericError, JoinError

from .backends import open_store, sync_local  # noqa: F401  (open_store: the state API)
from .blobs import (
    BLOB_FETCH_THREADS,
    BLOB_NAME,
    BLOB_PIECE_BYTES,
    DELETE_BATCH,
    Pacer,
    blob_lists,
    group_ident,
    row_pieces,
)
from .codec import decode, encode
from .exceptions import CorruptSnapshot, SnapshotConflict, SnapshotCorrupt, StorageUnavailable
from .groups import (  # noqa: F401  (GROUP_LAYOUT_VERSION, STACKED_...: the state API)
    GROUP_KIND,
    GROUP_LAYOUT_VERSION,
    GROUP_LAYOUTS,
    STACKED_GROUP_LAYOUT_VERSION,
    pack_group,
    unpack_group,
)
from .objects import misplaced, newer_format, same_arrays

log = logging.getLogger(__name__)

LAYOUT_VERSION = 1  # delta groups have their own layout versions (.groups)
FULL, DELTA = "full", "delta"
_NAME = re.compile(r"(full|delta)-(\d{20})\.snap")
_RELIST_ATTEMPTS = 3



class _Invalid(Exception):
    """Internal: an object that decoded badly or does not belong here; ``args[0]`` is the reason."""


class _Vanished(Exception):
    """Internal: a listed object was deleted before we read it (another replica's gc)."""


@dataclass(frozen=True)
class SnapshotRef:
    key: str
    kind: str  # "full" or "delta"
    offset: int
    size: int  # bytes
    duration: float = 0.0  # seconds the write took (0 for listed objects)


@dataclass
class Restored:
    key: str | None  # the full snapshot loaded; None: no full snapshot yet, only deltas
    offset: int | None  # next input offset to consume; None: from the log start
    header: dict  # the caller's header of the full snapshot
    arrays: dict[str, np.ndarray]
    shared: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # group -> arrays (blobs)
    deltas: list[tuple[int, dict, dict[str, np.ndarray]]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (key, reason), newer than key
    created_at: str | None = None


def _call(op: str, key: str, fn, *args, **kwargs):
    """Run one obstore call; outages become :class:`StorageUnavailable` (the caller retries)."""
    try:
        return fn(*args, **kwargs)
    except (GenericError, JoinError, TimeoutError, ConnectionError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise StorageUnavailable(key, f"{op} failed: {first}") from exc


# --------------------------------------------------------------------------- snapshots

class SnapshotStore:
    """Full snapshots and deletion deltas of every partition of one consumer group.

    >>> from obstore.store import MemoryStore
    >>> snaps = SnapshotStore(MemoryStore(), "olu", "g")
    >>> snaps.write_full("t", 0, 10, {"n": 1}, {"z": np.zeros(2)}).key
    'olu/g/t/0/full-00000000000000000010.snap'
    >>> snaps.write_delta("t", 0, 12, {"t": 11}, {"z": np.ones(2)}).kind
    'delta'
    >>> r = snaps.restore("t", 0)
    >>> r.offset, r.header, [(off, h) for off, h, _ in r.deltas]
    (10, {'n': 1}, [(12, {'t': 11})])
    """

    def __init__(self, store, prefix: str = "", group: str = "", keep: int = 2) -> None:
        if not group:
            raise ValueError("group must be a non-empty consumer group id")
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.store, self.prefix, self.group, self.keep = store, prefix.strip("/"), group, keep
        self._good: dict[str, int] = {}  # key -> size of objects known valid (they are immutable)
        # Shared groups already stored: (directory, ids of the group's arrays) -> (weak refs, blob
        # name). Identity, not content: re-hashing a 48 MB run per snapshot is what blobs avoid.
        self._blobs: dict[tuple, tuple[list, str]] = {}
        self._blob_names: dict[str, frozenset] = {}  # full snapshot key -> blob names it refers to
        self._blob_refs: dict[str, dict] = {}  # full snapshot key -> its "shared" header (last loads)

    # ------------------------------------------------------------------ naming
    def directory(self, topic: str, partition: int) -> str:
        if not topic or "/" in topic or not isinstance(partition, int) or partition < 0:
            raise ValueError(f"bad topic/partition {topic!r}/{partition!r}")
        return "/".join(p for p in (self.prefix, self.group, topic, str(partition)) if p) + "/"

    def key(self, topic: str, partition: int, kind: str, offset: int) -> str:
        if not isinstance(offset, int) or not 0 <= offset < 10**20:
            raise ValueError(f"bad offset {offset!r}")
        return f"{self.directory(topic, partition)}{kind}-{offset:020d}.snap"

    def list(self, topic: str, partition: int) -> list[SnapshotRef]:
        """Snapshots and deltas of one partition, by offset (a delta before a full at the same offset)."""
        where = self.directory(topic, partition)
        metas = self._list_objects(where)
        refs = []
        for meta in metas:
            match = _NAME.fullmatch(meta["path"][len(where):])  # skips nested and foreign names
            if meta["path"].startswith(where) and match:
                refs.append(SnapshotRef(meta["path"], match[1], int(match[2]), meta["size"]))
        return sorted(refs, key=lambda r: (r.offset, r.kind))

    def _list_objects(self, where: str) -> list[dict]:
        return _call("list", where, lambda: [m for chunk in obstore.list(self.store, where) for m in chunk])

    # ------------------------------------------------------------------ writing
    def write_full(self, topic: str, partition: int, offset: int, header: dict, arrays: dict,
                   shared: dict | None = None, bytes_per_second: float = 0.0,
                   spread_seconds: float = 0.0) -> SnapshotRef:
        """The complete state; ``offset`` is the next input offset to consume.

        ``shared``: {group: {name: array}} of arrays that never change (see the module doc);
        each group not stored yet is written first, as blobs of at most ``BLOB_PIECE_BYTES``.
        ``bytes_per_second`` (0: no limit) paces those blob uploads; ``spread_seconds`` (0: off)
        slows them further, to spread the blobs still to write over that many seconds. The
        returned size counts the snapshot object and the blobs written for it, not the blobs reused.
        """
        where = self.directory(topic, partition)
        pacer = Pacer(bytes_per_second)
        if spread_seconds > 0:
            pacer.spread(sum(sum(a.nbytes for a in g.values()) for g in (shared or {}).values()
                             if not self._stored(where, g)), spread_seconds)
        refs, written = {}, 0
        for group, group_arrays in (shared or {}).items():
            names, size = self._put_group(where, group_arrays, pacer)
            refs[group] = {"blobs": list(names)}
            written += size
        ref = self._write(FULL, topic, partition, offset, header, arrays, refs)
        self._blob_names[ref.key] = frozenset(n for r in refs.values() for n in r["blobs"])
        return SnapshotRef(ref.key, ref.kind, ref.offset, ref.size + written, ref.duration)

    def _stored(self, where: str, arrays: dict) -> tuple[str, ...] | None:
        """The blob names of a shared group this store has already written, else None."""
        ident = group_ident(where, arrays)
        known = self._blobs.get(ident)
        if known and all(r() is arrays[k] for (k, _), r in zip(ident[1], known[0])):
            return known[1]
        return None

    def _put_group(self, where: str, arrays: dict, pacer: Pacer) -> tuple[tuple[str, ...], int]:
        """Store one shared group (once), in row pieces; returns (blob names, bytes written now)."""
        known = self._stored(where, arrays)
        if known is not None:
            return known, 0
        names, written = [], 0
        for piece in row_pieces(arrays, BLOB_PIECE_BYTES):
            pacer.wait()
            name, size = self._put_blob(where, piece)
            pacer.sent(size)
            names.append(name)
            written += size
        self._remember_blob(where, arrays, tuple(names))
        return tuple(names), written

    def _put_blob(self, where: str, arrays: dict) -> tuple[str, int]:
        """Store one blob (content-addressed); returns (blob name, bytes written)."""
        blob = encode({"blob": {"layout": LAYOUT_VERSION}}, arrays)
        name = f"blob-{blob[-32:].hex()}.snap"  # the codec's SHA-256: the name is the checksum
        key = where + name
        try:
            _call("put", key, obstore.put, self.store, key, blob, mode="create")
        except AlreadyExistsError:  # same name, same content -- unless the stored copy is damaged
            if _call("head", key, obstore.head, self.store, key)["size"] != len(blob):
                log.warning("replacing damaged blob %s", key)
                self._delete_keys([key])
                try:
                    _call("put", key, obstore.put, self.store, key, blob, mode="create")
                except AlreadyExistsError:
                    pass  # a racing writer stored it again: same name, same content
        self._sync(key)
        return name, len(blob)

    def _remember_blob(self, where: str, arrays: dict, names: tuple[str, ...]) -> None:
        for ident in [i for i, (refs, _) in self._blobs.items() if any(r() is None for r in refs)]:
            del self._blobs[ident]  # groups the model has merged away
        self._blobs[group_ident(where, arrays)] = ([weakref.ref(v) for _, v in sorted(arrays.items())], names)

    def write_delta(self, topic: str, partition: int, offset: int, header: dict, arrays: dict) -> SnapshotRef:
        """A deletion's post-noise state; ``offset`` is the delete event's offset + 1."""
        return self._write(DELTA, topic, partition, offset, header, arrays)

    def write_deltas(self, topic: str, partition: int, deltas: list[tuple[int, dict, dict]]) -> SnapshotRef:
        """Consecutive deletions' deltas ``[(offset, header, arrays), ...]`` in one object (group
        commit; see the module doc). One delta is written exactly as :meth:`write_delta` does."""
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
            _call("put", key, obstore.put, self.store, key, blob, mode="create")
        except AlreadyExistsError:
            size = self._same_or_conflict(key, envelope, content, arrays, replacement=blob)
        self._sync(key)
        self._good[key] = size
        return SnapshotRef(key, kind, offset, size, time.monotonic() - started)

    def _envelope(self, kind, topic, partition, offset, layout: int = LAYOUT_VERSION) -> dict:
        return {"layout": layout, "kind": kind, "group": self.group, "topic": topic,
                "partition": partition, "offset": offset}

    def _same_or_conflict(self, key, envelope, header, arrays, replacement: bytes | None) -> int:
        """The existing object's size if it holds what we meant to write; else SnapshotConflict.

        ``header`` is the content next to the envelope: {"meta": ..., "shared": ...}.

        A damaged object (bad checksum, truncated, not a snapshot) is useless to everyone and
        typically lies exactly where a replay after a fallback snapshots again: it is deleted
        and ``replacement`` created in its place (still create-only, so a racing writer is
        caught). An object in a newer format is not ours to judge: conflict.
        """
        existing = self._get(key)
        try:
            stored, stored_arrays = decode(existing)
        except CorruptSnapshot as exc:
            if replacement is None or newer_format(existing):
                raise SnapshotConflict(key, f"an unreadable object already holds this key ({exc})") from None
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
            _call("delete", key, obstore.delete, self.store, key)
        except FileNotFoundError:
            pass
        try:
            _call("put", key, obstore.put, self.store, key, replacement, mode="create")
        except AlreadyExistsError:  # a racing writer got there first: judge what it wrote
            return self._same_or_conflict(key, envelope, header, arrays, replacement=None)
        return len(replacement)

    # ------------------------------------------------------------------ reading
    def restore(self, topic: str, partition: int, on_corrupt: str = "fallback") -> Restored | None:
        """The newest valid full snapshot and every delta after it; None if nothing is stored."""
        if on_corrupt not in ("fallback", "fail"):
            raise ValueError(f"on_corrupt must be 'fallback' or 'fail', got {on_corrupt!r}")
        for _ in range(_RELIST_ATTEMPTS):
            try:
                return self._restore_listed(topic, partition, on_corrupt)
            except _Vanished:  # garbage-collected since the listing: a newer snapshot exists
                continue
        raise SnapshotConflict(self.directory(topic, partition), "objects keep vanishing during restore: "
                               "another writer is still active on this partition")

    def _restore_listed(self, topic, partition, on_corrupt) -> Restored | None:
        refs = self.list(topic, partition)
        fulls = [r for r in reversed(refs) if r.kind == FULL]
        skipped: list[tuple[str, str]] = []
        for ref in fulls:
            try:
                header, arrays, envelope = self._load(ref, topic, partition)
                shared = self._load_shared(self.directory(topic, partition), self._blob_refs[ref.key])
            except _Invalid as bad:
                if on_corrupt == "fail":
                    raise SnapshotCorrupt(ref.key, bad.args[0]) from None
                skipped.append((ref.key, bad.args[0]))
                continue
            deltas = self._deltas(refs, ref.offset, topic, partition)
            return Restored(ref.key, ref.offset, header, arrays, shared, deltas, skipped,
                            envelope.get("created_at"))
        if fulls:
            raise SnapshotCorrupt(fulls[0].key, f"no valid full snapshot among {len(fulls)} "
                                  f"({'; '.join(r for _, r in skipped)}); starting fresh would reset "
                                  f"the deletion counter and redraw deletion noise")
        deltas = self._deltas(refs, -1, topic, partition)
        return Restored(None, None, {}, {}, {}, deltas) if deltas else None

    def _deltas(self, refs, after: int, topic, partition) -> list:
        """Every delta past ``after``, in order; any unusable one is fatal (see module doc).

        A group is named by its first delta and never spans a full snapshot's offset (the writer
        seals its queue when it captures one), so objects named at or before ``after`` are skipped.
        """
        out: dict[int, tuple[dict, dict]] = {}
        for ref in (r for r in refs if r.kind == DELTA and r.offset > after):
            try:
                header, arrays, envelope = self._load(ref, topic, partition)
                entries = _delta_entries(ref.offset, envelope["layout"], header, arrays)
            except _Invalid as bad:
                raise SnapshotCorrupt(ref.key, f"{bad.args[0]}; this deletion's post-noise state is lost "
                                      "and must not be redrawn (invariant 2)") from None
            for offset, entry, entry_arrays in entries:
                if offset <= after:
                    continue
                if offset in out and (out[offset][0] != entry or not same_arrays(entry_arrays, out[offset][1])):
                    raise SnapshotConflict(ref.key, f"two different post-noise states stored for the deletion "
                                           f"at offset {offset}: another writer owned the partition")
                out[offset] = (entry, entry_arrays)
        return [(offset, *out[offset]) for offset in sorted(out)]

    def _load(self, ref: SnapshotRef, topic, partition) -> tuple[dict, dict, dict]:
        """(caller header, arrays, envelope); _Invalid naming what is wrong; _Vanished if gone."""
        try:
            blob = self._get(ref.key)
        except FileNotFoundError:
            raise _Vanished(ref.key) from None
        try:
            stored, arrays = decode(blob)
        except CorruptSnapshot as exc:
            raise _Invalid(f"corrupt: {exc}") from None
        problem = self._identity_problem(stored, ref, topic, partition)
        if problem:
            raise _Invalid(problem)
        blob_refs = blob_lists(stored.get("shared") or {})
        if blob_refs is None:
            raise _Invalid("corrupt: malformed shared blob references")
        self._blob_refs[ref.key] = blob_refs
        self._blob_names[ref.key] = frozenset(n for names in blob_refs.values() for n in names)
        self._good[ref.key] = ref.size
        return stored["meta"], arrays, stored["snapshot"]

    def _load_shared(self, where: str, blob_refs: dict) -> dict[str, dict[str, np.ndarray]]:
        """Every shared group a full snapshot names, its pieces fetched in parallel and checked
        against their names, then joined."""
        names = sorted({n for pieces in blob_refs.values() for n in pieces})
        if not names:
            return {}
        with ThreadPoolExecutor(max_workers=min(BLOB_FETCH_THREADS, len(names))) as pool:
            loaded = dict(zip(names, pool.map(lambda n: self._load_blob(where, n), names)))
        shared = {}
        for group, pieces in blob_refs.items():
            parts = [loaded[n] for n in pieces]
            if len(parts) == 1:
                arrays = parts[0]
            elif any(p.keys() != parts[0].keys() for p in parts):
                raise _Invalid(f"shared group {group}: its pieces hold different arrays")
            else:
                try:
                    arrays = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
                except ValueError as exc:
                    raise _Invalid(f"shared group {group}: its pieces do not fit together: {exc}") from None
            self._remember_blob(where, arrays, tuple(pieces))
            shared[group] = arrays
        return shared

    def _load_blob(self, where: str, name: str) -> dict[str, np.ndarray]:
        try:
            blob = self._get(where + name)
        except FileNotFoundError:
            raise _Invalid(f"shared blob {name} is missing") from None
        try:
            stored, arrays = decode(blob)
        except CorruptSnapshot as exc:
            raise _Invalid(f"shared blob {name} is corrupt: {exc}") from None
        if f"blob-{bytes(blob[-32:]).hex()}.snap" != name or not isinstance(stored.get("blob"), dict):
            raise _Invalid(f"shared blob {name} does not hold what its name says")
        return arrays

    def _identity_problem(self, stored: dict, ref: SnapshotRef, topic, partition) -> str | None:
        env = stored.get("snapshot")
        if not isinstance(env, dict) or not isinstance(stored.get("meta"), dict):
            return "corrupt: no snapshot envelope in the header"
        layouts = (LAYOUT_VERSION, *GROUP_LAYOUTS) if ref.kind == DELTA else (LAYOUT_VERSION,)
        if env.get("layout") not in layouts:
            return f"unknown snapshot layout version {env.get('layout')!r} (this build reads {layouts})"
        if (env["layout"] in GROUP_LAYOUTS) != (stored["meta"].get("kind") == GROUP_KIND):
            return f"corrupt: layout {env['layout']} with a {stored['meta'].get('kind')!r} header"
        ours = self._envelope(ref.kind, topic, partition, ref.offset, env["layout"])
        theirs = {k: env.get(k) for k in ours}
        if theirs != ours:
            diff = ", ".join(f"{k}={theirs[k]!r} (expected {ours[k]!r})" for k in ours if theirs[k] != ours[k])
            return f"foreign snapshot: {diff}"
        return None

    def _sync(self, key: str) -> None:
        try:
            sync_local(self.store, key)
        except OSError as exc:
            raise StorageUnavailable(key, f"fsync failed: {exc}") from exc

    def _get(self, key: str) -> bytes:
        return _call("get", key, lambda: obstore.get(self.store, key).bytes())

    def _valid(self, ref: SnapshotRef, topic, partition) -> bool:
        if self._good.get(ref.key) == ref.size:
            return True
        try:
            self._load(ref, topic, partition)
        except (_Invalid, _Vanished):
            return False
        return True

    # ------------------------------------------------------------------ deleting
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
        deleted = self._delete([r for r in refs if r.offset < cutoff or (r.kind == DELTA and r.offset == cutoff)])
        return deleted + self._gc_blobs(topic, partition, kept)

    def _gc_blobs(self, topic: str, partition: int, kept: list[SnapshotRef]) -> int:
        """Delete blobs no kept full snapshot names and older than all of them (module doc)."""
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
            if ref.key not in self._blob_names:
                try:
                    self._load(ref, topic, partition)
                except (_Invalid, _Vanished):
                    return 0  # cannot tell what it needs: keep every blob
            named |= {where + name for name in self._blob_names[ref.key]}
        garbage = [k for k, m in blobs.items() if k not in named and m["last_modified"] < oldest_kept]
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
        kept = [r for r in refs if r.kind == FULL and r.offset >= offset and self._valid(r, topic, partition)]
        return deleted + self._gc_blobs(topic, partition, kept)

    def _delete(self, refs: list[SnapshotRef]) -> int:
        return self._delete_keys([r.key for r in refs])

    def _delete_keys(self, keys: list[str]) -> int:
        # One request per DELETE_BATCH keys (S3 DeleteObjects) instead of one per key: a GC after
        # each full snapshot removes every delta it covers, hundreds at 50 deletions/s.
        for start in range(0, len(keys), DELETE_BATCH):
            batch = keys[start:start + DELETE_BATCH]
            try:
                _call("delete", batch[0], obstore.delete, self.store, batch)
            except FileNotFoundError:  # LocalStore reports a missing object (having deleted the rest)
                pass
            for key in batch:
                self._good.pop(key, None)
                self._blob_names.pop(key, None)
                self._blob_refs.pop(key, None)
        return len(keys)


def _delta_entries(first: int, layout: int, header: dict, arrays: dict) -> list[tuple[int, dict, dict]]:
    """[(offset, header, arrays)] of one delta object: itself, or the members of a group."""
    try:
        return unpack_group(first, layout, header, arrays)
    except CorruptSnapshot as exc:
        raise _Invalid(f"corrupt: {exc}") from None
