"""The planned-capacity budget split of the all-deletions unit (docs/accounting.md 11). Pure math.

A model lifetime plans ``K`` deletions (its capacity). Deletion ``i`` of the epoch spends the
fraction ``w_i`` of the lifetime slope ``rho``:

    w_i = (1 - r) / K                                     for i <= K   (even over the plan)
    w_i = r (omega - 1) / (omega j**omega),  j = i - K    for i > K    (reserve, omega-weighted)

and gets ``sigma_i = a_i sqrt(1 / (2 rho w_i))``, so ``a_i**2 / (2 sigma_i**2) = rho w_i``.

Why the total never exceeds rho: the first K weights sum to ``1 - r``. The overflow weights sum
to at most ``r (omega - 1) zeta(omega) / omega``, and ``zeta(omega) < 1 + 1/(omega - 1)`` (the
sum from j = 2 is below the integral of ``x**-omega`` from 1), so
``(omega - 1) zeta(omega) / omega < 1``: the whole infinite sum is below ``(1 - r) + r = 1``.
No deletion is ever refused, whatever the number of overflow deletions.

Why even over the plan: the release's noise variance is proportional to ``sum_i m_i**2`` with
``m_i = sigma_i / a_i`` (docs/accounting.md 11), ``sum 1 / (2 rho w_i)`` under ``sum w_i <= 1 - r``
is smallest for equal weights (Cauchy-Schwarz), so ``K**2 / (2 rho (1 - r))`` for K deletions,
against about ``1.36 k**2.2 / rho`` for the lifetime omega-weighted split.

>>> round(planned_weight(3, capacity=10, reserve=0.1), 12)
0.09
>>> round(planned_weight(11, capacity=10, reserve=0.1) / budget_weight(1), 12)
0.1
>>> planned_spent(10, capacity=10,
...               reserve=0.1) < 0.9 + 1e-12 < planned_spent(11, capacity=10, reserve=0.1)
True
"""

from __future__ import annotations

import math

from .checks import count, real
from .rdp import budget_weight

__all__ = ["SPLIT_NAMES", "capacity_for_rate", "planned_multiplier", "planned_spent",
           "planned_weight"]

#: The all-deletions splits: today's lifetime omega weights, and the planned capacity plus reserve.
SPLIT_NAMES = ("weighted", "planned")
DEFAULT_RESERVE = 0.1


def _plan(capacity, reserve, omega) -> tuple[int, float, float]:
    return (count("capacity", capacity, minimum=1),
            real("reserve", reserve, lo=0.0, hi=1.0, lo_open=True, hi_open=True),
            real("omega", omega, lo=1.0, lo_open=True))


def planned_weight(i: int, *, capacity: int, reserve: float = DEFAULT_RESERVE,
                   omega: float = 1.2) -> float:
    """Fraction ``w_i`` of the lifetime slope that deletion ``i`` (1-based, per epoch) spends.

    >>> planned_weight(1, capacity=4, reserve=0.2)
    0.2
    """
    i = count("i", i, minimum=1)
    capacity, reserve, omega = _plan(capacity, reserve, omega)
    if i <= capacity:
        return (1.0 - reserve) / capacity
    return reserve * budget_weight(i - capacity, omega)


def planned_multiplier(i: int, rho: float, *, capacity: int, reserve: float = DEFAULT_RESERVE,
                       omega: float = 1.2) -> float:
    """``sigma_i / a_i = sqrt(1 / (2 rho w_i))``.

    >>> planned_multiplier(5, 0.5, capacity=9, reserve=0.1)  # w = 0.1: sqrt(1 / 0.1)
    3.1622776601683795
    """
    rho = real("rho", rho, lo=0.0, lo_open=True)
    return math.sqrt(
        1.0 / (2.0 * rho * planned_weight(i, capacity=capacity, reserve=reserve, omega=omega)))


def planned_spent(n: int, *, capacity: int, reserve: float = DEFAULT_RESERVE,
                  omega: float = 1.2) -> float:
    """``sum_{i<=n} w_i``: the fraction of the slope that n
    calibrated deletions spend (< 1 for every n).

    >>> planned_spent(0, capacity=3), round(planned_spent(3, capacity=3), 12)
    (0.0, 0.9)
    """
    n = count("n", n, minimum=0)
    capacity, reserve, omega = _plan(capacity, reserve, omega)
    inside = (1.0 - reserve) * min(n, capacity) / capacity
    over = math.fsum(budget_weight(j, omega) for j in range(max(0, n - capacity), 0, -1))
    return inside + reserve * over


def capacity_for_rate(rate: float, lifetime_events: int) -> int:
    """The planned capacity of a model living ``lifetime_events`` events at a deletion ``rate``
    per event: ``ceil(rate * lifetime_events)``, at least 1.

    >>> capacity_for_rate(0.001, 200_000), capacity_for_rate(0.0, 10)
    (200, 1)
    """
    rate = real("rate", rate, lo=0.0, hi=1.0, hi_open=True)
    lifetime = count("lifetime_events", lifetime_events, minimum=1)
    return max(1, math.ceil(rate * lifetime - 1e-9))
