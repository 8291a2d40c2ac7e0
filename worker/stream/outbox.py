"""A partition's releases, in input order, each held until
every deletion delta before it is durable.

Invariant 2 (docs/worker.md 4): a deletion's post-noise state is durable before its release is
published, and so is every later release of the partition, since each one is a function of that
state. The delta object is written in the background so the loop goes on learning while the store
call (a PUT, or a write + fsync) runs; the release waits here instead of the whole partition.

Deltas become durable in the order of their deletions: each background write first checks that
the one before it is durable, and otherwise gives up without writing (``NotAttempted``). So after
a failure no later delta exists without the earlier ones, and a restore never adopts a stored
post-noise state built on a deletion whose own noise was lost. The loop then pauses the
partition, and :meth:`Outbox.retry` writes the missing deltas in order on its own thread.

**Group commit.** The writer thread takes every delta queued behind the one it is about to write
(up to ``MAX_GROUP`` of them, ``MAX_GROUP_BYTES`` of arrays) and stores them in one object. One
store call per delta capped a worker at 1 / (PUT latency) deletions per second, for all its
partitions (one writer thread): ~400/s on a local S3 server, tens per second on a remote one.
Spread-out deletions still go one per object, as before; a group is all durable or not at all.
:meth:`Outbox.seal` (called when a full snapshot is captured) keeps the deltas before it out of
any group with the deltas after it, so no group spans a full snapshot's offset.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, wait

from ..state.exceptions import StorageUnavailable
from .exceptions import NotAttempted

#: Deltas a partition may have in flight before new deletions wait for the oldest (backpressure:
#: the delta writer is one thread, so a burst of deletions cannot queue without bound).
MAX_DELTAS_IN_FLIGHT = 4096
MAX_GROUP = 1024  # deltas per stored object at most (a burst: one fsync'd object per 1,024)
MAX_GROUP_BYTES = 8 << 20  # and the bytes of their arrays (a group of one may exceed it)


class DeltaWrite:
    """One deletion's delta: what to store, the release it unlocks, and its write."""

    __slots__ = ("offset", "header", "arrays", "release", "future", "written", "sealed", "group")

    def __init__(self, offset: int, header: dict, arrays: dict, release):
        self.offset, self.header, self.arrays, self.release = offset, header, arrays, release
        self.future: Future | None = None
        self.written = False  # set by whichever thread completed the write (its own or a group's)
        self.sealed = False  # the last delta a group may take before a full snapshot's capture
        self.group: list[DeltaWrite] | None = None  # what its write tried to store (leader only)

    @property
    def entry(self) -> tuple[int, dict, dict]:
        return self.offset, self.header, self.arrays

    @property
    def nbytes(self) -> int:
        return sum(getattr(a, "nbytes", 0) for a in self.arrays.values())


def _run_now(fn, *args) -> Future:
    """``executor.submit`` without an executor: run on the calling thread, return a done future."""
    future: Future = Future()
    try:
        future.set_result(fn(*args))
    # delivered through the future, as an executor does
    except BaseException as exc:  # noqa: BLE001
        future.set_exception(exc)
    return future


