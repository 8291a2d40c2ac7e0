"""zCDP (Bun & Steinke 2016): a mechanism is rho-zCDP when its Rényi divergence of every order
alpha > 1 is at most ``rho * alpha``. The Gaussian mechanism with l2-sensitivity ``Delta`` and
noise ``N(0, sigma^2 I)`` is ``Delta^2 / (2 sigma^2)``-zCDP, and rho adds up under composition.
Pure math; memory-pair's odometer (:mod:`..odometer`) calls it.
"""

from __future__ import annotations

import math

from .checks import positive, real

__all__ = ["dp_to_zcdp", "gaussian_rho", "gaussian_sigma", "zcdp_to_dp"]


def zcdp_to_dp(rho: float, delta: float) -> float:
    """(epsilon, delta)-DP of a rho-zCDP mechanism: ``rho + 2 sqrt(rho ln(1/delta))``
    (docs/accounting.md 3.3).

    >>> zcdp_to_dp(0.0, 1e-5), round(zcdp_to_dp(0.5, 1e-6), 6)
    (0.0, 5.756522)
    """
    rho = real("rho", rho, lo=0.0)
    delta = positive("delta", delta, upper=1.0)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def dp_to_zcdp(epsilon: float, delta: float) -> float:
    """The rho with ``zcdp_to_dp(rho, delta) == epsilon``:
    ``(sqrt(L + eps) - sqrt(L))^2``, L = ln(1/delta).

    Written as ``eps^2 / (sqrt(L + eps) + sqrt(L))^2`` (the same number without cancellation).

    >>> round(dp_to_zcdp(1.0, 1e-5), 6), round(dp_to_zcdp(10.0, 1e-5), 3)
    (0.02082, 1.55)
    """
    eps = positive("epsilon", epsilon)
    L = math.log(1.0 / positive("delta", delta, upper=1.0))
    return eps * eps / (math.sqrt(L + eps) + math.sqrt(L)) ** 2


def gaussian_sigma(sensitivity: float, rho: float) -> float:
    """Noise standard deviation that makes a Gaussian mechanism
    exactly rho-zCDP: ``Delta / sqrt(2 rho)``."""
    return positive("sensitivity", sensitivity) / math.sqrt(2.0 * positive("rho", rho))


def gaussian_rho(sensitivity: float, sigma: float) -> float:
    """zCDP of the Gaussian mechanism: ``Delta^2 / (2 sigma^2)``."""
    return 0.5 * (positive("sensitivity", sensitivity) / positive("sigma", sigma)) ** 2
