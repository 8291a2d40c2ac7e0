"""Searching the deployment's configuration on a workload: every candidate simulated on the same
requests, the best one under each privacy unit recommended with its predicted score.

The candidates cross the privacy unit, rotation (off, or warm-standby ``overlap`` / ``disjoint``
with a lifetime of :data:`LIFETIMES`), l2 (the configured value times :data:`L2_FACTORS`), the
model's capacity (a smaller l2 with the configured or a larger radius, :data:`CAPACITY_GRID`: the
worker's defaults underfit wide feature specs, whose iterate then sits on the radius-10 sphere) and,
where requests name several records of a key, the per-key cap ``max_records_per_key``
(:data:`CAPS`); the later ones are tried on the best few of each unit (:func:`search`). Under
all-deletions a rotation uses the planned split with the capacity the workload needs: the most
requests any one model of that lifetime is charged for on the workload (docs/accounting.md 12.6), so
the plan does not count on a reserve it would overdraw.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..olu import record_keys
from .simulate import better, metric_name, replay, score, window_scores
from .target import build_engine, build_rotation

__all__ = ["CAPACITY_GRID", "CAPS", "Candidate", "L2_FACTORS", "LIFETIMES", "candidate_model",
           "capacity_needed", "scaled", "search"]

#: Model lifetimes (OLU_MODEL_LIFETIME_EVENTS, in inserts) tried with rotation.
LIFETIMES = (1_000, 2_000, 5_000, 20_000, 100_000)
#: Multiples of the configured l2 tried (a larger l2 shrinks the deletion noise as 1/mu).
L2_FACTORS = (1.0, 3.0)
#: (l2 factor, radius factor) pairs tried for capacity on the best candidates: less shrinkage, a
#: larger ball. The deletion noise grows with both (sigma scales with L = R + l2 r, over l2), so the
#: simulation on the sample decides.
CAPACITY_GRID = ((0.1, 1.0), (0.01, 1.0), (0.1, 10.0), (0.01, 10.0))
#: Per-key caps tried where requests name several records of a key.
CAPS = (2, 8, 32)
#: How many of the best candidates so far each later stage refines.
TOP = 2


@dataclass(frozen=True)
class Candidate:
    unit: str
    rotation: str  # "off", "overlap" or "disjoint"
    lifetime: int | None
    l2: float
    cap: int | None = None
    radius: float | None = None  # None: the configured radius

    def settings(self, capacity: int | None = None) -> str:
        """The candidate as the worker's settings."""
        out = [f"OLU_PRIVACY_UNIT={self.unit}"]
        if self.rotation != "off":
            out += ["OLU_ROTATION=on", f"OLU_ROTATION_VARIANT={self.rotation}",
                    f"OLU_MODEL_LIFETIME_EVENTS={self.lifetime}"]
            if self.unit == "all-deletions":
                out += ["OLU_BUDGET_SPLIT=planned", f"OLU_DELETION_CAPACITY={capacity}"]
        out.append(f"OLU_L2={self.l2:g}")
        if self.radius is not None:
            out.append(f"OLU_RADIUS={self.radius:g}")
        if self.cap is not None:
            out.append(f"OLU_MAX_RECORDS_PER_KEY={self.cap}")
        return " ".join(out)


def scaled(value: float, factor: float) -> float:
    """``value`` times ``factor`` to 6 significant digits: what a candidate's settings print and
    the plan's keys name (0.01 x 0.3 is 0.003, not 0.0030000000000000005)."""
    return float(f"{value * factor:.6g}")


