"""The model's incremental noise meter (worker/olu/privacy/meter.py, docs/accounting.md 10).

It must equal ``release_noise_std`` of the model's own ledger at every step of a random stream
with deletions, across export/restore and epoch restarts, for every schedule: to 1e-12 relative
as asked, and in fact bit for bit, since it runs the same recursion (which a replayed release
needs: its bytes must not depend on when earlier releases asked). Each query may cost only O(1)
contraction work, and every algorithm reports a sound value or None.
"""

import math

import numpy as np
import pytest

from tests.olu.helpers import synthetic_stream
from worker.olu import (
    ActiveD2D,
    DPTreeOnlineFrankWolfe,
    MemoryPair,
    PassiveOLU,
    PassiveRestartOLU,
    Published,
    Retrain,
    RewindToDelete,
    load_model,
)
from worker.olu.privacy import ledger as ledger_module
from worker.olu.privacy.analysis.noise import release_noise_std
from worker.olu.privacy.ledger import Ledger
from worker.olu.privacy.meter import NoiseMeter
from worker.olu.rotation import Rotation

SCHEDULES = {
    "strongly-convex": {},
    "strongly-convex-t0-0": {"t0": 0.0, "l2": 0.002},  # a long irregular head, summed term by term
    "convex": {"schedule": "convex"},
    "constant": {"schedule": "constant", "step": 0.05},
}


def from_ledger(model) -> float:
    return release_noise_std(model.ledger, model.schedule, model.t, epoch=model.epoch)


def assert_matches(model, where: str) -> float:
    got, want = model.release_noise_std(), from_ledger(model)
    assert got == pytest.approx(want, rel=1e-12, abs=0.0), where
    assert got == want, f"{where}: not bit-identical"
    return got


def run_stream(model, *, events: int, seed: int, restore_every: int = 0, restart_every: int = 0):
    """Random inserts and deletions of earlier records; the meter is checked after every event.
    Returns the model (restored ones replace it) and the values seen."""
    rng = np.random.default_rng(seed)
    ids, X, y = synthetic_stream(events, model.dim, seed=seed)
    learned, values = [], []
    for j in range(events):
        if learned and rng.random() < 0.15:
            victim = learned.pop(int(rng.integers(len(learned))))
            model.unlearn_one(victim)
        else:
            model.learn_one(ids[j], X[j], y[j])
            learned.append(ids[j])
        if restart_every and j % restart_every == restart_every - 1:
            model.restart()
            learned.clear()
        values.append(assert_matches(model, f"event {j}"))
        if restore_every and j % restore_every == restore_every - 1:
            before = model.release_noise_std()
            model = load_model(model.export_state(), noise_rng=np.random.default_rng(j))
            assert model.release_noise_std() == before, f"restore at {j}"
    return model, values


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_meter_equals_the_ledger_bound_at_every_step(name):
    model = PassiveOLU(dim=4, noise_rng=np.random.default_rng(1), **SCHEDULES[name])
    model, values = run_stream(model, events=600, seed=2, restore_every=97)
    noised = sum(1 for e in model.ledger if e["sigma"] > 0)
    assert noised > 50, "the stream must hold many noised deletions"
    assert max(values) > 0.0


def test_meter_resets_on_epoch_restarts_and_survives_restore():
    # restart_c large: most deletions are noised, those of very early records restart
    model = PassiveRestartOLU(dim=3, restart_c=100.0, max_deletions=5, noise_rng=np.random.default_rng(5))
    model, values = run_stream(model, events=700, seed=7, restore_every=61, restart_every=150)
    assert model.epoch >= 4  # its own restart test restarts too, besides the forced ones
    assert len({e["epoch"] for e in model.ledger if e["sigma"] > 0}) >= 4, "noised deletions in several epochs"
    model.restart()
    assert model.release_noise_std() == 0.0 and from_ledger(model) == 0.0
    assert max(values) > 0.0


def test_active_d2d_is_metered_through_the_shared_release():
    model = ActiveD2D(dim=3, noise_rng=np.random.default_rng(3))
    model, _ = run_stream(model, events=300, seed=4, restore_every=80)
    assert model.release_noise_std() > 0.0


def test_a_query_costs_one_contraction_and_the_head_is_summed_once():
    """t0 = 0 with beta/mu = 126: steps 1..63 are summed term by term. A deletion inside that head
    anchors the meter there; every later query needs Gamma from the anchor, and must not re-sum it."""
    model = PassiveOLU(dim=3, noise_rng=np.random.default_rng(0), t0=0.0, l2=0.002)
    assert model.schedule._regular_from == 64
    ids, X, y = synthetic_stream(400, 3, seed=1)
    model.learn_many(ids[:30], X[:30], y[:30])
    assert model.unlearn_one(ids[5]).outcome == "noised"
    calls, gammas = [], []
    lc, gamma = model.schedule.log_contraction, model.schedule.gamma
    model.noise_meter._log_contraction = lambda u, tau: calls.append((u, tau)) or lc(u, tau)
    model.schedule.gamma = lambda r: gammas.append(r) or gamma(r)
    for j in range(30, 400):
        model.learn_one(ids[j], X[j], y[j])
        calls.clear()
        gammas.clear()
        assert model.release_noise_std() == from_ledger(model)
        assert calls == [(30, j + 1)], "one contraction per query, from the anchor"
        if j + 1 > 64:  # the head steps 31..63 were summed once, at step 64; O(1) from then on
            assert gammas == [], f"step {j + 1}: {len(gammas)} gamma terms evaluated"


