"""The generic readers of framed records: one registered schema's value into a dict of its fields.

One reader per format, each with the writer schema from the registry by the framing's id (cached
by the client) and a parsed form cached per id:

- Avro: fastavro's ``schemaless_reader`` with the writer schema (what confluent-kafka's
  ``AvroDeserializer`` calls, without its per-record walk for data-contract rules);
- JSON Schema: ``orjson`` (Python's ``json`` where orjson refuses, so that what the registry's
  serializer wrote, a ``NaN`` included, reads as before) and a jsonschema-rs validator compiled
  once per id (0.2-0.3 us a record against 20-90 us for the
  ``jsonschema`` package, bench/README.md);
- Protobuf: the message class built from the registered descriptor (protobuf.py), parsed by the
  runtime's C implementation, read into a dict by :func:`.mapping.message_dict`.

A schema with data-contract rules (which only confluent-kafka's deserializers execute) or, for
Avro and JSON Schema, references to other registered schemas, is read by confluent-kafka's
deserializer of the format, as before. Errors propagate; input.py sorts them into verdicts.
"""

from __future__ import annotations

import io
import json

import orjson

from .exceptions import UndecodableRecord
from .registry import classify

__all__ = ["READERS", "AvroReader", "JsonSchemaReader", "ProtobufReader", "has_rules"]


def has_rules(schema) -> bool:
    """Data-contract rules: only confluent-kafka's deserializers execute them, so they decide how a
    value reads, not the schema alone."""
    rules = schema.rule_set
    return rules is not None and bool(rules.domain_rules or rules.migration_rules
                                      or getattr(rules, "encoding_rules", None))


class _Reader:
    schema_type = ""
    fetch_format: str | None = None

    def __init__(self, client, conf: dict):
        self.client, self.conf = client, conf
        # schema id -> the parsed form, or None: confluent's deserializer
        self._parsed: dict[int, object] = {}

    def writer_schema(self, schema_id: int):
        """The registered schema of ``schema_id``; raises UndecodableRecord (``unknown_schema``) or
        RegistryUnavailable (any other registry error is one or the other)."""
        try:
            return self.client.get_schema(schema_id, fmt=self.fetch_format)
        except Exception as exc:
            sorted_out = classify(exc)
            if sorted_out is exc:
                raise
            raise sorted_out from None

    def own_schema(self, schema_id: int):
        """:meth:`writer_schema`, refused (``schema_mismatch``) when it is of another format."""
        schema = self.writer_schema(schema_id)
        if (schema.schema_type or "AVRO") != self.schema_type:
            raise UndecodableRecord("schema_mismatch",
                                    f"schema {schema_id} is {schema.schema_type}, not "
                                    f"{self.schema_type}")
        return schema

    def parsed(self, schema_id: int):
        if schema_id not in self._parsed:
            schema = self.own_schema(schema_id)
            self._parsed[schema_id] = (self._parse(schema) if not has_rules(schema)
                                       and self._direct(schema) else None)
        return self._parsed[schema_id]

    def _direct(self, schema) -> bool:
        return not schema.references


class AvroReader(_Reader):
    schema_type = "AVRO"

    def __init__(self, client, conf: dict):
        super().__init__(client, conf)
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        self._fallback = AvroDeserializer(client, conf=conf)

    def _parse(self, schema):
        from fastavro import parse_schema

        return parse_schema(json.loads(schema.schema_str))

    def read(self, value: bytes, ctx):
        if len(value) <= 5:  # as confluent-kafka's deserializer: a framing with no payload
            raise ValueError(f"framing without a payload ({len(value)} bytes)")
        parsed = self.parsed(int.from_bytes(value[1:5], "big"))
        if parsed is None:
            return self._fallback(value, ctx)
        from fastavro import schemaless_reader

        return schemaless_reader(io.BytesIO(value[5:]), parsed, None)


class JsonSchemaReader(_Reader):
    schema_type = "JSON"

    def __init__(self, client, conf: dict):
        super().__init__(client, conf)
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        self._fallback = JSONDeserializer(None, schema_registry_client=client, conf=conf)

    def _parse(self, schema):
        import jsonschema_rs

        try:  # formats are annotations, as for confluent-kafka's validator (no format checker)
            return jsonschema_rs.validator_for(json.loads(schema.schema_str),
                                               validate_formats=False)
        except Exception as exc:
            return exc  # a schema that does not compile: each record says so

    def read(self, value: bytes, ctx):
        parsed = self.parsed(int.from_bytes(value[1:5], "big"))
        if parsed is None:
            return self._fallback(value, ctx)
        payload = value[5:]
        try:
            record = orjson.loads(payload)
        except orjson.JSONDecodeError:
            record = json.loads(payload)  # NaN, Infinity, other encodings: as the serializer's json
        if isinstance(parsed, Exception):
            raise parsed
        if not parsed.is_valid(record):
            raise UndecodableRecord("schema_violation",
                                    "the value does not validate against its registered JSON "
                                    "Schema")
        return record


class ProtobufReader(_Reader):
    schema_type = "PROTOBUF"
    fetch_format = "serialized"

    def __init__(self, client, conf: dict):
        super().__init__(client, conf)
        self._classes: dict[tuple[int, tuple[int, ...]], object] = {}
        self._fallbacks: dict[tuple[int, tuple[int, ...]], object] = {}

    def _parse(self, schema):
        return schema

    def _direct(self, schema) -> bool:
        # references are resolved here (protobuf.py), not by confluent-kafka's deserializer
        return True

    def message_class(self, schema_id: int, indexes: tuple[int, ...]):
        """The message class of ``indexes`` in schema ``schema_id`` (built once)."""
        key = (schema_id, indexes)
        cls = self._classes.get(key)
        if cls is None:
            from .protobuf import message_class

            cls = self._classes[key] = message_class(self.own_schema(schema_id), list(indexes),
                                                     self.client)
        return cls

    def read(self, value: bytes, ctx):
        from confluent_kafka.schema_registry.serde import SchemaId

        from .mapping import message_dict

        schema_id, buf = SchemaId("PROTOBUF"), io.BytesIO(value)
        try:
            schema_id.from_bytes(buf)
        except Exception:
            raise UndecodableRecord("not_decodable",
                                    "the Protobuf framing's message indexes do not parse") from None
        key = (schema_id.id, tuple(schema_id.message_indexes or [0]))
        cls = self.message_class(*key)
        if self.parsed(schema_id.id) is None:  # data-contract rules: confluent-kafka's deserializer
            deserializer = self._fallbacks.get(key)
            if deserializer is None:
                from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

                deserializer = self._fallbacks[key] = ProtobufDeserializer(
                    cls, {"use.deprecated.format": False, **self.conf}, self.client)
            return message_dict(deserializer(value, ctx))
        return message_dict(cls.FromString(value[buf.tell():]))


READERS = {"avro": AvroReader, "json-schema": JsonSchemaReader, "protobuf": ProtobufReader}
