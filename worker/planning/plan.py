"""Assembling a plan: the predicted figures for the configured target and the other unit, the l2
candidates, and, with a sample, the workload and the search of the deployment's configuration on it;
then the advice. Returns one JSON-able dict (its fields are listed in worker/planning/render.py)."""

from __future__ import annotations

from dataclasses import asdict

from ..olu.privacy import UNITS
from .advice import assess
from .exact import exact_option
from .fourier import bandwidth_search
from .predict import noise_std, predict, renewal
from .search import scaled, search
from .target import PLANNED_ALGORITHMS, build_engine
from .workload import Shape, from_sample, from_shape

__all__ = ["L2_FACTORS", "SIM_EVENTS", "make_plan"]

#: The l2 values the noise formula compares: the configured one and these multiples of it.
L2_FACTORS = (0.3, 1.0, 3.0, 10.0)
#: Events simulated on a sample by default (at most the plan's stream length).
SIM_EVENTS = 200_000


def _l2_values(l2: float) -> list[float]:
    return [l2] if l2 == 0 else [scaled(l2, f) for f in L2_FACTORS]


def make_plan(settings, target, *, shape: Shape, events: int, sample=None,
              sample_path: str | None = None,
              sim_events: int | None = None, seed: int = 0, resample=None) -> dict:
    """The plan of ``settings`` for ``target`` on the workload ``shape`` describes (see the module
    doc). With a ``sample`` that holds deletes, its own requests are the workload (``shape`` then
    only gives the formula its rate and age, measured on the sample). ``resample(spec)``: the same
    sample read under another feature spec (the Fourier bandwidth search, fourier.py)."""
    model = build_engine(settings, target)
    workload = stats = rebuild = None
    if sample is not None:
        length = min(events, SIM_EVENTS) if sim_events is None else sim_events
        drawn = shape

        def rebuild(read):  # the workload of a sample, drawn as the sample's was
            return from_sample(read, length) if read.requests else from_shape(read, drawn,
                                                                             length, seed)
        workload = rebuild(sample)
        stats = workload.stats()
        if sample.requests:  # the formula's figures from the sample's own rate and median age
            shape = Shape(rate=stats["rate"], age=max(1, round(stats["age_events"]["p50"] or 1)),
                          records="key" if workload.multi_record() else "single")
    figures = dict(deletion_rate=shape.rate, omega=settings.omega, age=shape.age)
    pred = predict(model, target, events=events, **figures)
    other = None
    if settings.algorithm in PLANNED_ALGORITHMS:
        other_target = target.with_unit(next(u for u in UNITS if u != target.unit))
        other_pred = predict(model, other_target, events=events, **figures)
        other = {"unit": other_target.unit, "noise_std": other_pred["noise_std"],
                 "noise_growth": other_pred["noise_growth"]}
    candidates = [{"l2": l2, "noise_std": noise_std(build_engine(settings, target, l2=l2), target,
                                                    events=events, **figures)}
                  for l2 in _l2_values(settings.l2)]
    # a softmax model's classes and K d coordinates (binary plans keep their fields as they were)
    multiclass = ({"classes": list(model.loss.classes), "param_dim": model.param_dim}
                  if model.loss.name == "softmax" else {})
    plan = {
        "algorithm": settings.algorithm, "loss": settings.loss, "dim": settings.dim, **multiclass,
        "l2": settings.l2,
        "radius": settings.radius, "feature_bound": settings.feature_bound,
        "L": model.constants.L, "mu": model.constants.mu,
        "unit": target.unit, "rho": target.rho, "epsilon": target.epsilon, "delta": target.delta,
        "target_epsilon": target.target_epsilon,
        "deletion_rate": shape.rate, "events": events, "deletion_age": shape.age, **pred,
        "other_unit": other, "l2_candidates": candidates,
        "renewal": renewal(model, target, events=events, **figures) if type(model).rotates
        else None,
        "workload": None, "search": None,
    }
    if workload is not None:
        plan["workload"] = {**stats, "sample": sample_path, "records": len(sample),
                            "dropped": sample.dropped, "shape": None if sample.requests
                            else asdict(shape)}
        units = [target.unit] + ([other["unit"]] if other else [])
        plan["search"] = search(settings, target, workload, units=units, seed=seed)
        found = plan["search"]
        found["exact"] = exact_option(found["ogd_by_l2"], metric=found["metric"],
                                      workload=workload, dim=model.param_dim, events=events,
                                      every=settings.checkpoint_every)
        found["fourier"] = None if resample is None else bandwidth_search(
            settings, target, workload, rebuild=lambda spec: rebuild(resample(spec)),
            l2=found["exact"]["l2"], declared_score=found["exact"]["score"],
            metric=found["metric"])
    plan["warnings"], plan["recommendation"] = assess(plan)
    return plan
