"""DP-TOFW, the online-DP baseline ([DP-FW]; docs/algorithms.md 11, docs/calibration.md 6.3, docs/accounting.md 5).

The tree aggregator, the calibration against the hand-computed numbers of docs/calibration.md 6.3, the accounting
against dp-accounting (a test-only oracle), the estimator identities, the sensitivity bound on
coupled runs, learning, deletions as covered no-ops, and the bit-exact state round trip.
"""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest

from tests.olu.helpers import synthetic_stream
from worker import config
from worker.metrics import Metrics
from worker.olu import ALGORITHMS, load_model
from worker.olu.algorithms.dptofw import (
    DPTreeOnlineFrankWolfe,
    basic_composition_epsilon,
    paper_sigma,
    rho_for_epsilon,
    zcdp_sigma,
)
from worker.olu.exceptions import ConfigError, InvalidState
from worker.olu.privacy.accountant import rdp_to_dp
from worker.olu.privacy.tree import (
    NodeNoise,
    TreeAggregator,
    level_closed_at,
    record_levels,
    tree_levels,
)
from worker.state.codec import decode, encode

BASE = dict(dim=4, loss="logistic", l2=0.0, radius=2.0, feature_bound=1.0, rho=1.0, delta=1e-5)


def model(seed=0, **overrides) -> DPTreeOnlineFrankWolfe:
    return DPTreeOnlineFrankWolfe(**{**BASE, "dp_horizon": 1000, **overrides}, noise_rng=np.random.default_rng(seed))


def fed(n=300, seed=0, **overrides):
    m = model(seed, **overrides)
    ids, X, y = synthetic_stream(n, m.dim, seed)
    m.learn_many(ids, X, y)
    return m, ids, X, y


# ------------------------------------------------------------------ the tree aggregator (docs/algorithms.md 11.3)
def test_tree_prefix_sums_are_exact_without_noise_for_every_t():
    n, d = 77, 3
    rng = np.random.default_rng(1)
    terms = rng.normal(size=(n, d))
    tree = TreeAggregator(d, n)
    for t in range(1, n + 1):
        got = tree.add(terms[t - 1])
        np.testing.assert_allclose(got, terms[:t].sum(axis=0), rtol=0, atol=1e-12)
        assert tree.nodes_in_prefix == bin(t).count("1")  # prefix t uses popcount(t) nodes
    with pytest.raises(OverflowError):
        tree.add(terms[0])  # the horizon is fixed in advance


def test_each_record_is_in_at_most_m_nodes_and_record_one_in_k_t():
    n = 100
    m = tree_levels(n)
    tree = TreeAggregator(n, n)  # term i = e_i, so a node's exact sum shows which records it holds
    counts = np.zeros(n, dtype=int)
    for t in range(1, n + 1):
        tree.add(np.eye(n)[t - 1])
        node = tree.exact_sums()[level_closed_at(t)]  # the one node record t closes
        assert set(np.flatnonzero(node)) == set(range(t - (t & -t), t))  # a dyadic block ending at t
        counts += node != 0
        assert counts[0] == record_levels(t)  # record 1 attains k(t) = floor(log2 t) + 1
        assert counts.max() == record_levels(t)
    assert counts.max() <= m and tree.exact_sums().shape == (m, n)  # memory: (m, d), whatever n


def test_tree_levels_and_record_levels_match_the_spec_tables():
    assert [tree_levels(n) for n in (10**3, 10**4, 10**5, 10**6)] == [11, 15, 18, 21]  # docs/calibration.md 6.3
    assert [record_levels(t) for t in (1, 10, 100, 1000, 10_000)] == [1, 4, 7, 10, 14]  # docs/accounting.md 5.2
    for n in range(1, 300):
        assert tree_levels(n) == math.ceil(math.log2(n)) + 1
        assert record_levels(n) <= tree_levels(n)


