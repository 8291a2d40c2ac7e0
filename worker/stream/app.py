"""The consume-process-publish loop: one consumer, one producer, one runner per partition.

Call sequence (docs/streaming.md 3): cooperative-sticky subscription; on assign, restore
each partition from its newest valid snapshot and seek to the snapshot's offset; process fetched
messages per partition; publish releases and dead letters; at snapshot time flush the producer,
write the full snapshot, then commit the group offset up to it (never further). On revoke: a
bounded final snapshot and commit; on lost: drop without commit and purge what is not yet sent
(at-least-once: the loop also produces only under a lease, ownership.py); on SIGTERM: stop polling,
final snapshots, commit, close, flush. With ``transactional`` the output and the processed position
commit together instead, and a restart publishes nothing already committed (exactly_once.py).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from ..config.model import build_model
from ..kafka_log import client_logger
from ..logs import get_logger
from ..state.exceptions import SnapshotConflict
from ..state.store import SnapshotStore, open_store
from .assignment import restore_partition
from .checkpoints import Checkpoints, finished_within
from .exceptions import ClientFailed
from .input.framed import RegistryInput
from .input.scan import tables_of
from .lag import export_lag
from .output.exactly_once import Transactions
from .output.params_policy import warn_if_compacted_at_least_once
from .output.publisher import Publisher
from .output.registry_releases import receipt_encoder, release_encoder
from .output.release_size import check_release_fits
from .ownership import Fence
from .partition import PartitionRunner
from .paused import PausedPartitions
from .process import prepare_process

log = get_logger("olu.worker")


# Longest wait for the consumer to leave its group at shutdown.
CLOSE_TIMEOUT_S = 5.0

# librdkafka retries these forever without surfacing them from consume(): stop loudly instead.
_UNRECOVERABLE = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})


class Worker:
    def __init__(self, settings, metrics, health=None, *, store=None):
        self.settings = settings
        self.metrics = metrics
        self.health = health
        self.snapshots = SnapshotStore(store if store is not None
                                       else open_store(settings.state_url),
                                       prefix=settings.state_prefix, group=settings.group_id,
                                       keep=settings.snapshot_keep)
        self.runners: dict[tuple[str, int], PartitionRunner] = {}
        self.stopping = threading.Event()
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None
        self._client_error: str | None = None
        self.transactions: Transactions | None = None  # transactional mode: the open transaction
        # Full snapshots are written off the loop thread (one at a time); the loop commits after.
        self.checkpoints = Checkpoints.from_settings(settings, metrics)
        # Deletion deltas too, on their own thread: one thread
        # keeps each partition's deltas in order.
        self._delta_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="olu-delta")
        self.paused = PausedPartitions(metrics)  # blocked on a delta: paused until it is stored
        self.events = 0
        self.summary = defaultdict(int)
        self.final_state: dict[tuple[str, int], dict] = {}  # each dropped partition's last word
        self.registry_input = RegistryInput.from_settings(settings)  # None: JSON input
        # At-least-once: produce only while surely still a
        # member (ownership.py); transactions fence.
        self.fence = None if settings.transactional else Fence(settings)
        self.publisher = Publisher(settings, metrics, self.fence, self.summary)

    @property
    def latest_release(self) -> dict:
        """Each partition's newest release produced (the demo's terminal view)."""
        return self.publisher.latest_release

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
        # None: JSON releases
        self.publisher.release_encoder = release_encoder(s, self._new_model())
        self.publisher.receipt_encoder = receipt_encoder(s)
        # at large d a release may outgrow the params topic: refuse now, not mid-stream
        check_release_fits(s)
        warn_if_compacted_at_least_once(s)
        self.producer = self.publisher.producer = Producer(
            {**s.producer_config(), "error_cb": self._on_client_error,
             "logger": client_logger()})
        if s.transactional:
            self.transactions = Transactions(self.producer, settle=self._settle_deltas,
                                             transaction_timeout_ms=s.kafka.get(
                                                 "transaction.timeout.ms"))
        self.consumer = Consumer({**s.consumer_config(), "stats_cb": self.metrics.update_from_stats,
                                  "error_cb": self._on_client_error,
                                  "on_commit": Checkpoints.on_commit,
                                  "logger": client_logger()})
        self.checkpoints.consumer = self.paused.consumer = self.consumer
        self.consumer.subscribe(list(s.input_topics), on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_lost)
        log.info("worker started", extra={"topics": list(s.input_topics), "group": s.group_id,
                                          "algorithm": s.algorithm})
        _hint_sparse_rows(s)
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
        self.publisher.check()
        if self._client_error:
            raise ClientFailed(self._client_error)
        if self.fence is not None and not self.fence.check_in():
            self._await_membership(messages)
            return
        registry = self.registry_input
        for key, batch in self._by_partition(messages).items():
            runner = self.runners.get(key)
            if runner is not None and not runner.blocked:
                if registry is not None:
                    # Schema Registry input: decoded to JSON events (framed.py)
                    batch = registry.prepare(self.consumer, key, batch)
                self._process(runner, batch)
        if registry is not None:
            registry.resume_due(self.consumer, self.runners)
        now = time.monotonic()
        for retried in self.paused.retry(self.runners, now):
            if retried.conflict is not None:
                self._lost_to(retried.runner, retried.conflict)
            for release in retried.releases:
                self.publisher.release(retried.runner, release)
        for runner in list(self.runners.values()):
            runner.tick(now)
            self._publish_ready(runner)
            if runner.snapshot_due(now):
                self._start_snapshot(runner)
        self.checkpoints.collect()
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
            if topics.count(
                    topics[0]) == len(
                        messages) and partitions.count(partitions[0]) == len(messages):
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
        first = self.consumer.poll(min(self.settings.poll_timeout, 0.002) if waiting
                                   else self.settings.poll_timeout)
        if first is None:
            return []
        return [first,
                *self.consumer.consume(num_messages=batch - 1, timeout=0)] if batch > 1 else [first]

    def _on_client_error(self, err: KafkaError) -> None:
        """librdkafka's error callback (served inside consume/poll). Transient errors are retried by
        the client and logged by librdkafka itself; an unrecoverable one stops the worker."""
        if err.fatal() or err.code() in _UNRECOVERABLE:
            if self._client_error is None:
                log.error("kafka client error, stopping",
                          extra={"error": err.str(), "code": err.name()})
            self._client_error = f"{err.name()}: {err.str()}"
        elif err.code() == KafkaError._ALL_BROKERS_DOWN:
            # retried by the client; say so once per outage
            log.warning("all Kafka brokers are down; the client keeps retrying",
                        extra={"error": err.str()})

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
            self.publisher.dead_letter(runner, dead)
        if outcome.receipts:
            self.publisher.receipts(runner, outcome.receipts)
        for release in outcome.releases:
            self.publisher.release(runner, release)
        consumed = outcome.inserts + outcome.deletes + outcome.skipped + len(outcome.dead_letters)
        self.events += consumed
        self.summary["events"] += consumed
        self.summary["deletions_honoured"] += sum(1 for d in outcome.deletions if d.changed_model)
        if runner.blocked:
            self.paused.pause(runner)

    def _publish_ready(self, runner: PartitionRunner) -> None:
        """Publish the releases whose deltas became durable in
        the background; pause on a failure."""
        try:
            ready = runner.ready_releases()
        except SnapshotConflict as exc:
            self._lost_to(runner, exc)
            return
        for release in ready:
            self.publisher.release(runner, release)
        if runner.blocked:
            self.paused.pause(runner)

    def _lost_to(self, runner: PartitionRunner, exc: SnapshotConflict) -> None:
        """Another member stored this partition's deletion first: it owns the partition now, so
        drop it as lost and hold all output until the coordinator answers (ownership.py)."""
        if self.fence is None:
            raise exc
        runner.lost = True
        self._drop([TopicPartition(runner.topic, runner.partition)], deadline=None)
        self.fence.conflicted(exc)

    def _await_membership(self, messages) -> None:
        """The loop went unheard long enough to have been expelled: wait for the coordinator."""
        blocked = set(self.paused.keys) | set(self.registry_input.paused
                                              if self.registry_input is not None else ())
        failure = self.fence.wait(self.consumer, self.producer, self.runners, messages, blocked)
        if failure is not None:  # still the owner, and an output was lost meanwhile: replay it
            self.publisher.delivery_error = failure

    # ----------------------------------------------------------------- snapshots and commits
    def _flush(self, timeout: float, dropped=()) -> bool:
        """Everything produced so far is delivered (a snapshot may then skip past it); ``dropped``:
        runners no longer assigned whose output is in the open transaction."""
        if self.settings.transactional:
            # Commit what was produced so far before a snapshot may skip past its inputs.
            return self._end_transaction_round(dropped, force=True)
        return self.publisher.flush(timeout)

    def _start_snapshot(self, runner: PartitionRunner) -> None:
        """Capture the state now (loop thread); write it in the background, commit when durable."""
        if self._settle_deltas(runner, 10.0) and self._flush(10.0):
            self.checkpoints.start(runner)

    def _settle_deltas(self, runner: PartitionRunner, timeout: float) -> bool:
        """Wait for the partition's deltas in flight and publish what they unlock; True if none is
        left (a snapshot then covers no deletion whose release is still held)."""
        settled = runner.outbox.settle(timeout)
        self._publish_ready(runner)
        return settled and not runner.blocked and not runner.lost

    def _snapshot_and_commit(self, runner: PartitionRunner, flush_timeout: float = 10.0) -> bool:
        """Synchronous snapshot and commit (revoke and shutdown:
        ``runner`` is no longer assigned)."""
        return self._flush(flush_timeout,
                           dropped=[runner]) and self.checkpoints.snapshot_and_commit(runner)

    def _end_transaction_round(self, dropped=(), *, force: bool = False,
                               last: bool = False) -> bool:
        """Transactional mode: commit the output so far with each
        partition's position (exactly_once.py)."""
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
            runner = restore_partition(consumer, tp.topic, tp.partition, snapshots=self.snapshots,
                                       settings=self.settings, model_factory=self._new_model,
                                       delta_writer=self._delta_writer.submit)
            self.runners[(tp.topic, tp.partition)] = runner
            restored_runners.append(runner)
            self.metrics.record_restore(runner, time.monotonic() - started)
            offset = runner.next_offset if runner.next_offset is not None else OFFSET_BEGINNING
            assignment.append(TopicPartition(tp.topic, tp.partition, offset))
        committed = None  # transactional mode reads the committed offsets once, for both uses
        if self.transactions is not None and restored_runners:
            committed = self.transactions.restore_committed(self.consumer, restored_runners)
        consumer.incremental_assign(assignment)
        # A partition this member paused (the fence, a blocked runner) keeps librdkafka's pause
        # flag through a loss and a reassignment: a fresh assignment fetches (the fence pauses it
        # again if it is still waiting).
        consumer.resume(assignment)
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
            if self.checkpoints.writing(key):
                # revoke: let an in-flight snapshot land and commit; lost: forget it
                if deadline is not None:
                    self.checkpoints.collect([key], timeout=max(0.01, deadline - time.monotonic()))
                self.checkpoints.forget(key)
            self.paused.forget(key)
            if deadline is None:
                runner.lost = True
                # lost: no write may land once another member owns it
                runner.outbox.cancel(timeout=10.0)
            elif self._settle_deltas(
                    runner, max(0.0, deadline - time.monotonic())) and time.monotonic() < deadline:
                runner.final_release()
                self._publish_ready(runner)
                if runner.next_offset != runner.snapshot_offset and not runner.replaying_stored:
                    self._snapshot_and_commit(runner,
                                              flush_timeout=max(0.1, deadline - time.monotonic()))
                else:
                    # nothing new, or still replaying stored deletions: commit the durable snapshot
                    keep.append(runner)
            self.final_state[(tp.topic, tp.partition)] = {
                "offset": runner.next_offset, "t": runner.model.t, "epoch": runner.model.epoch,
                "deletions": runner.model.deletions_applied, **runner.model.privacy(),
            }
            self.metrics.remove_partition(tp.topic, tp.partition)
            if deadline is not None:
                dropped.append(runner)
        if keep:
            self.checkpoints.commit(keep)
        self.metrics.set_assigned(len(self.runners))
        return dropped

    def _flush_at_exit(self) -> None:
        """The last flush, which must not mask the error the worker stops on: a fenced or failed
        producer's flush raises too (confluent-kafka: a SystemError), and the first error is the
        one an operator needs."""
        try:
            self.producer.flush(10)
        except Exception as exc:  # noqa: BLE001 - logged; the stop's own error, if any, goes on
            log.warning("producer flush at exit failed", extra={"error": str(exc),
                                                                "error_type": type(exc).__name__})

    def _shutdown(self) -> None:
        try:
            if self.consumer is not None and self.publisher.delivery_error is None:
                deadline = time.monotonic() + self.settings.revoke_budget_seconds
                parts = [TopicPartition(t, p) for t, p in self.runners]
                dropped = self._drop(parts, deadline=deadline)
                if self.transactions is not None:
                    # consumer.close() below revokes the assignment: _on_revoke must not commit
                    # (no transaction is open) nor begin a new one.
                    self._end_transaction_round(dropped, force=True, last=True)
        finally:
            self.checkpoints.shutdown()
            self._delta_writer.shutdown(wait=True)
            # Leave the group; with the brokers down close() never returns either (the group
            # then notices our absence at the session timeout).
            closed = self.consumer is None or finished_within(
                self.consumer.close, CLOSE_TIMEOUT_S, "olu-close")
            if not closed:
                log.warning("consumer close unanswered; leaving without it",
                            extra={"seconds": CLOSE_TIMEOUT_S})
            if self.producer is not None:
                self._flush_at_exit()
            log.info("worker stopped", extra=dict(self.summary))


def _hint_sparse_rows(s) -> None:
    """Say so when a feature spec's rows are mostly zeros and are learned dense: wide crosses and
    one-hot blocks learn several times faster as sparse rows (docs/features.md)."""
    spec = s.feature_spec
    if spec is None or s.sparse_input:
        return
    most = tables_of(spec).row_cap
    if spec.dim >= 1_000 and most * 4 <= spec.dim:
        log.info("the feature spec's rows are mostly zeros; OLU_SPARSE_INPUT=true learns them "
                 "by their non-zeros", extra={"dim": spec.dim, "most_non_zeros": most})
