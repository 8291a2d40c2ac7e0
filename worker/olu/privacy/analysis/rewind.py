"""Noise calibration and rewind-depth search of
Rewind-to-Delete (R2D, [R2D]; docs/calibration.md 6.2).

Notation is R2D's own (docs/calibration.md 6.2): ``smooth`` is the smoothness constant L (gradients
L-Lipschitz; our losses' ``beta``), ``grad_bound`` is G (``||grad f_z|| <= G`` over the domain; our
losses' Lipschitz constant ``L``), n the training-set size, m the number of points unlearned, T the
number of full-batch gradient-descent steps, eta the constant step size and K the rewind depth.

Sensitivity (docs/calibration.md 6.2, [R2D] Lemmas B.2 + B.3)::

    Delta(K, m) = 2 m G h(K) / (L n),   h(K) = ((1 + a)^(T-K) -
    1) (1 + eta L)^K,   a = eta L n / (n - m)

h decreases from h(0) = (1 + a)^T - 1 to h(T) = 0. Everything is evaluated in log space
(docs/calibration.md 6.2: (1 + a)^T overflows): log h =
log(expm1((T - K) log1p(a))) + K log1p(eta L).

Gaussian mechanism: noise N(0, sigma^2 I) hides a shift Delta at (epsilon, delta) iff
Delta / sigma <= r*(epsilon, delta). Two forms (docs/calibration.md 6.2):

- ``"classic"`` (Theorem 3.1 / B.1 [paper], valid for epsilon <= 1): r* = epsilon / sqrt(2
  log(1.25/delta)), i.e. the boxed sigma = 2 m G h(K) sqrt(2 log(1.25/delta)) / (L n epsilon);
- ``"analytic"`` (Balle & Wang 2018 [external], exact for every epsilon): the largest r with
  Phi(r/2 - epsilon/r) - e^epsilon Phi(-r/2 - epsilon/r) <= delta, found by bisection in log space.

``"auto"`` (what the model uses for calibration) is the paper's choice: classic for epsilon <= 1,
analytic above (docs/calibration.md 6.2). The epsilon *reported* for a given ratio Delta/sigma is
the analytic one (:func:`epsilon_for_ratio`): exact, monotone in the ratio and never above the
classic value, so every reported number is a valid bound.

Rewind depth (docs/calibration.md 6.2): for a fixed sigma, the smallest integer K in
[0, T] with Delta(K, m) <= r* sigma, by binary search on the monotone h. Corollary 3.2's closed form
(:func:`rewind_depth_bound`) is an upper bound of that K (the paper's sufficient choice); tests
check both against hand-computed cases.

>>> g = gaussian_factor(1e-5); round(g, 6)
4.844805
>>> k = dict(n=1000, m=1, T=50, eta=0.1, smooth=1.0, grad_bound=1.0)
>>> [rewind_depth(s, eps=1.0, delta=1e-5, **k) for s in (0.05, 0.3, 1.0, 3.0)]
[50, 47, 29, 0]
>>> noise_sigma(47, eps=1.0, delta=1e-5, **k) <= 0.3 < noise_sigma(46, eps=1.0, delta=1e-5, **k)
True
"""

from __future__ import annotations

import math

from .checks import count, positive, real

__all__ = [
    "MECHANISMS", "gaussian_factor", "log_h", "log_sensitivity", "sensitivity", "max_ratio",
    "analytic_delta", "epsilon_for_ratio", "noise_sigma", "rewind_depth", "rewind_depth_bound",
    "epsilon_spent", "deletion_capacity",
]

MECHANISMS = ("auto", "classic", "analytic")
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def gaussian_factor(delta: float) -> float:
    """sqrt(2 log(1.25/delta)), the classic Gaussian mechanism's factor (Theorem B.1)."""
    positive("delta", delta, upper=1.0)
    return math.sqrt(2.0 * math.log(1.25 / delta))


def _check(n: int, m: int, T: int, eta: float, smooth: float, grad_bound: float) -> None:
    count("T", T, minimum=1)
    count("m", m, minimum=0)
    count("n", n, minimum=m + 1)
    for name, v in (("eta", eta), ("smooth", smooth), ("grad_bound", grad_bound)):
        positive(name, v)


