"""Softmax input (OLU_LOSS=softmax, OLU_CLASSES): an insert's ``y`` is a class name (string classes,
read by the Python decoder) or a number (integer classes, read by the compiled scan too); the model
learns the rows as the engine's ``learn_many`` does, bit for bit, dead-letters an unknown label with
``bad_label`` naming it while the rest of the batch is learned, and the prequential loss is the mean
cross-entropy. On the real broker: the released weights are the engine's, and a deletion is noised."""

from __future__ import annotations

import math
import uuid

import numpy as np
import orjson
import pytest
from confluent_kafka import Message, Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.infra.schema_samples import decode_headers
from tests.stream.kafka_harness import (
    WorkerProcess,
    read_topic,
    settings_of,
    topics_for,
    wait_for,
    worker_env,
)
from tests.stream.test_framed_scan import outcomes
from worker.config import load_settings
from worker.config.model import build_model
from worker.olu import PassiveOLU
from worker.olu.batches.quality import softmax_mean_loss
from worker.olu.core.sparse import SparseRows
from worker.state.store import SnapshotStore, open_store
from worker.stream.exceptions import DeadLetter
from worker.stream.input.batch import decode_batch
from worker.stream.input.decode import decode_event
from worker.stream.input.scan import python_decoder
from worker.stream.partition import PartitionRunner

CLASSES = ("fraud", "ok", "review")
DIM = 3


def _rows(n: int, seed: int, classes=CLASSES) -> list[tuple[str, list[float], object]]:
    """(id, x, y): ||x|| < 1, the class a noisy function of x (something to learn)."""
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        x = rng.normal(size=DIM)
        x *= rng.uniform(0.1, 0.95) / np.linalg.norm(x)
        out.append((f"r-{seed}-{j}", x.tolist(), classes[int(np.argmax(x + 0.3 * rng.normal(size=DIM)))]))
    return out


def _value(record_id: str, x, y) -> bytes:
    return orjson.dumps({"op": "insert", "id": record_id, "x": x, "y": y})


def _messages(events: list[tuple[bytes, bytes | None]]) -> list[Message]:
    return [Message(topic="t", partition=0, offset=j, key=k, value=v, timestamp=(1, 1_700_000_000_000 + j))
            for j, (k, v) in enumerate(events)]


def _runner(classes: str, **env) -> PartitionRunner:
    settings = load_settings([], {"OLU_DIM": str(DIM), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                                  "OLU_LOSS": "softmax", "OLU_CLASSES": classes, "OLU_RELEASE_EVERY_EVENTS": "50",
                                  **env})
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    return PartitionRunner("t", 0, build_model(settings), snapshots=snapshots, settings=settings, model_name="m")


def _oracle(rows, classes) -> PassiveOLU:
    model = PassiveOLU(dim=DIM, loss="softmax", classes=list(classes), l2=0.01)
    model.learn_many([r[0] for r in rows], np.array([r[1] for r in rows]), [r[2] for r in rows])
    return model


# --------------------------------------------------------------------------- decoding
def test_a_class_name_is_the_label_only_with_string_classes():
    value = _value("r-1", [0.5, 0.25, 0.0], "review")
    assert decode_event(b"k", value, dim=DIM, max_bytes=4096, labels=True).y == "review"
    with pytest.raises(DeadLetter) as numeric_only:  # binary losses and integer classes read numbers
        decode_event(b"k", value, dim=DIM, max_bytes=4096)
    assert numeric_only.value.reason == "bad_label" and "expected a number" in numeric_only.value.detail
    for y, named in [(1, "'y' is a integer"), (None, "'y' is a null"), (["ok"], "'y' is a array"),
                     ("", "0 characters"), ("x" * 257, "257 characters")]:
        with pytest.raises(DeadLetter) as dead:
            decode_event(b"k", _value("r-1", [0.5, 0.25, 0.0], y), dim=DIM, max_bytes=4096, labels=True)
        assert dead.value.reason == "bad_label" and named in dead.value.detail, dead.value.detail
    with pytest.raises(DeadLetter, match="no 'y' field"):
        decode_event(b"k", b'{"op":"insert","id":"r-1","x":[0,0,0]}', dim=DIM, max_bytes=4096, labels=True)


