"""Dead-letter headers (schemas/dead-letter.schema.json).

A record that fails validation is produced to the dead-letter topic with its *original* key and
value bytes, the ``olu.*`` headers built here, and the original record's other headers
(:func:`carry_headers`). The ``olu.`` namespace is closed: the seven names in
:data:`worker.wire.DEAD_LETTER_HEADERS`, each once, and :data:`~worker.wire.TRUNCATED_HEADER` on the
rare dead letter the topic cannot take whole (:func:`truncated`).

The reason codes are a bounded set (they are the ``reason`` label of the dead-letter metric). They
are defined here, not read from ``schemas/`` at runtime (the package may be installed without the
repository); ``tests/stream/test_decode.py`` checks :data:`REASONS` equals the schema's enum.
"""

from __future__ import annotations

from ..wire import (
    ERROR_DETAIL_HEADER,
    ERROR_REASON_HEADER,
    FAILED_AT_HEADER,
    HEADER_PREFIX,
    SOURCE_OFFSET_HEADER,
    SOURCE_PARTITION_HEADER,
    SOURCE_TOPIC_HEADER,
    TRUNCATED_HEADER,
    WORKER_VERSION_HEADER,
)

REASONS: tuple[str, ...] = (
    "not_utf8",
    "not_json",
    "not_object",
    "unknown_op",
    "missing_id",
    "bad_id",
    "bad_features",
    "wrong_dimension",
    "non_finite",
    "bad_label",
    "norm_exceeded",
    "oversized",
    "schema_violation",
    "key_mismatch",
    "budget_exhausted",
    "bad_ids",
    "too_many_ids",
    "duplicate_ids",
    "id_and_ids",
    "not_framed",
    "unknown_schema",
    "not_decodable",
    "schema_mismatch",
    "subject_and_ids",
    "bad_subject",
    "bad_request_id",
    "forget_by_key_off",
)
_REASON_SET = frozenset(REASONS)

#: Used for a reason code outside :data:`REASONS` (e.g. the engine's base
#: ``InvalidExample.reason == "invalid_example"``): the record still goes to the dead-letter topic
#: (never stall the partition), the metric label stays bounded, and the detail names the code.
FALLBACK_REASON = "schema_violation"

DETAIL_MAX_CHARS = 1024
#: Such a dead letter keeps this much of its key and of its value.
PREFIX_BYTES = 65_536
_ELLIPSIS = "…"


def truncate_detail(detail: object) -> str:
    """``detail`` as a string of at most :data:`DETAIL_MAX_CHARS` characters.

    >>> len(truncate_detail("x" * 5000)), truncate_detail("short")
    (1024, 'short')
    """
    text = "" if detail is None else str(detail)
    if len(text) > DETAIL_MAX_CHARS:
        text = text[: DETAIL_MAX_CHARS - len(_ELLIPSIS)] + _ELLIPSIS
    return text


def reason_of(reason: str | None) -> str:
    """A reason code from :data:`REASONS`; anything else becomes :data:`FALLBACK_REASON`.

    >>> reason_of("wrong_dimension"), reason_of("invalid_example")
    ('wrong_dimension', 'schema_violation')
    """
    return reason if reason in _REASON_SET else FALLBACK_REASON


def _decimal(name: str, value: int) -> bytes:
    number = int(value)
    if number < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {number}")
    return str(number).encode("ascii")


