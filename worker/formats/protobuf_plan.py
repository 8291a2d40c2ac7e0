"""The plan of a Protobuf message type for the compiled
reader (framed_kernel.py), or why there is none.

A plan is a table by field number (Protobuf fields are tagged, in any order, possibly repeated):
each declared field's role for the event (the field mapping decides, by name), its wire kind,
whether it is repeated, has presence or is a string (which proto3 checks is UTF-8), and for an
enum ``op`` the numbers of its ``insert`` and ``delete`` values. Numbers not in the table are
skipped, as the generic parser keeps them aside as unknown fields. Beside it, ``defaults``: the
value of the label and of each named feature when absent (proto3's 0, or NaN for a field with
presence, which declines the record so that the generic path names the missing value).

A field of a message type that is not a role is read when its message has scalars only (most
well-known types: Timestamp, Duration, the numeric wrappers): its bytes must be well-formed
fields; a record setting any other message field is declined.

Types the reader does not map get no plan and their records take the generic path (input.py):
a role on a field of a message type (well-known wrappers included), in a real ``oneof``, repeated
where a scalar is meant or of a type the event does not read (``bool`` label, ``bytes`` id), a
field number of 65,536 or more.

>>> from worker.formats.protobuf import event_class
>>> from worker.formats.mapping import FieldMapping
>>> plan, defaults, op_default, why = protobuf_plan(
...     event_class().DESCRIPTOR, FieldMapping(complete=True), dim=3)
>>> plan.shape, defaults.tolist(), op_default, why
((9, 5), [nan], 0, '')
"""

from __future__ import annotations

import numpy as np
from google.protobuf.descriptor import FieldDescriptor as FD

from .exceptions import NoPlan
from .framed_kernel import (
    DECLINED,
    DELETE,
    F_ASCII,
    F_FLAT,
    F_PRESENCE,
    F_REPEATED,
    FEATURE,
    ID,
    IDS,
    INSERT,
    NO_SYMBOL,
    OP,
    P_BOOL,
    P_BYTES,
    P_DOUBLE,
    P_ENUM,
    P_FIXED32,
    P_FIXED64,
    P_FLOAT,
    P_INT32,
    P_MESSAGE,
    P_STRING,
    P_UNSIGNED,
    P_VARINT,
    P_ZIGZAG,
    SKIP,
    TS,
    XS,
    Y,
)
from .mapping import FieldMapping

__all__ = ["protobuf_plan"]

MAX_FIELD_NUMBER = 1 << 16
_KINDS = {
    FD.TYPE_DOUBLE: P_DOUBLE, FD.TYPE_FLOAT: P_FLOAT, FD.TYPE_INT64: P_VARINT,
    FD.TYPE_UINT64: P_UNSIGNED,
    FD.TYPE_INT32: P_INT32, FD.TYPE_FIXED64: P_FIXED64, FD.TYPE_FIXED32: P_FIXED32,
    FD.TYPE_BOOL: P_BOOL,
    FD.TYPE_STRING: P_STRING, FD.TYPE_MESSAGE: P_MESSAGE, FD.TYPE_BYTES: P_BYTES,
    FD.TYPE_UINT32: P_UNSIGNED,
    FD.TYPE_ENUM: P_ENUM, FD.TYPE_SFIXED32: P_FIXED32, FD.TYPE_SFIXED64: P_FIXED64,
    FD.TYPE_SINT32: P_ZIGZAG,
    FD.TYPE_SINT64: P_ZIGZAG,
}
_NUMBER = {FD.TYPE_DOUBLE, FD.TYPE_FLOAT, FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_SINT64,
           FD.TYPE_UINT64}
_INTEGER = {FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_UINT64}
#: The declared types each role may have for the compiled reader (the generic path reads the rest).
_ALLOWED = {OP: {FD.TYPE_STRING, FD.TYPE_ENUM}, ID: {FD.TYPE_STRING},
            XS: {FD.TYPE_DOUBLE, FD.TYPE_FLOAT},
            Y: _NUMBER, TS: _INTEGER, IDS: {FD.TYPE_STRING}}
