"""Per-partition snapshots in object storage (obstore): create-only, checked, garbage-collected.

:class:`SnapshotStore` is what the worker uses, one per consumer group. Each of its jobs is a
module of its own: layout.py (names, envelopes, listing), writer.py (full snapshots, deltas and
delta groups, write conflicts), restore.py (the newest valid snapshot and the deltas after it),
garbage.py (gc, purge_before) and marks.py (how far releases may have gone); under them blobs.py
(shared blobs), groups.py (delta groups) and codec.py (the bytes). docs/worker.md 5.2 describes
the objects, their conflicts and outages, 5.3 delta groups, 5.4 restore and 5.7 what a corrupt
object does.
"""

from __future__ import annotations

from .backends import open_store  # noqa: F401  (open_store: the state API)
from .garbage import GarbageCollector
from .groups import (  # noqa: F401  (the state API)
    GROUP_LAYOUT_VERSION,
    STACKED_GROUP_LAYOUT_VERSION,
)
from .marks import ReleaseMarks
from .writer import SnapshotWriter


class SnapshotStore(SnapshotWriter, GarbageCollector, ReleaseMarks):
    """Full snapshots and deletion deltas of every partition of one consumer group.

    >>> import numpy as np
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
