"""OLU regret against the horizon T, next to the bound of docs/guarantee.md 2.6 ([P1] Thm 3.3) on one log-log plot.

Issue 6 item 3 (regret part). For each horizon T, a synthetic logistic stream of T events (d = 10,
||x|| <= 1, bench/_streams.py) with k = 10 deletions on the uniform schedule is fed event by event
(``learn_one``; the iterate z_t is read before example t is learned, so f_t(z_t) is exactly the
loss the algorithm pays) to every algorithm, built as the worker builds it (worker defaults:
l2 = 0.01, radius 10, schedule strongly convex with t0 = (beta/mu - 1)/2 = 12.5).

Regret is docs/guarantee.md 2.5 (eq. (5)-(6)): with intervals I_i between deletion times and the
whole-horizon comparators z_i* = argmin_{z in K} sum_{t<=T} f_t(z) - sum_{j<=i} f_{u[j]}(z),

    Regret_T = sum_i sum_{t in I_i} [ f_t(z_t) - f_t(z_i*) ],   f_t(z) = log(1 + e^{-y x.z}) + (l2/2)||z||^2.

The comparators are solved to machine precision by projected Newton (each step minimises the
quadratic model over the ball exactly, ``worker.olu.algorithms.newton.ball_constrained_quadratic_min``).

Bound drawn (docs/guarantee.md 2.6, [P1] Thm 3.3 with general L, expectation over the noise):

    B_T = (L^2/mu)(1 + log T + 2(k - 1)) + (3 d L^2 / (2 mu eps)) sum_i i^1.2 / tau[i]  + mu t0 D^2

where the last term is the shifted schedule's extra O(mu t0 D^2) (docs/calibration.md 2.3; constant taken as
1). Without the noise term this is also the bound for exact retraining. Slopes are least-squares
fits of log Regret against log T (on T >= 10^4 and on all T).

    .venv/bin/python bench/regret.py            # T up to 1e6, ~9 min on 2 busy cores
    .venv/bin/python bench/regret.py --quick    # T in 1e3, 3e3: seconds

Writes ``regret.json`` and ``.png`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import _streams as S  # noqa: E402

from worker.olu.algorithms.newton import ball_constrained_quadratic_min  # noqa: E402

K_DELETIONS = 10
ALGORITHMS = (("ogd", 1.0), ("retrain", 1.0), ("restart", 1.0), ("passive", 0.1), ("passive", 1.0),
              ("passive", 10.0), ("passive-restart", 1.0), ("active-d2d", 1.0), ("active-anchor", 1.0))
REPORT_KEYS = ("seconds", "setup", "rows", "slopes", "below_bound")
SERVICES = ()


def label(alg: str, eps: float) -> str:
    return alg if alg in S.EPS_FREE else f"{alg} eps={eps:g}"


# --------------------------------------------------------------------------- losses and comparators
def losses(X: np.ndarray, y: np.ndarray, Z: np.ndarray, lam: float) -> np.ndarray:
    """f_t(z_t) for every row (z_t = Z[t])."""
    m = np.einsum("ij,ij->i", X, Z)
    return np.logaddexp(0.0, -y * m) + 0.5 * lam * np.einsum("ij,ij->i", Z, Z)


def objective(X, y, w, z, lam) -> float:
    return float(w @ np.logaddexp(0.0, -y * (X @ z)) + 0.5 * lam * w.sum() * (z @ z))


def comparator(X, y, w, lam, radius, z0) -> np.ndarray:
    """argmin_{||z|| <= radius} sum_t w_t f_t(z) by projected Newton with backtracking."""
    z = z0.copy()
    n_w = float(w.sum())
    f = objective(X, y, w, z, lam)
    for _ in range(100):
        m = y * (X @ z)
        s = np.exp(-np.logaddexp(0.0, m))  # sigma(-m)
        g = -(X.T @ (w * y * s)) + lam * n_w * z
        H = (X.T * (w * s * (1.0 - s))) @ X + lam * n_w * np.eye(len(z))
        target = ball_constrained_quadratic_min(0.5 * (H + H.T), H @ z - g, radius)
        step = 1.0
        while True:
            cand = z + step * (target - z)
            fc = objective(X, y, w, cand, lam)
            if fc <= f + 1e-12 * abs(f) or step < 1e-8:
                break
            step *= 0.5
        moved = float(np.linalg.norm(cand - z))
        z, f = cand, min(f, fc)
        if moved < 1e-11 * max(1.0, float(np.linalg.norm(z))):
            break
    return z


def comparator_losses(data: S.Dataset, plan: S.DeletionPlan, lam: float, radius: float) -> tuple[np.ndarray, list]:
    """sum over each interval of f_t(z_i*), per event (array of T), and the comparators."""
    X, y = data.X, data.y
    w = np.ones(data.n)
    interval = np.searchsorted(plan.times, np.arange(data.n), side="right")  # deletions before event j
    out = np.empty(data.n)
    z = np.zeros(data.dim)
    zs = []
    for i in range(plan.k + 1):
        if i > 0:
            w[plan.records[i - 1]] = 0.0
        z = comparator(X, y, w, lam, radius, z)
        zs.append(z)
        rows = np.flatnonzero(interval == i)
        if len(rows):
            out[rows] = losses(X[rows], y[rows], np.broadcast_to(z, (len(rows), data.dim)), lam)
    return out, zs


# --------------------------------------------------------------------------- running one algorithm
def trajectory(model, data: S.Dataset, plan: S.DeletionPlan) -> np.ndarray:
    """z_t for every event (the iterate before example t is learned), deletions at their times."""
    Z = np.empty((data.n, data.dim))
    X, y, ids = data.X, data.y, data.ids
    di = 0
    for j in range(data.n):
        while di < plan.k and plan.times[di] <= j:
            model.unlearn_one(ids[plan.records[di]])
            di += 1
        Z[j] = model.z
        model.learn_one(ids[j], X[j], y[j])
    while di < plan.k:
        model.unlearn_one(ids[plan.records[di]])
        di += 1
    return Z


def bound(T: int, plan: S.DeletionPlan, constants, dim: int, eps: float | None, t0: float, radius: float) -> float:
    L, mu = constants.L, constants.mu
    k = plan.k
    b = (L * L / mu) * (1.0 + math.log(T) + 2.0 * (k - 1)) + mu * t0 * (2 * radius) ** 2
    if eps is not None:
        i = np.arange(1, k + 1, dtype=np.float64)
        b += 3.0 * dim * L * L / (2.0 * mu * eps) * float(np.sum(i ** 1.2 / np.maximum(plan.times, 1)))
    return b


def slope(Ts, values, t_min: float = 0) -> float | None:
    pts = [(math.log(t), math.log(v)) for t, v in zip(Ts, values) if t >= t_min and v is not None and v > 0]
    if len(pts) < 2:
        return None
    a = np.array(pts)
    return float(np.polyfit(a[:, 0], a[:, 1], 1)[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = h.arguments(ap, argv, quick="T in 1e3 and 3e3")
    info = h.machine()
    print(h.machine_line(info))
    horizons = [1_000, 3_000] + ([] if args.quick else [10_000, 30_000, 100_000, 300_000, 1_000_000])
    started = time.perf_counter()
    probe = S.make_model("passive", 10, "logistic", 1.0, K_DELETIONS)
    lam, radius, t0 = probe.loss.lam, probe.ball.radius, probe.schedule.t0
    constants = probe.constants
    print(f"worker defaults: l2 {lam}, radius {radius}, t0 {t0}, L {constants.L:.3g}, mu {constants.mu}, "
          f"beta {constants.beta}; k = {K_DELETIONS} uniform deletions")
    rows = []
    for T in horizons:
        data = S.synthetic_logistic(T, seed=1)
        plan = S.plan_deletions(T, 0.0, "uniform", np.random.default_rng([T, 7]), k=K_DELETIONS)
        t_cmp = time.perf_counter()
        comp, zs = comparator_losses(data, plan, lam, radius)
        comp_sum = float(comp.sum())
        t_cmp = time.perf_counter() - t_cmp
        row = dict(T=T, k=plan.k, deletion_times=plan.times, deleted_records=plan.records,
                   comparator_loss=comp_sum, comparator_seconds=t_cmp,
                   bound_passive={f"{e:g}": bound(T, plan, constants, data.dim, e, t0, radius)
                                  for e in (0.1, 1.0, 10.0)},
                   bound_exact=bound(T, plan, constants, data.dim, None, t0, radius), regret={}, seconds={})
        for alg, eps in ALGORITHMS:
            model = S.make_model(alg, data.dim, data.loss, eps, plan.k)
            t1 = time.perf_counter()
            Z = trajectory(model, data, plan)
            row["seconds"][label(alg, eps)] = time.perf_counter() - t1
            row["regret"][label(alg, eps)] = float(losses(data.X, data.y, Z, lam).sum()) - comp_sum
        rows.append(row)
        print(f"T = {T:>9,}: comparators {t_cmp:.1f} s; " + ", ".join(
            f"{name} {r:,.1f}" for name, r in row["regret"].items()))

    names = list(rows[0]["regret"])
    Ts = [r["T"] for r in rows]
    print(f"\n{'T':>9} | " + " | ".join(f"{n:>17}" for n in names) + f" | {'bound eps=1':>12} | {'bound exact':>12}")
    for r in rows:
        print(f"{r['T']:>9,} | " + " | ".join(f"{r['regret'][n]:17,.1f}" for n in names)
              + f" | {r['bound_passive']['1']:12,.0f} | {r['bound_exact']:12,.0f}")
    slopes = {}
    for n in names:
        vals = [r["regret"][n] for r in rows]
        slopes[n] = dict(all=slope(Ts, vals), from_1e4=slope(Ts, vals, 1e4),
                         negative_at=[t for t, v in zip(Ts, vals) if v <= 0])
    for e in ("0.1", "1", "10"):
        vals = [r["bound_passive"][e] for r in rows]
        slopes[f"bound passive eps={e}"] = dict(all=slope(Ts, vals), from_1e4=slope(Ts, vals, 1e4), negative_at=[])
    slopes["bound exact"] = dict(all=slope(Ts, [r["bound_exact"] for r in rows]),
                                 from_1e4=slope(Ts, [r["bound_exact"] for r in rows], 1e4), negative_at=[])
    print("\nlog-log slopes of regret vs T (least squares):")
    for n, s in slopes.items():
        fmt = lambda v: "   n/a" if v is None else f"{v:6.3f}"  # noqa: E731
        neg = f"  (regret <= 0 at T = {s['negative_at']}, left out)" if s["negative_at"] else ""
        print(f"  {n:28s} all T {fmt(s['all'])}   T >= 1e4 {fmt(s['from_1e4'])}{neg}")
    def own_bound(r, n):  # Thm 3.3 for passive at its eps; without the noise term for ogd / retrain
        return r["bound_passive"][n.split("eps=")[1]] if n.startswith("passive eps") else r["bound_exact"]

    within = {n: all(r["regret"][n] <= own_bound(r, n) for r in rows)
              for n in names if n in ("ogd", "retrain") or n.startswith("passive eps")}
    print("\nregret below its docs/guarantee.md 2.6 bound at every T: "
          + ", ".join(f"{n}: {'yes' if v else 'NO'}" for n, v in within.items()))
    seconds = time.perf_counter() - started
    print(f"total {seconds:.0f} s")

    report = dict(machine=info, seconds=seconds,
                  setup=dict(dim=10, k=K_DELETIONS, schedule="uniform", l2=lam, radius=radius, t0=t0, L=constants.L,
                             mu=constants.mu, beta=constants.beta),
                  rows=rows, slopes=slopes, below_bound=within)
    return h.finish("regret", report, args.out, plot=lambda path: plot(rows, names, slopes, path))


def fitted(slope: dict) -> float | None:
    """The slope on T >= 1e4 when the run reaches it, else on every T."""
    return slope["from_1e4"] if slope["from_1e4"] is not None else slope["all"]


def plot(rows: list[dict], names: list[str], slopes: dict, path: Path) -> None:
    Ts = [r["T"] for r in rows]
    pyplot = h.plt()
    fig, ax = pyplot.subplots(figsize=(9, 6))
    for n in names:
        vals = np.array([r["regret"][n] for r in rows])
        ok = vals > 0
        s = fitted(slopes[n])
        ax.plot(np.array(Ts)[ok], vals[ok], marker="o", label=f"{n} (slope {s:.2f})" if s is not None else n)
    for e, style in (("0.1", ":"), ("1", "--"), ("10", "-.")):
        vals = [r["bound_passive"][e] for r in rows]
        ax.plot(Ts, vals, color="black", ls=style, lw=1,
                label=f"Thm 3.3 bound, passive eps={e} (slope {fitted(slopes[f'bound passive eps={e}']):.2f})")
    ax.plot(Ts, [r["bound_exact"] for r in rows], color="grey", lw=2, alpha=0.6,
            label=f"Thm 3.3 bound without noise term (slope {fitted(slopes['bound exact']):.2f})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("horizon T (events)")
    ax.set_ylabel("OLU regret (docs/guarantee.md 2.5)")
    ax.set_title(f"Regret vs T, synthetic logistic d=10, k={K_DELETIONS} uniform deletions, worker defaults")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot.close(fig)


def render(report: dict) -> str:
    """The README table: regret of every algorithm per T, the bound at eps = 1, the slopes."""
    rows = report["rows"]
    names = list(rows[0]["regret"])
    lines = ["| T | " + " | ".join(names) + " | bound eps=1 |", "|---:|" + "---:|" * (len(names) + 1)]
    for r in rows:
        lines.append(f"| {r['T']:,} | " + " | ".join(f"{r['regret'][n]:,.3g}" if abs(r["regret"][n]) < 1000
                                                     else f"{r['regret'][n]:,.0f}" for n in names)
                     + f" | {r['bound_passive']['1']:,.0f} |")
    fit = "T >= 1e4" if any(s["from_1e4"] is not None for s in report["slopes"].values()) else "every T"
    lines += ["", f"Fitted log-log slopes ({fit}): " + ", ".join(
        f"{n} {fitted(s):.2f}" for n, s in report["slopes"].items() if fitted(s) is not None) + "."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
