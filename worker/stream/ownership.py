"""At-least-once delivery: a member that lost its partitions while alive publishes nothing after it.

Kafka fences a zombie producer only inside transactions. Without them, a member that goes unheard
past its session timeout (SIGSTOP, a VM freeze, a stall, a cut to the coordinator) is expelled and
its partitions move; when it runs again it carries on where it was: librdkafka sends what is still
in its queue, and the loop produces from the batch in hand before the lost callback is served.
Its release from before a deletion could then land after the successor's release of that
deletion, and a log-compacted parameter topic (or any reader that keeps the last record of a key)
would hold a model that still carries the deleted record. Two rules close that (docs/worker.md 5.6):

1. **Queued releases expire first.** The producer's message.timeout.ms is below the shortest
   silence after which the coordinator may expel the member (session timeout less a heartbeat,
   less librdkafka's one-second scan; worker/config/kafka.py): a release queued when the member
   went quiet has timed out by the time it could have been expelled. librdkafka scans its queue
   for expired messages before it sends, on its first pass after waking.
2. **The loop produces under a lease.** Every round and every produce checks that the loop last
   checked in within half that silence. After a longer gap (the member may have been expelled)
   nothing more is produced: outputs are held, the partitions paused, until the coordinator lists
   the member in its group (then the held outputs go out, in order) or the lost callback drops the
   partitions (then they are discarded: the successor replays and publishes them).

What is left (said in docs/worker.md 5.6): a produce request already being written to the socket
at the instant the process stops, and requests delayed in the network for longer than the
session timeout. Transactions with read_committed readers have no such window.

>>> clock = iter([0.0, 1.0, 2.0, 9.0, 9.5, 10.0]).__next__
>>> lease = Lease(expulsion_seconds=10.0, clock=clock)
>>> lease.holds(), lease.holds(), lease.holds()  # checked in 1 s apart, then after 7 s
(True, True, False)
>>> lease.renew(); lease.holds()
True
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from ..logs import get_logger

log = get_logger("olu.worker")

#: How often a suspended worker asks the coordinator whether it is still a member.
PROBE_INTERVAL_S = 0.5
PROBE_TIMEOUT_S = 5.0
#: With no answer from the coordinator (DescribeGroups refused or unreachable) for twice the
#: expulsion time, and no lost callback: librdkafka's own session check would have fired by then
#: (it declares the assignment lost after a session timeout without a successful heartbeat), so
#: its heartbeats hold the membership.
FALLBACK_MARGIN_S = 5.0


class Lease:
    """The loop's check-ins: ``holds()`` is False once two check-ins are ``limit`` seconds apart."""

    __slots__ = ("clock", "last", "limit")

    def __init__(self, expulsion_seconds: float, clock: Callable[[], float] = time.monotonic):
        self.limit = expulsion_seconds / 2.0
        self.clock = clock
        self.last = clock()

    def holds(self) -> bool:
        now = self.clock()
        if now - self.last >= self.limit:
            return False
        self.last = now
        return True

    def renew(self) -> None:
        self.last = self.clock()


