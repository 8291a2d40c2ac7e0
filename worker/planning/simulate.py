"""Replaying a deletion workload (worker/planning/workload.py) through the real engine, scored as a
subscriber sees the model.

Scoring is prequential on releases: the inserts are cut into blocks, and each block's inserts are
predicted by the model released before the block (a release every block), then learned, with the
requests that fall inside the block honoured in their place. A run's score is over the last quarter
of the stream (the steady state the deployment lives in): accuracy for logistic (sign of w.x against
the label) and for softmax (the multiclass rule: the class of the largest margin w_k.x, the first on
a tie, against the label), RMSE for ridge. A workload's labels are the loss's
(``loss.label``: a softmax class is its position in ``classes``); the model learns the class labels
themselves, as the worker does. Plain OGD is the same engine on the same inserts with no request
(hence no noise) and no per-key cap: what the data allows without unlearning.
"""

from __future__ import annotations

import math

import numpy as np

from ..olu import Softmax, arith

__all__ = ["BLOCKS", "TAIL", "WINDOWS", "better", "class_labels", "metric_name",
           "predicted_classes", "replay", "score", "window_scores"]

#: Share of the stream (its end) over which a run's score is taken.
TAIL = 0.25
BLOCKS = 100
WINDOWS = 20


def metric_name(loss: str) -> str:
    return "rmse" if loss == "ridge" else "accuracy"


def better(metric: str):
    """``max`` or ``min``: how to pick the best score of ``metric``."""
    return max if metric == "accuracy" else min


def replay(model, workload, *, loss: str, requests: bool = True,
           blocks: int = BLOCKS) -> np.ndarray:
    """Run ``model`` over the workload's inserts (with its requests unless ``requests=False``);
    the per-block ``(count, score sum)`` array: correct predictions (logistic, softmax) or squared
    errors (ridge) of the block's inserts under the release before the block."""
    ids, X, y, subjects = workload.ids, workload.X, workload.y, workload.subjects
    taught = class_labels(model.loss, y) if loss == "softmax" else y
    steps = len(ids)
    size = max(1, math.ceil(steps / blocks))
    edges = list(range(0, steps, size)) + [steps]
    at = workload.at if requests else np.zeros(0, np.int64)
    scores = np.zeros((len(edges) - 1, 2))
    nxt = 0
    for b, (lo, hi) in enumerate(zip(edges, edges[1:])):
        scores[b] = (hi - lo,
                     _block_score(loss, np.array(model.weights, np.float64), X[lo:hi], y[lo:hi]))
        start = lo
        while nxt < len(at) and at[nxt] <= hi:
            if at[nxt] > start:
                model.learn_many(ids[start:at[nxt]], X[start:at[nxt]], taught[start:at[nxt]],
                                 subjects=subjects[start:at[nxt]])
                start = int(at[nxt])
            model.unlearn_request(list(workload.requests[nxt]))
            nxt += 1
        if hi > start:
            model.learn_many(ids[start:hi], X[start:hi], taught[start:hi],
                             subjects=subjects[start:hi])
    return scores


def _block_score(loss: str, weights: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """Correct predictions (logistic: the sign of w.x; softmax: the class of the largest margin) or
    the sum of squared errors (ridge) of rows ``X`` with labels ``y`` under ``weights``."""
    if loss == "softmax":
        return float(np.sum(predicted_classes(weights, X) == y))
    pred = arith.matvec(X, weights)  # the same bits on every CPU
    if loss == "ridge":
        return float(np.sum((pred - y) ** 2))
    return float(np.sum(np.where(pred >= 0.0, 1.0, -1.0) == y))


def class_labels(loss, positions: np.ndarray) -> np.ndarray:
    """The softmax classes at ``positions`` (what ``loss.labels`` maps them from): Python strings in
    an object array, or integers."""
    classes = np.array(loss.classes, dtype=object if loss.named else np.int64)
    return classes[positions.astype(np.int64)]


def predicted_classes(weights: np.ndarray, X: np.ndarray) -> np.ndarray:
    """The position of each row's predicted class under the flat K x d ``weights``: the largest
    margin ``w_k.x`` (the first on a tie), each margin in the engine's fixed order."""
    return np.argmax(Softmax.margins_many(weights, X), axis=1).astype(np.float64)


def score(scores: np.ndarray, loss: str, tail: float = TAIL) -> float:
    """The score over the last ``tail`` share of the blocks."""
    n = len(scores)
    count, total = scores[min(n - 1, int(n * (1 - tail))):].sum(axis=0)
    return float(math.sqrt(total / count) if loss == "ridge" else total / count)


def window_scores(scores: np.ndarray, loss: str, windows: int = WINDOWS) -> list[float]:
    """The score over each of ``windows`` consecutive groups of blocks (a curve for the plot)."""
    per = max(1, math.ceil(len(scores) / windows))
    return [score(scores[j:j + per], loss, tail=1.0) for j in range(0, len(scores), per)]
