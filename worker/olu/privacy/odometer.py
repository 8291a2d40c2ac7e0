"""The zCDP deletion odometer of the Memory-Pair unlearner (docs/accounting.md 3).

zCDP (Bun & Steinke 2016; docs/accounting.md 3.1): a mechanism is rho-zCDP when the Rényi divergence
of every order alpha > 1 is at most ``rho * alpha`` (the paper's ``D_alpha <= rho`` drops the
alpha). The Gaussian mechanism with l2-sensitivity ``Delta`` and noise ``N(0, sigma^2 I)`` is
``Delta^2 / (2 sigma^2)``-zCDP, and rho adds up under composition.

Uniform allocation (docs/accounting.md 3.2): a budget ``rho_total`` and a deletion capacity ``m``
give every deletion ``rho_step = rho_total / m`` and noise ``sigma_step = Delta / sqrt(2
rho_step)``; after ``k`` deletions ``rho_spent = k rho_step``. A deletion is allowed while
``rho_spent + rho_step <= rho_total``, which under uniform allocation is the integer test ``k < m``
(no float rounding can let an (m+1)-th deletion through or refuse the m-th). The budget never
refills with inserts (docs/accounting.md 3.2); only a retrain on the retained data (a model that
depends on no deleted record) starts a new epoch at ``k = 0``.

Conversion (docs/accounting.md 3.3): ``eps = rho + 2 sqrt(rho ln(1/delta))`` and back,
``rho = (sqrt(ln(1/delta) + eps) - sqrt(ln(1/delta)))^2``. Because a rho-zCDP curve is exactly
the linear Rényi curve ``alpha * rho``, the engine's tighter conversion
(:func:`worker.olu.privacy.analysis.rdp.rdp_to_dp`, the default ``"improved"`` method) is valid too;
this module gives the closed form of docs/accounting.md 3.3.

The odometer is stateless: the deletion count ``k`` of the epoch lives in the model's
:class:`~worker.olu.privacy.accountant.PrivacyAccountant`,
which every release and snapshot already reads.

>>> odo = DeletionOdometer(rho_total=1.0, capacity=20, delta=1e-5)
>>> odo.rho_step, odo.allows(19), odo.allows(20), odo.capacity_left(7)
(0.05, True, False, 13)
>>> round(odo.sigma_step(1.0), 6)  # Delta / sqrt(2 rho_step) = 1 / sqrt(0.1)
3.162278
>>> round(odo.epsilon_spent(20), 4) == round(zcdp_to_dp(1.0, 1e-5), 4) == 7.7861
True
"""

from __future__ import annotations

from dataclasses import dataclass

from .analysis.checks import count, positive
from .analysis.zcdp import dp_to_zcdp, gaussian_rho, gaussian_sigma, zcdp_to_dp

__all__ = ["DeletionOdometer", "dp_to_zcdp", "gaussian_rho", "gaussian_sigma", "zcdp_to_dp"]


@dataclass(frozen=True)
class DeletionOdometer:
    """Uniform zCDP allocation of ``rho_total`` over ``capacity`` deletions (docs/accounting.md 3).

    ``delta`` is the delta at which epsilons are reported. Every method takes ``k``, the number
    of deletions already charged in the current epoch.
    """

    rho_total: float
    capacity: int
    delta: float = 1e-5

    def __post_init__(self):
        object.__setattr__(self, "rho_total", positive("rho_total", self.rho_total))
        count("capacity", self.capacity, minimum=1)
        object.__setattr__(self, "delta", positive("delta", self.delta, upper=1.0))

    @classmethod
    def from_dp(cls, epsilon: float, delta: float, capacity: int) -> DeletionOdometer:
        """The odometer whose whole budget converts to (epsilon, delta)-DP."""
        return cls(dp_to_zcdp(epsilon, delta), capacity, delta)

    @property
    def rho_step(self) -> float:
        """zCDP charged by each deletion: ``rho_total / capacity``."""
        return self.rho_total / self.capacity

    def sigma_step(self, sensitivity: float) -> float:
        """Per-deletion noise for a fixed, data-independent sensitivity (docs/calibration.md 6.1):
        ``Delta / sqrt(2 rho_step)``."""
        return gaussian_sigma(sensitivity, self.rho_step)

    def _k(self, k) -> int:
        return count("k (deletions charged)", k, minimum=0)

    def allows(self, k: int) -> bool:
        """Whether one more deletion fits: ``rho_spent + rho_step
        <= rho_total``, i.e. ``k < capacity``."""
        return self._k(k) < self.capacity

    def capacity_left(self, k: int) -> int:
        """Deletions the privacy budget still covers in this epoch: ``m - k`` (never negative)."""
        return max(0, self.capacity - self._k(k))

    def rho_spent(self, k: int) -> float:
        return self._k(k) * self.rho_step

    def epsilon_spent(self, k: int) -> float:
        """``eps_spent`` of docs/accounting.md 3.4: the spent rho converted at ``delta``."""
        return zcdp_to_dp(min(self.rho_spent(k), self.rho_total), self.delta)

    @property
    def epsilon_total(self) -> float:
        return zcdp_to_dp(self.rho_total, self.delta)

    def epsilon_remaining(self, k: int) -> float:
        """``eps_remaining = eps_total - eps_spent`` (docs/accounting.md 3.4)."""
        return max(0.0, self.epsilon_total - self.epsilon_spent(k))
