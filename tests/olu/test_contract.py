"""The contract every registered algorithm keeps (in the spirit of River's ``check_estimator``).

It runs over ``worker.olu.ALGORITHMS``: registering a new algorithm puts it under every check here.
Each is built from its declared ``example_params`` and fed the same small stream with deletions;
each that declares the softmax loss runs again as a K-class model (``name[softmax]``).
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from worker.olu import ALGORITHMS, load_model
from worker.olu.core.base import OnlineUnlearner
from worker.olu.exceptions import ConfigError

DIM, N = 3, 60
CLASSES = ["low", "mid", "high", "top"]
PRIVACY_KEYS = {"budget_used", "deletions_capacity_left", "delta", "eps_rdp_slope", "epsilon"}
CALIBRATIONS = {"gaussian", "rewind", None}


def params(case: str) -> dict:
    """The constructor arguments of a case: ``name`` or ``name[softmax]``."""
    name, _, loss = case.partition("[")
    extra = {"loss": "softmax", "classes": CLASSES} if loss == "softmax]" else {}
    return {**ALGORITHMS[name].example_params, **extra}


def algorithm(case: str) -> type:
    return ALGORITHMS[case.partition("[")[0]]


def stream(case: str, n: int = N, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, DIM))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    loss = params(case).get("loss")
    if loss == "ridge":
        y = 0.5 * y
    if loss == "softmax":
        y = [CLASSES[k] for k in rng.integers(0, len(CLASSES), n)]
    return [f"r-{i}" for i in range(n)], X, y


def build(case: str, seed: int = 1, **extra):
    return algorithm(case)(dim=DIM, noise_rng=np.random.default_rng(seed), **params(case), **extra)


def trained(case: str, seed: int = 1):
    model = build(case, seed)
    ids, X, y = stream(case)
    model.learn_many(ids, X, y)
    return model


def assert_same_state(a, b):
    sa, sb = a.export_state(), b.export_state()
    assert sa["meta"] == sb["meta"]
    assert sa["arrays"].keys() == sb["arrays"].keys()
    for k in sa["arrays"]:
        assert np.array_equal(sa["arrays"][k], sb["arrays"][k], equal_nan=True), k
        assert np.asarray(sa["arrays"][k]).tobytes() == np.asarray(sb["arrays"][k]).tobytes(), k
    assert sa.get("shared", {}).keys() == sb.get("shared", {}).keys()


CASES = sorted(ALGORITHMS) + [f"{name}[softmax]" for name, cls in sorted(ALGORITHMS.items()) if "softmax" in cls.losses]
algorithms = pytest.mark.parametrize("name", CASES)


def test_the_registry_is_keyed_by_each_class_name():
    assert all(cls.algorithm == name and issubclass(cls, OnlineUnlearner) for name, cls in ALGORITHMS.items())


def test_every_algorithm_but_ridge_newton_learns_softmax():
    """The registry walk: an algorithm declares the losses its proof holds for; one that refuses a
    loss says so at construction, naming itself and why."""
    refusing = {name for name, cls in ALGORITHMS.items() if "softmax" not in cls.losses}
    assert refusing == {"active-newton"}
    for name in refusing:
        cls = ALGORITHMS[name]
        assert cls.loss_refusal
        with pytest.raises(ConfigError, match=f"'{name}' does not support loss 'softmax'"):
            cls(dim=DIM, loss="softmax", classes=CLASSES)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_declared_facts_fit_the_class(name):
    cls = ALGORITHMS[name]
    accepted = set(inspect.signature(OnlineUnlearner.__init__).parameters)
    for klass in cls.__mro__:  # the keywords the constructor chain accepts
        if "__init__" in klass.__dict__:
            accepted |= set(inspect.signature(klass.__init__).parameters)
    assert set(cls.settings.values()) <= accepted, f"{name}: settings map to unknown keywords"
    assert set(cls.example_params) <= accepted
    assert isinstance(cls.keeps_examples, bool) and cls.calibration in CALIBRATIONS
    assert isinstance(cls.portable_deletions, bool)
    assert set(cls.losses) <= {"logistic", "ridge", "softmax"} and (cls.loss_refusal != "") == (len(cls.losses) < 3)


@algorithms
def test_export_import_round_trip_is_bit_exact(name):
    cls = algorithm(name)
    model = trained(name)
    model.unlearn_one("r-5")
    restored = load_model(model.export_state())
    assert type(restored) is cls
    assert_same_state(model, restored)
    # and both go on identically (no noise: inserts only)
    ids, X, y = stream(name, n=10, seed=9)
    ids = [f"next-{i}" for i in ids]
    model.learn_many(ids, X, y)
    restored.learn_many(ids, X, y)
    assert model.z.tobytes() == restored.z.tobytes() and model.t == restored.t


@algorithms
def test_duplicate_and_never_seen_deletes_change_nothing(name):
    model = trained(name)
    first = model.unlearn_one("r-7")
    before = model.export_state()
    assert model.unlearn_one("r-7").outcome == "duplicate"
    assert model.unlearn_one("never-seen").outcome == "not_applied"
    after = model.export_state()
    assert before["arrays"]["z"].tobytes() == after["arrays"]["z"].tobytes()
    assert before["meta"]["accountant"] == after["meta"]["accountant"]
    assert model.deletions_applied == (1 if first.changed_model else 0)


@algorithms
def test_learn_one_in_a_loop_equals_learn_many(name):
    ids, X, y = stream(name)
    one, many = build(name), build(name)
    applied = sum(one.learn_one(r, x, v) for r, x, v in zip(ids, X, y))
    assert many.learn_many(ids, X, y) == applied == N
    assert one.z.tobytes() == many.z.tobytes() and one.t == many.t


@algorithms
def test_noise_is_calibrated_as_the_class_declares(name):
    cls = algorithm(name)
    model = trained(name)
    outcomes = [model.unlearn_one(f"r-{i}") for i in (3, 11, 29)]
    noised = [d for d in outcomes if d.outcome == "noised"]
    if cls.calibration is None:
        assert not noised, f"{name} adds noise but declares no calibration"
        return
    # The ledger's rho is the epoch's running total: a deletion is charged the difference.
    charged, previous = [], {}
    for entry in model.ledger:
        if entry.get("sigma", 0.0) > 0.0:
            charged.append((entry, entry["rho"] - previous.get(entry["epoch"], 0.0)))
        previous[entry["epoch"]] = entry["rho"]
    assert len(charged) == len(noised)
    for d, (entry, rho) in zip(noised, charged):
        assert d.sigma == entry["sigma"] and d.shift == entry["shift"]
        if cls.calibration == "gaussian":
            # the Gaussian mechanism at Renyi slope rho: sigma = shift / sqrt(2 rho)
            assert math.isclose(d.sigma, d.shift / math.sqrt(2 * rho), rel_tol=1e-9)


@algorithms
def test_privacy_report_has_the_documented_keys(name):
    model = trained(name)
    model.unlearn_one("r-2")
    report = model.privacy()
    assert PRIVACY_KEYS <= set(report)  # what releases and metrics read; extras are per algorithm
    assert 0.0 < report["delta"] < 1.0 and report["epsilon"] >= 0.0 and report["budget_used"] >= 0.0


@algorithms
def test_same_seed_same_operations_same_state(name):
    a, b = trained(name, seed=5), trained(name, seed=5)
    for model in (a, b):
        for rid in ("r-1", "r-40", "r-1", "ghost"):
            model.unlearn_one(rid)
    assert_same_state(a, b)


@algorithms
def test_a_key_cap_bounds_what_one_key_contributes(name):
    """``max_records_per_key``: the first records of each key to arrive are learned, the rest
    refused and counted (docs/accounting.md 13); the cap survives a snapshot."""
    model = build(name, max_records_per_key=2)
    ids, X, y = stream(name)
    model.learn_many(ids, X, y, subjects=[f"u{j % 6}" for j in range(N)])
    assert model.t <= 12 and model.key_cap.refused == N - 12
    assert model.privacy()["records_over_key_cap"] == N - 12
    again = load_model(model.export_state(), noise_rng=np.random.default_rng(1))
    assert again.key_cap.refused == N - 12 and again.learn_one("late", X[0], y[0], subject="u0") is False


# --------------------------------------------------------------------------- the budget edge

def _declared_losses():
    """(name, loss, on_budget) for every algorithm under every loss it declares; memory-pair under
    both of its budget policies (retrain and refuse)."""
    out = []
    for name, cls in sorted(ALGORITHMS.items()):
        policies = ("retrain", "refuse") if "on_budget" in cls.settings else (None,)
        out += [(name, loss, policy) for loss in cls.losses for policy in policies]
    return out


def _edge_model(name: str, loss: str, on_budget: str | None, capacity: int = 2):
    """A model whose deletion capacity is ``capacity`` (where the class has one)."""
    cls = ALGORITHMS[name]
    kwargs = {**cls.example_params, "loss": loss}
    if loss == "softmax":
        kwargs["classes"] = CLASSES
    if "max_deletions" in cls.settings:
        kwargs[cls.settings["max_deletions"]] = capacity
    if on_budget is not None:
        kwargs["on_budget"] = on_budget
    return cls(dim=DIM, noise_rng=np.random.default_rng(3), **kwargs)


def _labels(loss: str, rng, n: int):
    if loss == "softmax":
        return [CLASSES[k] for k in rng.integers(0, len(CLASSES), n)]
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return 0.5 * y if loss == "ridge" else y


@pytest.mark.parametrize(("name", "loss", "on_budget"), _declared_losses())
def test_every_algorithm_passes_its_budget_edge_under_every_loss(name, loss, on_budget):
    """Deletions past the capacity either retrain (a new epoch on the retained data) or are refused
    with BudgetExhausted leaving the model exactly as it was; either way the model goes on learning,
    predicting and round-tripping in its own parameter shape (K x d for softmax)."""
    from worker.olu.exceptions import BudgetExhausted

    model = _edge_model(name, loss, on_budget)
    rng = np.random.default_rng(11)
    X = rng.normal(size=(40, DIM))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = _labels(loss, rng, 40)
    model.learn_many([f"r-{i}" for i in range(40)], X, y)
    outcomes, refused = [], 0
    for i in range(0, 14, 2):  # seven deletions against a capacity of two
        before = model.export_state()
        try:
            outcomes.append(model.unlearn_one(f"r-{i}").outcome)
        except BudgetExhausted:
            refused += 1
            assert_same_state(model, load_model(before))  # refused before any change
        assert model.z.shape == (model.param_dim,) and np.all(np.isfinite(model.z))
    assert len(outcomes) + refused == 7
    if "max_deletions" in ALGORITHMS[name].settings:  # the edge was reached, not just approached
        assert refused or {"retrained", "exact"} & set(outcomes) or model.epoch >= 1, outcomes
    if on_budget == "refuse":
        assert refused == 5 and outcomes == ["noised", "noised"]
    if on_budget == "retrain":
        assert "retrained" in outcomes and model.epoch >= 1
    # the model goes on: it learns, predicts, and survives a snapshot bit for bit
    more = rng.normal(size=(5, DIM)) / 4.0
    model.learn_many([f"n-{i}" for i in range(5)], more, _labels(loss, rng, 5))
    prediction = model.predict_one(more[0])
    assert prediction in CLASSES if loss == "softmax" else np.isfinite(prediction)
    assert_same_state(model, load_model(model.export_state()))
