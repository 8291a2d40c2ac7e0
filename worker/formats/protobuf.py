"""Protobuf message classes without protoc: from a registered schema, or the canonical event.

confluent-kafka's ``ProtobufDeserializer`` parses into a message class given up front. The worker
does not know the producer's class, so it builds one per schema id from the schema the registry
holds (:func:`message_class`: the base64 ``FileDescriptorProto`` that ``format=serialized``
returns), picking the message the record's framing names (its message indexes).

:func:`event_class` builds the documented event as a Protobuf message (``olu.v1.Event``: op, id,
repeated double x, optional double y, optional int64 ts, repeated string ids, subject,
request_id), for producers,
tests and benches.
A registered schema may import Google's well-known types (from the runtime's own pool) and files
registered as its references (fetched from the registry by subject and version, recursively); any
other import is refused (``schema_mismatch``), as is a reference the registry does not hold.
"""

from __future__ import annotations

import base64
import functools

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass

from .exceptions import UndecodableRecord

__all__ = ["EVENT_PROTO", "event_class", "event_file", "message_class"]

EVENT_PROTO = """syntax = "proto3";
package olu.v1;
message Event {
  string op = 1;
  string id = 2;
  repeated double x = 3;
  optional double y = 4;
  optional int64 ts = 5;
  repeated string ids = 6;
  string subject = 7;
  string request_id = 8;
}
"""


def _file(schema_str: str, what: str) -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto()
    try:
        fdp.ParseFromString(base64.standard_b64decode(schema_str))
    except Exception:
        raise UndecodableRecord("schema_mismatch",
                                f"{what} is not a serialized FileDescriptorProto") from None
    return fdp


def _add(pool, fdp, files: dict, done: set) -> None:
    """Add ``fdp`` to ``pool`` after what it imports: ``files`` (the registry's references, by
    import name) or Google's well-known types from the runtime's own pool."""
    if fdp.name in done:
        return
    done.add(fdp.name)
    for dep in fdp.dependency:
        if dep in files:
            _add(pool, files[dep], files, done)
        elif dep.startswith("google/protobuf/"):
            if dep not in done:
                done.add(dep)
                _add_well_known(pool, dep, done)
        else:
            raise UndecodableRecord("schema_mismatch",
                                    f"the registered Protobuf schema imports {dep[:80]!r}, which "
                                    "is neither a registered reference nor a well-known type")
    pool.Add(fdp)


def _add_well_known(pool, name: str, done: set) -> None:
    from google.protobuf import descriptor_pool as default

    try:
        known = default.Default().FindFileByName(name)
    except KeyError:
        _import_well_known(name)
        known = default.Default().FindFileByName(name)
    proto = descriptor_pb2.FileDescriptorProto.FromString(known.serialized_pb)
    for dep in proto.dependency:
        if dep not in done:
            done.add(dep)
            _add_well_known(pool, dep, done)
    pool.Add(proto)


def _import_well_known(name: str) -> None:
    """Load a well-known type's module (its file is in the default pool once imported)."""
    import importlib

    stem = name.removeprefix("google/protobuf/").removesuffix(".proto").replace("/", ".")
    module = f"google.protobuf.{stem}_pb2"
    try:
        importlib.import_module(module)
    except ImportError:
        raise UndecodableRecord("schema_mismatch",
                                f"the registered Protobuf schema imports {name[:80]!r}, not a "
                                "well-known type of this protobuf runtime") from None


def _references(schema, client, files: dict) -> None:
    """Fetch the files ``schema`` references (and theirs) from the registry into ``files``."""
    from confluent_kafka.schema_registry import SchemaRegistryError

    from .registry import classify

    for ref in schema.references or ():
        if ref.name in files:
            continue
        try:
            registered = client.get_version(ref.subject, ref.version, fmt="serialized")
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise UndecodableRecord("schema_mismatch",
                                        f"the schema's reference {ref.name[:80]!r} "
                                        f"({ref.subject[:80]} v{ref.version}) is not in the "
                                        "registry") from None
            raise classify(exc) from None
        except Exception as exc:
            sorted_out = classify(exc)
            raise (sorted_out if sorted_out is not exc else exc) from None
        files[ref.name] = _file(registered.schema.schema_str, f"reference {ref.name[:80]!r}")
        files[ref.name].name = ref.name
        _references(registered.schema, client, files)


def message_class(schema, indexes: list[int], client=None):
    """The message class of ``indexes`` (the framing's message path) in a registered schema (its
    ``schema_str`` a base64 FileDescriptorProto; its references fetched with ``client``)."""
    schema_str = schema if isinstance(schema, str) else schema.schema_str
    fdp = _file(schema_str, "the registered Protobuf schema")
    files: dict = {}
    if not isinstance(schema, str) and schema.references:
        if client is None:
            raise UndecodableRecord("schema_mismatch",
                                    "the registered Protobuf schema has references")
        _references(schema, client, files)
    pool = descriptor_pool.DescriptorPool()
    _add(pool, fdp, files, set())
    names, level = [], fdp.message_type
    for index in indexes or [0]:
        if not 0 <= index < len(level):
            raise UndecodableRecord("schema_mismatch",
                                    f"message index {index} is not in the registered schema")
        names.append(level[index].name)
        level = level[index].nested_type
    full = ".".join([fdp.package, *names] if fdp.package else names)
    return GetMessageClass(pool.FindMessageTypeByName(full))


def event_file(name: str = "olu/v1/event.proto",
               package: str = "olu.v1") -> descriptor_pb2.FileDescriptorProto:
    """A file holding the documented event as message ``Event`` (EVENT_PROTO), to extend (tests add
    fields and imports to it)."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3")
    msg = fdp.message_type.add(name="Event")
    msg.field.add(name="op", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="id", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="x", number=3, type=F.TYPE_DOUBLE, label=F.LABEL_REPEATED)
    for number, (field, kind) in enumerate((("y", F.TYPE_DOUBLE), ("ts", F.TYPE_INT64)), start=4):
        # proto3 "optional": a synthetic oneof per field gives it presence
        msg.field.add(name=field, number=number, type=kind, label=F.LABEL_OPTIONAL,
                      oneof_index=len(msg.oneof_decl), proto3_optional=True)
        msg.oneof_decl.add(name=f"_{field}")
    msg.field.add(name="ids", number=6, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    msg.field.add(name="subject", number=7, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="request_id", number=8, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    return fdp


@functools.cache
def event_class():
    """``olu.v1.Event``, the documented event as a Protobuf message (EVENT_PROTO)."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(event_file())
    return GetMessageClass(pool.FindMessageTypeByName("olu.v1.Event"))
