"""An insert's ``x`` in sparse form: ``{"indices": [...], "values": [...]}``
(schemas/insert.schema.json).

The indices are integers, strictly increasing, each in [0, dim); ``values`` holds one number per
index. With ``OLU_SPARSE_INPUT`` the worker learns such rows in O(non-zeros)
(worker/olu/core/sparse.py) and takes an array ``x`` too (its non-zeros); without it, a sparse ``x``
is turned into the dense row. A mistake is a dead letter naming the place, never a value.

>>> parse_sparse({"indices": [1, 4], "values": [0.5, 2]}, dim=6)
([1, 4], [0.5, 2])
>>> to_dense({"indices": [1, 4], "values": [0.5, 2]}, dim=6)
[0.0, 0.5, 0.0, 0.0, 2.0, 0.0]
>>> from_dense([0.0, 0.5, 0, 2])
(array([1, 3]), array([0.5, 2. ]))
"""

from __future__ import annotations

import numpy as np

from ..exceptions import DeadLetter

__all__ = ["from_dense", "parse_sparse", "to_dense"]

_FIELDS = {"indices", "values"}
_INT, _NUMBER = {int}, {int, float}


def _type_name(value: object) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object",
            type(None): "null"}.get(type(value), type(value).__name__)


def parse_sparse(x: dict, dim: int) -> tuple[list[int], list]:
    """(indices, values) of a sparse ``x``, checked (the lists as orjson read them: ``SparseRows``
    makes the arrays of a whole run at once), or :class:`DeadLetter`."""
    indices, values = x.get("indices"), x.get("values")
    if (len(x) == 2 and type(indices) is list and type(values) is list
            and len(indices) == len(values)
            and set(map(type, indices)) <= _INT and set(map(type, values)) <= _NUMBER
            and (not indices or (0 <= indices[0] and indices[-1] < dim
                                 and all(map(int.__lt__, indices, indices[1:]))))):
        return indices, values  # the common record, checked with no Python loop
    return _refused(x, dim)


def _refused(x: dict, dim: int):
    """The :class:`DeadLetter` of a sparse ``x`` the quick check did not pass, naming the place."""
    if set(x) != _FIELDS:
        extra, missing = sorted(set(x) - _FIELDS), sorted(_FIELDS - set(x))
        raise DeadLetter("bad_features", "sparse x needs exactly 'indices' and 'values'"
                         + (f"; missing {missing}" if missing
                            else "") + (f"; unknown {extra}" if extra else ""))
    indices, values = x["indices"], x["values"]
    for name, items in (("indices", indices), ("values", values)):
        if type(items) is not list:
            raise DeadLetter("bad_features",
                             f"x.{name} is a {_type_name(items)}, expected an array")
    if len(indices) != len(values):
        raise DeadLetter("bad_features",
                         f"x.indices has {len(indices)} items, x.values {len(values)}")
    for k, i in enumerate(indices):
        if type(i) is not int:
            raise DeadLetter("bad_features",
                             f"x.indices[{k}] is a {_type_name(i)}, expected an integer")
    for k, v in enumerate(values):
        if type(v) is not float and type(v) is not int:
            raise DeadLetter("bad_features",
                             f"x.values[{k}] is a {_type_name(v)}, expected a number")
    at = np.array(indices, np.int64) if all(-2**63 <= i < 2**63 for i in indices) else None
    if at is None or (len(at) and (at.min() < 0 or at.max() >= dim)):
        k = next(k for k, i in enumerate(indices) if not 0 <= i < dim)
        raise DeadLetter("wrong_dimension", f"x.indices[{k}] lies outside [0, {dim})")
    if len(at) > 1 and not (np.diff(at) > 0).all():
        k = int(np.argmin(np.diff(at) > 0)) + 1
        raise DeadLetter("bad_features",
                         f"x.indices[{k}] does not increase (indices are sorted, each once)")
    try:
        np.array(values, np.float64)
    except OverflowError:
        raise DeadLetter("non_finite", "an integer in x.values is too large for a double") from None
    return indices, values


def to_dense(x: dict, dim: int) -> list[float]:
    """The dense row of a sparse ``x`` (for a worker that learns dense rows)."""
    indices, values = parse_sparse(x, dim)
    row = np.zeros(dim)
    row[np.array(indices, np.int64)] = np.array(values, np.float64)
    return row.tolist()


def from_dense(x: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """(indices, values) of a checked dense row's non-zeros (a worker that learns sparse rows)."""
    row = np.asarray(x, np.float64)
    at = np.flatnonzero(row)
    return at, row[at]
