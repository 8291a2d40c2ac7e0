"""Sparse x on the wire (``{"indices", "values"}``, OLU_SPARSE_INPUT): decoded as the contract says,
dead-lettered with a reason otherwise, and learned by the worker on the real broker exactly as the
engine learns the same rows, whatever the poll batches were."""

from __future__ import annotations

import json
import uuid

import numpy as np
import orjson
import pytest
from confluent_kafka import Message, Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.features.test_feature_spec import sparse_outcomes
from tests.infra.schema_samples import decode_headers
from tests.stream.kafka_harness import (
    WorkerProcess,
    read_topic,
    settings_of,
    topics_for,
    wait_for,
    worker_env,
)
from tests.stream.test_decode import BAD_NUMBER, GOOD_NUMBER
from worker.client import ParamsSubscriber
from worker.config.loading import load_settings
from worker.config.model import build_model
from worker.exceptions import ConfigError
from worker.olu.core.sparse import SparseRows
from worker.stream.exceptions import DeadLetter
from worker.stream.input.batch import decode_batch
from worker.stream.input.decode import Insert, decode_event
from worker.stream.input.scan import python_decoder
from worker.stream.output.release_size import check_release_fits

DIM = 4096


def _record(record_id: str, x, y=1) -> bytes:
    return orjson.dumps({"op": "insert", "id": record_id, "x": x, "y": y})


def test_sparse_x_is_read_in_either_mode():
    value = _record("r-1", {"indices": [2, 7], "values": [0.5, -1]})
    sparse = decode_event(b"k", value, dim=8, max_bytes=4096, sparse=True)
    indices, values = sparse.x
    assert list(indices) == [2, 7] and list(values) == [0.5, -1]
    dense = decode_event(b"k", value, dim=8, max_bytes=4096)
    assert dense.x == [0, 0, 0.5, 0, 0, 0, 0, -1.0]
    from_array = decode_event(b"k", _record("r-1", [0, 0, 0.5, 0, 0, 0, 0, -1]), dim=8, max_bytes=4096, sparse=True)
    assert list(from_array.x[0]) == [2, 7] and list(from_array.x[1]) == [0.5, -1.0]


@pytest.mark.parametrize("x, reason, named", [
    ({"indices": [1]}, "bad_features", "'values'"),
    ({"indices": [1], "values": [0.5], "dim": 3}, "bad_features", "'dim'"),
    ({"indices": "1", "values": [0.5]}, "bad_features", "x.indices"),
    ({"indices": [1, 2], "values": [0.5]}, "bad_features", "x.values"),
    ({"indices": [1.0], "values": [0.5]}, "bad_features", "x.indices[0]"),
    ({"indices": [True], "values": [0.5]}, "bad_features", "x.indices[0]"),
    ({"indices": [1], "values": ["0.5"]}, "bad_features", "x.values[0]"),
    ({"indices": [3, 3], "values": [0.5, 0.5]}, "bad_features", "x.indices[1]"),
    ({"indices": [5, 3], "values": [0.5, 0.5]}, "bad_features", "x.indices[1]"),
    ({"indices": [8], "values": [0.5]}, "wrong_dimension", "x.indices[0]"),
    ({"indices": [-1], "values": [0.5]}, "wrong_dimension", "x.indices[0]"),
    ({"indices": [2**62], "values": [0.5]}, "wrong_dimension", "x.indices[0]"),
])
@pytest.mark.parametrize("sparse", [True, False])
def test_bad_sparse_x_is_a_dead_letter_naming_the_place(x, reason, named, sparse):
    value = b'{"op":"insert","id":"r-1","x":%s,"y":1}' % orjson.dumps(x)
    with pytest.raises(DeadLetter) as dead:
        decode_event(b"k", value, dim=8, max_bytes=8192, sparse=sparse)
    assert dead.value.reason == reason and named in dead.value.detail
    assert "0.5" not in dead.value.detail  # never a value


