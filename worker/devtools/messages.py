"""Stand-ins for confluent-kafka ``Message`` objects, for driving ``PartitionRunner.process`` in
process: only the accessors the stream layer calls (key, value, offset, partition, topic,
timestamp, headers, error)."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import TIMESTAMP_CREATE_TIME


@dataclass(frozen=True)
class FakeMessage:
    _topic: str
    _partition: int
    _offset: int
    _key: bytes | None
    _value: bytes | None
    _timestamp_ms: int = 1_700_000_000_000
    _headers: list | None = None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_CREATE_TIME, self._timestamp_ms

    def headers(self) -> list | None:
        return self._headers

    def error(self):
        return None


def messages(topic: str, partition: int, records, start: int = 0) -> list[FakeMessage]:
    """``(key, value, ...)`` records as consecutive messages from offset ``start``."""
    return [FakeMessage(topic, partition, start + i, rec[0], rec[1], 1_700_000_000_000 + start + i)
            for i, rec in enumerate(records)]
