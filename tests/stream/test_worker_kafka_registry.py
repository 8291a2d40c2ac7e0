"""Schema Registry formats end to end: the real broker, a real registry (Apicurio's Confluent API).

1. The same stream produced with confluent-kafka's Avro, JSON Schema and Protobuf serializers gives
   the JSON stream's releases bit for bit (same versions, weights, counters; noise-free ``retrain``,
   so every deletion is exact); releases published as Avro / JSON Schema are read by a plain
   ``DeserializingConsumer`` and by ``ParamsSubscriber``. Deletion requests naming several records
   (``ids``) give the JSON stream's releases too, their ``request`` objects included.
2. Every bad framed record is dead-lettered with its reason, the original bytes whole; the valid
   records around it are all learned.
3. A registry outage of 30 s pauses the partition and loses nothing: no dead letter, every record
   learned after it comes back.
"""

from __future__ import annotations

import time
import uuid

import numpy as np
import orjson
import pytest
from confluent_kafka import DeserializingConsumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.infra.schema_samples import decode_headers
from tests.stream.kafka_harness import (
    DIM,
    KafkaRun,
    WorkerProcess,
    event_stream,
    read_topic,
    wait_for,
)
from tests.stream.subjects import subject_stream
from worker.client import ParamsSubscriber
from worker.formats.events import EVENT_AVRO_SCHEMA, event_serializer
from worker.formats.release import ReleaseReader

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

FORMATS = ("avro", "json-schema", "protobuf")
RELEASE_FORMAT = {"avro": "avro", "json-schema": "json-schema", "protobuf": "avro"}
# Everything in a release but the input topic's name and released_at (Kafka timestamps of the input)
SAME = ("version", "offset", "t", "deletions", "epoch", "algorithm", "loss", "dim", "weights", "privacy", "model")


def _new_run(kafka_run, name: str, **extra) -> KafkaRun:
    return kafka_run(f"g-{name}", OLU_ALGORITHM="retrain", OLU_MODEL_NAME="m", OLU_RELEASE_EVERY_SECONDS="0.5",
                     # one release per deletion: the formats batch differently, and the test
                     # compares every deletion's own release across them
                     OLU_RELEASE_EVERY_EVENTS="100", OLU_DELETION_RELEASES="each", **extra)


def _framed(records, serialize, topic: str) -> list:
    """The JSON stream's records with each value re-encoded by ``serialize`` (tombstones stay)."""
    return [(key, None if value is None else serialize(orjson.loads(value), topic), kind)
            for key, value, kind in records]


def _produce(bootstrap: str, topic: str, records) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "log_level": 3})
    for key, value, *_ in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def _releases(bootstrap: str, topic: str, registry_url: str, end: int, timeout: float = 120.0) -> dict[int, dict]:
    """Every release version (JSON or framed) by version, once the one at ``end`` is there."""
    with ParamsSubscriber(bootstrap, topic, schema_registry=registry_url) as sub:
        seen: dict[int, dict] = {}

        def caught_up():
            for release in sub.poll(0.5):
                seen[release.version] = release.to_dict()
            return end in seen
        wait_for(caught_up, timeout, f"the release at offset {end} on {topic}")
        assert sub.stats["invalid"] == 0, sub.stats
        return seen


def _run_each_format(kafka_run, registry_url: str, records, name: str):
    """Each format's worker on ``records`` (re-encoded), and the releases of each up to the end:
    ``(topics by format, releases by format, end offset)``; no dead letters in any format."""
    client = SchemaRegistryClient({"url": registry_url})
    runs: dict[str, tuple[KafkaRun, WorkerProcess]] = {}
    for fmt in ("json", *FORMATS):
        extra = {} if fmt == "json" else {"OLU_INPUT_FORMAT": fmt, "OLU_RELEASE_FORMAT": RELEASE_FORMAT[fmt],
                                          "OLU_SCHEMA_REGISTRY_URL": registry_url}
        run = _new_run(kafka_run, f"{name}-{fmt.replace('-', '')}", **extra)
        framed = records if fmt == "json" else _framed(records, event_serializer(fmt, client), run.topics.input)
        _produce(run.bootstrap, run.topics.input, framed)
        runs[fmt] = (run, run.worker(f"{name}-{fmt}.log").start())
    end = runs["json"][0].end_offsets()[0]
    assert end == len(records)
    got = {fmt: _releases(run.bootstrap, run.topics.params, registry_url, end) for fmt, (run, _) in runs.items()}
    for _, proc in runs.values():
        assert proc.terminate() == 0
    for fmt, (run, _) in runs.items():
        assert not read_topic(run.bootstrap, run.topics.dlq), f"{fmt}: dead letters"
    return {fmt: run.topics for fmt, (run, _) in runs.items()}, got, end


