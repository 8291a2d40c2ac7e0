"""The worker end to end by the shape of its model and input: dense, sparse and softmax.

    .venv/bin/python bench/worker_shapes.py [--events 200000] [--delete-frac 0.001] [--repeat 2] [--quick] [--out DIR]

The worker (``worker_throughput.run_worker``: in-process ``Worker.run`` on a real broker, state on
file://) over two pre-produced streams of ``--events`` events each, ``--delete-frac`` of them
deletes of earlier records:

- ``dense d=10``: ``x`` as an array of 10 numbers (the compiled JSON scan);
- ``sparse 30 of 2^16``: ``x`` as ``{"indices", "values"}`` with 30 non-zeros at random coordinates of
  d = 65,536, under ``OLU_SPARSE_INPUT`` (the compiled scan's CSR rows, the engine's sparse step);
- ``softmax K=5 d=10, integer classes``: ``OLU_LOSS=softmax``, ``OLU_CLASSES=0,1,2,3,4``, labels as
  numbers (the compiled JSON scan, a K x d step);
- ``softmax K=5 d=10, class names``: the same rows with the classes' names as labels (the compiled
  JSON scan reads them against the declared classes).

A deletion stays dense at any d: its Gaussian has d coordinates, its delta holds the d-vector and
its release the d weights (about 1.4 MB of JSON at d = 65,536: the params topic is created with
``max.message.bytes`` 4 MiB, over Kafka's 1 MiB default, which the worker would refuse at start), so
the deletion share weighs far more on the wide stream. Each stream's best of ``--repeat`` runs.

Writes ``worker_shapes.json`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
from worker_throughput import run_worker  # noqa: E402

from worker.olu import warm_up  # noqa: E402

REPORT_KEYS = ("config", "rows")
SERVICES = ("kafka",)
POOL = 8192
WIDE, NNZ = 2**16, 30
NAMES = ("billing", "fraud", "login", "shipping", "other")


def pools(seed: int) -> dict[str, tuple[list[bytes], list[bytes], dict]]:
    """Per stream: POOL ``x`` JSON fragments, their labels as JSON, the worker's settings."""
    rng = np.random.default_rng(seed)
    out = {}
    w = rng.normal(size=10)
    dense = [rng.normal(size=10) for _ in range(POOL)]
    dense = [x * (rng.random() / np.linalg.norm(x)) for x in dense]
    rows = [orjson.dumps(x.tolist()) for x in dense]
    out["dense d=10"] = (rows, [b"%d" % (x @ w > 0) for x in dense], {"dim": 10})
    best = [int(np.argmax(rng.normal(size=(len(NAMES), 10)) @ x)) for x in dense]
    softmax = {"dim": 10, "loss": "softmax"}
    out["softmax K=5 d=10, integer classes"] = (rows, [b"%d" % k for k in best],
                                                {**softmax, "classes": ",".join(map(str, range(len(NAMES))))})
    out["softmax K=5 d=10, class names"] = (rows, [b'"%s"' % NAMES[k].encode() for k in best],
                                            {**softmax, "classes": ",".join(NAMES)})
    wide_w = rng.normal(size=WIDE)
    fragments, labels = [], []
    for _ in range(POOL):
        idx = np.sort(rng.choice(WIDE, NNZ, replace=False))
        v = rng.normal(size=NNZ)
        v *= rng.random() / np.linalg.norm(v)
        fragments.append(orjson.dumps({"indices": idx.tolist(), "values": v.tolist()}))
        labels.append(b"%d" % (v @ wide_w[idx] > 0))
    out[f"sparse {NNZ} of 2^16"] = (fragments, labels, {"dim": WIDE, "sparse_input": True})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--delete-frac", type=float, default=0.001)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = h.arguments(ap, argv, quick="5,000 events, one run each")
    if args.quick:
        args.events, args.repeat = min(args.events, 5_000), 1
    info = h.machine()
    print(h.machine_line(info))
    warm_up()
    plan = h.stream_plan(args.events, args.delete_frac, args.seed)
    rows = []
    with h.kafka() as (bootstrap, _source):
        for name, (fragments, labels, overrides) in pools(args.seed).items():
            topic, params, dlq = h.unique("bench.sparse"), h.unique("bench.params"), h.unique("bench.dlq")
            h.create_topics(bootstrap, [topic, dlq])
            h.create_topics(bootstrap, [params], config={"max.message.bytes": str(4 << 20)})  # 1.6 MB JSON releases

            def encode(op: str, j: int, fragments=fragments, labels=labels) -> tuple[bytes, bytes]:
                rid = f"r-{j}".encode()
                if op == "d":
                    return rid, b'{"op":"delete","id":"%s"}' % rid
                k = j % POOL
                return rid, b'{"op":"insert","id":"%s","y":%s,"x":%s}' % (rid, labels[k], fragments[k])

            produced = h.produce_all(bootstrap, topic, None, plan, label=f"pre-produce {name}", encode=encode)
            best = max((run_worker(bootstrap, topic, params, dlq, args.events, overrides=overrides)
                        for _ in range(args.repeat)), key=lambda w: w["events_per_s"])
            if best["summary"].get("dead_letters", 0):
                raise RuntimeError(f"{name}: dead letters on a valid stream")
            rows.append({"stream": name, "dim": overrides["dim"], "events": best["events"],
                         "deletions": best["final_deletions"], "bytes_per_record": produced["bytes_per_record"],
                         "events_per_s": best["events_per_s"], "events_per_cpu_s": best["events_per_cpu_s"],
                         "state_bytes_at_end": best["state_bytes_at_end"]})
            print(f"worker, {name}: {best['events']:,} events = {best['events_per_s']:,.0f} events/s "
                  f"({produced['bytes_per_record']:.0f} B/record, {best['final_deletions']} deletions)", flush=True)
    report = {"machine": info, "config": {"events": args.events, "delete_frac": args.delete_frac,
                                          "repeat": args.repeat, "quick": args.quick, "nnz": NNZ, "wide_dim": WIDE},
              "rows": rows}
    return h.finish("worker_shapes", report, args.out)


def render(report: dict) -> str:
    lines = ["| stream | d | events | deletions | bytes per record | worker events/s | per CPU-second |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        lines.append(f"| {r['stream']} | {r['dim']:,} | {r['events']:,} | {r['deletions']} | "
                     f"{r['bytes_per_record']:.0f} | {r['events_per_s']:,.0f} | {r['events_per_cpu_s']:,.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
