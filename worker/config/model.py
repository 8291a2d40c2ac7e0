"""What the settings know about the engine's algorithms: their names, keyword arguments, classes.

To be replaced by reads of the engine's algorithm registry (``worker.olu``) once it has one: the
names, the per-algorithm keyword arguments and the class lookup are written out here meanwhile,
so that change touches only this module.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

ALGORITHMS = ("passive", "passive-restart", "active-d2d", "active-anchor", "active-newton",
              "retrain", "restart", "ogd", "memory-pair", "dp-tofw", "rewind")

# Engine keyword arguments per algorithm (the engine constructors: worker/olu/base.py, passive.py,
# active algorithms). ``max_deletions`` goes to ``max_deletions`` when the class takes it, else to
# the accountant's ``capacity`` for the algorithms listed in _CAPACITY.
_BASE_MODEL_KWARGS = ("dim", "loss", "l2", "label_bound", "radius", "feature_bound", "feature_policy",
                      "schedule", "t0", "step", "eps", "omega", "delta")
_EXTRA_MODEL_KWARGS = {
    "passive": ("max_deletions",),
    "passive-restart": ("restart_c", "max_deletions"),
    "active-d2d": ("max_deletions", "order_fallback"),
    "active-anchor": ("max_deletions", "order_fallback"),
    "active-newton": ("max_deletions", "order_fallback"),
    "retrain": ("max_deletions",),
    "restart": (),
    "ogd": (),
    "memory-pair": ("max_deletions", "on_budget", "lbfgs_memory"),
    "dp-tofw": ("dp_horizon",),
    "rewind": ("max_deletions", "retrain_every", "train_steps", "noise_sigma"),
}
_CAPACITY = frozenset({"passive"})
MODEL_SETTINGS = frozenset(_BASE_MODEL_KWARGS) | {"restart_c", "max_deletions", "order_fallback", "on_budget",
                                                   "lbfgs_memory", "dp_horizon", "retrain_every", "train_steps",
                                                   "noise_sigma"}


def model_kwargs(settings: Any) -> dict[str, Any]:
    """Keyword arguments for the engine class of ``settings.algorithm``: only those it accepts, no Nones."""
    algorithm = settings.algorithm
    names = _BASE_MODEL_KWARGS + _EXTRA_MODEL_KWARGS.get(algorithm, ())
    kwargs = {n: getattr(settings, n) for n in names}
    accepted = _accepted_kwargs(algorithm)
    if "max_deletions" in kwargs and (
        (accepted is not None and "max_deletions" not in accepted)
        or (accepted is None and algorithm in _CAPACITY)
    ):
        value = kwargs.pop("max_deletions")
        if algorithm in _CAPACITY:
            kwargs["capacity"] = value
    if accepted is not None:
        kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    return {k: v for k, v in kwargs.items() if v is not None}


def _accepted_kwargs(algorithm: str) -> frozenset[str] | None:
    """Keyword names the engine class accepts (following ``**kwargs`` up the MRO); None if unknown."""
    cls = engine_class(algorithm)
    if cls is None:
        return None
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names.update(p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    names.discard("self")
    return frozenset(names)


def engine_class(algorithm: str):
    """The engine's class for ``algorithm``, or None if this build has no engine or no such class."""
    try:
        from ..olu.base import ALGORITHMS as registry
    except ImportError:
        return None
    if algorithm not in registry:  # algorithms register on import: import the engine's modules
        from .. import olu

        for module in pkgutil.iter_modules(olu.__path__):
            if module.name == "kernels":  # numba; imported on first use by the engine itself
                continue
            try:
                importlib.import_module(f"{olu.__name__}.{module.name}")
            except ImportError:
                pass
    return registry.get(algorithm)


def registry_loaded() -> bool:
    """Whether the engine is importable (so an algorithm it lacks can be reported at start)."""
    try:
        from ..olu import base  # noqa: F401
    except ImportError:
        return False
    return True
