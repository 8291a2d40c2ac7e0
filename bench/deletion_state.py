"""What a long-lived model's per-deletion state costs: the ledger and the tombstones (not a test).

    .venv/bin/python bench/deletion_state.py [--entries 100000,1000000] [--quick] [--out DIR]

Both keep one item per deletion for the model's whole life (docs/worker.md 4.4; a tombstone
per deleted id so a late insert of it is skipped), so both only grow.

**Ledger.** For each size, passive-style entries (i, epoch, tau, u, shift,
sigma, rho) are appended to

- a plain list of dicts, written whole into every full snapshot's JSON header (the state format
  before 3),
- segments of 4,096 entries sealed as one JSON array each (format 3; emulated here: that code is
  gone), each one immutable blob the store writes once, and only the open entries in the header,
- :class:`worker.olu.privacy.ledger.Ledger` (format 4): the same segments sealed in columns
  (41 bytes a common entry) with a side table for extras;

and, for the format-4 ledger, rewind-style entries too (the common fields plus outcome, route,
generation, n, T, K: the extras go to the side table). The bench reports the ledger's memory
(tracemalloc, after building it), the size of the snapshot header's JSON and the time to export
it on the loop thread (``export_state`` / the old ``[dict(e) for e in ledger]``, plus
``orjson.dumps`` of the header; best of 3), and the **snapshot bytes per deletion**: the header
and every sealed segment encoded by ``worker.state.codec.encode`` (what the store writes, the
sealed ones once), divided by the entries. Target (issue 23): <= 64 bytes per deletion in memory
and in snapshots at 100,000 deletions.

**Tombstones.** For each size, random 64-bit keys in

- one sorted array, an ``np.insert`` per deletion and all of it copied into every full snapshot
  (before format 3), and
- :class:`worker.olu.core.tombstones.KeySet` (format 3): an immutable base plus at most 16,384 recent keys;
  a snapshot copies the recent ones and names the base, stored once as a blob;

and the bench reports the mean and the slowest of 20,000 adds from that size on (so at least one
merge of the recent keys into a new base is included) and the bytes a full snapshot then copies
on the loop thread.

**Learning with tombstones.** Every insert is checked against the tombstones. For each size (plus
8,000 recent keys), the learning kernel (``kernels.ogd.ogd_steps``, d = 10, calls of 2,000 fresh
rows, best of 100) runs with no tombstones, with them behind a filter that passes every key (the
binary search in both arrays for every insert: the check before the filter) and with the key
set's own filter; ns per insert.

Writes ``deletion_state.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import numpy as np  # noqa: E402
import orjson  # noqa: E402
from _targets import LEDGER_BYTES_PER_DELETION, Checks  # noqa: E402

from worker.olu import PassiveOLU  # noqa: E402
from worker.olu.core.kernels import ogd  # noqa: E402
from worker.olu.core.tombstones import KeySet  # noqa: E402
from worker.olu.privacy.ledger import SEGMENT_ENTRIES  # noqa: E402
from worker.state.codec import encode  # noqa: E402

REPORT_KEYS = ("ledger", "tombstones", "learning")
SERVICES = ()


def entry(i: int, extras: bool = False) -> dict:
    e = {"i": i, "epoch": 0, "tau": 1_000_000 + 37 * i, "u": [13 * i + 1], "shift": 1.0 / (i + 7.3),
         "sigma": 0.5 + i * 1e-7, "rho": 0.001 * i / (i + 1.5)}
    if extras:  # what a rewind deletion adds
        e.update(outcome="noised", route=("rewind", "replay")[i % 2], generation=i // 500, n=40_000 + i % 977,
                 T=20, K=3)
    return e


class JsonSegments(list):
    """The format-3 ledger, emulated: every 4,096 entries sealed as one JSON array (a uint8 copy)."""

    def __init__(self):
        super().__init__()
        self.sealed: list[np.ndarray] = []

    def append(self, e: dict) -> None:
        super().append(e)
        if len(self) == SEGMENT_ENTRIES:
            self.sealed.append(np.frombuffer(orjson.dumps(list(self)), np.uint8).copy())
            self.clear()


LAYOUTS = {"list": "list in the header (format 2)", "json": "JSON segments (format 3)",
           "columns": "columns (format 4)", "columns+extras": "columns (format 4), rewind entries"}


def measure(n: int, layout: str) -> dict:
    model = PassiveOLU(dim=10)
    extras = layout == "columns+extras"
    tracemalloc.start()
    if layout == "list":
        model.ledger = [entry(i) for i in range(1, n + 1)]
    else:
        if layout == "json":
            model.ledger = JsonSegments()
        for i in range(1, n + 1):
            model.ledger.append(entry(i, extras))
    memory = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    times = []
    for _ in range(3):
        started = time.perf_counter()
        if layout == "list":
            header, sealed = {"ledger": [dict(e) for e in model.ledger]}, {}
        elif layout == "json":
            header = {"ledger": [dict(e) for e in model.ledger]}
            sealed = {f"s{i}": seg for i, seg in enumerate(model.ledger.sealed)}
        else:
            state = model.export_state()
            header = state["meta"]
            sealed = {f"{g}/{k}": a for g, arrs in state["shared"].items() for k, a in arrs.items()}
        size = len(orjson.dumps(header))
        times.append(time.perf_counter() - started)
    snapshot = len(encode({"meta": {"ledger": header.get("ledger")}}, {}))
    groups: dict[str, dict] = {}
    for name, arr in sealed.items():
        groups.setdefault(name.split("/")[0], {})[name] = arr
    snapshot += sum(len(encode({}, arrays)) for arrays in groups.values())  # each sealed segment: one blob
    return {"entries": n, "memory_bytes": memory, "memory_bytes_per_entry": memory / n,
            "header_bytes": size, "export_s": min(times), "snapshot_bytes": snapshot,
            "snapshot_bytes_per_entry": snapshot / n}


def measure_tombstones(n: int, split: bool, adds: int = 20_000) -> dict:
    rng = np.random.default_rng(n)
    start = np.unique(rng.integers(1, 2**63, n, dtype=np.uint64))
    new = rng.integers(1, 2**63, adds, dtype=np.uint64)
    if split:
        keys = KeySet(start)
        started, slowest = time.perf_counter(), 0.0
        for k in new.tolist():
            t = time.perf_counter()
            keys.add(k)
            slowest = max(slowest, time.perf_counter() - t)
        add_s = (time.perf_counter() - started) / adds
        copied = keys.export()[0].nbytes
    else:
        keys = start
        started, slowest = time.perf_counter(), 0.0
        for k in new:
            t = time.perf_counter()
            pos = np.searchsorted(keys, k)
            if pos == len(keys) or keys[pos] != k:
                keys = np.insert(keys, pos, k)
            slowest = max(slowest, time.perf_counter() - t)
        add_s = (time.perf_counter() - started) / adds
        copied = keys.copy().nbytes
    return {"keys": n, "adds": adds, "add_s": add_s, "slowest_add_s": slowest, "snapshot_copy_bytes": copied}


def measure_learning(n: int, recent: int = 8_000, rows: int = 2_000, calls: int = 100) -> dict:
    rng = np.random.default_rng(n + 1)
    keys = KeySet(np.unique(rng.integers(1, 2**63, n, dtype=np.uint64)))
    for k in rng.integers(1, 2**63, recent, dtype=np.uint64).tolist():
        keys.add(k)
    X = rng.normal(size=(rows, 10))
    X /= (1.01 * np.linalg.norm(X, axis=1))[:, None]
    y = np.where(rng.random(rows) < 0.5, 1.0, -1.0)
    fresh = rng.integers(1, 2**63, rows, dtype=np.uint64)  # spread among the tombstones, none of them
    if any(k in keys for k in fresh.tolist()):
        raise RuntimeError("a fresh key is a tombstone: pick another seed")
    tail_keys, tail_steps, steps = np.zeros(rows, np.uint64), np.zeros(rows, np.uint32), np.zeros(rows, np.int64)

    def ns_per_insert(tombstones: KeySet, words: np.ndarray) -> float:
        best = float("inf")
        for _ in range(calls):
            z = np.zeros(10)
            t = time.perf_counter()
            ogd.ogd_steps(ogd.LOSS_LOGISTIC, 0.01, ogd.SCHED_STRONGLY_CONVEX, 0.01, 1.0, 10.0, z, X, y, fresh,
                          tombstones.base, tombstones.recent, words, tail_keys, tail_steps, 0, 0, steps, 0)
            best = min(best, time.perf_counter() - t)
        return best / rows * 1e9

    none = KeySet()
    return {"keys": len(keys), "filter_bytes": keys.filter.nbytes,
            "none_ns": ns_per_insert(none, none.filter),
            "search_ns": ns_per_insert(keys, np.full(len(keys.filter), 2**64 - 1, np.uint64)),
            "filter_ns": ns_per_insert(keys, keys.filter)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--entries", default="100000,1000000", help="comma-separated ledger sizes")
    args = h.arguments(p, argv, quick="2,000 and 20,000 of each (sealed segments and a base merge included)")
    if args.quick:
        args.entries = "2000,20000"
    info = h.machine()
    print(h.machine_line(info))
    rows = []
    print(f"{'ledger':36} {'entries':>10} {'memory':>10} {'B/entry':>8} {'header':>11} {'export':>10} "
          f"{'snapshot B/entry':>17}")
    for n in (int(v) for v in args.entries.split(",")):
        for layout, label in LAYOUTS.items():
            r = {"ledger": label, "layout": layout, **measure(n, layout)}
            rows.append(r)
            print(f"{label:36} {n:>10,} {r['memory_bytes'] / 2**20:>8.1f} MiB {r['memory_bytes_per_entry']:>7.1f} "
                  f"{r['header_bytes'] / 2**20:>8.2f} MiB {r['export_s'] * 1e3:>7.1f} ms "
                  f"{r['snapshot_bytes_per_entry']:>17.1f}")
    checks = Checks()
    at = [r for r in rows if r["layout"].startswith("columns") and r["entries"] == min(r["entries"] for r in rows)]
    for r in at:
        where = f"{r['ledger']}, {r['entries']:,} deletions"
        checks.check(LEDGER_BYTES_PER_DELETION, r["memory_bytes_per_entry"], where=f"{where}, memory")
        checks.check(LEDGER_BYTES_PER_DELETION, r["snapshot_bytes_per_entry"], where=f"{where}, snapshot")
    tombstones = []
    print(f"\n{'tombstones':30} {'keys':>10} {'mean add':>10} {'slowest':>10} {'snapshot copies':>16}")
    for n in (int(v) for v in args.entries.split(",")):
        for split, label in ((False, "one sorted array (format 2)"), (True, "base + recent (format 3)")):
            r = {"tombstones": label, **measure_tombstones(n, split)}
            tombstones.append(r)
            print(f"{label:30} {n:>10,} {r['add_s'] * 1e6:>7.1f} us {r['slowest_add_s'] * 1e3:>7.2f} ms "
                  f"{r['snapshot_copy_bytes'] / 2**20:>12.3f} MiB")
    learning = []
    print(f"\n{'learning with tombstones':30} {'keys':>10} {'none':>10} {'search':>10} {'filter':>10} {'filter size':>12}")
    for n in (int(v) for v in args.entries.split(",")):
        r = measure_learning(n)
        learning.append(r)
        print(f"{'ns per insert':30} {r['keys']:>10,} {r['none_ns']:>10.1f} {r['search_ns']:>10.1f} "
              f"{r['filter_ns']:>10.1f} {r['filter_bytes'] / 2**20:>8.2f} MiB")
    return h.finish("deletion_state", {"machine": info, "ledger": rows, "tombstones": tombstones,
                                       "learning": learning}, args.out, checks=checks)


def render(report: dict) -> str:
    """The README tables: the ledger's cost, then the tombstones'."""
    lines = ["| ledger | entries | memory | per entry | snapshot header | export on the loop thread "
             "| snapshot bytes per entry |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in report["ledger"]:
        snap = f"{r['snapshot_bytes_per_entry']:.1f} B" if "snapshot_bytes_per_entry" in r else ""
        lines.append(f"| {r['ledger']} | {r['entries']:,} | {r['memory_bytes'] / 2**20:.1f} MiB "
                     f"| {r['memory_bytes_per_entry']:.0f} B | {r['header_bytes'] / 2**20:.2f} MiB "
                     f"| {r['export_s'] * 1e3:,.1f} ms | {snap} |")
    lines += ["", "| tombstones | keys | mean add | slowest add | a full snapshot copies |", "|---|---:|---:|---:|---:|"]
    for r in report["tombstones"]:
        lines.append(f"| {r['tombstones']} | {r['keys']:,} | {r['add_s'] * 1e6:.1f} us "
                     f"| {r['slowest_add_s'] * 1e3:.2f} ms | {r['snapshot_copy_bytes'] / 2**20:.3f} MiB |")
    if report.get("learning"):
        lines += ["", "| learning an insert with tombstones | no tombstones | binary search only | filter first "
                  "| filter size |", "|---|---:|---:|---:|---:|"]
        for r in report["learning"]:
            lines.append(f"| {r['keys']:,} tombstones | {r['none_ns']:.1f} ns | {r['search_ns']:.1f} ns "
                         f"| {r['filter_ns']:.1f} ns | {r['filter_bytes'] / 2**20:.2f} MiB |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
