"""Memory-Pair: online L-BFGS learner-unlearner with a zCDP deletion odometer ([MemoryPair]).

Implements "Mo Memory, Mo Problems" (docs/algorithms.md 9)
with the corrections of docs/algorithms.md 9:

- **Loss** (docs/algorithms.md 9.1): the model's loss *with* its ridge term (l2 = lambda > 0 is
  required), so every per-sample loss is lambda-strongly convex and every curvature pair has
  ``y.s >= lambda ||s||^2`` (the positive-curvature lemma holds; the unregularised squared
  loss violates it).
- **Insert** ([MemoryPair] Algorithm 1, docs/algorithms.md 9.1): ``g_old = grad(theta; x, y)``,
  ``d = direction(g_old)``, ``theta <- Proj_K(theta + alpha_t d)`` (the projection the analysis
  assumes and the pseudocode omits, docs/algorithms.md 9.1), ``g_new = grad(theta_new; x, y)`` on
  the same sample, and the pair ``(s, g_new - g_old)`` joins the memory tagged with the record that
  made it (``pair_src``, docs/algorithms.md 9.1).
  Step size (derived): ``alpha_t = min(1, d/(t + t0))`` with the strongly convex schedule's t0,
  or the constant ``alpha`` of Algorithm 1 with ``schedule="constant"``. An online Newton step
  tracking the running ERM is ``(1/t) Hbar^{-1} g`` with Hbar the *average* Hessian, but the
  memory holds *per-sample* curvature (docs/algorithms.md 9.1): along a sample x it is ~||x||^2,
  about d times the average curvature ||x||^2/d of features spread over d directions, so ``1/t``
  alone under-steps by ~d (measured: 0.63 vs OGD's 0.90 accuracy at d = 50). The factor d restores
  OGD-level accuracy on the test streams; the cap 1 is Algorithm 1's full quasi-Newton step.
- **Direction** (two-loop recursion, docs/algorithms.md 9.2): initial scaling ``gamma_0 = s.y /
  y.y`` of the newest pair (``1/lambda`` with no pair), capped at ``1/lambda``, and the result
  clipped to ``||d|| <= ||g|| / lambda``, which enforces ``||B^{-1}|| <= 1/lambda`` on every
  direction used (docs/algorithms.md 9.2; [MemoryPair] Lemma 5.3 then gives ``||d|| <= L/lambda``).
- **Delete** ([MemoryPair] Algorithm 2, docs/algorithms.md 9.3): check the odometer; fetch the
  record's ``(x, y)`` from the retained examples; **purge every curvature pair the record made,
  before computing the direction** (docs/algorithms.md 9.3: a pair of the squared loss holds a
  scaled copy of ``x``); ``g`` at the current theta, ``d = direction(g)``, ``theta <- Proj_K(theta -
  c d)`` with ``c = 1`` (the paper's full step, ``removal="unit"``) or ``c = 1/n_live`` (Newton
  removal for the retained average, docs/algorithms.md 9.3, ``removal="inverse-n"``, the default);
  then Gaussian noise with a
  **fixed, data-independent** sensitivity (docs/calibration.md 6.1) and project again
  (post-processing). Algorithm 2 refuses a deletion when the memory is empty; we do not: with no
  pair the direction is ``g/lambda``, which the sensitivity below already covers.
- **Sensitivity**: ``Delta = min(copies L/lambda, D)``: Lemma 5.3's worst-case direction bound per
  applied copy of the record, capped at the diameter D of K because the pre-noise iterate lies in
  K (any two points of K are at most D apart). Never the realised ``||d||`` or ``||g||`` of
  Algorithm 2 / Theorem 5.4, whose size would itself leak the record (docs/calibration.md 6.1).
- **Odometer** (docs/accounting.md 3, :mod:`worker.olu.privacy.odometer`): ``rho_total`` = ``rho``
  (the engine's lifetime Rényi slope is exactly a zCDP rho), capacity ``m`` = ``max_deletions``,
  ``rho_step = rho_total/m``, ``sigma = Delta / sqrt(2 rho_step)``. The model's accountant
  records each charge (``Delta^2/(2 sigma^2) = rho_step``), so releases and metrics show the
  spend and ``deletions_capacity_left = m - k``.
- **Budget exhausted** (``on_budget``, docs/algorithms.md 9.4): ``"retrain"`` forgets the
  record, then rebuilds the model from theta = 0 with an empty curvature memory by replaying
  Algorithm 1 over the retained examples (in order, each at its original step, so alpha is
  unchanged) and opens a new odometer epoch (outcome ``retrained``, no noise: the new model
  depends on no deleted record). ``"refuse"`` raises
  :class:`~worker.olu.exceptions.BudgetExhausted` before any state changes.

Certification caveat (docs/algorithms.md 9.5): the paper never bounds the distance between the
unlearned model and the ideal replay, so the (epsilon, delta) numbers certify the noise mechanism on
a worst-case direction, not indistinguishability from a retrain; treat them as a heuristic privacy
layer (the worker's exact algorithms are ``retrain`` and ``active-newton``).

What holds a deleted record after its deletion (docs/algorithms.md 9.5): nothing in memory. Its
retained row is zeroed (:class:`~worker.olu.core.examples.ExampleStore`) and its curvature pairs are
purged and the vacated rows zeroed at once; stored snapshots holding either are purged by the worker
within the purge bound (``keeps_examples``). The iterate and the *other* pairs were computed at
iterates the record influenced; that influence is what the noise (or a retrain) covers.

Not implemented: the sample-complexity prediction gate and the regret-side capacity of
docs/algorithms.md 9.5; capacity here is the privacy side ``m - k`` only.
"""

