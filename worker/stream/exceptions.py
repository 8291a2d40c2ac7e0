"""Exceptions of the stream layer: a record to reject, a delta write put off, and failures that
stop the worker.

:class:`DeadLetter` is a verdict on one input record, not a failure: the decoder raises it and the
partition runner catches it at once and routes the record to the dead-letter topic. It is an
exception because a decoder's checks are deep in the parsing, and raising is how they stop it.
"""

from __future__ import annotations

from ..exceptions import OluWorkerError
from ..state.exceptions import StorageUnavailable
from .deadletter import REASONS, truncate_detail

__all__ = ["ClientFailed", "DeadLetter", "DeliveryFailed", "NotAttempted", "PartialRequest",
           "RegistryStartFailed", "UnreleasableState"]

_REASON_SET = frozenset(REASONS)


class DeadLetter(OluWorkerError):
    """A record to route to the dead-letter topic: ``reason`` is a code from the dead-letter
    schema's enum, ``detail`` a short message (<= 1024 characters) without record values."""

    def __init__(self, reason: str, detail: str = ""):
        if reason not in _REASON_SET:
            raise ValueError(f"unknown dead-letter reason {reason!r}")
        detail = truncate_detail(detail)
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


class UnreleasableState(OluWorkerError, RuntimeError):
    """The iterate is not finite; publishing it would put nulls
    on the wire (orjson maps NaN to null)."""


class FeatureSpecChanged(OluWorkerError, RuntimeError):
    """The partition's state was trained under another feature spec than the one configured: a
    different model, which is not restored into this one (OLU_FEATURES_RESET starts afresh)."""


class PartialRequest(OluWorkerError, RuntimeError):
    """A deletion request was refused for an exhausted budget after the engine had already
    unlearned some of its records (an algorithm that applies a request's records one by one). That
    state has noise no delta holds, so it must not be published or replayed with fresh noise: the
    worker stops instead (docs/worker.md 3.2)."""


class DeliveryFailed(OluWorkerError, RuntimeError):
    """A release or dead letter could not be delivered; restart and replay from the snapshot."""


class ClientFailed(OluWorkerError, RuntimeError):
    """The Kafka clients hit an error that retrying never heals (wrong credentials, fatal error)."""


class RegistryStartFailed(OluWorkerError, RuntimeError):
    """The release schema could not be registered at start (OLU_RELEASE_FORMAT)."""


class NotAttempted(StorageUnavailable):
    """Not written because an earlier delta of the partition
    is not durable (order of durability)."""


class ReplayFloorUnknown(OluWorkerError, RuntimeError):
    """An assigned input partition's end offset could not be read: without it a replay could publish
    releases older than its predecessor's, so the worker
    stops and is restarted (replay_floor.py)."""
