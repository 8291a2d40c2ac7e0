"""What a partition's runner hands back to the loop: releases, dead letters, counts, snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Release:
    key: bytes
    value: bytes
    headers: list
    version: int
    trigger: str
    deletion_started: float | None = None  # monotonic time the delete was handled (latency metric)
    # the value's privacy.noise_std and noise_to_signal, for the gauges
    noise_std: float | None = None
    noise_to_signal: float | None = None
    # The quality figure as of this release (OLU_QUALITY_METRIC): exported when the release is
    # published, so the gauge never shows a state whose deletion is not yet durable.
    prequential_loss: float | None = None
    # the receipts of the requests this release is the first to reflect (output/receipts.py):
    # produced after it, never before
    receipts: list = field(default_factory=list)


@dataclass
class DeadLetterOut:
    message: object
    reason: str
    detail: str


@dataclass
class Outcome:
    """What one call produced for the loop to publish;
    ``resume_at`` is set when processing stopped."""

    releases: list[Release] = field(default_factory=list)
    dead_letters: list[DeadLetterOut] = field(default_factory=list)
    resume_at: int | None = None
    inserts: int = 0
    deletes: int = 0
    tombstones: int = 0  # of ``deletes``: null-value deletes (metric op="tombstone")
    deletions: list = field(default_factory=list)  # the engine's Deletion results, in order
    skipped: int = 0
    refused: int = 0  # deletes refused for an exhausted privacy budget (also in ``dead_letters``)
    # feature spec field name -> inserts whose value was clipped
    clipped: dict = field(default_factory=dict)
    # receipts that wait for no release: requests with nothing to unlearn, refused ones
    receipts: list = field(default_factory=list)


@dataclass
class PendingSnapshot:
    offset: int
    header: dict
    arrays: dict
    shared: dict  # immutable array groups: the store writes each once (state/store.py)
    purge_due_at: float | None  # set: objects before ``offset`` must be purged (invariant 6)
    since_previous: float = 0.0  # seconds since the previous snapshot of the partition began
