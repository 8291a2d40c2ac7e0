"""Named fields through a feature spec, against River's own pipeline on the same events (issue 38).

    .venv/bin/python bench/feature_spec.py [--events 1000000] [--quick] [--out DIR]

Two streams of records with named fields:

- ``agrawal``: River's ``synth.Agrawal`` generator (classification function 2, 5 % label noise):
  six numeric attributes and three categorical ones (education level, car make, zip code), sent as
  strings; ``--events`` records (1,000,000; 20,000 with ``--quick``). Its spec declares the
  generator's documented ranges and vocabularies (bench/feature_spec.py, AGRAWAL_SPEC).
- ``shuttle``: River's bundled Statlog Shuttle data (49,097 rows, 9 numeric sensor readings on
  their own scales, 7 % anomalies). Its spec's centre and scale per field are computed on the first
  2,000 rows, which are then left out of the evaluated stream: the documented way to get a scaler
  into a spec without fitting it on the stream (docs/calibration.md 2.4).

On each stream, test-then-train accuracy (every record predicted before it is learned):

1. **OGD with the spec**: the worker's vectors (its compiled named-field reader, ``scan_batch``
   with the spec, on the records as JSON) learned by plain OGD (``ogd``, worker defaults) one
   record at a time;
2. **River**: ``StandardScaler`` on the numeric fields and ``OneHotEncoder`` on the categorical
   ones, into ``LogisticRegression`` (River's defaults), one record at a time, on the same dicts;
3. **the planner's recommendation**: ``olu-worker plan``'s per-request configuration at epsilon 1
   for 0.5 % uniform single-record deletions (its sample: the stream's first 20,000 records), run
   with those deletions, next to OGD on the same stream.

Speed: records per second of the worker's path (``scan_batch`` with the spec over batches of
2,000 JSON messages, then ``learn_many``) and of River's per-record loop. Goal: OGD with the spec
within 1 point of River's accuracy on both streams.

Writes ``feature_spec.json`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
from _targets import Checks, Target  # noqa: E402
from confluent_kafka import Message  # noqa: E402

from worker.config import load_settings  # noqa: E402
from worker.features.spec import parse_spec  # noqa: E402
from worker.olu import record_keys  # noqa: E402
from worker.planning.plan import make_plan  # noqa: E402
from worker.planning.sample import Sample  # noqa: E402
from worker.planning.search import Candidate, candidate_model  # noqa: E402
from worker.planning.target import build_engine, resolve_target  # noqa: E402
from worker.planning.workload import Shape  # noqa: E402
from worker.stream.input.scan import scan_batch  # noqa: E402

REPORT_KEYS = ("config", "rows")
SERVICES = ()
BATCH = 2000
DELETE_SHARE = 0.005
SAMPLE_EVENTS = 20_000
SHUTTLE_CALIBRATION = 2_000
WITHIN_RIVER = Target("spec_ogd_vs_river", "OGD with the feature spec within 1 point of River's pipeline "
                      "(prequential accuracy)", ">=", -0.01, "accuracy", "issue 38")

AGRAWAL_NUMERIC = {"salary": [20_000, 150_000], "commission": [0, 75_000], "age": [20, 80],
                   "hvalue": [0, 1_350_000], "hyears": [1, 30], "loan": [0, 500_000]}
AGRAWAL_CATEGORICAL = {"elevel": 5, "car": 20, "zipcode": 9}
AGRAWAL_SPEC = {"features": [{"name": k, "type": "numeric", "range": r} for k, r in AGRAWAL_NUMERIC.items()]
                + [{"name": k, "type": "categorical", "vocabulary": [str(v + (k == "car")) for v in range(n)]}
                   for k, n in AGRAWAL_CATEGORICAL.items()]}


def agrawal(n: int, seed: int) -> tuple[list[dict], list[int]]:
    from river.datasets import synth

    records, labels = [], []
    for x, y in synth.Agrawal(classification_function=2, perturbation=0.05, seed=seed).take(n):
        records.append({k: (str(v) if k in AGRAWAL_CATEGORICAL else v) for k, v in x.items()})
        labels.append(int(y))
    return records, labels


def shuttle() -> tuple[list[dict], list[int], dict]:
    """The stream after the calibration rows, and the spec declared from those rows."""
    from river import datasets

    rows = list(datasets.Shuttle())
    calibration, rest = rows[:SHUTTLE_CALIBRATION], rows[SHUTTLE_CALIBRATION:]
    names = list(rows[0][0])
    spec = {"features": []}
    for k in names:
        v = np.array([x[k] for x, _ in calibration], np.float64)
        spec["features"].append({"name": k, "type": "numeric", "center": round(float(v.mean()), 4),
                                 "scale": round(max(float(v.std()), 1e-3), 4), "clip": 3})
    return [dict(x) for x, _ in rest], [int(y) for _, y in rest], spec


def vectors(spec, records: list[dict], labels: list[int]) -> tuple[np.ndarray, float]:
    """The worker's vectors of the records (its compiled reader), and the reader's records per second."""
    messages = [Message(topic="t", partition=0, offset=j, key=b"k", timestamp=(1, j),
                        value=orjson.dumps({"op": "insert", "id": f"r-{j}", "y": y, **r}))
                for j, (r, y) in enumerate(zip(records, labels))]
    X = np.empty((len(records), spec.dim))
    scan_batch(messages[:10], dim=spec.dim, max_bytes=1 << 20, features=spec)  # compile or load the reader
    start = time.perf_counter()
    for i in range(0, len(messages), BATCH):
        scan = scan_batch(messages[i:i + BATCH], dim=spec.dim, max_bytes=1 << 20, features=spec)
        assert scan.accepted.all()
        X[i:i + BATCH] = scan.X
    return X, len(records) / (time.perf_counter() - start)


def prequential(model, X: np.ndarray, y: np.ndarray, deletions: dict[int, int] | None = None) -> float:
    """Accuracy of each record predicted before it is learned; ``deletions``: {time: record} to unlearn."""
    ids = [f"r-{j}" for j in range(len(y))]
    signs = np.where(y > 0, 1.0, -1.0)
    correct = 0
    for j in range(len(y)):
        if deletions and j in deletions:
            model.unlearn_one(ids[deletions[j]])
        correct += (1.0 if float(X[j] @ model.z) >= 0.0 else -1.0) == signs[j]
        model.learn_one(ids[j], X[j], y[j])
    return correct / len(y)


def worker_rate(model, X: np.ndarray, y: np.ndarray, decode_rate: float) -> float:
    """Records per second of the worker's path: its reader's rate combined with learn_many's."""
    keys = record_keys([f"r-{j}" for j in range(len(y))])
    model.learn_many(None, X[:10], y[:10], keys=keys[:10])  # compile or load the kernels
    start = time.perf_counter()
    for i in range(0, len(y), BATCH):
        model.learn_many(None, X[i:i + BATCH], y[i:i + BATCH], keys=keys[i:i + BATCH])
    learn = len(y) / (time.perf_counter() - start)
    return 1.0 / (1.0 / decode_rate + 1.0 / learn)


