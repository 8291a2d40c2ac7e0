"""The bookkeeping of exactly-once output (worker/stream/output/exactly_once.py) and the position a
transaction commits. The end-to-end proof, 20 SIGKILLs on the real broker with every release
version and dead letter seen once at read_committed, is tests/reliability/test_crash_equivalence.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.stream.output.exactly_once import (
    CommittedOutput,
    decode_metadata,
    encode_metadata,
    output_position,
)


@given(st.one_of(st.none(), st.integers(min_value=0, max_value=2**63 - 1)))
def test_metadata_round_trips_every_version(version):
    assert decode_metadata(encode_metadata(version)) == (True, version)


@pytest.mark.parametrize("metadata", [None, "", "olu1:released=", "olu1:released=x1", "other:released=5"])
def test_foreign_or_broken_metadata_is_not_ours(metadata):
    assert decode_metadata(metadata) == (False, None)


def test_committed_output_drops_exactly_what_was_committed():
    committed = CommittedOutput.from_commit(500, encode_metadata(480))
    assert [v for v in (479, 480, 481, 500) if committed.has_release(v)] == [479, 480]
    assert [o for o in (498, 499, 500, 501) if committed.has_dead_letter(o)] == [498, 499]
    nothing_released = CommittedOutput.from_commit(500, encode_metadata(None))
    assert not nothing_released.has_release(0) and nothing_released.has_dead_letter(0)


def test_a_commit_of_an_older_worker_counts_releases_up_to_its_offset():
    committed = CommittedOutput.from_commit(300, "")
    assert committed.has_release(300) and not committed.has_release(301)


def test_no_commit_means_nothing_to_drop():
    assert CommittedOutput.from_commit(-1001, None) is None  # OFFSET_INVALID


def test_a_replay_never_moves_the_committed_position_back():
    committed = CommittedOutput.from_commit(900, encode_metadata(880))
    replaying = SimpleNamespace(committed_output=committed, next_offset=400)
    assert output_position(replaying) == 900
    past_it = SimpleNamespace(committed_output=committed, next_offset=950)
    assert output_position(past_it) == 950
    from_scratch = SimpleNamespace(committed_output=committed, next_offset=None)
    assert output_position(from_scratch) == 900
    fresh = SimpleNamespace(committed_output=None, next_offset=None)
    assert output_position(fresh) is None


def test_the_last_flush_does_not_mask_the_error_the_worker_stops_on(caplog):
    """A fenced producer's flush raises too (confluent-kafka: a SystemError): logged, not raised,
    so the fencing error an operator needs is the one the worker reports."""
    from types import SimpleNamespace

    from worker.stream.app import Worker

    class Fenced:
        def flush(self, timeout):
            raise SystemError("<method 'flush' of 'cimpl.Producer' objects> returned NULL")

    with caplog.at_level("WARNING"):
        Worker._flush_at_exit(SimpleNamespace(producer=Fenced()))
    assert any(r.getMessage() == "producer flush at exit failed" for r in caplog.records)


def test_a_stop_whose_last_commit_meets_a_rebalance_aborts_it_instead_of_failing(caplog):
    """The last transaction of a stop, its offsets' generation gone (a member joined as this one
    left): aborted, the successor replays it; mid-stream the same error still stops the worker."""
    from types import SimpleNamespace

    from confluent_kafka import KafkaError, KafkaException

    from worker.stream.output.exactly_once import Transactions

    class Producer:
        def __init__(self):
            self.calls = []

        def __getattr__(self, name):
            return lambda *a, **k: self.calls.append(name)

        def send_offsets_to_transaction(self, *a):
            raise KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION, "generation gone",
                                            txn_requires_abort=True))

    runner = SimpleNamespace(outbox=SimpleNamespace(holding=False), topic="t", partition=0,
                             next_offset=5, published_version=5, committed_output=None)
    consumer = SimpleNamespace(consumer_group_metadata=lambda: None)
    mid = Transactions(Producer(), settle=lambda r, t: None)
    with pytest.raises(KafkaException):
        mid.end_round([runner], consumer, force=True)
    producer = Producer()
    last = Transactions(producer, settle=lambda r, t: None)
    with caplog.at_level("WARNING"):
        assert last.end_round([runner], consumer, force=True, last=True) is False
    assert producer.calls[-1] == "abort_transaction" and last.done
    assert any("last transaction was aborted" in r.getMessage() for r in caplog.records)
