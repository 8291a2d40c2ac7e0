"""Rewind-to-Delete (R2D, [R2D]) on a periodically retrained OGD model (docs/algorithms.md 10).

:class:`RewindToDelete` (``"rewind"``) serves the OGD iterate of the stream, and every
``retrain_every`` steps it retrains the partition model from scratch with T full-batch projected
gradient-descent steps on the retained examples (R2D Algorithm 1). A deletion of a record that this
retraining used rewinds to the saved checkpoint theta_{T-K}, runs K steps on the retained data
without it and adds Gaussian noise calibrated by
docs/calibration.md 6.2 (Algorithm 2). Notation: see
:mod:`worker.olu.privacy.analysis.rewind` (R2D's L is our ``beta``, its G our ``L``;
docs/calibration.md 6.2).

Generations and segments
------------------------
The retained examples (``self.examples``, with their public OGD steps u) are split by two public
steps, ``t_fit <= t_base <= t``:

- **fitted rows**, u <= t_fit: the training set D (n rows) of the last retraining ("generation");
  their influence on the model is the GD trajectory, whose checkpoint theta_{T-K} is kept
  (docs/algorithms.md 10.4);
- **baked rows**, t_fit < u <= t_base: online rows folded into ``base`` by an earlier rewind;
- **segment rows**, u > t_base: online rows applied by OGD from ``base``, the post-noise model at
  the start of the current online segment (theta_T after a retraining).

A deletion takes exactly one of three routes, chosen from public quantities only (the record's
steps u, the deletion step tau, the counts m_cum and capacity), so the reference process of
docs/guarantee.md 2.2 (the same algorithm on the masked stream, deleted examples as identity steps
at the same indices, same deletion times) takes the same route at the same time:

1. ``rewind`` (the record is fitted, m_cum + its copies <= capacity): R2D Algorithm 2. Rewind to
   theta_{T-K} of the *original* trajectory on D (docs/algorithms.md 10.2: every deletion of the
   generation restarts from that same checkpoint and runs K fresh steps on the cumulative retained
   set D \\ Z_cum), add N(0, sigma^2 I), project onto K (post-processing), then replay OGD over the
   retained online rows (u > t_fit) at their own steps. The replay is one deterministic map applied
   to both the real and the reference output, so it keeps docs/calibration.md 6.2's guarantee;
   ``base`` becomes the result and ``t_base = tau``. Outcome ``noised``, with shift Delta(K, m_cum)
   (docs/calibration.md 6.2).
2. ``replay`` (every copy is a segment row, u > t_base): exact unlearning by rewinding to ``base``
   and replaying OGD over the retained segment rows (docs/algorithms.md 10.2: a checkpoint taken
   before t_u plus a replay of the retained stream is exact). ``base`` does not depend on the
   record, so the result equals the reference's bit for bit given the same ``base``. Outcome
   ``exact``, no noise, no budget. This is the guarantee of every record learned online since the
   last retraining or rewind: it is never noised, it is replayed away.
3. ``refit`` (a baked row, or the generation's capacity would be exceeded): an immediate
   retraining on the retained examples without the record (docs/algorithms.md 10.2, done at once).
   The new generation depends on no deleted record; m_cum restarts at 0. Outcome ``exact`` for a
   baked row; ``retrained`` when the capacity ran out (as memory-pair's exhausted budget: the
   worker adds the release header ``olu.budget: retrained`` and logs it), which also advances
   ``epoch``.

Noise placement (decision; docs/algorithms.md 10.3, docs/worker.md 4.2, docs/worker.md 4.3)
--------------------------------------------------------------------------------
R2D's Definition 2.2 compares the unlearned output with a fresh *noisy* run A(D \\ Z), so the paper
also noises the model published before any deletion. Drawing that noise at a retraining (an
insert) would break invariant 3 (replaying the same events gives bit-identical states and
releases) and is not covered by invariant 2's durable deltas: a crash between a retraining and the
next snapshot would redraw it. By default (``noise_at_fit=False``) we therefore publish theta_T
noiselessly and draw the noise at the deletion, the only event whose post-noise state the worker
makes durable. The certificate is the docs/guarantee.md 2.2 one used by every algorithm of this
engine: the reference process deletes at the same public times with the same algorithm, so at a
rewind it outputs its own theta'_T + xi (K steps from its own checkpoint on D \\ Z reproduce its
trajectory exactly), and Lemmas B.2 + B.3 give ||theta'_T - theta''_K|| <= Delta(K, m_cum), the same
bound with the same sigma as Theorem 3.1 (docs/calibration.md 6.2). ``noise_at_fit=True`` gives the
paper's literal Algorithm 1 (theta_T + xi published at every retraining, including the refit route)
for library use; it is not deterministic across a crash-replay at retraining points, so the worker
keeps the default.

Calibration (docs/calibration.md 6.2)
----------------------------------
``noise_sigma`` is fixed in advance (docs/calibration.md 6.2: sigma is fixed at training time and
reused at unlearning). At each retraining, with n the retained count and m = min(``max_deletions``,
n - 1) the group size the noise must cover, the rewind depth is K = the smallest integer with
Delta(K, m) <= r*(eps, delta) sigma (:func:`~worker.olu.privacy.analysis.rewind.rewind_depth`;
classic Gaussian mechanism for eps <= 1, Balle-Wang above). ``eps`` and ``delta`` are the (epsilon,
delta) of Definition 2.2, not a Renyi slope. The generation's deletion capacity is that m
(docs/calibration.md 6.2: the noise covers the maximum anticipated group; one more fitted deletion
takes the refit route). It is a public constant, not docs/calibration.md 6.2's "largest m with
epsilon(m) <= eps" (``fit["a3_capacity"]``, never smaller): that one depends on n, which differs in
the reference process, and routing on it would let the two processes take different routes. The
reported epsilon is epsilon(m_cum) recomputed from docs/calibration.md 6.2 (docs/accounting.md 4:
not additive over deletions, and each released output is certified on its own, docs/accounting.md
4); it never exceeds ``eps`` since m_cum <= m. sigma = 0 gives K = T: every rewind is a noiseless
retraining from theta_0.

Step size: full-batch projected GD with constant eta <= 1/(2 beta), which satisfies [R2D]'s
(docs/algorithms.md 10.4) eta <= min{1/L, n/(2(n-m)L)} for every m < n [derived]. Projection onto
the ball is non-expansive, so Lemmas B.2 and B.3 hold for projected GD unchanged [derived]. The
default eta = min(1/(2 beta), 2/(beta T)) keeps (1 + eta beta)^T <= e^2: h(K) grows like (1 + eta
beta)^T, and a larger eta T makes every useful K close to T (docs/calibration.md 6.2). For our
convex losses the nonconvex bound is conservative (docs/algorithms.md 10.4: GD is non-expansive
there), but it is the certified one (docs/calibration.md 6.2).

What is kept, and what a deletion purges (docs/algorithms.md 10.4)
------------------------------------------------------------
Kept until the next retraining: the checkpoint theta_{T-K} (one d-vector, trained on D including
records deleted since: it is never released), ``base`` (post-noise), the generation's n, K, T, eta,
capacity and m_cum. Purged at once on delete (invariant 6): the record's raw rows in
``self.examples``. Algorithm 3 (recovering theta_{T-K} post hoc) is not used: it needs the noiseless
theta_T and the full D *including* deleted records, i.e. keeping deleted raw features.
No artifact holds a rewind's pre-noise iterate (it lives only in the deletion's frame, invariant 1),
but until the next retraining (at most ``retrain_every`` steps later) a reader of a snapshot could
recompute it from the checkpoint and the retained rows: the certificate covers the released models,
and the state store stays as sensitive as the retained data it holds (docs/algorithms.md 9.5).

Cost: a retraining is T passes over the n retained rows; a rewind K passes over the fitted rows
plus a replay of the online rows; a replay only the segment rows. ``rewind_fraction`` (K/T) in
:meth:`privacy` is the compute share of a rewind (docs/accounting.md 4).

>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(201, 2)); X /= np.linalg.norm(X, axis=1, keepdims=True)
>>> m = RewindToDelete(dim=2, l2=0.1, radius=5.0, retrain_every=200, train_steps=20,
...                    noise_sigma=0.5, max_deletions=2, target_epsilon=1.0, delta=1e-5)
>>> m.learn_many([f"r{i}" for i in range(201)], X, np.where(X[:, 0] > 0, 1, -1))
201
>>> m.t_fit, m.fit["n"], m.fit["K"], m.fit["m"]   # retrained at step 200, K/T = 90 %
(200, 200, 18, 2)
>>> m.unlearn_one("r200").outcome, m.ledger[-1]["route"]   # learned online since the retraining
('exact', 'replay')
>>> d = m.unlearn_one("r5"); d.outcome, d.sigma, m.ledger[-1]["route"], m.m_cum
('noised', 0.5, 'rewind', 1)
>>> p = m.privacy(); p["deletions_capacity_left"], p["rewind_fraction"], p["epsilon"] < 1.0
(1, 0.9, True)
"""

