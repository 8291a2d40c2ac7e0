"""Checks of the fields every input event shares (its id, key and ``ts``), for the decoders of
inserts (decode.py) and deletes (deletes.py). A detail names fields, types and lengths, never a
value (details end up in logs)."""

from __future__ import annotations

from ..exceptions import DeadLetter

__all__ = ["MAX_ID_CHARS", "MISSING", "check_id", "check_key", "check_ts", "extra_fields",
           "ts_value", "type_name"]

MAX_ID_CHARS = 256
MISSING = object()


def type_name(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "array", dict: "object"}.get(type(value), type(value).__name__)


def check_id(obj: dict) -> str:
    record_id = obj.get("id", MISSING)
    if type(record_id) is not str or not 0 < len(record_id) <= MAX_ID_CHARS:
        if record_id is MISSING:
            raise DeadLetter("missing_id", "no 'id' field")
        if type(record_id) is not str:
            raise DeadLetter("bad_id", f"'id' is a {type_name(record_id)}, expected a string")
        raise DeadLetter("bad_id",
                         f"'id' has {len(record_id)} characters, expected 1 to {MAX_ID_CHARS}")
    return record_id


def check_key(key) -> None:
    if not key:
        raise DeadLetter("key_mismatch",
                         f"record has {'an empty' if key is not None else 'no'} key; the key is "
                         "the partitioning key (e.g. the data subject) that a record's insert and "
                         "delete share, so the delete lands in its partition")


def extra_fields(obj: dict, allowed: tuple[str, ...]) -> DeadLetter:
    extra = [k for k in obj if k not in allowed]
    names = ", ".join(repr(k[:40]) for k in extra[:5]) + (", ..." if len(extra) > 5 else "")
    return DeadLetter("schema_violation", f"{len(extra)} unknown field(s): {names}")


def check_ts(obj: dict, allowed: tuple[str, ...], base: int) -> int:
    """``ts`` of an object that has ``base`` known fields plus more: ts must be the only extra."""
    if len(obj) != base + 1 or "ts" not in obj:
        raise extra_fields(obj, allowed)
    return ts_value(obj["ts"])


def ts_value(ts) -> int:
    """A ``ts`` value: a non-negative integer (an integral float is one for JSON Schema)."""
    kind = type(ts)
    if kind is int and ts >= 0:
        return ts
    if kind is float and ts >= 0 and ts.is_integer():
        return int(ts)
    if kind is int or kind is float:
        raise DeadLetter("schema_violation",
                         "'ts' must be a non-negative integer (epoch milliseconds)")
    raise DeadLetter("schema_violation",
                     f"'ts' is a {type_name(ts)}, expected an integer (epoch milliseconds)")
