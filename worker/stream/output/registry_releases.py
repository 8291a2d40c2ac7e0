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
    encoder = ReleaseEncoder(settings.release_format, new_client(settings), settings.params_topic)
    sample = release_value(model_name=settings.model_name or settings.group_id,
                           topic=settings.input_topics[0],
                           partition=0, offset=0, event_time_ms=0, model=model)
    try:
        encoder.register(sample)
    except Exception as exc:
        raise RegistryStartFailed(
            f"OLU_RELEASE_FORMAT (--release-format) = {settings.release_format}: could not "
            f"register the release schema under {settings.params_topic}-value at "
            f"OLU_SCHEMA_REGISTRY_URL: {type(exc).__name__}: {str(exc)[:300]}") from None
    log.info("release schema registered", extra={"subject": f"{settings.params_topic}-value",
                                                  "format": settings.release_format})
    return encoder


def receipt_encoder(settings) -> ReleaseEncoder | None:
    """The encoder of receipts, in the releases' format (None: JSON), its schema registered under
    ``{receipts topic}-value`` now, with a receipt as the sample."""
    if settings.release_format == "json":
        return None
    encoder = ReleaseEncoder(settings.release_format, new_client(settings),
                             settings.receipts_topic, kind="receipt")
    sample = receipt(model_name=settings.model_name or settings.group_id,
                     topic=settings.input_topics[0], partition=0, offset=0,
                     event=Delete(("sample",)))
    try:
        encoder.register(sample.value)
    except Exception as exc:
        raise RegistryStartFailed(
            f"OLU_RELEASE_FORMAT (--release-format) = {settings.release_format}: could not "
            f"register the receipt schema under {settings.receipts_topic}-value at "
            f"OLU_SCHEMA_REGISTRY_URL: {type(exc).__name__}: {str(exc)[:300]}") from None
    log.info("receipt schema registered", extra={"subject": f"{settings.receipts_topic}-value",
                                                  "format": settings.release_format})
    return encoder