def test_a_batch_of_class_names_decodes_into_runs_of_raw_labels():
    rows = _rows(30, seed=1)
    events = [(r[0].encode(), _value(*r)) for r in rows]
    events.insert(12, (b"r-1-3", None))  # a tombstone between two runs
    events.insert(20, (b"bad", _value("bad", [0.1, 0.1, 0.1], 7)))
    python = decode_batch(_messages(events), dim=DIM, max_bytes=4096, labels=True)
    assert python.scan is None  # without the classes, the Python decoder reads the names
    compiled = decode_batch(_messages(events), dim=DIM, max_bytes=4096, labels=True, classes=CLASSES)
    assert compiled.scan is not None
    for batch in (python, compiled):
        runs = [batch.run(a, b) for a, b, accepted in batch.stretches if accepted]
        assert all(run.y.dtype == object for run in runs)
        assert [y for run in runs for y in run.y.tolist()] == [r[2] for r in rows]
        assert [type(e).__name__ for e in batch.events.values()] == ["Delete", "DeadLetter"]


def _outcomes(batch) -> list:
    """Per message: ("insert", x's bits, the label, the id's key), the delete, or the dead letter."""
    return outcomes(batch, raw_labels=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["fraud", "ok", "r\u00e9vision", "okay", "", "f\"x"]),
                          st.sampled_from(["name", "number", "missing"])), min_size=1, max_size=8))
def test_the_compiled_scan_reads_class_names_as_the_decoder_does(labels):
    """Class names through the compiled scan and through the Python decoder: the same inserts
    (each label the same name), the same dead letters; a name the scan cannot compare (not
    ASCII, an escape) or none of the classes is the Python decoder's to read."""
    classes = ("fraud", "ok", "r\u00e9vision")
    events = []
    for j, (name, kind) in enumerate(labels):
        record = {"op": "insert", "id": f"r-{j}", "x": [0.1, 0.2, 0.3]}
        if kind != "missing":
            record["y"] = name if kind == "name" else j
        events.append((f"r-{j}".encode(), orjson.dumps(record)))
    msgs = _messages(events)
    compiled = decode_batch(msgs, dim=DIM, max_bytes=4096, labels=True, classes=classes)
    with python_decoder():
        reference = decode_batch(msgs, dim=DIM, max_bytes=4096, labels=True, classes=classes)
    assert _outcomes(compiled) == _outcomes(reference)


# --------------------------------------------------------------------------- the partition runner
def test_the_runner_learns_class_names_as_the_engine_does_and_dead_letters_an_unknown_one():
    rows = _rows(300, seed=2)
    events = [(r[0].encode(), _value(*r)) for r in rows]
    events.insert(100, (b"u-1", _value("u-1", [0.2, 0.1, 0.0], "fraudulent")))  # not a class
    events.insert(200, (b"u-2", _value("u-2", [0.2, 0.1, 0.0], 2)))  # a number: the classes are names
    events.insert(250, (b"ghost", orjson.dumps({"op": "delete", "id": "nobody"})))  # deletes nothing
    runner = _runner(",".join(CLASSES))
    msgs = _messages(events)
    outs = [runner.process(msgs[j:j + 37]) for j in range(0, len(msgs), 37)]
    dead = [d for out in outs for d in out.dead_letters]
    assert [(d.message.key(), d.reason) for d in dead] == [(b"u-1", "bad_label"), (b"u-2", "bad_label")]
    assert "'fraudulent'" in dead[0].detail and "not one of the 3 declared classes" in dead[0].detail
    assert sum(out.inserts for out in outs) == len(rows) and runner.next_offset == len(msgs)
    oracle = _oracle(rows, CLASSES)
    assert runner.model.t == oracle.t == len(rows)
    assert runner.model.z.tobytes() == oracle.z.tobytes()  # any batching: the engine's bits
    assert runner.model.predict_one(rows[0][1]) in CLASSES


