"""Losses with their public constants (docs/calibration.md 2.2), computed from configuration only.

Each loss knows, for the ball K of radius r and features with ||x|| <= R:

- ``L``: a Lipschitz bound of f over K (||grad f(z)|| <= L for every z in K), regulariser included;
- ``mu``: strong convexity (0 for the plain logistic loss);
- ``beta``: smoothness.

These constants are public and data-independent (docs/worker.md 4.5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..arith import dot, sqnorm
from ..exceptions import ConfigError, InvalidLabel


@dataclass(frozen=True)
class LossConstants:
    L: float
    mu: float
    beta: float


def _finite_label(y) -> float:
    try:
        value = float(y)
    except (TypeError, ValueError):
        raise InvalidLabel(f"label must be a number, got {type(y).__name__}") from None
    if not math.isfinite(value):
        raise InvalidLabel("label is NaN or infinite")
    return value


def _log1pexp(m: float) -> float:
    """log(1 + exp(m)) without overflow."""
    return m + math.log1p(math.exp(-m)) if m > 0 else math.log1p(math.exp(m))


class Logistic:
    """Logistic loss log(1 + exp(-y x.z)) + (lam/2)||z||^2, with y in {-1, +1} (0 maps to -1).

    With lam > 0 it is lam-strongly convex; with lam = 0 it is only convex.

    >>> c = Logistic(0.01).constants(radius=10.0, feature_bound=1.0)
    >>> (round(c.L, 6), c.mu, c.beta)
    (1.1, 0.01, 0.26)
    """

    name = "logistic"

    def __init__(self, lam: float = 0.0):
        if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam >= 0):
            raise ConfigError(f"l2 (lambda) must be a finite number >= 0, got {lam!r}")
        self.lam = float(lam)
        if self.lam == 0:
            self.name = "logistic-unregularised"

    @property
    def strongly_convex(self) -> bool:
        return self.lam > 0

    def constants(self, radius: float, feature_bound: float) -> LossConstants:
        R = feature_bound
        return LossConstants(L=R + self.lam * radius, mu=self.lam, beta=R * R / 4 + self.lam)

    def label(self, y) -> float:
        value = _finite_label(y)
        if value in (1.0, -1.0):
            return value
        if value == 0.0:
            return -1.0
        raise InvalidLabel("logistic labels are -1/+1 or 0/1")

    def derivative(self, margin: float, y: float) -> float:
        """d/d(x.z) of the data term at ``margin`` = x.z: the gradient is this times x, plus lam z."""
        m = y * margin
        # d/dm log(1+e^{-m}) = -1/(1+e^{m}); written to avoid overflow for large |m|.
        return -y / (1.0 + math.exp(m)) if m < 0 else -y * math.exp(-m) / (1.0 + math.exp(-m))

    def grad(self, z: np.ndarray, x: np.ndarray, y: float) -> np.ndarray:
        return self.derivative(dot(x, z), y) * x + self.lam * z

    def value(self, z: np.ndarray, x: np.ndarray, y: float) -> float:
        return _log1pexp(-y * dot(x, z)) + 0.5 * self.lam * sqnorm(z)

    def predict(self, z: np.ndarray, x: np.ndarray) -> float:
        """P(y = +1 | x)."""
        m = dot(x, z)
        return 1.0 / (1.0 + math.exp(-m)) if m >= 0 else math.exp(m) / (1.0 + math.exp(m))


class Ridge:
    """Squared loss (1/2)(x.z - y)^2 + (lam/2)||z||^2 with |y| <= label_bound (lam > 0).

    >>> c = Ridge(0.1, label_bound=1.0).constants(radius=1.0, feature_bound=1.0)
    >>> (round(c.L, 6), c.mu, round(c.beta, 6))
    (2.1, 0.1, 1.1)
    """

    name = "ridge"

    def __init__(self, lam: float, label_bound: float = 1.0):
        if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam > 0):
            raise ConfigError(f"l2 (lambda) must be a finite number > 0 for ridge, got {lam!r}")
        if not (isinstance(label_bound, (int, float)) and math.isfinite(label_bound) and label_bound > 0):
            raise ConfigError(f"label_bound must be a finite number > 0, got {label_bound!r}")
        self.lam, self.label_bound = float(lam), float(label_bound)

    strongly_convex = True

    def constants(self, radius: float, feature_bound: float) -> LossConstants:
        R, Y = feature_bound, self.label_bound
        return LossConstants(L=R * (R * radius + Y) + self.lam * radius, mu=self.lam, beta=R * R + self.lam)

    def label(self, y) -> float:
        value = _finite_label(y)
        if abs(value) > self.label_bound:
            raise InvalidLabel(f"ridge label exceeds the bound {self.label_bound!r}")
        return value

    def derivative(self, margin: float, y: float) -> float:
        """d/d(x.z) of the data term at ``margin`` = x.z."""
        return margin - y

    def grad(self, z: np.ndarray, x: np.ndarray, y: float) -> np.ndarray:
        return self.derivative(dot(x, z), y) * x + self.lam * z

    def value(self, z: np.ndarray, x: np.ndarray, y: float) -> float:
        r = dot(x, z) - y
        return 0.5 * r * r + 0.5 * self.lam * float(z @ z)

    def predict(self, z: np.ndarray, x: np.ndarray) -> float:
        return dot(x, z)


LOSSES = {"logistic": Logistic, "ridge": Ridge}


def make_loss(name: str, l2: float, label_bound: float = 1.0):
    """Build a loss from configuration names (``logistic`` with l2 = 0 is the convex variant)."""
    if name == "logistic":
        return Logistic(l2)
    if name == "ridge":
        return Ridge(l2, label_bound)
    raise ConfigError(f"loss must be one of {sorted(LOSSES)}, got {name!r}")
