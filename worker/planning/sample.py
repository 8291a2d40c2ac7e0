"""Reading a sample of events for the plan's simulation: JSON lines in the insert schema
(``{"op": "insert", "id": "...", "x": [...], "y": ...}``, schemas/insert.schema.json).

Every line is checked as the worker checks an insert (the engine's feature and label checks):
a malformed line is a :class:`SampleError` naming the file and line. Records whose features
exceed the feature bound are dropped under ``feature_policy = reject`` (the worker dead-letters
them) and counted; ``clip`` rescales them, as the worker does. Blank lines are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

from ..olu.exceptions import InvalidExample, NormExceeded
from .exceptions import SampleError

__all__ = ["Sample", "SampleError", "read_sample", "sample_dimension"]


@dataclass(frozen=True)
class Sample:
    ids: list[str]
    X: np.ndarray
    y: np.ndarray
    dropped: int  # records over the feature bound, dropped as the worker would dead-letter them

    def __len__(self) -> int:
        return len(self.ids)


def _lines(path: str):
    try:
        with open(path, "rb") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    yield number, line
    except OSError as exc:
        raise SampleError(f"cannot read sample {path!r}: {exc.strerror or exc}") from None


def _record(path: str, number: int, line: bytes) -> dict:
    where = f"sample {path!r} line {number}"
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise SampleError(f"{where}: not valid JSON") from None
    if not isinstance(value, dict):
        raise SampleError(f"{where}: expected a JSON object, got {type(value).__name__}")
    if value.get("op") != "insert":
        raise SampleError(f"{where}: expected an insert event (\"op\": \"insert\"), got op {value.get('op')!r}")
    missing = [k for k in ("id", "x", "y") if k not in value]
    if missing:
        raise SampleError(f"{where}: missing {', '.join(missing)}")
    if not isinstance(value["id"], str) or not value["id"]:
        raise SampleError(f"{where}: id must be a non-empty string")
    if not isinstance(value["x"], list) or not value["x"]:
        raise SampleError(f"{where}: x must be a non-empty array of numbers")
    return value


def sample_dimension(path: str) -> int:
    """The feature dimension of the sample's first record (to default ``dim`` from it)."""
    for number, line in _lines(path):
        return len(_record(path, number, line)["x"])
    raise SampleError(f"sample {path!r} has no events")


def read_sample(path: str, model) -> Sample:
    """The sample's inserts, checked with ``model``'s feature bound, policy and loss."""
    ids, rows, labels, dropped, seen = [], [], [], 0, set()
    for number, line in _lines(path):
        value = _record(path, number, line)
        where = f"sample {path!r} line {number}"
        if value["id"] in seen:
            raise SampleError(f"{where}: id {value['id']!r} appears twice")
        if len(value["x"]) != model.dim:
            raise SampleError(f"{where}: x has {len(value['x'])} features, expected dim {model.dim}")
        try:
            x = model.features.check(value["x"])
            y = model.loss.label(value["y"])
        except NormExceeded:
            dropped += 1
            continue
        except InvalidExample as exc:
            raise SampleError(f"{where}: {exc}") from None
        seen.add(value["id"])
        ids.append(value["id"])
        rows.append(x)
        labels.append(y)
    if not ids:
        raise SampleError(f"sample {path!r} has no usable insert" + (f" ({dropped} over the feature bound)"
                                                                    if dropped else ""))
    return Sample(ids, np.array(rows, np.float64), np.array(labels, np.float64), dropped)