class Outbox:
    """Releases of one partition in order; ``write([(offset, header, arrays), ...])`` stores
    consecutive deltas in one object.

    ``submit`` is an executor's ``submit`` with a single worker thread (writes must start in
    submission order), or None to write on the calling thread.
    """

    def __init__(self, write, submit=None, *, max_in_flight: int = MAX_DELTAS_IN_FLIGHT):
        self._write = write
        self._submit = submit or _run_now
        self._max_in_flight = max_in_flight
        self._items: deque = deque()
        self._last: DeltaWrite | None = None
        # submitted, not attempted yet (both threads: _lock)
        self._queued: deque[DeltaWrite] = deque()
        # Deltas not known durable yet, oldest first (they become durable in order: a prefix is).
        self._unwritten: deque[DeltaWrite] = deque()
        self._lock = threading.Lock()
        self.failed: DeltaWrite | None = None  # the first delta whose write failed, until retried

    # ----------------------------------------------------------------- adding
    def release(self, release) -> None:
        self._items.append(release)

    def delta(self, offset: int, header: dict, arrays: dict, release) -> bool:
        """Queue a deletion's delta and its release; False if the write already failed."""
        ok = self.deltas([(offset, header, arrays)])
        self._items.append(release)
        return ok

    def deltas(self, entries: list[tuple[int, dict, dict]]) -> bool:
        """Queue consecutive deletions' deltas ``[(offset, header, arrays), ...]`` with one
        hand-off to the writer (a poll batch's deletions: one task, group-committed in objects of
        up to ``MAX_GROUP``); each is still its own entry and durable before any later release.
        False if the write already failed (a writer on the calling thread)."""
        if not entries:
            return True
        in_flight = self._unwritten  # not a walk over every held item: a burst holds thousands
        while in_flight and in_flight[0].written:
            in_flight.popleft()
        if len(in_flight) + len(entries) > self._max_in_flight and in_flight:
            in_flight[0].future.exception()  # wait for the oldest: its outcome is read by ready()
        items = [DeltaWrite(offset, header, arrays, None) for offset, header, arrays in entries]
        in_flight.extend(items)
        previous, self._last = self._last, items[-1]
        with self._lock:
            self._queued.extend(items)
        future = self._submit(self._write_chain, previous, items)
        for item in items:
            item.future = future
        self._items.extend(items)
        return not (future.done() and not items[-1].written)

    def seal(self) -> None:
        """No delta queued so far is grouped with a later one
        (a full snapshot is being captured)."""
        with self._lock:
            if self._last is not None:
                self._last.sealed = True

    def _write_chain(self, previous: DeltaWrite | None, items: list[DeltaWrite]) -> None:
        """Write ``items`` in order (writer thread); after a failure the rest leave the queue
        unattempted, for :meth:`retry` to write in order."""
        try:
            for item in items:
                self._write_after(previous, item)
                previous = item
        except BaseException:
            with self._lock:
                for item in items:
                    if not item.written:
                        self._unqueue_locked(item)
            raise

    def _write_after(self, previous: DeltaWrite | None, item: DeltaWrite) -> None:
        if item.written:
            return  # stored in the group of an earlier delta
        if previous is not None and not previous.written:
            self._unqueue(item)
            raise NotAttempted(f"delta@{item.offset}",
                               f"waits for the delta at offset {previous.offset}")
        item.group = self._take_group(item)
        self._store(item.group)

    def _store(self, group: list[DeltaWrite]) -> None:
        """Write ``group`` as one object; each of its deltas is durable once this returns."""
        self._write([d.entry for d in group])
        for d in group:
            d.written = True

    def _take_group(self, item: DeltaWrite) -> list[DeltaWrite]:
        """``item`` and the deltas queued right behind it, off the queue (writer thread)."""
        with self._lock:
            if not self._queued or self._queued[0] is not item:  # not expected: write it alone
                self._unqueue_locked(item)
                return [item]
            group, size = [self._queued.popleft()], item.nbytes
            while (self._queued and not group[-1].sealed and len(group) < MAX_GROUP
                   and size + self._queued[0].nbytes <= MAX_GROUP_BYTES):
                size += self._queued[0].nbytes
                group.append(self._queued.popleft())
            return group

    def _unqueue(self, item: DeltaWrite) -> None:
        with self._lock:
            self._unqueue_locked(item)

    def _unqueue_locked(self, item: DeltaWrite) -> None:
        if item in self._queued:
            self._queued.remove(item)

    # ----------------------------------------------------------------- taking
    def ready(self) -> list:
        """Pop the releases that may be published now, in order.

        Stops at a delta still being written, or at one whose write failed (``failed`` is then
        set). A failure other than storage being unavailable (a conflicting object: another
        writer owns the partition) is raised.
        """
        out = []
        items = self._items
        while items:
            head = items[0]
            if isinstance(head, DeltaWrite):
                if not head.written:
                    if not head.future.done():
                        break
                    exc = head.future.exception()
                    if exc is not None and not isinstance(exc, StorageUnavailable):
                        raise exc
                    if not head.written:
                        self.failed = head
                        break
                head = head.release  # None: a deletion whose release is a later one (coalesced)
            if head is not None:
                out.append(head)
            items.popleft()
        return out

    @property
    def pending(self) -> bool:
        """Some delta is not durable yet (in flight or failed)."""
        return any(not d.written for d in self._deltas())

    @property
    def holding(self) -> bool:
        """Some release is still held (behind a delta not yet
        durable, or not taken by :meth:`ready`)."""
        return bool(self._items)

    @property
    def in_flight(self) -> bool:
        """Some delta write is still running or queued (its release may become ready any moment)."""
        return any(not d.written and not d.future.done() for d in self._deltas())

    def settle(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for the writes in
        flight; True if every delta is durable."""
        futures = [d.future for d in self._deltas() if not d.written]
        if futures:
            wait(futures, timeout=timeout)
        return not self.pending

    def retry(self) -> list:
        """Write every delta that is not durable, in order, on this thread; then :meth:`ready`.

        Raises :class:`StorageUnavailable` while the store is still down.
        """
        for item in list(self._deltas()):
            if item.written:
                continue
            item.future.exception()  # a write still running in the background finishes first
            if not item.written:
                self._unqueue(item)
                # The same object again: a PUT that timed out may have landed, and only identical
                # content is taken as a retry (anything else is another writer's).
                self._store(item.group or [item])
        self.failed = None
        return self.ready()

    def cancel(self, timeout: float) -> None:
        """Drop the writes not started yet and wait up to ``timeout`` for a running one (the
        partition was lost: another member may own it, so no write may land after this returns)."""
        running = [d.future for d in self._deltas() if not d.future.cancel()]
        if running:
            wait(running, timeout=timeout)
        self._items.clear()
        self._unwritten.clear()
        with self._lock:
            self._queued.clear()

    def _deltas(self):
        return (item for item in self._items if isinstance(item, DeltaWrite))
