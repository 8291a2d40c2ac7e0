"""Feature norms over the whole double range: the bound check and clipping at ingest (domain.py).

sqrt(sum x_i^2) overflows once a coordinate passes ~1.3e154, so finite features such as
[1e308, 0.1, ...] used to be reported as NaN/infinity (``non_finite``) instead of over the bound
(``norm_exceeded``), and under the clip policy [1e155, 0, ...] was rejected instead of clipped.
The reference here is ``math.hypot``, which scales internally and never overflows below the
largest double.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from worker.olu import PassiveOLU
from worker.olu.core.domain import FeatureBound, row_norms
from worker.olu.exceptions import NonFiniteInput, NormExceeded

MAX = float(np.finfo(np.float64).max)
TINY = float(np.finfo(np.float64).tiny)
SUBNORMAL = 5e-324
PROPERTY = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Any finite double, with the ends of the range (near 1.8e308, subnormals, zero) drawn often.
_edges = st.sampled_from([MAX, -MAX, 1.3e154, 1e155, 1e200, 1e308, TINY, SUBNORMAL, -SUBNORMAL, 1e-160, 0.0, -0.0])
_huge = st.floats(min_value=1e150, max_value=MAX) | st.floats(min_value=-MAX, max_value=-1e150)
_tiny = st.floats(min_value=-1e-150, max_value=1e-150)
coordinate = st.floats(allow_nan=False, allow_infinity=False) | _huge | _tiny | _edges
rows = st.integers(1, 6).flatmap(lambda d: st.lists(coordinate, min_size=d, max_size=d))
bounds = st.sampled_from([1.0, 0.5, 1e300, MAX]) | st.floats(min_value=1e-300, max_value=1e300)


def hypot(x) -> float:
    return math.hypot(*x)  # inf when the true norm exceeds the largest double


def norm_over(x, bound: float) -> float:
    """||x|| / bound without overflow: x is scaled by its largest |x_i| first."""
    top = max(abs(v) for v in x)
    return 0.0 if top == 0 else math.hypot(*(v / top for v in x)) * (top / bound)


def unit(x) -> list[float]:
    top = max(abs(v) for v in x)
    norm = math.hypot(*(v / top for v in x))
    return [(v / top) / norm for v in x]


def slack(bound: float) -> float:
    """The bound with the rounding slack domain.py allows before rejecting (capped at the largest double)."""
    return bound * (1 + 1e-6) if bound <= MAX / (1 + 1e-6) else MAX


@PROPERTY
@given(rows)
@example([1e308, 0.1, 0.1, 0.1, 0.1])
@example([MAX, MAX, MAX])
@example([SUBNORMAL, SUBNORMAL])
@example([1e-200, 3e-200, -4e-200])
@example([1.8941775056029057e+300, MAX])  # true norm MAX (1 + 5.5e-17): on the overflow edge
def test_row_norms_match_hypot_over_the_whole_range(x):
    norms, finite = row_norms(np.array([x], np.float64))
    assert finite.tolist() == [True]
    expected = hypot(x)
    if math.isinf(expected):
        # beyond the largest double: inf, or the largest double itself where the true norm is
        # within the sum's few ulps of it (the same slack as below; hypot rounds correctly)
        assert norms[0] == math.inf or norms[0] >= MAX * (1 - 1e-14)
    else:  # a few ulps: sums of squares of up to 6 terms (subnormal results: one unit of the last place)
        assert norms[0] == pytest.approx(expected, rel=1e-14, abs=SUBNORMAL)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_stay_non_finite_whatever_else_the_row_holds(bad):
    for others in ([0.1, 0.1], [1e308, 1e308], [SUBNORMAL, 0.0]):
        with pytest.raises(NonFiniteInput, match="row 1"):
            FeatureBound(3, 1.0, "reject").check_many([[0.1, 0.1, 0.1], [*others, bad]])


@PROPERTY
@given(rows, bounds)
@example([1e308, 0.1, 0.1, 0.1, 0.1], 1.0)
@example([1e200, 1e200], 1.0)
@example([MAX, MAX, -MAX], MAX)
def test_reject_policy_classifies_by_the_true_norm(x, bound):
    ratio = norm_over(x, slack(bound))
    if abs(ratio - 1) <= 1e-12:
        return  # too close to the threshold for the reference to decide
    features = FeatureBound(len(x), bound, "reject")
    if ratio > 1:
        with pytest.raises(NormExceeded):
            features.check(x)
    else:
        out = features.check(x)
        assert np.all(np.isfinite(out)) and row_norms(out[None, :])[0][0] <= bound


@PROPERTY
@given(rows, bounds)
@example([1e155, 0.0, 0.0, 0.0, 0.0], 1.0)
@example([1e150, 0.0, 0.0, 0.0, 0.0], 1.0)
@example([MAX, MAX, MAX, MAX, MAX], 1.0)
@example([-MAX, MAX, SUBNORMAL, 0.0, 1.0], 1.0)
@example([3.0, 4.0], 1.0)
@example([MAX, MAX], MAX)
def test_clip_gives_a_finite_vector_within_the_bound_in_the_same_direction(x, bound):
    features = FeatureBound(len(x), bound, "clip")
    out = features.check(x)
    assert np.all(np.isfinite(out))
    assert row_norms(out[None, :])[0][0] <= bound  # the engine's own check: it would not clip again
    assert norm_over(out, bound) <= 1 + 1e-15  # and the independent reference, to rounding
    assert np.array_equal(features.check(out), out)  # idempotent, bit for bit
    if row_norms(np.array([x], np.float64))[0][0] <= bound:
        assert np.array_equal(out, np.array(x, np.float64))  # within the bound: untouched
        return
    assert norm_over(out, bound) >= 1 - 1e-12  # clipped onto the sphere, not shrunk further
    # the same direction: out is a positive multiple of x
    assert all(o == 0.0 or (o > 0) == (v > 0) for o, v in zip(out.tolist(), x))
    np.testing.assert_allclose(unit(out.tolist()), unit(x), rtol=0, atol=1e-12)


def test_a_batch_reports_the_first_bad_row_and_clips_several_huge_rows():
    X = [[0.1, 0.2], [1e308, 1e308], [1e155, -1e155], [0.3, 0.4]]
    with pytest.raises(NormExceeded, match="row 1"):
        FeatureBound(2, 1.0, "reject").check_many(X)
    out = FeatureBound(2, 1.0, "clip").check_many(X)
    half = math.sqrt(0.5)
    np.testing.assert_allclose(out, [[0.1, 0.2], [half, half], [half, -half], [0.3, 0.4]], rtol=1e-15)
    assert out[0].tolist() == [0.1, 0.2] and out[3].tolist() == [0.3, 0.4]  # untouched rows stay bit for bit


def test_the_model_rejects_1e308_as_over_the_bound_and_learns_a_clipped_1e155():
    base = dict(dim=5, l2=0.01, radius=10.0, feature_bound=1.0, noise_rng=np.random.default_rng(0))
    strict = PassiveOLU(**base)
    with pytest.raises(NormExceeded) as caught:
        strict.learn_one("a", [1e308, 0.1, 0.1, 0.1, 0.1], 1)
    assert caught.value.reason == "norm_exceeded" and strict.t == 0
    for big in (1e155, 1e150, 1e300, MAX):
        clipping = PassiveOLU(**base, feature_policy="clip")
        assert clipping.learn_one("a", [big, 0.0, 0.0, 0.0, 0.0], 1)
        reference = PassiveOLU(**base)
        reference.learn_one("a", [1.0, 0.0, 0.0, 0.0, 0.0], 1)  # the clipped x, through the same step
        assert np.array_equal(clipping.z, reference.z), big


def test_learn_many_equals_learn_one_on_huge_rows():
    X = np.array([[1e155, 0, 0], [MAX, -MAX, MAX], [0.1, 0.2, 0.3], [1e-300, 0, 0], [SUBNORMAL, 0, 1e200]])
    ids = [f"r-{j}" for j in range(len(X))]
    base = dict(dim=3, feature_policy="clip", noise_rng=np.random.default_rng(0))
    one, many = PassiveOLU(**base), PassiveOLU(**base)
    for rid, x in zip(ids, X):
        one.learn_one(rid, x, 1)
    many.learn_many(ids, X, [1] * len(X))
    assert one.t == many.t == len(X) and np.array_equal(one.z, many.z)
