"""Exactly-once output under Kafka transactions: what an earlier process already published.

With ``transactional`` on, every transaction holds the releases and dead letters of a stretch of
input together with each partition's *processed* position (the group offset) and, in the offset's
metadata, the newest release version published so far. Both commit atomically, so after a crash
the group offset says exactly how far the committed output goes:

- every dead letter of an input offset below it is in a committed transaction;
- every release up to the version in the metadata is, and none after it.

The restarted worker restores its newest durable snapshot (at or before the group offset) and
replays the input from there. Replay is deterministic between deletions, and each deletion takes
its stored post-noise state, so the replayed state equals the one that was published; this module
tells the loop which of the replayed outputs to drop instead of publishing them a second time.

A transaction commits a partition's position only when every release of the input before it has
been handed to the producer (no release still waits in the outbox for its deletion delta), so a
position never covers a release that was not published.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Offset metadata of a transactional commit: ``olu1:released=<version>`` (or ``=none``).
METADATA_PREFIX = "olu1:released="


def encode_metadata(released_version: int | None) -> str:
    """The metadata of a committed position.

    >>> encode_metadata(120), encode_metadata(None)
    ('olu1:released=120', 'olu1:released=none')
    """
    return METADATA_PREFIX + ("none" if released_version is None else str(int(released_version)))


def decode_metadata(metadata: str | None) -> tuple[bool, int | None]:
    """(is ours, newest committed release version) of an offset's metadata.

    >>> decode_metadata("olu1:released=120"), decode_metadata("olu1:released=none"), decode_metadata("")
    ((True, 120), (True, None), (False, None))
    """
    if not metadata or not metadata.startswith(METADATA_PREFIX):
        return False, None
    value = metadata[len(METADATA_PREFIX):]
    if value == "none":
        return True, None
    try:
        return True, int(value)
    except ValueError:
        return False, None


@dataclass(frozen=True)
class CommittedOutput:
    """One partition's output already in committed transactions.

    ``offset``: the dead letters of every input offset below it are committed.
    ``released_version``: every release up to this version is committed (None: none is).
    """

    offset: int
    released_version: int | None

    @classmethod
    def from_commit(cls, offset: int, metadata: str | None) -> CommittedOutput | None:
        """From a committed group offset (negative: none) and its metadata.

        A commit without our metadata (written by a worker before exactly-once output) committed
        the snapshot offset with everything produced up to then: releases up to that offset
        count as published, later ones are published again (at-least-once, as it was then).

        >>> CommittedOutput.from_commit(500, "olu1:released=480")
        CommittedOutput(offset=500, released_version=480)
        >>> CommittedOutput.from_commit(500, None)
        CommittedOutput(offset=500, released_version=500)
        >>> CommittedOutput.from_commit(-1001, "") is None
        True
        """
        if offset < 0:
            return None
        ours, version = decode_metadata(metadata)
        return cls(offset, version if ours else offset)

    def has_release(self, version: int) -> bool:
        return self.released_version is not None and version <= self.released_version

    def has_dead_letter(self, input_offset: int) -> bool:
        return input_offset < self.offset
