"""One record of the parameter topic decoded and checked into a :class:`ModelRelease`.

The checks are written out here rather than loaded from the JSON Schema
(schemas/release.schema.json), so the client needs no jsonschema at run time.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from ..exceptions import InvalidRelease
from ..features.exceptions import FeatureSpecError
from ..features.spec import FeatureSpec, parse_spec
from ..features.transform import vectorize
from ..wire import RELEASE_SCHEMA_VERSION as SCHEMA_VERSION
from ..wire import TRIGGER_HEADER, decode_key, release_key_text
from .predict import LOSSES, MULTICLASS_LOSSES, checked_vector, class_probabilities, prediction

_INT_FIELDS = ("partition", "version", "offset", "t", "deletions", "epoch")
_REQUIRED = ("schema_version", "model", "topic", "partition", "version", "offset", "t", "deletions",
             "epoch", "algorithm", "loss", "dim", "weights", "privacy", "released_at")
_PRIVACY_NUMBERS = ("eps_rdp_slope", "budget_used", "epsilon", "delta")
_MAX_DIM = 65536


@dataclass(frozen=True, eq=False)
class ModelRelease:
    """One validated release: the model of input partition ``(topic, partition)`` at ``version``.

    Releases compare by identity; ``raw`` (the value bytes) identifies the content: a duplicate
    of a release is byte-identical to it.
    """

    model: str
    topic: str
    partition: int
    version: int
    offset: int
    t: int
    deletions: int
    epoch: int
    algorithm: str
    loss: str
    dim: int  # features
    weights: np.ndarray = field(repr=False)  # float64, length dim (softmax: K x dim, row by row)
    privacy: Mapping[str, Any]
    released_at: float
    trigger: str | None = None  # Kafka header olu.trigger: deletion, events, interval, final
    #: the deletion request this release published (deletion releases only): ids, applied,
    #: not_applied (the ids the partition never applied), duplicates; None on other releases
    request: Mapping[str, Any] | None = None
    generation: int | None = None  # warm-standby rotation: the generation of the released model
    #: the feature spec the model was trained under (releases of a worker with OLU_FEATURES_FILE)
    features: FeatureSpec | None = field(default=None, repr=False)
    #: softmax: the K labels, in class order
    classes: tuple[str, ...] | tuple[int, ...] | None = None
    record: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the value as received
    raw: bytes = field(default=b"", repr=False)

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def predict(self, x: Sequence[float] | Mapping[str, Any]) -> float | str | int:
        """This release's prediction for ``x`` (probability for logistic losses, w.x for ridge,
        the most probable class label for softmax): a vector, or a raw record (a dict of named
        fields) under the release's feature spec."""
        return prediction(self.loss, self.weights, self.vector(x), self.classes)

    def predict_proba(self, x: Sequence[float] | Mapping[str, Any]) -> dict[str | int, float]:
        """Softmax only: ``{class label: probability}`` for ``x``, in class order."""
        return class_probabilities(self.weights, self.vector(x), self.classes)

    def vector(self, x: Sequence[float] | Mapping[str, Any]) -> np.ndarray:
        """The model's vector of ``x``: a raw record through the feature spec, bit for bit as the
        worker computed it (worker/features/transform.py), or a vector as it is."""
        if isinstance(x, Mapping):
            if self.features is None:
                raise ValueError("this release has no feature spec: pass the feature vector, not a "
                                 "record")
            return vectorize(self.features, x)[0]
        return checked_vector(x, self.dim)

    @property
    def feature_names(self) -> tuple[str, ...] | None:
        """Each coordinate's name under the feature spec (``age``, ``plan=pro``, ``city#3``), or
        None."""
        return None if self.features is None else self.features.names

    def to_dict(self) -> dict[str, Any]:
        """The release record as received, plus ``trigger``."""
        return {**self.record, "trigger": self.trigger}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def parse_release(value: bytes | str | None, key: bytes | str | None = None,
                  trigger: str | None = None) -> ModelRelease:
    """Validate one record of the parameter topic; raise :class:`InvalidRelease` if it is
    unusable.

    Checks what a consumer needs (schemas/release.schema.json): a JSON object with every required
    field, ``schema_version`` 1, integer counters >= 0, a known ``loss``, ``dim`` >= 1,
    ``weights`` of exactly ``dim`` finite numbers (softmax: ``classes``, K >= 2 distinct labels,
    all strings or all integers, and K x ``dim`` weights; ``classes`` on another loss is
    invalid), a ``privacy`` object of numbers, and, when the key is given, key ==
    ``"{topic}/{partition}"``. Unknown extra fields are accepted (and ignored).

    >>> import orjson
    >>> rec = {"schema_version": 1, "model": "m", "topic": "in", "partition": 0, "version": 3,
    ...        "offset": 3, "t": 3, "deletions": 0, "epoch": 0, "algorithm": "passive",
    ...        "loss": "ridge", "dim": 2, "weights": [0.5, -1.0],
    ...        "privacy": {"eps_rdp_slope": 0.0, "budget_used": 0.0, "epsilon": 0.0, "delta": 1e-5},
    ...        "released_at": 0.0}
    >>> parse_release(orjson.dumps(rec), b"in/0").predict([2.0, 1.0])
    0.0
    >>> try:
    ...     parse_release(orjson.dumps({**rec, "dim": 3}))
    ... except InvalidRelease as exc:
    ...     print(exc.reason, "-", exc)
    wrong_dimension - weights has 2 entries, dim is 3
    """
    if value is None:
        raise InvalidRelease("empty", "record has no value (tombstone)")
    raw = value.encode() if isinstance(value, str) else bytes(value)
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRelease("not_json", f"value is not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise InvalidRelease("not_object",
                             f"value is a JSON {type(record).__name__}, not an object")
    missing = [name for name in _REQUIRED if name not in record]
    if missing:
        raise InvalidRelease("missing_field", "missing field(s): " + ", ".join(missing))
    if record["schema_version"] != SCHEMA_VERSION:
        raise InvalidRelease("schema_version",
                             f"schema_version {record['schema_version']!r} is not supported (this "
                             f"client reads {SCHEMA_VERSION})")
    for name in ("model", "topic", "algorithm", "loss"):
        if not isinstance(record[name], str) or not record[name]:
            raise InvalidRelease("bad_field", f"{name} must be a non-empty string")
    for name in _INT_FIELDS:
        if not _is_int(record[name]) or record[name] < 0:
            raise InvalidRelease("bad_field",
                                 f"{name} must be an integer >= 0, got {record[name]!r}")
    if record["loss"] not in LOSSES:
        raise InvalidRelease("unknown_loss", f"loss {record['loss']!r} is not one of "
                                             f"{', '.join(sorted(LOSSES))}")
    dim = record["dim"]
    if not _is_int(dim) or not 1 <= dim <= _MAX_DIM:
        raise InvalidRelease("bad_field",
                             f"dim must be an integer in [1, {_MAX_DIM}], got {dim!r}")
    classes = _classes(record["loss"], record.get("classes"))
    weights = record["weights"]
    if not isinstance(weights, list):
        raise InvalidRelease("bad_weights", "weights must be an array of numbers")
    if classes is None and len(weights) != dim:
        raise InvalidRelease("wrong_dimension", f"weights has {len(weights)} entries, dim is {dim}")
    if classes is not None and len(weights) != len(classes) * dim:
        raise InvalidRelease("wrong_dimension",
                             f"weights has {len(weights)} entries, {len(classes)} classes x dim "
                             f"{dim} is {len(classes) * dim}")
    if not all(_is_number(w) for w in weights):
        raise InvalidRelease("non_finite", "weights must all be finite numbers")
    privacy = record["privacy"]
    if not isinstance(privacy, dict):
        raise InvalidRelease("bad_field", "privacy must be an object")
    for name in _PRIVACY_NUMBERS:
        if not _is_number(privacy.get(name)):
            raise InvalidRelease("bad_field", f"privacy.{name} must be a finite number")
    if not _is_number(record["released_at"]):
        raise InvalidRelease("bad_field", "released_at must be a finite number")
    request = record.get("request")
    if request is not None and not _is_request(request):
        raise InvalidRelease("bad_field", "request must be an object of ids, applied, duplicates "
                                          "(integers >= 0) and not_applied (an array of strings)")
    if key is not None:
        text = decode_key(key)
        expected = release_key_text(record["topic"], record["partition"])
        if text != expected:
            raise InvalidRelease("key_mismatch", f"key {text!r} differs from {expected!r}")
    generation = record.get("generation")
    if generation is not None and not (_is_int(generation) and generation >= 0):
        raise InvalidRelease("bad_field",
                             f"generation must be an integer >= 0, got {generation!r}")
    features = _feature_spec(record.get("features"), dim)
    return ModelRelease(
        generation=generation, features=features, classes=classes,
        model=record["model"], topic=record["topic"], partition=record["partition"],
        version=record["version"], offset=record["offset"], t=record["t"],
        deletions=record["deletions"], epoch=record["epoch"], algorithm=record["algorithm"],
        loss=record["loss"], dim=dim, weights=np.asarray(weights, dtype=np.float64),
        privacy=dict(privacy), released_at=float(record["released_at"]), trigger=trigger,
        request=request, record=record, raw=raw,
    )


