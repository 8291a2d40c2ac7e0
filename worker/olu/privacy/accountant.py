"""Privacy accountant for certified online learning-unlearning (docs/accounting.md 2.4,
docs/accounting.md 1.1, docs/accounting.md 1.2, docs/accounting.md 6).

What is being counted
---------------------
Deletion ``i`` adds Gaussian noise once, with standard deviation ``sigma_i``, to pay for the
public shift ``a_i`` (the deleted point's sensitivity after contraction). Privacy amplification
by iteration (PAI) then gives, for EVERY order ``alpha > 1`` at once,

    D_alpha(current model || model that never saw the deleted points) <= alpha * rho,
    rho = sum_{j<=i} a_j**2 / (2 sigma_j**2).

The passive calibration ``sigma_i = a_i * noise_multiplier(i, budget, omega)`` spends
``budget * budget_weight(i, omega)`` per deletion, so ``rho = budget * W_i`` with
``W_i = sum_{j<=i} (omega-1)/(omega j**omega) < 1``. ``budget`` is therefore a lifetime Rényi
slope per model (zCDP-like), not a per-deletion budget: the ``all-deletions`` privacy unit.
Active algorithms charge the same way with their own ``a_i`` and ``sigma_i``.

:class:`PerRequestAccountant` is the ``per-request`` unit (docs/accounting.md 8): every request is
charged its own slope once, nothing accumulates. :data:`ACCOUNTANTS` maps each unit to its class.
The conversions to (epsilon, delta) are pure math in :mod:`.analysis.rdp`.
"""

from __future__ import annotations

import math

from ..exceptions import BudgetExhausted, InvalidAccountantState
from .analysis.checks import count, real
from .analysis.gaussian import gaussian_delta, mu_for_rho
from .analysis.rdp import (
    METHODS,
    budget_weight,
    dp_delta,
    noise_multiplier,
    optimal_order,
    rdp_to_dp,
)
from .analysis.split import DEFAULT_RESERVE, planned_multiplier
from .analysis.units import UNITS, per_request_sigma, unit_epsilon

__all__ = [
    "ACCOUNTANTS", "BudgetExhausted", "InvalidAccountantState", "PerRequestAccountant",
    "PlannedAccountant",
    "PrivacyAccountant", "SPLITS",
    "METHODS", "UNITS", "budget_weight", "noise_multiplier", "rdp_to_dp", "optimal_order",
    "dp_delta",
    "load_accountant", "make_accountant",
]

# 2: the slope is stored as ``budget`` with the ``unit``; 1 (read still): ``eps``, all-deletions.
_STATE_VERSION = 2
_SLACK = 1e-9  # relative float-rounding slack on the lifetime budget check in charge()


