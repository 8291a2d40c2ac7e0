"""The feature spec (worker/features): every mistake named, the norm bound held, and one vector for a
record whether the worker's compiled reader, its Python decoder or the reference transform (which
the planner and the subscriber call) computes it, bit for bit."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.stream.test_framed_scan import outcomes
from worker.config import load_settings
from worker.exceptions import ConfigError
from worker.features.exceptions import BadFeature, FeatureSpecError
from worker.features.spec import load_spec, parse_spec
from worker.features.transform import category_hash, vectorize
from worker.stream.input.batch import decode_batch
from worker.stream.input.scan import python_decoder

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = 1 << 20


@pytest.mark.parametrize("raw,message", [
    ([], "must be a mapping"),
    ({}, "features: a non-empty list"),
    ({"features": [{"name": "a", "type": "numeric", "range": [0, 1]}], "colour": 1}, "unknown key 'colour'"),
    ({"features": [{"type": "numeric"}]}, "'name' must be a non-empty string"),
    ({"features": [{"name": "a", "type": "numeric", "range": [0, 1]}] * 2}, "declared twice"),
    ({"features": [{"name": "id", "type": "boolean"}]}, "is an event field"),
    ({"features": [{"name": "a", "type": "text"}]}, "type 'text' is not one of"),
    ({"features": [{"name": "a", "type": "numeric"}]}, "needs 'range' or both 'center' and 'scale'"),
    ({"features": [{"name": "a", "type": "numeric", "range": [1, 1]}]}, "'range' must be [low, high]"),
    ({"features": [{"name": "a", "type": "numeric", "range": [0, 1], "center": 0}]}, "either 'range' or"),
    ({"features": [{"name": "a", "type": "numeric", "center": 0, "scale": 0}]}, "'scale' 0 is not a positive"),
    ({"features": [{"name": "a", "type": "numeric", "center": 0, "scale": 1, "clip": -1}]}, "'clip' -1"),
    ({"features": [{"name": "a", "type": "categorical"}]}, "'vocabulary' must be a non-empty list"),
    ({"features": [{"name": "a", "type": "categorical", "vocabulary": ["x", "x"]}]}, "lists a value twice"),
    ({"features": [{"name": "a", "type": "hashed", "buckets": 1}]}, "'buckets' must be an integer"),
    ({"features": [{"name": "a", "type": "boolean", "buckets": 4}]}, "applies to hashed fields only"),
    ({"features": [{"name": "a", "type": "boolean", "weight": 0}]}, "weight 0 is not a positive"),
    ({"features": [{"name": "a", "type": "boolean", "missing": {"fill": "yes"}}]}, "missing.fill 'yes'"),
    ({"features": [{"name": "a", "type": "boolean", "missing": True}]}, "'missing' must be a mapping"),
    ({"features": [{"name": "a", "type": "boolean"}], "bound": -1}, "bound: -1 is not a positive"),
    ({"features": [{"name": "a", "type": "boolean"}], "intercept": "yes"}, "intercept: 'yes'"),
    ({"features": [{"name": "a", "type": "boolean"}], "version": 2}, "version: 2"),
])
def test_every_spec_mistake_has_its_message(raw, message):
    with pytest.raises(FeatureSpecError) as caught:
        parse_spec(raw)
    assert any(message in p for p in caught.value.problems), caught.value.problems


def test_all_mistakes_are_reported_at_once():
    with pytest.raises(FeatureSpecError) as caught:
        parse_spec({"features": [{"name": "a", "type": "text"}, {"name": "b", "type": "numeric"}], "bound": 0})
    assert len(caught.value.problems) == 3


def test_a_spec_file_in_yaml_or_json(tmp_path):
    yaml_file, json_file = tmp_path / "f.yaml", tmp_path / "f.json"
    yaml_file.write_text("intercept: false\nfeatures:\n  - {name: age, type: numeric, range: [0, 100]}\n")
    json_file.write_text(json.dumps({"intercept": False, "features": [{"name": "age", "type": "numeric",
                                                                         "range": [0, 100]}]}))
    assert load_spec(yaml_file).digest == load_spec(json_file).digest and load_spec(yaml_file).dim == 1
    (tmp_path / "bad.yaml").write_text("features: [\n")
    for path, message in ((tmp_path / "bad.yaml", "does not parse"), (tmp_path / "none.yaml", "cannot read")):
        with pytest.raises(FeatureSpecError, match=message):
            load_spec(path)


def test_the_spec_sets_the_dimension_and_bound_and_refuses_what_contradicts_it(tmp_path):
    spec = tmp_path / "f.yaml"
    spec.write_text("features:\n  - {name: age, type: numeric, range: [0, 100]}\n"
                    "  - {name: plan, type: categorical, vocabulary: [free, pro]}\n")
    base = {"OLU_KAFKA_BOOTSTRAP_SERVERS": "k:9092", "OLU_PRIVACY_UNIT": "per-request", "OLU_FEATURES_FILE": str(spec)}
    s = load_settings([], base)
    assert s.dim == 5 and math.isclose(s.feature_bound, math.sqrt(3), rel_tol=1e-8) and s.feature_spec.dim == 5
    for extra, message in (({"OLU_DIM": "4"}, "makes 5 coordinates"), ({"OLU_FEATURE_BOUND": "2"}, "declare 'bound:'"),
                           ({"OLU_FEATURES_FILE": str(tmp_path / "no.yaml")}, "cannot read")):
        with pytest.raises(ConfigError, match=message):
            load_settings([], {**base, **extra})
    with pytest.raises(ConfigError, match="OLU_FEATURES_RESET"):
        load_settings([], {"OLU_KAFKA_BOOTSTRAP_SERVERS": "k:9092", "OLU_DIM": "2", "OLU_FEATURES_RESET": "1"})


# --------------------------------------------------------------------- one vector everywhere
@st.composite
def field_specs(draw, k: int):
    kind = draw(st.sampled_from(["numeric-range", "numeric-scale", "boolean", "categorical", "hashed"]))
    name = draw(st.sampled_from(["a", "b", "c", "dd", "e_1", "f"])) + str(k)
    out: dict = {"name": name}
    if kind == "numeric-range":
        low = draw(st.floats(-100, 100))
        out.update(type="numeric", range=[low, low + draw(st.floats(0.5, 100))])
    elif kind == "numeric-scale":
        out.update(type="numeric", center=draw(st.floats(-10, 10)), scale=draw(st.floats(0.1, 10)),
                   clip=draw(st.floats(0.5, 5)))
    elif kind == "boolean":
        out["type"] = "boolean"
    elif kind == "categorical":
        out.update(type="categorical", vocabulary=draw(st.lists(st.text("abcxyzé日", min_size=0, max_size=3),
                                                                min_size=1, max_size=6, unique=True)))
    else:
        out.update(type="hashed", buckets=draw(st.integers(2, 9)))
    if draw(st.booleans()):
        out["weight"] = draw(st.floats(0.1, 3))
    if draw(st.booleans()):
        fill = {"numeric": draw(st.floats(-200, 200)), "boolean": draw(st.booleans()),
                "categorical": draw(st.text("abcz", max_size=2)), "hashed": draw(st.text("abcz", max_size=2))}
        out["missing"] = {"fill": fill[out["type"]], "indicator": draw(st.booleans())}
    return out


@st.composite
def derived_specs(draw, fields: list[dict]) -> list[dict]:
    """Derived blocks over ``fields``: bins of numeric fields, crosses (a numeric field by its
    bins), Fourier features of numeric fields (a bandwidth the spec accepts for them)."""
    numeric = [f["name"] for f in fields if f["type"] == "numeric"]
    out, binned = [], []
    for name in numeric:
        if draw(st.booleans()):
            block = {"type": "bins", "field": name,
                     "encoding": draw(st.sampled_from(["onehot", "cumulative"]))}
            if draw(st.booleans()):
                block["edges"] = sorted(set(draw(st.lists(st.floats(-150, 150), min_size=1, max_size=5))))
            else:
                low = draw(st.floats(-150, 100))
                block.update(range=[low, low + draw(st.floats(1, 100))], count=draw(st.integers(2, 6)))
            if draw(st.booleans()):
                block["weight"] = draw(st.floats(0.1, 2))
            out.append(block)
            binned.append(name)
    crossable = [f["name"] for f in fields if f["type"] != "numeric"] + binned
    if len(crossable) >= 2 and draw(st.booleans()):
        names = draw(st.lists(st.sampled_from(crossable), min_size=2, max_size=3, unique=True))
        out.append({"type": "cross", "fields": names, "buckets": draw(st.integers(2, 40))})
    if numeric and draw(st.booleans()):
        names = draw(st.lists(st.sampled_from(numeric), min_size=1, max_size=3, unique=True))
        out.append({"type": "fourier", "fields": names, "components": draw(st.integers(1, 12)),
                    "bandwidth": draw(st.sampled_from([0.05, 0.5, 1.0, 4.0])),
                    "seed": draw(st.integers(0, 2**63 - 1))})
    return out


@st.composite
def specs(draw):
    n = draw(st.integers(1, 5))
    raw = {"features": [draw(field_specs(k)) for k in range(n)],
           "intercept": draw(st.sampled_from([1.0, 0.0, 0.5]))}
    if draw(st.booleans()):
        raw["bound"] = draw(st.floats(0.3, 4))
    if draw(st.booleans()):
        raw["derived"] = draw(derived_specs(raw["features"]))
    return parse_spec(raw)


# a field the spec does not name may hold any JSON, nested and in any characters
NESTED = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                                st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4)),
                      lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids,
                                                                                max_size=3),
                      max_leaves=10)


def values_for(f, draw):
    """A value for field ``f``: usually of its type, sometimes missing, null, or of another type."""
    choice = draw(st.sampled_from(["ok"] * 6 + ["missing", "null", "other"]))
    if choice == "missing":
        return ...
    if choice == "null":
        return None
    if choice == "other":
        return draw(st.sampled_from([True, "s", 1.5, [1], {"a": 1}, 7]))
    if f.kind == "numeric":
        return draw(st.one_of(st.floats(-1e3, 1e3), st.integers(-300, 300), st.floats(allow_nan=False,
                                                                                        allow_infinity=False)))
    if f.kind == "boolean":
        return draw(st.booleans())
    pool = (list(f.vocabulary) + ["zz", "", "é", "日本", "\U0001f600"] if f.kind == "categorical"
            else ["a", "b", "zz", "", "é", "x\\y", "日本", "\U0001f600"])
    return draw(st.sampled_from(pool))


@SETTINGS
@given(st.data())
def test_the_compiled_reader_the_decoder_and_the_transform_agree(data):
    spec = data.draw(specs())
    messages = []
    for j in range(data.draw(st.integers(1, 6))):
        event = {"op": "insert", "id": f"r-{j}", "y": data.draw(st.sampled_from([0, 1, 0.5]))}
        for f in spec.fields:
            v = values_for(f, data.draw)
            if v is not ...:
                event[f.name] = v
        if data.draw(st.booleans()):
            event["extra"] = data.draw(st.one_of(st.sampled_from([1, "t", None, True, [1, 2], {"a": 1}]),
                                                 NESTED))
        if data.draw(st.integers(0, 9)) == 0:
            event["x"] = [1.0]
        if data.draw(st.integers(0, 9)) == 0:
            event = {"op": "delete", "id": f"r-{j}"}
        order = data.draw(st.permutations(list(event)))  # fields in any order
        value = orjson.dumps({k: event[k] for k in order})
        if data.draw(st.integers(0, 9)) == 0:
            value = value.replace(b" ", b"").replace(b",", b" ,\n", 1)
        messages.append(Message(topic="t", partition=0, offset=j, key=b"k", value=value, timestamp=(1, 10 + j)))
    compiled = decode_batch(messages, dim=spec.dim, max_bytes=BIG, features=spec)
    with python_decoder():
        reference = decode_batch(messages, dim=spec.dim, max_bytes=BIG, features=spec)
    assert outcomes(compiled) == outcomes(reference)
    # OLU_SPARSE_INPUT: the compiled reader's CSR rows are the dense rows' non-zeros, bit for bit
    sparse = decode_batch(messages, dim=spec.dim, max_bytes=BIG, features=spec, sparse=True)
    assert sparse.scan is not None
    with python_decoder():
        sparse_reference = decode_batch(messages, dim=spec.dim, max_bytes=BIG, features=spec,
                                        sparse=True)
    assert sparse_outcomes(sparse) == sparse_outcomes(sparse_reference)
    assert sparse_outcomes(sparse) == [
        ("insert", _nonzeros(got[1]), *got[2:]) if got[0] == "insert" else got
        for got in outcomes(compiled)]
    shipped = parse_spec(orjson.loads(spec.text))  # the spec as a release carries it to a subscriber
    assert shipped.digest == spec.digest
    for j, msg in enumerate(messages):  # what the planner and the subscriber compute: the same bits
        got = outcomes(compiled)[j]
        if got[0] == "insert":
            x, _ = vectorize(spec, orjson.loads(msg.value()))
            assert got[1] == np.asarray(x).view(np.uint64).tolist()
            assert np.array_equal(vectorize(shipped, orjson.loads(msg.value()))[0].view(np.uint64),
                                  np.asarray(x).view(np.uint64))
            assert math.sqrt(float(np.dot(x, x))) <= spec.norm_bound * (1 + 1e-12)


@SETTINGS
@given(st.data())
def test_a_mutated_named_record_is_read_as_the_decoder_reads_it(data):
    """Any byte of a named record changed, cut or inserted (in a UTF-8 value, inside a nested
    field the spec does not name, anywhere): whatever the compiled reader accepts, the Python
    decoder accepts with the same values; the rest it declines to the decoder."""
    spec = data.draw(specs())
    event = {"op": "insert", "id": "r-0", "y": 1}
    for f in spec.fields:
        v = values_for(f, data.draw)
        if v is not ...:
            event[f.name] = v
    event["extra"] = data.draw(NESTED)
    value = orjson.dumps(event)
    cut = data.draw(st.integers(0, len(value)))
    value = value[:cut] + data.draw(st.binary(max_size=3)) + value[cut + data.draw(st.integers(0, 3)):]
    messages = [Message(topic="t", partition=0, offset=0, key=b"k", value=value, timestamp=(1, 10))]
    compiled = decode_batch(messages, dim=spec.dim, max_bytes=BIG, features=spec)
    with python_decoder():
        reference = decode_batch(messages, dim=spec.dim, max_bytes=BIG, features=spec)
    assert outcomes(compiled) == outcomes(reference)


def _nonzeros(bits: list) -> tuple[list, list]:
    """(indices, value bits) of a dense row's non-zeros (a -0.0 a zero, as from_dense reads)."""
    row = np.array(bits, np.uint64).view(np.float64)
    at = np.flatnonzero(row)
    return at.tolist(), row[at].view(np.uint64).tolist()


