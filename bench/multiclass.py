"""Multiclass (softmax) learning: plain OGD against River, the certified models, and the speed.

Streams, each in a fixed order, every row ||x|| <= 1 (``feature_bound`` 1):

- Shuttle (River's ``datasets.Shuttle``, bundled with river 0.26.1, offline): as River ships it,
  the UCI Statlog Shuttle data cast as anomaly detection, 49,097 rows, 9 integer sensor readings,
  2 classes (the original 7 are collapsed; there is no 7-class copy in River). Declared transform:
  each reading r becomes sign(r) log(1 + |r|) / log(1 + 2^15) (the readings are integers we take
  to lie within +-2^15: the map puts that range into [-1, 1] without looking at the data), a
  constant 1 appended, the row divided by sqrt(10); ``feature_policy="clip"`` for a reading beyond
  it. File order.
- digits (scikit-learn's bundled ``load_digits``, 1,797 rows, 10 classes, 64 pixels in [0, 16]
  by construction): x / 16, a constant 1, divided by sqrt(65). File order. The real stream with
  more than two classes (River bundles no multiclass stream longer than 2,310 rows).
- synthetic: K = 5 classes, d = 20, 1,000,000 events (``--quick``: 20,000): class means
  0.5 u_k with u_k seeded directions uniform on the sphere, a class drawn uniformly, x = its mean +
  N(0, 0.2^2 I), a row longer than 1 scaled back to norm 1. Seeded (stream seed 0).

Learners, prequential (each event predicted by the model before it, then learned; one event per
``learn_many`` call, ids hashed beforehand): plain OGD (the engine's ``ogd``, softmax, radius 10,
feature bound 1, the worker's defaults; l2 the best of the grid 0.01 (the default), 0.001, 0.0001
by prequential accuracy over River's prefix: the one thing tuned, per stream, and the l2 every
certified model is configured with); River's ``linear_model.SoftmaxRegression()`` with its
defaults (SGD, learning rate 0.01, no l2) on the same rows as dicts, on the whole stream or its
first ``--river-events`` (200,000; the engine's accuracy over the same prefix is the comparison); and
the certified model (passive OLU, target epsilon 1 at delta 1e-5) under each privacy unit, with
deletions of 0.5% of the events: one id per request, each naming an earlier insert drawn uniformly
from all those before it, never twice, at times uniform over the stream. Its configuration is the
planner's (worker/planning/search.py: rotation, lifetime, l2 searched on the stream's first
``--plan-events`` events and the deletions among them, as an operator's sample would be), or, when
the planner cannot plan softmax, passive OLU without rotation at the same l2 (said in the report).

Speed: ``learn_many`` events/s at d = 10, binary logistic against softmax K = 5, the same rows
(unit ball) and n, keys given, batches of 4,096, best of ``--repeat``; the softmax path is the
compiled one when the engine has it, else the pure-numpy step (the report says which).

    .venv/bin/python bench/multiclass.py            # a few minutes on 2 shared cores
    .venv/bin/python bench/multiclass.py --quick    # 20,000 synthetic events, seconds

Writes ``multiclass.json`` and ``multiclass.png`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import _privacy_runs as R  # noqa: E402
from _targets import SOFTMAX_X_LOGISTIC, SOFTMAX_X_RIVER_POINTS, Checks  # noqa: E402

from worker.olu import (  # noqa: E402
    PassiveOLU,
    PlainOGD,
    record_keys,  # noqa: E402
)
from worker.olu.privacy.analysis.units import UNITS  # noqa: E402

REPORT_KEYS = ("config", "streams", "speed", "targets", "wall_s")
SERVICES = ()

SETTINGS = dict(l2=0.01, radius=10.0, feature_bound=1.0)  # the worker's defaults, for every learner
#: The one thing tuned on each stream: plain OGD's l2, the best prequential accuracy over River's prefix.
L2_GRID = (0.01, 0.001, 0.0001)
EPSILON, DELTA = 1.0, 1e-5
DELETE_RATE = 0.005
SHUTTLE_RANGE = 2.0 ** 15  # readings taken to be within +-2^15 (their integer type), mapped to [-1, 1]
CURVE_POINTS = 100


# --------------------------------------------------------------------------- streams
@dataclass
class Stream:
    name: str
    X: np.ndarray  # (n, d), rows in the unit ball
    y: np.ndarray  # int64 class labels 0..K-1 (a label is its own position in classes)
    classes: list
    note: str

    @property
    def n(self) -> int:
        return len(self.y)

    @property
    def dim(self) -> int:
        return self.X.shape[1]


def _with_bias(F: np.ndarray) -> np.ndarray:
    """Features in [-1, 1] plus a constant 1, divided by sqrt(columns): rows in the unit ball."""
    X = np.hstack([F, np.ones((len(F), 1))])
    return np.ascontiguousarray(X / math.sqrt(X.shape[1]))


def shuttle() -> Stream:
    from river import datasets

    rows = list(datasets.Shuttle())
    names = sorted(rows[0][0])
    R_ = np.array([[x[k] for k in names] for x, _ in rows], np.float64)
    F = np.sign(R_) * np.log1p(np.abs(R_)) / math.log1p(SHUTTLE_RANGE)
    y = np.array([int(label) for _, label in rows], np.int64)
    return Stream("shuttle", _with_bias(np.clip(F, -1.0, 1.0)), y, [0, 1],
                  "River Shuttle as bundled (2 classes), signed log / log(1 + 2^15), bias, / sqrt(10)")


def digits() -> Stream:
    from sklearn.datasets import load_digits

    data = load_digits()
    return Stream("digits", _with_bias(data.data / 16.0), data.target.astype(np.int64), list(range(10)),
                  "scikit-learn digits (10 classes), x / 16, bias, / sqrt(65)")


def synthetic(n: int, seed: int = 0, k: int = 5, d: int = 20, spread: float = 0.2) -> Stream:
    means = np.random.default_rng(20261129).normal(size=(k, d))  # the same class means for every seed
    means *= 0.5 / np.linalg.norm(means, axis=1, keepdims=True)
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    X = means[y] + spread * rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    return Stream("synthetic", np.ascontiguousarray(X), y.astype(np.int64), list(range(k)),
                  f"K = {k} means 0.5 u_k on the sphere, x = mean + N(0, {spread:g}^2 I), rows over 1 scaled to 1")


# --------------------------------------------------------------------------- runs
def curve_marks(n: int) -> list[int]:
    return sorted({max(1, round(n * (i + 1) / CURVE_POINTS)) for i in range(CURVE_POINTS)})


def _current(model) -> np.ndarray:
    """The released parameter (the active model's under rotation), as a K x d view."""
    return getattr(model, "active", model).z


def prequential(model, s: Stream, keys: np.ndarray, plan: R.Plan | None = None, upto: int | None = None) -> dict:
    """Predict each event with the model before it (the class of the largest margin, the first on a
    tie), then learn it; the plan's deletions after their insert. Cumulative accuracy at the marks."""
    n = s.n if upto is None else upto
    k, d = len(s.classes), s.dim
    X, y = s.X, s.y
    marks = curve_marks(n)
    correct = np.zeros(n, np.bool_)
    times = plan.times.tolist() if plan is not None else []
    di, learn_s, delete_s = 0, 0.0, 0.0
    t0 = time.perf_counter()
    for j in range(n):
        correct[j] = int(np.argmax(_current(model).reshape(k, d) @ X[j])) == y[j]
        model.learn_many(None, X[j:j + 1], y[j:j + 1], keys=keys[j:j + 1])
        while di < len(times) and times[di] == j + 1:
            t1 = time.perf_counter()
            model.unlearn_request([f"r-{plan.records[di]}"])
            delete_s += time.perf_counter() - t1
            di += 1
    learn_s = time.perf_counter() - t0 - delete_s
    cum = np.cumsum(correct)
    return {"events": n, "accuracy": float(cum[-1] / n), "curve_x": marks,
            "curve": [float(cum[m - 1] / m) for m in marks], "requests": di, "learn_s": learn_s,
            "delete_s": delete_s}


def river_prequential(s: Stream, upto: int, lr: float | None) -> dict:
    from river import linear_model, optim

    model = linear_model.SoftmaxRegression(optimizer=optim.SGD(lr)) if lr else linear_model.SoftmaxRegression()
    names = [f"x{i}" for i in range(s.dim)]
    marks = curve_marks(upto)
    correct = np.zeros(upto, np.bool_)
    t0 = time.perf_counter()
    for j in range(upto):
        x = dict(zip(names, s.X[j].tolist()))
        yj = int(s.y[j])
        correct[j] = model.predict_one(x) == yj
        model.learn_one(x, yj)
    cum = np.cumsum(correct)
    return {"events": upto, "accuracy": float(cum[-1] / upto), "curve_x": marks,
            "curve": [float(cum[m - 1] / m) for m in marks], "seconds": time.perf_counter() - t0}


def ogd_model(s: Stream, **over):
    return PlainOGD(s.dim, loss="softmax", classes=s.classes, feature_policy="clip", **{**SETTINGS, **over})


def fallback_model(s: Stream, unit: str, l2: float, noise_rng):
    return PassiveOLU(s.dim, loss="softmax", classes=s.classes, feature_policy="clip", **{**SETTINGS, "l2": l2},
                      target_epsilon=EPSILON, delta=DELTA, privacy_unit=unit, noise_rng=noise_rng)


def planned(s: Stream, keys: np.ndarray, plan: R.Plan, plan_events: int, seed: int, l2: float, log) -> dict:
    """The planner's best configuration under each unit, searched on the stream's first ``plan_events``
    inserts and the requests among them; {"used": False, "why": ...} when it cannot plan softmax."""
    try:
        from worker.config import load_settings
        from worker.planning.search import search
        from worker.planning.target import resolve_target
        from worker.planning.workload import Workload

        argv = ["--dim", str(s.dim), "--loss", "softmax", "--classes", ",".join(map(str, s.classes)),
                "--l2", repr(l2), "--radius", repr(SETTINGS["radius"]), "--feature-bound",
                repr(SETTINGS["feature_bound"]), "--feature-policy", "clip", "--algorithm", "passive",
                "--target-epsilon", repr(EPSILON), "--delta", repr(DELTA)]
        settings = load_settings(argv, {}, command="plan")
        target = resolve_target(settings)
        m = min(plan_events, s.n)
        inside = plan.times <= m
        ids = [f"r-{j}" for j in range(m)]
        work = Workload(ids, s.X[:m], s.y[:m].astype(np.float64), keys[:m].copy(), plan.times[inside].astype(np.int64),
                        [(f"r-{r}",) for r in plan.records[inside].tolist()], "sample")
        t0 = time.perf_counter()
        found = search(settings, target, work, units=list(UNITS), seed=seed)
        log(f"  planner on {m:,} events ({int(inside.sum())} requests): {time.perf_counter() - t0:.1f} s")
        best = {u: {k: v for k, v in found["best"][u].items() if k != "curve"} for u in UNITS}
        return {"used": True, "events": m, "requests": int(inside.sum()), "ogd": found["ogd"], "best": best,
                "settings": settings, "target": target}
    except Exception as exc:  # the planner cannot plan softmax yet: the fallback, said in the report
        log(f"  planner unavailable for softmax ({type(exc).__name__}: {exc}); passive OLU without rotation")
        return {"used": False, "why": f"{type(exc).__name__}: {exc}"}


def certified_model(s: Stream, unit: str, plan_info: dict, l2: float, noise_rng):
    if not plan_info["used"]:
        return fallback_model(s, unit, l2, noise_rng)
    from worker.planning.search import Candidate, candidate_model

    b = plan_info["best"][unit]
    c = Candidate(unit, b["rotation"], b["lifetime"], b["l2"], b.get("cap"), b.get("radius"))
    return candidate_model(plan_info["settings"], plan_info["target"], c, b.get("capacity"), noise_rng)


def run_stream(s: Stream, cfg: dict, log) -> dict:
    keys = record_keys([f"r-{j}" for j in range(s.n)])
    river_n = min(s.n, cfg["river_events"])
    out = {"name": s.name, "note": s.note, "events": s.n, "classes": len(s.classes), "dim": s.dim,
           "param_dim": len(s.classes) * s.dim, "river_events": river_n}
    grid = {l2: prequential(ogd_model(s, l2=l2), s, keys, upto=river_n) for l2 in L2_GRID}
    l2 = max(L2_GRID, key=lambda v: grid[v]["accuracy"])  # the first of the best on a tie
    out["l2_grid"] = {f"{v:g}": grid[v]["accuracy"] for v in L2_GRID}
    out["l2"] = l2
    log(f"  {s.name}: plain OGD over the first {river_n:,}, by l2: "
        + ", ".join(f"{v:g} {100 * grid[v]['accuracy']:.2f} %" for v in L2_GRID) + f"; l2 {l2:g} taken")
    out["ogd"] = grid[l2] if river_n == s.n else prequential(ogd_model(s, l2=l2), s, keys)
    out["ogd_prefix"] = grid[l2]["accuracy"]
    log(f"  {s.name}: plain OGD {100 * out['ogd']['accuracy']:.2f} % over {s.n:,} ({out['ogd']['learn_s']:.1f} s)")
    out["river"] = river_prequential(s, river_n, cfg["river_lr"])
    log(f"  {s.name}: River {100 * out['river']['accuracy']:.2f} % over {river_n:,} "
        f"({out['river']['seconds']:.1f} s), OGD {100 * out['ogd_prefix']:.2f} % there")
    plan = R.plan_deletions(s.n, DELETE_RATE, np.random.default_rng([cfg["seed"], 1]), window=s.n)
    info = planned(s, keys, plan, cfg["plan_events"], cfg["seed"], l2, log)
    out["planner"] = {k: v for k, v in info.items() if k not in ("settings", "target")}
    out["certified"] = {}
    for ui, unit in enumerate(UNITS):
        model = certified_model(s, unit, info, l2, np.random.default_rng([cfg["seed"], 2, ui]))
        got = prequential(model, s, keys, plan)
        priv = model.privacy()
        got.update(config=(info["best"][unit]["settings"] if info["used"] else
                           f"OLU_PRIVACY_UNIT={unit} OLU_L2={l2:g} (no rotation; planner fallback)"),
                   gap_points=100 * (out["ogd"]["accuracy"] - got["accuracy"]),
                   epsilon=priv.get("epsilon"), privacy_unit=priv.get("unit", unit))
        out["certified"][unit] = got
        log(f"  {s.name}: {unit} eps {EPSILON:g}, {got['requests']} deletions: {100 * got['accuracy']:.2f} % "
            f"({got['gap_points']:+.2f} points below OGD) [{got['config']}] learn {got['learn_s']:.1f} s, "
            f"deletes {got['delete_s']:.1f} s")
    return out


# --------------------------------------------------------------------------- speed
def speed(n: int, repeat: int, batch: int = 4096) -> dict:
    rng = np.random.default_rng(5)
    d = 10
    X = rng.normal(size=(n, d))
    X *= (rng.random(n) / np.linalg.norm(X, axis=1))[:, None]
    y_class = rng.integers(0, 5, n).astype(np.int64)
    y_bin = np.where(y_class >= 2, 1.0, -1.0)
    keys = record_keys([f"r-{j}" for j in range(n)])

    def timed(make, y) -> float:
        make().learn_many(None, X[:batch], y[:batch], keys=keys[:batch])  # compile / load outside the timing
        best = math.inf
        for _ in range(repeat):
            model = make()
            t0 = time.perf_counter()
            for lo in range(0, n, batch):
                model.learn_many(None, X[lo:lo + batch], y[lo:lo + batch], keys=keys[lo:lo + batch])
            best = min(best, time.perf_counter() - t0)
        return n / best

    logistic = timed(lambda: PlainOGD(d, loss="logistic", **SETTINGS), y_bin)
    softmax_model = PlainOGD(d, loss="softmax", classes=list(range(5)), **SETTINGS)
    path = "compiled" if softmax_model.kernel_plan() is not None else "numpy"
    softmax = timed(lambda: PlainOGD(d, loss="softmax", classes=list(range(5)), **SETTINGS), y_class)
    return {"n": n, "dim": d, "classes": 5, "batch": batch, "repeat": repeat, "logistic_events_per_s": logistic,
            "softmax_events_per_s": softmax, "ratio": softmax / logistic, "softmax_path": path}


# --------------------------------------------------------------------------- report
def plot(streams: list[dict], path: Path) -> None:
    pyplot = h.plt()
    fig, axes = pyplot.subplots(1, len(streams), figsize=(5.2 * len(streams), 4.4))
    for ax, st in zip(np.atleast_1d(axes), streams):
        ax.plot(st["ogd"]["curve_x"], [100 * a for a in st["ogd"]["curve"]], "k-",
                label=f"plain OGD (engine, l2 {st['l2']:g})")
        ax.plot(st["river"]["curve_x"], [100 * a for a in st["river"]["curve"]], "C3--",
                label=f"River SoftmaxRegression ({st['river_events']:,})")
        for i, (unit, c) in enumerate(st["certified"].items()):
            ax.plot(c["curve_x"], [100 * a for a in c["curve"]], f"C{i}", alpha=0.85,
                    label=f"passive, {unit}, eps {EPSILON:g}, {c['requests']} deletions")
        ax.set_xscale("log")
        ax.set_xlabel("events")
        ax.set_ylabel("prequential accuracy so far (%)")
        ax.set_title(f"{st['name']}: K = {st['classes']}, d = {st['dim']}, {st['events']:,} events")
        curves = [st["ogd"]["curve"], st["river"]["curve"], *(c["curve"] for c in st["certified"].values())]
        lo = min(min(c[len(c) // 10:]) for c in curves)  # past the first tenth: the start is noise
        ax.set_ylim(max(0.0, 100 * lo - 3), 100)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot.close(fig)


def render(report: dict) -> str:
    lines = ["| stream | events | K x d | plain OGD (l2) | River (events) | OGD on River's events | River minus OGD "
             "| all-deletions, eps 1 | per-request, eps 1 | certified configuration |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for st in report["streams"]:
        cert = st["certified"]
        cells = [f"{100 * cert[u]['accuracy']:.2f} ({-cert[u]['gap_points']:+.2f}, {cert[u]['requests']} del.)"
                 if u in cert else "" for u in ("all-deletions", "per-request")]
        configs = "; ".join(f"{u}: `{c['config']}`" for u, c in cert.items())
        lines.append(f"| {st['name']} | {st['events']:,} | {st['classes']} x {st['dim']} | "
                     f"{100 * st['ogd']['accuracy']:.2f} ({st['l2']:g}) | {100 * st['river']['accuracy']:.2f} "
                     f"({st['river_events']:,}) | {100 * st['ogd_prefix']:.2f} | "
                     f"{100 * (st['river']['accuracy'] - st['ogd_prefix']):+.2f} | {cells[0]} | {cells[1]} | {configs} |")
    sp = report["speed"]
    grids = "; ".join(f"{st['name']} " + ", ".join(f"{k} {100 * v:.2f}" for k, v in st["l2_grid"].items())
                      for st in report["streams"])
    lines += ["", "Prequential accuracy %; certified: (difference to plain OGD, points; deletions). "
              f"Plain OGD over River's events by l2: {grids}. "
              f"Planner used: {', '.join(st['name'] + ' ' + ('yes' if st['planner']['used'] else 'no') for st in report['streams'])}.",
              "", "| `learn_many`, d = 10 | events/s | softmax / logistic | target |", "|---|---:|---:|---|",
              f"| logistic (binary) | {sp['logistic_events_per_s'] / 1e6:.2f} M |  |  |",
              f"| softmax K = 5 ({sp['softmax_path']} path) | {sp['softmax_events_per_s'] / 1e6:.2f} M | "
              f"{sp['ratio']:.2f}x | >= 0.3x {'MET' if sp['ratio'] >= SOFTMAX_X_LOGISTIC.threshold else 'NOT MET'} |"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="synthetic events (default 1,000,000)")
    ap.add_argument("--river-events", type=int, default=200_000, help="River's prefix of each stream")
    ap.add_argument("--river-lr", type=float, default=None, help="River's SGD learning rate (default: River's)")
    ap.add_argument("--plan-events", type=int, default=50_000, help="events the planner searches on")
    ap.add_argument("--speed-events", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = h.arguments(ap, argv, quick="20,000 synthetic events, planner on 5,000, speed on 50,000")
    if args.quick:
        args.events, args.plan_events, args.speed_events, args.repeat = 20_000, 5_000, 50_000, 2
    info = h.machine()
    print(h.machine_line(info))
    started = time.perf_counter()
    cfg = dict(events=args.events, river_events=args.river_events, river_lr=args.river_lr, l2_grid=list(L2_GRID),
               plan_events=args.plan_events, seed=args.seed, settings=SETTINGS, epsilon=EPSILON, delta=DELTA,
               delete_rate=DELETE_RATE, units=list(UNITS), shuttle_range=SHUTTLE_RANGE)
    print(f"config: {cfg}")
    streams = []
    for make in (shuttle, digits, lambda: synthetic(args.events, args.seed)):
        s = make()
        print(f"\n== {s.name}: {s.n:,} events, K = {len(s.classes)}, d = {s.dim} ({s.note}) ==")
        streams.append(run_stream(s, cfg, print))
    print("\n== speed: learn_many at d = 10 ==")
    sp = speed(args.speed_events, args.repeat)
    print(f"  logistic {sp['logistic_events_per_s']:,.0f} events/s, softmax K = 5 ({sp['softmax_path']}) "
          f"{sp['softmax_events_per_s']:,.0f} events/s: {sp['ratio']:.2f}x")

    print("\n== targets ==")
    checks = Checks()
    for st in streams:
        gap = 100 * (st["river"]["accuracy"] - st["ogd_prefix"])
        checks.check(SOFTMAX_X_RIVER_POINTS, gap, where=f"{st['name']}, {st['river_events']:,} events: OGD "
                     f"{100 * st['ogd_prefix']:.2f} % vs River {100 * st['river']['accuracy']:.2f} %")
    checks.check(SOFTMAX_X_LOGISTIC, sp["ratio"], where=f"{sp['n']:,} events, {sp['softmax_path']} softmax path")
    wall = time.perf_counter() - started
    report = dict(machine=info, config=cfg, streams=streams, speed=sp, targets=checks.results, wall_s=wall)
    return h.finish("multiclass", report, args.out, checks=checks, plot=lambda p: plot(streams, p))


if __name__ == "__main__":
    sys.exit(main())