def dead_letter_headers(
    *,
    source_topic: str,
    partition: int,
    offset: int,
    reason: str,
    detail: str,
    worker_version: str,
    failed_at_ms: int,
) -> list[tuple[str, bytes]]:
    """The seven ``olu.*`` headers of a dead-letter record, values as UTF-8 bytes.

    An unknown ``reason`` is reported as :data:`FALLBACK_REASON` with the original code prefixed
    to the detail rather than raising: raising here would stall the partition on a poison record.
    A negative partition, offset or time is a programming error and raises ``ValueError``.

    >>> headers = dict(dead_letter_headers(
    ...     source_topic="olu.events", partition=3, offset=1043, reason="not_json", detail="",
    ...     worker_version="0.1.0", failed_at_ms=1763800000999))
    >>> headers["olu.source.offset"]
    b'1043'
    """
    detail = "" if detail is None else str(detail)
    if reason not in _REASON_SET:
        detail = f"[{str(reason)[:64]}] {detail}"
        reason = FALLBACK_REASON
    return [
        (SOURCE_TOPIC_HEADER, source_topic.encode("utf-8")),
        (SOURCE_PARTITION_HEADER, _decimal("partition", partition)),
        (SOURCE_OFFSET_HEADER, _decimal("offset", offset)),
        (ERROR_REASON_HEADER, reason.encode("ascii")),
        # "replace": a lone surrogate (from some exception text)
        # must not make the header unencodable.
        (ERROR_DETAIL_HEADER, truncate_detail(detail).encode("utf-8", "replace")),
        (WORKER_VERSION_HEADER, str(worker_version).encode("utf-8")),
        (FAILED_AT_HEADER, _decimal("failed_at_ms", failed_at_ms)),
    ]


def truncated(key: bytes | None, value: bytes | None, detail: str
              ) -> tuple[bytes | None, bytes | None, str, tuple[str, bytes]]:
    """(key prefix, value prefix, detail with a note, the :data:`TRUNCATED_HEADER`) of a record too
    large for the dead-letter topic. The whole record stays in the input topic at the offset the
    headers name; its own headers are dropped (they may be what makes it too large).

    >>> k, v, note, header = truncated(b"k", b"x" * 70_000, "oversized")
    >>> len(v), header, note.endswith("] oversized")
    (65536, ('olu.truncated', b'70001'), True)
    """
    size = len(key or b"") + len(value or b"")
    note = (f"[truncated: the record ({size} bytes of key and value) is too large for the "
            f"dead-letter topic; key and value cut to their first {PREFIX_BYTES} bytes, original "
            f"headers dropped] ")
    return (None if key is None else key[:PREFIX_BYTES], None if value is None
            else value[:PREFIX_BYTES],
            note + detail, (TRUNCATED_HEADER, _decimal("size", size)))


def record_bytes(key: bytes | None, value: bytes | None, headers) -> int:
    """An upper bound of the bytes a record takes in a record batch of its own (Kafka's message
    format v2: the batch header, the record's varints, key, value and headers)."""
    size = 61 + 32 + len(key or b"") + len(value or b"")  # batch header; attributes, varints
    for name, header_value in headers or ():
        size += 10 + len(name.encode() if isinstance(name, str)
                         else name) + len(header_value or b"")
    return size


def carry_headers(original_headers) -> list[tuple[str, bytes | None]]:
    """The original record's headers to copy onto its dead letter.

    Kept: every header outside the ``olu.`` namespace (in order, duplicates included) whose value
    is ``None`` or valid UTF-8. Dropped: ``olu.*`` headers (the namespace is closed; e.g. a replayed
    dead letter's own headers) and values that are not UTF-8, which the dead-letter schema (headers
    decoded to strings) could not describe.

    >>> carry_headers([("traceparent", b"00-ab-01"), ("olu.error.reason", b"x"), ("bin", b"\\xff")])
    [('traceparent', b'00-ab-01')]
    >>> carry_headers(None)
    []
    """
    kept: list[tuple[str, bytes | None]] = []
    for name, value in original_headers or ():
        if isinstance(name, bytes):
            try:
                name = name.decode("utf-8")
            except UnicodeDecodeError:
                continue
        if not isinstance(name, str) or name.startswith(HEADER_PREFIX):
            continue
        if isinstance(value, str):
            value = value.encode("utf-8", "replace")
        elif isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        elif value is not None and not isinstance(value, bytes):
            continue
        if value is not None:
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                continue
        kept.append((name, value))
    return kept
