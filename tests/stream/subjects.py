"""Streams keyed by data subject, whose deletes are requests naming several records (``ids``).

The Kafka key of every event is its subject, so a subject's inserts and its deletion requests land
in one partition; the rest of ``kafka_harness`` (replay, oracle, end-state checks) reads them like
any other stream.
"""

from __future__ import annotations

import numpy as np
import orjson

from tests.stream.kafka_harness import DIM, insert


def request(key: str, ids) -> tuple[bytes, bytes, str]:
    """One deletion request naming ``ids`` (a delete with ``ids``), keyed ``key`` (their subject)."""
    return key.encode(), orjson.dumps({"op": "delete", "ids": list(ids)}), "delete"


def subject_stream(n: int, *, seed: int, subjects: int, prefix: str = "r", delete_rate: float = 0.08, dim: int = DIM,
                   start: int = 0):
    """``kafka_harness.event_stream`` keyed by data subject: each insert belongs to one of ``subjects``
    subjects and is keyed by it; a delete is a request (keyed by the subject) naming 1 to 6 of the
    subject's live records, now and then with an id never inserted or one an earlier request
    deleted (reported as not applied / a duplicate). No tombstones: a tombstone's key is its id,
    which would route it away from the subject's partition."""
    rng = np.random.default_rng(seed)
    w = np.linspace(-1.0, 1.0, dim)
    live: dict[str, list[str]] = {}
    deleted: list[str] = []
    out = []
    for j in range(start, start + n):
        subject = f"{prefix}-s{int(rng.integers(subjects))}"
        held = live.get(subject, [])
        if held and rng.random() < delete_rate:
            k = min(len(held), int(rng.integers(1, 7)))
            picked = [held.pop(int(rng.integers(len(held)))) for _ in range(k)]
            extra = []
            if rng.random() < 0.2:
                extra.append(f"{prefix}-ghost-{j}")  # never inserted: not applied
            if deleted and rng.random() < 0.2:
                extra.append(deleted[int(rng.integers(len(deleted)))])  # deleted before: a duplicate
            deleted.extend(picked)
            out.append(request(subject, picked + [rid for rid in extra if rid not in picked]))
        else:
            rid = f"{prefix}-{j}"
            live.setdefault(subject, []).append(rid)
            x = rng.normal(size=dim)
            x *= 0.95 / max(1.0, float(np.linalg.norm(x)))
            y = 1 if float(x @ w) + 0.3 * rng.normal() >= 0 else 0
            out.append(insert(rid, x, y, key=subject))
    return out
