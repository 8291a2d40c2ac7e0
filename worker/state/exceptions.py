"""Exceptions of the state layer: snapshots that cannot be stored, read or trusted.

:class:`CorruptSnapshot` is the codec's verdict on one object's bytes; the store turns it into a
fallback to an older snapshot or, when nothing safe is left, a :class:`SnapshotCorrupt`.
"""

from __future__ import annotations

from ..exceptions import OluWorkerError

__all__ = ["CorruptSnapshot", "SnapshotConflict", "SnapshotCorrupt", "SnapshotError",
           "StorageUnavailable"]


class CorruptSnapshot(OluWorkerError, ValueError):
    """The bytes are not a valid snapshot (truncated, checksum mismatch, unknown format...)."""


class SnapshotError(OluWorkerError):
    """Base class; ``key`` names the object, ``reason`` says what is wrong with it."""

    def __init__(self, key: str | None, reason: str) -> None:
        super().__init__(f"{key}: {reason}" if key else reason)
        self.key, self.reason = key, reason


class SnapshotConflict(SnapshotError):
    """A different object already holds this key: another writer owns the partition."""


class SnapshotCorrupt(SnapshotError):
    """A snapshot or delta cannot be used (corrupt, foreign) and nothing safe is left."""


class StorageUnavailable(SnapshotError):
    """The object store did not answer (network, timeout, 5xx after retries); try again later."""
