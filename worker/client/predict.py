"""What a release's weights predict for a feature vector, under each loss: the probability of
the positive class (logistic), w.x (ridge), or the probabilities and the label of the classes
(softmax, a K x dim weight matrix row by row)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

LOGISTIC_LOSSES = frozenset({"logistic", "logistic-unregularised"})
LINEAR_LOSSES = frozenset({"ridge"})
MULTICLASS_LOSSES = frozenset({"softmax"})  # K classes, K x dim weights (row k = classes[k])
LOSSES = LOGISTIC_LOSSES | LINEAR_LOSSES | MULTICLASS_LOSSES


def sigmoid(z: float) -> float:
    """Numerically stable logistic function."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def softmax(margins: np.ndarray) -> np.ndarray:
    """Numerically stable softmax: exp(m - max m), normalised (no overflow for any finite
    margin)."""
    e = np.exp(margins - np.max(margins))
    return e / e.sum()


def _probabilities(weights: np.ndarray, x: np.ndarray, classes: tuple) -> np.ndarray:
    return softmax(weights.reshape(len(classes), -1) @ x)  # row k of the K x dim matrix: class k


def class_probabilities(weights: np.ndarray, x: np.ndarray,
                        classes: tuple | None) -> dict[str | int, float]:
    """Softmax weights only: ``{class label: probability}`` for ``x``, in class order."""
    if classes is None:
        raise ValueError("predict_proba is for softmax releases; predict gives a logistic model's "
                         "probability")
    return dict(zip(classes, _probabilities(weights, x, classes).tolist(), strict=True))


def prediction(loss: str, weights: np.ndarray, x: np.ndarray,
               classes: tuple | None = None) -> float | str | int:
    """The probability of the positive class for the logistic losses, w.x for ridge, the most
    probable class label for softmax (``classes`` given)."""
    if classes is not None:  # the label of the largest probability, the first one on ties
        return classes[int(np.argmax(_probabilities(weights, x, classes)))]
    z = float(np.dot(weights, x))
    return sigmoid(z) if loss in LOGISTIC_LOSSES else z


def checked_vector(x: Sequence[float], dim: int) -> np.ndarray:
    """``x`` as a float64 vector, refused unless it has ``dim`` finite entries."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1 or arr.shape[0] != dim:
        raise ValueError(f"x must have {dim} features (the model's dim), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("x must be finite")
    return arr
