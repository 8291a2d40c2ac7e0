"""The estimator base shared by every learner-unlearner: River-style API, settings, state.

Subclasses define how a deletion is honoured (``_delete``); everything else lives here once: the
settings and what they build (loss, schedule, accountant, applied-record index, tombstones),
prediction, the privacy figures and state export. The class mixes in how a model learns
(core/learning.py: the checked batch, the OGD kernel or reference step) and how it honours a
deletion request (core/unlearning.py: the pops, the rule call, its noise and charge).

Paper time ``t`` is the number of examples applied in the current epoch (docs/guarantee.md 1.3):
example t is applied with step eta_t, z_{t+1} = Proj_K(z_t -
eta_t grad f_t(z_t)) (docs/guarantee.md 1.1).
"""

from __future__ import annotations

import numpy as np

from ..exceptions import ConfigError, InvalidState
from ..privacy.accountant import make_accountant
from ..privacy.analysis.checks import positive
from ..privacy.analysis.split import DEFAULT_RESERVE
from ..privacy.analysis.units import UNITS, unit_rho_for_epsilon
from ..privacy.ledger import Ledger
from ..privacy.meter import MeteredNoise, NoiseMeter
from .contribution import ContributionCap
from .deletion import Deletion
from .domain import Ball, FeatureBound
from .entropy import OsEntropy
from .index import AppliedIndex
from .iterate import ScaledIterate
from .learning import Learning
from .losses import make_loss
from .rebuild import exported, rebuild, subclass_named
from .schedules import Constant, Convex, Schedule, StronglyConvex
from .subjects import SubjectIndex
from .tombstones import KeySet
from .unlearning import Unlearning

# Deletion: the answer of every ``_delete``, imported by the algorithms with the class they extend.
__all__ = ["STATE_FORMAT", "Deletion", "OnlineUnlearner"]

# 4: sealed ledger segments in columns; 3: the ledger in sealed segments, tombstones as base +
# recent; 2: the applied index as runs + tail (index.py).
# Older formats are still read.
STATE_FORMAT = 4


_REMOVED = object()
_EPS_REMOVED = (
    "eps= was removed: it was the Rényi slope, not epsilon. Pass rho= for the slope, or "
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


class OnlineUnlearner(Learning, Unlearning, ScaledIterate, MeteredNoise):
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
    #: every deletion is one Gaussian charge of the model's own
    #: Rényi accountant (docs/accounting.md 12.5).
    rotates = False
    #: True when learning itself spends privacy (dp-tofw), so
    #: the metrics refresh it after every batch.
    spends_on_learn = False
    #: True when a poll batch's single-record deletes may run inside the learning pass
    #: (core/mixed.py). It inherits; the pass checks that a subclass
    #: keeps the steps it reproduces (``MIXED_METHODS``).
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
        forget_by_key: bool = False,
        noise_rng: np.random.Generator | None = None,
        eps: object = _REMOVED,
    ):
        if eps is not _REMOVED:
            raise ConfigError(_EPS_REMOVED)
        if loss not in self.losses:
            raise ConfigError(
                f"algorithm {self.algorithm!r} does not support loss {loss!r}: {self.loss_refusal}")
        rho = self.resolve_rho(rho, target_epsilon, delta, privacy_unit)
        self.target_epsilon = target_epsilon
        self.config = dict(
            dim=dim, loss=loss, l2=l2, label_bound=label_bound, radius=radius,
            **({"classes": list(classes)} if classes is not None else {}),
            feature_bound=feature_bound, feature_policy=feature_policy, schedule=schedule,
            t0=t0, step=step, rho=rho, target_epsilon=target_epsilon, privacy_unit=privacy_unit,
            omega=omega,
            delta=delta, capacity=capacity, budget_split=budget_split,
            deletion_capacity=deletion_capacity,
            budget_reserve=budget_reserve, max_records_per_key=max_records_per_key,
            # stored only when on, so the configs (and digests) of older states are unchanged
            **({"forget_by_key": True} if forget_by_key else {}),
        )
        self.features = FeatureBound(dim, feature_bound, feature_policy)
        self.ball = Ball(radius)
        self.loss = make_loss(loss, l2, label_bound, classes)
        self.param_dim = self.loss.param_dim(dim)  # K d for a K-class softmax, else d
        self.constants = self.loss.constants(self.ball.radius, self.features.bound)
        self.schedule = _schedule(schedule, self.constants, self.ball, t0, step)
        try:
            self.accountant = make_accountant(privacy_unit, rho, omega=omega, delta=delta,
                                              capacity=capacity,
                                              split=budget_split, planned=deletion_capacity,
                                              reserve=budget_reserve)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        try:
            # at most this many records of one key learned in the
            # model's life (docs/accounting.md 13)
            self.key_cap = (None if max_records_per_key is None
                            else ContributionCap(max_records_per_key))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not isinstance(forget_by_key, bool):
            raise ConfigError(f"forget_by_key must be true or false, got {forget_by_key!r}")
        # subject key -> the records learned under it, to forget a data subject by key
        self.subject_index = SubjectIndex() if forget_by_key else None
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
        # the release's accumulated noise (docs/accounting.md 10)
        self.noise_meter = NoiseMeter(self.schedule)
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
            raise ConfigError(
                f"privacy_unit {unit!r} is not available for algorithm {cls.algorithm!r} (it "
                f"supports {', '.join(cls.privacy_units)}; docs/accounting.md 8)")
        if rho is not None and target_epsilon is not None:
            raise ConfigError("give rho (the Rényi slope) or target_epsilon (with delta), not both")
        try:
            if target_epsilon is not None:
                return unit_rho_for_epsilon(unit, target_epsilon, delta)
            return positive("rho", 1.0 if rho is None else rho)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    # ------------------------------------------------------------------ the iterate
    @property
    def dim(self) -> int:
        return self.features.dim

    @property
    def weights(self) -> np.ndarray:
        return self.z.copy()

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
        """What every ``privacy()`` states first: the unit, its
        slope and the requests it charged."""
        acc = self.accountant
        facts = {"unit": acc.unit, "rho": acc.budget, "target_epsilon": self.target_epsilon,
                 "requests": acc.deletions}
        if self.key_cap is not None:  # what bounds a request's shift, and what it left unlearned
            facts.update(max_records_per_key=self.key_cap.limit,
                         records_over_key_cap=self.key_cap.refused)
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
        """{'meta': JSON-able dict, 'arrays': {name: ndarray}, 'shared': ...}; round-trips
        bit-exactly (core/rebuild.py writes it and reads it back)."""
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
    def from_state(cls, state: dict,
                   noise_rng: np.random.Generator | None = None) -> OnlineUnlearner:
        """Rebuild a model from ``export_state()`` (this class or a subclass, as the state names);
        raises ``InvalidState`` on anything inconsistent. Any algorithm:
        ``worker.olu.load_model``."""
        try:
            name = state["meta"]["algorithm"]
        except (KeyError, TypeError) as exc:
            raise InvalidState(f"malformed model state: {exc!r}") from None
        found = subclass_named(cls, name)
        if found is None:
            raise InvalidState(f"state is for {name!r}, not {cls.algorithm!r}")
        return rebuild(found, state, noise_rng)

