"""The predicted noise of a plan: pure math on the engine's public constants, no data.

A plan is ``events`` stream events of which a fraction ``deletion_rate`` are deletion requests,
spread uniformly (:func:`worker.olu.privacy.analysis.noise.plan_deletions`), each naming one
record inserted ``age`` steps before it. From the engine's schedule (its contraction), its
Lipschitz constant L and the domain's diameter, and the target (unit, rho), this module gives:

* the sigma of the first, the median ("typical") and the last deletion: ``sigma_j = a_j m_j``
  with the shift ``a_j = Gamma_{u,tau} min(eta_u L, D)`` and the multiplier ``m_j`` of the unit
  (``1 / sqrt(2 rho)`` per request; the omega weights' ``sqrt(omega j**omega / (2 (omega - 1)
  rho))`` over all deletions, docs/calibration.md 5.1);
* the predicted per-coordinate noise std of the release after the stream
  (:func:`~worker.olu.privacy.analysis.noise.predicted_noise_std`, derivation in its module
  doc): an upper bound of the std of the engine's release on the same plan, exact up to a few
  percent for ridge with small feature norms, pessimistic for logistic (the data's curvature
  contracts the noise faster than l2 alone), and its growth with the stream length;
* ``noise_to_radius``: the expected noise norm ``std sqrt(p)`` over the radius of the parameter
  ball, ``p`` the parameter's coordinates (``model.param_dim``: d, or K d for a K-class softmax,
  whose noise covers its K x d matrix). No released weights are longer than the radius, so this is
  a lower bound of the noise-to-signal ratio whatever the data.

Under the strongly convex schedule ``age`` changes no number (every shift contracts to
``L / (mu (tau + t0))`` at its deletion); it matters for the other schedules.
"""

from __future__ import annotations

import math

from ..olu.formulas import passive_shift, sensitivity
from ..olu.privacy import (
    DEFAULT_RESERVE,
    capacity_for_rate,
    noise_multiplier,
    per_request_sigma,
    plan_deletions,
    predicted_noise_growth,
    predicted_noise_std,
)
from ..olu.rotation import charged_deletions, model_budget, planned_capacity

__all__ = ["GROWTH_LENGTHS", "LIFETIMES", "NO_SAMPLE_MIN_LIFETIME", "deletion_sigmas", "noise_std",
           "predict", "renewal"]

#: Stream lengths at which the growth of the noise is shown.
GROWTH_LENGTHS = (10**5, 10**6, 10**7)
#: Model lifetimes (OLU_MODEL_LIFETIME_EVENTS) the renewal figures compare.
LIFETIMES = (5_000, 10_000, 20_000, 50_000, 10**5, 2 * 10**5, 4 * 10**5, 10**6)
#: Without a sample the recommendation is taken among lifetimes of at least this many events: the
#: noise formula favours ever shorter lifetimes, and only a simulation weighs what a young model
#: loses by having seen fewer records.
NO_SAMPLE_MIN_LIFETIME = 10**5


def _plan_kwargs(model, target, deletion_rate: float, omega: float, age: int) -> dict:
    kwargs = dict(unit=target.unit, L=model.constants.L, rho=target.rho,
                  deletion_rate=deletion_rate,
                  schedule=model.schedule, diameter=model.ball.diameter, age=age)
    if target.unit == "all-deletions":
        kwargs["omega"] = omega
    return kwargs


def noise_std(model, target, *, deletion_rate: float, events: int, omega: float, age: int) -> float:
    """Predicted per-coordinate noise std of ``model``'s release after ``events`` events."""
    return predicted_noise_std(events=events,
                               **_plan_kwargs(model, target, deletion_rate, omega, age))


