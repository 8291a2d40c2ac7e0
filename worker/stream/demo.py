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
import time
import uuid
import zlib

import numpy as np
import orjson
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ..exceptions import ConfigError
from ..kafka_log import client_logger
from ..olu import arith

POISON_EVERY = 997  # a malformed record now and then, to show the dead-letter path
DEMO_PRIVACY_UNIT = "per-request"


def mock_cluster() -> tuple[AdminClient, str]:
    """Start librdkafka's in-process mock cluster; the holder keeps it alive."""
    holder = AdminClient({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = holder.list_topics(timeout=10).brokers.values()
    return holder, ",".join(f"{b.host}:{b.port}" for b in brokers)


def _stream(n: int, dim: int, delete_rate: float, seed: int, poison_every: int, poison: bytes,
            insert):
    """(key, event) pairs: ``insert(rng, w)`` -> (record fields, label) for each insert, deletes of
    earlier ids, a ``poison`` record every ``poison_every`` events (0: none). ``w`` is the rule's
    ``dim`` weights, the generator's first draw (demo_scores.rule draws it alike)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim)
    inserted: list[str] = []
    for j in range(n):
        if poison_every and j and j % poison_every == 0:
            yield b"poison-%d" % j, poison % j
        elif inserted and rng.random() < delete_rate:
            victim = inserted[int(rng.integers(len(inserted)))]
            yield victim.encode(), {"op": "delete", "id": victim}
        else:
            fields, y = insert(rng, w)
            rid = f"r-{j}"
            inserted.append(rid)
            yield rid.encode(), {"op": "insert", "id": rid, **fields, "y": y}


def synthetic_stream(n: int, dim: int, delete_rate: float, seed: int,
                     poison_every: int = POISON_EVERY):
    """(key, event) pairs: inserts of a noisy linear rule, deletes of earlier ids, and a poison
    record every ``poison_every`` events (0: none). An event is a dict, or raw bytes (the poison
    records: JSON that no format's schema describes)."""
    def insert(rng, w):
        x = rng.normal(size=dim)
        x /= max(1.0, arith.norm(x))  # the same stream on every CPU (worker/olu/arith.py)
        return {"x": x.round(6).tolist()}, 1 if arith.dot(x, w) + 0.3 * rng.normal() >= 0 else 0

    return _stream(n, dim, delete_rate, seed, poison_every,
                   b'{"op": "insert", "id": "poison-%d", "x": "not a vector"}', insert)


def named_record(spec, rng) -> dict:
    """A record of the spec's named fields, as an application would send it: numbers around and a
    little past their declared ranges, booleans, categories including ones the vocabulary lacks,
    open-ended strings for hashed fields, optional fields sometimes absent."""
    out: dict = {}
    for f in spec.fields:
        if f.optional and rng.random() < 0.1:
            continue
        if f.kind == "numeric":
            if f.scale_from_range:
                width = f.high - f.low
                out[f.name] = round(float(rng.uniform(f.low - 0.05 * width, f.high + 0.05 * width)),
                                    4)
            else:
                out[f.name] = round(float(rng.normal(f.center, f.scale)), 4)
        elif f.kind == "boolean":
            out[f.name] = bool(rng.random() < 0.5)
        elif f.kind == "categorical":
            k = int(rng.integers(len(f.vocabulary) + 1))
            out[f.name] = (f.vocabulary[k] if k < len(f.vocabulary)
                           else f"unlisted-{int(rng.integers(5))}")
        else:
            out[f.name] = f"{f.name}-{int(rng.zipf(1.6)) % 500}"
    return out


def synthetic_named_stream(n: int, spec, delete_rate: float, seed: int,
                           poison_every: int = POISON_EVERY):
    """:func:`synthetic_stream` with named fields under the feature spec ``spec``: the label is the
    noisy linear rule of the vector the spec makes of each record (demo_scores.rule, same draw)."""
    from ..features.transform import vectorize

    def insert(rng, w):
        record = named_record(spec, rng)
        return record, 1 if arith.dot(vectorize(spec, record)[0],
                                      w) + 0.3 * rng.normal() >= 0 else 0

    return _stream(n, spec.dim, delete_rate, seed, poison_every,
                   b'{"op": "insert", "id": "poison-%d", "y": "not a label"}', insert)


def synthetic_events(n: int, dim: int, delete_rate: float, seed: int):
    """:func:`synthetic_stream` as (key, JSON value) pairs, the worker's own wire format."""
    for key, event in synthetic_stream(n, dim, delete_rate, seed):
        yield key, event if isinstance(event, bytes) else orjson.dumps(event)


def partition_of(key: bytes, partitions: int) -> int:
    """librdkafka's default placement of a keyed record (CRC-32 of the key): the demo names it, so
    its plain-OGD yardstick sees each partition's events as the worker does."""
    return zlib.crc32(key) % partitions


#: The producer stays at most this many events ahead of the worker: librdkafka's mock cluster keeps
#: a bounded log per partition and drops its oldest records when a producer races ahead, and the
#: consumer then resumes past them (a run once stopped at 190,000 of 400,000 events, zero lag).
AHEAD_LIMIT = 20_000


def produce(client: str | dict, topic: str, events, done: threading.Event, encode=None, *,
            partitions: int | None = 1, observe=None, consumed=None) -> None:
    """Write ``events`` (key, dict or bytes) to ``topic``'s ``partitions`` (each event's
    ``observe(partition, event)`` first); ``encode(event, topic)`` serializes a dict (default:
    JSON), None is a tombstone; ``partitions=None`` leaves placement to the client's partitioner.
    ``client`` is the bootstrap address or a producer configuration. A
    full local queue waits for deliveries instead of dropping the event; ``done.failed`` holds the
    first delivery error, ``done.sent`` the count handed to the producer."""
    encode = encode or (lambda event, _topic: orjson.dumps(event))
    config = {"bootstrap.servers": client} if isinstance(client, str) else dict(client)
    producer = Producer({"linger.ms": 5, "log_level": 3, **config, "logger": client_logger()})
    errors: list = []
    done.sent = 0

    def delivered(err, _msg):
        if err is not None and not errors:
            errors.append(err)

    try:
        # a bad event raised by ``events`` or ``encode`` stops
        # here, after what went before it is sent
        for k, (key, event) in enumerate(events):
            while consumed is not None and k - consumed() > AHEAD_LIMIT:
                producer.poll(0.01)  # wait for the worker to catch up (and serve delivery reports)
            placement = {} if partitions is None else {"partition": partition_of(key, partitions)}
            if observe is not None:
                observe(placement.get("partition"), event)
            value = event if event is None or isinstance(event, bytes) else encode(event, topic)
            while True:
                try:
                    producer.produce(topic, key=key, value=value, on_delivery=delivered,
                                     **placement)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it, then retry
                    producer.poll(0.05)
            done.sent += 1
            producer.poll(0)
    finally:
        remaining = producer.flush(60)
        done.failed = errors[0] if errors else (f"{remaining} events undelivered" if remaining
                                                else None)
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
        # Each deletion request protected alone: on the demo's stream (1% single-record deletes)
        # its released models stay within a few points of plain OGD, where all-deletions (every
        # deleted record protected together) trails it by about 30 (the summary shows both).
        "OLU_PRIVACY_UNIT": DEMO_PRIVACY_UNIT,
    }


def own_names() -> dict[str, str]:
    """A group and topics of this run's own, for a demo on a real broker."""
    run = f"olu-demo-{uuid.uuid4().hex[:8]}"
    return {"OLU_GROUP_ID": run, "OLU_INPUT_TOPICS": f"{run}.events",
            "OLU_PARAMS_TOPIC": f"{run}.params",
            "OLU_DLQ_TOPIC": f"{run}.events.dlq"}


def create_topics(bootstrap: str, settings, partitions: int = 4) -> None:
    """The demo's topics on a real broker (which may not create topics on first use)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3, "logger": client_logger()})
    wanted = [NewTopic(settings.input_topics[0], num_partitions=partitions, replication_factor=-1),
              NewTopic(settings.params_topic, num_partitions=1, replication_factor=-1),
              NewTopic(settings.dlq_topic, num_partitions=1, replication_factor=-1)]
    for topic, future in admin.create_topics(wanted, request_timeout=15).items():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ConfigError(f"the demo could not create topic {topic!r} on {bootstrap}: "
                                  f"{exc.args[0].str()}") from None
        except Exception as exc:  # the broker did not answer
            raise ConfigError(f"the demo could not create topic {topic!r} on {bootstrap}: "
                              f"{type(exc).__name__} {exc}") from None


def partition_summary(worker) -> dict:
    return {f"{t}/{p}": row for (t, p), row in sorted(worker.final_state.items())}


def check_format(input_format: str, registry_url: str | None) -> None:
    """Fail before anything starts: a registry format needs a registry (there is none embedded)."""
    if input_format != "json" and not registry_url:
        raise ConfigError(
            f"the demo with --input-format {input_format} needs a Schema Registry: pass "
            "--schema-registry-url (or OLU_SCHEMA_REGISTRY_URL), e.g. the one `.venv/bin/python -m "
            "worker.devtools.registry_local` starts and prints")


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
        raise ConfigError(
            f"--input-format {settings.input_format}: could not register the event schema under "
            f"{topic}-value at --schema-registry-url: {type(exc).__name__}: "
            f"{str(exc)[:300]}") from None
    return encode


def input_partitions(bootstrap: str, topic: str, timeout: float = 20.0) -> int:
    """The partition count of the demo's input topic, created on first mention (the mock cluster
    auto-creates topics with 4 partitions)."""
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "logger": client_logger()})
    deadline = time.monotonic() + timeout
    while True:
        found = producer.list_topics(topic, timeout=5).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return len(found.partitions)
        if time.monotonic() > deadline:
            raise ConfigError(
                f"the demo's input topic {topic!r} did not appear within {timeout:.0f} s "
                f"({found.error if found is not None else 'no metadata'})")
        time.sleep(0.1)


def start_producer(bootstrap: str, settings, events: int, delete_rate: float, seed: int,
                   partitions: int,
                   observe=None, consumed=None) -> threading.Event:
    """Produce the synthetic stream to the input topic's ``partitions`` in the background; the
    returned event is set when it is all delivered (``.failed``: None, or why not).
    ``observe(partition, event)`` sees each event."""
    done = threading.Event()
    done.failed = None
    topic = settings.input_topics[0]
    stream = (synthetic_stream(events, settings.dim, delete_rate, seed)
              if settings.feature_spec is None
              else synthetic_named_stream(events, settings.feature_spec, delete_rate, seed))
    encode = event_encoder(settings)
    thread = threading.Thread(target=produce, args=(bootstrap, topic, stream, done, encode),
                              kwargs={"partitions": partitions, "observe": observe,
                                      "consumed": consumed},
                              name="demo-producer",
                              daemon=True)
    thread.start()
    return done


def new_state_dir() -> str:
    return tempfile.mkdtemp(prefix="olu-demo-state-")

