"""Learning quality under deletions: prequential accuracy and the final model's distance to retraining.

Issue 6 item 3. Every algorithm, built as the worker builds it (``ALGORITHMS[...]`` with
``Settings.model_kwargs()``, worker defaults: logistic, l2 = 0.01, radius 10, feature bound 1,
schedule auto = strongly convex with the shifted t0, omega 1.2, order_fallback retrain), runs
test-then-train over a stream with deletions (bench/_streams.py), against plain OGD (``ogd``, no
unlearning), exact retraining (``retrain``) and discard-and-restart (``restart``).

Grid: datasets Phishing (River), breast_cancer and digits (scikit-learn, binary), a synthetic
stream of 1,000,000 events (plus smaller synthetic streams for the algorithms that revisit data,
and a ridge stream for ``active-newton``); deletion rates 0.1%, 1%, 10%; schedules uniform, bursts,
early-late (and the extra in-order schedule that satisfies the active algorithms' arrival-order
condition); eps in {0.1, 1, 10} (algorithms that add no noise run once per cell). Small datasets
are repeated over several schedule draws (noise always from OS entropy, as in production).

For each run: prequential accuracy (exact test-then-train on the small datasets, worker-style
micro-batches of 2,000 on the synthetic streams) and ||z_final - z_retrained||, where z_retrained
is OGD from z = 0 over the retained records in arrival order at their original steps (docs/guarantee.md 2.2;
computed once per stream at the end with ``worker.olu.core.replay.replay_ogd``).

Targets (issue 6): at eps = 1 with 1% uniform deletions, passive OLU's prequential accuracy on
Phishing is within 2 points of plain OGD; the final model of every unlearning algorithm is closer
to the retrained model than discard-and-restart is.

    .venv/bin/python bench/quality.py            # full grid, 9 to 17 min on 2 busy cores
    .venv/bin/python bench/quality.py --quick    # smoke run, seconds

Writes ``quality.json`` and ``.png`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import _streams as S  # noqa: E402
from _targets import Checks, Target  # noqa: E402

PHISHING_GAP = Target(
    "phishing_passive_gap_points", "eps = 1, 1% uniform deletions: passive OLU's prequential accuracy on Phishing "
    "within 2 points of plain OGD (OGD minus passive)", "<=", 2.0, "points", "learning quality (issue 6)")
CLOSER_THAN_RESTART = Target(
    "closer_than_restart_share", "final model closer to the retrained model than discard-and-restart's "
    "(share of grid cells)", ">=", 1.0, "of cells", "learning quality (issue 6)")

RATES = (0.001, 0.01, 0.1)
EPSILONS = (0.1, 1.0, 10.0)
LOGISTIC_ALGOS = ("passive", "passive-restart", "active-d2d", "active-anchor", "retrain", "restart", "ogd")
UNLEARNERS = ("passive", "passive-restart", "active-d2d", "active-anchor", "active-newton", "retrain")
ISSUE_SCHEDULES = ("uniform", "bursts", "early-late")
REPORT_KEYS = ("seconds", "worker_defaults", "cells", "targets", "diagnosis")
SERVICES = ()
#: The README's excerpt: uniform schedule, eps = 1, one rate per stream.
EXCERPT = (("phishing", 0.01), ("breast_cancer", 0.01), ("digits", 0.01), ("synthetic-1M", 0.001),
           ("synthetic-1M", 0.01), ("synthetic-100k", 0.001), ("ridge-100k", 0.01))
EXCERPT_ALGOS = ("ogd", "retrain", "restart", "passive", "passive-restart", "active-d2d", "active-anchor",
                 "active-newton")


def blocks(quick: bool) -> list[dict]:
    """What runs where: (dataset, algorithms, rates, schedules, epsilons, repeats, batch). ``quick``:
    the same blocks, each grid cut to its first rate, schedule and eps, the synthetic streams on 5,000
    events; Phishing keeps the in-order schedule, eps 10 and two repeats as well."""
    if quick:
        small = dict(algorithms=LOGISTIC_ALGOS, rates=(0.01,), schedules=("uniform", "in-order"),
                     epsilons=(1.0, 10.0), repeats=2, batch=1)
        n_big = n_mid = 5_000
    else:
        small = dict(algorithms=LOGISTIC_ALGOS, rates=RATES, schedules=S.SCHEDULES, epsilons=EPSILONS,
                     repeats=10, batch=1)
        n_big, n_mid = 1_000_000, 100_000
    out = [
        dict(data=S.phishing, **small),
        dict(data=S.breast_cancer, **small),
        dict(data=S.digits, **small),
        # the 1e6 stream: the O(1)-per-deletion algorithms over the whole grid
        dict(data=lambda: S.synthetic_logistic(n_big), algorithms=("passive", "ogd", "restart"),
             rates=RATES, schedules=ISSUE_SCHEDULES, epsilons=EPSILONS, repeats=1, batch=2000),
        dict(data=lambda: S.synthetic_logistic(n_big), algorithms=("passive-restart",),
             rates=RATES, schedules=ISSUE_SCHEDULES, epsilons=(1.0,), repeats=1, batch=2000),
        # exact retraining replays O(t) steps per deletion: 0.1% only at 1e6
        dict(data=lambda: S.synthetic_logistic(n_big), algorithms=("retrain",),
             rates=(0.001,), schedules=ISSUE_SCHEDULES, epsilons=(1.0,), repeats=1, batch=2000),
        # active algorithms (GD passes over the retained set per ordered deletion): 1e5 events
        dict(data=lambda: S.synthetic_logistic(n_mid),
             algorithms=("active-d2d", "active-anchor", "passive", "retrain", "restart", "ogd"),
             rates=(0.001,), schedules=S.SCHEDULES, epsilons=(1.0,), repeats=1, batch=2000),
        # ridge: the second-order active algorithm (ridge only) next to the others
        dict(data=lambda: S.synthetic_ridge(n_mid),
             algorithms=("active-newton", "passive", "active-d2d", "retrain", "restart", "ogd"),
             rates=(0.001, 0.01), schedules=("uniform", "in-order"), epsilons=(1.0,), repeats=1, batch=2000),
    ]
    if quick:
        out[1:] = [dict(b, rates=b["rates"][:1], schedules=b["schedules"][:1], epsilons=b["epsilons"][:1],
                        repeats=1) for b in out[1:]]
    return out


def run_block(block: dict, rows: list[dict], log) -> None:
    data = block["data"]()
    for rate in block["rates"]:
        for schedule in block["schedules"]:
            for rep in range(block["repeats"]):
                rng = np.random.default_rng([rep, int(rate * 1e6), S.SCHEDULES.index(schedule)])
                plan = S.plan_deletions(data.n, rate, schedule, rng)
                z_ret = S.retrained_weights(data, plan)
                for algorithm in block["algorithms"]:
                    for eps in (block["epsilons"] if algorithm not in S.EPS_FREE else (1.0,)):
                        model = S.make_model(algorithm, data.dim, data.loss, eps, plan.k)
                        r = S.run_prequential(model, data, plan, batch=block["batch"])
                        rows.append(dict(dataset=data.name, n=data.n, dim=data.dim, loss_name=data.loss,
                                         schedule=schedule, rate=rate, k=plan.k, eps=eps,
                                         eps_free=algorithm in S.EPS_FREE, algorithm=algorithm, repeat=rep,
                                         accuracy=r.accuracy, loss=r.loss,
                                         distance=float(np.linalg.norm(r.weights - z_ret)),
                                         norm=float(np.linalg.norm(r.weights)), outcomes=r.outcomes,
                                         seconds=r.seconds, batch=block["batch"]))
            log(f"  {data.name} rate {rate:g} {schedule}: done")


def summarise(rows: list[dict]) -> list[dict]:
    """Mean (and 95% half-width over repeats) per cell; eps-free algorithms are copied to every eps
    of their cell so that each (dataset, rate, schedule, eps) cell compares like with like."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r["dataset"], r["rate"], r["schedule"], r["algorithm"], r["eps"])].append(r)
    eps_by_cell = defaultdict(set)
    for (ds, rate, sched, _alg, eps) in groups:
        eps_by_cell[(ds, rate, sched)].add(eps)
    out = []
    for (ds, rate, sched, alg, eps), rs in groups.items():
        targets = sorted(eps_by_cell[(ds, rate, sched)]) if rs[0]["eps_free"] else [eps]
        acc, acc_ci = (None, None) if rs[0]["loss_name"] == "ridge" else S.mean_ci([r["accuracy"] for r in rs])
        dist, dist_ci = S.mean_ci([r["distance"] for r in rs])
        outcomes = defaultdict(int)
        for r in rs:
            for k, v in r["outcomes"].items():
                outcomes[k] += v
        for e in targets:
            out.append(dict(dataset=ds, rate=rate, schedule=sched, algorithm=alg, eps=e, k=rs[0]["k"],
                            n=rs[0]["n"], repeats=len(rs), accuracy=acc, accuracy_ci=acc_ci,
                            loss=float(np.mean([r["loss"] for r in rs])), distance=dist, distance_ci=dist_ci,
                            outcomes={k: v / len(rs) for k, v in outcomes.items()},
                            accuracy_runs=[None if acc is None else round(r["accuracy"], 6) for r in rs],
                            distance_runs=[float(f"{r['distance']:.6g}") for r in rs],
                            seconds=float(np.mean([r["seconds"] for r in rs])), eps_free=rs[0]["eps_free"]))
    out.sort(key=lambda c: (c["dataset"], c["rate"], c["schedule"], c["eps"], c["algorithm"]))
    return out


