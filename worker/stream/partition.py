"""One (topic, partition): its model, its position in the input, and when to release and snapshot.

No Kafka calls here: the loop hands in fetched messages and publishes what comes back. That keeps
the privacy-critical ordering in one small place:

1. a deletion that changed the model is made durable (a delta object holding the post-noise state)
   *before* its release is handed to the loop (invariant 2);
2. if that write fails, processing of the partition stops at that point (``blocked``) and resumes
   only once the delta is durable; the noisy state is never published before;
3. on restore, a delete whose delta exists takes the stored post-noise state instead of drawing
   fresh noise, so a crash never yields two independent noisy views of one deletion.

Between deletions everything is deterministic (invariant 3): learn_one in a loop and learn_many
are bit-identical, so how the broker batches messages cannot change the result.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..olu.base import load_model
from ..olu.errors import InvalidExample
from ..state.store import StorageUnavailable
from .decode import DeadLetter, Delete, Insert, decode_event
from .releases import release_headers, release_key, release_value

# Algorithms that keep raw retained examples in their state: after a deletion, every stored object
# that still holds the deleted record must go within the purge bound (invariant 6).
KEEPS_EXAMPLES = frozenset({"active-d2d", "active-anchor", "active-newton", "retrain"})


@dataclass
class Release:
    key: bytes
    value: bytes
    headers: list
    version: int
    trigger: str
    deletion_started: float | None = None  # monotonic time the delete was handled (latency metric)


@dataclass
class DeadLetterOut:
    message: object
    reason: str
    detail: str


@dataclass
class Outcome:
    """What one call produced for the loop to publish; ``resume_at`` is set when processing stopped."""

    releases: list[Release] = field(default_factory=list)
    dead_letters: list[DeadLetterOut] = field(default_factory=list)
    resume_at: int | None = None
    inserts: int = 0
    deletes: int = 0
    tombstones: int = 0  # of ``deletes``: null-value deletes (metric op="tombstone")
    deletions: list = field(default_factory=list)  # the engine's Deletion results, in order
    skipped: int = 0


@dataclass
class PendingSnapshot:
    offset: int
    header: dict
    arrays: dict
    purge_due_at: float | None  # set: objects before ``offset`` must be purged (invariant 6)


@dataclass
class _PendingDelta:
    offset: int
    header: dict
    arrays: dict
    release: Release


class PartitionRunner:
    def __init__(self, topic: str, partition: int, model, *, snapshots, settings, model_name: str,
                 next_offset: int | None = None, event_time_ms: int = 0, replay_deltas: dict | None = None):
        self.topic, self.partition, self.model = topic, partition, model
        self.snapshots, self.settings, self.model_name = snapshots, settings, model_name
        self.next_offset = next_offset  # None: nothing applied yet, start at the log's beginning
        self.event_time_ms = event_time_ms
        self.replay_deltas = dict(replay_deltas or {})  # delete offset + 1 -> stored post-noise state
        self.snapshot_offset = next_offset  # the offset a durable full snapshot covers
        self.released_version: int | None = None
        self.events_since_release = 0
        self.events_since_snapshot = 0
        now = time.monotonic()
        self.last_release_at = self.last_snapshot_at = now
        self.purge_due_at: float | None = None  # active algorithms: raw features to purge by then
        self.snapshot_in_flight = False
        self.blocked: _PendingDelta | None = None
        self.prequential_loss: float | None = None

    # ----------------------------------------------------------------- restore
    @classmethod
    def restore(cls, topic, partition, *, snapshots, settings, model_factory, model_name, on_corrupt):
        restored = snapshots.restore(topic, partition, on_corrupt=on_corrupt)
        if restored is None:
            return cls(topic, partition, model_factory(), snapshots=snapshots, settings=settings,
                       model_name=model_name), None
        deltas = {off: (hdr, arrs) for off, hdr, arrs in restored.deltas}
        if restored.key is None:  # deletions before the first full snapshot: replay from the start
            return cls(topic, partition, model_factory(), snapshots=snapshots, settings=settings,
                       model_name=model_name, replay_deltas=deltas), restored
        model = load_model({"meta": restored.header["model"], "arrays": restored.arrays})
        runner = cls(topic, partition, model, snapshots=snapshots, settings=settings, model_name=model_name,
                     next_offset=restored.offset, event_time_ms=restored.header.get("event_time_ms", 0),
                     replay_deltas=deltas)
        return runner, restored

    # ----------------------------------------------------------------- processing
    def process(self, messages) -> Outcome:
        """Apply fetched messages (offset order). Stops at a deletion whose delta is not durable."""
        out = Outcome()
        batch: list = []
        for msg in messages:
            offset = msg.offset()
            if self.next_offset is not None and offset < self.next_offset:
                continue  # already reflected (a re-fetch after a seek)
            try:
                event = decode_event(msg.key(), msg.value(), dim=self.model.dim,
                                     max_bytes=self.settings.max_record_bytes)
            except DeadLetter as dead:
                self._flush(batch, out)
                out.dead_letters.append(DeadLetterOut(msg, dead.reason, dead.detail))
                self._advance(msg)
                continue
            if isinstance(event, Insert):
                batch.append((msg, event))
                continue
            self._flush(batch, out)
            if not self._delete(msg, event, out):
                out.resume_at = offset + 1
                return out
        self._flush(batch, out)
        self._release_if_due(out)
        return out

    def _advance(self, msg) -> None:
        self.next_offset = msg.offset() + 1
        kind, ts = msg.timestamp()
        if kind and ts > self.event_time_ms:  # keep it monotone: released_at never goes back
            self.event_time_ms = ts
        self.events_since_release += 1
        self.events_since_snapshot += 1

    def _flush(self, batch: list, out: Outcome) -> None:
        if not batch:
            return
        ids = [ev.id for _, ev in batch]
        X = np.array([ev.x for _, ev in batch], dtype=np.float64)  # decode checked: numbers, length dim
        y = np.array([ev.y for _, ev in batch], dtype=np.float64)
        self._observe_loss(X, y)
        dead = 0
        try:
            applied = self.model.learn_many(ids, X, y)
        except InvalidExample:
            # Rare: find the bad rows one by one (learn_many changed nothing; learn_one is
            # bit-identical to it, so the result does not depend on this path being taken).
            applied = 0
            for msg, ev in batch:
                try:
                    applied += self.model.learn_one(ev.id, ev.x, ev.y)
                except InvalidExample as bad:
                    out.dead_letters.append(DeadLetterOut(msg, bad.reason, str(bad)))
                    dead += 1
        out.inserts += applied
        out.skipped += len(batch) - applied - dead  # inserts of ids deleted before they arrived
        self._advance_many([msg for msg, _ in batch])
        batch.clear()

    def _advance_many(self, messages: list) -> None:
        """``_advance`` for a run of messages, without per-message bookkeeping."""
        newest = max((ts for kind, ts in (m.timestamp() for m in messages) if kind), default=0)
        self.event_time_ms = max(self.event_time_ms, newest)
        self.next_offset = messages[-1].offset() + 1
        self.events_since_release += len(messages)
        self.events_since_snapshot += len(messages)

    def _observe_loss(self, X: np.ndarray, y: np.ndarray) -> None:
        """Prequential (test-then-train) loss of the current model on the incoming batch."""
        margin = X @ self.model.z
        if self.model.loss.name == "ridge":
            losses = 0.5 * (margin - y) ** 2
        else:
            losses = np.logaddexp(0.0, -np.where(y == 0, -1.0, y) * margin)
        mean = float(np.mean(losses))
        if np.isfinite(mean):
            prev = self.prequential_loss
            self.prequential_loss = mean if prev is None else 0.99 * prev + 0.01 * mean

    def _delete(self, msg, event: Delete, out: Outcome) -> bool:
        started = time.monotonic()
        after = msg.offset() + 1
        stored = self.replay_deltas.pop(after, None)
        post_state = None if stored is None else self._post_state(stored)
        deletion = self.model.unlearn_one(event.id, post_state=post_state)
        self._advance(msg)
        out.deletes += 1
        out.tombstones += event.tombstone
        out.deletions.append(deletion)
        if not deletion.changed_model:
            return True
        if self.settings.algorithm in KEEPS_EXAMPLES and self.purge_due_at is None:
            # Snapshot at half the bound, leaving the other half for the write and the purge.
            self.purge_due_at = started + self.settings.purge_bound_seconds / 2
        release = self._release("deletion", deletion_started=started)
        if stored is not None:  # replaying: this exact post-noise state is already durable
            out.releases.append(release)
            return True
        header, arrays = self._delta_payload(after)
        try:
            self.snapshots.write_delta(self.topic, self.partition, after, header, arrays)
        except StorageUnavailable:
            self.blocked = _PendingDelta(after, header, arrays, release)
            return False
        out.releases.append(release)
        return True

    def retry_durable(self) -> Release | None:
        """Try again to store the blocked deletion's delta; its release once durable."""
        pending = self.blocked
        if pending is None:
            return None
        self.snapshots.write_delta(self.topic, self.partition, pending.offset, pending.header, pending.arrays)
        self.blocked = None
        return pending.release

    def _delta_payload(self, after: int) -> tuple[dict, dict]:
        m = self.model
        header = {"kind": "delta", "offset": after, "event_time_ms": self.event_time_ms,
                  "t": m.t, "epoch": m.epoch, "deletions": m.accountant.lifetime_deletions}
        return header, {"z": m.z.copy()}

    @staticmethod
    def _post_state(stored) -> dict:
        header, arrays = stored
        return {"z": arrays["z"], "t": header["t"], "epoch": header["epoch"], "deletions": header["deletions"]}

    # ----------------------------------------------------------------- releases
    def _release(self, trigger: str, deletion_started: float | None = None) -> Release:
        value = release_value(model_name=self.model_name, topic=self.topic, partition=self.partition,
                              offset=self.next_offset, event_time_ms=self.event_time_ms, model=self.model)
        self.released_version = self.next_offset
        self.events_since_release = 0
        self.last_release_at = time.monotonic()
        return Release(release_key(self.topic, self.partition), value, release_headers(trigger),
                       self.next_offset, trigger, deletion_started)

    def _release_if_due(self, out: Outcome) -> None:
        every = self.settings.release_every_events
        if every and self.events_since_release >= every and self._unreleased():
            out.releases.append(self._release("events"))

    def _unreleased(self) -> bool:
        return self.next_offset is not None and self.next_offset != self.released_version

    def tick(self, now: float) -> Release | None:
        """Timer releases: every T seconds when something changed since the last one."""
        every = self.settings.release_every_seconds
        if every and self.blocked is None and self._unreleased() and now - self.last_release_at >= every:
            return self._release("interval")
        return None

    def final_release(self) -> Release | None:
        return self._release("final") if self.blocked is None and self._unreleased() else None

    # ----------------------------------------------------------------- snapshots
    def snapshot_due(self, now: float) -> bool:
        if (self.blocked is not None or self.snapshot_in_flight or self.next_offset is None
                or self.next_offset == self.snapshot_offset):
            return False
        s = self.settings
        return bool(
            (s.snapshot_every_events and self.events_since_snapshot >= s.snapshot_every_events)
            or (s.snapshot_every_seconds and now - self.last_snapshot_at >= s.snapshot_every_seconds)
            or (self.purge_due_at is not None and now >= self.purge_due_at)
        )

    # A snapshot has three steps so the slow middle one can leave the loop thread:
    # begin (loop thread: a consistent copy), write (any thread: store I/O only), finish (loop).
    def begin_snapshot(self) -> PendingSnapshot:
        state = self.model.export_state()
        header = {"kind": "full", "offset": self.next_offset, "event_time_ms": self.event_time_ms,
                  "model": state["meta"]}
        # Deletions after this point may need their own purge: they are not in this copy's past.
        pending = PendingSnapshot(self.next_offset, header, state["arrays"], purge_due_at=self.purge_due_at)
        self.purge_due_at = None
        self.events_since_snapshot = 0
        self.last_snapshot_at = time.monotonic()
        self.snapshot_in_flight = True
        return pending

    def write_snapshot(self, pending: PendingSnapshot):
        ref = self.snapshots.write_full(self.topic, self.partition, pending.offset, pending.header, pending.arrays)
        if pending.purge_due_at is not None:
            # Older objects may still hold a deleted record's raw features (invariant 6).
            self.snapshots.purge_before(self.topic, self.partition, pending.offset)
        else:
            self.snapshots.gc(self.topic, self.partition)
        return ref

    def finish_snapshot(self, pending: PendingSnapshot, durable: bool) -> None:
        """Record the outcome; on success the loop may commit up to ``snapshot_offset``."""
        self.snapshot_in_flight = False
        if durable:
            self.snapshot_offset = max(pending.offset, self.snapshot_offset or 0)
        elif pending.purge_due_at is not None:  # the purge is still owed
            self.purge_due_at = min(pending.purge_due_at, self.purge_due_at or pending.purge_due_at)

    def snapshot(self):
        """All three steps on the calling thread; returns the ref (raises StorageUnavailable)."""
        pending = self.begin_snapshot()
        try:
            ref = self.write_snapshot(pending)
        except BaseException:
            self.finish_snapshot(pending, durable=False)
            raise
        self.finish_snapshot(pending, durable=True)
        return ref
