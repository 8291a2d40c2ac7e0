"""worker.stream.input.decode and worker.stream.deadletter against the wire schemas in schemas/.

- every dead-letter reason code is produced by a crafted record (decode, or the engine checks that
  run after it), and the exact reason is asserted;
- agreement: ``decode_event`` accepts a record iff the JSON Schema accepts it (parsed by the
  standard library, an independent parser) and the worker-only checks pass (a non-empty key,
  dimension);
- hostile bytes never raise anything but ``DeadLetter``;
- dead-letter headers validate against dead-letter.schema.json, and REASONS is its enum.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.infra.schema_samples import VALID, decode_headers, load_schema, validate, validator
from worker import __version__
from worker.olu import exceptions as engine_errors
from worker.olu.core.domain import FeatureBound
from worker.stream.deadletter import (
    DETAIL_MAX_CHARS,
    FALLBACK_REASON,
    REASONS,
    carry_headers,
    dead_letter_headers,
    reason_of,
)
from worker.stream.exceptions import DeadLetter
from worker.stream.input import decode as decode_mod
from worker.stream.input.decode import MAX_ID_CHARS, Delete, Insert, decode_event
from worker.wire import DEAD_LETTER_HEADERS

BIG = 1 << 20  # max_bytes that never triggers in the agreement tests
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Sentinel feature/label values: they must never show up in a dead-letter detail.
SECRET_X = 987654.125
SECRET_Y = 31415.5
SECRET_TEXTS = ("987654", "31415")


def dumps(obj) -> bytes:
    return json.dumps(obj, allow_nan=True).encode()


def ins(**fields) -> bytes:
    return dumps({"op": "insert", "id": "r-1", "x": [SECRET_X, -SECRET_X], "y": SECRET_Y} | fields)


def without(record: dict, *names: str) -> dict:
    return {k: v for k, v in record.items() if k not in names}


INSERT = {"op": "insert", "id": "r-1", "x": [SECRET_X, -SECRET_X], "y": SECRET_Y}
DELETE = {"op": "delete", "id": "r-1"}
REQUEST = {"op": "delete", "ids": ["r-1", "r-2"]}
DEEP = 10_000

# (name, key, value, reason); dim is 2 and max_bytes 4096 unless the name says otherwise.
REASON_CASES: list[tuple[str, bytes | None, bytes | None, str]] = [
    ("not-utf8-value", b"r-1", b"\xff\xfe{}", "not_utf8"),
    ("not-utf8-in-string", b"r-1", b'{"op":"insert","id":"r-\xc3(","x":[1,2],"y":1}', "not_utf8"),
    ("not-utf8-surrogate-bytes", b"r-1", b'{"op":"delete","id":"\xed\xa0\x80"}', "not_utf8"),
    ("not-utf8-overlong", b"r-1", b'{"op":"delete","id":"\xc0\x80"}', "not_utf8"),
    ("not-json-truncated", b"r-1", b'{"op":"insert","id":"r-1","x":[1,', "not_json"),
    ("not-json-empty-bytes", b"r-1", b"", "not_json"),
    ("not-json-nan", b"r-1", ins(x=[math.nan, 1.0]), "not_json"),
    ("not-json-infinity", b"r-1", ins(x=[math.inf, 1.0]), "not_json"),
    ("not-json-neg-infinity-label", b"r-1", ins(y=-math.inf), "not_json"),
    ("not-json-1e999", b"r-1", b'{"op":"insert","id":"r-1","x":[1e999,1],"y":1}', "not_json"),
    ("not-json-neg-1e999-label", b"r-1", b'{"op":"insert","id":"r-1","x":[1,1],"y":-1e999}', "not_json"),
    ("not-json-huge-exponent", b"r-1", b'{"op":"insert","id":"r-1","x":[1.0e+99999999999,1],"y":1}', "not_json"),
    ("not-json-int-10e400", b"r-1", ins(x=[10**400, 1]), "not_json"),
    ("not-json-int-label-10e400", b"r-1", ins(y=-(10**400)), "not_json"),
    ("not-json-deep-array (max_bytes=big)", b"r-1", b"[" * DEEP + b"]" * DEEP, "not_json"),
    ("not-json-deep-x (max_bytes=big)", b"r-1",
     b'{"op":"insert","id":"r-1","x":' + b"[" * DEEP + b"1" + b"]" * DEEP + b',"y":1}', "not_json"),
    ("not-json-deep-object (max_bytes=big)", b"r-1", b'{"a":' * DEEP + b"1" + b"}" * DEEP, "not_json"),
    ("not-json-lone-surrogate-escape", b"r-1", b'{"op":"delete","id":"\\ud800"}', "not_json"),
    ("not-json-bom", b"r-1", b"\xef\xbb\xbf" + dumps(DELETE), "not_json"),
    ("not-json-two-documents", b"r-1", dumps(DELETE) + b" {}", "not_json"),
    ("not-json-single-quotes", b"r-1", b"{'op':'delete','id':'r-1'}", "not_json"),
    ("not-object-array", b"r-1", b'["insert","r-1"]', "not_object"),
    ("not-object-string", b"r-1", b'"r-1"', "not_object"),
    ("not-object-null-literal", b"r-1", b"null", "not_object"),
    ("not-object-number", b"r-1", b"42", "not_object"),
    ("unknown-op-missing", b"r-1", dumps(without(INSERT, "op")), "unknown_op"),
    ("unknown-op-upsert", b"r-1", dumps(INSERT | {"op": "upsert"}), "unknown_op"),
    ("unknown-op-case", b"r-1", dumps(INSERT | {"op": "INSERT"}), "unknown_op"),
    ("unknown-op-number", b"r-1", dumps(INSERT | {"op": 1}), "unknown_op"),
    ("unknown-op-list", b"r-1", dumps(INSERT | {"op": ["insert"]}), "unknown_op"),
    ("unknown-op-null", b"r-1", dumps(INSERT | {"op": None}), "unknown_op"),
    ("missing-id-insert", b"r-1", dumps(without(INSERT, "id")), "missing_id"),
    ("missing-id-delete", b"r-1", dumps({"op": "delete"}), "missing_id"),
    ("missing-id-tombstone-without-key", None, None, "missing_id"),
    ("bad-id-number", b"42", dumps(INSERT | {"id": 42}), "bad_id"),
    ("bad-id-null", b"r-1", dumps(INSERT | {"id": None}), "bad_id"),
    ("bad-id-empty", b"", dumps(INSERT | {"id": ""}), "bad_id"),
    ("bad-id-too-long", b"r" * 257, dumps(DELETE | {"id": "r" * 257}), "bad_id"),
    ("bad-id-list", b"r-1", dumps(DELETE | {"id": ["r-1"]}), "bad_id"),
    ("bad-id-tombstone-empty-key", b"", None, "bad_id"),
    ("bad-id-tombstone-not-utf8", b"r-\xff", None, "bad_id"),
    ("bad-id-tombstone-too-long", "é".encode() * 257, None, "bad_id"),
    ("bad-features-missing", b"r-1", dumps(without(INSERT, "x")), "bad_features"),
    ("bad-features-null", b"r-1", dumps(INSERT | {"x": None}), "bad_features"),
    ("bad-features-string", b"r-1", dumps(INSERT | {"x": "0.1,0.2"}), "bad_features"),
    ("bad-features-object", b"r-1", dumps(INSERT | {"x": {"0": 0.1}}), "bad_features"),
    ("bad-features-empty", b"r-1", dumps(INSERT | {"x": []}), "bad_features"),
    ("bad-features-bool", b"r-1", dumps(INSERT | {"x": [SECRET_X, True]}), "bad_features"),
    ("bad-features-all-bool", b"r-1", dumps(INSERT | {"x": [False, True]}), "bad_features"),
    ("bad-features-null-item", b"r-1", dumps(INSERT | {"x": [SECRET_X, None]}), "bad_features"),
    ("bad-features-string-item", b"r-1", dumps(INSERT | {"x": [SECRET_X, "0.2"]}), "bad_features"),
    ("bad-features-nested", b"r-1", dumps(INSERT | {"x": [[SECRET_X], [SECRET_X]]}), "bad_features"),
    ("bad-features-object-item", b"r-1", dumps(INSERT | {"x": [SECRET_X, {}]}), "bad_features"),
    ("wrong-dimension-short", b"r-1", dumps(INSERT | {"x": [SECRET_X]}), "wrong_dimension"),
    ("wrong-dimension-long", b"r-1", dumps(INSERT | {"x": [SECRET_X] * 3}), "wrong_dimension"),
    ("wrong-dimension-over-schema-max (max_bytes=big)", b"r-1", dumps(INSERT | {"x": [0] * 65537}),
     "wrong_dimension"),
    ("bad-label-missing", b"r-1", dumps(without(INSERT, "y")), "bad_label"),
    ("bad-label-string", b"r-1", dumps(INSERT | {"y": "1"}), "bad_label"),
    ("bad-label-bool", b"r-1", dumps(INSERT | {"y": True}), "bad_label"),
    ("bad-label-null", b"r-1", dumps(INSERT | {"y": None}), "bad_label"),
    ("bad-label-list", b"r-1", dumps(INSERT | {"y": [SECRET_Y]}), "bad_label"),
    ("oversized-value", b"r-1", dumps(INSERT | {"x": [SECRET_X] * 400}), "oversized"),
    ("oversized-key-plus-value (max_bytes=100)", b"r" * 40, dumps(DELETE | {"id": "r" * 40}), "oversized"),
    ("oversized-tombstone-key (max_bytes=100)", b"r" * 101, None, "oversized"),
    ("oversized-garbage", b"r-1", b"\xff" * 5000, "oversized"),
    ("schema-extra-field", b"r-1", dumps(INSERT | {"weight": 2.0}), "schema_violation"),
    ("schema-extra-field-with-ts", b"r-1", dumps(INSERT | {"ts": 1, "features": [SECRET_X]}), "schema_violation"),
    ("schema-ts-string", b"r-1", dumps(INSERT | {"ts": "2026-11-22T00:00:00Z"}), "schema_violation"),
    ("schema-ts-negative", b"r-1", dumps(INSERT | {"ts": -1}), "schema_violation"),
    ("schema-ts-fraction", b"r-1", dumps(INSERT | {"ts": 1.5}), "schema_violation"),
    ("schema-ts-null", b"r-1", dumps(INSERT | {"ts": None}), "schema_violation"),
    ("schema-ts-bool", b"r-1", dumps(INSERT | {"ts": True}), "schema_violation"),
    ("schema-delete-with-features", b"r-1", dumps(DELETE | {"x": [SECRET_X]}), "schema_violation"),
    ("schema-delete-with-label", b"r-1", dumps(DELETE | {"y": SECRET_Y, "ts": 5}), "schema_violation"),
    ("schema-delete-ts-negative", b"r-1", dumps(DELETE | {"ts": -5}), "schema_violation"),
    ("key-mismatch-unkeyed-insert", None, dumps(INSERT), "key_mismatch"),
    ("key-mismatch-unkeyed-delete", None, dumps(DELETE), "key_mismatch"),
    ("key-mismatch-unkeyed-request", None, dumps(REQUEST), "key_mismatch"),
    ("key-mismatch-empty-key", b"", dumps(DELETE), "key_mismatch"),
    ("key-mismatch-empty-key-insert", b"", dumps(INSERT), "key_mismatch"),
    # deletion requests naming several records (``ids``)
    ("missing-id-delete-neither-id-nor-ids", b"s-1", dumps({"op": "delete", "ts": 5}), "missing_id"),
    ("id-and-ids", b"s-1", dumps(REQUEST | {"id": "r-1"}), "id_and_ids"),
    ("id-and-ids-same", b"s-1", dumps({"op": "delete", "id": "r-1", "ids": ["r-1"]}), "id_and_ids"),
    ("bad-ids-empty", b"s-1", dumps(REQUEST | {"ids": []}), "bad_ids"),
    ("bad-ids-string", b"s-1", dumps(REQUEST | {"ids": "r-1,r-2"}), "bad_ids"),
    ("bad-ids-object", b"s-1", dumps(REQUEST | {"ids": {"0": "r-1"}}), "bad_ids"),
    ("bad-ids-null", b"s-1", dumps(REQUEST | {"ids": None}), "bad_ids"),
    ("too-many-ids (max_bytes=big)", b"s-1", dumps(REQUEST | {"ids": [f"r-{i}" for i in range(10_001)]}),
     "too_many_ids"),
    ("too-many-ids-even-if-bad (max_bytes=big)", b"s-1", dumps(REQUEST | {"ids": [1] * 10_001}), "too_many_ids"),
    ("duplicate-ids", b"s-1", dumps(REQUEST | {"ids": ["r-1", "r-2", "r-1"]}), "duplicate_ids"),
    ("duplicate-ids-adjacent", b"s-1", dumps(REQUEST | {"ids": ["r-2", "r-2"]}), "duplicate_ids"),
    ("bad-id-in-ids-number", b"s-1", dumps(REQUEST | {"ids": ["r-1", 2]}), "bad_id"),
    ("bad-id-in-ids-null", b"s-1", dumps(REQUEST | {"ids": [None]}), "bad_id"),
    ("bad-id-in-ids-nested", b"s-1", dumps(REQUEST | {"ids": [["r-1"]]}), "bad_id"),
    ("bad-id-in-ids-empty", b"s-1", dumps(REQUEST | {"ids": ["r-1", ""]}), "bad_id"),
    ("bad-id-in-ids-too-long", b"s-1", dumps(REQUEST | {"ids": ["r-1", "r" * 257]}), "bad_id"),
    ("bad-id-in-ids-too-long-unicode", b"s-1", dumps(REQUEST | {"ids": ["\U0001F600" * 257]}), "bad_id"),
    ("schema-request-extra-field", b"s-1", dumps(REQUEST | {"user": "s-1"}), "schema_violation"),
    # deletion requests naming their data subject, and request ids
    ("subject-and-ids", b"s-1", dumps(REQUEST | {"subject": "s-1"}), "subject_and_ids"),
    ("subject-and-id", b"s-1", dumps(DELETE | {"subject": "s-1"}), "subject_and_ids"),
    ("bad-subject-number", b"7", dumps({"op": "delete", "subject": 7}), "bad_subject"),
    ("bad-subject-empty", b"s-1", dumps({"op": "delete", "subject": ""}), "bad_subject"),
    ("bad-subject-null", b"s-1", dumps({"op": "delete", "subject": None}), "bad_subject"),
    ("key-mismatch-subject-not-the-key", b"s-1", dumps({"op": "delete", "subject": "s-2"}), "key_mismatch"),
    ("key-mismatch-subject-key-not-utf8", b"s-\xff", dumps({"op": "delete", "subject": "s-"}), "key_mismatch"),
    ("key-mismatch-subject-unkeyed", None, dumps({"op": "delete", "subject": "s-1"}), "key_mismatch"),
    ("bad-request-id-number", b"r-1", dumps(DELETE | {"request_id": 2291}), "bad_request_id"),
    ("bad-request-id-empty", b"s-1", dumps(REQUEST | {"request_id": ""}), "bad_request_id"),
    ("bad-request-id-too-long", b"r-1", dumps(DELETE | {"request_id": "D" * 257}), "bad_request_id"),
    ("bad-request-id-control", b"r-1", dumps(DELETE | {"request_id": "DSR\n1"}), "bad_request_id"),
    ("schema-subject-extra-field", b"s-1", dumps({"op": "delete", "subject": "s-1", "x": [1]}), "schema_violation"),
    ("schema-request-ts-string", b"s-1", dumps(REQUEST | {"ts": "now"}), "schema_violation"),
    ("oversized-request (max_bytes=100)", b"s-1", dumps(REQUEST | {"ids": [f"r-{i}" for i in range(30)]}),
     "oversized"),
]


def _limits(name: str) -> tuple[int, int]:
    if "max_bytes=big" in name:
        return 2, BIG
    if "max_bytes=100" in name:
        return 2, 100
    return 2, 4096


@pytest.mark.parametrize(("name", "key", "value", "reason"), REASON_CASES, ids=[c[0] for c in REASON_CASES])
def test_reason(name, key, value, reason):
    dim, max_bytes = _limits(name)
    with pytest.raises(DeadLetter) as caught:
        decode_event(key, value, dim=dim, max_bytes=max_bytes)
    dead = caught.value
    assert dead.reason == reason, f"{name}: got {dead.reason} ({dead.detail})"
    assert isinstance(dead.detail, str) and 0 < len(dead.detail) <= DETAIL_MAX_CHARS
    for secret in SECRET_TEXTS:  # privacy: details may be logged, features must not be
        assert secret not in dead.detail, f"{name}: detail leaks a value: {dead.detail!r}"


# Reasons the decoder cannot produce from orjson's output: the engine's batch checks (numpy) do.
def _engine_reason(x) -> str:
    with pytest.raises(engine_errors.InvalidExample) as caught:
        FeatureBound(len(x), 1.0, "reject").check(x)
    return caught.value.reason


ENGINE_CASES = {
    "norm_exceeded": [3.0, 4.0],  # ||x|| = 5 > R = 1
}
# Finite features whose plain sum of squares overflows: still over the bound, never "non_finite"
# (NaN and infinity cannot come out of orjson; a lenient parser's are in the test below).
HUGE_FEATURES = [[1e200, 1e200], [1e308, 0.1, 0.1, 0.1, 0.1], [1.7976931348623157e308] * 3, [1e155, 0.0]]


@pytest.mark.parametrize("reason", sorted(ENGINE_CASES))
def test_reason_from_engine_after_decode(reason):
    x = ENGINE_CASES[reason]
    event = decode_event(b"r-1", dumps(INSERT | {"x": x}), dim=len(x), max_bytes=4096)
    assert _engine_reason(event.x) == reason


@pytest.mark.parametrize("x", HUGE_FEATURES, ids=str)
def test_huge_finite_features_decode_and_are_over_the_bound(x):
    event = decode_event(b"r-1", dumps(INSERT | {"x": x}), dim=len(x), max_bytes=4096)
    assert event.x == x  # decoded exactly, nothing overflowed
    assert _engine_reason(event.x) == "norm_exceeded"
    clipped = FeatureBound(len(x), 1.0, "clip").check(event.x)
    assert math.isclose(math.fsum(v * v for v in clipped.tolist()), 1.0, rel_tol=1e-14)


def test_non_finite_when_a_lenient_parser_returns_huge_integers(monkeypatch):
    """orjson rejects 1e999 / 10**400 itself (not_json); a parser returning Python ints must not crash."""
    monkeypatch.setattr(decode_mod, "_loads", json.loads)
    for record in (INSERT | {"x": [10**400, 1]}, INSERT | {"y": -(10**400)}):
        with pytest.raises(DeadLetter) as caught:
            decode_event(b"r-1", dumps(record), dim=2, max_bytes=BIG)
        assert caught.value.reason == "non_finite"


def test_every_reason_code_is_produced():
    produced = {reason for *_, reason in REASON_CASES} | set(ENGINE_CASES) | {"non_finite"}
    # budget_exhausted is the partition runner's, for valid deletes the budget cannot cover
    # (tests/stream/test_worker_kafka_memorypair.py); the registry formats' own reasons are
    # produced by worker/formats (tests/stream/test_formats.py).
    registry = {"not_framed", "unknown_schema", "not_decodable", "schema_mismatch"}
    # forget_by_key_off is the runner's too (tests/stream/test_partition_receipts.py)
    assert produced | {"budget_exhausted", "forget_by_key_off"} | registry == set(REASONS)


# ------------------------------------------------------------------ accepted records
VALID_CASES: list[tuple[str, bytes | None, bytes | None, int, object]] = [
    ("insert", b"r-1", dumps(INSERT), 2, Insert("r-1", [SECRET_X, -SECRET_X], SECRET_Y, None)),
    ("insert-int-features-and-label", b"r-1", dumps(INSERT | {"x": [1, -2], "y": 0}), 2,
     Insert("r-1", [1.0, -2.0], 0.0, None)),
    ("insert-u64-and-beyond", b"r-1", dumps(INSERT | {"x": [2**64 - 1, 2**64], "y": -(2**63)}), 2,
     Insert("r-1", [float(2**64 - 1), float(2**64)], float(-(2**63)), None)),
    ("insert-max-double", b"r-1", b'{"op":"insert","id":"r-1","x":[1.7976931348623157e308,-0.0],"y":1}', 2,
     Insert("r-1", [1.7976931348623157e308, -0.0], 1.0, None)),
    ("insert-underflow-is-zero", b"r-1", b'{"op":"insert","id":"r-1","x":[2e-400,1],"y":1}', 2,
     Insert("r-1", [0.0, 1.0], 1.0, None)),
    ("insert-ts", b"r-1", dumps(INSERT | {"ts": 1763800000000}), 2,
     Insert("r-1", [SECRET_X, -SECRET_X], SECRET_Y, 1763800000000)),
    ("insert-ts-integral-float", b"r-1", dumps(INSERT | {"ts": 1763800000000.0}), 2,
     Insert("r-1", [SECRET_X, -SECRET_X], SECRET_Y, 1763800000000)),
    ("insert-ts-zero", b"r-1", dumps(INSERT | {"ts": 0}), 2, Insert("r-1", [SECRET_X, -SECRET_X], SECRET_Y, 0)),
    ("insert-field-order", b"r-1", b'{"y":1,"x":[1,2],"ts":5,"id":"r-1","op":"insert"}', 2,
     Insert("r-1", [1.0, 2.0], 1.0, 5)),
    ("insert-whitespace", b"r-1", b' {\n "op" : "insert",\t"id":"r-1", "x":[ 1 , 2 ],"y":1 }\r\n', 2,
     Insert("r-1", [1.0, 2.0], 1.0, None)),
    ("insert-unicode-id-256", ("é" * 256).encode(), dumps(INSERT | {"id": "é" * 256}), 2,
     Insert("é" * 256, [SECRET_X, -SECRET_X], SECRET_Y, None)),
    ("insert-astral-id-escaped", "\U0001F600".encode(), b'{"op":"insert","id":"\\ud83d\\ude00","x":[1,2],"y":1}', 2,
     Insert("\U0001F600", [1.0, 2.0], 1.0, None)),
    ("delete", b"r-1", dumps(DELETE), 2, Delete(("r-1",), False)),
    ("delete-ts", b"r-1", dumps(DELETE | {"ts": 7}), 2, Delete(("r-1",), False)),
    ("tombstone", b"r-1", None, 2, Delete(("r-1",), True)),
    ("tombstone-unicode", "user/7:é".encode(), None, 2, Delete(("user/7:é",), True)),
    ("oversized-boundary", b"r-1", dumps(DELETE), 2, Delete(("r-1",), False)),
    # the key is the partitioning key: any non-empty bytes, not necessarily the id
    ("insert-key-is-the-subject", b"subject-7", dumps(INSERT), 2,
     Insert("r-1", [SECRET_X, -SECRET_X], SECRET_Y, None)),
    ("insert-key-not-utf8", b"s-\xff", dumps(INSERT), 2, Insert("r-1", [SECRET_X, -SECRET_X], SECRET_Y, None)),
    ("insert-key-longer-than-an-id", b"s" * 1000, dumps(INSERT), 2,
     Insert("r-1", [SECRET_X, -SECRET_X], SECRET_Y, None)),
    ("delete-key-is-the-subject", b"r-2", dumps(DELETE), 2, Delete(("r-1",), False)),
    ("delete-key-unicode-normalisation", "é".encode(), dumps(DELETE | {"id": "e\u0301"}), 2,
     Delete(("e\u0301",), False)),
    ("request-one-id", b"s-1", dumps({"op": "delete", "ids": ["r-1"]}), 2, Delete(("r-1",), False)),
    ("request-two-ids", b"s-1", dumps(REQUEST), 2, Delete(("r-1", "r-2"), False)),
    ("request-ts", b"s-1", dumps(REQUEST | {"ts": 9}), 2, Delete(("r-1", "r-2"), False)),
    ("request-order-kept", b"s-1", dumps(REQUEST | {"ids": ["b", "a", "c"]}), 2, Delete(("b", "a", "c"), False)),
    ("request-unicode-and-long-ids", b"s-1", dumps(REQUEST | {"ids": ["é" * 256, "\U0001F600", "r" * 256]}), 2,
     Delete(("é" * 256, "\U0001F600", "r" * 256), False)),
    ("request-10000-ids (max_bytes=big)", b"s-1", dumps(REQUEST | {"ids": [f"r-{i}" for i in range(10_000)]}), 2,
     Delete(tuple(f"r-{i}" for i in range(10_000)), False)),
]


@pytest.mark.parametrize(("name", "key", "value", "dim", "expected"), VALID_CASES, ids=[c[0] for c in VALID_CASES])
def test_accepts(name, key, value, dim, expected):
    max_bytes = len(key or b"") + len(value or b"") if name == "oversized-boundary" else BIG
    if "max_bytes=big" not in name and value is not None:
        contract, why = contract_accepts(key, value, dim)
        assert contract, why  # the schema agrees
    got = decode_event(key, value, dim=dim, max_bytes=max_bytes)
    assert got == expected
    if isinstance(got, Insert):
        assert all(type(v) is float for v in got.x) and type(got.y) is float
        assert got.ts is None or type(got.ts) is int


def dim_of(record: dict) -> int:
    """The model dimension a sample fits: its array's length, or room for its sparse indices."""
    x = record.get("x", [0])
    return 65536 if isinstance(x, dict) else len(x)