class Fence:
    """The lease, the outputs held while it is broken, and the membership probe."""

    def __init__(self, settings, clock: Callable[[], float] = time.monotonic):
        self.lease = Lease(settings.expulsion_seconds, clock)
        self.fallback_s = 2 * settings.expulsion_seconds + FALLBACK_MARGIN_S
        self.group = settings.group_id
        self.admin_config = settings.admin_config()
        self.clock = clock
        self.suspended_at: float | None = None  # when the lease was found broken (None: it holds)
        self.held: list[tuple] = []  # (runner, produce) to call once membership is confirmed
        # outputs dropped or undelivered after a loss (the successor publishes them)
        self.fenced = 0
        # delivery failures while suspended: fatal only if still the owner
        self.deferred: list[str] = []
        self.conflict: Exception | None = None  # another member stored a partition's deletion first
        self._admin: AdminClient | None = None
        self._probed_at = -PROBE_INTERVAL_S
        self._paused = False  # the partitions are paused while the fence waits
        self._paused_keys: set = set()  # which ones
        self._refused = False  # the coordinator said "not a member" during this suspension
        self._unknown_said = False  # "membership unknown" logged once a suspension

    @property
    def suspended(self) -> bool:
        return self.suspended_at is not None

    def holding(self, output: tuple) -> bool:
        """True if ``output`` ((runner, produce)) must wait, kept in order for :meth:`confirmed`;
        False: go ahead."""
        if self.suspended_at is None and self.lease.holds():
            return False
        if self.suspended_at is None:
            self.suspended_at = self.clock()
        self.held.append(output)
        return True

    def check_in(self) -> bool:
        """At the start of a round: False if the lease is broken (the round must not process)."""
        if self.suspended_at is None and not self.lease.holds():
            self.suspended_at = self.clock()
        return self.suspended_at is None

    def undelivered(self, lost: bool, failure: str) -> bool:
        """An output was not delivered: True if that is not (yet) a reason to stop. After a loss it
        is the successor's to publish; while suspended (queued releases time out on purpose, rule
        1) it is decided by the coordinator's answer: still the owner means it was lost. A failure
        served after a gap (the delivery reports of the round the pause fell in come before the next
        check-in) breaks the lease here: it is the expiry rule 1 intends."""
        if lost:
            self.fenced += 1
            return True
        if self.suspended_at is None and not self.lease.holds():
            self.suspended_at = self.clock()
        if self.suspended_at is not None:
            self.deferred.append(failure)
            return True
        return False

    def conflicted(self, exc: Exception) -> None:
        """Another writer stored a deletion of a partition this member was working on (the
        put-if-absent delta key, docs/worker.md 5.3): the partition is someone else's, so it was
        dropped as lost, and nothing more is produced until the coordinator answers. If it then
        still lists this member, the conflict is raised (stop
        and replay: the store has the truth)."""
        log.warning("another member stored this partition's deletion first; dropped as lost",
                    extra={"error": str(exc)})
        self.conflict = exc
        if self.suspended_at is None:
            self.suspended_at = self.clock()

    def member(self, consumer) -> bool | None:
        """Ask the coordinator (at most every PROBE_INTERVAL_S) whether this member is in the group:
        True, False, or None (no answer yet)."""
        now = self.clock()
        if now - self._probed_at < PROBE_INTERVAL_S:
            return None
        self._probed_at = now
        try:
            member_id = consumer.memberid()
            if self._admin is None:
                self._admin = AdminClient(self.admin_config)
            future = self._admin.describe_consumer_groups(
                [self.group], request_timeout=PROBE_TIMEOUT_S)[self.group]
            members = future.result(timeout=PROBE_TIMEOUT_S).members
        except Exception as exc:  # noqa: BLE001 - no answer: ask again, produce nothing meanwhile
            if not self._unknown_said:
                log.warning("group membership unknown; holding releases", extra={"error": str(exc)})
                self._unknown_said = True
            return None
        listed = bool(member_id) and any(m.member_id == member_id for m in members)
        self._refused |= not listed
        return listed

    def confirmed(self) -> list[tuple]:
        """Membership confirmed: the lease is renewed; the held outputs, to produce now in order."""
        held, self.held = self.held, []
        log.info("group membership confirmed after a pause; releases resume", extra={
            "paused_seconds": round(self.clock() - (self.suspended_at or self.clock()), 3),
            "held": len(held)})
        self.suspended_at = None
        self._paused = self._refused = self._unknown_said = False
        self._paused_keys = set()
        self.lease.renew()
        return held

    def lost(self) -> None:
        """The partitions were lost: drop what was held (the successor replays and publishes it)."""
        if self.held:
            log.warning("partitions lost after a pause; held releases dropped",
                        extra={"held": len(self.held)})
        self.fenced += len(self.held) + len(self.deferred)
        self.held, self.deferred, self.conflict = [], [], None
        self.suspended_at = None
        self._paused = self._refused = self._unknown_said = False
        self._paused_keys = set()
        self.lease.renew()

    def wait(self, consumer, producer, runners: dict, messages: list, blocked: set) -> str | None:
        """One round of a broken lease: pause every partition where its runner is (what was fetched
        is fetched again on resume), serve delivery reports, ask the coordinator; once it lists the
        member, produce the held outputs of the partitions still owned and resume all but the
        ``blocked`` ones. The lost callback, served in the consumer's polls, ends it too. Returns
        the first delivery failure met meanwhile if the member turned out to own its partitions
        still (an output is missing: the worker must stop and replay it), else None."""
        # Every round: a partition assigned meanwhile is paused too, and whatever was fetched
        # (before a pause took effect) is sought back, so that nothing is skipped on resume.
        first: dict = {}
        for m in messages:
            first.setdefault((m.topic(), m.partition()), m.offset())
        fresh = [key for key in runners if key not in self._paused_keys]
        if fresh:
            consumer.pause([TopicPartition(t, p) for t, p in fresh])
            self._paused_keys.update(fresh)
        for (t, p), r in runners.items():
            if (t, p) in first or not self._paused:  # fetched now, or the round the pause began in
                offset = r.next_offset if r.next_offset is not None else first.get((t, p), -1)
                if offset >= 0:
                    consumer.seek(TopicPartition(t, p, offset))
        if not self._paused:
            self._paused = True
            log.warning(
                "the loop went unheard for longer than its lease; holding releases until the group "
                "coordinator confirms membership", extra={"lease_seconds": self.lease.limit})
        producer.poll(0)
        if not runners:  # lost meanwhile: nothing left to protect
            self.lost()
            return None
        answer = self.member(consumer)
        if (answer is None and not self._refused
            and self.clock() - self.suspended_at > self.fallback_s):
            log.warning(
                "the coordinator gave no answer and no lost callback came: librdkafka's heartbeats "
                "hold the membership; releases resume",
                extra={"seconds": round(self.fallback_s, 1)})
            answer = True
        if not answer:
            return None
        if self.conflict is not None:
            raise self.conflict
        failures = self.deferred
        self.deferred = []
        for runner, produce in self.confirmed():
            if runners.get((runner.topic, runner.partition)) is runner:
                produce()
        resume = [TopicPartition(t, p) for t, p in runners if (t, p) not in blocked]
        if resume:
            consumer.resume(resume)
        return failures[0] if failures else None