def log_h(K: int, *, n: int, m: int, T: int, eta: float, smooth: float) -> float:
    """log h(K) = log((1 + a)^(T-K) - 1) + K log(1 + eta L), a = eta L n/(n - m); -inf at K = T."""
    count("K", K, minimum=0, maximum=T)
    if K == T:
        return -math.inf
    a = eta * smooth * n / (n - m)
    x = (T - K) * math.log1p(a)
    log_grow = x + math.log(-math.expm1(-x)) if x > 30.0 else math.log(math.expm1(x))
    return log_grow + K * math.log1p(eta * smooth)


def log_sensitivity(K: int, *, n: int, m: int, T: int, eta: float, smooth: float,
                    grad_bound: float) -> float:
    """log Delta(K, m) = log(2 m G / (L n)) + log h(K); -inf when m = 0 or K = T."""
    _check(n, m, T, eta, smooth, grad_bound)
    if m == 0:
        return -math.inf
    return (math.log(2.0 * m * grad_bound / (smooth * n))
            + log_h(K, n=n, m=m, T=T, eta=eta, smooth=smooth))


def sensitivity(K: int, **kw) -> float:
    """Delta(K, m) (inf if it overflows a float)."""
    v = log_sensitivity(K, **kw)
    return math.exp(v) if v < 709.0 else math.inf


# ------------------------------------------------------------------ Gaussian mechanism
def _log_ndtr(x: float) -> float:
    """log Phi(x) without underflow (asymptotic series below -30)."""
    if x > -30.0:
        return math.log(0.5 * math.erfc(-x / math.sqrt(2.0)))
    x2 = x * x
    return -0.5 * x2 - math.log(-x) - _LOG_SQRT_2PI + math.log1p(-1.0 / x2 + 3.0 / (x2 * x2))


def analytic_delta(ratio: float, eps: float) -> float:
    """Balle-Wang delta of N(., sigma^2 I) for shift/sigma =
    ratio at epsilon (exact, Thm 8 of BW18)."""
    if ratio <= 0.0:
        return 0.0
    if math.isinf(ratio):
        return 1.0
    a, b = ratio / 2.0 - eps / ratio, -ratio / 2.0 - eps / ratio
    first = math.exp(_log_ndtr(a))
    second = math.exp(min(eps + _log_ndtr(b), 0.0))
    return max(0.0, first - second)