@pytest.mark.parametrize("kind", ["insert", "delete"])
def test_schema_samples_are_accepted(kind):
    for record in VALID[kind]:
        validate(kind, record)
        key = _key_of(record)
        event = decode_event(key, dumps(record), dim=dim_of(record), max_bytes=BIG)
        if kind == "insert":
            assert event.id == record["id"]
        elif "subject" in record:
            assert (event.ids, event.subject) == ((), record["subject"])
        else:
            assert event.ids == (tuple(record["ids"]) if "ids" in record else (record["id"],))
        assert isinstance(event, Insert if kind == "insert" else Delete)


# ------------------------------------------------------------------ agreement with the schemas
_INVALID = object()


def _no_constants(name):
    raise ValueError(f"{name} is not JSON")


def reference_parse(value: bytes | None):
    """The standard library, strict: an independent parser for the agreement test."""
    try:
        return json.loads(value.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _INVALID


def contract_accepts(key: bytes | None, value: bytes, dim: int, labels: bool = False) -> tuple[bool, str]:
    """JSON Schema + the worker-only checks; (accepted, why not). ``labels``: the model's classes are
    strings (softmax), so ``y`` is a class name; otherwise it is a number."""
    obj = reference_parse(value)
    if obj is _INVALID:
        return False, "unparseable"
    if not isinstance(obj, dict):
        return False, "not an object"
    op = obj.get("op")
    kind = "insert" if op == "insert" else "delete" if op == "delete" else None
    if kind is None:
        return False, "op"
    try:
        errors = [e.message[:120] for e in validator(kind).iter_errors(obj)]
    except RecursionError:  # jsonschema's messages repr the instance; no valid record nests this deep
        return False, "too deep for the validator"
    if errors:
        return False, f"schema: {errors}"
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape: orjson refuses it (not_json)
        return False, "string not representable in UTF-8"
    if not key:
        return False, "no key"
    x = obj.get("x")
    if kind == "insert" and isinstance(x, dict):  # sparse: increasing indices (worker-only), each below dim
        if any(b <= a for a, b in zip(x["indices"], x["indices"][1:])) or len(x["indices"]) != len(x["values"]):
            return False, "sparse order"
        if any(i >= dim for i in x["indices"]):
            return False, "dimension"
    elif kind == "insert" and len(x) != dim:
        return False, "dimension"
    if kind == "insert" and isinstance(obj["y"], str) != labels:  # the loss is configuration
        return False, "label kind"
    if kind == "delete" and "subject" in obj and obj["subject"].encode() != key:  # worker-only
        return False, "subject is not the key"
    return True, ""


def check_agreement(key: bytes | None, value: bytes, dim: int, labels: bool = False) -> None:
    accepted, why = contract_accepts(key, value, dim, labels)
    try:
        event = decode_event(key, value, dim=dim, max_bytes=BIG, labels=labels)
    except DeadLetter as dead:
        assert dead.reason in REASONS
        assert len(dead.detail) <= DETAIL_MAX_CHARS
        assert not accepted, (f"decoder rejected ({dead.reason}: {dead.detail}) a record the contract accepts:\n"
                              f"key={key!r} dim={dim}\nvalue={value!r}")
        if why == "no key":
            assert dead.reason == "key_mismatch", (dead.reason, key, value)
        if why == "dimension":
            assert dead.reason == "wrong_dimension", (dead.reason, value)
        return
    assert accepted, (f"decoder accepted {event!r} but the contract rejects it ({why}):\n"
                      f"key={key!r} dim={dim}\nvalue={value!r}")
    obj = reference_parse(value)
    if obj["op"] == "insert":
        assert event.id == obj["id"]
        assert isinstance(event, Insert)
        x = obj["x"]
        if isinstance(x, dict):  # the dense row of a sparse x (a worker without OLU_SPARSE_INPUT)
            dense = [0.0] * dim
            for i, v in zip(x["indices"], x["values"]):
                dense[i] = float(v)
            x = dense
        assert event.x == [float(v) for v in x] and all(type(v) is float for v in event.x)
        if labels:
            assert event.y == obj["y"] and type(event.y) is str
        else:
            assert event.y == float(obj["y"]) and type(event.y) is float
        assert event.ts == (int(obj["ts"]) if "ts" in obj else None)
    elif "subject" in obj:
        assert event == Delete((), False, obj["subject"], obj.get("request_id"))
    else:
        assert event == Delete(tuple(obj["ids"]) if "ids" in obj else (obj["id"],), False, None,
                               obj.get("request_id"))


def mostly(good, bad, one_in: int = 8):
    """``good``, except one draw in ``one_in`` from ``bad``."""
    return st.integers(0, one_in - 1).flatmap(lambda i: bad if i == 0 else good)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8))