class _Msg:
    def __init__(self, offset: int, key: bytes, value: bytes | None):
        self._offset, self._key, self._value = offset, key, value

    def key(self):
        return self._key

    def value(self):
        return self._value

    def offset(self):
        return self._offset

    def timestamp(self):
        return (1, 1000 + self._offset)

    def topic(self):
        return "t"

    def partition(self):
        return 0

    def headers(self):
        return None


def _stream(n: int, seed: int, deletes: bool = False) -> list[tuple[bytes, bytes | None]]:
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        idx = np.sort(rng.choice(DIM, 20, replace=False))
        v = rng.normal(size=20)
        v *= rng.random() / np.linalg.norm(v)
        out.append((f"r-{seed}-{j}".encode(), _record(f"r-{seed}-{j}", {"indices": idx.tolist(), "values": v.tolist()},
                                                       int(v[0] > 0))))
        if deletes and j % 50 == 49:
            out.append((f"r-{seed}-{j - 30}".encode(), None))
    return out


def test_a_batch_decodes_into_sparse_runs_and_its_events():
    stream = _stream(120, seed=1, deletes=True) + [(b"bad", _record("bad", {"indices": [DIM], "values": [1.0]}))]
    messages = [_Msg(j, k, v) for j, (k, v) in enumerate(stream)]
    batch = decode_batch(messages, dim=DIM, max_bytes=1 << 20, sparse=True)
    runs = [batch.run(a, b) for a, b, accepted in batch.stretches if accepted]
    assert all(isinstance(r.X, SparseRows) for r in runs) and sum(len(r.y) for r in runs) == 120
    first = decode_event(*stream[0], dim=DIM, max_bytes=1 << 20, sparse=True)
    assert runs[0].X.row(0)[0].tolist() == first.x[0] and runs[0].X.row(0)[1].tolist() == first.x[1]
    assert runs[0].X.indices.dtype == np.int64 and runs[0].X.values.dtype == np.float64
    assert [type(e).__name__ for e in batch.events.values()] == ["Delete", "Delete", "DeadLetter"]


def test_sparse_input_is_for_json_without_a_spec():
    base = {"OLU_DIM": "8", "OLU_SPARSE_INPUT": "true", "OLU_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
            "OLU_PRIVACY_UNIT": "per-request"}
    assert load_settings([], base).sparse_input is True
    with pytest.raises(ConfigError, match="OLU_SPARSE_INPUT"):
        load_settings([], {**base, "OLU_INPUT_FORMAT": "avro", "OLU_SCHEMA_REGISTRY_URL": "http://r:8081"})


# --------------------------------------------------------------------------- the real broker
def _produce(bootstrap: str, topic: str, records) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


@pytest.mark.kafka
def test_the_worker_learns_sparse_rows_as_the_engine_does(kafka_bootstrap, kafka_topic, tmp_path):
    topics = topics_for(kafka_topic, 1)
    stream = _stream(900, seed=2)
    bad = [(b"b-1", _record("b-1", {"indices": [5, 5], "values": [0.1, 0.2]})),
           (b"b-2", _record("b-2", {"indices": [DIM + 1], "values": [0.1]})),
           (b"b-3", _record("b-3", {"indices": [7, 9], "values": [1.5, 2.0]}))]  # norm 2.5: the engine refuses it
    _produce(kafka_bootstrap, topics.input, stream[:400] + bad + stream[400:])
    env = worker_env(kafka_bootstrap, topics, f"g-{uuid.uuid4().hex[:6]}", f"file://{tmp_path / 'state'}",
                     OLU_DIM=str(DIM), OLU_SPARSE_INPUT="true", OLU_BATCH_SIZE="97")
    proc = WorkerProcess(env, tmp_path / "w.log").start()
    try:
        with ParamsSubscriber(kafka_bootstrap, topics.params) as sub:
            def learned():
                sub.poll(0.5)
                latest = sub.latest(topics.input, 0)
                return latest is not None and latest.t >= len(stream) and latest
            release = wait_for(learned, 90, "every valid event learned")
        oracle = build_model(settings_of(env))
        events = [decode_event(k, v, dim=DIM, max_bytes=1 << 20, sparse=True) for k, v in stream]
        assert all(isinstance(e, Insert) for e in events)
        oracle.learn_many([e.id for e in events], SparseRows.from_rows([e.x for e in events]),
                          np.array([e.y for e in events]))
        assert np.asarray(release.weights).tobytes() == oracle.weights.tobytes()  # any batching: the same bits
        # deletions: dense noise on the sparse model's iterate, one release each
        _produce(kafka_bootstrap, topics.input, [(b"r-2-10", None), (b"r-2-11", None)])
        with ParamsSubscriber(kafka_bootstrap, topics.params) as sub:
            def deleted():
                sub.poll(0.5)
                latest = sub.latest(topics.input, 0)
                return latest is not None and latest.deletions >= 2 and latest
            after = wait_for(deleted, 60, "both deletions released")
        assert not np.array_equal(after.weights, release.weights)
        assert proc.terminate() == 0
    finally:
        proc.cleanup()
    dead = {r.key: decode_headers(list(r.headers.items())) for r in read_topic(kafka_bootstrap, topics.dlq)}
    assert {k: v["olu.error.reason"] for k, v in dead.items()} == {b"b-1": "bad_features", b"b-2": "wrong_dimension",
                                                                  b"b-3": "norm_exceeded"}


