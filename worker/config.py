"""Worker settings: flags, ``OLU_*`` environment variables and defaults, validated once at start.

Precedence is flag > environment > default. Every setting ``name`` has the environment variable
``OLU_<NAME>`` and the flag ``--<name-with-dashes>`` (one exception: the bootstrap servers are
``OLU_KAFKA_BOOTSTRAP_SERVERS``, with the plain ``KAFKA_BOOTSTRAP_SERVERS`` as a fallback). An empty
environment variable counts as unset. :func:`settings_table` lists them all (the README table).

Anything wrong fails at start with a :class:`ConfigError` that names the setting by both its
environment variable and its flag::

    OLU_EPS (--eps) must be a number > 0, got 'abc'

That covers unparsable or out-of-range values, unknown choices, missing required settings, unknown
``OLU_*`` variables (typo protection: the closest known name is suggested), unknown flags, state
URLs with an unsupported scheme, and librdkafka pass-through keys that would break the worker's
contract.

librdkafka pass-through
-----------------------
Every other ``OLU_KAFKA_<KEY>`` variable, and every ``--kafka key=value`` flag (repeatable; a flag
wins over the variable for the same key), is handed to librdkafka. The variable's key is lower-cased
with ``_`` turned into ``.``, and ``__`` into a literal ``_`` (librdkafka's ``log_level`` is
``OLU_KAFKA_LOG__LEVEL``)::

    OLU_KAFKA_SASL_MECHANISM=PLAIN        -> sasl.mechanism=PLAIN
    OLU_KAFKA_SSL_CA_LOCATION=/etc/ca.pem -> ssl.ca.location=/etc/ca.pem

Keys only the consumer knows go to the consumer, keys only the producer knows to the producer, all
others to both. librdkafka itself rejects unknown keys when the clients are created, at start.
Rejected here:

- keys that have their own setting: ``bootstrap.servers``/``metadata.broker.list``, ``group.id``,
  ``group.protocol``, ``transactional.id``;
- values that break the contract: ``enable.auto.commit``/``auto.commit.enable`` other than false
  (offsets are committed only up to what a durable snapshot covers), ``enable.auto.offset.store``
  other than false, ``isolation.level`` other than ``read_committed`` (aborted upstream
  transactions must never be learned from), ``auto.offset.reset`` of ``latest``/``largest``/``end``
  (it would skip unprocessed events, deletes among them, silently; ``earliest`` or ``error`` only),
  ``partition.assignment.strategy`` other than ``cooperative-sticky`` (the rebalance callbacks use
  incremental assignment), ``enable.partition.eof=true``, ``enable.idempotence`` other than true,
  ``acks``/``request.required.acks`` other than ``all``/``-1``;
- with ``group_protocol=consumer`` (KIP-848), the keys that protocol moves to the broker:
  ``partition.assignment.strategy``, ``session.timeout.ms``, ``heartbeat.interval.ms``,
  ``group.protocol.type``;
- callback and other API-only properties (``*_cb``, ``opaque``, ...), which no string can set;
- near-misses of the keys above (``enable.auto.commmit``), reported with the intended key.

Releases are read downstream: when ``transactional`` is on, consumers of the parameter topic must
use ``isolation.level=read_committed`` or they may see releases of aborted transactions. That is
their configuration, not ours; the worker's own consumer is always ``read_committed``.

Secrets (``*password*``, ``*secret*``, ``*token*``, ``*passphrase*``, private-key PEMs,
``sasl.oauthbearer.config``, ``sasl.jaas.config``) are masked by :meth:`Settings.redacted` and
``repr``. Object-store credentials are not settings: obstore reads the standard ``AWS_*``
environment; only whether some are present is recorded, for the start-up log line.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import math
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from .exceptions import ConfigError, OluWorkerError
from .wire import PARAMS_TOPIC

__all__ = [
    "ALGORITHMS", "ConfigError", "Settings", "add_arguments", "load_settings", "settings_table",
]

ENV_PREFIX = "OLU_"
KAFKA_ENV_PREFIX = "OLU_KAFKA_"
BOOTSTRAP_ENV = "OLU_KAFKA_BOOTSTRAP_SERVERS"
BOOTSTRAP_FALLBACK_ENV = "KAFKA_BOOTSTRAP_SERVERS"

#: ``OLU_*`` variables that are not settings but are read elsewhere (tests, the numba kernel); the
#: unknown-variable check leaves them alone. ``OLU_TEST_*`` is reserved for test fixtures.
OTHER_ENV = frozenset({"OLU_REFERENCE_KERNEL", "OLU_KAFKA_LOCAL"})
OTHER_ENV_PREFIXES = ("OLU_TEST_",)

ALGORITHMS = ("passive", "passive-restart", "active-d2d", "active-anchor", "active-newton",
              "retrain", "restart", "ogd", "memory-pair", "dp-tofw", "rewind")
LOSSES = ("logistic", "ridge")
FEATURE_POLICIES = ("reject", "clip")
SCHEDULES = ("auto", "strongly-convex", "convex", "constant")
ORDER_FALLBACKS = ("retrain", "restart", "passive")
BUDGET_POLICIES = ("retrain", "refuse")
GROUP_PROTOCOLS = ("classic", "consumer")
CORRUPT_POLICIES = ("fallback", "fail")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("json", "text")
STATE_SCHEMES = ("file", "memory", "s3")
COMMANDS = ("run", "demo")
DEMO_DIM = 10
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000
DEFAULT_STATISTICS_INTERVAL_MS = 5_000
# librdkafka stops fetching a partition once queued.min.messages (100,000) are buffered and then
# waits fetch.queue.backoff.ms (default 1 s) before the next fetch: a worker that drains the queue
# faster than that sits idle (and a delete behind the queue waits up to a second). 10 ms keeps
# the queue topped up; an OLU_KAFKA_FETCH_QUEUE_BACKOFF_MS pass-through still overrides it.
DEFAULT_FETCH_QUEUE_BACKOFF_MS = 10


# --------------------------------------------------------------------------- value parsers
class _Bad(OluWorkerError, ValueError):
    """Raised by a parser with what the value must be ("a number > 0")."""


def _bound_text(lo, hi, lo_open, hi_open) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo:g}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {hi:g}"
    return ""


def _number(lo=None, hi=None, *, lo_open=False, hi_open=False, integer=False) -> Callable[[str], Any]:
    what = ("an integer" if integer else "a number") + (" " + _bound_text(lo, hi, lo_open, hi_open)
                                                        if lo is not None or hi is not None else "")

    def parse(raw: str):
        text = raw.strip()
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise _Bad(what) from None
        if not integer and not math.isfinite(value):
            raise _Bad(what)
        if lo is not None and (value < lo or (lo_open and value == lo)):
            raise _Bad(what)
        if hi is not None and (value > hi or (hi_open and value == hi)):
            raise _Bad(what)
        return value

    parse.requirement = what
    return parse


def _choice(choices: tuple[str, ...], *, upper: bool = False) -> Callable[[str], str]:
    what = "one of " + ", ".join(choices)

    def parse(raw: str) -> str:
        value = raw.strip().upper() if upper else raw.strip().lower()
        if value not in choices:
            raise _Bad(what)
        return value

    parse.requirement = what
    parse.choices = choices
    return parse


_TRUE = {"1", "true", "yes", "on", "t", "y"}
_FALSE = {"0", "false", "no", "off", "f", "n"}


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _Bad("a boolean (true/false, 1/0, yes/no, on/off)")


_bool.requirement = "a boolean (true/false, 1/0, yes/no, on/off)"

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _topic(raw: str) -> str:
    value = raw.strip()
    if not _TOPIC.fullmatch(value) or value in (".", ".."):
        raise _Bad(_topic.requirement)
    return value


_topic.requirement = "a Kafka topic name (1-249 characters of A-Z a-z 0-9 . _ -)"


def _topics(raw: str) -> tuple[str, ...]:
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if not items:
        raise _Bad(_topics.requirement)
    for item in items:
        if not item.startswith("^"):  # "^..." is a librdkafka regex subscription
            _topic(item)
    if len(set(items)) != len(items):
        raise _Bad(_topics.requirement + " without duplicates")
    return tuple(items)


_topics.requirement = "a comma-separated list of Kafka topic names (or ^regex patterns)"


def _text(raw: str) -> str:
    value = raw.strip()
    if not value or len(value) > 256 or any(ord(c) < 32 for c in value):
        raise _Bad(_text.requirement)
    return value


_text.requirement = "a non-empty string of at most 256 printable characters"


def _state_url(raw: str) -> str:
    value = raw.strip()
    try:
        parts = urlsplit(value)
    except ValueError:
        raise _Bad(_state_url.requirement) from None
    if parts.scheme.lower() not in STATE_SCHEMES or "://" not in value:
        raise _Bad(_state_url.requirement)
    if parts.scheme.lower() == "s3" and not parts.hostname:
        raise _Bad("an s3:// URL with a bucket (s3://bucket[/path])")
    return value


_state_url.requirement = "a URL with scheme " + ", ".join(f"{s}://" for s in STATE_SCHEMES)


def _state_prefix(raw: str) -> str:
    value = raw.strip().strip("/")
    if not value or ".." in value.split("/") or not re.fullmatch(r"[A-Za-z0-9._/=-]{1,256}", value):
        raise _Bad(_state_prefix.requirement)
    return value


_state_prefix.requirement = "a non-empty object-key prefix of A-Z a-z 0-9 . _ - = / (no '..')"


# --------------------------------------------------------------------------- the settings
@dataclass(frozen=True)
class Option:
    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    group: str
    env: str = ""
    flag: str = ""

    def __post_init__(self):
        if not self.env:
            object.__setattr__(self, "env", ENV_PREFIX + self.name.upper())
        if not self.flag:
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))

    @property
    def label(self) -> str:
        return f"{self.env} ({self.flag})"


_pos = _number(0, lo_open=True)
_nonneg = _number(0)

OPTIONS: tuple[Option, ...] = (
    # Kafka
    Option("bootstrap_servers", _text, None, "Kafka bootstrap servers, host:port[,host:port] "
           f"(required for run; {BOOTSTRAP_FALLBACK_ENV} is read as a fallback)", "kafka", env=BOOTSTRAP_ENV),
    Option("group_id", _text, "olu-worker", "consumer group id (also the snapshot namespace)", "kafka"),
    Option("input_topics", _topics, ("olu.events",), "input topics, comma-separated", "kafka"),
    Option("params_topic", _topic, PARAMS_TOPIC, "topic of released parameters", "kafka"),
    Option("dlq_topic", _topic, "olu.events.dlq", "dead-letter topic", "kafka"),
    Option("transactional", _bool, False, "publish releases and commit offsets in Kafka transactions", "kafka"),
    Option("transactional_id", _text, None, "transactional.id (default {group_id}-{hostname}; "
           "must be stable per replica, e.g. the StatefulSet pod name)", "kafka"),
    Option("group_protocol", _choice(GROUP_PROTOCOLS), "classic",
           "consumer group protocol: classic (cooperative-sticky) or consumer (KIP-848, broker >= 4.0)", "kafka"),
    # Model
    Option("algorithm", _choice(ALGORITHMS), "passive", "learner-unlearner", "model"),
    Option("dim", _number(1, integer=True), None, "feature dimension (required for run)", "model"),
    Option("loss", _choice(LOSSES), "logistic", "loss function", "model"),
    Option("l2", _nonneg, 0.01, "L2 regularisation (strong convexity mu)", "model"),
    Option("label_bound", _pos, 1.0, "bound on the label magnitude, abs(y) (ridge)", "model"),
    Option("radius", _pos, 10.0, "radius of the parameter ball K", "model"),
    Option("feature_bound", _pos, 1.0, "bound on the Euclidean norm of the features x", "model"),
    Option("feature_policy", _choice(FEATURE_POLICIES), "reject",
           "features over the bound: reject (dead letter) or clip", "model"),
    Option("schedule", _choice(SCHEDULES), "auto", "step-size schedule", "model"),
    Option("t0", _nonneg, None, "strongly-convex schedule offset t0 (default from the loss constants)", "model"),
    Option("step", _pos, None, "constant step size (schedule=constant)", "model"),
    Option("eps", _pos, 1.0, "lifetime Renyi privacy budget (slope) per model", "model"),
    Option("omega", _number(1, lo_open=True), 1.2, "budget split exponent (> 1)", "model"),
    Option("delta", _number(0, 1, lo_open=True, hi_open=True), 1e-5,
           "delta at which epsilon is reported", "model"),
    Option("max_deletions", _number(1, integer=True), None,
           "deletion capacity (per epoch; k for the restart and active algorithms)", "model"),
    Option("restart_c", _pos, 1.0, "passive-restart: constant c of the restart test", "model"),
    Option("order_fallback", _choice(ORDER_FALLBACKS), "retrain",
           "active algorithms: what to do when the retained order cannot be honoured", "model"),
    Option("on_budget", _choice(BUDGET_POLICIES), "retrain",
           "memory-pair: a deletion past the zCDP budget retrains on the retained data (release header "
           "olu.budget=retrained) or is refused (dead letter budget_exhausted)", "model"),
    Option("lbfgs_memory", _number(1, 1000, integer=True), 10,
           "memory-pair: curvature pairs kept by online L-BFGS (tau)", "model"),
    Option("dp_horizon", _number(1, integer=True), 1_000_000,
           "dp-tofw: records per tree epoch n, fixed in advance (noise grows with log2 n)", "model"),
    Option("retrain_every", _number(1, integer=True), 1000,
           "rewind: OGD steps between full-batch retrainings of the partition model", "model"),
    Option("train_steps", _number(1, integer=True), 100,
           "rewind: full-batch gradient-descent steps T of a retraining", "model"),
    Option("noise_sigma", _nonneg, 0.05,
           "rewind: Gaussian noise sigma of a rewind deletion, fixed in advance (sets the rewind depth K)", "model"),
    Option("model_name", _text, None, "model name in releases (default: group_id)", "model"),
    # Releases and state
    Option("release_every_events", _number(0, integer=True), 10_000,
           "release after N events (0 disables)", "state"),
    Option("release_every_seconds", _nonneg, 5.0, "release every T seconds if changed (0 disables)", "state"),
    Option("snapshot_every_events", _number(0, integer=True), 100_000,
           "full snapshot after N events (0 disables)", "state"),
    Option("snapshot_every_seconds", _nonneg, 30.0, "full snapshot every T seconds (0 disables)", "state"),
    Option("snapshot_keep", _number(1, integer=True), 2, "full snapshots kept per partition", "state"),
    Option("snapshot_max_bytes_per_second", _number(0, integer=True), 32 << 20,
           "upload rate limit of background full snapshots, bytes/s (0: none; revoke and shutdown "
           "snapshots are never limited)", "state"),
    Option("snapshot_upload_spread", _number(0, 1, hi_open=True), 0.5,
           "spread a background full snapshot's uploads over this share of the time since the previous "
           "one (0: as fast as the rate limit allows)", "state"),
    Option("state_url", _state_url, "file://./olu-state", "object store: file://, memory:// or s3://", "state"),
    Option("state_prefix", _state_prefix, "olu", "key prefix in the object store", "state"),
    Option("on_corrupt_snapshot", _choice(CORRUPT_POLICIES), "fallback",
           "corrupt newest snapshot: fallback to an older one, or fail", "state"),
    Option("purge_bound_seconds", _pos, 60.0, "max seconds until stored objects holding a deleted "
           "record's raw features are deleted (active algorithms)", "state"),
    Option("max_record_bytes", _number(1, integer=True), 1_048_576,
           "larger input records go to the dead-letter topic", "state"),
    Option("revoke_budget_fraction", _number(0, 1, lo_open=True), 0.5,
           "share of max.poll.interval.ms for final snapshots on revoke and shutdown", "state"),
    Option("batch_size", _number(1, 1_000_000, integer=True), 2000, "micro-batch size (messages per consume)",
           "state"),
    Option("poll_timeout", _nonneg, 0.1, "seconds to wait for the first message when nothing is fetched", "state"),
    # HTTP and logging
    Option("http_host", _text, "0.0.0.0", "bind address of /metrics /healthz /readyz", "http"),
    Option("http_port", _number(0, 65535, integer=True), 9464, "HTTP port (0: ephemeral)", "http"),
    Option("liveness_seconds", _pos, 60.0, "/healthz fails when the loop made no progress for this long",
           "http"),
    Option("log_level", _choice(LOG_LEVELS, upper=True), "INFO", "log level", "http"),
    Option("log_format", _choice(LOG_FORMATS), "json", "log format: json (one object per line) or text", "http"),
)
OPTION_BY_NAME = {o.name: o for o in OPTIONS}
OPTION_BY_ENV = {o.env: o for o in OPTIONS}
KAFKA_FLAG = "--kafka"
_GROUP_TITLES = {"kafka": "Kafka", "model": "model", "state": "releases and state", "http": "HTTP and logging"}

# --------------------------------------------------------------------------- librdkafka keys
#: Keys that have a setting of their own: pass-through is refused, naming the setting.
OWNED_KEYS = {
    "bootstrap.servers": "bootstrap_servers",
    "metadata.broker.list": "bootstrap_servers",
    "group.id": "group_id",
    "group.protocol": "group_protocol",
    "transactional.id": "transactional_id",
}
_FALSE_VALUES = {"false", "0", "f"}
_TRUE_VALUES = {"true", "1", "t"}
#: key -> (allowed values, lower-cased; why)
CONTRACT_KEYS: dict[str, tuple[frozenset[str], str]] = {
    "enable.auto.commit": (frozenset(_FALSE_VALUES), "offsets are committed only up to a durable snapshot"),
    "auto.commit.enable": (frozenset(_FALSE_VALUES), "offsets are committed only up to a durable snapshot"),
    "enable.auto.offset.store": (frozenset(_FALSE_VALUES), "offsets are stored only with a durable snapshot"),
    "isolation.level": (frozenset({"read_committed"}), "events of aborted transactions must never be learned"),
    "auto.offset.reset": (frozenset({"earliest", "smallest", "beginning", "error"}),
                          "skipping to the end would silently drop unprocessed events, deletes among them"),
    "partition.assignment.strategy": (frozenset({"cooperative-sticky"}),
                                      "the rebalance callbacks use incremental assignment"),
    "enable.partition.eof": (frozenset(_FALSE_VALUES), "partition EOF events are not handled"),
    "enable.idempotence": (frozenset(_TRUE_VALUES), "releases must not be duplicated or reordered by retries"),
    "acks": (frozenset({"all", "-1"}), "a release must survive a broker failure"),
    "request.required.acks": (frozenset({"all", "-1"}), "a release must survive a broker failure"),
}
#: Not supported with group.protocol=consumer (KIP-848 moves them to the broker).
CLASSIC_ONLY_KEYS = frozenset({"partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms",
                               "group.protocol.type"})
#: Settable only through the C/Python API, never from a string.
API_ONLY_KEYS = frozenset({"opaque", "default_topic_conf", "interceptors", "ssl_key", "ssl_certificate", "ssl_ca",
                           "ssl_engine_callback_data", "ssl.certificate.verify_cb", "on_commit", "on_delivery",
                           "logger", "error_cb", "stats_cb", "throttle_cb", "oauth_cb"})
CONSUMER_ONLY_KEYS = frozenset({
    "group.instance.id", "group.remote.assignor", "group.protocol.type", "partition.assignment.strategy",
    "session.timeout.ms", "heartbeat.interval.ms", "coordinator.query.interval.ms", "max.poll.interval.ms",
    "enable.auto.commit", "auto.commit.interval.ms", "enable.auto.offset.store", "queued.min.messages",
    "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.queue.backoff.ms", "fetch.message.max.bytes",
    "max.partition.fetch.bytes", "fetch.max.bytes", "fetch.min.bytes", "fetch.error.backoff.ms",
    "offset.store.method", "offset.store.path", "offset.store.sync.interval.ms", "isolation.level",
    "enable.partition.eof", "check.crcs", "auto.commit.enable", "auto.offset.reset",
    "consume.callback.max.messages",
})
PRODUCER_ONLY_KEYS = frozenset({
    "transaction.timeout.ms", "enable.idempotence", "enable.gapless.guarantee", "queue.buffering.max.messages",
    "queue.buffering.max.kbytes", "queue.buffering.max.ms", "linger.ms", "message.send.max.retries", "retries",
    "queue.buffering.backpressure.threshold", "compression.codec", "compression.type", "compression.level",
    "batch.num.messages", "batch.size", "delivery.report.only.error", "sticky.partitioning.linger.ms",
    "request.required.acks", "acks", "request.timeout.ms", "message.timeout.ms", "delivery.timeout.ms",
    "queuing.strategy", "produce.offset.report", "partitioner",
})
_KEY = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
_SECRET = re.compile(r"password|secret|token|passphrase|private\.key|key\.pem|jaas|sasl\.oauthbearer\.config")
REDACTED = "***"
#: Environment variables that carry object-store credentials (read by obstore, never copied).
AWS_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE",
                      "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_PROFILE")

# Engine keyword arguments per algorithm (the engine constructors: worker/olu/base.py, passive.py,
# active algorithms). ``max_deletions`` goes to ``max_deletions`` when the class takes it, else to
# the accountant's ``capacity`` for the algorithms listed in _CAPACITY.
_BASE_MODEL_KWARGS = ("dim", "loss", "l2", "label_bound", "radius", "feature_bound", "feature_policy",
                      "schedule", "t0", "step", "eps", "omega", "delta")
_EXTRA_MODEL_KWARGS = {
    "passive": ("max_deletions",),
    "passive-restart": ("restart_c", "max_deletions"),
    "active-d2d": ("max_deletions", "order_fallback"),
    "active-anchor": ("max_deletions", "order_fallback"),
    "active-newton": ("max_deletions", "order_fallback"),
    "retrain": ("max_deletions",),
    "restart": (),
    "ogd": (),
    "memory-pair": ("max_deletions", "on_budget", "lbfgs_memory"),
    "dp-tofw": ("dp_horizon",),
    "rewind": ("max_deletions", "retrain_every", "train_steps", "noise_sigma"),
}
_CAPACITY = frozenset({"passive"})
MODEL_SETTINGS = frozenset(_BASE_MODEL_KWARGS) | {"restart_c", "max_deletions", "order_fallback", "on_budget",
                                                   "lbfgs_memory", "dp_horizon", "retrain_every", "train_steps",
                                                   "noise_sigma"}


def is_secret_key(key: str) -> bool:
    """Whether a librdkafka key holds a secret (masked in logs).

    >>> [is_secret_key(k) for k in ("sasl.password", "sasl.username", "ssl.key.pem", "ssl.ca.location")]
    [True, False, True, False]
    """
    return bool(_SECRET.search(key.lower()))


def env_to_kafka_key(name: str) -> str:
    """librdkafka key of an ``OLU_KAFKA_*`` variable: lower case, ``_`` -> ``.``, ``__`` -> ``_``.

    >>> env_to_kafka_key("OLU_KAFKA_SASL_MECHANISM"), env_to_kafka_key("OLU_KAFKA_LOG__LEVEL")
    ('sasl.mechanism', 'log_level')
    """
    rest = name[len(KAFKA_ENV_PREFIX):] if name.startswith(KAFKA_ENV_PREFIX) else name
    return rest.lower().replace("__", "\0").replace("_", ".").replace("\0", "_")


def kafka_key_to_env(key: str) -> str:
    """Inverse of :func:`env_to_kafka_key`.

    >>> kafka_key_to_env("ssl.ca.location"), kafka_key_to_env("log_level")
    ('OLU_KAFKA_SSL_CA_LOCATION', 'OLU_KAFKA_LOG__LEVEL')
    """
    return KAFKA_ENV_PREFIX + key.replace("_", "__").replace(".", "_").upper()


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:{REDACTED}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


@dataclass(frozen=True, repr=False)
class Settings:
    """The effective configuration. Build it with :func:`load_settings` (which validates)."""

    # Kafka
    bootstrap_servers: str | None = None
    group_id: str = "olu-worker"
    input_topics: tuple[str, ...] = ("olu.events",)
    params_topic: str = PARAMS_TOPIC
    dlq_topic: str = "olu.events.dlq"
    transactional: bool = False
    transactional_id: str | None = None  # None: f"{group_id}-{hostname}"
    group_protocol: str = "classic"
    kafka_overrides: tuple[tuple[str, str], ...] = ()  # librdkafka pass-through, sorted by key
    # Model
    algorithm: str = "passive"
    dim: int | None = None
    loss: str = "logistic"
    l2: float = 0.01
    label_bound: float = 1.0
    radius: float = 10.0
    feature_bound: float = 1.0
    feature_policy: str = "reject"
    schedule: str = "auto"
    t0: float | None = None
    step: float | None = None
    eps: float = 1.0
    omega: float = 1.2
    delta: float = 1e-5
    max_deletions: int | None = None
    restart_c: float = 1.0
    order_fallback: str = "retrain"
    on_budget: str = "retrain"
    lbfgs_memory: int = 10
    dp_horizon: int = 1_000_000
    retrain_every: int = 1000
    train_steps: int = 100
    noise_sigma: float = 0.05
    model_name: str | None = None  # None: group_id
    # Releases and state
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
    purge_bound_seconds: float = 60.0
    max_record_bytes: int = 1_048_576
    revoke_budget_fraction: float = 0.5
    batch_size: int = 2000
    poll_timeout: float = 0.1
    # HTTP and logging
    http_host: str = "0.0.0.0"
    http_port: int = 9464
    liveness_seconds: float = 60.0
    log_level: str = "INFO"
    log_format: str = "json"
    # Not settings: facts recorded for the start-up log line
    storage_credentials_present: bool = False
    origins: tuple[tuple[str, str], ...] = field(default=(), compare=False)  # name -> flag|env|default

    def __post_init__(self):
        if isinstance(self.input_topics, str):
            object.__setattr__(self, "input_topics", (self.input_topics,))
        if isinstance(self.kafka_overrides, Mapping):
            object.__setattr__(self, "kafka_overrides", tuple(sorted(self.kafka_overrides.items())))
        if self.model_name is None:
            object.__setattr__(self, "model_name", self.group_id)
        if self.transactional_id is None:
            object.__setattr__(self, "transactional_id", f"{self.group_id}-{_hostname(os.environ)}")

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
    def revoke_budget_seconds(self) -> float:
        """Time for final snapshots and commits on revoke or shutdown, inside max.poll.interval.ms."""
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
            "statistics.interval.ms": DEFAULT_STATISTICS_INTERVAL_MS,  # consumer lag for the metrics
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
        conf.update({"enable.idempotence": True, "acks": "all", "linger.ms": 1})
        if self.transactional:
            conf["transactional.id"] = self.transactional_id
        conf.update(self._passthrough(CONSUMER_ONLY_KEYS))
        return conf

    # ------------------------------------------------------------------ model
    def model_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``ALGORITHMS[self.algorithm]``: only those it accepts, no Nones."""
        names = _BASE_MODEL_KWARGS + _EXTRA_MODEL_KWARGS.get(self.algorithm, ())
        kwargs = {n: getattr(self, n) for n in names}
        accepted = _accepted_kwargs(self.algorithm)
        if "max_deletions" in kwargs and (
            (accepted is not None and "max_deletions" not in accepted)
            or (accepted is None and self.algorithm in _CAPACITY)
        ):
            value = kwargs.pop("max_deletions")
            if self.algorithm in _CAPACITY:
                kwargs["capacity"] = value
        if accepted is not None:
            kwargs = {k: v for k, v in kwargs.items() if k in accepted}
        return {k: v for k, v in kwargs.items() if v is not None}

    # ------------------------------------------------------------------ logging
    def redacted(self) -> dict[str, Any]:
        """Every setting as JSON-able values, secrets replaced by ``***`` (for the start log line)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("kafka_overrides", "origins"):
                continue
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        out["state_url"] = _redact_url(self.state_url)
        out["kafka"] = {k: (REDACTED if is_secret_key(k) else v) for k, v in self.kafka_overrides}
        out["origins"] = {name: origin for name, origin in self.origins if origin != "default"}
        return out

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.redacted().items() if k != "origins")
        return f"Settings({shown})"


def _accepted_kwargs(algorithm: str) -> frozenset[str] | None:
    """Keyword names the engine class accepts (following ``**kwargs`` up the MRO); None if unknown."""
    cls = _engine_class(algorithm)
    if cls is None:
        return None
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names.update(p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    names.discard("self")
    return frozenset(names)


def _engine_class(algorithm: str):
    import importlib

    try:
        from .olu.base import ALGORITHMS as registry
    except ImportError:
        return None
    if algorithm not in registry:  # algorithms register on import: import the engine's modules
        import pkgutil

        from . import olu

        for module in pkgutil.iter_modules(olu.__path__):
            if module.name == "kernels":  # numba; imported on first use by the engine itself
                continue
            try:
                importlib.import_module(f"{olu.__name__}.{module.name}")
            except ImportError:
                pass
    return registry.get(algorithm)


def _registry_loaded() -> bool:
    try:
        from .olu import base  # noqa: F401
    except ImportError:
        return False
    return True


def _hostname(env: Mapping[str, str]) -> str:
    return env.get("HOSTNAME") or socket.gethostname() or "localhost"


# --------------------------------------------------------------------------- argparse
def add_arguments(parser: argparse.ArgumentParser, *, exclude: Iterable[str] = ()) -> None:
    """Add every setting's flag to ``parser`` (defaults None, so environment and defaults apply).

    ``exclude`` names settings whose flag the caller defines itself.
    """
    skip = set(exclude)
    groups: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.name in skip:
            continue
        group = groups.get(opt.group)
        if group is None:
            group = groups[opt.group] = parser.add_argument_group(f"{_GROUP_TITLES[opt.group]} settings")
        shown = ",".join(opt.default) if isinstance(opt.default, tuple) else opt.default
        help_text = f"{opt.help} (env {opt.env}" + ("" if shown is None else f"; default {shown}") + ")"
        help_text = help_text.replace("%", "%%")
        if opt.parse is _bool:
            group.add_argument(opt.flag, dest=opt.name, action=argparse.BooleanOptionalAction, default=None,
                               help=help_text)
            continue
        choices = getattr(opt.parse, "choices", None)
        metavar = "{" + ",".join(choices) + "}" if choices else opt.name.upper()
        group.add_argument(opt.flag, dest=opt.name, default=None, metavar=metavar, help=help_text)
    if "kafka" not in skip:
        groups["kafka"].add_argument(
            KAFKA_FLAG, dest="kafka", action="append", default=None, metavar="KEY=VALUE",
            help="librdkafka setting, repeatable (env OLU_KAFKA_<KEY>, '.' as '_' and '_' as '__')",
        )


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # raise instead of printing usage and exiting
        raise ConfigError(message)


def _parse_argv(argv: list[str]) -> dict[str, Any]:
    parser = _Parser(prog="olu-worker", add_help=False, allow_abbrev=False)
    add_arguments(parser)
    namespace, rest = parser.parse_known_args(argv)
    if rest:
        flags = [o.flag for o in OPTIONS] + [KAFKA_FLAG]
        unknown = rest[0].split("=", 1)[0]
        hint = difflib.get_close_matches(unknown, flags, n=1)
        raise ConfigError(f"unknown flag {unknown!r}" + (f"; did you mean {hint[0]}?" if hint else ""))
    return vars(namespace)


# --------------------------------------------------------------------------- loading
def _suggest_env(name: str) -> str:
    candidates = sorted(OPTION_BY_ENV) + sorted(OTHER_ENV)
    match = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if not match:
        return ""
    opt = OPTION_BY_ENV.get(match[0])
    return f"; did you mean {match[0]}" + (f" ({opt.flag})" if opt else "") + "?"


def _check_kafka_key(key: str, value: str, source: str, group_protocol: str) -> None:
    if key in OWNED_KEYS:
        opt = OPTION_BY_NAME[OWNED_KEYS[key]]
        raise ConfigError(f"{source}: librdkafka '{key}' has its own setting, use {opt.label}")
    if key in API_ONLY_KEYS or key.endswith("_cb"):
        raise ConfigError(f"{source}: librdkafka '{key}' can only be set through the API, not configuration")
    if not _KEY.fullmatch(key):
        raise ConfigError(f"{source}: {key!r} is not a librdkafka property name (lower case, '.'-separated)")
    if key in CONTRACT_KEYS:
        allowed, why = CONTRACT_KEYS[key]
        if value.strip().lower() not in allowed:
            raise ConfigError(f"{source}: librdkafka '{key}' must be one of {', '.join(sorted(allowed))}, "
                              f"got {value!r} ({why})")
    elif key not in CONSUMER_ONLY_KEYS | PRODUCER_ONLY_KEYS:
        near = difflib.get_close_matches(key, list(CONTRACT_KEYS) + list(OWNED_KEYS), n=1, cutoff=0.88)
        if near:
            raise ConfigError(f"{source}: unknown librdkafka key '{key}'; did you mean '{near[0]}'?")
    if group_protocol == "consumer" and key in CLASSIC_ONLY_KEYS:
        raise ConfigError(f"{source}: librdkafka '{key}' is not supported with "
                          f"{OPTION_BY_NAME['group_protocol'].label} = consumer (KIP-848 sets it on the broker)")
    if key == "max.poll.interval.ms":
        _kafka_int(key, value, source, 1, 86_400_000)
    if key == "statistics.interval.ms":
        _kafka_int(key, value, source, 0, 86_400_000)


def _kafka_int(key, value, source, lo, hi) -> None:
    try:
        number = int(value.strip())
    except ValueError:
        number = None
    if number is None or not lo <= number <= hi:
        raise ConfigError(f"{source}: librdkafka '{key}' must be an integer in [{lo}, {hi}], got {value!r}")


def _kafka_overrides(env: Mapping[str, str], flags: list[str] | None, group_protocol: str) -> dict[str, str]:
    found: dict[str, tuple[str, str]] = {}  # key -> (value, source)
    for name in sorted(env):
        if not name.startswith(KAFKA_ENV_PREFIX) or name == BOOTSTRAP_ENV or name in OTHER_ENV:
            continue
        key = env_to_kafka_key(name)
        if not key or key.startswith(".") or key.endswith("."):
            raise ConfigError(f"{name}: cannot map to a librdkafka key (got {key!r})")
        if env[name] == "":
            continue
        if key in found:
            raise ConfigError(f"{name} and {found[key][1]} both set librdkafka '{key}'")
        found[key] = (env[name], name)
    for item in [flags] if isinstance(flags, str) else flags or ():
        key, sep, value = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{KAFKA_FLAG} takes KEY=VALUE, got {item!r}")
        found[key] = (value, f"{KAFKA_FLAG} {key}")  # a flag wins over the environment
    for key, (value, source) in found.items():
        _check_kafka_key(key, value, source, group_protocol)
    return {key: value for key, (value, _) in found.items()}


def load_settings(argv=None, env: Mapping[str, str] | None = None, *, command: str = "run") -> Settings:
    """Settings from flags (``argv``: a list of strings or an ``argparse.Namespace`` produced by a
    parser given :func:`add_arguments`), the environment (default ``os.environ``) and defaults.

    ``command="run"`` requires the bootstrap servers and ``dim``; ``command="demo"`` requires
    neither (``dim`` defaults to 10 and the demo brings its own cluster).

    >>> s = load_settings(["--dim", "3", "--eps", "2"], {"OLU_KAFKA_BOOTSTRAP_SERVERS": "k:9092"})
    >>> s.dim, s.eps, s.origin("eps"), s.origin("l2")
    (3, 2.0, 'flag', 'default')
    >>> try:
    ...     load_settings([], {"OLU_EPS": "abc"}, command="demo")
    ... except ConfigError as exc:
    ...     print(exc)
    OLU_EPS (--eps) must be a number > 0, got 'abc'
    """
    if command not in COMMANDS:
        raise ValueError(f"command must be one of {', '.join(COMMANDS)}, got {command!r}")
    env = os.environ if env is None else env
    if argv is None:
        flag_values: dict[str, Any] = {}
    elif isinstance(argv, argparse.Namespace):
        flag_values = vars(argv)
    else:
        flag_values = _parse_argv(list(argv))

    # Typo protection: every OLU_* variable must be a setting, a pass-through key or a known extra.
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name in OPTION_BY_ENV or name in OTHER_ENV:
            continue
        if name.startswith(KAFKA_ENV_PREFIX) or name.startswith(OTHER_ENV_PREFIXES):
            continue
        raise ConfigError(f"unknown environment variable {name}{_suggest_env(name)}")

    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for opt in OPTIONS:
        raw, origin, source = flag_values.get(opt.name), "flag", opt.flag
        if raw is None:
            raw, origin, source = env.get(opt.env) or None, "env", opt.env
        if raw is None and opt.name == "bootstrap_servers":
            raw, source = env.get(BOOTSTRAP_FALLBACK_ENV) or None, BOOTSTRAP_FALLBACK_ENV
        if raw is None:
            values[opt.name], origins[opt.name] = opt.default, "default"
            continue
        if isinstance(raw, bool):
            raw = "true" if raw else "false"
        elif isinstance(raw, (list, tuple)):
            raw = ",".join(map(str, raw))
        raw = str(raw)
        try:
            values[opt.name] = opt.parse(raw)
        except _Bad as bad:
            raise ConfigError(f"{opt.label} must be {bad}, got {raw!r}" +
                              (f" (from {source})" if source == BOOTSTRAP_FALLBACK_ENV else "")) from None
        origins[opt.name] = origin

    def label(name: str) -> str:
        return OPTION_BY_NAME[name].label

    if command == "run":
        for name in ("bootstrap_servers", "dim"):
            if values[name] is None:
                extra = f" (or {BOOTSTRAP_FALLBACK_ENV})" if name == "bootstrap_servers" else ""
                raise ConfigError(f"{label(name)}{extra} is required")
    elif values["dim"] is None:
        values["dim"] = DEMO_DIM

    # Cross-checks (the engine would reject these later with less context).
    if _registry_loaded() and _engine_class(values["algorithm"]) is None:
        raise ConfigError(f"{label('algorithm')}: {values['algorithm']!r} is not available in this build")
    topics = values["input_topics"]
    for name in ("params_topic", "dlq_topic"):
        if values[name] in topics:
            raise ConfigError(f"{label(name)} must not be one of the input topics "
                              f"({label('input_topics')}), got {values[name]!r}")
    if values["params_topic"] == values["dlq_topic"]:
        raise ConfigError(f"{label('params_topic')} and {label('dlq_topic')} must differ, "
                          f"both are {values['params_topic']!r}")
    if values["schedule"] == "constant" and values["step"] is None:
        raise ConfigError(f"{label('step')} is required with {label('schedule')} = constant")
    if values["schedule"] == "strongly-convex" and values["l2"] == 0:
        raise ConfigError(f"{label('l2')} must be > 0 with {label('schedule')} = strongly-convex, got 0")
    if not values["snapshot_every_events"] and not values["snapshot_every_seconds"]:
        raise ConfigError(f"{label('snapshot_every_events')} and {label('snapshot_every_seconds')} cannot "
                          "both be 0: offsets are committed only with snapshots")

    values["kafka_overrides"] = tuple(sorted(
        _kafka_overrides(env, flag_values.get("kafka"), values["group_protocol"]).items()))
    if values["transactional_id"] is None:
        values["transactional_id"] = f"{values['group_id']}-{_hostname(env)}"
    values["storage_credentials_present"] = any(env.get(name) for name in AWS_CREDENTIAL_ENV)
    values["origins"] = tuple(sorted(origins.items()))
    if values["algorithm"] == "active-newton" and values["loss"] != "ridge":
        raise ConfigError(f"{label('loss')} must be ridge with {label('algorithm')} = active-newton, "
                          f"got {values['loss']!r}")
    settings = Settings(**values)
    _check_model(settings, label)
    return settings


def _check_model(settings: Settings, label) -> None:
    """Build the model once, so a combination the engine refuses fails now, naming the settings."""
    cls = _engine_class(settings.algorithm)
    if cls is None:
        return
    try:
        cls(**settings.model_kwargs())
    except ValueError as exc:
        text = str(exc)
        named = [label(n) for n in OPTION_BY_NAME if re.search(rf"\b{re.escape(n)}\b", text)]
        raise ConfigError(f"{', '.join(named) or label('algorithm')}: {text}") from None


def settings_table() -> list[dict[str, str]]:
    """One row per setting (name, env, flag, default, meaning): the README table."""
    rows = []
    for opt in OPTIONS:
        default = opt.default
        if isinstance(default, tuple):
            default = ",".join(default)
        rows.append({"name": opt.name, "env": opt.env, "flag": opt.flag,
                     "default": "" if default is None else str(default).lower() if isinstance(default, bool)
                     else str(default), "meaning": opt.help})
    rows.append({"name": "kafka", "env": "OLU_KAFKA_<KEY>", "flag": "--kafka KEY=VALUE", "default": "",
                 "meaning": "librdkafka pass-through ('.' as '_', '_' as '__'); contract keys rejected"})
    return rows