class PrivacyAccountant:
    """Per-model Rényi ledger: lifetime slope ``budget``, one
    charge per deletion (unit ``all-deletions``).

    ``capacity`` (optional) bounds the deletions of one epoch (active OLU's known ``k``).
    :meth:`restart_epoch` starts a fresh epoch (docs/algorithms.md 3.2): the restarted model is
    re-initialised data-independently and depends on no earlier data, so the PAI sum starts again at
    zero and the deletion counter ``i`` restarts at 1. Closed epochs stay in :attr:`history`.

    >>> acc = PrivacyAccountant(budget=1.0)
    >>> for _ in range(3):
    ...     acc.charge(0.5, acc.sigma_for_next(0.5))
    >>> acc.deletions, round(acc.budget_used, 6), round(acc.epsilon(), 3)
    (3, 0.283809, 3.425)
    """

    unit = "all-deletions"
    split = "weighted"

    def __init__(self, budget: float, omega: float = 1.2, delta: float = 1e-5,
                 capacity: int | None = None) -> None:
        self.budget = real("budget", budget, lo=0.0, lo_open=True)
        self.omega = real("omega", omega, lo=1.0, lo_open=True)
        self.delta = real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
        self.capacity = None if capacity is None else count("capacity", capacity, minimum=1)
        self._deletions, self._spent, self._history = 0, 0.0, []

    deletions = property(lambda self: self._deletions, doc="Deletions charged in this epoch.")
    spent = property(lambda self: self._spent,
                     doc="Rényi slope spent this epoch (D_alpha <= alpha * spent); the configured "
                         "one is ``budget``, the rho of the settings and releases.")
    budget_used = property(lambda self: self._spent / self.budget,
                           doc="spent/budget, equals W_i when calibrated.")
    epochs = property(lambda self: len(self._history) + 1,
                      doc="Epochs started, the current included.")
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
        shift = real("shift", shift, lo=0.0)
        return shift * self._multiplier(self._deletions + 1)

    def multipliers(self, n: int) -> list[float] | None:
        """The noise multipliers of the next ``n`` charges (``sigma_for_next(shift)`` is ``shift``
        times the next one), or None when one of those charges could be refused: the capacity, or a
        budget that ``n`` charges at these multipliers would come within rounding of. A batch of
        deletions then takes its noise in one pass and is charged after it
        (worker/olu/core/mixed.py)."""
        if self.capacity is not None and self._deletions + n > self.capacity:
            return None
        factors = [self._multiplier(self._deletions + k) for k in range(1, n + 1)]
        # each charge adds 0.5 (shift / (shift m))^2, 0.5 / m^2 within a few ulps; 1e-6 of margin
        if not self._spent + math.fsum(0.5 / (m * m)
                                       for m in factors) * (1.0 + 1e-6) <= self.budget:
            return None
        return factors

    def _multiplier(self, i: int) -> float:
        return noise_multiplier(i, self.budget, self.omega)

    def charge(self, shift: float, sigma: float) -> None:
        """Record one deletion's mechanism: ``rho += shift**2 / (2 sigma**2)``.

        Raises ``ValueError`` for a negative/non-finite shift or a sigma that is not finite and
        > 0 (``(0.0, 0.0)`` is accepted: no shift needs no noise). Raises :class:`BudgetExhausted`,
        recording nothing, if the capacity is used up or rho
        would exceed the budget (beyond rounding).
        """
        shift = real("shift", shift, lo=0.0)
        sigma = real("sigma", sigma, lo=0.0, lo_open=shift > 0.0)
        if self.capacity is not None and self._deletions >= self.capacity:
            raise BudgetExhausted(f"deletion capacity {self.capacity} of this epoch is used up")
        new = self._spent + (0.5 * (shift / sigma) ** 2 if shift > 0.0 else 0.0)
        if not new <= self.budget * (1.0 + _SLACK):
            raise BudgetExhausted(f"charge would raise rho to {new!r} > budget = {self.budget!r}")
        self._deletions, self._spent = self._deletions + 1, new

    def epsilon(self, delta: float | None = None, method: str = "improved") -> float:
        """(epsilon, delta)-DP of the current epoch's model;
        ``delta`` defaults to ``self.delta``."""
        return rdp_to_dp(self._spent, self.delta if delta is None else delta, method)

    def delta_for(self, epsilon: float) -> float:
        """Smallest delta for a target epsilon (improved conversion with the KL bound)."""
        return dp_delta(self._spent, epsilon)

    def restart_epoch(self) -> None:
        """Close the current epoch and start a fresh one (sound
        only after a data-independent re-init)."""
        self._history.append((self._deletions, self._spent))
        self._deletions, self._spent = 0, 0.0

    def to_state(self) -> dict:
        """Plain JSON-able dict (ints, floats, None, lists); round-trips bit-exactly."""
        return {"version": _STATE_VERSION, "unit": self.unit, "budget": self.budget,
                "omega": self.omega,
                "delta": self.delta, "capacity": self.capacity, "deletions": self._deletions,
                "rho": self._spent, "history": [[d, r] for d, r in self._history]}

    @classmethod
    def from_state(cls, state: dict) -> PrivacyAccountant:
        """Rebuild from :meth:`to_state`; raises :class:`InvalidAccountantState` if malformed."""
        try:
            state = _current(state)
            keys = set(cls(1.0).to_state())
            if not isinstance(state, dict) or set(state) != keys:
                raise ValueError(f"state must be a dict with exactly the keys {sorted(keys)}")
            if state["unit"] != cls.unit:
                raise ValueError(f"state is for the unit {state['unit']!r}, not {cls.unit!r}")
            acc = cls._build(state)
            cap = math.inf if acc.capacity is None else acc.capacity
            limit = acc._charge_limit()
            rows = state["history"]
            if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == 2
                                                     for r in rows):
                raise ValueError("history must be a list of [deletions, rho] pairs")
            for d, r in rows + [[state["deletions"], state["rho"]]]:
                d = count("deletions", d, minimum=0)
                r = real("rho", r, lo=0.0, hi=limit)
                if d > cap or (d == 0 and r != 0.0) or not acc._consistent(d, r):
                    raise ValueError(f"epoch with {d} deletions and rho {r!r} is inconsistent")
                acc._history.append((d, r))
            acc._deletions, acc._spent = acc._history.pop()
            return acc
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidAccountantState(f"invalid accountant state: {exc}") from exc

    @classmethod
    def _build(cls, state: dict) -> PrivacyAccountant:
        return cls(state["budget"], state["omega"], state["delta"], state["capacity"])

    def split_facts(self) -> dict:
        """How the lifetime slope is split over deletions (shown by ``privacy()``)."""
        return {"split": self.split}

    def _charge_limit(self) -> float:
        return self.budget * (1.0 + _SLACK)

    def _consistent(self, deletions: int, rho: float) -> bool:
        return True


