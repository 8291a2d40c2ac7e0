"""The compiled readers of framed records (worker/formats/framed_kernel.py, jsonschema_plan.py,
worker/stream/input/framed_scan.py) against the generic path (transcode, then the Python decoder):
the same events with the same values, bit for bit, and the same dead-letter reasons and details,
on generated records, hand-made wire bytes and corrupted ones, for each format. And the readers
take the common records (a test that they decline everything would pass the rest).
"""

from __future__ import annotations

import base64
import io
import json
import struct

import fastavro
import numpy as np
import pytest
from confluent_kafka import Message
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
    MockSchemaRegistryClient,
)
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.formats.events import EVENT_AVRO_SCHEMA, EVENT_JSON_SCHEMA
from worker.formats.input import InputDecoder, Transcoded, transcode
from worker.formats.plans import PlanCache
from worker.olu import record_key
from worker.stream.exceptions import DeadLetter
from worker.stream.input.batch import decode_batch
from worker.stream.input.decode import Delete, Insert
from worker.stream.input.framed_scan import FramedBatch, prepare_framed, schema_ids
from worker.stream.input.scan import python_decoder

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DIM = 3
BIG = 1 << 20
TOPIC = "t"


# ------------------------------------------------------------------------ the comparison
def _bits(values) -> list[int]:
    return np.asarray(values, np.float64).reshape(-1).view(np.uint64).tolist()


def outcomes(batch, *, sparse: bool = False, raw_labels: bool = False) -> list:
    """One comparable outcome per message of a DecodedBatch: an insert's x as its bits (``sparse``:
    its (indices, value bits)), its label's bits (``raw_labels``: the label itself, a class name),
    its id's key; a delete; a dead letter."""
    def x_of(x):
        if not sparse:
            return _bits(x)
        indices, values = x
        return np.asarray(indices).tolist(), _bits(values)

    def y_of(y):
        return y if raw_labels else _bits([y])
    out = [None] * len(batch.messages)
    for start, stop, accepted in batch.stretches:
        if accepted:
            run = batch.run(start, stop)
            keys = run.keys.tolist() if run.keys is not None else [record_key(r) for r in run.ids]
            for j in range(stop - start):
                x = run.X.row(j) if sparse else run.X[j]
                out[start + j] = ("insert", x_of(x), y_of(run.y[j]), keys[j])
            continue
        for j in range(start, stop):
            e = batch.events[j]
            if isinstance(e, Insert):
                out[j] = ("insert", x_of(e.x), y_of(e.y), record_key(e.id))
            elif isinstance(e, Delete):
                out[j] = ("delete", e.ids, e.tombstone)
            else:
                assert isinstance(e, DeadLetter)
                out[j] = ("dead", e.reason, e.detail)
    return out


def compare(fmt, client, pairs, *, dim=DIM, max_bytes=BIG, **mapping) -> int:
    """Both paths over ``pairs`` (key, value): equal outcomes; returns how many the readers took."""
    msgs = [Message(topic=TOPIC, partition=0, offset=i, key=k, value=v, timestamp=(1, 1000 + i))
            for i, (k, v) in enumerate(pairs)]
    decoder = InputDecoder(fmt, client, max_bytes=max_bytes, **mapping)
    fast, stop, error = prepare_framed(PlanCache(decoder, dim), msgs, dim=dim, max_bytes=max_bytes)
    assert (stop, error) == (None, None) and isinstance(fast, FramedBatch)
    taken = sum(type(m) is not Transcoded and m.value() is not None for m in fast)  # not via the generic path
    generic, _, _ = transcode(InputDecoder(fmt, client, max_bytes=max_bytes, **mapping), msgs)
    with python_decoder():
        expected = outcomes(decode_batch(generic, dim=dim, max_bytes=max_bytes))
    got = outcomes(decode_batch(fast, dim=dim, max_bytes=max_bytes))
    for j, (a, b) in enumerate(zip(got, expected)):
        assert a == b, (j, pairs[j])
    return taken


def framed(schema_id: int, payload: bytes, indexes: bytes = b"") -> bytes:
    return b"\0" + schema_id.to_bytes(4, "big") + indexes + payload


