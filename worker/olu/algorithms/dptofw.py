"""DP-TOFW, the online-DP baseline: private tree-based online Frank-Wolfe ([DP-FW], Algorithm 1).

Implemented for p = 2 only (docs/algorithms.md 11.1: the l2 ball K of radius r, Gaussian noise, the
geometry of every other algorithm here), which is all the worker needs: losses, features and K
are Euclidean. p != 2 would need other LMOs and, for 1 < p < 2, the generalised Gaussian sampler
of docs/algorithms.md 11.1; neither is built.

Per record, with rho_t = 1/(t+1) (docs/algorithms.md 11.2, docs/algorithms.md 11.4):

    g_t   = (t+1) grad f(theta_t; x_t) - t grad f(theta_{t-1}; x_t)     recursive gradient, sum form
    G_t   = tree.add(g_t)                                                noisy prefix sum
    (docs/algorithms.md 11.3) d_t   = G_t / (t+1)
    v_t   = -r d_t / ||d_t||                                             LMO of the l2 ball (0 if
    d_t = 0) theta_{t+1} = theta_t + eta_t (v_t - theta_t),   eta_t = min(1, c/(t+1))

``||g_t|| <= S = max(1, c) beta D + L`` (docs/algorithms.md 11.2; D = 2r; beta, L the loss's public
constants), so one record moves one tree term by at most Delta = 2S (replacement neighbours). Every
released theta is post-processing of the tree's noisy nodes (docs/accounting.md 5.1).

Calibration and accounting (docs/calibration.md 6.3, zCDP;
the errata of docs/algorithms.md 11.7 applied)
---------------------------------------------------------------------------
``rho`` (``OLU_RHO``, or derived from ``OLU_TARGET_EPSILON``) is the lifetime Renyi slope budget of
the model, as for every algorithm (D_alpha <= alpha * rho for all alpha > 1, i.e. rho-zCDP). A node
with per-coordinate std sigma is Delta^2/(2 sigma^2)-zCDP; a record is in at most
k(t) = floor(log2 t) + 1 nodes by time t and m = ceil(log2 n) + 1 over the horizon, so

    calibration "zcdp" (default):  sigma = Delta sqrt(m / (2 rho))     (docs/calibration.md 6.3 with
    rho* = rho) calibration "paper":           sigma = sqrt(8 m^2
    log(m/delta)) S / eps_t   (eq. 3.2, kappa = 1),
                                   eps_t = rho + 2 sqrt(rho ln(1/delta))  (the
                                   same (eps_t, delta) promise)
    spent by time t:               rho(t) = k(t) Delta^2 / (2 sigma^2)   (<= rho at t = n)

and ``epsilon`` is the project's improved RDP conversion of rho(t) at ``delta`` (worker/olu/
accountant.py), the same conversion as every other algorithm. To configure a target (epsilon,
delta) instead, pass ``rho = rho_for_epsilon(epsilon, delta)`` (docs/calibration.md 6.3's
Bun-Steinke inversion). Errata followed: the sum form of d_t (d_1 = grad/2, docs/algorithms.md 11.7:
the sensitivity proof is for it); Lemma 2.1's constant 2 log(1/delta) in the paper calibration, not
the classical 2 ln(1.25/delta) (docs/algorithms.md 11.7); kappa = 1 and the identity norm for p = 2,
so neither the Gamma-scale typo (docs/algorithms.md 11.7) nor
the q+ index (docs/algorithms.md 11.7) can arise; the paper's experimental noise levels are not used
(docs/algorithms.md 11.7).

Horizon and deletions (docs/algorithms.md 11.5)
--------------------------------
The horizon n (``dp_horizon``) is fixed up front. When a record would be number n+1 of the tree,
a new epoch starts: a fresh tree and recursive-gradient sum over new records only, warm-started
from the current theta (post-processing), with the FW step eta kept on the global count (<= the
epoch-local 1/(i+1), so the sensitivity bound holds). Epochs hold disjoint records, so each
record's spend is its own epoch's (parallel composition) and the model's worst record is the
largest epoch spend. A deletion is a no-op on the state, outcome ``dp_covered``: every release
already published or still to come is (epsilon, delta)-indistinguishable from one in which the
deleted record was a null record (gradient 0; the null-replacement sensitivity is S, half of
Delta). It draws no noise and spends nothing, so it needs no delta snapshot and no release.
"""

