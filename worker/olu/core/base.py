"""The estimator base shared by every learner-unlearner: River-style API, ingest checks, state.

Subclasses define how a deletion is honoured (``_delete``); everything else (the OGD step, the
applied-record index, tombstones, the accountant, state export) lives here once.

Paper time ``t`` is the number of examples applied in the current epoch (docs/guarantee.md 1.3): example t
is applied with step eta_t, z_{t+1} = Proj_K(z_t - eta_t grad f_t(z_t)) (docs/guarantee.md 1.1).
"""

from __future__ import annotations

import math

import numpy as np

from ..exceptions import ConfigError, InvalidState
from ..formulas import sensitivity
from ..privacy.accountant import make_accountant
from ..privacy.analysis.checks import positive
from ..privacy.analysis.split import DEFAULT_RESERVE
from ..privacy.analysis.units import UNITS, unit_rho_for_epsilon
from ..privacy.ledger import Ledger
from ..privacy.meter import MeteredNoise, NoiseMeter
from . import sparse
from .contribution import ContributionCap, subject_keys
from .deletion import Deletion, charge_noised, exact_deletion, request_ids
from .domain import Ball, FeatureBound
from .entropy import OsEntropy
from .index import AppliedIndex, step_overflow
from .iterate import ScaledIterate
from .kernels.loader import compiled
from .losses import make_loss
from .rebuild import exported, rebuild, subclass_named
from .record_keys import record_key
from .schedules import Constant, Convex, Schedule, StronglyConvex
from .sparse import SparseRows
from .tombstones import KeySet

# 4: sealed ledger segments in columns; 3: the ledger in sealed segments, tombstones as base + recent;
# 2: the applied index as runs + tail (index.py).
# Older formats are still read.
STATE_FORMAT = 4


_REMOVED = object()
_EPS_REMOVED = ("eps= was removed: it was the Rényi slope, not epsilon. Pass rho= for the slope, or "
                "target_epsilon= (with delta=) for an (epsilon, delta) target (docs/accounting.md 9)")


def _schedule(name, constants, ball, t0, step) -> Schedule:
    mu, beta, L = constants.mu, constants.beta, constants.L
    if name == "auto":
        name = StronglyConvex.name if mu > 0 else Convex.name
    if name == StronglyConvex.name:
        if mu <= 0:
            raise ConfigError("schedule 'strongly-convex' needs a strongly convex loss (l2 > 0)")
        return StronglyConvex(mu, beta, t0)
    if name == Convex.name:
        return Convex(ball.diameter, L, beta)
    if name == Constant.name:
        if step is None:
            raise ConfigError("schedule 'constant' needs step (the constant eta)")
        return Constant(step, mu, beta)
    raise ConfigError(f"schedule must be auto, strongly-convex, convex or constant, got {name!r}")


