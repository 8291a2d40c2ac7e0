"""Following the parameter topic: a consumer that reads it from the beginning, keeps the release
with the highest version of every input partition, and predicts with the releases it holds."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..exceptions import InvalidRelease
from ..wire import PARAMS_TOPIC as DEFAULT_TOPIC
from .predict import LOGISTIC_LOSSES, class_probabilities, prediction
from .release import ModelRelease, parse_message

#: Consumer settings the subscriber relies on; extra_config cannot change them.
_FIXED = {"enable.auto.commit": False, "enable.partition.eof": True}


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

    def __init__(self, bootstrap_servers: str, topic: str = DEFAULT_TOPIC,
                 group_id: str | None = None, isolation: str = "read_committed",
                 extra_config: Mapping[str, Any] | None = None, *,
                 model: str | None = None,
                 on_invalid: Callable[[InvalidRelease, Any], None] | None = None,
                 on_error: Callable[[Any], None] | None = None,
                 schema_registry: str | Mapping[str, Any] | None = None):
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"isolation must be read_committed or read_uncommitted, got "
                             f"{isolation!r}")
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

            from ..formats.release import ReleaseReader

            sr_conf = ({"url": schema_registry} if isinstance(schema_registry, str)
                       else dict(schema_registry))
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
        """Consume what is available (waiting up to ``timeout`` s); return the new versions
        accepted."""
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
            release = parse_message(msg, self._reader)
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
                            f"{release.topic}/{release.partition} version {release.version} was "
                            "received before with a different value; the first one is kept"),
                            msg)
                return None
            self._latest[release.key] = release
        self.stats["accepted"] += 1
        return release

    @property
    def caught_up(self) -> bool:
        """Whether every assigned partition of the parameter topic was read to its end at least
        once."""
        return bool(self._assigned) and self._assigned <= self._eof

    def run_until(self, condition: Callable[[ParamsSubscriber], bool] | None = None, *,
                  timeout: float | None = None, caught_up: bool = False,
                  on_update: Callable[[ModelRelease], None] | None = None,
                  poll_timeout: float = 0.2) -> bool:
        """Poll until ``condition(self)`` holds (or, with ``caught_up=True``, until
        :attr:`caught_up`).

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

    def weights(self, partition: int | None = None, *,
                topic: str | None = None) -> tuple[ModelRelease, np.ndarray]:
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
        ties; :meth:`predict_proba`). ``x`` is the feature vector, or a raw record (a dict of
        named fields) when the releases carry a feature spec: it is turned into the vector as the
        worker did (worker/features/transform.py).

        ``partition`` picks one input partition's model; ``None`` averages the weights of every
        partition's model of the same model and input topic (a softmax: their K x dim matrices,
        then the softmax of the averaged one). ``topic`` (the input topic) is needed only when
        releases of several input topics or models are held.
        """
        release, weights = self.weights(partition, topic=topic)
        return prediction(release.loss, weights, release.vector(x), release.classes)

    def predict_proba(self, x: Sequence[float] | Mapping[str, Any], partition: int | None = None, *,
                      topic: str | None = None) -> dict[str | int, float]:
        """Softmax releases only: ``{class label: probability}`` for ``x`` (the softmax of the
        margins of the averaged weight matrix, or one partition's), chosen as :meth:`predict`
        does."""
        release, weights = self.weights(partition, topic=topic)
        return class_probabilities(weights, release.vector(x), release.classes)

    def _select(self, partition: int | None, topic: str | None) -> list[ModelRelease]:
        with self._lock:
            releases = [r for r in self._latest.values() if topic is None or r.topic == topic]
        if partition is not None:
            releases = [r for r in releases if r.partition == int(partition)]
        if not releases:
            where = f"topic {topic!r}" if topic is not None else "any topic"
            raise LookupError(f"no release held for partition {partition} of {where}"
                              if partition is not None else f"no release held for {where}")
        groups = {(r.model, r.topic) for r in releases}
        if len(groups) > 1:
            names = ", ".join(f"{m} on {t}" for m, t in sorted(groups))
            raise ValueError(f"releases of several models are held ({names}): pass topic= (and a "
                             "model name to the subscriber) to choose one")
        shapes = {(r.dim, r.loss in LOGISTIC_LOSSES, r.classes,
                   r.features.digest if r.features else None) for r in releases}
        if len(shapes) > 1:
            raise ValueError("the partitions' models differ in dim, loss, classes or feature spec; "
                             "predict with partition=")
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