from __future__ import annotations

import math

import numpy as np

from .. import arith
from ..core.base import Deletion, OnlineUnlearner
from ..exceptions import ConfigError, InvalidState
from ..privacy.accountant import rdp_to_dp
from ..privacy.tree import NodeNoise, TreeAggregator, record_levels, tree_levels

__all__ = [
    "CALIBRATIONS", "DEFAULT_HORIZON", "DPTreeOnlineFrankWolfe", "basic_composition_epsilon",
    "paper_sigma",
    "rho_for_epsilon", "zcdp_sigma",
]

CALIBRATIONS = ("zcdp", "paper")
DEFAULT_HORIZON = 1_000_000


# ----------------------------------------------------------------------- calibration
# (docs/calibration.md 6.3, docs/accounting.md 5.2)
def rho_for_epsilon(epsilon: float, delta: float) -> float:
    """rho* with rho + 2 sqrt(rho ln(1/delta)) = epsilon (Bun-Steinke; docs/calibration.md 6.3).

    >>> round(rho_for_epsilon(1.0, 1e-4), 6)
    0.025763
    """
    lg = math.log(1.0 / delta)
    root = math.sqrt(lg + epsilon) - math.sqrt(lg)
    return root * root


def zcdp_sigma(sensitivity: float, levels: int, rho: float) -> float:
    """Per-node std so that ``levels`` nodes of l2 sensitivity ``sensitivity`` spend ``rho``
    (docs/calibration.md 6.3).

    >>> round(zcdp_sigma(2.0, 15, rho_for_epsilon(1.0, 1e-4)), 1)  # n = 10^4: 34.1 (beta D + L)
    34.1
    """
    return sensitivity * math.sqrt(levels / (2.0 * rho))


def paper_sigma(bound: float, levels: int, epsilon: float, delta: float) -> float:
    """Theorem 3.1, eq. 3.2 for p = 2 (kappa = 1): sqrt(8 m^2 log(m/delta)) (beta D + L) / epsilon.

    >>> # docs/calibration.md 6.3 worked value: 146.5 (beta D + L)
    >>> round(paper_sigma(1.0, 15, 1.0, 1e-4), 1)
    146.5
    """
    return math.sqrt(8.0 * levels * levels * math.log(levels / delta)) * bound / epsilon


def basic_composition_epsilon(t: int, levels: int, epsilon: float) -> float:
    """The paper's path-wise accounting (docs/accounting.md 5.2):
    k(t) epsilon / m, at delta k(t) delta / m."""
    return record_levels(t) * epsilon / levels


