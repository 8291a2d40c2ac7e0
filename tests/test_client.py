"""The parameter subscriber (worker/client/) and ``olu-worker follow`` (worker/follow.py).

Validation and prediction are checked offline; deduplication, "latest per partition",
isolation and the CLI against the session's real Kafka broker, with release records built
exactly as the worker builds them (worker/stream/output/releases.py).
"""

from __future__ import annotations

import argparse
import io
import math
import time

import numpy as np
import orjson
import pytest
from confluent_kafka import Producer

from tests.infra.schema_samples import validate
from worker.client import InvalidRelease, ModelRelease, ParamsSubscriber, parse_release, sigmoid
from worker.olu import MemoryPair, PassiveOLU
from worker.stream.output.releases import release_headers, release_value
from worker.wire import release_key

INPUT = "clicks"
X = [0.3, -0.2, 0.4]
_DEADLINE_S = 60.0


# ----------------------------------------------------------------------------- helpers
def _model(loss: str = "logistic", n: int = 3, seed: int = 0, delete: bool = False) -> PassiveOLU:
    """A real engine model after n examples (and a deletion), as the worker would hold it."""
    rng = np.random.default_rng(seed)
    model = PassiveOLU(dim=3, loss=loss, l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)
    for i in range(n):
        x = rng.uniform(-0.5, 0.5, 3)
        y = int(rng.integers(0, 2)) if loss == "logistic" else float(rng.uniform(-1, 1))
        model.learn_one(f"r-{i}", x.tolist(), y)
    if delete:
        model.unlearn_one("r-0")
    return model


def _release(version: int, *, partition: int = 0, topic: str = INPUT, loss: str = "logistic", seed: int | None = None,
             delete: bool = False, model_name: str = "ctr") -> tuple[bytes, bytes, PassiveOLU]:
    """(key, value, model) of a release at ``version`` (= the input offset), as releases.py builds it."""
    model = _model(loss, n=version, seed=version if seed is None else seed, delete=delete)
    value = release_value(model_name=model_name, topic=topic, partition=partition, offset=version,
                          event_time_ms=1_763_800_000_000 + version, model=model)
    return release_key(topic, partition), value, model


def _produce(bootstrap: str, topic: str, records, *, partition: int = 0, transactional: str | None = None,
             commit: bool = True) -> None:
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 0}
    if transactional:
        conf["transactional.id"] = transactional
    producer = Producer(conf)
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers, partition=partition)
    producer.flush(30)
    if transactional:
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    assert producer.flush(30) == 0


def _weights(value: bytes) -> np.ndarray:
    return np.asarray(orjson.loads(value)["weights"])


# ----------------------------------------------------------------------------- offline: parse and predict
def test_parse_release_accepts_what_the_worker_publishes():
    key, value, model = _release(7, delete=True)
    validate("release", orjson.loads(value))  # the schema agrees that this is a valid release
    release = parse_release(value, key, "deletion")
    assert (release.topic, release.partition, release.version, release.dim) == (INPUT, 0, 7, 3)
    assert release.trigger == "deletion" and release.deletions == 1 and release.privacy["budget_used"] > 0
    np.testing.assert_array_equal(release.weights, model.weights)
    assert release.to_dict()["weights"] == orjson.loads(value)["weights"]


def test_a_release_carries_the_noise_it_holds():
    """privacy.noise_std / noise_to_signal: the model's own figures (docs/accounting.md 10), JSON-safe."""
    _, value, model = _release(7, delete=True)
    privacy = orjson.loads(value)["privacy"]
    assert privacy["noise_std"] == model.release_noise_std() > 0.0
    assert privacy["noise_to_signal"] == model.noise_to_signal() > 0.0
    clean = orjson.loads(_release(7)[1])["privacy"]
    assert clean["noise_std"] == 0.0 and clean["noise_to_signal"] == 0.0  # no deletion, no noise

    def value_of(m) -> dict:
        record = orjson.loads(release_value(model_name="ctr", topic=INPUT, partition=0, offset=8, event_time_ms=0,
                                            model=m))
        validate("release", record)
        return record["privacy"]

    model.z = np.zeros(3)  # noise on zero weights: an infinite ratio, sent as the largest double
    assert value_of(model)["noise_to_signal"] == 1.7976931348623157e308
    untracked = MemoryPair(dim=3, l2=0.1)
    untracked.learn_one("a", X, 1)
    untracked.unlearn_one("a")
    assert value_of(untracked)["noise_std"] is None and value_of(untracked)["noise_to_signal"] is None


