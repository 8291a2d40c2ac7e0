"""Subscribe to released parameters: the latest model of every input partition, ready to predict.

The worker publishes a release on the parameter topic (default ``olu.params``) each time a
partition's model changes in a way worth publishing (schemas/release.schema.json). Releases are
at-least-once with identical duplicates, and ``version`` is strictly increasing per
``(topic, partition)``, so a subscriber keeps, per input partition, the release with the highest
version and ignores the rest::

    from worker.client import ParamsSubscriber

    with ParamsSubscriber("broker:9092") as sub:
        sub.run_until(caught_up=True, timeout=30)  # everything published so far
        sub.predict([0.1, 0.2, 0.3])               # average of all partitions' models
        sub.predict_proba([0.1, 0.2, 0.3])         # softmax: {class label: probability}
        sub.predict([0.1, 0.2, 0.3], partition=0)  # one partition's model
        while True:
            for release in sub.poll(1.0):          # new versions as they come
                print(release.topic, release.partition, release.version)

A softmax release carries its K labels in ``classes`` and its K x dim weight matrix row by row
(row k = class ``classes[k]``): ``predict`` gives the most probable label, ``predict_proba`` all.

Every record is checked before it is used (required fields, types, ``len(weights) == dim`` or, for
softmax, K x dim with valid ``classes``, finite numbers, key ``"{topic}/{partition}"``): a record
that fails is counted in :attr:`ParamsSubscriber.stats`, handed to ``on_invalid`` and skipped. These checks are written
out here rather than loaded from the JSON Schema, so the client needs no jsonschema at run time.

A subscriber commits nothing, so it reads the parameter topic from the beginning every time it
is assigned a partition (``auto.offset.reset=earliest``) and rebuilds its state from the topic.
With ``group_id=None`` (the default) each subscriber has a group of its own and sees every
partition. Subscribers that share a ``group_id`` split the parameter topic's partitions between
them (use a group nothing else commits offsets for).

Releases in a Schema Registry format (the worker's ``OLU_RELEASE_FORMAT`` avro or json-schema)
are read when ``schema_registry`` is given (its URL, or a ``SchemaRegistryClient`` configuration
dict): each framed value is decoded with its registered schema and then checked like a JSON one;
``raw`` keeps the bytes as received. JSON and framed releases may be mixed on one topic. Without
``schema_registry`` a framed release is reported invalid (``needs_registry``).

Use ``isolation="read_committed"`` (the default) when the worker runs with ``transactional``:
``read_uncommitted`` would also show releases of aborted transactions.
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from .exceptions import InvalidRelease
from .features.exceptions import FeatureSpecError
from .features.spec import FeatureSpec, parse_spec
from .features.transform import vectorize
from .wire import PARAMS_TOPIC as DEFAULT_TOPIC
from .wire import RELEASE_SCHEMA_VERSION as SCHEMA_VERSION
from .wire import TRIGGER_HEADER, decode_key, release_key_text

__all__ = ["InvalidRelease", "ModelRelease", "ParamsSubscriber", "parse_release", "sigmoid", "softmax"]

LOGISTIC_LOSSES = frozenset({"logistic", "logistic-unregularised"})
LINEAR_LOSSES = frozenset({"ridge"})
MULTICLASS_LOSSES = frozenset({"softmax"})  # K classes, K x dim weights (row k = classes[k])
LOSSES = LOGISTIC_LOSSES | LINEAR_LOSSES | MULTICLASS_LOSSES
_INT_FIELDS = ("partition", "version", "offset", "t", "deletions", "epoch")
_REQUIRED = ("schema_version", "model", "topic", "partition", "version", "offset", "t", "deletions", "epoch",
             "algorithm", "loss", "dim", "weights", "privacy", "released_at")
_PRIVACY_NUMBERS = ("eps_rdp_slope", "budget_used", "epsilon", "delta")
_MAX_DIM = 65536
#: Consumer settings the subscriber relies on; extra_config cannot change them.
_FIXED = {"enable.auto.commit": False, "enable.partition.eof": True}


@dataclass(frozen=True, eq=False)
class ModelRelease:
    """One validated release: the model of input partition ``(topic, partition)`` at ``version``.

    Releases compare by identity; ``raw`` (the value bytes) identifies the content: a duplicate of
    a release is byte-identical to it.
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
    classes: tuple[str, ...] | tuple[int, ...] | None = None  # softmax: the K labels, in class order
    record: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the value as received
    raw: bytes = field(default=b"", repr=False)

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def predict(self, x: Sequence[float] | Mapping[str, Any]) -> float | str | int:
        """This release's prediction for ``x`` (probability for logistic losses, w.x for ridge, the
        most probable class label for softmax): a vector, or a raw record (a dict of named fields)
        under the release's feature spec."""
        return _predict(self.loss, self.weights, self.vector(x), self.classes)

    def predict_proba(self, x: Sequence[float] | Mapping[str, Any]) -> dict[str | int, float]:
        """Softmax only: ``{class label: probability}`` for ``x``, in class order."""
        return _proba(self.weights, self.vector(x), self.classes)

    def vector(self, x: Sequence[float] | Mapping[str, Any]) -> np.ndarray:
        """The model's vector of ``x``: a raw record through the feature spec, bit for bit as the
        worker computed it (worker/features/transform.py), or a vector as it is."""
        if isinstance(x, Mapping):
            if self.features is None:
                raise ValueError("this release has no feature spec: pass the feature vector, not a record")
            return vectorize(self.features, x)[0]
        return _features(x, self.dim)

    @property
    def feature_names(self) -> tuple[str, ...] | None:
        """Each coordinate's name under the feature spec (``age``, ``plan=pro``, ``city#3``), or None."""
        return None if self.features is None else self.features.names

    def to_dict(self) -> dict[str, Any]:
        """The release record as received, plus ``trigger``."""
        return {**self.record, "trigger": self.trigger}


