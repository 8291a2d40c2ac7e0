"""``olu-worker demo``: the whole worker on embedded defaults, nothing to set up.

librdkafka's mock cluster stands in for Kafka (topics auto-create with 4 partitions), a temporary
directory is the object store, and a background producer writes a synthetic stream with
deletions and a few poison records. The worker itself is the production code path.
"""

from __future__ import annotations

import tempfile
import threading

import numpy as np
import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

POISON_EVERY = 997  # a malformed record now and then, to show the dead-letter path


def mock_cluster() -> tuple[AdminClient, str]:
    """Start librdkafka's in-process mock cluster; the holder keeps it alive."""
    holder = AdminClient({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = holder.list_topics(timeout=10).brokers.values()
    return holder, ",".join(f"{b.host}:{b.port}" for b in brokers)


def synthetic_events(n: int, dim: int, delete_rate: float, seed: int):
    """(key, value) pairs: inserts of a noisy linear rule, deletes of earlier ids, some poison."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim)
    inserted: list[str] = []
    for j in range(n):
        if j and j % POISON_EVERY == 0:
            yield b"poison-%d" % j, b'{"op": "insert", "id": "poison-%d", "x": "not a vector"}' % j
        elif inserted and rng.random() < delete_rate:
            victim = inserted[int(rng.integers(len(inserted)))]
            yield victim.encode(), orjson.dumps({"op": "delete", "id": victim})
        else:
            x = rng.normal(size=dim)
            x /= max(1.0, float(np.linalg.norm(x)))
            y = 1 if float(x @ w) + 0.3 * rng.normal() >= 0 else 0
            rid = f"r-{j}"
            inserted.append(rid)
            yield rid.encode(), orjson.dumps({"op": "insert", "id": rid, "x": x.round(6).tolist(), "y": y})


def produce(bootstrap: str, topic: str, events, done: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for k, (key, value) in enumerate(events):
        producer.produce(topic, key=key, value=value)
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


def start_producer(bootstrap: str, settings, events: int, delete_rate: float, seed: int) -> threading.Event:
    done = threading.Event()
    stream = synthetic_events(events, settings.dim, delete_rate, seed)
    thread = threading.Thread(target=produce, args=(bootstrap, settings.input_topics[0], stream, done),
                              name="demo-producer", daemon=True)
    thread.start()
    return done


def new_state_dir() -> str:
    return tempfile.mkdtemp(prefix="olu-demo-state-")

