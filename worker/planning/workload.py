"""The deletion workload a plan simulates: a sample's inserts, cycled to the simulated length, and
the deletion requests among them. Three things about the requests decide what unlearning costs
(docs/accounting.md 13 and 12.6): how many there are per event, how many records each names, and
how old those records are when deleted. A workload takes them from the sample's own deletes when
it has some (:func:`from_sample`: the real rate, sizes and ages), else from the plan's flags
(:func:`from_shape`, described by a :class:`Shape`).

Cycling: pass ``p > 0`` of the sample renames its ids ``<id>#<p>`` and keeps its keys, so a key
active in every pass keeps growing, as a real subject does. Request positions are counted in
inserts before the request; ages in events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..olu import record_keys
from ..olu.privacy import plan_deletions

__all__ = ["RECORDS", "Shape", "Workload", "from_sample", "from_shape", "nearest_present"]

#: What one request names: one record, or every record of the key (the subject) held so far.
RECORDS = ("single", "key")


@dataclass(frozen=True)
class Shape:
    """A workload described by flags (``olu-worker plan --help`` says what each means)."""

    rate: float  # deletion requests per event
    records: str = "single"  # RECORDS
    age: int = 100_000  # the age of a deleted record: uniform in [1, age] events ...
    recent_share: float = 0.0  # ... except this share of requests, uniform in [1, recent_age]
    recent_age: int = 2_000
    # keys to spread a keyless sample over (records="key"); None: inserts / 50
    keys: int | None = None
    key_skew: float = 1.2  # their activity: Zipf exponent (a few keys hold most records)


@dataclass(frozen=True)
class Workload:
    """Inserts (``ids``, ``X``, ``y``, ``subjects``: 64-bit keys) and requests: request ``j``
    comes after ``at[j]`` inserts and names ``requests[j]``. ``outside``: ids named that the stream
    never inserted (records older than the sample): the simulation cannot charge them."""

    ids: list[str]
    X: np.ndarray
    y: np.ndarray
    subjects: np.ndarray
    at: np.ndarray
    requests: list[tuple[str, ...]]
    source: str  # "sample" (its own deletes) or "flags"
    outside: int = 0

    @property
    def events(self) -> int:
        return len(self.ids) + len(self.requests)

    @property
    def rate(self) -> float:
        """Deletion requests per event."""
        return len(self.requests) / self.events

    def multi_record(self) -> bool:
        """Requests name several records of a key on average: a per-key cap can pay."""
        sizes = [len(r) for r in self.requests]
        return bool(sizes) and float(np.mean(sizes)) > 1.2

    def ages(self) -> np.ndarray:
        """The age in events of every record a request names, at its request."""
        where = {r: j for j, r in enumerate(self.ids)}
        per_event = self.events / max(1, len(self.ids))  # events per insert: ages in events
        return np.array([(self.at[j] - where[r]) * per_event for j, req in enumerate(self.requests)
                         for r in req if r in where and where[r] < self.at[j]], np.float64)

    def stats(self) -> dict:
        """The three dimensions as measured on the workload (JSON-able)."""
        where = {r: j for j, r in enumerate(self.ids)}
        sizes = np.array([sum(r in where for r in req) for req in self.requests], np.float64)
        ages = self.ages()
        _, counts = np.unique(self.subjects, return_counts=True)
        top = np.sort(counts)[::-1][:max(1, len(counts) // 100)]

        def q(values, p):
            return float(np.quantile(values, p)) if len(values) else None

        return {"source": self.source, "events": self.events, "inserts": len(self.ids),
                "requests": len(self.requests), "rate": self.rate,
                "records_per_request": {"mean": float(sizes.mean()) if len(sizes) else None,
                                        "p50": q(sizes, 0.5), "p90": q(sizes, 0.9),
                                        "max": int(sizes.max()) if len(sizes) else None},
                "age_events": {"p10": q(ages, 0.1), "p50": q(ages, 0.5), "p90": q(ages, 0.9)},
                "keys": len(counts), "top_keys_share": float(top.sum() / len(self.ids)),
                "outside": self.outside}


def _cycled(sample, inserts: int):
    """(ids, X, y, subject strings) of ``inserts`` rows: the sample cycled, renamed per pass."""
    n = len(sample)
    rows = np.arange(inserts) % n
    ids = [sample.ids[r] if j < n else f"{sample.ids[r]}#{j // n}" for j, r in enumerate(rows)]
    keys = [sample.subjects[r] for r in rows] if sample.subjects else ids
    return ids, sample.X[rows], sample.y[rows], keys


def _hashed(keys: list[str]) -> np.ndarray:
    """The 64-bit key (``record_key``) of each key, each distinct one hashed once."""
    distinct = list(dict.fromkeys(keys))
    value = dict(zip(distinct, record_keys(distinct).tolist()))
    return np.fromiter((value[k] for k in keys), np.uint64, len(keys))


def from_sample(sample, events: int) -> Workload:
    """The sample's own deletes, its passes repeated until ``events`` events."""
    n, per_pass = len(sample), len(sample) + len(sample.requests)
    passes = max(1, math.ceil(events / per_pass))
    inserts = min(passes * n, max(1, round(events * n / per_pass)))
    ids, X, y, keys = _cycled(sample, inserts)
    known = set(sample.ids)
    at, requests, outside = [], [], 0
    for p in range(passes):
        for before, named in sample.requests:
            position = p * n + before
            if position > inserts:
                break
            outside += sum(r not in known for r in named)
            at.append(position)
            requests.append(named if p == 0
                            else tuple(f"{r}#{p}" if r in known else r for r in named))
    return Workload(ids, X, y, _hashed(keys), np.array(at, np.int64), requests, "sample", outside)


