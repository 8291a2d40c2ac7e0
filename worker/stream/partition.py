"""One (topic, partition): its model, its position in the input, and when to release and snapshot.

No Kafka calls here: the loop hands in fetched messages and publishes what comes back. That keeps
the privacy-critical ordering in one small place:

1. a deletion that changed the model is made durable (a delta object holding the post-noise state)
   *before* its release, or any later one, is handed to the loop (invariant 2; the outbox holds
   them while the delta is written in the background and learning goes on);
2. if that write fails, the partition stops (``blocked``) until the delta is durable; nothing of
   the state after the deletion is published or committed before;
3. on restore, a delete whose delta exists takes the stored post-noise state instead of drawing
   fresh noise, so a crash never yields two independent noisy views of one deletion.

Between deletions everything is deterministic (invariant 3): learn_one in a loop and learn_many
are bit-identical, so how the broker batches messages cannot change the result.
"""

from __future__ import annotations

import time
from functools import partial

from ..logs import get_logger
from ..olu import (
    Batch,
    BudgetExhausted,
    Columns,
    Forget,
    Forgotten,
    Learned,
    Published,
    apply_batch,
    load_model,
)
from ..state.marks import mark_entry
from ..wire import (
    BUDGET_RETRAINED,
    TRIGGER_DELETION,
    TRIGGER_EVENTS,
    TRIGGER_FINAL,
    TRIGGER_INTERVAL,
    release_key,
)
from .batch_steps import NewestStamps, engine_steps
from .exceptions import DeadLetter, PartialRequest
from .input.batch import DecodedBatch, decode_batch, names_labels
from .input.decode import Delete, Insert
from .input.framed_scan import FramedBatch
from .outbox import MAX_GROUP, Outbox
from .outcome import DeadLetterOut, Outcome, PendingSnapshot, Release
from .output.receipts import Receipt, receipt, request_id
from .output.releases import budget_header, release_headers, release_value, request_report
from .receipt_book import ReceiptBook
from .replay_floor import ReplayFloor
from .stored_forms import delta_payload, features_header, spec_changed

log = get_logger("olu.partition")

#: How far past the release that stores it a release mark reaches (state/marks.py): one mark per
#: this many events of progress, and a successor's replay holds releases for at most this many
#: events past the last one its predecessor could have published.
MARK_STRETCH = 50_000


