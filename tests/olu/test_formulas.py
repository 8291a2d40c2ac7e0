"""Each formula of worker/olu/formulas.py is the one the reference, the kernels and the planner
use: compiled by numba it gives the Python function's bits, and the callers agree with it."""

from __future__ import annotations

import inspect
import math

import numba
import numpy as np
import pytest

from worker.olu import formulas
from worker.olu.core.losses import Logistic, Ridge
from worker.olu.core.schedules import Convex, StronglyConvex

FORMULAS = [f for name, f in inspect.getmembers(formulas, inspect.isfunction) if f.__module__ == formulas.__name__]


def _arguments(func, rng, n):
    """``n`` argument tuples for ``func``, drawn by parameter name from each one's domain."""
    draws = {
        "mu": lambda: rng.uniform(1e-4, 10.0), "t0": lambda: rng.choice([0.0, rng.uniform(0, 1e3)]),
        "t": lambda: int(rng.integers(1, 10**9)), "u": lambda: int(rng.integers(1, 10**6)),
        "tau": lambda: int(rng.integers(1, 2 * 10**6)), "diameter": lambda: rng.uniform(1e-3, 100.0),
        "lipschitz": lambda: rng.uniform(1e-3, 100.0), "step": lambda: rng.uniform(0, 10.0),
        "log_contraction": lambda: -rng.exponential(5.0), "sensitivity_u": lambda: rng.uniform(0, 50.0),
        "m": lambda: rng.normal(0, 30.0), "margin": lambda: rng.normal(0, 30.0),
        "y": lambda: rng.choice([-1.0, 1.0, rng.normal(0, 5.0)]),
        "shift": lambda: rng.choice([rng.exponential(1.0), 5e-324, 1e-310]),
        "factor": lambda: rng.choice([rng.uniform(0.1, 50.0), -rng.uniform(1e-3, 10.0)]),
    }
    names = list(inspect.signature(func).parameters)
    return [tuple(draws[name]() for name in names) for _ in range(n)]


@pytest.mark.parametrize("func", FORMULAS, ids=lambda f: f.__name__)
def test_the_compiled_formula_gives_the_python_bits(func):
    compiled = numba.njit(func)
    rng = np.random.default_rng(abs(hash(func.__name__)) % 2**32)
    for args in _arguments(func, rng, 3000):
        want, got = func(*args), compiled(*args)
        assert np.float64(want).tobytes() == np.float64(got).tobytes(), (func.__name__, args, want, got)


def test_the_reference_schedules_and_losses_are_the_formulas():
    rng = np.random.default_rng(5)
    s = StronglyConvex(mu=0.3, beta=2.0)
    c = Convex(diameter=4.0, lipschitz=2.0, beta=1.0)
    for t in rng.integers(1, 10**7, 500):
        t = int(t)
        assert s.eta(t) == formulas.strongly_convex_step(0.3, s.t0, t)
        assert c.eta(t) == formulas.convex_step(4.0, 2.0, t)
        u = int(rng.integers(1, t + 1))
        assert s.log_contraction(u, t) == formulas.shifted_log_contraction(s.t0, u, t)
    logistic, ridge = Logistic(lam=0.1), Ridge(lam=0.1)
    for margin in rng.normal(0, 20, 500):
        assert logistic.derivative(margin, 1.0) == formulas.logistic_derivative(margin, 1.0)
        assert ridge.derivative(margin, 0.5) == formulas.ridge_derivative(margin, 0.5)


def test_the_logistic_derivative_does_not_overflow():
    assert formulas.logistic_derivative(1e4, 1.0) == 0.0
    assert formulas.logistic_derivative(-1e4, 1.0) == -1.0
    assert math.isclose(formulas.log1pexp(1e4), 1e4)
