"""Cost of one deletion vs exact retraining, as the retained set grows from 1e3 to 1e6 (not a test).

    .venv/bin/python bench/deletion_cost.py [--sizes 1000,10000,100000,1000000] [--d 50]
        [--repeat 5] [--repeat-large 2] [--quick] [--out DIR]

For each number of retained examples n and each algorithm, a model learns n examples (d = ``--d``,
||x|| <= 1, labels from a noisy linear rule: ``active_deletion.stream``), then ``--repeat`` times
learns one new example and deletes it, timing only ``unlearn_one`` (``active_deletion.run_case``:
the new example arrived after the previous deletion, so the active algorithms take their
arrival-order path, not a fallback, and the retained set stays at n). Algorithms (radius 10, eps 1,
l2 = 0.01, k = ``--max-deletions``):

- ``passive``         PassiveOLU, logistic: calibrated noise once, O(d);
- ``active-d2d``      ActiveD2D, logistic: (I1 + I2) full gradient passes over the retained set;
- ``active-anchor``   ActiveAnchor, logistic, ``order_fallback="passive"`` (anchors only kept):
                      I single-example steps on one anchor, O(d log tau);
- ``active-newton``   RidgeNewton, ridge: exact ERM re-solve from exact d x d statistics;
- ``retrain``         Retrain, logistic: exact retraining from scratch, i.e. projected OGD from
                      z = 0 replayed over the retained examples at their own steps (``replay_ogd``,
                      the compiled kernel): the baseline of the speed-ups;
- ``retrain-ridge``   the same with the ridge loss: the baseline of ``active-newton``.

Speed-up = median retrain time / median deletion time, at the same n and loss. ActiveD2D and
retraining cost O(n) per deletion: at n >= ``--large-n`` (1e6) they are timed ``--repeat-large``
times only. The PNG is log-log: median deletion time vs n (bars from the fastest to the slowest
repetition), and the speed-ups.

Target (engine issue): one active deletion <= 250 ms with 100,000 retained examples at d = 50
(checked for the active algorithms on their slowest repetition when n = 1e5 and d = 50 are
measured; ``active_deletion.py`` times more variants at that one point).

Writes ``deletion_cost.json`` and ``.png`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core: the same for every algorithm

import argparse  # noqa: E402
import gc  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import _targets as T  # noqa: E402
import numpy as np  # noqa: E402
from active_deletion import run_case, stream  # noqa: E402

from worker.olu import (  # noqa: E402
    ActiveAnchor,
    ActiveD2D,
    PassiveOLU,
    Retrain,
    RidgeNewton,
    warm_up,  # noqa: E402
)

# name: (class, keyword arguments without max_deletions, active?, O(n) per deletion?, baseline)
ALGORITHMS = {
    "passive": (PassiveOLU, {"loss": "logistic"}, False, False, "retrain"),
    "active-d2d": (ActiveD2D, {"loss": "logistic"}, True, True, "retrain"),
    "active-anchor": (ActiveAnchor, {"loss": "logistic", "order_fallback": "passive"}, True, False, "retrain"),
    "active-newton": (RidgeNewton, {"loss": "ridge"}, True, False, "retrain-ridge"),
    "retrain": (Retrain, {"loss": "logistic"}, False, True, None),
    "retrain-ridge": (Retrain, {"loss": "ridge"}, False, True, None),
}
REPORT_KEYS = ("config", "results", "loglog_slopes", "targets", "wall_s")
SERVICES = ()
STYLE = {"passive": ("tab:blue", "o"), "active-d2d": ("tab:red", "s"), "active-anchor": ("tab:purple", "^"),
         "active-newton": ("tab:green", "D"), "retrain": ("black", "x"), "retrain-ridge": ("tab:gray", "+")}


def kwargs_for(name: str, max_deletions: int) -> dict:
    cls, kw, _, _, _ = ALGORITHMS[name]
    out = {"l2": 0.01, **kw}
    if issubclass(cls, (ActiveD2D, ActiveAnchor)):
        out["max_deletions"] = max_deletions
    return out


def measure(names, sizes, d: int, repeat: int, repeat_large: int, large_n: int, k: int) -> list[dict]:
    rows = []
    for n in sizes:
        reps = {name: repeat_large if ALGORITHMS[name][3] and n >= large_n else repeat for name in names}
        data = {}  # one stream per loss and n, shared by the algorithms
        for loss in sorted({ALGORITHMS[name][1]["loss"] for name in names}):
            data[loss] = stream(n + max(reps.values()), d, loss)
        for name in names:
            cls, _, active, _, _ = ALGORITHMS[name]
            kw = kwargs_for(name, k)
            t0 = time.perf_counter()
            r = run_case(name, cls, kw, n, d, reps[name], active, data=data[kw["loss"]])
            r.update(algorithm=name, loss=kw["loss"], d=d, repeats=reps[name], case_s=time.perf_counter() - t0,
                     min_ms=min(r["times_ms"]))
            rows.append(r)
            print(f"  n={n:>9,} {name:14} median {r['median_ms']:10.3f} ms  max {r['max_ms']:10.3f} ms  "
                  f"({reps[name]} deletions; learn {r['learn_s']:.1f} s; {r['steps']}; {r['outcome']})", flush=True)
            gc.collect()
        del data
        gc.collect()
    for r in rows:  # speed-up over exact retraining at the same n and loss
        base = ALGORITHMS[r["algorithm"]][4]
        ref = next((x for x in rows if x["algorithm"] == base and x["retained"] == r["retained"]), None)
        r["baseline"] = base
        r["speedup_vs_retrain"] = ref["median_ms"] / r["median_ms"] if ref and r["median_ms"] > 0 else None
    return rows


def speedup(v: float) -> str:
    return f"{v:.3f}x" if v < 0.1 else f"{v:.2f}x" if v < 10 else f"{v:,.0f}x"


def print_table(rows: list[dict], names, sizes) -> None:
    print(f"\nmedian ms per deletion (speed-up vs exact retraining of the same loss), d = {rows[0]['d']}")
    print(f"{'algorithm':15}" + "".join(f" {f'n = {n:,}':>24}" for n in sizes))
    for name in names:
        cells = []
        for n in sizes:
            r = next((x for x in rows if x["algorithm"] == name and x["retained"] == n), None)
            if r is None:
                cells.append(f"{'-':>24}")
                continue
            sp = f" ({speedup(r['speedup_vs_retrain'])})" if r["speedup_vs_retrain"] and r["baseline"] else ""
            ms = f"{r['median_ms']:.3f}" if r["median_ms"] < 10 else f"{r['median_ms']:,.1f}"
            cells.append(f" {ms + sp:>24}")
        print(f"{name:15}" + "".join(cells))


def fit_slopes(rows: list[dict], names) -> dict:
    """Log-log slope of the median deletion time vs n (1: linear in n, 0: independent of n)."""
    out = {}
    for name in names:
        pts = sorted((r["retained"], r["median_ms"]) for r in rows if r["algorithm"] == name)
        if len(pts) >= 2:
            a = np.log([p[0] for p in pts])
            b = np.log([max(p[1], 1e-6) for p in pts])
            out[name] = float(np.polyfit(a, b, 1)[0])
    return out


def check_targets(rows: list[dict], d: int) -> T.Checks:
    checks = T.Checks()
    n0 = T.ACTIVE_DELETION_RETAINED
    print(f"\ntarget: {T.ACTIVE_DELETION_MS.text} (slowest of the timed deletions):")
    if d != T.ACTIVE_DELETION_DIM or not any(r["retained"] == n0 for r in rows):
        print(f"  not checked: needs d = {T.ACTIVE_DELETION_DIM} and n = {n0:,} among the sizes")
        return checks
    for r in rows:
        if r["retained"] == n0 and ALGORITHMS[r["algorithm"]][2]:
            checks.check(T.ACTIVE_DELETION_MS, r["max_ms"], where=f"{r['algorithm']}, {r['loss']}",
                         note=f"median {r['median_ms']:.1f} ms")
    return checks


def chart(rows: list[dict], names, path: Path, title: str) -> None:
    plt = h.plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    for name in names:
        pts = sorted((r["retained"], r["median_ms"], r["min_ms"], r["max_ms"]) for r in rows if r["algorithm"] == name)
        if not pts:
            continue
        n, med, lo, hi = (np.array(v) for v in zip(*pts))
        color, marker = STYLE[name]
        ax1.errorbar(n, med, yerr=[med - lo, hi - med], color=color, marker=marker, capsize=3, label=name,
                     ls="--" if name.startswith("retrain") else "-")
        sp = [(r["retained"], r["speedup_vs_retrain"]) for r in rows
              if r["algorithm"] == name and r["speedup_vs_retrain"] and r["baseline"]]
        if sp:
            xs, ys = zip(*sorted(sp))
            ax2.plot(xs, ys, color=color, marker=marker, label=f"{name} vs {ALGORITHMS[name][4]}")
    ax1.plot([T.ACTIVE_DELETION_RETAINED], [T.ACTIVE_DELETION_MS.threshold], "k*", ms=12,
             label="target: 250 ms at n = 1e5 (d = 50)")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("retained examples n (log)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    ax1.set_ylabel("ms per deletion (log; median, bars: min to max)")
    ax2.axhline(1.0, color="black", lw=0.8)
    ax2.set_ylabel("speed-up over exact retraining (log)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1000,10000,100000,1000000", help="retained examples n, comma-separated")
    p.add_argument("--d", type=int, default=T.ACTIVE_DELETION_DIM, help="dimension (default 50, the target's)")
    p.add_argument("--algorithms", default=",".join(ALGORITHMS), help="comma-separated subset")
    p.add_argument("--repeat", type=int, default=5, help="timed deletions per model")
    p.add_argument("--repeat-large", type=int, default=2,
                   help="timed deletions for the O(n) ones (active-d2d, retrain) at n >= --large-n")
    p.add_argument("--large-n", type=int, default=1_000_000)
    p.add_argument("--max-deletions", type=int, default=1000, help="k of the active algorithms")
    args = h.arguments(p, argv, quick="n in 1e3, 1e4; 2 deletions each")
    if args.quick:
        args.sizes, args.repeat, args.repeat_large = "1000,10000", 2, 1
    sizes = sorted(int(float(v)) for v in args.sizes.split(","))
    names = [a.strip() for a in args.algorithms.split(",")]
    for name in names:
        if name not in ALGORITHMS:
            raise SystemExit(f"unknown algorithm {name!r}; choose from {list(ALGORITHMS)}")
    wall = time.perf_counter()

    info = h.machine()
    print(h.machine_line(info))
    compile_s = warm_up()
    print(f"numba kernels warmed up in {compile_s:.2f} s; d = {args.d}, n in {sizes}, {args.repeat} deletions "
          f"per model ({args.repeat_large} for active-d2d and retraining at n >= {args.large_n:,}), "
          f"k = {args.max_deletions}, one core")
    rows = measure(names, sizes, args.d, args.repeat, args.repeat_large, args.large_n, args.max_deletions)
    print_table(rows, names, sizes)
    slopes = fit_slopes(rows, names)
    print("\nlog-log slope of the median vs n (1 = linear in n): "
          + ", ".join(f"{k} {v:.2f}" for k, v in slopes.items()))
    checks = check_targets(rows, args.d)
    load_end = h.loadavg()
    if info.get("loadavg_at_start"):
        print(f"\nload average {info['loadavg_at_start'][0]:.2f} at start, {load_end[0]:.2f} at the end "
              "(2 shared cores: other work inflates the timings)")

    report = {
        "machine": info,
        "config": {"sizes": sizes, "d": args.d, "algorithms": {n: {"class": ALGORITHMS[n][0].__name__,
                                                                   **kwargs_for(n, args.max_deletions)}
                                                               for n in names},
                   "repeat": args.repeat, "repeat_large": args.repeat_large, "large_n": args.large_n,
                   "radius": 10.0, "eps": 1.0, "kernel_warm_up_s": compile_s, "quick": args.quick},
        "results": rows,
        "loglog_slopes": slopes,
        "targets": checks.results,
        "wall_s": time.perf_counter() - wall,
    }
    return h.finish("deletion_cost", report, args.out, checks=checks, plot=lambda path: chart(
        rows, names, path, f"Cost of one deletion vs exact retraining, d = {args.d}, one core"))


def ms(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def render(report: dict) -> str:
    """The README table: median ms per deletion (speed-up over retraining) by n, and the slope."""
    rows, sizes = report["results"], report["config"]["sizes"]
    names = list(dict.fromkeys(r["algorithm"] for r in rows))
    lines = ["| algorithm | " + " | ".join(f"n = {n:,}" for n in sizes) + " | slope |",
             "|---|" + "---:|" * (len(sizes) + 1)]
    for name in names:
        cells = []
        for n in sizes:
            r = next((x for x in rows if x["algorithm"] == name and x["retained"] == n), None)
            sp = r and r.get("speedup_vs_retrain")
            cells.append("" if r is None else ms(r["median_ms"]) + (f" ({speedup(sp)})" if sp and r["baseline"] else ""))
        slope = report["loglog_slopes"].get(name)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'' if slope is None else f'{slope:.2f}'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
