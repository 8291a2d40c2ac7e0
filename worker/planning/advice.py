"""Warnings and the recommendation of a plan, from its predicted and simulated figures. Pure.

With a sample, the recommendation is the searched configuration (worker/planning/search.py) whose
released model scores best under the operator's unit, and a warning says so when even that one is
more than :data:`ACCURACY_GAP` below plain OGD (accuracy: logistic, and softmax's multiclass one)
or its RMSE more than :data:`RMSE_RATIO` times OGD's (ridge); the other unit's best is shown beside
it.

Without a sample only the noise formula speaks: a target is not useful when the predicted noise norm
``noise_std sqrt(p)`` (``p`` the parameter's coordinates: d, or K d for a K-class softmax) exceeds
:data:`NOISE_TO_SIGNAL_LIMIT` times the radius of the parameter ball (no weights are longer, so the
ratio is a lower bound of the noise-to-signal).
"""

from __future__ import annotations

__all__ = ["ACCURACY_GAP", "NOISE_TO_SIGNAL_LIMIT", "RMSE_RATIO", "assess", "falls_short",
           "formula_problems", "renewal_advice"]

NOISE_TO_SIGNAL_LIMIT = 0.5
ACCURACY_GAP = 0.03
RMSE_RATIO = 1.10


def falls_short(metric: str, score: float, ogd: float) -> bool:
    """More than :data:`ACCURACY_GAP` below plain OGD, or an
    RMSE above :data:`RMSE_RATIO` times its."""
    return score < ogd - ACCURACY_GAP if metric == "accuracy" else score > ogd * RMSE_RATIO


def _gap(metric: str, score: float, ogd: float) -> str:
    if metric == "accuracy":
        return f"{100 * (ogd - score):.1f} points below plain OGD's {ogd:.3f}"
    return f"{score / ogd:.2f}x plain OGD's RMSE {ogd:.4g}"


def formula_problems(std: float, *, dim: int, radius: float) -> list[str]:
    """Why noise ``std`` (per coordinate) makes the release useless, by the formula alone; ``dim``:
    the coordinates of the parameter (``param_dim``)."""
    ratio = std * dim ** 0.5 / radius
    if ratio > NOISE_TO_SIGNAL_LIMIT:
        return [f"predicted noise norm is {ratio:.2f} of the radius (above "
                f"{NOISE_TO_SIGNAL_LIMIT}; no weights are longer than the radius, so the release "
                "is mostly noise)"]
    return []


def _target(plan: dict) -> str:
    return (f"epsilon {plan['target_epsilon']:g}" if plan["target_epsilon"] is not None
            else f"rho {plan['rho']:g} (epsilon {plan['epsilon']:.3g})")


def assess(plan: dict) -> tuple[list[str], dict]:
    """(warnings, recommendation) for a plan holding the
    predicted and, with a sample, searched figures."""
    if plan["search"] is not None:
        return _searched(plan)
    unit, other = plan["unit"], plan["other_unit"]
    common = dict(dim=plan.get("param_dim", plan["dim"]), radius=plan["radius"])
    mine = formula_problems(plan["noise_std"], **common)
    theirs = formula_problems(other["noise_std"], **common) if other else None
    warnings, text, best_unit = [], [], unit
    if mine:
        warnings.append(
            f"the {unit} target {_target(plan)} at delta {plan['delta']:g} cannot be met with "
            f"useful accuracy at {100 * plan['deletion_rate']:g}% deletions: " + "; ".join(mine))
    if mine and theirs is not None and not theirs:
        best_unit = other["unit"]
        text.append(
            f"use the {best_unit} unit: the same slope gives noise std {other['noise_std']:.3g} "
            f"instead of {plan['noise_std']:.3g}" + (
                "; it protects each deletion request on its own, not all deleted records together"
                if best_unit == "per-request" else ""))
    elif mine:
        text.append(
            "no unit meets this target usefully by the formula: relax the target, lower the "
            "deletion rate, or renew the model more often")
    else:
        text.append(f"the {unit} target is useful at this deletion rate by the formula")
    text.append(
        "give --sample FILE (your events; with deletes, their own rate, sizes and ages) to search "
        "the configuration by simulation and predict the released model's accuracy")
    renewal = renewal_advice(plan.get("renewal"))
    if renewal is not None:
        text.append(renewal)
    return warnings, {"unit": best_unit, "settings": None, "predicted": None, "ogd": None,
                      "l2": None,
                      "target_useful": not mine, "watch": None, "text": text}


