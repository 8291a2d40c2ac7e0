"""A model's state, written (``OnlineUnlearner.export_state``) and rebuilt from it
(``OnlineUnlearner.from_state``), every part checked."""

from __future__ import annotations

import numpy as np

from ..arith import norm
from ..exceptions import InvalidState
from ..privacy.accountant import load_accountant
from ..privacy.ledger import Ledger
from .contribution import ContributionCap
from .index import AppliedIndex
from .subjects import SubjectIndex
from .tombstones import KeySet

READABLE_FORMATS = (1, 2, 3, 4)


def exported(model, state_format: int) -> dict:
    """{'meta': JSON-able dict, 'arrays': {name: ndarray},
    'shared': immutable array groups} of ``model``."""
    meta = {
        "format": state_format, "algorithm": model.algorithm, "config": dict(model.config),
        "t": model.t, "epoch": model.epoch, "counters": dict(model.counters),
        "deletions_applied": model.deletions_applied,
        "accountant": model.accountant.to_state(), "extra": model._export_extra(),
    }
    meta["ledger"], sealed, ledger_shared = model.ledger.export()
    meta["ledger_sealed"] = {"segments": sealed, "segment_entries": model.ledger.segment_entries}
    index_arrays, shared = model.index.export()
    recent_tombstones, tombstone_shared = model.tombstones.export()
    shared.update(ledger_shared)
    shared.update(tombstone_shared)
    arrays = {"z": model.z.copy(), "tombstones": recent_tombstones, **index_arrays}
    if model.unscaled_sqnorm is not None:
        # a sparse step's iterate and kept norm (core/iterate.py), exactly
        arrays["z_unscaled"] = model.unscaled.copy()
        meta["z_scale"], meta["z_sqnorm"] = model.scale, model.unscaled_sqnorm
    if model.subject_index is not None:
        subject_arrays, subject_shared = model.subject_index.export()
        arrays.update(subject_arrays)
        shared.update(subject_shared)
    if model.key_cap is not None:
        arrays["key_cap_keys"], arrays["key_cap_counts"] = model.key_cap.export()
        meta["key_cap_refused"] = model.key_cap.refused
    arrays.update(model._export_arrays())
    # ``shared`` arrays are immutable and not copied: a store may write each group once.
    return {"meta": meta, "arrays": arrays, "shared": shared}


def subclass_named(cls: type, name: str) -> type | None:
    """``cls`` or the subclass of it whose ``algorithm`` is ``name``."""
    if cls.algorithm == name:
        return cls
    for sub in cls.__subclasses__():
        if (found := subclass_named(sub, name)) is not None:
            return found
    return None


def _deletions_applied(model, stored) -> int:
    """The stored count, checked against what the ledger and accountant prove happened."""
    floor = max(len(model.ledger), model.accountant.lifetime_deletions)
    if stored is None:  # written before the count was stored (it is optional in the state)
        return max(floor, model._legacy_deletions_applied())
    if isinstance(stored, bool) or not isinstance(stored, int) or stored < floor:
        raise InvalidState(
            f"deletions_applied {stored!r} is not an integer >= {floor} (ledger and accountant)")
    return stored


def _constructor_config(cls: type, config: dict) -> dict:
    """The stored config as constructor arguments. A target epsilon is re-derived (the inversion is
    deterministic, so the same rho); configs saved before units had ``eps``: the slope (rho) for
    every algorithm but rewind, where it was the (epsilon, delta) target."""
    config = dict(config)
    if "eps" in config:
        key = "target_epsilon" if cls.calibration == "rewind" else "rho"
        config[key] = config.pop("eps")
    if config.get("target_epsilon") is not None:
        config.pop("rho", None)
    else:
        config.pop("target_epsilon", None)
    return config


def _restore_scaled(model, unscaled: np.ndarray, scale, sqnorm) -> None:
    """The iterate as ``scale * unscaled``, checked against the stored ``z`` it must give."""
    if unscaled.shape != (model.param_dim,) or not np.all(np.isfinite(unscaled)):
        raise InvalidState(
            f"unscaled iterate has shape {unscaled.shape}, expected ({model.param_dim},) and "
            "finite")
    if not (isinstance(scale, float) and (sqnorm is None or isinstance(sqnorm, float))):
        raise InvalidState(f"iterate scale {scale!r} / kept norm {sqnorm!r} are not numbers")
    expected = model.z
    try:
        model.set_scaled(unscaled.copy(), scale, sqnorm)
    except ValueError as exc:
        raise InvalidState(str(exc)) from None
    if not np.array_equal(model.z, expected):
        raise InvalidState("the unscaled iterate times its scale is not the stored iterate")


def rebuild(cls: type, state: dict, noise_rng):
    """A model of class ``cls`` from ``export_state()``
    (``OnlineUnlearner.from_state``), or InvalidState."""
    try:
        meta, arrays = state["meta"], state["arrays"]
        if meta["format"] not in READABLE_FORMATS:
            raise InvalidState(
                f"unknown state format {meta['format']!r} (this build reads {READABLE_FORMATS})")
        model = cls(**_constructor_config(cls, meta["config"]), noise_rng=noise_rng)
        z = np.asarray(arrays["z"], np.float64)
        if z.shape != (model.param_dim,) or not np.all(np.isfinite(z)):
            raise InvalidState(
                f"iterate has shape {z.shape}, expected ({model.param_dim},) and finite")
        if norm(z) > model.ball.radius * (1 + 1e-12):
            raise InvalidState("iterate lies outside the domain K")
        model.z = z.copy()
        if "z_unscaled" in arrays:
            _restore_scaled(model, np.asarray(arrays["z_unscaled"], np.float64), meta["z_scale"],
                            meta["z_sqnorm"])
        model.t, model.epoch = int(meta["t"]), int(meta["epoch"])
        model.counters = {k: int(v) for k, v in meta["counters"].items()}
        model.accountant = load_accountant(meta["accountant"])
        sealed = meta.get("ledger_sealed", {"segments": 0})
        model.ledger = Ledger.load(meta["ledger"], sealed["segments"], state.get("shared"),
                                   stored_segment_entries=sealed.get("segment_entries"))
        model.index = AppliedIndex.load(arrays, state.get("shared"))
        model.tombstones = KeySet.load(arrays["tombstones"], state.get("shared"))
        if model.index.max_step > model.t:
            raise InvalidState("applied index holds a step after the step counter")
        if model.key_cap is not None:
            empty = np.zeros(0, np.uint64)
            model.key_cap = ContributionCap.load(model.key_cap.limit,
                                                 arrays.get("key_cap_keys", empty),
                                                 arrays.get("key_cap_counts", empty),
                                                 meta.get("key_cap_refused", 0))
        if model.subject_index is not None:
            if "subjects_open" not in arrays:
                raise InvalidState("forget_by_key is on but the state holds no subject index")
            model.subject_index = SubjectIndex.load(arrays, state.get("shared"))
        model._import(meta, arrays)
        model.noise_meter.restore(model.ledger, model.epoch, model.t)
        model.deletions_applied = _deletions_applied(model, meta.get("deletions_applied"))
        return model
    except InvalidState:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidState(f"malformed model state: {exc!r}") from None

