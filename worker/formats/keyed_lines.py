"""Keyed events as JSON lines: what ``olu-worker produce`` sends, one Kafka record per line.

A line is either an event of the input schemas (schemas/insert.schema.json, delete.schema.json),
whose Kafka key is then its ``id``, or an envelope naming the partitioning key (a data subject)::

    {"op": "insert", "id": "r-1", "x": [0.1, 0.2], "y": 1}
    {"key": "user-7", "value": {"op": "insert", "id": "user-7/r-2", "x": [0.3, 0.1], "y": 0}}
    {"key": "user-7", "value": {"op": "delete", "ids": ["user-7/r-2"]}}
    {"key": "r-1", "value": null}

(the last is a tombstone: it deletes the record whose id is its key). Only what a record needs is
checked here (JSON, an object, a key); the event itself is the worker's to judge, so a malformed
event reaches it and is dead-lettered with its reason, as any producer's would be. Blank lines
are skipped.

>>> list(keyed_records([b'{"op": "delete", "id": "r-1"}', b'', b'{"key": "u", "value": null}']))
[(b'r-1', {'op': 'delete', 'id': 'r-1'}), (b'u', None)]
>>> try:
...     list(keyed_records([b'{"op": "delete", "ids": ["a", "b"]}']))
... except BadKeyedLine as exc:
...     print(exc)
line 1: an event without an "id" needs its key: write {"key": "<key>", "value": <event>}
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import orjson

from .exceptions import BadKeyedLine

__all__ = ["keyed_records", "numbered_records"]


def keyed_records(lines: Iterable[bytes]) -> Iterator[tuple[bytes, dict | None]]:
    """(Kafka key, event or None for a tombstone) for each non-blank line; a line that cannot be a
    record raises :class:`BadKeyedLine` naming its number."""
    for _number, key, event in numbered_records(lines):
        yield key, event


def numbered_records(lines: Iterable[bytes]) -> Iterator[tuple[int, bytes, dict | None]]:
    """:func:`keyed_records` with each record's line number first."""
    for number, line in enumerate(lines, 1):
        if line.strip():
            yield (number, *_record(number, line))


def _record(number: int, line: bytes) -> tuple[bytes, dict | None]:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise BadKeyedLine(f"line {number}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BadKeyedLine(f"line {number}: expected a JSON object, got {type(value).__name__}")
    if "key" in value and "op" not in value:
        key, event = value["key"], value.get("value")
        extra = sorted(set(value) - {"key", "value"})
        if extra or "value" not in value:
            raise BadKeyedLine(f"line {number}: an envelope has exactly \"key\" and \"value\""
                               + (f", not {', '.join(extra)}" if extra else ""))
        if not isinstance(key, str) or not key:
            raise BadKeyedLine(f"line {number}: \"key\" must be a non-empty string")
        if event is not None and not isinstance(event, dict):
            raise BadKeyedLine(
                f"line {number}: \"value\" must be an event object or null (a tombstone)")
        return key.encode(), event
    key = value.get("id")
    if not isinstance(key, str) or not key:
        raise BadKeyedLine(f"line {number}: an event without an \"id\" needs its key: write "
                           "{\"key\": \"<key>\", \"value\": <event>}")
    return key.encode(), value