def sparse_outcomes(batch) -> list:
    """:func:`outcomes` of a batch decoded into sparse rows: an insert's (indices, value bits)."""
    return outcomes(batch, sparse=True)


def test_the_compiled_reader_takes_the_common_named_record():
    spec = parse_spec({"features": [{"name": "age", "type": "numeric", "range": [0, 100]},
                                    {"name": "plan", "type": "categorical", "vocabulary": ["free", "pro"]},
                                    {"name": "city", "type": "hashed", "buckets": 8},
                                    {"name": "vip", "type": "boolean", "missing": {"fill": False, "indicator": True}}]})
    msgs = [Message(topic="t", partition=0, offset=j, key=b"k", timestamp=(1, j), value=orjson.dumps(
        {"op": "insert", "id": f"r-{j}", "y": 1, "age": 20 + j, "plan": "pro", "city": "Lyon", "source": "app"}))
        for j in range(5)]
    batch = decode_batch(msgs, dim=spec.dim, max_bytes=BIG, features=spec)
    assert batch.scan.accepted.all()
    x = batch.scan.X[0]
    assert x[0] == 1.0 and x[1] == (20 - 50) / 50 and x[3] == 1.0 and x[-1] == 1.0  # vip missing: flagged
    h = category_hash(b"Lyon")
    assert x[5 + h % 8] == (1.0 if h >> 63 == 0 else -1.0)


