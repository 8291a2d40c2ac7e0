"""A feature spec end to end: the real broker, the worker process, the subscriber.

1. Named-field events under OLU_FEATURES_FILE: every valid one learned, bad ones dead-lettered with
   a detail naming the field; releases carry the spec, and ParamsSubscriber.predict of a raw record
   is the release's weights against the vector the spec makes of it.
2. A restart under another spec is refused with a message (the state is another model's), and
   starts a new model with OLU_FEATURES_RESET.
"""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from confluent_kafka import Producer

from tests.infra.schema_samples import decode_headers
from tests.stream.kafka_harness import read_topic, wait_for
from tests.test_client import _follow
from worker.client import ParamsSubscriber
from worker.features.spec import load_spec
from worker.features.transform import vectorize

pytestmark = pytest.mark.kafka

SPEC = """\
features:
  - {name: age, type: numeric, range: [18, 90]}
  - {name: plan, type: categorical, vocabulary: [free, pro, team]}
  - {name: city, type: hashed, buckets: 16}
  - {name: active, type: boolean, missing: {fill: false, indicator: true}}
"""
OTHER_SPEC = SPEC.replace("buckets: 16", "buckets: 8")


def _events(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        plan = ["free", "pro", "team", "enterprise"][j % 4]
        event = {"op": "insert", "id": f"u-{seed}-{j}", "age": int(rng.integers(10, 99)), "plan": plan,
                 "city": f"c{int(rng.integers(40))}", "y": int(plan != "free"), "source": "web"}
        if j % 3:
            event["active"] = bool(j % 2)
        out.append(event)
    return out


def _produce(bootstrap: str, topic: str, events: list[dict]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for e in events:
        producer.produce(topic, key=e["id"].encode(), value=orjson.dumps(e))
    assert producer.flush(30) == 0


def _run(kafka_run, spec_path):
    """A run whose workers read named fields under ``spec_path`` (no OLU_DIM: the spec gives it)."""
    run = kafka_run("g", OLU_FEATURES_FILE=str(spec_path), OLU_SNAPSHOT_EVERY_EVENTS="100")
    del run.env["OLU_DIM"]
    return run


def test_named_events_are_learned_and_predicted_from_raw_records(kafka_bootstrap, kafka_run, tmp_path):
    spec_path = tmp_path / "features.yaml"
    spec_path.write_text(SPEC)
    spec = load_spec(spec_path)
    run = _run(kafka_run, spec_path)
    topics = run.topics
    events = _events(300, seed=1)
    bad = [{"op": "insert", "id": "b-1", "plan": "pro", "city": "x", "y": 1},  # no age
           {"op": "insert", "id": "b-2", "age": "old", "plan": "pro", "city": "x", "y": 1},
           {"op": "insert", "id": "b-3", "age": 30, "plan": ["pro"], "city": "x", "y": 1},
           {"op": "insert", "id": "b-4", "age": 30, "plan": "pro", "city": "x", "y": 1, "x": [1.0]}]
    _produce(kafka_bootstrap, topics.input, events[:150] + bad + events[150:])
    proc = run.worker("w.log").start()
    with ParamsSubscriber(kafka_bootstrap, topics.params) as sub:
        def learned():
            sub.poll(0.5)
            latest = sub.latest(topics.input, 0)
            return latest is not None and latest.t + latest.deletions >= len(events)
        wait_for(learned, 90, "every valid event learned")
        release = sub.latest(topics.input, 0)
        assert release.features is not None and release.features.digest == spec.digest
        assert release.dim == spec.dim and release.feature_names == spec.names
        record = {"age": 44, "plan": "team", "city": "c3", "unused": "field"}
        x, _ = vectorize(spec, record)
        expected = 1 / (1 + math.exp(-float(np.dot(release.weights, x))))
        assert sub.predict(record) == pytest.approx(expected, rel=1e-12)
        assert sub.predict(record) > sub.predict({**record, "plan": "free"})  # it learned the label's rule
    _, metrics = proc.get("/metrics")
    out_of_range = sum(1 for e in events if not 18 <= e["age"] <= 90)
    assert f'olu_features_clipped_total{{field="age",topic="{topics.input}"}} {float(out_of_range)}' in metrics
    assert proc.terminate() == 0
    # olu-worker follow: the names beside the weights, a prediction from a raw record
    code, out, _ = _follow(["--bootstrap-servers", kafka_bootstrap, "--topic", topics.params, "--once",
                            "--json", "--predict", orjson.dumps(record).decode()])
    last = orjson.loads(out.splitlines()[-1])
    assert code == 0 and last["feature_names"] == list(spec.names)
    assert last["prediction"] == pytest.approx(sub.predict(record), rel=1e-12) or last["version"] != release.version
    code, out, _ = _follow(["--bootstrap-servers", kafka_bootstrap, "--topic", topics.params, "--once"])
    assert code == 0 and " weights: " in out.splitlines()[-1] and "plan=" in out.splitlines()[-1]
    dead = {r.key: decode_headers(list(r.headers.items())) for r in read_topic(kafka_bootstrap, topics.dlq)}
    assert {k: v["olu.error.reason"] for k, v in dead.items()} == {b"b-1": "bad_features", b"b-2": "bad_features",
                                                                  b"b-3": "bad_features", b"b-4": "bad_features"}
    assert "'age'" in dead[b"b-1"]["olu.error.detail"] and "'plan'" in dead[b"b-3"]["olu.error.detail"]
    assert "'x'" in dead[b"b-4"]["olu.error.detail"]


def test_a_restart_under_another_spec_is_refused_unless_reset(kafka_bootstrap, kafka_run, tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(SPEC)
    second.write_text(OTHER_SPEC)
    run = _run(kafka_run, first)
    topics = run.topics
    _produce(kafka_bootstrap, topics.input, _events(250, seed=2))
    proc = run.worker("a.log").start()
    with ParamsSubscriber(kafka_bootstrap, topics.params) as sub:
        def learned():
            sub.poll(0.5)
            latest = sub.latest(topics.input, 0)
            return latest is not None and latest.t >= 250
        wait_for(learned, 90, "the stream learned")
    assert proc.terminate() == 0  # a last snapshot on the way out
    proc = run.worker("b.log", OLU_FEATURES_FILE=str(second)).start()
    wait_for(lambda: proc.proc.poll() is not None, 60, "the refusal")
    assert proc.proc.returncode != 0
    assert "was trained under feature spec" in proc.log_text() and "OLU_FEATURES_RESET" in proc.log_text()
    proc = run.worker("c.log", OLU_FEATURES_FILE=str(second), OLU_FEATURES_RESET="true").start()
    _produce(kafka_bootstrap, topics.input, _events(60, seed=3))  # the new model learns from here on
    digest = load_spec(second).digest
    with ParamsSubscriber(kafka_bootstrap, topics.params) as sub:
        def new_model():
            sub.poll(0.5)
            latest = sub.latest(topics.input, 0)
            return latest is not None and latest.features is not None and latest.features.digest == digest
        release = wait_for(lambda: new_model() and sub.latest(topics.input, 0), 60, "a release of the new model")
        assert release.t <= 60  # a new model: none of the 250 records before the restart
    assert proc.log_lines("feature spec changed: a new model starts at the stored offset")
    assert proc.terminate() == 0