def river(records: list[dict], labels: list[int], categorical: list[str]) -> tuple[float, float]:
    from river import compose, linear_model, preprocessing

    numeric = [k for k in records[0] if k not in categorical]
    features = compose.Select(*numeric) | preprocessing.StandardScaler()
    if categorical:
        features = features + (compose.Select(*categorical) | preprocessing.OneHotEncoder())
    model = features | linear_model.LogisticRegression()
    correct = 0
    start = time.perf_counter()
    for x, y in zip(records, labels):
        correct += int(model.predict_one(x) == bool(y))
        model.learn_one(x, bool(y))
    return correct / len(labels), len(labels) / (time.perf_counter() - start)


def recommended(settings, X: np.ndarray, y: np.ndarray, seed: int) -> tuple[str, float]:
    """The planner's per-request recommendation at epsilon 1 for 0.5 % deletions, and its accuracy
    with those deletions (uniform over the records before each one)."""
    target = resolve_target(settings, unit="per-request", target_epsilon=1.0)
    n_sample = min(SAMPLE_EVENTS, len(y))
    sample = Sample([f"s-{j}" for j in range(n_sample)], X[:n_sample], np.where(y[:n_sample] > 0, 1.0, -1.0), 0,
                    None, ())
    plan = make_plan(settings, target, shape=Shape(rate=DELETE_SHARE), events=len(y), sample=sample,
                     sim_events=min(len(y), 100_000), seed=seed)
    best = plan["search"]["best"]["per-request"]
    c = Candidate("per-request", best["rotation"], best["lifetime"], best["l2"], best["cap"], best.get("radius"))
    model = candidate_model(settings, target, c, best["capacity"], np.random.default_rng(seed))
    rng = np.random.default_rng([seed, 3])
    times = sorted(rng.choice(np.arange(100, len(y)), size=int(DELETE_SHARE * len(y)), replace=False).tolist())
    victims, deletions = set(), {}
    for t in times:
        j = int(rng.integers(t))
        while j in victims:
            j = int(rng.integers(t))
        victims.add(j)
        deletions[t] = j
    return best["settings"], prequential(model, X, y, deletions)


