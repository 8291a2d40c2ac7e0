"""A declared feature spec: named fields of an event to the
model's vector, by fixed transforms only.

The spec (``OLU_FEATURES_FILE``, YAML or JSON) lists the fields and how each becomes coordinates:

.. code-block:: yaml

    intercept: 1.0              # a constant coordinate (0 or false: none); default 1.0
    bound: 2.0                  # optional: clip the vector's norm to this (default: the spec's own
    bound) features:
      - {name: age, type: numeric, range: [18, 90]}
        # clipped, then mapped onto [-1, 1]
      - {name: income, type: numeric, center: 4.0e4, scale:
        2.0e4, clip: 3}   # (v - c) / s within +-clip
      - {name: active, type: boolean}                                # 1.0 or 0.0
      - {name: plan, type: categorical, vocabulary: [free, pro,
        team]}   # one-hot, plus an "other" slot
      - {name: city, type: hashed, buckets: 64}                      # +-1 in one of 64 slots
      - {name: score, type: numeric, range: [0, 1], weight: 0.5,
         missing: {fill: 0.5, indicator: true}}                      # optional: filled, and flagged

Every transform is fixed before the stream starts: nothing is fitted to the data. A scaler fitted
on the stream would carry each record's influence into every later vector, deleted records
included, which no deletion certificate covers (docs/calibration.md 2.4). Each field's coordinates
are bounded by its declaration, so the vector's norm is too (:attr:`FeatureSpec.norm_bound`).

:func:`parse_spec` checks a whole spec and raises :class:`~.exceptions.FeatureSpecError` with one
line per mistake. The spec's :attr:`~FeatureSpec.digest` (SHA-256 of its canonical JSON) names it in
releases and snapshots: a model trained under one spec is a different model from another's.

>>> spec = parse_spec({"features": [
...     {"name": "age", "type": "numeric", "range": [0, 100]},
...     {"name": "plan", "type": "categorical", "vocabulary": ["free", "pro"]}]})
>>> spec.dim, spec.names
(5, ('(intercept)', 'age', 'plan=free', 'plan=pro', 'plan=<other>'))
>>> round(spec.norm_bound, 6)
1.732051
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from .derived import parse_derived
from .exceptions import FeatureSpecError

__all__ = ["FeatureField", "FeatureSpec", "KINDS", "load_spec", "parse_spec"]

KINDS = ("numeric", "boolean", "categorical", "hashed")
MAX_FIELDS = 64  # the compiled reader keeps one bit per field
MAX_DIM = 1 << 20
_FIELD_KEYS = {"name", "type", "range", "center", "scale", "clip", "weight", "missing",
               "vocabulary", "buckets"}
_RESERVED = {"op", "id", "y", "ts", "ids", "x"}


@dataclass(frozen=True)
class FeatureField:
    """One field's transform. ``slot``: its first coordinate; ``width``: how many it has (the
    missing indicator, when declared, is its last)."""

    name: str
    kind: str
    slot: int
    width: int
    weight: float = 1.0
    low: float = -math.inf  # numeric: the clip interval of the raw value (range) or of the z-score
    high: float = math.inf
    center: float = 0.0  # numeric: (value - center) / scale
    scale: float = 1.0
    vocabulary: tuple[str, ...] = ()
    buckets: int = 0
    optional: bool = False
    fill: object = None  # the value of a missing optional field
    indicator: bool = False

    scale_from_range: bool = False  # numeric ``range``: clipped before centring, not after

    def __post_init__(self):
        # value -> slot
        object.__setattr__(self, "index", {v: i for i, v in enumerate(self.vocabulary)})

    def max_abs(self) -> float:
        """The largest magnitude of this field's value coordinate (before the weight)."""
        if self.kind == "numeric":
            return 1.0 if self.scale_from_range else max(abs(self.low), abs(self.high))
        return 1.0

    def names(self) -> list[str]:
        if self.kind in ("numeric", "boolean"):
            out = [self.name]
        elif self.kind == "categorical":
            out = [f"{self.name}={v}" for v in self.vocabulary] + [f"{self.name}=<other>"]
        else:
            out = [f"{self.name}#{b}" for b in range(self.buckets)]
        return out + ([f"{self.name}:missing"] if self.indicator else [])