@pytest.mark.parametrize("record,reason,field", [
    ({"plan": "pro"}, "bad_features", "'age'"),
    ({"age": "old", "plan": "pro"}, "bad_features", "'age' is a string"),
    ({"age": 3, "plan": 7}, "bad_features", "'plan' is a integer"),
    ({"age": float("nan"), "plan": "pro"}, "non_finite", "'age'"),
])
def test_bad_fields_are_named(record, reason, field):
    spec = parse_spec({"features": [{"name": "age", "type": "numeric", "range": [0, 100]},
                                    {"name": "plan", "type": "categorical", "vocabulary": ["free", "pro"]}]})
    with pytest.raises(BadFeature) as caught:
        vectorize(spec, record)
    assert caught.value.reason == reason and field in caught.value.detail


def test_out_of_range_values_are_clipped_and_said():
    spec = parse_spec({"features": [{"name": "a", "type": "numeric", "range": [0, 10]},
                                    {"name": "b", "type": "numeric", "center": 0, "scale": 1, "clip": 2}],
                       "intercept": 0})
    x, clipped = vectorize(spec, {"a": 11, "b": -5})
    assert x.tolist() == [1.0, -2.0] and clipped == 0b11
    x, clipped = vectorize(spec, {"a": 5, "b": 1})
    assert x.tolist() == [0.0, 1.0] and clipped == 0


