"""Noise you can see: how much deletion noise a release carries, and how much a plan will carry.

Pure math, no model: the schedule is any object with ``log_contraction(u, tau)`` (and ``eta(t)``
for the planner), e.g. :class:`worker.olu.core.schedules.Schedule`.

Indices (read off ``OnlineUnlearner._release_with_noise`` and ``Schedule``)
----------------------------------------------------------------------------
Paper time t is the number of examples applied in the epoch; example r is applied by step r with
step size eta_r and contraction gamma_r. A deletion's ledger entry records ``tau`` = the step
counter when its noise N(0, sigma**2 I) was added, i.e. after step tau and before step tau + 1. The
release at step t has since gone through steps tau + 1 .. t, whose contractions multiply to
``Gamma_{tau,t} = exp(schedule.log_contraction(tau, t))`` (the sum of log gamma_r for r = tau+1..t;
1 when t == tau: a release right after the deletion carries the noise undamped).

The accumulated noise of a release (:func:`release_noise_std`)
---------------------------------------------------------------
Let Z_t be the release and Z'_t an independent copy: the same stream and deletions, fresh noises
(each sigma_i is a function of public metadata, so it is the same in both). Both apply the same
maps: gamma_r-Lipschitz gradient steps and projections (1-Lipschitz), so between noises
``||Z_t - Z'_t||`` shrinks by gamma_r per step. At deletion i the difference gains
``xi_i - xi'_i``, independent of everything before and zero-mean, so in expectation the squared
distance gains ``E||xi_i - xi'_i||**2 = 2 d sigma_i**2`` with no cross term (independent zero-mean
noises add in variance; the projection after the noise only shrinks it). Unrolled,

    E||Z_t - Z'_t||**2 <= 2 d sum_i Gamma_{tau_i,t}**2 sigma_i**2,

and since ``E||Z - Z'||**2 = 2 tr Cov(Z)``, the per-coordinate variance pooled over the d
coordinates, ``tr Cov(Z_t) / d``, is at most ``sum_i Gamma_{tau_i,t}**2 sigma_i**2``. So the value
is a rigorous upper bound of the noise std per coordinate, for any loss, whenever the maps between
deletions are the schedule's gamma_r-contractions (extra contractive work between them, e.g. the
descent passes of the active algorithms, only lowers the truth).

When it is exact: with the projection inactive and a quadratic loss (ridge), the release is affine
in the noises, ``Z_t = z_t + sum_i A_i xi_i`` with ``A_i = prod_{r=tau_i+1}^t (I - eta_r (x_r x_r^T
+ lambda I))``, so ``tr Cov / d = sum_i sigma_i**2 ||A_i||_F**2 / d`` exactly. Each factor has its
eigenvalues in ``[1 - eta_r (lambda + ||x_r||**2), 1 - eta_r lambda]``, all of magnitude at most
gamma_r (= 1 - eta_r lambda on the regular steps of the strongly convex schedule, the top one):
the value is exact for the noise components that no later feature vector moves, and for isotropic
features of mean square norm s**2 it overstates each variance term by about
``Gamma**(-2 s**2 / (d lambda))`` (to first order in eta s**2; a few percent when s**2 / (d lambda)
is a few hundredths). With Gamma uniform over deletions that predicts measured/bound ratios of
sqrt(1/1.05) = 0.976 and sqrt(1/1.2) = 0.913 for s**2 / (d lambda) = 0.025 and 0.1; the engine
tests measure 0.976 and 0.914.
For logistic loss the curvature along the data is larger still than the bound assumes, which
makes the value more pessimistic (the tests measure how much).

Planning (:func:`predicted_noise_std`)
--------------------------------------
The same sum for a plan instead of a ledger: ``events`` stream events of which a fraction
``deletion_rate`` are deletions, placed uniformly (:func:`plan_deletions`), each deleting a record
applied ``age`` steps earlier. Its shift is ``a = Gamma_{u,tau} min(eta_u L, D)`` (the engine's
formula for one applied step) and its sigma follows the unit and split:

* ``all-deletions``, ``"weighted"`` (today's omega split): ``sigma_j = a_j sqrt(omega j**omega /
  (2 (omega - 1) rho))`` for the j-th deletion;
* ``all-deletions``, ``"even"`` over a planned capacity K >= k: ``sigma_j = a_j sqrt(K / (2 rho))``;
* ``per-request``: ``sigma_j = a_j / sqrt(2 rho)`` (:func:`.units.per_request_sigma`).

Under the shifted strongly convex schedule (``eta_t = 1/(mu (t + t0))``, ``Gamma_{u,tau} = (u + t0)
/ (tau + t0)``) every deletion costs the same at the end: ``Gamma_{tau_j,T} a_j = L / (mu (T +
t0))``, so the std is ``L / (mu (T + t0)) sqrt(sum_j m_j**2)`` with ``m_j = sigma_j / a_j``: about
``(L/mu) sqrt(k / (2 rho)) / T`` per request (falls like ``T**-1/2`` at a fixed rate), ``(L/mu) k /
(T sqrt(2 rho))`` for the even split with K = k (constant in T), and growing like ``T**0.1`` for
the omega = 1.2 weights. The function sums the exact schedule contraction rather than these
asymptotics, so early steps, the diameter cap and other schedules are counted as they are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ...formulas import passive_shift, sensitivity, shifted_log_contraction, strongly_convex_step
from .checks import count, positive, real
from .rdp import noise_multiplier
from .split import DEFAULT_RESERVE, planned_multiplier
from .units import UNITS, per_request_sigma
from .zcdp import gaussian_sigma

__all__ = ["SPLITS", "contract_variance", "noise_to_signal", "plan_deletions",
           "predicted_noise_growth", "predicted_noise_std", "release_noise_std"]

SPLITS = ("weighted", "even", "planned")


def contract_variance(var: float, log_factor: float) -> float:
    """``var * exp(2 log_factor)``, without an OverflowError: ``inf`` beyond the float range.

    The factor is taken in log space when ``exp`` alone would overflow (a long run of expansive
    steps); an underflow gives 0.0 (the noise contracted below anything a float can show).

    >>> contract_variance(4.0, math.log(0.5)), contract_variance(1e-300, 400.0) > 1e40
    (1.0, True)
    >>> contract_variance(1.0, 400.0), contract_variance(0.0, 400.0), contract_variance(1.0, -1e4)
    (inf, 0.0, 0.0)
    """
    x = 2.0 * log_factor
    if var == 0.0:
        return 0.0
    if x <= 709.0:
        return var * math.exp(x)
    y = math.log(var) + x
    return math.exp(y) if y < 709.0 else math.inf


def _accumulated_std(noises: list[tuple[int, float]], log_contraction, t: int) -> float:
    """sqrt(sum_i exp(2 log_contraction(tau_i, t)) sigma_i**2) for (tau_i, sigma_i) sorted by tau.

    Evaluated as the variance recursion of the coupled runs (contract by the steps between
    consecutive deletions, then add sigma**2): one contraction per gap instead of one per
    deletion over the whole span, and the same value by the additivity of log_contraction.
    """
    var, last = 0.0, None
    for tau, sigma in noises:
        if last is not None and tau > last:
            var = contract_variance(var, log_contraction(last, tau))
        var, last = var + sigma * sigma, tau
    if last is not None and t > last:
        var = contract_variance(var, log_contraction(last, t))
    return math.sqrt(var)


def release_noise_std(entries: Iterable[Mapping], schedule, t: int, *,
                      epoch: int | None = None) -> float:
    """Bound on the per-coordinate noise std of the release at step ``t`` from ledger entries.

    ``sqrt(sum_i exp(2 schedule.log_contraction(tau_i, t)) sigma_i**2)`` over the entries (of
    ``epoch`` only, when given: t is epoch-relative), each with its ``tau`` and ``sigma``. A
    rigorous upper bound of the pooled per-coordinate std ``sqrt(tr Cov / d)``; exact for ridge
    along the directions no later feature moves (module doc). Entries with sigma 0 (exact deletions)
    add nothing and are skipped; :class:`worker.olu.privacy.meter.NoiseMeter` keeps the same value
    incrementally.

    >>> class Halving:  # every step halves distances
    ...     def log_contraction(self, u, tau): return (tau - u) * math.log(0.5)
    >>> entries = [{"tau": 3, "sigma": 4.0, "epoch": 0}, {"tau": 5, "sigma": 3.0, "epoch": 0}]
    >>> release_noise_std(entries, Halving(), 5)  # sqrt((4 / 4)**2 + 3**2)
    3.1622776601683795
    >>> release_noise_std(entries, Halving(), 6), release_noise_std(entries, Halving(), 6, epoch=1)
    (1.5811388300841898, 0.0)
    """
    t = count("t", t, minimum=0)
    noises = []
    for j, entry in enumerate(entries):
        if epoch is not None and entry.get("epoch") != epoch:
            continue
        tau = count(f"entries[{j}].tau", entry.get("tau"), minimum=0, maximum=t)
        sigma = real(f"entries[{j}].sigma", entry.get("sigma"), lo=0.0)
        if sigma > 0.0:  # skipped, not added as 0: the same operations as NoiseMeter, bit for bit
            noises.append((tau, sigma))
    noises.sort(key=lambda pair: pair[0])
    return _accumulated_std(noises, schedule.log_contraction, t)


def noise_to_signal(std: float, dim: int, weights_norm: float) -> float | None:
    """``std sqrt(dim) / ||w||``: the noise norm one expects (RMS) relative to the weights' norm.

    Conventions for ``||w|| = 0``: ``inf`` when there is noise (noise with no signal), ``None``
    when there is none either (undefined, nothing to show). No noise on a nonzero w gives 0.0.

    >>> noise_to_signal(0.1, 4, 2.0), noise_to_signal(0.0, 4, 2.0)
    (0.1, 0.0)
    >>> noise_to_signal(0.1, 4, 0.0), noise_to_signal(0.0, 4, 0.0) is None
    (inf, True)
    """
    std = real("std", std, lo=0.0)
    dim = count("dim", dim, minimum=1)
    norm = real("weights_norm", weights_norm, lo=0.0)
    if norm == 0.0:
        return math.inf if std > 0.0 else None
    return std * math.sqrt(dim) / norm


def plan_deletions(events: int, deletion_rate: float) -> tuple[int, list[int]]:
    """(T, [tau_1, ..., tau_k]) of a plan: k = round(rate * events) deletions, T = events - k steps.

    Deletions are placed uniformly over the steps, deletion j at the midpoint
    ``tau_j = max(1, floor((j - 1/2) T / k + 1/2))`` (of its share of the stream).

    >>> plan_deletions(1000, 0.01)
    (990, [50, 149, 248, 347, 446, 545, 644, 743, 842, 941])
    >>> plan_deletions(10, 0.0)
    (10, [])
    """
    events = count("events", events, minimum=1)
    rate = real("deletion_rate", deletion_rate, lo=0.0, hi=1.0, hi_open=True)
    k = math.floor(rate * events + 0.5)
    steps = events - k
    if steps < 1:
        raise ValueError(
            f"deletion_rate {deletion_rate!r} leaves no applied example in {events} events")
    return steps, [max(1, math.floor((j - 0.5) * steps / k + 0.5)) for j in range(1, k + 1)]


class _ShiftedStronglyConvex:
    """eta_t = 1/(mu (t + t0)), Gamma_{u,tau} = (u + t0)/(tau + t0): every step regular, i.e. the
    caller's t0 is >= (beta/mu - 1)/2 (the engine's default); otherwise pass the schedule."""

    def __init__(self, mu: float, t0: float):
        self.mu, self.t0 = positive("mu", mu), real("t0", t0, lo=0.0)

    def eta(self, t: int) -> float:
        return strongly_convex_step(self.mu, self.t0, t)

    def log_contraction(self, u: int, tau: int) -> float:
        return shifted_log_contraction(self.t0, u, tau)


def _sigma_rule(unit: str, split: str | None, rho: float, omega: float, capacity: int | None,
                k: int,
                reserve: float = DEFAULT_RESERVE):
    """sigma_j as a function of (j, a_j) for the unit and split."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    if unit == "per-request":
        if split is not None or capacity is not None:
            raise ValueError(f"split and capacity apply to the all-deletions unit only, got "
                             f"{split!r} and {capacity!r}")
        return lambda j, a: per_request_sigma([a], rho)
    split = "weighted" if split is None else split
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if capacity is not None and split == "weighted":
        raise ValueError(
            f"capacity applies to the even split and the planned one only, got split {split!r}")
    if split == "weighted":
        omega = real("omega", omega, lo=1.0, lo_open=True)
        return lambda j, a: a * noise_multiplier(j, rho, omega)
    if split == "planned":  # docs/accounting.md 11.2: even over the capacity, the reserve beyond it
        capacity = k if capacity is None else count("capacity", capacity, minimum=1)
        return lambda j, a: a * planned_multiplier(j, rho, capacity=capacity, reserve=reserve,
                                                   omega=omega)
    capacity = k if capacity is None else count("capacity", capacity, minimum=1)
    if k > capacity:
        raise ValueError(f"capacity {capacity} is below the {k} deletions the plan expects")
    return lambda j, a: gaussian_sigma(a, rho / capacity) if a > 0.0 else 0.0


