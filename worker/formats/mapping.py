"""From a record decoded with its registered schema to the documented event (schemas/).

A registry-framed record is a dict of the user's fields (Avro, JSON Schema) or a Protobuf message
(turned into such a dict by :func:`message_dict`). :class:`FieldMapping` picks the event's roles
out of it: ``op``, ``id``, ``y``, ``ts`` and the features, either one array field (``x``) or named
numeric fields in a fixed order (``OLU_INPUT_FEATURE_FIELDS``); each role's field is the role's
own name unless ``OLU_INPUT_FIELDS`` maps it (``id=user_id,y=clicked``). Other fields are ignored,
and a delete ignores every field but ``op``, ``id``, ``ids`` (optional: a request naming several
records, as in schemas/delete.schema.json), ``subject`` and ``request_id`` (optional: unset or
empty is absent, as Protobuf cannot tell them apart) and ``ts`` (one schema describes both
events).

The result is the documented JSON object, which the worker then checks exactly as it checks a
JSON record (worker/stream/input/decode.py), so a field's meaning, its checks and its dead-letter
reasons are the same in every format. Decided here, before that:

- ``schema_mismatch``: with Avro and Protobuf every field of the writer schema is in the decoded
  record, so a role whose field is absent means the schema does not fit the mapping;
- ``non_finite``: a NaN or infinite feature or label (Avro and Protobuf doubles can carry them;
  JSON cannot, so the JSON path has no such check before the engine's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .exceptions import UndecodableRecord

__all__ = ["FieldMapping", "message_dict"]

ROLES = ("op", "id", "x", "y", "ts", "ids", "subject", "request_id")


class FieldMapping:
    """``fields``: role -> the user's field name; ``feature_fields``: features as named fields.
    ``complete``: decoded records list every field of their schema (Avro, Protobuf).

    >>> m = FieldMapping({"id": "user", "y": "clicked"}, ("age", "score"), complete=True)
    >>> m.event({"op": "insert", "user": "u-1", "age": 0.5, "score": -1.0, "clicked": 1.0,
    ...          "ts": None})
    {'op': 'insert', 'id': 'u-1', 'x': [0.5, -1.0], 'y': 1.0}
    >>> m.event({"op": "delete", "user": "u-1", "age": None, "score": None, "clicked": None,
    ...          "ts": 7})
    {'op': 'delete', 'id': 'u-1', 'ts': 7}
    >>> m.event({"op": "delete", "user": "", "ids": ["u-1", "u-2"], "age": None, "score": None,
    ...          "clicked": None})
    {'op': 'delete', 'ids': ['u-1', 'u-2']}
    """

    def __init__(self, fields: Mapping[str, str] | Sequence[tuple[str, str]] = (),
                 feature_fields: Sequence[str] = (), *, complete: bool, named: Sequence[str] = ()):
        names = {role: role for role in ROLES}
        names.update(dict(fields))
        (self.op, self.id, self.x, self.y, self.ts, self.ids, self.subject,
         self.request_id) = (names[r] for r in ROLES)
        self.features = tuple(feature_fields)
        #: a feature spec's fields (worker/features): passed on by name, for the spec to read
        self.named = tuple(named)
        self.complete = complete
        #: every role read from the field of its own name, features from ``x``
        self.identity = all(names[r] == r for r in ROLES) and not self.features and not self.named
        wanted = [self.op, self.id, self.y, *(() if self.named else self.features or (self.x,))]
        self._required = tuple(dict.fromkeys(wanted))

    def event(self, record) -> dict:
        """The documented event object of ``record``; raises :class:`UndecodableRecord`."""
        if not isinstance(record, dict):
            raise UndecodableRecord("not_object",
                                    f"the decoded value is a {type(record).__name__}, expected a "
                                    "record of fields")
        if self.complete:
            missing = [name for name in self._required if name not in record]
            if missing:
                raise UndecodableRecord("schema_mismatch", "the record's schema has no field "
                                        + ", ".join(repr(m[:40]) for m in missing[:5])
                                        + " (OLU_INPUT_FIELDS / OLU_INPUT_FEATURE_FIELDS map the "
                                          "roles)")
        out: dict = {}
        op = record.get(self.op)
        if op is not None:
            out["op"] = op
        record_id = record.get(self.id)
        ids = record.get(self.ids) if op == "delete" else None
        if isinstance(ids, (list, tuple)) and ids:
            # a request naming several records (optional field; absent, null or empty: one id). An
            # unset id beside it (Protobuf's "" or null) is no id;
            # a set one is id_and_ids downstream.
            out["ids"] = list(ids)
            if record_id == "":
                record_id = None
        if op == "delete":  # optional: unset ("" in Protobuf, null elsewhere) is absent
            for role, name in (("subject", self.subject), ("request_id", self.request_id)):
                if (value := record.get(name)) not in (None, ""):
                    out[role] = value
            if "subject" in out and record_id == "":
                record_id = None  # Protobuf's unset id beside a subject: no id
        if record_id is not None:
            out["id"] = record_id
        if op == "insert" and self.named:  # missing ones stay missing: the spec fills or names them
            out.update((name, record[name]) for name in self.named if record.get(name) is not None)
        elif op == "insert":
            if self.features:
                x = [record.get(name) for name in self.features]
            else:
                x = record.get(self.x)
                x = list(x) if isinstance(x, (list, tuple)) else x
            if x is not None:
                out["x"] = x
                _check_finite(x, "x")
        if op == "insert":
            y = record.get(self.y)
            if y is not None:
                out["y"] = y
                _check_finite([y], "y")
        ts = record.get(self.ts)
        if ts is not None:
            out["ts"] = ts
        return out


def _check_finite(values, name: str) -> None:
    if not isinstance(values, list):
        return  # not an array: the JSON checks name it (bad_features)
    for i, v in enumerate(values):
        if type(v) is float and not math.isfinite(v):
            where = name if name == "y" else f"{name}[{i}]"
            raise UndecodableRecord("non_finite", f"{where} is NaN or infinite")


def message_dict(msg) -> dict:
    """A Protobuf message as a dict of its schema's fields: repeated fields as lists (an empty one
    as ``()``), enum values by name, a field with presence that is unset as None (proto3 scalars
    without it: their value). Only the fields set are visited (``ListFields``), over a template of
    the unset values built once per message type.

    >>> from worker.formats.protobuf import event_class
    >>> message_dict(event_class()(op="insert", id="r-1", x=[0.5]))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'op': 'insert', 'id': 'r-1', 'x': [0.5], 'y': None, 'ts': None, 'ids': (), 'subject': '',
     'request_id': ''}
    """
    descriptor = msg.DESCRIPTOR
    template = _TEMPLATES.get(descriptor)
    if template is None:
        template = _TEMPLATES[descriptor] = _template(descriptor)
    out = dict(template)
    for f, value in msg.ListFields():
        if f.enum_type is not None and not _repeated(f):
            symbol = f.enum_type.values_by_number.get(value)
            out[f.name] = symbol.name if symbol is not None else value
        elif _repeated(f):
            out[f.name] = list(value)
        else:
            out[f.name] = value
    return out


_TEMPLATES: dict = {}


def _repeated(f) -> bool:
    return f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED


def _template(descriptor) -> dict:
    """Each field's value when unset: () repeated, None with
    presence, else its default (an enum's by name)."""
    out = {}
    for f in descriptor.fields:
        if _repeated(f):
            out[f.name] = ()
        elif f.has_presence:
            out[f.name] = None
        elif f.enum_type is not None:
            symbol = f.enum_type.values_by_number.get(f.default_value)
            out[f.name] = symbol.name if symbol is not None else f.default_value
        else:
            out[f.name] = f.default_value
    return out
