"""The ``olu-worker`` command line.

``demo`` runs on embedded defaults with nothing to set up. Until the streaming worker lands it
drives the OLU engine directly: one model per simulated partition, a synthetic stream with
deletions, progress on the terminal and a JSON summary with ``--json``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import orjson

from . import __version__
from .olu.base import ALGORITHMS
from .olu.passive import PassiveOLU


def _synthetic(n: int, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dim))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    w = rng.normal(size=dim)
    y = np.where(X @ w + 0.3 * rng.normal(size=n) >= 0, 1.0, -1.0)
    return X, y


def demo(args) -> int:
    cls = ALGORITHMS.get(args.algorithm, PassiveOLU)
    models = {p: cls(dim=args.dim, eps=args.eps) for p in range(args.partitions)}
    X, y = _synthetic(args.events, args.dim, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    deletions = releases = 0
    started = time.perf_counter()
    batch = 1000
    for start in range(0, args.events, batch):
        stop = min(start + batch, args.events)
        for p, model in models.items():
            rows = np.arange(start, stop)[np.arange(start, stop) % args.partitions == p]
            model.learn_many([f"r-{j}" for j in rows], X[rows], y[rows])
            # Delete a random earlier record of this partition at the configured rate.
            for _ in range(rng.binomial(len(rows), args.delete_rate)):
                victim = int(rng.integers(0, stop)) // args.partitions * args.partitions + p
                if victim < stop and model.unlearn_one(f"r-{victim}").changed_model:
                    deletions += 1
                    releases += 1
            releases += 1
        if not args.json:
            print(f"\r{stop:>10,} events  {deletions:>6,} deletions honoured", end="", file=sys.stderr)
    elapsed = time.perf_counter() - started
    summary = {
        "events_applied": sum(m.counters["applied"] for m in models.values()),
        "deletions_honoured": deletions,
        "releases": releases,
        "seconds": round(elapsed, 3),
        "partitions": {
            str(p): {"t": m.t, "deletions": m.accountant.deletions, **m.privacy(),
                     "weights": [round(float(v), 6) for v in m.weights]}
            for p, m in models.items()
        },
    }
    if args.json:
        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(file=sys.stderr)
        for p, part in summary["partitions"].items():
            print(f"partition {p}: t={part['t']:,} deletions={part['deletions']} "
                  f"epsilon(delta={part['delta']:g})={part['epsilon']:.4f} budget used={part['budget_used']:.3f}")
        print(f"{summary['events_applied']:,} events, {deletions:,} deletions in {elapsed:.2f}s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="olu-worker", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"olu-worker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run on embedded defaults (synthetic stream with deletions)")
    d.add_argument("--events", type=int, default=200_000, help="stop after N events (default 200000)")
    d.add_argument("--partitions", type=int, default=4)
    d.add_argument("--dim", type=int, default=10)
    d.add_argument("--eps", type=float, default=1.0, help="lifetime Renyi budget per model")
    d.add_argument("--delete-rate", type=float, default=0.01)
    d.add_argument("--algorithm", default="passive", choices=sorted(ALGORITHMS))
    d.add_argument("--seed", type=int, default=0, help="seed of the synthetic data (never of the noise)")
    d.add_argument("--json", action="store_true", help="print a final JSON summary")
    d.set_defaults(func=demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
