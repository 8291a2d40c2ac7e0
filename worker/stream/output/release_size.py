"""Will the largest release fit the params topic? Checked at start.

A release carries every weight: as JSON up to 25 bytes a weight (``-1.2345678901234567e-300,``), in
Avro 8. At d = 65,536 a JSON release can take 1.6 MB, over Kafka's default limit of 1 MiB
(``max.message.bytes`` = 1,048,588); the broker would refuse the first release and stop the worker
mid-stream. So a worker whose largest release could exceed that asks the topic for its limit when
it starts and refuses to run, naming the settings that fix it (a broker that does not answer only
gets a warning: the limit is unknown, the first release will tell).

>>> from types import SimpleNamespace
>>> s = SimpleNamespace(dim=65_536, loss="logistic", classes=None, release_format="json",
...                     feature_spec=None, params_topic="olu.params")
>>> (release_bytes_bound(s) > 1_048_588,
...  release_bytes_bound(SimpleNamespace(**{**vars(s), "release_format": "avro"})))
(True, 532480)
>>> released_weights(SimpleNamespace(dim=1_000, loss="softmax", classes=["a", "b", "c"]))  # K x d
3000
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from ...exceptions import ConfigError
from ...logs import get_logger
from .dlq import KAFKA_DEFAULT_MAX_MESSAGE_BYTES, topic_max_message_bytes

log = get_logger("olu.release")

BYTES_PER_WEIGHT = {"json": 25, "json-schema": 25, "avro": 8}
OTHER_FIELDS_BYTES = 8192  # the release's other fields and its headers, with room


def released_weights(settings) -> int:
    """How many weights a release carries: d, or K d for a K-class softmax (its matrix)."""
    classes = getattr(settings, "classes", None)
    return settings.dim * (len(classes) if settings.loss == "softmax" and classes else 1)


def _label_bytes(settings) -> int:
    """A softmax release's class labels, escaped, with their separators."""
    classes = getattr(settings, "classes", None) if settings.loss == "softmax" else None
    return 0 if not classes else sum(2 * len(str(c).encode()) + 4 for c in classes)


def release_bytes_bound(settings) -> int:
    """The most bytes one release can take in the configured format."""
    spec = getattr(settings, "feature_spec", None)
    # the spec's text, escaped, and digest
    spec_bytes = 0 if spec is None else 2 * len(spec.text.encode()) + 128
    return ((
        BYTES_PER_WEIGHT[
            settings.release_format] * released_weights(settings) + OTHER_FIELDS_BYTES + spec_bytes)
            + _label_bytes(settings))


def topic_limit(admin_config: dict, topic: str) -> int | None:
    """The topic's ``max.message.bytes`` (its own, or the broker's default), or None if unknown."""
    admin = AdminClient(admin_config)
    try:
        return topic_max_message_bytes(admin, topic)
    except Exception as exc:  # noqa: BLE001 - unknown: the first release will tell
        log.warning("params topic limit unknown; a release may be too large for it", extra={
            "topic": topic, "error": str(exc)})
        return None


def check_release_fits(settings, limit_of=topic_limit) -> None:
    """Raise :class:`ConfigError` when the largest release exceeds the params topic's limit."""
    bound = release_bytes_bound(settings)
    if bound <= KAFKA_DEFAULT_MAX_MESSAGE_BYTES:
        return  # fits any topic at Kafka's defaults: nothing to ask
    limit = limit_of(settings.admin_config(), settings.params_topic)
    if limit is None or bound <= limit:
        return
    avro = (BYTES_PER_WEIGHT[
        "avro"] * released_weights(settings) + OTHER_FIELDS_BYTES + _label_bytes(settings))
    hint = (f"set OLU_RELEASE_FORMAT=avro ({avro:,} bytes at most) or raise"
            if settings.release_format != "avro"
            else "raise")
    shape = (f"OLU_DIM {settings.dim:,}" if released_weights(settings) == settings.dim else
             f"OLU_DIM {settings.dim:,} x {len(settings.classes)} OLU_CLASSES")
    raise ConfigError(
        f"a release at {shape} can take {bound:,} bytes as {settings.release_format}, more than "
        f"the params topic {settings.params_topic!r} takes (max.message.bytes {limit:,}): {hint} "
        f"the topic's max.message.bytes (and the broker's message.max.bytes)")