def run(name: str, records, labels, raw_spec: dict, categorical: list[str], seed: int) -> dict:
    spec = parse_spec(raw_spec)
    y = np.array(labels, np.float64)
    X, decode_rate = vectors(spec, records, labels)
    settings = _settings(raw_spec)
    target = resolve_target(settings, unit="per-request", target_epsilon=1.0)
    ogd = build_engine(settings, target)
    acc_ogd = prequential(ogd, X, y)
    rate = worker_rate(build_engine(settings, target), X, y, decode_rate)
    acc_river, river_rate = river(records, labels, categorical)
    plan_settings, acc_plan = recommended(settings, X, y, seed)
    row = {"stream": name, "events": len(y), "dim": spec.dim, "fields": len(spec.fields),
           "ogd_spec_accuracy": acc_ogd, "river_accuracy": acc_river, "gap_vs_river": acc_ogd - acc_river,
           "worker_events_per_s": rate, "reader_events_per_s": decode_rate, "river_events_per_s": river_rate,
           "plan_settings": plan_settings, "plan_accuracy": acc_plan, "plan_gap_vs_ogd": acc_plan - acc_ogd,
           "majority": max(np.mean(y), 1 - np.mean(y))}
    print(f"{name:8s} n={len(y):,} d={spec.dim}: OGD+spec {acc_ogd:.4f}  River {acc_river:.4f} "
          f"(gap {row['gap_vs_river'] * 100:+.2f} points)  plan@eps1 {acc_plan:.4f} [{plan_settings}]  "
          f"worker {rate:,.0f}/s  River {river_rate:,.0f}/s", flush=True)
    return row


def _settings(raw_spec: dict):
    import json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(raw_spec, f)
    return load_settings(["--features-file", f.name, "--privacy-unit", "per-request"], {}, command="demo")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="Agrawal records (default 1,000,000)")
    ap.add_argument("--seed", type=int, default=0)
    args = h.arguments(ap, argv, quick="20,000 Agrawal records, Shuttle's first 8,000")
    if args.quick:
        args.events = min(args.events, 20_000)
    info = h.machine()
    print(h.machine_line(info))
    checks = Checks()
    records, labels = agrawal(args.events, args.seed)
    rows = [run("agrawal", records, labels, AGRAWAL_SPEC, list(AGRAWAL_CATEGORICAL), args.seed)]
    records, labels, spec = shuttle()
    if args.quick:
        records, labels = records[:8_000], labels[:8_000]
    rows.append(run("shuttle", records, labels, spec, [], args.seed))
    for row in rows:
        checks.check(WITHIN_RIVER, row["gap_vs_river"], where=row["stream"])
    report = {"machine": info, "config": {"events": args.events, "seed": args.seed, "quick": args.quick,
                                          "delete_share": DELETE_SHARE, "batch": BATCH}, "rows": rows}
    return h.finish("feature_spec", report, args.out, checks=checks)


def render(report: dict) -> str:
    lines = ["| stream | records | dim | OGD + spec | River pipeline | gap | plan at eps 1, 0.5 % deletions "
             "| worker records/s | River records/s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        lines.append(f"| {r['stream']} | {r['events']:,} | {r['dim']} | {r['ogd_spec_accuracy']:.4f} "
                     f"| {r['river_accuracy']:.4f} | {r['gap_vs_river'] * 100:+.2f} | {r['plan_accuracy']:.4f} "
                     f"({r['plan_gap_vs_ogd'] * 100:+.2f} vs OGD) | {r['worker_events_per_s']:,.0f} "
                     f"| {r['river_events_per_s']:,.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