class OnlineUnlearner(ScaledIterate, MeteredNoise):
    """Projected OGD on one stream with an unlearning rule; subclasses choose the rule."""

    algorithm = "base"
    use_kernel = True  # False: always the pure-numpy reference step (see worker.olu.core.kernels)
    # Facts the stream and config layers read from the class (worker.olu.registry):
    #: the state holds raw retained examples, so stored objects holding a deleted record must be
    #: purged within the purge bound (the worker's invariant 6).
    keeps_examples = False
    #: worker settings the algorithm takes beyond the base ones, mapped to its constructor keyword.
    settings: dict[str, str] = {}
    #: how a ``noised`` deletion's sigma is calibrated: "gaussian" (sigma = shift / sqrt(2 rho) for
    #: the rho the deletion is charged, checked by the contract suite), "rewind" (sigma fixed in
    #: advance, the rewind depth calibrated to it), or None (never adds noise).
    calibration: str | None = None
    #: constructor arguments of a small working instance (the contract suite builds one with them).
    example_params: dict = {}
    #: privacy units whose proof holds for the algorithm's deletion rule (docs/accounting.md 8).
    privacy_units: tuple[str, ...] = ("all-deletions",)
    #: True when one noise draw for the summed shift of a request's records is sound for the rule
    #: (passive: the shifts add, docs/accounting.md 8.3); otherwise the records of a request are
    #: unlearned one after another, each with its own noise and charge.
    groups_requests = False
    #: True when two models of the class may run in a warm-standby rotation (worker.olu.rotation):
    #: every deletion is one Gaussian charge of the model's own Rényi accountant (docs/accounting.md 12.5).
    rotates = False
    #: True when learning itself spends privacy (dp-tofw), so the metrics refresh it after every batch.
    spends_on_learn = False
    #: True when a poll batch's single-record deletes may run inside the learning pass (core/mixed.py).
    #: It inherits; the pass checks that a subclass keeps the steps it reproduces (``MIXED_METHODS``).
    mixes_deletions = False
    #: True when a deletion's outcome has the same bits on every CPU (the fixed-order arithmetic of
    #: worker/olu/arith.py). False where a deletion-time solve uses LAPACK, whose bits vary with the
    #: BLAS kernel: sound, since the outcome is stored as a delta and adopted on replay, never
    #: computed twice (docs/worker.md 4.3).
    portable_deletions = True
    #: the losses the algorithm's proof and code hold for, and why the others are refused at start.
    losses: tuple[str, ...] = ("logistic", "ridge", "softmax")
    loss_refusal = ""

    def __init__(
        self,
        dim: int,
        *,
        loss: str = "logistic",
        l2: float = 0.01,
        label_bound: float = 1.0,
        classes=None,
        radius: float = 10.0,
        feature_bound: float = 1.0,
        feature_policy: str = "reject",
        schedule: str = "auto",
        t0: float | None = None,
        step: float | None = None,
        rho: float | None = None,
        target_epsilon: float | None = None,
        privacy_unit: str = "all-deletions",
        omega: float = 1.2,
        delta: float = 1e-5,
        capacity: int | None = None,
        budget_split: str = "weighted",
        deletion_capacity: int | None = None,
        budget_reserve: float = DEFAULT_RESERVE,
        max_records_per_key: int | None = None,
        noise_rng: np.random.Generator | None = None,
        eps: object = _REMOVED,
    ):
        if eps is not _REMOVED:
            raise ConfigError(_EPS_REMOVED)
        if loss not in self.losses:
            raise ConfigError(f"algorithm {self.algorithm!r} does not support loss {loss!r}: {self.loss_refusal}")
        rho = self.resolve_rho(rho, target_epsilon, delta, privacy_unit)
        self.target_epsilon = target_epsilon
        self.config = dict(
            dim=dim, loss=loss, l2=l2, label_bound=label_bound, radius=radius,
            **({"classes": list(classes)} if classes is not None else {}),
            feature_bound=feature_bound, feature_policy=feature_policy, schedule=schedule,
            t0=t0, step=step, rho=rho, target_epsilon=target_epsilon, privacy_unit=privacy_unit, omega=omega,
            delta=delta, capacity=capacity, budget_split=budget_split, deletion_capacity=deletion_capacity,
            budget_reserve=budget_reserve, max_records_per_key=max_records_per_key,
        )
        self.features = FeatureBound(dim, feature_bound, feature_policy)
        self.ball = Ball(radius)
        self.loss = make_loss(loss, l2, label_bound, classes)
        self.param_dim = self.loss.param_dim(dim)  # K d for a K-class softmax, else d
        self.constants = self.loss.constants(self.ball.radius, self.features.bound)
        self.schedule = _schedule(schedule, self.constants, self.ball, t0, step)
        try:
            self.accountant = make_accountant(privacy_unit, rho, omega=omega, delta=delta, capacity=capacity,
                                              split=budget_split, planned=deletion_capacity,
                                              reserve=budget_reserve)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        try:  # at most this many records of one key learned in the model's life (docs/accounting.md 13)
            self.key_cap = None if max_records_per_key is None else ContributionCap(max_records_per_key)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self._noise_rng = noise_rng  # tests only: production draws from OS entropy (invariant 1)
        self._os_entropy = OsEntropy()
        self._replaying = False
        # The share of the slope one deletion may spend in this model (< 1 only while a rotation
        # charges a per-request request held by two of its models: docs/accounting.md 12.3).
        self.noise_share = 1.0
        self.z = np.zeros(self.param_dim)  # data-independent start in K
        self.t = 0
        self.epoch = 0
        self.index = AppliedIndex()
        self.tombstones = KeySet()
        self.ledger = Ledger()
        self.noise_meter = NoiseMeter(self.schedule)  # the release's accumulated noise (docs/accounting.md 10)
        self.counters = {"applied": 0, "skipped_deleted": 0}
        # Deletions that changed the model, over its whole life (every epoch): the release's
        # ``deletions``. The accountant counts only those it charged, so exact, restarted and
        # retrained deletions would be missing from it.
        self.deletions_applied = 0

    @classmethod
    def resolve_rho(cls, rho, target_epsilon, delta, unit) -> float:
        """The Rényi slope per unit: ``rho`` as given, or the largest one whose reported epsilon at
        ``delta`` is at most ``target_epsilon`` (the exact inverse of the unit's conversion,
        ``analysis.units.unit_rho_for_epsilon``)."""
        if unit not in UNITS:
            raise ConfigError(f"privacy_unit must be one of {', '.join(UNITS)}, got {unit!r}")
        if unit not in cls.privacy_units:
            raise ConfigError(f"privacy_unit {unit!r} is not available for algorithm {cls.algorithm!r} "
                              f"(it supports {', '.join(cls.privacy_units)}; docs/accounting.md 8)")
        if rho is not None and target_epsilon is not None:
            raise ConfigError("give rho (the Rényi slope) or target_epsilon (with delta), not both")
        try:
            if target_epsilon is not None:
                return unit_rho_for_epsilon(unit, target_epsilon, delta)
            return positive("rho", 1.0 if rho is None else rho)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    # ----------------------------------------------------------------- learning
    @property
    def dim(self) -> int:
        return self.features.dim

    @property
    def weights(self) -> np.ndarray:
        return self.z.copy()

    def learn_one(self, record_id: str, x, y, *, subject=None) -> bool:
        """Apply one example; False if its id was already deleted (the insert is skipped), or its
        ``subject`` (the partitioning key; default: the id) is at ``max_records_per_key``.

        Bad input raises a subclass of ``InvalidExample`` and changes no state.
        """
        key = record_key(record_id)
        xv, yv = self.features.check(x), self.loss.label(y)
        if self.key_cap is not None:
            if not self.key_cap.admit(subject_keys(None if subject is None else [subject], [key]))[0]:
                return False
        plan = self.kernel_plan()
        if plan is not None:  # the compiled path of learn_many, so the two agree bit for bit
            return self._learn_kernel(plan, np.array([key], np.uint64), xv[None, :], np.array([yv])) == 1
        return self._learn(key, xv, yv)

    def learn_many(self, record_ids, X, y, *, keys=None, subjects=None) -> int:
        """Same result as ``learn_one`` in a loop; the whole batch is validated before any step.

        ``X``: a matrix, or :class:`~worker.olu.core.sparse.SparseRows` (learned in O(non-zeros)
        a row where the model takes the plain OGD step: core/sparse.py).
        ``keys``: ``record_key`` of each id when the caller has them already (the stream decoder
        hashes ids straight from the record bytes); ``record_ids`` is then not read. ``subjects``:
        each row's partitioning key (strings, or their 64-bit hashes) for ``max_records_per_key``.
        """
        return self.learn_prepared(*self.prepare_batch(record_ids, X, y, keys=keys), subjects=subjects)

    def prepare_batch(self, record_ids, X, y, *, keys=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The checked batch of :meth:`learn_many`: (keys uint64, features, labels); raises a subclass
        of ``InvalidExample`` (or ``ConfigError`` for unequal lengths) and changes no state."""
        kernels = compiled()  # if there: vectorised hashing and label checks, same values and errors
        if kernels is not None and (batch := kernels.front(self, record_ids, X, y, keys)):
            return batch  # a clean batch, hashed (unless keyed) and checked in one compiled call
        if keys is not None:
            keys = np.asarray(keys, np.uint64)
        elif kernels is not None:
            keys = kernels.record_keys(record_ids)
        else:
            keys = np.array([record_key(r) for r in record_ids], np.uint64)
        if kernels is not None:
            yv = kernels.check_labels(self.loss, y)
        else:
            yv = self.loss.labels(y) if hasattr(self.loss, "labels") else np.array([self.loss.label(v) for v in y])
        Xv = sparse.check_rows(self.features, X) if isinstance(X, SparseRows) else self.features.check_many(X)
        if not (len(keys) == len(Xv) == len(yv)):
            raise ConfigError(f"batch lengths differ: {len(keys)} ids, {len(Xv)} rows, {len(yv)} labels")
        return keys, Xv, yv

    def learn_prepared(self, keys: np.ndarray, X: np.ndarray, y: np.ndarray, subjects=None) -> int:
        """Apply a batch :meth:`prepare_batch` returned (of this model or one with the same checks)."""
        if self.key_cap is not None:  # rows of a key past its cap are consumed, not learned
            admitted = self.key_cap.admit(subject_keys(subjects, keys))
            if not admitted.all():
                keys, X, y = keys[admitted], X[admitted], y[admitted]
        return self._learn_batch(keys, X, y)

    def _learn_batch(self, keys: np.ndarray, X: np.ndarray, y: np.ndarray) -> int:
        """Apply validated rows (keys uint64): the compiled kernel, or ``_learn`` in a loop."""
        if isinstance(X, SparseRows):
            plain = getattr(self._learn, "__func__", None) is OnlineUnlearner._learn and not self._hooked()
            return sparse.learn_batch(self, keys, X, y, plain=plain)
        plan = self.kernel_plan()
        if plan is None:
            return sum(self._learn(int(k), X[j], float(y[j])) for j, k in enumerate(keys))
        return self._learn_kernel(plan, keys, X, y)

    def kernel_plan(self):
        """Parameters for ``kernels.ogd_steps``, or None to use the reference ``_learn``.

        The kernel replaces exactly ``_learn``: a subclass (or instance) that overrides it, sets
        ``use_kernel = False``, or uses a loss/schedule the kernel does not know gets the
        reference, as does everything under ``OLU_REFERENCE_KERNEL=1`` or ``worker.compiled.jit.reference()``.
        """
        if not self.use_kernel or getattr(self._learn, "__func__", None) is not OnlineUnlearner._learn:
            return None
        kernels = compiled()
        if kernels is None or kernels.reference_forced():
            return None
        return kernels.plan_for(self)

    def _learn_kernel(self, plan, keys: np.ndarray, X: np.ndarray, y: np.ndarray) -> int:
        """``_learn`` over a batch in one compiled call; same state changes, in the same order.

        The hooks run once after the batch, in step order, on the applied rows only: the default
        ``_after_learn_batch`` calls ``_after_learn(key, step, x, y)`` for each. While they run,
        ``self.z`` and ``self.t`` are already those after the whole batch.
        """
        if len(keys) == 0:
            return 0
        kernels = compiled()
        z = np.array(self.z, dtype=np.float64)  # a new array per update, like the reference
        t, steps, consumed, reason = kernels.run_batch(plan, z, self.t, self.index, self.tombstones, keys, X, y)
        self.z = z
        applied = self._took_steps(t, consumed)
        if applied and self._hooked():
            rows = np.flatnonzero(steps[:consumed])
            self._after_learn_batch(np.asarray(keys, np.uint64)[rows], steps[rows], np.asarray(X)[rows],
                                    np.asarray(y, np.float64)[rows])
        if reason == kernels.STEP_OVERFLOW:
            raise step_overflow(t + 1)
        return applied

    def _took_steps(self, t: int, consumed: int) -> int:
        """A compiled batch's bookkeeping, the iterate already stored: the step counter now ``t``,
        the applied and skipped inserts among its ``consumed`` rows. Returns the rows applied."""
        applied = t - self.t
        self.t = t
        self.counters["applied"] += applied
        self.counters["skipped_deleted"] += consumed - applied
        return applied

    def _hooked(self) -> bool:
        """True when a subclass keeps the rows it learns (``_after_learn`` or its batch form)."""
        return (getattr(self._after_learn, "__func__", None) is not OnlineUnlearner._after_learn
                or getattr(self._after_learn_batch, "__func__", None) is not OnlineUnlearner._after_learn_batch)

    def _learn(self, key: int, x: np.ndarray, y: float) -> bool:
        if key in self.tombstones:
            self.counters["skipped_deleted"] += 1  # an insert after its delete (docs/guarantee.md 1.3)
            return False
        self.t += 1
        eta = self.schedule.eta(self.t)
        self.z = self.ball.project(self.z - eta * self.loss.grad(self.z, x, y))
        self.index.add(key, self.t)
        self.counters["applied"] += 1
        self._after_learn(key, self.t, x, y)
        return True

    def _after_learn(self, key: int, step: int, x: np.ndarray, y: float) -> None:
        """Hook: algorithms that keep retained examples store them here (step = u)."""

    def _after_learn_batch(self, keys: np.ndarray, steps: np.ndarray, X: np.ndarray, y: np.ndarray) -> None:
        """Batch form of :meth:`_after_learn` (for a compiled batch path); override to vectorise."""
        for j in range(len(keys)):
            self._after_learn(int(keys[j]), int(steps[j]), X[j], float(y[j]))

    # --------------------------------------------------------------- unlearning
    def prefetch_deletes(self, keys: np.ndarray) -> None:
        """Look up the ``record_key`` s (uint64) of a poll batch's deletes about to come, in one
        compiled call each for the index runs and the tombstones; the requests then take the
        answers instead of a call each. Only a hint: results are the same with or without it
        (``AppliedIndex.prefetch`` and ``KeySet.prefetch`` say how long the answers hold)."""
        if type(self.index) is AppliedIndex:
            self.index.prefetch(keys)
        if type(self.tombstones) is KeySet:
            self.tombstones.prefetch(keys)

    def unlearn_one(self, record_id: str, *, post_state: dict | None = None) -> Deletion:
        """Honour the deletion of ``record_id``: ``unlearn_request([record_id])``."""
        return self.unlearn_request([record_id], post_state=post_state)

    def unlearn_request(self, record_ids, *, post_state: dict | None = None, keys=None) -> Deletion:
        """Honour one deletion request naming ``record_ids``; the next release must be ``self.weights``.

        Ids the model never applied cost nothing and add no noise; ids deleted before are no-ops.
        When the class ``groups_requests``, the applied records are unlearned with ONE noise draw
        calibrated to the sum of their shifts and charged once (docs/accounting.md 8.3); otherwise
        one after another, each with its own noise and charge. The result's ``outcome`` is that of
        the (last) deletion that changed the model, else ``not_applied`` or ``duplicate``.

        ``post_state`` replays a request whose result is already durable (restore after a
        crash): the deterministic bookkeeping runs as usual, but the stored post-noise iterate
        is adopted instead of drawing fresh noise, so one deletion never yields two independent
        noisy views (docs/worker.md 4.2). It must come from :meth:`deletion_state`. ``keys``: the
        ``record_key`` of each id, when the caller has them (a rotation hashes once for its models).
        """
        ids = request_ids(record_ids)
        keys = [record_key(r) for r in ids] if keys is None else keys
        tombstones = self.tombstones
        fresh = [j for j, k in enumerate(keys) if k not in tombstones]
        seen = set(fresh) if len(fresh) < len(ids) else None
        duplicates = () if seen is None else tuple(ids[j] for j in range(len(ids)) if j not in seen)
        self.fold_scale()  # a request is a point fixed by the events: its state is stored with scale 1
        self._replaying = post_state is not None
        try:
            if self.groups_requests:
                popped, not_applied, results = self._delete_grouped(keys, ids, fresh)
            else:
                popped, not_applied, results = self._delete_each(keys, ids, fresh)
        finally:
            self._replaying = False
        changed = [r for r in results if r.changed_model]
        self.deletions_applied += len(changed)
        if changed and post_state is not None:
            self._adopt(post_state)
        # results hold only applied records' rule calls (dp-tofw's ``dp_covered`` changes nothing)
        base = (changed or results or [Deletion("not_applied" if fresh else "duplicate")])[-1]
        return base.for_request(popped, not_applied, duplicates)

    def _delete_grouped(self, keys, ids, fresh):
        """One rule call on the union of the request's applied steps: one noise draw for the summed
        shift, charged once (the shifts add through the coupling, docs/accounting.md 8.3)."""
        self.index.begin_pops()
        steps, popped, not_applied = [], 0, []
        try:
            for j in fresh:
                record_steps = self.index.pop(keys[j])
                steps.extend(record_steps)
                popped += bool(record_steps)
                if not record_steps:
                    not_applied.append(ids[j])
            results = [self._delete(keys[fresh[0]], sorted(steps))] if steps else []
        except BaseException:
            for _ in fresh:  # leave the model exactly as it was (e.g. BudgetExhausted)
                self.index.undo_pop()
            raise
        for j in fresh:
            self.tombstones.add(keys[j])
        return popped, not_applied, results

    def _delete_each(self, keys, ids, fresh):
        """The records one after another, each with its own rule call (noise and charge). A failure
        leaves the failing record and the ones after it untouched; the ones before stay deleted."""
        popped, not_applied, results = 0, [], []
        for j in fresh:
            self.index.begin_pops()
            steps = self.index.pop(keys[j])
            try:
                result = self._delete(keys[j], steps) if steps else Deletion("not_applied")
            except BaseException:
                if steps:
                    self.index.undo_pop()
                # the records before it stay deleted: count them (the caller never sees results)
                self.deletions_applied += sum(r.changed_model for r in results)
                raise
            self.tombstones.add(keys[j])
            if steps:
                popped += 1
                results.append(result)
            else:
                not_applied.append(ids[j])
        return popped, not_applied, results

    def deletion_state(self) -> dict:
        """What must be durable after a deletion: the post-noise iterate and checkable counters
        (``deletions``: the accountant's charged deletions; ``deletions_applied``: all of them)."""
        return {"z": self.z.copy(), **self.deletion_counters()}

    def deletion_counters(self) -> dict:
        """:meth:`deletion_state` without the iterate."""
        return {"t": self.t, "epoch": self.epoch, "deletions": self.accountant.lifetime_deletions,
                "deletions_applied": self.deletions_applied}

    def _adopt(self, post_state: dict) -> None:
        # Either counter may be missing: deltas stored before deletions_applied existed have only
        # ``deletions``; a state read back from a release has only the applied count.
        counters = {"t": self.t, "epoch": self.epoch, "deletions": self.accountant.lifetime_deletions,
                    "deletions_applied": self.deletions_applied}
        mine = {k: v for k, v in counters.items() if post_state.get(k) is not None}
        stored = {k: int(post_state[k]) for k in mine}
        if not {"t", "epoch"} <= set(mine) or mine != stored:
            raise InvalidState(f"replay diverged from the stored deletion: {mine} != {stored}")
        z = np.asarray(post_state["z"], np.float64)
        if z.shape != (self.param_dim,) or not np.all(np.isfinite(z)):
            raise InvalidState(f"stored post-noise iterate has shape {z.shape} or is not finite")
        self.z = z.copy()

    def _delete(self, key: int, steps: list[int]) -> Deletion:
        raise NotImplementedError

    def _entropy(self) -> np.random.Generator:
        """The test generator, or one seeded from OS entropy and never stored (entropy.py)."""
        return self._noise_rng if self._noise_rng is not None else self._os_entropy.generator()

    def _noise(self, sigma: float) -> np.ndarray:
        if self._replaying:  # the stored post-noise iterate replaces whatever would be drawn
            return np.zeros(self.param_dim)
        if self._noise_rng is not None:  # the test generator: its stream of draws, as ever
            return self._noise_rng.normal(0.0, sigma, size=self.param_dim)
        noise = self._os_entropy.gaussian(self.param_dim)  # N(0, I), a row of its own
        noise *= sigma  # N(0, sigma^2 I), scaled in place: no array more on the deletion's path
        return noise

    def _noise_rows(self, n: int) -> np.ndarray:
        """``n`` draws of N(0, I) as rows, for a batch's deletions: the test generator's stream of
        draws, or OS entropy (:meth:`_noise` scales one row by its sigma)."""
        if self._noise_rng is not None:
            return self._noise_rng.standard_normal((n, self.param_dim))
        return self._os_entropy.gaussian_rows(n, self.param_dim)

    def _release_with_noise(self, z_hat: np.ndarray, shift: float, steps, **extra) -> Deletion:
        """z <- Proj_K(z_hat + N(0, sigma_i^2 I)) with sigma_i calibrated to ``shift``.

        ``z_hat`` is the pre-noise state: it lives only in this frame and is never stored.
        """
        if shift == 0.0:  # every influence of the record has contracted away exactly
            self.z = z_hat
            return exact_deletion(self.accountant, steps)
        sigma = self.accountant.sigma_for_next(shift)
        if self.noise_share != 1.0:  # x / sqrt(1.0) is x: skip it in the common case
            sigma /= math.sqrt(self.noise_share)
        # charged first: BudgetExhausted leaves the model untouched
        deletion = charge_noised(self.accountant, self.ledger, self.noise_meter, epoch=self.epoch, tau=self.t,
                                 steps=steps, shift=shift, sigma=sigma, extra=extra, share=self.noise_share)
        self.z = self.ball.project(z_hat + self._noise(sigma))
        return deletion

    def sensitivity(self, u: int) -> float:
        """Delta_u = min(eta_u L, D): the most one example can move the iterate (docs/calibration.md 3.1)."""
        return sensitivity(self.schedule.eta(u), self.constants.L, self.ball.diameter)

    # --------------------------------------------------------------- prediction
    def predict_proba_one(self, x):
        """P(y = +1 | x) for the logistic loss; {class: probability} for softmax."""
        if self.loss.name == "ridge":
            raise TypeError("ridge regression has no class probabilities; use predict_one")
        p = self.loss.predict(self.z, self.features.check(x))
        return dict(zip(self.loss.classes, p.tolist())) if self.loss.name == "softmax" else p

    def predict_one(self, x):
        """+1/-1 for logistic, the most probable class for softmax (the first on a tie), the
        real-valued prediction for ridge."""
        xv = self.features.check(x)
        if self.loss.name == "ridge":
            return self.loss.predict(self.z, xv)
        if self.loss.name == "softmax":
            return self.loss.classes[int(np.argmax(self.loss.predict(self.z, xv)))]
        return 1 if self.loss.predict(self.z, xv) >= 0.5 else -1

    # ------------------------------------------------------------------ privacy
    def privacy_unit_facts(self) -> dict:
        """What every ``privacy()`` states first: the unit, its slope and the requests it charged."""
        acc = self.accountant
        facts = {"unit": acc.unit, "rho": acc.budget, "target_epsilon": self.target_epsilon, "requests": acc.deletions}
        if self.key_cap is not None:  # what bounds a request's shift, and what it left unlearned
            facts.update(max_records_per_key=self.key_cap.limit, records_over_key_cap=self.key_cap.refused)
        return facts

    def privacy(self) -> dict:
        acc = self.accountant
        return {
            **self.privacy_unit_facts(),
            "eps_rdp_slope": acc.spent,
            "budget_used": acc.budget_used,
            "epsilon": acc.epsilon(),
            "delta": acc.delta,
            "deletions_capacity_left": acc.capacity_left,
            **acc.split_facts(),
        }

    # -------------------------------------------------------------------- state
    def export_state(self) -> dict:
        """{'meta': JSON-able dict, 'arrays': {name: ndarray}, 'shared': ...}; round-trips bit-exactly
        (core/rebuild.py writes it and reads it back)."""
        return exported(self, STATE_FORMAT)

    def _export_extra(self) -> dict:
        return {}

    def _export_arrays(self) -> dict[str, np.ndarray]:
        return {}

    def _import(self, meta: dict, arrays: dict) -> None:
        """Subclass hook, called after the common state is loaded."""

    def _legacy_deletions_applied(self) -> int:
        """``deletions_applied`` of a state saved before it was stored: every deletion that changed
        the model left a ledger entry, except the few noted by subclasses (and an exact passive
        deletion whose shift had contracted to exactly 0, which nothing records)."""
        return len(self.ledger)

    @classmethod
    def from_state(cls, state: dict, noise_rng: np.random.Generator | None = None) -> OnlineUnlearner:
        """Rebuild a model from ``export_state()`` (this class or a subclass, as the state names);
        raises ``InvalidState`` on anything inconsistent. Any algorithm: ``worker.olu.load_model``."""
        try:
            name = state["meta"]["algorithm"]
        except (KeyError, TypeError) as exc:
            raise InvalidState(f"malformed model state: {exc!r}") from None
        found = subclass_named(cls, name)
        if found is None:
            raise InvalidState(f"state is for {name!r}, not {cls.algorithm!r}")
        return rebuild(found, state, noise_rng)

