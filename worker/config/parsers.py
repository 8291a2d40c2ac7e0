"""Value parsers of the settings: a raw string in, a typed value out.

A value that does not fit raises :class:`~worker.config.exceptions.BadValue` with what the value
must be; the loader prefixes the setting's names, so the message reads
``OLU_RHO (--rho) must be a number > 0, got 'abc'``. Every parser carries that text as
``requirement``; a choice also carries its ``choices`` (the flag's metavar).

>>> number(0, lo_open=True)(" 2.5 "), number(1, integer=True).requirement
(2.5, 'an integer >= 1')
>>> choice(("json", "text"))("JSON"), boolean("off"), topics("a, b")
('json', False, ('a', 'b'))
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from .exceptions import BadValue

STATE_SCHEMES = ("file", "memory", "s3")


def _bound_text(lo, hi, lo_open, hi_open) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo:g}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {hi:g}"
    return ""


def number(lo=None, hi=None, *, lo_open=False, hi_open=False,
           integer=False) -> Callable[[str], Any]:
    """A finite float (or an int) within the bounds; ``lo_open``/``hi_open`` exclude a bound."""
    bounded = lo is not None or hi is not None
    what = ("an integer" if integer else "a number") + (
        " " + _bound_text(lo, hi, lo_open, hi_open) if bounded else "")

    def parse(raw: str):
        text = raw.strip()
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise BadValue(what) from None
        if not integer and not math.isfinite(value):
            raise BadValue(what)
        if lo is not None and (value < lo or (lo_open and value == lo)):
            raise BadValue(what)
        if hi is not None and (value > hi or (hi_open and value == hi)):
            raise BadValue(what)
        return value

    parse.requirement = what
    return parse


def choice(choices: tuple[str, ...], *, upper: bool = False) -> Callable[[str], str]:
    """One of ``choices``, compared in lower case (upper case with ``upper``)."""
    what = "one of " + ", ".join(choices)

    def parse(raw: str) -> str:
        value = raw.strip().upper() if upper else raw.strip().lower()
        if value not in choices:
            raise BadValue(what)
        return value

    parse.requirement = what
    parse.choices = choices
    return parse


_TRUE = {"1", "true", "yes", "on", "t", "y"}
_FALSE = {"0", "false", "no", "off", "f", "n"}


def boolean(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadValue(boolean.requirement)


boolean.requirement = "a boolean (true/false, 1/0, yes/no, on/off)"

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def topic(raw: str) -> str:
    value = raw.strip()
    if not _TOPIC.fullmatch(value) or value in (".", ".."):
        raise BadValue(topic.requirement)
    return value


topic.requirement = "a Kafka topic name (1-249 characters of A-Z a-z 0-9 . _ -)"


def topics(raw: str) -> tuple[str, ...]:
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if not items:
        raise BadValue(topics.requirement)
    for item in items:
        if not item.startswith("^"):  # "^..." is a librdkafka regex subscription
            topic(item)
    if len(set(items)) != len(items):
        raise BadValue(topics.requirement + " without duplicates")
    return tuple(items)


topics.requirement = "a comma-separated list of Kafka topic names (or ^regex patterns)"


def text(raw: str) -> str:
    value = raw.strip()
    if not value or len(value) > 256 or any(ord(c) < 32 for c in value):
        raise BadValue(text.requirement)
    return value


text.requirement = "a non-empty string of at most 256 printable characters"


_SERVER = re.compile(r"(?:[A-Za-z_]+://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(\d{1,5}))?")


def bootstrap(raw: str) -> str:
    """Kafka bootstrap servers: ``host[:port]`` entries, comma-separated (librdkafka's form; an IPv6
    address in brackets, a ``PROTOCOL://`` prefix allowed). A value that is not such a list would
    be accepted by librdkafka and then fail to resolve, hundreds of log lines later.

    >>> bootstrap("kafka-0.kafka:9093, 10.0.0.7:9092,[::1]:9092")
    'kafka-0.kafka:9093,10.0.0.7:9092,[::1]:9092'
    """
    entries = [e.strip() for e in text(raw).split(",")]
    for entry in entries:
        match = _SERVER.fullmatch(entry)
        if match is None or (match.group(1) is not None and not 1 <= int(match.group(1)) <= 65535):
            raise BadValue(bootstrap.requirement)
    return ",".join(entries)


bootstrap.requirement = "host:port[,host:port] (host names or addresses, ports 1 to 65535)"


def state_url(raw: str) -> str:
    value = raw.strip()
    try:
        parts = urlsplit(value)
    except ValueError:
        raise BadValue(state_url.requirement) from None
    if parts.scheme.lower() not in STATE_SCHEMES or "://" not in value:
        raise BadValue(state_url.requirement)
    if parts.scheme.lower() == "s3" and not parts.hostname:
        raise BadValue("an s3:// URL with a bucket (s3://bucket[/path])")
    return value


state_url.requirement = "a URL with scheme " + ", ".join(f"{s}://" for s in STATE_SCHEMES)


def state_prefix(raw: str) -> str:
    value = raw.strip().strip("/")
    if not value or ".." in value.split("/") or not re.fullmatch(r"[A-Za-z0-9._/=-]{1,256}", value):
        raise BadValue(state_prefix.requirement)
    return value


state_prefix.requirement = "a non-empty object-key prefix of A-Z a-z 0-9 . _ - = / (no '..')"


def http_url(raw: str) -> str:
    value = raw.strip()
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        raise BadValue(http_url.requirement) from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise BadValue(http_url.requirement)
    return value.rstrip("/")


http_url.requirement = "an http:// or https:// URL (comma-separated URLs are not supported)"


def user_info(raw: str) -> str:
    value = raw.strip()
    user, sep, password = value.partition(":")
    if not sep or not user or not password or any(ord(c) < 32 for c in value):
        raise BadValue(user_info.requirement)
    return value


user_info.requirement = "USER:PASSWORD (basic auth)"

#: What the input record's fields may be mapped to (worker/formats/mapping.py).
FIELD_ROLES = ("op", "id", "x", "y", "ts")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def field_map(raw: str) -> tuple[tuple[str, str], ...]:
    """``role=field,...``: the user's record field that holds each role of an event."""
    found: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        role, sep, name = (part.strip() for part in item.partition("="))
        if not sep or role not in FIELD_ROLES or not _FIELD.fullmatch(name) or role in found:
            raise BadValue(field_map.requirement)
        found[role] = name
    if not found:
        raise BadValue(field_map.requirement)
    return tuple(sorted(found.items()))


field_map.requirement = (
    "comma-separated ROLE=FIELD pairs, each role once, roles " + ", ".join(FIELD_ROLES)
    + ", fields [A-Za-z_][A-Za-z0-9_]*")


def field_names(raw: str) -> tuple[str, ...]:
    items = tuple(item.strip() for item in raw.split(",") if item.strip())
    if not items or len(set(items)) != len(items) or not all(_FIELD.fullmatch(i) for i in items):
        raise BadValue(field_names.requirement)
    return items


field_names.requirement = "comma-separated distinct field names ([A-Za-z_][A-Za-z0-9_]*)"


_INTEGER = re.compile(r"[+-]?[0-9]{1,20}")
MAX_LABEL_CHARS = 256


def class_labels(raw: str) -> tuple:
    """The softmax classes: a JSON list (``["fraud","ok"]``, ``[0,1,2]``) or a comma-separated list,
    whose items become integers when every one is an integer (``0,1,2``), else strings. At least
    two, distinct, all strings or all integers; a string label is 1 to 256 printable characters.

    >>> class_labels("fraud, ok ,review"), class_labels("0,1,2"), class_labels('["a,b", "c"]')
    (('fraud', 'ok', 'review'), (0, 1, 2), ('a,b', 'c'))
    """
    value = raw.strip()
    if value.startswith("["):
        try:
            items = json.loads(value)
        except ValueError:
            raise BadValue(class_labels.requirement + " (the JSON list does not parse)") from None
        if not isinstance(items, list):  # pragma: no cover (json of "[..." is a list or an error)
            raise BadValue(class_labels.requirement)
    else:
        items = [item.strip() for item in value.split(",")]
        if items and all(_INTEGER.fullmatch(item) for item in items):
            items = [int(item) for item in items]
    kinds = {type(item) for item in items}
    if len(items) < 2 or kinds not in ({str}, {int}):
        raise BadValue(class_labels.requirement)
    if kinds == {str} and not all(0 < len(item) <= MAX_LABEL_CHARS and item.isprintable()
                                  for item in items):
        raise BadValue(
            class_labels.requirement + f" (a label is 1 to {MAX_LABEL_CHARS} printable characters)")
    if kinds == {int} and not all(abs(item) < 2**53 for item in items):
        # a double names each exactly
        raise BadValue(class_labels.requirement + " (an integer label is below 2**53 in magnitude)")
    if len(set(items)) != len(items):
        raise BadValue(class_labels.requirement + " (a label is given twice)")
    return tuple(items)


class_labels.requirement = (
    "at least 2 distinct class labels, all strings or all integers: a JSON list (e.g. "
    "[\"fraud\",\"ok\"]) or comma-separated (e.g. fraud,ok or 0,1,2)")
