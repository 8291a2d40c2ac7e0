"""The released model under four deletion workloads, against plain OGD: the planner's recommendation
and prediction for each unit, the defaults, and what a per-key cap buys (issue 35).

Streams: 1e6 events of a logistic task, d = 10 (directions uniform, norms uniform in [0, 1], y =
sign(w . x + 0.1 N(0, 1)) with ||w|| = 1), deletions of 0.5% and 2% of the records, 3 seeds. Four
workload classes, none tuned to the planner:

* ``uniform``: single-record requests, each naming a record inserted up to 100,000 inserts earlier
  (uniform), on a stationary concept (the workload the earlier benches assumed);
* ``recent``: single-record requests, half naming a record of the last 2,000 inserts, half one
  uniform over the whole history; stationary;
* ``accounts``: each request names every record of one key (a subject, chosen uniformly among the
  keys that hold records), key activity skewed (50,000 keys, the k-th most active with weight
  k^-0.8: the top 1% hold about a third of the records); stationary;
* ``heavy accounts``: the same, but the account deleted is the owner of a record drawn uniformly
  (so active subjects, whose records are most of the stream, are the likeliest to leave);
* ``drift``: the ``recent`` requests on a drifting concept (w turns by 90 degrees over the stream).

Configurations, each run on the whole stream: ``ogd`` (plain OGD, no request, l2 0.01); ``plan
per-request`` and ``plan all-deletions``: what ``olu-worker plan`` recommends under each unit (as
``--sample``: the first 50,000 events of another stream of the same class, with its own deletes;
epsilon 1 at delta 1e-5); ``default per-request`` and ``default all-deletions``: the worker's
defaults with only the unit set. For ``accounts`` also: the per-request recommendation with and
without ``OLU_MAX_RECORDS_PER_KEY`` (``cap 8`` / ``no cap``), and OGD with the cap (what the cap
costs when no deletion arrives). Accuracy of the released model on 20,000 held-out rows of the
concept of the moment at 1e5, 5e5 and 1e6 events: the mean over 8 releases in the last 5% before
each (a rotation's phase does not decide it); the mean over seeds.

    .venv/bin/python bench/deletion_workloads.py            # 4 classes x 2 shares x 3 seeds: ~40 min, 2 cores
    .venv/bin/python bench/deletion_workloads.py --quick    # 3e4 events, 1 seed, 2 classes: about a minute

Writes ``deletion_workloads.json`` and ``.png`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
from _targets import Checks, Target  # noqa: E402

from worker.config import load_settings  # noqa: E402
from worker.olu import record_keys  # noqa: E402
from worker.planning.plan import make_plan  # noqa: E402
from worker.planning.sample import Sample  # noqa: E402
from worker.planning.search import Candidate, candidate_model  # noqa: E402
from worker.planning.target import build_engine, build_rotation, resolve_target  # noqa: E402
from worker.planning.workload import Shape, Workload, nearest_present  # noqa: E402

REPORT_KEYS = ("setup", "rows", "cells")
SERVICES = ()
CLASSES = ("uniform", "recent", "accounts", "heavy accounts", "drift")
SHARES = (0.005, 0.02)
CHECKPOINTS = (100_000, 500_000, 1_000_000)
SAMPLE_EVENTS = 50_000
TEST_ROWS = 20_000
AVERAGED, SPAN = 8, 0.05
KEYS, KEY_SKEW, ACCOUNT_CAP = 50_000, 0.8, 8
OLD_AGE, RECENT_AGE = 100_000, 2_000

PLAN_GAP = Target("plan_per_request_gap", "the planner's per-request recommendation within 1.5 points of OGD at "
                  "5e5 and 1e6 (0.5% deletions)", "<=", 1.5, "points", "issue 35")
PLAN_GAP_2 = Target("plan_per_request_gap_2pct", "the planner's per-request recommendation within 2.5 points of OGD "
                    "at 5e5 and 1e6 (2% deletions)", "<=", 2.5, "points", "issue 35")
PREDICTION = Target("prediction_error", "the planner's predicted accuracy within 2 points of the measured one at "
                    "1e6", "<=", 2.0, "points", "issue 35")
WARNING = Target("warning_exact", "the planner warns exactly where the measured gap at 1e6 exceeds 3 points",
                 ">=", 1.0, "agrees", "issue 35")
DEFAULTS = Target("defaults_gap", "the per-request defaults within 3 points of OGD at 1e6", "<=", 3.0, "points",
                  "issue 35")


# --------------------------------------------------------------------------- streams
def concept(cls: str, position: int, n: int) -> np.ndarray:
    """The true weights at insert ``position``: fixed, or turning by 90 degrees over the stream."""
    rng = np.random.default_rng(20261128)
    w0, w1 = rng.normal(size=10), rng.normal(size=10)
    w0 /= np.linalg.norm(w0)
    w1 -= (w1 @ w0) * w0
    w1 /= np.linalg.norm(w1)
    angle = (math.pi / 2) * position / n if cls == "drift" else 0.0
    return math.cos(angle) * w0 + math.sin(angle) * w1


def rows(cls: str, n: int, seed, start: int = 0, total: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows from position ``start`` (the concept turns with the position among ``total``)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 10))
    X *= (rng.random(n) / np.linalg.norm(X, axis=1))[:, None]
    total = total or n
    if cls == "drift":
        w = np.stack([concept(cls, start + j, total) for j in range(n)])
        margin = np.einsum("ij,ij->i", X, w)
    else:
        margin = X @ concept(cls, 0, total)
    y = np.where(margin + 0.1 * rng.normal(size=n) >= 0.0, 1.0, -1.0)
    return X, y


def stream(cls: str, events: int, share: float, seed: int) -> Workload:
    """The class's stream of ``events`` events whose requests delete ``share`` of the records."""
    rng = np.random.default_rng([seed, 17])
    if cls.endswith("accounts"):
        return _accounts(events, share, seed, weighted=cls == "heavy accounts")
    k = round(share * events)
    inserts = events - k
    X, y = rows(cls, inserts, [seed, 1], total=inserts)
    ids = [f"r-{j}" for j in range(inserts)]
    taus = [max(1, math.floor((j - 0.5) * inserts / k + 0.5)) for j in range(1, k + 1)] if k else []
    deleted = np.zeros(inserts, np.bool_)
    at, requests = [], []
    for tau in taus:
        if cls == "uniform":
            age = int(rng.integers(1, OLD_AGE + 1))
        else:  # recent, drift: half of the last RECENT_AGE inserts, half anywhere in the history
            age = int(rng.integers(1, RECENT_AGE + 1)) if rng.random() < 0.5 else int(rng.integers(1, tau + 1))
        u = nearest_present(deleted, max(0, tau - age), tau)
        if u is None:
            continue
        deleted[u] = True
        at.append(tau)
        requests.append((ids[u],))
    return Workload(ids, X, y, record_keys(ids), np.array(at, np.int64), requests, "bench")


