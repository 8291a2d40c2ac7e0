"""Exceptions of the formats layer (Schema Registry framing).

:class:`UndecodableRecord` is a verdict on one input record, like the stream layer's
``DeadLetter`` (which the stream layer turns it into): ``reason`` is a dead-letter code.
:class:`RegistryUnavailable` is not about the record: the registry could not be asked (down,
timing out, refusing our credentials), so the record is retried later and never dead-lettered.
"""

from __future__ import annotations

from ..exceptions import OluWorkerError

__all__ = ["BadKeyedLine", "NoPlan", "RegistryUnavailable", "UndecodableRecord"]


class UndecodableRecord(OluWorkerError, ValueError):
    """A record that can never be decoded as it is: ``reason`` is a dead-letter reason code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class RegistryUnavailable(OluWorkerError, RuntimeError):
    """The Schema Registry did not answer usefully; retry the same record later."""


class BadKeyedLine(OluWorkerError, ValueError):
    """A line of a keyed JSON-lines file that cannot be a Kafka record (formats/keyed_lines.py)."""


class NoPlan(OluWorkerError, ValueError):
    """A writer schema the compiled readers do not walk (the message says what): its records take
    the generic path (avro_plan.py, protobuf_plan.py, jsonschema_plan.py)."""
