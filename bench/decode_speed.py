"""Micro-benchmark of worker.stream.input.decode.decode_event (not a test): prints microseconds per record.

    .venv/bin/python bench/decode_speed.py [--dim 10] [--n 200000] [--repeat 7] [--quick] [--out DIR]

Times the decoder alone on pre-built (key, value) pairs, one kind of record at a time (inserts
with float, integer or timestamped values, deletes, tombstones, and two kinds of poison records
that become dead letters); the best of ``--repeat`` runs is reported (the least disturbed by
other processes), with the median for context. Writes ``decode_speed.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402

from worker.stream.exceptions import DeadLetter  # noqa: E402
from worker.stream.input.decode import decode_event  # noqa: E402

REPORT_KEYS = ("config", "rows")
SERVICES = ()


def records(kind: str, n: int, dim: int, seed: int = 0) -> list[tuple[bytes | None, bytes | None]]:
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        rid = f"r-{j}"
        if kind == "insert":
            body = {"op": "insert", "id": rid, "x": rng.normal(size=dim).tolist(), "y": 1 if j % 2 else -1}
        elif kind == "insert-int":
            body = {"op": "insert", "id": rid, "x": rng.integers(-5, 5, size=dim).tolist(), "y": 1}
        elif kind == "insert-ts":
            body = {"op": "insert", "id": rid, "x": rng.normal(size=dim).tolist(), "y": 0.5, "ts": 1763800000000 + j}
        elif kind == "delete":
            body = {"op": "delete", "id": rid}
        elif kind == "tombstone":
            out.append((rid.encode(), None))
            continue
        elif kind == "poison-dim":
            body = {"op": "insert", "id": rid, "x": rng.normal(size=dim + 1).tolist(), "y": 1}
        elif kind == "poison-json":
            out.append((rid.encode(), b'{"op": "insert", "id": ' + rid.encode()))
            continue
        else:
            raise ValueError(kind)
        out.append((rid.encode(), orjson.dumps(body)))
    return out


def time_once(data, dim: int) -> float:
    decode = decode_event
    start = time.perf_counter()
    for key, value in data:
        try:
            decode(key, value, dim=dim, max_bytes=1 << 20)
        except DeadLetter:
            pass
    return (time.perf_counter() - start) / len(data) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--kinds", default="insert,insert-int,insert-ts,delete,tombstone,poison-dim,poison-json")
    args = h.arguments(ap, argv, quick="2,000 records of each kind, 2 repetitions")
    if args.quick:
        args.n, args.repeat = min(args.n, 2_000), min(args.repeat, 2)
    info = h.machine()
    print(h.machine_line(info))
    rows = []
    for kind in args.kinds.split(","):
        data = records(kind, args.n, args.dim)
        size = statistics.mean(len(v or b"") for _, v in data)
        runs = [time_once(data, args.dim) for _ in range(args.repeat)]
        rows.append({"kind": kind, "dim": args.dim, "bytes_per_value": size, "best_us": min(runs),
                     "median_us": statistics.median(runs), "records_per_s": 1e6 / min(runs), "runs_us": runs})
        print(f"{kind:12s} d={args.dim:<5d} {size:7.1f} B/value  best {min(runs):6.3f} us/record  "
              f"median {statistics.median(runs):6.3f} us/record  ({1e6 / min(runs):,.0f} records/s)")
    report = {"machine": info, "config": {"dim": args.dim, "n": args.n, "repeat": args.repeat,
                                          "orjson": orjson.__version__, "quick": args.quick}, "rows": rows}
    return h.finish("decode_speed", report, args.out)


def render(report: dict) -> str:
    """The README table: microseconds per record of each kind."""
    lines = ["| record | bytes per value | best us/record | median us/record | records/s |",
             "|---|---:|---:|---:|---:|"]
    for r in report["rows"]:
        lines.append(f"| `{r['kind']}` (d = {r['dim']}) | {r['bytes_per_value']:.1f} | {r['best_us']:.3f} "
                     f"| {r['median_us']:.3f} | {r['records_per_s']:,.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
