"""The JSON Schemas in schemas/ are valid draft 2020-12 and mean what docs/worker.md 3 says."""

from __future__ import annotations

import json
import re

import pytest
from jsonschema import Draft202012Validator, ValidationError

from tests.infra.schema_samples import (
    INVALID,
    KINDS,
    RELEASE,
    RELEASE_SOFTMAX,
    SCHEMA_DIR,
    VALID,
    load_schema,
    validate,
)


@pytest.mark.parametrize("kind", KINDS)
def test_schema_is_valid_2020_12(kind):
    schema = load_schema(kind)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"https://olu-worker.dev/schemas/{kind}.schema.json"


@pytest.mark.parametrize(
    ("kind", "record"),
    [(kind, rec) for kind, recs in VALID.items() for rec in recs],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_valid_samples_pass(kind, record):
    validate(kind, record)


@pytest.mark.parametrize(("kind", "record"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_records_are_rejected(kind, record):
    with pytest.raises(ValidationError):
        validate(kind, record)


def test_invalid_case_names_are_unique():
    names = [c[0] for c in INVALID]
    assert len(names) == len(set(names))


def test_release_weights_length_must_equal_dim():
    # Not expressible in JSON Schema, so validate() checks it on top.
    with pytest.raises(ValueError, match="dim"):
        validate("release", RELEASE | {"dim": 5})


def test_softmax_weights_are_the_k_by_dim_matrix():
    # K = 3 classes x dim = 2: six weights; dim alone (2) or the classes alone (3) are too few
    validate("release", RELEASE_SOFTMAX)
    for weights in ([0.5, -0.25], [0.5, -0.25, 0.0], RELEASE_SOFTMAX["weights"] + [1.0, 2.0]):
        with pytest.raises(ValueError, match="3 x dim = 6"):
            validate("release", RELEASE_SOFTMAX | {"weights": weights})


def test_classes_go_with_the_softmax_loss_and_only_with_it():
    # not in the schema (a conditional one fails the registry's compatibility check), so validate() checks it
    from tests.infra.schema_samples import validator

    for record in (RELEASE_SOFTMAX | {"loss": "logistic"}, {k: v for k, v in RELEASE_SOFTMAX.items() if k != "classes"}):
        with pytest.raises(ValueError, match="classes is required for loss softmax"):
            validate("release", record)
    assert validator("release").is_valid(RELEASE | {"classes": ["a", "b"]})  # the schema alone lets it pass


def test_a_release_from_a_softmax_engine_model_validates():
    from worker.olu import PassiveOLU
    from worker.stream.output.releases import release_value

    for classes in (["cat", "dog", "owl"], [0, 7, -2, 5]):
        model = PassiveOLU(dim=4, loss="softmax", classes=classes, l2=0.01, radius=10.0, feature_bound=1.0,
                           rho=1.0)
        model.learn_one("r-1", [0.1, -0.2, 0.3, 0.0], classes[1])
        record = json.loads(release_value(model_name="m", topic="in", partition=0, offset=1, event_time_ms=0,
                                          model=model))
        validate("release", record)
        assert (record["classes"], record["dim"], len(record["weights"])) == (classes, 4, 4 * len(classes))


def test_ops_do_not_cross_validate():
    # An event is routed by its "op"; neither schema may accept the other's records.
    for rec in VALID["insert"]:
        with pytest.raises(ValidationError):
            validate("delete", rec)
    for rec in VALID["delete"]:
        with pytest.raises(ValidationError):
            validate("insert", rec)


def test_readme_documents_every_reason_code_and_header():
    # Reason codes are a Prometheus label and an operator's vocabulary: keep the doc in step.
    readme = (SCHEMA_DIR / "README.md").read_text()
    schema = load_schema("dead-letter")
    reasons = schema["properties"]["olu.error.reason"]["enum"]
    assert len(reasons) == len(set(reasons))
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", r) for r in reasons)
    for name in [*reasons, *schema["required"]]:
        assert f"`{name}`" in readme, name
    for name in load_schema("release")["properties"]["algorithm"]["enum"]:
        assert f"`{name}`" in readme, name


def test_every_engine_algorithm_and_loss_is_in_the_release_schema():
    import worker.olu.algorithms.baselines  # noqa: F401  (register every algorithm module)
    import worker.olu.algorithms.passive  # noqa: F401
    from worker.olu import ALGORITHMS
    from worker.olu.core.losses import Logistic, Ridge, Softmax

    props = load_schema("release")["properties"]
    shipped = {name for name, cls in ALGORITHMS.items() if cls.__module__.startswith("worker.")}
    assert shipped and shipped <= set(props["algorithm"]["enum"])
    losses = {Logistic(0.0).name, Logistic(0.1).name, Ridge(0.1).name, Softmax(0.1, ["a", "b"]).name}
    assert losses <= set(props["loss"]["enum"])
    readme = (SCHEMA_DIR / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in props["loss"]["enum"])
