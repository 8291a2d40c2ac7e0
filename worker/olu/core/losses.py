"""Losses with their public constants (docs/calibration.md 2.2), computed from configuration only.

Each loss knows, for the ball K of radius r and features with ||x|| <= R:

- ``L``: a Lipschitz bound of f over K (||grad f(z)|| <= L for every z in K), regulariser included;
- ``mu``: strong convexity (0 for the plain logistic loss);
- ``beta``: smoothness.

The parameter is a vector of ``param_dim(d)`` coordinates: d for the binary and linear losses, K d
for the K-class softmax (its K x d matrix, row k = class k, flattened row by row; norms of it are
the Frobenius norm, the l2 norm of the flat vector, so the ball, the projection and the noise are
those of a vector). These constants are public and data-independent (docs/worker.md 4.5).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np

from ..arith import dot, matvec, sqnorm
from ..exceptions import ConfigError, InvalidLabel
from ..formulas import log1pexp, logistic_derivative, ridge_derivative


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

    def param_dim(self, dim: int) -> int:
        return dim

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
        """d/d(x.z) of the data term at ``margin`` = x.z: the
        gradient is this times x, plus lam z."""
        return logistic_derivative(margin, y)

    def grad(self, z: np.ndarray, x: np.ndarray, y: float) -> np.ndarray:
        return self.derivative(dot(x, z), y) * x + self.lam * z

    def value(self, z: np.ndarray, x: np.ndarray, y: float) -> float:
        return log1pexp(-y * dot(x, z)) + 0.5 * self.lam * sqnorm(z)

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
        if not (isinstance(label_bound, (int, float)) and math.isfinite(label_bound)
                and label_bound > 0):
            raise ConfigError(f"label_bound must be a finite number > 0, got {label_bound!r}")
        self.lam, self.label_bound = float(lam), float(label_bound)

    strongly_convex = True

    def param_dim(self, dim: int) -> int:
        return dim

    def constants(self, radius: float, feature_bound: float) -> LossConstants:
        R, Y = feature_bound, self.label_bound
        return LossConstants(L=R * (R * radius + Y) + self.lam * radius, mu=self.lam,
                             beta=R * R + self.lam)

    def label(self, y) -> float:
        value = _finite_label(y)
        if abs(value) > self.label_bound:
            raise InvalidLabel(f"ridge label exceeds the bound {self.label_bound!r}")
        return value

    def derivative(self, margin: float, y: float) -> float:
        """d/d(x.z) of the data term at ``margin`` = x.z."""
        return ridge_derivative(margin, y)

    def grad(self, z: np.ndarray, x: np.ndarray, y: float) -> np.ndarray:
        return self.derivative(dot(x, z), y) * x + self.lam * z

    def value(self, z: np.ndarray, x: np.ndarray, y: float) -> float:
        r = dot(x, z) - y
        return 0.5 * r * r + 0.5 * self.lam * float(z @ z)

    def predict(self, z: np.ndarray, x: np.ndarray) -> float:
        return dot(x, z)


class Softmax:
    """Multinomial cross-entropy over K declared classes: log(sum_k exp(w_k.x)) - w_y.x
    + (lam/2)||W||_F^2, the parameter W a K x d matrix kept flat (row k = class k).

    Constants (docs/calibration.md 2.2): the data gradient is (p - e_y) x^T, whose Frobenius norm
    is ||p - e_y|| ||x|| <= sqrt(2) R; its Hessian (diag(p) - p p^T) (x) x x^T has eigenvalues at
    most ||x||^2 / 2 (Böhning's bound diag(p) - p p^T <= (I - 11^T/K)/2, itself <= I/2). So L =
    sqrt(2) R + lam r, beta = R^2 / 2 + lam, mu = lam.

    Labels are the declared classes (all strings or all integers); a label is learned as its
    position in ``classes``. An integer class also matches a float of the same value (JSON
    decoders read 2 and 2.0 alike).

    >>> loss = Softmax(0.01, ["cat", "dog", "owl"])
    >>> c = loss.constants(radius=10.0, feature_bound=1.0)
    >>> (round(c.L, 6), c.mu, c.beta, loss.param_dim(4))
    (1.514214, 0.01, 0.51, 12)
    >>> loss.label("owl"), loss.labels(["dog", "cat"]).tolist()
    (2.0, [1.0, 0.0])
    >>> loss.predict(np.zeros(6), np.array([0.5, 0.5])).round(4).tolist()
    [0.3333, 0.3333, 0.3333]
    """

    name = "softmax"

    def __init__(self, lam: float, classes):
        if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam >= 0):
            raise ConfigError(f"l2 (lambda) must be a finite number >= 0, got {lam!r}")
        self.lam = float(lam)
        self.classes = _declared_classes(classes)
        self.k = len(self.classes)
        self._index = {c: i for i, c in enumerate(self.classes)}
        #: the classes are names (strings), which inserts carry as their label, rather than integers
        self.named = type(self.classes[0]) is str
        # integer classes: their values sorted, with each one's position, for the vectorised check
        self._sorted = None if self.named else np.array(sorted(self.classes), np.float64)
        self._positions = None if self.named else np.array(
            [self._index[c] for c in sorted(self.classes)], np.float64)

    @property
    def strongly_convex(self) -> bool:
        return self.lam > 0

    def param_dim(self, dim: int) -> int:
        return self.k * dim

    def constants(self, radius: float, feature_bound: float) -> LossConstants:
        R = feature_bound
        return LossConstants(L=math.sqrt(2.0) * R + self.lam * radius, mu=self.lam,
                             beta=R * R / 2 + self.lam)

    def label(self, y) -> float:
        """The position of class ``y`` in ``classes``; ``InvalidLabel`` for anything else."""
        if isinstance(y, str) or type(y) is int:
            position = self._index.get(y)
        elif isinstance(y, (float,
                            np.floating)) and self._sorted is not None and float(y).is_integer():
            position = self._index.get(int(y))
        elif isinstance(y, np.integer) and self._sorted is not None:
            position = self._index.get(int(y))
        else:
            position = None
        if position is None or isinstance(y, str) != self.named:
            value = y.item() if isinstance(y, np.generic) else y
            shown = repr(value) if isinstance(value, (str, int, float)) else f"a {type(y).__name__}"
            raise InvalidLabel(f"label {shown[:80]} is not one of the {self.k} declared classes")
        return float(position)

    def labels(self, y) -> np.ndarray:
        """:meth:`label` of each item, float64 out; vectorised for numbers under integer classes."""
        numeric_vector = isinstance(y, np.ndarray) and y.dtype.kind in "fiu" and y.ndim == 1
        if self._sorted is not None and numeric_vector:
            arr = y.astype(np.float64)
            at = np.minimum(np.searchsorted(self._sorted, arr), self.k - 1)
            bad = self._sorted[at] != arr  # NaN is bad too
            if bad.any():
                self.label(y[int(np.argmax(bad))])  # raises the exact error of the loop
            return self._positions[at]
        if self.named and isinstance(y, np.ndarray) and y.dtype == object:
            with contextlib.suppress(KeyError, TypeError):  # a name none of the classes: below
                return np.fromiter(map(self._index.__getitem__, y), np.float64, len(y))
        return np.array([self.label(v) for v in y], np.float64)

    def margins(self, z: np.ndarray, x: np.ndarray) -> np.ndarray:
        """w_k.x for each class, each in the engine's order (arith.dot)."""
        d = len(x)
        return np.array([dot(z[k * d:(k + 1) * d], x) for k in range(self.k)])

    @staticmethod
    def margins_many(z: np.ndarray, X: np.ndarray) -> np.ndarray:
        """The margins of every row (n x K) under the flat K x d ``z``, each as :meth:`margins` adds
        it (arith.matvec: each row's dot product in the engine's order)."""
        d = X.shape[1]
        return np.stack([matvec(X, z[k * d:(k + 1) * d]) for k in range(len(z) // d)], axis=1)

    def probabilities(self, margins: np.ndarray) -> np.ndarray:
        """softmax(margins): exp(m_k - max m) through the C library's exp, summed class by class
        in order (the compiled kernel does the same operations)."""
        top = max(margins.tolist())
        e = [math.exp(m - top) for m in margins.tolist()]
        total = 0.0
        for v in e:
            total += v
        return np.array([v / total for v in e])

    def grad(self, z: np.ndarray, x: np.ndarray, y: float) -> np.ndarray:
        s = self.probabilities(self.margins(z, x))
        s[int(y)] -= 1.0
        return (s[:, None] * x[None, :]).ravel() + self.lam * z

    def value(self, z: np.ndarray, x: np.ndarray, y: float) -> float:
        m = self.margins(z, x)
        top = max(m.tolist())
        return top + math.log(
            sum(math.exp(v - top) for v in m.tolist())) - m[int(y)] + 0.5 * self.lam * sqnorm(z)

    def predict(self, z: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The class probabilities, in the order of ``classes``."""
        return self.probabilities(self.margins(z, x))


def _declared_classes(classes) -> tuple:
    """K >= 2 distinct class labels, all strings or all integers."""
    if classes is None or isinstance(classes, (str, bytes)):
        raise ConfigError(
            "loss 'softmax' needs classes: a list of at least 2 distinct labels (OLU_CLASSES)")
    labels = tuple(classes)
    kinds = {type(c) for c in labels}
    if len(labels) < 2 or not (kinds == {str} or kinds == {int}):
        raise ConfigError(
            f"classes must be at least 2 labels, all strings or all integers, got {list(labels)!r}")
    if len(set(labels)) != len(labels):
        raise ConfigError(f"classes must be distinct, got {list(labels)!r}")
    if kinds == {str} and not all(labels):
        raise ConfigError("classes: a class label must not be the empty string")
    return labels


LOSSES = {"logistic": Logistic, "ridge": Ridge, "softmax": Softmax}


def make_loss(name: str, l2: float, label_bound: float = 1.0, classes=None):
    """Build a loss from configuration names (``logistic`` with l2 = 0 is the convex variant);
    ``classes`` is for ``softmax`` only."""
    if classes is not None and name != "softmax":
        raise ConfigError(f"classes is for loss 'softmax', not {name!r}")
    if name == "logistic":
        return Logistic(l2)
    if name == "ridge":
        return Ridge(l2, label_bound)
    if name == "softmax":
        return Softmax(l2, classes)
    raise ConfigError(f"loss must be one of {sorted(LOSSES)}, got {name!r}")
