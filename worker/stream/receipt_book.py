"""One partition's receipts between the request and their delivery (output/receipts.py).

A receipt is kept from the moment its request is answered until the receipts topic has it. An
honoured request's receipt waits for the first release at or above its version (it is produced
after that release, never before); the others wait for nothing. A full snapshot carries every
receipt not yet known delivered: a restore from it never meets their deletes again (they lie
before its offset), so it sends them once more, byte-identical, behind its first release.

>>> from worker.stream.output.receipts import Receipt
>>> book = ReceiptBook()
>>> book.keep(Receipt(b"r-1", b"{}", 10, 11), waits=True)
>>> book.keep(Receipt(b"r-2", b"{}", 12, None), waits=False)
>>> [r.key for r in book.answered_by(11)], book.waiting
([b'r-1'], [])
>>> again = ReceiptBook.restored(book.stored())
>>> [r.key for r in again.take_due()], [r.key for r in again.answered_by(20)]
([b'r-2'], [b'r-1'])
>>> book.delivered(Receipt(b"r-1", b"{}", 10, 11)); book.stored()
[[12, None, 'r-2', '{}', 'honoured', 0]]
>>> book.pending, book.oldest_age(now_ms=2500.0)
(1, 2.5)
"""

from __future__ import annotations

from .output.receipts import Receipt, pending_until


class ReceiptBook:
    def __init__(self):
        self.waiting: list[Receipt] = []  # honoured: wait for a release at or above their version
        self.unconfirmed: dict[int, Receipt] = {}  # by the delete's input offset
        self._due: list[Receipt] = []  # restored ones that wait for no release

    def keep(self, made: Receipt, *, waits: bool) -> None:
        """Hold ``made`` until delivered; ``waits``: behind the release that answers it."""
        self.unconfirmed[made.offset] = made
        if waits:
            self.waiting.append(made)

    def answered_by(self, version: int) -> list[Receipt]:
        """The waiting receipts a release at ``version`` answers (they leave the queue)."""
        due, self.waiting = pending_until(self.waiting, version)
        return due

    def take_due(self) -> list[Receipt]:
        """Restored receipts that wait for no release: out with the next batch."""
        due, self._due = self._due, []
        return due

    def delivered(self, made: Receipt) -> None:
        self.unconfirmed.pop(made.offset, None)

    @property
    def pending(self) -> int:
        """Requests answered whose receipt is not yet delivered."""
        return len(self.unconfirmed)

    def oldest_age(self, now_ms: float) -> float:
        """Seconds since the oldest pending request was made (0 when none is pending). Safe from
        another thread (a metrics scrape): the values are copied in one step."""
        asked = [r.asked_ms for r in list(self.unconfirmed.values())]
        return max(0.0, (now_ms - min(asked)) / 1000.0) if asked else 0.0

    def stored(self) -> list[list]:
        """What a snapshot header keeps of each undelivered one: [offset, version, key, value,
        status, asked_ms]."""
        return [[r.offset, r.version, r.key.decode(), r.value.decode(), r.status, r.asked_ms]
                for r in self.unconfirmed.values()]

    @classmethod
    def restored(cls, stored) -> ReceiptBook:
        """The book of a snapshot's :meth:`stored` receipts: each waits again."""
        book = cls()
        for offset, version, key, value, status, asked_ms in stored:
            made = Receipt(key.encode(), value.encode(), int(offset),
                           None if version is None else int(version), status, int(asked_ms))
            book.keep(made, waits=made.version is not None)
            if made.version is None:
                book._due.append(made)
        return book