def _bisect_up(pred, lo: float, hi: float, iters: int = 200) -> float:
    """Largest x in [lo, hi] (to float precision) with pred(x) true; pred monotone true -> false."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if pred(mid) else (lo, mid)
    return lo


def max_ratio(eps: float, delta: float, mechanism: str = "auto") -> float:
    """r*(epsilon, delta): the largest Delta/sigma certified at (epsilon, delta).

    >>> (round(max_ratio(1.0, 1e-5, "classic"), 6),
    ...  max_ratio(1.0, 1e-5, "analytic") > max_ratio(1.0, 1e-5, "classic"))
    (0.206407, True)
    """
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    positive("eps", eps)
    gaussian_factor(delta)  # validates delta
    if mechanism == "classic" or (mechanism == "auto" and eps <= 1.0):
        return eps / gaussian_factor(delta)
    # analytic_delta is increasing in the ratio: bracket, then bisect in log space
    hi = 1.0
    while analytic_delta(hi, eps) <= delta:
        hi *= 2.0
    lo = hi / 2.0
    while analytic_delta(lo, eps) > delta and lo > 1e-300:
        lo /= 2.0
    return math.exp(
        _bisect_up(lambda x: analytic_delta(math.exp(x), eps) <= delta, math.log(lo), math.log(hi)))


def epsilon_for_ratio(ratio: float, delta: float) -> float:
    """Smallest epsilon at which a shift of ``ratio`` sigmas
    is (epsilon, delta)-hidden (Balle-Wang).

    >>> epsilon_for_ratio(0.0, 1e-5), round(epsilon_for_ratio(max_ratio(2.0, 1e-5), 1e-5), 9)
    (0.0, 2.0)
    """
    gaussian_factor(delta)
    if ratio <= 0.0:
        return 0.0
    if math.isinf(ratio) or analytic_delta(ratio, 1e6) > delta:
        return math.inf
    if analytic_delta(ratio, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while analytic_delta(ratio, hi) > delta:
        hi *= 2.0
    # smallest eps with delta(eps) <= delta: delta(eps) decreases in eps
    eps = _bisect_up(lambda e: analytic_delta(ratio, e) > delta, 0.0, hi)
    return math.nextafter(eps, math.inf) if analytic_delta(ratio, eps) > delta else eps


# ------------------------------------------------------------------ calibration
def noise_sigma(K: int, *, eps: float, delta: float, n: int, m: int, T: int, eta: float,
                smooth: float,
                grad_bound: float, mechanism: str = "auto") -> float:
    """sigma for rewind depth K (Theorem 3.1's boxed formula with the classic mechanism)."""
    ls = log_sensitivity(K, n=n, m=m, T=T, eta=eta, smooth=smooth, grad_bound=grad_bound)
    if ls == -math.inf:
        return 0.0
    v = ls - math.log(max_ratio(eps, delta, mechanism))
    return math.exp(v) if v < 709.0 else math.inf


def rewind_depth(sigma: float, *, eps: float, delta: float, n: int, m: int, T: int, eta: float,
                 smooth: float,
                 grad_bound: float, mechanism: str = "auto") -> int:
    """Smallest K in [0, T] with Delta(K, m) <= r*(eps, delta) sigma (docs/calibration.md 6.2,
    binary search on monotone h).

    K = T always qualifies (h(T) = 0: a noiseless full retrain from the checkpoint at step 0).
    """
    _check(n, m, T, eta, smooth, grad_bound)
    real("sigma", sigma, lo=0.0)
    if m == 0:
        return 0
    if sigma == 0.0:
        return T
    limit = math.log(sigma) + math.log(max_ratio(eps, delta, mechanism))

    def ok(K: int) -> bool:
        return log_sensitivity(K, n=n, m=m, T=T, eta=eta, smooth=smooth,
                               grad_bound=grad_bound) <= limit

    lo, hi = 0, T  # ok(hi) holds; find the first ok
    if ok(0):
        return 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def rewind_depth_bound(sigma: float, *, eps: float, delta: float, n: int, m: int, T: int,
                       eta: float,
                       smooth: float, grad_bound: float, mechanism: str = "classic") -> int:
    """ceil of Corollary 3.2: log((1+a)^T - sigma L n eps' /
    (2 m G)) / log(1 + a), clipped to [0, T].

    eps' = eps / sqrt(2 log(1.25/delta)) for the classic mechanism (r* in general). Sufficient
    (it upper-bounds :func:`rewind_depth`, since h(K) <= (1+a)^T - (1+a)^K); 0 when the argument of
    the outer log is <= 1 (docs/calibration.md 6.2).
    """
    _check(n, m, T, eta, smooth, grad_bound)
    if m == 0:
        return 0
    a = eta * smooth * n / (n - m)
    budget = sigma * smooth * n * max_ratio(eps, delta, mechanism) / (2.0 * m * grad_bound)
    log_top = T * math.log1p(a)
    if budget <= 0.0:
        return T
    if math.log(budget) >= log_top:
        return 0
    arg_log = log_top + math.log(-math.expm1(math.log(budget) - log_top))  # log((1+a)^T - budget)
    if arg_log <= 0.0:
        return 0
    return min(T, max(0, math.ceil(arg_log / math.log1p(a) - 1e-12)))


def epsilon_spent(sigma: float, K: int, *, delta: float, n: int, m: int, T: int, eta: float,
                  smooth: float,
                  grad_bound: float) -> float:
    """epsilon(m) of docs/accounting.md 4: Balle-Wang epsilon of Delta(K, m)/sigma."""
    ls = log_sensitivity(K, n=n, m=m, T=T, eta=eta, smooth=smooth, grad_bound=grad_bound)
    if ls == -math.inf:
        return 0.0
    if sigma <= 0.0:
        return math.inf
    v = ls - math.log(sigma)
    return epsilon_for_ratio(math.exp(v) if v < 709.0 else math.inf, delta)


def deletion_capacity(sigma: float, K: int, *, eps: float, delta: float, n: int, T: int, eta: float,
                      smooth: float, grad_bound: float) -> int:
    """Largest m in [0, n - 1] with epsilon(m) <= eps
    (docs/calibration.md 6.2; epsilon(m) increases in m).

    Uses the exact (analytic) mechanism, consistent with :func:`epsilon_spent`.
    """
    if n <= 1:
        return 0
    limit = math.log(max_ratio(eps, delta, "analytic")) + (
        math.log(sigma) if sigma > 0 else -math.inf)

    def ok(m: int) -> bool:
        return log_sensitivity(K, n=n, m=m, T=T, eta=eta, smooth=smooth,
                               grad_bound=grad_bound) <= limit

    lo, hi = 0, n - 1
    if ok(hi):
        return hi
    while hi - lo > 1:  # ok(lo) holds (m = 0), ok(hi) fails
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