@dataclass(frozen=True)
class FeatureSpec:
    """A parsed spec: ``fields`` in order, the intercept, the
    declared ``bound`` (None: the spec's own)."""

    fields: tuple[FeatureField, ...]
    intercept: float
    bound: float | None
    source: dict  # the canonical form (what the digest covers and releases carry)
    derived: tuple = ()  # bins and crosses (derived.py), after the fields' coordinates

    @property
    def dim(self) -> int:
        return (1 if self.intercept
                else 0) + sum(f.width for f in self.fields) + sum(d.width for d in self.derived)

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        return tuple((["(intercept)"] if self.intercept else [])
                     + [n for f in self.fields for n in f.names()]
                     + [n for d in self.derived for n in d.names()])

    @property
    def spec_bound(self) -> float:
        """The largest norm a vector of this spec can have, before any declared bound."""
        total = self.intercept ** 2
        for f in self.fields:
            total += (f.weight * f.max_abs()) ** 2 + (1.0 if f.indicator else 0.0)
        for d in self.derived:  # each block's own bound (derived.py)
            total += d.norm ** 2
        return math.sqrt(total)

    @property
    def norm_bound(self) -> float:
        """The feature bound the model is calibrated with: the declared bound, or the spec's own."""
        return self.bound if self.bound is not None else self.spec_bound

    @functools.cached_property
    def text(self) -> str:
        """The canonical JSON text of the spec (what releases carry, and what the digest covers)."""
        return canonical(self.source).decode()

    @functools.cached_property
    def digest(self) -> str:
        """Computed once: the reader's tables, every snapshot, delta and release ask for it."""
        return "sha256:" + hashlib.sha256(self.text.encode()).hexdigest()


