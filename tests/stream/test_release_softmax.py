"""Releases of a softmax (K-class) model in every format (worker/stream/output/releases.py,
worker/formats/release.py): ``classes`` and the K x dim matrix row by row, checked against the JSON
Schema, round-tripped through Avro and JSON Schema framing, and the binary releases unchanged.
"""

from __future__ import annotations

import copy
import io
import json
import uuid

import fastavro
import numpy as np
import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from tests.infra.schema_samples import validate
from worker.formats.release import ReleaseEncoder, ReleaseReader, avro_schema, release_json_schema
from worker.olu import PassiveOLU
from worker.stream.output.releases import release_value

TOPIC = "params"
ROWS = [([0.5, -0.25], 0), ([0.25, 0.5], 1), ([-0.5, 0.125], 2), ([0.1, 0.1], 1)]


def _softmax_release(classes, *, delete: bool = False) -> tuple[bytes, PassiveOLU]:
    model = PassiveOLU(dim=2, loss="softmax", classes=classes, l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)
    for i, (x, k) in enumerate(ROWS):
        model.learn_one(f"r-{i}", x, classes[k])
    if delete:
        model.unlearn_one("r-0")
    return release_value(model_name="ctr", topic="clicks", partition=1, offset=4,
                         event_time_ms=1_763_800_000_250, model=model), model


@pytest.fixture
def client():
    from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
        MockSchemaRegistryClient,
    )

    return MockSchemaRegistryClient({"url": "mock://release-softmax"})


@pytest.mark.parametrize("classes", [["cat", "dog", "owl"], [3, -1, 7]])
def test_a_softmax_release_carries_its_classes_and_the_matrix_row_by_row(classes):
    value, model = _softmax_release(classes, delete=True)
    record = orjson.loads(value)
    validate("release", record)
    keys = list(record)
    assert keys.index("classes") == keys.index("loss") + 1  # next to the loss it belongs to
    assert (record["loss"], record["classes"], record["dim"]) == ("softmax", classes, 2)
    matrix = np.asarray(record["weights"]).reshape(3, 2)  # row k = class classes[k]
    np.testing.assert_array_equal(matrix.ravel(), model.weights)
    for k in range(3):
        np.testing.assert_array_equal(matrix[k], model.z[k * 2:(k + 1) * 2])
    assert record["privacy"]["noise_std"] > 0  # the deletion's noise, over all K x dim coordinates


def test_binary_releases_are_byte_identical_to_before():
    """A logistic release, as the worker published it before softmax existed: no ``classes`` key,
    the same bytes (a replay after an upgrade still deduplicates)."""
    model = PassiveOLU(dim=2, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)
    model.learn_one("r-1", [0.5, -0.25], 1)
    model.learn_one("r-2", [0.25, 0.5], 0)
    value = release_value(model_name="ctr", topic="clicks", partition=1, offset=2,
                          event_time_ms=1_763_800_000_250, model=model)
    assert value == (
        b'{"schema_version":1,"model":"ctr","topic":"clicks","partition":1,"version":2,"offset":2,"t":2,'
        b'"deletions":0,"epoch":0,"algorithm":"passive","loss":"logistic","dim":2,'
        b'"weights":[0.8620689655172411,-2.586206896551724],'
        b'"privacy":{"unit":"all-deletions","rho":1.0,"target_epsilon":null,"requests":0,"eps_rdp_slope":0.0,'
        b'"budget_used":0.0,"epsilon":0.0,"delta":0.00001,"deletions_capacity_left":null,"noise_std":0.0,'
        b'"noise_to_signal":0.0},"released_at":1763800000.25}')
    ridge = PassiveOLU(dim=2, loss="ridge", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)
    ridge.learn_one("r-1", [0.5, -0.25], 0.5)
    assert b"classes" not in release_value(model_name="m", topic="in", partition=0, offset=1, event_time_ms=0,
                                           model=ridge)


@pytest.mark.parametrize("fmt", ["avro", "json-schema"])
@pytest.mark.parametrize("classes", [["cat", "dog", "owl"], [3, -1, 7]])
def test_registry_formats_round_trip_a_softmax_release(client, fmt, classes):
    value, _ = _softmax_release(classes, delete=True)
    framed = ReleaseEncoder(fmt, client, TOPIC).encode(value)
    assert framed[0] == 0  # Schema Registry framing
    back = ReleaseReader(client).read(TOPIC, framed)
    assert back == value  # the JSON value, byte for byte, classes' types included
    assert orjson.loads(back)["classes"] == classes