def mutations(value: bytes, data) -> bytes:
    """The value truncated, with a byte changed, or with bytes appended."""
    how = data.draw(st.sampled_from(["cut", "flip", "append", "keep"]))
    if how == "keep" or len(value) <= 5:
        return value
    at = data.draw(st.integers(5, len(value) - 1))
    if how == "cut":
        return value[:at]
    if how == "flip":
        return value[:at] + bytes([data.draw(st.integers(0, 255))]) + value[at + 1:]
    return value + data.draw(st.binary(min_size=1, max_size=3))


KEYS = st.one_of(st.just(b"k-1"), st.just(b"k-1"), st.just(b"k-1"), st.none(), st.just(b""))
IDS = st.one_of(st.just("r-1"), st.text(max_size=4), st.text(alphabet="ab", min_size=256, max_size=257),
                st.just("é"))
NUMBERS = st.one_of(st.floats(width=64), st.floats(-1e3, 1e3), st.just(0.5))


# ------------------------------------------------------------------------------- Avro
RICH_AVRO = {
    "type": "record", "name": "Rich", "namespace": "t",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "op", "type": {"type": "enum", "name": "Op", "symbols": ["other", "delete", "insert"]}},
        {"name": "id", "type": ["null", "string"]},
        {"name": "meta", "type": {"type": "map", "values": "string"}},
        {"name": "x", "type": ["null", {"type": "array", "items": "float"}, "string"]},
        {"name": "y", "type": ["long", "null", "boolean", "double"]},
        {"name": "tag", "type": {"type": "fixed", "name": "Tag", "size": 3}},
        {"name": "ts", "type": ["null", "int", "string"]},
        {"name": "ids", "type": ["null", {"type": "array", "items": "string"}]},
        {"name": "blob", "type": "bytes"},
        {"name": "again", "type": "Op"},
    ],
}


@st.composite
def rich_avro(draw):
    x = draw(st.one_of(st.none(), st.text(max_size=3),
                       st.lists(st.floats(width=32), min_size=DIM - 1, max_size=DIM + 1),
                       st.lists(st.floats(-100, 100, width=32), min_size=DIM, max_size=DIM)))
    return {
        "flag": draw(st.booleans()), "op": draw(st.sampled_from(["insert", "insert", "delete", "other"])),
        "id": draw(st.one_of(IDS, st.none())), "meta": draw(st.dictionaries(st.text(max_size=3), st.text(max_size=3),
                                                                            max_size=2)),
        "x": x, "y": draw(st.one_of(st.integers(-2**63, 2**63 - 1), st.none(), st.booleans(), NUMBERS)),
        "tag": draw(st.binary(min_size=3, max_size=3)), "ts": draw(st.one_of(st.none(), st.integers(-5, 5),
                                                                            st.text(max_size=2))),
        "ids": draw(st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=2))),
        "blob": draw(st.binary(max_size=4)), "again": "other",
    }


