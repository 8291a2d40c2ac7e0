"""Every algorithm of the project on the same streams: accuracy, cost per deletion, epsilon, memory.

    .venv/bin/python bench/algorithms.py            # 4 streams (50k synthetic), 1% deletions, ~1.5 min
    .venv/bin/python bench/algorithms.py --quick    # 2 small streams, ~5 s

Each algorithm of ``worker.config.ALGORITHMS`` is built exactly as the worker builds it
(``_streams.make_model``: the worker's settings, ``max_deletions`` = the planned number of
deletions where the theory needs it). A random 20% of each dataset is held out; on the rest, in
arrival order, the model predicts each micro-batch (500 inserts, cut at every deletion) before
learning it (prequential, test-then-train), and the planned deletions (1% of the records by
default, ``uniform`` schedule of ``_streams.plan_deletions``) happen at their times; each
``unlearn_one`` is timed on its own.

Reported per (stream, algorithm): prequential accuracy (logistic) or mean squared error (ridge);
accuracy (MSE) of the final published weights on the held-out rows; distance of the final weights
to the retrained model (OGD over the retained records at their original steps,
``_streams.retrained_weights``); mean, median and p99 wall time of one deletion; learn throughput
(inserts / seconds inside learn_many); epsilon and delta reported by ``privacy()`` at the end and
the deletion capacity left; state size (``export_state()`` arrays) in bytes per retained record.
tracemalloc is not used: tracing every allocation slows the compiled learners several times and
would distort the throughput column. ``active-newton`` is ridge-only: it runs on the ridge twin of
each synthetic stream, is marked "(MSE)", and is listed as not run on the real datasets (never
silently skipped). Writes ``algorithms.json`` and ``.png`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import _streams as s  # noqa: E402

from worker.config import ALGORITHMS  # noqa: E402

RIDGE_ONLY = frozenset({"active-newton"})
BATCH = 500
HELDOUT = 0.2
REPORT_KEYS = ("config", "rows")
SERVICES = ()


def split(data: s.Dataset, seed: int) -> tuple[s.Dataset, s.Dataset]:
    """(stream, held-out): a random 20% of the rows is kept aside and never streamed."""
    perm = np.random.default_rng(seed + 100).permutation(data.n)
    cut = int(round(data.n * HELDOUT))
    return data.subset(np.sort(perm[cut:])), data.subset(np.sort(perm[:cut]))


def heldout_score(w: np.ndarray, data: s.Dataset) -> float:
    """Accuracy (logistic) or mean squared error (ridge) of weights ``w`` on ``data``."""
    margin = data.X @ w
    if data.loss == "ridge":
        return float(np.mean((margin - data.y) ** 2))
    return float(np.mean(np.where(margin >= 0, 1.0, -1.0) == data.y))


def streams(quick: bool) -> list[s.Dataset]:
    n = 5_000 if quick else 50_000
    out = [s.synthetic_logistic(n, d=10, seed=1), s.breast_cancer()]
    if not quick:
        out += [s.synthetic_logistic(n, d=50, seed=2), s.phishing()]
    return out


def ridge_twin(data: s.Dataset) -> s.Dataset | None:
    """The ridge stream of the same size and dimension (synthetic streams only)."""
    if not data.name.startswith("synthetic"):
        return None
    return s.synthetic_ridge(data.n, d=data.dim, seed=7)


def run(algorithm: str, data: s.Dataset, heldout: s.Dataset, plan: s.DeletionPlan, eps: float) -> dict:
    model = s.make_model(algorithm, data.dim, data.loss, eps, plan.k)
    X, y, ids, n = data.X, data.y, data.ids, data.n
    ridge = data.loss == "ridge"
    score = 0.0
    learn_s, delete_s, outcomes = 0.0, [], {}
    pos, di = 0, 0
    while True:
        while di < plan.k and plan.times[di] <= pos:
            t0 = time.perf_counter()
            outcome = model.unlearn_one(ids[plan.records[di]]).outcome
            delete_s.append(time.perf_counter() - t0)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            di += 1
        if pos >= n:
            break
        end = min(int(plan.times[di]) if di < plan.k else n, n, pos + BATCH)
        margin = X[pos:end] @ model.z
        score += float(np.sum((margin - y[pos:end]) ** 2) if ridge
                       else np.sum(np.where(margin >= 0, 1.0, -1.0) == y[pos:end]))
        t0 = time.perf_counter()
        model.learn_many(ids[pos:end], X[pos:end], y[pos:end])
        learn_s += time.perf_counter() - t0
        pos = end
    retrained = s.retrained_weights(data, plan, eps)
    final = model.weights
    arrays = model.export_state()["arrays"]
    privacy = model.privacy()
    retained = n - plan.k
    return {
        "algorithm": algorithm, "stream": f"{data.name}/d{data.dim}", "loss": data.loss, "n": n, "dim": data.dim, "k": plan.k,
        "metric": "mse" if ridge else "accuracy", "prequential": score / n,
        "heldout": heldout_score(final, heldout), "heldout_retrained": heldout_score(retrained, heldout),
        "distance_to_retrained": float(np.linalg.norm(final - retrained)),
        "delete_ms_mean": float(np.mean(delete_s) * 1e3), "delete_ms_p50": float(np.median(delete_s) * 1e3), "delete_ms_p99": float(np.percentile(delete_s, 99) * 1e3),
        "learn_events_per_s": n / learn_s, "epsilon": privacy.get("epsilon"), "delta": privacy.get("delta"),
        "capacity_left": privacy.get("deletions_capacity_left"),
        "state_bytes_per_record": sum(a.nbytes for a in arrays.values()) / retained, "outcomes": outcomes,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=0.01, help="share of records deleted")
    p.add_argument("--eps", type=float, default=1.0)
    p.add_argument("--algorithms", default=",".join(ALGORITHMS))
    p.add_argument("--seed", type=int, default=0)
    args = h.arguments(p, argv, quick="a 5,000-record synthetic d = 10 stream and breast_cancer")
    info = h.machine()
    print(h.machine_line(info))
    from worker.olu import warm_up

    warm_up()  # compile once, outside every timing
    rows = []
    for data in streams(args.quick):
        for algorithm in args.algorithms.split(","):
            source = ridge_twin(data) if algorithm in RIDGE_ONLY else data
            if source is None:
                rows.append({"algorithm": algorithm, "stream": f"{data.name}/d{data.dim}", "skipped": "ridge-only algorithm, logistic stream"})
                continue
            target, heldout = split(source, args.seed)
            plan = s.plan_deletions(target.n, args.rate, "uniform", np.random.default_rng(args.seed))
            rows.append(run(algorithm, target, heldout, plan, args.eps))
            r = rows[-1]
            print(f"{r['stream']:>22s} {algorithm:16s} {r['metric']:8s} {r['prequential']:7.4f}  "
                  f"held-out {r['heldout']:7.4f}  dist {r['distance_to_retrained']:8.3f}  delete p50 {r['delete_ms_p50']:9.3f} ms "
                  f"p99 {r['delete_ms_p99']:9.3f} ms  learn {r['learn_events_per_s']:12,.0f}/s  "
                  f"eps {r['epsilon'] if r['epsilon'] is not None else float('nan'):8.3f}  "
                  f"state {r['state_bytes_per_record']:8.1f} B/rec", flush=True)
    report = {"machine": info, "config": {"rate": args.rate, "eps": args.eps, "schedule": "uniform", "batch": BATCH,
                                          "quick": args.quick, "defaults": s.model_defaults()}, "rows": rows}
    print("\n" + render(report))
    return h.finish("algorithms", report, args.out, plot=lambda path: plot(rows, path))


def render(report: dict) -> str:
    """The whole run as one markdown table (the README's)."""
    lines = ["| stream | algorithm | prequential | held-out | dist. to retrained | delete mean / p99 (ms) "
             "| learn (events/s) | epsilon | capacity left | state (B/record) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['stream']} | {r['algorithm']} | not run: {r['skipped']} | | | | | | | |")
            continue
        mse = " (MSE)" if r["metric"] == "mse" else ""
        eps = "" if r["epsilon"] is None else f"{r['epsilon']:.2f}"
        cap = "" if r["capacity_left"] is None else f"{r['capacity_left']:,.0f}"
        lines.append(f"| {r['stream']} | {r['algorithm']} | {r['prequential']:.3f}{mse} | {r['heldout']:.3f}{mse} "
                     f"| {r['distance_to_retrained']:.3f} | {r['delete_ms_mean']:.3f} / {r['delete_ms_p99']:.2f} "
                     f"| {r['learn_events_per_s']:,.0f} | {eps} | {cap} | {r['state_bytes_per_record']:.1f} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    plt = h.plt()
    # A ridge-twin row (active-newton) is drawn in its synthetic stream's colour; its MSE is left
    # out of the accuracy panel.
    done = [dict(r, stream=r["stream"].replace("ridge-", "synthetic-")) for r in rows if "skipped" not in r]
    streams_ = sorted({r["stream"] for r in done})
    algos = sorted({r["algorithm"] for r in done})
    panels = [("heldout", "held-out accuracy of the final model", False),
              ("delete_ms_mean", "ms per deletion (mean)", True),
              ("epsilon", "epsilon at the end", True),
              ("state_bytes_per_record", "state bytes per retained record", True)]
    fig, axes = plt.subplots(1, 4, figsize=(20, 5))
    width = 0.8 / max(1, len(streams_))
    for ax, (key, title, log) in zip(axes, panels):
        for i, stream in enumerate(streams_):
            vals = []
            for a in algos:
                r = next((r for r in done if r["algorithm"] == a and r["stream"] == stream), None)
                v = None if r is None or (key == "heldout" and r["metric"] == "mse") else r.get(key)
                vals.append(np.nan if v is None or (log and v <= 0) else v)
            ax.bar(np.arange(len(algos)) + i * width, vals, width, label=stream)
        ax.set_xticks(np.arange(len(algos)) + 0.4 - width / 2)
        ax.set_xticklabels(algos, rotation=60, ha="right", fontsize=8)
        ax.set_title(title)
        if log:
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
