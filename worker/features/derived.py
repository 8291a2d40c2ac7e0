"""Derived coordinates of a feature spec: bins, hashed crosses and random Fourier features.

A spec's ``derived`` list adds coordinates computed from its declared fields' values, after the
fields' own (linear) coordinates:

.. code-block:: yaml

    derived:
      - {type: bins, field: age, edges: [30, 45, 60]}
        # one-hot: <30, [30,45), [45,60), >=60
      - {type: bins, field: income, range: [0, 2.0e5], count: 8, encoding: cumulative}
      - {type: cross, fields: [plan, country], buckets: 1024}
        # one of 1024 slots per (plan, country)
      - {type: cross, fields: [plan, age], buckets: 256}       # a numeric field enters by its bins
      - {type: fourier, fields: [lat, lon], components: 128,
        bandwidth: 0.5, seed: 7}   # an RBF kernel

**Bins** make a threshold rule on one field learnable by a linear model: ``onehot`` puts the weight
in the value's bin (``edges`` e_1 < ... < e_m give m + 1 bins; bin j holds e_j <= v < e_{j+1}),
``cumulative`` sets the first j of m coordinates to weight / sqrt(m) for a value in bin j (a step
at each edge; the norm stays at most the weight). ``range`` and ``count`` declare equal-width edges
(the canonical form lists them). Bins read the field's value as the record gives it (a missing
optional field: its fill), before the field's own clipping.

**Crosses** make an interaction learnable: the field values' tokens (a categorical value's slot, a
boolean's 0 or 1, a hashed value's 64-bit hash, a numeric value's bin in the field's first bins
block) are mixed into one 64-bit hash, and plus or minus the weight goes in slot ``h mod buckets``
(the sign from h's top bit), as Vowpal Wabbit's quadratic and cubic namespaces do.

**Random Fourier features** (Rahimi and Recht, Random features for large-scale kernel machines,
NIPS 2007) make a smooth nonlinear surface over a few numeric fields learnable: coordinate j is
``weight sqrt(2/D) cos(w_j . u / bandwidth + b_j)`` for the fields' own values u (each in [-1, 1]
for a ``range`` field), w_j standard normal and b_j uniform on [0, 2 pi), all D of them drawn from
the declared ``seed`` by portable.py, so the map is public and every reader builds the same one;
the inner product of two such vectors approximates the Gaussian kernel exp(-|u - u'|^2 / (2
bandwidth^2)), and the cos is portable.py's (the same bits on every CPU).

Why the certificate holds: every edge, bucket count, seed, bandwidth and weight is declared before
the stream, none is fitted to it, and each block adds at most ``weight`` (``sqrt(2) weight`` for
Fourier features) to the vector's norm, so the spec's norm bound (and with it L, beta, mu and every
sigma) follows from the declaration alone (docs/calibration.md 2.4).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from . import portable

__all__ = ["Bins", "Cross", "Fourier", "cross_hash", "parse_derived"]

_MASK = (1 << 64) - 1
# the first 64 bits of sqrt(2)'s fraction: any fixed start will do
CROSS_OFFSET = 0x6A09E667F3BCC908
GOLDEN = 0x9E3779B97F4A7C15
MAX_EDGES = 1024
ENCODINGS = ("onehot", "cumulative")
_BINS_KEYS = {"type", "field", "edges", "range", "count", "encoding", "weight"}
_CROSS_KEYS = {"type", "fields", "buckets", "weight"}
_FOURIER_KEYS = {"type", "fields", "components", "bandwidth", "seed", "weight"}
MAX_COMPONENTS = 4096
MAX_FOURIER_FIELDS = 8
MAX_PHASE = 1e6  # portable.cos's domain: |w . u / bandwidth + b| stays below it
CROSSABLE = ("categorical", "boolean", "hashed", "numeric")


def _weighted(source: dict, weight: float) -> dict:
    """A block's canonical form: the weight only where it is not the default 1."""
    return source if weight == 1.0 else {**source, "weight": weight}


def _fmix(h: int) -> int:
    """SplitMix64's finaliser (as transform.category_hash's)."""
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK
    return h ^ (h >> 31)


def cross_hash(tokens) -> int:
    """One 64-bit hash of the fields' tokens, in order.

    >>> cross_hash([1, 0]) != cross_hash([0, 1]), cross_hash([3, 7]) == cross_hash([3, 7])
    (True, True)
    """
    h = CROSS_OFFSET
    for t in tokens:
        h = _fmix(((h ^ (t & _MASK)) * GOLDEN) & _MASK)
    return h


