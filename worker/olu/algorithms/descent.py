"""Descent on retained data, the active algorithms' unlearning step: gradient steps on the average
loss of the retained examples from a given iterate (docs/algorithms.md 4.1, 5), and how many of
them a contraction target needs. Shared by the active algorithms and rewind-to-delete."""

from __future__ import annotations

import math

import numpy as np

from .. import arith
from ..core.base import OnlineUnlearner
from ..exceptions import ConfigError

__all__ = ["average_loss_descent", "iterations_for"]


def iterations_for(log_ratio: float, gamma: float) -> int:
    """Smallest I >= 0 with gamma^I <= exp(-log_ratio):
    ceil(log_ratio / ln(1/gamma)), 0 if log_ratio <= 0.

    >>> (iterations_for(math.log(100.0), 0.5), iterations_for(math.log(0.5), 0.5),
    ...  iterations_for(1.0, 0.0))
    (7, 0, 1)
    """
    if not log_ratio > 0.0:
        return 0
    if gamma <= 0.0:
        return 1  # one step lands on the minimiser exactly
    return max(0, math.ceil(log_ratio / -math.log(gamma)))


def average_loss_descent(model: OnlineUnlearner, z: np.ndarray, X: np.ndarray, y: np.ndarray,
                         n: int,
                         iterations: int, step: float) -> np.ndarray:
    """``iterations`` projected GD steps of size ``step`` on (1/n) sum_rows f(z; x, y).

    ``X``/``y`` may contain zero rows (deleted, see ``ExampleStore.padded``): for the logistic,
    softmax and squared losses their data gradient is exactly 0, and ``n`` counts only the live
    rows. Vectorised: two matrix-vector products per step (logistic); for ridge the Gram matrix X^T
    X/n is formed once and each step costs O(d^2).
    """
    loss, ball = model.loss, model.ball
    lam = loss.lam
    if n <= 0 or iterations <= 0:
        return z
    # Every product in the fixed order of arith.py: a retraining (rewind's, or a replay's) gives the
    # same bits on every CPU, whatever BLAS kernel or SIMD exp the process picked.
    if loss.name == "ridge":
        G = arith.gram(X) / n
        c = arith.rmatvec(X, y) / n
        for _ in range(iterations):
            z = ball.project(z - step * (arith.matvec(G, z) - c + lam * z))
        return z
    if loss.name.startswith("logistic"):
        for _ in range(iterations):
            m = arith.matvec(X, z) * y
            # d/dm log(1 + e^{-m}) = -1/(1 + e^m), with e = exp(-|m|) so that nothing overflows
            e = arith.exp(-np.abs(m))
            s = -y * np.where(m < 0, 1.0, e) / (1.0 + e)
            z = ball.project(z - step * (arith.rmatvec(X, s) / n + lam * z))
        return z
    if loss.name == "softmax":
        for _ in range(iterations):
            S = _softmax_residuals(loss, z, X, y)
            G = np.concatenate([arith.rmatvec(X, S[:, k]) for k in range(loss.k)])
            z = ball.project(z - step * (G / n + lam * z))
        return z
    raise ConfigError(f"no vectorised gradient for loss {loss.name!r}")


def _softmax_residuals(loss, z: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """p(x_r) - e_{y_r} for every row (n x K), in fixed-order arithmetic: each margin as arith.dot,
    exp through the C library, the class sums added column after column."""
    M = loss.margins_many(z, X)
    M -= M.max(axis=1, keepdims=True)
    E = arith.exp(M.ravel()).reshape(M.shape)
    total = np.zeros(len(X))
    for k in range(loss.k):
        total += E[:, k]
    S = E / total[:, None]
    S[np.arange(len(X)), y.astype(np.int64)] -= 1.0
    return S
