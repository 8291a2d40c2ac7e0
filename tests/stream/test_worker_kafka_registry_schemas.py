"""Schemas that change and schemas that import: the real broker and the real registry (Apicurio).

1. Schema evolution in each format: half the stream under the event schema, half under a second
   version with a field added (with a default), in one topic, read by one worker that never
   restarts: the JSON stream's releases, bit for bit, and no dead letter. (Avro and JSON Schema:
   the second version under the topic's subject, accepted by the registry's BACKWARD check.)
2. Protobuf schemas that import: one importing a well-known type (google/protobuf/timestamp.proto,
   from the runtime's own pool) and one importing a file registered in the registry as its
   reference (fetched by subject and version): the JSON stream's releases.
"""

from __future__ import annotations

import json

import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass

from tests.stream.kafka_harness import KafkaRun, event_stream, read_topic
from tests.stream.test_worker_kafka_registry import SAME, _framed, _new_run, _produce, _releases
from worker.formats.events import EVENT_AVRO_SCHEMA, EVENT_JSON_SCHEMA, event_serializer
from worker.formats.protobuf import event_file

pytestmark = [pytest.mark.kafka, pytest.mark.registry]


def _runs(kafka_run, prefix: str, name: str, registry_url: str, fmt: str) -> tuple[KafkaRun, KafkaRun]:
    """The JSON stream's run (``{prefix}-json-{name}``) and the ``fmt`` stream's (``{prefix}-{name}``)."""
    return (_new_run(kafka_run, f"{prefix}-json-{name}"),
            _new_run(kafka_run, f"{prefix}-{name}", OLU_INPUT_FORMAT=fmt, OLU_RELEASE_FORMAT="avro",
                     OLU_SCHEMA_REGISTRY_URL=registry_url))


def _run(run: KafkaRun, registry_url, records):
    """One worker over ``records`` (already produced); its releases up to the end."""
    proc = run.worker().start()
    end = run.end_offsets()[0]
    assert end == len(records)
    releases = _releases(run.bootstrap, run.topics.params, registry_url, end)
    assert proc.terminate() == 0
    assert not read_topic(run.bootstrap, run.topics.dlq), f"{run.group}: dead letters"
    return releases, end


def _same(ours: dict, theirs: dict, end: int) -> None:
    assert end in ours and end in theirs
    assert [v for v, r in ours.items() if r["trigger"] == "deletion"] == \
        [v for v, r in theirs.items() if r["trigger"] == "deletion"]
    for version in sorted(set(ours) & set(theirs)):
        assert {k: ours[version].get(k) for k in SAME} == {k: theirs[version].get(k) for k in SAME}, version


# ------------------------------------------------------------------------------ evolution
def _second_version(fmt: str, client):
    """``serialize(event, topic)`` under the event schema with a field ``source`` added (a default)."""
    ctx = lambda topic: SerializationContext(topic, MessageField.VALUE)  # noqa: E731
    if fmt == "avro":
        schema = orjson.loads(EVENT_AVRO_SCHEMA)
        schema["fields"].insert(2, {"name": "source", "type": "string", "default": "web"})
        inner = AvroSerializer(client, json.dumps(schema))
        blank = {"id": None, "x": None, "y": None, "ts": None, "ids": None}
        return lambda e, topic: inner({**blank, **e, "source": "app"}, ctx(topic))
    if fmt == "json-schema":
        schema = orjson.loads(EVENT_JSON_SCHEMA)
        schema["properties"]["source"] = {"type": "string", "default": "web"}
        inner = JSONSerializer(json.dumps(schema), client)
        return lambda e, topic: inner({**e, "source": "app"}, ctx(topic))
    cls = _event_message("olu/v2/event.proto", extra=lambda msg, F: msg.field.add(
        name="source", number=9, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL))
    # Apicurio 3.0.9 cannot check a second serialized descriptor against the first under one subject
    # (its .proto parser reads the stored base64): the second version goes under a subject of its
    # own. For the worker it is the same: a second writer schema id in the topic.
    inner = ProtobufSerializer(cls, client, {"use.deprecated.format": False,
                                             "subject.name.strategy": lambda ctx, name: f"{ctx.topic}-value-v2"})
    return lambda e, topic: inner(cls(**e, source="app"), ctx(topic))


