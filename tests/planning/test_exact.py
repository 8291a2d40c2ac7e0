"""Exact unlearning in the plan (worker/planning/exact.py): its score, its cost and when it is
offered."""

from __future__ import annotations

import numpy as np
import pytest

from tests.planning.test_advice import plan_with
from worker.planning.advice import assess
from worker.planning.exact import NS_PER_COORDINATE, exact_option, replay_cost
from worker.planning.workload import Workload


def test_a_deletion_replays_its_records_age_plus_half_a_checkpoint_interval():
    cost = replay_cost(ages=[100, 300, 500], dim=1_000, rate=0.005, events=2_000_000, every=64)
    assert cost["replayed_per_deletion"] == 300 + 32
    assert cost["seconds_per_deletion"] == pytest.approx(332 * 1_000 * NS_PER_COORDINATE * 1e-9)
    assert cost["memory_bytes"] == int(2_000_000 * 0.995 * (8 * 1_000 + 25))
    assert cost["events_per_s_ceiling"] == pytest.approx(1 / (0.005 * cost["seconds_per_deletion"]))


def test_without_deletions_there_is_nothing_to_replay():
    cost = replay_cost(ages=[], dim=10, rate=0.0, events=1_000, every=256)
    assert cost["replayed_per_deletion"] == 0.0 and cost["events_per_s_ceiling"] is None


def _workload(ages: list[int]) -> Workload:
    n = 1_000
    ids = [f"r{j}" for j in range(n)]
    at = np.array([n - 1] * len(ages))
    requests = [(f"r{n - 1 - a}",) for a in ages]
    return Workload(ids, np.zeros((n, 2)), np.ones(n), np.zeros(n, np.uint64), at, requests, "flags")


def test_the_exact_option_takes_the_best_plain_ogd_l2_and_the_workloads_ages():
    option = exact_option({"0.01": 0.81, "0.001": 0.86, "0.1": 0.7}, metric="accuracy",
                          workload=_workload([10, 30]), dim=5, events=10_000, every=256)
    assert option["l2"] == 0.001 and option["score"] == 0.86
    assert option["settings"] == "OLU_ALGORITHM=retrain OLU_L2=0.001"
    assert option["replayed_per_deletion"] == pytest.approx(20 * 1002 / 1000 + 128)
    rmse = exact_option({"0.01": 0.5, "0.1": 0.4}, metric="rmse", workload=_workload([1]), dim=5,
                        events=10, every=256)
    assert rmse["l2"] == 0.1  # the lower RMSE


@pytest.mark.parametrize("noised,offered", [(0.86, False), (0.7, True)])
def test_exact_unlearning_is_offered_when_the_noised_units_fall_short_of_it(noised, offered):
    plan = plan_with({"per-request": noised})
    plan["events"] = 1_000_000
    plan["search"]["exact"] = {**replay_cost(ages=[2_000], dim=4_748, rate=0.005, events=1_000_000,
                                             every=256),
                               "l2": 1e-4, "score": 0.88,
                               "settings": "OLU_ALGORITHM=retrain OLU_L2=0.0001"}
    _, rec = assess(plan)
    said = [t for t in rec["text"] if t.startswith("exact unlearning keeps plain OGD's accuracy")]
    assert bool(said) is offered
    if offered:
        assert "OLU_ALGORITHM=retrain OLU_L2=0.0001, predicted 0.88 with no noise" in said[0]
        assert "~2,128 rows" in said[0] and "GiB at 1,000,000 events" in said[0]
        assert "cap a partition at ~" in said[0]
    assert rec["settings"] == "OLU_PRIVACY_UNIT=per-request OLU_L2=0.01"  # the unit's, as before


def _rows_workload(X: np.ndarray) -> Workload:
    n = len(X)
    return Workload([f"r{j}" for j in range(n)], X, np.ones(n), np.zeros(n, np.uint64),
                    np.array([n - 1]), [(f"r{n - 11}",)], "flags")


def test_rows_of_few_non_zeros_are_kept_sparse_and_costed_by_their_non_zeros():
    rng = np.random.default_rng(0)
    sparse_rows = np.zeros((500, 400))
    for row in sparse_rows:
        row[rng.choice(400, 10, replace=False)] = 0.3
    option = exact_option({"0.01": 0.8}, metric="accuracy", workload=_rows_workload(sparse_rows),
                          dim=400, events=10_000, every=256)
    assert option["retained_rows"] == "sparse"
    assert option["settings"] == "OLU_ALGORITHM=retrain OLU_L2=0.01 OLU_RETAINED_ROWS=sparse"
    dense = exact_option({"0.01": 0.8}, metric="accuracy",
                         workload=_rows_workload(rng.uniform(0.1, 1.0, (500, 400))), dim=400,
                         events=10_000, every=256)
    assert dense["retained_rows"] == "dense" and "RETAINED_ROWS" not in dense["settings"]
    assert option["seconds_per_deletion"] < dense["seconds_per_deletion"] / 10
    assert option["memory_bytes"] < dense["memory_bytes"] / 10
