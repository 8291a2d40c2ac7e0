"""Replaying a deletion workload (worker/planning/workload.py) through the real engine, scored as a
subscriber sees the model.

Scoring is prequential on releases: the inserts are cut into blocks, and each block's inserts are
predicted by the model released before the block (a release every block), then learned, with the
requests that fall inside the block honoured in their place. A run's score is over the last quarter
of the stream (the steady state the deployment lives in): accuracy for logistic (sign of w.x against
the label), RMSE for ridge. Plain OGD is the same engine on the same inserts with no request (hence
no noise) and no per-key cap: what the data allows without unlearning.
"""

from __future__ import annotations

import math

import numpy as np

from ..olu import arith

__all__ = ["BLOCKS", "TAIL", "WINDOWS", "better", "metric_name", "replay", "score", "window_scores"]

#: Share of the stream (its end) over which a run's score is taken.
TAIL = 0.25
BLOCKS = 100
WINDOWS = 20


def metric_name(loss: str) -> str:
    return "rmse" if loss == "ridge" else "accuracy"


def better(metric: str):
    """``max`` or ``min``: how to pick the best score of ``metric``."""
    return max if metric == "accuracy" else min


def replay(model, workload, *, loss: str, requests: bool = True, blocks: int = BLOCKS) -> np.ndarray:
    """Run ``model`` over the workload's inserts (with its requests unless ``requests=False``);
    the per-block ``(count, score sum)`` array: correct predictions (logistic) or squared errors
    (ridge) of the block's inserts under the release before the block."""
    ids, X, y, subjects = workload.ids, workload.X, workload.y, workload.subjects
    steps = len(ids)
    size = max(1, math.ceil(steps / blocks))
    edges = list(range(0, steps, size)) + [steps]
    at = workload.at if requests else np.zeros(0, np.int64)
    scores = np.zeros((len(edges) - 1, 2))
    nxt = 0
    for b, (lo, hi) in enumerate(zip(edges, edges[1:])):
        pred = arith.matvec(X[lo:hi], np.array(model.weights, np.float64))  # the same bits on every CPU
        if loss == "ridge":
            scores[b] = (hi - lo, float(np.sum((pred - y[lo:hi]) ** 2)))
        else:
            scores[b] = (hi - lo, float(np.sum(np.where(pred >= 0.0, 1.0, -1.0) == y[lo:hi])))
        start = lo
        while nxt < len(at) and at[nxt] <= hi:
            if at[nxt] > start:
                model.learn_many(ids[start:at[nxt]], X[start:at[nxt]], y[start:at[nxt]],
                                 subjects=subjects[start:at[nxt]])
                start = int(at[nxt])
            model.unlearn_request(list(workload.requests[nxt]))
            nxt += 1
        if hi > start:
            model.learn_many(ids[start:hi], X[start:hi], y[start:hi], subjects=subjects[start:hi])
    return scores


def score(scores: np.ndarray, loss: str, tail: float = TAIL) -> float:
    """The score over the last ``tail`` share of the blocks."""
    n = len(scores)
    count, total = scores[min(n - 1, int(n * (1 - tail))):].sum(axis=0)
    return float(math.sqrt(total / count) if loss == "ridge" else total / count)


def window_scores(scores: np.ndarray, loss: str, windows: int = WINDOWS) -> list[float]:
    """The score over each of ``windows`` consecutive groups of blocks (a curve for the plot)."""
    per = max(1, math.ceil(len(scores) / windows))
    return [score(scores[j:j + per], loss, tail=1.0) for j in range(0, len(scores), per)]
