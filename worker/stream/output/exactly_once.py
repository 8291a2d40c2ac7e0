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

import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from ...logs import get_logger

log = get_logger("olu.worker")

# A transaction whose releases wait for a deletion delta stays open across rounds; once it has
# been open this long the loop waits for the deltas and commits.
TRANSACTION_MAX_OPEN_S = 0.5
# Longest wait for the deltas in flight before a transaction must commit (snapshot, revoke, stop).
TRANSACTION_SETTLE_TIMEOUT_S = 10.0
# Wait for the group's committed offsets at assignment beyond the longest a dead member's open
# transaction can hold them back (transaction.timeout.ms, librdkafka's default 60 s).
COMMITTED_FETCH_MARGIN_S = 30.0
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000

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

    >>> (decode_metadata("olu1:released=120"), decode_metadata("olu1:released=none"),
    ...  decode_metadata(""))
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


def output_position(runner) -> int | None:
    """The input position a transaction commits for ``runner``: how far its output is published. A
    replay below what earlier transactions committed keeps their position (never moves it back)."""
    committed = runner.committed_output
    if committed is None:
        return runner.next_offset
    return max(committed.offset, runner.next_offset or 0)


#: What the last commit of a stop meets when the group rebalances as the worker leaves (another
#: member joining, say): the offsets' generation is gone. The transaction is aborted, not failed:
#: the successor replays its input from the committed offsets, as after any abort.
REBALANCED = frozenset({KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                        KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID})


def _rebalanced(exc: KafkaException) -> bool:
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and err.code() in REBALANCED and err.txn_requires_abort()


class Transactions:
    """The producer's open transaction: begun at start, committed round by round with each
    partition's output position, and read back when partitions are assigned.

    ``settle(runner, timeout)``: wait for a runner's deletion deltas in flight and publish the
    releases they unlock. ``transaction_timeout_ms``: the producer's transaction.timeout.ms, if set.
    """

    def __init__(self, producer, *, settle, transaction_timeout_ms=None):
        self.producer, self._settle = producer, settle
        self.timeout_s = int(transaction_timeout_ms or DEFAULT_TRANSACTION_TIMEOUT_MS) / 1000
        self.done = False  # no transaction after the last one: start no other
        producer.init_transactions(30)
        self._begin()

    def _begin(self) -> None:
        self.producer.begin_transaction()
        self.began = time.monotonic()

    def end_round(self, runners, consumer, *, force: bool = False, last: bool = False) -> bool:
        """Commit the open transaction with each runner's position; True if it committed (or
        ``done``). A position may only cover releases already produced: while one waits for its
        deletion delta the transaction stays open, for at most TRANSACTION_MAX_OPEN_S, then (or
        when ``force``d) the deltas are waited for. ``last``: begin no new transaction."""
        if self.done:
            return True
        try:
            committed = self._commit(runners, consumer, force)
        except KafkaException as exc:
            if not (last and _rebalanced(exc)):
                raise  # mid-stream: the worker stops and replays (restarted, as designed)
            self.producer.abort_transaction(30)
            log.warning("the group rebalanced as the worker stopped: its last transaction was "
                        "aborted, the successor replays it", extra={"error": str(exc)})
            self.done = True
            return False
        if last:
            # No transaction after this one; one left open (a delta not durable) is aborted by the
            # next process with this transactional.id, and its input replayed.
            self.done = True
        elif committed:
            self._begin()
        return committed

    def _commit(self, runners, consumer, force: bool) -> bool:
        if any(r.outbox.holding for r in runners):
            if not force and time.monotonic() - self.began < TRANSACTION_MAX_OPEN_S:
                return False
            deadline = time.monotonic() + TRANSACTION_SETTLE_TIMEOUT_S
            for runner in runners:
                self._settle(runner, max(0.0, deadline - time.monotonic()))
            if any(r.outbox.holding for r in runners):
                return False  # a delta is not durable (the partition is paused): stay open
        offsets = [TopicPartition(r.topic, r.partition, position,
                                  metadata=encode_metadata(r.published_version))
                   for r in runners if (position := output_position(r)) is not None]
        if offsets:
            self.producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(),
                                                      30)
        self.producer.commit_transaction(30)  # errors are fatal here: restart and replay
        return True

    def restore_committed(self, consumer, runners) -> dict[tuple[str, int], TopicPartition]:
        """Read how far earlier transactions published each runner's output, so the replay from
        its snapshot publishes none of it again; returns the committed offsets read, by
        (topic, partition)."""
        asked = [TopicPartition(r.topic, r.partition) for r in runners]
        # A dead process's open transaction holds the offsets back until it is aborted (the broker
        # answers "unstable offset" and the client retries): wait for it.
        got = consumer.committed(asked, timeout=self.timeout_s + COMMITTED_FETCH_MARGIN_S)
        by_key = {(tp.topic, tp.partition): tp for tp in got}
        for runner in runners:
            tp = by_key[(runner.topic, runner.partition)]
            if tp.error is not None:
                raise KafkaException(tp.error)
            committed = CommittedOutput.from_commit(tp.offset, tp.metadata)
            runner.committed_output = committed
            if committed is not None:
                runner.published_version = committed.released_version
                log.info("output committed by earlier transactions", extra={
                    "topic": runner.topic, "partition": runner.partition,
                    "offset": committed.offset,
                    "released_version": committed.released_version,
                    "replay_from": runner.next_offset})
        return by_key
