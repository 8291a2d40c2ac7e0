"""The deletion ledger: one accounting entry per deletion, kept for the model's whole life.

Invariant 4 (docs/worker.md 4.4) makes the ledger outlive restarts, so it grows with every deletion, in
every epoch. Kept as a list of dicts inside each snapshot's JSON header, a worker that has honoured
a million deletions would rewrite ~110 MB of JSON in every full snapshot (every 30 s by default)
and hold ~0.7 KB of Python objects per entry.

So entries are **sealed** in segments of ``SEGMENT_ENTRIES``: a full segment becomes one immutable
uint8 array holding the JSON of its entries (~110 bytes per entry), exported as a *shared* group
``ledger_seg{i}`` that the state store writes once and refers to from later snapshots, like the
applied-index runs. Only the open segment's entries travel in the snapshot header. Which entries
share a segment depends only on their count, so a replay seals exactly the same bytes.

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
from collections.abc import Iterator, Sequence

import numpy as np
import orjson

__all__ = ["SEGMENT_ENTRIES", "Ledger"]

SEGMENT_ENTRIES = 4096  # ~450 KB of JSON per sealed segment
_SEGMENT_GROUP = re.compile(r"ledger_seg(\d+)")


def _seal(entries: list[dict]) -> np.ndarray:
    # a copy: orjson's bytes object can be up to twice the size of its content
    data = np.frombuffer(orjson.dumps(entries), np.uint8).copy()
    data.flags.writeable = False  # shared with snapshots in flight
    return data


def _unseal(segment: np.ndarray, count: int) -> list[dict]:
    """The entries of a sealed segment (checked here, not at load: a restore decodes none)."""
    entries = orjson.loads(segment.tobytes())
    if not isinstance(entries, list) or len(entries) != count or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"a ledger segment is not a JSON list of {count} objects")
    return entries


class Ledger(Sequence):
    """Append-only sequence of ledger entries (dicts), sealed in segments (see the module doc)."""

    def __init__(self, *, segment_entries: int | None = None):
        segment_entries = SEGMENT_ENTRIES if segment_entries is None else segment_entries
        if not (isinstance(segment_entries, int) and segment_entries >= 1):
            raise ValueError(f"segment_entries must be an integer >= 1, got {segment_entries!r}")
        self.segment_entries = segment_entries
        self._segments: list[np.ndarray] = []
        self._open: list[dict] = []

    # ------------------------------------------------------------------ writing
    def append(self, entry: dict) -> None:
        self._open.append(entry)
        if len(self._open) == self.segment_entries:
            self._segments.append(_seal(self._open))
            self._open = []

    # ------------------------------------------------------------------ reading
    @property
    def sealed(self) -> int:
        """Number of sealed segments."""
        return len(self._segments)

    def __len__(self) -> int:
        return len(self._segments) * self.segment_entries + len(self._open)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError("ledger index out of range")
        segment, offset = divmod(j, self.segment_entries)
        if segment == len(self._segments):
            return self._open[offset]
        return _unseal(self._segments[segment], self.segment_entries)[offset]

    def __iter__(self) -> Iterator[dict]:
        for segment in self._segments:
            yield from _unseal(segment, self.segment_entries)
        yield from self._open

    def __reversed__(self) -> Iterator[dict]:
        """Newest first, decoding each sealed segment once (``Sequence``'s default would decode
        one per entry); a reader of the tail stops early and leaves older segments sealed."""
        yield from reversed(self._open)
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
        """(open entries (copies), number of sealed segments, shared groups ``ledger_seg{i}``).

        The sealed arrays are immutable and handed out without copying.
        """
        shared = {f"ledger_seg{i}": {"entries": seg} for i, seg in enumerate(self._segments)}
        return [dict(e) for e in self._open], len(self._segments), shared

    @classmethod
    def load(cls, open_entries: list, sealed: int, shared: dict | None,
             *, segment_entries: int | None = None, stored_segment_entries: int | None = None) -> Ledger:
        """Inverse of :meth:`export`; the sealed arrays are adopted, not copied. ValueError if
        inconsistent. State written with another segment size (``stored_segment_entries``), or
        before segments existed (all entries open), is re-segmented to this one."""
        shared = shared or {}
        numbers = sorted(int(m[1]) for g in shared if (m := _SEGMENT_GROUP.fullmatch(g)))
        if not isinstance(sealed, int) or sealed < 0 or numbers != list(range(sealed)):
            raise ValueError(f"ledger segments are not numbered 0..{sealed - 1}: {numbers}")
        if not isinstance(open_entries, list) or not all(isinstance(e, dict) for e in open_entries):
            raise ValueError("the open ledger entries are not a list of objects")
        ledger = cls(segment_entries=segment_entries)
        segment_entries = ledger.segment_entries
        segments = [np.asarray(shared[f"ledger_seg{i}"]["entries"]) for i in range(sealed)]
        for seg in segments:
            if seg.dtype != np.uint8 or seg.ndim != 1:
                raise ValueError("a ledger segment is not a 1-D uint8 array")
        same_size = (stored_segment_entries or segment_entries) == segment_entries
        if same_size and len(open_entries) < segment_entries:
            ledger._segments, ledger._open = segments, [dict(e) for e in open_entries]
            return ledger
        stored = stored_segment_entries or segment_entries
        for seg in segments:  # another segmentation: rebuild it (deterministic in the count)
            for entry in _unseal(seg, stored):
                ledger.append(entry)
        for entry in open_entries:
            ledger.append(dict(entry))
        return ledger
