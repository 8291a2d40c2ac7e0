"""Schema Registry decoding without a registry server: confluent-kafka's mock registry client.

Every verdict of worker/formats/input.py (the end-to-end tests with the real registry are in
test_worker_kafka_registry.py), the field mapping, transcoding a batch, and the release schemas.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Message
from confluent_kafka.schema_registry import SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from worker.formats.events import event_serializer
from worker.formats.exceptions import RegistryUnavailable, UndecodableRecord
from worker.formats.input import InputDecoder, Transcoded, transcode
from worker.formats.registry import classify
from worker.formats.release import avro_schema, release_json_schema
from worker.stream.exceptions import DeadLetter
from worker.stream.input.framed import decode_message, original

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "events"
INSERT = {"op": "insert", "id": "r-1", "x": [0.5, -1.0], "y": 1.0}


@pytest.fixture
def client():
    from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
        MockSchemaRegistryClient,
    )

    return MockSchemaRegistryClient({"url": "mock://formats"})


@pytest.mark.parametrize("fmt", ["avro", "json-schema", "protobuf"])
def test_each_format_decodes_to_the_json_event(client, fmt):
    serialize = event_serializer(fmt, client)
    decoder = InputDecoder(fmt, client)
    assert orjson.loads(decoder.decode(TOPIC, b"r-1", serialize(INSERT, TOPIC))) == INSERT
    for delete in ({"op": "delete", "id": "r-1"}, {"op": "delete", "ids": ["r-1", "r-2"], "ts": 7},
                   {"op": "delete", "subject": "s-1", "request_id": "DSR-1"},
                   {"op": "delete", "id": "r-1", "request_id": "DSR-2"}):
        assert orjson.loads(decoder.decode(TOPIC, b"s-1", serialize(delete, TOPIC))) == delete


@pytest.mark.parametrize("value,reason", [
    (b'{"op":"insert"}', "not_framed"),
    (b"\x00\x00", "not_framed"),
    (b"\x00\x00\x00\x30\x39" + b"\x02", "unknown_schema"),
])
def test_framing_verdicts(client, value, reason):
    with pytest.raises(UndecodableRecord) as caught:
        InputDecoder("avro", client).decode(TOPIC, b"r-1", value)
    assert caught.value.reason == reason


def test_payload_and_schema_verdicts(client):
    serialize = event_serializer("avro", client)
    decoder = InputDecoder("avro", client)
    good = serialize(INSERT, TOPIC)
    renamed = InputDecoder("avro", client, fields={"id": "user"})
    for target, value, reason in [(decoder, good[:8], "not_decodable"),
                                  (decoder, serialize({**INSERT, "x": [float("nan"), 0.0]}, TOPIC), "non_finite"),
                                  (renamed, good, "schema_mismatch")]:
        with pytest.raises(UndecodableRecord) as caught:
            target.decode(TOPIC, b"r-1", value)
        assert caught.value.reason == reason
    with pytest.raises(UndecodableRecord, match="oversized"):
        InputDecoder("avro", client, max_bytes=10).decode(TOPIC, b"r-1", good)
    wide = {**INSERT, "x": [0.1234567890123456, -0.9876543210987654] * 4}  # 8 bytes a double, 19 in JSON
    framed = serialize(wide, TOPIC)
    json_form = len(b"r-1") + len(orjson.dumps(wide))
    assert len(b"r-1") + len(framed) < json_form - 1  # Avro is smaller than the JSON it becomes
    with pytest.raises(UndecodableRecord) as caught:  # framed under the limit, its JSON form over it
        InputDecoder("avro", client, max_bytes=json_form - 1).decode(TOPIC, b"r-1", framed)
    assert caught.value.reason == "oversized" and "JSON form" in caught.value.detail
    assert InputDecoder("avro", client, max_bytes=json_form).decode(TOPIC, b"r-1", framed) == orjson.dumps(wide)


def test_json_schema_violation_names_no_value(client):
    good = event_serializer("json-schema", client)(INSERT, TOPIC)
    bad = good[:5] + b'{"op":"insert","id":777}'
    with pytest.raises(UndecodableRecord) as caught:
        InputDecoder("json-schema", client).decode(TOPIC, b"r-1", bad)
    assert caught.value.reason == "schema_violation" and "777" not in caught.value.detail


def test_mapping_renames_and_named_features(client):
    schema = json.dumps({"type": "record", "name": "Click", "fields": [
        {"name": "action", "type": "string"}, {"name": "user", "type": "string"},
        {"name": "age", "type": ["null", "double"]}, {"name": "score", "type": ["null", "double"]},
        {"name": "clicked", "type": ["null", "long"]}]})
    value = AvroSerializer(client, schema)({"action": "insert", "user": "u-1", "age": 0.25, "score": -0.5,
                                            "clicked": 1}, SerializationContext(TOPIC, MessageField.VALUE))
    decoder = InputDecoder("avro", client, fields={"op": "action", "id": "user", "y": "clicked"},
                           feature_fields=("age", "score"))
    assert orjson.loads(decoder.decode(TOPIC, b"u-1", value)) == {"op": "insert", "id": "u-1", "x": [0.25, -0.5],
                                                                   "y": 1}


def test_registry_errors_are_sorted_out():
    assert isinstance(classify(ConnectionRefusedError("refused")), RegistryUnavailable)
    assert isinstance(classify(SchemaRegistryError(503, 50301, "down")), RegistryUnavailable)
    assert isinstance(classify(SchemaRegistryError(401, 40101, "who")), RegistryUnavailable)
    assert classify(SchemaRegistryError(404, 40403, "no such id")).reason == "unknown_schema"
    other = KeyError("x")
    assert classify(other) is other


def test_transcode_keeps_the_original_and_stops_where_the_registry_is_needed(client):
    good = event_serializer("avro", client)(INSERT, TOPIC)
    batch = [Message(topic=TOPIC, key=b"r-1", value=good), Message(topic=TOPIC, key=b"r-1", value=None),
             Message(topic=TOPIC, key=b"r-1", value=b"junk"), Message(topic=TOPIC, key=b"r-1", value=good)]
    decoded, stop, error = transcode(InputDecoder("avro", client), batch)
    assert stop is None and error is None and len(decoded) == 4
    assert decoded[1] is batch[1]  # a tombstone stays as it is
    assert original(decoded[2]) is batch[2] and decoded[2].dead.reason == "not_framed"
    with pytest.raises(DeadLetter) as caught:
        decode_message(decoded[2], dim=2, max_bytes=4096)
    assert caught.value.reason == "not_framed"
    assert decode_message(decoded[0], dim=2, max_bytes=4096).x == [0.5, -1.0]

    class Down(InputDecoder):
        calls = 0

        def decode(self, topic, key, value):
            Down.calls += 1
            if Down.calls == 3:
                raise RegistryUnavailable("down")
            return super().decode(topic, key, value)

    decoded, stop, error = transcode(Down("avro", client), [batch[0]] * 4)
    assert (len(decoded), stop, isinstance(error, RegistryUnavailable)) == (2, 2, True)
    assert isinstance(decoded[0], Transcoded)


def test_packaged_release_schema_is_the_repository_one():
    spec = json.loads(release_json_schema())
    assert spec == json.loads((ROOT / "schemas/release.schema.json").read_text()), \
        "copy schemas/release.schema.json to worker/formats/release.schema.json"
    avro = json.loads(avro_schema())
    assert [f["name"] for f in avro["fields"]] == list(spec["properties"])
    privacy = next(f for f in avro["fields"] if f["name"] == "privacy")["type"]
    assert [f["name"] for f in privacy["fields"]] == list(spec["properties"]["privacy"]["properties"])


def test_packaged_receipt_schema_is_the_repository_one():
    from worker.formats.release import json_schema

    assert json.loads(json_schema("receipt")) == json.loads((ROOT / "schemas/receipt.schema.json").read_text()), \
        "copy schemas/receipt.schema.json to worker/formats/receipt.schema.json"
