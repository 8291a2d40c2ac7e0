"""Warnings and recommendations of a plan, from its predicted and simulated figures. Pure.

A target is not useful when either

* the predicted noise norm ``noise_std sqrt(d)`` exceeds :data:`NOISE_TO_SIGNAL_LIMIT` times the
  norm of the weights: those plain OGD reaches on the sample, or, without a sample, the radius of
  the parameter ball (no weights are longer, so the ratio is then a lower bound); or
* on the sample, the released model's score is more than :data:`ACCURACY_GAP` below plain OGD's
  (logistic accuracy) or its RMSE more than :data:`RMSE_RATIO` times OGD's (ridge).

The same tests are applied to the other unit at the same slope, to say whether switching helps;
the recommended l2 is the one whose released model scores best on the sample.
"""

from __future__ import annotations

__all__ = ["ACCURACY_GAP", "NOISE_TO_SIGNAL_LIMIT", "RMSE_RATIO", "assess", "problems", "renewal_advice"]

NOISE_TO_SIGNAL_LIMIT = 0.5
ACCURACY_GAP = 0.03
RMSE_RATIO = 1.10


def _run(simulation: dict | None, l2: float) -> dict | None:
    if simulation is None:
        return None
    return min(simulation["runs"], key=lambda run: abs(run["l2"] - l2))


def noise_to_signal(std: float, dim: int, radius: float, run: dict | None) -> tuple[float, str]:
    """(ratio, what it is measured against)."""
    if run is not None and run["ogd_weights_norm"] > 0:
        return std * dim ** 0.5 / run["ogd_weights_norm"], "the weights plain OGD reaches on the sample"
    return std * dim ** 0.5 / radius, "the radius (a lower bound: no weights are longer)"


def problems(unit: str, std: float, *, dim: int, radius: float, simulation: dict | None, l2: float) -> list[str]:
    """Why ``unit`` with noise ``std`` is not useful (empty: it is)."""
    out = []
    run = _run(simulation, l2)
    ratio, against = noise_to_signal(std, dim, radius, run)
    if ratio > NOISE_TO_SIGNAL_LIMIT:
        out.append(f"predicted noise norm is {ratio:.2f} of {against} (above {NOISE_TO_SIGNAL_LIMIT})")
    if run is not None and unit in run["units"]:
        score, ogd = run["units"][unit], run["ogd"]
        if simulation["metric"] == "accuracy" and score < ogd - ACCURACY_GAP:
            out.append(f"simulated accuracy {score:.3f} is {100 * (ogd - score):.1f} points below plain OGD's "
                       f"{ogd:.3f}")
        if simulation["metric"] == "rmse" and score > ogd * RMSE_RATIO:
            out.append(f"simulated RMSE {score:.4g} is {score / ogd:.2f}x plain OGD's {ogd:.4g}")
    return out


def _best_l2(simulation: dict, unit: str) -> float:
    scored = [run for run in simulation["runs"] if unit in run["units"]]
    pick = max if simulation["metric"] == "accuracy" else min
    return pick(scored, key=lambda run: run["units"][unit])["l2"]


def assess(plan: dict) -> tuple[list[str], dict]:
    """(warnings, recommendation) for a plan holding the predicted and simulated figures."""
    unit, other = plan["unit"], plan["other_unit"]
    sim, l2 = plan["simulation"], plan["l2"]
    common = dict(dim=plan["dim"], radius=plan["radius"], simulation=sim, l2=l2)
    mine = problems(unit, plan["noise_std"], **common)
    theirs = problems(other["unit"], other["noise_std"], **common) if other else None
    target = (f"epsilon {plan['target_epsilon']:g}" if plan["target_epsilon"] is not None
              else f"rho {plan['rho']:g} (epsilon {plan['epsilon']:.3g})")
    warnings = []
    if mine:
        warnings.append(f"the {unit} target {target} at delta {plan['delta']:g} cannot be met with useful "
                        f"accuracy at {100 * plan['deletion_rate']:g}% deletions: " + "; ".join(mine))
    text = []
    best_unit = unit
    if mine and theirs is not None and not theirs:
        best_unit = other["unit"]
        text.append(f"use the {other['unit']} unit: the same slope gives noise std {other['noise_std']:.3g} "
                    f"instead of {plan['noise_std']:.3g}" + (
                        "; it protects each deletion request on its own, not all deleted records together"
                        if best_unit == "per-request" else ""))
    elif mine:
        text.append("no unit meets this target usefully: relax the target, lower the deletion rate, "
                    "or renew the model more often")
    else:
        text.append(f"the {unit} target is useful at this deletion rate")
    best_l2 = None
    if sim is not None:
        best_l2 = _best_l2(sim, best_unit)
        text.append(f"l2 {best_l2:g} scores best on the sample for the {best_unit} unit"
                    + (" (the configured value)" if best_l2 == l2 else f" (configured: {l2:g})"))
    else:
        text.append("give --sample FILE to compare l2 values and the released model's accuracy with plain OGD")
    renewal = renewal_advice(plan.get("renewal"))
    if renewal is not None:
        warning, sentence = renewal
        text.append(sentence)
        if warning:
            warnings.append(warning)
    return warnings, {"unit": best_unit, "l2": best_l2, "target_useful": not mine, "text": text}


def renewal_advice(ren: dict | None) -> tuple[str | None, str] | None:
    """(warning or None, sentence) on the rotation the plan recommends; None without one.

    With a simulation the sentence gives the predicted steady-state score of the recommended
    (l2, lifetime, capacity), and the warning fires when it is more than :data:`ACCURACY_GAP`
    below plain OGD (logistic) or :data:`RMSE_RATIO` times its RMSE (ridge).
    """
    if not ren:
        return None
    rec = ren["recommended"]
    setting = (f"OLU_ROTATION=on OLU_ROTATION_VARIANT={rec['variant']} OLU_MODEL_LIFETIME_EVENTS={rec['lifetime']} "
               f"OLU_BUDGET_SPLIT=planned OLU_DELETION_CAPACITY={rec['capacity']}")
    if rec.get("source") != "simulation":
        return None, (f"renewal: {setting} (from the noise formula; give --sample to choose the lifetime and l2 "
                      "by simulation)")
    metric = ren["simulated"]["metric"]
    score, ogd = rec["score"], rec["ogd"]
    sentence = (f"renewal: {setting} OLU_L2={rec['l2']:g}: predicted steady-state {metric} of the release "
                f"{score:.4g} (plain OGD {ogd:.4g} at that l2)")
    bad = score < ogd - ACCURACY_GAP if metric == "accuracy" else score > ogd * RMSE_RATIO
    if not bad:
        return None, sentence
    gap = f"{100 * (ogd - score):.1f} points below" if metric == "accuracy" else f"{score / ogd:.2f}x"
    warning = (f"even the best simulated rotation (l2 {rec['l2']:g}, lifetime {rec['lifetime']:,}) predicts a "
               f"steady-state {metric} of {score:.4g}, {gap} plain OGD's {ogd:.4g}: relax the target or lower the "
               "deletion rate")
    return warning, sentence
