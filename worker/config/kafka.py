"""librdkafka pass-through: which keys may be passed, where they go, and which hold secrets.

Every ``OLU_KAFKA_<KEY>`` variable that is not a setting of its own, and every
``--kafka key=value`` flag (repeatable; a flag wins over the variable for the same key), is
handed to librdkafka. The variable's key is lower-cased with ``_`` turned into ``.``, and ``__``
into a literal ``_`` (librdkafka's ``log_level`` is ``OLU_KAFKA_LOG__LEVEL``)::

    OLU_KAFKA_SASL_MECHANISM=PLAIN        -> sasl.mechanism=PLAIN
    OLU_KAFKA_SSL_CA_LOCATION=/etc/ca.pem -> ssl.ca.location=/etc/ca.pem

Keys only the consumer knows go to the consumer, keys only the producer knows to the producer, all
others to both. librdkafka itself rejects unknown keys when the clients are created, at start.
Rejected here (:func:`check_key`):

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
``sasl.oauthbearer.config``, ``sasl.jaas.config``) are masked in logs (:func:`is_secret_key`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable

from .exceptions import ConfigError

KAFKA_ENV_PREFIX = "OLU_KAFKA_"
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000
DEFAULT_STATISTICS_INTERVAL_MS = 5_000
# librdkafka stops fetching a partition once queued.min.messages (100,000) are buffered and then
# waits fetch.queue.backoff.ms (default 1 s) before the next fetch: a worker that drains the queue
# faster than that sits idle (and a delete behind the queue waits up to a second). 10 ms keeps
# the queue topped up; an OLU_KAFKA_FETCH_QUEUE_BACKOFF_MS pass-through still overrides it.
DEFAULT_FETCH_QUEUE_BACKOFF_MS = 10
# librdkafka's defaults: the consumer receives responses (so records) up to
# receive.message.max.bytes, raised to fetch.max.bytes + 512 if that is larger; the producer's
# message.max.bytes is at most 1e9.
LIBRDKAFKA_RECEIVE_MAX_BYTES = 100_000_000
LIBRDKAFKA_FETCH_MAX_BYTES = 52_428_800
LIBRDKAFKA_MESSAGE_MAX_BYTES_LIMIT = 1_000_000_000
# A dead letter's own olu.* headers (the detail is at most 1024 characters): well within this.
DEAD_LETTER_HEADROOM_BYTES = 65_536
PRODUCER_BATCH_BYTES = 65_536

# How long a member may go unheard before the group coordinator can expel it (docs/worker.md 5.6):
# librdkafka's session and heartbeat defaults under the classic protocol; under KIP-848 the broker
# owns both (group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms defaults).
CLASSIC_SESSION_TIMEOUT_MS, CLASSIC_HEARTBEAT_INTERVAL_MS = 45_000, 3_000
KIP848_SESSION_TIMEOUT_MS, KIP848_HEARTBEAT_INTERVAL_MS = 45_000, 5_000
# librdkafka scans its queues for timed-out messages once a second: a queued release must expire
# this much before an expulsion is possible.
MESSAGE_TIMEOUT_SLACK_MS = 1_500
MESSAGE_TIMEOUT_KEYS = ("message.timeout.ms", "delivery.timeout.ms")  # aliases

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
    "enable.auto.commit": (frozenset(_FALSE_VALUES),
                           "offsets are committed only up to a durable snapshot"),
    "auto.commit.enable": (frozenset(_FALSE_VALUES),
                           "offsets are committed only up to a durable snapshot"),
    "enable.auto.offset.store": (frozenset(_FALSE_VALUES),
                                 "offsets are stored only with a durable snapshot"),
    "isolation.level": (frozenset({"read_committed"}),
                        "events of aborted transactions must never be learned"),
    "auto.offset.reset": (frozenset({"earliest", "smallest", "beginning", "error"}),
                          "skipping to the end would silently drop unprocessed events, deletes "
                          "among them"),
    "partition.assignment.strategy": (frozenset({"cooperative-sticky"}),
                                      "the rebalance callbacks use incremental assignment"),
    "enable.partition.eof": (frozenset(_FALSE_VALUES), "partition EOF events are not handled"),
    "enable.idempotence": (frozenset(_TRUE_VALUES),
                           "releases must not be duplicated or reordered by retries"),
    "acks": (frozenset({"all", "-1"}), "a release must survive a broker failure"),
    "request.required.acks": (frozenset({"all", "-1"}), "a release must survive a broker failure"),
}
#: Not supported with group.protocol=consumer (KIP-848 moves them to the broker).
CLASSIC_ONLY_KEYS = frozenset(
    {"partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms",
     "group.protocol.type"})
#: Settable only through the C/Python API, never from a string.
API_ONLY_KEYS = frozenset(
    {"opaque", "default_topic_conf", "interceptors", "ssl_key", "ssl_certificate", "ssl_ca",
     "ssl_engine_callback_data", "ssl.certificate.verify_cb", "on_commit", "on_delivery",
     "logger", "error_cb", "stats_cb", "throttle_cb", "oauth_cb"})
CONSUMER_ONLY_KEYS = frozenset({
    "group.instance.id", "group.remote.assignor", "group.protocol.type",
    "partition.assignment.strategy",
    "session.timeout.ms", "heartbeat.interval.ms", "coordinator.query.interval.ms",
    "max.poll.interval.ms",
    "enable.auto.commit", "auto.commit.interval.ms", "enable.auto.offset.store",
    "queued.min.messages",
    "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.queue.backoff.ms",
    "fetch.message.max.bytes",
    "max.partition.fetch.bytes", "fetch.max.bytes", "fetch.min.bytes", "fetch.error.backoff.ms",
    "offset.store.method", "offset.store.path", "offset.store.sync.interval.ms", "isolation.level",
    "enable.partition.eof", "check.crcs", "auto.commit.enable", "auto.offset.reset",
    "consume.callback.max.messages",
})
PRODUCER_ONLY_KEYS = frozenset({
    "transaction.timeout.ms", "enable.idempotence", "enable.gapless.guarantee",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes", "queue.buffering.max.ms", "linger.ms", "message.send.max.retries",
    "retries",
    "queue.buffering.backpressure.threshold", "compression.codec", "compression.type",
    "compression.level",
    "batch.num.messages", "batch.size", "delivery.report.only.error",
    "sticky.partitioning.linger.ms",
    "request.required.acks", "acks", "request.timeout.ms", "message.timeout.ms",
    "delivery.timeout.ms",
    "queuing.strategy", "produce.offset.report", "partitioner",
})
_KEY = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
_SECRET = re.compile(
    r"password|secret|token|passphrase|private\.key|key\.pem|jaas|sasl\.oauthbearer\.config")
REDACTED = "***"


def is_secret_key(key: str) -> bool:
    """Whether a librdkafka key holds a secret (masked in logs).

    >>> keys = ("sasl.password", "sasl.username", "ssl.key.pem", "ssl.ca.location")
    >>> [is_secret_key(k) for k in keys]
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