def test_restore_reads_only_the_current_epochs_tail(monkeypatch):
    ledger = Ledger(segment_entries=2)
    for i, epoch in enumerate([0, 0, 0, 0, 1, 1, 1]):
        ledger.append({"i": i, "epoch": epoch, "tau": i, "sigma": 1.0})
    decoded = []
    real = ledger_module._unseal
    monkeypatch.setattr(ledger_module, "_unseal", lambda seg, n: decoded.append(n) or real(seg, n))

    class Still:
        def log_contraction(self, u, tau):
            return 0.0

    meter = NoiseMeter(Still())
    meter.restore(ledger, 1, 9)
    assert meter.std(1, 9) == pytest.approx(math.sqrt(3.0))
    assert len(decoded) == 2, "the segment [4, 5] holds epoch 1's first entry; [0, 1] stays sealed"


def test_meter_refuses_to_go_back():
    meter = NoiseMeter(PassiveOLU(dim=2).schedule)
    meter.add(0, 10, 1.0)
    with pytest.raises(ValueError, match="step 5 is before"):
        meter.std(0, 5)
    meter.std(2, 0)
    with pytest.raises(ValueError, match="epoch 1 is before"):
        meter.add(1, 3, 1.0)


def test_a_corrupt_ledger_tail_fails_the_restore():
    model = PassiveOLU(dim=2, noise_rng=np.random.default_rng(0))
    model.learn_one("a", [0.6, 0.8], 1)
    model.learn_one("b", [0.8, -0.6], -1)
    model.unlearn_one("a")
    state = model.export_state()
    state["meta"]["ledger"][-1]["tau"] = 99
    with pytest.raises(Exception, match="step 99 outside"):
        load_model(state)


# ------------------------------------------------------------------ noise to signal
def test_noise_to_signal_is_the_rms_noise_norm_over_the_weights_norm():
    model = PassiveOLU(dim=4, noise_rng=np.random.default_rng(0))
    assert model.release_noise_std() == 0.0 and model.noise_to_signal() is None  # no noise, zero weights
    ids, X, y = synthetic_stream(50, 4, seed=1)
    model.learn_many(ids, X, y)
    assert model.noise_to_signal() == 0.0
    model.unlearn_one(ids[10])
    std, norm = model.release_noise_std(), float(np.linalg.norm(model.weights))
    assert std > 0.0 and model.noise_to_signal() == pytest.approx(std * 2.0 / norm, rel=1e-15)
    model.z = np.zeros(4)
    assert model.noise_to_signal() == math.inf


# ------------------------------------------------------------------ algorithms that draw noise elsewhere
def test_memory_pair_and_dp_tofw_report_none():
    for model in (MemoryPair(dim=2, l2=0.1), DPTreeOnlineFrankWolfe(dim=2, dp_horizon=16)):
        ids, X, y = synthetic_stream(20, 2, seed=0)
        model.learn_many(ids, X, y)
        model.unlearn_one(ids[3])
        assert model.release_noise_std() is None and model.noise_to_signal() is None, model.algorithm


def test_exact_algorithms_report_no_noise():
    model = Retrain(dim=2)
    ids, X, y = synthetic_stream(20, 2, seed=0)
    model.learn_many(ids, X, y)
    model.unlearn_one(ids[3])
    assert model.release_noise_std() == 0.0 and model.noise_to_signal() == 0.0


def rewind_model(**kw):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(201, 2))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    params = dict(dim=2, l2=0.1, radius=5.0, retrain_every=200, train_steps=20, noise_sigma=0.5, max_deletions=2)
    m = RewindToDelete(**{**params, **kw}, noise_rng=np.random.default_rng(1))
    m.learn_many([f"r{i}" for i in range(201)], X, np.where(X[:, 0] > 0, 1, -1))
    return m


def test_rewind_reports_its_one_uncontracted_noise():
    m = rewind_model()
    assert m.release_noise_std() == 0.0, "theta_T is published without noise"
    m.unlearn_one("r200")  # replay: exact
    assert m.release_noise_std() == 0.0
    assert m.unlearn_one("r5").outcome == "noised"
    assert m.release_noise_std() == 0.5
    restored = load_model(m.export_state())
    assert restored.release_noise_std() == 0.5
    m.unlearn_one("r6")
    m.unlearn_one("r7")  # over the generation's capacity: a refit, noiseless again
    assert m.ledger[-1]["route"] == "refit" and m.release_noise_std() == 0.0
    assert rewind_model(noise_at_fit=True).release_noise_std() == 0.5


def test_rewind_reports_none_while_a_step_may_expand():
    m = rewind_model(schedule="convex", radius=100.0, l2=0.001)
    assert m.schedule.gamma(m.t_fit + 1) > 1.0, "the test needs an expansive step after the fit"
    assert m.unlearn_one("r5").outcome == "noised"
    assert m.release_noise_std() is None


def test_noise_figures_are_the_two_figures_of_every_algorithm():
    """A release reads both figures through ``noise_figures()`` (the bound computed once): the same
    values as the two calls, for every algorithm and for a rotation (its active model's)."""
    models = [PassiveOLU(dim=2, noise_rng=np.random.default_rng(0)), MemoryPair(dim=2, l2=0.1),
              DPTreeOnlineFrankWolfe(dim=2, dp_horizon=16), Retrain(dim=2), RewindToDelete(dim=2),
              Rotation(PassiveOLU, lifetime_events=64, dim=2, noise_rng=np.random.default_rng(1))]
    for model in models:
        ids, X, y = synthetic_stream(20, 2, seed=0)
        model.learn_many(ids, X, y)
        model.unlearn_one(ids[15])
        assert model.noise_figures() == (model.release_noise_std(), model.noise_to_signal()), type(model)
        assert Published.of(model).noise == model.noise_figures()
    assert models[0].noise_figures()[0] > 0.0 and models[-1].noise_figures()[0] > 0.0  # noised, not vacuous