@pytest.mark.parametrize("fmt", ["avro", "json-schema", "protobuf"])
def test_a_field_added_with_a_default_is_read_without_a_restart(kafka_bootstrap, kafka_run, schema_registry_url, fmt):
    client = SchemaRegistryClient({"url": schema_registry_url})
    records = event_stream(300, seed=31, delete_rate=0.1)
    json_run, framed_run = _runs(kafka_run, "evo", fmt, schema_registry_url, fmt)
    json_topics, framed_topics = json_run.topics, framed_run.topics
    _produce(kafka_bootstrap, json_topics.input, records)
    half = len(records) // 2
    first = _framed(records[:half], event_serializer(fmt, client), framed_topics.input)
    second = _framed(records[half:], _second_version(fmt, client), framed_topics.input)
    assert first[0][1][1:5] != second[-1][1][1:5]  # two schema ids in one topic
    _produce(kafka_bootstrap, framed_topics.input, first + second)
    expected, end = _run(json_run, schema_registry_url, records)
    got, _ = _run(framed_run, schema_registry_url, records)
    _same(got, expected, end)
    assert expected[end]["t"] > 200 and expected[end]["deletions"] > 10


# ------------------------------------------------------------------------------- imports
def _event_message(name: str, *, extra=None, imports=(), pool=None):
    """The event message (olu.v1.Event's fields) in a file ``name``, with more fields added by
    ``extra(msg, FieldDescriptorProto)``, importing ``imports``."""
    package = name.rsplit("/", 1)[0].replace("/", ".")
    fdp = event_file(name, package)
    fdp.dependency.extend(imports)
    if extra is not None:
        extra(fdp.message_type[0], descriptor_pb2.FieldDescriptorProto)
    pool = pool or descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return GetMessageClass(pool.FindMessageTypeByName(f"{package}.Event"))


def _with_timestamp():
    from google.protobuf import timestamp_pb2

    pool = descriptor_pool.DescriptorPool()
    known = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(known)
    pool.Add(known)
    return _event_message("olu/wkt/event.proto", imports=["google/protobuf/timestamp.proto"], pool=pool,
                          extra=lambda msg, F: msg.field.add(name="at", number=9, type=F.TYPE_MESSAGE,
                                                             label=F.LABEL_OPTIONAL,
                                                             type_name=".google.protobuf.Timestamp"))


def _with_reference():
    pool = descriptor_pool.DescriptorPool()
    common = descriptor_pb2.FileDescriptorProto(name="olu/common/channel.proto", package="olu.common",
                                                syntax="proto3")
    enum = common.enum_type.add(name="Channel")
    for number, value in enumerate(("CHANNEL_UNSET", "WEB", "APP")):
        enum.value.add(name=value, number=number)
    pool.Add(common)
    return _event_message("olu/ref/event.proto", imports=["olu/common/channel.proto"], pool=pool,
                          extra=lambda msg, F: msg.field.add(name="channel", number=9, type=F.TYPE_ENUM,
                                                             label=F.LABEL_OPTIONAL,
                                                             type_name=".olu.common.Channel"))


@pytest.mark.parametrize("kind", ["well-known type", "registry reference"])
def test_protobuf_schemas_that_import_other_files(kafka_bootstrap, kafka_run, schema_registry_url, kind):
    client = SchemaRegistryClient({"url": schema_registry_url})
    cls = _with_timestamp() if kind == "well-known type" else _with_reference()
    inner = ProtobufSerializer(cls, client, {"use.deprecated.format": False})

    def serialize(event: dict, topic: str) -> bytes:
        msg = cls(**event)
        if kind == "well-known type":
            msg.at.seconds = 1_700_000_000
        else:
            msg.channel = 2
        return inner(msg, SerializationContext(topic, MessageField.VALUE))

    records = event_stream(200, seed=32, delete_rate=0.1)
    name = "wkt" if kind == "well-known type" else "ref"
    json_run, framed_run = _runs(kafka_run, "imp", name, schema_registry_url, "protobuf")
    json_topics, framed_topics = json_run.topics, framed_run.topics
    _produce(kafka_bootstrap, json_topics.input, records)
    _produce(kafka_bootstrap, framed_topics.input, _framed(records, serialize, framed_topics.input))
    registered = client.get_latest_version(f"{framed_topics.input}-value").schema
    assert bool(registered.references) == (kind == "registry reference")
    expected, end = _run(json_run, schema_registry_url, records)
    got, _ = _run(framed_run, schema_registry_url, records)
    _same(got, expected, end)