from __future__ import annotations

import math

import numpy as np

from ..arith import dot, norm, sqnorm
from ..core.base import Deletion, OnlineUnlearner
from ..core.examples import ExampleStore
from ..core.replay import load_store, record_outcome, store_arrays
from ..core.schedules import Constant, StronglyConvex
from ..exceptions import BudgetExhausted, ConfigError, InvalidState
from ..privacy.odometer import DeletionOdometer, zcdp_to_dp

ON_BUDGET = ("retrain", "refuse")
REMOVALS = ("inverse-n", "unit")
# accept a pair when y.s >= 0.5 lambda ||s||^2 (exact arithmetic gives lambda)
_CURVATURE_MARGIN = 0.5


class CurvaturePairs:
    """The newest ``memory`` L-BFGS pairs (s_i, y_i), oldest first, each tagged with its record.

    ``keys``/``steps`` are the ``pair_src`` of docs/algorithms.md 9.1: the record key and the step
    at which the record was applied. Rows that leave the memory (aged out, purged, cleared) are
    zeroed, so no copy of a deleted record's pair lingers in the buffers.

    >>> p = CurvaturePairs(dim=2, memory=2, lam=0.1)
    >>> (p.add(7, 1, np.array([1.0, 0.0]), np.array([2.0, 0.0])),
    ...  p.add(8, 2, np.array([1.0, 0.0]), np.array([0.0, 0.0])))
    (True, False)
    >>> p.direction(np.array([4.0, 0.0])).tolist()  # the exact inverse along the pair: -g / 2
    [-2.0, -0.0]
    >>> p.purge(7), len(p), p.S.tolist()
    (1, 0, [[0.0, 0.0], [0.0, 0.0]])
    """

    def __init__(self, dim: int, memory: int, lam: float):
        self.dim, self.memory, self.lam = dim, memory, lam
        self.S = np.zeros((memory, dim))
        self.Y = np.zeros((memory, dim))
        self.keys = np.zeros(memory, np.uint64)
        self.steps = np.zeros(memory, np.int64)
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def accepts(self, s: np.ndarray, y: np.ndarray) -> bool:
        """Skip rule: a finite pair with curvature y.s >=
        lambda/2 ||s||^2 (ridge guarantees lambda)."""
        ss, sy = sqnorm(s), dot(s, y)
        finite = math.isfinite(sy) and bool(np.all(np.isfinite(y)))
        return ss > 0.0 and finite and sy >= _CURVATURE_MARGIN * self.lam * ss

    def add(self, key: int, step: int, s: np.ndarray, y: np.ndarray) -> bool:
        """Append a pair (dropping the oldest when full); False if the skip rule rejects it."""
        if not self.accepts(s, y):
            return False
        if self.n == self.memory:  # numpy copies overlapping slices safely
            for arr in (self.S, self.Y, self.keys, self.steps):
                arr[:-1] = arr[1:]
            self.n -= 1
        self.S[self.n], self.Y[self.n], self.keys[self.n], self.steps[self.n] = s, y, key, step
        self.n += 1
        return True

    def purge(self, key: int) -> int:
        """Drop (and zero) every pair made by record ``key``; returns how many."""
        n = self.n
        hit = self.keys[:n] == np.uint64(key)
        gone = int(hit.sum())
        if gone:
            keep = np.flatnonzero(~hit)
            m = len(keep)
            for arr in (self.S, self.Y, self.keys, self.steps):
                arr[:m] = arr[keep]
                arr[m:n] = 0
            self.n = m
        return gone

    def clear(self) -> None:
        for arr in (self.S, self.Y, self.keys, self.steps):
            arr.fill(0)
        self.n = 0

    def direction(self, g: np.ndarray) -> np.ndarray:
        """``d = -H g`` by the two-loop recursion, with ``||d|| <= ||g|| / lambda`` enforced
        (docs/algorithms.md 9.2)."""
        n, S, Y = self.n, self.S, self.Y
        inv_lam = 1.0 / self.lam
        q = np.array(g, np.float64)
        rho = np.empty(n)
        a = np.empty(n)
        for i in range(n - 1, -1, -1):
            rho[i] = 1.0 / dot(Y[i], S[i])
            a[i] = rho[i] * dot(S[i], q)
            q -= a[i] * Y[i]
        gamma0 = min(dot(S[n - 1], Y[n - 1]) / sqnorm(Y[n - 1]), inv_lam) if n else inv_lam
        r = gamma0 * q
        for i in range(n):
            b = rho[i] * dot(Y[i], r)
            r += (a[i] - b) * S[i]
        d = -r
        cap, size = norm(g) * inv_lam, norm(d)
        if size > cap:
            d *= cap / size
        return d

    # ------------------------------------------------------------------ state
    def to_arrays(self, prefix: str = "pairs_") -> dict[str, np.ndarray]:
        n = self.n
        return {prefix + "S": self.S[:n].copy(), prefix + "Y": self.Y[:n].copy(),
                prefix + "keys": self.keys[:n].copy(), prefix + "steps": self.steps[:n].copy()}

    def load_arrays(self, arrays: dict, prefix: str = "pairs_") -> None:
        S, Y = np.asarray(arrays[prefix + "S"]), np.asarray(arrays[prefix + "Y"])
        keys, steps = np.asarray(arrays[prefix + "keys"]), np.asarray(arrays[prefix + "steps"])
        n = len(keys)
        if S.dtype != np.float64 or Y.dtype != np.float64 or S.shape != (
                n, self.dim) or Y.shape != (n, self.dim) \
                or keys.dtype != np.uint64 or steps.shape != (n,) or steps.dtype.kind not in "iu":
            raise InvalidState(
                f"curvature pairs must be ({n}, {self.dim}) float64 with {n} uint64 keys and steps")
        if n > self.memory:
            raise InvalidState(f"{n} curvature pairs exceed the memory of {self.memory}")
        if not (np.all(np.isfinite(S)) and np.all(np.isfinite(Y))):
            raise InvalidState("curvature pairs are not finite")
        if not all(self.accepts(S[i], Y[i]) for i in range(n)):
            raise InvalidState("a stored curvature pair violates the curvature condition")
        self.clear()
        self.S[:n], self.Y[:n], self.keys[:n], self.steps[:n] = S, Y, keys, steps.astype(np.int64)
        self.n = n