_REPEATED_ROLES = (XS, IDS)



def protobuf_plan(descriptor, mapping: FieldMapping, *, dim: int):
    """``(plan, defaults, op_default, "")`` for the message ``descriptor`` read under ``mapping``,
    or ``(None, None, None, why not)``."""
    try:
        fields = {f.name: f for f in descriptor.fields}
        roles = [(mapping.op, OP), (mapping.id, ID), (mapping.y, Y), (mapping.ts, TS),
                 (mapping.ids, IDS)]
        roles += [(n, FEATURE + j) for j,
                  n in enumerate(mapping.features)] if mapping.features else [(mapping.x, XS)]
        if mapping.features and len(mapping.features) != dim:
            raise NoPlan(f"{len(mapping.features)} feature fields for dimension {dim}")
        if len({name for name, _ in roles}) != len(roles):
            raise NoPlan("a field has two roles")
        missing = [name for name, role in roles if role not in (TS, IDS) and name not in fields]
        if missing:
            raise NoPlan("no field for " + ", ".join(missing))
        if max(f.number for f in descriptor.fields) >= MAX_FIELD_NUMBER:
            raise NoPlan(f"a field number of {MAX_FIELD_NUMBER} or more")
        plan = np.zeros((max(f.number for f in descriptor.fields) + 1, 5), np.int64)
        for f in descriptor.fields:
            if f.type == FD.TYPE_GROUP:
                raise NoPlan(f"field {f.name!r} is a group")
            plan[f.number] = (SKIP, _KINDS[f.type], _flags(f), NO_SYMBOL, NO_SYMBOL)
        defaults = [np.nan] * (1 + len(mapping.features))
        op_default = DECLINED
        for name, role in roles:
            f = fields.get(name)
            if f is None:
                continue  # ts and ids, optional
            _check_role(f, role)
            plan[f.number, 0] = role
            if role == OP and f.type == FD.TYPE_ENUM:
                plan[f.number, 3], plan[f.number,
                                        4] = _number_of(f, "insert"), _number_of(f, "delete")
                if not f.has_presence:  # absent reads as the value numbered 0
                    op_default = INSERT if plan[
                        f.number, 3] == 0 else DELETE if plan[f.number, 4] == 0 else DECLINED
            if role == Y or role >= FEATURE:
                defaults[0 if role == Y else 1 + role - FEATURE] = np.nan if f.has_presence else 0.0
    except NoPlan as why:
        return None, None, None, str(why)
    return plan, np.array(defaults, np.float64), op_default, ""


def _flags(f) -> int:
    repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED
    flat = f.type == FD.TYPE_MESSAGE and all(
        g.type not in (FD.TYPE_STRING, FD.TYPE_MESSAGE, FD.TYPE_GROUP)
        for g in f.message_type.fields)
    return ((F_REPEATED if repeated else 0) | (F_PRESENCE if f.has_presence else 0)
            | (F_ASCII if f.type == FD.TYPE_STRING else 0) | (F_FLAT if flat else 0))


def _check_role(f, role: int) -> None:
    allowed = _ALLOWED.get(role, _NUMBER)
    repeated = bool(_flags(f) & F_REPEATED)
    if f.type not in allowed or repeated != (role in _REPEATED_ROLES):
        raise NoPlan(f"field {f.name!r} has a type the compiled reader does not map")
    oneof = f.containing_oneof
    if oneof is not None and not getattr(oneof, "is_synthetic", False) and not (
            len(oneof.fields) == 1 and oneof.name == f"_{f.name}"):
        raise NoPlan(f"field {f.name!r} is in a oneof")


def _number_of(f, symbol: str) -> int:
    """The number of an enum op's value ``symbol`` (NO_SYMBOL: none, or aliased under another name,
    which the generic path reads by the alias's name)."""
    value = f.enum_type.values_by_name.get(symbol)
    if value is None or f.enum_type.values_by_number[value.number].name != symbol:
        return NO_SYMBOL
    return value.number
