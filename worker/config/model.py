"""What the settings take from the engine's algorithm registry (``worker.olu.registry``): the names
an operator may choose, and each algorithm's constructor arguments.

Every algorithm class declares the worker settings it takes beyond the base ones
(``settings``: setting name -> constructor keyword), so nothing here lists algorithms.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..exceptions import ConfigError
from ..olu.privacy import capacity_for_rate
from ..olu.registry import ALGORITHMS as _REGISTRY
from ..olu.rotation import Rotation, planned_capacity

ALGORITHMS = tuple(_REGISTRY)

# Settings every algorithm takes, under the same keyword (OnlineUnlearner.__init__).
BASE_MODEL_SETTINGS = ("dim", "loss", "classes", "l2", "label_bound", "radius", "feature_bound",
                       "feature_policy", "schedule", "t0", "step", "privacy_unit", "rho",
                       "target_epsilon", "omega", "delta", "budget_split", "budget_reserve",
                       "max_records_per_key", "forget_by_key")


def engine_default(setting: str) -> Any:
    """The default of an algorithm setting where it lives: the constructor keyword of every class
    that takes it (``cls.settings``), which must agree; Settings reads its default from here, so an
    algorithm default is written once.

    >>> engine_default("restart_c"), engine_default("dp_horizon")
    (1.0, 1000000)
    """
    found = {}
    for name, cls in _REGISTRY.items():
        keyword = cls.settings.get(setting)
        if keyword is None:
            continue
        for klass in cls.__mro__:  # the nearest constructor that names the keyword
            if "__init__" not in vars(klass):
                continue
            param = inspect.signature(klass.__init__).parameters.get(keyword)
            if param is not None and param.default is not inspect.Parameter.empty:
                found[name] = param.default
                break
    if len(set(found.values())) != 1:
        raise ConfigError(f"setting {setting!r} has no one engine default: {found}")
    return next(iter(found.values()))


def model_kwargs(settings: Any) -> dict[str, Any]:
    """Keyword arguments for the engine class of ``settings.algorithm``: the base settings and the
    ones the class declares, under its keywords; unset (None) ones left to the class's defaults.

    >>> from types import SimpleNamespace
    >>> unset = {name: None for name in BASE_MODEL_SETTINGS}
    >>> model_kwargs(SimpleNamespace(**{**unset, "dim": 3}, algorithm="passive", max_deletions=7))
    {'dim': 3, 'capacity': 7}
    """
    cls = engine_class(settings.algorithm)
    kwargs = {name: getattr(settings, name) for name in BASE_MODEL_SETTINGS}
    kwargs.update({keyword: getattr(settings, name) for name, keyword in cls.settings.items()})
    if getattr(settings, "budget_split", None) == "planned":
        kwargs["deletion_capacity"] = deletion_capacity(settings)
    return {k: v for k, v in kwargs.items() if v is not None}


def deletion_capacity(settings: Any) -> int | None:
    """The planned split's capacity per model: given, or the expected deletion rate times the
    lifetime (per model: half of it in the disjoint rotation,
    docs/accounting.md 12.2); None if neither."""
    if settings.deletion_capacity is not None:
        return settings.deletion_capacity
    rate = settings.expected_deletion_rate
    if rate is None:
        raise ConfigError("budget_split planned needs deletion_capacity (OLU_DELETION_CAPACITY) or "
                          "expected_deletion_rate (OLU_EXPECTED_DELETION_RATE)")
    if settings.rotation == "on":
        return planned_capacity(rate, settings.model_lifetime_events, settings.rotation_variant)
    return capacity_for_rate(rate, settings.model_lifetime_events)


def build_model(settings: Any):
    """The partition's model as the settings ask: one engine model, or a rotation of two."""
    cls = engine_class(settings.algorithm)
    kwargs = model_kwargs(settings)
    if getattr(settings, "rotation", "off") == "on":
        return Rotation(cls, lifetime_events=settings.model_lifetime_events,
                        variant=settings.rotation_variant,
                        **kwargs)
    return cls(**kwargs)


def engine_class(algorithm: str):
    """The engine's class for ``algorithm``, or None if there is no such algorithm."""
    return _REGISTRY.get(algorithm)