def capacity_needed(workload, lifetime: int, variant: str) -> int:
    """The most requests one model of ``lifetime`` inserts is charged for on the workload:
    generation ``g`` lives from ``g H`` to ``(g + 2) H`` (``H = lifetime // 2``) and pays for a
    request then when it holds one of the records named (inserted from ``g H`` on; under
    ``disjoint``, only the records routed to it, by the parity of their key). Generations born
    before the workload's steady state are left out: at the start of the simulated stream every
    record is young, as it never is again in a deployment (so the warm-up is the 90th percentile of
    the requests' ages, at most half the stream)."""
    half = max(1, lifetime // 2)
    position = {r: j for j, r in enumerate(workload.ids)}
    newest, oldest, parity = [], [], []
    for j, named in enumerate(workload.requests):
        held = [(position[r], r) for r in named if r in position]
        newest.append(max((p for p, _ in held), default=-1))
        oldest.append(workload.at[j] - min((p for p, _ in held), default=workload.at[j]))
        parity.append({int(k) & 1 for k in record_keys([r for _, r in held])} if held else set())
    at, newest = workload.at, np.array(newest, np.int64)
    warm_up = min(len(workload.ids) // 2, int(np.quantile(oldest, 0.9))) if oldest else 0
    most = 1
    for g in range(-(-warm_up // half), int(at.max(initial=0)) // half + 1):
        born = g * half
        alive = (at >= born) & (at < born + 2 * half) & (newest >= born)
        if variant == "disjoint":
            alive &= np.array([(g & 1) in bits for bits in parity], np.bool_)
        most = max(most, int(np.count_nonzero(alive)))
    return most


def candidate_model(settings, target, c: Candidate, capacity, noise_rng):
    unit_target = target.with_unit(c.unit)
    if c.rotation == "off":
        return build_engine(settings, unit_target, l2=c.l2, cap=c.cap, radius=c.radius,
                            noise_rng=noise_rng)
    return build_rotation(settings, unit_target, lifetime=c.lifetime, capacity=capacity, l2=c.l2,
                          variant=c.rotation,
                          cap=c.cap, radius=c.radius, noise_rng=noise_rng)


def _run(settings, target, workload, c: Candidate, seed: int) -> dict:
    capacity = (capacity_needed(workload, c.lifetime, c.rotation)
                if c.rotation != "off" and c.unit == "all-deletions" else None)
    model = candidate_model(settings, target, c, capacity, np.random.default_rng(seed))
    scores = replay(model, workload, loss=settings.loss)
    out = {**asdict(c), "capacity": capacity, "settings": c.settings(capacity),
           "score": score(scores, settings.loss),
           "curve": window_scores(scores, settings.loss)}
    if c.cap is not None:
        out["records_over_key_cap"] = model.privacy().get("records_over_key_cap")
    return out


def search(settings, target, workload, *, units, seed: int = 0) -> dict:
    """The candidates of ``units`` on ``workload`` and plain OGD at each l2 (JSON-able result).

    In four stages per unit: rotation (off, or each variant and lifetime) at the configured l2;
    the other l2 values on the :data:`TOP` best of those; the capacity grid (:data:`CAPACITY_GRID`)
    on the :data:`TOP` best so far; the caps on the :data:`TOP` best so far (where requests name
    several records of a key). ``best[unit]`` is the candidate whose released
    model scores best; ``ogd`` the plain OGD score at the
    configured l2 (the yardstick of the gap)."""
    loss, metric = settings.loss, metric_name(settings.loss)
    pick, ranked = better(metric), (
        lambda runs: sorted(runs, key=lambda r: r["score"], reverse=metric == "accuracy"))
    l2_values = [settings.l2] if settings.l2 == 0 else [scaled(settings.l2, f) for f in L2_FACTORS]
    capacity_l2 = [] if settings.l2 == 0 else sorted(
        {scaled(settings.l2, f) for f, _ in CAPACITY_GRID})
    ogd = {}
    for l2 in [*l2_values, *(v for v in capacity_l2 if v not in l2_values)]:
        # a yardstick for every l2 tried
        scores = replay(build_engine(settings, target, l2=l2, cap=None), workload, loss=loss,
                        requests=False)
        ogd[l2] = {"score": score(scores, loss), "curve": window_scores(scores, loss)}
    lifetimes = [e for e in LIFETIMES if e <= 0.75 * len(workload.ids)]
    runs = []

    def run(c: Candidate) -> dict:
        return _run(settings, target, workload, c, seed)

    for unit in units:
        shapes = [("off", None)] + [(v, e) for v in ("overlap", "disjoint") for e in lifetimes]
        mine = [run(Candidate(unit, v, e, settings.l2)) for v, e in shapes]
        mine += [run(Candidate(unit, r["rotation"], r["lifetime"], l2)) for r in ranked(mine)[:TOP]
                 for l2 in l2_values if l2 != settings.l2]
        if settings.l2 > 0:
            mine += [run(Candidate(unit, r["rotation"], r["lifetime"], scaled(settings.l2, f), None,
                                   None if g == 1.0 else scaled(settings.radius, g)))
                     for r in ranked(mine)[:TOP] for f, g in CAPACITY_GRID]
        if workload.multi_record():
            mine += [run(Candidate(unit, r["rotation"], r["lifetime"], r["l2"], cap, r["radius"]))
                     for r in ranked(mine)[:TOP] for cap in CAPS]
        runs += mine
    best = {unit: pick((r for r in runs if r["unit"] == unit), key=lambda r: r["score"])
            for unit in units}
    return {"metric": metric, "events": workload.events, "inserts": len(workload.ids), "seed": seed,
            "ogd": ogd[settings.l2]["score"],
            "ogd_by_l2": {str(k): v["score"] for k, v in ogd.items()},
            "ogd_curve": ogd[settings.l2]["curve"], "runs": runs, "best": best}