class PerRequestAccountant(PrivacyAccountant):
    """Unit ``per-request`` (docs/accounting.md 8): each request that moves the model is charged
    ``budget`` once, with ``sigma = shift / sqrt(2 budget)``; nothing accumulates across requests.

    The guarantee is per request, so :attr:`rho` is the slope of any one request's guarantee
    (``budget`` once a request was charged, 0 before) and :meth:`epsilon` the constant
    per-request epsilon; :attr:`deletions` counts the charged requests. There is no lifetime
    budget to exhaust: ``budget_used`` stays 0 (a subject deleted in r requests costs r budget
    by composition, which this accountant cannot see: it does not know who the subject is).

    Each request is one Gaussian mechanism, ``mu = sqrt(2 rho)``-Gaussian-DP, so :meth:`epsilon`
    is its exact curve (:mod:`.analysis.gaussian`, docs/accounting.md 2.6), tighter than the Rényi
    conversion the all-deletions unit needs; ``method`` may name a Rényi one to compare.

    >>> acc = PerRequestAccountant(budget=0.5)
    >>> for shift in (0.3, 0.1):
    ...     acc.charge(shift, acc.sigma_for_next(shift))
    >>> acc.deletions, acc.spent, acc.sigma_for_next(0.3)
    (2, 0.5, 0.3)
    >>> round(acc.epsilon(), 4), round(acc.epsilon(method="improved"), 4)
    (4.3772, 4.7284)
    """

    unit = "per-request"
    budget_used = property(lambda self: 0.0, doc="Always 0: no lifetime budget under per-request.")

    def epsilon(self, delta: float | None = None, method: str = "gaussian") -> float:
        """(epsilon, delta) of any one charged request: the exact Gaussian curve (``"gaussian"``),
        or a Rényi conversion of :data:`METHODS`."""
        delta = self.delta if delta is None else delta
        if method == "gaussian":
            return unit_epsilon(self.unit, self._spent, delta)
        return super().epsilon(delta, method)

    def delta_for(self, epsilon: float) -> float:
        """Smallest delta of a charged request at ``epsilon`` (the exact Gaussian curve)."""
        return gaussian_delta(mu_for_rho(self._spent), epsilon)

    def sigma_for_next(self, shift: float) -> float:
        """``shift / sqrt(2 budget)``
        (:func:`.analysis.units.per_request_sigma`): no index enters."""
        return per_request_sigma([real("shift", shift, lo=0.0)], self.budget)

    def multipliers(self, n: int) -> list[float] | None:
        """The noise factors of the next ``n`` single-record requests for the compiled pass: minus
        the divisor, ``-sqrt(2 budget)`` (a request's sigma is the quotient ``shift / sqrt(2
        budget)``: ``formulas.deletion_sigma``); None when the capacity cannot take ``n`` more.
        Each charge is then ``budget`` within rounding, which :meth:`charge` accepts."""
        if self.capacity is not None and self._deletions + n > self.capacity:
            return None
        return [-math.sqrt(2.0 * self.budget)] * n

    def charge(self, shift: float, sigma: float) -> None:
        """Record one request: ``shift**2 / (2 sigma**2)`` must
        not exceed ``budget`` (beyond rounding)."""
        shift = real("shift", shift, lo=0.0)
        sigma = real("sigma", sigma, lo=0.0, lo_open=shift > 0.0)
        if self.capacity is not None and self._deletions >= self.capacity:
            raise BudgetExhausted(f"request capacity {self.capacity} of this epoch is used up")
        spent = 0.5 * (shift / sigma) ** 2 if shift > 0.0 else 0.0
        if not spent <= self._charge_limit():
            raise BudgetExhausted(f"request would spend rho {spent!r} > budget = {self.budget!r}")
        self._deletions += 1
        self._spent = max(self._spent, self.budget if spent > 0.0 else 0.0)

    def _consistent(self, deletions: int, rho: float) -> bool:
        return rho in (0.0, self.budget)