def _good() -> dict:
    return orjson.loads(_release(4)[1])


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda r: b"{not json", "not_json"),
    (lambda r: b'{"weights": [NaN]}', "not_json"),
    (lambda r: orjson.dumps(r).replace(b'"weights":[', b'"weights":[1e999,'), "not_json"),
    (lambda r: b"[1, 2, 3]", "not_object"),
    (lambda r: None, "empty"),
    (lambda r: {k: v for k, v in r.items() if k != "weights"}, "missing_field"),
    (lambda r: {k: v for k, v in r.items() if k != "version"}, "missing_field"),
    (lambda r: {**r, "schema_version": 2}, "schema_version"),
    (lambda r: {**r, "dim": 4}, "wrong_dimension"),
    (lambda r: {**r, "weights": r["weights"][:2]}, "wrong_dimension"),
    (lambda r: {**r, "weights": [1.0, "2", 3.0]}, "non_finite"),
    (lambda r: {**r, "weights": [1.0, True, 3.0]}, "non_finite"),
    (lambda r: {**r, "weights": "1,2,3"}, "bad_weights"),
    (lambda r: {**r, "version": -1}, "bad_field"),
    (lambda r: {**r, "version": 3.5}, "bad_field"),
    (lambda r: {**r, "partition": True}, "bad_field"),
    (lambda r: {**r, "dim": 0, "weights": []}, "bad_field"),
    (lambda r: {**r, "model": ""}, "bad_field"),
    (lambda r: {**r, "loss": "hinge"}, "unknown_loss"),
    (lambda r: {**r, "privacy": {"epsilon": 1.0}}, "bad_field"),
    (lambda r: {**r, "privacy": None}, "bad_field"),
    (lambda r: {**r, "request": {"ids": 2, "applied": 1, "not_applied": 1, "duplicates": 0}}, "bad_field"),
    (lambda r: {**r, "request": {"ids": 2, "applied": -1, "not_applied": [], "duplicates": 0}}, "bad_field"),
    (lambda r: {**r, "request": {"ids": 1, "applied": 1, "not_applied": [7], "duplicates": 0}}, "bad_field"),
    (lambda r: {**r, "request": [1, 1, 0]}, "bad_field"),
])
def test_parse_release_rejects(mutate, reason):
    record = mutate(_good())
    value = record if record is None or isinstance(record, bytes) else orjson.dumps(record)
    with pytest.raises(InvalidRelease) as info:
        parse_release(value, release_key(INPUT, 0))
    assert info.value.reason == reason, str(info.value)


def test_parse_release_checks_the_key_and_ignores_unknown_fields():
    key, value, _ = _release(4)
    with pytest.raises(InvalidRelease, match="differs") as info:
        parse_release(value, release_key(INPUT, 1))
    assert info.value.reason == "key_mismatch"
    extended = orjson.dumps({**orjson.loads(value), "future_field": {"a": 1}})
    assert parse_release(extended, key).version == 4  # consumers ignore fields they do not know


def test_a_deletion_requests_release_carries_and_shows_its_request():
    from types import SimpleNamespace

    from worker.follow import _text_line
    from worker.stream.output.releases import request_report

    model = _model(delete=True)
    # what the engine reports for a request naming 4 ids: 1 applied, 2 never seen, 1 deleted before
    deletion = SimpleNamespace(records=1, not_applied=("r-9", "r-8"), duplicates=("r-0",))
    from worker.stream.input.decode import Delete

    request = request_report(Delete(("r-1", "r-9", "r-0", "r-8")), deletion, "DSR-1")
    assert request == {"request_id": "DSR-1", "ids": 4, "applied": 1, "not_applied": ["r-9", "r-8"],
                       "duplicates": 1}
    value = release_value(model_name="ctr", topic=INPUT, partition=0, offset=8, event_time_ms=0, model=model,
                          request=request)
    validate("release", orjson.loads(value))
    release = parse_release(value, release_key(INPUT, 0), "deletion")
    assert release.request == request and release.to_dict()["request"] == request
    assert "request=applied 1/4 not_applied=2 [r-9,r-8] duplicates=1" in _text_line(release, None)
    plain = parse_release(_release(4)[1])
    assert plain.request is None and "request=" not in _text_line(plain, None)
    many = {"ids": 7, "applied": 0, "not_applied": [f"g-{i}" for i in range(7)], "duplicates": 0}
    release = parse_release(orjson.dumps({**orjson.loads(value), "request": many}))
    assert "not_applied=7 [g-0,g-1,g-2,g-3,g-4,...]" in _text_line(release, None)


