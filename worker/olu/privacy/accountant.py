"""Privacy accountant for certified online learning-unlearning (olu-spec §1.6, §1.7, §2.4, §6.4).

What is being counted
---------------------
Deletion ``i`` adds Gaussian noise once, with standard deviation ``sigma_i``, to pay for the
public shift ``a_i`` (the deleted point's sensitivity after contraction). Privacy amplification
by iteration (PAI) then gives, for EVERY order ``alpha > 1`` at once,

    D_alpha(current model || model that never saw the deleted points) <= alpha * rho,
    rho = sum_{j<=i} a_j**2 / (2 sigma_j**2).

The passive calibration ``sigma_i = a_i * noise_multiplier(i, eps, omega)`` spends
``eps * budget_weight(i, omega)`` per deletion, so ``rho = eps * W_i`` with
``W_i = sum_{j<=i} (omega-1)/(omega j**omega) < 1``. ``eps`` is therefore a lifetime Rényi slope
per model (zCDP-like), not a per-deletion budget. Active algorithms charge the same way with
their own ``a_i`` and ``sigma_i``.

Converting to (epsilon, delta)-DP: why not Gaussian DP
------------------------------------------------------
PAI only yields the Rényi curve ``alpha * rho``; the released model is NOT a composition of
plain Gaussian mechanisms of the deleted points (the noise is added to an iterate, and the
bound comes from shifted divergences). The exact mu-GDP / privacy-loss-distribution conversion
is therefore not justified here. We use conversions valid for ANY mechanism with that curve:

* ``"improved"`` (default): Canonne-Kamath-Steinke 2020 Prop. 12 / Asoodeh et al. 2020 /
  Balle et al. 2020 Thm 21, ``eps = eps(alpha) + ln(1 - 1/alpha) - (ln delta + ln alpha)/(alpha-1)``,
  minimised over ``alpha > 1``, and ``0`` when the KL bound ``delta >= sqrt(1 - exp(-KL))`` already
  holds (``KL <= rho`` because ``D_1 <= D_alpha <= alpha*rho`` for all ``alpha > 1``). This is what
  ``dp_accounting.rdp.RdpAccountant`` computes, except that it searches a fixed grid of orders
  >= 1.1 (and uses ``r(1.1) = 1.1 rho`` in the KL test), while we optimise ``alpha`` exactly.
* ``"classic"``: Mironov 2017 Prop. 3, ``eps = eps(alpha) + ln(1/delta)/(alpha-1)``, at its
  closed-form optimum ``alpha = 1 + sqrt(ln(1/delta)/rho)``.
* ``"zcdp"``: Bun-Steinke ``rho + 2 sqrt(rho ln(1/delta))`` (olu-spec §1.6 with ``rho = eps W``).
  For a linear Rényi curve this is algebraically the same number as ``"classic"``.

How alpha is optimised (continuously, exactly)
----------------------------------------------
With ``h = alpha - 1`` and ``L = ln(1/delta)`` the improved bound is
``f(h) = (1+h) rho + ln h - ln(1+h) + (L - ln(1+h))/h``, and ``f'(h) = rho - (L - ln(1+h))/h**2``.
The stationarity condition ``rho h**2 + ln(1+h) = L`` has a strictly increasing left side, so
``f`` has a unique minimiser, found by bisection in ``ln h`` to machine precision. The reverse
bound ``ln delta = h((1+h) rho - eps + ln(h/(1+h))) - ln(1+h)`` is convex in ``h`` with the
increasing derivative ``(1+2h) rho - eps + ln(h/(1+h))``, solved the same way. Every ``h > 0``
gives a valid bound, so numerical error can only cost tightness, never soundness; the
``h``-form stays accurate as ``alpha -> 1`` (no 1.01 cut-off is needed). Results are monotone in
``rho`` and ``delta`` up to a few ulps of rounding (the optimal order moves with them).
"""

from __future__ import annotations

import math

from ..exceptions import BudgetExhausted, InvalidAccountantState

__all__ = [
    "BudgetExhausted", "InvalidAccountantState", "PrivacyAccountant", "METHODS",
    "budget_weight", "noise_multiplier", "rdp_to_dp", "optimal_order", "dp_delta",
]