def cell_of(cells, **key):
    hits = [c for c in cells if all(c[k] == v for k, v in key.items())]
    return hits[0] if hits else None


def evaluate_targets(cells: list[dict]) -> dict:
    passive = cell_of(cells, dataset="phishing", rate=0.01, schedule="uniform", eps=1.0, algorithm="passive")
    ogd = cell_of(cells, dataset="phishing", rate=0.01, schedule="uniform", eps=1.0, algorithm="ogd")
    t1 = None
    if passive and ogd:
        gap = ogd["accuracy"] - passive["accuracy"]
        t1 = dict(passive=passive["accuracy"], passive_ci=passive["accuracy_ci"], ogd=ogd["accuracy"],
                  ogd_ci=ogd["accuracy_ci"], gap_points=100 * gap, met=bool(100 * gap <= 2.0),
                  repeats=passive["repeats"])
    per_alg = defaultdict(lambda: {"cells": 0, "closer": 0, "ratios": []})
    failures = []
    for c in cells:
        if c["algorithm"] not in UNLEARNERS:
            continue
        base = cell_of(cells, dataset=c["dataset"], rate=c["rate"], schedule=c["schedule"], eps=c["eps"],
                       algorithm="restart")
        if base is None:
            continue
        a = per_alg[c["algorithm"]]
        a["cells"] += 1
        closer = c["distance"] < base["distance"]
        a["closer"] += closer
        a["ratios"].append(c["distance"] / base["distance"] if base["distance"] > 0 else np.inf)
        if not closer:
            failures.append(dict(dataset=c["dataset"], rate=c["rate"], schedule=c["schedule"], eps=c["eps"],
                                 algorithm=c["algorithm"], distance=c["distance"], restart=base["distance"]))
    t2 = {alg: dict(cells=v["cells"], closer=v["closer"], median_ratio=finite(float(np.median(v["ratios"]))),
                    met=v["closer"] == v["cells"]) for alg, v in per_alg.items()}
    return dict(phishing_passive_vs_ogd=t1, closer_than_restart=t2,
                closer_than_restart_met=all(v["met"] for v in t2.values()) if t2 else None,
                closer_than_restart_failures=failures)


