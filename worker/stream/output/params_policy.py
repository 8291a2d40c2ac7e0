"""Says at start what a log-compacted params topic keeps under at-least-once delivery.

A compacted topic keeps the last record of each key, so it holds whatever landed last. Under
transactions a member that lost its partitions is fenced by the broker and read_committed readers
never see its output. Under at-least-once delivery the worker fences itself (stream/ownership.py):
a paused member's queued releases expire before it can be expelled, and the loop produces only
under a lease. What is left is a request already on its way at the instant the process stops, or
one delayed in the network past the session timeout; the operator is told once, at start, with
the settings that remove it (docs/worker.md 5.6).
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from ...logs import get_logger
from .dlq import topic_config

log = get_logger("olu.release")

COMPACTED_AT_LEAST_ONCE = (
    "the params topic is log-compacted and releases are at-least-once: the worker fences a member "
    "that lost its partitions (queued releases expire first, the loop produces under a lease), but "
    "a produce request already on its way when a worker stops, or delayed in the network past the "
    "session timeout, can still land after its successor's; OLU_TRANSACTIONAL=true with "
    "read_committed readers closes that window (docs/worker.md 5.6)")


def cleanup_policy(admin_config: dict, topic: str) -> str | None:
    """The topic's ``cleanup.policy`` (``delete``, ``compact`` or both), or None if unknown."""
    admin = AdminClient(admin_config)  # kept until the answer is in: a dropped client cancels it
    try:
        return topic_config(admin, topic, "cleanup.policy")
    except Exception as exc:  # noqa: BLE001 - unknown: say nothing more than that
        log.info("params topic cleanup policy unknown", extra={"topic": topic, "error": str(exc)})
        return None


def warn_if_compacted_at_least_once(settings, policy_of=cleanup_policy) -> bool:
    """Log the residual window once when it applies; True if it was logged.

    >>> from types import SimpleNamespace
    >>> s = SimpleNamespace(transactional=False, params_topic="p", admin_config=dict)
    >>> warn_if_compacted_at_least_once(s, lambda *_: "compact,delete")
    True
    >>> warn_if_compacted_at_least_once(s, lambda *_: "delete")
    False
    """
    if settings.transactional:
        return False
    policy = policy_of(settings.admin_config(), settings.params_topic)
    if policy is None or "compact" not in policy:
        return False
    log.warning(COMPACTED_AT_LEAST_ONCE,
                extra={"topic": settings.params_topic, "cleanup_policy": policy})
    return True
