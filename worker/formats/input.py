"""Input records framed by a Schema Registry: Avro, JSON Schema or Protobuf in, the JSON event out.

:class:`InputDecoder` is the generic path: it decodes one record value with the format's reader
(readers.py: the writer schema is fetched from the registry by the id in the framing, once per
id, and cached), maps it to the documented event (mapping.py) and writes that as the JSON object
the worker reads (schemas/insert.schema.json, delete.schema.json). The worker then decides on it
exactly as on a JSON record, so the formats cannot drift apart. The common insert does not come
this way: the compiled readers (framed_kernel.py, worker/stream/input/framed_scan.py) take it
straight into the batch's columns, and decline to this path whatever they are not certain of.

:func:`transcode` does that for a fetched batch: each record becomes a :class:`Transcoded` (the
original message, whose bytes a dead letter carries, with the JSON value), a tombstone stays as it
is, a record that can never be decoded carries its verdict (``dead``), and the batch stops at the
first record the registry could not be asked about (the caller pauses the partition there and
retries: a valid record is never dead-lettered because the registry is down).

Verdicts, first failing one wins (reason codes of schemas/dead-letter.schema.json):

1. ``oversized``: key + value over ``OLU_MAX_RECORD_BYTES`` (also when the JSON form is larger);
2. ``not_framed``: shorter than the 5-byte framing, or the first byte is not the magic byte 0;
3. ``unknown_schema``: the registry has no schema with the framing's id;
4. ``schema_violation``: a JSON Schema record that does not validate against its schema;
   ``not_decodable``: a payload that does not parse with its schema (truncated, wrong format);
5. ``schema_mismatch``: the schema does not have the fields the mapping needs;
6. ``non_finite`` and everything else: as for JSON (worker/stream/input/decode.py).
"""

from __future__ import annotations

import struct

import orjson
from confluent_kafka.schema_registry import topic_subject_name_strategy
from confluent_kafka.serialization import MessageField, SerializationContext

from .exceptions import RegistryUnavailable, UndecodableRecord
from .mapping import FieldMapping
from .readers import READERS
from .registry import classify

__all__ = ["FORMATS", "InputDecoder", "Transcoded", "transcode"]

FORMATS = ("avro", "json-schema", "protobuf")
MAGIC_BYTE = 0
_PREFIX = struct.Struct(">bI")
# The subject is "{topic}-value", computed, never looked up (the default strategy asks the registry
# for topic associations, which would make a cached schema depend on the registry being up).
_CONF = {"subject.name.strategy": topic_subject_name_strategy}


class Transcoded:
    """A fetched message with its value replaced by the JSON event; ``original`` is the message
    itself (dead letters carry its bytes), ``dead`` the
    verdict of a record that cannot be decoded."""

    __slots__ = ("original", "_value", "dead")

    def __init__(self, original, value: bytes, dead: UndecodableRecord | None = None):
        self.original, self._value, self.dead = original, value, dead

    def value(self):
        return self._value

    def key(self):
        return self.original.key()

    def topic(self):
        return self.original.topic()

    def partition(self):
        return self.original.partition()

    def offset(self):
        return self.original.offset()

    def timestamp(self):
        return self.original.timestamp()

    def headers(self):
        return self.original.headers()

    def error(self):
        return self.original.error()


class InputDecoder:
    """Decode framed values of ``fmt`` with ``client`` (a ``SchemaRegistryClient``)."""

    def __init__(self, fmt: str, client, *, fields=(), feature_fields=(), named=(),
                 max_bytes: int = 1 << 20):
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
        self.format, self.client, self.max_bytes = fmt, client, max_bytes
        self.mapping = FieldMapping(fields, feature_fields, complete=fmt != "json-schema",
                                    named=named)
        self.reader = READERS[fmt](client, _CONF)

    def writer_schema(self, schema_id: int):
        """The registered schema of ``schema_id`` (cached by the client); raises UndecodableRecord
        (``unknown_schema``) or RegistryUnavailable."""
        return self.reader.writer_schema(schema_id)

    def protobuf_class(self, schema_id: int, indexes: tuple[int, ...]):
        """The Protobuf message class a framing names (built once per schema id and indexes)."""
        return self.reader.message_class(schema_id, indexes)

    def decode(self, topic: str, key: bytes | None, value: bytes) -> bytes:
        """The JSON event of a framed ``value``; raises UndecodableRecord or RegistryUnavailable."""
        size = len(value) + (len(key) if key is not None else 0)
        if size > self.max_bytes:
            raise UndecodableRecord(
                "oversized", f"record is {size} bytes (key + value), more than {self.max_bytes}")
        if len(value) < _PREFIX.size or value[0] != MAGIC_BYTE:
            raise UndecodableRecord("not_framed",
                                    f"value is not Schema Registry framed ({len(value)} bytes, "
                                                  + (f"first byte {value[0]}, " if value else "")
                                                  + f"expected the magic byte {MAGIC_BYTE} and a "
                                                    "4-byte schema id)")
        try:
            record = self.reader.read(value, SerializationContext(topic, MessageField.VALUE))
        except (UndecodableRecord, RegistryUnavailable):
            raise
        except Exception as exc:  # the readers raise several types; classify() sorts them
            sorted_out = classify(exc)
            if sorted_out is not exc:
                raise sorted_out from None
            raise self._undecodable(exc) from None
        event = orjson.dumps(self.mapping.event(record))
        if len(event) + (len(key) if key is not None else 0) > self.max_bytes:
            raise UndecodableRecord("oversized",
                                    f"the record's JSON form is {len(event)} bytes, more than "
                                    f"{self.max_bytes} with its key")
        return event

    def _undecodable(self, exc: Exception) -> UndecodableRecord:
        cause = exc
        while cause is not None:
            if type(cause).__name__ == "ValidationError":
                # jsonschema: the messages quote values, drop them
                return UndecodableRecord("schema_violation",
                                         "the value does not validate against its registered JSON "
                                         "Schema")
            cause = cause.__cause__ or cause.__context__
        if self.format == "json-schema" and "validat" in str(exc).lower():
            return UndecodableRecord("schema_violation",
                                     "the value does not validate against its registered JSON "
                                     "Schema")
        return UndecodableRecord("not_decodable",
                                 f"the payload does not decode with its registered {self.format} "
                                 f"schema ({type(exc).__name__})")


def transcode(decoder: InputDecoder,
              messages: list) -> tuple[list, int | None, RegistryUnavailable | None]:
    """``(decoded, stop, error)``: ``decoded[i]`` stands for ``messages[i]`` for every i before
    ``stop`` (None: the whole batch); ``error`` says why the
    registry could not decode ``messages[stop]``."""
    out = []
    decode = decoder.decode
    for i, msg in enumerate(messages):
        value = msg.value()
        if value is None:  # a tombstone: a delete by key, no schema involved
            out.append(msg)
            continue
        try:
            out.append(Transcoded(msg, decode(msg.topic(), msg.key(), value)))
        except UndecodableRecord as bad:
            out.append(Transcoded(msg, b"", bad))
        except RegistryUnavailable as exc:
            return out, i, exc
    return out, None, None