@dataclass(frozen=True)
class Bins:
    field: str
    edges: tuple[float, ...]
    encoding: str
    weight: float
    slot: int

    kind = "bins"

    @property
    def width(self) -> int:
        return len(self.edges) + (1 if self.encoding == "onehot" else 0)

    @property
    def norm(self) -> float:
        return self.weight

    def bin_of(self, v: float) -> int:
        """How many edges are at or below ``v`` (0 to m)."""
        return bisect.bisect_right(self.edges, v)

    def write(self, x: list, v: float) -> None:
        b = self.bin_of(v)
        if self.encoding == "onehot":
            x[self.slot + b] = self.weight
        else:
            step = self.weight / math.sqrt(len(self.edges))
            for j in range(b):
                x[self.slot + j] = step

    def names(self) -> list[str]:
        e = [f"{v:g}" for v in self.edges]
        if self.encoding == "cumulative":
            return [f"{self.field}>={v}" for v in e]
        inner = [f"{self.field}[{a},{b})" for a, b in zip(e, e[1:])]
        return [f"{self.field}<{e[0]}", *inner, f"{self.field}>={e[-1]}"]

    def source(self) -> dict:
        return _weighted({"type": "bins", "field": self.field, "edges": list(self.edges),
                          "encoding": self.encoding},
                         self.weight)


@dataclass(frozen=True)
class Cross:
    fields: tuple[str, ...]
    buckets: int
    weight: float
    slot: int
    bins: tuple = field(default=(), compare=False, repr=False)  # per field: its first Bins, or None

    kind = "cross"

    def tokens(self, tokens: dict) -> list[int]:
        """The fields' tokens, a numeric value as its bin."""
        return [tokens[n] if b is None else b.bin_of(tokens[n]) for n,
                b in zip(self.fields, self.bins)]

    @property
    def width(self) -> int:
        return self.buckets

    @property
    def norm(self) -> float:
        return self.weight

    def write(self, x: list, tokens) -> None:
        h = cross_hash(tokens)
        x[self.slot + h % self.buckets] = self.weight if h >> 63 == 0 else -self.weight

    def names(self) -> list[str]:
        return [f"{'&'.join(self.fields)}#{b}" for b in range(self.buckets)]

    def source(self) -> dict:
        return _weighted({"type": "cross", "fields": list(self.fields), "buckets": self.buckets},
                         self.weight)


@dataclass(frozen=True)
class Fourier:
    fields: tuple[str, ...]
    components: int
    bandwidth: float
    seed: int
    weight: float
    slot: int
    # (components, fields), over the bandwidth
    w: tuple = field(default=(), compare=False, repr=False)
    b: tuple = field(default=(), compare=False, repr=False)

    kind = "fourier"

    def __post_init__(self):
        k = len(self.fields)
        draws = portable.gaussians(self.seed, 0, self.components * k)
        w = tuple(tuple(draws[j * k + i] / self.bandwidth for i in range(k))
                  for j in range(self.components))
        b = tuple(6.283185307179586 * portable.uniform(self.seed, 1, j)
                  for j in range(self.components))
        object.__setattr__(self, "w", w)
        object.__setattr__(self, "b", b)

    @property
    def width(self) -> int:
        return self.components

    @property
    def norm(self) -> float:
        return math.sqrt(2.0) * self.weight

    def max_phase(self, bounds: list[float]) -> float:
        """The largest |w_j . u + b_j| for fields' values within ``bounds``."""
        return max(abs(bj) + sum(abs(wi) * u for wi, u in zip(wj, bounds)) for wj,
                   bj in zip(self.w, self.b))

    def write(self, x: list, u: list[float]) -> None:
        scale = self.weight * math.sqrt(2.0 / self.components)
        for j, (wj, bj) in enumerate(zip(self.w, self.b)):
            t = bj
            for wi, ui in zip(wj, u):
                t += wi * ui
            x[self.slot + j] = scale * portable.cos(t)

    def names(self) -> list[str]:
        return [f"fourier({','.join(self.fields)})#{j}" for j in range(self.components)]

    def source(self) -> dict:
        return _weighted(
            {"type": "fourier", "fields": list(self.fields), "components": self.components,
             "bandwidth": self.bandwidth, "seed": self.seed}, self.weight)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _weight(item: dict, where: str, problems: list) -> float:
    weight = item.get("weight", 1.0)
    if not _number(weight) or weight <= 0:
        problems.append(f"{where}: weight {weight!r} is not a positive number")
        return 1.0
    return float(weight)


def _edges(item: dict, where: str, problems: list) -> tuple[float, ...] | None:
    if "edges" in item:
        if "range" in item or "count" in item:
            problems.append(f"{where}: give either 'edges' or 'range' and 'count', not both")
        edges = item["edges"]
        if not (isinstance(edges, list) and 1 <= len(edges) <= MAX_EDGES
                and all(map(_number, edges))
                and all(a < b for a, b in zip(edges, edges[1:]))):
            problems.append(f"{where}: 'edges' must be 1 to {MAX_EDGES} increasing finite numbers")
            return None
        return tuple(float(e) for e in edges)
    r, count = item.get("range"), item.get("count")
    if not (isinstance(r, list) and len(r) == 2 and all(map(_number, r)) and r[0] < r[1]):
        problems.append(
            f"{where}: bins need 'edges', or 'range' [low, high] with low < high and 'count'")
        return None
    if not (isinstance(count, int) and not isinstance(count, bool) and 2 <= count <= MAX_EDGES + 1):
        problems.append(f"{where}: 'count' must be an integer from 2 to {MAX_EDGES + 1}")
        return None
    low, high = float(r[0]), float(r[1])
    return tuple(low + (high - low) * i / count for i in range(1, count))