def _accounts(events: int, share: float, seed: int, *, weighted: bool) -> Workload:
    """Requests naming all of a key's present records, the key uniform among those that hold some
    (``weighted``: the owner of a present record drawn uniformly); as many requests as delete about
    ``share`` of the records (calibrated on a first draw)."""
    n = events
    X, y = rows("accounts", n, [seed, 1], total=n)
    ids = [f"r-{j}" for j in range(n)]
    keys = account_keys(n, seed)
    requests_k, tried = max(1, round(share * n / 20)), {}
    for _ in range(6):  # the number of requests whose draw deletes closest to the share
        at, requests = _account_requests(ids, keys, requests_k, np.random.default_rng([seed, 3]), weighted)
        deleted = sum(len(r) for r in requests)
        tried[requests_k] = (abs(deleted - share * n), at, requests)
        requests_k = max(1, round(requests_k * share * n / max(1, deleted)))
        if requests_k in tried:
            break
    _, at, requests = min(tried.values(), key=lambda t: t[0])
    # the requests are events too: keep the inserts and requests to ``events`` in all
    keep = n - len(requests)
    cut = np.searchsorted(np.array(at), keep, side="right")
    at, requests = at[:cut], [tuple(r for r in req if int(r[2:]) < keep) for req in requests[:cut]]
    return Workload(ids[:keep], X[:keep], y[:keep], record_keys(keys[:keep]), np.array(at, np.int64),
                    requests, "bench")