def _same_part(key: str, value):
    """What must agree between the runs: a request's derived id names its run's own input topic."""
    if key == "request" and value is not None:
        return {k: v for k, v in value.items() if k != "request_id"}
    return value


def _assert_same_releases(got: dict, end: int, keys=SAME) -> list[int]:
    """Every format's releases are the JSON run's (``keys`` and the weights bit for bit); returns
    the versions of the deletion releases."""
    expected = got["json"]
    deletions = [v for v, r in expected.items() if r["trigger"] == "deletion"]
    for fmt in FORMATS:
        assert [v for v, r in got[fmt].items() if r["trigger"] == "deletion"] == deletions, fmt
        common = sorted(set(got[fmt]) & set(expected))
        assert end in common and set(deletions) <= set(common)
        for version in common:
            ours, theirs = got[fmt][version], expected[version]
            assert {k: _same_part(k, ours.get(k)) for k in keys} == \
                {k: _same_part(k, theirs.get(k)) for k in keys}, (fmt, version)
            assert np.array_equal(np.array(ours["weights"]).view(np.uint64),
                                  np.array(theirs["weights"]).view(np.uint64)), (fmt, version)
    return deletions


def test_every_format_gives_the_json_streams_releases(kafka_bootstrap, kafka_run, schema_registry_url):
    client = SchemaRegistryClient({"url": schema_registry_url})
    records = event_stream(400, seed=24, delete_rate=0.1)
    topics_of, got, end = _run_each_format(kafka_run, schema_registry_url, records, "one")
    deletions = _assert_same_releases(got, end)
    assert got["json"][end]["deletions"] > 10 and len(deletions) > 10 and got["json"][end]["t"] > 300

    # a registry-aware consumer that knows nothing of olu-worker reads the Avro releases
    topics = topics_of["avro"]
    framed = read_topic(kafka_bootstrap, topics.params)
    assert framed and all(r.value[0] == 0 for r in framed)
    ctx = SerializationContext(topics.params, MessageField.VALUE)
    plain = [AvroDeserializer(client)(r.value, ctx) for r in framed]
    assert {p["version"]: p["weights"] for p in plain} == {v: got["avro"][v]["weights"] for v in got["avro"]}
    consumer = DeserializingConsumer({"bootstrap.servers": kafka_bootstrap, "group.id": uuid.uuid4().hex,
                                      "auto.offset.reset": "earliest", "value.deserializer": AvroDeserializer(client)})
    consumer.subscribe([topics.params])
    try:
        msg = wait_for(lambda: consumer.poll(0.5), 30, "a release through DeserializingConsumer")
        assert msg.value()["weights"] == got["avro"][msg.value()["version"]]["weights"]
    finally:
        consumer.close()


def test_requests_naming_several_records_are_honoured_in_every_format(kafka_bootstrap, kafka_run,
                                                                     schema_registry_url):
    """Deletes with ``ids`` (keyed by data subject) in Avro, JSON Schema and Protobuf: the JSON
    stream's releases, ``request`` object (ids, applied, not_applied, duplicates) included."""
    records = subject_stream(400, seed=25, subjects=6, delete_rate=0.12)
    assert sum(1 for _, v, _ in records if len(orjson.loads(v).get("ids", ())) > 1) > 5
    topics_of, got, end = _run_each_format(kafka_run, schema_registry_url, records, "ids")
    deletions = _assert_same_releases(got, end, keys=(*SAME, "request"))
    requests = [got["json"][v]["request"] for v in deletions]
    assert len(requests) > 5 and max(r["applied"] for r in requests) > 1
    assert any(r["not_applied"] for r in requests) and got["json"][end]["deletions"] > 10
    # each request's receipt, in the releases' format, reads back as the JSON run's
    reader = ReleaseReader(SchemaRegistryClient({"url": schema_registry_url}))
    receipts = {}
    for fmt, topics in topics_of.items():
        stored = read_topic(kafka_bootstrap, f"{topics.input}.receipts")
        assert stored and all((r.value[0] == 0) == (fmt != "json") for r in stored), fmt
        receipts[fmt] = {r.key: orjson.loads(r.value if fmt == "json" else
                                             reader.read(f"{topics.input}.receipts", r.value, "receipt"))
                         for r in stored}
    strip = lambda by_key: sorted(  # noqa: E731 (topic names and event times differ between runs)
        (k.split(b"@")[-1], {f: v for f, v in r.items() if f not in ("topic", "request_id", "released_at")})
        for k, r in by_key.items())
    for fmt in FORMATS:
        assert strip(receipts[fmt]) == strip(receipts["json"]), fmt


OTHER_SCHEMA = '{"type":"record","name":"Other","namespace":"olu.test","fields":[{"name":"op","type":"string"},' \
               '{"name":"id","type":"string"},{"name":"x","type":{"type":"array","items":"double"}}]}'


