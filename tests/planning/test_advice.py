"""The thresholds of the plan's warnings (worker/planning/advice.py), on hand-made figures."""

import pytest

from worker.planning.advice import assess, problems


def simulation(metric, ogd, scores, norm=2.0):
    return {"metric": metric, "runs": [{"l2": l2, "ogd": ogd, "ogd_weights_norm": norm, "units": units}
                                       for l2, units in scores.items()]}


@pytest.mark.parametrize("score,warned", [(0.86, False), (0.84, True)])
def test_accuracy_more_than_three_points_below_ogd(score, warned):
    sim = simulation("accuracy", 0.88, {0.01: {"per-request": score}})
    found = problems("per-request", 0.0, dim=4, radius=10.0, simulation=sim, l2=0.01)
    assert bool(found) is warned and all("points below plain OGD" in p for p in found)


@pytest.mark.parametrize("score,warned", [(1.09, False), (1.11, True)])
def test_rmse_more_than_ten_percent_above_ogd(score, warned):
    sim = simulation("rmse", 1.0, {0.1: {"all-deletions": score}})
    assert bool(problems("all-deletions", 0.0, dim=4, radius=10.0, simulation=sim, l2=0.1)) is warned


def test_noise_to_signal_against_the_weights_or_the_radius():
    # noise norm 0.3 * sqrt(4) = 0.6: 0.06 of the radius (no warning), 0.6 of weights of norm 1 (warning)
    assert problems("per-request", 0.3, dim=4, radius=10.0, simulation=None, l2=0.01) == []
    sim = simulation("accuracy", 0.9, {0.01: {"per-request": 0.9}}, norm=1.0)
    (found,) = problems("per-request", 0.3, dim=4, radius=10.0, simulation=sim, l2=0.01)
    assert found.startswith("predicted noise norm is 0.60 of the weights plain OGD reaches")


def test_recommendation_switches_unit_and_picks_the_best_l2():
    sim = simulation("accuracy", 0.9, {0.003: {"all-deletions": 0.5, "per-request": 0.88},
                                       0.01: {"all-deletions": 0.6, "per-request": 0.89}})
    plan = {"unit": "all-deletions", "other_unit": {"unit": "per-request", "noise_std": 0.01}, "noise_std": 5.0,
            "simulation": sim, "l2": 0.003, "dim": 4, "radius": 10.0, "target_epsilon": 1.0, "rho": 0.03,
            "epsilon": 1.0, "delta": 1e-5, "deletion_rate": 0.01}
    warnings, advice = assess(plan)
    assert len(warnings) == 1 and warnings[0].startswith("the all-deletions target epsilon 1 at delta 1e-05")
    assert advice["unit"] == "per-request" and advice["l2"] == 0.01 and advice["target_useful"] is False


@pytest.mark.parametrize("score,warned", [(0.86, False), (0.84, True)])
def test_renewal_warns_when_the_best_rotation_is_more_than_three_points_below_ogd(score, warned):
    from worker.planning.advice import renewal_advice

    ren = {"simulated": {"metric": "accuracy"},
           "recommended": {"source": "simulation", "variant": "overlap", "lifetime": 5000, "capacity": 2, "l2": 0.03,
                           "score": score, "ogd": 0.88}}
    warning, sentence = renewal_advice(ren)
    assert "OLU_MODEL_LIFETIME_EVENTS=5000" in sentence and "OLU_L2=0.03" in sentence
    assert (warning is not None) is warned
    if warned:
        assert "4.0 points below plain OGD's 0.88" in warning
    assert renewal_advice(None) is None