def account_keys(n: int, seed: int) -> list[str]:
    """The subject of each of ``n`` records: KEYS subjects, the k-th most active with weight
    k^-KEY_SKEW (a heavy tail: the top 1% of subjects hold about a third of the records)."""
    weights = np.arange(1, KEYS + 1, dtype=np.float64) ** -KEY_SKEW
    draw = np.random.default_rng([seed, 2]).choice(KEYS, size=n, p=weights / weights.sum())
    return [f"user-{int(k)}" for k in draw]


def _account_requests(ids, keys, k: int, rng, weighted: bool) -> tuple[list[int], list[tuple[str, ...]]]:
    n = len(ids)
    taus = [max(1, math.floor((j - 0.5) * n / k + 0.5)) for j in range(1, k + 1)]
    held: dict[str, list[int]] = {}
    holders: list[str] = []  # keys holding records, for a uniform choice
    where: dict[str, int] = {}
    filled, at, requests = 0, [], []
    for tau in taus:
        for j in range(filled, tau):
            key = keys[j]
            if key not in held or not held[key]:
                held[key] = []
                where[key] = len(holders)
                holders.append(key)
            held[key].append(j)
        filled = tau
        if not holders:
            continue
        if weighted:  # the owner of a record drawn uniformly, until one that still holds records
            key = keys[int(rng.integers(tau))]
            while not held.get(key):
                key = keys[int(rng.integers(tau))]
        else:
            key = holders[int(rng.integers(len(holders)))]
        named = held.pop(key)
        last = holders.pop()  # remove ``key`` from holders in O(1)
        if last != key:
            holders[where[key]] = last
            where[last] = where[key]
        del where[key]
        at.append(tau)
        requests.append(tuple(ids[j] for j in named))
    return at, requests


def sample_of(cls: str, share: float, seed: int) -> Sample:
    """The planner's sample: the first SAMPLE_EVENTS events of another stream of the class."""
    wl = stream(cls, SAMPLE_EVENTS, share, seed + 1000)
    keys = None
    if cls.endswith("accounts"):
        keys = account_keys(SAMPLE_EVENTS, seed + 1000)[:len(wl.ids)]
    requests = tuple((int(a), tuple(r)) for a, r in zip(wl.at, wl.requests))
    return Sample(wl.ids, wl.X, wl.y, 0, keys, requests)


# --------------------------------------------------------------------------- runs
def checkpoints_of(n_inserts: int, events: int, marks) -> dict[int, list[int]]:
    """For each checkpoint (in events): the insert positions of its AVERAGED releases."""
    per_event = n_inserts / events
    out = {}
    for c in marks:
        end = int(c * per_event)
        out[c] = [max(1, int(end - SPAN * end + SPAN * end * (i + 1) / AVERAGED)) for i in range(AVERAGED)]
    return out


def measure(model, wl: Workload, cls: str, points: dict[int, list[int]], tests, *, requests: bool = True) -> dict:
    """Accuracy of the releases at each checkpoint (the mean over its points) on held-out rows."""
    at = wl.at if requests else np.zeros(0, np.int64)
    stops = sorted({p for ps in points.values() for p in ps})
    acc, start, nxt = {}, 0, 0
    for stop in stops:
        while nxt < len(at) and at[nxt] <= stop:
            a = int(at[nxt])
            if a > start:
                model.learn_many(wl.ids[start:a], wl.X[start:a], wl.y[start:a], subjects=wl.subjects[start:a])
                start = a
            model.unlearn_request(list(wl.requests[nxt]))
            nxt += 1
        if stop > start:
            model.learn_many(wl.ids[start:stop], wl.X[start:stop], wl.y[start:stop],
                             subjects=wl.subjects[start:stop])
            start = stop
        Xt, yt = tests(stop)
        w = np.array(model.weights, np.float64)
        acc[stop] = float(np.mean(np.where(Xt @ w >= 0.0, 1.0, -1.0) == yt))
    return {c: float(np.mean([acc[p] for p in ps])) for c, ps in points.items()}


