"""Decode throughput of each input format next to JSON (not a test): records per second.

    .venv/bin/python bench/format_throughput.py [--dim 10] [--n 50000] [--repeat 5] [--quick] [--out DIR]

Times what the worker does per record before learning, for a stream of inserts with 8 % deletes:
JSON goes through ``decode_event``; Avro, JSON Schema and Protobuf (Schema Registry framed, made by
confluent-kafka's serializers) through ``worker.formats.input.InputDecoder`` (confluent-kafka's
deserializer, the field mapping, the JSON event) and then the same ``decode_event``. The registry
is confluent-kafka's in-process mock client: after the first record the schema comes from the
client's cache in every format, as in the worker, so no network time is in the numbers. The best
of ``--repeat`` runs is reported, with the median. Writes ``format_throughput.json`` into ``--out``.
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

from worker.formats.events import event_serializer  # noqa: E402
from worker.formats.input import InputDecoder  # noqa: E402
from worker.stream.input.decode import decode_event  # noqa: E402

REPORT_KEYS = ("config", "rows")
SERVICES = ()
FORMATS = ("json", "avro", "json-schema", "protobuf")
TOPIC = "olu.events"


def events(n: int, dim: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        if j and rng.random() < 0.08:
            out.append({"op": "delete", "id": f"r-{int(rng.integers(j))}"})
        else:
            out.append({"op": "insert", "id": f"r-{j}", "x": rng.normal(size=dim).tolist(), "y": 1.0 if j % 2 else 0.0})
    return out


def time_once(fmt: str, data, dim: int, decoder) -> float:
    start = time.perf_counter()
    if decoder is None:
        for key, value in data:
            decode_event(key, value, dim=dim, max_bytes=1 << 20)
    else:
        transcode = decoder.decode
        for key, value in data:
            decode_event(key, transcode(TOPIC, key, value), dim=dim, max_bytes=1 << 20)
    return (time.perf_counter() - start) / len(data) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = h.arguments(ap, argv, quick="2,000 records per format, 2 repetitions")
    if args.quick:
        args.n, args.repeat = min(args.n, 2_000), min(args.repeat, 2)
    from confluent_kafka.schema_registry._sync.mock_schema_registry_client import MockSchemaRegistryClient

    info = h.machine()
    print(h.machine_line(info))
    stream = events(args.n, args.dim)
    rows = []
    json_rate = None
    for fmt in FORMATS:
        client = MockSchemaRegistryClient({"url": f"mock://{fmt}"})
        if fmt == "json":
            data, decoder = [(e["id"].encode(), orjson.dumps(e)) for e in stream], None
        else:
            serialize = event_serializer(fmt, client)
            data = [(e["id"].encode(), serialize(e, TOPIC)) for e in stream]
            decoder = InputDecoder(fmt, client)
        size = statistics.mean(len(v) for _, v in data)
        runs = [time_once(fmt, data, args.dim, decoder) for _ in range(args.repeat)]
        rate = 1e6 / min(runs)
        json_rate = json_rate or rate
        rows.append({"format": fmt, "dim": args.dim, "bytes_per_value": size, "best_us": min(runs),
                     "median_us": statistics.median(runs), "records_per_s": rate, "vs_json": rate / json_rate,
                     "runs_us": runs})
        print(f"{fmt:12s} d={args.dim:<4d} {size:7.1f} B/value  best {min(runs):7.3f} us/record  "
              f"({rate:,.0f} records/s, {rate / json_rate:.2f} x JSON)")
    report = {"machine": info, "config": {"dim": args.dim, "n": args.n, "repeat": args.repeat, "quick": args.quick,
                                          "delete_share": 0.08}, "rows": rows}
    return h.finish("format_throughput", report, args.out)


def render(report: dict) -> str:
    """The README table: records per second of each format, and against JSON."""
    lines = ["| format | bytes per value | best us/record | median us/record | records/s | vs JSON |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        lines.append(f"| `{r['format']}` (d = {r['dim']}) | {r['bytes_per_value']:.1f} | {r['best_us']:.3f} "
                     f"| {r['median_us']:.3f} | {r['records_per_s']:,.0f} | {r['vs_json']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
