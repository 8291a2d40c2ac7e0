"""The plan of an Avro writer schema for the compiled reader
(framed_kernel.py), or why there is none.

A plan is one row per field of the writer's record, in the writer's order (Avro has no field
tags: a value is read by walking the fields): the field's role for the event (the field mapping
decides, by name) and its type, a union as one (kind, aux, aux2) per branch. Schemas the reader
does not walk get no plan, and their records take the generic path (input.py), which then
decides exactly as before: a nested record, a union inside an array, a logical type (the generic
reader converts those, to a ``datetime`` for instance), a field mapped by two roles, more than
:data:`~.framed_kernel.MAX_BRANCHES` branches, or a schema without every field the mapping needs.

>>> from worker.formats.events import EVENT_AVRO_SCHEMA
>>> from worker.formats.mapping import FieldMapping
>>> plan, why = avro_plan(EVENT_AVRO_SCHEMA, FieldMapping(complete=True), dim=3)
>>> plan.shape, why
((8, 26), '')
>>> avro_plan('{"type": "record", "name": "E", "fields": [{"name": "op", "type": "string"}]}',
...           FieldMapping(complete=True), dim=3)[1]
'no field for id, y, x'
"""

from __future__ import annotations

import json

import numpy as np

from .exceptions import NoPlan
from .framed_kernel import (
    A_ARRAY,
    A_ENUM,
    A_FIXED,
    A_MAP,
    AVRO_KINDS,
    FEATURE,
    ID,
    IDS,
    MAX_BRANCHES,
    OP,
    SKIP,
    TS,
    XS,
    Y,
)
from .mapping import FieldMapping

__all__ = ["avro_plan"]

_PRIMITIVE = {name: k for k, name in enumerate(AVRO_KINDS)
              if name not in ("enum", "fixed", "array", "map")}



def avro_plan(schema_str: str, mapping: FieldMapping, *, dim: int) -> tuple[np.ndarray | None, str]:
    """``(plan, "")`` for ``schema_str`` read under ``mapping``, or ``(None, why not)``."""
    try:
        schema = json.loads(schema_str)
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise NoPlan("the schema is not a record")
        named: dict[str, tuple[int, int, int]] = {}
        roles = _roles(mapping)
        rows, used = [], set()
        for field in schema.get("fields", []):
            name = field["name"]
            role = roles.get(name, SKIP)
            if role != SKIP:
                used.add(name)
            branches = field["type"] if isinstance(field["type"], list) else None
            nodes = [_node(t, named, schema.get("namespace"))
                     for t in (branches or [field["type"]])]
            if len(nodes) > MAX_BRANCHES:
                raise NoPlan(f"field {name!r} is a union of more than {MAX_BRANCHES} types")
            row = [role, len(nodes) if branches is not None else 0]
            for node in nodes:
                row.extend(node)
            rows.append(row + [0] * (2 + 3 * MAX_BRANCHES - len(row)))
        missing = [n for n in _required(mapping) if n not in used]
        if missing:
            raise NoPlan("no field for " + ", ".join(missing))
        if mapping.features and len(mapping.features) != dim:
            raise NoPlan(f"{len(mapping.features)} feature fields for dimension {dim}")
    except NoPlan as why:
        return None, str(why)
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"the schema does not parse ({type(exc).__name__})"
    return np.array(rows, np.int64).reshape(len(rows), 2 + 3 * MAX_BRANCHES), ""


def _roles(mapping: FieldMapping) -> dict[str, int]:
    """Field name -> role."""
    pairs = [(mapping.op, OP), (mapping.id, ID), (mapping.y, Y), (mapping.ts, TS),
             (mapping.ids, IDS)]
    pairs += [(n, FEATURE + j) for j,
              n in enumerate(mapping.features)] if mapping.features else [(mapping.x, XS)]
    roles: dict[str, int] = {}
    for name, role in pairs:
        if name in roles:
            raise NoPlan(f"field {name!r} has two roles")
        roles[name] = role
    return roles


def _required(mapping: FieldMapping) -> list[str]:
    return [mapping.op, mapping.id, mapping.y, *(mapping.features or (mapping.x,))]


def _symbols(symbols: list) -> int:
    """An enum's "insert" and "delete" positions, packed: (insert
    + 1) + 65536 * (delete + 1), 0 for none."""
    at = {s: k for k, s in enumerate(symbols)}
    return at.get("insert", -1) + 1 + 65536 * (at.get("delete", -1) + 1)


def _fullname(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _node(t, named: dict, namespace: str | None) -> tuple[int, int, int]:
    """(kind, aux, aux2) of a field type: enum (symbol count, where "insert" and "delete" are),
    fixed (size), array and map (the item's kind and aux)."""
    if isinstance(t, str):
        if t in _PRIMITIVE:
            return _PRIMITIVE[t], 0, 0
        for key in (_fullname(t, namespace), t):
            if key in named:
                return named[key]
        raise NoPlan(f"type {t!r} is not a type the reader walks")
    if isinstance(t, list):
        raise NoPlan("a union inside another type")
    if not isinstance(t, dict):
        raise NoPlan("a type that is not a name, union or object")
    if "logicalType" in t:
        raise NoPlan(f"logical type {t['logicalType']!r} (the generic reader converts it)")
    kind = t.get("type")
    if kind in _PRIMITIVE:
        return _PRIMITIVE[kind], 0, 0
    if kind in ("enum", "fixed"):
        symbols = t.get("symbols", [])
        node = (A_ENUM, len(symbols),
                _symbols(symbols)) if kind == "enum" else (A_FIXED, int(t["size"]), 0)
        space = t.get("namespace", namespace)
        named[_fullname(t["name"], space)] = named[t["name"]] = node
        return node
    if kind in ("array", "map"):
        item = _node(t["items" if kind == "array" else "values"], named, namespace)
        if item[0] in (A_ARRAY, A_MAP):
            raise NoPlan(f"an {kind} of {AVRO_KINDS[item[0]]}s")
        return (A_ARRAY if kind == "array" else A_MAP), item[0], item[1]
    raise NoPlan(f"a {kind!r} inside the record (nested records are read by the generic path)")
