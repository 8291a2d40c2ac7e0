"""Reading a partition back: the newest valid full snapshot, the shared blobs it names and every
delta after it, each object checked to be what its name says (docs/worker.md 5.4, 5.7)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .blobs import BLOB_FETCH_THREADS, blob_lists
from .codec import decode
from .exceptions import CorruptSnapshot, SnapshotConflict, SnapshotCorrupt
from .groups import GROUP_KIND, GROUP_LAYOUTS, unpack_group
from .layout import DELTA, FULL, LAYOUT_VERSION, GroupObjects, SnapshotRef
from .objects import same_arrays

_RELIST_ATTEMPTS = 3


class _Invalid(Exception):
    """Internal: an object that decoded badly or does not belong here; ``args[0]`` is the
    reason."""


class _Vanished(Exception):
    """Internal: a listed object was deleted before we read it (another replica's gc)."""


@dataclass
class Restored:
    key: str | None  # the full snapshot loaded; None: no full snapshot yet, only deltas
    offset: int | None  # next input offset to consume; None: from the log start
    header: dict  # the caller's header of the full snapshot
    arrays: dict[str, np.ndarray]
    # group -> arrays (blobs)
    shared: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    deltas: list[tuple[int, dict, dict[str, np.ndarray]]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (key, reason), newer than key
    created_at: str | None = None


class SnapshotReader(GroupObjects):
    """Restores a partition of one consumer group, and tells which stored objects are valid."""

    def restore(self, topic: str, partition: int,
                on_corrupt: str = "fallback") -> Restored | None:
        """The newest valid full snapshot and every delta after it; None if nothing is stored.

        Only deltas (a deletion before the first full snapshot): ``key`` and ``offset`` are None
        and the state is empty; start a fresh model at the log start and apply them. Objects that
        vanish meanwhile (another replica's gc) make it list again, a few times.
        """
        if on_corrupt not in ("fallback", "fail"):
            raise ValueError(f"on_corrupt must be 'fallback' or 'fail', got {on_corrupt!r}")
        for _ in range(_RELIST_ATTEMPTS):
            try:
                return self._restore_listed(topic, partition, on_corrupt)
            except _Vanished:  # garbage-collected since the listing: a newer snapshot exists
                continue
        raise SnapshotConflict(self.directory(topic, partition),
                               "objects keep vanishing during restore: another writer is still "
                               "active on this partition")

    def _restore_listed(self, topic, partition, on_corrupt) -> Restored | None:
        refs = self.list(topic, partition)
        fulls = [r for r in reversed(refs) if r.kind == FULL]
        skipped: list[tuple[str, str]] = []
        for ref in fulls:
            try:
                header, arrays, envelope = self._load(ref, topic, partition)
                shared = self._load_shared(self.directory(topic, partition),
                                           self._blob_refs[ref.key])
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
                                                f"({'; '.join(r for _, r in skipped)}); starting "
                                                f"fresh would reset the deletion counter and "
                                                f"redraw deletion noise")
        deltas = self._deltas(refs, -1, topic, partition)
        return Restored(None, None, {}, {}, {}, deltas) if deltas else None

    def _deltas(self, refs, after: int, topic, partition) -> list:
        """Every delta past ``after``, in order; any unusable one is fatal (docs/worker.md 5.7).

        A group is named by its first delta and never spans a full snapshot's offset (the writer
        seals its queue when it captures one), so objects named at or before ``after`` are
        skipped.
        """
        out: dict[int, tuple[dict, dict]] = {}
        for ref in (r for r in refs if r.kind == DELTA and r.offset > after):
            try:
                header, arrays, envelope = self._load(ref, topic, partition)
                entries = _delta_entries(ref.offset, envelope["layout"], header, arrays)
            except _Invalid as bad:
                raise SnapshotCorrupt(ref.key, f"{bad.args[0]}; this deletion's post-noise state "
                                               "is lost and must not be redrawn (invariant "
                                               "2)") from None
            for offset, entry, entry_arrays in entries:
                if offset <= after:
                    continue
                if offset in out and (out[offset][0] != entry
                                      or not same_arrays(entry_arrays, out[offset][1])):
                    raise SnapshotConflict(ref.key, f"two different post-noise states stored for "
                                                    f"the deletion at offset {offset}: another "
                                                    f"writer owned the partition")
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
                    raise _Invalid(f"shared group {group}: its pieces do not fit together: "
                                   f"{exc}") from None
            self._stored_groups.remember(where, arrays, tuple(pieces))
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
        if (f"blob-{bytes(blob[-32:]).hex()}.snap" != name
                or not isinstance(stored.get("blob"), dict)):
            raise _Invalid(f"shared blob {name} does not hold what its name says")
        return arrays

    def _identity_problem(self, stored: dict, ref: SnapshotRef, topic, partition) -> str | None:
        env = stored.get("snapshot")
        if not isinstance(env, dict) or not isinstance(stored.get("meta"), dict):
            return "corrupt: no snapshot envelope in the header"
        layouts = (LAYOUT_VERSION, *GROUP_LAYOUTS) if ref.kind == DELTA else (LAYOUT_VERSION,)
        if env.get("layout") not in layouts:
            return (f"unknown snapshot layout version {env.get('layout')!r} (this build reads "
                    f"{layouts})")
        if (env["layout"] in GROUP_LAYOUTS) != (stored["meta"].get("kind") == GROUP_KIND):
            return f"corrupt: layout {env['layout']} with a {stored['meta'].get('kind')!r} header"
        ours = self._envelope(ref.kind, topic, partition, ref.offset, env["layout"])
        theirs = {k: env.get(k) for k in ours}
        if theirs != ours:
            diff = ", ".join(f"{k}={theirs[k]!r} (expected {ours[k]!r})"
                             for k in ours if theirs[k] != ours[k])
            return f"foreign snapshot: {diff}"
        return None

    def _valid(self, ref: SnapshotRef, topic, partition) -> bool:
        if self._good.get(ref.key) == ref.size:
            return True
        try:
            self._load(ref, topic, partition)
        except (_Invalid, _Vanished):
            return False
        return True

    def _named_blobs(self, ref: SnapshotRef, topic, partition) -> frozenset[str] | None:
        """The blob names full snapshot ``ref`` refers to (read from it unless known); None if it
        cannot be read."""
        if ref.key not in self._blob_names:
            try:
                self._load(ref, topic, partition)
            except (_Invalid, _Vanished):
                return None
        return self._blob_names[ref.key]


def _delta_entries(first: int, layout: int, header: dict,
                   arrays: dict) -> list[tuple[int, dict, dict]]:
    """[(offset, header, arrays)] of one delta object: itself, or the members of a group."""
    try:
        return unpack_group(first, layout, header, arrays)
    except CorruptSnapshot as exc:
        raise _Invalid(f"corrupt: {exc}") from None
