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
from .releases import release_value

__all__ = ["release_encoder"]

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