ANY_JSON = st.recursive(
    SCALARS, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
    max_leaves=12,
)
GOOD_NUMBER = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-10, 10),
    st.integers(-(2**64), 2**64),
    st.integers(2**64, 10**300),  # beyond u64: orjson reads a float; still a finite double
)
BAD_NUMBER = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 10**400, -(10**309), True, False, None]),
    st.text(max_size=4),
    st.lists(GOOD_NUMBER, max_size=2),
    st.dictionaries(st.text(max_size=2), GOOD_NUMBER, max_size=1),
    ANY_JSON,
)
GOOD_ID = st.one_of(st.text(min_size=1, max_size=12), st.text(min_size=250, max_size=MAX_ID_CHARS))
BAD_ID = st.one_of(st.just(""), st.text(min_size=MAX_ID_CHARS + 1, max_size=MAX_ID_CHARS + 4), ANY_JSON)
GOOD_TS = st.one_of(st.integers(0, 2**64), st.integers(0, 2**53).map(float))
BAD_TS = st.one_of(st.integers(max_value=-1), st.floats().filter(lambda f: not (f >= 0 and f.is_integer())), ANY_JSON)
KNOWN = {"op", "id", "ids", "x", "y", "ts"}
GOOD_IDS = st.lists(GOOD_ID, min_size=1, max_size=5, unique=True)
BAD_IDS = st.one_of(st.just([]), st.lists(GOOD_ID, min_size=2, max_size=4).map(lambda ids: ids + ids[:1]),
                    st.lists(mostly(GOOD_ID, BAD_ID, 2), min_size=1, max_size=3), ANY_JSON)


