"""The per-key contribution bound (``max_records_per_key``, docs/accounting.md 13): admission by
arrival, independent of deletions; a request naming all of a key's records noised for the admitted
ones only; the released law against the masked reference run; every learning path agrees."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tests.olu.helpers import halve_sigma, masked_run, released_law_is_private, synthetic_stream
from worker.olu import PassiveOLU, load_model, record_key
from worker.olu.core.contribution import ContributionCap
from worker.olu.core.mixed import learn_and_unlearn
from worker.olu.exceptions import ConfigError
from worker.olu.rotation import Rotation

KW = dict(dim=4, loss="logistic", l2=0.05, radius=5.0, feature_bound=1.0, rho=0.5, privacy_unit="per-request")


def skewed_subjects(n: int, seed: int = 0, keys: int = 40) -> list[str]:
    """Subjects of a skewed activity: a few keys hold most of the records."""
    rng = np.random.default_rng(seed)
    return [f"u{int(rng.zipf(1.6)) % keys}" for _ in range(n)]


def admitted_steps(ids, subjects, cap: int) -> dict[str, int]:
    """The first ``cap`` records of each subject in stream order (what the model may learn), each
    with the step it is learned at (no deletes in between)."""
    seen: dict[str, int] = {}
    out: dict[str, int] = {}
    for record_id, subject in zip(ids, subjects):
        seen[subject] = seen.get(subject, 0) + 1
        if seen[subject] <= cap:
            out[record_id] = len(out) + 1
    return out


def admitted_ids(ids, subjects, cap: int) -> set[str]:
    return set(admitted_steps(ids, subjects, cap))


def test_the_cap_admits_each_keys_first_records_and_counts_the_rest():
    ids, X, y = synthetic_stream(600, 4, seed=1)
    subjects = skewed_subjects(600)
    m = PassiveOLU(**KW, max_records_per_key=3)
    applied = m.learn_many(ids, X, y, subjects=subjects)
    expected = admitted_ids(ids, subjects, 3)
    assert applied == len(expected) == m.t < 600
    assert {r for r in ids if m.index.holds(record_key(r))} == expected
    p = m.privacy()
    assert (p["max_records_per_key"], p["records_over_key_cap"]) == (3, 600 - len(expected))
    assert "max_records_per_key" not in PassiveOLU(**KW).privacy()  # no cap, no figure


def test_one_by_one_batches_and_hashed_subjects_give_the_same_bits():
    ids, X, y = synthetic_stream(500, 4, seed=2)
    subjects = skewed_subjects(500, seed=2)
    whole = PassiveOLU(**KW, max_records_per_key=4)
    whole.learn_many(ids, X, y, subjects=subjects)
    each = PassiveOLU(**KW, max_records_per_key=4)
    for r, x, v, s in zip(ids, X, y, subjects):
        each.learn_one(r, x, v, subject=s)
    hashed = PassiveOLU(**KW, max_records_per_key=4)
    keys = np.array([record_key(s) for s in subjects], np.uint64)
    for start in range(0, 500, 37):
        hashed.learn_many(ids[start:start + 37], X[start:start + 37], y[start:start + 37],
                          subjects=keys[start:start + 37])
    assert np.array_equal(whole.z, each.z) and np.array_equal(whole.z, hashed.z)
    assert whole.t == each.t == hashed.t and whole.key_cap.refused == each.key_cap.refused == hashed.key_cap.refused


def test_admission_does_not_depend_on_deletions():
    """A deleted record still counts as arrived: the key's later records are refused all the same,
    so the real run and the reference run of a request admit the same rows (docs/accounting.md 13)."""
    ids, X, y = synthetic_stream(400, 4, seed=3)
    subjects = ["heavy" if j % 3 == 0 else f"u{j}" for j in range(400)]
    kept = PassiveOLU(**KW, max_records_per_key=5, noise_rng=np.random.default_rng(0))
    deleting = PassiveOLU(**KW, max_records_per_key=5, noise_rng=np.random.default_rng(0))
    kept.learn_many(ids[:100], X[:100], y[:100], subjects=subjects[:100])
    deleting.learn_many(ids[:100], X[:100], y[:100], subjects=subjects[:100])
    deleting.unlearn_request([r for r, s in zip(ids[:100], subjects) if s == "heavy"])
    kept.learn_many(ids[100:], X[100:], y[100:], subjects=subjects[100:])
    deleting.learn_many(ids[100:], X[100:], y[100:], subjects=subjects[100:])
    heavy_after = [r for r, s in zip(ids[100:], subjects[100:]) if s == "heavy"]
    assert not any(kept.index.holds(record_key(r)) or deleting.index.holds(record_key(r)) for r in heavy_after)
    assert kept.key_cap.refused == deleting.key_cap.refused == 400 // 3 + 1 - 5


def test_a_request_for_all_of_a_keys_records_is_noised_for_the_admitted_ones_only():
    ids, X, y = synthetic_stream(300, 4, seed=4)
    subjects = ["acct" if j % 4 == 0 else f"u{j}" for j in range(300)]
    m = PassiveOLU(**KW, max_records_per_key=6, noise_rng=np.random.default_rng(1))
    m.learn_many(ids, X, y, subjects=subjects)
    named = [r for r, s in zip(ids, subjects) if s == "acct"]  # 75 records, 6 of them learned
    steps = sorted(admitted_steps(ids, subjects, 6)[r] for r in named[:6])
    d = m.unlearn_request(named)
    assert (d.records, len(d.not_applied)) == (6, 69)
    assert d.shift == m.shift(steps, m.t)
    assert d.sigma == d.shift / math.sqrt(2 * 0.5)
    uncapped = PassiveOLU(**KW, noise_rng=np.random.default_rng(1))
    uncapped.learn_many(ids, X, y, subjects=subjects)
    assert uncapped.unlearn_request(named).shift > 5 * d.shift  # 75 records' shift against 6


def _noise_fits(draws: np.ndarray, sigma: float) -> bool:
    """Two-sided chi-square test at level 1e-6 of N(0, sigma**2) for every entry of ``draws``."""
    q = float(np.sum(draws ** 2) / sigma ** 2)
    return bool(stats.chi2.sf(q, draws.size) > 5e-7 and stats.chi2.cdf(q, draws.size) > 5e-7)


@pytest.mark.parametrize("halve", [False, True])
def test_the_sigma_law_of_a_capped_request_and_a_halved_sigma_fails(halve, monkeypatch):
    """sigma = (summed shift of the key's admitted records) / sqrt(2 rho), checked on 300 draws."""
    if halve:
        original = PassiveOLU._noise
        monkeypatch.setattr(PassiveOLU, "_noise", lambda self, sigma: original(self, sigma / 2))
    ids, X, y = synthetic_stream(300, 4, seed=5)
    subjects = ["acct" if j % 5 == 0 else f"u{j}" for j in range(300)]
    base = PassiveOLU(**{**KW, "radius": 1e3}, max_records_per_key=4)
    base.learn_many(ids, X, y, subjects=subjects)
    named = [r for r, s in zip(ids, subjects) if s == "acct"]
    steps = sorted(admitted_steps(ids, subjects, 4)[r] for r in named[:4])
    law = base.shift(steps, base.t) / math.sqrt(2 * 0.5)  # computed here, not by the accountant
    state = base.export_state()
    draws = []
    for seed in range(300):
        m = load_model(state, noise_rng=np.random.default_rng(seed))
        before = m.weights
        d = m.unlearn_request(named)
        assert d.sigma == pytest.approx(law, rel=1e-12)
        draws.append(m.weights - before)
    assert _noise_fits(np.array(draws), law) is (not halve)


@pytest.mark.slow
@pytest.mark.parametrize("halve", [None, "calibration", "draw"])
def test_a_capped_account_deletion_matches_the_masked_run_plus_the_same_noise(halve, monkeypatch):
    """The released law after a request naming all of a heavy key's records vs the reference run
    in which the key's admitted records are masked in place (the same rows admitted: by arrival):
    ||m0 - m1|| / s <= sqrt(2 rho). Halving sigma, in the calibration or in the draw, is caught."""
    rho = 0.5
    kw = dict(dim=2, loss="logistic", l2=1e-3, radius=50.0, feature_bound=1.0, rho=rho, privacy_unit="per-request")
    ids, X, y = synthetic_stream(240, 2, seed=6)
    subjects = [f"u{j}" for j in range(233)] + ["acct"] * 7  # the account's 7 records come last
    base = PassiveOLU(**kw, max_records_per_key=3)
    base.learn_many(ids[:233], X[:233], y[:233], subjects=subjects[:233])
    X[233:], y[233:] = base.z / np.linalg.norm(base.z), -1.0  # misclassified along z: the bound nearly met
    base.learn_many(ids[233:], X[233:], y[233:], subjects=subjects[233:])  # 3 learned, 4 refused
    named = ids[233:]
    learned = admitted_steps(ids, subjects, 3)
    admitted = sorted(learned[r] for r in named if r in learned)
    assert admitted == [234, 235, 236] and base.t == 236 and base.key_cap.refused == 4
    rows = [j for j in range(240) if ids[j] in learned]
    reference = masked_run(PassiveOLU, kw, X[rows], y[rows], skip=set(admitted))
    assert np.linalg.norm(base.z - reference) / base.shift(admitted, base.t) > 0.9
    halve_sigma(halve, monkeypatch)
    private, figures = released_law_is_private(base.export_state(), named, reference, rho, seed=30_000)
    assert private is (halve is None), figures


def test_the_cap_survives_a_snapshot_bit_for_bit():
    ids, X, y = synthetic_stream(800, 4, seed=7)
    subjects = skewed_subjects(800, seed=7, keys=300)
    a = PassiveOLU(**KW, max_records_per_key=2, noise_rng=np.random.default_rng(2))
    a.key_cap.recent_keys = 16  # merges into the sorted base many times
    a.learn_many(ids[:500], X[:500], y[:500], subjects=subjects[:500])
    b = load_model(a.export_state(), noise_rng=np.random.default_rng(2))
    for m in (a, b):
        m.learn_many(ids[500:], X[500:], y[500:], subjects=subjects[500:])
    assert np.array_equal(a.z, b.z) and a.t == b.t and a.key_cap.refused == b.key_cap.refused > 0
    assert all(np.array_equal(p, q) for p, q in zip(a.key_cap.export(), b.key_cap.export()))


def test_a_one_pass_batch_with_deletes_matches_one_by_one():
    ids, X, y = synthetic_stream(400, 4, seed=8)
    subjects = skewed_subjects(400, seed=8)
    kw = {**KW, "privacy_unit": "all-deletions"}  # the one-pass path (per-request takes the other)
    prep = PassiveOLU(**kw, max_records_per_key=3)
    keys, Xc, yc = prep.prepare_batch(ids, X, y)
    subject_keys = np.array([record_key(s) for s in subjects], np.uint64)
    delete_rows = [100, 250, 399]
    delete_ids = [ids[40], ids[200], ids[10]]
    delete_keys = [record_key(r) for r in delete_ids]
    spans = [(0, 100), (101, 250), (251, 399)]
    one_pass = PassiveOLU(**kw, max_records_per_key=3, noise_rng=np.random.default_rng(3))
    done = learn_and_unlearn(one_pass, keys, Xc, yc, spans, delete_rows, delete_keys, delete_ids, subject_keys)
    assert done is not None
    each = PassiveOLU(**kw, max_records_per_key=3, noise_rng=np.random.default_rng(3))
    for first, stop in spans:
        each.learn_prepared(keys[first:stop], Xc[first:stop], yc[first:stop], subject_keys[first:stop])
        if stop in delete_rows:
            each.unlearn_request([delete_ids[delete_rows.index(stop)]])
    assert np.array_equal(one_pass.z, each.z) and one_pass.t == each.t
    assert one_pass.key_cap.refused == each.key_cap.refused > 0
    assert done.applied + done.skipped == sum(stop - first for first, stop in spans)


@pytest.mark.parametrize("variant", ["overlap", "disjoint"])
def test_each_generation_of_a_rotation_counts_its_own_lifetime(variant):
    ids, X, y = synthetic_stream(1000, 4, seed=9)
    subjects = ["one"] * 1000  # one key: each model learns its first 2 arrivals of it, then nothing
    r = Rotation(PassiveOLU, lifetime_events=400, variant=variant, **KW, max_records_per_key=2)
    r.learn_many(ids[:900], X[:900], y[:900], subjects=subjects[:900])  # the standby born at 800
    assert r.generation == 3 and r.active.t == r.standby.t == 2
    assert r.privacy()["max_records_per_key"] == 2
    again = load_model(r.export_state())
    assert np.array_equal(again.active.z, r.active.z) and again.active.key_cap.refused == r.active.key_cap.refused


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_a_bad_cap_is_refused(bad):
    with pytest.raises(ConfigError, match="max_records_per_key"):
        PassiveOLU(**KW, max_records_per_key=bad)
    with pytest.raises(ValueError):
        ContributionCap(bad)