class PartitionRunner:
    def __init__(self, topic: str, partition: int, model, *, snapshots, settings, model_name: str,
                 next_offset: int | None = None, event_time_ms: int = 0,
                 replay_deltas: dict | None = None,
                 delta_writer=None):
        self.topic, self.partition, self.model = topic, partition, model
        self.snapshots, self.settings, self.model_name = snapshots, settings, model_name
        self.next_offset = next_offset  # None: nothing applied yet, start at the log's beginning
        self.event_time_ms = event_time_ms
        # delete offset + 1 -> stored post-noise state
        self.replay_deltas = dict(replay_deltas or {})
        # the last stored deletion's offset + 1
        self.replay_until = max(self.replay_deltas, default=None)
        self.snapshot_offset = next_offset  # the offset a durable full snapshot covers
        self.released_version: int | None = None  # of the newest release made (published or not)
        # set on assignment: hold releases a replay makes below it
        self.replay_floor = ReplayFloor()
        # Transactional mode: the output an earlier process already committed (exactly_once.py),
        # and the newest release version handed to the producer (the next commit's metadata).
        self.committed_output = None
        self.published_version: int | None = None
        self.events_since_release = 0
        self.events_since_snapshot = 0
        now = time.monotonic()
        self.last_release_at = self.last_snapshot_at = now
        self.purge_due_at: float | None = None  # active algorithms: raw features to purge by then
        self.snapshot_in_flight = False
        # deltas and release marks, in order (delta_writer: a 1-thread executor's submit, or None)
        self.outbox = Outbox(partial(snapshots.write_entries, topic, partition), delta_writer)
        self.prequential_loss: float | None = None
        # (offset after it, report) of the newest deletion request that changed the model: every
        # release at exactly that offset carries the report, so all of them are byte-identical.
        self.request_at: tuple[int, dict] | None = None
        self.lost = False  # dropped by the lost callback: its undelivered output is the successor's
        # Coalescing (one release per poll batch for its deletions): the deltas of this batch's
        # deletions not yet handed to the outbox, and the release they owe, as (when the first of
        # them was handled, whether one of them retrained). Both are settled before any release.
        self._batch_deltas: list[tuple[int, dict, dict]] = []
        self._owed: tuple[float, bool] | None = None
        self.receipts = ReceiptBook()  # every receipt until it is delivered (receipt_book.py)
        self.marked: int | None = None  # the newest release mark, stored or queued (marks.py)

    # ----------------------------------------------------------------- restore
    @classmethod
    def restore(cls, topic, partition, *, snapshots, **kwargs):
        """The partition's runner from its stored state, and what was restored (None: nothing).
        It knows its predecessor's newest release mark (state/marks.py)."""
        runner, restored = cls._restored(topic, partition, snapshots=snapshots, **kwargs)
        runner.marked = snapshots.newest_mark(topic, partition)
        return runner, restored

    @classmethod
    def _restored(cls, topic, partition, *, snapshots, settings, model_factory, model_name,
                  on_corrupt, delta_writer=None):
        restored = snapshots.restore(topic, partition, on_corrupt=on_corrupt)
        common = dict(snapshots=snapshots, settings=settings, model_name=model_name,
                      delta_writer=delta_writer)
        if restored is None:
            return cls(topic, partition, model_factory(), **common), None
        if spec_changed(restored, settings, topic, partition):
            # OLU_FEATURES_RESET: a new model from here
            return cls(topic, partition, model_factory(), next_offset=restored.offset,
                       **common), None
        deltas = {off: (hdr, arrs) for off, hdr, arrs in restored.deltas}
        if restored.key is None:  # deletions before the first full snapshot: replay from the start
            return cls(topic, partition, model_factory(), replay_deltas=deltas, **common), restored
        model = load_model({"meta": restored.header["model"], "arrays": restored.arrays,
                            "shared": restored.shared})
        runner = cls(topic, partition, model, next_offset=restored.offset,
                     event_time_ms=restored.header.get("event_time_ms", 0), replay_deltas=deltas,
                     **common)
        if restored.header.get("request") is not None:  # the snapshot directly follows a request
            runner.request_at = (restored.offset, restored.header["request"])
        runner.receipts = ReceiptBook.restored(restored.header.get("receipts", ()))
        return runner, restored

    # ----------------------------------------------------------------- processing
    def process(self, messages) -> Outcome:
        """Apply fetched messages (offset order); ``releases`` holds those publishable now.

        After a deletion whose delta could not be stored, ``blocked`` and ``resume_at`` are set.
        """
        out = Outcome()
        out.receipts = self.receipts.take_due()  # restored ones that wait for no release
        # the input stage chooses the decoder; each message's subject (its Kafka key) is hashed
        # for a model that caps what one key contributes
        batch = decode_batch(self._unseen(messages), dim=self.model.dim,
                             max_bytes=self.settings.max_record_bytes,
                             subjects=self.model.key_cap is not None or self.model.forgets_by_key,
                             features=self.settings.feature_spec,
                             sparse=self.settings.sparse_input,
                             labels=names_labels(self.model.loss),
                             classes=getattr(self.model.loss, "classes", None))
        if (spec := self.settings.feature_spec) is not None and (
                counts := batch.count_clipped(len(spec.fields))) \
                is not None:
            out.clipped = {f.name: int(c) for f, c in zip(spec.fields, counts) if c}
        started = time.monotonic()
        steps = engine_steps(batch, self.replay_deltas, self.settings)
        scan = batch.scan
        columns = None if scan is None else Columns(scan.X, scan.y, scan.keys, scan.accepted)
        applied = apply_batch(self.model,
                              Batch(steps, columns, batch.subjects, self.settings.quality_metric))
        for mean in applied.losses:  # outside the certificate (docs/guarantee.md 2.4)
            prev = self.prequential_loss
            self.prequential_loss = mean if prev is None else 0.99 * prev + 0.01 * mean
        out.inserts += applied.applied
        out.skipped += applied.skipped
        self._walk(batch, zip(steps, applied.outcomes), out, started)
        self._settle_batch()
        if not self.blocked:
            if (held := self.replay_floor.due(self.next_offset)) is not None and self._unreleased():
                self._emit(*held)  # the replay reached where its predecessor may have published
            self._release_if_due()
        out.releases = self.outbox.ready()
        if self.blocked:
            out.resume_at = self.next_offset
        return out

    def _walk(self, batch: DecodedBatch, answered, out: Outcome, started: float) -> None:
        """Bookkeeping after the engine applied the batch, message by message: positions, dead
        letters, deltas and the coalesced release, as if each had been applied in its turn."""
        messages, answered = batch.messages, iter(answered)
        newest = NewestStamps(batch)
        for start, stop, accepted in batch.stretches:
            if accepted:
                self._learned(messages, start, stop, next(answered)[1], newest(start, stop), out)
                continue
            for j in range(start, stop):
                event, msg = batch.events[j], messages[j]
                if isinstance(event, DeadLetter):
                    out.dead_letters.append(DeadLetterOut(msg, event.reason, event.detail))
                    self._advance(msg)
                elif isinstance(event, Insert):
                    kind, ts = msg.timestamp()
                    self._learned(messages, j, j + 1, next(answered)[1], ts if kind else 0, out)
                else:
                    step, forgotten = next(answered)
                    self._forgotten(msg, event, step, forgotten, out, started)

    def _learned(self, messages: list, start: int, stop: int, learned: Learned, newest_ts: int,
                 out: Outcome) -> None:
        """After the inserts ``messages[start:stop]``: the rows the model refused dead-lettered."""
        for position, bad in learned.rejected:
            out.dead_letters.append(DeadLetterOut(messages[position], bad.reason, str(bad)))
        self._moved(messages, stop, stop - start, newest_ts)

    def _forgotten(self, msg, event: Delete, step: Forget, forgotten: Forgotten, out: Outcome,
                   started: float) -> None:
        if forgotten.partial:  # records before the refused one were unlearned
            raise PartialRequest(
                f"{self.topic}/{self.partition}@{msg.offset()}: the budget ran out in the middle "
                f"of a deletion request of {len(event.ids)} records ({forgotten.refused}); raise "
                "the budget or split the request, then restart") from forgotten.refused
        if forgotten.refused is not None:
            # the model is unchanged; never crash-loop on it
            self._refuse(msg, event, forgotten.refused, out)
            return
        self._honoured(msg, event, forgotten, out, started, step.publish)

    @property
    def blocked(self) -> bool:
        """A deletion's delta could not be stored: process nothing more until
        :meth:`retry_durable`."""
        return self.outbox.failed is not None

    def _unseen(self, messages: list) -> list:
        """Drop messages already reflected in the state (a re-fetch after a seek or a restore).

        One partition's messages arrive in offset order (librdkafka drops those fetched before a
        seek), so only a batch that starts below ``next_offset`` needs filtering.
        """
        floor = self.next_offset
        if floor is None or not messages or messages[0].offset() >= floor:
            return messages
        start = next((j for j, m in enumerate(messages) if m.offset() >= floor), len(messages))
        return messages.tail(start) if isinstance(messages, FramedBatch) else messages[start:]

    def _advance(self, msg) -> None:
        self.next_offset = msg.offset() + 1
        kind, ts = msg.timestamp()
        if kind and ts > self.event_time_ms:  # keep it monotone: released_at never goes back
            self.event_time_ms = ts
        self.events_since_release += 1
        self.events_since_snapshot += 1

    def _moved(self, messages: list, end: int, count: int, newest_ts: int) -> None:
        """The position after ``count`` insert messages up to ``messages[end - 1]``."""
        self.event_time_ms = max(self.event_time_ms, newest_ts)
        self.next_offset = messages[end - 1].offset() + 1
        self.events_since_release += count
        self.events_since_snapshot += count

    def _honoured(self, msg, event: Delete, forgotten: Forgotten, out: Outcome, started: float,
                  last: bool) -> None:
        """Bookkeeping after the engine honoured ``event``: its delta (from the model's deletion
        state right after it; none when it adopted a stored one) and its coalesced release, of
        the state the engine captured right after it when ``last``."""
        deletion, state = forgotten.deletion, forgotten.state
        after = msg.offset() + 1
        self._advance(msg)
        out.deletes += 1
        out.tombstones += event.tombstone
        out.deletions.append(deletion)
        request = request_report(event, deletion, self._request_id(msg, event))
        if not deletion.changed_model:
            self._receipt(out, receipt(**self._receipt_of(msg, event), deletion=deletion))
            if len(event.ids) > 1:  # counts only: ids never go to the log
                log.info("deletion request changed nothing", extra={
                    "topic": self.topic, "partition": self.partition, "offset": msg.offset(),
                    "outcome": deletion.outcome, "ids": request["ids"],
                    "not_applied": len(request["not_applied"]),
                    "duplicates": request["duplicates"]})
            return
        if self.model.keeps_examples and self.purge_due_at is None:
            # Snapshot at half the bound, leaving the other half for the write and the purge.
            self.purge_due_at = started + self.settings.purge_bound_seconds / 2
        self.request_at = (after, request)
        self._receipt(None, receipt(**self._receipt_of(msg, event), deletion=deletion,
                                    guarantee=forgotten.guarantee,
                                    event_time_ms=self.event_time_ms))
        retrained = deletion.outcome == "retrained"
        if retrained:  # the budget ran out: said in a header, the value stays pure
            log.warning("deletion budget exhausted; model retrained on the retained data", extra={
                "topic": self.topic, "partition": self.partition, "offset": msg.offset(),
                "algorithm": self.settings.algorithm, "epoch": self.model.epoch})
        first_started, any_retrained = self._owed or (started, False)
        self._owed = (first_started, any_retrained or retrained)
        if state is not None:  # None: replaying, this exact post-noise state is already durable
            header, arrays = delta_payload(after, state, self.event_time_ms,
                                           self.settings.feature_spec)
            # counts, never ids
            header["request"] = {**request, "not_applied": len(request["not_applied"])}
            self._batch_deltas.append((after, header, arrays))
            if len(self._batch_deltas) >= MAX_GROUP:
                self._hand_over_deltas()
        if last:
            self._release_owed(forgotten.published)

    def _hand_over_deltas(self) -> None:
        """Queue the batch's deltas for the writer (a failed
        write blocks the partition: ``blocked``)."""
        batch, self._batch_deltas = self._batch_deltas, []
        self.outbox.deltas(batch)

    def _release_owed(self, published: Published | None = None) -> None:
        """The release that follows the batch's deletions, behind their deltas; ``published``: the
        state it shows (default: the model's now)."""
        self._hand_over_deltas()
        if self._owed is not None:
            started, retrained = self._owed
            self._owed = None
            self._emit(TRIGGER_DELETION, started, retrained, published)

    def _settle_batch(self) -> None:
        """End of a poll batch: no delta waits to be handed over, no deletion waits for its release
        (one owed after a later non-delete candidate turned out to be a dead letter, say)."""
        if self._batch_deltas or self._owed is not None:
            self._release_owed()

    def _refuse(self, msg, event: Delete, exc: Exception, out: Outcome) -> None:
        """A delete the model cannot honour (the budget cannot cover it, on_budget=refuse; or it
        names a subject, the model keeps no records by subject): a dead letter and a receipt."""
        reason, why = (("budget_exhausted", "privacy budget exhausted")
                       if isinstance(exc, BudgetExhausted)
                       else ("forget_by_key_off", "the model keeps no records by subject"))
        log.error(f"deletion refused: {why}", extra={
            "topic": self.topic, "partition": self.partition, "offset": msg.offset(),
            "algorithm": self.settings.algorithm, "reason": reason, "detail": str(exc)})
        out.dead_letters.append(DeadLetterOut(msg, reason, str(exc)))
        out.refused += 1
        self._advance(msg)
        self._receipt(out, receipt(**self._receipt_of(msg, event), refused=reason))

    # ----------------------------------------------------------------- receipts
    def _request_id(self, msg, event: Delete) -> str:
        return request_id(event, self.topic, self.partition, msg.offset())

    def _receipt_of(self, msg, event: Delete) -> dict:
        kind, ts = msg.timestamp()
        return {"model_name": self.model_name, "topic": self.topic, "partition": self.partition,
                "offset": msg.offset(), "event": event,
                "asked_ms": ts if kind else int(time.time() * 1000)}

    def _receipt(self, out: Outcome | None, made: Receipt) -> None:
        """Keep ``made`` until it is delivered; to ``out`` now, or (None) behind its release."""
        self.receipts.keep(made, waits=out is None)
        if out is not None:
            out.receipts.append(made)

    def ready_releases(self) -> list[Release]:
        """Releases whose deltas have become durable since the last call, in order."""
        return self.outbox.ready()

    def retry_durable(self) -> list[Release]:
        """Store the deltas that are not durable, in order
        (raises StorageUnavailable); the releases."""
        return self.outbox.retry()

    # ----------------------------------------------------------------- releases
    def _request_here(self) -> dict | None:
        """The report of the deletion request the state at
        ``next_offset`` directly follows, if any."""
        at = self.request_at
        return at[1] if at is not None and at[0] == self.next_offset else None

    def _release(self, trigger: str, deletion_started: float | None = None,
                 published: Published | None = None) -> Release:
        published = published or Published.of(self.model)
        noise = published.noise
        value = release_value(model_name=self.model_name, topic=self.topic,
                              partition=self.partition,
                              offset=self.next_offset, event_time_ms=self.event_time_ms,
                              model=published,
                              request=self._request_here(), features=self.settings.feature_spec)
        self.released_version = self.next_offset
        self.events_since_release = 0
        self.last_release_at = time.monotonic()
        answered = self.receipts.answered_by(self.next_offset)
        return Release(release_key(self.topic, self.partition), value, release_headers(trigger),
                       self.next_offset, trigger, deletion_started, *noise,
                       prequential_loss=self.prequential_loss, receipts=answered)

    def _emit(self, trigger: str, deletion_started: float | None = None, retrained: bool = False,
              published: Published | None = None) -> None:
        """A release of the state (``published``, default the model's now) to the outbox, or held
        back below the replay floor."""
        if self.replay_floor.holds(self.next_offset):
            self.replay_floor.hold(trigger, deletion_started, retrained)
            return
        release = self._release(trigger, deletion_started, published)
        if retrained:  # the budget ran out: said in a header, the value stays pure
            release.headers.append(budget_header(BUDGET_RETRAINED))
        if self.marked is None or release.version > self.marked:
            # durable before the release: nothing published ever passes the newest mark
            self.marked = release.version + MARK_STRETCH
            self.outbox.deltas([mark_entry(release.version, self.marked)])
        self.outbox.release(release)

    def _release_if_due(self) -> None:
        every = self.settings.release_every_events
        if every and self.events_since_release >= every and self._unreleased():
            self._emit(TRIGGER_EVENTS)

    def _unreleased(self) -> bool:
        return self.next_offset is not None and self.next_offset != self.released_version

    def tick(self, now: float) -> None:
        """Timer releases: every T seconds when something changed since the last one."""
        every = self.settings.release_every_seconds
        if (every and not self.blocked and self._unreleased()
            and now - self.last_release_at >= every):
            self._emit(TRIGGER_INTERVAL)

    def final_release(self) -> None:
        if not self.blocked and self._unreleased():
            self._emit(TRIGGER_FINAL)

    # ----------------------------------------------------------------- snapshots
    @property
    def replaying_stored(self) -> bool:
        """Stored deletions lie ahead of the replay. No full snapshot until it has passed them: one
        inside an earlier process's delta group would hide the group's later deltas from a restore
        (it reads the objects named after its snapshot) and their noise would be drawn again."""
        return self.replay_until is not None and (self.next_offset or 0) < self.replay_until

    def snapshot_due(self, now: float) -> bool:
        if (self.blocked or self.snapshot_in_flight or self.next_offset is None
                or self.next_offset == self.snapshot_offset or self.replaying_stored):
            return False
        s = self.settings
        return bool(
            (s.snapshot_every_events and self.events_since_snapshot >= s.snapshot_every_events)
            or (s.snapshot_every_seconds
                and now - self.last_snapshot_at >= s.snapshot_every_seconds)
            or (self.purge_due_at is not None and now >= self.purge_due_at)
        )

    # A snapshot has three steps so the slow middle one can leave the loop thread:
    # begin (loop thread: a consistent copy), write (any thread: store I/O only), finish (loop).
    def begin_snapshot(self) -> PendingSnapshot:
        self._settle_batch()  # nothing is pending between batches; never let a delta miss the seal
        self.outbox.seal()  # no delta group spans this snapshot's offset
        state = self.model.export_state()
        header = {"kind": "full", "offset": self.next_offset, "event_time_ms": self.event_time_ms,
                  "model": state["meta"], **features_header(self.settings.feature_spec)}
        if (request := self._request_here()) is not None:
            # a release at this offset after a restore
            header["request"] = request  # must carry it too (docs/worker.md 5.2)
        if self.receipts.unconfirmed:  # a restore from this copy never meets their deletes again
            header["receipts"] = self.receipts.stored()
        # Deletions after this point may need their own purge: they are not in this copy's past.
        pending = PendingSnapshot(self.next_offset, header, state["arrays"],
                                  state.get("shared", {}), purge_due_at=self.purge_due_at)
        self.purge_due_at = None
        self.events_since_snapshot = 0
        now = time.monotonic()
        pending.since_previous, self.last_snapshot_at = now - self.last_snapshot_at, now
        self.snapshot_in_flight = True
        return pending

    def write_snapshot(self, pending: PendingSnapshot, bytes_per_second: float = 0.0,
                       spread: float = 0.0):
        """``spread``: spread the uploads over that share of the time since the previous snapshot
        began (a purge's snapshot never waits: its deadline is invariant 6's)."""
        spread_seconds = spread * pending.since_previous if pending.purge_due_at is None else 0.0
        ref = self.snapshots.write_full(self.topic, self.partition, pending.offset, pending.header,
                                        pending.arrays,
                                        pending.shared, bytes_per_second=bytes_per_second,
                                        spread_seconds=spread_seconds)
        if pending.purge_due_at is not None:
            # Older objects may still hold a deleted record's raw features (invariant 6).
            self.snapshots.purge_before(self.topic, self.partition, pending.offset)
        else:  # with the release marks but the newest
            self.snapshots.gc(self.topic, self.partition)
            self.snapshots.drop_old_marks(self.topic, self.partition)
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
