"""Passive OLU ([P1] Algorithm 1) and its schedule-robust restart variant ([P1] Algorithm 3).

Passive OLU never revisits data: OGD runs as usual and each deletion adds Gaussian noise once,
calibrated to the shift the deleted record can still cause (docs/algorithms.md 2.1,
docs/calibration.md 3.4):

    a_i     = sum over the record's applied steps u of Gamma_{u,tau} * Delta_u
    sigma_i = a_i * sqrt(omega i^omega / (2 (omega - 1) rho))        (= a_i sqrt(3 i^1.2/rho))
    z       = Proj_K(z + N(0, sigma_i^2 I))
    (project after noise, docs/algorithms.md 2.3)

with the time-varying contraction of [P1] Corollary 3.2 (never [P0]'s constant gamma,
docs/calibration.md 3.2).
"""

from __future__ import annotations

import math

import numpy as np

from ..arith import norm
from ..core.base import Deletion, OnlineUnlearner
from ..exceptions import ConfigError
from ..formulas import passive_shift


class PassiveOLU(OnlineUnlearner):
    """Noise once per deletion; O(d) per deletion and no stored examples.

    >>> m = PassiveOLU(dim=2, l2=0.1, radius=5.0, rho=1.0)
    >>> m.learn_one("a", [0.6, 0.8], 1), m.learn_one("b", [0.8, -0.6], -1)
    (True, True)
    >>> d = m.unlearn_one("a")
    >>> d.outcome, d.index, m.unlearn_one("a").outcome, m.unlearn_one("never-seen").outcome
    ('noised', 1, 'duplicate', 'not_applied')
    >>> round(d.sigma / d.shift, 12) == round(math.sqrt(3.0), 12)
    True
    """

    algorithm = "passive"
    calibration = "gaussian"
    settings = {"max_deletions": "capacity"}
    # The per-request proof (docs/accounting.md 8.2) needs only that sigma is a function of the
    # request's public metadata, which the shift below is; and the shifts of a request add.
    privacy_units = ("all-deletions", "per-request")
    groups_requests = True
    rotates = True
    mixes_deletions = True  # a batch's deletes inside the learning pass (core/mixed.py)

    def shift(self, steps, tau: int) -> float:
        """a = sum_u Gamma_{u,tau} Delta_u (a record applied twice contributes twice,
        docs/guarantee.md 1.3)."""
        if len(steps) == 1:  # the common record, applied once: fsum of one term is that term
            u = steps[0]
            return passive_shift(self.schedule.log_contraction(u, tau), self.sensitivity(u))
        return math.fsum(passive_shift(self.schedule.log_contraction(u, tau), self.sensitivity(u))
                         for u in steps)

    def _delete(self, key: int, steps: list[int]) -> Deletion:
        return self._release_with_noise(self.z, self.shift(steps, self.t), steps)


class PassiveRestartOLU(PassiveOLU):
    """[P1] Algorithm 3: noise when the deletion is cheap to hide, otherwise restart.

    The test of eq. (26)/(28), on epoch-relative indices:
    tau / u^2 <= c sqrt(log tau + 2 k~) / (L^2 d k~^2.2). A deletion that fails it discards the
    model and restarts a new epoch from a data-independent random point of K, resetting the step
    counter, the contraction log and the deletion counter (docs/algorithms.md 3.2; sound because the
    new run depends on no earlier data). A record applied before the last restart is deleted with no
    noise and no budget: the current model never saw it.
    """

    algorithm = "passive-restart"
    settings = {"restart_c": "restart_c", "max_deletions": "max_deletions"}
    mixes_deletions = False  # a deletion may restart the model: one by one (its _delete)
    privacy_units = ("all-deletions",)  # the restart test's k~ is a lifetime plan: not per request
    rotates = False  # it renews itself by its restart test (docs/accounting.md 12.5)

    def __init__(self, dim: int, *, restart_c: float = 1.0, max_deletions: int = 1000, **kwargs):
        if not (isinstance(restart_c, (int, float)) and math.isfinite(restart_c) and restart_c > 0):
            raise ConfigError(f"restart_c must be a finite number > 0, got {restart_c!r}")
        if not (isinstance(max_deletions, int) and max_deletions >= 1):
            raise ConfigError(f"max_deletions (k~) must be an integer >= 1, got {max_deletions!r}")
        super().__init__(dim, **kwargs)
        self.config.update(restart_c=restart_c, max_deletions=max_deletions)
        self.counters["restarts"] = 0

    def noise_is_affordable(self, u: int, tau: int) -> bool:
        k = self.config["max_deletions"]
        limit = self.config["restart_c"] * math.sqrt(math.log(tau) + 2 * k) / (
            self.constants.L ** 2 * self.param_dim * k ** 2.2
        )
        return tau / (u * u) <= limit

    def _delete(self, key: int, steps: list[int]) -> Deletion:
        if self.noise_is_affordable(min(steps), self.t):
            return super()._delete(key, steps)
        self.restart()
        return Deletion("restarted", 0, 0.0, 0.0, tuple(steps))

    def _legacy_deletions_applied(self) -> int:
        return len(self.ledger) + self.counters["restarts"]  # a restart leaves no ledger entry

    def restart(self) -> None:
        self.epoch += 1
        self.t = 0
        self.index.clear()
        self.accountant.restart_epoch()
        self.counters["restarts"] += 1
        self.z = self._random_point()

    def _random_point(self) -> np.ndarray:
        """Uniform in the ball, from OS entropy (or the test generator): data-independent."""
        rng = self._entropy()
        direction = rng.normal(size=self.param_dim)
        direction /= max(norm(direction), 1e-300)
        return direction * self.ball.radius * rng.random() ** (1.0 / self.param_dim)
