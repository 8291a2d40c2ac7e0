"""Reading a sample of events for the plan's simulation: keyed JSON lines, as ``olu-worker produce``
sends them (worker/formats/keyed_lines.py): inserts, deletes and tombstones of the input schemas,
each an event (keyed by its id) or ``{"key": ..., "value": ...}`` with the partitioning key.

Every insert is checked as the worker checks it (the engine's feature and label checks): a
malformed line is a :class:`SampleError` naming the file and line. Records whose features exceed
the feature bound are dropped under ``feature_policy = reject`` (the worker dead-letters them) and
counted; ``clip`` rescales them, as the worker does. Labels are kept as the loss reads them
(``loss.label``: -1/+1 for logistic, the value for ridge, the class's position in ``classes`` for
softmax, whose sample labels are the class labels themselves). The sample's deletes are kept, in
stream order, as the workload to replay (worker/planning/workload.py). Blank lines are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..features.exceptions import BadFeature
from ..features.transform import vectorize
from ..formats.exceptions import BadKeyedLine
from ..formats.keyed_lines import numbered_records
from ..olu.exceptions import InvalidExample, NormExceeded
from .exceptions import SampleError

__all__ = ["Sample", "SampleError", "read_sample", "sample_dimension", "sample_from_records",
           "sample_of"]


@dataclass(frozen=True)
class Sample:
    """The sample's inserts (``ids``, ``X``, ``y``, each one's partitioning key in ``subjects``) and
    its deletion requests: ``requests[j] = (inserts before it, ids it names)``, in stream order.
    ``y`` holds the labels as the model's loss reads them (``loss.label``; :func:`sample_of` maps
    raw labels, softmax classes included)."""

    ids: list[str]
    X: np.ndarray
    y: np.ndarray
    dropped: int  # records over the feature bound, dropped as the worker would dead-letter them
    subjects: list[str] | None = None  # None: every record is its own key (key = id)
    requests: tuple[tuple[int, tuple[str, ...]], ...] = ()

    def __len__(self) -> int:
        return len(self.ids)


def _lines(path: str):
    try:
        with open(path, "rb") as f:
            yield from f
    except OSError as exc:
        raise SampleError(f"cannot read sample {path!r}: {exc.strerror or exc}") from None


def _records(path: str):
    """(line number, key, event) of the file's records."""
    try:
        yield from numbered_records(_lines(path))
    except BadKeyedLine as exc:
        raise SampleError(f"sample {path!r} {exc}") from None


def _insert_fields(where: str, value: dict, features=None) -> None:
    missing = [k for k in ("id", "y") + (() if features is not None else ("x",)) if k not in value]
    if missing:
        raise SampleError(f"{where}: missing {', '.join(missing)}")
    if features is not None:
        try:
            # named fields: the spec makes the vector, exactly as the worker does (worker/features)
            value["x"] = vectorize(features, value)[0].tolist()
        except BadFeature as bad:
            raise SampleError(
                f"{where}: {bad.detail} (the worker dead-letters it: {bad.reason})") from None
    if not isinstance(value["x"], list) or not value["x"]:
        raise SampleError(f"{where}: x must be a non-empty array of numbers")


def _delete_ids(where: str, value: dict) -> tuple[str, ...]:
    ids = value.get("ids", [value.get("id")] if "id" in value else None)
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        raise SampleError(
            f"{where}: a delete names its record in \"id\" or its records in \"ids\" (strings)")
    return tuple(ids)


def sample_dimension(path: str) -> int:
    """The feature dimension of the sample's first insert (to default ``dim`` from it)."""
    for number, _key, value in _records(path):
        if value is not None and value.get("op") == "insert":
            _insert_fields(f"sample {path!r} line {number}", value)
            return len(value["x"])
    raise SampleError(f"sample {path!r} has no insert events")


def read_sample(path: str, model, features=None) -> Sample:
    """The sample's events, checked with ``model``'s feature bound, policy and loss; ``features``:
    the feature spec its inserts' named fields go through."""
    return sample_from_records(((f"line {n}", k, v) for n, k, v in _records(path)), model,
                               f"sample {path!r}",
                               features)


def sample_from_records(records: Iterable[tuple[str, bytes, dict | None]], model, name: str,
                        features=None) -> Sample:
    """A :class:`Sample` of (where, Kafka key, event or None for a tombstone) in stream order (a
    file's lines, or the records read from a topic); ``name`` and ``where`` name each record;
    ``features``: the inserts carry named fields for this feature spec, not ``x``."""
    ids, rows, labels, subjects, requests, dropped, seen = [], [], [], [], [], 0, set()
    keyed = False
    for at, key, value in records:
        where = f"{name} {at}"
        if value is None:  # a tombstone: the delete of the record whose id is its key
            requests.append((len(ids), (key.decode(errors="replace"),)))
            continue
        op = value.get("op")
        if op == "delete" and "subject" in value:  # every record the subject gave so far
            mine = tuple(i for i, s in zip(ids, subjects) if s == value["subject"])
            if mine:
                requests.append((len(ids), mine))
            continue
        if op == "delete":
            requests.append((len(ids), _delete_ids(where, value)))
            continue
        if op != "insert":
            raise SampleError(f"{where}: expected an insert or a delete event, got op {op!r}")
        _insert_fields(where, value, features)
        if value["id"] in seen:
            raise SampleError(f"{where}: id {value['id']!r} appears twice")
        if len(value["x"]) != model.dim:
            raise SampleError(
                f"{where}: x has {len(value['x'])} features, expected dim {model.dim}")
        try:
            x = model.features.check(value["x"])
            y = model.loss.label(value["y"])
        except NormExceeded:
            dropped += 1
            continue
        except InvalidExample as exc:
            raise SampleError(f"{where}: {exc}") from None
        subject = key.decode(errors="replace")
        keyed = keyed or subject != value["id"]
        seen.add(value["id"])
        ids.append(value["id"])
        rows.append(x)
        labels.append(y)
        subjects.append(subject)
    if not ids:
        raise SampleError(f"{name} has no usable insert" + (
            f" ({dropped} over the feature bound)" if dropped else ""))
    return Sample(ids, np.array(rows, np.float64), np.array(labels, np.float64), dropped,
                  subjects if keyed else None, tuple(requests))


def sample_of(model, ids: list[str], X: np.ndarray, labels,
              subjects: list[str] | None = None) -> Sample:
    """A :class:`Sample` of inserts given as arrays (a benchmark's stream): ``labels`` as the stream
    carries them (softmax: the class labels), mapped by ``model.loss``; a label the loss refuses is
    a :class:`SampleError`. The rows are taken as they are (no feature check, nothing dropped)."""
    try:
        y = model.loss.labels(labels) if hasattr(model.loss, "labels") else np.array(
            [model.loss.label(v) for v in labels], np.float64)
    except InvalidExample as exc:
        raise SampleError(f"sample labels: {exc}") from None
    return Sample(list(ids), np.asarray(X, np.float64), y, 0, subjects)
