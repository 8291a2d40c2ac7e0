"""``olu-worker demo``: the whole worker on embedded defaults, nothing to set up.

librdkafka's mock cluster stands in for Kafka (topics auto-create with 4 partitions), a temporary
directory is the object store, and a background producer writes a synthetic stream with
deletions and a few poison records. The worker itself is the production code path.

With ``--input-format`` avro, json-schema or protobuf the producer serializes each event with
confluent-kafka's serializer for it (worker/formats/events.py) against the registry of
``--schema-registry-url`` (there is no embedded registry: the demo asks for one before it starts);
the poison records stay raw JSON, so they are dead-lettered ``not_framed``.
"""

from __future__ import annotations

import tempfile
import threading

import numpy as np
import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from ..exceptions import ConfigError

POISON_EVERY = 997  # a malformed record now and then, to show the dead-letter path


def mock_cluster() -> tuple[AdminClient, str]:
    """Start librdkafka's in-process mock cluster; the holder keeps it alive."""
    holder = AdminClient({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = holder.list_topics(timeout=10).brokers.values()
    return holder, ",".join(f"{b.host}:{b.port}" for b in brokers)


def synthetic_stream(n: int, dim: int, delete_rate: float, seed: int):
    """(key, event) pairs: inserts of a noisy linear rule, deletes of earlier ids, some poison. An
    event is a dict, or raw bytes (the poison records: JSON that no format's schema describes)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim)
    inserted: list[str] = []
    for j in range(n):
        if j and j % POISON_EVERY == 0:
            yield b"poison-%d" % j, b'{"op": "insert", "id": "poison-%d", "x": "not a vector"}' % j
        elif inserted and rng.random() < delete_rate:
            victim = inserted[int(rng.integers(len(inserted)))]
            yield victim.encode(), {"op": "delete", "id": victim}
        else:
            x = rng.normal(size=dim)
            x /= max(1.0, float(np.linalg.norm(x)))
            y = 1 if float(x @ w) + 0.3 * rng.normal() >= 0 else 0
            rid = f"r-{j}"
            inserted.append(rid)
            yield rid.encode(), {"op": "insert", "id": rid, "x": x.round(6).tolist(), "y": y}


def synthetic_events(n: int, dim: int, delete_rate: float, seed: int):
    """:func:`synthetic_stream` as (key, JSON value) pairs, the worker's own wire format."""
    for key, event in synthetic_stream(n, dim, delete_rate, seed):
        yield key, event if isinstance(event, bytes) else orjson.dumps(event)


def produce(bootstrap: str, topic: str, events, done: threading.Event, encode=None) -> None:
    """Write ``events`` to ``topic``; ``encode(event, topic)`` serializes a dict (default: JSON)."""
    encode = encode or (lambda event, _topic: orjson.dumps(event))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for k, (key, value) in enumerate(events):
        producer.produce(topic, key=key, value=value if isinstance(value, bytes) else encode(value, topic))
        if k % 5000 == 0:
            producer.poll(0)
    producer.flush(30)
    done.set()


def demo_env(bootstrap: str, state_dir: str) -> dict[str, str]:
    """Embedded defaults; anything the user passes as a flag or OLU_* variable wins."""
    return {
        "OLU_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "OLU_STATE_URL": f"file://{state_dir}",
        "OLU_RELEASE_EVERY_EVENTS": "2000",
        "OLU_SNAPSHOT_EVERY_EVENTS": "20000",
        "OLU_SNAPSHOT_EVERY_SECONDS": "10",
        "OLU_KAFKA_LOG_CONNECTION_CLOSE": "false",  # the mock cluster closes idle connections
    }


def partition_summary(worker) -> dict:
    return {f"{t}/{p}": row for (t, p), row in sorted(worker.final_state.items())}


def check_format(input_format: str, registry_url: str | None) -> None:
    """Fail before anything starts: a registry format needs a registry (there is none embedded)."""
    if input_format != "json" and not registry_url:
        raise ConfigError(f"the demo with --input-format {input_format} needs a Schema Registry: pass "
                          "--schema-registry-url (or OLU_SCHEMA_REGISTRY_URL), e.g. the one "
                          "`.venv/bin/python -m worker.devtools.registry_local` starts and prints")


def event_encoder(settings):
    """``encode(event, topic)`` in the input format: JSON, or framed by the settings' registry (its
    schema registered now, so a registry that is down or refuses it fails the demo's start)."""
    if settings.input_format == "json":
        return None
    from ..formats.events import event_serializer
    from ..formats.registry import new_client

    encode = event_serializer(settings.input_format, new_client(settings))
    topic = settings.input_topics[0]
    try:
        encode({"op": "delete", "id": "demo-schema-check"}, topic)
    except Exception as exc:
        raise ConfigError(f"--input-format {settings.input_format}: could not register the event schema under "
                          f"{topic}-value at --schema-registry-url: {type(exc).__name__}: {str(exc)[:300]}") from None
    return encode


def start_producer(bootstrap: str, settings, events: int, delete_rate: float, seed: int) -> threading.Event:
    done = threading.Event()
    stream = synthetic_stream(events, settings.dim, delete_rate, seed)
    encode = event_encoder(settings)
    thread = threading.Thread(target=produce, args=(bootstrap, settings.input_topics[0], stream, done, encode),
                              name="demo-producer", daemon=True)
    thread.start()
    return done


def new_state_dir() -> str:
    return tempfile.mkdtemp(prefix="olu-demo-state-")