@pytest.mark.slow
def test_noise_variance_of_each_prefix_sum_is_popcount_times_sigma_squared():
    sigma, d, trials, n = 3.0, 64, 300, 15
    errors = {t: [] for t in range(1, n + 1)}
    rng = np.random.default_rng(7)
    for _ in range(trials):
        tree = TreeAggregator(d, n, NodeNoise(NodeNoise.new_key(rng), sigma, d))
        terms = rng.normal(size=(n, d))
        for t in range(1, n + 1):
            errors[t].append(tree.add(terms[t - 1]) - terms[:t].sum(axis=0))
    for t, errs in errors.items():
        e = np.concatenate(errs)  # trials * d = 19200 samples
        expected = bin(t).count("1") * sigma**2  # independent nodes: variances add
        assert abs(e.mean()) < 4 * math.sqrt(expected / e.size)
        assert e.var() == pytest.approx(expected, rel=0.05)  # ~5 standard errors


def test_node_noise_is_reproducible_per_node_and_independent_across_nodes_and_streams():
    a = NodeNoise(key=2**127 + 12345, sigma=1.0, dim=2000)
    np.testing.assert_array_equal(a(5), NodeNoise(2**127 + 12345, 1.0, 2000)(5))
    others = [a(6), NodeNoise(2**127 + 12345, 1.0, 2000, stream=1)(5), NodeNoise(12345, 1.0, 2000)(5)]
    for other in others:
        assert abs(np.corrcoef(a(5), other)[0, 1]) < 0.1
    assert "12345" not in repr(a) and str(2**127 + 12345) not in repr(a)  # the key never shows


def test_tree_restore_reforms_the_live_nodes_bit_exactly():
    d, n = 3, 40
    rng = np.random.default_rng(2)
    terms = rng.normal(size=(n, d))
    noise = NodeNoise(99, 2.0, d)
    tree = TreeAggregator(d, n, noise)
    for t in range(1, n + 1):
        tree.add(terms[t - 1])
        twin = TreeAggregator.restore(d, n, noise, tree.t, tree.exact_sums())
        assert twin.prefix().tobytes() == tree.prefix().tobytes()
        if t < n:
            ahead = TreeAggregator.restore(d, n, noise, tree.t, tree.exact_sums())
            clone = TreeAggregator.restore(d, n, noise, tree.t, tree.exact_sums())
            assert ahead.add(terms[t]).tobytes() == clone.add(terms[t]).tobytes()


def test_tree_restore_rejects_inconsistent_state():
    noise = NodeNoise(1, 1.0, 2)
    exact = np.zeros((tree_levels(8), 2))
    exact[1] = 1.0  # level 1 is not live at t = 5 (binary 101)
    with pytest.raises(InvalidState, match="closed"):
        TreeAggregator.restore(2, 8, noise, 5, exact)
    with pytest.raises(InvalidState, match="shape"):
        TreeAggregator.restore(2, 8, noise, 5, np.zeros((2, 2)))
    with pytest.raises(InvalidState, match="outside"):
        TreeAggregator.restore(2, 8, noise, 9, np.zeros((tree_levels(8), 2)))


def test_sum_differs_only_in_the_nodes_on_the_changed_records_path():
    d, n, i = 2, 32, 11
    rng = np.random.default_rng(3)
    terms = rng.normal(size=(n, d))
    changed = terms.copy()
    changed[i - 1] += 5.0
    noise = NodeNoise(4, 1.0, d)
    a, b = TreeAggregator(d, n, noise), TreeAggregator(d, n, noise)
    for t in range(1, n + 1):
        a.add(terms[t - 1])
        b.add(changed[t - 1])
        level = level_closed_at(t)
        on_path = t - (t & -t) < i <= t  # the node closed at t holds record i
        diff = b.exact_sums()[level] - a.exact_sums()[level]
        np.testing.assert_allclose(diff, 5.0 if on_path else 0.0, atol=1e-12)


