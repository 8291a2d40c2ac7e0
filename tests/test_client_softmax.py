"""The subscriber (worker/client/) and ``olu-worker follow`` (worker/follow.py) on releases of a
softmax model: K classes, the K x dim matrix row by row. Releases are built from real engine
models as the worker builds them (worker/stream/output/releases.py); predictions are checked
against numpy and the engine's own probabilities.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from tests.infra.schema_samples import validate
from tests.test_client import _follow, _produce
from worker.client import InvalidRelease, ParamsSubscriber, parse_release, softmax
from worker.olu import PassiveOLU
from worker.stream.output.releases import release_headers, release_value
from worker.wire import release_key

INPUT = "clicks"
DIM = 3
X = [0.3, -0.2, 0.4]
WORDS = ["cat", "dog", "owl"]
_DEADLINE_S = 60.0


def _model(classes, seed: int = 0, n: int = 12, delete: bool = False) -> PassiveOLU:
    rng = np.random.default_rng(seed)
    model = PassiveOLU(dim=DIM, loss="softmax", classes=classes, l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)
    for i in range(n):
        model.learn_one(f"r-{i}", rng.uniform(-0.5, 0.5, DIM).tolist(), classes[int(rng.integers(len(classes)))])
    if delete:
        model.unlearn_one("r-0")
    return model


def _release(classes, *, partition: int = 0, version: int = 12, seed: int = 0, delete: bool = False):
    model = _model(classes, seed=seed, n=version, delete=delete)
    value = release_value(model_name="species", topic=INPUT, partition=partition, offset=version,
                          event_time_ms=1_763_800_000_000 + version, model=model)
    return release_key(INPUT, partition), value, model


def _numpy_proba(weights: np.ndarray, k: int, x) -> np.ndarray:
    margins = np.asarray(weights, dtype=np.float64).reshape(k, -1) @ np.asarray(x, dtype=np.float64)
    e = np.exp(margins - margins.max())
    return e / e.sum()


# ----------------------------------------------------------------------------- offline
@pytest.mark.parametrize("classes", [WORDS, [10, 20, 30, 40]])
def test_one_release_predicts_the_most_probable_class(classes):
    key, value, model = _release(classes, delete=True)
    validate("release", orjson.loads(value))
    release = parse_release(value, key, "deletion")
    assert (release.loss, release.classes, release.dim, release.weights.shape) == (
        "softmax", tuple(classes), DIM, (len(classes) * DIM,))
    expected = _numpy_proba(model.weights, len(classes), X)
    proba = release.predict_proba(X)
    assert list(proba) == classes  # class order
    np.testing.assert_allclose(list(proba.values()), expected, rtol=1e-12)
    np.testing.assert_allclose(list(proba.values()), model.loss.predict(model.z, np.asarray(X)), rtol=1e-12)
    assert release.predict(X) == classes[int(np.argmax(expected))]
    assert type(release.predict(X)) is type(classes[0])  # the label itself, string or integer


def test_softmax_is_stable_and_ties_go_to_the_first_class():
    assert softmax(np.array([1000.0, 999.0])).tolist() == pytest.approx([1 / (1 + np.exp(-1)), 1 / (1 + np.e)])
    assert softmax(np.array([-1e300, 0.0])).tolist() == [0.0, 1.0]
    _, value, _ = _release(WORDS)
    record = orjson.loads(value)
    tied = parse_release(orjson.dumps({**record, "weights": [1.0, 0.0, 0.0] * 3}))  # three equal rows
    assert tied.predict(X) == "cat" and tied.predict_proba(X) == pytest.approx({c: 1 / 3 for c in WORDS})
    huge = parse_release(orjson.dumps({**record, "weights": [0.0] * 3 + [2000.0, 0.0, 0.0] + [1990.0, 0.0, 0.0]}))
    assert huge.predict([1.0, 0.0, 0.0]) == "dog"  # margins 0, 2000, 1990: no overflow
    assert huge.predict_proba([1.0, 0.0, 0.0])["owl"] == pytest.approx(np.exp(-10) / (1 + np.exp(-10)))


def test_predict_proba_is_for_softmax_only_and_x_keeps_dim_features():
    from tests.test_client import _release as binary_release

    _, value, _ = binary_release(5)
    with pytest.raises(ValueError, match="predict_proba is for softmax"):
        parse_release(value).predict_proba(X)
    softmax_release = parse_release(_release(WORDS)[1])
    with pytest.raises(ValueError, match="3 features"):
        softmax_release.predict([1.0] * (3 * DIM))  # x has dim features, not K x dim


def _good() -> dict:
    return orjson.loads(_release(WORDS)[1])


@pytest.mark.parametrize(("mutate", "reason", "words"), [
    (lambda r: {k: v for k, v in r.items() if k != "classes"}, "bad_classes", "needs classes"),
    (lambda r: {**r, "classes": None}, "bad_classes", "needs classes"),
    (lambda r: {**r, "classes": "cat,dog,owl"}, "bad_classes", "needs classes"),
    (lambda r: {**r, "classes": ["cat"], "weights": r["weights"][:3]}, "bad_classes", "at least 2"),
    (lambda r: {**r, "classes": ["cat", 1, "owl"]}, "bad_classes", "all non-empty strings or all integers"),
    (lambda r: {**r, "classes": ["cat", "", "owl"]}, "bad_classes", "all non-empty strings or all integers"),
    (lambda r: {**r, "classes": [True, False, 2]}, "bad_classes", "all non-empty strings or all integers"),
    (lambda r: {**r, "classes": [1.0, 2.0, 3.0]}, "bad_classes", "all non-empty strings or all integers"),
    (lambda r: {**r, "classes": ["cat", "dog", "cat"]}, "bad_classes", "distinct"),
    (lambda r: {**r, "weights": r["weights"][:DIM]}, "wrong_dimension", "3 classes x dim 3 is 9"),
    (lambda r: {**r, "weights": r["weights"] + [0.0]}, "wrong_dimension", "weights has 10 entries"),
    (lambda r: {**r, "dim": 9}, "wrong_dimension", "3 classes x dim 9 is 27"),
    (lambda r: {**r, "loss": "logistic"}, "bad_classes", "classes is for loss softmax"),
])
def test_invalid_softmax_releases_are_rejected_with_their_reason(mutate, reason, words):
    with pytest.raises(InvalidRelease, match=words) as info:
        parse_release(orjson.dumps(mutate(_good())), release_key(INPUT, 0))
    assert info.value.reason == reason, str(info.value)


def test_follow_text_line_shows_classes_shape_and_named_weights():
    from worker.follow import _text_line

    release = parse_release(_release(WORDS)[1])
    line = _text_line(release, "dog", 0.61)
    assert " classes=cat,dog,owl (3x3) " in line and line.endswith(" prediction=dog (p=0.61)")
    many = parse_release(orjson.dumps({**_good(), "classes": [f"c{i}" for i in range(12)],
                                       "weights": [0.0] * (12 * DIM)}))
    assert _text_line(many, None).endswith(" classes=c0,c1,c2,c3,c4,c5,c6,c7,c8,c9,... (12x3)")


def test_follow_names_a_softmax_weight_by_class_and_feature():
    from worker.features.spec import parse_spec
    from worker.follow import _text_line

    spec = parse_spec({"intercept": 0, "features": [{"name": n, "type": "numeric", "range": [0, 1]} for n in "abc"]})
    record = {**_good(), "features": {"digest": spec.digest, "spec": spec.text},
              "weights": [0.0, 0.0, 0.0, 0.0, 0.0, -5.0, 0.0, 3.0, 0.0]}
    release = parse_release(orjson.dumps(record))
    assert release.feature_names == ("a", "b", "c")
    line = _text_line(release, None)
    assert " weights: dog:c=-5 owl:b=+3 " in line and line.endswith("(largest 8 of 9)")


# ----------------------------------------------------------------------------- with the broker
@pytest.mark.kafka
def test_the_subscriber_averages_the_partitions_matrices(kafka_bootstrap, kafka_topic):
    params = kafka_topic()
    k0, v0, m0 = _release(WORDS, partition=0, seed=1)
    k1, v1, m1 = _release(WORDS, partition=1, seed=2)
    _produce(kafka_bootstrap, params, [(k0, v0, release_headers("events")), (k1, v1, release_headers("events"))])
    with ParamsSubscriber(kafka_bootstrap, params) as sub:
        assert sub.run_until(lambda s: len(s.models()) == 2, timeout=_DEADLINE_S)
        mean = (m0.weights + m1.weights) / 2  # the K x dim matrices averaged, then the softmax
        expected = _numpy_proba(mean, 3, X)
        np.testing.assert_allclose(list(sub.predict_proba(X).values()), expected, rtol=1e-12)
        assert sub.predict(X) == WORDS[int(np.argmax(expected))]
        one = _numpy_proba(m1.weights, 3, X)
        np.testing.assert_allclose(list(sub.predict_proba(X, partition=1).values()), one, rtol=1e-12)
        assert sub.predict(X, partition=1) == WORDS[int(np.argmax(one))]
        # a partition whose model has other classes: never averaged with the others
        k2, v2, m2 = _release(["cat", "dog", "emu"], partition=2, seed=3)
        _produce(kafka_bootstrap, params, [(k2, v2, release_headers("events"))])
        assert sub.run_until(lambda s: len(s.models()) == 3, timeout=_DEADLINE_S)
        with pytest.raises(ValueError, match="classes"):
            sub.predict(X)
        assert sub.predict_proba(X, partition=2) == pytest.approx(
            dict(zip(["cat", "dog", "emu"], _numpy_proba(m2.weights, 3, X).tolist(), strict=True)))


@pytest.mark.kafka
def test_follow_shows_softmax_releases_and_their_class(kafka_bootstrap, kafka_topic):
    params = kafka_topic()
    key, value, model = _release([10, 20, 30], delete=True)
    _produce(kafka_bootstrap, params, [(key, value, release_headers("deletion"))])
    expected = _numpy_proba(model.weights, 3, X)
    argv = ["--bootstrap-servers", kafka_bootstrap, "--topic", params, "--once", "--timeout", str(_DEADLINE_S),
            "--predict", ",".join(map(str, X))]
    code, out, err = _follow([*argv, "--json"])
    assert code == 0, err
    (line,) = [orjson.loads(text) for text in out.splitlines()]
    assert (line["classes"], line["prediction"]) == ([10, 20, 30], [10, 20, 30][int(np.argmax(expected))])
    np.testing.assert_allclose(line["probabilities"], expected, rtol=1e-12)
    code, out, err = _follow(argv)
    assert code == 0, err
    best = int(np.argmax(expected))
    assert " classes=10,20,30 (3x3) " in out and f" prediction={[10, 20, 30][best]} (p={expected[best]:.4g})" in out
