"""Showing a plan: human text, one JSON object, or a PNG plot.

Fields of the JSON object (``olu-worker plan --json``)
------------------------------------------------------
* ``algorithm``, ``loss``, ``dim``, ``l2``, ``radius``, ``feature_bound``: the settings planned for;
  ``L``, ``mu``: the engine's Lipschitz and strong-convexity constants derived from them. Softmax
  only: ``classes`` (the K declared classes) and ``param_dim`` (K x dim, the coordinates of its
  K x d parameter, which the noise covers).
* ``unit`` (``all-deletions`` or ``per-request``), ``rho`` (Rényi slope: the model's lifetime
  budget, or the charge of one request), ``epsilon`` at ``delta`` (the guarantee it reports),
  ``target_epsilon`` (the requested epsilon, or null when rho was given).
* ``deletion_rate``, ``events``, ``deletion_age``: the plan; ``deletions``: requests it expects.
* ``sigma``: ``{first, typical, last}`` noise std of the first, median and last deletion (null
  without deletions).
* ``noise_std``: predicted per-coordinate noise std of the release after ``events`` events (an
  upper bound of the engine's; exact within a few percent for ridge with small features);
  ``noise_growth``: the same at 1e5, 1e6 and 1e7 events (keys are the lengths, as strings);
  ``noise_norm``: the expected norm of that noise, ``noise_std sqrt(dim)`` (softmax:
  ``noise_std sqrt(param_dim)``, K x dim coordinates): the std per coordinate does not depend on
  the dimension, the norm grows with its square root (and the weights' norm does not);
  ``noise_to_radius``: ``noise_norm / radius``.
* ``other_unit``: ``{unit, noise_std, noise_growth}`` of the other unit at the same rho (null if the
  algorithm has only one).
* ``l2_candidates``: ``[{l2, noise_std}]`` for the configured l2 times 0.3, 1, 3 and 10.
* ``renewal`` (null under per-request, without deletions or for an algorithm that does not
  rotate): the noise formula's rotation figures: ``reserve``; ``planned``: ``{capacity, noise_std}``
  of one model with the planned split for exactly ``events``; ``rotation``: ``[{lifetime, capacity,
  noise_std_young, noise_std_old}]`` (overlap variant, rho / 2 per model); ``recommended``:
  ``{lifetime, capacity, l2, variant, source}`` (lifetimes of at least 100,000 only).
* ``workload`` (null without a sample): the deletion workload simulated
  (worker/planning/workload.py): ``source`` (``sample``: the sample's own deletes; ``flags``: drawn
  as ``shape`` says), ``sample``, ``records`` (usable inserts), ``dropped`` (over the feature
  bound), ``events``, ``inserts``, ``requests``, ``rate`` (requests per event),
  ``records_per_request`` ``{mean, p50, p90, max}``, ``age_events`` ``{p10, p50, p90}`` (deleted
  records' age at deletion), ``keys``, ``top_keys_share`` (records held by the top 1% of keys),
  ``outside`` (named ids older than the sample), ``shape`` (the flags' description, or null).
* ``search`` (null without a sample): ``metric`` (``accuracy``, multiclass for softmax, or
  ``rmse``), ``events``, ``inserts``, ``seed``, ``ogd`` (plain OGD at the configured l2, over the
  last quarter), ``ogd_by_l2``, ``ogd_curve``; ``runs``: every candidate ``{unit, rotation,
  lifetime, l2, cap, capacity, settings, score, curve}`` (``records_over_key_cap`` with a cap);
  ``best``: ``{unit: run}``; ``exact``: exact unlearning instead (worker/planning/exact.py):
  ``{l2, score (plain OGD's at that l2), settings, replayed_per_deletion, seconds_per_deletion,
  memory_bytes (retained rows after events), retained_rows, events_per_s_ceiling}``; ``fourier``
  (null without a spec's ``fourier`` block or a ``--sample`` file): the bandwidth search
  (worker/planning/fourier.py) ``{l2, declared_score, tried: [{block, fields, declared, bandwidth,
  score}], best (one of tried, or null when none gains MIN_GAIN)}``.
* ``warnings``: sentences (empty when the target is useful); ``recommendation``: ``{unit, settings
  (the OLU_* line of the best configuration), predicted (its score), ogd, l2, target_useful, watch
  (the workload's OLU_EXPECTED_DELETION_RATE, OLU_PLANNED_RECORDS_PER_REQUEST and
  OLU_PLANNED_DELETION_AGE_EVENTS, which the worker exports and alerts on), text: [sentences]}``
  (settings, predicted, ogd, l2 and watch null without a sample).
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
    k = len(plan["classes"]) if plan.get("classes") else None  # softmax: K classes
    loss = f"{plan['loss']} over {k} classes" if k else plan["loss"]
    lines = [f"olu-worker plan: {plan['algorithm']}, {loss}, dim {plan['dim']}, l2 {plan['l2']:g}, "
             f"radius {plan['radius']:g}, feature bound {plan['feature_bound']:g} (L "
             f"{plan['L']:.4g}, mu {plan['mu']:.4g})"]
    target = ("the target" if plan["target_epsilon"] is not None else "from rho")
    per = ("per deletion request" if plan["unit"] == "per-request"
           else "for all deleted records together")
    lines.append(
        f"privacy unit {plan['unit']}: rho {plan['rho']:.4g} {per}, epsilon {plan['epsilon']:.4g} "
        f"at delta {plan['delta']:g} ({target})")
    rate = plan["deletion_rate"]
    lines.append(
        f"deletions (formula): {100 * rate:.3g}% of {_n(plan['events'])} events = "
        f"{_n(plan['deletions'])} "
        "requests" + (f", each naming one record inserted {_n(plan['deletion_age'])} events earlier"
                      if plan["deletions"] else ""))
    if plan["sigma"]:
        s = plan["sigma"]
        lines.append(
            f"per-deletion sigma: first {s['first']:.4g}, typical {s['typical']:.4g}, last "
            f"{s['last']:.4g}")
    lines.append(
        f"predicted noise std per coordinate after {_n(plan['events'])} events: "
        f"{plan['noise_std']:.4g} (noise norm / radius {plan['noise_to_radius']:.3g})")
    coordinates = (f"{k} x dim {_n(plan['dim'])} = {_n(plan['param_dim'])}" if k
                   else f"dim {_n(plan['dim'])}")
    lines.append(
        f"  noise norm {plan['noise_norm']:.4g} = std x sqrt({coordinates}): it grows with the "
        "square root of the dimension (a spec's hashed buckets and one-hot slots count)")
    if k:
        lines.append(
            f"  softmax: the noise covers the K x d = {_n(plan['param_dim'])} coordinates of the "
            f"{k} class rows, {k} times a binary model's at dim {_n(plan['dim'])} (its norm "
            f"sqrt({k}) times as large)")
    growth = ", ".join(f"{_n(int(n))}: {v:.4g}" for n, v in plan["noise_growth"].items())
    lines.append(f"  growth with the stream length: {growth}")
    if plan["other_unit"]:
        o = plan["other_unit"]
        lines.append(f"  {o['unit']} at the same rho: {o['noise_std']:.4g}")
    by_l2 = ", ".join(f"{c['l2']:g}: {c['noise_std']:.4g}" for c in plan["l2_candidates"])
    lines.append(f"  {plan['unit']} by l2: {by_l2}")
    ren = plan.get("renewal")
    if ren and plan["search"] is None:
        p = ren["planned"]
        lines.append(
            f"planned split (OLU_BUDGET_SPLIT=planned, reserve {ren['reserve']:g}): one model "
            f"planned for {_n(plan['events'])} events, capacity {_n(p['capacity'])}: noise std "
            f"{p['noise_std']:.4g}")
        for r in ren["rotation"]:
            lines.append(
                f"  rotation, lifetime {_n(r['lifetime'])}: capacity {_n(r['capacity'])} per "
                f"model, released noise std {r['noise_std_young']:.4g} (just promoted) to "
                f"{r['noise_std_old']:.4g} (retiring)")
    if plan["workload"]:
        lines += _workload_lines(plan["workload"])
    if plan["search"]:
        lines += _search_lines(plan["search"])
    for warning in plan["warnings"]:
        lines.append(f"WARNING: {warning}")
    lines.append("recommendation:")
    lines += [f"  - {sentence}" for sentence in plan["recommendation"]["text"]]
    return "\n".join(lines)


def _workload_lines(w: dict) -> list[str]:
    where = (f"the sample's own deletes ({w['sample']})" if w["source"] == "sample"
             else f"the flags over {w['sample']}'s inserts")
    size, age = w["records_per_request"], w["age_events"]
    lines = [f"workload from {where}: {_n(w['events'])} events, {_n(w['requests'])} requests "
             f"({100 * w['rate']:.3g}% of events), {_n(w['keys'])} keys (the top 1% hold "
             f"{100 * w['top_keys_share']:.0f}% of the records)"]
    if w["requests"]:
        lines.append(
            f"  records per request: mean {size['mean']:.3g}, median {size['p50']:g}, p90 "
            f"{size['p90']:g}, max {_n(size['max'])}; age of deleted records in events: p10 "
            f"{_age(age['p10'])}, median {_age(age['p50'])}, p90 {_age(age['p90'])}")
    if w["dropped"]:
        lines.append(
            f"  {_n(w['dropped'])} records over the feature bound dropped (the worker's dead "
            "letters)")
    return lines


def _age(value) -> str:
    return "-" if value is None else _n(round(value))


def _search_lines(found: dict) -> list[str]:
    metric = found["metric"]
    lines = [
        f"search: {len(found['runs'])} configurations simulated on {_n(found['events'])} events "
        f"(seed {found['seed']}), {metric} of the release over the last quarter; plain OGD "
        f"{found['ogd']:.4f}"]
    for unit, best in found["best"].items():
        lines.append(f"  best under {unit}: {best['settings']}: {best['score']:.4f}")
    exact = found.get("exact")
    if exact:
        lines.append(f"  exact unlearning: {exact['settings']}: {exact['score']:.4f} (no noise; "
                     f"~{exact['replayed_per_deletion']:,.0f} rows replayed a deletion, "
                     f"~{exact['memory_bytes'] / 2**30:.3g} GiB of retained rows)")
    for unit in found["best"]:
        ranked = sorted((r for r in found["runs"] if r["unit"] == unit), key=lambda r: r["score"],
                        reverse=metric == "accuracy")
        shown = ", ".join(f"{_short(r)} {r['score']:.3f}" for r in ranked[:4])
        lines.append(f"  {unit}, next best: {shown}")
    return lines


def _short(run: dict) -> str:
    """A candidate in a few characters: rotation/lifetime, l2, radius, cap."""
    where = ("no rotation" if run["rotation"] == "off"
             else f"{run['rotation']} {_n(run['lifetime'])}")
    radius = f", radius {run['radius']:g}" if run.get("radius") is not None else ""
    return f"[{where}, l2 {run['l2']:g}{radius}" + (f", cap {run['cap']}" if run["cap"] is not None
                                                    else "") + "]"


def plot(plan: dict, path: str) -> None:
    """Predicted noise std vs events and, with a simulation, the score vs events for each l2."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: install the bench extra (.venv/bin/pip "
                              "install -e '.[bench]')") from None
    found = plan["search"]
    fig, axes = plt.subplots(1, 2 if found else 1, figsize=(11 if found else 6, 4), squeeze=False)
    ax = axes[0][0]
    lengths = [int(n) for n in plan["noise_growth"]] + [plan["events"]]
    for figures in [plan] + ([plan["other_unit"]] if plan["other_unit"] else []):
        points = sorted({**{int(n): v for n, v in figures["noise_growth"].items()},
                         plan["events"]: figures["noise_std"]}.items())
        ax.loglog([n for n, _ in points], [v for _, v in points], marker="o",
                  label=figures.get("unit", plan["unit"]))
    ax.set_xlabel("events")
    ax.set_ylabel("predicted noise std per coordinate")
    ax.set_title(
        f"rho {plan['rho']:.3g} (epsilon {plan['epsilon']:.3g} at delta {plan['delta']:g}), "
        f"{100 * plan['deletion_rate']:.3g}% deletions")
    ax.set_xlim(min(lengths) / 2, max(lengths) * 2)
    ax.legend()
    if found:
        ax = axes[0][1]
        windows = len(found["ogd_curve"])
        x = [found["events"] * (j + 1) / windows for j in range(windows)]
        ax.plot(x, found["ogd_curve"], linestyle=":", color="black", label="plain OGD")
        for unit, best in found["best"].items():
            ax.plot(x, best["curve"], label=f"{unit}: {_short(best)}")
        ax.set_xlabel("events")
        ax.set_ylabel(found["metric"])
        ax.set_title("the best configuration of each unit, simulated")
        ax.legend(fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
