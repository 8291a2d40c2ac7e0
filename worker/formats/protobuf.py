"""Protobuf message classes without protoc: from a registered schema, or the canonical event.

confluent-kafka's ``ProtobufDeserializer`` parses into a message class given up front. The worker
does not know the producer's class, so it builds one per schema id from the schema the registry
holds (:func:`message_class`: the base64 ``FileDescriptorProto`` that ``format=serialized``
returns), picking the message the record's framing names (its message indexes).

:func:`event_class` builds the documented event as a Protobuf message (``olu.v1.Event``: op, id,
repeated double x, optional double y, optional int64 ts, repeated string ids), for producers,
tests and benches.
Self-contained schemas only: a registered schema that imports another file other than Google's
well-known types is refused (``schema_mismatch``).
"""

from __future__ import annotations

import base64
import functools

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass

from .exceptions import UndecodableRecord

__all__ = ["EVENT_PROTO", "event_class", "message_class"]

EVENT_PROTO = """syntax = "proto3";
package olu.v1;
message Event {
  string op = 1;
  string id = 2;
  repeated double x = 3;
  optional double y = 4;
  optional int64 ts = 5;
  repeated string ids = 6;
}
"""


def _pool_with(fdp: descriptor_pb2.FileDescriptorProto) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for dep in fdp.dependency:
        if not dep.startswith("google/protobuf/"):
            raise UndecodableRecord("schema_mismatch", f"the registered Protobuf schema imports {dep[:80]!r}; "
                                                       "only self-contained schemas are supported")
        from google.protobuf import descriptor_pool as default

        pool.AddSerializedFile(default.Default().FindFileByName(dep).serialized_pb)
    pool.Add(fdp)
    return pool


def message_class(schema_str: str, indexes: list[int]):
    """The message class of ``indexes`` (the framing's message path) in a base64 FileDescriptorProto."""
    fdp = descriptor_pb2.FileDescriptorProto()
    try:
        fdp.ParseFromString(base64.standard_b64decode(schema_str))
    except Exception:
        raise UndecodableRecord("schema_mismatch", "the registered Protobuf schema is not a serialized "
                                                   "FileDescriptorProto") from None
    pool = _pool_with(fdp)
    names, level = [], fdp.message_type
    for index in indexes or [0]:
        if not 0 <= index < len(level):
            raise UndecodableRecord("schema_mismatch", f"message index {index} is not in the registered schema")
        names.append(level[index].name)
        level = level[index].nested_type
    full = ".".join([fdp.package, *names] if fdp.package else names)
    return GetMessageClass(pool.FindMessageTypeByName(full))


@functools.cache
def event_class():
    """``olu.v1.Event``, the documented event as a Protobuf message (EVENT_PROTO)."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="olu/v1/event.proto", package="olu.v1", syntax="proto3")
    msg = fdp.message_type.add(name="Event")
    msg.field.add(name="op", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="id", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="x", number=3, type=F.TYPE_DOUBLE, label=F.LABEL_REPEATED)
    for number, (name, kind) in enumerate((("y", F.TYPE_DOUBLE), ("ts", F.TYPE_INT64)), start=4):
        # proto3 "optional": a synthetic oneof per field gives it presence
        msg.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL,
                      oneof_index=len(msg.oneof_decl), proto3_optional=True)
        msg.oneof_decl.add(name=f"_{name}")
    msg.field.add(name="ids", number=6, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return GetMessageClass(pool.FindMessageTypeByName("olu.v1.Event"))
