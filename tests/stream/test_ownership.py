"""The fence of a member that may have lost its partitions while alive (worker/stream/ownership.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import Message

from worker.config import ConfigError, load_settings
from worker.stream.ownership import Fence

BASE = {"OLU_DIM": "3", "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1"}


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class FakeConsumer:
    def __init__(self):
        self.paused, self.resumed, self.seeks = [], [], []

    def pause(self, tps):
        self.paused += [(tp.topic, tp.partition) for tp in tps]

    def seek(self, tp):
        self.seeks.append((tp.topic, tp.partition, tp.offset))

    def resume(self, tps):
        self.resumed += [(tp.topic, tp.partition) for tp in tps]


class FakeProducer:
    def poll(self, _timeout):
        return 0


def runner(partition, next_offset):
    return SimpleNamespace(topic="t", partition=partition, next_offset=next_offset)


def fence(session_ms=6000, heartbeat_ms=500):
    settings = load_settings([], env={**BASE, "OLU_KAFKA_SESSION_TIMEOUT_MS": str(session_ms),
                                      "OLU_KAFKA_HEARTBEAT_INTERVAL_MS": str(heartbeat_ms)})
    clock = Clock()
    return Fence(settings, clock), clock


def test_outputs_go_ahead_while_the_loop_checks_in_within_the_lease():
    f, clock = fence()
    assert f.lease.limit == pytest.approx(2.75)  # half of (6 s - 0.5 s)
    for _ in range(20):
        clock.now += 2.7
        assert f.check_in() and not f.holding((None, None))
    assert not f.suspended and f.held == []


def test_after_a_gap_outputs_wait_in_order_until_the_coordinator_lists_the_member():
    f, clock = fence()
    clock.now += 3.0  # e.g. SIGSTOP for 3 s: the member may have been expelled
    a, b = runner(0, 40), runner(1, None)
    produced = []
    assert f.holding((a, lambda: produced.append("a1")))
    assert f.holding((a, lambda: produced.append("a2")))  # and everything after it
    assert f.suspended and not f.check_in()
    consumer = FakeConsumer()
    runners = {("t", 0): a, ("t", 1): b}
    fetched = [Message(topic="t", partition=1, offset=7), Message(topic="t", partition=1, offset=8)]
    f.member = lambda _consumer: None  # no answer yet
    assert f.wait(consumer, FakeProducer(), runners, fetched, blocked=set()) is None
    assert produced == [] and sorted(consumer.paused) == [("t", 0), ("t", 1)]
    assert sorted(consumer.seeks) == [("t", 0, 40), ("t", 1, 7)]  # where each runner is: fetched again
    f.member = lambda _consumer: False  # expelled: librdkafka's lost callback will follow
    assert f.wait(consumer, FakeProducer(), runners, [], blocked=set()) is None and produced == []
    f.member = lambda _consumer: True
    assert f.wait(consumer, FakeProducer(), runners, [], blocked={("t", 1)}) is None
    assert produced == ["a1", "a2"] and consumer.resumed == [("t", 0)]  # a blocked partition stays paused
    assert not f.suspended and f.check_in()


def test_held_outputs_of_a_partition_no_longer_owned_are_not_produced():
    f, clock = fence()
    clock.now += 10.0
    a = runner(0, 5)
    produced = []
    f.holding((a, lambda: produced.append("a")))
    f.member = lambda _consumer: True
    f.wait(FakeConsumer(), FakeProducer(), {("t", 0): runner(0, 5)}, [], blocked=set())  # another runner now
    assert produced == []


def test_delivery_failures_while_suspended_are_decided_by_the_coordinator():
    f, clock = fence()
    assert not f.undelivered(False, "release t/0@9: timed out")  # under the lease: stop, as before
    assert f.undelivered(True, "release t/0@9: purged")  # a lost partition's: the successor's
    clock.now += 10.0
    assert not f.check_in()
    assert f.undelivered(False, "release t/0@10: timed out")  # queued releases expire on purpose
    f.member = lambda _consumer: True  # ...but the member owns its partition still: one is missing
    failure = f.wait(FakeConsumer(), FakeProducer(), {("t", 0): runner(0, 11)}, [], blocked=set())
    assert failure == "release t/0@10: timed out"
    clock.now += 10.0
    f.check_in()
    f.undelivered(False, "release t/0@12: timed out")
    f.lost()  # the lost callback: nothing to report, nothing held
    assert f.deferred == [] and f.held == [] and not f.suspended and f.fenced == 2


def test_a_timeout_served_before_the_next_check_in_is_the_fences_to_decide():
    """The pause fell after a round's produces, before its delivery reports were served: the
    expired release is reported first, with the lease not yet found broken."""
    f, clock = fence()
    clock.now += 10.0  # the process was stopped; no check-in since
    assert f.undelivered(False, "release t/0@9: timed out") and f.suspended
    assert f.deferred == ["release t/0@9: timed out"] and not f.check_in()


def test_when_every_partition_is_gone_the_fence_has_nothing_left_to_protect():
    f, clock = fence()
    clock.now += 10.0
    f.holding((runner(0, 1), lambda: None))
    assert f.wait(FakeConsumer(), FakeProducer(), {}, [], blocked=set()) is None
    assert not f.suspended and f.held == [] and f.fenced == 1


# --------------------------------------------------------------------------- the producer's timeout

def test_queued_releases_expire_before_the_member_can_be_expelled():
    s = load_settings([], env={**BASE, "OLU_KAFKA_SESSION_TIMEOUT_MS": "6000", "OLU_KAFKA_HEARTBEAT_INTERVAL_MS": "500"})
    assert s.producer_config()["message.timeout.ms"] == 4000  # 6000 - 500 - librdkafka's 1 s scan, with room
    assert load_settings([], env=BASE).producer_config()["message.timeout.ms"] == 40_500  # librdkafka's defaults
    kip848 = load_settings(["--group-protocol", "consumer"], env=BASE)
    assert kip848.producer_config()["message.timeout.ms"] == 38_500  # the broker's defaults, 45 s and 5 s
    mine = load_settings([], env={**BASE, "OLU_KAFKA_MESSAGE_TIMEOUT_MS": "20000"})
    assert mine.producer_config()["message.timeout.ms"] == "20000"  # a shorter one is the operator's
    transactional = load_settings(["--transactional"], env=BASE)
    assert "message.timeout.ms" not in transactional.producer_config()  # transactions fence instead


@pytest.mark.parametrize(("env", "under_transactions"), [
    ({"OLU_KAFKA_MESSAGE_TIMEOUT_MS": "300000"}, True),
    ({"OLU_KAFKA_DELIVERY_TIMEOUT_MS": "40501"}, True),
    ({"OLU_KAFKA_SESSION_TIMEOUT_MS": "2000", "OLU_KAFKA_HEARTBEAT_INTERVAL_MS": "1000"}, True),
    ({"OLU_KAFKA_SESSION_TIMEOUT_MS": "many"}, False),
])
def test_a_timeout_that_would_outlive_the_membership_is_refused_at_start(env, under_transactions):
    with pytest.raises(ConfigError, match="librdkafka"):
        load_settings([], env={**BASE, **env})
    if under_transactions:  # the broker fences a transactional producer: any timeout will do
        load_settings(["--transactional"], env={**BASE, **env})


def test_a_conflicting_delta_suspends_and_the_coordinator_decides():
    """Another writer stored a deletion of this partition first: the fence holds everything; a
    lost callback ends it quietly, a confirmed membership raises the conflict (stop and replay)."""
    from worker.state.exceptions import SnapshotConflict

    f, _ = fence()
    f.conflicted(SnapshotConflict("k", "a different snapshot already exists at this offset"))
    assert f.suspended and not f.check_in()
    f.member = lambda _consumer: True
    with pytest.raises(SnapshotConflict):
        f.wait(FakeConsumer(), FakeProducer(), {("t", 1): runner(1, 3)}, [], blocked=set())
    f.lost()
    assert f.conflict is None and not f.suspended and f.check_in()


def test_an_unanswering_coordinator_is_outwaited_but_a_refusal_is_not():
    """DescribeGroups refused or unreachable: after twice the expulsion time with no lost callback,
    librdkafka's own session check vouches for the membership; a "not listed" answer never does."""
    f, clock = fence()
    clock.now += 10.0
    produced = []
    f.holding((runner(0, 1), lambda: produced.append(1)))
    runners = {("t", 0): runner(0, 1)}
    runners[("t", 0)] = f.held[0][0]
    f.member = lambda _consumer: None
    f.wait(FakeConsumer(), FakeProducer(), runners, [], blocked=set())
    clock.now += f.fallback_s - 1.0
    f.wait(FakeConsumer(), FakeProducer(), runners, [], blocked=set())
    assert produced == [] and f.suspended
    clock.now += 2.0
    f.wait(FakeConsumer(), FakeProducer(), runners, [], blocked=set())
    assert produced == [1] and not f.suspended
    assert f.fallback_s == pytest.approx(2 * 5.5 + 5.0)
    # refused once: no amount of silence afterwards confirms it
    clock.now += 10.0
    assert not f.check_in()
    f._refused = True  # what member() records when the coordinator's list lacks this member
    clock.now += 100.0
    f.wait(FakeConsumer(), FakeProducer(), runners, [], blocked=set())
    assert f.suspended


def test_a_partition_assigned_while_waiting_is_paused_and_its_fetched_records_sought_back():
    f, clock = fence()
    clock.now += 10.0
    assert not f.check_in()
    consumer = FakeConsumer()
    runners = {("t", 0): runner(0, 10)}
    f.member = lambda _consumer: None
    f.wait(consumer, FakeProducer(), runners, [], blocked=set())
    assert consumer.paused == [("t", 0)] and consumer.seeks == [("t", 0, 10)]
    runners[("t", 1)] = runner(1, 50)  # assigned (and restored) during the wait
    fetched = [Message(topic="t", partition=1, offset=50), Message(topic="t", partition=1, offset=51)]
    f.wait(consumer, FakeProducer(), runners, fetched, blocked=set())
    assert consumer.paused == [("t", 0), ("t", 1)] and consumer.seeks[-1] == ("t", 1, 50)
    f.member = lambda _consumer: True
    f.wait(consumer, FakeProducer(), runners, [], blocked=set())
    assert sorted(consumer.resumed) == [("t", 0), ("t", 1)] and not f.suspended