def sigmoid(z: float) -> float:
    """Numerically stable logistic function."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def softmax(margins: np.ndarray) -> np.ndarray:
    """Numerically stable softmax: exp(m - max m), normalised (no overflow for any finite margin)."""
    e = np.exp(margins - np.max(margins))
    return e / e.sum()


def _probabilities(weights: np.ndarray, x: np.ndarray, classes: tuple) -> np.ndarray:
    return softmax(weights.reshape(len(classes), -1) @ x)  # row k of the K x dim matrix: class k


def _proba(weights: np.ndarray, x: np.ndarray, classes: tuple | None) -> dict[str | int, float]:
    if classes is None:
        raise ValueError("predict_proba is for softmax releases; predict gives a logistic model's probability")
    return dict(zip(classes, _probabilities(weights, x, classes).tolist(), strict=True))


def _predict(loss: str, weights: np.ndarray, x: np.ndarray, classes: tuple | None = None) -> float | str | int:
    if classes is not None:  # the label of the largest probability, the first one on ties
        return classes[int(np.argmax(_probabilities(weights, x, classes)))]
    z = float(np.dot(weights, x))
    return sigmoid(z) if loss in LOGISTIC_LOSSES else z


def _features(x: Sequence[float], dim: int) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1 or arr.shape[0] != dim:
        raise ValueError(f"x must have {dim} features (the model's dim), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("x must be finite")
    return arr


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_release(value: bytes | str | None, key: bytes | str | None = None,
                  trigger: str | None = None) -> ModelRelease:
    """Validate one record of the parameter topic; raise :class:`InvalidRelease` if it is unusable.

    Checks what a consumer needs (schemas/release.schema.json): a JSON object with every required
    field, ``schema_version`` 1, integer counters >= 0, a known ``loss``, ``dim`` >= 1, ``weights``
    of exactly ``dim`` finite numbers (softmax: ``classes``, K >= 2 distinct labels, all strings or
    all integers, and K x ``dim`` weights; ``classes`` on another loss is invalid), a ``privacy``
    object of numbers, and, when the key is
    given, key == ``"{topic}/{partition}"``. Unknown extra fields are accepted (and ignored).

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
        raise InvalidRelease("not_object", f"value is a JSON {type(record).__name__}, not an object")
    missing = [name for name in _REQUIRED if name not in record]
    if missing:
        raise InvalidRelease("missing_field", "missing field(s): " + ", ".join(missing))
    if record["schema_version"] != SCHEMA_VERSION:
        raise InvalidRelease("schema_version", f"schema_version {record['schema_version']!r} is not supported "
                                               f"(this client reads {SCHEMA_VERSION})")
    for name in ("model", "topic", "algorithm", "loss"):
        if not isinstance(record[name], str) or not record[name]:
            raise InvalidRelease("bad_field", f"{name} must be a non-empty string")
    for name in _INT_FIELDS:
        if not _is_int(record[name]) or record[name] < 0:
            raise InvalidRelease("bad_field", f"{name} must be an integer >= 0, got {record[name]!r}")
    if record["loss"] not in LOSSES:
        raise InvalidRelease("unknown_loss", f"loss {record['loss']!r} is not one of {', '.join(sorted(LOSSES))}")
    dim = record["dim"]
    if not _is_int(dim) or not 1 <= dim <= _MAX_DIM:
        raise InvalidRelease("bad_field", f"dim must be an integer in [1, {_MAX_DIM}], got {dim!r}")
    classes = _classes(record["loss"], record.get("classes"))
    weights = record["weights"]
    if not isinstance(weights, list):
        raise InvalidRelease("bad_weights", "weights must be an array of numbers")
    if classes is None and len(weights) != dim:
        raise InvalidRelease("wrong_dimension", f"weights has {len(weights)} entries, dim is {dim}")
    if classes is not None and len(weights) != len(classes) * dim:
        raise InvalidRelease("wrong_dimension", f"weights has {len(weights)} entries, {len(classes)} classes x "
                                                f"dim {dim} is {len(classes) * dim}")
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
        raise InvalidRelease("bad_field", "request must be an object of ids, applied, duplicates (integers >= 0) "
                                          "and not_applied (an array of strings)")
    if key is not None:
        text = decode_key(key)
        expected = release_key_text(record["topic"], record["partition"])
        if text != expected:
            raise InvalidRelease("key_mismatch", f"key {text!r} differs from {expected!r}")
    generation = record.get("generation")
    if generation is not None and not (_is_int(generation) and generation >= 0):
        raise InvalidRelease("bad_field", f"generation must be an integer >= 0, got {generation!r}")
    features = _feature_spec(record.get("features"), dim)
    return ModelRelease(
        generation=generation, features=features, classes=classes,
        model=record["model"], topic=record["topic"], partition=record["partition"], version=record["version"],
        offset=record["offset"], t=record["t"], deletions=record["deletions"], epoch=record["epoch"],
        algorithm=record["algorithm"], loss=record["loss"], dim=dim,
        weights=np.asarray(weights, dtype=np.float64), privacy=dict(privacy),
        released_at=float(record["released_at"]), trigger=trigger, request=request, record=record, raw=raw,
    )