def finite(v: float) -> float | None:
    """``v``, or None where it is not a number (JSON has no infinity)."""
    return v if math.isfinite(v) else None


def diagnose_phishing(repeats: int) -> list[dict]:
    """Why passive trails OGD on Phishing (1% uniform): the same cell for other l2 and eps."""
    data = S.phishing()
    out = []
    for l2 in (0.01, 0.03, 0.1):
        for eps in (1.0, 10.0):
            accs = defaultdict(list)
            for rep in range(repeats):
                plan = S.plan_deletions(data.n, 0.01, "uniform", np.random.default_rng([rep, 10_000, 0]))
                for algorithm in ("passive", "ogd"):
                    settings = S.worker_settings(algorithm, data.dim, data.loss, eps, None)
                    kwargs = {**settings.model_kwargs(), "l2": l2}
                    model = S.ALGORITHMS[algorithm](**kwargs)
                    accs[algorithm].append(S.run_prequential(model, data, plan).accuracy)
                    if algorithm == "passive":
                        accs["sigma_max"].append(max(e["sigma"] for e in model.ledger))
            passive, ogd = float(np.mean(accs["passive"])), float(np.mean(accs["ogd"]))
            out.append(dict(l2=l2, eps=eps, passive=passive, ogd=ogd, gap_points=100 * (ogd - passive),
                            median_max_sigma=float(np.median(accs["sigma_max"])), repeats=repeats))
    return out