def _bins(item: dict, where: str, kinds: dict, slot: int, problems: list) -> Bins | None:
    field = item.get("field")
    if kinds.get(field) != "numeric":
        problems.append(f"{where}: 'field' must name a numeric field of the spec, got {field!r}")
    encoding = item.get("encoding", "onehot")
    if encoding not in ENCODINGS:
        problems.append(f"{where}: encoding {encoding!r} is not one of {', '.join(ENCODINGS)}")
    edges = _edges(item, where, problems)
    weight = _weight(item, where, problems)
    if edges is None or kinds.get(field) != "numeric" or encoding not in ENCODINGS:
        return None
    return Bins(field, edges, encoding, weight, slot)


def _cross(item: dict, where: str, kinds: dict, binned: dict, slot: int, problems: list,
           max_dim: int) -> Cross | None:
    names = item.get("fields")
    bad = len(problems)
    if not (isinstance(names, list) and 2 <= len(names) <= 3
            and len(set(map(str, names))) == len(names)):
        problems.append(f"{where}: 'fields' must list 2 or 3 different fields")
        names = []
    for name in names:
        kind = kinds.get(name)
        if kind not in CROSSABLE:
            problems.append(f"{where}: {name!r} is not a field of the spec")
        elif kind == "numeric" and name not in binned:
            problems.append(
                f"{where}: numeric {name!r} enters a cross by its bins: declare bins of it first")
    buckets = item.get("buckets")
    if not (isinstance(buckets, int) and not isinstance(buckets, bool) and 2 <= buckets <= max_dim):
        problems.append(f"{where}: 'buckets' must be an integer from 2 to {max_dim}")
    weight = _weight(item, where, problems)
    if len(problems) > bad:
        return None
    return Cross(tuple(names), buckets, weight, slot, tuple(binned.get(n) for n in names))


def _fourier(item: dict, where: str, kinds: dict, bounds: dict, slot: int,
             problems: list) -> Fourier | None:
    names = item.get("fields")
    bad = len(problems)
    if not (isinstance(names, list) and 1 <= len(names) <= MAX_FOURIER_FIELDS
            and len(set(map(str, names))) == len(names)):
        problems.append(
            f"{where}: 'fields' must list 1 to {MAX_FOURIER_FIELDS} different numeric fields")
        names = []
    for name in names:
        if kinds.get(name) != "numeric":
            problems.append(f"{where}: {name!r} is not a numeric field of the spec")
    components, bandwidth, seed = item.get("components"), item.get("bandwidth"), item.get("seed")
    if not (isinstance(components, int) and not isinstance(components, bool)
            and 1 <= components <= MAX_COMPONENTS):
        problems.append(f"{where}: 'components' must be an integer from 1 to {MAX_COMPONENTS}")
    if not (_number(bandwidth) and bandwidth > 0):
        problems.append(f"{where}: 'bandwidth' must be a positive number")
    if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 1 << 63):
        problems.append(
            f"{where}: 'seed' must be an integer from 0 to 2^63 - 1 (the map is drawn from it)")
    weight = _weight(item, where, problems)
    if len(problems) > bad:
        return None
    block = Fourier(tuple(names), components, float(bandwidth), seed, weight, slot)
    if not block.max_phase([bounds[n] for n in names]) < MAX_PHASE:
        problems.append(f"{where}: bandwidth {bandwidth!r} is too small for the fields' scales "
                        f"(the phase could reach {MAX_PHASE:g})")
        return None
    return block


def parse_derived(items, kinds: dict[str, str], slot: int, problems: list, max_dim: int,
                  bounds: dict[str, float] | None = None) -> tuple:
    """The derived blocks of ``items`` (the spec's ``derived`` list), from coordinate ``slot`` on;
    ``kinds``: each declared field's kind; ``bounds``: each numeric field's largest |value| as the
    spec transforms it (Fourier features read those values). Mistakes go to ``problems``, one line
    each."""
    if items is None:
        return ()
    if not isinstance(items, list):
        problems.append("derived: a list of bins, crosses and fourier blocks expected")
        return ()
    out, binned = [], {}  # a numeric field's first bins block
    for k, item in enumerate(items):
        where = f"derived[{k}]"
        if not isinstance(item, dict) or item.get("type") not in ("bins", "cross", "fourier"):
            problems.append(f"{where}: a mapping with type bins, cross or fourier expected")
            continue
        allowed = {"bins": _BINS_KEYS, "cross": _CROSS_KEYS, "fourier": _FOURIER_KEYS}[item["type"]]
        for key in sorted(set(item) - allowed):
            problems.append(f"{where}: unknown key {key!r}")
        if item["type"] == "bins":
            block = _bins(item, where, kinds, slot, problems)
        elif item["type"] == "cross":
            block = _cross(item, where, kinds, binned, slot, problems, max_dim)
        else:
            block = _fourier(item, where, kinds, bounds or {}, slot, problems)
        if block is not None:
            out.append(block)
            slot += block.width
            if block.kind == "bins":
                binned.setdefault(block.field, block)
    return tuple(out)