class PlannedAccountant(PrivacyAccountant):
    """Unit ``all-deletions`` with the planned-capacity split (docs/accounting.md 11): the first
    ``planned`` deletions of an epoch share ``(1 - reserve) budget`` evenly, later ones draw from
    ``reserve budget`` with the omega weights over the overflow index (:mod:`.analysis.split`).
    The calibrated total stays below ``budget`` for any number of deletions, so none is refused.

    >>> acc = PlannedAccountant(budget=1.0, planned=4, reserve=0.2)
    >>> for _ in range(6):
    ...     acc.charge(0.5, acc.sigma_for_next(0.5))
    >>> acc.capacity_used, acc.overflow, round(acc.spent, 6)  # 0.8 + 0.2 (1/6 + 1/(6 2^1.2))
    (4, 2, 0.847843)
    """

    split = "planned"

    def __init__(self, budget: float, omega: float = 1.2, delta: float = 1e-5,
                 capacity: int | None = None,
                 planned: int = 1, reserve: float = DEFAULT_RESERVE) -> None:
        super().__init__(budget, omega, delta, capacity)
        self.planned = count("planned", planned, minimum=1)
        self.reserve = real("reserve", reserve, lo=0.0, hi=1.0, lo_open=True, hi_open=True)

    capacity_used = property(lambda self: min(self._deletions, self.planned),
                             doc="Deletions of this epoch inside the planned capacity.")
    overflow = property(lambda self: max(0, self._deletions - self.planned),
                        doc="Deletions of this epoch beyond the plan (paid from the reserve).")

    def sigma_for_next(self, shift: float) -> float:
        """``shift * planned_multiplier(deletions + 1)``: even
        inside the plan, reserve beyond it."""
        shift = real("shift", shift, lo=0.0)
        return shift * self._multiplier(self._deletions + 1)

    def _multiplier(self, i: int) -> float:
        return planned_multiplier(i, self.budget, capacity=self.planned, reserve=self.reserve,
                                  omega=self.omega)

    def split_facts(self) -> dict:
        return {"split": self.split, "capacity_planned": self.planned,
                "capacity_used": self.capacity_used,
                "overflow_deletions": self.overflow, "reserve": self.reserve}

    def to_state(self) -> dict:
        return {**super().to_state(), "split": self.split, "planned": self.planned,
                "reserve": self.reserve}

    @classmethod
    def _build(cls, state: dict) -> PlannedAccountant:
        if state["split"] != cls.split:
            raise ValueError(f"state is for the split {state['split']!r}, not {cls.split!r}")
        return cls(state["budget"], state["omega"], state["delta"], state["capacity"],
                   state["planned"],
                   state["reserve"])


#: The accountant of each privacy unit (analysis.units.UNITS), with its default split.
ACCOUNTANTS: dict[str, type[PrivacyAccountant]] = {
    PrivacyAccountant.unit: PrivacyAccountant,
    PerRequestAccountant.unit: PerRequestAccountant,
}
#: The all-deletions accountant of each budget split (analysis.split.SPLIT_NAMES).
SPLITS: dict[str, type[PrivacyAccountant]] = {
    PrivacyAccountant.split: PrivacyAccountant,
    PlannedAccountant.split: PlannedAccountant,
}


def make_accountant(unit: str, budget: float, *, split: str = "weighted",
                    planned: int | None = None,
                    reserve: float = DEFAULT_RESERVE, **kwargs) -> PrivacyAccountant:
    """The accountant for ``unit`` and ``split``; ``ValueError`` names the choices for anything
    else. ``planned`` (the capacity K) and ``reserve`` are the planned split's, which only
    ``all-deletions`` has."""
    if unit not in ACCOUNTANTS:
        raise ValueError(f"privacy unit must be one of {', '.join(UNITS)}, got {unit!r}")
    if split not in SPLITS:
        raise ValueError(f"budget split must be one of {', '.join(SPLITS)}, got {split!r}")
    if split == PlannedAccountant.split:
        if unit != PlannedAccountant.unit:
            raise ValueError(
                f"budget_split planned applies to the {PlannedAccountant.unit} privacy_unit only, "
                f"not {unit!r}")
        if planned is None:
            raise ValueError("the planned split needs a deletion capacity (planned)")
        return PlannedAccountant(budget, planned=planned, reserve=reserve, **kwargs)
    return ACCOUNTANTS[unit](budget, **kwargs)


def load_accountant(state: dict) -> PrivacyAccountant:
    """Rebuild whichever accountant
    :meth:`PrivacyAccountant.to_state` wrote (any unit, split, version)."""
    unit = state.get("unit", PrivacyAccountant.unit) if isinstance(state, dict) else None
    cls = ACCOUNTANTS.get(unit)
    if cls is None:
        raise InvalidAccountantState(f"invalid accountant state: unknown privacy unit {unit!r}")
    if "split" in state:
        cls = SPLITS.get(state["split"]) if unit == PlannedAccountant.unit else None
        if cls is None:
            raise InvalidAccountantState(
                f"invalid accountant state: unknown split {state['split']!r} for {unit!r}")
    return cls.from_state(state)


def _current(state):
    """Version-1 states (before units) in today's shape: ``eps`` was the all-deletions budget."""
    if not isinstance(state, dict) or "version" not in state or isinstance(state["version"], bool):
        raise ValueError("state must be a dict with an integer version")
    if state["version"] == 1:
        state = {k: v for k, v in state.items() if k != "eps"} | {
            "version": _STATE_VERSION, "unit": PrivacyAccountant.unit, "budget": state.get("eps")}
    elif state["version"] != _STATE_VERSION:
        raise ValueError(f"unsupported state version {state['version']!r}")
    return state
