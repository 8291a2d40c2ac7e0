"""The feasible set K (an L2 ball) and the public feature-norm bound enforced at ingest.

Calibration needs public constants (design.md section 4, invariant 5): the radius r of K and a
bound R on feature norms. Features are bounded *at ingest* (clip or reject), never by clipping
gradients, which would change the update map and break the contraction argument (olu-spec 6.6.4).
"""

from __future__ import annotations

import math

import numpy as np

from ..exceptions import ConfigError, DimensionMismatch, InvalidFeatures, NonFiniteInput, NormExceeded

FEATURE_POLICIES = ("reject", "clip")


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
        norm = float(np.linalg.norm(z))
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

    def check(self, x) -> np.ndarray:
        # One code path with check_many, so learn_one and learn_many clip bit-identically.
        try:
            arr = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidFeatures(f"features are not an array of numbers ({type(exc).__name__})") from None
        if arr.ndim != 1:
            raise DimensionMismatch(f"expected {self.dim} features, got shape {arr.shape}")
        return self.check_many(arr[None, :])[0]

    def check_many(self, X) -> np.ndarray:
        """Vectorised :meth:`check`; raises on the first bad row (its index in the message)."""
        try:
            arr = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidFeatures(f"features are not a numeric matrix ({type(exc).__name__})") from None
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise DimensionMismatch(f"expected shape (n, {self.dim}), got {arr.shape}")
        norms = np.sqrt(np.einsum("ij,ij->i", arr, arr))
        bad = ~np.isfinite(norms)
        if bad.any():
            raise NonFiniteInput(f"row {int(np.argmax(bad))} contains NaN or infinity")
        over = norms > self.bound
        if over.any():
            # A vector normalised to R and written with ~6 significant digits lands slightly
            # above R; such rounding is clipped to R (still ||x|| <= R), not rejected.
            far = norms > self.bound * (1 + 1e-6)
            if self.policy == "reject" and far.any():
                row = int(np.argmax(far))
                raise NormExceeded(f"row {row}: feature norm exceeds the bound {self.bound:.6g}")
            arr = arr.copy()
            arr[over] *= (self.bound / norms[over])[:, None]
        return arr