# ----------------------------------------------------------------------- the learner
class DPTreeOnlineFrankWolfe(OnlineUnlearner):
    """DP-TOFW on the l2 ball: one (epsilon, delta) guarantee
    for every release; deletions are covered.

    >>> m = DPTreeOnlineFrankWolfe(dim=2, radius=1.0, rho=1.0, delta=1e-5, dp_horizon=1000,
    ...                            noise_rng=np.random.default_rng(0))
    >>> m.learn_one("a", [0.6, 0.8], 1), m.learn_one("b", [0.8, -0.6], -1)
    (True, True)
    >>> bool(np.linalg.norm(m.weights) <= 1.0)
    True
    >>> p = m.privacy()
    >>> p["record_levels"], p["tree_levels"], round(p["budget_used"], 4)  # k(2) / m = 2 / 11
    (2, 11, 0.1818)
    >>> before = (m.weights.tolist(), p)
    >>> m.unlearn_one("a").outcome, (m.weights.tolist(), m.privacy()) == before
    ('dp_covered', True)
    >>> twin = DPTreeOnlineFrankWolfe.from_state(m.export_state())
    >>> _ = m.learn_one("c", [0.0, 1.0], 1), twin.learn_one("c", [0.0, 1.0], 1)
    >>> twin.weights.tobytes() == m.weights.tobytes()
    True
    """

    algorithm = "dp-tofw"
    example_params = {"dp_horizon": 128}
    settings = {"dp_horizon": "dp_horizon"}
    use_kernel = False  # its own step (two gradients, a tree add, an LMO), not OGD
    #: Privacy spend grows with learning, not only with deletions (read by worker/metrics/loop.py).
    spends_on_learn = True

    def __init__(self, dim: int, *, dp_horizon: int = DEFAULT_HORIZON, calibration: str = "zcdp",
                 lr_scale: float = 1.0, **kwargs):
        if isinstance(dp_horizon, bool) or not isinstance(dp_horizon, int) or dp_horizon < 1:
            raise ConfigError(f"dp_horizon must be an integer >= 1, got {dp_horizon!r}")
        if calibration not in CALIBRATIONS:
            raise ConfigError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
        if not (isinstance(lr_scale, (int, float)) and math.isfinite(lr_scale) and lr_scale > 0):
            raise ConfigError(f"lr_scale must be a finite number > 0, got {lr_scale!r}")
        if kwargs.get("capacity") is not None:
            raise ConfigError(
                "capacity: dp-tofw has no deletion capacity (deletions spend nothing)")
        super().__init__(dim, **kwargs)
        self.config.update(dp_horizon=dp_horizon, calibration=calibration, lr_scale=float(lr_scale))
        self.horizon, self.levels = dp_horizon, tree_levels(dp_horizon)
        c, beta, L = float(lr_scale), self.constants.beta, self.constants.L
        # S >= ||g_t|| (docs/algorithms.md 11.2)
        self.bound = max(1.0, c) * beta * self.ball.diameter + L
        self.node_sensitivity = 2.0 * self.bound  # Delta: replacement neighbours
        eps, delta = self.accountant.budget, self.accountant.delta
        if calibration == "zcdp":
            self.sigma = zcdp_sigma(self.node_sensitivity, self.levels, eps)
        else:
            self.sigma = paper_sigma(self.bound, self.levels, rdp_to_dp(eps, delta, "zcdp"), delta)
        self.rho_node = 0.5 * (self.node_sensitivity / self.sigma) ** 2
        # Every epoch has the same horizon, so no record ever spends more than this.
        self.epsilon_at_horizon = rdp_to_dp(record_levels(dp_horizon) * self.rho_node, delta)
        self._key = NodeNoise.new_key(self._entropy())
        self.z_prev = np.zeros(self.param_dim)  # theta_{t-1}; theta_0 = theta_1 = 0
        self.closed_rho = 0.0  # largest spend of a closed epoch (parallel composition)
        self.tree = self._new_tree()
        # internal only: an assumption was violated (docs/accounting.md 7)
        self.counters["g_clipped"] = 0
        self._epsilon_cache: tuple[float, float] | None = None

    def _new_tree(self, t: int = 0, exact: np.ndarray | None = None) -> TreeAggregator:
        noise = NodeNoise(self._key, self.sigma, self.param_dim, stream=self.epoch)
        if exact is None:
            return TreeAggregator(self.param_dim, self.horizon, noise)
        return TreeAggregator.restore(self.param_dim, self.horizon, noise, t, exact)

    # ------------------------------------------------------------------ learning
    def _learn(self, key: int, x: np.ndarray, y: float) -> bool:
        if key in self.tombstones:
            self.counters["skipped_deleted"] += 1  # its delete came first: never learned
            return False
        if self.tree.t >= self.horizon:
            self._new_epoch()
        i = self.tree.t + 1  # the record's index in this epoch's recursion
        g = (i + 1) * self.loss.grad(self.z, x, y) - i * self.loss.grad(self.z_prev, x, y)
        norm = arith.norm(g)
        if norm > self.bound:  # never under the assumptions; keeps the sensitivity bound regardless
            g *= self.bound / norm
            self.counters["g_clipped"] += 1
        d = self.tree.add(g) / (i + 1)
        self.t += 1
        eta = min(1.0, self.config["lr_scale"] / (self.t + 1))
        self.z_prev, self.z = self.z, self.z + eta * (self._lmo(d) - self.z)
        self.index.add(key, self.t)
        self.counters["applied"] += 1
        return True

    def _lmo(self, d: np.ndarray) -> np.ndarray:
        """argmin over the l2 ball of <d, v>: -r d / ||d|| (any feasible point, 0, if d = 0)."""
        norm = arith.norm(d)
        return -self.ball.radius * d / norm if norm > 0.0 else np.zeros(self.param_dim)

    def _new_epoch(self) -> None:
        self.closed_rho = max(self.closed_rho, self._tree_rho())
        self.epoch += 1
        self.z_prev = self.z.copy()  # theta_0 = theta_1 for the new recursion
        self.tree = self._new_tree()

    # ------------------------------------------------------------------ deletion
    def _delete(self, key: int, steps: list[int]) -> Deletion:
        return Deletion("dp_covered", 0, 0.0, 0.0, tuple(steps))

    # ------------------------------------------------------------------ privacy
    def release_noise_std(self) -> None:
        """Not tracked (docs/accounting.md 10): the release carries the tree's noise, through the
        nonlinear Frank-Wolfe map, not deletion noise (a deletion adds none)."""
        return None

    def _tree_rho(self) -> float:
        return record_levels(self.tree.t) * self.rho_node

    def _epsilon(self, rho: float) -> float:
        if self._epsilon_cache is None or self._epsilon_cache[0] != rho:
            # changes at powers of two only
            self._epsilon_cache = (rho, rdp_to_dp(rho, self.accountant.delta))
        return self._epsilon_cache[1]

    def privacy(self) -> dict:
        """The usual keys, from the tree accounting, plus the
        DP-TOFW figures of docs/accounting.md 7."""
        rho = max(self.closed_rho, self._tree_rho())
        delta = self.accountant.delta
        return {
            **self.privacy_unit_facts(),
            "eps_rdp_slope": rho,
            "budget_used": rho / self.accountant.budget,
            "epsilon": self._epsilon(rho),
            "delta": delta,
            "deletions_capacity_left": None,
            "noise_sigma": self.sigma,
            "sensitivity": self.node_sensitivity,
            "epsilon_at_horizon": self.epsilon_at_horizon,
            "horizon": self.horizon,
            "horizon_remaining": self.horizon - self.tree.t,
            "tree_levels": self.levels,
            "record_levels": record_levels(self.tree.t),
            "calibration": self.config["calibration"],
        }

    # ------------------------------------------------------------------ state
    def _export_extra(self) -> dict:
        return {"noise_key": format(self._key, "032x"), "tree_t": self.tree.t,
                "closed_rho": self.closed_rho}

    def _export_arrays(self) -> dict[str, np.ndarray]:
        return {"z_prev": self.z_prev.copy(), "tree_exact": self.tree.exact_sums()}

    def _import(self, meta: dict, arrays: dict) -> None:
        extra = meta["extra"]
        key = extra["noise_key"]
        if not (isinstance(key, str) and len(key) == 32):
            raise InvalidState("dp-tofw state has no valid noise key")
        self._key = int(key, 16)
        z_prev = np.asarray(arrays["z_prev"], np.float64)
        if z_prev.shape != (self.param_dim,) or not np.all(np.isfinite(z_prev)):
            raise InvalidState(f"previous iterate has shape {z_prev.shape} or is not finite")
        closed = extra["closed_rho"]
        if not (isinstance(closed, (int, float))
                and 0.0 <= closed <= self.accountant.budget * (1 + 1e-9)):
            raise InvalidState(f"closed-epoch spend {closed!r} is outside [0, eps]")
        tree_t = extra["tree_t"]
        if tree_t != self.t - self.epoch * self.horizon:
            # every closed epoch held exactly n records
            raise InvalidState(
                f"tree step {tree_t!r} does not match t = {self.t} in epoch {self.epoch}")
        self.z_prev, self.closed_rho = z_prev.copy(), float(closed)
        self.tree = self._new_tree(tree_t, arrays["tree_exact"])