# ------------------------------------------------------------------ calibration (docs/calibration.md 6.3,
# docs/accounting.md 5.2)
def test_worked_value_of_the_paper_calibration():
    # docs/calibration.md 6.3: p = 2, n = 10^4, delta = 10^-4, eps = 1: m = 15, sigma = 146.5 (beta D + L)
    assert paper_sigma(1.0, 15, 1.0, 1e-4) == pytest.approx(math.sqrt(8 * 225 * math.log(15 / 1e-4)), rel=1e-15)
    assert round(paper_sigma(1.0, 15, 1.0, 1e-4), 1) == 146.5
    assert round(paper_sigma(4.0, 15, 1.0, 1e-4)) == 586  # squared loss, beta D + L = 4


@pytest.mark.parametrize("n,paper,zcdp,ratio,eps_paper", [
    (10**3, 94.9, 25.5, 3.7, 0.26), (10**4, 146.5, 34.1, 4.3, 0.23),
    (10**5, 193.2, 41.6, 4.6, 0.21), (10**6, 243.9, 49.0, 5.0, 0.20),
])
def test_calibration_table_of_spec_3_3(n, paper, zcdp, ratio, eps_paper):
    delta, m = 1.0 / n, tree_levels(n)
    s_paper = paper_sigma(1.0, m, 1.0, delta)
    s_zcdp = zcdp_sigma(2.0, m, rho_for_epsilon(1.0, delta))  # Delta = 2 (beta D + L)
    assert (round(s_paper, 1), round(s_zcdp, 1), round(s_paper / s_zcdp, 1)) == (paper, zcdp, ratio)
    rho_paper = m * 2.0**2 / (2 * s_paper**2)  # what the paper's sigma really spends, under zCDP
    assert round(rdp_to_dp(rho_paper, delta, "zcdp"), 2) == eps_paper


def test_spend_table_of_spec_3_2():
    # n = 10^4, eps = 1, delta = 10^-4, m = 15, the paper's sigma: basic vs zCDP accounting
    m, delta = 15, 1e-4
    rho_node = 2.0**2 / (2 * paper_sigma(1.0, m, 1.0, delta) ** 2)
    basic, zcdp = [], []
    for t in (1, 10, 100, 1000, 10_000):
        basic.append(round(basic_composition_epsilon(t, m, 1.0), 3))
        zcdp.append(round(rdp_to_dp(record_levels(t) * rho_node, delta, "zcdp"), 3))
    assert basic == [0.067, 0.267, 0.467, 0.667, 0.933]
    assert zcdp == [0.059, 0.118, 0.156, 0.186, 0.221]


def test_rho_for_epsilon_inverts_the_bun_steinke_conversion():
    for eps, delta in [(0.1, 1e-6), (1.0, 1e-4), (8.0, 1e-5)]:
        assert rdp_to_dp(rho_for_epsilon(eps, delta), delta, "zcdp") == pytest.approx(eps, rel=1e-12)


def test_model_sigma_from_public_constants_by_hand():
    # logistic, l2 = 0, ||x|| <= 1, r = 2: beta = 1/4, L = 1, D = 4, S = beta D + L = 2, Delta = 4
    m = model(rho=0.5, dp_horizon=10_000)
    assert (m.levels, m.bound, m.node_sensitivity) == (15, 2.0, 4.0)
    assert m.sigma == pytest.approx(4.0 * math.sqrt(15 / (2 * 0.5)), rel=1e-15)  # Delta sqrt(m / (2 eps))
    assert m.rho_node * 15 == pytest.approx(0.5, rel=1e-12)  # the whole tree path spends eps
    paper = model(rho=0.5, dp_horizon=10_000, calibration="paper")
    eps_t = 0.5 + 2 * math.sqrt(0.5 * math.log(1e5))  # the (eps_t, delta) the zCDP budget promises
    assert paper.sigma == pytest.approx(math.sqrt(8 * 15**2 * math.log(15 / 1e-5)) * 2.0 / eps_t, rel=1e-12)
    scaled = model(rho=0.5, dp_horizon=10_000, lr_scale=3.0)
    assert scaled.bound == 3.0 * 0.25 * 4.0 + 1.0  # eta = c/(t+1) scales beta D (docs/algorithms.md 11.2)
    ridge = model(loss="ridge", l2=0.5, label_bound=1.0, radius=1.0)  # L = 1 (1 + 1) + 0.5, beta = 1.5, D = 2
    assert ridge.bound == 1.5 * 2.0 + 2.5