def _avro(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


@pytest.fixture(scope="module")
def avro_client():
    client = MockSchemaRegistryClient({"url": "mock://framed-avro"})
    client.ids = {name: client.register_schema(f"{name}-value", Schema(json.dumps(s) if isinstance(s, dict) else s,
                                                                       "AVRO"))
                  for name, s in (("event", EVENT_AVRO_SCHEMA), ("rich", RICH_AVRO))}
    return client


@SETTINGS
@given(st.data())
def test_avro_reader_agrees_with_the_generic_path(avro_client, data):
    records = data.draw(st.lists(rich_avro(), min_size=1, max_size=6))
    pairs = [(data.draw(KEYS), mutations(framed(avro_client.ids["rich"], _avro(RICH_AVRO, r)), data))
             for r in records]
    compare("avro", avro_client, pairs)


def test_avro_reader_takes_the_common_records(avro_client):
    rng = np.random.default_rng(1)
    events = [{"op": "insert", "id": f"r-{j}", "x": rng.normal(size=DIM).tolist(), "y": float(j % 2), "ts": j,
               "ids": None} for j in range(50)]
    events += [{"op": "delete", "id": f"r-{j}", "x": None, "y": None, "ts": None, "ids": None} for j in range(10)]
    events += [{"op": "delete", "id": None, "x": None, "y": None, "ts": None, "ids": ["r-1", "r-2"]}]
    event_id = avro_client.ids["event"]
    pairs = [(b"k", framed(event_id, _avro(json.loads(EVENT_AVRO_SCHEMA), e))) for e in events]
    assert compare("avro", avro_client, pairs) == 60  # the request naming two ids takes the generic path
    rich = {"flag": True, "op": "insert", "id": "r-1", "meta": {"a": "b"}, "x": [0.5, 0.25, -2.0], "y": 1,
            "tag": b"abc", "ts": 3, "ids": ["z"], "blob": b"\x00", "again": "delete"}
    assert compare("avro", avro_client, [(b"k", framed(avro_client.ids["rich"], _avro(RICH_AVRO, rich)))]) == 1


def test_avro_named_features_and_renamed_roles(avro_client):
    schema = {"type": "record", "name": "Click", "fields": [
        {"name": "who", "type": "string"}, {"name": "action", "type": "string"},
        {"name": "age", "type": ["null", "double"]}, {"name": "score", "type": "int"}, {"name": "b", "type": "float"},
        {"name": "clicked", "type": ["null", "long"]}]}
    schema_id = avro_client.register_schema("click-value", Schema(json.dumps(schema), "AVRO"))
    mapping = {"fields": {"op": "action", "id": "who", "y": "clicked"}, "feature_fields": ("age", "score", "b")}
    rows = [{"who": "u-1", "action": "insert", "age": 0.25, "score": -3, "b": 0.1, "clicked": 1},
            {"who": "u-2", "action": "insert", "age": None, "score": 3, "b": 0.1, "clicked": 0},
            {"who": "u-3", "action": "delete", "age": None, "score": 0, "b": 0.0, "clicked": None},
            {"who": "u-4", "action": "insert", "age": 1.0, "score": 2, "b": float("inf"), "clicked": 1}]
    assert compare("avro", avro_client, [(b"k", framed(schema_id, _avro(schema, r))) for r in rows], **mapping) == 2


def test_avro_schemas_the_reader_does_not_walk_still_decode(avro_client):
    nested = {"type": "record", "name": "N", "fields": [
        {"name": "op", "type": "string"}, {"name": "id", "type": "string"},
        {"name": "x", "type": {"type": "array", "items": "double"}}, {"name": "y", "type": "double"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "inner", "type": {"type": "record", "name": "In", "fields": [{"name": "a", "type": "int"}]}}]}
    schema_id = avro_client.register_schema("nested-value", Schema(json.dumps(nested), "AVRO"))
    record = {"op": "insert", "id": "r-1", "x": [1.0, 2.0, 3.0], "y": 1.0, "at": 5, "inner": {"a": 1}}
    assert compare("avro", avro_client, [(b"k", framed(schema_id, _avro(nested, record)))]) == 0  # generic path
    fb, _, _ = prepare_framed(PlanCache(InputDecoder("avro", avro_client), DIM),
                              [Message(topic=TOPIC, key=b"k", value=framed(schema_id, _avro(nested, record)),
                                       timestamp=(1, 5))], dim=DIM, max_bytes=BIG)
    assert fb.scan.accepted.tolist() == [True]  # the JSON scan took it after transcoding


def test_a_record_near_the_size_limit_is_measured_by_the_generic_path(avro_client):
    event = {"op": "insert", "id": "r-1", "x": [0.1, 0.2, 0.3], "y": 1.0, "ts": None, "ids": None}
    value = framed(avro_client.ids["event"], _avro(json.loads(EVENT_AVRO_SCHEMA), event))
    for limit in range(len(value), 260, 7):
        compare("avro", avro_client, [(b"k-1", value)], max_bytes=limit)


# ---------------------------------------------------------------------------- Protobuf
def _rich_proto():
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="rich.proto", package="t", syntax="proto3")
    enum = fdp.enum_type.add(name="Op")
    for k, name in enumerate(["other", "delete", "insert"]):
        enum.value.add(name=name, number=k)
    msg = fdp.message_type.add(name="Rich")  # first: the framing's message index 0
    inner = fdp.message_type.add(name="Inner")  # scalars only: read by the compiled reader
    inner.field.add(name="a", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    inner.field.add(name="b", number=2, type=F.TYPE_DOUBLE, label=F.LABEL_REPEATED)
    deep = fdp.message_type.add(name="Deep")  # a string inside: left to the generic parser
    deep.field.add(name="s", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    fields = [("op", 1, F.TYPE_ENUM, F.LABEL_OPTIONAL), ("id", 2, F.TYPE_STRING, F.LABEL_OPTIONAL),
              ("x", 3, F.TYPE_FLOAT, F.LABEL_REPEATED), ("ids", 6, F.TYPE_STRING, F.LABEL_REPEATED),
              ("flag", 7, F.TYPE_BOOL, F.LABEL_OPTIONAL), ("count", 8, F.TYPE_INT32, F.LABEL_OPTIONAL),
              ("name", 9, F.TYPE_STRING, F.LABEL_OPTIONAL), ("blob", 10, F.TYPE_BYTES, F.LABEL_OPTIONAL),
              ("inner", 12, F.TYPE_MESSAGE, F.LABEL_OPTIONAL), ("y", 4, F.TYPE_INT32, F.LABEL_OPTIONAL),
              ("deep", 13, F.TYPE_MESSAGE, F.LABEL_OPTIONAL),
              ("ts", 5, F.TYPE_SINT64, F.LABEL_OPTIONAL)]
    for name, number, kind, label in fields:
        f = msg.field.add(name=name, number=number, type=kind, label=label)
        if kind == F.TYPE_ENUM:
            f.type_name = ".t.Op"
        if kind == F.TYPE_MESSAGE:
            f.type_name = ".t.Inner" if name == "inner" else ".t.Deep"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return fdp, GetMessageClass(pool.FindMessageTypeByName("t.Rich"))


def _event_proto():
    from worker.formats.protobuf import event_class

    cls = event_class()
    fdp = descriptor_pb2.FileDescriptorProto()
    cls.DESCRIPTOR.file.CopyToProto(fdp)
    return fdp, cls


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


@st.composite
def wire_fields(draw):
    """Hand-made Protobuf fields of the event message (olu.v1.Event), any order, repeats, packing."""
    parts = []
    for _ in range(draw(st.integers(0, 9))):
        which = draw(st.sampled_from(["op", "id", "x", "xs", "y", "ts", "ids", "unknown", "bad"]))
        if which == "op":
            word = draw(st.sampled_from([b"insert", b"insert", b"delete", b"nope", "é".encode()]))
            parts.append(_key(1, 2) + _varint(len(word)) + word)
        elif which == "id":
            word = draw(IDS).encode()
            parts.append(_key(2, 2) + _varint(len(word)) + word)
        elif which == "x":  # packed
            body = b"".join(struct.pack("<d", draw(NUMBERS)) for _ in range(draw(st.integers(0, DIM + 1))))
            parts.append(_key(3, 2) + _varint(len(body)) + body)
        elif which == "xs":  # one unpacked value
            parts.append(_key(3, 1) + struct.pack("<d", draw(NUMBERS)))
        elif which == "y":
            parts.append(_key(4, 1) + struct.pack("<d", draw(NUMBERS)))
        elif which == "ts":
            parts.append(_key(5, 0) + _varint(draw(st.integers(-3, 2**40))))
        elif which == "ids":
            word = draw(IDS).encode()
            parts.append(_key(6, 2) + _varint(len(word)) + word)
        elif which == "unknown":
            number, wire = draw(st.integers(7, 40)), draw(st.sampled_from([0, 1, 2, 5]))
            body = {0: _varint(draw(st.integers(0, 2**64 - 1))), 1: b"\x01" * 8, 5: b"\x02" * 4,
                    2: _varint(2) + b"ab"}[wire]
            parts.append(_key(number, wire) + body)
        else:  # a declared field with another wire type, or a group
            parts.append(draw(st.sampled_from([_key(4, 0) + b"\x01", _key(1, 0) + b"\x01", _key(3, 5) + b"\0\0\0\0",
                                               _key(9, 3), b"\x00"])))
    return b"".join(parts)


@pytest.fixture(scope="module")
def proto_client():
    client = MockSchemaRegistryClient({"url": "mock://framed-protobuf"})
    client.ids, client.classes = {}, {}
    for name, (fdp, cls) in (("event", _event_proto()), ("rich", _rich_proto())):
        text = base64.standard_b64encode(fdp.SerializeToString()).decode()
        client.ids[name] = client.register_schema(f"{name}-value", Schema(text, "PROTOBUF"))
        client.classes[name] = cls
    return client


@SETTINGS
@given(st.data())
def test_protobuf_reader_agrees_on_hand_made_wire_bytes(proto_client, data):
    payloads = data.draw(st.lists(wire_fields(), min_size=1, max_size=6))
    pairs = [(data.draw(KEYS), mutations(framed(proto_client.ids["event"], p, b"\0"), data)) for p in payloads]
    compare("protobuf", proto_client, pairs)


@SETTINGS
@given(st.data())
def test_protobuf_reader_agrees_on_generated_messages(proto_client, data):
    cls = proto_client.classes["rich"]
    pairs = []
    for _ in range(data.draw(st.integers(1, 5))):
        msg = cls(op=data.draw(st.sampled_from([0, 1, 2, 2])), id=data.draw(IDS),
                  x=data.draw(st.lists(st.floats(width=32), min_size=DIM - 1, max_size=DIM + 1)),
                  ids=data.draw(st.lists(st.text(max_size=2), max_size=2)), flag=data.draw(st.booleans()),
                  count=data.draw(st.integers(-2**31, 2**31 - 1)), name=data.draw(st.text(max_size=3)),
                  y=data.draw(st.integers(-2**31, 2**31 - 1)), ts=data.draw(st.integers(-2, 2**62)))
        if data.draw(st.booleans()):
            msg.inner.a = data.draw(st.integers(-5, 5))
            msg.inner.b.extend(data.draw(st.lists(st.floats(), max_size=2)))
        if data.draw(st.booleans()):
            msg.deep.s = data.draw(st.text(max_size=2))
        pairs.append((data.draw(KEYS), mutations(framed(proto_client.ids["rich"], msg.SerializeToString(), b"\0"),
                                                 data)))
    compare("protobuf", proto_client, pairs)


def test_protobuf_reader_takes_the_common_records(proto_client):
    cls = proto_client.classes["event"]
    rng = np.random.default_rng(2)
    msgs = [cls(op="insert", id=f"r-{j}", x=rng.normal(size=DIM).tolist(), y=float(j % 2), ts=j) for j in range(40)]
    msgs += [cls(op="delete", id=f"r-{j}") for j in range(5)] + [cls(op="insert", id="r-9", x=[1.0, 2.0, 3.0])]
    pairs = [(b"k", framed(proto_client.ids["event"], m.SerializeToString(), b"\0")) for m in msgs]
    assert compare("protobuf", proto_client, pairs) == 45  # no y (it has presence): the generic path names it
    rich = proto_client.classes["rich"](op=2, id="r-1", x=[0.5, 0.25, 1.0], y=-3, ts=-1)
    assert compare("protobuf", proto_client,
                   [(b"k", framed(proto_client.ids["rich"], rich.SerializeToString(), b"\0"))]) == 0  # ts < 0
    rich.ts = 9
    rich.inner.a = 4
    assert compare("protobuf", proto_client,
                   [(b"k", framed(proto_client.ids["rich"], rich.SerializeToString(), b"\0"))]) == 1
    rich.deep.s = "a"
    assert compare("protobuf", proto_client,
                   [(b"k", framed(proto_client.ids["rich"], rich.SerializeToString(), b"\0"))]) == 0


# ------------------------------------------------------------------------- JSON Schema
JSON_SCHEMAS = {
    "event": EVENT_JSON_SCHEMA,
    "bounded": json.dumps({"type": "object", "required": ["op", "id", "x", "y"], "properties": {
        "op": {"enum": ["insert", "delete"]}, "id": {"type": "string", "maxLength": 5},
        "x": {"type": "array", "items": {"type": "number", "minimum": -1, "maximum": 1}},
        "y": {"type": "number", "minimum": 0, "maximum": 1}, "ts": {"type": "integer"}}}),
    "closed": json.dumps({"type": "object", "additionalProperties": False, "properties": {
        "op": {"type": "string"}, "id": {"type": "string"}, "x": {"type": "array"}, "y": {"type": "number"}}}),
    "pattern": json.dumps({"type": "object", "properties": {"id": {"type": "string", "pattern": "^r-"}}}),
}


@pytest.fixture(scope="module")
def json_client():
    client = MockSchemaRegistryClient({"url": "mock://framed-json"})
    client.ids = {name: client.register_schema(f"{name}-value", Schema(s, "JSON")) for name, s in JSON_SCHEMAS.items()}
    return client


@st.composite
def json_events(draw):
    event = {"op": draw(st.sampled_from(["insert", "insert", "delete"])), "id": draw(IDS),
             "x": draw(st.lists(st.one_of(st.floats(-2, 2), st.integers(-3, 3)), min_size=DIM, max_size=DIM + 1)),
             "y": draw(st.one_of(st.floats(-1, 2), st.integers(-1, 2), st.just(2**60)))}
    if draw(st.booleans()):
        event["ts"] = draw(st.integers(-1, 5))
    return json.dumps(event).encode()


@SETTINGS
@given(st.data())
def test_json_schema_checks_agree_with_the_validator(json_client, data):
    name = data.draw(st.sampled_from(sorted(JSON_SCHEMAS)))
    pairs = [(data.draw(KEYS), mutations(framed(json_client.ids[name], e), data))
             for e in data.draw(st.lists(json_events(), min_size=1, max_size=6))]
    compare("json-schema", json_client, pairs)


def test_json_schema_reader_takes_the_common_records(json_client):
    rows = [json.dumps({"op": "insert", "id": f"r-{j}", "x": [0.5, -0.25, j / 4], "y": j % 2}).encode()
            for j in range(10)]
    # bounded: x within [-1, 1] for j <= 4 only; closed and pattern: no plan (a closed schema must list ts)
    for name, taken in (("event", 10), ("bounded", 5), ("closed", 0), ("pattern", 0)):
        assert compare("json-schema", json_client, [(b"k", framed(json_client.ids[name], r)) for r in rows]) == taken


# ------------------------------------------------------------------------------ framing
def test_schema_ids_are_read_from_the_framing():
    values = [b"", b"\0\0\0\0", b"\0\0\0\1\2", b"\1\0\0\0\7x", b"\0\x7f\xff\xff\xffabc", None]
    from worker.stream.input.scan import joined

    vbuf, voff = joined(values)
    assert schema_ids(vbuf, voff).tolist() == [-1, -1, 258, -1, 2**31 - 1, -1]


def test_a_refetched_batch_keeps_its_columns_aligned(avro_client):
    """The runner drops a re-fetched batch's head (FramedBatch.tail): what is left decodes as the
    same records prepared on their own, deletes and dead letters included."""
    rng = np.random.default_rng(5)
    event_id, schema = avro_client.ids["event"], json.loads(EVENT_AVRO_SCHEMA)
    blank = {"id": None, "x": None, "y": None, "ts": None, "ids": None}
    events = [{**blank, "op": "insert", "id": f"r-{j}", "x": rng.normal(size=DIM).tolist(), "y": 1.0}
              if j % 4 else {**blank, "op": "delete", "id": f"r-{j - 1}"} for j in range(40)]
    pairs = [(b"k", framed(event_id, _avro(schema, e))) for e in events] + [(b"k", b"junk")]
    msgs = [Message(topic=TOPIC, partition=0, offset=i, key=k, value=v, timestamp=(1, 1000 + i))
            for i, (k, v) in enumerate(pairs)]
    plans = PlanCache(InputDecoder("avro", avro_client), DIM)
    whole, _, _ = prepare_framed(plans, msgs, dim=DIM, max_bytes=BIG)
    for start in (1, 7, 20):
        tail = whole.tail(start)
        alone, _, _ = prepare_framed(plans, msgs[start:], dim=DIM, max_bytes=BIG)
        assert outcomes(decode_batch(tail, dim=DIM, max_bytes=BIG)) == \
            outcomes(decode_batch(alone, dim=DIM, max_bytes=BIG))