@pytest.mark.kafka
def test_a_release_larger_than_the_params_topic_takes_is_refused_at_start(kafka_bootstrap, kafka_topic, tmp_path):
    """d = 65,536 as JSON can take 1.6 MB; the topic at Kafka's default takes 1 MiB: the worker says so
    and exits 2 before consuming, instead of failing at its first release."""
    topics = topics_for(kafka_topic, 1)
    topics.params = kafka_topic(partitions=1, max_message_bytes=1_048_588)  # Kafka's default, whatever the broker's
    env = worker_env(kafka_bootstrap, topics, f"g-{uuid.uuid4().hex[:6]}", f"file://{tmp_path / 'state'}",
                     OLU_DIM="65536", OLU_SPARSE_INPUT="true")
    settings = settings_of(env)
    with pytest.raises(ConfigError, match="max.message.bytes 1,048,588.*OLU_RELEASE_FORMAT=avro"):
        check_release_fits(settings)
    check_release_fits(settings_of({**env, "OLU_DIM": "4096"}))  # 100 KB: fits without asking
    proc = WorkerProcess(env, tmp_path / "w.log").start()
    try:
        wait_for(lambda: proc.proc.poll() is not None, 60, "the refusal")
        assert proc.proc.returncode == 2 and "OLU_RELEASE_FORMAT=avro" in proc.log_text()
    finally:
        proc.cleanup()


def test_a_feature_specs_vectors_become_sparse_rows(tmp_path):
    """One-hot and hashed slots are mostly zeros: under OLU_SPARSE_INPUT the spec's vector is
    learned by its non-zeros, the same vector the dense path makes, clipped fields still counted."""
    from worker.features.spec import parse_spec
    from worker.features.transform import vectorize

    spec = parse_spec({"features": [{"name": "age", "type": "numeric", "range": [18, 90]},
                                    {"name": "page", "type": "hashed", "buckets": 4096},
                                    {"name": "plan", "type": "categorical", "vocabulary": ["free", "pro"]}]})
    records = [{"op": "insert", "id": f"u-{j}", "y": j % 2, "age": 10 + 7 * j, "page": f"/p/{j}",
                "plan": ["free", "pro", "team"][j % 3]} for j in range(40)]
    messages = [_Msg(j, r["id"].encode(), orjson.dumps(r)) for j, r in enumerate(records)]
    batch = decode_batch(messages, dim=spec.dim, max_bytes=1 << 20, features=spec, sparse=True)
    assert batch.stretches == [(0, 40, True)]
    run = batch.run(0, 40)
    assert isinstance(run.X, SparseRows) and len(run.X.indices) < 5 * 40  # a few non-zeros a record
    want = np.array([vectorize(spec, r)[0] for r in records])
    assert run.X.to_dense(spec.dim).tobytes() == want.tobytes()
    assert batch.count_clipped(len(spec.fields))[0] == sum(not 18 <= r["age"] <= 90 for r in records)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.text)
    settings = load_settings([], {"OLU_FEATURES_FILE": str(spec_path), "OLU_SPARSE_INPUT": "true",
                                  "OLU_KAFKA_BOOTSTRAP_SERVERS": "k:9092", "OLU_PRIVACY_UNIT": "per-request"})
    assert settings.sparse_input and settings.dim == spec.dim