@st.composite
def records(draw) -> tuple[bytes | None, bytes, int]:
    """(key, value, dim): mostly valid records with a few invalid fields, keys and framings."""
    dim = draw(st.sampled_from([1, 2, 3, 8]))
    op = draw(mostly(st.sampled_from(["insert", "delete"]), st.one_of(st.text(max_size=8), ANY_JSON)))
    kind = op if op in ("insert", "delete") else draw(st.sampled_from(["insert", "delete"]))
    obj: dict = {}
    if draw(mostly(st.just(True), st.just(False), 16)):
        obj["op"] = op
    if draw(mostly(st.just(True), st.just(False), 16)):
        obj["id"] = draw(mostly(GOOD_ID, BAD_ID))
    if kind == "insert":
        if draw(mostly(st.just(True), st.just(False), 16)):
            good_x = st.lists(mostly(GOOD_NUMBER, BAD_NUMBER, 40), min_size=dim, max_size=dim)
            bad_x = st.one_of(st.lists(GOOD_NUMBER, max_size=dim + 2), ANY_JSON)
            obj["x"] = draw(mostly(good_x, bad_x))
        if draw(mostly(st.just(True), st.just(False), 16)):
            obj["y"] = draw(mostly(GOOD_NUMBER, BAD_NUMBER))
    if draw(st.booleans()):
        obj["ts"] = draw(mostly(GOOD_TS, BAD_TS))
    if draw(st.integers(0, 9)) == 0:
        extra = st.text(max_size=6).filter(lambda k: k not in KNOWN)
        obj |= draw(st.dictionaries(extra, ANY_JSON, min_size=1, max_size=2))
    if kind == "delete" and draw(st.integers(0, 15)) == 0:
        obj["x"] = draw(st.lists(GOOD_NUMBER, max_size=2))
    if kind == "delete" and draw(st.integers(0, 2)) == 0:  # a request naming several records
        if draw(mostly(st.just(True), st.just(False), 8)):
            obj.pop("id", None)
        obj["ids"] = draw(mostly(GOOD_IDS, BAD_IDS))
    order = draw(st.permutations(list(obj)))
    obj = {k: obj[k] for k in order}

    record_id = obj.get("id")
    good_key = st.one_of(st.binary(min_size=1, max_size=8), st.text(min_size=1, max_size=4).map(str.encode))
    if isinstance(record_id, str) and draw(st.booleans()):
        good_key = st.just(record_id.encode("utf-8", "surrogatepass"))
    key = draw(mostly(good_key, st.one_of(st.none(), st.binary(max_size=8), st.text(max_size=4).map(str.encode))))
    text = json.dumps(obj, allow_nan=True, ensure_ascii=draw(st.booleans()),
                      separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    if draw(st.integers(0, 15)) == 0:  # not an object at all
        text = json.dumps(draw(ANY_JSON), allow_nan=True)
    return key, text.encode(), dim


@SETTINGS
@given(records())
@example((b"r-1", dumps(INSERT | {"ts": 5.0}), 2))
@example((b"r-1", dumps(INSERT | {"x": [10**400, 1]}), 2))
@example((b"r-1", dumps(INSERT | {"y": 2**64 + 1}), 2))
@example((None, dumps(DELETE), 2))
@example((b"s-1", dumps(REQUEST), 2))
@example((b"s-1", dumps(REQUEST | {"ids": ["r-1", "r-1"]}), 2))
@example((b"s-1", dumps(REQUEST | {"id": "r-1"}), 2))
@example((b"s-1", dumps(REQUEST | {"ids": ["r-1", 7]}), 2))
@example((b"r-1", dumps(INSERT | {"y": "fraud"}), 2))
@example((b"r-1", dumps(INSERT | {"y": ""}), 2))
def test_agrees_with_schema(record):
    check_agreement(*record)
    check_agreement(*record, labels=True)  # string classes: y is a class name


def _key_of(record: dict) -> bytes:
    """The partitioning key a sample is sent under: its subject's, when it names one (the schema
    cannot say that the two must be equal; the decoder checks it)."""
    return record["subject"].encode() if "subject" in record else b"subject-7"


@pytest.mark.parametrize("kind", ["insert", "delete"])
def test_agrees_with_schema_on_samples(kind):
    for record in VALID[kind]:
        check_agreement(_key_of(record), dumps(record), dim_of(record))


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(2, 12_000), where=st.sampled_from(["top", "x", "y", "id", "extra"]),
       opener=st.sampled_from([b"[", b'{"k":']))
