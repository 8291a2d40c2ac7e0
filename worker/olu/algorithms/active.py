"""Active OLU: descent-to-delete steps on retained data at each deletion, then calibrated noise.

Two algorithms (docs/algorithms.md 4), both for mu-strongly convex, beta-smooth, L-Lipschitz losses
(``l2 > 0``), with gradient steps of size eta_gd = 2/(beta + mu) and contraction
gamma* = (beta - mu)/(beta + mu) (docs/algorithms.md 4.1, docs/guarantee.md 1.2; [P0]'s printed
1/(beta + mu) is not used):

- :class:`ActiveD2D` (``"active-d2d"``): [P0] Algorithm 2, two-phase descent-to-delete on the
  average loss of the retained examples (docs/algorithms.md 5).
- :class:`ActiveAnchor` (``"active-anchor"``): [P1] Algorithm 2, I_i single-example steps on one
  retained "anchor" example (docs/algorithms.md 6).

OGD itself runs as in every model (``core/learning.py``); Gamma^OGD_{u,tau} always comes from the
public schedule, ``schedule.log_contraction(u, tau)`` (docs/calibration.md 3.2), never from
[P0]'s gamma^(tau - u).

Privacy argument (docs/guarantee.md 3.4)
--------------------------------------------------------------
Compare the real run with the reference process (docs/guarantee.md 2.2: the same algorithm on the
masked stream, where every deleted example is the identity step ⊥, with noise of the same law at the
same deletion times). Each block map is a contraction of the real run; its discrepancy s from the
reference's block adds to the shift e, which contracts through later blocks: e <- gamma e + s.
A deletion's noise pays its shift a_i with sigma_i = a_i sqrt(omega i^omega / (2 (omega-1) rho))
(``_release_with_noise``), so the Renyi divergence stays below alpha rho for every alpha. Shifts
may be over-estimated (more noise), never under-estimated (invariant 7). Since every state lies in
K, any shift can also be capped at the diameter D (the Wasserstein distance of two laws on K).

Arrival-order condition (docs/algorithms.md 4.2, docs/algorithms.md 4.3)
------------------------------------------------------
Both theorems need the deleted example to have arrived after the previous deletion. In our
indexing (a deletion at tau is processed after the step that applied example tau), the example
applied at step tau[i-1] was already part of the data that deletion i-1's descent phase used, so we
require the strict form of [P1]: **u > tau[i-1] for every step u of the record**, where tau[i-1] is
the step of the last deletion of an applied record in this epoch. Then no descent phase before
tau[i] touched the record, and its only influence is the OGD path: s = Gamma^OGD_{u,tau} Delta_u.
(Several deletes at one step therefore fall back from the second one on; [P0]'s non-strict
tau[i-1] <= u would be unsound for them here.)

When the condition fails, ``order_fallback`` decides:

- ``"retrain"`` (exact): zero the record's rows, then replay projected OGD from z_init = 0 over the
  retained examples with their original step indices (⊥ steps keep their eta, docs/guarantee.md 2.2;
  :func:`~worker.olu.core.replay.replay_ogd`). Outcome ``exact``, no noise, no budget. Soundness:
  the fallback decision depends only on the public (u, tau), so the reference process makes the same
  decision at the same time and replays the same retained examples; both states are then equal
  (deterministic), and the divergence of this interval is 0. For a later deletion the PAI
  argument simply restarts from that common state: the earlier noise is not needed any more.
  Nothing in the accountant is reset (the deletion counter keeps growing: more noise, never
  less). Cost: O(t) sequential OGD steps; it needs every retained example, so
  :class:`ActiveAnchor` keeps a full store when this fallback is chosen.
- ``"restart"``: new epoch from the data-independent z_init = 0 (like ``DiscardRestart``): step
  counter, applied index, retained examples and the accountant's epoch are reset (docs/algorithms.md
  3.2; sound because the new run depends on no earlier data). Outcome ``restarted``.
- ``"passive"`` (derived, docs/calibration.md 4.4): keep the algorithm but calibrate the shift by
  tracking the record through every block since it was applied: OGD stretches contract by Gamma^OGD;
  each descent phase j (tau_j >= u) of I_j steps contracts by gamma*^{I_j} and, because the real
  run's phase may have used the record while the reference's did not, adds the discrepancy
  (2 L/mu)(1 - gamma*^{I_j}): a projected step of size eta_gd on two different averages of
  L-bounded gradients (or one such step against the identity) differs by at most 2 eta_gd L, and
  sum_{r<I} gamma*^r 2 eta_gd L = (2 L/mu)(1 - gamma*^I) since eta_gd/(1 - gamma*) = 1/mu. For
  :class:`ActiveAnchor` the discrepancy is added only for phases whose anchor was this very example
  (any other anchor is shared by both runs; see the anchor rule below). The total of a phase is
  charged to *every* record that may have caused it, so it also covers several such records
  deleted later. e is capped at D after each block. The current deletion then runs its own phases
  (identical maps in both runs now that the record is gone) and pays gamma*^{I} e. Outcome
  ``noised``, charged like any other deletion. Note that this is cheap for :class:`ActiveD2D`: its
  own phase contracts any e <= D to gamma*^{I_1 + I_2} D <= gamma*^{I_2} L/(mu tau).

Outcomes are recorded in the returned :class:`~worker.olu.core.base.Deletion` and in the ledger
entry: ``order`` = ``ordered`` / ``fallback-passive`` / ``fallback-retrain`` / ``fallback-restart``,
plus the iteration counts; entries of deletions that added no noise also carry ``outcome``
(``exact`` or ``restarted``, with sigma 0), noised ones have the base format (sigma > 0).

A deletion that would exceed the budget or the capacity raises ``BudgetExhausted`` before any
state changes: the shift depends only on public counts, so it is checked on a copy of the
accountant before the record's rows are zeroed.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.base import Deletion, OnlineUnlearner
from ..core.examples import ExampleStore
from ..core.replay import load_store, record_outcome, replay_ogd, store_arrays
from ..exceptions import ConfigError, InvalidState
from ..privacy.accountant import load_accountant
from .descent import average_loss_descent, iterations_for

ORDER_FALLBACKS = ("retrain", "restart", "passive")


class _ActiveBase:
    """Shared machinery of the active algorithms (a mixin: it registers no algorithm name)."""

    def __init__(self, dim: int, *, max_deletions: int = 1000, order_fallback: str = "retrain",
                 capacity: int | None = None, **kwargs):
        if isinstance(max_deletions, bool) or not (isinstance(max_deletions, int)
                                                   and max_deletions >= 1):
            raise ConfigError(f"max_deletions (k) must be an integer >= 1, got {max_deletions!r}")
        if order_fallback not in ORDER_FALLBACKS:
            raise ConfigError(
                f"order_fallback must be one of {ORDER_FALLBACKS}, got {order_fallback!r}")
        # k is the known upper bound of [P0] Thm 6
        # (docs/algorithms.md 4.4): it is also the capacity.
        super().__init__(dim, capacity=max_deletions if capacity is None else capacity, **kwargs)
        self.config.update(max_deletions=max_deletions, order_fallback=order_fallback)
        c = self.constants
        if not c.mu > 0:
            raise ConfigError("active algorithms need a strongly convex loss (l2 > 0)")
        self.gamma_star = (c.beta - c.mu) / (c.beta + c.mu)
        self.eta_gd = 2.0 / (c.beta + c.mu)
        self._tau_prev = 0  # step of the last deletion of an applied record in this epoch
        self._removed = 0  # example copies removed by deletions in this epoch
        self._phases: list[tuple[int, int, int]] = []  # (tau_j, I_j, anchor step or retained count)
        self.counters.update(order_fallbacks=0)

    @property
    def max_deletions(self) -> int:
        return self.config["max_deletions"]

    @property
    def order_fallback(self) -> str:
        return self.config["order_fallback"]

    def in_order(self, steps) -> bool:
        """The arrival-order condition: every step of the record is after the previous deletion."""
        return min(steps) > self._tau_prev

    # ------------------------------------------------------------ calibration
    def accumulated_shift(self, steps, tau: int) -> float:
        """Sum over the record's copies of its shift at tau,
        through OGD and earlier descent phases."""
        g, D, L, mu = self.gamma_star, self.ball.diameter, self.constants.L, self.constants.mu
        total = []
        for u in steps:
            e, cur = self.sensitivity(u), u
            for tau_j, iters, tag in self._phases:
                if tau_j < u:
                    continue
                e *= math.exp(self.schedule.log_contraction(cur, tau_j))
                cur = tau_j
                gI = g ** iters
                e = min(D,
                        gI * e + (2.0 * L / mu * (1.0 - gI) if self._phase_used(tag, u) else 0.0))
            total.append(e * math.exp(self.schedule.log_contraction(cur, tau)))
        return math.fsum(total)

    def _phase_used(self, tag: int, u: int) -> bool:
        raise NotImplementedError

    def _precheck(self, shift: float) -> None:
        """Raise BudgetExhausted now, before any state changes, if the charge would fail."""
        if shift > 0.0:
            trial = load_accountant(self.accountant.to_state())
            trial.charge(shift, trial.sigma_for_next(shift))

    # -------------------------------------------------------------- fallbacks
    def _stores(self) -> list[ExampleStore]:
        raise NotImplementedError

    def _forget_rows(self, steps) -> None:
        for store in self._stores():
            store.remove_steps(steps)

    def _fallback(self, key: int, steps: list[int]) -> Deletion:
        self.counters["order_fallbacks"] += 1
        if self.order_fallback == "restart":
            record_outcome(self, "restarted", steps, order="fallback-restart")
            self.restart()
            return Deletion("restarted", 0, 0.0, 0.0, tuple(steps))
        # "retrain": exact replay of OGD over the retained examples (see the module docstring)
        self._forget_rows(steps)
        self.z = replay_ogd(self, self.examples)
        self._tau_prev = self.t
        self._removed += len(steps)
        record_outcome(self, "exact", steps, order="fallback-retrain", retained=len(self.examples))
        return Deletion("exact", self.accountant.deletions, 0.0, 0.0, tuple(steps))

    def restart(self) -> None:
        """New epoch from z_init = 0: forget the step counter,
        applied index and retained examples."""
        self.epoch += 1
        self.t = 0
        self.index.clear()
        self.accountant.restart_epoch()
        self.z = np.zeros(self.param_dim)
        for store in self._stores():
            store.clear()
        self._tau_prev = self._removed = 0
        self._phases = []
        self.counters["restarts"] = self.counters.get("restarts", 0) + 1

    def _finish(self, steps, tau: int, iters: int, tag: int) -> None:
        self._phases.append((int(tau), int(iters), int(tag)))
        self._tau_prev = tau
        self._removed += len(steps)

    # ------------------------------------------------------------------ state
    def _export_extra(self) -> dict:
        return {"tau_prev": self._tau_prev, "removed": self._removed}

    def _export_arrays(self) -> dict[str, np.ndarray]:
        phases = np.array(self._phases, np.int64).reshape(-1, 3)
        return {"active_phases": phases}

    def _import(self, meta: dict, arrays: dict) -> None:
        extra = meta["extra"]
        self._tau_prev, self._removed = int(extra["tau_prev"]), int(extra["removed"])
        phases = np.asarray(arrays["active_phases"])
        if phases.ndim != 2 or phases.shape[1] != 3 or phases.dtype.kind not in "iu":
            raise InvalidState("active phase history must be an (m, 3) integer array")
        self._phases = [tuple(int(v) for v in row) for row in phases]
        if not 0 <= self._tau_prev <= self.t or any(p[0] > self.t for p in self._phases):
            raise InvalidState("active deletion history lies after the step counter")

    def _check_store(self, store: ExampleStore, arrays: dict, complete: bool) -> None:
        applied = self.index.live_steps()
        if complete and not np.array_equal(applied, store.steps):
            raise InvalidState("retained examples do not match the applied-record index")
        if not complete and not np.all(np.isin(store.steps, applied)):
            raise InvalidState("an anchor example is not in the applied-record index")


class ActiveD2D(_ActiveBase, OnlineUnlearner):
    """[P0] Algorithm 2 (two-phase descent-to-delete) as corrected in docs/algorithms.md 5.

    On deletion i at tau = t (arrival order holding): from the current OGD iterate, run
    I_{1,i} + I_2 projected GD steps of size 2/(beta + mu) on the **average** regularised loss of
    the retained examples, then ``_release_with_noise`` with
    the shift a_i of docs/calibration.md 4.2:

        a_i = gamma*^{I_2} 2 (m_i + 1) L / (mu tau)
              + gamma*^{I_{1,i} + I_2} sum_u Gamma^OGD_{u,tau} Delta_u
        I_{1,i} = ceil( ln(mu D tau / L) / ln(1/gamma*) ),   I_2 = ceil( 2.2 ln k / ln(1/gamma*) )

    with k = ``max_deletions`` and m_i the example copies removed so far in the epoch, this one
    included (m_i = i when each record was applied once; a record applied twice counts twice, a
    conservative reading of the ERM-stability Lemma 5).

    **Phase-1 data (decision, docs/algorithms.md 5.3).** The literal algorithm
    runs phase 1 on *all* data seen, deleted records included, which would keep deleted raw
    features in memory (docs/worker.md 4.6). We run **both phases on the retained examples
    only**; the record's rows are zeroed before the descent. The two runs' phase-1 maps are then
    identical, so the first term of s_i (the ERM gap 2(i+1)L/(mu tau) contracted by gamma*^{I_2})
    is in fact 0; we nevertheless keep the **full** a_i above (more noise, never less: invariant 7),
    so this variant is at least as private as the analysed one. Privacy does not depend on I_2
    (only the regret does): the I_2 term only shrinks a_i. Deleted records are never revisited,
    so ``ExampleStore`` has no "all seen" view.

    Cost: (I_1 + I_2) full passes over the retained examples (two matrix-vector products each
    for the logistic loss; O(d^2) per step for ridge after one O(n d^2) Gram product). Memory:
    every retained example (``self.examples``).

    >>> m = ActiveD2D(dim=2, l2=0.1, radius=5.0, max_deletions=10, rho=1.0)
    >>> _ = m.learn_many(["a", "b", "c"], [[0.6, 0.8], [0.8, -0.6], [1.0, 0.0]], [1, -1, 1])
    >>> m.iterations(3)
    (2, 9)
    >>> d = m.unlearn_one("c")
    >>> d.outcome, d.index, len(m.examples), m.ledger[-1]["order"]
    ('noised', 1, 2, 'ordered')
    >>> m.unlearn_one("a").outcome  # arrived before the previous deletion: exact retrain
    'exact'
    """

    algorithm = "active-d2d"
    calibration = "gaussian"
    keeps_examples = True
    rotates = True
    settings = {"max_deletions": "max_deletions", "order_fallback": "order_fallback"}

    def __init__(self, dim: int, *, max_deletions: int = 1000, order_fallback: str = "retrain",
                 **kwargs):
        super().__init__(dim, max_deletions=max_deletions, order_fallback=order_fallback, **kwargs)
        self.examples = ExampleStore(dim)

    def iterations(self, tau: int) -> tuple[int, int]:
        """(I_{1,i}, I_2) for a deletion processed at step tau."""
        c, g = self.constants, self.gamma_star
        i1 = iterations_for(math.log(c.mu * self.ball.diameter * tau / c.L), g)
        i2 = iterations_for(2.2 * math.log(self.max_deletions), g)
        return i1, i2

    def _stores(self) -> list[ExampleStore]:
        return [self.examples]

    def _phase_used(self, tag: int, u: int) -> bool:
        return True  # the record was among the retained examples of every phase after it arrived

    def _after_learn(self, key: int, step: int, x: np.ndarray, y: float) -> None:
        self.examples.append(key, step, x, y)

    def _after_learn_batch(self, keys, steps, X, y) -> None:
        self.examples.extend(keys, steps, X, y)

    def _delete(self, key: int, steps: list[int]) -> Deletion:
        ordered = self.in_order(steps)
        if not ordered and self.order_fallback != "passive":
            return self._fallback(key, steps)
        tau, c, g = self.t, self.constants, self.gamma_star
        i1, i2 = self.iterations(tau)
        retained = len(self.examples) - sum(self.examples.has_step(u) for u in steps)
        iters = i1 + i2 if retained > 0 else 0  # nothing to descend on: no contraction either
        term_b = g ** iters * self.accumulated_shift(steps, tau)
        if ordered:
            term_a = g ** i2 * 2.0 * (
                self._removed + len(steps) + 1) * c.L / (c.mu * tau) if iters else 0.0
        else:
            term_a = 0.0
        shift = term_a + term_b
        self._precheck(shift)
        self._forget_rows(steps)  # invariant 6: zeroed before anything else touches the data
        X, y = self.examples.padded()
        z = average_loss_descent(self, self.z, X, y, len(self.examples), iters, self.eta_gd)
        result = self._release_with_noise(
            z, shift, steps, order="ordered" if ordered else "fallback-passive",
            I1=i1 if iters else 0, I2=i2 if iters else 0, gamma_star=g, term_a=term_a,
            term_b=term_b,
            retained=retained)
        if not ordered:
            self.counters["order_fallbacks"] += 1
        self._finish(steps, tau, iters, retained)
        return result

    def _export_arrays(self) -> dict[str, np.ndarray]:
        return {**super()._export_arrays(), **store_arrays(self.examples)}

    def _import(self, meta: dict, arrays: dict) -> None:
        super()._import(meta, arrays)
        self.examples = load_store(self, arrays)
        self._check_store(self.examples, arrays, complete=True)


class ActiveAnchor(_ActiveBase, OnlineUnlearner):
    """[P1] Algorithm 2 (single-function descent-to-delete) of docs/algorithms.md 6.

    On deletion i at tau = t (arrival order holding): from the current OGD iterate, run I_i
    projected steps of size 2/(beta + mu) on one retained anchor example f_l, then add noise with

        I_i     = max(0, ceil( (omega ln i + 2 ln tau + 2 ln L) / (2 ln(1/gamma*)) ))
        a_i     = gamma*^{I_i} max(L, sum_u Gamma^OGD_{u,tau} Delta_u)
        sigma_i = sqrt(omega i^omega / (2 (omega - 1) rho)) a_i
                = sqrt(omega i^omega gamma*^{2 I_i} L^2 / (2 (omega - 1) rho))   when the max is L.

    **Shift (derived).** The proof bounds B_i <= gamma*^{I_i} max_z ||psi_i(z) - psi'_i(z)|| <=
    gamma*^{I_i} Gamma^OGD_{u,tau} eta_u L, then by gamma*^{I_i} L using eta_u <= 1 (mu u >= 1) and
    Gamma^OGD <= 1. Those two facts can fail (an early u with eta_u > 1, or expansive early steps
    of the t0 = 0 schedule), so we pay the larger of the paper's L and the exact
    Gamma^OGD Delta_u (with Delta_u = min(eta_u L, D)): equal to the paper's sigma_i whenever its
    assumptions hold, never smaller than the true bound. A_i = 0 because both runs descend on the
    same anchor.

    **Anchor rule.** Candidates are the examples applied at the public steps
    P = {1..spare_anchors} ∪ {powers of two}: O(spare_anchors + log2 t) rows are kept (the "few
    spares" of docs/algorithms.md 6.2, with a reserve that never runs out while anything is
    retained). The anchor is the retained candidate with the smallest step. It therefore arrived
    before the previous deletion whenever any candidate did ([P1]: l <= tau[i-1]); at the first
    deletion (tau[0] = 0) it is the first retained example, as in the algorithm box. Because P is a
    public set of steps, the reference process (which sees ⊥ at the deleted steps) picks the same
    anchor unless the real anchor is itself deleted later; such a deletion is always out of
    arrival order (l <= tau) and goes to the fallback, whose "passive" calibration charges the
    descent phases that used it. If an anchor is deleted, the next candidate is used. With no
    retained candidate the deletion runs no descent (I = 0) and pays the uncontracted shift.

    Regret needs the strong growth condition (Assumption 4.1); privacy does not. Cost: I_i
    single-example steps, O(d log tau). Memory: the candidates only, unless
    ``order_fallback="retrain"``, which needs every retained example (``self.examples``).

    >>> m = ActiveAnchor(dim=2, l2=0.1, radius=5.0, order_fallback="passive")
    >>> _ = m.learn_many(["a", "b", "c"], [[0.6, 0.8], [0.8, -0.6], [1.0, 0.0]], [1, -1, 1])
    >>> d = m.unlearn_one("c")
    >>> d.outcome, m.ledger[-1]["anchor"], m.ledger[-1]["order"]
    ('noised', 1, 'ordered')
    >>> d = m.unlearn_one("a")  # the anchor itself, applied before the previous deletion
    >>> d.outcome, m.ledger[-1]["anchor"], m.ledger[-1]["order"]
    ('noised', 2, 'fallback-passive')
    """

    algorithm = "active-anchor"
    calibration = "gaussian"
    keeps_examples = True
    rotates = True
    settings = {"max_deletions": "max_deletions", "order_fallback": "order_fallback"}

    def __init__(self, dim: int, *, max_deletions: int = 1000, order_fallback: str = "retrain",
                 spare_anchors: int = 4, **kwargs):
        if isinstance(spare_anchors, bool) or not (isinstance(spare_anchors, int)
                                                   and spare_anchors >= 1):
            raise ConfigError(f"spare_anchors must be an integer >= 1, got {spare_anchors!r}")
        super().__init__(dim, max_deletions=max_deletions, order_fallback=order_fallback, **kwargs)
        self.config.update(spare_anchors=spare_anchors)
        self.anchors = ExampleStore(dim)
        self.examples = ExampleStore(dim) if order_fallback == "retrain" else None

    def is_candidate(self, step):
        """Whether step(s) belong to the public candidate set P (vectorised)."""
        s = np.asarray(step, np.int64)
        return (s <= self.config["spare_anchors"]) | ((s & (s - 1)) == 0)

    def iterations(self, i: int, tau: int) -> int:
        """I_i for deletion number i at step tau."""
        c, omega = self.constants, self.accountant.omega
        return iterations_for(
            (omega * math.log(i) + 2.0 * math.log(tau) + 2.0 * math.log(c.L)) / 2.0,
            self.gamma_star)

    def anchor_step(self) -> int:
        """Step of the current anchor (0: no retained candidate)."""
        return self.anchors.first_live_step()

    def _stores(self) -> list[ExampleStore]:
        return [s for s in (self.anchors, self.examples) if s is not None]

    def _phase_used(self, tag: int, u: int) -> bool:
        return tag == u  # only a phase that descended on this very example depended on it

    def _after_learn(self, key: int, step: int, x: np.ndarray, y: float) -> None:
        if self.is_candidate(step):
            self.anchors.append(key, step, x, y)
        if self.examples is not None:
            self.examples.append(key, step, x, y)

    def _after_learn_batch(self, keys, steps, X, y) -> None:
        pick = np.flatnonzero(self.is_candidate(steps))
        if len(pick):
            self.anchors.extend(np.asarray(keys)[pick], np.asarray(steps)[pick],
                                np.asarray(X)[pick],
                                np.asarray(y)[pick])
        if self.examples is not None:
            self.examples.extend(keys, steps, X, y)

    def _delete(self, key: int, steps: list[int]) -> Deletion:
        ordered = self.in_order(steps)
        if not ordered and self.order_fallback != "passive":
            return self._fallback(key, steps)
        tau, g = self.t, self.gamma_star
        i = self.accountant.deletions + 1
        iters = self.iterations(i, tau)
        # the anchor after this record's rows are gone (public: candidate steps minus deleted ones)
        live = [int(s) for s in self.anchors.steps if int(s) not in set(steps)]
        anchor = live[0] if live else 0
        used = iters if anchor else 0
        e = self.accumulated_shift(steps, tau)
        shift = g ** used * (max(self.constants.L, e) if ordered else e)
        self._precheck(shift)
        self._forget_rows(steps)  # invariant 6
        z = self.z
        if used:
            x, yv = self.anchors.row_of_step(anchor)
            loss, ball, step = self.loss, self.ball, self.eta_gd
            for _ in range(used):
                z = ball.project(z - step * loss.grad(z, x, yv))
            del x
        result = self._release_with_noise(
            z, shift, steps, order="ordered" if ordered else "fallback-passive",
            I=used, gamma_star=g, anchor=anchor, accumulated=e)
        if not ordered:
            self.counters["order_fallbacks"] += 1
        self._finish(steps, tau, used, anchor)
        return result

    def _export_arrays(self) -> dict[str, np.ndarray]:
        out = {**super()._export_arrays(), **store_arrays(self.anchors, "anchors_")}
        if self.examples is not None:
            out.update(store_arrays(self.examples))
        return out

    def _import(self, meta: dict, arrays: dict) -> None:
        super()._import(meta, arrays)
        self.anchors = load_store(self, arrays, "anchors_")
        self._check_store(self.anchors, arrays, complete=False)
        if not np.all(self.is_candidate(self.anchors.steps)):
            raise InvalidState("an anchor example is not at a candidate step")
        if self.examples is not None:
            self.examples = load_store(self, arrays)
            self._check_store(self.examples, arrays, complete=True)
