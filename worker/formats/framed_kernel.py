"""Compiled readers of Schema Registry framed inserts: Avro
and Protobuf bytes straight into columns.

Each kernel walks the records of one writer schema (a *plan*: avro_plan.py, protobuf_plan.py) in
a joined value buffer and, like the JSON scan (worker/stream/input/scan.py), either **accepts** a
record, as an INSERT (its features into a row of ``X``, its label into ``y``, where its id lies
into ``spans``) or as a DELETE of one id (where the id lies), or **declines** it. A declined record
goes to the generic decoder (input.py), which decides and names the reason; a kernel never rejects
anything itself. So correctness needs only "accepted => the generic decoder gives this very event",
and the kernels decline whatever they are not certain of: a request naming several ids, a value
out of range, a string that is not ASCII, bytes left over, a varint longer than 10 bytes, a wire
type the schema does not declare, a sub-message with strings inside.

Values are bit for bit those of the generic path: a double is its 8 bytes (the JSON round trip of
a finite double is exact), a float its exact widening, an integer its ``float()`` (round to
nearest even in both). The host must be little-endian, as both formats are (checked by the
callers: worker/stream/input/framed_scan.py).

The LLVM intrinsics it reads bytes with are worker/compiled/intrinsics.py's.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ..compiled.intrinsics import data_pointer, f32, f64
from ..compiled.jit import jit

__all__ = ["AVRO_KINDS", "MAX_BRANCHES", "PROTO_COLUMNS", "ROLES", "avro_kernel", "protobuf_kernel"]

#: Avro types a plan can hold (a union's branches each have one).
AVRO_KINDS = ("null", "boolean", "int", "long", "float", "double", "string", "bytes", "enum",
              "fixed", "array", "map")
(A_NULL, A_BOOL, A_INT, A_LONG, A_FLOAT, A_DOUBLE, A_STRING, A_BYTES, A_ENUM, A_FIXED, A_ARRAY,
 A_MAP) = range(12)
#: What a field is to the event; a named feature j is ``FEATURE + j``.
ROLES = ("skip", "op", "id", "x", "y", "ts", "ids")
SKIP, OP, ID, XS, Y, TS, IDS, FEATURE = 0, 1, 2, 3, 4, 5, 6, 7
#: What a reader made of a record: declined, a common insert, a delete of one id.
DECLINED, INSERT, DELETE = 0, 1, 2
#: Avro plan rows: role, branch count (0: not a union), then (kind, aux, aux2) per branch.
MAX_BRANCHES = 8
#: Protobuf plan columns, one row per field number: role, wire kind, flags, and for an enum ``op``
#: the numbers of "insert" and "delete" (:data:`NO_SYMBOL` when it has none).
PROTO_COLUMNS = ("role", "kind", "flags", "insert", "delete")
NO_SYMBOL = -(1 << 40)
(P_VARINT, P_ZIGZAG, P_UNSIGNED, P_INT32, P_DOUBLE, P_FLOAT, P_STRING, P_BYTES, P_ENUM, P_BOOL,
 P_FIXED32, P_FIXED64, P_MESSAGE) = range(1, 14)
# F_FLAT: a message of scalars (Timestamp, wrappers)
F_REPEATED, F_PRESENCE, F_ASCII, F_FLAT = 1, 2, 4, 8
_INSERT = (105, 110, 115, 101, 114, 116)  # "insert"
_DELETE = (100, 101, 108, 101, 116, 101)  # "delete"

_helper = numba.njit(nogil=True)


@_helper
def _varint(buf, p, end):
    """(value, position after it) of the base-128 varint at ``p``; position -1 when it runs past
    ``end`` or is longer than a 64-bit value (more than 10 bytes, or a 10th byte above 1)."""
    value = np.uint64(0)
    for k in range(10):
        if p >= end:
            return value, -1
        b = buf[p]
        p += 1
        if k == 9 and b > 1:
            return value, -1
        value |= np.uint64(b & 0x7F) << np.uint64(7 * k)
        if b < 128:
            return value, p
    return value, -1


@_helper
def _zigzag(v):
    return np.int64(v >> np.uint64(1)) ^ -np.int64(v & np.uint64(1))


@_helper
def _long(buf, p, end):
    """An Avro int or long (zigzag varint)."""
    v, p = _varint(buf, p, end)
    return _zigzag(v), p


@_helper
def _ascii(buf, p, end):
    for k in range(p, end):
        if buf[k] >= 128:
            return False
    return True


@_helper
def _op_word(buf, p, n):
    """INSERT, DELETE or DECLINED (any other op) for the op string ``buf[p:p + n]``."""
    if n != 6:
        return DECLINED
    insert, delete = True, True
    for k in range(6):
        insert &= buf[p + k] == _INSERT[k]
        delete &= buf[p + k] == _DELETE[k]
    return INSERT if insert else (DELETE if delete else DECLINED)


@_helper
def _verdict(op, id_ok, x_ok, y_ok, ts_ok, ids_empty):
    """What the generic path makes of a record read this way, when the reader is sure of it."""
    if op == INSERT and id_ok and x_ok and y_ok and ts_ok:
        return INSERT
    if op == DELETE and id_ok and ids_empty and ts_ok:
        return DELETE
    return DECLINED


# ----------------------------------------------------------------------------------- Avro
@_helper
def _avro_skip_item(buf, p, end, kind, aux):
    """Past one value of a primitive ``kind`` (strings must be ASCII: the generic reader decodes
    them as UTF-8, so this never accepts bytes it would refuse); -1 when malformed."""
    if p < 0:
        return -1
    if kind == A_NULL:
        return p
    if kind == A_BOOL:
        return p + 1 if p < end and buf[p] <= 1 else -1
    if kind == A_INT or kind == A_LONG or kind == A_ENUM:
        v, q = _long(buf, p, end)
        if kind == A_ENUM and (v < 0 or v >= aux):
            return -1
        return q
    if kind == A_FLOAT:
        return p + 4 if p + 4 <= end else -1
    if kind == A_DOUBLE:
        return p + 8 if p + 8 <= end else -1
    if kind == A_FIXED:
        return p + aux if p + aux <= end else -1
    if kind == A_STRING or kind == A_BYTES:
        n, q = _long(buf, p, end)
        if q < 0 or n < 0 or q + n > end:
            return -1
        if kind == A_STRING and not _ascii(buf, q, q + n):
            return -1
        return q + n
    return -1


@_helper
def _avro_skip(buf, p, end, kind, aux, aux2):
    """Past one value of ``kind`` (arrays and maps of primitives:
    ``aux`` the item kind, ``aux2`` its aux)."""
    if kind != A_ARRAY and kind != A_MAP:
        return _avro_skip_item(buf, p, end, kind, aux)
    while True:
        count, p = _long(buf, p, end)
        if p < 0:
            return -1
        if count == 0:
            return p
        if count < 0:  # a block with its byte size first
            count = -count
            _, p = _long(buf, p, end)
            if p < 0:
                return -1
        for _ in range(count):
            if kind == A_MAP:
                p = _avro_skip_item(buf, p, end, A_STRING, 0)
            p = _avro_skip_item(buf, p, end, aux, aux2)
            if p < 0:
                return -1


@_helper
def _avro_number(v, buf, p, end, kind):
    """(value as the event's double, position after it) of a numeric field; -1 when not numeric."""
    if kind == A_DOUBLE:
        return (f64(v, p), p + 8) if p + 8 <= end else (0.0, -1)
    if kind == A_FLOAT:
        return (f32(v, p), p + 4) if p + 4 <= end else (0.0, -1)
    if kind == A_INT or kind == A_LONG:
        n, q = _long(buf, p, end)
        return float(n), q
    return 0.0, -1


@_helper
def _avro_doubles(v, buf, p, end, kind, row, dim, X):
    """Read an array of ``kind`` (double or float) into ``X[row]``: (position after it, whether it
    held exactly ``dim`` finite values); position -1 when malformed."""
    got, finite = 0, True
    width = 8 if kind == A_DOUBLE else 4
    while True:
        count, p = _long(buf, p, end)
        if p < 0:
            return -1, False
        if count == 0:
            return p, finite and got == dim
        if count < 0:
            count = -count
            _, p = _long(buf, p, end)
            if p < 0:
                return -1, False
        if p + width * count > end:
            return -1, False
        for _ in range(count):
            if got < dim:
                value = f64(v, p) if kind == A_DOUBLE else f32(v, p)
                finite &= math.isfinite(value)
                X[row, got] = value
            got += 1
            p += width


@_helper
def _avro_record(v, buf, p, end, plan, nfields, named, dim, X, y_out, spans, r):
    """Walk one record of ``plan``: INSERT or DELETE when the generic path reads it so, with
    these values, else DECLINED. A field of the wrong type for its role is skipped and the
    verdict made without it (a delete has no features, an insert has them)."""
    op, id_ok, y_ok, ts_ok, ids_empty = DECLINED, False, False, True, True
    x_ok = named  # named features: each sets it false when it is not a finite number
    for f in range(nfields):
        role, branches = plan[f, 0], plan[f, 1]
        b = 0
        if branches:
            b, p = _long(buf, p, end)
            if p < 0 or b < 0 or b >= branches:
                return DECLINED
        kind, aux, aux2 = plan[f, 2 + 3 * b], plan[f, 3 + 3 * b], plan[f, 4 + 3 * b]
        if role == OP and kind == A_STRING:
            n, p = _long(buf, p, end)
            if p < 0 or n < 0 or p + n > end or not _ascii(buf, p, p + n):
                return DECLINED
            op = _op_word(buf, p, n)
            p += n
        elif role == OP and kind == A_ENUM:
            idx, p = _long(buf, p, end)
            if p < 0 or idx < 0 or idx >= aux:
                return DECLINED
            op = INSERT if idx == aux2 % 65536 - 1 else (
                DELETE if idx == aux2 // 65536 - 1 else DECLINED)
        elif role == ID and kind == A_STRING:
            n, p = _long(buf, p, end)
            if p < 0 or n < 0 or p + n > end or not _ascii(buf, p, p + n):
                return DECLINED
            id_ok = 1 <= n <= 256
            spans[r, 0], spans[r, 1] = p, p + n
            p += n
        elif role == XS and kind == A_ARRAY and (aux == A_DOUBLE or aux == A_FLOAT):
            p, x_ok = _avro_doubles(v, buf, p, end, aux, r, dim, X)
        elif role == Y and A_INT <= kind <= A_DOUBLE:
            value, p = _avro_number(v, buf, p, end, kind)
            y_ok = math.isfinite(value)
            y_out[r] = value
        elif role == TS and (kind == A_INT or kind == A_LONG):
            t, p = _long(buf, p, end)
            ts_ok = t >= 0
        elif role >= FEATURE and A_INT <= kind <= A_DOUBLE:
            value, p = _avro_number(v, buf, p, end, kind)
            x_ok &= math.isfinite(value)
            X[r, role - FEATURE] = value
        else:  # not a role, or a type its role does not read (a null, say): skipped
            if role == OP:
                op = DECLINED
            elif role == ID:
                id_ok = False
            elif role == Y:
                y_ok = False
            elif role == XS or role >= FEATURE:
                x_ok = False
            elif role == TS:
                ts_ok = kind == A_NULL
            elif role == IDS and kind == A_ARRAY:
                count, _ = _long(buf, p, end)
                ids_empty = count == 0
            p = _avro_skip(buf, p, end, kind, aux, aux2)
        if p < 0:
            return DECLINED
    if p != end:
        return DECLINED
    return _verdict(op, id_ok, x_ok, y_ok, ts_ok, ids_empty)


@jit
def avro_kernel(vbuf, voff, klen, slots, slot, plan, named, dim, max_bytes, X, y_out, spans, kinds):
    """For each record ``r`` with ``slots[r] == slot`` (value ``vbuf[voff[r]:voff[r + 1]]``, 5
    framing bytes first, key ``klen[r]`` bytes): ``kinds[r]`` (INSERT, DELETE, DECLINED), the id's
    place ``vbuf[spans[r, 0]:spans[r, 1]]`` and, for an insert, its row of ``X`` and ``y_out[r]``.
    ``named``: the features are named fields (else one array field)."""
    v = data_pointer(vbuf)
    nfields = plan.shape[0]
    for r in range(slots.shape[0]):
        if slots[r] != slot:
            continue
        start, end = voff[r], voff[r + 1]
        if klen[r] == 0 or end - start + klen[r] > max_bytes:
            kinds[r] = DECLINED
            continue
        kinds[r] = _avro_record(v, vbuf, start + 5, end, plan, nfields, named, dim, X, y_out, spans,
                                r)


# ------------------------------------------------------------------------------- Protobuf
@_helper
def _proto_scalar(v, buf, p, end, kind, wire):
    """(value as the event's double, position after it) of one numeric value; -1 when the wire
    type is not the declared one or the value does not fit the event."""
    if kind == P_DOUBLE:
        if wire != 1 or p + 8 > end:
            return 0.0, -1
        return f64(v, p), p + 8
    if kind == P_FLOAT:
        if wire != 5 or p + 4 > end:
            return 0.0, -1
        return f32(v, p), p + 4
    if wire != 0:
        return 0.0, -1
    raw, p = _varint(buf, p, end)
    if kind == P_ZIGZAG:
        return float(_zigzag(raw)), p
    if kind == P_INT32:  # the low 32 bits, as a signed value
        low = np.int64(raw & np.uint64(0xFFFFFFFF))
        return float(low - 4294967296 if low >= 2147483648 else low), p
    if kind == P_UNSIGNED:
        if raw >= np.uint64(1 << 63):
            return 0.0, -1
        return float(np.int64(raw)), p
    return float(np.int64(raw)), p  # int64


@_helper
def _proto_skip(buf, p, end, wire):
    """Past one field value of ``wire`` type; -1 when malformed (groups are not read)."""
    if wire == 0:
        _, p = _varint(buf, p, end)
        return p
    if wire == 1:
        return p + 8 if p + 8 <= end else -1
    if wire == 5:
        return p + 4 if p + 4 <= end else -1
    if wire == 2:
        n, p = _varint(buf, p, end)
        if p < 0 or n > np.uint64(end - p):
            return -1
        return p + np.int64(n)
    return -1


@_helper
def _proto_fields(buf, p, end):
    """Whether ``buf[p:end]`` is a well-formed run of fields (of a message with scalars only: any
    field of it, of any number and wire type, parses or is kept as unknown)."""
    while p < end:
        key, p = _varint(buf, p, end)
        if p < 0:
            return False
        wire = np.int64(key & np.uint64(7))
        if key >> np.uint64(3) == np.uint64(0) or wire == 3 or wire == 4 or wire > 5:
            return False
        p = _proto_skip(buf, p, end, wire)
        if p < 0:
            return False
    return p == end


@_helper
def _wire_ok(kind, flags, wire):
    """Whether a field declared ``kind`` may arrive with
    ``wire`` (repeated numbers packed or not)."""
    if wire == 2:
        return kind == P_STRING or kind == P_BYTES or kind == P_MESSAGE or (
            flags & F_REPEATED != 0 and kind != P_STRING and kind != P_BYTES and kind != P_MESSAGE)
    if kind == P_DOUBLE or kind == P_FIXED64:
        return wire == 1
    if kind == P_FLOAT or kind == P_FIXED32:
        return wire == 5
    return wire == 0 and kind != P_STRING and kind != P_BYTES and kind != P_MESSAGE


@_helper
def _proto_message(v, buf, p, end, plan, defaults, op_default, dim, X, y_out, spans, r):
    """Walk one message of ``plan``: INSERT or DELETE when the generic path reads it so, with
    these values, else DECLINED.

    Scalars: the last occurrence wins; repeated doubles concatenate, packed or not; an absent
    field has its proto3 default, or no value with presence (``defaults``: NaN, so not finite)."""
    rows = plan.shape[0]
    op, id_ok, ts_ok, ids_empty = op_default, False, True, True
    named = defaults.shape[0] - 1
    for j in range(named):
        X[r, j] = defaults[1 + j]
    got = 0  # values of the repeated features field
    y_value = defaults[0]
    while p < end:
        key, p = _varint(buf, p, end)
        if p < 0:
            return DECLINED
        number = np.int64(key >> np.uint64(3))
        wire = np.int64(key & np.uint64(7))
        if number == 0 or wire == 3 or wire == 4 or wire > 5:
            return DECLINED
        if number >= rows or plan[number, 1] == 0:
            # not in the schema: kept aside by the generic parser
            p = _proto_skip(buf, p, end, wire)
            if p < 0:
                return DECLINED
            continue
        role, kind, flags = plan[number, 0], plan[number, 1], plan[number, 2]
        if not _wire_ok(kind, flags, wire):
            return DECLINED
        if kind == P_MESSAGE:  # the generic parser parses it: only one of scalars is certain here
            n, q = _varint(buf, p, end)
            if q < 0 or n > np.uint64(
                    end - q) or not flags & F_FLAT or not _proto_fields(buf, q, q + np.int64(n)):
                return DECLINED
            p = q + np.int64(n)
            continue
        if kind == P_STRING:  # proto3 checks UTF-8: only ASCII is certain here
            n, q = _varint(buf, p, end)
            if q < 0 or n > np.uint64(end - q) or not _ascii(buf, q, q + np.int64(n)):
                return DECLINED
            if role == OP:
                op = _op_word(buf, q, np.int64(n))
            elif role == ID:
                id_ok = 1 <= np.int64(n) <= 256
                spans[r, 0], spans[r, 1] = q, q + np.int64(n)
            elif role == IDS:
                ids_empty = False
            p = q + np.int64(n)
        elif role == OP:
            raw, p = _varint(buf, p, end)
            op = INSERT if np.int64(raw) == plan[number, 3] else (
                DELETE if np.int64(raw) == plan[number, 4] else DECLINED)
        elif role == XS:
            width = 8 if kind == P_DOUBLE else 4
            if wire == 2:  # packed
                n, p = _varint(buf, p, end)
                if p < 0 or n > np.uint64(end - p) or np.int64(n) % width:
                    return DECLINED
                stop = p + np.int64(n)
            else:
                stop = p + width
                if stop > end:
                    return DECLINED
            while p < stop:
                if got < dim:
                    X[r, got] = f64(v, p) if width == 8 else f32(v, p)
                got += 1
                p += width
        elif role == Y:
            y_value, p = _proto_scalar(v, buf, p, end, kind, wire)
        elif role == TS:
            t, p = _proto_scalar(v, buf, p, end, kind, wire)
            ts_ok = t >= 0.0
        elif role >= FEATURE:
            X[r, role - FEATURE], p = _proto_scalar(v, buf, p, end, kind, wire)
        else:
            p = _proto_skip(buf, p, end, wire)
        if p < 0:
            return DECLINED
    x_ok = got == dim if named == 0 else True
    for j in range(dim):
        x_ok &= math.isfinite(X[r, j])
    y_out[r] = y_value
    return _verdict(op, id_ok, x_ok, math.isfinite(y_value), ts_ok, ids_empty)


@jit
def protobuf_kernel(vbuf, voff, klen, slots, slot, plan, defaults, op_default, dim, max_bytes, X,
                    y_out, spans,
                    kinds):
    """As :func:`avro_kernel`, for Protobuf messages framed with the message indexes ``[0]`` (one
    0 byte after the schema id); ``defaults``: the label's value when absent, then each named
    feature's (NaN: the field has presence, so absent is no value and the record is declined);
    ``op_default``: what an absent ``op`` reads as (an enum's value 0 may be "insert")."""
    v = data_pointer(vbuf)
    for r in range(slots.shape[0]):
        if slots[r] != slot:
            continue
        start, end = voff[r], voff[r + 1]
        if klen[r] == 0 or end - start + klen[
                r] > max_bytes or end - start < 6 or vbuf[start + 5] != 0:
            kinds[r] = DECLINED
            continue
        kinds[r] = _proto_message(v, vbuf, start + 6, end, plan, defaults, op_default, dim, X,
                                  y_out, spans, r)
