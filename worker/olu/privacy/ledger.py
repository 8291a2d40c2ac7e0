"""The deletion ledger: one accounting entry per deletion, kept for the model's whole life.

Invariant 4 (docs/worker.md 4.4) makes the ledger outlive restarts, so it grows with every deletion,
in every epoch. Kept as a list of dicts, a worker that has honoured a million deletions would hold
~0.7 KB of Python objects per entry, and as JSON ~110 bytes per entry in every snapshot.

So entries are kept in **columns**, in segments of ``SEGMENT_ENTRIES``. An entry with exactly the
common keys of a deletion (``CORE``: i, epoch, tau, u with one step, shift, sigma, rho, in that
order; integers that fit uint32, floats) is 41 bytes: four uint32 columns (i, epoch, tau, the
step), three float64 columns (shift, sigma, rho; bit for bit) and a kind byte. An entry with more
keys after those (an algorithm's extras: memory-pair's pairs_purged, rewind's route, ...) keeps its
common part in the columns and its extras in the segment's **side table**; any other entry (many
steps, other keys or order, values that do not fit) goes there whole. A sealed side table is the
JSON of its (position, object) pairs, zlib-compressed (extras repeat their keys). Entries read back
equal to what was appended, keys in the same order.

A full segment is **sealed**: its columns become immutable arrays, the side table one uint8 array of
JSON, exported as a *shared* group ``ledger_seg{i}`` that the state store writes once and refers to
from later snapshots, like the applied-index runs. Only the open segment's entries travel in the
snapshot header (as JSON). Which entries share a segment depends only on their count, so a replay
seals exactly the same bytes. Segments sealed as one JSON array (state format 3) are read and
sealed again in columns.

Reading is lazy: ``len`` is free, ``ledger[-1]`` and iteration (either way) decode sealed segments
on demand.

>>> ledger = Ledger(segment_entries=2)
>>> for i in range(1, 6):
...     ledger.append({"i": i})
>>> len(ledger), ledger.sealed, ledger[-1], ledger[0], [e["i"] for e in ledger]
(5, 2, {'i': 5}, {'i': 1}, [1, 2, 3, 4, 5])
>>> [e["i"] for e in reversed(ledger)]
[5, 4, 3, 2, 1]
>>> open_entries, sealed, shared = ledger.export()
>>> Ledger.load(open_entries, sealed, shared, segment_entries=2) == ledger
True
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator, Sequence

import numpy as np
import orjson

__all__ = ["CORE", "SEGMENT_ENTRIES", "Ledger"]

SEGMENT_ENTRIES = 4096  # ~170 KB of columns per sealed segment of common entries
_SEGMENT_GROUP = re.compile(r"ledger_seg(\d+)")
CORE = ("i", "epoch", "tau", "u", "shift", "sigma", "rho")
_INTS = ("i", "epoch", "tau", "u0")  # uint32; u0: the one step of u
_FLOATS = ("shift", "sigma", "rho")  # float64
_COLUMNS = {**{c: np.uint32 for c in _INTS}, **{c: np.float64 for c in _FLOATS}, "kind": np.uint8}
CORE_ONLY, CORE_AND_EXTRAS, WHOLE = 0, 1, 2  # the kind column
_U32 = 2**32


def _kind(entry: dict) -> int:
    """How ``entry`` is stored: CORE_ONLY, CORE_AND_EXTRAS (its first keys are CORE) or WHOLE."""
    keys = tuple(entry)
    if keys[:len(CORE)] != CORE:
        return WHOLE
    u = entry["u"]
    ints = (entry["i"], entry["epoch"], entry["tau"], u[0] if isinstance(u, list) and len(u) == 1
            else None)
    if not all(type(v) is int and 0 <= v < _U32 for v in ints):  # bool is not int here
        return WHOLE
    if not all(isinstance(entry[c], float) for c in _FLOATS):
        return WHOLE
    return CORE_ONLY if len(keys) == len(CORE) else CORE_AND_EXTRAS


class _Columns:
    """One segment: a column per common field, ``kind`` per entry, and the side table (position ->
    the extras, or the whole entry)."""

    __slots__ = ("cols", "side", "count", "capacity")

    def __init__(self, capacity: int):
        self.cols = {c: np.zeros(min(capacity, 16), t) for c, t in _COLUMNS.items()}
        self.side: dict[int, dict] = {}
        self.count, self.capacity = 0, capacity

    def append(self, entry: dict) -> None:
        kind = _kind(entry)
        if kind == WHOLE:  # its fields stay in the side table; the columns keep zeros there
            j = self._grow()
            self.cols["kind"][j] = WHOLE
            self.side[j] = dict(entry)
            self.count = j + 1
            return
        j = self._put(kind, entry["i"], entry["epoch"], entry["tau"], entry["u"][0], entry["shift"],
                      entry["sigma"], entry["rho"])
        if kind == CORE_AND_EXTRAS:
            self.side[j] = {k: v for k, v in entry.items() if k not in CORE}

    def append_core(self, i: int, epoch: int, tau: int, u0: int, shift: float, sigma: float,
                    rho: float) -> bool:
        """:meth:`append` of a CORE_ONLY entry given as its fields (a deletion's common case,
        without building and inspecting a dict); False, nothing
        stored, if one does not fit its column."""
        if not (type(i) is int and type(epoch) is int and type(tau) is int and type(u0) is int
                and 0 <= i < _U32 and 0 <= epoch < _U32 and 0 <= tau < _U32 and 0 <= u0 < _U32
                and type(shift) is float and type(sigma) is float and type(rho) is float):
            return False
        self._put(CORE_ONLY, i, epoch, tau, u0, shift, sigma, rho)
        return True

    def _put(self, kind: int, i, epoch, tau, u0, shift, sigma, rho) -> int:
        """Write one entry's kind and common fields at the next
        position (counted); that position."""
        j = self._grow()
        cols = self.cols
        cols["kind"][j] = kind
        cols["i"][j], cols["epoch"][j], cols["tau"][j], cols["u0"][j] = i, epoch, tau, u0
        cols["shift"][j], cols["sigma"][j], cols["rho"][j] = shift, sigma, rho
        self.count = j + 1
        return j

    def _grow(self) -> int:
        """The next position, the columns grown by doubling if they are full (a model with few
        deletions holds little); the caller counts it."""
        j = self.count
        if j == len(self.cols["kind"]):
            size = min(2 * j, self.capacity)
            self.cols = {c: np.concatenate([a, np.zeros(size - j, a.dtype)]) for c,
                         a in self.cols.items()}
        return j

    def entries(self) -> list[dict]:
        return _entries(self.cols, self.side, self.count)

    def seal(self) -> dict[str, np.ndarray]:
        """The shared group of this (full) segment: immutable arrays."""
        group = {c: a[:self.count].copy() for c, a in self.cols.items()}
        side = sorted(self.side.items())
        # extras repeat their keys: ~10x
        packed = zlib.compress(orjson.dumps(side), 6) if side else b""
        group["side"] = np.frombuffer(packed, np.uint8).copy()
        for arr in group.values():
            arr.flags.writeable = False  # shared with snapshots in flight
        return group


def _entries(cols: dict, side: dict, count: int) -> list[dict]:
    """The entries of a segment from its columns and decoded side table."""
    out = []
    lists = {c: cols[c][:count].tolist() for c in _COLUMNS}
    rows = zip(lists["kind"], lists["i"], lists["epoch"], lists["tau"], lists["u0"], lists["shift"],
               lists["sigma"], lists["rho"])
    for j, (kind, i, epoch, tau, u0, shift, sigma, rho) in enumerate(rows):
        if kind == WHOLE:
            out.append(dict(side[j]))
            continue
        entry = {"i": i, "epoch": epoch, "tau": tau, "u": [u0], "shift": shift, "sigma": sigma,
                 "rho": rho}
        if kind == CORE_AND_EXTRAS:
            entry.update(side[j])
        out.append(entry)
    return out


def _unseal(segment: dict[str, np.ndarray], count: int) -> list[dict]:
    """The entries of a sealed segment (checked here, not at load: a restore decodes none)."""
    if "entries" in segment:  # state format 3: one JSON array of the entries
        entries = orjson.loads(segment["entries"].tobytes())
        if (not isinstance(entries, list) or len(entries) != count
                or not all(isinstance(e, dict) for e in entries)):
            raise ValueError(f"a ledger segment is not a JSON list of {count} objects")
        return entries
    try:
        side = orjson.loads(
            zlib.decompress(segment["side"].tobytes())) if len(segment["side"]) else []
    except zlib.error as exc:
        raise ValueError(f"a ledger segment's side table does not decompress: {exc}") from None
    if not isinstance(side, list) or not all(isinstance(p, list) and len(p) == 2 for p in side):
        raise ValueError("a ledger segment's side table is not a list of [position, object] pairs")
    table = {p: e for p, e in side}
    kinds = segment["kind"]
    want = set(np.flatnonzero(kinds != CORE_ONLY).tolist())
    if set(table) != want or not all(isinstance(e, dict)
                                     for e in table.values()) or (kinds > WHOLE).any():
        raise ValueError("a ledger segment's side table does not match its kinds")
    return _entries(segment, table, count)


def _checked_group(group: dict, count: int) -> dict[str, np.ndarray]:
    """A stored segment group, its arrays' dtypes and lengths checked (adopted, not copied)."""
    if set(group) == {"entries"}:
        seg = np.asarray(group["entries"])
        if seg.dtype != np.uint8 or seg.ndim != 1:
            raise ValueError("a ledger segment is not a 1-D uint8 array")
        return {"entries": seg}
    if set(group) != {*_COLUMNS, "side"}:
        raise ValueError(f"a ledger segment has the arrays {sorted(group)}")
    out = {}
    for name, arr in group.items():
        arr = np.asarray(arr)
        want = np.uint8 if name == "side" else _COLUMNS[name]
        if arr.dtype != want or arr.ndim != 1 or (name != "side" and len(arr) != count):
            raise ValueError(
                f"ledger segment column {name!r} is not 1-D {np.dtype(want)} of {count}")
        out[name] = arr
    return out


