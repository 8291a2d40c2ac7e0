"""The planner plans softmax models: the noise over the K x d parameter, the multiclass accuracy of
its simulations, the classes as labels, and no algorithm that refuses the loss."""

from __future__ import annotations

import math
import os
import re

import numpy as np
import orjson
import pytest

from worker.cli import main
from worker.config import load_settings
from worker.config.options import OPTION_BY_NAME
from worker.exceptions import ConfigError
from worker.olu.core.losses import Softmax
from worker.planning import target as target_module
from worker.planning.advice import NOISE_TO_SIGNAL_LIMIT
from worker.planning.plan import make_plan
from worker.planning.render import to_json, to_text
from worker.planning.sample import SampleError, sample_from_records, sample_of
from worker.planning.simulate import class_labels, predicted_classes, replay, score
from worker.planning.startup import unit_warning
from worker.planning.target import build_engine, planned_algorithms, resolve_target, with_settings
from worker.planning.workload import Shape, from_shape

D = 4


def base(*flags: str):
    return load_settings(["--dim", str(D), *flags], {"OLU_KAFKA_BOOTSTRAP_SERVERS": "k:1"}, command="demo")


def softmax(k: int, *flags: str):
    return with_settings(base(*flags), loss="softmax", classes=[f"c{i}" for i in range(k)])


def formula_plan(settings, rate: float = 0.003, epsilon: float = 1.0):
    target = resolve_target(settings, target_epsilon=epsilon)
    return make_plan(settings, target, shape=Shape(rate=rate, age=1000), events=10_000)


def blobs(n: int, classes: list, seed: int = 0):
    """Three well-separated classes: row j's features point along the direction of its class."""
    rng = np.random.default_rng(seed)
    centres = np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0]]) * 0.8
    which = rng.integers(0, len(classes), size=n)
    X = centres[which] + 0.1 * rng.normal(size=(n, D))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True) * 1.001)
    return [f"r-{j}" for j in range(n)], X, [classes[i] for i in which]


# ------------------------------------------------------------------ noise over K x d coordinates
def test_the_noise_norm_grows_with_the_square_root_of_the_classes_at_a_fixed_dim():
    two, eight = formula_plan(softmax(2)), formula_plan(softmax(8))
    assert (two["param_dim"], eight["param_dim"]) == (2 * D, 8 * D) and two["dim"] == eight["dim"] == D
    assert two["classes"] == ["c0", "c1"] and len(eight["classes"]) == 8
    assert two["noise_std"] == eight["noise_std"] > 0  # the std per coordinate does not depend on K
    assert math.isclose(two["noise_norm"], two["noise_std"] * math.sqrt(2 * D))
    assert math.isclose(eight["noise_norm"] / two["noise_norm"], 2.0)  # sqrt(8 / 2)
    assert math.isclose(eight["noise_to_radius"], eight["noise_norm"] / eight["radius"])


def test_the_formula_advice_counts_the_k_times_d_coordinates():
    """Per request at epsilon 0.25: noise norm 0.31 of the radius with 2 classes, 0.62 with 8 (0.22
    for both if the advice counted d coordinates only)."""
    two = formula_plan(softmax(2, "--privacy-unit", "per-request"), epsilon=0.25)
    eight = formula_plan(softmax(8, "--privacy-unit", "per-request"), epsilon=0.25)
    assert two["noise_to_radius"] < NOISE_TO_SIGNAL_LIMIT < eight["noise_to_radius"]
    assert two["recommendation"]["target_useful"] and not two["warnings"]
    assert not eight["recommendation"]["target_useful"]
    assert "noise norm is 0.62 of the radius" in eight["warnings"][0]


def test_the_report_says_the_noise_covers_k_times_d_coordinates():
    text = to_text(formula_plan(softmax(8)))
    assert text.splitlines()[0].startswith("olu-worker plan: passive, softmax over 8 classes, dim 4,")
    assert f"= std x sqrt(8 x dim 4 = {8 * D})" in text
    line = [s for s in text.splitlines() if s.strip().startswith("softmax:")]
    assert len(line) == 1 and "covers the K x d = 32 coordinates" in line[0] and "8 times a binary model's" in line[0]


