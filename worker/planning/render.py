"""Showing a plan: human text, one JSON object, or a PNG plot.

Fields of the JSON object (``olu-worker plan --json``)
------------------------------------------------------
* ``algorithm``, ``loss``, ``dim``, ``l2``, ``radius``, ``feature_bound``: the settings planned for;
  ``L``, ``mu``: the engine's Lipschitz and strong-convexity constants derived from them.
* ``unit`` (``all-deletions`` or ``per-request``), ``rho`` (Rényi slope: the model's lifetime
  budget, or the charge of one request), ``epsilon`` at ``delta`` (the guarantee it reports),
  ``target_epsilon`` (the requested epsilon, or null when rho was given).
* ``deletion_rate``, ``events``, ``deletion_age``: the plan; ``deletions``: requests it expects.
* ``sigma``: ``{first, typical, last}`` noise std of the first, median and last deletion (null
  without deletions).
* ``noise_std``: predicted per-coordinate noise std of the release after ``events`` events (an
  upper bound of the engine's; exact within a few percent for ridge with small features);
  ``noise_growth``: the same at 1e5, 1e6 and 1e7 events (keys are the lengths, as strings);
  ``noise_to_radius``: ``noise_std sqrt(dim) / radius``.
* ``other_unit``: ``{unit, noise_std, noise_growth}`` of the other unit at the same rho (null if the algorithm
  has only one).
* ``l2_candidates``: ``[{l2, noise_std}]`` for the configured l2 times 0.3, 1, 3 and 10.
* ``simulation`` (null without ``--sample``): ``metric`` (``accuracy`` or ``rmse``), ``sample``,
  ``records`` (usable inserts), ``dropped`` (over the feature bound), ``events``, ``steps``,
  ``deletions``, ``passes`` over the sample, ``seed``, ``tail`` (share of the stream scored),
  ``predicted_noise_std`` per unit at the simulated length, ``runs``: ``[{l2, ogd, ogd_weights_norm,
  units: {unit: score}, curves: {ogd | unit: [score per window]}}]`` and ``curve_events`` (the
  events at the end of each window).
* ``renewal`` (null under per-request, without deletions or for an algorithm that does not
  rotate): ``reserve``; ``planned``: ``{capacity, noise_std}`` of one model with the planned split
  for exactly ``events``; ``rotation``: ``[{lifetime, capacity, noise_std_young, noise_std_old}]``
  (overlap variant, rho / 2 per model; the released model just promoted, E/2 old, and about to
  retire, E old; capacity counts only requests naming records the model holds, given the deletion
  age); ``recommended``: ``{lifetime, capacity, l2, variant, source}``, ``source`` ``noise formula``
  (without a sample: l2 null, lifetimes of at least 100,000 only) or ``simulation`` (then also
  ``score``: the predicted steady-state accuracy or RMSE of the release, ``ogd`` at that l2 and
  ``ogd_configured_l2``); ``simulated`` (with a sample): ``{metric, events, steps, deletions, seed,
  tail, variant, runs: [{l2, ogd, lifetimes: [{lifetime, capacity, score}]}], best}``.
* ``warnings``: sentences (empty when the target is useful); ``recommendation``: ``{unit, l2
  (null without a sample), target_useful, text: [sentences]}``.
"""

from __future__ import annotations

import orjson

from .exceptions import PlotUnavailable

__all__ = ["plot", "to_json", "to_text"]