def test_deep_nesting_is_a_dead_letter(depth, where, opener):
    closer = b"]" if opener == b"[" else b"}"
    deep = opener * depth + b"1" + closer * depth
    value = {
        "top": deep,
        "x": b'{"op":"insert","id":"r-1","x":' + deep + b',"y":1}',
        "y": b'{"op":"insert","id":"r-1","x":[1],"y":' + deep + b"}",
        "id": b'{"op":"delete","id":' + deep + b"}",
        "extra": b'{"op":"delete","id":"r-1","z":' + deep + b"}",
    }[where]
    with pytest.raises(DeadLetter) as caught:
        decode_event(b"r-1", value, dim=1, max_bytes=BIG)
    if depth > 1024:
        assert caught.value.reason == "not_json"  # orjson's depth limit
    check_agreement(b"r-1", value, 1)


@pytest.mark.parametrize("n", [65536, 65537, 200_000])
def test_huge_arrays(n):
    value = dumps(INSERT | {"x": [0.5] * n})
    assert len(decode_event(b"r-1", value, dim=n, max_bytes=BIG * 4).x) == n  # dim is configuration
    with pytest.raises(DeadLetter) as caught:
        decode_event(b"r-1", value, dim=10, max_bytes=BIG * 4)
    assert caught.value.reason == "wrong_dimension"
    with pytest.raises(DeadLetter) as caught:
        decode_event(b"r-1", value, dim=n, max_bytes=len(value))
    assert caught.value.reason == "oversized"


