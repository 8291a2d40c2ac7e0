"""The Schema Registry client of the worker, and what its errors mean.

One ``confluent_kafka.schema_registry.SchemaRegistryClient`` per process, configured from the
settings (URL, basic auth, TLS); its caches (schemas by id, ids by schema) mean the registry is
asked once per schema id, not per record. Requests are not retried inside the client
(``max.retries`` 0, a 5 s timeout): the worker retries itself, with backoff, while the partition
is paused (worker/stream/input/framed.py), so the loop never sits in a retry for long.

:func:`classify` sorts an error raised while decoding: the registry has no such schema
(``unknown_schema``: the record can never be decoded, dead-letter it) or the registry could not be
asked (:class:`~worker.formats.exceptions.RegistryUnavailable`: retry, never dead-letter).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient, SchemaRegistryError

from .exceptions import RegistryUnavailable, UndecodableRecord

REQUEST_TIMEOUT_S = 5
#: Error codes of "no schema with this id": Confluent's (Apicurio's ccompat API answers the same)
#: and its mock client's. Any other 404 (a wrong URL path, say)
#: is the registry's fault, not the record's.
SCHEMA_NOT_FOUND = frozenset({40403, 40400})


def client_config(settings) -> dict[str, Any]:
    """``SchemaRegistryClient`` configuration from the settings (secrets included: never log it)."""
    conf: dict[str, Any] = {"url": settings.schema_registry_url, "timeout": REQUEST_TIMEOUT_S,
                            "max.retries": 0}
    if settings.schema_registry_user_info:
        conf["basic.auth.credentials.source"] = "USER_INFO"
        conf["basic.auth.user.info"] = settings.schema_registry_user_info
    if settings.schema_registry_ca_location:
        conf["ssl.ca.location"] = settings.schema_registry_ca_location
    if settings.schema_registry_cert_location:
        conf["ssl.certificate.location"] = settings.schema_registry_cert_location
        conf["ssl.key.location"] = settings.schema_registry_key_location
    return conf


def new_client(settings) -> SchemaRegistryClient:
    return SchemaRegistryClient(client_config(settings))


def _transport_error(exc: BaseException) -> bool:
    """A connection, TLS or timeout error of the HTTP stack (httpx / httpcore), or an OSError."""
    if isinstance(exc, OSError):
        return True
    return any(cls.__module__.split(".")[0].startswith(("httpx", "httpcore"))
               for cls in type(exc).__mro__)


def classify(exc: BaseException) -> Exception:
    """The exception to raise for an error met while decoding: an :class:`UndecodableRecord`
    (``unknown_schema``), a :class:`RegistryUnavailable`, or ``exc`` itself (not the registry's)."""
    if isinstance(exc, SchemaRegistryError):
        if exc.http_status_code == 404 and exc.error_code in SCHEMA_NOT_FOUND:
            return UndecodableRecord("unknown_schema",
                                     "the schema id of the record is not in the registry "
                                     f"({exc.error_message[:200]})")
        return RegistryUnavailable(f"schema registry answered HTTP {exc.http_status_code} (code "
                                   f"{exc.error_code}): {exc.error_message[:200]}")
    cause = exc
    while cause is not None:
        if _transport_error(cause):
            return RegistryUnavailable(
                f"schema registry unreachable: {type(cause).__name__}: {str(cause)[:200]}")
        cause = cause.__cause__ or cause.__context__
    return exc
