"""The worker end to end on named fields under a ten-field feature spec, next to the same stream sent
as ready vectors (issue 38): events per second on the real broker, measured in one run.

    .venv/bin/python bench/feature_throughput.py [--events 300000] [--delete-frac 0.01] [--repeat 2] [--quick]
    .venv/bin/python bench/feature_throughput.py --spec examples/agrawal.yaml  # a spec with derived blocks

The spec (SPEC below): five numeric fields by range, one by centre and scale, a boolean, two
categorical fields (5 and 10 values) and a hashed one (32 buckets): 57 coordinates with the
intercept. A pool of records is drawn as ``olu-worker demo --features`` draws them (some numbers
out of range, unlisted categories), labelled by a noisy linear rule of their vectors; the stream
(inserts and ``--delete-frac`` deletes of earlier records) is produced twice, once as named-field
JSON and once with each record's vector as ``x`` (the spec's own vector, so both runs learn the same
rows at the same feature bound), each on its own topic. The worker reads each (best of
``--repeat``). Goal: the named stream at >= 0.7x the vector stream's rate.

With ``--spec FILE`` (a spec with derived blocks, such as examples/agrawal.yaml: bins, crosses and
Fourier features, thousands of coordinates) only the named stream runs: its vectors as ``x``
would be a hundred kilobytes a record, a stream nobody sends (issue 53: the worker end to end under
the richest bench spec at >= 100,000 events/s).

Writes ``feature_throughput.json`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
from _targets import Checks, Target  # noqa: E402
from worker_throughput import run_worker  # noqa: E402

from worker.features.spec import load_spec, parse_spec  # noqa: E402
from worker.features.transform import vectorize  # noqa: E402
from worker.olu import warm_up  # noqa: E402
from worker.stream.demo import named_record  # noqa: E402

REPORT_KEYS = ("config", "rows")
SERVICES = ("kafka",)
POOL = 16_384
RICH_SPEC_EVENTS = Target("rich_spec_events_per_s", "the worker end to end under a spec with derived blocks",
                          ">=", 100_000, "events/s", "issue 53")
FEATURES_X_VECTOR = Target("features_x_vector", "named fields under a ten-field spec, the worker end to end >= "
                           "0.7x the same stream as ready vectors", ">=", 0.7, "x", "issue 38")
SPEC = {"features": [
    {"name": "age", "type": "numeric", "range": [18, 90]},
    {"name": "tenure_days", "type": "numeric", "range": [0, 3650]},
    {"name": "sessions", "type": "numeric", "range": [0, 500]},
    {"name": "basket", "type": "numeric", "range": [0, 1000]},
    {"name": "discount", "type": "numeric", "range": [0, 1]},
    {"name": "income", "type": "numeric", "center": 40000, "scale": 20000, "clip": 3},
    {"name": "member", "type": "boolean"},
    {"name": "plan", "type": "categorical", "vocabulary": ["free", "basic", "pro", "team", "enterprise"]},
    {"name": "country", "type": "categorical",
     "vocabulary": ["DE", "FR", "US", "GB", "JP", "IT", "ES", "NL", "SE", "PL"]},
    {"name": "device", "type": "hashed", "buckets": 32},
]}


def pool(spec, seed: int) -> tuple[list[bytes], list[bytes], list[int]]:
    """(named-field JSON fragments, vector JSON fragments, labels) of POOL records."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=spec.dim)
    named, vectors, labels = [], [], []
    for _ in range(POOL):
        record = named_record(spec, rng)
        x, _ = vectorize(spec, record)
        named.append(orjson.dumps(record)[1:-1])
        vectors.append(orjson.dumps(x.tolist()))
        labels.append(1 if float(x @ w) + 0.3 * rng.normal() >= 0 else 0)
    return named, vectors, labels


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--delete-frac", type=float, default=0.01)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spec", help="a spec file (YAML or JSON): only its named stream runs")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a worker setting (repeatable), e.g. --set sparse_input=true")
    args = h.arguments(ap, argv, quick="10,000 events, one run each")
    if args.quick:
        args.events, args.repeat = min(args.events, 10_000), 1
    info = h.machine()
    print(h.machine_line(info))
    warm_up()
    spec = load_spec(args.spec) if args.spec else parse_spec(SPEC)
    named, vectors, labels = pool(spec, args.seed)
    plan = h.stream_plan(args.events, args.delete_frac, args.seed)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec.source, f)
    bound = repr(spec.norm_bound * (1 + 1e-9))
    sets = h.parse_sets(args.set)
    runs = {"vector": {**sets, "feature_bound": bound}, "named": {**sets, "features_file": f.name}}
    if args.spec:
        runs.pop("vector")
    rows = []
    with h.kafka() as (bootstrap, _source):
        for kind, overrides in runs.items():
            topic, params, dlq = h.unique(f"bench.{kind}"), h.unique("bench.params"), h.unique("bench.dlq")
            h.create_topics(bootstrap, [topic, params, dlq])

            def encode(op: str, j: int, kind=kind) -> tuple[bytes, bytes]:
                rid = f"r-{j}".encode()
                if op == "d":
                    return rid, b'{"op":"delete","id":"%s"}' % rid
                k = j % POOL
                body = named[k] if kind == "named" else b'"x":' + vectors[k]
                return rid, b'{"op":"insert","id":"%s","y":%d,%s}' % (rid, labels[k], body)
            produced = h.produce_all(bootstrap, topic, None, plan, label=f"pre-produce {kind}", encode=encode)
            best = max((run_worker(bootstrap, topic, params, dlq, args.events,
                                   overrides={**overrides, "dim": spec.dim}) for _ in range(args.repeat)),
                       key=lambda w: w["events_per_s"])
            if best["summary"].get("dead_letters", 0):
                raise RuntimeError(f"{kind}: dead letters on a valid stream")
            rows.append({"stream": kind, "events": best["events"], "bytes_per_record": produced["bytes_per_record"],
                         "events_per_s": best["events_per_s"], "events_per_cpu_s": best["events_per_cpu_s"],
                         "final_t": best["final_t"]})
            print(f"worker, {kind:7s}: {best['events']:,} events = {best['events_per_s']:,.0f} events/s "
                  f"({produced['bytes_per_record']:.0f} B/record)", flush=True)
    checks, ratio = Checks(), None
    where = f"{args.events:,} events, delete share {args.delete_frac:g}, d = {spec.dim}"
    if args.spec:
        checks.check(RICH_SPEC_EVENTS, rows[0]["events_per_s"], where=f"{args.spec}, {where}")
    else:
        ratio = rows[1]["events_per_s"] / rows[0]["events_per_s"]
        checks.check(FEATURES_X_VECTOR, ratio, where=where)
    report = {"machine": info, "config": {"events": args.events, "delete_frac": args.delete_frac,
                                          "repeat": args.repeat, "quick": args.quick, "dim": spec.dim,
                                          "fields": len(spec.fields), "spec": spec.source,
                                          "spec_file": args.spec, "settings": sets},
              "rows": rows, "named_x_vector": ratio}
    return h.finish("feature_throughput", report, args.out, checks=checks)


def render(report: dict) -> str:
    lines = ["| stream | events | bytes per record | worker events/s | per CPU-second |", "|---|---:|---:|---:|---:|"]
    for r in report["rows"]:
        lines.append(f"| {r['stream']} | {r['events']:,} | {r['bytes_per_record']:.0f} | {r['events_per_s']:,.0f} "
                     f"| {r['events_per_cpu_s']:,.0f} |")
    if report["named_x_vector"] is not None:
        lines += ["", f"Named fields at {report['named_x_vector']:.2f}x the vector stream's rate "
                      f"(d = {report['config']['dim']}, {report['config']['fields']} fields)."]
    else:
        lines += ["", f"Under {report['config']['spec_file']} (d = {report['config']['dim']})."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