def print_tables(cells: list[dict]) -> None:
    datasets = sorted({c["dataset"] for c in cells}, key=lambda d: [c["dataset"] for c in cells].index(d))
    for ds in datasets:
        sub = [c for c in cells if c["dataset"] == ds]
        print(f"\n== {ds} (n = {sub[0]['n']:,}) — prequential accuracy % (distance to retrain) ==")
        algs = [a for a in ("ogd", "retrain", "restart", "passive", "passive-restart", "active-d2d",
                            "active-anchor", "active-newton") if any(c["algorithm"] == a for c in sub)]
        print(f"{'rate':>6} {'schedule':>10} {'eps':>5} {'k':>6} | " + " | ".join(f"{a:>17}" for a in algs))
        keys = sorted({(c["rate"], c["schedule"], c["eps"]) for c in sub},
                      key=lambda t: (t[0], S.SCHEDULES.index(t[1]), t[2]))
        for rate, sched, eps in keys:
            line = []
            k = None
            for a in algs:
                c = cell_of(sub, rate=rate, schedule=sched, eps=eps, algorithm=a)
                if c is None:
                    line.append(f"{'':>17}")
                    continue
                k = c["k"]
                acc = "  -  " if c["accuracy"] is None else f"{100 * c['accuracy']:5.1f}"
                line.append(f"{acc} ({c['distance']:8.3g})")
            print(f"{rate * 100:5.1f}% {sched:>10} {eps:5g} {k:6d} | " + " | ".join(line))


