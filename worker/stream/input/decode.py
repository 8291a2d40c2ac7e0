"""Decode one input record (key, value) into an :class:`Insert` or :class:`Delete`.

The wire contract is schemas/insert.schema.json and schemas/delete.schema.json. Anything else
raises :class:`~worker.stream.exceptions.DeadLetter` with a reason code from the dead-letter
schema; the loop then copies the record's original bytes to the dead-letter topic and moves on.

Order of checks (the first failing one names the reason):

1. null value: a **tombstone** delete. Key missing -> ``missing_id``; key over ``max_bytes`` ->
   ``oversized``; key not UTF-8, empty or over 256 characters -> ``bad_id``.
2. ``len(key) + len(value) > max_bytes`` -> ``oversized`` (before any parsing).
3. one ``orjson.loads``: invalid UTF-8 -> ``not_utf8``; anything else it refuses -> ``not_json``.
   That includes NaN/Infinity literals, numbers that overflow a double (``1e999``, ``10**400``
   written out) and nesting deeper than orjson's limit (1024). An empty value (``b""``, not
   null) is not a tombstone: ``not_json``.
4. not an object -> ``not_object``; ``op`` missing or not insert/delete -> ``unknown_op``.
5. ``id`` missing -> ``missing_id``; not a string, empty or over 256 characters -> ``bad_id``.
   A delete may name several records in ``ids`` instead (one deletion request, unlearned in one
   engine call; docs/worker.md 3.2): both ``id`` and ``ids`` -> ``id_and_ids``; neither ->
   ``missing_id``; ``ids`` not an array or empty -> ``bad_ids``; more than :data:`MAX_REQUEST_IDS`
   items -> ``too_many_ids``; an item not a string, empty or over 256 characters -> ``bad_id`` (the
   detail names its position); the same id twice -> ``duplicate_ids``.
6. **key**: it must be present and not empty -> else ``key_mismatch``. It is the partitioning key
   (for example the data subject): a subject's inserts and deletes share it so they land in the
   partition that holds the subject's records; a key equal to the id is one such key. It need not
   equal ``id`` (a tombstone's key is its record id, as it has no body). An unkeyed record is
   rejected (not accepted, not ``missing_id``): the producer's partitioner would place it at
   random, so a later delete could land in another partition and never unlearn it.
   ``missing_id`` means the body has no ``id``; ``key_mismatch`` is the documented code for "the
   key cannot route this record to its partition".
7. insert: ``x`` missing, not an array or empty -> ``bad_features``; ``len(x) != dim`` ->
   ``wrong_dimension``; an item that is not a number (bool, null, string, nested array, ...) ->
   ``bad_features``; ``y`` missing or not a number (bool is not a number) -> ``bad_label``; with
   string classes (softmax, ``labels=True``) ``y`` is a class name instead: not a string of 1 to 256
   characters -> ``bad_label``.
   Integer items are converted to float; one too large for a double (not produced by orjson,
   which reads integers over 64 bits as float and rejects overflowing ones, but kept for a
   lenient parser) -> ``non_finite``.
8. a delete may name its data subject instead of records: ``subject`` (the record's key as text;
   every record the partition learned under that key is unlearned in one request). ``subject``
   with ``id`` or ``ids`` -> ``subject_and_ids``; not a non-empty string -> ``bad_subject``; not
   equal to the key -> ``key_mismatch``. ``request_id`` (optional, on any delete): not a string
   of 1 to 256 characters without a control character -> ``bad_request_id``.
9. ``ts`` (optional) not a non-negative integer -> ``schema_violation`` (an integral float such
   as ``1.0`` is an integer for JSON Schema, so it is accepted and converted); any field
   outside the schema -> ``schema_violation``.

Not checked here, but later in batch by the engine (numpy, ``worker.olu.core.domain``): finite
features (``non_finite``), the feature bound (``norm_exceeded``; the norm is computed without
overflow, so finite features up to the largest double are over the bound, not non-finite) and which
labels the loss allows (``bad_label``; for a softmax label that is none of the classes the detail
names it). The compiled fast path (scan.py) checks no norm either: both paths hand the same arrays
to the same engine check.

The worker first runs the compiled fast path (scan.py) over each fetched batch; it takes the common
insert and hands everything else to this module, which stays the reference for every decision.

Privacy: a :class:`DeadLetter` detail names fields, types, lengths and positions, never a
feature or label value, nor the id or key (details end up in logs; the raw record goes only to
the dead-letter topic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import orjson

from ...features.exceptions import BadFeature
from ...features.spec import FeatureSpec
from ...features.transform import vectorize
from ...olu import SparseRows
from ..exceptions import DeadLetter
from .deletes import MAX_REQUEST_IDS, Delete, decode_delete, decode_tombstone
from .fields import MAX_ID_CHARS, MISSING, check_id, check_key, check_ts, ts_value, type_name
from .sparse_x import from_dense, parse_sparse, to_dense

__all__ = ["Delete", "Insert", "InsertRun", "MAX_ID_CHARS", "MAX_REQUEST_IDS", "decode_event",
           "decode_inserts"]

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_FLOATS = {float}
_NUMBERS = frozenset((int, float))
_INSERT_FIELDS = ("op", "id", "x", "y", "ts")


@dataclass(slots=True)
class Insert:
    id: str
    x: list[float] | tuple  # dense, or (indices, values) with sparse input (sparse_x.py)
    y: float | str  # a class name with string classes (softmax)
    ts: int | None = None
    # under a feature spec: the fields clipped, a bit each
    clipped: int = field(default=0, repr=False)


def _parse_error(value, exc: ValueError) -> DeadLetter:
    try:
        bytes(value).decode("utf-8")
    except UnicodeDecodeError as bad:
        return DeadLetter("not_utf8", f"value is not valid UTF-8 (byte {bad.start})")
    # orjson's messages are fixed texts plus a position; they do not quote the input.
    msg = str(getattr(exc, "msg", "") or exc)[:200]
    pos = getattr(exc, "pos", None)
    return DeadLetter("not_json",
                      f"value is not JSON: {msg}" + ("" if pos is None else f" (char {pos})"))


def _bad_item(x: list) -> DeadLetter:
    for i, v in enumerate(x):
        if type(v) not in _NUMBERS:
            return DeadLetter("bad_features", f"x[{i}] is a {type_name(v)}, expected a number")
    return DeadLetter("bad_features", "x holds a non-number")  # pragma: no cover (caller checked)


def _dense_x(obj: dict, x, dim: int) -> list[float]:
    """An array ``x`` as floats, or :class:`DeadLetter`."""
    if type(x) is not list or not x:
        if x is None and "x" not in obj:
            raise DeadLetter("bad_features", "no 'x' field")
        if type(x) is not list:
            raise DeadLetter("bad_features",
                             f"'x' is a {type_name(x)}, expected an array of numbers")
        raise DeadLetter("bad_features", "'x' is empty")
    if len(x) != dim:
        raise DeadLetter("wrong_dimension", f"x has {len(x)} features, model dim is {dim}")
    kinds = set(map(type, x))
    if kinds != _FLOATS:
        if not kinds <= _NUMBERS:
            raise _bad_item(x)
        try:
            return list(map(float, x))
        except OverflowError:
            raise DeadLetter("non_finite", "an integer in x is too large for a double") from None
    return x


def _label(obj: dict, labels: bool = False) -> float | str:
    """``y``: a number, or with string classes (``labels``) a class name, which the model checks."""
    y = obj.get("y", MISSING)
    kind = type(y)
    if labels:
        if kind is str and 0 < len(y) <= MAX_ID_CHARS:
            return y
        if kind is str:
            raise DeadLetter("bad_label",
                             f"'y' has {len(y)} characters, expected 1 to {MAX_ID_CHARS}")
        if y is MISSING:
            raise DeadLetter("bad_label", "no 'y' field")
        raise DeadLetter("bad_label",
                         f"'y' is a {type_name(y)}, expected a class label (a string)")
    if kind is float:
        return y
    if kind is not int:
        if y is MISSING:
            raise DeadLetter("bad_label", "no 'y' field")
        raise DeadLetter("bad_label", f"'y' is a {type_name(y)}, expected a number")
    try:
        return float(y)
    except OverflowError:
        raise DeadLetter("non_finite", "the integer label is too large for a double") from None


def _named_insert(key, obj: dict, features: FeatureSpec, labels: bool) -> Insert:
    """An insert whose features are named fields, turned into the vector by the feature spec
    (worker/features/transform.py). Fields the spec does not name are ignored."""
    record_id = check_id(obj)
    check_key(key)
    if "x" in obj:
        raise DeadLetter("bad_features",
                         "'x' is given, but with a feature spec the features come from its named "
                         "fields")
    y = _label(obj, labels)
    ts = ts_value(obj["ts"]) if "ts" in obj else None
    try:
        x, clipped = vectorize(features, obj)
    except BadFeature as bad:
        raise DeadLetter(bad.reason, bad.detail) from None
    return Insert(record_id, x.tolist(), y, ts, clipped)


def decode_event(key: bytes | None, value: bytes | None, *, dim: int, max_bytes: int,
                 features: FeatureSpec | None = None, sparse: bool = False,
                 labels: bool = False) -> Insert | Delete:
    """Decode a Kafka record of the input topic; raise :class:`DeadLetter` if it must be rejected.
    ``sparse``: an insert's ``x`` is returned as (indices, values) (OLU_SPARSE_INPUT, sparse_x.py).
    ``labels``: an insert's ``y`` is a class name (softmax with string classes, OLU_CLASSES).

    >>> decode_event(b"r-1", b'{"op":"insert","id":"r-1","x":[0.5,1],"y":1}', dim=2, max_bytes=4096)
    Insert(id='r-1', x=[0.5, 1.0], y=1.0, ts=None)
    >>> decode_event(b"r-1", None, dim=2, max_bytes=4096)
    Delete(ids=('r-1',), tombstone=True)
    >>> decode_event(b"subject-7", b'{"op":"delete","ids":["r-1","r-2"]}', dim=2, max_bytes=4096)
    Delete(ids=('r-1', 'r-2'), tombstone=False)
    >>> try:
    ...     decode_event(None, b'{"op":"delete","id":"r-1"}', dim=2, max_bytes=4096)
    ... except DeadLetter as dead:
    ...     print(dead.reason)
    key_mismatch
    """
    if value is None:
        return decode_tombstone(key, max_bytes)
    size = len(value) if key is None else len(key) + len(value)
    if size > max_bytes:
        raise DeadLetter("oversized",
                         f"record is {size} bytes (key + value), more than {max_bytes}")
    try:
        obj = _loads(value)
    except _JSONDecodeError as exc:
        raise _parse_error(value, exc) from None
    if type(obj) is not dict:
        raise DeadLetter("not_object", f"value is a JSON {type_name(obj)}, expected an object")
    op = obj.get("op")

    if op == "insert" and features is not None:
        event = _named_insert(key, obj, features, labels)
        if sparse:  # the spec's one-hot and hashed slots: mostly zeros
            event.x = from_dense(event.x)
        return event
    if op == "insert":
        record_id = check_id(obj)
        check_key(key)
        x = obj.get("x")
        if type(x) is dict:  # the sparse form (sparse_x.py)
            x = parse_sparse(x, dim) if sparse else to_dense(x, dim)
        else:
            x = _dense_x(obj, x, dim)
            x = from_dense(x) if sparse else x
        y = _label(obj, labels)
        ts = None if len(obj) == 4 else check_ts(obj, _INSERT_FIELDS, 4)
        return Insert(record_id, x, y, ts)

    if op == "delete":
        return decode_delete(key, obj)

    if "op" not in obj:
        raise DeadLetter("unknown_op", "no 'op' field")
    if type(op) is str:
        shown = repr(op[:32]) + ("..." if len(op) > 32 else "")
        raise DeadLetter("unknown_op", f"'op' is {shown}, expected 'insert' or 'delete'")
    raise DeadLetter("unknown_op", f"'op' is a {type_name(op)}, expected 'insert' or 'delete'")


@dataclass(slots=True)
class InsertRun:
    """``messages[start:end]``: consecutive valid inserts, decoded into batch arrays."""

    end: int
    ids: list[str] | None  # None: not decoded (the compiled path hands ``keys`` instead)
    X: np.ndarray | SparseRows  # (n, dim) float64, or sparse rows (OLU_SPARSE_INPUT)
    y: np.ndarray  # (n,) float64, or object (class names) with string classes
    newest_ts: int  # the largest Kafka timestamp among them (0: none)
    keys: np.ndarray | None = None  # record_key of each id, when already known
    clipped: np.ndarray | None = None  # under a feature spec: each row's mask of clipped fields


def decode_inserts(messages, start: int, *, dim: int, max_bytes: int, stop: int | None = None,
                   features: FeatureSpec | None = None, sparse: bool = False,
                   labels: bool = False) -> InsertRun:
    """Decode the longest run of valid inserts in ``messages[start:stop]``, in one pass.

    The values and the accept/reject decision are exactly those of :func:`decode_event`; this is
    its fast path for the common record (four fields, float or integer features), with the
    features gathered straight into one array. The run stops *before* the first record that is
    not a valid insert (a delete, a tombstone, a dead letter): the caller hands that one to
    :func:`decode_event`, which names the reason. Unusual valid inserts (a ``ts`` field) are
    checked by :func:`decode_event` itself and stay in the run.

    >>> from confluent_kafka import Message
    >>> msgs = [Message(key=b"r-1", value=b'{"op":"insert","id":"r-1","x":[0.5,1],"y":1}'),
    ...         Message(key=b"r-1", value=None)]
    >>> run = decode_inserts(msgs, 0, dim=2, max_bytes=4096)
    >>> run.end, run.ids, run.X.tolist(), run.y.tolist()
    (1, ['r-1'], [[0.5, 1.0]], [1.0])
    """
    if features is not None or sparse or labels:
        return _each_insert(messages, start, len(messages) if stop is None else stop, dim,
                            max_bytes, features,
                            sparse, labels)
    loads, decode_error, limit = _loads, _JSONDecodeError, MAX_ID_CHARS
    ids: list[str] = []
    xs: list[list] = []
    ys: list = []
    newest = 0
    end = start
    for j in range(start, len(messages) if stop is None else stop):
        msg = messages[j]
        key, value = msg.key(), msg.value()
        if value is None or not key or len(key) + len(value) > max_bytes:
            break
        try:  # subscripts in one try: cheaper than .get() for the common record (Python >= 3.11)
            obj = loads(value)
            if obj["op"] != "insert":
                break
            record_id, x, y = obj["id"], obj["x"], obj["y"]
        except (decode_error, KeyError, TypeError):  # not JSON, not an object, a field missing
            break
        if (type(record_id) is not str or not 0 < len(record_id) <= limit
                or type(x) is not list or len(x) != dim
                or (type(y) is not float and type(y) is not int)):
            break
        if len(obj) != 4:  # a ts field or unknown ones: the general decoder rules on it
            try:
                decode_event(key, value, dim=dim, max_bytes=max_bytes)
            except DeadLetter:
                break
        kind, ts = msg.timestamp()
        if kind and ts > newest:
            newest = ts
        ids.append(record_id)
        xs.append(x)
        ys.append(y)
        end = j + 1
    kinds = set(map(type, chain.from_iterable(xs)))
    if not kinds <= _NUMBERS:  # rare: cut the run before the first row with a non-number item
        bad = next(i for i, x in enumerate(xs) if not set(map(type, x)) <= _NUMBERS)
        del ids[bad:], xs[bad:], ys[bad:]
        end = start + bad
        stamps = (m.timestamp() for m in messages[start:end])
        newest = max((ts for kind, ts in stamps if kind), default=0)
    # orjson reads integers within 64 bits only, so every item and label fits a double.
    X = np.array(xs, dtype=np.float64).reshape(len(xs), dim)
    return InsertRun(end, ids, X, np.array(ys, dtype=np.float64), newest)


def _each_insert(messages, start: int, stop: int, dim: int, max_bytes: int,
                 features: FeatureSpec | None,
                 sparse: bool, labels: bool = False) -> InsertRun:
    """:func:`decode_inserts` under a feature spec, for sparse rows or class names: each record
    through :func:`decode_event`; sparse rows as one ``SparseRows``; class names as an object array
    (the model maps them to class positions, refusing an unknown one)."""
    ids, xs, ys, clipped, newest, end = [], [], [], [], 0, start
    for j in range(start, stop):
        msg = messages[j]
        try:
            event = decode_event(msg.key(), msg.value(), dim=dim, max_bytes=max_bytes,
                                 features=features,
                                 sparse=sparse, labels=labels)
        except DeadLetter:
            break
        if not isinstance(event, Insert):
            break
        kind, ts = msg.timestamp()
        if kind and ts > newest:
            newest = ts
        ids.append(event.id)
        xs.append(event.x)
        ys.append(event.y)
        clipped.append(event.clipped)
        end = j + 1
    y = np.array(ys, dtype=object if labels else np.float64)
    X = SparseRows.from_rows(xs) if sparse else np.array(xs, dtype=np.float64).reshape(len(xs), dim)
    return InsertRun(end, ids, X, y, newest, None, np.array(clipped, np.int64)
                     if features is not None else None)