@pytest.mark.parametrize("fmt", ["avro", "json-schema"])
def test_registry_formats_round_trip_a_binary_release_without_classes(client, fmt):
    model = PassiveOLU(dim=2, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)
    model.learn_one("r-1", [0.5, -0.25], 1)
    value = release_value(model_name="ctr", topic="clicks", partition=0, offset=1, event_time_ms=0, model=model)
    back = ReleaseReader(client).read(TOPIC, ReleaseEncoder(fmt, client, TOPIC).encode(value))
    assert back == value and b"classes" not in back  # Avro's null for the absent field is dropped


def _avro_without_classes() -> dict:
    schema = json.loads(avro_schema())
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "classes"]
    return schema


def test_the_avro_classes_field_evolves_compatibly():
    schema = json.loads(avro_schema())
    (field,) = [f for f in schema["fields"] if f["name"] == "classes"]
    assert field == {"name": "classes", "type": ["null", {"type": "array", "items": ["string", "long"]}],
                     "default": None}
    # a release written before the field existed reads under the new schema with classes = null
    old = fastavro.parse_schema(_avro_without_classes())
    record = orjson.loads(release_value(model_name="m", topic="in", partition=0, offset=0, event_time_ms=0,
                                        model=PassiveOLU(dim=2, loss="logistic", l2=0.01)))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old, record)
    buf.seek(0)
    read = fastavro.schemaless_reader(buf, old, fastavro.parse_schema(schema))
    assert read["classes"] is None and read["weights"] == record["weights"]


def test_the_avro_derivation_refuses_a_union_it_cannot_express():
    from worker.formats import release

    with pytest.raises(ValueError, match="scalar types only"):
        release._record("R", {"properties": {"f": {"type": ["string", "array"], "items": {"type": "string"}}}})


@pytest.mark.registry
@pytest.mark.parametrize("fmt", ["avro", "json-schema"])
def test_the_registry_accepts_the_softmax_schema_after_the_binary_one(schema_registry_url, fmt):
    """BACKWARD compatibility, the registry's own check: the schema from before softmax registered
    first under a subject, then the current one, as a worker upgraded in place registers it. Apicurio
    cannot compare draft 2020-12 JSON Schemas at all ("could not determine version", for any change),
    so the JSON pair is compared as draft-07, the same keywords under the rules it ported from the
    Confluent registry (they refuse a conditional root schema, hence no if/then in the schema)."""
    from confluent_kafka.schema_registry import Schema

    client = SchemaRegistryClient({"url": schema_registry_url})
    subject = f"softmax-evolution-{fmt}-{uuid.uuid4().hex[:8]}-value"
    if fmt == "avro":
        before, now, kind = json.dumps(_avro_without_classes()), avro_schema(), "AVRO"
    else:
        spec = json.loads(release_json_schema()) | {"$schema": "http://json-schema.org/draft-07/schema#"}
        old = copy.deepcopy(spec)
        del old["properties"]["classes"]
        old["properties"]["loss"]["enum"].remove("softmax")
        old["properties"]["weights"]["maxItems"] = 65536
        before, now, kind = json.dumps(old), json.dumps(spec), "JSON"
    first = client.register_schema(subject, Schema(before, kind))
    second = client.register_schema(subject, Schema(now, kind))
    assert first != second
    assert client.get_latest_version(subject).schema_id == second


def test_the_start_check_sizes_a_softmax_release_by_its_matrix():
    """K x d weights: d = 4,096 alone fits a 1 MiB topic as JSON (~110 KB), 16 classes of it do not."""
    from types import SimpleNamespace

    from worker.exceptions import ConfigError as SettingsError
    from worker.stream.output.release_size import check_release_fits, release_bytes_bound

    def settings(loss, classes=None, release_format="json"):
        return SimpleNamespace(dim=4096, loss=loss, classes=classes, release_format=release_format, feature_spec=None,
                               params_topic="params", admin_config=lambda: {})

    binary, softmax = settings("logistic"), settings("softmax", [f"class-{k}" for k in range(16)])
    assert release_bytes_bound(softmax) > 16 * release_bytes_bound(binary) - 16 * 8192
    limit_of = lambda config, topic: 1_048_588  # noqa: E731 - Kafka's default topic limit
    check_release_fits(binary, limit_of)
    with pytest.raises(SettingsError, match="OLU_DIM 4,096 x 16 OLU_CLASSES.*OLU_RELEASE_FORMAT=avro"):
        check_release_fits(softmax, limit_of)
    check_release_fits(settings("softmax", [f"class-{k}" for k in range(16)], "avro"), limit_of)  # 8 bytes a weight