def _synthetic_keys(inserts: int, shape: Shape, rng) -> list[str]:
    """Keys for a keyless sample: ``shape.keys`` keys of Zipf activity (exponent ``key_skew``)."""
    count = shape.keys or max(1, inserts // 50)
    weights = 1.0 / np.arange(1, count + 1) ** shape.key_skew
    drawn = rng.choice(count, size=inserts, p=weights / weights.sum())
    return [f"key-{k}" for k in drawn.tolist()]


def from_shape(sample, shape: Shape, events: int, seed: int) -> Workload:
    """Requests drawn as ``shape`` describes, among the sample's inserts cycled to ``events``.

    Request ``j`` at insert position ``tau`` picks a record by its age (events, converted to
    inserts) and names it, or, with ``records="key"``, every record of its key inserted before
    ``tau`` and not yet deleted. A record already deleted is replaced by the nearest present one."""
    steps, taus = plan_deletions(events, shape.rate)
    rng = np.random.default_rng(seed)
    ids, X, y, keys = _cycled(sample, steps)
    if shape.records == "key" and not sample.subjects:
        keys = _synthetic_keys(steps, shape, rng)
    inserts_per_event = steps / events
    deleted = np.zeros(steps, np.bool_)
    held: dict[str, list[int]] = {}  # key -> its inserts so far, in order
    filled = 0
    requests, at = [], []
    for tau in taus:
        if shape.records == "key":  # only whole-key requests need each key's records
            for j in range(filled, tau):
                held.setdefault(keys[j], []).append(j)
            filled = tau
        recent = rng.random() < shape.recent_share
        age = int(rng.integers(1, (shape.recent_age if recent else shape.age) + 1))
        u = nearest_present(deleted, max(0, tau - max(1, round(age * inserts_per_event))), tau)
        if u is None:
            continue
        # every request of a "key" workload takes all of its
        # key's present records: none is left behind
        named = held.pop(keys[u]) if shape.records == "key" else [u]
        deleted[named] = True
        at.append(tau)
        requests.append(tuple(ids[v] for v in named))
    return Workload(ids, X, y, _hashed(keys), np.array(at, np.int64), requests, "flags")


def nearest_present(deleted: np.ndarray, u: int, tau: int) -> int | None:
    """The first record at or after ``u`` (before ``tau``) not
    yet deleted, else the last before it."""
    v = u
    while v < tau and deleted[v]:
        v += 1
    if v < tau:
        return v
    v = u - 1
    while v >= 0 and deleted[v]:
        v -= 1
    return v if v >= 0 else None
