"""Simulating a plan on a sample of the operator's events: the released model against plain OGD.

The sample's inserts are replayed in order (cycled, with fresh ids per pass, when the simulated
stream is longer than the sample) through the real engine, with synthetic deletion requests at
the plan's rate placed as the prediction places them
(:func:`~worker.olu.privacy.analysis.noise.plan_deletions`). Deletion j, at step tau_j, names a
record drawn uniformly (seeded) among the still-present records of the last ``age`` steps.

Scoring is prequential on releases: the stream is cut into blocks, and each block's events are
predicted by the model released before the block (a release every block), then learned. The
score of a run is over the last quarter of the stream (the steady state the deployment lives in):
accuracy for logistic (sign of w.x against the label), RMSE for ridge. Plain OGD is the same engine
on the same inserts with no deletion (hence no noise): what the data allows without unlearning.
"""

from __future__ import annotations

import math

import numpy as np

from ..olu import arith
from ..olu.privacy.analysis.noise import plan_deletions

__all__ = ["L2_FACTORS", "RENEWAL_L2_FACTORS", "RENEWAL_LIFETIMES", "TAIL", "deletion_steps", "metric_name",
           "renewal_events", "replay", "simulate", "simulate_renewal", "stream"]

#: The l2 values compared: the configured one and these multiples of it.
L2_FACTORS = (0.3, 1.0, 3.0, 10.0)
#: Share of the stream (its end) over which a run's score is taken.
TAIL = 0.25
BLOCKS = 100
WINDOWS = 20


def metric_name(loss: str) -> str:
    return "rmse" if loss == "ridge" else "accuracy"


def stream(sample, steps: int):
    """(ids, X, y) of ``steps`` inserts: the sample cycled, ids suffixed ``#<pass>`` after the first pass."""
    n = len(sample)
    rows = np.arange(steps) % n
    ids = [sample.ids[r] if j < n else f"{sample.ids[r]}#{j // n}" for j, r in enumerate(rows)]
    return ids, sample.X[rows], sample.y[rows]


def deletion_steps(taus: list[int], age: int, seed: int) -> list[int]:
    """The 1-based insert step each deletion names: uniform over the still-present records of the
    ``age`` steps up to its time (widened to all earlier steps if those are all deleted)."""
    rng = np.random.default_rng(seed)
    used: set[int] = set()
    out = []
    for tau in taus:
        lo = max(1, tau - max(age, 1) + 1)
        for _ in range(64):
            u = int(rng.integers(lo, tau + 1))
            if u not in used:
                break
        else:
            free = [v for v in range(tau, 0, -1) if v not in used]
            if not free:
                raise ValueError(f"no record left to delete at step {tau}")
            u = free[0]
        used.add(u)
        out.append(u)
    return out


def replay(model, ids, X, y, taus, victims, *, loss: str, blocks: int = BLOCKS):
    """Run ``model`` over the inserts with the deletions (victim ids at steps ``taus``, each after
    that step); returns (final released weights, per-block (count, score sum) array).

    The score sum is correct predictions (logistic) or squared errors (ridge) of the block's
    inserts under the release before the block. Each victim is one deletion request naming it.
    """
    steps = len(ids)
    size = max(1, math.ceil(steps / blocks))
    edges = list(range(0, steps, size)) + [steps]
    by_step: dict[int, list[str]] = {}
    for tau, victim in zip(taus, victims):
        by_step.setdefault(tau, []).append(victim)
    due = sorted(by_step)
    scores = np.zeros((len(edges) - 1, 2))
    nxt = 0
    for b, (lo, hi) in enumerate(zip(edges, edges[1:])):
        w = np.array(model.weights, np.float64)
        pred = arith.matvec(X[lo:hi], w)  # the same bits on every CPU: the report is reproducible
        if loss == "ridge":
            scores[b] = (hi - lo, float(np.sum((pred - y[lo:hi]) ** 2)))
        else:
            scores[b] = (hi - lo, float(np.sum(np.where(pred >= 0.0, 1.0, -1.0) == y[lo:hi])))
        start = lo
        while nxt < len(due) and due[nxt] <= hi:
            tau = due[nxt]
            if tau > start:
                model.learn_many(ids[start:tau], X[start:tau], y[start:tau])
                start = tau
            for victim in by_step[tau]:
                model.unlearn_request([victim])
            nxt += 1
        if hi > start:
            model.learn_many(ids[start:hi], X[start:hi], y[start:hi])
    return np.array(model.weights, np.float64), scores


def _score(scores: np.ndarray, loss: str) -> float:
    count, total = scores.sum(axis=0)
    return float(math.sqrt(total / count) if loss == "ridge" else total / count)


def _setup(sample, events: int, deletion_rate: float, age: int, seed: int):
    """What every simulation shares: the deletion plan, the stream, the victims and the scoring
    blocks (steps, taus, ids, X, y, victims, block size, blocks, the tail's slice of blocks)."""
    steps, taus = plan_deletions(events, deletion_rate)
    ids, X, y = stream(sample, steps)
    victims = [ids[u - 1] for u in deletion_steps(taus, age, seed)]
    size = max(1, math.ceil(steps / BLOCKS))
    n_blocks = math.ceil(steps / size)
    tail = slice(min(n_blocks - 1, int(n_blocks * (1 - TAIL))), None)
    return steps, taus, ids, X, y, victims, size, n_blocks, tail


