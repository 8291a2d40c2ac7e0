"""Releases (and receipts) framed by a Schema Registry: written as Avro or JSON Schema, read in
any format. A receipt (schemas/receipt.schema.json) goes the same way, ``kind="receipt"``, under
``{receipts topic}-value``.

With ``OLU_RELEASE_FORMAT`` = avro or json-schema the worker publishes each release (the record
of schemas/release.schema.json) with confluent-kafka's ``AvroSerializer`` / ``JSONSerializer``
under the subject ``{params topic}-value``, so any registry-aware consumer reads it. The JSON
Schema is the packaged copy of schemas/release.schema.json; the Avro schema is derived from it
(:func:`avro_schema`: integer -> long, number -> double, enums and consts -> string / long,
string-or-integer (a softmax release's ``classes``) -> a union of string and long, optional or
nullable -> a union with null, default null), so the two cannot drift apart. A field added later
is optional, hence has that default, so the Avro schema evolves compatibly. The
schema is registered when the worker starts (:meth:`ReleaseEncoder.register`): a registry that is
down then fails the start, never a release later. Serialization is deterministic, so a replayed
release is still byte-identical to the original.

:class:`ReleaseReader` turns a framed release back into its JSON record (the schema type of the
framing's id picks the deserializer), for ``ParamsSubscriber`` and ``olu-worker follow``.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

import orjson
from confluent_kafka.schema_registry import topic_subject_name_strategy
from confluent_kafka.serialization import MessageField, SerializationContext

__all__ = ["KINDS", "RELEASE_FORMATS", "ReleaseEncoder", "ReleaseReader", "avro_schema",
           "json_schema", "release_json_schema"]

RELEASE_FORMATS = ("avro", "json-schema")
_CONF = {"subject.name.strategy": topic_subject_name_strategy}


#: The worker's output records a registry format carries: releases and receipts (the JSON Schema
#: of each is packaged with the worker, a copy of schemas/{kind}.schema.json).
KINDS = ("release", "receipt")


@functools.cache
def json_schema(kind: str = "release") -> str:
    """schemas/{kind}.schema.json, as packaged with the worker."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return resources.files(__package__).joinpath(f"{kind}.schema.json").read_text(encoding="utf-8")


def release_json_schema() -> str:
    """schemas/release.schema.json, as packaged with the worker."""
    return json_schema("release")


def _avro_type(name: str, spec: dict, required: bool):
    kinds = spec.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    nullable = "null" in kinds or not required
    kinds = [k for k in kinds if k != "null"]
    if len(kinds) > 1:  # e.g. a class label, string or integer: a union of the scalar types
        avro = [_avro_type(name, {**spec, "type": kind}, True) for kind in kinds]
        if not all(isinstance(a, str) for a in avro):
            raise ValueError(
                f"release schema field {name!r}: a union of scalar types only, got {spec}")
        return ["null", *avro] if nullable else avro
    if "enum" in spec or kinds == ["string"]:
        avro = "string"
    elif "const" in spec:
        avro = "long" if isinstance(spec["const"], int) else "string"
    elif kinds == ["integer"]:
        avro = "long"
    elif kinds == ["number"]:
        avro = "double"
    elif kinds == ["boolean"]:
        avro = "boolean"
    elif kinds == ["array"]:
        avro = {"type": "array", "items": _avro_type(name, spec["items"], True)}
    elif kinds == ["object"]:
        avro = _record(name.capitalize(), spec)
    else:
        raise ValueError(f"release schema field {name!r}: no Avro type for {spec}")
    return ["null", avro] if nullable else avro


def _record(name: str, spec: dict) -> dict:
    required = set(spec.get("required", ()))
    fields = []
    for field, sub in spec["properties"].items():
        avro = _avro_type(field, sub, field in required)
        fields.append(
            {"name": field, "type": avro, **({"default": None} if isinstance(avro, list) else {})})
    return {"type": "record", "name": name, "fields": fields}


@functools.cache
def avro_schema(kind: str = "release") -> str:
    """The Avro schema of a release (record ``olu.Release``) or a receipt (``olu.Receipt``),
    derived from its JSON Schema."""
    record = _record(kind.capitalize(), json.loads(json_schema(kind)))
    record["namespace"] = "olu"
    return json.dumps(record, separators=(",", ":"))


class ReleaseEncoder:
    """``encode(json_value) -> framed value`` for ``fmt`` on ``topic``: of a release, or with
    ``kind="receipt"`` of a receipt."""

    def __init__(self, fmt: str, client, topic: str, kind: str = "release"):
        if fmt not in RELEASE_FORMATS:
            raise ValueError(f"release format must be one of {RELEASE_FORMATS}, got {fmt!r}")
        self.format, self.topic, self.kind = fmt, topic, kind
        self._ctx = SerializationContext(topic, MessageField.VALUE)
        if fmt == "avro":
            from confluent_kafka.schema_registry.avro import AvroSerializer

            self._serialize = AvroSerializer(client, avro_schema(kind), conf=_CONF)
        else:
            from confluent_kafka.schema_registry.json_schema import JSONSerializer

            self._serialize = JSONSerializer(json_schema(kind), client, conf=_CONF)

    def encode(self, value: bytes) -> bytes:
        return self._serialize(orjson.loads(value), self._ctx)

    def register(self, sample: bytes) -> bytes:
        """Register the schema now (serializing ``sample``, a valid release value)."""
        return self.encode(sample)


class ReleaseReader:
    """``read(topic, framed value, kind) -> JSON value`` of a release (or receipt) in any registry
    format."""

    def __init__(self, client):
        self.client = client
        self._by_type: dict[str, object] = {}

    def read(self, topic: str, value: bytes, kind: str = "release") -> bytes:
        schema_id = int.from_bytes(value[1:5], "big")
        schema_type = self.client.get_schema(schema_id).schema_type or "AVRO"
        deserializer = self._by_type.get(schema_type)
        if deserializer is None:
            if schema_type == "AVRO":
                from confluent_kafka.schema_registry.avro import AvroDeserializer

                deserializer = AvroDeserializer(self.client, conf=_CONF)
            elif schema_type == "JSON":
                from confluent_kafka.schema_registry.json_schema import JSONDeserializer

                deserializer = JSONDeserializer(None, schema_registry_client=self.client,
                                                conf=_CONF)
            else:
                raise ValueError(f"releases are never {schema_type}: schema {schema_id}")
            self._by_type[schema_type] = deserializer
        record = deserializer(value, SerializationContext(topic, MessageField.VALUE))
        return orjson.dumps(_without_absent(record, json.loads(json_schema(kind))))


def _without_absent(record, schema: dict):
    """The record as the JSON writer wrote it. Avro has no absent field: an optional field the
    writer left out reads back as null. A field whose schema does not allow null can only be null
    that way, so drop it; a nullable one (``target_epsilon``, the noise figures) keeps its null,
    which the writer always writes (schemas/README.md)."""
    if not isinstance(record, dict) or not isinstance(schema, dict):
        return record
    props = schema.get("properties", {})
    return {k: _without_absent(v, props.get(k, {})) for k, v in record.items()
            if v is not None or _nullable(props.get(k, {}))}


def _nullable(spec: dict) -> bool:
    kinds = spec.get("type")
    return kinds == "null" or (isinstance(kinds, list)
                               and "null" in kinds) or None in spec.get("enum", ())