def test_constructor_refuses_bad_dp_settings():
    with pytest.raises(ConfigError, match="dp_horizon"):
        model(dp_horizon=0)
    with pytest.raises(ConfigError, match="calibration"):
        model(calibration="gdp")
    with pytest.raises(ConfigError, match="lr_scale"):
        model(lr_scale=0.0)
    with pytest.raises(ConfigError, match="capacity"):
        model(capacity=3)


# ------------------------------------------------------------------ accounting (docs/accounting.md 5.3,
# docs/accounting.md 7)
def test_accounting_matches_the_dp_accounting_oracles():
    m = model(rho=0.3, dp_horizon=4096)
    ids, X, y = synthetic_stream(4096, m.dim, seed=4)
    multiplier = m.sigma / m.node_sensitivity
    done = 0
    for t in (1, 3, 64, 1000, 4096):
        m.learn_many(ids[done:t], X[done:t], y[done:t])
        done = t
        p, k = m.privacy(), record_levels(t)
        assert p["eps_rdp_slope"] == pytest.approx(k * m.node_sensitivity**2 / (2 * m.sigma**2), rel=1e-12)
        rdp, pld = dpa.rdp.RdpAccountant(), dpa.pld.PLDAccountant()
        rdp.compose(dpa.GaussianDpEvent(multiplier), k)
        pld.compose(dpa.GaussianDpEvent(multiplier), k)
        # Same RDP curve as the oracle's RDP accountant (ours optimises the order continuously) ...
        assert rdp.get_epsilon(1e-5) * (1 - 1e-3) <= p["epsilon"] <= rdp.get_epsilon(1e-5) * (1 + 1e-9)
        # ... and never below the exact (PLD) epsilon of k composed Gaussian mechanisms: sound.
        assert p["epsilon"] >= pld.get_epsilon(1e-5)
    assert m.privacy()["budget_used"] == pytest.approx(record_levels(4096) / m.levels)


@pytest.mark.parametrize("calibration", ["zcdp", "paper"])
def test_spend_is_monotone_and_within_the_budget_at_the_horizon(calibration):
    m = model(calibration=calibration, dp_horizon=300)
    ids, X, y = synthetic_stream(700, m.dim, seed=5)
    spent, epsilons = [], []
    for j in range(700):
        m.learn_one(ids[j], X[j], y[j])
        p = m.privacy()
        spent.append(p["eps_rdp_slope"])
        epsilons.append(p["epsilon"])
        assert p["budget_used"] <= 1.0 and p["epsilon"] <= p["epsilon_at_horizon"]
        assert p["deletions_capacity_left"] is None and p["delta"] == 1e-5
    assert spent == sorted(spent) and epsilons == sorted(epsilons)
    assert spent[299] == record_levels(300) * m.rho_node  # the horizon: k(n) nodes
    assert max(spent) == spent[299]  # later epochs hold new records only: parallel composition
    assert m.epoch == 2 and m.privacy()["horizon_remaining"] == 300 - 100
    assert m.privacy()["epsilon_at_horizon"] == rdp_to_dp(spent[299], 1e-5)


def test_privacy_reports_the_spec_5_4_figures():
    m, *_ = fed(n=37)
    p = m.privacy()
    assert (p["noise_sigma"], p["sensitivity"], p["tree_levels"]) == (m.sigma, m.node_sensitivity, 11)
    assert (p["horizon"], p["horizon_remaining"], p["record_levels"], p["calibration"]) == (1000, 963, 6, "zcdp")


