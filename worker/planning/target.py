"""The privacy target of a plan and the engine it is planned for: the one place that knows how
the settings become a unit, a Rényi slope and an engine instance.

:func:`resolve_target` reads the unit (``all-deletions`` or ``per-request``), the slope ``rho``
(given, or the exact inversion of the reported conversion for ``target_epsilon`` at ``delta``) and
the delta from the settings. :func:`build_engine` builds the engine those settings run, optionally
with another ``l2`` or unit (the plan compares them).

The loss is the settings' ``loss``; a softmax loss takes its classes from the setting ``classes``
(``OLU_CLASSES``), read with ``getattr`` so that settings objects without it plan binary models as
before. :func:`with_settings` overrides settings for a plan (a benchmark's softmax stream, say)
without building a new settings object. :func:`planned_algorithms` names the algorithms the
planner may plan for a loss: those of :data:`PLANNED_ALGORITHMS` whose engine takes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config.model import engine_class, model_kwargs
from ..exceptions import ConfigError
from ..olu.privacy import UNITS, unit_epsilon, unit_rho_for_epsilon

__all__ = ["PLANNED_ALGORITHMS", "Target", "build_engine", "build_rotation", "classes_of",
           "planned_algorithms", "resolve_target", "with_settings"]

#: Algorithms whose noise the planner models (one calibrated Gaussian per deletion).
PLANNED_ALGORITHMS = ("passive",)
DEFAULT_RHO = 1.0


def planned_algorithms(loss: str) -> tuple[str, ...]:
    """The algorithms of :data:`PLANNED_ALGORITHMS` whose engine takes ``loss`` (an algorithm that
    refuses it, such as active-newton for softmax, is never planned for it).

    >>> planned_algorithms("softmax")
    ('passive',)
    """
    return tuple(a for a in PLANNED_ALGORITHMS if loss in engine_class(a).losses)


def classes_of(settings) -> list | None:
    """The softmax classes of the settings (the setting ``classes``, OLU_CLASSES), or None."""
    classes = getattr(settings, "classes", None)
    return None if classes is None else list(classes)


class _Overridden:
    """Settings with some values replaced (:func:`with_settings`); every other one read through."""

    def __init__(self, settings, values: dict):
        object.__setattr__(self, "_settings", settings)
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name: str):
        values = object.__getattribute__(self, "_values")
        return values[name] if name in values else getattr(
            object.__getattribute__(self, "_settings"), name)

    def __setattr__(self, name, value):
        raise AttributeError("planning settings are read-only")


def with_settings(settings, **values):
    """``settings`` with ``values`` in place of theirs (names of settings, e.g. ``loss="softmax",
    classes=["a", "b", "c"]``), for :func:`worker.planning.plan.make_plan` and the functions here.
    Nothing is validated here: the engine the plan builds refuses bad values (a softmax loss without
    classes names OLU_CLASSES)."""
    return _Overridden(settings, dict(values))


@dataclass(frozen=True)
class Target:
    """What one guarantee protects (``unit``), its Rényi slope and the (epsilon, delta) it reports.

    ``rho`` is the lifetime budget of a model (all-deletions) or the charge of one request
    (per-request); ``epsilon`` is the unit's conversion of it (the Rényi one for all-deletions,
    the exact Gaussian curve per request), at most ``target_epsilon`` when one was given.
    """

    unit: str
    rho: float
    delta: float
    target_epsilon: float | None = None

    @property
    def epsilon(self) -> float:
        return unit_epsilon(self.unit, self.rho, self.delta)

    def with_unit(self, unit: str) -> Target:
        """The same target under ``unit``: an epsilon target is converted by that unit's accounting
        (the same epsilon allows a larger per-request slope), a given slope is kept."""
        if self.target_epsilon is None:
            return Target(unit, self.rho, self.delta, None)
        return Target(unit, unit_rho_for_epsilon(unit, self.target_epsilon, self.delta), self.delta,
                      self.target_epsilon)


def resolve_target(settings, *, unit: str | None = None, rho: float | None = None,
                   target_epsilon: float | None = None) -> Target:
    """The target from the settings; ``unit`` and one of ``rho`` / ``target_epsilon`` given here
    take precedence (the plan compares units and slopes on the same settings).

    ``rho`` and ``target_epsilon`` are mutually exclusive; the settings hold exactly one of them
    (the loader enforces it, with the default target epsilon 1 unless a rho is set).
    """
    unit = unit or settings.privacy_unit
    if unit not in UNITS:
        raise ConfigError(f"--privacy-unit must be one of {', '.join(UNITS)}, got {unit!r}")
    if rho is not None and target_epsilon is not None:
        raise ConfigError(
            f"give --rho or --target-epsilon, not both (got {rho!r} and {target_epsilon!r})")
    if rho is None and target_epsilon is None:
        rho, target_epsilon = settings.rho, settings.target_epsilon
    delta = settings.delta
    if target_epsilon is not None:
        if not (math.isfinite(target_epsilon) and target_epsilon > 0):
            raise ConfigError(f"--target-epsilon must be a number > 0, got {target_epsilon!r}")
        rho = unit_rho_for_epsilon(unit, target_epsilon, delta)
    elif rho is None:
        rho = DEFAULT_RHO
    if not (math.isfinite(rho) and rho > 0):
        raise ConfigError(f"--rho must be a number > 0, got {rho!r}")
    if unit == "per-request" and settings.algorithm not in PLANNED_ALGORITHMS:
        raise ConfigError(
            f"the per-request unit needs algorithm passive, got {settings.algorithm!r}")
    return Target(unit, float(rho), float(delta), target_epsilon)


_UNSET = object()


def _kwargs(settings, target: Target, l2, cap, radius=None) -> dict:
    """The engine's keyword arguments of ``settings`` for ``target``, ``l2`` and ``cap`` (the
    per-key contribution bound: ``_UNSET`` keeps the setting,
    None removes it) overriding the settings."""
    if settings.algorithm not in PLANNED_ALGORITHMS:
        raise ConfigError(
            f"plan models the passive algorithm only, got algorithm {settings.algorithm!r}")
    if settings.algorithm not in planned_algorithms(settings.loss):
        why = engine_class(settings.algorithm).loss_refusal
        raise ConfigError(
            f"plan: algorithm {settings.algorithm!r} (OLU_ALGORITHM) does not support loss "
            f"{settings.loss!r} (OLU_LOSS)" + (f": {why}" if why else ""))
    kwargs = model_kwargs(settings)
    classes = classes_of(settings)
    if classes is not None:  # until the settings' model arguments carry it (OLU_CLASSES)
        kwargs.setdefault("classes", classes)
    if l2 is not None:
        kwargs["l2"] = l2
    if radius is not None:
        kwargs["radius"] = radius
    if cap is not _UNSET:
        kwargs["max_records_per_key"] = cap
    for key in ("rho", "target_epsilon", "privacy_unit"):
        kwargs.pop(key, None)
    kwargs.update(privacy_unit=target.unit, rho=target.rho, delta=target.delta)
    return {k: v for k, v in kwargs.items() if v is not None}


def build_engine(settings, target: Target, *, l2: float | None = None, cap=_UNSET,
                 radius: float | None = None,
                 noise_rng=None):
    """A fresh engine of ``settings.algorithm`` calibrated for ``target`` (``l2`` and ``cap``,
    ``max_records_per_key``, overriding the settings); ``noise_rng`` seeds its noise (None: OS
    entropy, as in production)."""
    return engine_class(settings.algorithm)(**_kwargs(settings, target, l2, cap, radius),
                                            noise_rng=noise_rng)


def build_rotation(settings, target: Target, *, lifetime: int, capacity: int | None = None,
                   l2: float | None = None, variant: str = "overlap", reserve: float | None = None,
                   cap=_UNSET,
                   radius: float | None = None, noise_rng=None):
    """A warm-standby rotation (docs/accounting.md 12) of the settings' engine, each model given its
    share of ``target.rho`` (:func:`worker.olu.rotation.model_budget`: the Rotation itself splits
    it). Under all-deletions the planned split over ``capacity`` per model."""
    from ..olu.rotation import Rotation

    kwargs = _kwargs(settings, target, l2, cap, radius)
    for key in ("budget_split", "deletion_capacity"):
        kwargs.pop(key, None)
    if target.unit == "all-deletions":
        if reserve is not None:
            kwargs["budget_reserve"] = reserve
        kwargs.update(budget_split="planned", deletion_capacity=capacity)
    return Rotation(engine_class(settings.algorithm), lifetime_events=lifetime, variant=variant,
                    noise_rng=noise_rng, **kwargs)