# ------------------------------------------------------------------ hostile input
def _decode_or_dead(key, value, dim=2, max_bytes=BIG):
    try:
        event = decode_event(key, value, dim=dim, max_bytes=max_bytes)
    except DeadLetter as dead:
        assert dead.reason in REASONS and len(dead.detail) <= DETAIL_MAX_CHARS
        return dead
    assert isinstance(event, (Insert, Delete))
    ids = [event.id] if isinstance(event, Insert) else event.ids
    assert ids and all(type(i) is str and 0 < len(i) <= MAX_ID_CHARS for i in ids) and len(set(ids)) == len(ids)
    if value is None:
        assert event == Delete((key.decode(),), True)
    else:
        assert key  # the partitioning key: present, not necessarily an id
    if isinstance(event, Insert):
        assert len(event.x) == dim and all(type(v) is float for v in event.x) and type(event.y) is float
    return event


@settings(max_examples=500, deadline=None)
@given(key=st.none() | st.binary(max_size=300), value=st.none() | st.binary(max_size=300),
       max_bytes=st.integers(0, 400))
def test_hostile_bytes_only_raise_dead_letter(key, value, max_bytes):
    _decode_or_dead(key, value, max_bytes=max_bytes)


@SETTINGS
@given(data=st.data(), base=records())
def test_mutated_records_only_raise_dead_letter_and_agree(data, base):
    key, value, dim = base
    raw = bytearray(value)
    for _ in range(data.draw(st.integers(1, 4))):
        edit = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        pos = data.draw(st.integers(0, len(raw)))
        if edit == "flip" and pos < len(raw):
            raw[pos] = data.draw(st.integers(0, 255))
        elif edit == "insert":
            raw[pos:pos] = data.draw(st.sampled_from(
                [b"\xff", b"\xc3", b"\xed\xa0\x80", b"[", b"]", b"{", b"}", b",", b'"', b"\\", b"-",
                 b"e999", b"NaN", b"0", b"\x00", b" ", b"true", b"null", b'"ts":1,', b"\\ud800"]))
        elif edit == "delete" and pos < len(raw):
            del raw[pos]
        elif edit == "truncate":
            del raw[pos:]
    _decode_or_dead(key, bytes(raw), dim=dim)
    check_agreement(key, bytes(raw), dim)