def test_registry_records_take_the_spec_by_field_name():
    """Avro named fields pass through the field mapping to the spec, compiled readers or not."""
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
        MockSchemaRegistryClient,
    )

    from tests.stream.test_framed_scan import _avro, framed
    from worker.formats.input import InputDecoder
    from worker.formats.plans import PlanCache
    from worker.stream.input.framed_scan import prepare_framed

    spec = parse_spec({"features": [{"name": "age", "type": "numeric", "range": [0, 100]},
                                    {"name": "plan", "type": "categorical", "vocabulary": ["free", "pro"]},
                                    {"name": "vip", "type": "boolean", "missing": {"fill": False}}]})
    schema = {"type": "record", "name": "E", "fields": [
        {"name": "op", "type": "string"}, {"name": "id", "type": "string"}, {"name": "y", "type": "double"},
        {"name": "age", "type": ["null", "long"]}, {"name": "plan", "type": "string"},
        {"name": "vip", "type": ["null", "boolean"]}]}
    client = MockSchemaRegistryClient({"url": "mock://features"})
    schema_id = client.register_schema("e-value", Schema(orjson.dumps(schema).decode(), "AVRO"))
    rows = [{"op": "insert", "id": "r-1", "y": 1.0, "age": 30, "plan": "pro", "vip": None},
            {"op": "insert", "id": "r-2", "y": 0.0, "age": None, "plan": "free", "vip": True}]
    msgs = [Message(topic="t", partition=0, offset=j, key=b"k", timestamp=(1, j),
                    value=framed(schema_id, _avro(schema, r))) for j, r in enumerate(rows)]
    decoder = InputDecoder("avro", client, named=[f.name for f in spec.fields])
    batch, _, _ = prepare_framed(PlanCache(decoder, spec.dim), msgs, dim=spec.dim, max_bytes=BIG, features=spec)
    decoded = decode_batch(batch, dim=spec.dim, max_bytes=BIG, features=spec)
    got = outcomes(decoded)
    assert got[0][0] == "insert"
    assert got[0][1] == vectorize(spec, {"age": 30, "plan": "pro"})[0].view(np.uint64).tolist()
    assert got[1][:2] == ("dead", "bad_features") and "'age'" in got[1][2]