def _searched(plan: dict) -> tuple[list[str], dict]:
    found, unit = plan["search"], plan["unit"]
    metric, ogd = found["metric"], found["ogd"]
    mine = found["best"][unit]
    others = [found["best"][u] for u in found["best"] if u != unit]
    warnings, text = [], []
    short = falls_short(metric, mine["score"], ogd)
    text.append(f"{mine['settings']}: predicted {metric} of the release {mine['score']:.4g} at "
                f"{plan['search']['events']:,} events, plain OGD {ogd:.4g}")
    if short:
        warnings.append(
            f"under {unit} the best configuration simulated on the workload predicts a {metric} of "
            f"{mine['score']:.4g}, {_gap(metric, mine['score'], ogd)}: the {unit} target "
            f"{_target(plan)} cannot be met usefully on this workload")
    for theirs in others:
        verdict = "also falls short" if falls_short(metric, theirs["score"],
                                                    ogd) else "would be useful"
        text.append(
            f"the {theirs['unit']} unit {verdict}: best {theirs['settings']}, predicted "
            f"{theirs['score']:.4g}"
            + (" (it protects each deletion request on its own, not all deleted records together)"
               if theirs["unit"] == "per-request" else ""))
    exact = found.get("exact")
    if exact and falls_short(metric, mine["score"], exact["score"]):
        text.append(exact_advice(exact, metric, events=plan["events"]))
    fourier = found.get("fourier")
    if fourier and fourier["best"]:
        text.append(fourier_advice(fourier, metric))
    watch = _watch(plan["workload"])
    if watch:  # right after the settings it goes with
        text.insert(
            1, f"with the workload it assumes, which the worker watches and alerts on: {watch}")
    if plan["workload"] and plan["workload"]["outside"]:
        text.append(
            f"{plan['workload']['outside']:,} deleted ids name records older than the sample: not "
            "simulated (their cost is missing from the prediction; a longer sample includes them)")
    return warnings, {"unit": unit, "settings": mine["settings"], "predicted": mine["score"],
                      "ogd": ogd,
                      "l2": mine["l2"], "target_useful": not short, "watch": watch, "text": text}


def fourier_advice(fourier: dict, metric: str) -> str:
    """The sentence that proposes another bandwidth for a spec's Fourier block."""
    best = fourier["best"]
    return (f"the spec's fourier block over {', '.join(best['fields'])} scores better at bandwidth "
            f"{best['bandwidth']:.4g} than at the declared {best['declared']:.4g}: plain OGD "
            f"{best['score']:.4g} against {fourier['declared_score']:.4g} ({metric}, l2 "
            f"{fourier['l2']:g}); the norm bound and the noise are unchanged, but it is a new spec "
            "(a new model): write it into the spec and plan again")


def exact_advice(exact: dict, metric: str, *, events: int) -> str:
    """The sentence that offers exact unlearning where the noised units fall short of it."""
    ceiling = exact["events_per_s_ceiling"]
    ms, gib = 1e3 * exact["seconds_per_deletion"], exact["memory_bytes"] / 2**30
    return (f"exact unlearning keeps plain OGD's {metric}: {exact['settings']}, predicted "
            f"{exact['score']:.4g} with no noise at any epsilon; each deletion replays "
            f"~{exact['replayed_per_deletion']:,.0f} rows (~{ms:.3g} ms), every retained row stays "
            f"in memory (~{gib:.3g} GiB at {events:,} events)"
            + (f", and the replays alone cap a partition at ~{ceiling:,.0f} events/s" if ceiling
               else ""))


def _watch(workload: dict | None) -> str | None:
    """The plan's assumptions as the settings the worker
    exports and alerts on (OluDeletion* alerts)."""
    if not workload or not workload.get("requests"):
        return None
    out = [f"OLU_EXPECTED_DELETION_RATE={workload['rate']:.4g}"]
    if workload["records_per_request"]["mean"] is not None:
        records = max(1.0, workload["records_per_request"]["mean"])
        out.append(f"OLU_PLANNED_RECORDS_PER_REQUEST={records:.3g}")
    if workload["age_events"]["p50"] is not None:
        out.append(
            f"OLU_PLANNED_DELETION_AGE_EVENTS={max(1, round(workload['age_events']['p50']))}")
    return " ".join(out)


def renewal_advice(ren: dict | None) -> str | None:
    """The rotation the noise formula suggests (without a sample), or None."""
    if not ren:
        return None
    rec = ren["recommended"]
    return (f"renewal by the formula: OLU_ROTATION=on OLU_ROTATION_VARIANT={rec['variant']} "
            f"OLU_MODEL_LIFETIME_EVENTS={rec['lifetime']} OLU_BUDGET_SPLIT=planned "
            f"OLU_DELETION_CAPACITY={rec['capacity']} (give --sample to choose by simulation)")