def _classes(loss: str, classes: Any) -> tuple | None:
    """A softmax release's class labels (schemas/release.schema.json ``classes``), else None."""
    if loss not in MULTICLASS_LOSSES:
        if classes is not None:
            raise InvalidRelease("bad_classes", f"classes is for loss softmax, the loss is {loss}")
        return None
    if not isinstance(classes, list) or len(classes) < 2:
        raise InvalidRelease("bad_classes", "loss softmax needs classes: an array of at least 2 labels")
    if not (all(isinstance(c, str) and c for c in classes) or all(_is_int(c) for c in classes)):
        raise InvalidRelease("bad_classes", "classes must be all non-empty strings or all integers")
    if len(set(classes)) != len(classes):
        raise InvalidRelease("bad_classes", "classes must be distinct")
    return tuple(classes)


@functools.lru_cache(maxsize=64)
def _spec_of(text: str) -> FeatureSpec:
    return parse_spec(orjson.loads(text))


def _feature_spec(value: Any, dim: int) -> FeatureSpec | None:
    """The release's feature spec (parsed once per spec), checked against its digest and ``dim``."""
    if value is None:
        return None
    if not (isinstance(value, dict) and isinstance(value.get("spec"), str) and isinstance(value.get("digest"), str)):
        raise InvalidRelease("bad_field", "features must be an object of digest and spec (strings)")
    text = value["spec"]
    if "sha256:" + hashlib.sha256(text.encode()).hexdigest() != value["digest"]:
        raise InvalidRelease("bad_field", "features.digest is not the SHA-256 of features.spec")
    try:
        spec = _spec_of(text)
    except (FeatureSpecError, orjson.JSONDecodeError) as exc:
        raise InvalidRelease("bad_field", f"features.spec is not a feature spec: {str(exc)[:200]}") from None
    if spec.dim != dim:
        raise InvalidRelease("wrong_dimension", f"the feature spec makes {spec.dim} coordinates, dim is {dim}")
    return spec


