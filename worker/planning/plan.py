"""Assembling a plan: the predicted figures for the configured target and the other unit, the
l2 candidates, the optional simulation on a sample, and the advice. Returns one JSON-able dict
(its fields are listed in worker/planning/render.py)."""

from __future__ import annotations

from ..olu.privacy.analysis.units import UNITS
from .advice import assess
from .predict import noise_std, predict, renewal
from .simulate import L2_FACTORS, simulate
from .target import PLANNED_ALGORITHMS, build_engine

__all__ = ["make_plan"]


def _l2_values(l2: float) -> list[float]:
    return [l2] if l2 == 0 else [float(f"{l2 * f:.6g}") for f in L2_FACTORS]


def make_plan(settings, target, *, deletion_rate: float, events: int, age: int, sample=None,
              sample_path: str | None = None, sim_events: int | None = None, seed: int = 0) -> dict:
    """The plan of ``settings`` for ``target`` (see the module doc); ``sample`` adds the simulation."""
    model = build_engine(settings, target)
    figures = dict(deletion_rate=deletion_rate, omega=settings.omega, age=age)
    pred = predict(model, target, events=events, **figures)
    other = None
    if settings.algorithm in PLANNED_ALGORITHMS:
        other_target = target.with_unit(next(u for u in UNITS if u != target.unit))
        other_pred = predict(model, other_target, events=events, **figures)
        other = {"unit": other_target.unit, "noise_std": other_pred["noise_std"],
                 "noise_growth": other_pred["noise_growth"]}
    candidates = [{"l2": l2, "noise_std": noise_std(build_engine(settings, target, l2=l2), target, events=events,
                                                   **figures)} for l2 in _l2_values(settings.l2)]
    plan = {
        "algorithm": settings.algorithm, "loss": settings.loss, "dim": settings.dim, "l2": settings.l2,
        "radius": settings.radius, "feature_bound": settings.feature_bound,
        "L": model.constants.L, "mu": model.constants.mu,
        "unit": target.unit, "rho": target.rho, "epsilon": target.epsilon, "delta": target.delta,
        "target_epsilon": target.target_epsilon,
        "deletion_rate": deletion_rate, "events": events, "deletion_age": age, **pred,
        "other_unit": other, "l2_candidates": candidates, "simulation": None,
        "renewal": renewal(model, target, events=events, **figures) if type(model).rotates else None,
    }
    if sample is not None:
        sim_events = min(events, 100_000) if sim_events is None else sim_events
        units = [target.unit] + ([other["unit"]] if other else [])

        def make_engine(l2, unit, noise_rng):
            return build_engine(settings, target.with_unit(unit or target.unit), l2=l2, noise_rng=noise_rng)

        sim = simulate(sample, make_engine, loss=settings.loss, l2_values=[c["l2"] for c in candidates],
                       units=units, deletion_rate=deletion_rate, events=sim_events, age=age, seed=seed)
        sim["sample"] = sample_path
        sim["predicted_noise_std"] = {u: noise_std(model, target.with_unit(u), events=sim_events, **figures)
                                      for u in units}
        plan["simulation"] = sim
    plan["warnings"], plan["recommendation"] = assess(plan)
    return plan
