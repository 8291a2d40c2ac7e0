"""What the settings take from the engine's algorithm registry (``worker.olu.registry``): the names
an operator may choose, and each algorithm's constructor arguments.

Every algorithm class declares the worker settings it takes beyond the base ones
(``settings``: setting name -> constructor keyword), so nothing here lists algorithms.
"""

from __future__ import annotations

from typing import Any

from ..olu.registry import ALGORITHMS as _REGISTRY

ALGORITHMS = tuple(_REGISTRY)

# Settings every algorithm takes, under the same keyword (OnlineUnlearner.__init__).
BASE_MODEL_SETTINGS = ("dim", "loss", "l2", "label_bound", "radius", "feature_bound", "feature_policy",
                       "schedule", "t0", "step", "privacy_unit", "rho", "target_epsilon", "omega", "delta")


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
    return {k: v for k, v in kwargs.items() if v is not None}


def engine_class(algorithm: str):
    """The engine's class for ``algorithm``, or None if there is no such algorithm."""
    return _REGISTRY.get(algorithm)
