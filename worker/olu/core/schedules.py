"""Public step-size schedules and the contraction of each projected gradient step.

A projected gradient step with step eta on a mu-strongly convex, beta-smooth loss is Lipschitz with
constant gamma(eta) = max(|1 - eta mu|, |1 - eta beta|) (docs/guarantee.md 1.2). Passive OLU needs
Gamma_{u,tau} = prod_{r=u+1}^{tau} gamma_r, the contraction of every step applied after example u
up to the deletion (docs/calibration.md 3.2). We keep it in log space: products of ~1e6 factors
underflow. A factor above 1 (an early step with eta > 2/beta) is kept as it is: it makes Gamma
larger, so the noise larger, never smaller (invariant 7).

Time t is 1-based: example t is applied with step eta(t).
"""

from __future__ import annotations

import math

from ..exceptions import ConfigError
from ..formulas import convex_step, shifted_log_contraction, strongly_convex_step
from ..privacy.analysis.checks import positive, real


def _positive(name: str, value: float, allow_zero: bool = False) -> float:
    """The one checker (analysis/checks.py), raising the engine's ConfigError."""
    if allow_zero:
        return real(name, value, lo=0.0, error=ConfigError)
    return positive(name, value, error=ConfigError)


class Schedule:
    """Base: subclasses define ``eta(t)``; ``log_contraction(u, tau)`` sums log gamma_r."""

    name = "schedule"
    _MEMO_FROM = 16  # sums of at least this many terms are memoised (see _log_gammas)
    _MEMO_SIZE = 64

    def __init__(self, mu: float, beta: float):
        self.mu = _positive("mu", mu, allow_zero=True)
        self.beta = _positive("beta", beta)

    def eta(self, t: int) -> float:
        raise NotImplementedError

    def gamma(self, t: int) -> float:
        eta = self.eta(t)
        return max(abs(1.0 - eta * self.mu), abs(1.0 - eta * self.beta))

    def log_contraction(self, u: int, tau: int) -> float:
        """log Gamma_{u,tau} = sum_{r=u+1}^{tau} log gamma_r (0 when u == tau)."""
        return self._log_gammas(u + 1, tau + 1)

    def _log_gammas(self, lo: int, hi: int) -> float:
        """fsum of log gamma_r for lo <= r < hi, the term-by-term part of a contraction.

        Long sums are memoised by their ends: the subclasses' sums stop at a fixed step (the end of
        their irregular head), so the noise meter, which asks for Gamma from the same anchor at
        every release, pays for the head once (worker/olu/privacy/meter.py). Same value either way.
        """
        if hi <= lo:  # no term (a step past the irregular head): fsum of nothing
            return 0.0
        if hi - lo < self._MEMO_FROM:
            return math.fsum(math.log(self.gamma(r)) for r in range(lo, hi))
        memo = self.__dict__.setdefault("_memo", {})
        value = memo.get((lo, hi))
        if value is None:
            if len(memo) >= self._MEMO_SIZE:
                memo.clear()
            value = memo[(lo, hi)] = math.fsum(math.log(self.gamma(r)) for r in range(lo, hi))
        return value

    def params(self) -> dict:
        return {"name": self.name, "mu": self.mu, "beta": self.beta}


class StronglyConvex(Schedule):
    """eta_t = 1 / (mu (t + t0)): [P1] Thm 3.3 with the shift of docs/calibration.md 2.3.

    With t0 >= (beta/mu - 1)/2 every step is exactly (1 - 1/(t + t0))-contractive, so
    Gamma_{u,tau} = (u + t0)/(tau + t0) in closed form and no early-point condition is needed.
    t0 = 0 is the paper's exact schedule; its early steps are then handled term by term.

    >>> s = StronglyConvex(mu=1.0, beta=1.0, t0=0.0)
    >>> round(math.exp(s.log_contraction(50, 500)), 12)
    0.1
    """

    name = "strongly-convex"

    def __init__(self, mu: float, beta: float, t0: float | None = None):
        super().__init__(_positive("mu", mu), beta)
        if self.beta < self.mu:
            raise ConfigError(f"beta ({beta}) must be >= mu ({mu})")
        self.t0 = (max(0.0, (self.beta / self.mu - 1.0) / 2.0) if t0 is None
                   else _positive("t0", t0, True))
        # From step r on (r + t0 >= (beta/mu + 1)/2) gamma_r = 1 - 1/(r + t0) exactly.
        self._regular_from = max(1, math.ceil((self.beta / self.mu + 1.0) / 2.0 - self.t0))

    def eta(self, t: int) -> float:
        return strongly_convex_step(self.mu, self.t0, t)

    def log_contraction(self, u: int, tau: int) -> float:
        if tau <= u:
            return 0.0
        first_regular = max(u + 1, self._regular_from)
        head = self._log_gammas(u + 1, min(first_regular, tau + 1))
        if first_regular > tau:
            return head
        # prod_{r=a}^{tau} (r + t0 - 1)/(r + t0) telescopes to (a - 1 + t0)/(tau + t0).
        if first_regular - 1 + self.t0 <= 0:
            return -math.inf  # a step with gamma = 0 erased all earlier influence
        return head + shifted_log_contraction(self.t0, first_regular - 1, tau)

    def params(self) -> dict:
        return {**super().params(), "t0": self.t0}


class Convex(Schedule):
    """eta_t = D / (L sqrt t) for convex losses ([P0] Thm 3); gamma = 1 once eta <= 2/beta.

    The finitely many early steps with eta > 2/beta are expansive and counted term by term.

    >>> s = Convex(diameter=2.0, lipschitz=1.0, beta=0.25)
    >>> s.log_contraction(10, 1000)
    0.0
    """

    name = "convex"

    def __init__(self, diameter: float, lipschitz: float, beta: float, mu: float = 0.0):
        super().__init__(mu, beta)
        self.diameter = _positive("diameter", diameter)
        self.lipschitz = _positive("L", lipschitz)

    def eta(self, t: int) -> float:
        return convex_step(self.diameter, self.lipschitz, t)

    def gamma(self, t: int) -> float:
        # With mu > 0 the true factor is below 1; using 1 is conservative (more noise).
        return max(1.0, abs(1.0 - self.eta(t) * self.beta))

    def log_contraction(self, u: int, tau: int) -> float:
        # gamma_r > 1 only while eta_r > 2/beta, i.e. r < (beta D / (2 L))^2.
        last_expansive = min(tau,
                             math.ceil((self.beta * self.diameter / (2 * self.lipschitz)) ** 2))
        return self._log_gammas(u + 1, last_expansive + 1)

    def params(self) -> dict:
        return {**super().params(), "diameter": self.diameter, "L": self.lipschitz}


class Constant(Schedule):
    """A constant step eta ([P0] Thm 5); gamma is the same for every step.

    >>> s = Constant(eta=0.5, mu=0.5, beta=1.0)
    >>> round(math.exp(s.log_contraction(0, 3)), 12)
    0.421875
    """

    name = "constant"

    def __init__(self, eta: float, mu: float, beta: float):
        super().__init__(mu, beta)
        self.step = _positive("eta", eta)

    def eta(self, t: int) -> float:
        return self.step

    def log_contraction(self, u: int, tau: int) -> float:
        g = self.gamma(1)
        if tau <= u:
            return 0.0
        return -math.inf if g == 0 else (tau - u) * math.log(g)

    def params(self) -> dict:
        return {**super().params(), "eta": self.step}