def predicted_noise_std(*, unit: str, L: float, rho: float, deletion_rate: float, events: int,
                        mu: float | None = None, t0: float | None = None, schedule=None,
                        split: str | None = None, omega: float = 1.2, capacity: int | None = None,
                        diameter: float | None = None, age: int = 0,
                        reserve: float = DEFAULT_RESERVE) -> float:
    """Predicted per-coordinate noise std of the release after ``events`` events (module doc).

    The contraction is ``schedule``'s, or, without one, the shifted strongly convex schedule of
    ``mu`` and ``t0``. ``rho`` is the Rényi slope: the lifetime budget (all-deletions) or the
    charge per request (per-request). ``split``: "weighted" (default), "even" over ``capacity``
    (default: the plan's deletion count), or "planned" (the engine's planned split, even over
    ``capacity`` with ``reserve`` beyond it, docs/accounting.md 11.2), all-deletions only.
    ``diameter`` caps each shift's Delta_u (None: no cap, a larger or equal prediction). ``age``:
    steps between a deleted record's insert and its deletion (no effect under the shifted strongly
    convex schedule).
    The value bounds the std of the engine's release on the same plan (same bound as
    :func:`release_noise_std`, which it equals on the same ledger).

    >>> kw = dict(L=1.0, mu=1.0, t0=0.0, rho=1.0, deletion_rate=0.01)
    >>> round(predicted_noise_std(unit="per-request", events=10**4, **kw) * 9900, 6)  # sqrt(k / 2)
    7.071068
    >>> round(predicted_noise_std(unit="all-deletions", split="even", events=10**4, **kw) * 9900, 6)
    70.710678
    >>> round(predicted_noise_std(unit="all-deletions", split="planned", events=10**4, **kw) * 9900,
    ...       6)
    74.535599
    >>> # sqrt(3 sum j^1.2)
    >>> round(predicted_noise_std(unit="all-deletions", events=10**4, **kw) * 9900, 3)
    186.092
    """
    L, rho = positive("L", L), positive("rho", rho)
    age = count("age", age, minimum=0)
    cap = math.inf if diameter is None else positive("diameter", diameter)
    if schedule is None:
        if mu is None or t0 is None:
            raise ValueError("predicted_noise_std needs a schedule, or mu and t0")
        schedule = _ShiftedStronglyConvex(mu, t0)
    steps, taus = plan_deletions(events, deletion_rate)
    rule = _sigma_rule(unit, split, rho, omega, capacity, len(taus), reserve)
    noises = []
    for j, tau in enumerate(taus, 1):
        u = max(1, tau - age)
        shift = passive_shift(schedule.log_contraction(u, tau),
                              sensitivity(schedule.eta(u), L, cap))
        noises.append((tau, rule(j, shift)))
    return _accumulated_std(noises, schedule.log_contraction, steps)


def predicted_noise_growth(lengths: Iterable[int], **plan) -> dict[int, float]:
    """:func:`predicted_noise_std` at several stream lengths (same plan otherwise): how it grows.

    >>> kw = dict(L=1.0, mu=1.0, t0=0.0, rho=1.0, deletion_rate=0.01)
    >>> even = predicted_noise_growth([10**3, 10**4, 10**5], unit="all-deletions", split="even",
    ...                               **kw)
    >>> [round(v, 4) for v in even.values()]  # constant in T: (L/mu) p / sqrt(2 rho) (1 - p)^-1
    [0.0071, 0.0071, 0.0071]
    """
    return {n: predicted_noise_std(events=n, **plan) for n in lengths}