def _classes(loss: str, classes: Any) -> tuple | None:
    """A softmax release's class labels (schemas/release.schema.json ``classes``), else None."""
    if loss not in MULTICLASS_LOSSES:
        if classes is not None:
            raise InvalidRelease("bad_classes", f"classes is for loss softmax, the loss is {loss}")
        return None
    if not isinstance(classes, list) or len(classes) < 2:
        raise InvalidRelease("bad_classes",
                             "loss softmax needs classes: an array of at least 2 labels")
    if not (all(isinstance(c, str) and c for c in classes) or all(_is_int(c) for c in classes)):
        raise InvalidRelease("bad_classes", "classes must be all non-empty strings or all integers")
    if len(set(classes)) != len(classes):
        raise InvalidRelease("bad_classes", "classes must be distinct")
    return tuple(classes)


@functools.lru_cache(maxsize=64)
def _spec_of(text: str) -> FeatureSpec:
    return parse_spec(orjson.loads(text))


def _feature_spec(value: Any, dim: int) -> FeatureSpec | None:
    """The release's feature spec (parsed once per spec), checked against its digest and
    ``dim``."""
    if value is None:
        return None
    if not (isinstance(value, dict) and isinstance(value.get("spec"), str)
            and isinstance(value.get("digest"), str)):
        raise InvalidRelease("bad_field", "features must be an object of digest and spec (strings)")
    text = value["spec"]
    if "sha256:" + hashlib.sha256(text.encode()).hexdigest() != value["digest"]:
        raise InvalidRelease("bad_field", "features.digest is not the SHA-256 of features.spec")
    try:
        spec = _spec_of(text)
    except (FeatureSpecError, orjson.JSONDecodeError) as exc:
        raise InvalidRelease("bad_field",
                             f"features.spec is not a feature spec: {str(exc)[:200]}") from None
    if spec.dim != dim:
        raise InvalidRelease("wrong_dimension",
                             f"the feature spec makes {spec.dim} coordinates, dim is {dim}")
    return spec


