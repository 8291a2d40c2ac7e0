"""Releases in a Schema Registry format (``OLU_RELEASE_FORMAT`` avro or json-schema) for the loop.

:func:`release_encoder` registers the release schema under ``{params topic}-value`` when the worker
starts, with a release of a fresh model as the sample, so a registry that is down or refuses the
schema (e.g. incompatible with what is registered there) fails the start naming the setting,
instead of a release later. After that the serializer holds the schema id, and encoding a release
needs no registry (worker/formats/release.py).
"""

from __future__ import annotations

from ...formats.registry import new_client
from ...formats.release import ReleaseEncoder
from ...logs import get_logger
from ..exceptions import RegistryStartFailed
from ..input.deletes import Delete
from .receipts import receipt
from .releases import release_value

__all__ = ["receipt_encoder", "release_encoder"]

log = get_logger("olu.registry")


def release_encoder(settings, model) -> ReleaseEncoder | None:
    """The encoder of releases (None: JSON), its schema registered; ``model``: a fresh model."""
    if settings.release_format == "json":
        return None
    sample = release_value(model_name=settings.model_name or settings.group_id,
                           topic=settings.input_topics[0],
                           partition=0, offset=0, event_time_ms=0, model=model)
    return _registered(settings, settings.params_topic, "release", sample)


def receipt_encoder(settings) -> ReleaseEncoder | None:
    """The encoder of receipts, in the releases' format (None: JSON), its schema registered under
    ``{receipts topic}-value`` now, with a receipt as the sample."""
    if settings.release_format == "json":
        return None
    sample = receipt(model_name=settings.model_name or settings.group_id,
                     topic=settings.input_topics[0], partition=0, offset=0,
                     event=Delete(("sample",)))
    return _registered(settings, settings.receipts_topic, "receipt", sample.value)


def _registered(settings, topic: str, kind: str, sample: bytes) -> ReleaseEncoder:
    """An encoder of ``kind`` records on ``topic``, its schema registered now with ``sample``."""
    encoder = ReleaseEncoder(settings.release_format, new_client(settings), topic, kind=kind)
    try:
        encoder.register(sample)
    except Exception as exc:
        raise RegistryStartFailed(
            f"OLU_RELEASE_FORMAT (--release-format) = {settings.release_format}: could not "
            f"register the {kind} schema under {topic}-value at "
            f"OLU_SCHEMA_REGISTRY_URL: {type(exc).__name__}: {str(exc)[:300]}") from None
    log.info(f"{kind} schema registered", extra={"subject": f"{topic}-value",
                                                 "format": settings.release_format})
    return encoder
