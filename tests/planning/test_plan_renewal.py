"""The planner's planned-split and rotation figures (docs/accounting.md 11, docs/accounting.md 12)."""

import math

import numpy as np

from tests.olu.helpers import synthetic_stream
from worker.config import load_settings
from worker.olu import PassiveOLU
from worker.olu.privacy.analysis.noise import plan_deletions, predicted_noise_std
from worker.planning.plan import make_plan
from worker.planning.predict import LIFETIMES
from worker.planning.target import resolve_target
from worker.planning.workload import Shape

SETTINGS = ["--dim", "10", "--l2", "0.01"]


def test_the_planned_split_prediction_is_the_engines_ledger_sum():
    """The same plan through the engine: its noise bound (the ledger's sum) equals the prediction."""
    events, rate, K, age = 3000, 0.01, 20, 40  # 30 deletions: 20 planned, 10 from the reserve
    steps, taus = plan_deletions(events, rate)
    ids, X, y = synthetic_stream(steps, 10, seed=1)
    model = PassiveOLU(dim=10, l2=0.01, rho=0.5, budget_split="planned", deletion_capacity=K,
                       noise_rng=np.random.default_rng(0))
    done = 0
    for tau in taus:
        model.learn_many(ids[done:tau], X[done:tau], y[done:tau])
        done = tau
        assert model.unlearn_one(ids[max(1, tau - age) - 1]).outcome == "noised"
    model.learn_many(ids[done:], X[done:], y[done:])
    assert model.privacy()["overflow_deletions"] == 10
    predicted = predicted_noise_std(unit="all-deletions", split="planned", capacity=K, L=model.constants.L,
                                    rho=0.5, deletion_rate=rate, events=events, schedule=model.schedule,
                                    diameter=model.ball.diameter, age=age)
    assert math.isclose(model.release_noise_std(), predicted, rel_tol=1e-9)


def test_the_plan_shows_capacity_and_rotation_figures():
    settings = load_settings(SETTINGS, {}, command="demo")
    target = resolve_target(settings, unit="all-deletions", rho=1.0)
    plan = make_plan(settings, target, shape=Shape(rate=0.01, age=1), events=1_000_000)
    ren = plan["renewal"]
    assert ren["planned"]["capacity"] == 10_000
    assert [r["lifetime"] for r in ren["rotation"]] == list(LIFETIMES)
    for r in ren["rotation"]:
        assert r["capacity"] == r["lifetime"] // 100
        # the released model just promoted (E/2 old) carries about sqrt(2) times the noise of one
        # about to retire (E old), and 2x the single model planned for the whole stream
        assert 1.35 < r["noise_std_young"] / r["noise_std_old"] < 1.45
        assert 1.9 < r["noise_std_young"] / ren["planned"]["noise_std"] < 2.1
    assert ren["recommended"]["lifetime"] in LIFETIMES
    per_request = make_plan(settings, resolve_target(settings, unit="per-request", rho=1.0),
                            shape=Shape(rate=0.01, age=1), events=10_000)
    assert per_request["renewal"] is None


def test_the_searched_recommendation_predicts_an_independent_run():
    """--sample: the plan simulates every candidate on the workload and recommends the best of the
    unit; its predicted accuracy is within 2 points of the same configuration run on another stream
    of the same distribution (other records, requests and noise)."""
    from worker.planning.sample import Sample
    from worker.planning.search import candidate_model, capacity_needed
    from worker.planning.simulate import replay, score
    from worker.planning.workload import from_shape

    shape, events = Shape(rate=0.01, age=10_000), 30_000
    settings = load_settings(SETTINGS, {}, command="demo")
    target = resolve_target(settings, unit="all-deletions", rho=1.0)
    ids, X, y = synthetic_stream(10_000, 10, seed=1)
    plan = make_plan(settings, target, shape=shape, events=events, sample=Sample(ids, X, y, 0))
    found, rec = plan["search"], plan["recommendation"]
    best = found["best"]["all-deletions"]
    assert best["score"] == max(r["score"] for r in found["runs"] if r["unit"] == "all-deletions")
    assert rec["settings"] == best["settings"] and rec["predicted"] == best["score"]
    # an independent run of the recommendation: another stream of the same rule, other requests and noise
    ids2, X2, y2 = synthetic_stream(10_000, 10, seed=1)
    order = np.random.default_rng(5).permutation(len(ids2))
    other = from_shape(Sample([f"o-{j}" for j in range(len(ids2))], X2[order], y2[order], 0), shape, events, seed=7)
    from worker.planning.search import Candidate

    c = Candidate(best["unit"], best["rotation"], best["lifetime"], best["l2"], best["cap"], best.get("radius"))
    capacity = capacity_needed(other, c.lifetime, c.rotation) if c.rotation != "off" else None
    measured = score(replay(candidate_model(settings, target, c, capacity, np.random.default_rng(11)), other,
                            loss="logistic"), "logistic")
    assert abs(measured - rec["predicted"]) <= 0.02, (measured, rec["predicted"], best["settings"])
