"""The two models of a rotation behind the one-model interface: learning, promotions, deletions.

:class:`Rotation` splits a batch at the rotation points, promotes the standby and starts a fresh
one there, honours each request in every model and reports the privacy figures over the window
the rotation promises. Its mixed pass is mixed.py's, its snapshot form state.py's.
"""

from __future__ import annotations

import numpy as np

from ..core.base import OnlineUnlearner
from ..core.contribution import subject_keys
from ..core.deletion import Deletion
from ..core.record_keys import record_key
from ..core.subjects import first_seen
from ..exceptions import BudgetExhausted, ConfigError, InvalidState
from ..privacy.analysis.units import unit_epsilon
from .budget import model_budget
from .mixed import RotationMixedPass
from .state import RotationSnapshots

_ARCHIVED = 16  # retired models' summaries kept in the state
KEY_CAP_FACTS = ("max_records_per_key", "records_over_key_cap")  # of the released (active) model


class Rotation(RotationMixedPass, RotationSnapshots):
    """Active and standby models of ``cls`` with the interface the stream layer uses of one model.

    >>> from worker.olu import PassiveOLU
    >>> r = Rotation(PassiveOLU, lifetime_events=4, dim=2, rho=1.0)
    >>> r.learn_many([f"r{i}" for i in range(5)], [[0.6, 0.8]] * 5, [1] * 5)
    5
    >>> r.generation, r.events, r.standby is not None, r.unlearn_request(["r4"]).outcome
    (1, 5, True, 'noised')
    """

    state_name = "rotation"

    def __init__(self, cls: type[OnlineUnlearner], *, lifetime_events: int,
                 variant: str = "overlap", noise_rng: np.random.Generator | None = None,
                 **kwargs):
        if not getattr(cls, "rotates", False):
            raise ConfigError(f"algorithm {cls.algorithm!r} does not rotate (docs/accounting.md "
                              "12.5)")
        if (isinstance(lifetime_events, bool) or not isinstance(lifetime_events, int)
                or lifetime_events < 2):
            raise ConfigError(f"model_lifetime_events must be an integer >= 2, got "
                              f"{lifetime_events!r}")
        unit = kwargs.get("privacy_unit", "all-deletions")
        rho = cls.resolve_rho(kwargs.get("rho"), kwargs.get("target_epsilon"),
                              kwargs.get("delta", 1e-5), unit)
        per_model = {k: v for k, v in kwargs.items() if k not in ("rho", "target_epsilon")}
        per_model["rho"] = model_budget(unit, variant, rho)
        self.cls, self.variant, self.unit = cls, variant, unit
        self.lifetime_events, self.half = lifetime_events, lifetime_events // 2
        self.rho, self.target_epsilon = rho, kwargs.get("target_epsilon")
        self.model_kwargs = per_model
        self.config = {"algorithm": cls.algorithm, "lifetime_events": lifetime_events,
                       "variant": variant, "rho": rho, "target_epsilon": self.target_epsilon,
                       "model": dict(per_model)}
        self._noise_rng = noise_rng
        self.active: OnlineUnlearner = self._fresh()
        self.standby: OnlineUnlearner | None = None
        self.events = self.generation = self.rotations = 0
        self.deletions_applied = self.requests = 0
        self.retired: list[dict] = []
        # The largest all-deletions slope of two consecutive generations of which one is retired:
        # the guarantee's window is any such pair (docs/accounting.md 12.2), so it never drops.
        self.closed_pair_spent = 0.0

    # ------------------------------------------------------------- the one-model interface
    algorithm = property(lambda self: self.cls.algorithm,
                         doc="The rotated algorithm (releases show it).")
    keeps_examples = property(lambda self: self.cls.keeps_examples)
    spends_on_learn = property(lambda self: self.cls.spends_on_learn)
    dim = property(lambda self: self.active.dim)
    param_dim = property(lambda self: self.active.param_dim)
    loss = property(lambda self: self.active.loss)
    z = property(lambda self: self.active.z, doc="The active (released) model's iterate.")
    weights = property(lambda self: self.active.weights)
    t = property(lambda self: self.active.t)
    epoch = property(lambda self: self.active.epoch)
    index = property(lambda self: self.active.index)
    models = property(lambda self: [m for m in (self.active, self.standby) if m is not None])

    def release_noise_std(self) -> float | None:
        """The released (active) model's noise bound (docs/accounting.md 10)."""
        return self.active.release_noise_std()

    def noise_to_signal(self) -> float | None:
        return self.active.noise_to_signal()

    def noise_figures(self) -> tuple[float | None, float | None]:
        return self.active.noise_figures()

    @property
    def key_cap(self):
        """The released model's per-key contribution cap (each model keeps its own), or None."""
        return self.active.key_cap

    @property
    def events_to_renewal(self) -> int:
        """Events until the next promotion (>= 1: it happens right after the event reaching it)."""
        return self.half - self.events % self.half

    @property
    def model_age(self) -> int:
        """Events since the active model was born."""
        return self.events - (self.generation * self.half if self.generation else 0)

    def _fresh(self) -> OnlineUnlearner:
        return self.cls(noise_rng=self._noise_rng, **self.model_kwargs)

    # ----------------------------------------------------------------- learning
    def learn_one(self, record_id: str, x, y, *, subject=None) -> bool:
        # the one-row checks and errors of OnlineUnlearner.learn_one
        xv = self.active.features.check(x)
        subjects = None if subject is None else [subject]
        return self.learn_many([record_id], xv[None, :], [y], subjects=subjects) == 1

    def learn_many(self, record_ids, X, y, *, keys=None, subjects=None) -> int:
        """Rows in stream order, split at the rotation points; the whole batch is checked first."""
        batch = self.prepare_batch(record_ids, X, y, keys=keys)
        return self.learn_prepared(*batch, subjects=subjects)

    def prepare_batch(self, record_ids, X, y, *, keys=None):
        """The checked batch (``OnlineUnlearner.prepare_batch``: every model of a rotation has
        the same checks)."""
        return self.active.prepare_batch(record_ids, X, y, keys=keys)

    def learn_prepared(self, keys, X, y, subjects=None) -> int:
        """:meth:`learn_many` of a batch :meth:`prepare_batch` returned. Each model admits rows by
        its own lifetime's ``max_records_per_key`` count (a fresh standby starts at zero)."""
        applied, start, n = 0, 0, len(keys)
        subjects = None if subjects is None else subject_keys(subjects, keys)
        while start < n:
            stop = min(n, start + self.half - self.events % self.half)
            applied += self._learn_rows(keys[start:stop], X[start:stop], y[start:stop],
                                        None if subjects is None else subjects[start:stop])
            self.events += stop - start
            if self.events % self.half == 0:
                self._rotate()
            start = stop
        return applied

    def _learn_rows(self, keys, X, y, subjects) -> int:
        if self.standby is None:
            return self.active.learn_prepared(keys, X, y, subjects)
        if self.variant == "overlap":
            applied = self.active.learn_prepared(keys, X, y, subjects)
            self.standby.learn_prepared(keys, X, y, subjects)
            return applied
        mine = (keys & np.uint64(1)) == np.uint64(self._standby_parity())
        rest = ~mine

        def part(rows):
            return None if subjects is None else subjects[rows]

        return (self.standby.learn_prepared(keys[mine], X[mine], y[mine], part(mine))
                + self.active.learn_prepared(keys[rest], X[rest], y[rest], part(rest)))

    def _standby_parity(self) -> int:
        """Disjoint variant: the standby learns the records whose key has this low bit."""
        return (self.generation + 1) & 1

    def _rotate(self) -> None:
        """At a multiple of H: promote the standby (retiring the active), then start a fresh
        standby."""
        if self.standby is not None:
            old = self.active
            if self.retired:
                pair = self.retired[-1]["rho"] + old.accountant.spent
                self.closed_pair_spent = max(self.closed_pair_spent, pair)
            self.retired = (self.retired + [self._summary(old, self.generation)])[-_ARCHIVED:]
            self.active, self.standby = self.standby, None
            self.generation += 1
            self.rotations += 1
        fresh = self._fresh()
        fresh.tombstones = self.active.tombstones.copy()  # as KeySet.load(*export()), filter copied
        self.standby = fresh

    @staticmethod
    def _summary(model: OnlineUnlearner, generation: int) -> dict:
        acc = model.accountant
        return {"generation": generation, "t": model.t, "epoch": model.epoch, "rho": acc.spent,
                "deletions": acc.lifetime_deletions, "ledger_entries": len(model.ledger)}

    # --------------------------------------------------------------- unlearning
    @property
    def forgets_by_key(self) -> bool:
        return self.active.forgets_by_key

    def subject_records(self, subject: int) -> np.ndarray:
        """The record keys any of the models learned under ``subject`` (each generation keeps its
        own; the active model's first, then the standby's newer ones)."""
        return first_seen(np.concatenate([m.subject_records(subject) for m in self.models]))

    def unlearn_one(self, record_id: str, *, post_state: dict | None = None) -> Deletion:
        return self.unlearn_request([record_id], post_state=post_state)

    def prefetch_deletes(self, keys: np.ndarray) -> None:
        """:meth:`OnlineUnlearner.prefetch_deletes` for every model."""
        for m in self.models:
            m.prefetch_deletes(keys)

    def unlearn_request(self, record_ids, *, post_state: dict | None = None,
                        keys=None) -> Deletion:
        """Honour the request in every model (each with its own noise and charge). ``keys``: the
        ``record_key`` of each id, when the caller has them."""
        ids = list(record_ids)
        if keys is None:
            named = ids and all(isinstance(r, str) for r in ids)
            keys = [record_key(r) for r in ids] if named else []
        models = self.models

        def holds(m) -> bool:  # an index lookup: asked only where the answer matters
            return any(k not in m.tombstones and m.index.holds(k) for k in keys)

        for m in models:  # nothing changes unless every holding model can take the charge
            if m.accountant.capacity_left == 0 and holds(m):
                raise BudgetExhausted(f"deletion capacity {m.accountant.capacity} of a rotated "
                                      "model is used up")
        split = self.unit == "per-request" and self.variant == "disjoint" and len(models) == 2
        share = 0.5 if split and all(holds(m) for m in models) else 1.0
        posts = self._post_states(post_state, len(models))
        before = [m.deletions_applied for m in models]
        results = []
        for m, post in zip(models, posts):
            m.noise_share = share
            try:
                results.append(m.unlearn_request(ids, post_state=post, keys=keys or None))
            finally:
                m.noise_share = 1.0
        changed = [r for r in results if r.changed_model]
        self.deletions_applied += max(m.deletions_applied - b for m, b in zip(models, before))
        self.requests += bool(changed)
        base = next((r for r in results if r.changed_model), results[0])
        missing = [set(r.not_applied) for r in results]  # sets: a request may name 100,000 ids
        not_applied = tuple(i for i in ids if all(i in m for m in missing))
        duplicates = results[0].duplicates
        records = len(ids) - len(not_applied) - len(duplicates)
        return base.for_request(records, not_applied, duplicates)

    def deletion_state(self) -> dict:
        """The post-noise iterates of both models (``z``, ``z_standby``) and checkable counters."""
        state = {"t": self.t, "epoch": self.epoch, "generation": self.generation,
                 "events": self.events,
                 "deletions": sum(m.accountant.lifetime_deletions for m in self.models),
                 "deletions_applied": self.deletions_applied, "z": self.active.z.copy(),
                 "models": [m.deletion_counters() for m in self.models]}
        if self.standby is not None:
            state["z_standby"] = self.standby.z.copy()
        return state

    def _post_states(self, post_state: dict | None, n: int) -> list:
        if post_state is None:
            return [None] * n
        mine = {"generation": self.generation, "events": self.events}
        stored = {k: post_state.get(k) for k in mine}
        counters = post_state.get("models")
        if stored != mine or not isinstance(counters, list) or len(counters) != n:
            raise InvalidState(f"replay diverged from the stored deletion: {mine} != {stored}")
        zs = [post_state.get("z"), post_state.get("z_standby")][:n]
        return [{**c, "z": z} for c, z in zip(counters, zs)]

    # -------------------------------------------------------------------- privacy
    def pair_spent(self) -> float:
        """The all-deletions slope of the worst pair of consecutive generations so far: the
        guarantee holds for the releases of any two consecutive generations together
        (docs/accounting.md 12.2), and a retired generation's releases stay with subscribers, so
        its spend stays in the figure after a promotion (the last retired one with the active,
        and every earlier pair, through :attr:`closed_pair_spent`)."""
        last = self.retired[-1]["rho"] if self.retired else 0.0
        current = sum(m.accountant.spent for m in self.models)
        return max(self.closed_pair_spent, last + self.active.accountant.spent, current)

    def privacy(self) -> dict:
        """The unit's figures over the window the rotation promises: under all-deletions the
        slope of the worst two consecutive generations (:meth:`pair_spent`), under per-request the
        slope of any charged request (``rho``, split over the models that held it;
        docs/accounting.md 12.3)."""
        active = self.active.accountant
        if self.unit == "all-deletions":
            spent = self.pair_spent()
            used = spent / self.rho
        else:
            spent, used = (self.rho if self.requests else 0.0), 0.0
        return {
            "unit": self.unit, "rho": self.rho, "target_epsilon": self.target_epsilon,
            "requests": self.requests, "eps_rdp_slope": spent, "budget_used": used,
            "epsilon": unit_epsilon(self.unit, spent, active.delta), "delta": active.delta,
            "deletions_capacity_left": active.capacity_left, **active.split_facts(),
            "generation": self.generation, "rotation": self.variant, "model_rho": active.budget,
            "model_age": self.model_age, "rotations": self.rotations,
            "lifetime_events": self.lifetime_events,
            **{k: v for k, v in self.active.privacy_unit_facts().items() if k in KEY_CAP_FACTS},
        }
