"""Decode throughput of each input format next to JSON (not a test): records per second.

    .venv/bin/python bench/format_throughput.py [--dim 10] [--n 50000] [--repeat 5] [--quick] [--out DIR]

Times what the worker does per fetched batch before learning (2,000 messages, its default
``batch_size``), for a stream of inserts with 8 % deletes: JSON through ``decode_batch`` (the
compiled scan, deletes in Python); Avro, JSON Schema and Protobuf (Schema Registry framed, made by
confluent-kafka's serializers) through ``prepare_framed`` (the compiled readers, the generic path
for what they decline) and the same ``decode_batch``. Beside it, the generic path alone, as the
worker ran before the compiled readers and still runs under ``OLU_REFERENCE_KERNEL=1``: each
record through ``InputDecoder`` (the format's reader, the field mapping, the JSON event) and
``decode_batch`` of the Python decoder. The registry is confluent-kafka's in-process mock client:
after the first record the schema comes from the cache in every format, as in the worker, so no
network time is in the numbers. The best of ``--repeat`` runs is reported, with the median.
Writes ``format_throughput.json`` into ``--out``.
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
from confluent_kafka import Message  # noqa: E402

from worker.formats.events import event_serializer  # noqa: E402
from worker.formats.input import InputDecoder, transcode  # noqa: E402
from worker.formats.plans import PlanCache  # noqa: E402
from worker.stream.input.batch import decode_batch  # noqa: E402
from worker.stream.input.framed_scan import prepare_framed  # noqa: E402
from worker.stream.input.scan import python_decoder  # noqa: E402

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


BATCH = 2000
MAX_BYTES = 1 << 20


def time_once(batches: list, dim: int, plans) -> float:
    """Microseconds per record of the worker's decode step over ``batches``."""
    start = time.perf_counter()
    for batch in batches:
        if plans is not None:
            batch = prepare_framed(plans, batch, dim=dim, max_bytes=MAX_BYTES)[0]
        decode_batch(batch, dim=dim, max_bytes=MAX_BYTES)
    return (time.perf_counter() - start) / sum(map(len, batches)) * 1e6


def time_generic(batches: list, dim: int, decoder) -> float:
    """Microseconds per record of the generic path (each record transcoded, the Python decoder)."""
    start = time.perf_counter()
    with python_decoder():
        for batch in batches:
            decode_batch(transcode(decoder, batch)[0], dim=dim, max_bytes=MAX_BYTES)
    return (time.perf_counter() - start) / sum(map(len, batches)) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = h.arguments(ap, argv, quick="2,000 records per format, 2 repetitions")
    if args.quick:
        args.n, args.repeat = min(args.n, 2_000), min(args.repeat, 2)
    from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
        MockSchemaRegistryClient,
    )

    info = h.machine()
    print(h.machine_line(info))
    stream = events(args.n, args.dim)
    rows = []
    json_rate = None
    for fmt in FORMATS:
        client = MockSchemaRegistryClient({"url": f"mock://{fmt}"})
        encode = (lambda e, _t: orjson.dumps(e)) if fmt == "json" else event_serializer(fmt, client)
        messages = [Message(topic=TOPIC, partition=0, offset=j, key=e["id"].encode(), value=encode(e, TOPIC),
                            timestamp=(1, 1_000 + j)) for j, e in enumerate(stream)]
        batches = [messages[i:i + BATCH] for i in range(0, len(messages), BATCH)]
        decoder = None if fmt == "json" else InputDecoder(fmt, client)
        plans = None if decoder is None else PlanCache(decoder, args.dim)
        size = statistics.mean(len(m.value()) for m in messages)
        time_once(batches[:1], args.dim, plans)  # compile or load the kernels, fetch the schema
        runs = [time_once(batches, args.dim, plans) for _ in range(args.repeat)]
        generic = [time_generic(batches, args.dim, decoder) for _ in range(max(1, args.repeat // 2))] \
            if decoder is not None else runs
        rate = 1e6 / min(runs)
        json_rate = json_rate or rate
        rows.append({"format": fmt, "dim": args.dim, "bytes_per_value": size, "best_us": min(runs),
                     "median_us": statistics.median(runs), "records_per_s": rate, "vs_json": rate / json_rate,
                     "generic_us": min(generic), "generic_records_per_s": 1e6 / min(generic), "runs_us": runs})
        print(f"{fmt:12s} d={args.dim:<4d} {size:7.1f} B/value  best {min(runs):7.3f} us/record  "
              f"({rate:,.0f} records/s, {rate / json_rate:.2f} x JSON; generic path {min(generic):.3f} us)")
    report = {"machine": info, "config": {"dim": args.dim, "n": args.n, "repeat": args.repeat, "quick": args.quick,
                                          "delete_share": 0.08, "batch": BATCH}, "rows": rows}
    return h.finish("format_throughput", report, args.out)


def render(report: dict) -> str:
    """The README table: records per second of each format, and against JSON."""
    lines = ["| format | bytes per value | best us/record | median us/record | records/s | vs JSON "
             "| generic path us/record |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        generic = f"{r['generic_us']:.3f}" if "generic_us" in r and r["format"] != "json" else "-"
        lines.append(f"| `{r['format']}` (d = {r['dim']}) | {r['bytes_per_value']:.1f} | {r['best_us']:.3f} "
                     f"| {r['median_us']:.3f} | {r['records_per_s']:,.0f} | {r['vs_json']:.2f} | {generic} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
