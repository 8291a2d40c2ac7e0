"""Structured logs: one JSON object per line (or plain text), on stderr.

A JSON line holds ``ts`` (RFC 3339, UTC, milliseconds), ``level``, ``logger``, ``msg``, every field
passed with ``extra={...}``, and ``exc`` with the traceback when there is one::

    log.info("partition assigned", extra={"topic": "olu.events", "partition": 3, "offset": 1200})
    {"ts":"2025-01-01T12:00:00.000Z","level":"INFO","logger":"olu.worker","msg":"partition
    assigned",...}

PRIVACY: never log a record's features, labels or ids, nor any noise vector, noise seed or
pre-noise state (docs/worker.md 4.1). Log topics, partitions, offsets, counts, reason codes and
durations only. Nothing here can tell the difference, so this is the caller's duty.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson

__all__ = ["JsonFormatter", "TextFormatter", "configure_logging", "get_logger"]

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = (frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)))
             | {"message", "asctime", "taskName"})
_CORE = ("ts", "level", "logger", "msg")
_HANDLER_MARK = "_olu_handler"


def _rfc3339(created: float) -> str:
    """
    >>> _rfc3339(0.0)
    '1970-01-01T00:00:00.000Z'
    """
    return datetime.fromtimestamp(created,
                                  tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _extras(record: logging.LogRecord) -> dict:
    out = {}
    for key, value in vars(record).items():
        if key in _STANDARD or key.startswith("_"):
            continue
        out[f"extra_{key}" if key in _CORE or key == "exc" else key] = value
    return out


def _fallback(value):
    """orjson ``default``: sets and tuples as lists, anything else as its ``str``."""
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _dumps(entry: dict) -> str:
    return orjson.dumps(entry, default=_fallback, option=_OPTIONS).decode()


def _field(value):
    try:
        orjson.dumps(value, default=_fallback, option=_OPTIONS)
    except TypeError:
        return str(value)
    return value


class JsonFormatter(logging.Formatter):
    """One JSON object per record, no newline inside (orjson escapes them)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": _rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_extras(record))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        try:
            return _dumps(entry)
        except TypeError:
            # e.g. an int beyond 64 bits: keep the line, stringify the fields that fail
            return _dumps({k: _field(v) for k, v in entry.items()})


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger: msg key=value ...`` for humans."""

    def format(self, record: logging.LogRecord) -> str:
        line = (f"{_rfc3339(record.created)} {record.levelname:<7} {record.name}: "
                f"{record.getMessage()}")
        extras = _extras(record)
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def configure_logging(level: str | int = "INFO", fmt: str = "json", stream=None) -> logging.Handler:
    """Install one handler on the root logger (replacing one installed earlier by this function).

    ``fmt`` is ``json`` or ``text``; ``stream`` defaults to stderr (stdout stays free for the
    commands' own output, such as ``demo --json``). Returns the handler.
    """
    if fmt not in ("json", "text"):
        raise ValueError(f"log format must be json or text, got {fmt!r}")
    if isinstance(level, str):
        name = level.strip().upper()
        if name not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(
                f"log level must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got {level!r}")
        level = getattr(logging, name)
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_MARK, False):
            root.removeHandler(handler)
            handler.close()  # a StreamHandler leaves its stream open
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    return handler


def get_logger(name: str) -> logging.Logger:
    """A stdlib logger; pass structured fields with ``extra={...}``."""
    return logging.getLogger(name)