# ------------------------------------------------------------------ dead-letter headers
def test_reasons_equal_the_schema_enum():
    schema_enum = load_schema("dead-letter")["properties"]["olu.error.reason"]["enum"]
    assert REASONS == tuple(schema_enum)
    assert set(DEAD_LETTER_HEADERS) == set(load_schema("dead-letter")["required"])


def _headers(**changes):
    args = dict(source_topic="olu.events", partition=3, offset=1043, reason="wrong_dimension",
                detail="x has 5 features, model dim is 4", worker_version=__version__,
                failed_at_ms=1763800000999) | changes
    return dead_letter_headers(**args)


@pytest.mark.parametrize("reason", REASONS)
def test_dead_letter_headers_validate(reason):
    headers = _headers(reason=reason)
    assert [name for name, _ in headers] == list(DEAD_LETTER_HEADERS)
    assert all(isinstance(v, bytes) for _, v in headers)
    decoded = decode_headers(headers)
    validate("dead-letter", decoded)
    assert decoded["olu.error.reason"] == reason
    assert decoded["olu.source.partition"] == "3" and decoded["olu.source.offset"] == "1043"


@pytest.mark.parametrize(("name", "key", "value", "reason"), REASON_CASES[::7], ids=[c[0] for c in REASON_CASES[::7]])
def test_dead_letter_headers_from_decode_validate(name, key, value, reason):
    dim, max_bytes = _limits(name)
    with pytest.raises(DeadLetter) as caught:
        decode_event(key, value, dim=dim, max_bytes=max_bytes)
    dead = caught.value
    original = [("traceparent", b"00-0af7651916cd43dd-01"), ("olu.trigger", b"events")]
    headers = _headers(reason=dead.reason, detail=dead.detail, partition=0, offset=0, failed_at_ms=0)
    headers += carry_headers(original)
    decoded = decode_headers(headers)
    validate("dead-letter", decoded)
    assert decoded["traceparent"] == "00-0af7651916cd43dd-01" and "olu.trigger" not in decoded


@SETTINGS
@given(detail=st.text(max_size=3000), partition=st.integers(0, 2**31 - 1), offset=st.integers(0, 2**63 - 1),
       failed_at=st.integers(0, 10**18), reason=st.sampled_from(REASONS) | st.text(max_size=20))
def test_dead_letter_headers_always_validate(detail, partition, offset, failed_at, reason):
    headers = _headers(detail=detail, partition=partition, offset=offset, failed_at_ms=failed_at, reason=reason)
    decoded = decode_headers(headers)
    validate("dead-letter", decoded)
    assert decoded["olu.error.reason"] == reason_of(reason)
    assert len(decoded["olu.error.detail"]) <= DETAIL_MAX_CHARS