def test_the_planner_reads_a_named_sample_through_the_spec(tmp_path, capsys, monkeypatch):
    """olu-worker plan --features-file: the sample's records become the worker's vectors, bit for bit."""
    from worker.cli import main
    from worker.planning.sample import read_sample
    from worker.planning.target import build_engine, resolve_target

    for name in [n for n in __import__("os").environ if n.startswith("OLU_")]:
        monkeypatch.delenv(name)
    spec_path = tmp_path / "features.yaml"
    spec_path.write_text("features:\n  - {name: age, type: numeric, range: [18, 90]}\n"
                         "  - {name: plan, type: categorical, vocabulary: [free, pro]}\n")
    rng = np.random.default_rng(4)
    records = [{"op": "insert", "id": f"u-{j}", "age": int(rng.integers(10, 99)), "plan": ["free", "pro"][j % 2],
                "y": j % 2} for j in range(400)]
    sample = tmp_path / "sample.jsonl"
    sample.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    settings = load_settings(["--features-file", str(spec_path), "--privacy-unit", "per-request"], {},
                             command="plan")
    read = read_sample(str(sample), build_engine(settings, resolve_target(settings)), settings.feature_spec)
    expected = np.array([vectorize(settings.feature_spec, r)[0] for r in records])
    assert np.array_equal(read.X.view(np.uint64), expected.view(np.uint64))
    code = main(["plan", "--features-file", str(spec_path), "--privacy-unit", "per-request", "--sample",
                 str(sample), "--deletion-rate", "0.01", "--events", "20000", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = orjson.loads(out)
    assert report["dim"] == 5 and report["feature_bound"] == pytest.approx(math.sqrt(3))
    records[3].pop("age")
    sample.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    assert main(["plan", "--features-file", str(spec_path), "--privacy-unit", "per-request", "--sample",
                 str(sample), "--deletion-rate", "0.01"]) == 2
    assert "line 4: no 'age' field" in capsys.readouterr().err


def test_the_compiled_reader_takes_utf8_values_and_nested_fields_it_does_not_name():
    spec = parse_spec({"features": [{"name": "ville", "type": "categorical", "vocabulary": ["Zürich", "東京"]},
                                    {"name": "tag", "type": "hashed", "buckets": 16}]})
    records = [{"op": "insert", "id": "r-0", "y": 1, "ville": "東京", "tag": "ça", "meta": {"a": [1, {"b": None}], "c": "ü"}},
               {"op": "insert", "id": "r-1", "y": 0, "ville": "Zürich", "tag": "x", "deep": [[[[]]], {}]}]
    msgs = [Message(topic="t", partition=0, offset=j, key=b"k", value=orjson.dumps(r), timestamp=(1, j))
            for j, r in enumerate(records)]
    batch = decode_batch(msgs, dim=spec.dim, max_bytes=BIG, features=spec)
    assert batch.scan.accepted.all()
    for j, r in enumerate(records):
        assert batch.scan.X[j].tobytes() == vectorize(spec, r)[0].tobytes()


def test_a_wide_hashed_field_is_read_sparse_by_its_entries():
    """A hashed field of 2^18 buckets under OLU_SPARSE_INPUT: the reader writes each record's field
    coordinates as entries (never 2,000 x 2 MB of dense fields), and its CSR rows are the Python
    decoder's."""
    spec = parse_spec({"features": [{"name": "a", "type": "numeric", "range": [0, 1]},
                                    {"name": "page", "type": "hashed", "buckets": 1 << 18},
                                    {"name": "c", "type": "categorical", "vocabulary": ["u", "v"]}],
                       "derived": [{"type": "cross", "fields": ["page", "c"], "buckets": 64}]})
    records = [{"op": "insert", "id": f"r-{j}", "y": j % 2, "a": j / 20, "page": f"/p/{j % 7}", "c": "uv"[j % 2]}
               for j in range(20)]
    records[5] = {"op": "delete", "id": "r-1"}
    msgs = [Message(topic="t", partition=0, offset=j, key=b"k", value=orjson.dumps(r), timestamp=(1, j))
            for j, r in enumerate(records)]
    compiled = decode_batch(msgs, dim=spec.dim, max_bytes=BIG, features=spec, sparse=True)
    assert compiled.scan.accepted.sum() == 19
    with python_decoder():
        reference = decode_batch(msgs, dim=spec.dim, max_bytes=BIG, features=spec, sparse=True)
    assert sparse_outcomes(compiled) == sparse_outcomes(reference)
