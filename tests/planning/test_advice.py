"""The thresholds of the plan's warnings (worker/planning/advice.py), on hand-made figures."""

import pytest

from worker.planning.advice import assess, falls_short, formula_problems, renewal_advice


@pytest.mark.parametrize("score,short", [(0.86, False), (0.849, True)])
def test_accuracy_more_than_three_points_below_ogd(score, short):
    assert falls_short("accuracy", score, 0.88) is short


@pytest.mark.parametrize("score,short", [(1.09, False), (1.11, True)])
def test_rmse_more_than_ten_percent_above_ogd(score, short):
    assert falls_short("rmse", score, 1.0) is short


def test_the_formula_measures_the_noise_against_the_radius():
    # noise norm 0.3 * sqrt(4) = 0.6: 0.06 of a radius of 10, 0.6 of a radius of 1
    assert formula_problems(0.3, dim=4, radius=10.0) == []
    (found,) = formula_problems(0.3, dim=4, radius=1.0)
    assert found.startswith("predicted noise norm is 0.60 of the radius")


def plan_with(best: dict, unit: str = "per-request", outside: int = 0) -> dict:
    runs = {u: {"unit": u, "settings": f"OLU_PRIVACY_UNIT={u} OLU_L2=0.01", "score": s, "l2": 0.01}
            for u, s in best.items()}
    return {"unit": unit, "target_epsilon": 1.0, "rho": 0.03, "epsilon": 1.0, "delta": 1e-5,
            "search": {"metric": "accuracy", "ogd": 0.9, "events": 200_000, "best": runs},
            "workload": {"outside": outside}}


@pytest.mark.parametrize("score,warned", [(0.875, False), (0.865, True)])
def test_the_warning_fires_exactly_when_the_best_of_the_unit_is_three_points_below(score, warned):
    warnings, rec = assess(plan_with({"per-request": score, "all-deletions": 0.6}))
    assert bool(warnings) is warned and rec["target_useful"] is not warned
    assert rec["settings"] == "OLU_PRIVACY_UNIT=per-request OLU_L2=0.01" and rec["predicted"] == score
    if warned:
        assert "3.5 points below plain OGD's 0.900" in warnings[0]
    assert any("the all-deletions unit also falls short" in t for t in rec["text"])


def test_the_other_unit_is_shown_when_it_would_do():
    warnings, rec = assess(plan_with({"all-deletions": 0.5, "per-request": 0.89}, unit="all-deletions", outside=7))
    assert len(warnings) == 1 and rec["unit"] == "all-deletions"  # the operator's unit stays the recommendation's
    assert any(t.startswith("the per-request unit would be useful") for t in rec["text"])
    assert any(t.startswith("7 deleted ids name records older than the sample") for t in rec["text"])


def test_without_a_sample_the_formula_decides_and_may_switch_unit():
    plan = {"unit": "all-deletions", "other_unit": {"unit": "per-request", "noise_std": 0.01}, "noise_std": 5.0,
            "search": None, "l2": 0.003, "dim": 4, "radius": 10.0, "target_epsilon": 1.0, "rho": 0.03,
            "epsilon": 1.0, "delta": 1e-5, "deletion_rate": 0.01, "renewal": None}
    warnings, advice = assess(plan)
    assert len(warnings) == 1 and warnings[0].startswith("the all-deletions target epsilon 1 at delta 1e-05")
    assert advice["unit"] == "per-request" and advice["settings"] is None and advice["target_useful"] is False


def test_the_formulas_rotation_is_named_in_settings():
    ren = {"recommended": {"variant": "overlap", "lifetime": 100_000, "capacity": 900}}
    assert "OLU_MODEL_LIFETIME_EVENTS=100000" in renewal_advice(ren) and renewal_advice(None) is None


def test_the_workload_is_handed_to_the_workers_alerts():
    plan = plan_with({"per-request": 0.89, "all-deletions": 0.6})
    plan["workload"] = {"outside": 0, "requests": 40, "rate": 0.002, "records_per_request": {"mean": 3.25},
                        "age_events": {"p50": 1234.4}}
    _, rec = assess(plan)
    assert rec["watch"] == ("OLU_EXPECTED_DELETION_RATE=0.002 OLU_PLANNED_RECORDS_PER_REQUEST=3.25 "
                            "OLU_PLANNED_DELETION_AGE_EVENTS=1234")
    assert any(t.endswith(rec["watch"]) for t in rec["text"])