def canonical(source: dict) -> bytes:
    return json.dumps(source, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def load_spec(path: str | Path) -> FeatureSpec:
    """Read and check the spec at ``path`` (``.json``: JSON;
    otherwise YAML, of which JSON is a part)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FeatureSpecError(
            [f"OLU_FEATURES_FILE: cannot read {path}: {exc.strerror or exc}"]) from None
    try:
        if path.suffix.lower() == ".json":
            raw = json.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text)
    except Exception as exc:  # both parsers' errors carry the line
        raise FeatureSpecError(
            [f"OLU_FEATURES_FILE: {path} does not parse: {str(exc).splitlines()[0][:200]}"]) \
            from None
    return parse_spec(raw)


def parse_spec(raw) -> FeatureSpec:
    """The spec of ``raw`` (a dict as read from the file); every mistake in one FeatureSpecError."""
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise FeatureSpecError(["the feature spec must be a mapping with a 'features' list"])
    for key in sorted(set(raw) - {"features", "derived", "intercept", "bound", "version"}):
        problems.append(f"unknown key {key!r} (expected features, derived, intercept, bound)")
    if raw.get("version", 1) != 1:
        problems.append(f"version: {raw['version']!r} is not a version this worker reads (1)")
    intercept = _intercept(raw.get("intercept", 1.0), problems)
    bound = raw.get("bound")
    if bound is not None and not (_number(bound) and 0 < bound < math.inf):
        problems.append(f"bound: {bound!r} is not a positive number")
        bound = None
    items = raw.get("features")
    if not isinstance(items, list) or not items:
        problems.append("features: a non-empty list of fields is required")
        items = []
    if len(items) > MAX_FIELDS:
        problems.append(f"features: {len(items)} fields, at most {MAX_FIELDS}")
    fields, seen, slot = [], set(), 1 if intercept else 0
    for k, item in enumerate(items):
        f = _field(k, item, slot, seen, problems)
        if f is not None:
            fields.append(f)
            slot += f.width
    derived = parse_derived(raw.get("derived"), {f.name: f.kind for f in fields}, slot, problems,
                            MAX_DIM,
                            {f.name: f.max_abs() for f in fields if f.kind == "numeric"})
    slot += sum(d.width for d in derived)
    if slot > MAX_DIM:
        problems.append(f"the spec has {slot} coordinates, at most {MAX_DIM}")
    if problems:
        raise FeatureSpecError(problems)
    source = {"intercept": intercept, "bound": bound, "features": [_source(f) for f in fields]}
    if derived:  # only then: a spec without derived blocks keeps its digest
        source["derived"] = [d.source() for d in derived]
    return FeatureSpec(tuple(fields), intercept, None if bound is None else float(bound), source,
                       derived)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _intercept(v, problems) -> float:
    if v is False or v is None:
        return 0.0
    if v is True:
        return 1.0
    if not _number(v) or v < 0:
        problems.append(f"intercept: {v!r} is not a non-negative number (or true/false)")
        return 1.0
    return float(v)


def _field(k: int, item, slot: int, seen: set, problems: list) -> FeatureField | None:
    where = f"features[{k}]"
    if not isinstance(item, dict):
        problems.append(f"{where}: a mapping with name and type expected")
        return None
    name = item.get("name")
    if not isinstance(name, str) or not name:
        problems.append(f"{where}: 'name' must be a non-empty string")
        return None
    where = f"features[{k}] ({name})"
    bad = len(problems)
    if name in seen:
        problems.append(f"{where}: the field is declared twice")
    if name in _RESERVED:
        problems.append(
            f"{where}: {name!r} is an event field (op, id, y, ts, ids, x), not a feature")
    seen.add(name)
    for key in sorted(set(item) - _FIELD_KEYS):
        problems.append(f"{where}: unknown key {key!r}")
    kind = item.get("type")
    if kind not in KINDS:
        problems.append(f"{where}: type {kind!r} is not one of {', '.join(KINDS)}")
        return None
    weight = item.get("weight", 1.0)
    if not _number(weight) or weight <= 0:
        problems.append(f"{where}: weight {weight!r} is not a positive number")
        weight = 1.0
    args = {"name": name, "kind": kind, "slot": slot, "weight": float(weight)}
    width = 1
    if kind == "numeric":
        args.update(_numeric(item, where, problems))
    else:
        for key in ("range", "center", "scale", "clip"):
            if key in item:
                problems.append(f"{where}: {key!r} applies to numeric fields only")
    if kind == "categorical":
        vocab = item.get("vocabulary")
        if not isinstance(vocab, list) or not vocab or not all(isinstance(v, str) for v in vocab):
            problems.append(f"{where}: 'vocabulary' must be a non-empty list of strings")
            vocab = []
        elif len(set(vocab)) != len(vocab):
            problems.append(f"{where}: the vocabulary lists a value twice")
        args["vocabulary"] = tuple(vocab)
        width = len(vocab) + 1
    elif "vocabulary" in item:
        problems.append(f"{where}: 'vocabulary' applies to categorical fields only")
    if kind == "hashed":
        buckets = item.get("buckets")
        if not isinstance(buckets, int) or isinstance(buckets, bool) or not 2 <= buckets <= MAX_DIM:
            problems.append(f"{where}: 'buckets' must be an integer from 2 to {MAX_DIM}")
            buckets = 2
        args["buckets"] = buckets
        width = buckets
    elif "buckets" in item:
        problems.append(f"{where}: 'buckets' applies to hashed fields only")
    missing = item.get("missing")
    if missing is not None:
        args.update(_missing(missing, kind, args, where, problems))
        width += 1 if args.get("indicator") else 0
    if len(problems) > bad:
        return None
    return FeatureField(width=width, **args)


def _numeric(item: dict, where: str, problems: list) -> dict:
    if "range" in item:
        for key in ("center", "scale", "clip"):
            if key in item:
                problems.append(
                    f"{where}: give either 'range' or 'center'/'scale'/'clip', not both ({key!r})")
        r = item["range"]
        if not (isinstance(r, list) and len(r) == 2 and all(map(_number, r)) and r[0] < r[1]):
            problems.append(f"{where}: 'range' must be [low, high] with low < high, finite numbers")
            return {}
        low, high = float(r[0]), float(r[1])
        return {"low": low, "high": high, "center": (low + high) / 2, "scale": (high - low) / 2,
                "scale_from_range": True}
    if "center" not in item or "scale" not in item:
        problems.append(f"{where}: a numeric field needs 'range' or both 'center' and 'scale'")
        return {}
    center, scale, clip = item["center"], item["scale"], item.get("clip", 3.0)
    if not _number(center):
        problems.append(f"{where}: 'center' {center!r} is not a finite number")
    if not (_number(scale) and scale > 0):
        problems.append(f"{where}: 'scale' {scale!r} is not a positive number")
    if not (_number(clip) and clip > 0):
        problems.append(f"{where}: 'clip' {clip!r} is not a positive number")
        clip = 3.0
    return {"center": float(center) if _number(center) else 0.0,
            "scale": float(scale) if _number(scale) and scale > 0 else 1.0, "low": -float(clip),
            "high": float(clip)}


def _missing(missing, kind: str, args: dict, where: str, problems: list) -> dict:
    if (not isinstance(missing, dict) or set(missing) - {"fill", "indicator"}
            or "fill" not in missing):
        problems.append(
            f"{where}: 'missing' must be a mapping with 'fill' (and optionally 'indicator')")
        return {}
    fill, indicator = missing["fill"], missing.get("indicator", False)
    if not isinstance(indicator, bool):
        problems.append(f"{where}: missing.indicator must be true or false")
    ok = {"numeric": _number(fill), "boolean": isinstance(fill, bool),
          "categorical": isinstance(fill, str), "hashed": isinstance(fill, str)}[kind]
    if not ok:
        problems.append(f"{where}: missing.fill {fill!r} is not a value of a {kind} field")
    return {"optional": True, "fill": fill, "indicator": indicator is True}


def _source(f: FeatureField) -> dict:
    out: dict = {"name": f.name, "type": f.kind}
    if f.kind == "numeric":
        out.update({"range": [f.low, f.high]} if f.scale_from_range
                   else {"center": f.center, "scale": f.scale, "clip": f.high})
    if f.kind == "categorical":
        out["vocabulary"] = list(f.vocabulary)
    if f.kind == "hashed":
        out["buckets"] = f.buckets
    if f.weight != 1.0:
        out["weight"] = f.weight
    if f.optional:
        out["missing"] = {"fill": f.fill, "indicator": f.indicator}
    return out
