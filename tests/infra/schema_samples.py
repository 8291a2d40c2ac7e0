"""Sample wire records (docs/worker.md 3) and a validator for the schemas in ``schemas/``.

Reusable by integration tests: ``validate("release", record)`` checks a real record against
its JSON Schema plus the rules the schema does not state (len(weights) == dim, or len(classes) * dim
for a softmax release; classes present if and only if the loss is softmax).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
KINDS = ("insert", "delete", "release", "dead-letter", "receipt")


@cache
def load_schema(kind: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / f"{kind}.schema.json").read_text())


@cache
def validator(kind: str) -> Draft202012Validator:
    return Draft202012Validator(load_schema(kind))


def validate(kind: str, record: Any) -> None:
    """Raise ``jsonschema.ValidationError`` or ``ValueError`` if ``record`` breaks the contract."""
    validator(kind).validate(record)
    if kind == "release":
        if ("classes" in record) != (record["loss"] == "softmax"):
            raise ValueError(f"classes is required for loss softmax and only then, the loss is {record['loss']}")
        rows = len(record["classes"]) if record["loss"] == "softmax" else 1  # softmax: K x dim, row by row
        if len(record["weights"]) != rows * record["dim"]:
            raise ValueError(f"len(weights) = {len(record['weights'])} != {rows} x dim = {rows * record['dim']}")


def decode_headers(headers: list[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """confluent-kafka ``Message.headers()`` -> the JSON object dead-letter.schema.json describes."""
    return {k: (v or b"").decode("utf-8") for k, v in headers or ()}


INSERT = {"op": "insert", "id": "r-42", "x": [0.1, -0.25, 0.0, 3.5e-3], "y": 1}
INSERT_RIDGE = {"op": "insert", "id": "user/7:2026-11-22", "x": [1, 2.5], "y": -3.75, "ts": 1763800000000}
INSERT_LOGISTIC_01 = {"op": "insert", "id": "r-43", "x": [0.5], "y": 0}
INSERT_SPARSE = {"op": "insert", "id": "r-44", "x": {"indices": [3, 17, 40000], "values": [0.5, -1, 0.25]}, "y": 1}
DELETE = {"op": "delete", "id": "r-42"}
DELETE_TS = {"op": "delete", "id": "r-42", "ts": 1763800000123}
DELETE_IDS = {"op": "delete", "ids": ["user-7/r-1", "user-7/r-2", "user-7/r-9"], "ts": 1763800000123}
DELETE_ONE_OF_IDS = {"op": "delete", "ids": ["r-42"]}

RELEASE = {
    "schema_version": 1,
    "model": "churn",
    "topic": "olu.events",
    "partition": 3,
    "version": 1041,
    "offset": 1042,
    "t": 1000,
    "deletions": 12,
    "epoch": 0,
    "algorithm": "passive",
    "loss": "logistic",
    "dim": 4,
    "weights": [0.12, -0.5, 0.0, 2.25],
    "privacy": {
        "unit": "all-deletions",
        "rho": 2.0,
        "target_epsilon": None,
        "requests": 12,
        "eps_rdp_slope": 0.8,
        "budget_used": 0.4,
        "epsilon": 3.1,
        "delta": 1e-6,
        "deletions_capacity_left": None,
        "noise_std": 0.004,
        "noise_to_signal": 0.0032,
    },
    "released_at": 1763800000.25,
}
RELEASE_ACTIVE = copy.deepcopy(RELEASE) | {
    "algorithm": "active-anchor", "loss": "ridge", "epoch": 2,
}
RELEASE_ACTIVE["privacy"] = RELEASE["privacy"] | {"deletions_capacity_left": 7, "noise_std": None,
                                                  "noise_to_signal": None}
RELEASE_REQUEST = copy.deepcopy(RELEASE) | {
    "request": {"ids": 3, "applied": 1, "not_applied": ["user-7/r-9"], "duplicates": 1},
}
RELEASE_NO_CAPACITY_KEY = copy.deepcopy(RELEASE)
del RELEASE_NO_CAPACITY_KEY["privacy"]["deletions_capacity_left"]
# softmax: K = 3 classes over dim = 2 features, the 3 x 2 matrix row by row (row k = classes[k])
RELEASE_SOFTMAX = copy.deepcopy(RELEASE) | {"loss": "softmax", "classes": ["cat", "dog", "owl"], "dim": 2,
                                            "weights": [0.5, -0.25, 0.0, 1.0, -0.5, -0.75]}
RELEASE_SOFTMAX_INT = copy.deepcopy(RELEASE) | {"loss": "softmax", "classes": [3, -1], "dim": 2,
                                                "weights": [0.5, -0.25, -0.5, 0.25]}

DELETE_SUBJECT = {"op": "delete", "subject": "user-7", "request_id": "DSR-2291"}
RELEASE_SUBJECT_REQUEST = copy.deepcopy(RELEASE) | {
    "request": {"request_id": "DSR-2291", "ids": 12, "applied": 11, "not_applied": [], "duplicates": 1,
                "subject": True},
}
RECEIPT = {
    "schema_version": 1, "request_id": "DSR-2291", "model": "ctr", "topic": "olu.events", "partition": 3,
    "offset": 1234, "subject": "user-7", "status": "honoured",
    "records": {"named": 12, "applied": 11, "not_applied": 0, "duplicates": 1}, "version": 1235,
    "released_at": 1763800000.123,
    "guarantee": {"outcome": "noised", "unit": "per-request", "delta": 1e-5, "epsilon": 1.0, "sigma": 0.042,
                  "epoch": 0},
}
RECEIPT_ROTATION = copy.deepcopy(RECEIPT) | {"guarantee": RECEIPT["guarantee"] | {"generation": 4,
                                                                                  "retired_by_event": 1200000}}
RECEIPT_NOTHING = {
    "schema_version": 1, "request_id": "olu.events/3@1300", "model": "ctr", "topic": "olu.events", "partition": 3,
    "offset": 1300, "ids": ["r-404"], "status": "nothing_to_unlearn",
    "records": {"named": 1, "applied": 0, "not_applied": 1, "duplicates": 0}, "version": None, "released_at": None,
    "guarantee": None,
}
RECEIPT_REFUSED = RECEIPT_NOTHING | {"status": "refused", "reason": "budget_exhausted",
                                     "records": {"named": 1, "applied": 0, "not_applied": 0, "duplicates": 0}}

DEAD_LETTER = {
    "olu.source.topic": "olu.events",
    "olu.source.partition": "3",
    "olu.source.offset": "1043",
    "olu.error.reason": "wrong_dimension",
    "olu.error.detail": "x has 5 features, model dim is 4",
    "olu.worker.version": "0.1.0",
    "olu.failed.at": "1763800000999",
}
DEAD_LETTER_WITH_FOREIGN_HEADER = DEAD_LETTER | {"traceparent": "00-0af7651916cd43dd-01"}
DEAD_LETTER_TRUNCATED = DEAD_LETTER | {"olu.error.reason": "oversized", "olu.truncated": "4800000"}

VALID: dict[str, list[dict[str, Any]]] = {
    "insert": [INSERT, INSERT_RIDGE, INSERT_LOGISTIC_01, INSERT_SPARSE],
    "delete": [DELETE, DELETE_TS, DELETE_IDS, DELETE_ONE_OF_IDS, DELETE_SUBJECT, DELETE_IDS | {"request_id": "DSR-1"}],
    "release": [RELEASE, RELEASE_ACTIVE, RELEASE_NO_CAPACITY_KEY, RELEASE_REQUEST, RELEASE_SOFTMAX,
                RELEASE_SOFTMAX_INT, RELEASE_SUBJECT_REQUEST],
    "dead-letter": [DEAD_LETTER, DEAD_LETTER_WITH_FOREIGN_HEADER, DEAD_LETTER_TRUNCATED],
    "receipt": [RECEIPT, RECEIPT_ROTATION, RECEIPT_NOTHING, RECEIPT_REFUSED],
}


def _without(record: dict, key: str) -> dict:
    return {k: v for k, v in record.items() if k != key}


def _privacy(**changes: Any) -> dict:
    return RELEASE | {"privacy": RELEASE["privacy"] | changes}


# (name, kind, record): each must be rejected by the schema alone.
INVALID: list[tuple[str, str, Any]] = [
    ("insert-not-object", "insert", ["insert", "r-1"]),
    ("insert-missing-id", "insert", _without(INSERT, "id")),
    ("insert-empty-id", "insert", INSERT | {"id": ""}),
    ("insert-numeric-id", "insert", INSERT | {"id": 42}),
    ("insert-long-id", "insert", INSERT | {"id": "r" * 257}),
    ("insert-missing-x", "insert", _without(INSERT, "x")),
    ("insert-empty-x", "insert", INSERT | {"x": []}),
    ("insert-x-string-item", "insert", INSERT | {"x": [0.1, "0.2"]}),
    ("insert-x-null-item", "insert", INSERT | {"x": [0.1, None]}),
    ("insert-x-nested", "insert", INSERT | {"x": [[0.1]]}),
    ("insert-x-infinite", "insert", INSERT | {"x": [float("inf")]}),
    ("insert-x-too-long", "insert", INSERT | {"x": [0.0] * 65537}),
    ("insert-sparse-no-values", "insert", INSERT | {"x": {"indices": [1]}}),
    ("insert-sparse-negative-index", "insert", INSERT | {"x": {"indices": [-1], "values": [0.5]}}),
    ("insert-sparse-float-index", "insert", INSERT | {"x": {"indices": [1.5], "values": [0.5]}}),
    ("insert-sparse-extra-field", "insert", INSERT | {"x": {"indices": [1], "values": [0.5], "dim": 9}}),
    ("insert-sparse-string-value", "insert", INSERT | {"x": {"indices": [1], "values": ["0.5"]}}),
    ("insert-missing-y", "insert", _without(INSERT, "y")),
    ("insert-y-empty-string", "insert", INSERT | {"y": ""}),  # a softmax label is a non-empty string
    ("insert-y-bool", "insert", INSERT | {"y": True}),
    ("insert-ts-string", "insert", INSERT | {"ts": "2026-11-22T00:00:00Z"}),
    ("insert-ts-negative", "insert", INSERT | {"ts": -1}),
    ("insert-extra-field", "insert", INSERT | {"weight": 2.0}),
    ("insert-unknown-op", "insert", INSERT | {"op": "upsert"}),
    ("insert-op-as-delete", "insert", INSERT | {"op": "delete"}),
    ("delete-missing-id", "delete", {"op": "delete"}),
    ("delete-subject-and-ids", "delete", DELETE_SUBJECT | {"ids": ["r-1"]}),
    ("delete-subject-and-id", "delete", DELETE_SUBJECT | {"id": "r-1"}),
    ("delete-subject-empty", "delete", DELETE_SUBJECT | {"subject": ""}),
    ("delete-request-id-empty", "delete", DELETE | {"request_id": ""}),
    ("delete-request-id-long", "delete", DELETE | {"request_id": "D" * 257}),
    ("delete-request-id-control", "delete", DELETE | {"request_id": "DSR\n1"}),
    ("receipt-both-subject-and-ids", "receipt", RECEIPT | {"ids": ["r-1"]}),
    ("receipt-neither-subject-nor-ids", "receipt", {k: v for k, v in RECEIPT.items() if k != "subject"}),
    ("receipt-unknown-status", "receipt", RECEIPT | {"status": "done"}),
    ("receipt-unknown-reason", "receipt", RECEIPT_REFUSED | {"reason": "tired"}),
    ("receipt-unknown-outcome", "receipt", RECEIPT | {"guarantee": RECEIPT["guarantee"] | {"outcome": "ignored"}}),
    ("receipt-extra-field", "receipt", RECEIPT | {"note": "x"}),
    ("delete-empty-id", "delete", {"op": "delete", "id": ""}),
    ("delete-unknown-op", "delete", {"op": "remove", "id": "r-42"}),
    ("delete-with-features", "delete", DELETE | {"x": [0.1]}),
    ("delete-id-and-ids", "delete", DELETE_IDS | {"id": "user-7/r-1"}),
    ("delete-ids-empty", "delete", DELETE_IDS | {"ids": []}),
    ("delete-ids-not-array", "delete", DELETE_IDS | {"ids": "user-7/r-1"}),
    ("delete-ids-too-many", "delete", DELETE_IDS | {"ids": [f"r-{i}" for i in range(10_001)]}),
    ("delete-ids-duplicate", "delete", DELETE_IDS | {"ids": ["r-1", "r-2", "r-1"]}),
    ("delete-ids-number-item", "delete", DELETE_IDS | {"ids": ["r-1", 2]}),
    ("delete-ids-empty-item", "delete", DELETE_IDS | {"ids": [""]}),
    ("delete-ids-long-item", "delete", DELETE_IDS | {"ids": ["r" * 257]}),
    ("release-request-missing-not-applied", "release",
     RELEASE | {"request": {"ids": 1, "applied": 1, "duplicates": 0}}),
    ("release-request-zero-ids", "release",
     RELEASE | {"request": {"ids": 0, "applied": 0, "not_applied": [], "duplicates": 0}}),
    ("release-request-not-applied-counted", "release",
     RELEASE | {"request": {"ids": 2, "applied": 1, "not_applied": 1, "duplicates": 0}}),
    ("release-request-extra", "release",
     RELEASE | {"request": {"ids": 1, "applied": 1, "not_applied": [], "duplicates": 0, "sigma": 0.1}}),
    ("release-missing-weights", "release", _without(RELEASE, "weights")),
    ("release-missing-privacy", "release", _without(RELEASE, "privacy")),
    ("release-negative-partition", "release", RELEASE | {"partition": -1}),
    ("release-float-version", "release", RELEASE | {"version": 1.5}),
    ("release-negative-offset", "release", RELEASE | {"offset": -1}),
    ("release-zero-dim", "release", RELEASE | {"dim": 0}),
    ("release-weights-string", "release", RELEASE | {"weights": [0.1, "x", 0.0, 1.0]}),
    ("release-unknown-algorithm", "release", RELEASE | {"algorithm": "sgd"}),
    ("release-unknown-loss", "release", RELEASE | {"loss": "hinge"}),
    ("release-trigger-in-body", "release", RELEASE | {"trigger": "deletion"}),
    ("release-schema-version-2", "release", RELEASE | {"schema_version": 2}),
    ("release-bad-topic", "release", RELEASE | {"topic": "olu events"}),
    ("release-extra-field", "release", RELEASE | {"intercept": 0.0}),
    ("release-softmax-one-class", "release", RELEASE_SOFTMAX | {"classes": ["cat"]}),
    ("release-softmax-mixed-classes", "release", RELEASE_SOFTMAX | {"classes": ["cat", 1, "owl"]}),
    ("release-softmax-duplicate-classes", "release", RELEASE_SOFTMAX | {"classes": ["cat", "dog", "cat"]}),
    ("release-softmax-empty-class", "release", RELEASE_SOFTMAX | {"classes": ["cat", "", "owl"]}),
    ("release-softmax-float-class", "release", RELEASE_SOFTMAX_INT | {"classes": [3, 1.5]}),
    ("release-softmax-bool-class", "release", RELEASE_SOFTMAX_INT | {"classes": [True, False]}),
    ("release-softmax-class-over-long", "release", RELEASE_SOFTMAX_INT | {"classes": [3, 2**63]}),
    ("release-budget-over-1", "release", _privacy(budget_used=1.01)),
    ("release-budget-negative", "release", _privacy(budget_used=-0.1)),
    ("release-delta-zero", "release", _privacy(delta=0)),
    ("release-delta-one", "release", _privacy(delta=1)),
    ("release-negative-epsilon", "release", _privacy(epsilon=-1.0)),
    ("release-capacity-negative", "release", _privacy(deletions_capacity_left=-1)),
    ("release-capacity-float", "release", _privacy(deletions_capacity_left=2.5)),
    ("release-privacy-missing-delta", "release",
     RELEASE | {"privacy": _without(RELEASE["privacy"], "delta")}),
    ("release-privacy-extra", "release", _privacy(sigma=0.3)),
    ("release-noise-std-negative", "release", _privacy(noise_std=-0.1)),
    ("release-noise-std-string", "release", _privacy(noise_std="0.1")),
    ("release-noise-to-signal-negative", "release", _privacy(noise_to_signal=-1.0)),
    ("dlq-wrong-reason", "dead-letter", DEAD_LETTER | {"olu.error.reason": "bad_json"}),
    ("dlq-missing-reason", "dead-letter", _without(DEAD_LETTER, "olu.error.reason")),
    ("dlq-missing-topic", "dead-letter", _without(DEAD_LETTER, "olu.source.topic")),
    ("dlq-partition-int", "dead-letter", DEAD_LETTER | {"olu.source.partition": 3}),
    ("dlq-partition-negative", "dead-letter", DEAD_LETTER | {"olu.source.partition": "-1"}),
    ("dlq-offset-leading-zero", "dead-letter", DEAD_LETTER | {"olu.source.offset": "01043"}),
    ("dlq-detail-too-long", "dead-letter", DEAD_LETTER | {"olu.error.detail": "x" * 1025}),
    ("dlq-failed-at-iso", "dead-letter", DEAD_LETTER | {"olu.failed.at": "2026-11-22T00:00:00Z"}),
    ("dlq-unknown-olu-header", "dead-letter", DEAD_LETTER | {"olu.error.code": "E42"}),
    ("dlq-truncated-not-a-size", "dead-letter", DEAD_LETTER | {"olu.truncated": "yes"}),
    ("dlq-empty-version", "dead-letter", DEAD_LETTER | {"olu.worker.version": ""}),
]