class Ledger(Sequence):
    """Append-only sequence of ledger entries (dicts), in
    sealed segments of columns (module doc)."""

    def __init__(self, *, segment_entries: int | None = None):
        segment_entries = SEGMENT_ENTRIES if segment_entries is None else segment_entries
        if not (isinstance(segment_entries, int) and segment_entries >= 1):
            raise ValueError(f"segment_entries must be an integer >= 1, got {segment_entries!r}")
        self.segment_entries = segment_entries
        self._segments: list[dict[str, np.ndarray]] = []
        self._open = _Columns(segment_entries)

    # ------------------------------------------------------------------ writing
    def append(self, entry: dict) -> None:
        self._open.append(entry)
        self._seal_if_full()

    def append_core(self, i: int, epoch: int, tau: int, u: int, shift: float, sigma: float,
                    rho: float) -> None:
        """``append({"i": i, "epoch": epoch, "tau": tau, "u": [u], "shift": shift, "sigma": sigma,
        "rho": rho})``, the same stored bytes, without the dict (a deletion's hot path)."""
        if not self._open.append_core(i, epoch, tau, u, shift, sigma, rho):
            self._open.append(
                {"i": i, "epoch": epoch, "tau": tau, "u": [u], "shift": shift, "sigma": sigma,
                 "rho": rho})
        self._seal_if_full()

    def _seal_if_full(self) -> None:
        if self._open.count == self.segment_entries:
            self._segments.append(self._open.seal())
            self._open = _Columns(self.segment_entries)

    # ------------------------------------------------------------------ reading
    @property
    def sealed(self) -> int:
        """Number of sealed segments."""
        return len(self._segments)

    @property
    def nbytes(self) -> int:
        """Bytes of the sealed arrays and of the open segment's columns (its side table aside)."""
        return (sum(a.nbytes for seg in self._segments for a in seg.values())
                + sum(a.nbytes for a in self._open.cols.values()))

    def _open_entries(self) -> list[dict]:
        return self._open.entries()

    def __len__(self) -> int:
        return len(self._segments) * self.segment_entries + self._open.count

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError("ledger index out of range")
        segment, offset = divmod(j, self.segment_entries)
        if segment == len(self._segments):
            return _entries({c: a[offset:offset + 1] for c, a in self._open.cols.items()},
                            {0: self._open.side[offset]} if offset in self._open.side else {}, 1)[0]
        return _unseal(self._segments[segment], self.segment_entries)[offset]

    def __iter__(self) -> Iterator[dict]:
        for segment in self._segments:
            yield from _unseal(segment, self.segment_entries)
        yield from self._open_entries()

    def __reversed__(self) -> Iterator[dict]:
        """Newest first, decoding each sealed segment once (``Sequence``'s default would decode
        one per entry); a reader of the tail stops early and leaves older segments sealed."""
        yield from reversed(self._open_entries())
        for segment in reversed(self._segments):
            yield from reversed(_unseal(segment, self.segment_entries))

    def __eq__(self, other) -> bool:
        if isinstance(other, Ledger):
            return len(self) == len(other) and list(self) == list(other)
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"Ledger({len(self)} entries, {self.sealed} sealed segments)"

    # -------------------------------------------------------------------- state
    def export(self) -> tuple[list[dict], int, dict[str, dict[str, np.ndarray]]]:
        """(open entries (new dicts), number of sealed segments, shared groups ``ledger_seg{i}``).

        The sealed arrays are immutable and handed out without copying.
        """
        shared = {f"ledger_seg{i}": seg for i, seg in enumerate(self._segments)}
        return self._open_entries(), len(self._segments), shared

    @classmethod
    def load(cls, open_entries: list, sealed: int, shared: dict | None,
             *, segment_entries: int | None = None,
             stored_segment_entries: int | None = None) -> Ledger:
        """Inverse of :meth:`export`; the sealed arrays are adopted, not copied. ValueError if
        inconsistent. State written with another segment size (``stored_segment_entries``), before
        segments existed (all entries open), or with JSON segments (format 3), is sealed again in
        columns of this size."""
        shared = shared or {}
        numbers = sorted(int(m[1]) for g in shared if (m := _SEGMENT_GROUP.fullmatch(g)))
        if not isinstance(sealed, int) or sealed < 0 or numbers != list(range(sealed)):
            raise ValueError(f"ledger segments are not numbered 0..{sealed - 1}: {numbers}")
        if not isinstance(open_entries, list) or not all(isinstance(e, dict) for e in open_entries):
            raise ValueError("the open ledger entries are not a list of objects")
        ledger = cls(segment_entries=segment_entries)
        stored = stored_segment_entries or ledger.segment_entries
        segments = [_checked_group(shared[f"ledger_seg{i}"], stored) for i in range(sealed)]
        columnar = all("entries" not in seg for seg in segments)
        if (columnar and stored == ledger.segment_entries
                and len(open_entries) < ledger.segment_entries):
            ledger._segments = segments
        else:
            # another segmentation or format-3 JSON segments: seal
            # again (deterministic in the count)
            for seg in segments:
                for entry in _unseal(seg, stored):
                    ledger.append(entry)
        for entry in open_entries:
            ledger.append(entry)
        return ledger