def test_the_start_up_check_counts_the_k_times_d_coordinates():
    flags = ("--privacy-unit", "all-deletions", "--expected-deletion-rate", "0.005")
    said = [unit_warning(softmax(k, *flags)) for k in (2, 8)]
    two, eight = (float(re.search(r"noise norm of ([0-9.]+) times", s).group(1)) for s in said)
    assert math.isclose(eight / two, 2.0, rel_tol=0.01)


def test_softmax_without_classes_fails_naming_the_setting():
    settings = with_settings(base(), loss="softmax")
    with pytest.raises(ConfigError, match="OLU_CLASSES"):
        build_engine(settings, resolve_target(settings))


# ------------------------------------------------------------------ algorithms refusing the loss
def test_an_algorithm_that_refuses_softmax_is_never_planned_for_it(monkeypatch):
    assert "active-newton" not in planned_algorithms("softmax")
    # even where the planner modelled active-newton, softmax would not get it (ridge would)
    monkeypatch.setattr(target_module, "PLANNED_ALGORITHMS", ("passive", "active-newton"))
    assert planned_algorithms("softmax") == ("passive",)
    assert planned_algorithms("ridge") == ("passive", "active-newton")
    settings = with_settings(softmax(3), algorithm="active-newton")
    with pytest.raises(ConfigError, match=r"'active-newton' \(OLU_ALGORITHM\) does not support loss 'softmax' "
                                          r"\(OLU_LOSS\): its deletion is one exact Newton step"):
        build_engine(settings, resolve_target(settings))


def test_a_softmax_plan_with_a_sample_proposes_only_the_planned_algorithm():
    settings = softmax(3)
    classes = ["c0", "c1", "c2"]
    target = resolve_target(settings, target_epsilon=1.0)
    ids, X, y = blobs(1500, classes)
    sample = sample_of(build_engine(settings, target), ids, X, y)
    plan = make_plan(settings, target, shape=Shape(rate=0.01, age=500), events=6000, sample=sample,
                     sample_path="blobs", sim_events=3000, seed=2)
    assert plan["algorithm"] == "passive" and plan["search"]["runs"]
    assert "active-newton" not in to_json(plan) and "active-newton" not in to_text(plan)
    assert all("OLU_ALGORITHM" not in run["settings"] for run in plan["search"]["runs"])
    # the multiclass rule: the classes are well separated, so OGD is near 1 (the sign rule against
    # positions 0, 1, 2 could match one class in three at most)
    assert plan["search"]["metric"] == "accuracy" and plan["search"]["ogd"] > 0.9
    assert plan["recommendation"]["predicted"] > 0.5


# ------------------------------------------------------------------ the multiclass rule
def test_predicted_classes_take_the_largest_margin_the_first_on_a_tie():
    W = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])  # 3 classes x 2 features, kept flat
    X = np.array([[0.5, 0.1], [0.1, 0.5], [-0.5, 0.1], [0.3, 0.3], [0.0, 0.0]])
    assert predicted_classes(W.ravel(), X).tolist() == [0.0, 1.0, 2.0, 0.0, 0.0]


class Frozen:
    """A model whose weights never change; it records the labels it is taught."""

    def __init__(self, weights, loss):
        self.weights, self.loss, self.taught = weights, loss, []

    def learn_many(self, ids, X, y, *, subjects=None):
        self.taught += list(y)
        return len(ids)


def test_replay_scores_the_argmax_class_and_teaches_the_class_labels():
    settings = softmax(3)
    model = build_engine(settings, resolve_target(settings))
    W = np.zeros((3, D))
    W[0, 0], W[1, 1], W[2, 2] = 1.0, 1.0, 1.0
    ids, X, labels = blobs(400, ["c0", "c1", "c2"], seed=5)
    sample = sample_of(model, ids, X, labels)
    assert set(sample.y.tolist()) == {0.0, 1.0, 2.0}  # positions, as the loss reads the labels
    workload = from_shape(sample, Shape(rate=0.0), 400, seed=0)
    frozen = Frozen(W.ravel(), model.loss)
    got = score(replay(frozen, workload, loss="softmax", requests=False, blocks=4), "softmax", tail=1.0)
    expected = float(np.mean(np.argmax(X @ W.T, axis=1) == sample.y))
    assert got == expected and got > 0.95
    # the binary rule (sign of a margin against a +-1 label) cannot score positions 0 and 2
    binary = float(np.mean(np.where(X @ W[1] >= 0, 1.0, -1.0) == sample.y))
    assert binary < 0.5 < got
    assert frozen.taught == labels  # the model learns the class labels themselves, not their positions


