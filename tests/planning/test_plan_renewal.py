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
    plan = make_plan(settings, target, deletion_rate=0.01, events=1_000_000, age=0)
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
    per_request = make_plan(settings, resolve_target(settings, unit="per-request", rho=1.0), deletion_rate=0.01,
                            events=10_000, age=0)
    assert per_request["renewal"] is None


def test_with_a_sample_the_rotation_is_chosen_by_simulation_and_predicts_an_independent_run():
    """--sample: the plan simulates the rotation per (l2, lifetime), recommends the best cell, and
    its predicted steady-state accuracy is within 2 points of the same configuration run on
    another stream of the same distribution (with other deletions and noise)."""
    from worker.olu.rotation import planned_capacity
    from worker.planning.sample import Sample
    from worker.planning.simulate import _score, deletion_steps, replay, stream
    from worker.planning.target import build_rotation

    rate, events, age = 0.01, 30_000, 10_000
    settings = load_settings(SETTINGS, {}, command="demo")
    target = resolve_target(settings, unit="all-deletions", rho=1.0)
    ids, X, y = synthetic_stream(10_000, 10, seed=1)
    plan = make_plan(settings, target, deletion_rate=rate, events=events, age=age, sample=Sample(ids, X, y, 0))
    ren = plan["renewal"]
    rec, sim = ren["recommended"], ren["simulated"]
    cells = [(run["l2"], c) for run in sim["runs"] for c in run["lifetimes"]]
    best_l2, best = max(cells, key=lambda lc: lc[1]["score"])
    assert (rec["source"], rec["l2"], rec["lifetime"], rec["score"]) == ("simulation", best_l2, best["lifetime"],
                                                                         best["score"])
    assert rec["capacity"] == planned_capacity(rate, rec["lifetime"], "overlap", age=age)
    assert any(t.startswith("renewal: OLU_ROTATION=on") for t in plan["recommendation"]["text"])
    # an independent run of the recommendation: another stream of the same rule, other victims and noise
    ids2, X2, y2 = synthetic_stream(10_000, 10, seed=1)
    rng = np.random.default_rng(5)
    order = rng.permutation(len(ids2))
    other = Sample([f"o-{j}" for j in range(len(ids2))], X2[order], y2[order], 0)
    steps, taus = plan_deletions(sim["events"], rate)
    sids, SX, sy = stream(other, steps)
    victims = [sids[u - 1] for u in deletion_steps(taus, age, seed=7)]
    model = build_rotation(settings, target, lifetime=rec["lifetime"], capacity=rec["capacity"], l2=rec["l2"],
                           noise_rng=np.random.default_rng(11))
    _, scores = replay(model, sids, SX, sy, taus, victims, loss="logistic")
    measured = _score(scores[75:], "logistic")
    assert abs(measured - rec["score"]) <= 0.02