def simulate(sample, make_engine, *, loss: str, l2_values, units, deletion_rate: float, events: int,
             age: int, seed: int) -> dict:
    """Score plain OGD and each unit's released model for every l2 (JSON-able result).

    ``make_engine(l2, unit, noise_rng)`` builds a fresh engine (unit None: any, it sees no deletion).
    """
    steps, taus, ids, X, y, victims, size, n_blocks, tail = _setup(sample, events, deletion_rate, age, seed)
    per_window = max(1, math.ceil(n_blocks / WINDOWS))
    ends = [min(steps, (j + per_window) * size) for j in range(0, n_blocks, per_window)]
    deleted_by = np.searchsorted(np.array(taus, np.int64), np.array(ends), side="right")
    curve_events = [int(e + d) for e, d in zip(ends, deleted_by)]

    def window_scores(scores):
        return [_score(scores[j:j + per_window], loss) for j in range(0, n_blocks, per_window)]

    runs = []
    for l2 in l2_values:
        weights, scores = replay(make_engine(l2, None, np.random.default_rng(seed)), ids, X, y, [], [], loss=loss)
        run = {"l2": l2, "ogd": _score(scores[tail], loss), "ogd_weights_norm": arith.norm(weights),
               "units": {}, "curves": {"ogd": window_scores(scores)}}
        for unit in units:
            model = make_engine(l2, unit, np.random.default_rng(seed + 1))
            _, scores = replay(model, ids, X, y, taus, victims, loss=loss)
            run["units"][unit] = _score(scores[tail], loss)
            run["curves"][unit] = window_scores(scores)
        runs.append(run)
    return {"metric": metric_name(loss), "events": events, "steps": steps, "deletions": len(taus),
            "records": len(sample), "dropped": sample.dropped, "passes": math.ceil(steps / len(sample)),
            "seed": seed, "tail": TAIL, "curve_events": curve_events, "runs": runs}


#: Model lifetimes (OLU_MODEL_LIFETIME_EVENTS) the renewal simulation compares.
RENEWAL_LIFETIMES = (2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000)
#: The l2 values the renewal simulation compares: the configured one and 3x it (a larger l2 shrinks
#: the deletion noise as 1/mu and the weights less; smaller values only added noise in
#: bench/rotation_quality.py's runs).
RENEWAL_L2_FACTORS = (1.0, 3.0)
#: The renewal simulation runs ``min(events, max(RENEWAL_MIN, 3 x age))`` events, at most RENEWAL_MAX:
#: long enough for requests to name records older than a short-lived model (the steady state).
RENEWAL_MIN = 100_000
RENEWAL_MAX = 300_000


def renewal_events(events: int, age: int) -> int:
    """Stream length of the renewal simulation (see :data:`RENEWAL_MIN`).

    >>> renewal_events(1_000_000, 100_000), renewal_events(50_000, 100_000)
    (300000, 50000)
    """
    return min(events, RENEWAL_MAX, max(RENEWAL_MIN, 3 * age))


def simulate_renewal(sample, make_rotation, make_ogd, *, loss: str, l2_values, lifetimes, deletion_rate: float,
                     events: int, age: int, seed: int) -> dict:
    """Score warm-standby rotation (docs/accounting.md 12) on the sample for every (l2, lifetime),
    with plain OGD at each l2 for reference, as :func:`simulate` scores one model (the same
    deletion plan, victims and tail). Lifetimes longer than two thirds of the simulated stream are
    skipped (no steady state to score). ``make_rotation(l2, lifetime, noise_rng)`` returns
    ``(rotation, capacity)``; ``make_ogd(l2)`` a plain engine fed no deletion.

    ``best`` is the (l2, lifetime) whose released model scores best: the planner's recommendation,
    and its score the predicted steady-state accuracy (RMSE for ridge).
    """
    steps, taus, ids, X, y, victims, size, n_blocks, tail = _setup(sample, events, deletion_rate, age, seed)
    usable = [e for e in lifetimes if 3 * e <= 2 * steps] or [min(lifetimes)]
    better = max if metric_name(loss) == "accuracy" else min
    runs = []
    for l2 in l2_values:
        _, scores = replay(make_ogd(l2), ids, X, y, [], [], loss=loss)
        run = {"l2": l2, "ogd": _score(scores[tail], loss), "lifetimes": []}
        for lifetime in usable:
            model, capacity = make_rotation(l2, lifetime, np.random.default_rng(seed + 2))
            _, scores = replay(model, ids, X, y, taus, victims, loss=loss)
            run["lifetimes"].append({"lifetime": lifetime, "capacity": capacity, "score": _score(scores[tail], loss)})
        runs.append(run)
    cells = [(run, cell) for run in runs for cell in run["lifetimes"]]
    run, cell = better(cells, key=lambda rc: rc[1]["score"])
    best = {"l2": run["l2"], "lifetime": cell["lifetime"], "capacity": cell["capacity"], "score": cell["score"],
            "ogd": run["ogd"]}
    return {"metric": metric_name(loss), "events": events, "steps": steps, "deletions": len(taus), "seed": seed,
            "tail": TAIL, "variant": "overlap", "runs": runs, "best": best}