# ------------------------------------------------------------------ estimator and learner (docs/algorithms.md 11.2,
# docs/algorithms.md 11.4)
def test_without_noise_it_is_the_recursive_form_and_theta_is_the_mean_of_the_lmo_outputs():
    m = model(dim=3, radius=1.5)
    m.tree._noise = None  # noise off: the tree's sums are exact
    ids, X, y = synthetic_stream(200, 3, seed=6)
    theta_prev = theta = np.zeros(3)
    d_prev, vs = np.zeros(3), []
    for t in range(1, 201):
        x, label = X[t - 1], float(y[t - 1])
        rho = 1.0 / (t + 1)  # STORM recursion (docs/algorithms.md 11.2), d_0 = 0
        d = m.loss.grad(theta, x, label) + (1 - rho) * (d_prev - m.loss.grad(theta_prev, x, label))
        v = -1.5 * d / np.linalg.norm(d)
        vs.append(v)
        theta_prev, theta, d_prev = theta, theta + (v - theta) / (t + 1), d
        m.learn_one(ids[t - 1], x, label)
        np.testing.assert_allclose(m.weights, theta, rtol=0, atol=1e-10)
        np.testing.assert_allclose(theta, np.sum(vs, axis=0) / (t + 1), rtol=0, atol=1e-12)


def test_a_changed_record_moves_its_tree_term_by_at_most_twice_the_bound():
    rng = np.random.default_rng(8)
    for trial in range(40):
        n_before = int(rng.integers(0, 60))
        ids, X, y = synthetic_stream(n_before, 4, seed=trial)
        lr_scale = float(rng.choice([0.5, 1.0, 2.0]))
        runs = []
        for _ in range(2):  # coupled: the same key, the same released past
            m = model(seed=trial, radius=3.0, lr_scale=lr_scale)
            m.learn_many(ids, X, y)
            terms = []
            real_add = m.tree.add
            m.tree.add = lambda g, real_add=real_add, terms=terms: (terms.append(g.copy()), real_add(g))[1]
            runs.append((m, terms))
        for (m, _), sign in zip(runs, (1.0, -1.0)):
            x = rng.normal(size=4)
            x *= 1.0 / np.linalg.norm(x)  # the worst case sits on the feature bound
            m.learn_one("changed", x, sign)
        (a, ga), (b, gb) = runs
        assert np.linalg.norm(ga[0]) <= a.bound * (1 + 1e-12) and np.linalg.norm(gb[0]) <= b.bound * (1 + 1e-12)
        assert np.linalg.norm(ga[0] - gb[0]) <= a.node_sensitivity * (1 + 1e-12)
        assert a.counters["g_clipped"] == 0  # the bound holds by itself; the clip is only a guard