def _is_request(request: Any) -> bool:
    return (isinstance(request, dict) and all(_is_int(request.get(n)) and request[n] >= 0
                                              for n in ("ids", "applied", "duplicates"))
            and isinstance(request.get("not_applied"), list)
            and all(isinstance(i, str) for i in request["not_applied"]))


def _header(headers, name: str) -> str | None:
    for key, value in headers or ():
        if key == name and value is not None:
            return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)
    return None


class ParamsSubscriber:
    """Follow the parameter topic and keep the latest release of every input partition.

    ``extra_config`` is passed to the confluent-kafka consumer (SASL, TLS, ...); it cannot turn
    on auto-commit or turn off partition EOF events, which the subscriber relies on.
    ``on_invalid(error, message)`` is called for each record that fails validation,
    ``on_error(kafka_error)`` for non-fatal consumer errors. ``model``, if given, keeps only
    the releases of that model name (several models can share one parameter topic).

    Not thread-safe for polling; :meth:`models`, :meth:`latest` and :meth:`predict` may be
    called from other threads while one thread polls.
    """

    def __init__(self, bootstrap_servers: str, topic: str = DEFAULT_TOPIC, group_id: str | None = None,
                 isolation: str = "read_committed", extra_config: Mapping[str, Any] | None = None, *,
                 model: str | None = None,
                 on_invalid: Callable[[InvalidRelease, Any], None] | None = None,
                 on_error: Callable[[Any], None] | None = None,
                 schema_registry: str | Mapping[str, Any] | None = None):
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"isolation must be read_committed or read_uncommitted, got {isolation!r}")
        self.topic = topic
        self.model_name = model
        self.group_id = group_id or f"olu-params-subscriber-{uuid.uuid4().hex}"
        self.on_invalid = on_invalid
        self.on_error = on_error
        self.stats: dict[str, int] = {"received": 0, "accepted": 0, "duplicates": 0, "stale": 0,
                                      "conflicts": 0, "invalid": 0, "other_model": 0, "errors": 0}
        self._lock = threading.Lock()
        self._latest: dict[tuple[str, int], ModelRelease] = {}
        self._assigned: set[int] = set()
        self._eof: set[int] = set()  # assigned partitions that reached their end at least once
        self._closed = False
        self._reader = None
        if schema_registry is not None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            from .formats.release import ReleaseReader

            sr_conf = {"url": schema_registry} if isinstance(schema_registry, str) else dict(schema_registry)
            self._reader = ReleaseReader(SchemaRegistryClient(sr_conf))
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "group.id": self.group_id,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "client.id": "olu-params-subscriber",
            **dict(extra_config or {}),
            **_FIXED,
        }
        from confluent_kafka import Consumer

        self._consumer = Consumer(conf)
        self._consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_revoke)

    # ------------------------------------------------------------------ rebalance callbacks
    # Nothing is ever committed, so an assigned partition starts at auto.offset.reset=earliest:
    # the whole topic is read again and the held state rebuilt (duplicates are ignored). The
    # callbacks only track which partitions are assigned; confluent-kafka does the assignment.
    def _on_assign(self, consumer, partitions) -> None:
        for tp in partitions:
            self._assigned.add(tp.partition)
            self._eof.discard(tp.partition)

    def _on_revoke(self, consumer, partitions) -> None:
        for tp in partitions:
            self._assigned.discard(tp.partition)
            self._eof.discard(tp.partition)

    # ------------------------------------------------------------------ consuming
    def poll(self, timeout: float = 1.0, max_messages: int = 500) -> list[ModelRelease]:
        """Consume what is available (waiting up to ``timeout`` s); return the new versions accepted."""
        from confluent_kafka import KafkaError, KafkaException

        if self._closed:
            raise RuntimeError("the subscriber is closed")
        accepted: list[ModelRelease] = []
        for msg in self._consumer.consume(num_messages=max_messages, timeout=timeout):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if msg.partition() in self._assigned:
                        self._eof.add(msg.partition())
                    continue
                if err.fatal():
                    raise KafkaException(err)
                self.stats["errors"] += 1
                if self.on_error is not None:
                    self.on_error(err)
                continue
            release = self._handle(msg)
            if release is not None:
                accepted.append(release)
        return accepted

    def _handle(self, msg) -> ModelRelease | None:
        self.stats["received"] += 1
        try:
            release = self._parse(msg)
        except InvalidRelease as exc:
            self.stats["invalid"] += 1
            if self.on_invalid is not None:
                self.on_invalid(exc, msg)
            return None
        if self.model_name is not None and release.model != self.model_name:
            self.stats["other_model"] += 1
            return None
        with self._lock:
            held = self._latest.get(release.key)
            if held is not None and release.version <= held.version:
                if release.version < held.version:
                    self.stats["stale"] += 1
                elif release.raw == held.raw:
                    self.stats["duplicates"] += 1
                else:  # same version, different value: never expected (a replay is byte-identical)
                    self.stats["conflicts"] += 1
                    if self.on_invalid is not None:
                        self.on_invalid(InvalidRelease(
                            "conflicting_duplicate",
                            f"{release.topic}/{release.partition} version {release.version} was received "
                            "before with a different value; the first one is kept"), msg)
                return None
            self._latest[release.key] = release
        self.stats["accepted"] += 1
        return release

    def _parse(self, msg) -> ModelRelease:
        value, trigger = msg.value(), _header(msg.headers(), TRIGGER_HEADER)
        if not value or value[0] != 0:  # JSON (or not a release at all)
            return parse_release(value, msg.key(), trigger)
        if self._reader is None:
            raise InvalidRelease("needs_registry", "the value is Schema Registry framed (magic byte 0): give the "
                                                   "subscriber schema_registry= (follow: --schema-registry-url)")
        try:
            decoded = self._reader.read(msg.topic(), value)
        except Exception as exc:  # unknown schema, registry down, a payload that does not decode
            raise InvalidRelease("undecodable", f"framed release not decoded: {type(exc).__name__}: "
                                                f"{str(exc)[:200]}") from None
        return replace(parse_release(decoded, msg.key(), trigger), raw=bytes(value))

    @property
    def caught_up(self) -> bool:
        """Whether every assigned partition of the parameter topic was read to its end at least once."""
        return bool(self._assigned) and self._assigned <= self._eof

    def run_until(self, condition: Callable[[ParamsSubscriber], bool] | None = None, *,
                  timeout: float | None = None, caught_up: bool = False,
                  on_update: Callable[[ModelRelease], None] | None = None, poll_timeout: float = 0.2) -> bool:
        """Poll until ``condition(self)`` holds (or, with ``caught_up=True``, until :attr:`caught_up`).

        Returns True when it held, False when ``timeout`` seconds passed first. ``on_update`` is
        called with each accepted release. With neither a condition nor ``caught_up`` it polls
        until the timeout (and then returns True).
        """
        deadline = None if timeout is None else time.monotonic() + timeout

        def done() -> bool:
            if caught_up and not self.caught_up:
                return False
            if condition is not None and not condition(self):
                return False
            return caught_up or condition is not None

        while True:
            if done():
                return True
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return condition is None and not caught_up
            wait = poll_timeout if remaining is None else max(0.0, min(poll_timeout, remaining))
            for release in self.poll(wait):
                if on_update is not None:
                    on_update(release)

    # ------------------------------------------------------------------ the models
    def models(self) -> dict[tuple[str, int], ModelRelease]:
        """The latest release of every input partition seen, keyed by ``(topic, partition)``."""
        with self._lock:
            return dict(sorted(self._latest.items()))

    def latest(self, topic: str, partition: int) -> ModelRelease | None:
        """The latest release of input partition ``(topic, partition)``, or None."""
        with self._lock:
            return self._latest.get((topic, int(partition)))

    def weights(self, partition: int | None = None, *, topic: str | None = None) -> tuple[ModelRelease, np.ndarray]:
        """The releases :meth:`predict` would use and their (averaged) weights.

        Returns ``(a representative release, weights)``; see :meth:`predict` for the selection.
        """
        chosen = self._select(partition, topic)
        if len(chosen) == 1:
            return chosen[0], chosen[0].weights
        return chosen[0], np.mean(np.stack([r.weights for r in chosen]), axis=0)

    def predict(self, x: Sequence[float] | Mapping[str, Any], partition: int | None = None, *,
                topic: str | None = None) -> float | str | int:
        """Prediction for ``x``: the probability of the positive class (sigmoid of w.x) for the
        logistic losses, w.x for ridge, the most probable class label for softmax (the first on
        ties; :meth:`predict_proba`). ``x`` is the feature vector, or a raw record (a dict of named
        fields) when the releases carry a feature spec: it is turned into the vector as the worker
        did (worker/features/transform.py).

        ``partition`` picks one input partition's model; ``None`` averages the weights of every
        partition's model of the same model and input topic (a softmax: their K x dim matrices,
        then the softmax of the averaged one). ``topic`` (the input topic) is needed only when
        releases of several input topics or models are held.
        """
        release, weights = self.weights(partition, topic=topic)
        return _predict(release.loss, weights, release.vector(x), release.classes)

    def predict_proba(self, x: Sequence[float] | Mapping[str, Any], partition: int | None = None, *,
                      topic: str | None = None) -> dict[str | int, float]:
        """Softmax releases only: ``{class label: probability}`` for ``x`` (the softmax of the
        margins of the averaged weight matrix, or one partition's), chosen as :meth:`predict` does."""
        release, weights = self.weights(partition, topic=topic)
        return _proba(weights, release.vector(x), release.classes)

    def _select(self, partition: int | None, topic: str | None) -> list[ModelRelease]:
        with self._lock:
            releases = [r for r in self._latest.values() if topic is None or r.topic == topic]
        if partition is not None:
            releases = [r for r in releases if r.partition == int(partition)]
        if not releases:
            where = f"topic {topic!r}" if topic is not None else "any topic"
            raise LookupError(f"no release held for partition {partition} of {where}" if partition is not None
                              else f"no release held for {where}")
        groups = {(r.model, r.topic) for r in releases}
        if len(groups) > 1:
            names = ", ".join(f"{m} on {t}" for m, t in sorted(groups))
            raise ValueError(f"releases of several models are held ({names}): pass topic= (and a model "
                             "name to the subscriber) to choose one")
        shapes = {(r.dim, r.loss in LOGISTIC_LOSSES, r.classes, r.features.digest if r.features else None)
                  for r in releases}
        if len(shapes) > 1:
            raise ValueError("the partitions' models differ in dim, loss, classes or feature spec; predict with "
                             "partition=")
        return sorted(releases, key=lambda r: r.partition)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._consumer.close()

    def __enter__(self) -> ParamsSubscriber:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ParamsSubscriber(topic={self.topic!r}, group_id={self.group_id!r}, "
                f"partitions={len(self._latest)}, stats={self.stats})")

