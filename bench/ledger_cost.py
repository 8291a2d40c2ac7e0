"""What the deletion ledger costs a long-lived model: memory, snapshot header size, export time.

    /work/venv/bin/python bench/ledger_cost.py [--entries 100000,1000000]

The ledger keeps one accounting entry per deletion for the model's whole life (design.md
invariant 4), so it only grows. For each size, passive-style entries (i, epoch, tau, u, shift,
sigma, rho) are appended to

- a plain list of dicts, written whole into every full snapshot's JSON header (the state format
  before 3), and
- :class:`worker.olu.ledger.Ledger` (format 3): sealed segments of 4,096 entries, each one
  immutable blob the store writes once, and only the open entries in the header;

and the bench reports the ledger's memory (tracemalloc, after building it), the size of the
snapshot header's JSON and the time to export it on the loop thread (``export_state`` / the old
``[dict(e) for e in ledger]``, plus ``orjson.dumps`` of the header; best of 3).

Writes ``bench/results/ledger_cost.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import orjson  # noqa: E402

from worker.olu.passive import PassiveOLU  # noqa: E402


def entry(i: int) -> dict:
    return {"i": i, "epoch": 0, "tau": 1_000_000 + 37 * i, "u": [13 * i + 1], "shift": 1.0 / (i + 7.3),
            "sigma": 0.5 + i * 1e-7, "rho": 0.001 * i / (i + 1.5)}


def measure(n: int, sealed: bool) -> dict:
    model = PassiveOLU(dim=10)
    tracemalloc.start()
    if sealed:
        for i in range(1, n + 1):
            model.ledger.append(entry(i))
    else:
        model.ledger = [entry(i) for i in range(1, n + 1)]
    memory = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    times = []
    for _ in range(3):
        started = time.perf_counter()
        header = model.export_state()["meta"] if sealed else {"ledger": [dict(e) for e in model.ledger]}
        size = len(orjson.dumps(header))
        times.append(time.perf_counter() - started)
    return {"entries": n, "memory_bytes": memory, "memory_bytes_per_entry": memory / n,
            "header_bytes": size, "export_s": min(times)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--entries", default="100000,1000000", help="comma-separated ledger sizes")
    p.add_argument("--out", type=Path, default=h.RESULTS)
    args = p.parse_args(argv)
    info = h.machine()
    print(h.machine_line(info))
    rows = []
    print(f"{'ledger':30} {'entries':>10} {'memory':>10} {'B/entry':>8} {'header':>11} {'export':>10}")
    for n in (int(v) for v in args.entries.split(",")):
        for sealed, label in ((False, "list in the header (format 2)"), (True, "sealed segments (format 3)")):
            r = {"ledger": label, **measure(n, sealed)}
            rows.append(r)
            print(f"{label:30} {n:>10,} {r['memory_bytes'] / 2**20:>8.1f} MiB {r['memory_bytes_per_entry']:>7.0f} "
                  f"{r['header_bytes'] / 2**20:>8.2f} MiB {r['export_s'] * 1e3:>7.1f} ms")
    args.out.mkdir(parents=True, exist_ok=True)
    h.write_json(args.out / "ledger_cost.json", {"bench": "ledger_cost", "command": h.command(), "machine": info,
                                                 "rows": rows})
    print(f"\nwrote {args.out / 'ledger_cost.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