def test_learning_reduces_the_loss_on_a_separable_stream_at_large_epsilon():
    d, n = 5, 4000
    rng = np.random.default_rng(9)
    w = rng.normal(size=d)
    X = rng.normal(size=(n + 1000, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X = X[np.abs(X @ w) / np.linalg.norm(w) > 0.1][: n + 500]  # a margin: separable
    y = np.where(X @ w > 0, 1.0, -1.0)
    m = model(dim=d, radius=5.0, rho=1e6, dp_horizon=n)
    train, test = slice(0, n), slice(n, len(X))

    def loss(z):
        return float(np.mean([m.loss.value(z, x, t) for x, t in zip(X[test], y[test])]))

    m.learn_many([f"r{j}" for j in range(n)], X[train], y[train])
    accuracy = np.mean([m.predict_one(x) == t for x, t in zip(X[test], y[test])])
    assert loss(m.weights) < 0.25 * loss(np.zeros(d)) and accuracy > 0.97


@pytest.mark.slow
def test_utility_smoke_of_spec_5_5_on_the_section_4_1_regression_stream():
    # p = 2, d = 10, ||x|| = 1, r = 1, squared loss (beta D + L = 4 as in docs/calibration.md 6.3), (1, 1/T)-DP target.
    d, T = 10, 100_000
    rng = np.random.default_rng(0)
    theta = rng.normal(0, 0.05, d)
    theta /= np.linalg.norm(theta)
    X = rng.normal(0, 0.05, (T + 5000, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.clip(X @ theta + rng.normal(0, 0.05, len(X)), -1.0, 1.0)  # labels clipped at ingestion

    def subopt(m):
        L = lambda w: 0.5 * np.mean((X[T:] @ w - y[T:]) ** 2)  # noqa: E731
        return (L(m.weights) - L(theta)) / (L(np.zeros(d)) - L(theta))

    ids = [f"r{j}" for j in range(T)]
    kw = dict(dim=d, loss="ridge", l2=1e-9, radius=1.0, label_bound=1.0, delta=1.0 / T)
    exact = DPTreeOnlineFrankWolfe(**kw, rho=1e12, dp_horizon=10_000, noise_rng=np.random.default_rng(0))
    exact.learn_many(ids[:10_000], X[:10_000], y[:10_000])
    private = DPTreeOnlineFrankWolfe(**kw, rho=rho_for_epsilon(1.0, 1.0 / T), dp_horizon=T,
                                     noise_rng=np.random.default_rng(0))
    private.learn_many(ids, X[:T], y[:T])
    assert subopt(exact) < 0.01 and subopt(private) < 0.1
    assert private.privacy()["epsilon"] <= 1.0  # the (1, 1/T) target holds


def test_models_with_fresh_keys_draw_different_noise():
    ids, X, y = synthetic_stream(20, 4, seed=10)
    a = DPTreeOnlineFrankWolfe(**BASE)  # keys from OS entropy
    b = DPTreeOnlineFrankWolfe(**BASE)
    a.learn_many(ids, X, y)
    b.learn_many(ids, X, y)
    assert a.weights.tobytes() != b.weights.tobytes()


# ------------------------------------------------------------------ deletions (docs/algorithms.md 11.5)
def test_a_deletion_is_a_covered_no_op_that_changes_nothing_and_spends_nothing():
    m, ids, X, y = fed(n=100)
    before = m.export_state()
    privacy, weights = m.privacy(), m.weights
    d = m.unlearn_one(ids[40])
    assert (d.outcome, d.changed_model, d.index, d.sigma) == ("dp_covered", False, 0, 0.0)
    assert m.weights.tobytes() == weights.tobytes() and m.privacy() == privacy
    after = m.export_state()
    for name in ("z", "z_prev", "tree_exact"):
        assert after["arrays"][name].tobytes() == before["arrays"][name].tobytes()
    assert after["meta"]["accountant"] == before["meta"]["accountant"] and after["meta"]["extra"] == before["meta"]["extra"]
    assert m.unlearn_one(ids[40]).outcome == "duplicate"
    assert m.unlearn_one("never-seen").outcome == "not_applied"
    assert m.unlearn_one("early").outcome == "not_applied" and m.learn_one("early", X[0], y[0]) is False


def test_metrics_count_covered_deletions_and_follow_the_spend_of_inserts():
    from worker.stream.outcome import Outcome

    class Runner:  # a RunnerView (worker/metrics/loop.py)
        topic, partition, released_version, prequential_loss = "olu.events", 0, None, None
        settings = next_offset = None

    metrics, runner = Metrics(), Runner()
    runner.model, ids, X, y = fed(n=1)
    value = lambda name, **labels: metrics.registry.get_sample_value(  # noqa: E731
        name, {"topic": "olu.events", "partition": "0", **labels})
    metrics.record_outcome(runner, Outcome())
    first = value("olu_privacy_epsilon", unit="all-deletions")
    runner.model.learn_many([f"n{j}" for j in range(99)], np.tile(X, (99, 1)), np.tile(y, 99))
    metrics.record_outcome(runner, Outcome())  # inserts only: dp-tofw's spend still moves
    assert value("olu_privacy_epsilon", unit="all-deletions") == runner.model.privacy()["epsilon"] > first
    assert value("olu_dp_noise_sigma") == runner.model.sigma
    assert value("olu_dp_sensitivity") == runner.model.node_sensitivity
    assert value("olu_dp_epsilon_projected_at_horizon") == runner.model.epsilon_at_horizon
    assert value("olu_dp_horizon_remaining") == 900
    deletion = runner.model.unlearn_one(ids[0])
    metrics.record_deletion("olu.events", 0, deletion.outcome)
    assert value("olu_deletions_noop_total", reason="dp_covered") == 1
    assert value("olu_deletions_total") is None


# ------------------------------------------------------------------ state (invariants 1 and 3)
def test_export_import_round_trip_is_bit_exact_and_replay_reproduces_the_model():
    m, ids, X, y = fed(n=150, dp_horizon=100)  # past one horizon: epoch 1
    state = m.export_state()
    blob = encode({"model": state["meta"]}, state["arrays"])  # through the snapshot codec
    head, arrays = decode(blob)
    twin = load_model({"meta": head["model"], "arrays": arrays}, noise_rng=np.random.default_rng(123))
    assert type(twin) is DPTreeOnlineFrankWolfe and twin.epoch == 1
    assert twin.privacy() == m.privacy()
    again = twin.export_state()
    assert again["meta"] == state["meta"]
    assert all(again["arrays"][k].tobytes() == v.tobytes() for k, v in state["arrays"].items())
    more_ids, more_X, more_y = synthetic_stream(120, 4, seed=11)  # crosses the next horizon too
    m.learn_many(more_ids, more_X, more_y)
    for j in range(120):  # one by one on the restored copy: the same bits
        twin.learn_one(more_ids[j], more_X[j], more_y[j])
    assert twin.weights.tobytes() == m.weights.tobytes() and twin.epoch == m.epoch == 2
    assert twin.tree.prefix().tobytes() == m.tree.prefix().tobytes()


def test_state_holds_no_noise_vector_or_noisy_node():
    m, *_ = fed(n=95)  # t = 95 = 1011111b: six live nodes
    state = m.export_state()
    blob = encode({"model": state["meta"]}, state["arrays"])
    live = [j for j in range(m.levels) if (m.tree.t >> j) & 1]
    assert len(live) == 6
    for j in live:
        node = m.tree._noisy[j]
        noise = node - m.tree._exact[j]
        assert node.tobytes() not in blob and noise.tobytes() not in blob
    assert m.tree.prefix().tobytes() not in blob
    assert set(state["arrays"]) == {"z", "z_prev", "tree_exact", "tombstones", "applied_tail_keys", "applied_tail_steps"}
    assert "noise_key" not in state["meta"]["config"]  # config is what a start log shows


def test_a_damaged_state_is_refused():
    m, *_ = fed(n=10)
    state = m.export_state()
    bad_key = {**state, "meta": {**state["meta"], "extra": {**state["meta"]["extra"], "noise_key": "xyz"}}}
    with pytest.raises(InvalidState, match="noise key"):
        load_model(bad_key)
    tree = state["arrays"]["tree_exact"].copy()
    tree[0] = 1.0  # level 0 is not live at t = 10 = 1010b
    with pytest.raises(InvalidState, match="closed"):
        load_model({**state, "arrays": {**state["arrays"], "tree_exact": tree}})
    behind = {**state, "meta": {**state["meta"], "extra": {**state["meta"]["extra"], "tree_t": 9}}}
    with pytest.raises(InvalidState, match="does not match"):
        load_model(behind)
    over = {**state, "meta": {**state["meta"], "extra": {**state["meta"]["extra"], "closed_rho": 5.0}}}
    with pytest.raises(InvalidState, match="closed-epoch"):
        load_model(over)


# ------------------------------------------------------------------ configuration
def test_worker_settings_build_the_model():
    env = {"OLU_KAFKA_BOOTSTRAP_SERVERS": "k:9092", "OLU_DIM": "3", "OLU_ALGORITHM": "dp-tofw",
           "OLU_DP_HORIZON": "5000", "OLU_RHO": "0.5", "OLU_MAX_DELETIONS": "7"}
    s = config.load_settings([], env, command="run")
    kwargs = s.model_kwargs()
    assert kwargs["dp_horizon"] == 5000 and "capacity" not in kwargs and "max_deletions" not in kwargs
    m = ALGORITHMS["dp-tofw"](**kwargs)
    assert (m.horizon, m.levels, m.accountant.budget) == (5000, 14, 0.5)
    with pytest.raises(config.ConfigError, match=r"OLU_DP_HORIZON \(--dp-horizon\)"):
        config.load_settings([], {**env, "OLU_DP_HORIZON": "0"}, command="run")