def to_json(plan: dict) -> str:
    return orjson.dumps(plan, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def _n(value: int) -> str:
    return f"{value:,}"


def to_text(plan: dict) -> str:
    lines = [f"olu-worker plan: {plan['algorithm']}, {plan['loss']}, dim {plan['dim']}, l2 {plan['l2']:g}, "
             f"radius {plan['radius']:g}, feature bound {plan['feature_bound']:g} "
             f"(L {plan['L']:.4g}, mu {plan['mu']:.4g})"]
    target = ("the target" if plan["target_epsilon"] is not None else "from rho")
    per = "per deletion request" if plan["unit"] == "per-request" else "for all deleted records together"
    lines.append(f"privacy unit {plan['unit']}: rho {plan['rho']:.4g} {per}, epsilon {plan['epsilon']:.4g} "
                 f"at delta {plan['delta']:g} ({target})")
    rate = plan["deletion_rate"]
    lines.append(f"deletions: {100 * rate:g}% of {_n(plan['events'])} events = {_n(plan['deletions'])} requests"
                 + (f", each naming a record inserted {_n(plan['deletion_age'])} events earlier"
                    if plan["deletions"] else ""))
    if plan["sigma"]:
        s = plan["sigma"]
        lines.append(f"per-deletion sigma: first {s['first']:.4g}, typical {s['typical']:.4g}, last {s['last']:.4g}")
    lines.append(f"predicted noise std per coordinate after {_n(plan['events'])} events: {plan['noise_std']:.4g} "
                 f"(noise norm / radius {plan['noise_to_radius']:.3g})")
    growth = ", ".join(f"{_n(int(n))}: {v:.4g}" for n, v in plan["noise_growth"].items())
    lines.append(f"  growth with the stream length: {growth}")
    if plan["other_unit"]:
        o = plan["other_unit"]
        lines.append(f"  {o['unit']} at the same rho: {o['noise_std']:.4g}")
    by_l2 = ", ".join(f"{c['l2']:g}: {c['noise_std']:.4g}" for c in plan["l2_candidates"])
    lines.append(f"  {plan['unit']} by l2: {by_l2}")
    ren = plan.get("renewal")
    if ren:
        p = ren["planned"]
        lines.append(f"planned split (OLU_BUDGET_SPLIT=planned, reserve {ren['reserve']:g}): one model planned for "
                     f"{_n(plan['events'])} events, capacity {_n(p['capacity'])}: noise std {p['noise_std']:.4g}")
        for r in ren["rotation"]:
            lines.append(f"  rotation, lifetime {_n(r['lifetime'])}: capacity {_n(r['capacity'])} per model, released "
                         f"noise std {r['noise_std_young']:.4g} (just promoted) to {r['noise_std_old']:.4g} (retiring)")
        sim = ren.get("simulated")
        if sim:
            lifetimes = [c["lifetime"] for c in sim["runs"][0]["lifetimes"]]
            lines.append(f"  rotation simulated on the sample ({_n(sim['events'])} events, {_n(sim['deletions'])} "
                         f"deletions, {sim['variant']}): {sim['metric']} over the last {int(100 * sim['tail'])}% by "
                         "l2 and lifetime")
            lines.append("  " + f"{'l2':>10}  {'plain OGD':>10}" + "".join(f"  {_n(e):>9}" for e in lifetimes))
            for run in sim["runs"]:
                lines.append("  " + f"{run['l2']:>10g}  {run['ogd']:>10.4f}"
                             + "".join(f"  {c['score']:>9.4f}" for c in run["lifetimes"]))
        rec = ren["recommended"]
        lines.append(f"  recommended: OLU_ROTATION=on, OLU_MODEL_LIFETIME_EVENTS={rec['lifetime']}, "
                     f"OLU_DELETION_CAPACITY={rec['capacity']}"
                     + (f", OLU_L2={rec['l2']:g}: predicted {ren['simulated']['metric']} {rec['score']:.4f}"
                        if rec.get("source") == "simulation" else " (noise formula)"))
    sim = plan["simulation"]
    if sim:
        units = list(sim["runs"][0]["units"])
        lines.append(f"simulation on {sim['sample']} ({_n(sim['records'])} records"
                     + (f", {_n(sim['dropped'])} over the feature bound dropped" if sim["dropped"] else "")
                     + f"; {_n(sim['events'])} events in {sim['passes']} pass(es), {_n(sim['deletions'])} deletions, "
                     f"seed {sim['seed']}): {sim['metric']} over the last {int(100 * sim['tail'])}%")
        lines.append("  " + f"{'l2':>10}  {'plain OGD':>12}" + "".join(f"  {u:>14}" for u in units))
        for run in sim["runs"]:
            lines.append("  " + f"{run['l2']:>10g}  {run['ogd']:>12.4f}"
                         + "".join(f"  {run['units'][u]:>14.4f}" for u in units))
    for warning in plan["warnings"]:
        lines.append(f"WARNING: {warning}")
    lines.append("recommendation:")
    lines += [f"  - {sentence}" for sentence in plan["recommendation"]["text"]]
    return "\n".join(lines)


def plot(plan: dict, path: str) -> None:
    """Predicted noise std vs events and, with a simulation, the score vs events for each l2."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: install the bench extra "
                              "(.venv/bin/pip install -e '.[bench]')") from None
    sim = plan["simulation"]
    fig, axes = plt.subplots(1, 2 if sim else 1, figsize=(11 if sim else 6, 4), squeeze=False)
    ax = axes[0][0]
    lengths = [int(n) for n in plan["noise_growth"]] + [plan["events"]]
    for figures in [plan] + ([plan["other_unit"]] if plan["other_unit"] else []):
        points = sorted({**{int(n): v for n, v in figures["noise_growth"].items()},
                         plan["events"]: figures["noise_std"]}.items())
        ax.loglog([n for n, _ in points], [v for _, v in points], marker="o", label=figures.get("unit", plan["unit"]))
    ax.set_xlabel("events")
    ax.set_ylabel("predicted noise std per coordinate")
    ax.set_title(f"rho {plan['rho']:.3g} (epsilon {plan['epsilon']:.3g} at delta {plan['delta']:g}), "
                 f"{100 * plan['deletion_rate']:g}% deletions")
    ax.set_xlim(min(lengths) / 2, max(lengths) * 2)
    ax.legend()
    if sim:
        ax = axes[0][1]
        for run in sim["runs"]:
            line, = ax.plot(sim["curve_events"], run["curves"][plan["unit"]], label=f"l2 {run['l2']:g}")
            ax.plot(sim["curve_events"], run["curves"]["ogd"], linestyle=":", color=line.get_color())
        ax.set_xlabel("events")
        ax.set_ylabel(f"{sim['metric']} (dotted: plain OGD)")
        ax.set_title(f"released model on the sample, {plan['unit']}")
        ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
