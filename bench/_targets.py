"""The performance targets of the engine and streaming-worker issues, in one place (not a bench).

Every bench compares its numbers with these and prints one MET / NOT MET line per comparison;
:class:`Checks` does both and keeps the lines as dicts for the JSON report::

    checks = Checks()
    checks.check(ENGINE_EVENTS_PER_S, 2.5e6, where="learn_many, d=10")
    report["targets"] = checks.results

Every MET / NOT MET line a bench prints comes from :meth:`Checks.check`, in one format
(:data:`LINE`)::

    <indent><goal>[ [<where>]]: <value> -> MET|NOT MET[ (<note>)]

and the report's ``target_checks`` has one entry per line, in order (the bench smoke test holds
every bench to both).

Timings depend on the machine and on what else runs on it: a NOT MET on a shared machine is a
prompt to re-run on a quiet one, never a build failure (docs/worker.md 8).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

#: A target line on a bench's stdout; any line with the word MET must be one.
LINE = re.compile(r"^\s*(?P<what>\S.*): (?P<value>[^:]+?) -> (?P<verdict>MET|NOT MET)(?: \((?P<note>.*)\))?$")
MET_WORD = re.compile(r"\bMET\b")

_OPS = {">=": operator.ge, "<=": operator.le}


@dataclass(frozen=True)
class Target:
    """One stated goal: ``value <op> threshold`` in ``unit``."""

    key: str  # stable name in the JSON reports
    text: str  # the goal as the issue states it
    op: str  # ">=" or "<="
    threshold: float
    unit: str
    source: str  # which issue states it

    def met(self, value: float | None) -> bool:
        return value is not None and _OPS[self.op](value, self.threshold)

    def format(self, value: float | None) -> str:
        if value is None:
            return "no value"
        if self.unit == "x":
            return f"{value:.2f}x"
        if self.unit == "s":
            return f"{value * 1e3:,.1f} ms" if self.threshold < 1 else f"{value:,.3f} s"
        if self.unit == "ms":
            return f"{value:,.1f} ms"
        return f"{value:,.2f} {self.unit}" if value < 100 else f"{value:,.0f} {self.unit}"


# --------------------------------------------------------------------------- engine issue
ENGINE_EVENTS_PER_S = Target(
    "engine_events_per_s", "engine learns >= 1,000,000 events/s on one core", ">=", 1_000_000,
    "events/s", "engine")
ENGINE_X_RIVER = Target(
    "engine_x_river", "engine >= 3x River's LogisticRegression.learn_one on one core", ">=", 3.0,
    "x", "engine")
INDEX_BYTES_PER_RECORD = Target(
    "index_bytes_per_record", "applied-record index <= 16 bytes per record at 1,000,000 records", "<=", 16.0,
    "bytes/record", "engine")
ACTIVE_DELETION_MS = Target(
    "active_deletion_ms", "one active deletion <= 250 ms with 100,000 retained examples at d = 50", "<=", 250.0,
    "ms", "engine")
ACTIVE_DELETION_RETAINED = 100_000  # the conditions of ACTIVE_DELETION_MS
ACTIVE_DELETION_DIM = 50

# --------------------------------------------------------------------------- deletions at stream speed (issue 23)
LEARN_MANY_EVENTS_PER_S = Target(
    "learn_many_events_per_s", "engine learn_many at d = 10 >= 6,000,000 events/s on one core", ">=", 6_000_000,
    "events/s", "issue 23")
MERGE_STALL_MS = Target(
    "merge_stall_ms", "no learn call stalls more than 10 ms for an index merge at 10,000,000 applied records",
    "<=", 10.0, "ms", "issue 23")
LEDGER_BYTES_PER_DELETION = Target(
    "ledger_bytes_per_deletion", "deletion ledger <= 64 bytes per deletion (memory and snapshot) at 100,000",
    "<=", 64.0, "bytes/deletion", "issue 23")
DELETION_IN_PLACE_US = Target(
    "deletion_in_place_us", "each deletion costs the partition's loop at most 50 us in place (1% deletions)",
    "<=", 50.0, "us", "issue 23")
DELETE_RATE_X_INSERTS_1PCT = Target(
    "delete_rate_x_inserts_1pct", "worker with 1% deletions >= 0.7x its insert-only rate", ">=", 0.7, "x",
    "issue 23")
DELETE_RATE_X_INSERTS_01PCT = Target(
    "delete_rate_x_inserts_01pct", "worker with 0.1% deletions >= 0.9x its insert-only rate", ">=", 0.9, "x",
    "issue 23")
BURST_100K_S = Target(
    "burst_100k_s", "a burst of 100,000 deletions on one partition honoured within 15 s", "<=", 15.0, "s",
    "issue 23")

# --------------------------------------------------------------------------- streaming-worker issue
WORKER_EVENTS_PER_S = Target(
    "worker_events_per_s", "worker end to end, passive d = 10 logistic, one partition >= 150,000 events/s",
    ">=", 150_000, "events/s", "streaming worker")
WORKER_X_CEILING = Target(
    "worker_x_ceiling", "worker end to end >= 0.5x the raw consume-and-decode ceiling of the same run",
    ">=", 0.5, "x", "streaming worker")
DELETE_TO_RELEASE_P99_S = Target(
    "delete_to_release_p99_s", "delete-to-release p99 <= 50 ms at 50,000 inserts/s, deletion durable on S3",
    "<=", 0.050, "s", "streaming worker")
RESTORE_1M_S = Target(
    "restore_1m_s", "restore of a partition with 1,000,000 applied records <= 2 s", "<=", 2.0, "s",
    "streaming worker")

# --------------------------------------------------------------------------- issue 19 (rotation)
ROTATION_X_ONE_MODEL = Target(
    "rotation_x_one_model", "with rotation on, learn_many >= 0.45x one model's rate", ">=", 0.45, "x",
    "issue 19")

ROTATION_WORKER_X = Target(
    "rotation_worker_x", "with rotation on, the worker end to end >= 0.8x its rate without rotation", ">=", 0.8,
    "x", "issue 19")

# --------------------------------------------------------------------------- issue 37 (formats at speed)
AVRO_X_JSON = Target(
    "avro_x_json", "Avro input, the worker end to end >= 1.0x its JSON rate on the same events", ">=", 1.0, "x",
    "issue 37")
PROTOBUF_X_JSON = Target(
    "protobuf_x_json", "Protobuf input, the worker end to end >= 0.8x its JSON rate on the same events", ">=", 0.8,
    "x", "issue 37")
JSON_SCHEMA_X_JSON = Target(
    "json_schema_x_json", "JSON Schema input (validated), the worker end to end >= 0.5x its JSON rate", ">=", 0.5,
    "x", "issue 37")
FORMAT_X_JSON = {"avro": AVRO_X_JSON, "protobuf": PROTOBUF_X_JSON, "json-schema": JSON_SCHEMA_X_JSON}

# --------------------------------------------------------------------------- multiclass (softmax loss)
SOFTMAX_X_RIVER_POINTS = Target(
    "softmax_river_gap_points", "softmax plain OGD prequential accuracy within 1 point of River's "
    "SoftmaxRegression (River minus ours)", "<=", 1.0, "points", "multiclass")
SOFTMAX_X_LOGISTIC = Target(
    "softmax_x_logistic", "learn_many at d = 10, softmax K = 5 >= 0.3x binary logistic's events/s", ">=", 0.3, "x",
    "multiclass")

ALL = (ENGINE_EVENTS_PER_S, ENGINE_X_RIVER, INDEX_BYTES_PER_RECORD, ACTIVE_DELETION_MS, ROTATION_X_ONE_MODEL, ROTATION_WORKER_X,
       LEARN_MANY_EVENTS_PER_S, LEDGER_BYTES_PER_DELETION, MERGE_STALL_MS,
       DELETION_IN_PLACE_US, DELETE_RATE_X_INSERTS_1PCT, DELETE_RATE_X_INSERTS_01PCT, BURST_100K_S,
       WORKER_EVENTS_PER_S, WORKER_X_CEILING, DELETE_TO_RELEASE_P99_S, RESTORE_1M_S, AVRO_X_JSON, PROTOBUF_X_JSON,
       JSON_SCHEMA_X_JSON, SOFTMAX_X_RIVER_POINTS, SOFTMAX_X_LOGISTIC)


class Checks:
    """Compares values with targets, prints a MET / NOT MET line for each, keeps them for the JSON."""

    def __init__(self, indent: str = "  ", echo: bool = True):
        self.indent, self.echo = indent, echo
        self.results: list[dict] = []

    def check(self, target: Target, value: float | None, *, where: str = "", note: str = "") -> bool:
        ok = target.met(value)
        self.results.append({"target": target.key, "text": target.text, "op": target.op,
                             "threshold": target.threshold, "unit": target.unit, "where": where,
                             "value": value, "met": ok, **({"note": note} if note else {})})
        if self.echo:
            head = f"{target.text}" + (f" [{where}]" if where else "")
            print(f"{self.indent}{head}: {target.format(value)} -> {'MET' if ok else 'NOT MET'}"
                  + (f" ({note})" if note else ""))
        return ok

    @property
    def all_met(self) -> bool:
        return all(r["met"] for r in self.results)