def test_predictions_are_sigmoid_for_logistic_and_linear_for_ridge():
    _, value, model = _release(5)
    logistic = parse_release(value)
    assert logistic.predict(X) == pytest.approx(1 / (1 + math.exp(-float(np.dot(model.weights, X)))))
    assert logistic.predict(X) == pytest.approx(model.predict_proba_one(X), rel=1e-12)  # same as the engine
    _, value, model = _release(5, loss="ridge")
    ridge = parse_release(value)
    assert ridge.predict(X) == pytest.approx(float(np.dot(model.weights, X)))
    assert ridge.predict(X) == pytest.approx(model.predict_one(X), rel=1e-12)
    with pytest.raises(ValueError, match="3 features"):
        ridge.predict([1.0, 2.0])
    assert sigmoid(-800.0) == pytest.approx(0.0) and sigmoid(800.0) == 1.0


def test_default_topic_is_the_workers_params_topic():
    from worker import client, wire
    from worker.config import OPTION_BY_NAME

    assert client.DEFAULT_TOPIC == wire.PARAMS_TOPIC == OPTION_BY_NAME["params_topic"].default


# ----------------------------------------------------------------------------- against the broker
@pytest.mark.kafka
def test_subscriber_keeps_the_latest_version_per_partition(kafka_bootstrap, kafka_topic):
    params = kafka_topic(partitions=2)
    k5, v5, _ = _release(5, partition=0)
    k9, v9, m9 = _release(9, partition=0, delete=True)
    k7, v7, _ = _release(7, partition=0)
    k3, v3, m3 = _release(3, partition=1)
    bad_dim = orjson.dumps({**orjson.loads(v9), "version": 11, "dim": 4})
    _produce(kafka_bootstrap, params, [
        (k5, v5, release_headers("events")),
        (k5, v5, release_headers("events")),    # identical duplicate (a replay): ignored
        (k9, v9, release_headers("deletion")),
        (k7, v7, release_headers("interval")),  # older than the one held: ignored
        (k9, b"{not json", None),               # invalid records: reported and skipped
        (k9, bad_dim, None),
        (release_key(INPUT, 5), v9, None),      # key does not match the value
    ], partition=0)
    _produce(kafka_bootstrap, params, [(k3, v3, release_headers("final"))], partition=1)

    invalid: list[str] = []
    updates: list[ModelRelease] = []
    with ParamsSubscriber(kafka_bootstrap, params, on_invalid=lambda exc, msg: invalid.append(exc.reason)) as sub:
        assert sub.run_until(caught_up=True, timeout=_DEADLINE_S, on_update=updates.append), sub
        assert sorted((u.partition, u.version) for u in updates) == [(0, 5), (0, 9), (1, 3)]
        assert [u.version for u in updates if u.partition == 0] == [5, 9]  # in order within a partition
        assert sorted(invalid) == ["key_mismatch", "not_json", "wrong_dimension"]
        assert {k: sub.stats[k] for k in ("received", "accepted", "duplicates", "stale", "invalid", "conflicts")} == \
            {"received": 8, "accepted": 3, "duplicates": 1, "stale": 1, "invalid": 3, "conflicts": 0}

        assert list(sub.models()) == [(INPUT, 0), (INPUT, 1)]
        latest = sub.latest(INPUT, 0)
        assert latest.version == 9 and latest.trigger == "deletion" and latest.deletions == 1
        assert latest.raw == v9
        np.testing.assert_array_equal(latest.weights, m9.weights)
        assert sub.latest(INPUT, 1).version == 3 and sub.latest(INPUT, 2) is None

        # one partition's model, and the average of both partitions' weights
        assert sub.predict(X, partition=0) == pytest.approx(sigmoid(float(np.dot(m9.weights, X))))
        assert sub.predict(X, partition=1) == pytest.approx(sigmoid(float(np.dot(m3.weights, X))))
        mean = (m9.weights + m3.weights) / 2
        assert sub.predict(X) == pytest.approx(sigmoid(float(np.dot(mean, X))))
        with pytest.raises(LookupError):
            sub.predict(X, partition=7)

        # live: a newer version arrives after catching up
        k12, v12, m12 = _release(12, partition=1)
        _produce(kafka_bootstrap, params, [(k12, v12, release_headers("events"))], partition=1)
        assert sub.run_until(lambda s: s.latest(INPUT, 1).version == 12, timeout=_DEADLINE_S)
        assert sub.predict(X, partition=1) == pytest.approx(sigmoid(float(np.dot(m12.weights, X))))