def test_sets(cls: str, total: int, seed: int):
    """Held-out rows of the concept at an insert position (one set for a fixed concept)."""
    fixed = rows(cls, TEST_ROWS, [seed, 9, 0], total=total) if cls != "drift" else None
    cache: dict[int, tuple] = {}

    def at(position: int):
        if fixed is not None:
            return fixed
        if position not in cache:
            rng = np.random.default_rng([seed, 9, position])
            X = rng.normal(size=(TEST_ROWS, 10))
            X *= (rng.random(TEST_ROWS) / np.linalg.norm(X, axis=1))[:, None]
            y = np.where(X @ concept(cls, position, total) + 0.1 * rng.normal(size=TEST_ROWS) >= 0.0, 1.0, -1.0)
            cache[position] = (X, y)
        return cache[position]

    return at


def plan_for(cls: str, share: float, seed: int, events: int, sim_events: int):
    settings = load_settings(["--dim", "10"], {}, command="demo")
    target = resolve_target(settings, unit="per-request", target_epsilon=1.0)
    t = time.perf_counter()
    plan = make_plan(settings, target, shape=Shape(rate=0.0), events=events, sample=sample_of(cls, share, seed),
                     sim_events=sim_events, seed=1)
    other = make_plan(settings, target.with_unit("all-deletions"), shape=Shape(rate=0.0), events=events,
                      sample=sample_of(cls, share, seed), sim_events=sim_events, seed=1)
    return settings, target, {"per-request": plan, "all-deletions": other}, time.perf_counter() - t


def cell(cls: str, share: float, seed: int, events: int, marks, sim_events: int) -> list[dict]:
    wl = stream(cls, events, share, seed)
    points = checkpoints_of(len(wl.ids), events, marks)
    tests = test_sets(cls, len(wl.ids), seed)
    settings, target, plans, plan_s = plan_for(cls, share, seed, events, sim_events)
    out = []

    def noise(config: str):  # each run its own noise, a function of the seed and the configuration
        return np.random.default_rng([seed, 5, zlib.crc32(config.encode())])

    def run(config: str, model, *, requests=True, **extra):
        t = time.perf_counter()
        acc = measure(model, wl, cls, points, tests, requests=requests)
        out.append({"class": cls, "share": share, "seed": seed, "config": config,
                    "accuracy": [acc[c] for c in marks], "seconds": time.perf_counter() - t, **extra})
        print(f"{cls:9s} {share:.1%} seed {seed} {config:24s} " + " ".join(f"{acc[c]:.4f}" for c in marks)
              + f"  ({out[-1]['seconds']:.1f} s)", flush=True)

    run("ogd", build_engine(settings, target, cap=None), requests=False)
    for unit, plan in plans.items():
        best = plan["search"]["best"][unit]
        c = Candidate(unit, best["rotation"], best["lifetime"], best["l2"], best["cap"], best.get("radius"))
        run(f"plan {unit}", candidate_model(settings, target, c, best["capacity"], noise(unit)), settings=best["settings"],
            predicted=best["score"], warned=bool(plan["warnings"]), plan_seconds=plan_s)
        if cls.endswith("accounts") and unit == "per-request":
            for cap, name in ((ACCOUNT_CAP, f"cap {ACCOUNT_CAP}"), (None, "no cap")):
                capped = Candidate(unit, best["rotation"], best["lifetime"], best["l2"], cap, best.get("radius"))
                run(f"plan per-request, {name}", candidate_model(settings, target, capped, None, noise(name)),
                    settings=capped.settings())
            run(f"ogd, cap {ACCOUNT_CAP}", build_engine(settings, target, cap=ACCOUNT_CAP), requests=False)
    for unit in ("per-request", "all-deletions"):
        model, line = default_model(unit, noise(f"default {unit}"))
        run(f"default {unit}", model, settings=line)
    return out