class MemoryPair(OnlineUnlearner):
    """Online L-BFGS with symmetric quasi-Newton unlearning and a zCDP odometer (module docstring).

    ``max_deletions`` is the capacity m of one odometer epoch (docs/accounting.md 3.2; default 20,
    the author's), ``rho`` its zCDP budget rho_total, ``lbfgs_memory`` the number tau of curvature
    pairs kept (default 10), ``on_budget`` what a deletion past the capacity does
    (``retrain``/``refuse``), ``removal`` the deletion step scale (``inverse-n``/``unit``).

    >>> m = MemoryPair(dim=2, l2=0.1, radius=5.0, rho=1.0, max_deletions=2)
    >>> m.learn_many(["a", "b", "c", "d"], [[0.6, 0.8], [0.8, -0.6], [1.0, 0.0], [0.0, 1.0]],
    ...              [1, -1, 1, -1])
    4
    >>> len(m.pairs), len(m.examples)  # one curvature pair and one retained row per insert
    (4, 4)
    >>> d = m.unlearn_one("c")
    >>> # c's pair purged; Delta / sqrt(2 rho_step) = 10 / 1
    >>> d.outcome, d.index, len(m.pairs), round(d.sigma, 6)
    ('noised', 1, 3, 10.0)
    >>> (m.privacy()["deletions_capacity_left"], m.unlearn_one("a").outcome,
    ...  m.privacy()["deletions_capacity_left"])
    (1, 'noised', 0)
    >>> r = m.unlearn_one("b")  # over the capacity: retrain on the retained example d, new epoch
    >>> r.outcome, r.changed_model, m.epoch, m.privacy()["deletions_capacity_left"], len(m.examples)
    ('retrained', True, 1, 2, 1)
    """

    algorithm = "memory-pair"
    calibration = "gaussian"
    keeps_examples = True
    settings = {"max_deletions": "max_deletions", "on_budget": "on_budget",
                "lbfgs_memory": "lbfgs_memory"}

    def __init__(self, dim: int, *, max_deletions: int = 20, on_budget: str = "retrain",
                 lbfgs_memory: int = 10,
                 removal: str = "inverse-n", capacity: int | None = None, **kwargs):
        if (isinstance(max_deletions, bool)
                or not (isinstance(max_deletions, int) and max_deletions >= 1)):
            raise ConfigError(
                "max_deletions (the odometer capacity m) must be an integer >= 1, got "
                f"{max_deletions!r}")
        if capacity is not None and capacity != max_deletions:
            raise ConfigError(
                f"capacity ({capacity!r}) must equal max_deletions ({max_deletions!r})")
        if on_budget not in ON_BUDGET:
            raise ConfigError(f"on_budget must be one of {ON_BUDGET}, got {on_budget!r}")
        if removal not in REMOVALS:
            raise ConfigError(f"removal must be one of {REMOVALS}, got {removal!r}")
        if (isinstance(lbfgs_memory, bool)
                or not (isinstance(lbfgs_memory, int) and lbfgs_memory >= 1)):
            raise ConfigError(f"lbfgs_memory (tau) must be an integer >= 1, got {lbfgs_memory!r}")
        super().__init__(dim, capacity=max_deletions, **kwargs)
        self.config.update(max_deletions=max_deletions, on_budget=on_budget,
                           lbfgs_memory=lbfgs_memory,
                           removal=removal)
        lam = self.loss.lam
        if not lam > 0:
            raise ConfigError(
                "memory-pair needs a ridge term: l2 (lambda) must be > 0 (docs/algorithms.md 9.1)")
        if not isinstance(self.schedule, (StronglyConvex, Constant)):
            raise ConfigError(f"memory-pair supports schedule auto, strongly-convex or constant, "
                              f"not {self.schedule.name!r}")
        self.odometer = DeletionOdometer(self.accountant.budget, max_deletions,
                                         self.accountant.delta)
        self.pairs = CurvaturePairs(self.param_dim, lbfgs_memory, lam)
        self.examples = ExampleStore(dim)
        self.grad_sq_sum = 0.0  # S_N = sum ||g_t||^2 of the epoch (docs/algorithms.md 9.1)
        self.counters.update(retrains=0, pairs_skipped=0)

    # ------------------------------------------------------------- constants
    @property
    def on_budget(self) -> str:
        return self.config["on_budget"]

    def step_size(self, t: int) -> float:
        """alpha_t: ``min(1, d/(t + t0))`` for the strongly convex
        schedule, the constant alpha otherwise."""
        if isinstance(self.schedule, Constant):
            return self.schedule.step
        return min(1.0, self.param_dim / (t + self.schedule.t0))

    def sensitivity_bound(self, copies: int = 1) -> float:
        """Fixed sensitivity of one deletion: ``min(copies L / lambda, D)`` (docs/calibration.md
        6.1, [MemoryPair] Lemma 5.3)."""
        return min(copies * self.constants.L / self.loss.lam, self.ball.diameter)

    # ------------------------------------------------------------- learning
    def _insert_step(self, key: int, step: int, x: np.ndarray, y: float) -> None:
        """[MemoryPair] Algorithm 1 with projection (docs/algorithms.md 9.1)."""
        loss, z = self.loss, self.z
        g_old = loss.grad(z, x, y)
        z_new = self.ball.project(z + self.step_size(step) * self.pairs.direction(g_old))
        if not self.pairs.add(key, step, z_new - z, loss.grad(z_new, x, y) - g_old):
            self.counters["pairs_skipped"] += 1
        self.z = z_new
        self.grad_sq_sum += sqnorm(g_old)

    def _learn(self, key: int, x: np.ndarray, y: float) -> bool:
        if key in self.tombstones:
            # an insert after its delete (docs/guarantee.md 1.3)
            self.counters["skipped_deleted"] += 1
            return False
        self.t += 1
        self._insert_step(key, self.t, x, y)
        self.index.add(key, self.t)
        self.counters["applied"] += 1
        self.examples.append(key, self.t, x, y)
        return True

    # ------------------------------------------------------------- unlearning
    def _delete(self, key: int, steps: list[int]) -> Deletion:
        if not self.odometer.allows(self.accountant.deletions):  # docs/algorithms.md 9.3, step 1
            if self.on_budget == "refuse":
                raise BudgetExhausted(
                    f"memory-pair: the deletion capacity {self.odometer.capacity} of epoch "
                    f"{self.epoch} is used up (rho {self.accountant.spent:.6g} of "
                    f"{self.odometer.rho_total:.6g}); on_budget=refuse")
            return self._retrain(steps)
        rows = [self.examples.row_of_step(u) for u in steps if self.examples.has_step(u)]
        if len(rows) != len(steps):
            raise InvalidState("an applied record is missing from the retained examples")
        shift = self.sensitivity_bound(len(steps))
        sigma = self.odometer.sigma_step(shift)
        self.accountant.charge(shift, sigma)  # rho_step; cannot fail after the odometer check
        # docs/algorithms.md 9.3 step 2: before the direction is computed
        purged = self.pairs.purge(key)
        g = sum(self.loss.grad(self.z, x, y) for x, y in rows)
        d = self.pairs.direction(g)
        self.examples.remove_steps(steps)  # docs/worker.md 4.6: the raw rows are zeroed now
        live = len(self.examples)
        scale = 1.0 / max(1, live) if self.config["removal"] == "inverse-n" else 1.0
        z_hat = self.ball.project(self.z - scale * d)
        for x, _ in rows:
            x.fill(0.0)
        self.z = self.ball.project(z_hat + self._noise(sigma))
        i = self.accountant.deletions
        self.ledger.append({
            "i": i, "epoch": self.epoch, "tau": self.t, "u": [int(s) for s in steps],
            "shift": shift,
            "sigma": sigma, "rho": self.accountant.spent, "pairs_purged": purged, "retained": live,
            "removal_scale": scale,
        })
        return Deletion("noised", i, sigma, shift, tuple(steps))

    def _retrain(self, steps: list[int]) -> Deletion:
        """Forget the record, then rebuild from theta = 0 on the
        retained examples; new odometer epoch."""
        self.examples.remove_steps(steps)
        self.accountant.restart_epoch()
        self.epoch += 1
        self.pairs.clear()
        self.z = np.zeros(self.param_dim)  # K d for a softmax model
        self.grad_sq_sum = 0.0
        keys = self.examples.keys.copy()
        X, y, at = self.examples.live_rows()
        for j in range(len(at)):
            self._insert_step(int(keys[j]), int(at[j]), X[j], float(y[j]))
        self.counters["retrains"] += 1
        record_outcome(self, "retrained", steps, retained=len(at), on_budget="retrain")
        return Deletion("retrained", 0, 0.0, 0.0, tuple(steps))

    # ------------------------------------------------------------- privacy
    def release_noise_std(self) -> None:
        """Not tracked (docs/accounting.md 10): the quasi-Newton steps after a deletion's noise are
        not the schedule's contractions, so the ledger bounds no noise left in the release."""
        return None

    def privacy(self) -> dict:
        out = super().privacy()
        k, odo = self.accountant.deletions, self.odometer
        out.update(
            deletions_capacity_left=odo.capacity_left(k),
            rho_total=odo.rho_total,
            rho_step=odo.rho_step,
            sigma_step=odo.sigma_step(self.sensitivity_bound()),
            # docs/accounting.md 3.4
            epsilon_zcdp=zcdp_to_dp(self.accountant.spent, self.accountant.delta),
            epsilon_remaining=odo.epsilon_remaining(k),
            retrains=self.counters["retrains"],
        )
        return out

    # ------------------------------------------------------------- state
    def _export_extra(self) -> dict:
        return {"grad_sq_sum": self.grad_sq_sum}

    def _export_arrays(self) -> dict[str, np.ndarray]:
        return {**store_arrays(self.examples), **self.pairs.to_arrays()}

    def _import(self, meta: dict, arrays: dict) -> None:
        self.examples = load_store(self, arrays)
        applied = self.index.live_steps()
        if not np.array_equal(applied, self.examples.steps):
            raise InvalidState("retained examples do not match the applied-record index")
        self.pairs.load_arrays(arrays)
        if not np.all(np.isin(self.pairs.steps[:len(self.pairs)], applied)):
            raise InvalidState("a curvature pair belongs to no retained record")
        self.grad_sq_sum = float(meta["extra"]["grad_sq_sum"])
        if not (math.isfinite(self.grad_sq_sum) and self.grad_sq_sum >= 0):
            raise InvalidState("S_N (sum of squared gradients) must be finite and >= 0")
        if self.accountant.capacity != self.odometer.capacity:
            raise InvalidState("the accountant's capacity differs from the odometer's")
