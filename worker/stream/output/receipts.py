"""Receipts on the receipts topic (schemas/receipt.schema.json): one per deletion request.

A receipt says what became of one request: what it named (a subject, or record ids), how many
records it unlearned, from which params version on it is in effect and what guarantee it got, or
why it was refused. It is keyed by the request id (the producer's ``request_id``, else the delete
record's position, ``{topic}/{partition}@{offset}``), so a compacted receipts topic keeps one per
request, and an auditor looks a request up by its id (``olu-worker receipts``).

The value is a pure function of the input, like a release's: ``version`` is the params version
right after the request (the delete's offset + 1; every release of the partition at or above it
reflects the request, and the first of them is published before the receipt), ``released_at``
the event time there. So an at-least-once replay sends byte-identical duplicates however it cuts
the stream into poll batches, and a transaction commits each receipt with its release.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

from ...wire import (
    RECEIPT_SCHEMA_VERSION,
    STATUS_HONOURED,
    STATUS_NOTHING,
    STATUS_REFUSED,
    derived_request_id,
)
from ..input.decode import Delete

_MAX_DOUBLE = 1.7976931348623157e308  # JSON has no infinity: the largest double stands for it


@dataclass(frozen=True, slots=True)
class Receipt:
    """A receipt to produce: ``key`` (the request id), ``value`` (JSON), the delete's input
    ``offset``, ``version`` (the params version it waits for; None: it waits for none), its
    ``status`` and ``asked_ms``, when the request was made (its record's Kafka timestamp): what the
    deadline counts from."""

    key: bytes
    value: bytes
    offset: int
    version: int | None
    status: str = STATUS_HONOURED
    asked_ms: int = 0


def request_id(event: Delete, topic: str, partition: int, offset: int) -> str:
    """The request's id: the one it carries, else its record's position (stable on a replay)."""
    return event.request_id or derived_request_id(topic, partition, offset)


def _named(event: Delete) -> dict:
    return {"subject": event.subject} if event.subject is not None else {"ids": list(event.ids)}


def _records(event: Delete, deletion) -> dict:
    """How many records the request named (a subject: the records the model learned under it)
    and what became of them."""
    if deletion is None:  # refused: nothing was looked at
        return {"named": len(event.ids), "applied": 0, "not_applied": 0, "duplicates": 0}
    not_applied, duplicates = len(deletion.not_applied), len(deletion.duplicates)
    named = len(event.ids) if event.subject is None else (
        deletion.records + not_applied + duplicates)
    return {"named": named, "applied": int(deletion.records), "not_applied": not_applied,
            "duplicates": duplicates}


def _finite(guarantee: dict) -> dict:
    return {k: (_MAX_DOUBLE if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in guarantee.items()}


def receipt(*, model_name: str, topic: str, partition: int, offset: int, event: Delete,
            deletion=None, guarantee: dict | None = None, event_time_ms: int = 0,
            refused: str | None = None, asked_ms: int = 0) -> Receipt:
    """The receipt of the delete at ``offset``: honoured (``guarantee`` given: it changed the
    model), nothing to unlearn (``deletion`` changed nothing) or refused (``refused``: the reason
    code, the dead letter's)."""
    rid = request_id(event, topic, partition, offset)
    if refused is not None:
        status = STATUS_REFUSED
    elif guarantee is not None:
        status = STATUS_HONOURED
    else:
        status = STATUS_NOTHING
    honoured = status == STATUS_HONOURED
    value = {
        "schema_version": RECEIPT_SCHEMA_VERSION,
        "request_id": rid,
        "model": model_name,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        **_named(event),
        "status": status,
        "records": _records(event, deletion),
        "version": offset + 1 if honoured else None,
        "released_at": max(0, event_time_ms) / 1000.0 if honoured else None,
        "guarantee": _finite(guarantee) if honoured else None,
    }
    if refused is not None:
        value["reason"] = refused
    return Receipt(rid.encode(), orjson.dumps(value), offset, offset + 1 if honoured else None,
                   status, asked_ms)


def pending_until(receipts: list[Receipt], version: int) -> tuple[list[Receipt], list[Receipt]]:
    """(the receipts a release at ``version`` answers, the ones still waiting)."""
    due = [r for r in receipts if r.version is not None and r.version <= version]
    return due, [r for r in receipts if r.version is None or r.version > version]
