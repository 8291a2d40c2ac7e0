"""The effective configuration: one typed, frozen field per setting, and what derives from it.

The field defaults below are the settings' defaults, written nowhere else: the option table
(:mod:`worker.config.options`) reads them from here for ``--help`` and docs/configuration.md.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from ..wire import PARAMS_TOPIC, RECEIPTS_TOPIC
from . import model
from .kafka import (
    CONSUMER_ONLY_KEYS,
    DEAD_LETTER_HEADROOM_BYTES,
    DEFAULT_FETCH_QUEUE_BACKOFF_MS,
    DEFAULT_MAX_POLL_INTERVAL_MS,
    DEFAULT_STATISTICS_INTERVAL_MS,
    LIBRDKAFKA_FETCH_MAX_BYTES,
    LIBRDKAFKA_MESSAGE_MAX_BYTES_LIMIT,
    LIBRDKAFKA_RECEIVE_MAX_BYTES,
    PRODUCER_BATCH_BYTES,
    PRODUCER_ONLY_KEYS,
    REDACTED,
    expulsion_ms,
    is_secret_key,
    release_timeout_ms,
)

#: Fields that are not options: the pass-through (``--kafka``, ``OLU_KAFKA_<KEY>``) and facts
#: recorded for the start-up log line.
#: OLU_DELETION_RELEASES: one release per poll batch of deletions, or one per deletion request
DELETION_RELEASES = ("batch", "each")
NOT_OPTIONS = ("kafka_overrides", "storage_credentials_present", "origins", "feature_spec")


@dataclass(frozen=True, repr=False)
class Settings:
    """The effective configuration. Build it with
    :func:`~worker.config.load_settings` (which validates)."""

    # Kafka
    bootstrap_servers: str | None = None
    group_id: str = "olu-worker"
    input_topics: tuple[str, ...] = ("olu.events",)
    params_topic: str = PARAMS_TOPIC
    dlq_topic: str = "olu.events.dlq"
    receipts_topic: str = RECEIPTS_TOPIC
    transactional: bool = False
    transactional_id: str | None = None  # None: f"{group_id}-{hostname}"
    group_protocol: str = "classic"
    kafka_overrides: tuple[tuple[str, str], ...] = ()  # librdkafka pass-through, sorted by key
    # Schema Registry (worker/formats)
    input_format: str = "json"
    release_format: str = "json"
    schema_registry_url: str | None = None
    schema_registry_user_info: str | None = None  # USER:PASSWORD, a secret
    schema_registry_ca_location: str | None = None
    schema_registry_cert_location: str | None = None
    schema_registry_key_location: str | None = None
    # role -> the user's field (None: the role's name)
    input_fields: tuple[tuple[str, str], ...] | None = None
    # features as these named numeric fields, in order
    input_feature_fields: tuple[str, ...] | None = None
    # Model
    algorithm: str = "passive"
    dim: int | None = None
    features_file: str | None = None
    features_reset: bool = False
    sparse_input: bool = False
    loss: str = "logistic"
    # softmax: the K class labels, in order
    classes: tuple[str, ...] | tuple[int, ...] | None = None
    l2: float = 0.01
    label_bound: float = 1.0
    radius: float = 10.0
    feature_bound: float = 1.0
    feature_policy: str = "reject"
    schedule: str = "auto"
    t0: float | None = None
    step: float | None = None
    privacy_unit: str = "all-deletions"
    target_epsilon: float | None = 1.0  # the default target unless rho is given (epsilon at delta)
    rho: float | None = None  # given: the Renyi slope per unit, and target_epsilon is unset
    omega: float = 1.2
    delta: float = 1e-5
    budget_split: str = "weighted"
    deletion_capacity: int | None = None  # None: from expected_deletion_rate and the lifetime
    expected_deletion_rate: float | None = None
    # the plan's workload: watched, not used by the model
    planned_records_per_request: float | None = None
    planned_deletion_age_events: int | None = None
    budget_reserve: float = 0.1
    rotation: str = "off"
    rotation_variant: str = "overlap"
    model_lifetime_events: int = 400_000
    max_records_per_key: int | None = None  # None: no per-key contribution bound
    forget_by_key: bool = True  # a subject map in every new model (core/subjects.py)
    max_deletions: int | None = None
    # an algorithm's own settings: the default is the algorithm class's (written there, once)
    restart_c: float = model.engine_default("restart_c")
    order_fallback: str = model.engine_default("order_fallback")
    on_budget: str = model.engine_default("on_budget")
    lbfgs_memory: int = model.engine_default("lbfgs_memory")
    dp_horizon: int = model.engine_default("dp_horizon")
    checkpoint_every: int = model.engine_default("checkpoint_every")
    retained_rows: str = model.engine_default("retained_rows")
    retrain_every: int = model.engine_default("retrain_every")
    train_steps: int = model.engine_default("train_steps")
    noise_sigma: float = model.engine_default("noise_sigma")
    model_name: str | None = None  # None: group_id
    # Releases and state
    deletion_releases: str = "batch"  # DELETION_RELEASES
    release_every_events: int = 10_000
    release_every_seconds: float = 5.0
    snapshot_every_events: int = 100_000
    snapshot_every_seconds: float = 30.0
    snapshot_keep: int = 2
    snapshot_max_bytes_per_second: int = 32 << 20
    snapshot_upload_spread: float = 0.5
    state_url: str = "file://./olu-state"
    state_prefix: str = "olu"
    on_corrupt_snapshot: str = "fallback"
    deletion_deadline_seconds: float = 300.0  # delete to release, promised (receipts, alert)
    purge_bound_seconds: float = 60.0
    max_record_bytes: int = 1_048_576
    revoke_budget_fraction: float = 0.5
    batch_size: int = 2000
    poll_timeout: float = 0.1
    # HTTP and logging
    http_host: str = "0.0.0.0"
    http_port: int = 9464
    quality_metric: bool = True
    liveness_seconds: float = 60.0
    log_level: str = "INFO"
    log_format: str = "json"
    # Not settings: facts recorded for the start-up log line
    storage_credentials_present: bool = False
    # name -> flag|env|default
    origins: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # worker.features.spec.FeatureSpec of features_file
    feature_spec: Any = field(default=None, compare=False)

    def __post_init__(self):
        if isinstance(self.input_topics, str):
            object.__setattr__(self, "input_topics", (self.input_topics,))
        if isinstance(self.kafka_overrides, Mapping):
            object.__setattr__(self, "kafka_overrides", tuple(sorted(self.kafka_overrides.items())))
        if self.model_name is None:
            object.__setattr__(self, "model_name", self.group_id)
        if self.transactional_id is None:
            object.__setattr__(self, "transactional_id", f"{self.group_id}-{hostname(os.environ)}")

    # ------------------------------------------------------------------ derived
    @property
    def kafka(self) -> dict[str, str]:
        """The librdkafka pass-through settings."""
        return dict(self.kafka_overrides)

    @property
    def max_poll_interval_ms(self) -> int:
        raw = self.kafka.get("max.poll.interval.ms")
        return DEFAULT_MAX_POLL_INTERVAL_MS if raw is None else int(raw)

    @property
    def expulsion_seconds(self) -> float:
        """The shortest silence after which the group coordinator may expel this member."""
        return expulsion_ms(self.group_protocol, self.kafka) / 1000.0

    @property
    def revoke_budget_seconds(self) -> float:
        """Time for final snapshots and commits on revoke or
        shutdown, inside max.poll.interval.ms."""
        return self.revoke_budget_fraction * self.max_poll_interval_ms / 1000.0

    def origin(self, name: str) -> str:
        """Where a setting came from: ``flag``, ``env`` or ``default``."""
        return dict(self.origins).get(name, "default")

    # ------------------------------------------------------------------ Kafka clients
    def _passthrough(self, exclude: frozenset[str]) -> dict[str, str]:
        return {k: v for k, v in self.kafka_overrides if k not in exclude}

    def consumer_config(self) -> dict[str, Any]:
        """Consumer configuration: the worker's fixed contract merged with the pass-through."""
        conf: dict[str, Any] = {"client.id": f"{self.group_id}-consumer"}
        if self.bootstrap_servers:
            conf["bootstrap.servers"] = self.bootstrap_servers
        conf.update({
            "group.id": self.group_id,
            "group.protocol": self.group_protocol,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": False,
            # consumer lag for the metrics
            "statistics.interval.ms": DEFAULT_STATISTICS_INTERVAL_MS,
            "fetch.queue.backoff.ms": DEFAULT_FETCH_QUEUE_BACKOFF_MS,
        })
        if self.group_protocol == "classic":
            conf["partition.assignment.strategy"] = "cooperative-sticky"
        conf.update(self._passthrough(PRODUCER_ONLY_KEYS))
        return conf

    def producer_config(self) -> dict[str, Any]:
        """Producer configuration: idempotent, acks=all, transactional when configured."""
        conf: dict[str, Any] = {"client.id": f"{self.group_id}-producer"}
        if self.bootstrap_servers:
            conf["bootstrap.servers"] = self.bootstrap_servers
        # Releases and dead letters are small and rare next to the input: send them at once.
        # A batch of several records stays within batch.size, so with 64 KiB one of several dead
        # letters never makes a batch the dead-letter topic refuses where each alone would pass (a
        # record larger than that is sent alone); releases are far smaller.
        conf.update({"enable.idempotence": True, "acks": "all", "linger.ms": 1,
                     "message.max.bytes": self.dead_letter_max_bytes(),
                     "batch.size": PRODUCER_BATCH_BYTES})
        if self.transactional:
            conf["transactional.id"] = self.transactional_id
        else:
            # a paused member's queued releases expire before it
            # can be expelled (docs/worker.md 5.6)
            conf["message.timeout.ms"] = release_timeout_ms(self.group_protocol, self.kafka)
        conf.update(self._passthrough(CONSUMER_ONLY_KEYS))
        return conf

    def dead_letter_max_bytes(self) -> int:
        """The producer's message.max.bytes: a dead letter is the original record whole, so it must
        take anything the consumer can receive, plus the dead letter's headers (librdkafka's
        default, 1,000,000, refused a 4.8 MB record the input topic had accepted)."""
        kafka = dict(self.kafka_overrides)
        try:
            receive = max(int(kafka.get("receive.message.max.bytes", LIBRDKAFKA_RECEIVE_MAX_BYTES)),
                          int(kafka.get("fetch.max.bytes", LIBRDKAFKA_FETCH_MAX_BYTES)) + 512)
        except ValueError:  # librdkafka itself names the bad value when the consumer starts
            receive = LIBRDKAFKA_RECEIVE_MAX_BYTES
        return min(receive + DEAD_LETTER_HEADROOM_BYTES, LIBRDKAFKA_MESSAGE_MAX_BYTES_LIMIT)

    def admin_config(self) -> dict[str, Any]:
        """Admin client configuration (reads the dead-letter topic's size limit): the connection
        and security settings of the producer, without what only a producer takes."""
        conf = {k: v for k, v in self.producer_config().items()
                if k not in PRODUCER_ONLY_KEYS
                and k not in ("transactional.id", "message.max.bytes")}
        conf["client.id"] = f"{self.group_id}-admin"
        return conf

    # ------------------------------------------------------------------ model
    def model_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``ALGORITHMS[self.algorithm]``: only those it accepts, no Nones."""
        return model.model_kwargs(self)

    @property
    def string_labels(self) -> bool:
        """Inserts carry class names as ``y`` (softmax with string
        classes): the Python decoder reads them."""
        return self.loss == "softmax" and bool(self.classes) and isinstance(self.classes[0], str)

    # ------------------------------------------------------------------ logging
    def redacted(self) -> dict[str, Any]:
        """Every setting as JSON-able values, secrets replaced
        by ``***`` (for the start log line)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("kafka_overrides", "origins"):
                continue
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        out["state_url"] = _redact_url(self.state_url)
        if self.schema_registry_url is not None:
            out["schema_registry_url"] = _redact_url(self.schema_registry_url)
        if self.schema_registry_user_info is not None:
            out["schema_registry_user_info"] = REDACTED
        out["input_fields"] = dict(self.input_fields or ())
        out["kafka"] = {k: (REDACTED if is_secret_key(k) else v) for k, v in self.kafka_overrides}
        out["origins"] = {name: origin for name, origin in self.origins if origin != "default"}
        return out

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.redacted().items() if k != "origins")
        return f"Settings({shown})"


#: Every field's default, by name: the one place the options' defaults come from.
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Settings)}


def hostname(env: Mapping[str, str]) -> str:
    return env.get("HOSTNAME") or socket.gethostname() or "localhost"


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:{REDACTED}@{parts.hostname}" + (
        f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()
