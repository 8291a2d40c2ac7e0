"""OLU_CLASSES and OLU_LOSS=softmax: the class labels as a JSON list or comma-separated, carried into the
engine, and every combination that cannot work refused at start naming the settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.config import ConfigError, load_settings
from worker.config.model import build_model

ROOT = Path(__file__).resolve().parents[1]
BASE = {"OLU_KAFKA_BOOTSTRAP_SERVERS": "broker:9092", "OLU_DIM": "4", "OLU_LOSS": "softmax"}
REGISTRY = {"OLU_INPUT_FORMAT": "avro", "OLU_SCHEMA_REGISTRY_URL": "http://registry:8081"}


def load(argv=(), **env):
    return load_settings(list(argv), {**BASE, **env})


@pytest.mark.parametrize(("raw", "classes"), [
    ('["fraud","ok","review"]', ("fraud", "ok", "review")),
    (' [0, 1, 2] ', (0, 1, 2)),
    ("fraud, ok ,review", ("fraud", "ok", "review")),
    ("0,1,2", (0, 1, 2)),
    ("-1, 3", (-1, 3)),
    ("0,1,two", ("0", "1", "two")),  # not all integers: all strings
    ('["1","2"]', ("1", "2")),  # a JSON list keeps its items' kinds
    ('["a,b","c d"]', ("a,b", "c d")),  # commas and spaces inside a JSON item
])
def test_classes_parse_as_a_json_list_or_comma_separated(raw, classes):
    settings = load(OLU_CLASSES=raw)
    assert settings.classes == classes and all(type(c) is type(classes[0]) for c in settings.classes)
    assert settings.origin("classes") == "env"


def test_the_flag_wins_and_the_classes_reach_the_engine():
    settings = load(["--classes", "cat,dog,owl"], OLU_CLASSES="0,1")
    assert settings.classes == ("cat", "dog", "owl") and settings.origin("classes") == "flag"
    assert settings.model_kwargs()["classes"] == ("cat", "dog", "owl") and settings.string_labels
    model = build_model(settings)
    assert model.loss.name == "softmax" and model.loss.classes == ("cat", "dog", "owl")
    assert (model.dim, model.param_dim, model.z.shape) == (4, 12, (12,))
    assert model.config["classes"] == ["cat", "dog", "owl"]
    integers = load(OLU_CLASSES="[3,7,9]")
    assert not integers.string_labels and build_model(integers).loss.label(7.0) == 1.0


def test_binary_losses_take_no_classes_argument():
    settings = load_settings([], {**BASE, "OLU_LOSS": "logistic"})
    assert settings.classes is None and "classes" not in settings.model_kwargs()
    assert not settings.string_labels


@pytest.mark.parametrize("raw", [
    "fraud", "[0]", "a,a", "[1, 1]", '[1, "a"]', "[1.0, 2.0]", "[true, false]", "[null, 1]", '["", "b"]',
    "a,,b", "a,b,", "[1, 2", '{"a": 1}', f"[1, {2**53}]", '["ok", "a\\tb"]', "x" * 257 + ",y",
])
def test_bad_class_lists_fail_at_start_naming_the_setting(raw):
    with pytest.raises(ConfigError, match=r"^OLU_CLASSES \(--classes\) must be at least 2 distinct class labels"):
        load(OLU_CLASSES=raw)


def test_softmax_requires_classes_and_other_losses_refuse_them():
    with pytest.raises(ConfigError, match=r"OLU_CLASSES \(--classes\) is required with OLU_LOSS \(--loss\) = softmax"):
        load()
    for loss in ("logistic", "ridge"):
        with pytest.raises(ConfigError, match=rf"OLU_CLASSES \(--classes\) applies only with .* softmax, got loss {loss}"):
            load(OLU_LOSS=loss, OLU_CLASSES="a,b")


def test_an_algorithm_that_refuses_softmax_fails_with_the_engines_reason():
    with pytest.raises(ConfigError) as refused:
        load(OLU_CLASSES="a,b", OLU_ALGORITHM="active-newton")
    message = str(refused.value)
    assert message.startswith("OLU_ALGORITHM (--algorithm), OLU_LOSS (--loss): ")
    assert "algorithm 'active-newton' does not support loss 'softmax'" in message and "Newton step" in message
    assert "OLU_STEP" not in message  # the reason's words are not taken for other settings' names
    for algorithm in ("passive", "ogd", "memory-pair", "rewind", "dp-tofw", "active-anchor"):
        assert load(OLU_CLASSES="a,b", OLU_ALGORITHM=algorithm).algorithm == algorithm


def test_string_classes_need_json_input_integer_classes_take_any_format():
    with pytest.raises(ConfigError) as refused:
        load(OLU_CLASSES="fraud,ok", **REGISTRY)
    assert "OLU_CLASSES (--classes)" in str(refused.value) and "OLU_INPUT_FORMAT (--input-format) = avro" in str(
        refused.value)
    assert load(OLU_CLASSES="0,1,2", **REGISTRY).classes == (0, 1, 2)


def test_run_without_classes_exits_2_with_one_line_naming_them():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLU_")}
    proc = subprocess.run([sys.executable, "-m", "worker.cli", "run", "--bootstrap-servers", "127.0.0.1:1",
                           "--dim", "3", "--privacy-unit", "per-request", "--state-url", "file:///nonexistent/olu",
                           "--loss", "softmax"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("{")]
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert "OLU_CLASSES (--classes) is required" in lines[0]