METHODS = ("improved", "classic", "zcdp")
_STATE_VERSION = 1
_X_MAX = 700.0  # cap on ln(alpha - 1), keeps e**x finite
_SLACK = 1e-9  # relative float-rounding slack on the lifetime budget check in charge()


def _real(name: str, x, *, lo: float, lo_open: bool = True, hi: float = math.inf,
          hi_open: bool = True, allow_inf: bool = False) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{name} must be a real number, got {x!r}")
    x = float(x)
    if x == math.inf and allow_inf:
        return x
    if math.isnan(x) or math.isinf(x) or x < lo or (lo_open and x == lo) or x > hi \
            or (hi_open and x == hi):
        lb, rb = "(" if lo_open else "[", ")" if hi_open else "]"
        raise ValueError(f"{name} must be in {lb}{lo}, {hi}{rb}, got {x!r}")
    return x


def _count(name: str, x, minimum: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {x!r}")
    return x


def budget_weight(i: int, omega: float = 1.2) -> float:
    """Fraction ``(omega-1)/(omega i**omega)`` of ``eps`` that calibrated deletion ``i`` spends.

    >>> round(budget_weight(1, 1.2), 12)
    0.166666666667
    """
    i, omega = _count("i", i, 1), _real("omega", omega, lo=1.0)
    return (omega - 1.0) / (omega * float(i) ** omega)


def noise_multiplier(i: int, eps: float, omega: float = 1.2) -> float:
    """``sigma_i / a_i = sqrt(omega i**omega / (2 (omega-1) eps))`` for deletion ``i`` (§2.4).

    >>> math.isclose(noise_multiplier(1, 1.0, 1.2), math.sqrt(3), rel_tol=1e-12)
    True
    >>> math.isclose(noise_multiplier(10, 0.5, 1.2), math.sqrt(3 * 10**1.2 / 0.5), rel_tol=1e-12)
    True
    """
    eps = _real("eps", eps, lo=0.0)
    return math.sqrt(1.0 / (2.0 * eps * budget_weight(i, omega)))


def _softplus(x: float) -> float:  # ln(1 + e^x) without overflow
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def _scaled_exp(x: float, rho: float) -> float:  # rho * e^x for rho > 0, without OverflowError
    z = x + math.log(rho)
    return math.exp(z) if z < 709.0 else math.inf


def _root(g, x0: float) -> float:
    """Root of a strictly increasing g on the real line (bracket expansion, then bisection)."""
    lo, hi, step = x0 - 1.0, x0 + 1.0, 1.0
    while g(lo) > 0:
        lo, step = lo - step, step * 2
    step = 1.0
    while g(hi) < 0:
        hi, step = hi + step, step * 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if g(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def _check(rho: float, delta: float, method: str) -> tuple[float, float]:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return _real("rho", rho, lo=0.0, lo_open=False, allow_inf=True), _real("delta", delta, lo=0.0, hi=1.0)


def _improved(rho: float, delta: float) -> tuple[float, float]:
    """(epsilon, alpha) for the improved conversion; alpha = 1.0 marks the KL shortcut."""
    if rho == 0.0 or 2.0 * math.log(delta) > math.log(-math.expm1(-rho)):  # KL: delta**2 > 1-e^-rho
        return 0.0, 1.0
    if math.isinf(rho):
        return math.inf, math.inf
    L = -math.log(delta)
    x = _root(lambda x: _scaled_exp(2 * x, rho) + _softplus(x) - L, 0.5 * (math.log(L) - math.log(rho)))
    x = min(x, _X_MAX)  # any h > 0 gives a valid bound; this only matters for denormal rho
    h, sp = math.exp(x), _softplus(x)
    return max(0.0, (1 + h) * rho - _softplus(-x) + (L - sp) / h), 1.0 + h


def rdp_to_dp(rho: float, delta: float, method: str = "improved") -> float:
    """Smallest epsilon with (epsilon, delta)-DP implied by ``D_alpha <= alpha*rho`` for all alpha > 1.

    >>> round(rdp_to_dp(1.0, 1e-5, "zcdp"), 4), round(rdp_to_dp(1.0, 1e-5, "classic"), 4)
    (7.7861, 7.7861)
    >>> round(rdp_to_dp(1.0, 1e-5), 4)  # improved (dp-accounting's grid gives 7.0773)
    7.0772
    >>> round(rdp_to_dp(0.1, 1e-5, "zcdp"), 2), rdp_to_dp(0.0, 1e-5)
    (2.25, 0.0)
    """
    rho, delta = _check(rho, delta, method)
    L = -math.log(delta)
    if method == "zcdp":
        return rho + 2.0 * math.sqrt(rho * L)
    if method == "classic":
        if rho == 0.0 or math.isinf(rho):
            return rho
        h = math.sqrt(L) / math.sqrt(rho)  # Mironov's bound at its optimal order 1 + h
        return rho * (1.0 + h) + L / h
    return _improved(rho, delta)[0]


def optimal_order(rho: float, delta: float, method: str = "improved") -> float:
    """The order alpha at which :func:`rdp_to_dp` is attained (1.0: improved KL shortcut).

    >>> round(optimal_order(1.0, 1e-5, "classic"), 4)
    4.3931
    """
    rho, delta = _check(rho, delta, method)
    if method != "improved":
        return 1.0 + math.sqrt(-math.log(delta)) / math.sqrt(rho) if rho > 0 else math.inf
    return _improved(rho, delta)[1]


def dp_delta(rho: float, epsilon: float) -> float:
    """Smallest delta with (epsilon, delta)-DP from the curve ``alpha*rho`` (improved + KL bound).

    >>> dp_delta(1.0, 7.0772) < 1e-5 < dp_delta(1.0, 7.0771)
    True
    """
    rho = _real("rho", rho, lo=0.0, lo_open=False, allow_inf=True)
    eps = _real("epsilon", epsilon, lo=0.0, lo_open=False, allow_inf=True)
    if rho == 0.0 or math.isinf(eps):
        return 0.0
    if math.isinf(rho):
        return 1.0
    log_kl = 0.5 * math.log(-math.expm1(-rho))
    x = _root(lambda x: rho + _scaled_exp(x + math.log(2.0), rho) - eps - _softplus(-x),
              math.log(max(eps - rho, rho)) - math.log(2.0 * rho))
    x = min(x, _X_MAX)  # any h > 0 gives a valid bound; delta underflows to 0 there anyway
    h, sp = math.exp(x), _softplus(x)
    log_rdp = h * ((1 + h) * rho - eps - _softplus(-x)) - sp
    return min(1.0, math.exp(min(log_kl, log_rdp)))


class PrivacyAccountant:
    """Per-model Rényi ledger: lifetime slope budget ``eps``, one charge per deletion.

    ``capacity`` (optional) bounds the deletions of one epoch (active OLU's known ``k``).
    :meth:`restart_epoch` starts a fresh epoch (§2.6): the restarted model is re-initialised
    data-independently and depends on no earlier data, so the PAI sum starts again at zero and
    the deletion counter ``i`` restarts at 1. Closed epochs stay in :attr:`history`.

    >>> acc = PrivacyAccountant(eps=1.0)
    >>> for _ in range(3):
    ...     acc.charge(0.5, acc.sigma_for_next(0.5))
    >>> acc.deletions, round(acc.budget_used, 6), round(acc.epsilon(), 3)
    (3, 0.283809, 3.425)
    """

    def __init__(self, eps: float, omega: float = 1.2, delta: float = 1e-5,
                 capacity: int | None = None) -> None:
        self.eps = _real("eps", eps, lo=0.0)
        self.omega = _real("omega", omega, lo=1.0)
        self.delta = _real("delta", delta, lo=0.0, hi=1.0)
        self.capacity = None if capacity is None else _count("capacity", capacity, 1)
        self._deletions, self._rho, self._history = 0, 0.0, []

    deletions = property(lambda self: self._deletions, doc="Deletions charged in this epoch.")
    rho = property(lambda self: self._rho, doc="Rényi slope spent this epoch (D_alpha <= alpha*rho).")
    budget_used = property(lambda self: self._rho / self.eps, doc="rho/eps, equals W_i when calibrated.")
    epochs = property(lambda self: len(self._history) + 1, doc="Epochs started, the current included.")
    history = property(lambda self: tuple(self._history),
                       doc="(deletions, rho) of each closed epoch, oldest first.")

    @property
    def capacity_left(self) -> int | None:
        return None if self.capacity is None else self.capacity - self._deletions

    @property
    def lifetime_deletions(self) -> int:
        return self._deletions + sum(d for d, _ in self._history)

    def sigma_for_next(self, shift: float) -> float:
        """Calibrated sigma for the next deletion: ``shift * noise_multiplier(deletions + 1)``."""
        shift = _real("shift", shift, lo=0.0, lo_open=False)
        return shift * noise_multiplier(self._deletions + 1, self.eps, self.omega)

    def charge(self, shift: float, sigma: float) -> None:
        """Record one deletion's mechanism: ``rho += shift**2 / (2 sigma**2)``.

        Raises ``ValueError`` for a negative/non-finite shift or a sigma that is not finite and
        > 0 (``(0.0, 0.0)`` is accepted: no shift needs no noise). Raises :class:`BudgetExhausted`,
        recording nothing, if the capacity is used up or rho would exceed eps (beyond rounding).
        """
        shift = _real("shift", shift, lo=0.0, lo_open=False)
        sigma = _real("sigma", sigma, lo=0.0, lo_open=shift > 0.0)
        if self.capacity is not None and self._deletions >= self.capacity:
            raise BudgetExhausted(f"deletion capacity {self.capacity} of this epoch is used up")
        new = self._rho + (0.5 * (shift / sigma) ** 2 if shift > 0.0 else 0.0)
        if not new <= self.eps * (1.0 + _SLACK):
            raise BudgetExhausted(f"charge would raise rho to {new!r} > eps = {self.eps!r}")
        self._deletions, self._rho = self._deletions + 1, new

    def epsilon(self, delta: float | None = None, method: str = "improved") -> float:
        """(epsilon, delta)-DP of the current epoch's model; ``delta`` defaults to ``self.delta``."""
        return rdp_to_dp(self._rho, self.delta if delta is None else delta, method)

    def delta_for(self, epsilon: float) -> float:
        """Smallest delta for a target epsilon (improved conversion with the KL bound)."""
        return dp_delta(self._rho, epsilon)

    def restart_epoch(self) -> None:
        """Close the current epoch and start a fresh one (sound only after a data-independent re-init)."""
        self._history.append((self._deletions, self._rho))
        self._deletions, self._rho = 0, 0.0

    def to_state(self) -> dict:
        """Plain JSON-able dict (ints, floats, None, lists); round-trips bit-exactly."""
        return {"version": _STATE_VERSION, "eps": self.eps, "omega": self.omega,
                "delta": self.delta, "capacity": self.capacity, "deletions": self._deletions,
                "rho": self._rho, "history": [[d, r] for d, r in self._history]}

    @classmethod
    def from_state(cls, state: dict) -> PrivacyAccountant:
        """Rebuild from :meth:`to_state`; raises :class:`InvalidAccountantState` if malformed."""
        try:
            keys = set(cls(1.0).to_state())
            if not isinstance(state, dict) or set(state) != keys:
                raise ValueError(f"state must be a dict with exactly the keys {sorted(keys)}")
            if state["version"] != _STATE_VERSION or isinstance(state["version"], bool):
                raise ValueError(f"unsupported state version {state['version']!r}")
            acc = cls(state["eps"], state["omega"], state["delta"], state["capacity"])
            cap = math.inf if acc.capacity is None else acc.capacity
            limit = acc.eps * (1.0 + _SLACK)
            rows = state["history"]
            if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == 2 for r in rows):
                raise ValueError("history must be a list of [deletions, rho] pairs")
            for d, r in rows + [[state["deletions"], state["rho"]]]:
                d = _count("deletions", d, 0)
                r = _real("rho", r, lo=0.0, lo_open=False, hi=limit, hi_open=False)
                if d > cap or (d == 0 and r != 0.0):
                    raise ValueError(f"epoch with {d} deletions and rho {r!r} is inconsistent")
                acc._history.append((d, r))
            acc._deletions, acc._rho = acc._history.pop()
            return acc
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidAccountantState(f"invalid accountant state: {exc}") from exc
