"""Assembling a plan: the predicted figures for the configured target and the other unit, the
l2 candidates, the optional simulation on a sample, and the advice. Returns one JSON-able dict
(its fields are listed in worker/planning/render.py)."""

from __future__ import annotations

from ..olu.privacy.analysis.units import UNITS
from ..olu.rotation import planned_capacity
from .advice import assess
from .predict import noise_std, predict, renewal
from .simulate import L2_FACTORS, RENEWAL_L2_FACTORS, RENEWAL_LIFETIMES, renewal_events, simulate, simulate_renewal
from .target import PLANNED_ALGORITHMS, build_engine, build_rotation

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
        if plan["renewal"] is not None:
            plan["renewal"] = _simulated_renewal(plan["renewal"], settings, target, sample,
                                                 deletion_rate=deletion_rate, events=events, age=age, seed=seed)
    plan["warnings"], plan["recommendation"] = assess(plan)
    return plan


def _simulated_renewal(ren: dict, settings, target, sample, *, deletion_rate: float, events: int,
                       age: int, seed: int) -> dict:
    """The rotation's (l2, lifetime) chosen by simulating it on the sample (the recommendation and
    the predicted steady-state score replace the noise formula's)."""
    reserve = ren["reserve"]

    def make_rotation(l2, lifetime, noise_rng):
        capacity = planned_capacity(deletion_rate, lifetime, "overlap", age=age)
        return build_rotation(settings, target, lifetime=lifetime, capacity=capacity, l2=l2, reserve=reserve,
                              noise_rng=noise_rng), capacity

    def make_ogd(l2):
        return build_engine(settings, target, l2=l2)

    l2_values = [settings.l2] if settings.l2 == 0 else [float(f"{settings.l2 * f:.6g}") for f in RENEWAL_L2_FACTORS]
    sim = simulate_renewal(sample, make_rotation, make_ogd, loss=settings.loss, l2_values=l2_values,
                           lifetimes=RENEWAL_LIFETIMES, deletion_rate=deletion_rate,
                           events=renewal_events(events, age), age=age, seed=seed)
    best = sim["best"]
    configured = next((run["ogd"] for run in sim["runs"] if run["l2"] == settings.l2), best["ogd"])
    recommended = {"lifetime": best["lifetime"], "capacity": best["capacity"], "l2": best["l2"], "variant": "overlap",
                   "source": "simulation", "score": best["score"], "ogd": best["ogd"], "ogd_configured_l2": configured}
    return {**ren, "simulated": sim, "recommended": recommended}
