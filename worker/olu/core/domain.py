"""The feasible set K (an L2 ball) and the public feature-norm bound enforced at ingest.

Calibration needs public constants (docs/worker.md 4.5): the radius r of K and a
bound R on feature norms. Features are bounded *at ingest* (clip or reject), never by clipping
gradients, which would change the update map and break the
contraction argument (docs/calibration.md 2.1).
"""

from __future__ import annotations

import math

import numpy as np

from ..arith import row_sqnorms, sqnorm
from ..exceptions import (
    ConfigError,
    DimensionMismatch,
    InvalidFeatures,
    NonFiniteInput,
    NormExceeded,
)

FEATURE_POLICIES = ("reject", "clip")
_TINY = np.finfo(np.float64).tiny  # a sum of squares below it has lost precision to underflow
_MAX = np.finfo(np.float64).max


def row_norms(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Euclidean norm, all entries finite) of each row of a float64 matrix, without overflow.

    The plain sqrt(sum x_i^2) overflows once a coordinate passes ~1.3e154 and loses precision
    below ~1e-154; only such rows are recomputed, scaled by a power of two (exact), so every other
    row gets the plain value bit for bit. A finite row whose norm exceeds the largest double gets
    inf, which is still a norm over any bound; a row holding NaN or inf is marked not finite.

    >>> norms, finite = row_norms(
    ...     np.array([[3.0, 4.0], [1e200, 1e200], [1.5e308, 1.5e308], [np.nan, 0.0]]))
    >>> norms[:3].tolist(), finite.tolist()
    ([5.0, 1.414213562373095e+200, inf], [True, True, True, False])
    """
    with np.errstate(over="ignore"):
        # a sum of squares past the largest double is inf: rescaled below
        sq = row_sqnorms(X)
    norms = np.sqrt(sq)
    finite = np.ones(len(X), np.bool_)
    odd = np.flatnonzero(~((sq >= _TINY) & (sq <= _MAX)))  # NaN, inf, underflow or all zero
    if len(odd):
        rows = X[odd]
        ok = np.isfinite(rows).all(axis=1)
        finite[odd] = ok
        rows, odd = rows[ok], odd[ok]
        top = np.abs(rows).max(axis=1, initial=0.0)
        _, exp = np.frexp(top)  # top = m 2^exp with 0.5 <= m < 1 (exp 0 for an all-zero row)
        # entries within [-1, 1]: the squares cannot overflow
        scaled = np.ldexp(rows, -exp[:, None])
        with np.errstate(over="ignore"):  # a norm beyond the largest double is inf, as it should be
            norms[odd] = np.ldexp(np.sqrt(row_sqnorms(scaled)), exp)
    return norms, finite


class Ball:
    """K = {z : ||z||_2 <= radius}; projection is a rescale, diameter D = 2 r.

    >>> Ball(1.0).project(np.array([3.0, 4.0])).tolist()
    [0.6000000000000001, 0.8]
    >>> Ball(2.0).diameter
    4.0
    """

    def __init__(self, radius: float):
        if not (isinstance(radius, (int, float)) and math.isfinite(radius) and radius > 0):
            raise ConfigError(f"radius must be a finite number > 0, got {radius!r}")
        self.radius = float(radius)

    @property
    def diameter(self) -> float:
        return 2.0 * self.radius

    def project(self, z: np.ndarray) -> np.ndarray:
        norm = math.sqrt(sqnorm(z))  # the kernels' _project, bit for bit (arith.py)
        if norm <= self.radius:
            return z
        return z * (self.radius / norm)


class FeatureBound:
    """Checks one feature vector against the model's dimension and the public bound R.

    ``policy="reject"`` raises :class:`NormExceeded`; ``policy="clip"`` rescales x to norm R.
    Either way the returned vector satisfies ||x|| <= R, which is what makes L a valid bound.

    >>> FeatureBound(2, 1.0, "clip").check([3.0, 4.0]).tolist()
    [0.6000000000000001, 0.8]
    """

    def __init__(self, dim: int, bound: float, policy: str = "reject"):
        if not (isinstance(dim, int) and dim >= 1):
            raise ConfigError(f"dim must be an integer >= 1, got {dim!r}")
        if not (isinstance(bound, (int, float)) and math.isfinite(bound) and bound > 0):
            raise ConfigError(f"feature_bound must be a finite number > 0, got {bound!r}")
        if policy not in FEATURE_POLICIES:
            raise ConfigError(f"feature_policy must be one of {FEATURE_POLICIES}, got {policy!r}")
        self.dim, self.bound, self.policy = dim, float(bound), policy

    @property
    def rounding_limit(self) -> float:
        """The norm up to which a row over the bound is rounding (clipped even under ``reject``)."""
        return min(self.bound * (1 + 1e-6), _MAX)

    @property
    def untouched_sqnorm(self) -> float:
        """A squared norm at most this, however its terms were added, is within the bound: the
        row passes untouched (the compiled checks' quick test)."""
        return self.bound * self.bound * (1.0 - 1e-12)

    def check(self, x) -> np.ndarray:
        # One code path with check_many, so learn_one and learn_many clip bit-identically.
        try:
            arr = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidFeatures(
                f"features are not an array of numbers ({type(exc).__name__})") from None
        if arr.ndim != 1:
            raise DimensionMismatch(f"expected {self.dim} features, got shape {arr.shape}")
        return self.check_many(arr[None, :])[0]

    def check_many(self, X) -> np.ndarray:
        """Vectorised :meth:`check`; raises on the first bad row (its index in the message)."""
        try:
            arr = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidFeatures(
                f"features are not a numeric matrix ({type(exc).__name__})") from None
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise DimensionMismatch(f"expected shape (n, {self.dim}), got {arr.shape}")
        norms, finite = row_norms(arr)
        if not finite.all():
            raise NonFiniteInput(f"row {int(np.argmin(finite))} contains NaN or infinity")
        over = norms > self.bound
        if over.any():
            # A vector normalised to R and written with ~6 significant digits lands slightly
            # above R; such rounding is clipped to R (still ||x|| <= R), not rejected.
            far = norms > self.rounding_limit
            if self.policy == "reject" and far.any():
                row = int(np.argmax(far))
                raise NormExceeded(f"row {row}: feature norm exceeds the bound {self.bound:.6g}")
            arr = arr.copy()
            arr[over] = self._clip(arr[over], norms[over])
        return arr

    def _clip(self, rows: np.ndarray, norms: np.ndarray) -> np.ndarray:
        """``rows`` (norms over the bound) rescaled to norm <= R, direction kept, always finite."""
        with np.errstate(under="ignore"):
            factor = self.bound / norms
            out = rows * factor[:, None]
            # A factor that underflowed (R / ||x|| subnormal or 0) has lost its precision: take
            # x / ||x|| first, scaled by a power of two where ||x|| is beyond the largest double.
            lossy = np.flatnonzero(~(factor >= _TINY))
            if len(lossy):
                _, exp = np.frexp(np.abs(rows[lossy]).max(axis=1))
                scaled = np.ldexp(rows[lossy], -exp[:, None])
                unit = scaled / np.sqrt(row_sqnorms(scaled))[:, None]
                out[lossy] = unit * self.bound
            # rounding may leave the result an ulp or two over R: step it down until it is not
            for _ in range(64):
                still = np.flatnonzero(row_norms(out)[0] > self.bound)
                if not len(still):
                    break
                out[still] = np.nextafter(out[still], 0.0)  # one ulp towards zero, subnormals too
        return out
