"""Restore time of one partition with 1,000,000 applied records, file:// and S3 (not a test).

    .venv/bin/python bench/restore_time.py [--records 1000000] [--repeat 5] [--quick] [--out DIR]

Builds the model the worker would build (``ALGORITHMS[settings.algorithm](**settings.model_kwargs())``:
passive, d = 10 logistic, default settings) and applies ``--records`` inserts with ``learn_many`` in
batches of 4096, with ``--deletions`` (1,000) ``unlearn_one`` calls of earlier records spread over
the stream (so tombstones, the deletion ledger and the accountant are populated like a real
partition's). Then, per backend (file:// in a temp dir; SeaweedFS S3 from
worker.devtools.s3_local, or the server ``OLU_TEST_S3_ENDPOINT`` names), through the worker's own code:

- ``PartitionRunner.snapshot()`` at 90% of the stream and again at its end (``SnapshotStore``
  keeps 2 full snapshots per partition, so two are stored, like a steady worker's);
- ``--deltas`` (5) deletions after the last snapshot, fed to ``PartitionRunner.process`` as delete
  records, so each writes its delta object exactly as the worker does.

Timed: ``PartitionRunner.restore(...)``, the worker's real restore path on assignment: list the
partition's objects, read and check the newest full snapshot, read every delta after it, decode,
``load_model`` (rebuilds the applied-record index, tombstones, accountant, ledger). A new store
client per repetition (clients are created with the worker, not per restore, so that is untimed).
The median of ``--repeat`` (5) is reported per backend, with every sample, plus a breakdown
(``SnapshotStore.restore`` alone vs ``load_model`` alone, medians of separate repetitions).
file:// reads come from the page cache (the objects were just written), as they would on a warm
node; S3 is a local server on loopback, so no network latency is included.

Target (issue): restore of a partition with 1,000,000 applied records <= 2 s.

Writes ``restore_time.json`` and ``.png`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import numpy as np  # noqa: E402
from _targets import RESTORE_1M_S, Checks  # noqa: E402

from worker.olu import ALGORITHMS, load_model  # noqa: E402
from worker.state.store import SnapshotStore, open_store  # noqa: E402
from worker.stream.partition import PartitionRunner  # noqa: E402

TARGET_S = RESTORE_1M_S.threshold
REPORT_KEYS = ("config", "model", "writes", "results", "targets", "wall_s")
SERVICES = ("s3",)
BACKENDS = {"file": "file://", "s3": "S3 (SeaweedFS, loopback)"}
TOPIC = "bench.events"
BATCH = 4096


class DeleteRecord:
    """The parts of a confluent_kafka.Message that PartitionRunner.process reads."""

    def __init__(self, offset: int, record_id: str, ts_ms: int):
        self._offset, self._key, self._ts = offset, record_id.encode(), ts_ms
        self._value = b'{"op":"delete","id":"%s"}' % self._key

    def offset(self):
        return self._offset

    def key(self):
        return self._key

    def value(self):
        return self._value

    def timestamp(self):
        return (1, self._ts)  # TIMESTAMP_CREATE_TIME

    def topic(self):
        return TOPIC

    def partition(self):
        return 0

    def headers(self):
        return None

    def error(self):
        return None


def build(settings, n: int, deletions: int, seed: int) -> dict:
    """Learn n records (ids r-<j>) with deletions spread over the stream; states at 90% and at the end."""
    model = ALGORITHMS[settings.algorithm](**settings.model_kwargs())
    rng = np.random.default_rng(seed)
    d = settings.dim
    deleted: set[int] = set()
    per_batch = deletions / max(1, -(-n // BATCH))
    owed = 0.0
    offset = 0
    early = None
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        stop = min(start + BATCH, n)
        X = rng.normal(size=(stop - start, d))
        X *= (rng.random(stop - start) / np.linalg.norm(X, axis=1))[:, None]
        y = np.where(rng.random(stop - start) < 0.5, 1.0, -1.0)
        model.learn_many([f"r-{j}" for j in range(start, stop)], X, y)
        offset += stop - start
        owed += per_batch
        while owed >= 1.0 and len(deleted) < deletions:
            j = int(rng.integers(stop))
            if j not in deleted:
                deleted.add(j)
                model.unlearn_one(f"r-{j}")
                offset += 1
                owed -= 1.0
        if early is None and stop >= 0.9 * n:
            early = (offset, model.export_state())
    return {"n": n, "model": model, "offset": offset, "early": early, "deleted": deleted,
            "build_s": time.perf_counter() - t0, "final_state": model.export_state()}


def write_partition(snapshots: SnapshotStore, settings, built: dict, deltas: int, seed: int) -> dict:
    """Two full snapshots and ``deltas`` deletion deltas, written by PartitionRunner itself."""
    name = settings.model_name
    e_off, e_state = built["early"]
    early = PartitionRunner(TOPIC, 0, load_model(e_state), snapshots=snapshots, settings=settings,
                            model_name=name, next_offset=e_off)
    ref_early = early.snapshot()
    runner = PartitionRunner(TOPIC, 0, load_model(built["final_state"]), snapshots=snapshots,
                             settings=settings, model_name=name, next_offset=built["offset"])
    ref = runner.snapshot()
    rng = np.random.default_rng(seed + 5)
    live = sorted(set(range(built["n"])) - built["deleted"])
    victims = [live[int(i)] for i in rng.choice(len(live), size=deltas, replace=False)]
    msgs = [DeleteRecord(built["offset"] + k, f"r-{j}", 1_700_000_000_000 + k) for k, j in enumerate(victims)]
    t0 = time.perf_counter()
    out = runner.process(msgs)
    delta_s = time.perf_counter() - t0
    # one delta per deletion; their release is one for the batch (OLU_DELETION_RELEASES=batch)
    if out.resume_at is not None or len(out.deletions) != deltas or not out.releases:
        raise RuntimeError(f"writing deltas failed: {out}")
    return {"full_bytes": ref.size, "full_write_s": ref.duration, "early_full_bytes": ref_early.size,
            "deltas": deltas, "deltas_write_s": delta_s, "objects": len(snapshots.list(TOPIC, 0)),
            "expected": {"offset": built["offset"], "applied": len(built["model"].index), "deltas": deltas}}


def time_restores(url: str, settings, expected: dict, repeat: int) -> dict:
    def snapshots():
        return SnapshotStore(open_store(url), prefix=settings.state_prefix, group=settings.group_id,
                             keep=settings.snapshot_keep)

    def factory():
        return ALGORITHMS[settings.algorithm](**settings.model_kwargs())

    samples = []
    for _ in range(repeat):
        snaps = snapshots()
        t0 = time.perf_counter()
        runner, restored = PartitionRunner.restore(TOPIC, 0, snapshots=snaps, settings=settings,
                                                   model_factory=factory, model_name=settings.model_name,
                                                   on_corrupt=settings.on_corrupt_snapshot)
        samples.append(time.perf_counter() - t0)
        got = {"offset": runner.next_offset, "applied": len(runner.model.index),
               "deltas": len(runner.replay_deltas)}
        want = {k: expected[k] for k in got}
        if got != want:
            raise RuntimeError(f"restore of {url} gave {got}, expected {want}")
    store_s, load_s = [], []
    for _ in range(repeat):
        snaps = snapshots()
        t0 = time.perf_counter()
        restored = snaps.restore(TOPIC, 0, on_corrupt=settings.on_corrupt_snapshot)
        t1 = time.perf_counter()
        load_model({"meta": restored.header["model"], "arrays": restored.arrays, "shared": restored.shared})
        t2 = time.perf_counter()
        store_s.append(t1 - t0)
        load_s.append(t2 - t1)
    return {"median_s": statistics.median(samples), "samples_s": samples, "min_s": min(samples),
            "store_restore_median_s": statistics.median(store_s), "load_model_median_s": statistics.median(load_s)}


def chart(results: dict, path: Path, title: str) -> None:
    plt = h.plt()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    names = list(results)
    store = [results[k]["store_restore_median_s"] for k in names]
    load = [results[k]["load_model_median_s"] for k in names]
    total = [results[k]["median_s"] for k in names]
    x = np.arange(len(names))
    ax.bar(x - 0.2, total, 0.4, label="PartitionRunner.restore (median)", color="tab:blue")
    ax.bar(x + 0.2, store, 0.4, label="SnapshotStore.restore", color="tab:cyan")
    ax.bar(x + 0.2, load, 0.4, bottom=store, label="load_model", color="tab:olive")
    for i, v in enumerate(total):
        ax.text(i - 0.2, v, f"{v:.2f} s", ha="center", va="bottom", fontsize=8)
    ax.axhline(TARGET_S, color="black", ls="--", lw=1, label="target 2 s")
    ax.set_xticks(x, names)
    ax.set_ylabel("seconds")
    ax.set_ylim(0, max(total + [TARGET_S]) * 1.2)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=1_000_000, help="applied records (inserts)")
    p.add_argument("--deletions", type=int, default=1000, help="deletions before the last full snapshot")
    p.add_argument("--deltas", type=int, default=5, help="deletions (delta objects) after it")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--backends", default="file,s3", help="comma-separated: file, s3")
    p.add_argument("--seed", type=int, default=0)
    args = h.arguments(p, argv, quick="50,000 records, 100 deletions, 3 repetitions")
    if args.quick:
        args.records = min(args.records, 50_000)
        args.deletions = min(args.deletions, 100)
        args.repeat = min(args.repeat, 3)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    wall = time.perf_counter()
    info = h.machine()
    print(h.machine_line(info))
    from worker.olu import warm_up

    warm_up()

    base = h.worker_settings("127.0.0.1:9", topic=TOPIC, params="bench.params", dlq="bench.dlq",
                             group="bench-restore", state_url="memory://", log_level="WARNING")
    built = build(base, args.records, args.deletions, args.seed)
    print(f"built: {args.records:,} inserts + {len(built['deleted']):,} deletions ({len(built['model'].index):,} "
          f"records applied, t = {built['model'].t:,}) in {built['build_s']:.1f} s")

    results, writes = {}, {}
    for backend in backends:
        if backend == "file":
            tmp = tempfile.mkdtemp(prefix="olu-bench-restore-")
            ctx, url = None, f"file://{tmp}"
        elif backend == "s3":
            ctx = h.s3()
            server = ctx.__enter__()
            url, tmp = f"s3://{server.bucket}/{h.unique('bench')}", None
        else:
            raise SystemExit(f"unknown backend {backend!r}")
        try:
            settings = h.worker_settings("127.0.0.1:9", topic=TOPIC, params="bench.params", dlq="bench.dlq",
                                         group="bench-restore", state_url=url, log_level="WARNING")
            snaps = SnapshotStore(open_store(url), prefix=settings.state_prefix, group=settings.group_id,
                                  keep=settings.snapshot_keep)
            writes[backend] = w = write_partition(snaps, settings, built, args.deltas, args.seed)
            print(f"{backend}: wrote 2 full snapshots ({w['full_bytes'] / 1e6:.1f} MB the newest, "
                  f"{w['full_write_s']:.2f} s) and {w['deltas']} deltas ({w['deltas_write_s']:.2f} s); "
                  f"{w['objects']} objects")
            results[backend] = r = time_restores(url, settings, w["expected"], args.repeat)
            print(f"{backend}: restore median {r['median_s']:.3f} s (samples "
                  f"{', '.join(f'{s:.3f}' for s in r['samples_s'])}); store.restore "
                  f"{r['store_restore_median_s']:.3f} s + load_model {r['load_model_median_s']:.3f} s")
        finally:
            if ctx is not None:
                ctx.__exit__(None, None, None)
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{'backend':8} {'records':>10} {'snapshot MB':>12} {'median s':>9} {'min s':>7} "
          f"{'store s':>8} {'load s':>7}")
    targets = {}
    for backend, r in results.items():
        ok = r["median_s"] <= TARGET_S
        targets[backend] = {"median_s": r["median_s"], "<=2s": ok}
        print(f"{backend:8} {len(built['model'].index):>10,} {writes[backend]['full_bytes'] / 1e6:>12.1f} "
              f"{r['median_s']:>9.3f} {r['min_s']:>7.3f} {r['store_restore_median_s']:>8.3f} "
              f"{r['load_model_median_s']:>7.3f}")
    all_ok = all(t["<=2s"] for t in targets.values()) and bool(targets)
    print("\ntarget 3 (median restore per backend):")
    checks = Checks()
    for backend, r in results.items():
        checks.check(RESTORE_1M_S, r["median_s"], where=f"{backend}, {len(built['model'].index):,} applied records")

    report = {
        "machine": info,
        "config": {"records": args.records, "deletions": len(built["deleted"]), "deltas": args.deltas,
                   "repeat": args.repeat, "dim": base.dim, "algorithm": base.algorithm, "batch": BATCH,
                   "backends": backends, "s3": "SeaweedFS on loopback (worker.devtools.s3_local)",
                   "quick": args.quick, "seed": args.seed},
        "model": {"applied": len(built["model"].index), "t": built["model"].t,
                  "tombstones": len(built["model"].tombstones), "ledger": len(built["model"].ledger),
                  "build_s": built["build_s"]},
        "writes": writes,
        "results": results,
        "targets": {**targets, "met": all_ok},
        "wall_s": time.perf_counter() - wall,
    }
    return h.finish("restore_time", report, args.out, checks=checks, plot=lambda path: chart(
        results, path, f"Partition restore, {len(built['model'].index):,} applied records (median of {args.repeat})"))


def render(report: dict) -> str:
    """The README table: median restore per backend, its parts, the target."""
    applied = report["model"]["applied"]
    newest = max(w["full_bytes"] for w in report["writes"].values())
    lines = [f"{applied:,} applied records, newest full snapshot {newest / 1e6:.1f} MB, median of "
             f"{report['config']['repeat']}:", "",
             "| backend | median | min | `SnapshotStore.restore` | `load_model` | target (<= 2 s) |",
             "|---|---:|---:|---:|---:|---|"]
    for backend, r in report["results"].items():
        lines.append(f"| {BACKENDS.get(backend, backend)} | {r['median_s']:.3f} s | {r['min_s']:.3f} s "
                     f"| {r['store_restore_median_s']:.3f} s | {r['load_model_median_s']:.3f} s "
                     f"| {'MET' if RESTORE_1M_S.met(r['median_s']) else 'NOT MET'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