def check_key(key: str, value: str, source: str, group_protocol: str,
              label: Callable[[str], str]) -> None:
    """Raise :class:`ConfigError` if pass-through ``key=value`` (from ``source``) is refused.

    ``label(name)`` names a setting in the message (``OLU_GROUP_ID (--group-id)``).
    """
    if key in OWNED_KEYS:
        raise ConfigError(
            f"{source}: librdkafka '{key}' has its own setting, use {label(OWNED_KEYS[key])}")
    if key in API_ONLY_KEYS or key.endswith("_cb"):
        raise ConfigError(
            f"{source}: librdkafka '{key}' can only be set through the API, not configuration")
    if not _KEY.fullmatch(key):
        raise ConfigError(
            f"{source}: {key!r} is not a librdkafka property name (lower case, '.'-separated)")
    if key in CONTRACT_KEYS:
        allowed, why = CONTRACT_KEYS[key]
        if value.strip().lower() not in allowed:
            raise ConfigError(
                f"{source}: librdkafka '{key}' must be one of {', '.join(sorted(allowed))}, got "
                f"{value!r} ({why})")
    elif key not in CONSUMER_ONLY_KEYS | PRODUCER_ONLY_KEYS:
        near = difflib.get_close_matches(key, list(CONTRACT_KEYS) + list(OWNED_KEYS), n=1,
                                         cutoff=0.88)
        if near:
            raise ConfigError(
                f"{source}: unknown librdkafka key '{key}'; did you mean '{near[0]}'?")
    if group_protocol == "consumer" and key in CLASSIC_ONLY_KEYS:
        raise ConfigError(f"{source}: librdkafka '{key}' is not supported with "
                          f"{label('group_protocol')} = consumer (KIP-848 sets it on the broker)")
    if key in ("max.poll.interval.ms", "session.timeout.ms", "heartbeat.interval.ms"):
        _check_int(key, value, source, 1, 86_400_000)
    if key == "statistics.interval.ms":
        _check_int(key, value, source, 0, 86_400_000)