def plot(cells, targets, path) -> None:
    pyplot = h.plt()
    fig, axes = pyplot.subplots(1, 2, figsize=(13, 4.8))
    ax = axes[0]
    algs = ("ogd", "retrain", "passive", "passive-restart", "active-d2d", "active-anchor", "restart")
    for a in algs:
        xs, ys, es = [], [], []
        for rate in RATES:
            c = cell_of(cells, dataset="phishing", rate=rate, schedule="uniform", eps=1.0, algorithm=a)
            if c:
                xs.append(rate * 100)
                ys.append(100 * c["accuracy"])
                es.append(100 * c["accuracy_ci"])
        if xs:
            ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=a)
    ax.set_xscale("log")
    ax.set_xlabel("deletion rate (%)")
    ax.set_ylabel("prequential accuracy (%)")
    ax.set_title("Phishing, uniform deletions, eps = 1")
    ax.legend(fontsize=8)
    ax = axes[1]
    t2 = targets["closer_than_restart"]
    names = [a for a in UNLEARNERS if a in t2]
    data = []
    for a in names:
        ratios = []
        for c in cells:
            if c["algorithm"] != a:
                continue
            base = cell_of(cells, dataset=c["dataset"], rate=c["rate"], schedule=c["schedule"], eps=c["eps"],
                           algorithm="restart")
            if base and base["distance"] > 0:
                ratios.append(max(c["distance"], 1e-6) / base["distance"])
        data.append(ratios)
    ax.boxplot(data, tick_labels=names)
    ax.axhline(1.0, color="red", ls="--", lw=1, label="= discard-and-restart")
    ax.set_yscale("log")
    ax.set_ylabel("||z - z_retrain|| / restart's (per cell)")
    ax.set_title("final-model distance to retraining (below 1: closer than restart)")
    ax.tick_params(axis="x", labelrotation=20)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = h.arguments(ap, argv, quick="5,000-event synthetic streams, a cut grid, fewer repeats")
    info = h.machine()
    print(h.machine_line(info))
    print(f"worker defaults: {S.model_defaults()}")
    started = time.perf_counter()
    rows: list[dict] = []
    for block in blocks(args.quick):
        t0 = time.perf_counter()
        run_block(block, rows, print)
        print(f"block {block['algorithms']} done in {time.perf_counter() - t0:.0f} s")
    cells = summarise(rows)
    print_tables(cells)
    targets = evaluate_targets(cells)
    diagnosis = diagnose_phishing(1 if args.quick else 10)
    print("\n== diagnosis: Phishing, 1% uniform deletions, passive vs OGD for other l2 / eps ==")
    print(f"{'l2':>6} {'eps':>5} {'passive %':>10} {'ogd %':>7} {'gap (pts)':>10} {'median max sigma':>17}")
    for d in diagnosis:
        print(f"{d['l2']:6g} {d['eps']:5g} {100 * d['passive']:10.1f} {100 * d['ogd']:7.1f} {d['gap_points']:10.1f} "
              f"{d['median_max_sigma']:17.3g}")

    print("\n== targets ==")
    checks = Checks()
    t1 = targets["phishing_passive_vs_ogd"]
    if t1:
        checks.check(PHISHING_GAP, t1["gap_points"],
                     where=f"passive {100 * t1['passive']:.1f} +- {100 * t1['passive_ci']:.1f} % vs OGD "
                           f"{100 * t1['ogd']:.1f} %, {t1['repeats']} schedule draws")
    for alg, v in targets["closer_than_restart"].items():
        checks.check(CLOSER_THAN_RESTART, v["closer"] / v["cells"],
                     where=f"{alg}: {v['closer']}/{v['cells']} cells, median distance ratio {v['median_ratio']:.3g}")
    targets["checks"] = checks.results
    seconds = time.perf_counter() - started
    print(f"total {seconds:.0f} s")

    report = dict(machine=info, seconds=seconds, worker_defaults=S.model_defaults(), cells=cells, targets=targets,
                  diagnosis=diagnosis)  # per-run values are in each cell
    return h.finish("quality", report, args.out, checks=checks, plot=lambda path: plot(cells, targets, path))


def render(report: dict) -> str:
    """The README excerpt: uniform schedule, eps = 1, accuracy % / distance to the retrained model."""
    cells = [c for c in report["cells"] if c["schedule"] == "uniform" and c["eps"] == 1.0]
    rows = [(ds, rate) for ds, rate in EXCERPT if cell_of(cells, dataset=ds, rate=rate)]
    rows = rows or sorted({(c["dataset"], c["rate"]) for c in cells})  # a quick run's streams
    algos = [a for a in EXCERPT_ALGOS if any(c["algorithm"] == a for c in cells)]
    lines = ["| stream (rate, k) | " + " | ".join(algos) + " |", "|---|" + "---|" * len(algos)]
    for ds, rate in rows:
        found = [cell_of(cells, dataset=ds, rate=rate, algorithm=a) for a in algos]
        k = next(c["k"] for c in found if c)
        line = []
        for c in found:
            undefined = c is not None and (c["accuracy"] is None or math.isnan(c["accuracy"]))  # ridge
            acc = "" if c is None else "-" if undefined else f"{100 * c['accuracy']:.1f}"
            line.append("" if c is None else f"{acc} / {c['distance']:.2g}")
        lines.append(f"| {ds} ({100 * rate:g}%, {k:,}) | " + " | ".join(line) + " |")
    t = report["targets"]
    gap = t.get("phishing_passive_vs_ogd")
    if gap:
        lines += ["", f"Phishing, eps = 1, 1% uniform: passive {100 * gap['passive']:.1f} +- "
                      f"{100 * gap['passive_ci']:.1f} % vs OGD {100 * gap['ogd']:.1f} % ({gap['repeats']} schedule "
                      f"draws), gap {gap['gap_points']:.1f} points: {'MET' if gap['met'] else 'NOT MET'}. Closer to "
                      "the retrained model than discard-and-restart, cells: " + ", ".join(
                          f"{alg} {v['closer']}/{v['cells']}" for alg, v in t["closer_than_restart"].items()) + "."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
