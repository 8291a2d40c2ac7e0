"""The documented insert/delete event in each registry format, for producers (demo, benches, tests).

One schema describes both events (a subject holds one schema): ``op``; ``id`` for an insert and a
delete of one record; ``ids`` (optional) for a deletion request naming several records, with no
``id`` (null in Avro, unset "" in Protobuf, absent in JSON Schema), as in
schemas/delete.schema.json; ``x`` and ``y`` only for inserts (null, or empty for Protobuf's repeated
fields, in deletes); ``ts`` optional; ``subject`` (a delete forgetting the record's key) and
``request_id`` optional (null in Avro, unset "" in Protobuf, absent in JSON Schema). The schemas
only type the fields: the worker checks the values (how many ids, distinct, each id's length,
``x``'s dimension) with the JSON checks, so each mistake gets the dead-letter reason it gets in
JSON.
:func:`event_serializer` returns ``serialize(event dict, topic) -> framed bytes`` with
confluent-kafka's serializer, registering the schema under ``{topic}-value`` on first use.
"""

from __future__ import annotations

import json

from confluent_kafka.serialization import MessageField, SerializationContext

__all__ = ["EVENT_AVRO_SCHEMA", "EVENT_JSON_SCHEMA", "event_serializer"]

EVENT_AVRO_SCHEMA = json.dumps({
    "type": "record", "name": "Event", "namespace": "olu",
    "fields": [
        {"name": "op", "type": "string"},
        {"name": "id", "type": ["null", "string"], "default": None},
        {"name": "x", "type": ["null", {"type": "array", "items": "double"}], "default": None},
        {"name": "y", "type": ["null", "double"], "default": None},
        {"name": "ts", "type": ["null", "long"], "default": None},
        {"name": "ids", "type": ["null", {"type": "array", "items": "string"}], "default": None},
        {"name": "subject", "type": ["null", "string"], "default": None},
        {"name": "request_id", "type": ["null", "string"], "default": None},
    ],
})

EVENT_JSON_SCHEMA = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "olu.events event",
    "type": "object",
    "required": ["op"], "additionalProperties": False,
    "properties": {
        "op": {"enum": ["insert", "delete"]},
        "id": {"type": "string", "minLength": 1, "maxLength": 256},
        "x": {"type": "array", "items": {"type": "number"}},
        "y": {"type": "number"},
        "ts": {"type": "integer", "minimum": 0},
        "ids": {"type": "array", "items": {"type": "string"}},
        "subject": {"type": "string"},
        "request_id": {"type": "string"},
    },
})


def event_serializer(fmt: str, client):
    """``serialize(event, topic)`` in ``fmt`` (avro, json-schema, protobuf) with ``client``."""
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        inner = AvroSerializer(client, EVENT_AVRO_SCHEMA)
        convert = lambda e: {"id": None, "x": None, "y": None, "ts": None, "ids": None,
                             "subject": None, "request_id": None, **e}  # noqa: E731
    elif fmt == "json-schema":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        inner = JSONSerializer(EVENT_JSON_SCHEMA, client)
        convert = dict
    elif fmt == "protobuf":
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        from .protobuf import event_class

        cls = event_class()
        inner = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
        convert = lambda e: cls(**e)  # noqa: E731
    else:
        raise ValueError(f"format must be avro, json-schema or protobuf, got {fmt!r}")

    def serialize(event: dict, topic: str) -> bytes:
        return inner(convert(event), SerializationContext(topic, MessageField.VALUE))

    return serialize