@pytest.mark.kafka
def test_subscriber_reports_a_conflicting_duplicate_and_keeps_the_first(kafka_bootstrap, kafka_topic):
    params = kafka_topic()
    key, value, model = _release(6)
    _, other, _ = _release(6, seed=99)  # same version, different weights: must never happen
    assert other != value
    _produce(kafka_bootstrap, params, [(key, value, None), (key, other, None)])
    seen = []
    with ParamsSubscriber(kafka_bootstrap, params, on_invalid=lambda exc, msg: seen.append(exc.reason)) as sub:
        assert sub.run_until(caught_up=True, timeout=_DEADLINE_S)
        assert seen == ["conflicting_duplicate"] and sub.stats["conflicts"] == 1
        np.testing.assert_array_equal(sub.latest(INPUT, 0).weights, model.weights)


@pytest.mark.kafka
def test_several_models_on_one_topic(kafka_bootstrap, kafka_topic):
    params = kafka_topic()
    kc, vc, mc = _release(4, topic="clicks")
    kp, vp, mp = _release(8, topic="prices", loss="ridge", model_name="price")
    _produce(kafka_bootstrap, params, [(kc, vc, None), (kp, vp, None)])
    with ParamsSubscriber(kafka_bootstrap, params) as sub:
        assert sub.run_until(caught_up=True, timeout=_DEADLINE_S)
        with pytest.raises(ValueError, match="several models"):
            sub.predict(X)
        assert sub.predict(X, topic="prices") == pytest.approx(float(np.dot(mp.weights, X)))
        assert sub.predict(X, topic="clicks") == pytest.approx(sigmoid(float(np.dot(mc.weights, X))))
    with ParamsSubscriber(kafka_bootstrap, params, model="price") as only:
        assert only.run_until(caught_up=True, timeout=_DEADLINE_S)
        assert list(only.models()) == [("prices", 0)] and only.stats["other_model"] == 1


@pytest.mark.kafka
def test_read_committed_never_sees_an_aborted_release(kafka_bootstrap, kafka_topic):
    params = kafka_topic()
    k1, v1, _ = _release(1)
    k2, v2, _ = _release(2)
    _produce(kafka_bootstrap, params, [(k1, v1, None)], transactional=f"{params}-tx1", commit=True)
    _produce(kafka_bootstrap, params, [(k2, v2, None)], transactional=f"{params}-tx2", commit=False)
    with ParamsSubscriber(kafka_bootstrap, params) as committed:
        assert committed.run_until(caught_up=True, timeout=_DEADLINE_S)  # ends past the abort marker
        assert committed.latest(INPUT, 0).version == 1 and committed.stats["received"] == 1
    with ParamsSubscriber(kafka_bootstrap, params, isolation="read_uncommitted") as dirty:
        assert dirty.run_until(caught_up=True, timeout=_DEADLINE_S)
        assert dirty.latest(INPUT, 0).version == 2  # what read_committed protects against


@pytest.mark.kafka
def test_empty_topic_is_caught_up_and_missing_topic_times_out(kafka_bootstrap, kafka_topic):
    params = kafka_topic(partitions=3)
    with ParamsSubscriber(kafka_bootstrap, params) as sub:
        assert sub.run_until(caught_up=True, timeout=_DEADLINE_S)
        assert sub.models() == {}
        with pytest.raises(LookupError):
            sub.predict(X)
    with ParamsSubscriber(kafka_bootstrap, f"{params}-missing", extra_config={"allow.auto.create.topics": False}) as sub:
        started = time.monotonic()
        assert not sub.run_until(caught_up=True, timeout=2.0)
        assert time.monotonic() - started < 30