def test_integer_classes_take_the_compiled_scan_and_learn_the_same_bits():
    classes = (3, 7, 9)  # no class 0: the scan's declined rows must be filled with a class the loss takes
    rows = _rows(240, seed=3, classes=classes)
    events = [(r[0].encode(), _value(*r)) for r in rows]
    for at in (60, 130, 190):
        events.insert(at, (f"ghost-{at}".encode(), orjson.dumps({"op": "delete", "id": f"nobody-{at}"})))
    events.insert(90, (b"u-1", _value("u-1", [0.2, 0.1, 0.0], 5)))
    events.insert(150, (b"u-2", _value("u-2", [0.2, 0.1, 0.0], "7")))  # a string: the classes are numbers
    runner = _runner("3,7,9")
    msgs = _messages(events)
    outs = [runner.process(msgs[j:j + 50]) for j in range(0, len(msgs), 50)]
    dead = {d.message.key(): (d.reason, d.detail) for out in outs for d in out.dead_letters}
    assert dead[b"u-1"][0] == "bad_label" and "5" in dead[b"u-1"][1]
    assert dead[b"u-2"] == ("bad_label", "'y' is a string, expected a number")
    oracle = _oracle(rows, classes)
    assert runner.model.z.tobytes() == oracle.z.tobytes() and runner.model.t == len(rows)


def test_the_prequential_loss_is_the_cross_entropy_before_learning():
    rows = _rows(40, seed=4)
    runner = _runner(",".join(CLASSES))
    runner.process(_messages([(r[0].encode(), _value(*r)) for r in rows]))
    assert runner.prequential_loss == pytest.approx(math.log(3), rel=1e-12)  # the zero model: uniform


def test_softmax_mean_loss_is_the_mean_cross_entropy_on_every_row_form():
    model = PassiveOLU(dim=DIM, loss="softmax", classes=list(CLASSES), l2=0.01)
    rows = _rows(50, seed=5)
    model.learn_many([r[0] for r in rows], np.array([r[1] for r in rows]), [r[2] for r in rows])
    test = _rows(20, seed=6)
    X, y = np.array([r[1] for r in test]), [r[2] for r in test]
    reg = 0.5 * 0.01 * float(model.z @ model.z)
    want = np.mean([model.loss.value(model.z, x, model.loss.label(c)) - reg for x, c in zip(X, y)])
    raw = softmax_mean_loss(model.loss, X, np.array(y, object), model.z)
    mapped = softmax_mean_loss(model.loss, X, model.loss.labels(y), model.z, positions=True)
    sparse = softmax_mean_loss(model.loss, SparseRows.from_rows([(np.flatnonzero(x), x[x != 0]) for x in X]),
                               np.array(y, object), model.z)
    assert raw == pytest.approx(want, rel=1e-12) and mapped == pytest.approx(want, rel=1e-12)
    assert sparse == pytest.approx(want, rel=1e-12) and want > 0
    # an unknown label is left out, as are the rows outside the mask
    with_bad = softmax_mean_loss(model.loss, np.vstack([X, X[:1]]), np.array([*y, "nope"], object), model.z)
    assert with_bad == pytest.approx(want, rel=1e-12)
    mask = np.zeros(len(y), np.bool_)
    mask[:5] = True
    assert softmax_mean_loss(model.loss, X, np.array(y, object), model.z, mask) == pytest.approx(
        np.mean([model.loss.value(model.z, x, model.loss.label(c)) - reg for x, c in zip(X[:5], y[:5])]), rel=1e-12)
    assert math.isnan(softmax_mean_loss(model.loss, X[:1], np.array(["nope"], object), model.z))


# --------------------------------------------------------------------------- the real broker
def _produce(bootstrap: str, topic: str, records) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def _latest_release(bootstrap: str, topic: str) -> dict | None:
    found = read_topic(bootstrap, topic)
    return orjson.loads(found[-1].value) if found else None