def _is_request(request: Any) -> bool:
    return (isinstance(request, dict) and all(_is_int(request.get(n)) and request[n] >= 0
                                              for n in ("ids", "applied", "duplicates"))
            and isinstance(request.get("not_applied"), list)
            and all(isinstance(i, str) for i in request["not_applied"]))


def _header(headers, name: str) -> str | None:
    for key, value in headers or ():
        if key == name and value is not None:
            if isinstance(value, (bytes, bytearray)):
                return value.decode("utf-8", "replace")
            return str(value)
    return None


def parse_message(msg, reader=None) -> ModelRelease:
    """A consumed message of the parameter topic as a release: a JSON value, or one framed by a
    Schema Registry, decoded by ``reader`` (a ``worker.formats.release.ReleaseReader``) and then
    checked like a JSON one (``raw`` keeps the bytes as received)."""
    value, trigger = msg.value(), _header(msg.headers(), TRIGGER_HEADER)
    if not value or value[0] != 0:  # JSON (or not a release at all)
        return parse_release(value, msg.key(), trigger)
    if reader is None:
        raise InvalidRelease("needs_registry",
                             "the value is Schema Registry framed (magic byte 0): give the "
                             "subscriber schema_registry= (follow: --schema-registry-url)")
    try:
        decoded = reader.read(msg.topic(), value)
    except Exception as exc:  # unknown schema, registry down, a payload that does not decode
        raise InvalidRelease("undecodable", f"framed release not decoded: {type(exc).__name__}: "
                                            f"{str(exc)[:200]}") from None
    return replace(parse_release(decoded, msg.key(), trigger), raw=bytes(value))