def expulsion_ms(group_protocol: str, kafka: dict[str, str]) -> int:
    """The shortest silence after which the coordinator may expel this member: the session
    timeout less one heartbeat interval (the last heartbeat may have been that long before)."""
    if group_protocol == "consumer":
        return KIP848_SESSION_TIMEOUT_MS - KIP848_HEARTBEAT_INTERVAL_MS
    session = int(kafka.get("session.timeout.ms", CLASSIC_SESSION_TIMEOUT_MS))
    heartbeat = int(kafka.get("heartbeat.interval.ms", CLASSIC_HEARTBEAT_INTERVAL_MS))
    return max(0, session - heartbeat)


def release_timeout_ms(group_protocol: str, kafka: dict[str, str]) -> int:
    """The longest message.timeout.ms at which a release still queued when the member stops being
    heard from expires before the member can be expelled (so never lands after a successor's).

    >>> short = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}
    >>> release_timeout_ms("classic", {}), release_timeout_ms("classic", short)
    (40500, 4000)
    """
    return expulsion_ms(group_protocol, kafka) - MESSAGE_TIMEOUT_SLACK_MS


def check_release_timeout(group_protocol: str, kafka: dict[str, str],
                          label: Callable[[str], str]) -> None:
    """At-least-once delivery: refuse a message timeout that would let a paused member's queued
    releases outlive its membership, or timings that leave no room for one."""
    bound = release_timeout_ms(group_protocol, kafka)
    if bound < 1_000:
        raise ConfigError(f"librdkafka session.timeout.ms - heartbeat.interval.ms must be at least "
                          f"{1_000 + MESSAGE_TIMEOUT_SLACK_MS} ms without "
                          f"{label('transactional')}: a release queued when the member pauses must "
                          "expire before it can be expelled")
    for key in MESSAGE_TIMEOUT_KEYS:
        raw = kafka.get(key)
        if raw is None:
            continue
        _check_int(key, raw, f"librdkafka '{key}'", 1, 86_400_000)
        if int(raw) > bound:
            raise ConfigError(
                f"librdkafka '{key}' = {raw} is above {bound} ms (session.timeout.ms - "
                f"heartbeat.interval.ms - {MESSAGE_TIMEOUT_SLACK_MS}): without "
                f"{label('transactional')} a release still queued when the worker pauses could "
                "land after its successor's release of a deletion; lower it, raise "
                "session.timeout.ms, or turn transactions on")


def _check_int(key, value, source, lo, hi) -> None:
    try:
        number = int(value.strip())
    except ValueError:
        number = None
    if number is None or not lo <= number <= hi:
        raise ConfigError(
            f"{source}: librdkafka '{key}' must be an integer in [{lo}, {hi}], got {value!r}")
