"""What a registered JSON Schema asks of the records the JSON scan accepts, checked in bulk.

The compiled JSON scan (worker/stream/input/scan.py) accepts only the common insert: an object
with exactly ``op`` = "insert", an ASCII ``id`` of 1 to 256 characters, ``x`` an array of ``dim``
numbers, ``y`` a number and optionally ``ts`` a non-negative integer. For such a record, whether
it validates against a schema in the subset below depends only on the id's length, the numbers'
values and whether ``ts`` is there, so a :class:`JsonSchemaPlan` checks it on the scan's columns
for a whole batch at once, and validation costs almost nothing. A record that fails the plan's
checks, and every record of a schema outside the subset, is validated by the generic path
(input.py, the ``jsonschema`` library), which names the violation.

The subset (anything else, ``$ref``, ``allOf``, ``pattern``, ``format``, ``exclusiveMinimum``,
``multipleOf`` or a key this module does not know included, gets no plan):

- top level: ``type`` "object"; ``properties``; ``required`` within op, id, x, y;
  ``additionalProperties`` a boolean (false needs ``properties`` for all five fields, ts included);
- ``op``: ``type`` "string", ``enum`` or ``const`` (must allow "insert", else every insert is
  refused and the generic path says so); ``id``: ``type`` "string", ``minLength``, ``maxLength``;
- ``x``: ``type`` "array", ``minItems``, ``maxItems``, ``items`` with ``type`` "number",
  ``minimum``, ``maximum``; ``y``: ``type`` "number", ``minimum``, ``maximum``;
- ``ts``: ``type`` "integer" or "number", ``minimum`` at most 0;
- annotations anywhere: ``$schema``, ``$id``, ``id`` (top level), ``title``, ``description``,
  ``default``, ``examples``, ``$comment``.

Only the identity field mapping is planned (the scan reads the documented field names).

>>> from worker.formats.events import EVENT_JSON_SCHEMA
>>> plan, why = jsonschema_plan(EVENT_JSON_SCHEMA, dim=2)
>>> plan.id_chars, plan.y_range, why
((1, 256), (-inf, inf), '')
>>> jsonschema_plan('{"type": "object", "properties": {"y": {"type": "integer"}}}', dim=2)[1]
"property 'y': type 'integer' (a number is accepted by the scan)"
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from .exceptions import NoPlan

__all__ = ["JsonSchemaPlan", "jsonschema_plan"]

_ANNOTATIONS = {"title", "description", "default", "examples", "$comment"}
_TOP = _ANNOTATIONS | {"$schema", "$id", "id", "type", "properties", "required",
                       "additionalProperties"}
_FIELDS = ("op", "id", "x", "y", "ts")
_ALLOWED = {
    "op": {"type", "enum", "const"},
    "id": {"type", "minLength", "maxLength"},
    "x": {"type", "minItems", "maxItems", "items"},
    "y": {"type", "minimum", "maximum"},
    "ts": {"type", "minimum"},
}
_TYPES = {"op": ("string",), "id": ("string",), "x": ("array",), "y": ("number",),
          "ts": ("integer", "number")}


_ANY = (-math.inf, math.inf)
_EXACT = 2.0**53



@dataclass(frozen=True)
class JsonSchemaPlan:
    """The checks a scanned insert must pass to validate (inclusive ranges)."""

    id_chars: tuple[int, int] = (1, 256)
    x_range: tuple[float, float] = (-math.inf, math.inf)
    y_range: tuple[float, float] = (-math.inf, math.inf)

    def valid(self, X: np.ndarray, y: np.ndarray, id_chars: np.ndarray) -> np.ndarray:
        """Which rows validate (rows the scan accepted; ``id_chars`` the ids' lengths). Against a
        finite bound a number of 2**53 or more is left to the generic path: it compares the
        record's integer exactly, the column holds its rounded double."""
        ok = (id_chars >= self.id_chars[0]) & (id_chars <= self.id_chars[1])
        if self.y_range != _ANY:
            ok &= (y >= self.y_range[0]) & (y <= self.y_range[1]) & (np.abs(y) < _EXACT)
        if X.shape[1] and self.x_range != _ANY:
            ok &= ((X >= self.x_range[0]) & (X <= self.x_range[1]) & (np.abs(X) < _EXACT)).all(
                axis=1)
        return ok


def jsonschema_plan(schema_str: str, *, dim: int) -> tuple[JsonSchemaPlan | None, str]:
    """``(plan, "")`` for a registered JSON Schema, or ``(None, why not)``."""
    try:
        schema = json.loads(schema_str)
        return _plan(schema, dim), ""
    except NoPlan as why:
        return None, str(why)
    except (ValueError, TypeError, KeyError) as exc:
        return None, f"the schema does not parse ({type(exc).__name__})"


def _plan(schema, dim: int) -> JsonSchemaPlan:
    if schema is True or schema == {}:
        return JsonSchemaPlan()
    if not isinstance(schema, dict):
        raise NoPlan("the schema is not an object")
    unknown = set(schema) - _TOP
    if unknown:
        raise NoPlan(f"keyword {sorted(unknown)[0]!r}")
    if schema.get("type", "object") != "object":
        raise NoPlan("the schema's type is not 'object'")
    props = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(
            props, dict) or not isinstance(required,
                                           list) or set(required) - {"op", "id", "x", "y"}:
        raise NoPlan("'required' names a field a scanned insert may lack")
    extra = schema.get("additionalProperties", True)
    if not isinstance(extra, bool):
        raise NoPlan("'additionalProperties' is a schema")
    if not extra and set(_FIELDS) - set(props):
        raise NoPlan("a closed schema without every field of an insert (ts included)")
    checks = {name: _property(name, props[name], dim) for name in _FIELDS if name in props}
    return JsonSchemaPlan(
        id_chars=checks.get("id", (1, 256)),
        x_range=checks.get("x", (-math.inf, math.inf)),
        y_range=checks.get("y", (-math.inf, math.inf)),
    )


def _property(name: str, spec, dim: int):
    if spec is True or spec == {}:
        return None if name in ("op", "ts") else _defaults(name)
    if not isinstance(spec, dict):
        raise NoPlan(f"property {name!r} is not an object")
    unknown = set(spec) - _ALLOWED[name] - _ANNOTATIONS
    if unknown:
        raise NoPlan(f"property {name!r}: keyword {sorted(unknown)[0]!r}")
    kind = spec.get("type", _TYPES[name][0])
    if kind not in _TYPES[name]:
        raise NoPlan(
            f"property {name!r}: type {kind!r} (a {_TYPES[name][0]} is accepted by the scan)")
    if name == "op":
        allowed = spec[
            "enum"] if "enum" in spec else [spec["const"]] if "const" in spec else ["insert"]
        if "insert" not in allowed:
            raise NoPlan("'op' does not allow 'insert'")
        return None
    if name == "ts":
        if _number(spec.get("minimum", 0)) > 0:
            raise NoPlan("'ts' has a positive minimum")
        return None
    if name == "id":
        return (max(1, _count(spec.get("minLength", 0))),
                min(256, _count(spec.get("maxLength", 256))))
    if name == "y":
        return (_number(spec.get("minimum", -math.inf)), _number(spec.get("maximum", math.inf)))
    if not _count(spec.get("minItems", 0)) <= dim <= _count(spec.get("maxItems", dim)):
        raise NoPlan(f"'x' does not allow {dim} items")
    items = spec.get("items", {})
    if items is True or items == {}:
        return (-math.inf, math.inf)
    if not isinstance(items, dict) or set(items) - {"type", "minimum", "maximum"} - _ANNOTATIONS \
            or items.get("type", "number") != "number":
        raise NoPlan("'x' items are not plain numbers")
    return (_number(items.get("minimum", -math.inf)), _number(items.get("maximum", math.inf)))


def _defaults(name: str):
    return {"id": (1, 256), "x": (-math.inf, math.inf), "y": (-math.inf, math.inf)}[name]


def _number(v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or float(v) != v:
        raise NoPlan("a bound that is not a number, or not a double")
    return float(v)


def _count(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise NoPlan("a length that is not an integer")
    return v
