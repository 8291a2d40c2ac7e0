"""The consume-process-publish loop: one consumer, one producer, one runner per partition.

Call sequence (docs/streaming.md 3): cooperative-sticky subscription; on assign, restore
each partition from its newest valid snapshot and seek to the snapshot's offset; process fetched
messages per partition; publish releases and dead letters; at snapshot time flush the producer,
write the full snapshot, then commit the group offset up to it (never further). On revoke: a
bounded final snapshot and commit; on lost: drop without commit and purge what is not yet sent
(at-least-once: the loop also produces only under a lease, ownership.py); on SIGTERM: stop polling, final
snapshots, commit, close, flush. With ``transactional`` the output and the processed position
commit together instead, and a restart publishes nothing already committed (exactly_once.py).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from ..config.model import build_model
from ..kafka_log import client_logger
from ..logs import get_logger
from ..state.exceptions import SnapshotConflict, StorageUnavailable
from ..state.store import SnapshotStore, open_store
from .exceptions import ClientFailed, DeliveryFailed
from .input.framed import RegistryInput, original
from .lag import export_lag
from .output.dlq import DeadLetters, TopicLimit
from .output.exactly_once import Transactions
from .output.params_policy import warn_if_compacted_at_least_once
from .output.registry_releases import release_encoder
from .output.release_size import check_release_fits
from .ownership import Fence
from .partition import PartitionRunner
from .process import prepare_process
from .replay_floor import ReplayFloor, input_end

log = get_logger("olu.worker")


# Longest wait for a synchronous offset commit (revoke, shutdown) before going on without it.
SYNC_COMMIT_TIMEOUT_S = 5.0
# Longest wait for the consumer to leave its group at shutdown.
CLOSE_TIMEOUT_S = 5.0

# librdkafka retries these forever without surfacing them from consume(): stop loudly instead.
_UNRECOVERABLE = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})


def _finished_within(call, seconds: float, name: str) -> bool:
    """Run a blocking client call on a daemon thread; False if it has not returned in ``seconds``
    (librdkafka's synchronous commit and close never return while no broker answers)."""
    thread = threading.Thread(target=call, name=name, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def _durable_offsets(runners) -> list[TopicPartition]:
    """Each runner's next offset covered by a durable full snapshot: never commit past it."""
    return [TopicPartition(r.topic, r.partition, r.snapshot_offset) for r in runners if r.snapshot_offset is not None]


class Worker:
    def __init__(self, settings, metrics, health=None, *, store=None):
        self.settings = settings
        self.metrics = metrics
        self.health = health
        self.snapshots = SnapshotStore(store if store is not None else open_store(settings.state_url),
                                       prefix=settings.state_prefix, group=settings.group_id,
                                       keep=settings.snapshot_keep)
        self.runners: dict[tuple[str, int], PartitionRunner] = {}
        self.stopping = threading.Event()
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None
        self._delivery_error: str | None = None
        self._client_error: str | None = None
        self.transactions: Transactions | None = None  # transactional mode: the open transaction
        self._retry_at: dict[tuple[str, int], float] = {}
        # Full snapshots are written off the loop thread (one at a time); the loop commits after.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="olu-snapshot")
        self._writing: dict[tuple[str, int], tuple[PartitionRunner, object, float, Future]] = {}
        # Deletion deltas too, on their own thread: one thread keeps each partition's deltas in order.
        self._delta_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="olu-delta")
        self._paused: set[tuple[str, int]] = set()  # blocked on a delta: paused until it is stored
        self.events = 0
        self.summary = defaultdict(int)
        self.latest_release: dict[tuple[str, int], object] = {}  # for the demo's terminal view
        self.final_state: dict[tuple[str, int], dict] = {}  # each dropped partition's last word
        self.registry_input = RegistryInput.from_settings(settings)  # None: JSON input
        self.release_encoder = None  # OLU_RELEASE_FORMAT avro / json-schema: set at start
        dlq_limit = TopicLimit({**settings.admin_config(), "logger": client_logger()}, settings.dlq_topic)
        self._dead_letters = DeadLetters(settings.dlq_topic, dlq_limit, transactional=settings.transactional)
        # At-least-once: produce only while surely still a member (ownership.py); transactions fence.
        self.fence = None if settings.transactional else Fence(settings)

    # ----------------------------------------------------------------- lifecycle
    def _new_model(self):
        return build_model(self.settings)

    def stop(self, *_args) -> None:
        self.stopping.set()

    def run(self, max_events: int | None = None, install_signals: bool = True) -> dict:
        s = self.settings
        if install_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        switch_interval = prepare_process(self.settings)
        self.release_encoder = release_encoder(s, self._new_model())  # None: JSON releases
        check_release_fits(s)  # at large d a release may outgrow the params topic: refuse now, not mid-stream
        warn_if_compacted_at_least_once(s)
        self.producer = Producer({**s.producer_config(), "error_cb": self._on_client_error,
                                  "logger": client_logger()})
        if s.transactional:
            self.transactions = Transactions(self.producer, settle=self._settle_deltas,
                                             transaction_timeout_ms=s.kafka.get("transaction.timeout.ms"))
        self.consumer = Consumer({**s.consumer_config(), "stats_cb": self.metrics.update_from_stats,
                                  "error_cb": self._on_client_error, "on_commit": self._on_commit,
                                  "logger": client_logger()})
        self.consumer.subscribe(list(s.input_topics), on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_lost)
        log.info("worker started", extra={"topics": list(s.input_topics), "group": s.group_id,
                                          "algorithm": s.algorithm})
        if self.fence is not None:
            self.fence.lease.renew()  # the kernels' compilation above is not a pause
        try:
            while not self.stopping.is_set():
                self._round()
                if max_events is not None and self.events >= max_events:
                    break
        finally:
            try:
                self._shutdown()
            finally:
                sys.setswitchinterval(switch_interval)
        return dict(self.summary)

    def _round(self) -> None:
        messages = self._fetch()
        if self.health is not None:
            self.health.heartbeat()
        if self._delivery_error:
            raise DeliveryFailed(self._delivery_error)
        if self._client_error:
            raise ClientFailed(self._client_error)
        if self.fence is not None and not self.fence.check_in():
            self._await_membership(messages)
            return
        registry = self.registry_input
        for key, batch in self._by_partition(messages).items():
            runner = self.runners.get(key)
            if runner is not None and not runner.blocked:
                if registry is not None:  # Schema Registry input: decoded to JSON events (framed.py)
                    batch = registry.prepare(self.consumer, key, batch)
                self._process(runner, batch)
        if registry is not None:
            registry.resume_due(self.consumer, self.runners)
        now = time.monotonic()
        self._retry_blocked(now)
        for runner in list(self.runners.values()):
            runner.tick(now)
            self._publish_ready(runner)
            if runner.snapshot_due(now):
                self._start_snapshot(runner)
        self._collect_snapshots()
        self._end_transaction_round()
        self.producer.poll(0)

    def _by_partition(self, messages: list) -> dict[tuple[str, int], list]:
        """The fetched messages by (topic, partition), in order; error events are handled here.
        (Comprehensions first: a batch is usually one partition without errors, and this runs per
        message.)"""
        if not messages:
            return {}
        if not any([m.error() for m in messages]):
            topics, partitions = [m.topic() for m in messages], [m.partition() for m in messages]
            if topics.count(topics[0]) == len(messages) and partitions.count(partitions[0]) == len(messages):
                return {(topics[0], partitions[0]): messages}
        by_partition: dict[tuple[str, int], list] = defaultdict(list)
        for msg in messages:
            if msg.error():
                self._on_consume_error(msg.error())
                continue
            by_partition[(msg.topic(), msg.partition())].append(msg)
        return by_partition

    def _fetch(self) -> list:
        """What is already fetched, without waiting; if nothing is, wait up to poll_timeout for the
        first message only. (``consume(n, timeout)`` would wait until n messages are there: at
        50,000 events/s a batch of 2,000 takes 40 ms to fill, and a delete inside it waits too.)"""
        batch = self.settings.batch_size
        messages = self.consumer.consume(num_messages=batch, timeout=0)
        if messages:
            return messages
        # A delta being written unlocks a release soon: look again within a millisecond or two
        # rather than after a whole poll timeout (the delta writer cannot wake up the consumer).
        waiting = any(r.outbox.in_flight for r in self.runners.values())
        first = self.consumer.poll(min(self.settings.poll_timeout, 0.002) if waiting else self.settings.poll_timeout)
        if first is None:
            return []
        return [first, *self.consumer.consume(num_messages=batch - 1, timeout=0)] if batch > 1 else [first]

    def _on_client_error(self, err: KafkaError) -> None:
        """librdkafka's error callback (served inside consume/poll). Transient errors are retried by
        the client and logged by librdkafka itself; an unrecoverable one stops the worker."""
        if err.fatal() or err.code() in _UNRECOVERABLE:
            if self._client_error is None:
                log.error("kafka client error, stopping", extra={"error": err.str(), "code": err.name()})
            self._client_error = f"{err.name()}: {err.str()}"
        elif err.code() == KafkaError._ALL_BROKERS_DOWN:  # retried by the client; say so once per outage
            log.warning("all Kafka brokers are down; the client keeps retrying", extra={"error": err.str()})

    def _on_consume_error(self, err: KafkaError) -> None:
        if err.fatal():
            raise KafkaException(err)
        log.warning("consumer error", extra={"error": err.str(), "code": err.code()})

    # ----------------------------------------------------------------- processing
    def _process(self, runner: PartitionRunner, batch: list) -> None:
        try:
            outcome = runner.process(batch)
        except SnapshotConflict as exc:
            self._lost_to(runner, exc)
            return
        self.metrics.record_outcome(runner, outcome)
        for dead in outcome.dead_letters:
            self._dead_letter(runner, dead)
        for release in outcome.releases:
            self._publish(runner, release)
        consumed = outcome.inserts + outcome.deletes + outcome.skipped + len(outcome.dead_letters)
        self.events += consumed
        self.summary["events"] += consumed
        self.summary["deletions_honoured"] += sum(1 for d in outcome.deletions if d.changed_model)
        if runner.blocked:
            self._pause_blocked(runner)

    def _publish_ready(self, runner: PartitionRunner) -> None:
        """Publish the releases whose deltas became durable in the background; pause on a failure."""
        try:
            ready = runner.ready_releases()
        except SnapshotConflict as exc:
            self._lost_to(runner, exc)
            return
        for release in ready:
            self._publish(runner, release)
        if runner.blocked:
            self._pause_blocked(runner)

    def _lost_to(self, runner: PartitionRunner, exc: SnapshotConflict) -> None:
        """Another member stored this partition's deletion first: it owns the partition now, so
        drop it as lost and hold all output until the coordinator answers (ownership.py)."""
        if self.fence is None:
            raise exc
        runner.lost = True
        self._drop([TopicPartition(runner.topic, runner.partition)], deadline=None)
        self.fence.conflicted(exc)

    def _pause_blocked(self, runner: PartitionRunner) -> None:
        """A deletion's post-noise state could not be stored: stop the partition where it is and
        publish nothing of it until the delta is durable (invariant 2)."""
        key = (runner.topic, runner.partition)
        if key in self._paused:
            return
        self._paused.add(key)
        tp = TopicPartition(runner.topic, runner.partition, runner.next_offset)
        self.consumer.pause([tp])
        self.consumer.seek(tp)  # messages fetched past this point are fetched again on resume
        self.metrics.snapshot_failure("delta")
        log.warning("deletion delta not durable; partition paused",
                    extra={"topic": runner.topic, "partition": runner.partition, "offset": runner.next_offset})

    def _retry_blocked(self, now: float) -> None:
        for key, runner in list(self.runners.items()):
            if not runner.blocked or now < self._retry_at.get(key, 0.0):
                continue
            try:
                releases = runner.retry_durable()
            except StorageUnavailable:
                self.metrics.snapshot_failure("delta")
                self._retry_at[key] = now + 1.0
                continue
            except SnapshotConflict as exc:
                self._lost_to(runner, exc)
                continue
            self._retry_at.pop(key, None)
            for release in releases:
                self._publish(runner, release)
            self._paused.discard(key)
            self.consumer.resume([TopicPartition(runner.topic, runner.partition)])
            log.info("deletion delta stored after retry; partition resumed",
                     extra={"topic": runner.topic, "partition": runner.partition})

    def _await_membership(self, messages) -> None:
        """The loop went unheard long enough to have been expelled: wait for the coordinator."""
        blocked = set(self._paused) | set(self.registry_input.paused if self.registry_input is not None else ())
        failure = self.fence.wait(self.consumer, self.producer, self.runners, messages, blocked)
        if failure is not None:  # still the owner, and an output was lost meanwhile: replay it
            self._delivery_error = failure

    def _fenced(self, runner: PartitionRunner, produce) -> bool:
        """True if an output of ``runner`` must wait for the coordinator (ownership.py)."""
        return self.fence is not None and self.fence.holding((runner, produce))

    def _gone(self, runner: PartitionRunner, failure: str) -> bool:
        """A delivery failure not to stop for: its partition was lost since (the successor publishes
        it), or the lease is broken and the coordinator will decide (ownership.py)."""
        return self.fence is not None and self.fence.undelivered(runner.lost, failure)

    def _publish(self, runner: PartitionRunner, release) -> None:
        if self._fenced(runner, lambda: self._publish(runner, release)):
            return
        committed = runner.committed_output
        if committed is not None and committed.has_release(release.version):
            self.summary["releases_already_committed"] += 1  # replay after a crash: published once
            return
        started = release.deletion_started

        def delivered(err, _msg):
            if err is not None:
                failure = f"release {runner.topic}/{runner.partition}@{release.version}: {err}"
                if not self._gone(runner, failure):
                    self._delivery_error = failure
            elif started is not None:
                self.metrics.observe_delete_to_release(time.monotonic() - started)

        value = release.value if self.release_encoder is None else self.release_encoder.encode(release.value)
        self.producer.produce(self.settings.params_topic, key=release.key, value=value,
                              headers=release.headers, on_delivery=delivered)
        runner.published_version = release.version
        self.metrics.record_release(runner, release)
        self.summary["releases"] += 1
        self.latest_release[(runner.topic, runner.partition)] = release

    def _dead_letter(self, runner: PartitionRunner, dead) -> None:
        if self._fenced(runner, lambda: self._dead_letter(runner, dead)):
            return
        msg = original(dead.message)
        committed = runner.committed_output
        if committed is not None and committed.has_dead_letter(msg.offset()):
            self.summary["dead_letters_already_committed"] += 1  # replay after a crash: sent once
            return

        def failed(err):
            failure = f"dead letter {msg.topic()}/{msg.partition()}@{msg.offset()}: {err}"
            if not self._gone(runner, failure):
                self._delivery_error = failure

        self._dead_letters.publish(self.producer, msg, dead.reason, dead.detail, failed)
        self.metrics.record_dead_letter(msg.topic(), dead.reason)
        self.summary["dead_letters"] += 1

    # ----------------------------------------------------------------- snapshots and commits
    def _flush(self, timeout: float, dropped=()) -> bool:
        """Everything produced so far is delivered (a snapshot may then skip past it); ``dropped``:
        runners no longer assigned whose output is in the open transaction."""
        if self.settings.transactional:
            # Commit what was produced so far before a snapshot may skip past its inputs.
            return self._end_transaction_round(dropped, force=True)
        remaining = self.producer.flush(timeout)
        if self._delivery_error:
            raise DeliveryFailed(self._delivery_error)
        return remaining == 0

    def _start_snapshot(self, runner: PartitionRunner) -> None:
        """Capture the state now (loop thread); write it in the background, commit when durable."""
        if not self._settle_deltas(runner, 10.0) or not self._flush(10.0):
            return
        pending = runner.begin_snapshot()
        future = self._writer.submit(runner.write_snapshot, pending, self.settings.snapshot_max_bytes_per_second,
                                     self.settings.snapshot_upload_spread)
        self._writing[(runner.topic, runner.partition)] = (runner, pending, time.monotonic(), future)

    def _collect_snapshots(self, keys=None, timeout: float = 0.0) -> None:
        """Finish written snapshots (those of ``keys`` only, waiting up to ``timeout``), then commit."""
        done = []
        for key in list(self._writing if keys is None else keys):
            entry = self._writing.get(key)
            if entry is None:
                continue
            runner, pending, started, future = entry
            try:
                ref = future.result(timeout=timeout) if timeout else (future.result() if future.done() else None)
            except TimeoutError:
                ref = None
            except StorageUnavailable as exc:
                del self._writing[key]
                runner.finish_snapshot(pending, durable=False)
                self._snapshot_failed(runner, exc)
                continue
            if ref is None:
                continue
            del self._writing[key]
            runner.finish_snapshot(pending, durable=True)
            self.metrics.record_snapshot(runner, "full", time.monotonic() - started, ref.size)
            done.append(runner)
        self._commit(done, asynchronous=True)

    def _snapshot_failed(self, runner: PartitionRunner, exc: Exception) -> None:
        self.metrics.snapshot_failure("full")
        log.warning("snapshot failed", extra={"topic": runner.topic, "partition": runner.partition,
                                              "error": str(exc)})

    def _settle_deltas(self, runner: PartitionRunner, timeout: float) -> bool:
        """Wait for the partition's deltas in flight and publish what they unlock; True if none is
        left (a snapshot then covers no deletion whose release is still held)."""
        settled = runner.outbox.settle(timeout)
        self._publish_ready(runner)
        return settled and not runner.blocked and not runner.lost

    def _snapshot_and_commit(self, runner: PartitionRunner, flush_timeout: float = 10.0) -> bool:
        """Synchronous snapshot and commit (revoke and shutdown: ``runner`` is no longer assigned)."""
        if not self._flush(flush_timeout, dropped=[runner]):
            return False
        started = time.monotonic()
        try:
            ref = runner.snapshot()
        except StorageUnavailable as exc:
            self._snapshot_failed(runner, exc)
            return False
        self.metrics.record_snapshot(runner, "full", time.monotonic() - started, ref.size)
        self._commit([runner])
        return True

    def _commit(self, runners, asynchronous: bool = False) -> None:
        """Commit up to each runner's durable snapshot. In the steady state asynchronously (a
        synchronous commit held the loop, and every deletion behind it, for up to 140 ms); on
        revoke and shutdown synchronously, before the partition is handed over, but waiting at
        most SYNC_COMMIT_TIMEOUT_S: with the brokers down librdkafka's synchronous commit never
        returns, and a shutdown stuck there outlives its grace period. Giving up loses nothing: the next owner
        restores the same snapshot and seeks to its offset; the group offset is only a lag gauge."""
        offsets = _durable_offsets(runners)
        if not offsets or self.settings.transactional:
            return  # transactional mode commits offsets inside the transaction

        def commit():
            try:
                self.consumer.commit(offsets=offsets, asynchronous=asynchronous)
            except KafkaException as exc:
                log.warning("offset commit failed", extra={"error": str(exc)})
            except RuntimeError as exc:  # a commit given up on, still running when shutdown closed the consumer
                log.info("offset commit abandoned at shutdown", extra={"error": str(exc)})

        if asynchronous:
            commit()
        elif not _finished_within(commit, SYNC_COMMIT_TIMEOUT_S, "olu-commit"):
            log.warning("offset commit unanswered; going on without it (the snapshot is durable)",
                        extra={"seconds": SYNC_COMMIT_TIMEOUT_S,
                               "partitions": [f"{o.topic}/{o.partition}" for o in offsets]})

    @staticmethod
    def _on_commit(err, partitions) -> None:
        """Result of an asynchronous commit (served by consume/poll): a failure is only logged, the
        next snapshot's commit covers the same offsets and more."""
        failed = [p for p in partitions or () if p.error is not None]
        if err is not None or failed:
            log.warning("offset commit failed", extra={
                "error": str(err) if err is not None else str(failed[0].error),
                "partitions": [f"{p.topic}/{p.partition}" for p in failed]})

    def _end_transaction_round(self, dropped=(), *, force: bool = False, last: bool = False) -> bool:
        """Transactional mode: commit the output so far with each partition's position (exactly_once.py)."""
        if self.transactions is None:
            return True
        return self.transactions.end_round([*self.runners.values(), *dropped], self.consumer,
                                           force=force, last=last)

    # ----------------------------------------------------------------- rebalances
    def _on_assign(self, consumer, partitions) -> None:
        self.metrics.rebalance("assign")
        if self.health is not None:
            self.health.set_ready(False)
        assignment = []
        restored_runners: list[PartitionRunner] = []
        for tp in partitions:
            started = time.monotonic()
            runner, restored = PartitionRunner.restore(
                tp.topic, tp.partition, snapshots=self.snapshots, settings=self.settings,
                model_factory=self._new_model, model_name=self.settings.model_name or self.settings.group_id,
                on_corrupt=self.settings.on_corrupt_snapshot, delta_writer=self._delta_writer.submit,
            )
            if restored is not None:  # a predecessor's state: no process published past the input's
                # end, so the replay holds its releases below it (replay_floor.py)
                runner.replay_floor = ReplayFloor(input_end(consumer, tp.topic, tp.partition),
                                                  {"topic": tp.topic, "partition": tp.partition})
            self.runners[(tp.topic, tp.partition)] = runner
            restored_runners.append(runner)
            self.metrics.record_restore(runner, time.monotonic() - started)
            offset = runner.next_offset if runner.next_offset is not None else OFFSET_BEGINNING
            assignment.append(TopicPartition(tp.topic, tp.partition, offset))
            skipped = [] if restored is None else [{"key": k, "reason": r} for k, r in restored.skipped]
            for entry in skipped:  # on_corrupt_snapshot=fallback: name each object passed over
                log.warning("corrupt snapshot skipped", extra={"topic": tp.topic, "partition": tp.partition,
                                                               **entry})
            log.info("partition assigned", extra={
                "topic": tp.topic, "partition": tp.partition, "offset": runner.next_offset,
                "replay_floor": runner.replay_floor.floor,
                "snapshot": None if restored is None else restored.offset,
                "deltas": 0 if restored is None else len(restored.deltas),
                "skipped_snapshots": skipped,
            })
        committed = None  # transactional mode reads the committed offsets once, for both uses
        if self.transactions is not None and restored_runners:
            committed = self.transactions.restore_committed(self.consumer, restored_runners)
        consumer.incremental_assign(assignment)
        export_lag(self.metrics, consumer, restored_runners, committed)
        self.metrics.set_assigned(len(self.runners))
        if self.health is not None:
            self.health.set_ready(True)

    def _on_revoke(self, consumer, partitions) -> None:
        self.metrics.rebalance("revoke")
        deadline = time.monotonic() + self.settings.revoke_budget_seconds
        dropped = self._drop(partitions, deadline=deadline)
        # KIP-447: settle the open transaction before handing over, with the dropped partitions'
        # positions in it (they are no longer in self.runners).
        self._end_transaction_round(dropped, force=True)

    def _on_lost(self, consumer, partitions) -> None:
        self.metrics.rebalance("lost")
        log.warning("partitions lost; dropped without a commit", extra={
            "partitions": [f"{p.topic}/{p.partition}" for p in partitions]})
        self._drop(partitions, deadline=None)  # no commit: another member may own them already
        if self.fence is not None and not self.runners:
            # Nothing queued may land after the successor's releases: what is not yet sent goes
            # (its delivery reports are the lost partitions', ignored by _gone).
            self.producer.purge(in_queue=True, in_flight=False, blocking=False)
            self.fence.lost()

    def _drop(self, partitions, deadline: float | None) -> list[PartitionRunner]:
        """Final snapshot and commit within the deadline (None: drop without either); the runners
        dropped with a deadline (their durable offsets belong in a transaction, if one is open)."""
        keep = []
        dropped = []
        for tp in partitions:
            runner = self.runners.pop((tp.topic, tp.partition), None)
            if runner is None:
                continue
            key = (tp.topic, tp.partition)
            if key in self._writing:  # revoke: let an in-flight snapshot land and commit; lost: forget it
                if deadline is not None:
                    self._collect_snapshots([key], timeout=max(0.01, deadline - time.monotonic()))
                self._writing.pop(key, None)
            self._paused.discard(key)
            self._retry_at.pop(key, None)
            if deadline is None:
                runner.lost = True
                runner.outbox.cancel(timeout=10.0)  # lost: no write may land once another member owns it
            elif self._settle_deltas(runner, max(0.0, deadline - time.monotonic())) and time.monotonic() < deadline:
                runner.final_release()
                self._publish_ready(runner)
                if runner.next_offset != runner.snapshot_offset and not runner.replaying_stored:
                    self._snapshot_and_commit(runner, flush_timeout=max(0.1, deadline - time.monotonic()))
                else:  # nothing new, or still replaying stored deletions: commit the durable snapshot
                    keep.append(runner)
            self.final_state[(tp.topic, tp.partition)] = {
                "offset": runner.next_offset, "t": runner.model.t, "epoch": runner.model.epoch,
                "deletions": runner.model.deletions_applied, **runner.model.privacy(),
            }
            self.metrics.remove_partition(tp.topic, tp.partition)
            if deadline is not None:
                dropped.append(runner)
        if keep:
            self._commit(keep)
        self.metrics.set_assigned(len(self.runners))
        return dropped

    def _shutdown(self) -> None:
        try:
            if self.consumer is not None and self._delivery_error is None:
                deadline = time.monotonic() + self.settings.revoke_budget_seconds
                parts = [TopicPartition(t, p) for t, p in self.runners]
                dropped = self._drop(parts, deadline=deadline)
                if self.transactions is not None:
                    # consumer.close() below revokes the assignment: _on_revoke must not commit
                    # (no transaction is open) nor begin a new one.
                    self._end_transaction_round(dropped, force=True, last=True)
        finally:
            self._writer.shutdown(wait=True)
            self._delta_writer.shutdown(wait=True)
            # Leave the group; with the brokers down close() never returns either (the group
            # then notices our absence at the session timeout).
            closed = self.consumer is None or _finished_within(self.consumer.close, CLOSE_TIMEOUT_S, "olu-close")
            if not closed:
                log.warning("consumer close unanswered; leaving without it", extra={"seconds": CLOSE_TIMEOUT_S})
            if self.producer is not None:
                self.producer.flush(10)
            log.info("worker stopped", extra=dict(self.summary))