def deletion_sigmas(model, target, *, deletion_rate: float, events: int, omega: float,
                    age: int) -> dict[str, float] | None:
    """sigma of the first, the median and the last deletion of the plan (None: no deletion)."""
    _, taus = plan_deletions(events, deletion_rate)
    if not taus:
        return None
    schedule, L, cap = model.schedule, model.constants.L, model.ball.diameter

    def sigma(j: int) -> float:
        tau = taus[j - 1]
        u = max(1, tau - age)
        shift = passive_shift(schedule.log_contraction(u, tau),
                              sensitivity(schedule.eta(u), L, cap))
        if target.unit == "per-request":
            return per_request_sigma([shift], target.rho)
        return shift * noise_multiplier(j, target.rho, omega)

    k = len(taus)
    return {"first": sigma(1), "typical": sigma((k + 1) // 2), "last": sigma(k)}


def predict(model, target, *, deletion_rate: float, events: int, omega: float, age: int,
            lengths=GROWTH_LENGTHS) -> dict:
    """The noise figures of a plan (JSON-able; the fields are described in
    worker/planning/render.py)."""
    std = noise_std(model, target, deletion_rate=deletion_rate, events=events, omega=omega, age=age)
    kwargs = _plan_kwargs(model, target, deletion_rate, omega, age)
    growth = predicted_noise_growth(sorted(set(lengths)), **kwargs)
    _, taus = plan_deletions(events, deletion_rate)
    return {
        "deletions": len(taus),
        "sigma": deletion_sigmas(model, target, deletion_rate=deletion_rate, events=events,
                                 omega=omega, age=age),
        "noise_std": std,
        "noise_growth": {str(n): v for n, v in growth.items()},
        "noise_norm": std * math.sqrt(model.param_dim),
        "noise_to_radius": std * math.sqrt(model.param_dim) / model.ball.radius,
    }


def renewal(model, target, *, deletion_rate: float, events: int, omega: float, age: int,
            reserve: float = DEFAULT_RESERVE, lifetimes=LIFETIMES) -> dict | None:
    """Planned split and warm-standby rotation (docs/accounting.md 11, docs/accounting.md 12) under
    the all-deletions unit: the capacity K to plan and the predicted noise std of the release.

    ``planned``: one model planned for exactly ``events`` (K = rate x events; it needs the horizon).
    ``rotation``: per lifetime E, the overlap variant's per-model K and rho / 2, and the noise of
    the released model when it is youngest (E/2 events old, just promoted) and oldest (E). K counts
    only the requests naming records the model holds (:func:`worker.olu.rotation.planned_capacity`
    with the deletion ``age``): a model younger than ``age`` holds a fraction of the records
    requests name, so short lifetimes are charged for few deletions (docs/accounting.md 12.6). The
    noise rows use the charged rate at that age (``charged_deletions(T) / T``): an approximation,
    which counts the charged requests as spread evenly over the model's life. ``recommended``: the
    longest lifetime of at least :data:`NO_SAMPLE_MIN_LIFETIME` whose youngest release is within
    1% of the least noise among those; with a sample the plan replaces it with the simulation's
    best (worker/planning/plan.py). None under per-request or without deletions.
    """
    if target.unit != "all-deletions" or deletion_rate <= 0:
        return None
    base = _plan_kwargs(model, target, deletion_rate, omega, age)
    k = capacity_for_rate(deletion_rate, events)
    single = predicted_noise_std(**base, events=events, split="planned", capacity=k,
                                 reserve=reserve)
    rows = []
    for lifetime in lifetimes:
        cap = planned_capacity(deletion_rate, lifetime, "overlap", age=age)
        kw = {**base, "rho": model_budget(target.unit, "overlap", target.rho), "split": "planned",
              "capacity": cap, "reserve": reserve}

        def at(t: int, kw=kw) -> float:
            rate = min(deletion_rate, charged_deletions(deletion_rate, t, age) / t)
            return predicted_noise_std(**{**kw, "deletion_rate": rate},
                                       events=t) if rate > 0 else 0.0

        rows.append({"lifetime": lifetime, "capacity": cap, "noise_std_young": at(lifetime // 2),
                     "noise_std_old": at(lifetime)})
    pool = [r for r in rows if r["lifetime"] >= NO_SAMPLE_MIN_LIFETIME] or rows
    # within 1% of it counts as a tie: the longest wins
    least = min(r["noise_std_young"] for r in pool)
    best = max((r for r in pool if r["noise_std_young"] <= 1.01 * least),
               key=lambda r: r["lifetime"])
    return {"reserve": reserve, "planned": {"capacity": k, "noise_std": single}, "rotation": rows,
            "recommended": {"lifetime": best["lifetime"], "capacity": best["capacity"], "l2": None,
                            "variant": "overlap", "source": "noise formula"}}
