"""Engine throughput: in-memory passive OLU learning vs River, one core (not a test).

    .venv/bin/python bench/engine_throughput.py [--n 2000000] [--batch 4096] [--repeat 3] [--quick] [--out DIR]

Synthetic logistic stream, d = 10, ||x|| <= 1, labels from a noisy linear rule, ids "r-<n>".
Every path sees the same events in the same order; each timing is the best of ``--repeat`` runs.

Paths (events/s = learned events / seconds spent in the learn calls):

- ``learn_many``           ours, public API end to end: ``learn_many(ids, X, y)`` per micro-batch,
                           including id hashing and validation (``kernels.ingest.ingest``: the ids
                           joined, hashed four at a time, rows and labels checked, in one call).
- ``learn_many+deletes``   the same with 1% ``unlearn_one`` calls interleaved (after each batch: 90%
                           already-applied ids, 10% ids not seen yet, whose inserts are then skipped).
                           Learn throughput and stream throughput (events + deletes over all the
                           time, deletes included) are both reported.
- ``vectorised``           the fastest honest batch path available today: ``record_keys``
                           (bit-identical vectorised record_key) + ``features.check_many`` +
                           ``ogd.check_labels`` + ``_learn_batch`` (what a public
                           ``learn_keys``/faster ``learn_many`` would do); hashing and validation
                           included.
- ``kernel``               ``_learn_batch(keys, X, y)``: ids hashed beforehand (not timed), rows
                           already validated: the compiled kernel plus index merges.
- ``kernel+deletes``       the same with the interleaved deletions.
- ``numpy reference``      ``learn_many`` with ``use_kernel = False`` on the first ``--ref-n`` events.
- ``river``                ``river.linear_model.LogisticRegression().learn_one`` on the first
                           ``--river-n`` events as dicts (dict building not timed).

Targets (issue): >= 1,000,000 events/s and >= 3x River, one core; ``learn_many`` >= 6,000,000
events/s (issue 23). Each path also reports events per CPU-second of the process over the same
calls (``events_per_cpu_s``), which moves much less than wall-clock rates on a shared machine. Also reported: bytes per applied
record of the applied-record index at 1,000,000 records, and kernel compile time (cold: empty
numba cache; warm: loaded from the cache), measured in fresh processes.

Writes ``engine_throughput.json`` and ``engine_throughput.png`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core: no BLAS threads

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
from _harness import ROOT  # noqa: E402
from _targets import (  # noqa: E402
    ENGINE_EVENTS_PER_S,
    ENGINE_X_RIVER,
    INDEX_BYTES_PER_RECORD,
    LEARN_MANY_EVENTS_PER_S,
    ROTATION_X_ONE_MODEL,
    Checks,
)

from worker.olu import (
    record_key,  # noqa: E402
    record_keys,  # noqa: E402
)
from worker.olu.algorithms.passive import PassiveOLU  # noqa: E402
from worker.olu.core.kernels import ogd, warmup  # noqa: E402
from worker.olu.rotation import Rotation  # noqa: E402

ROTATION_LIFETIME = 400_000  # events; promotions every 200,000 (the quick run's 100,000 events: one birth)

TARGET_EVENTS_PER_S = ENGINE_EVENTS_PER_S.threshold
TARGET_RIVER_RATIO = ENGINE_X_RIVER.threshold
REPORT_KEYS = ("config", "hashing_ns_per_id", "compile", "results", "kernel_vs_reference_rel_diff", "index",
               "targets", "wall_s")
SERVICES = ()
ROWS = (("ours `learn_many` (hashing + validation)", "learn_many"),
        ("ours `learn_many` + 1% deletes (learn time / stream ops)", "learn_many+deletes"),
        ("ours vectorised hashing + validation", "vectorised"),
        ("ours kernel only (index merges included)", "kernel"),
        ("ours kernel only + 1% deletes (learn time / stream ops)", "kernel+deletes"),
        ("numpy reference", "numpy reference"),
        ("River `learn_one`", "river"))


def make_stream(n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X *= (rng.random(n) / np.linalg.norm(X, axis=1))[:, None]  # norms uniform in [0, 1)
    w = rng.normal(size=d) * 4.0
    y = np.where(X @ w + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    ids = [f"r-{i}" for i in range(n)]
    return ids, X, y


def deletion_plan(n: int, batch: int, frac: float, seed: int) -> list[list[str]]:
    """Ids to delete after each batch: ~frac of the batch, 90% applied ids and 10% future ids."""
    rng = np.random.default_rng(seed + 1)
    plan = []
    per_batch = max(1, round(batch * frac))
    for end in range(batch, n + batch, batch):
        end = min(end, n)
        k_future = max(1, per_batch // 10) if end < n else 0
        past = rng.integers(0, end, per_batch - k_future)
        future = rng.integers(end, min(n, end + 4 * batch), k_future) if k_future else []
        plan.append([f"r-{int(i)}" for i in (*past, *future)])
    return plan


def new_model(d: int, reference: bool = False, rotation: str | None = None, lifetime: int = ROTATION_LIFETIME):
    kw = dict(dim=d, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)
    if rotation is not None:  # two models per stream (docs/accounting.md 12)
        return Rotation(PassiveOLU, lifetime_events=lifetime, variant=rotation, **kw)
    m = PassiveOLU(**kw)
    if reference:
        m.use_kernel = False
    return m


def timed_merges(m: PassiveOLU) -> list[float]:
    """Accumulate the time spent in the applied index's merges ([seconds, merges started]): the
    calls of ``merge`` (however the index calls it: ``paced=True`` when the tail fills while
    learning) and the slices of paced merges done by ``advance_merge``."""
    acc = [0.0, 0]
    merge, advance = m.index.merge, m.index.advance_merge

    def timed_merge(*args, **kwargs):
        t0 = time.perf_counter()
        merge(*args, **kwargs)
        acc[0] += time.perf_counter() - t0
        acc[1] += 1

    def timed_advance():
        t0 = time.perf_counter()
        advance()
        acc[0] += time.perf_counter() - t0

    m.index.merge, m.index.advance_merge = timed_merge, timed_advance
    return acc


def run(path: str, ids, X, y, keys, batch: int, n: int, plan=None, d: int = 10, rotation: str | None = None,
        lifetime: int = ROTATION_LIFETIME) -> dict:
    m = new_model(d, reference=path == "reference", rotation=rotation, lifetime=lifetime)
    merges = timed_merges(m)
    learn_s = delete_s = cpu_s = 0.0
    deletes = 0
    outcomes: dict[str, int] = {}
    for b, start in enumerate(range(0, n, batch)):
        stop = min(start + batch, n)
        t0, c0 = time.perf_counter(), time.process_time()
        if path in ("learn_many", "reference"):
            m.learn_many(ids[start:stop], X[start:stop], y[start:stop])
        elif path == "vectorised":
            kb = record_keys(ids[start:stop])
            Xv = m.features.check_many(X[start:stop])
            yv = ogd.check_labels(m.loss, y[start:stop])
            m._learn_batch(kb, Xv, yv)
        elif path == "kernel":
            m._learn_batch(keys[start:stop], X[start:stop], y[start:stop])
        else:
            raise ValueError(path)
        t1 = time.perf_counter()
        cpu_s += time.process_time() - c0
        learn_s += t1 - t0
        if plan is not None:
            for rid in plan[b]:
                outcome = m.unlearn_one(rid).outcome
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
            delete_s += time.perf_counter() - t1
            deletes += len(plan[b])
    return {
        "events": n, "learn_s": learn_s, "events_per_s": n / learn_s, "events_per_cpu_s": n / max(cpu_s, 1e-12),
        "events_per_s_excl_merges": n / max(learn_s - merges[0], 1e-12),
        "deletes": deletes, "delete_s": delete_s,
        "delete_us_mean": 1e6 * delete_s / deletes if deletes else None,
        "stream_ops_per_s": (n + deletes) / (learn_s + delete_s) if deletes else None,
        "merge_s": merges[0], "merges": merges[1],
        "applied": m.active.counters["applied"] if rotation else m.counters["applied"],
        "skipped_deleted": m.active.counters["skipped_deleted"] if rotation else m.counters["skipped_deleted"],
        "delete_outcomes": outcomes, "_model": m,
    }


def best_of(repeat: int, fn) -> dict:
    best = None
    for _ in range(repeat):
        r = fn()
        if best is None or r["learn_s"] < best["learn_s"]:
            best = r
    return best


def run_river(X, y, n: int, repeat: int) -> dict:
    from river import linear_model

    names = [f"x{i}" for i in range(X.shape[1])]
    rows = [dict(zip(names, row)) for row in X[:n].tolist()]
    labels = (y[:n] > 0).tolist()
    best = None
    for _ in range(repeat):
        model = linear_model.LogisticRegression()
        t0 = time.perf_counter()
        for xi, yi in zip(rows, labels):
            model.learn_one(xi, yi)
        s = time.perf_counter() - t0
        best = s if best is None else min(best, s)
    return {"events": n, "learn_s": best, "events_per_s": n / best}


def compile_times() -> dict:
    """Import + warm_up in fresh processes with an empty, then a populated numba cache."""
    code = ("import time; t = time.perf_counter(); from worker.compiled import jit; from worker.olu.core.kernels import ingest, ogd, warmup; "
            "i = time.perf_counter() - t; c = warmup.warm_up(); print(i, c, jit.CACHE_ENABLED)")
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for label in ("cold", "warm"):
            res = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                                 text=True, check=True)
            imp, comp, cached = res.stdout.split()
            out[label] = {"import_s": float(imp), "warm_up_s": float(comp), "cache_enabled": cached == "True"}
    return out


def index_bytes(n: int, d: int, batch: int, seed: int) -> dict:
    m = new_model(d)
    keys = np.random.default_rng(seed + 2).integers(1, 2**63, n, dtype=np.uint64)
    _, X, y = make_stream(batch, d, seed + 3)
    for start in range(0, n, batch):
        k = keys[start:start + batch]
        m._learn_batch(k, X[:len(k)], y[:len(k)])
    before = m.index.nbytes / len(m.index)
    m.index.merge()
    return {"records": len(m.index), "bytes_per_record": before,
            "bytes_per_record_after_merge": m.index.nbytes / len(m.index)}


def chart(results: list, river_eps: float, path: Path) -> None:
    plt = h.plt()
    labels, values, colors = [], [], []
    for label, value, color in results:
        labels.append(label)
        values.append(value)
        colors.append(color)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    ax.barh(labels[::-1], values[::-1], color=colors[::-1])
    ax.set_xscale("log")
    ax.axvline(TARGET_EVENTS_PER_S, color="black", ls="--", lw=1, label="target 1e6 events/s")
    ax.axvline(TARGET_RIVER_RATIO * river_eps, color="tab:red", ls=":", lw=1, label="3x River")
    for i, v in enumerate(values[::-1]):
        ax.text(v, i, f" {v:,.0f}", va="center", fontsize=8)
    ax.set_xlabel("events/s (log scale, one core)")
    ax.set_title("Passive OLU learning throughput, logistic d=10")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=2_000_000)
    p.add_argument("--d", type=int, default=10)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--delete-frac", type=float, default=0.01)
    p.add_argument("--ref-n", type=int, default=100_000)
    p.add_argument("--river-n", type=int, default=200_000)
    p.add_argument("--index-n", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = h.arguments(p, argv, quick="100,000 events (the index tail fills: merges run), 200,000 index records, "
                                      "one repetition")
    if args.quick:
        args.n, args.ref_n, args.river_n = min(args.n, 100_000), min(args.ref_n, 5_000), min(args.river_n, 5_000)
        args.index_n, args.repeat = min(args.index_n, 200_000), 1
    wall = time.perf_counter()
    n, d, batch = args.n, args.d, args.batch

    info = h.machine()
    print(h.machine_line(info) + f", numba {info['numba']}")
    comp = compile_times()
    print(f"kernel compile (fresh process, empty numba cache): import {comp['cold']['import_s']:.2f} s + "
          f"warm_up {comp['cold']['warm_up_s']:.2f} s; from the cache: {comp['warm']['warm_up_s']:.3f} s")
    warmup.warm_up()

    t0 = time.perf_counter()
    ids, X, y = make_stream(n, d, args.seed)
    plan = deletion_plan(n, batch, args.delete_frac, args.seed)
    print(f"stream: {n:,} events, d={d}, batch={batch}, {sum(map(len, plan)):,} deletions planned "
          f"({time.perf_counter() - t0:.1f} s to generate)")

    t0 = time.perf_counter()
    keys = np.fromiter(map(record_key, ids), np.uint64, n)
    hash_loop_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    keys_vec = record_keys(ids)
    hash_vec_s = time.perf_counter() - t0
    assert np.array_equal(keys, keys_vec), "vectorised record keys differ from record_key"
    print(f"id hashing: record_key loop {1e9 * hash_loop_s / n:.0f} ns/id, "
          f"record_keys {1e9 * hash_vec_s / n:.0f} ns/id (bit-identical)")

    R = args.repeat
    res = {
        "learn_many": best_of(R, lambda: run("learn_many", ids, X, y, keys, batch, n, d=d)),
        "learn_many+deletes": best_of(R, lambda: run("learn_many", ids, X, y, keys, batch, n, plan, d=d)),
        "vectorised": best_of(R, lambda: run("vectorised", ids, X, y, keys, batch, n, d=d)),
        "kernel": best_of(R, lambda: run("kernel", ids, X, y, keys, batch, n, d=d)),
        "kernel+deletes": best_of(R, lambda: run("kernel", ids, X, y, keys, batch, n, plan, d=d)),
    }
    lifetime = min(ROTATION_LIFETIME, max(2, n // 2))  # at least one promotion in every run
    for variant in ("overlap", "disjoint"):
        res[f"rotation {variant}"] = best_of(R, lambda v=variant: run("learn_many", ids, X, y, keys, batch, n, d=d,
                                                                      rotation=v, lifetime=lifetime))
    ref_n = min(args.ref_n, n)
    res["numpy reference"] = best_of(R, lambda: run("reference", ids, X, y, keys, batch, ref_n, d=d))
    same = run("learn_many", ids, X, y, keys, batch, ref_n, d=d)["_model"]
    ref_z = res["numpy reference"]["_model"].z
    agreement = float(np.linalg.norm(same.z - ref_z) / np.linalg.norm(ref_z))
    river_n = min(args.river_n, n)
    river = run_river(X, y, river_n, R)
    res["river"] = river
    idx = index_bytes(args.index_n, d, 65536, args.seed)
    full = res["kernel+deletes"]["_model"]
    full_idx = {"records": len(full.index), "bytes_per_record": full.index.nbytes / len(full.index)}

    # ------------------------------------------------------------------ report
    rows = [
        ("ours learn_many (hashing+validation)", "learn_many"),
        ("ours learn_many + 1% deletes", "learn_many+deletes"),
        ("ours vectorised hashing+validation", "vectorised"),
        ("ours kernel only (pre-hashed)", "kernel"),
        ("ours kernel only + 1% deletes", "kernel+deletes"),
        ("numpy reference learn_many", "numpy reference"),
        ("rotation overlap learn_many", "rotation overlap"),
        ("rotation disjoint learn_many", "rotation disjoint"),
        ("River LogisticRegression.learn_one", "river"),
    ]
    print()
    print(f"{'path':40} {'events':>10} {'learn s':>8} {'events/s':>12} {'per CPU-s':>12} {'x River':>8} "
          f"{'merge s':>8} {'del us':>7} {'stream ops/s':>13}")
    for label, key in rows:
        r = res[key]
        ratio = r["events_per_s"] / river["events_per_s"]
        merge = f"{r['merge_s']:.3f}" if "merge_s" in r else "-"
        dl = f"{r['delete_us_mean']:.0f}" if r.get("delete_us_mean") else "-"
        st = f"{r['stream_ops_per_s']:,.0f}" if r.get("stream_ops_per_s") else "-"
        cpu = f"{r['events_per_cpu_s']:,.0f}" if "events_per_cpu_s" in r else "-"
        print(f"{label:40} {r['events']:>10,} {r['learn_s']:>8.3f} {r['events_per_s']:>12,.0f} {cpu:>12} "
              f"{ratio:>8.1f} {merge:>8} {dl:>7} {st:>13}")
    kr = res["kernel"]
    print(f"\nkernel path without the index merges: {kr['events_per_s_excl_merges']:,.0f} events/s "
          f"({kr['merges']} merges took {kr['merge_s']:.3f} of {kr['learn_s']:.3f} s)")
    print(f"kernel vs numpy reference on the first {ref_n:,} events: relative weight difference {agreement:.2e}")
    print(f"applied index: {idx['bytes_per_record']:.2f} bytes/record at {idx['records']:,} records "
          f"({idx['bytes_per_record_after_merge']:.2f} after merge); "
          f"{full_idx['bytes_per_record']:.2f} at {full_idx['records']:,} (end of the run with deletes)")
    d_out = res["kernel+deletes"]["delete_outcomes"]
    print(f"deletions per run: {res['kernel+deletes']['deletes']:,} ({d_out}); inserts skipped as "
          f"already deleted: {res['kernel+deletes']['skipped_deleted']:,}")

    targets = {}
    checks = Checks()
    print("\ntargets (one core, d=10 logistic):")
    for label, key in rows[:5]:
        eps = res[key]["events_per_s"]
        ratio = eps / river["events_per_s"]
        ok_abs = checks.check(ENGINE_EVENTS_PER_S, eps, where=label)
        ok_rel = checks.check(ENGINE_X_RIVER, ratio, where=label)
        targets[key] = {"events_per_s": eps, "x_river": ratio, ">=1e6": ok_abs, ">=3x_river": ok_rel}
        if key.endswith("+deletes"):
            s = res[key]["stream_ops_per_s"]
            targets[key]["stream_ops_per_s"] = s
            checks.check(ENGINE_EVENTS_PER_S, s, where=f"{label}, stream ops/s incl. delete time")
    lm = res["learn_many"]
    checks.check(LEARN_MANY_EVENTS_PER_S, lm["events_per_s"], where="learn_many, wall clock",
                 note=f"{lm['events_per_cpu_s']:,.0f} per CPU-second, load average {os.getloadavg()[0]:.1f}")
    checks.check(INDEX_BYTES_PER_RECORD, max(idx["bytes_per_record"], idx["bytes_per_record_after_merge"]),
                 where=f"{idx['records']:,} records, before and after merge")
    for variant in ("overlap", "disjoint"):
        r = res[f"rotation {variant}"]
        ratio = r["events_per_s"] / res["learn_many"]["events_per_s"]
        targets[f"rotation {variant}"] = {"events_per_s": r["events_per_s"], "x_one_model": ratio}
        checks.check(ROTATION_X_ONE_MODEL, ratio, where=f"{variant}, lifetime {lifetime:,} events: "
                     f"{r['events_per_s']:,.0f} events/s")

    bars = [
        ("ours learn_many", res["learn_many"]["events_per_s"], "tab:blue"),
        ("ours learn_many\n+1% deletes (stream)", res["learn_many+deletes"]["stream_ops_per_s"], "tab:cyan"),
        ("ours vectorised\nhash+validation", res["vectorised"]["events_per_s"], "tab:purple"),
        ("ours kernel only", res["kernel"]["events_per_s"], "tab:green"),
        ("numpy reference", res["numpy reference"]["events_per_s"], "tab:gray"),
        ("River learn_one", river["events_per_s"], "tab:orange"),
    ]
    clean = {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")} for k, v in res.items()}
    report = {
        "machine": info,
        "config": {"n": n, "d": d, "batch": batch, "delete_frac": args.delete_frac, "ref_n": ref_n,
                   "river_n": river_n, "repeat": R, "seed": args.seed, "loss": "logistic", "l2": 0.01,
                   "radius": 10.0, "schedule": "strongly-convex (auto t0)"},
        "hashing_ns_per_id": {"record_key_loop": 1e9 * hash_loop_s / n, "record_keys_vectorised": 1e9 * hash_vec_s / n},
        "compile": comp,
        "results": clean,
        "kernel_vs_reference_rel_diff": agreement,
        "index": {"at_index_n": idx, "end_of_run": full_idx},
        "targets": targets,
        "wall_s": time.perf_counter() - wall,
    }
    return h.finish("engine_throughput", report, args.out, checks=checks,
                    plot=lambda path: chart(bars, river["events_per_s"], path))


def render(report: dict) -> str:
    """The README table: events/s of every path, x River, and the targets."""
    res = report["results"]
    river = res["river"]["events_per_s"]

    def rate(v):
        return f"{v / 1e6:.2f} M"

    lines = ["| path | events/s | per CPU-second | x River | target |", "|---|---:|---:|---:|---|"]
    for label, key in ROWS:
        r = res[key]
        value = rate(r["events_per_s"])
        if r.get("stream_ops_per_s"):
            value += f" / {rate(r['stream_ops_per_s'])}"
        target = ""
        if key not in ("numpy reference", "river"):
            fast = ENGINE_EVENTS_PER_S.met(min(r["events_per_s"], r.get("stream_ops_per_s") or r["events_per_s"]))
            target = (f">= 1 M {'MET' if fast else 'NOT MET'}, >= 3x River "
                      f"{'MET' if ENGINE_X_RIVER.met(r['events_per_s'] / river) else 'NOT MET'}")
        if key == "learn_many" and "events_per_cpu_s" in r:
            target += f", >= 6 M {'MET' if LEARN_MANY_EVENTS_PER_S.met(r['events_per_s']) else 'NOT MET'}"
        cpu = rate(r["events_per_cpu_s"]) if "events_per_cpu_s" in r else ""
        lines.append(f"| {label} | {value} | {cpu} | {r['events_per_s'] / river:.1f} | {target} |")
    one = res["learn_many"]["events_per_s"]
    for variant in ("overlap", "disjoint"):  # absent from reports written before the rotation existed
        r = res.get(f"rotation {variant}")
        if r is not None:
            ratio = r["events_per_s"] / one
            cpu = rate(r["events_per_cpu_s"]) if "events_per_cpu_s" in r else ""
            lines.append(f"| rotation {variant} `learn_many` (two models) | {rate(r['events_per_s'])} | {cpu} | "
                         f"{r['events_per_s'] / river:.1f} | {ratio:.2f}x one model, >= 0.45x "
                         f"{'MET' if ROTATION_X_ONE_MODEL.met(ratio) else 'NOT MET'} |")
    idx = report["index"]["at_index_n"]
    worst = max(idx["bytes_per_record"], idx["bytes_per_record_after_merge"])
    lines += ["", f"Applied index: {idx['bytes_per_record']:.1f} bytes per record at {idx['records']:,} records "
                  f"({idx['bytes_per_record_after_merge']:.1f} right after a merge): <= 16 "
                  f"{'MET' if INDEX_BYTES_PER_RECORD.met(worst) else 'NOT MET'}. Kernel compile in a fresh "
                  f"process: {report['compile']['cold']['import_s'] + report['compile']['cold']['warm_up_s']:.1f} s "
                  f"cold, {report['compile']['warm']['warm_up_s']:.2f} s from the cache."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