def test_detail_is_truncated_to_1024_characters():
    decoded = decode_headers(_headers(detail="é" * 5000))
    assert len(decoded["olu.error.detail"]) == DETAIL_MAX_CHARS
    validate("dead-letter", decoded)
    assert len(DeadLetter("not_json", "x" * 5000).detail) == DETAIL_MAX_CHARS


def test_lone_surrogate_in_detail_is_encodable():
    validate("dead-letter", decode_headers(_headers(detail="bad \ud800 text")))


def test_negative_position_is_a_programming_error():
    for field in ("partition", "offset", "failed_at_ms"):
        with pytest.raises(ValueError):
            _headers(**{field: -1})


def test_carry_headers_keeps_foreign_headers_only():
    original = [("traceparent", b"00-ab-01"), ("olu.source.topic", b"elsewhere"), ("empty", None),
                ("dup", b"1"), ("dup", b"2"), ("binary", b"\xff\x00"), ("OLU.case", b"kept")]
    assert carry_headers(original) == [("traceparent", b"00-ab-01"), ("empty", None), ("dup", b"1"),
                                       ("dup", b"2"), ("OLU.case", b"kept")]
    assert carry_headers(None) == [] and carry_headers([]) == []


def test_unknown_reason_falls_back_and_keeps_the_code_in_the_detail():
    decoded = decode_headers(_headers(reason="invalid_example", detail="engine said no"))
    validate("dead-letter", decoded)
    assert decoded["olu.error.reason"] == FALLBACK_REASON == "schema_violation"
    assert decoded["olu.error.detail"].startswith("[invalid_example]")


def test_dead_letter_rejects_unknown_reason_codes():
    with pytest.raises(ValueError):
        DeadLetter("bad_json", "")


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_engine_error_reasons_are_dead_letter_reasons():
    subs = list(_subclasses(engine_errors.InvalidExample))
    assert subs
    for sub in subs:
        assert sub.reason in REASONS, f"{sub.__name__}.reason = {sub.reason!r} is not in the dead-letter enum"
    # The base class's code ("invalid_example") is not in the enum; the dead-letter path maps it.
    assert reason_of(engine_errors.InvalidExample.reason) in REASONS


# --------------------------------------------------------------------------- the batch fast path
def _messages(records, max_bytes=BIG):
    from confluent_kafka import Message

    return [Message(topic="t", partition=0, offset=i, key=key, value=value, timestamp=(1, 1000 + (i * 7919) % 97))
            for i, (key, value) in enumerate(records)]


def check_run_agrees(records, dim, max_bytes=BIG, start=0):
    """decode_inserts stops exactly where decode_event first says 'not an Insert', same values."""
    msgs = _messages(records)
    run = decode_mod.decode_inserts(msgs, start, dim=dim, max_bytes=max_bytes)
    expected = []
    for msg in msgs[start:]:
        event = _decode_or_dead(msg.key(), msg.value(), dim=dim, max_bytes=max_bytes)
        if not isinstance(event, Insert):
            break
        expected.append((msg, event))
    assert run.end == start + len(expected)
    assert run.ids == [ev.id for _, ev in expected]
    assert run.X.shape == (len(expected), dim) and run.X.dtype == "float64"
    assert run.X.tolist() == [ev.x for _, ev in expected]
    assert run.y.tolist() == [ev.y for _, ev in expected]
    assert run.newest_ts == max((m.timestamp()[1] for m, _ in expected), default=0)


@SETTINGS
@given(st.lists(records(), min_size=1, max_size=12), st.integers(0, 3))
@example([(b"r-1", dumps(INSERT), 2), (b"r-1", dumps(INSERT | {"x": [1, True]}), 2)], 0)
@example([(b"r-1", dumps(INSERT | {"ts": 5}), 2), (b"r-1", dumps(INSERT | {"x": [1, 2]}), 2)], 0)
@example([(b"r-1", dumps(INSERT), 2), (b"r-1", None, 2)], 0)
def test_decode_inserts_agrees_with_decode_event(batch, start):
    dim = batch[0][2]
    check_run_agrees([(key, value) for key, value, _ in batch], dim, start=min(start, len(batch)))


def test_decode_inserts_cuts_before_a_row_with_a_non_number():
    good = (b"r-1", dumps(INSERT))
    bad = (b"r-1", dumps(INSERT | {"x": [1.0, "2"]}))
    run = decode_mod.decode_inserts(_messages([good, good, bad, good]), 0, dim=2, max_bytes=BIG)
    assert run.end == 2 and len(run.ids) == 2 and run.X.shape == (2, 2)
    assert run.newest_ts == max(m.timestamp()[1] for m in _messages([good, good]))


def test_decode_inserts_respects_max_bytes():
    record = (b"r-1", dumps(INSERT))
    size = len(record[0]) + len(record[1])
    assert decode_mod.decode_inserts(_messages([record]), 0, dim=2, max_bytes=size).end == 1
    assert decode_mod.decode_inserts(_messages([record]), 0, dim=2, max_bytes=size - 1).end == 0


def test_a_delete_may_name_its_subject_and_carry_a_request_id():
    forget = decode_event(b"user-7", dumps({"op": "delete", "subject": "user-7", "request_id": "DSR-2291",
                                            "ts": 5}), dim=2, max_bytes=4096)
    assert (forget.ids, forget.subject, forget.request_id, forget.tombstone) == ((), "user-7", "DSR-2291", False)
    named = decode_event(b"user-7", dumps(REQUEST | {"request_id": "DSR-2292"}), dim=2, max_bytes=4096)
    assert (named.ids, named.subject, named.request_id) == (("r-1", "r-2"), None, "DSR-2292")
    plain = decode_event(b"r-1", dumps(DELETE), dim=2, max_bytes=4096)
    assert (plain.subject, plain.request_id) == (None, None)
    unicode = decode_event("ü-7".encode(), dumps({"op": "delete", "subject": "ü-7"}), dim=2, max_bytes=4096)
    assert unicode.subject == "ü-7"
