"""The engine's order of addition (worker/olu/arith.py): the reference against the definition
written out in plain Python floats, and the compiled lanes (worker/compiled/lanes.py) against the
reference, bit for bit; the compiled front's clipping against ``FeatureBound``'s."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from worker.compiled.intrinsics import data_pointer
from worker.compiled.lanes import lane_axpy, lane_dot, lane_sqnorm, lane_step
from worker.olu import arith
from worker.olu.core.domain import FeatureBound
from worker.olu.core.kernels import ingest
from worker.olu.core.losses import Logistic


def defined_sum(terms: list[float]) -> float:
    """The definition, one float at a time: lane i % 8 for the first d - d % 8 terms, each lane from
    0.0; the fold ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); then the rest one by one."""
    full = len(terms) - len(terms) % 8
    lanes = [0.0] * 8
    for i in range(full):
        lanes[i % 8] += terms[i]
    total = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]))
    for term in terms[full:]:
        total += term
    return total


def same(a: float, b: float) -> bool:
    """Equal bits (NaN equal to NaN, +0.0 not equal to -0.0)."""
    return np.float64(a).tobytes() == np.float64(b).tobytes()


values = st.floats(allow_nan=False, allow_infinity=False, width=64) | st.sampled_from([0.0, -0.0, 1e300, -1e-300])
pairs = st.integers(0, 70).flatmap(lambda d: st.tuples(hnp.arrays(np.float64, d, elements=values),
                                                       hnp.arrays(np.float64, d, elements=values)))


@numba.njit(fastmath=False)
def _dot(x, x0, z, d):
    return lane_dot(data_pointer(x), x0, data_pointer(z), 0, d)


@numba.njit(fastmath=False)
def _sqnorm(x, x0, d):
    return lane_sqnorm(data_pointer(x), x0, d)


@numba.njit(fastmath=False)
def _step(z, x, x0, eta, s, lam):
    return lane_step(data_pointer(z), data_pointer(x), x0, z.shape[0], eta, s, lam)


@numba.njit(fastmath=False)
def _axpy(z, x, x0, a):
    return lane_axpy(data_pointer(z), data_pointer(x), x0, z.shape[0], a)


@settings(max_examples=300, deadline=None)
@given(pairs)
def test_reference_sums_are_the_definition(pair):
    x, z = pair
    with np.errstate(all="ignore"):
        want = defined_sum((x * z).tolist())
        assert same(arith.dot(x, z), want)
        assert same(arith.sqnorm(x), defined_sum((x * x).tolist()))
        X = np.stack([x, z]) if len(x) else np.zeros((2, 0))
        assert same(arith.matvec(X, z)[0], want)
        assert same(arith.row_sqnorms(X)[1], arith.sqnorm(z))


def test_the_order_is_not_left_to_right():
    """With the lanes, 1e16 and -1e16 (lanes 0 and 4) cancel before the 1.0 (lane 1) joins them."""
    x = np.array([1e16, 1.0, 0, 0, -1e16, 0, 0, 0])
    assert arith.dot(x, np.ones(8)) == 1.0 == math.fsum(x)
    assert float(np.add.accumulate(x)[-1]) == 0.0  # left to right loses it


@settings(max_examples=300, deadline=None)
@given(pairs, st.integers(0, 3), st.floats(-2, 2), st.floats(-2, 2), st.floats(0, 1))
def test_compiled_lanes_are_the_reference(pair, offset, eta, s, lam):
    x, z = pair
    d = len(x)
    padded = np.concatenate([np.full(offset, 7.0), x, np.full(3, -7.0)])  # the row inside a wider buffer
    with np.errstate(all="ignore"):
        assert same(_dot(padded, offset, z, d), arith.dot(x, z))
        assert same(_sqnorm(padded, offset, d), arith.sqnorm(x))
        stepped = z.copy()
        sq = _step(stepped, padded, offset, eta, s, lam)
        want = z - eta * (s * x + lam * z)
        assert stepped.tobytes() == want.tobytes() and same(sq, arith.sqnorm(want))
        moved = z.copy()
        sq = _axpy(moved, padded, offset, s)
        want = z + x * s
        assert moved.tobytes() == want.tobytes() and same(sq, arith.sqnorm(want))
    assert padded[:offset].tolist() == [7.0] * offset and padded[offset + d:].tolist() == [-7.0] * 3  # untouched


near_bound = st.tuples(st.integers(1, 40), st.integers(1, 12), st.integers(0, 2**32),
                       st.sampled_from(["clip", "reject"]), st.sampled_from([1.0, 0.5, 3.7]))


@settings(max_examples=200, deadline=None)
@given(near_bound)
def test_compiled_front_clips_as_the_feature_bound_does(case):
    """Rows a normaliser wrote (norm R, give or take an ulp or a rounding of the 7th digit), some
    far over R: the compiled front's rows are ``check_many``'s, bit for bit, or it steps aside."""
    d, n, seed, policy, bound = case
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * 10.0 ** rng.integers(-3, 3, (n, 1))
    X *= bound / np.sqrt((X * X).sum(axis=1))[:, None]
    X *= rng.choice([1.0, 1.0, 1 + 2.2e-16, 1 - 1.1e-16, 1 + 4e-7, 1.5, 0.5], (n, 1))
    features, y = FeatureBound(d, bound, policy), np.ones(n)
    got = ingest.checked_rows(Logistic(0.1), features, np.arange(n, dtype=np.uint64), X, y)
    ingested = ingest.ingest_batch(Logistic(0.1), features, [f"r-{i}" for i in range(n)], X, y)
    try:
        want = features.check_many(X)
    except Exception:  # noqa: BLE001 - the general path raises: the front must have stepped aside
        assert got is None and ingested is None
        return
    far = np.sqrt((X * X).sum(axis=1)) > bound * 1.01
    if not (far.any() and policy == "reject"):
        assert got is not None and ingested is not None  # near the bound, the front takes the batch
    for front in (got, ingested):
        if front is not None:
            assert front[1].tobytes() == want.tobytes()
            assert front[1] is X or not np.shares_memory(front[1], X)  # the caller's rows never written


def test_rows_normalised_to_the_bound_stay_on_the_compiled_path():
    """The case that sent a wide batch to numpy: unit rows, about half an ulp or two over 1."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 1000))
    X /= np.sqrt((X * X).sum(axis=1))[:, None]
    before = X.copy()
    assert (np.sqrt(arith.row_sqnorms(X)) > 1.0).any()  # the test holds rows the bound clips
    got = ingest.checked_rows(Logistic(0.1), FeatureBound(1000, 1.0), np.arange(500, dtype=np.uint64), X,
                               np.ones(500))
    assert got is not None and got[1].tobytes() == FeatureBound(1000, 1.0).check_many(X).tobytes()
    assert (np.sqrt(arith.row_sqnorms(got[1])) <= 1.0).all() and np.array_equal(X, before)


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e200])
def test_non_finite_or_huge_rows_take_the_general_path(bad):
    X = np.full((3, 9), 0.1)
    X[1, 4] = bad
    for policy in ("clip", "reject"):
        assert ingest.checked_rows(Logistic(0.1), FeatureBound(9, 1.0, policy), np.arange(3, dtype=np.uint64), X,
                                    np.ones(3)) is None
