"""A synchronous commit given up on (no broker answered) that fails later, once shutdown has closed
the consumer, ends quietly: no ``Exception in thread olu-commit`` traceback on SIGTERM."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from worker.stream.checkpoints import Checkpoints


class ClosedConsumer:
    def commit(self, offsets, asynchronous):
        raise RuntimeError("Consumer closed")


def test_a_commit_that_finds_the_consumer_closed_raises_nothing_in_its_thread(monkeypatch):
    raised = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    checkpoints = Checkpoints(None, bytes_per_second=0.0, upload_spread=0.0, transactional=False)
    checkpoints.consumer = ClosedConsumer()
    runner = SimpleNamespace(topic="t", partition=0, snapshot_offset=10)
    checkpoints.commit([runner])  # synchronous: on a thread of its own (finished_within)
    checkpoints.commit([runner], asynchronous=True)
    checkpoints.shutdown()
    assert raised == []