def default_model(unit: str, noise_rng):
    """The model the worker builds with only the unit set (its unit defaults included), and its settings."""
    settings = load_settings(["--dim", "10", "--privacy-unit", unit], {}, command="demo")
    target = resolve_target(settings)
    if settings.rotation == "on":
        line = (f"OLU_PRIVACY_UNIT={unit} (defaults: rotation {settings.rotation_variant}, lifetime "
                f"{settings.model_lifetime_events:,})")
        return build_rotation(settings, target, lifetime=settings.model_lifetime_events,
                              variant=settings.rotation_variant, noise_rng=noise_rng), line
    return build_engine(settings, target, noise_rng=noise_rng), f"OLU_PRIVACY_UNIT={unit} (defaults: no rotation)"


# --------------------------------------------------------------------------- report
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--classes", default=",".join(CLASSES))
    ap.add_argument("--shares", default=",".join(map(str, SHARES)))
    ap.add_argument("--sim-events", type=int, default=200_000, help="the planner's simulated length")
    args = h.arguments(ap, argv, quick="3e4 events, 1 seed, classes uniform and accounts, share 2%")
    marks = CHECKPOINTS
    if args.quick:
        args.events, args.seeds, args.classes, args.shares, args.sim_events = 30_000, 1, "uniform,accounts", "0.02", 20_000
        marks = (10_000, 20_000, 30_000)
    info = h.machine()
    print(h.machine_line(info))
    started = time.perf_counter()
    rows_out = []
    for cls in args.classes.split(","):
        for share in (float(s) for s in args.shares.split(",")):
            for seed in range(args.seeds):
                rows_out += cell(cls, share, seed, args.events, marks, args.sim_events)
    cells = summarise(rows_out, marks)
    checks = Checks()
    print("\ntargets (mean over seeds):")
    for c in cells:
        where = f"{c['class']}, {c['share']:.1%}"
        gap = max(c["gaps"]["plan per-request"][1:])  # at the two later checkpoints
        checks.check(PLAN_GAP if c["share"] < 0.01 else PLAN_GAP_2, gap, where=where)
        for unit in ("per-request", "all-deletions"):
            err = abs(c["predicted"][unit] - c["mean"][f"plan {unit}"][-1]) * 100
            checks.check(PREDICTION, err, where=f"{where}, {unit}")
            agrees = c["warned"][unit] == (c["gaps"][f"plan {unit}"][-1] > 3.0)
            checks.check(WARNING, 1.0 if agrees else 0.0, where=f"{where}, {unit}",
                         note=f"warned {c['warned'][unit]}, gap {c['gaps'][f'plan {unit}'][-1]:.1f}")
        checks.check(DEFAULTS, c["gaps"]["default per-request"][-1], where=where)
    report = {"machine": info, "wall_s": time.perf_counter() - started,
              "setup": {"events": args.events, "seeds": args.seeds, "checkpoints": list(marks),
                        "classes": args.classes.split(","), "shares": [float(s) for s in args.shares.split(",")],
                        "sim_events": args.sim_events, "sample_events": SAMPLE_EVENTS, "test_rows": TEST_ROWS,
                        "keys": KEYS, "key_skew": KEY_SKEW, "account_cap": ACCOUNT_CAP},
              "rows": rows_out, "cells": cells}
    return h.finish("deletion_workloads", report, args.out, checks=checks, plot=lambda path: plot(cells, marks, path))