# ------------------------------------------------------------------ the compiled reader
@st.composite
def sparse_records(draw) -> bytes:
    """A sparse insert's value: mostly a valid ``{"indices", "values"}`` x, sometimes an array, or
    one of the mistakes sparse_x.py names (and, in the caller, any byte mutation)."""
    dim = 8
    indices = sorted(draw(st.sets(st.integers(0, dim - 1), max_size=dim)))
    values = draw(st.lists(GOOD_NUMBER, min_size=len(indices), max_size=len(indices)))
    x: object = {"indices": indices, "values": values}
    mistake = draw(st.integers(0, 12))
    if mistake == 1 and indices:
        x["indices"] = list(reversed(indices)) if len(indices) > 1 else [dim]
    elif mistake == 2:
        x["indices"] = indices + indices[-1:]
    elif mistake == 3:
        x["values"] = values + [1.0]
    elif mistake == 4 and indices:
        x["indices"] = [draw(st.sampled_from([-1, 1.0, True, "1", 2**70, None]))] + indices[1:]
    elif mistake == 5:
        x["dim"] = dim
    elif mistake == 6:
        x = {"values": values, "indices": indices}  # the other key order
    elif mistake == 7:
        x = draw(st.lists(GOOD_NUMBER, min_size=dim, max_size=dim + 1))  # an array
    elif mistake == 8:
        x = {"indices": indices}
    elif mistake == 9 and values:
        x["values"] = [draw(BAD_NUMBER)] + values[1:]
    record = {"op": "insert", "id": draw(st.sampled_from(["r-1", "r-2"])), "x": x,
              "y": draw(st.sampled_from([0, 1]))}
    return json.dumps(record).encode()  # json: integers past 64 bits, NaN (not JSON: refused)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(sparse_records(), min_size=1, max_size=6), st.data())
def test_the_compiled_reader_reads_sparse_x_as_the_decoder_does(values, data):
    """Sparse x through the compiled scan and through the Python decoder: the same entries, the
    same dead letters, the same deletes, bit for bit (zeros in the sparse form kept, an array's
    dropped)."""
    if data.draw(st.booleans()):  # a byte mutated, inserted or cut somewhere
        k = data.draw(st.integers(0, len(values) - 1))
        cut = data.draw(st.integers(0, len(values[k])))
        values[k] = (values[k][:cut] + data.draw(st.binary(max_size=2))
                     + values[k][cut + data.draw(st.integers(0, 2)):])
    if data.draw(st.booleans()):
        values.append(b'{"op":"delete","id":"r-1"}')
    msgs = [Message(topic="t", partition=0, offset=j, key=b"k", value=v, timestamp=(1, j))
            for j, v in enumerate(values)]
    compiled = decode_batch(msgs, dim=8, max_bytes=4096, sparse=True)
    with python_decoder():
        reference = decode_batch(msgs, dim=8, max_bytes=4096, sparse=True)
    assert compiled.scan is not None
    assert sparse_outcomes(compiled) == sparse_outcomes(reference)


def test_the_compiled_reader_takes_the_common_sparse_record():
    values = [_record(f"r-{j}", {"indices": [j, 40 + j], "values": [0.5, 0]}) for j in range(4)]
    msgs = [Message(topic="t", partition=0, offset=j, key=b"k", value=v, timestamp=(1, j))
            for j, v in enumerate(values)]
    batch = decode_batch(msgs, dim=DIM, max_bytes=4096, sparse=True)
    assert batch.scan.accepted.all() and batch.stretches == [(0, 4, True)]
    assert batch.scan.X.indptr.tolist() == [0, 2, 4, 6, 8]
    assert batch.scan.X.row(3)[0].tolist() == [3, 43] and batch.scan.X.row(3)[1].tolist() == [0.5, 0.0]
