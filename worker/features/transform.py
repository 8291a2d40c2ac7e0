"""The feature spec's transform: a record's named fields to the model's vector (the reference).

:func:`vectorize` is the arithmetic every reader of the spec shares, written out in the order the
compiled reader (worker/stream/input/named_kernel.py) does it, so that the worker, the planner
and the subscriber produce the same bits for the same record:

- numeric with ``range [low, high]``: clip the value to the range, then ``(v - center) / scale``
  (center and scale the range's midpoint and half-width), times the weight; with ``center``,
  ``scale`` and ``clip``: ``(v - center) / scale`` clipped to ``[-clip, clip]``, times the weight;
- boolean: the weight for true, 0 for false;
- categorical: the weight in the value's slot, or in the "other" slot;
- hashed: plus or minus the weight in slot ``h mod buckets``, the sign from ``h``'s top bit, ``h``
  the 64-bit :func:`category_hash` of the value's UTF-8 bytes;
- a missing optional field (absent or null) takes its fill, and its indicator coordinate is 1;
- with a declared bound, a vector longer than it is scaled onto it (the norm summed coordinate
  by coordinate in order, so that no SIMD width changes the bits).

Bad values raise :class:`~.exceptions.BadFeature` naming the field: ``bad_features`` for a
required field that is missing or a value of the wrong type, ``non_finite`` for NaN or infinity.
An out-of-range number is not an error: it is clipped, and :func:`vectorize` says which fields were.

>>> from worker.features.spec import parse_spec
>>> spec = parse_spec({"features": [
...     {"name": "age", "type": "numeric", "range": [0, 100]},
...     {"name": "plan", "type": "categorical", "vocabulary": ["free", "pro"]}]})
>>> x, clipped = vectorize(spec, {"age": 150, "plan": "pro"})
>>> x.tolist(), clipped
([1.0, 1.0, 0.0, 1.0, 0.0], 1)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .exceptions import BadFeature
from .spec import FeatureSpec

__all__ = ["category_hash", "vectorize"]

_MASK = (1 << 64) - 1
FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3


def category_hash(data: bytes) -> int:
    """FNV-1a over the bytes, then SplitMix64's finaliser (so every bit depends on every byte)."""
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & _MASK
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK
    return h ^ (h >> 31)


def _type_name(v) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(v), type(v).__name__)


def _derive(spec: FeatureSpec, x: list, tokens: dict, scaled: dict) -> None:
    """The derived blocks' coordinates (derived.py): bins of a numeric value, crosses of tokens (a
    numeric field's token is its bin in the field's first bins block), Fourier features of the
    numeric fields' transformed values."""
    for d in spec.derived:
        if d.kind == "bins":
            d.write(x, tokens[d.field])
        elif d.kind == "fourier":
            d.write(x, [scaled[n] for n in d.fields])
        else:
            d.write(x, d.tokens(tokens))


def vectorize(spec: FeatureSpec, record: Mapping) -> tuple[np.ndarray, int]:
    """``(x, clipped)``: the vector of ``record`` and a bit mask of the fields whose value was
    clipped (bit k: ``spec.fields[k]``)."""
    x = [0.0] * spec.dim
    if spec.intercept:
        x[0] = spec.intercept
    clipped = 0
    # each field's value (numeric) or token (the others), for derived blocks
    tokens: dict[str, object] = {}
    scaled: dict[str, float] = {}  # each numeric field's transformed value (before its weight)
    for k, f in enumerate(spec.fields):
        v = record.get(f.name)
        missing = v is None
        if missing:
            if not f.optional:
                raise BadFeature("bad_features",
                                 f"no {f.name!r} field (the feature spec requires it)")
            v = f.fill
        if f.indicator:
            x[f.slot + f.width - 1] = 1.0 if missing else 0.0
        if f.kind == "numeric":
            if type(v) is not float:
                if type(v) is not int:
                    raise BadFeature("bad_features",
                                     f"{f.name!r} is a {_type_name(v)}, expected a number")
                try:
                    v = float(v)
                except OverflowError:
                    raise BadFeature("non_finite",
                                     f"{f.name!r} is an integer too large for a double") from None
            if not math.isfinite(v):
                raise BadFeature("non_finite", f"{f.name!r} is NaN or infinite")
            tokens[f.name] = v
            if f.scale_from_range:
                if v < f.low:
                    v, clipped = f.low, clipped | 1 << k
                elif v > f.high:
                    v, clipped = f.high, clipped | 1 << k
                z = (v - f.center) / f.scale
            else:
                z = (v - f.center) / f.scale
                if z < f.low:
                    z, clipped = f.low, clipped | 1 << k
                elif z > f.high:
                    z, clipped = f.high, clipped | 1 << k
            x[f.slot] = z * f.weight
            scaled[f.name] = z
        elif f.kind == "boolean":
            if type(v) is not bool:
                raise BadFeature("bad_features",
                                 f"{f.name!r} is a {_type_name(v)}, expected true or false")
            x[f.slot] = f.weight if v else 0.0
            tokens[f.name] = int(v)
        else:
            if type(v) is not str:
                raise BadFeature("bad_features",
                                 f"{f.name!r} is a {_type_name(v)}, expected a string")
            if f.kind == "categorical":
                at = f.index.get(v, len(f.vocabulary))
                x[f.slot + at] = f.weight
                tokens[f.name] = at
            else:
                h = category_hash(v.encode("utf-8", "surrogatepass"))
                x[f.slot + h % f.buckets] = f.weight if h >> 63 == 0 else -f.weight
                tokens[f.name] = h
    if spec.derived:
        _derive(spec, x, tokens, scaled)
    if spec.bound is not None:
        sq = 0.0
        for v in x:
            sq += v * v
        norm = math.sqrt(sq)
        if norm > spec.bound:
            factor = spec.bound / norm
            x = [v * factor for v in x]
    return np.array(x, np.float64), clipped