# ----------------------------------------------------------------------------- olu-worker follow
def _follow(argv: list[str]) -> tuple[int, str, str]:
    from worker import follow

    parser = argparse.ArgumentParser(prog="olu-worker")
    follow.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["follow", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = args.func(args, None, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.kafka
def test_follow_prints_one_json_line_per_new_version(kafka_bootstrap, kafka_topic):
    params = kafka_topic()
    k5, v5, _ = _release(5)
    k9, v9, m9 = _release(9, delete=True)
    _produce(kafka_bootstrap, params, [
        (k5, v5, release_headers("events")), (k5, v5, release_headers("events")),
        (k9, v9, release_headers("deletion")), (k5, v5, release_headers("events")),
        (k9, b'{"schema_version": 1}', None),
    ])
    code, out, err = _follow(["--bootstrap-servers", kafka_bootstrap, "--topic", params, "--json", "--once",
                              "--timeout", str(_DEADLINE_S), "--predict", ",".join(map(str, X))])
    assert code == 0, err
    lines = [orjson.loads(line) for line in out.splitlines()]
    assert [(r["version"], r["trigger"]) for r in lines] == [(5, "events"), (9, "deletion")]
    assert lines[1]["weights"] == orjson.loads(v9)["weights"]
    assert lines[1]["prediction"] == pytest.approx(sigmoid(float(np.dot(m9.weights, X))))
    assert "skipped record" in err and "missing_field" in err


@pytest.mark.kafka
def test_follow_text_output_and_exit_codes(kafka_bootstrap, kafka_topic):
    params = kafka_topic()
    k3, v3, _ = _release(3, loss="ridge")
    _produce(kafka_bootstrap, params, [(k3, v3, release_headers("interval"))])
    code, out, err = _follow(["--bootstrap-servers", kafka_bootstrap, "--topic", params, "--once",
                              "--timeout", str(_DEADLINE_S), "--predict", "0.1,0.2,0.3"])
    assert code == 0, err
    assert out.startswith(f"{INPUT}/0 v3 ") and "trigger=interval" in out and "prediction=" in out
    # features that do not fit the model: one line and exit 2 at the first release, not a warning
    # per release
    code, out, err = _follow(["--bootstrap-servers", kafka_bootstrap, "--topic", params, "--once",
                              "--timeout", str(_DEADLINE_S), "--predict", "0.1,0.2"])
    assert code == 2 and out == "" and err.strip().splitlines() == [
        f"olu-worker follow: --predict has 2 features, the model of {INPUT}/0 has 3"]
    # never caught up: the topic does not exist
    code, out, err = _follow(["--bootstrap-servers", kafka_bootstrap, "--topic", f"{params}-missing", "--once",
                              "--timeout", "2", "--kafka", "allow.auto.create.topics=false"])
    assert code == 1 and "not caught up" in err
    assert _follow(["--bootstrap-servers", kafka_bootstrap, "--predict", "a,b"])[0] == 2
    code, _, err = _follow(["--bootstrap-servers", kafka_bootstrap, "--kafka", "no.such.property=1"])
    assert code == 2 and "no.such.property" in err


@pytest.mark.kafka
def test_follow_through_the_olu_worker_command(kafka_bootstrap, kafka_topic, monkeypatch, capsys):
    """``olu-worker follow`` via worker.cli.main (which moves --json into its demo options)."""
    from worker import cli, follow

    original = cli.build_parser

    def build():
        parser = original()
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if "follow" not in sub.choices:  # until worker/cli.py wires follow.add_parser in
            follow.add_parser(sub)
        return parser

    monkeypatch.setattr(cli, "build_parser", build)
    params = kafka_topic()
    key, value, _ = _release(4)
    _produce(kafka_bootstrap, params, [(key, value, release_headers("events"))])
    code = cli.main(["follow", "--bootstrap-servers", kafka_bootstrap, "--topic", params, "--json", "--once",
                     "--timeout", str(_DEADLINE_S)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    (line,) = captured.out.splitlines()
    assert orjson.loads(line)["version"] == 4