def test_integer_classes_map_back_to_their_values():
    loss = Softmax(0.01, [5, 7, 9])
    assert class_labels(loss, np.array([2.0, 0.0, 1.0])).tolist() == [9, 5, 7]


def test_a_sample_s_labels_are_class_labels_and_an_unknown_one_names_its_line():
    settings = softmax(3)
    model = build_engine(settings, resolve_target(settings))
    rows = [(f"line {j}", f"r-{j}".encode(), {"op": "insert", "id": f"r-{j}", "x": [0.1, 0.0, 0.0, 0.0], "y": c})
            for j, c in enumerate(["c2", "c0", "c1"])]
    assert sample_from_records(rows, model, "sample 's'").y.tolist() == [2.0, 0.0, 1.0]
    rows.append(("line 3", b"r-3", {"op": "insert", "id": "r-3", "x": [0.1, 0.0, 0.0, 0.0], "y": "dog"}))
    with pytest.raises(SampleError, match="sample 's' line 3: label 'dog' is not one of the 3 declared classes"):
        sample_from_records(rows, model, "sample 's'")
    with pytest.raises(SampleError, match="label 'dog'"):
        sample_of(model, ["a"], np.zeros((1, D)), ["dog"])


@pytest.mark.skipif("classes" not in OPTION_BY_NAME, reason="the setting OLU_CLASSES is not in worker/config")
def test_the_command_plans_a_softmax_sample_of_string_labels(tmp_path, capsys, monkeypatch):
    for name in [n for n in os.environ if n.startswith("OLU_")]:
        monkeypatch.delenv(name)
    ids, X, y = blobs(1200, ["fraud", "ok", "review"], seed=3)
    lines = [orjson.dumps({"op": "insert", "id": i, "x": x.tolist(), "y": c}) for i, x, c in zip(ids, X, y)]
    (tmp_path / "s.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    code = main(["plan", "--loss", "softmax", "--classes", "fraud,ok,review", "--deletion-rate", "0.003",
                 "--sample", str(tmp_path / "s.jsonl"), "--events", "4000", "--sim-events", "2400", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    plan = orjson.loads(out)
    assert plan["classes"] == ["fraud", "ok", "review"] and plan["dim"] == D and plan["param_dim"] == 3 * D
    assert math.isclose(plan["noise_norm"], plan["noise_std"] * math.sqrt(3 * D))
    assert plan["search"]["ogd"] > 0.9  # the multiclass rule on well-separated classes


class Message:
    """A fetched record, as far as the plan's topic decoder reads it."""

    def __init__(self, offset: int, key: bytes, value: dict):
        self._offset, self._key, self._value = offset, key, orjson.dumps(value)

    def key(self):
        return self._key

    def value(self):
        return self._value

    def topic(self):
        return "olu.events"

    def partition(self):
        return 0

    def offset(self):
        return self._offset


@pytest.mark.skipif("classes" not in OPTION_BY_NAME, reason="the setting OLU_CLASSES is not in worker/config")
def test_the_topic_s_inserts_name_their_class():
    from worker.planning.topic import _decoded

    settings = base("--loss", "softmax", "--classes", "fraud,ok,review")
    messages = [Message(j, f"r-{j}".encode(), {"op": "insert", "id": f"r-{j}", "x": [0.1, 0, 0, 0], "y": c})
                for j, c in enumerate(["review", "fraud"])]
    records, left_out = _decoded(settings, messages)
    assert left_out == 0 and [value["y"] for _, _, value in records] == ["review", "fraud"]
    model = build_engine(settings, resolve_target(settings))
    assert sample_from_records(records, model, "topic olu.events").y.tolist() == [2.0, 0.0]


# ------------------------------------------------------------------ binary plans unchanged
def test_a_binary_plan_has_no_softmax_field_or_line():
    plan = formula_plan(base())
    assert "classes" not in plan and "param_dim" not in plan
    assert math.isclose(plan["noise_norm"], plan["noise_std"] * math.sqrt(D))
    text = to_text(plan)
    assert "softmax" not in text and f"= std x sqrt(dim {D}):" in text
    assert orjson.loads(to_json(plan))["loss"] == "logistic"
    # overriding nothing plans the same thing
    assert to_json(formula_plan(with_settings(base()))) == to_json(plan)