def test_bad_framed_records_are_dead_lettered_with_their_reason(kafka_bootstrap, kafka_run, schema_registry_url):
    client = SchemaRegistryClient({"url": schema_registry_url})
    run = _new_run(kafka_run, "bad", OLU_INPUT_FORMAT="avro", OLU_SCHEMA_REGISTRY_URL=schema_registry_url)
    topics = run.topics
    serialize = event_serializer("avro", client)
    good = [(f"g-{i}".encode(), serialize({"op": "insert", "id": f"g-{i}", "x": [0.1] * DIM, "y": 1.0},
                                           topics.input), "insert") for i in range(20)]
    valid = good[0][1]
    # a schema without y, registered under a subject of its own (the topic's would refuse it: BACKWARD)
    other = AvroSerializer(client, OTHER_SCHEMA, conf={"subject.name.strategy": lambda ctx, name: "olu-test-other"})
    poison = {
        "not_framed": b'{"op":"insert","id":"p-0","x":[0.1,0.1,0.1,0.1],"y":1}',
        "unknown_schema": b"\x00\x7f\xff\xff\xf0" + valid[5:],
        "not_decodable": valid[:9],
        "schema_mismatch": other({"op": "insert", "id": "p-3", "x": [0.1] * DIM},
                                 SerializationContext(topics.input, MessageField.VALUE)),
        "non_finite": serialize({"op": "insert", "id": "p-4", "x": [float("nan")] * DIM, "y": 1.0}, topics.input),
        "wrong_dimension": serialize({"op": "insert", "id": "p-5", "x": [0.1], "y": 1.0}, topics.input),
    }
    stream = []
    for i, (reason, value) in enumerate(poison.items()):
        stream += good[3 * i:3 * i + 3] + [(f"p-{i}".encode(), value, reason)]
    stream += good[3 * len(poison):]
    _produce(kafka_bootstrap, topics.input, stream)
    proc = run.worker("bad.log").start()
    releases = _releases(kafka_bootstrap, topics.params, schema_registry_url, len(stream))
    assert proc.terminate() == 0
    assert releases[len(stream)]["t"] == len(good)  # every valid record learned
    dead = read_topic(kafka_bootstrap, topics.dlq)
    by_reason = {decode_headers(list(r.headers.items()))["olu.error.reason"]: r for r in dead}
    assert set(by_reason) == set(poison)
    for reason, value in poison.items():
        assert by_reason[reason].value == value, reason  # the original bytes, whole


def test_a_registry_outage_pauses_and_loses_nothing(kafka_bootstrap, kafka_run, schema_registry_url, registry_proxy):
    client = SchemaRegistryClient({"url": schema_registry_url})
    run = _new_run(kafka_run, "outage", OLU_INPUT_FORMAT="avro", OLU_SCHEMA_REGISTRY_URL=registry_proxy.url)
    topics = run.topics
    serialize = event_serializer("avro", client)
    first = [r for r in event_stream(100, seed=7, prefix="a") if r[1] is not None]
    _produce(kafka_bootstrap, topics.input, _framed(first, serialize, topics.input))
    proc = run.worker("outage.log").start()
    try:
        _releases(kafka_bootstrap, topics.params, schema_registry_url, len(first))
        registry_proxy.cut()
        # a new schema version the worker has not cached: it has to ask the registry
        v2 = orjson.loads(EVENT_AVRO_SCHEMA)
        v2["fields"].append({"name": "source", "type": "string", "default": "web"})
        newer = AvroSerializer(client, orjson.dumps(v2).decode())
        second = [r for r in event_stream(100, seed=8, prefix="b") if r[1] is not None]
        framed = [(k, newer({"x": None, "y": None, "ts": None, "source": "app", **orjson.loads(v)},
                            SerializationContext(topics.input, MessageField.VALUE)), kind) for k, v, kind in second]
        _produce(kafka_bootstrap, topics.input, framed)
        wait_for(lambda: proc.log_lines("schema registry unavailable; partition paused, retrying with backoff"),
                 60, "the pause")
        time.sleep(30)
        proc.check_alive()
        assert not read_topic(kafka_bootstrap, topics.dlq), "a valid record was dead-lettered during the outage"
        registry_proxy.restore()
        end = len(first) + len(second)
        releases = _releases(kafka_bootstrap, topics.params, schema_registry_url, end, timeout=60)
        assert proc.log_lines("partition resumed to retry the schema registry")
        assert proc.terminate() == 0
    finally:
        registry_proxy.restore()
    inserts = sum(1 for r in first + second if r[2] == "insert")
    assert releases[end]["t"] + releases[end]["deletions"] >= inserts - 20  # learned, some later deleted
    assert not read_topic(kafka_bootstrap, topics.dlq)