def summarise(rows_in: list[dict], marks) -> list[dict]:
    """Per (class, share): the mean accuracy of each configuration, its gaps to OGD in points, the
    predictions and warnings of the plan (mean over seeds; warned when most seeds warned)."""
    out = []
    for cls, share in dict.fromkeys((r["class"], r["share"]) for r in rows_in):
        mine = [r for r in rows_in if r["class"] == cls and r["share"] == share]
        configs = list(dict.fromkeys(r["config"] for r in mine))
        mean = {c: np.mean([r["accuracy"] for r in mine if r["config"] == c], axis=0).tolist() for c in configs}
        gaps = {c: [100 * (o - a) for o, a in zip(mean["ogd"], mean[c])] for c in configs}
        planned = {u: [r for r in mine if r["config"] == f"plan {u}"] for u in ("per-request", "all-deletions")}
        out.append({"class": cls, "share": share, "mean": mean, "gaps": gaps,
                    "predicted": {u: float(np.mean([r["predicted"] for r in rs])) for u, rs in planned.items()},
                    "warned": {u: sum(r["warned"] for r in rs) * 2 > len(rs) for u, rs in planned.items()},
                    "settings": {u: rs[0]["settings"] for u, rs in planned.items()}})
    return out


def render(report: dict) -> str:
    s = report["setup"]
    marks = ", ".join(f"{c:,}" for c in s["checkpoints"])
    lines = [f"{s['events']:,} events, d = 10 logistic, epsilon 1 at delta 1e-5, mean of {s['seeds']} seed(s); "
             f"accuracy of the released model at {marks} events (points below plain OGD in brackets); the planner "
             f"simulated {s['sim_events']:,} events on a {s['sample_events']:,}-event sample of another stream "
             "of the class.", "",
             "| class, deleted | OGD | plan per-request (predicted) | plan all-deletions (predicted) | "
             "default per-request | default all-deletions |", "|---|---|---|---|---|---|"]
    for c in report["cells"]:
        def cellv(name, predicted=None):
            vals = " ".join(f"{a:.3f}" for a in c["mean"][name])
            gap = c["gaps"][name][-1]
            return vals + (f" ({gap:+.1f})" if name != "ogd" else "") + (
                f" [{predicted:.3f}]" if predicted is not None else "")

        lines.append(f"| {c['class']}, {c['share']:.1%} | {cellv('ogd')} | "
                     f"{cellv('plan per-request', c['predicted']['per-request'])} | "
                     f"{cellv('plan all-deletions', c['predicted']['all-deletions'])} | "
                     f"{cellv('default per-request')} | {cellv('default all-deletions')} |")
    lines += ["", "The planner's recommendations:"]
    for c in report["cells"]:
        for unit, setting in c["settings"].items():
            lines.append(f"- {c['class']}, {c['share']:.1%}, {unit}: `{setting}`"
                         + (" (warned)" if c["warned"][unit] else ""))
    accounts = [c for c in report["cells"] if c["class"].endswith("accounts")]
    if accounts:
        cap = report["setup"]["account_cap"]
        lines += ["", f"Account deletions with and without `OLU_MAX_RECORDS_PER_KEY={cap}` (the per-request "
                  "recommendation's rotation and l2), and OGD with the cap and no deletion:", ""]
        for c in accounts:
            for name in (f"plan per-request, cap {cap}", "plan per-request, no cap", f"ogd, cap {cap}"):
                if name in c["mean"]:
                    lines.append(f"- {c['class']}, {c['share']:.1%}, {name}: " + " ".join(f"{a:.3f}" for a in c["mean"][name])
                                 + f" ({c['gaps'][name][-1]:+.1f} points against OGD)")
    return "\n".join(lines)


def plot(cells: list[dict], marks, path: Path) -> None:
    plt = h.plt()
    fig, axes = plt.subplots(1, len(cells), figsize=(4 * len(cells), 3.5), squeeze=False)
    for ax, c in zip(axes[0], cells):
        for name, values in c["mean"].items():
            ax.plot(marks, values, marker="o", label=name, linestyle=":" if name.startswith("ogd") else "-")
        ax.set_title(f"{c['class']}, {c['share']:.1%} deleted")
        ax.set_xscale("log")
        ax.set_xlabel("events")
    axes[0][0].set_ylabel("accuracy of the release")
    axes[0][-1].legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