from __future__ import annotations

import math

import numpy as np

from ..arith import norm
from ..core.base import Deletion, OnlineUnlearner
from ..core.examples import ExampleStore
from ..core.replay import load_store, replay_rows, store_arrays
from ..exceptions import ConfigError, InvalidState
from ..privacy.analysis import rewind as r2d
from .descent import average_loss_descent

ROUTES = ("rewind", "replay", "refit")  # the "route" of each ledger entry (module docstring)


def _count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not (isinstance(value, int) and value >= minimum):
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class RewindToDelete(OnlineUnlearner):
    """R2D over periodic full-batch retrainings; exact replay for records learned online since."""

    algorithm = "rewind"
    calibration = "rewind"
    example_params = {"retrain_every": 20, "train_steps": 10}
    keeps_examples = True
    settings = {"max_deletions": "max_deletions", "retrain_every": "retrain_every",
                "train_steps": "train_steps",
                "noise_sigma": "noise_sigma"}

    def __init__(self, dim: int, *, retrain_every: int = 1000, train_steps: int = 100,
                 train_step: float | None = None, noise_sigma: float = 0.05,
                 max_deletions: int = 10,
                 noise_at_fit: bool = False, **kwargs):
        _count("retrain_every", retrain_every, 1)
        _count("train_steps", train_steps, 1)
        _count("max_deletions", max_deletions, 1)
        if not (isinstance(noise_sigma, (int, float)) and not isinstance(noise_sigma, bool)
                and math.isfinite(noise_sigma) and noise_sigma >= 0):
            raise ConfigError(f"noise_sigma must be a finite number >= 0, got {noise_sigma!r}")
        if not isinstance(noise_at_fit, bool):
            raise ConfigError(f"noise_at_fit must be a bool, got {noise_at_fit!r}")
        if kwargs.get("capacity") is not None:
            # the accountant only counts; the generation has the capacity
            raise ConfigError(
                "rewind has no accountant capacity: max_deletions bounds each generation")
        if kwargs.get("rho") is not None:
            # R2D calibrates its rewind depth to (epsilon, delta) directly
            raise ConfigError(
                "rewind is calibrated to an (epsilon, delta) target: give target_epsilon (with "
                "delta), not rho")
        if kwargs.get("target_epsilon") is None:
            kwargs["target_epsilon"] = 1.0
        super().__init__(dim, **kwargs)
        self.config.update(retrain_every=retrain_every, train_steps=train_steps,
                           train_step=train_step,
                           noise_sigma=noise_sigma, max_deletions=max_deletions,
                           noise_at_fit=noise_at_fit)
        beta = self.constants.beta
        limit = 1.0 / (2.0 * beta)
        if train_step is None:
            self.eta_gd = min(limit, 2.0 / (beta * train_steps))
        elif isinstance(train_step, bool) or not (
                isinstance(train_step, (int, float)) and math.isfinite(train_step)
                and 0 < train_step <= limit * (1 + 1e-12)):
            raise ConfigError(f"train_step must be a number in (0, 1/(2 beta)] = (0, {limit:.6g}] "
                              "(docs/algorithms.md 10.4: eta <= min(1/L, n/(2(n-m)L)) for every "
                              f"m), got {train_step!r}")
        else:
            self.eta_gd = float(train_step)
        self.examples = ExampleStore(dim)
        # theta_{T-K} of the current generation (never released)
        self.checkpoint = np.zeros(self.param_dim)
        self.base = np.zeros(self.param_dim)  # post-noise start of the current online segment
        self.t_fit = 0
        self.t_base = 0
        self.m_cum = 0  # fitted copies deleted by rewinds in this generation
        self.generation = 0
        # {"n", "m", "K", "T", "a3_capacity", "t"} of the current generation
        self.fit: dict | None = None
        self._route: str | None = None
        self.counters.update(fits=0, rewinds=0, replays=0, refits=0)

    # ---------------------------------------------------------------- settings
    @property
    def retrain_every(self) -> int:
        return self.config["retrain_every"]

    @property
    def train_steps(self) -> int:
        return self.config["train_steps"]

    @property
    def noise_sigma(self) -> float:
        return float(self.config["noise_sigma"])

    def _constants(self, n: int) -> dict:
        """The public inputs of docs/calibration.md 6.2 for a generation of n rows (R2D's L = beta,
        G = L; docs/calibration.md 6.2)."""
        return dict(n=n, T=self.train_steps, eta=self.eta_gd, smooth=self.constants.beta,
                    grad_bound=self.constants.L)

    def _target(self) -> dict:
        return {"eps": self.target_epsilon, "delta": self.config["delta"]}

    def rewind_depth(self, n: int) -> int:
        """K for a generation trained on n rows (docs/calibration.md 6.2 search with m =
        min(max_deletions, n - 1))."""
        m = min(self.config["max_deletions"], n - 1)
        if m < 1:
            return 0
        return r2d.rewind_depth(self.noise_sigma, m=m, **self._constants(n), **self._target())

    def shift(self, m: int) -> float:
        """Delta(K, m) of the current generation: what m
        deleted fitted copies can move theta''_K."""
        fit = self.fit
        if fit is None or m == 0:
            return 0.0
        return r2d.sensitivity(fit["K"], m=m, **self._constants(fit["n"]))

    # ---------------------------------------------------------------- learning
    def _learn_batch(self, keys: np.ndarray, X: np.ndarray, y: np.ndarray) -> int:
        # Cut the batch at retraining boundaries, so learn_many equals learn_one in a loop
        # (invariant 3): each row applies at most one step, so a
        # chunk of `room` rows cannot pass the boundary.
        applied, start, n = 0, 0, len(keys)
        while start < n:
            room = max(1, self.retrain_every - (self.t - self.t_fit))
            end = min(n, start + room)
            applied += super()._learn_batch(keys[start:end], X[start:end], y[start:end])
            start = end
        return applied

    def _after_learn(self, key: int, step: int, x: np.ndarray, y: float) -> None:
        self.examples.append(key, step, x, y)
        self._fit_if_due()

    def _after_learn_batch(self, keys, steps, X, y) -> None:
        self.examples.extend(keys, steps, X, y)
        self._fit_if_due()

    def _fit_if_due(self) -> None:
        if self.t - self.t_fit >= self.retrain_every:
            self.retrain()

    def retrain(self) -> None:
        """R2D Algorithm 1 on every retained example: T projected GD steps from theta_0 = 0.

        Saves theta_{T-K} (docs/algorithms.md 10.4) and starts a new generation; the model becomes
        theta_T (plus noise with ``noise_at_fit``). Public so a
        reference process can retrain at the same times.
        """
        X, y, _ = self.examples.live_rows()
        n, T = len(X), self.train_steps
        K = self.rewind_depth(n) if n >= 1 else 0
        z = np.zeros(self.param_dim)
        if n:
            z = average_loss_descent(self, z, X, y, n, T - K, self.eta_gd)
        checkpoint = np.array(z, dtype=np.float64)
        if n and K:
            z = average_loss_descent(self, z, X, y, n, K, self.eta_gd)
        if self.config["noise_at_fit"] and self.noise_sigma > 0:
            z = self.ball.project(z + self._noise(self.noise_sigma))
        a3_capacity = 0
        if n >= 2:
            a3_capacity = r2d.deletion_capacity(self.noise_sigma, K, **self._constants(n),
                                                **self._target())
        self.checkpoint = checkpoint
        self.z = np.array(z, dtype=np.float64)
        self.base = self.z.copy()
        self.t_fit = self.t_base = self.t
        self.m_cum = 0
        self.generation += 1
        self.fit = {"n": n, "m": min(self.config["max_deletions"], max(n - 1, 0)), "K": K, "T": T,
                    "a3_capacity": a3_capacity, "t": self.t}
        self.counters["fits"] += 1

    # --------------------------------------------------------------- unlearning
    def _delete(self, key: int, steps: list[int]) -> Deletion:
        fitted = [u for u in steps if u <= self.t_fit]
        baked = [u for u in steps if self.t_fit < u <= self.t_base]
        if baked or (fitted and (self.fit is None or self.m_cum + len(fitted) > self.fit["m"])):
            return self._refit(steps, "baked" if baked else "capacity")
        if fitted:
            return self._rewind(steps, len(fitted))
        return self._replay(steps)

    def _split(self, after: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """(index of the first retained row with step > after,
        X, y, steps) of the compacted store."""
        X, y, st = self.examples.live_rows()
        return int(np.searchsorted(st, after, side="right")), X, y, st

    def _rewind(self, steps: list[int], copies: int) -> Deletion:
        fit, m = self.fit, self.m_cum + copies
        self.examples.remove_steps(steps)  # invariant 6: the raw rows are zeroed first
        i0, X, y, st = self._split(self.t_fit)
        if i0 != fit["n"] - m:
            raise InvalidState(f"fitted rows {i0} != n - m_cum = {fit['n'] - m}")
        K = fit["K"]
        theta = average_loss_descent(self, self.checkpoint.copy(), X[:i0], y[:i0], i0, K,
                                     self.eta_gd)
        shift = self.shift(m)
        sigma = self.noise_sigma if shift > 0.0 else 0.0
        released = self.ball.project(theta + self._noise(sigma)) if sigma > 0 else theta
        self.z = replay_rows(self, released, X[i0:], y[i0:], st[i0:])
        self.base, self.t_base = self.z.copy(), self.t
        self.m_cum = m
        self.counters["rewinds"] += 1
        outcome = "noised" if sigma > 0 else "exact"
        return self._record("rewind", outcome, steps, shift, sigma, K=K, m=m)

    def _replay(self, steps: list[int]) -> Deletion:
        self.examples.remove_steps(steps)
        i0, X, y, st = self._split(self.t_base)
        self.z = replay_rows(self, self.base, X[i0:], y[i0:], st[i0:])
        self.counters["replays"] += 1
        return self._record("replay", "exact", steps, 0.0, 0.0, replayed=len(st) - i0)

    def _refit(self, steps: list[int], reason: str) -> Deletion:
        self.examples.remove_steps(steps)
        self.retrain()
        self.counters["refits"] += 1
        if reason == "capacity":  # the noise budget of the generation ran out: a new budget epoch
            self.epoch += 1
            return self._record("refit", "retrained", steps, 0.0, 0.0, reason=reason)
        return self._record("refit", "exact", steps, 0.0, 0.0, reason=reason)

    def _record(self, route: str, outcome: str, steps, shift: float, sigma: float,
                **extra) -> Deletion:
        # counts the deletion (invariant 4); R2D spends no Renyi slope
        self.accountant.charge(0.0, 0.0)
        self._route = route
        i = self.accountant.deletions
        fit = self.fit or {}
        self.ledger.append({
            "i": i, "epoch": self.epoch, "tau": self.t, "u": [int(s) for s in steps],
            "shift": shift,
            "sigma": sigma, "rho": 0.5 * (shift / sigma) ** 2 if sigma > 0 else 0.0,
            "outcome": outcome,
            "route": route, "generation": self.generation, "n": fit.get("n", 0),
            "T": fit.get("T", 0),
            "K": fit.get("K", 0), **extra,
        })
        return Deletion(outcome, i, sigma, shift, tuple(steps))

    def _adopt(self, post_state: dict) -> None:
        super()._adopt(post_state)
        if self._route in ("rewind", "refit"):  # the adopted iterate is also the new segment start
            self.base = self.z.copy()

    # ------------------------------------------------------------------ privacy
    def release_noise_std(self) -> float | None:
        """The one noise the release carries, uncontracted (docs/accounting.md 10).

        A rewind restarts from the noiseless checkpoint (earlier noises are gone) and draws sigma
        if its shift Delta(K, m_cum) > 0; a retraining draws none (sigma with ``noise_at_fit``).
        After it come the projection and OGD steps u > t_fit, replayed over the retained rows only
        (a deleted row is the identity, so the schedule's Gamma would overstate the contraction):
        once every such step is non-expansive, sigma itself bounds the std. The schedules' steps
        only shrink, so that holds from gamma_{t_fit+1} <= 1 on; before it, None.
        """
        if self.noise_sigma <= 0.0 or self.fit is None:
            return 0.0
        if self.m_cum:
            noised = self.shift(self.m_cum) > 0.0
        else:
            noised = bool(self.config["noise_at_fit"])
        if not noised:
            return 0.0
        return self.noise_sigma if self.schedule.gamma(self.t_fit + 1) <= 1.0 else None

    def privacy(self) -> dict:
        """docs/accounting.md 4: epsilon(m_cum) of the current
        generation (not additive), its capacity and K/T."""
        fit, delta = self.fit, self.accountant.delta
        ratio = 0.0
        if fit is not None and self.m_cum:
            shift = self.shift(self.m_cum)
            ratio = shift / self.noise_sigma if self.noise_sigma > 0 else (
                math.inf if shift > 0 else 0.0)
        eps = r2d.epsilon_for_ratio(ratio, delta)
        return {
            **self.privacy_unit_facts(),
            "eps_rdp_slope": 0.5 * ratio * ratio,  # Gaussian mechanism: D_alpha = alpha ratio^2 / 2
            "budget_used": eps / self.target_epsilon,
            "epsilon": eps,
            "delta": delta,
            "deletions_capacity_left": None if fit is None else fit["m"] - self.m_cum,
            "rewind_depth": 0 if fit is None else fit["K"],
            "rewind_fraction": 0.0 if fit is None else fit["K"] / fit["T"],
            "noise_sigma": self.noise_sigma,
            "retained": len(self.examples),
        }

    # -------------------------------------------------------------------- state
    def _export_extra(self) -> dict:
        return {"t_fit": self.t_fit, "t_base": self.t_base, "m_cum": self.m_cum,
                "generation": self.generation,
                "fit": None if self.fit is None else dict(self.fit)}

    def _export_arrays(self) -> dict[str, np.ndarray]:
        return {**store_arrays(self.examples), "rewind_checkpoint": self.checkpoint.copy(),
                "rewind_base": self.base.copy()}

    def _import(self, meta: dict, arrays: dict) -> None:
        extra = meta["extra"]
        self.examples = load_store(self, arrays)
        applied = self.index.live_steps()
        if not np.array_equal(applied, self.examples.steps):
            raise InvalidState("retained examples do not match the applied-record index")
        for name in ("rewind_checkpoint", "rewind_base"):
            v = np.asarray(arrays[name], np.float64)
            if v.shape != (self.param_dim,) or not np.all(np.isfinite(v)):
                raise InvalidState(f"{name} has shape {v.shape} or is not finite")
            if norm(v) > self.ball.radius * (1 + 1e-12):
                raise InvalidState(f"{name} lies outside the domain K")
        self.checkpoint = np.asarray(arrays["rewind_checkpoint"], np.float64).copy()
        self.base = np.asarray(arrays["rewind_base"], np.float64).copy()
        self.t_fit, self.t_base = int(extra["t_fit"]), int(extra["t_base"])
        self.m_cum, self.generation = int(extra["m_cum"]), int(extra["generation"])
        fit = extra["fit"]
        self.fit = None if fit is None else {k: int(fit[k])
                                             for k in ("n", "m", "K", "T", "a3_capacity", "t")}
        if not 0 <= self.t_fit <= self.t_base <= self.t:
            raise InvalidState("rewind segment steps are not ordered t_fit <= t_base <= t")
        fitted = int(np.searchsorted(self.examples.steps, self.t_fit, side="right"))
        if self.fit is None:
            if self.t_fit or self.m_cum or self.generation:
                raise InvalidState("rewind state has a fit boundary but no generation")
        elif not (0 <= self.m_cum <= self.fit["m"] <= self.fit["a3_capacity"]
                  and self.fit["t"] == self.t_fit
                  and fitted == self.fit["n"] - self.m_cum and 0 <= self.fit["K"] <= self.fit["T"]):
            raise InvalidState("rewind generation is inconsistent with the retained examples")