@pytest.mark.kafka
def test_the_worker_learns_named_classes_as_the_engine_does(kafka_bootstrap, kafka_topic, tmp_path):
    topics = topics_for(kafka_topic, 1)
    rows = _rows(700, seed=7)
    stream = [(r[0].encode(), _value(*r)) for r in rows]
    bad = [(b"b-1", _value("b-1", [0.1, 0.2, 0.0], "chargeback")),  # not a declared class
           (b"b-2", _value("b-2", [0.1, 0.2, 0.0], 1)),  # a number where the classes are names
           (b"b-3", _value("b-3", [0.9, 0.9, 0.0], "ok"))]  # norm 1.27: the engine refuses it
    _produce(kafka_bootstrap, topics.input, stream[:300] + bad + stream[300:])
    env = worker_env(kafka_bootstrap, topics, f"g-{uuid.uuid4().hex[:6]}", f"file://{tmp_path / 'state'}",
                     OLU_DIM=str(DIM), OLU_LOSS="softmax", OLU_CLASSES='["fraud","ok","review"]',
                     OLU_BATCH_SIZE="97")
    proc = WorkerProcess(env, tmp_path / "w.log").start()
    try:
        def learned():
            latest = _latest_release(kafka_bootstrap, topics.params)
            return latest is not None and latest["t"] >= len(rows) and latest
        release = wait_for(learned, 90, "every valid event learned", interval=0.5)
        oracle = build_model(settings_of(env))
        oracle.learn_many([r[0] for r in rows], np.array([r[1] for r in rows]), [r[2] for r in rows])
        weights = np.array(release["weights"], np.float64)
        assert release["loss"] == "softmax" and release["dim"] == DIM and len(weights) == 3 * DIM
        if "classes" in release:  # the release names its classes in row order
            assert release["classes"] == list(CLASSES)
        assert weights.tobytes() == oracle.weights.tobytes()  # any batching: the engine's bits
        # a deletion: Gaussian noise over all K x d coordinates, in its release
        _produce(kafka_bootstrap, topics.input, [(rows[10][0].encode(), None)])

        def deleted():
            latest = _latest_release(kafka_bootstrap, topics.params)
            return latest is not None and latest["deletions"] >= 1 and latest
        after = wait_for(deleted, 60, "the deletion released", interval=0.5)
        noised = np.array(after["weights"], np.float64)
        assert after["t"] == release["t"] and after["privacy"]["noise_std"] > 0
        assert np.count_nonzero(noised != weights) == 3 * DIM  # every coordinate of every class moved
        assert proc.terminate() == 0
    finally:
        proc.cleanup()
    dead = {r.key: decode_headers(list(r.headers.items())) for r in read_topic(kafka_bootstrap, topics.dlq)}
    assert {k: v["olu.error.reason"] for k, v in dead.items()} == {b"b-1": "bad_label", b"b-2": "bad_label",
                                                                  b"b-3": "norm_exceeded"}
    assert "'chargeback'" in dead[b"b-1"]["olu.error.detail"]
    assert "expected a class label" in dead[b"b-2"]["olu.error.detail"]


def test_the_named_field_reader_reads_class_names_too():
    from worker.features.spec import parse_spec

    spec = parse_spec({"features": [{"name": "a", "type": "numeric", "range": [0, 1]},
                                    {"name": "c", "type": "categorical", "vocabulary": ["u", "v"]}]})
    records = [{"op": "insert", "id": f"r{j}", "a": j / 10, "c": "uv"[j % 2], "y": ["ok", "fraud", "nope", 3][j % 4]}
               for j in range(8)]
    msgs = _messages([(b"k", orjson.dumps(r)) for r in records])
    compiled = decode_batch(msgs, dim=spec.dim, max_bytes=4096, features=spec, labels=True, classes=("fraud", "ok"))
    assert compiled.scan.accepted.tolist() == [True, True, False, False] * 2  # the others: the Python decoder's
    with python_decoder():
        reference = decode_batch(msgs, dim=spec.dim, max_bytes=4096, features=spec, labels=True,
                                 classes=("fraud", "ok"))
    assert _outcomes(compiled) == _outcomes(reference)
