"""Warm-standby rotation: renewal of a stream's model under a lasting guarantee (docs/accounting.md 12).

Two models of one algorithm per stream: the ACTIVE one (whose weights are released) and a STANDBY
trained alongside it. Stream time is ``events``, the insert rows offered to the rotation (skipped
ones included; dead letters never reach it), so every rotation point is a function of the input
position only and a replay after a crash rotates at the same row. With ``H = lifetime_events // 2``:
at every multiple of H the standby (if any) is promoted, the active model is retired (it is then
``2 H`` events old: its lifetime), and a fresh standby starts from the data-independent point of the
algorithm (the origin), with the tombstones of the deleted ids (public bookkeeping: an insert of a
deleted id is skipped by every model, as by one model, docs/guarantee.md 1.3). Generation ``g`` is
born at ``g H`` (generation 0 at 0), standby until ``(g + 1) H``, active until ``(g + 2) H``.

Variants. ``overlap``: every row trains both models. ``disjoint``: while two models exist, a row
trains only the model whose generation has the parity of the record key's lowest bit (a hash of
the record id, which is the partitioning key: the same id always goes to the same parity).

Budgets (docs/accounting.md 12.2, docs/accounting.md 12.3). Under ``all-deletions`` each model gets half the slope in
both variants: a release history spanning a promotion shows both models, and the group of deleted
records may have touched both. Under ``per-request`` the overlap variant halves it too (each record
is in both models); the disjoint one gives each model the full slope, and a request whose records
are held by both models is charged half of it in each (``noise_share``), so a request never costs
more than the slope over the two models. A model that never applied a record pays nothing for it.

Deletions are applied to every model before the call returns, and :meth:`deletion_state` holds
both post-noise iterates: the stream layer makes it durable before any later release, so a
promoted standby never ships a state holding a deleted record without its noise.
"""

from __future__ import annotations

import math

import numpy as np

from .core.base import OnlineUnlearner
from .core.contribution import subject_keys
from .core.deletion import Deletion
from .core.mixed import MixedBatch, prepare_pass
from .core.record_keys import record_key
from .exceptions import BudgetExhausted, ConfigError, InvalidState
from .privacy.analysis.split import capacity_for_rate
from .privacy.analysis.units import unit_epsilon

__all__ = ["ROTATION_FORMAT", "Rotation", "VARIANTS", "charged_deletions", "model_budget", "planned_capacity"]

VARIANTS = ("overlap", "disjoint")
ROTATION_FORMAT = 1
_SLOTS = ("m0", "m1")  # active, standby in the exported arrays
_ARCHIVED = 16  # retired models' summaries kept in the state
KEY_CAP_FACTS = ("max_records_per_key", "records_over_key_cap")  # of the released (active) model


def model_budget(unit: str, variant: str, rho: float) -> float:
    """Each model's slope: half of ``rho``, except per-request disjoint (docs/accounting.md 12.3).

    >>> model_budget("all-deletions", "disjoint", 1.0), model_budget("per-request", "disjoint", 1.0)
    (0.5, 1.0)
    """
    if variant not in VARIANTS:
        raise ConfigError(f"rotation must be one of {', '.join(VARIANTS)}, got {variant!r}")
    return rho if (unit == "per-request" and variant == "disjoint") else rho / 2.0


def charged_deletions(rate: float, events: int, age: int | None = None) -> float:
    """Expected deletions charged to a model ``events`` old when a ``rate`` of the events are
    requests, each naming a record inserted uniformly among the last ``age`` inserts (None: every
    request names a record the model holds).

    A model is charged only for records it applied (docs/accounting.md 12.2): at age ``s`` it holds
    the ``min(s, age)`` most recent of the ``age`` records a request may name, so requests reach
    it at the rate ``rate min(1, s / age)``, and over ``events`` that integrates to
    ``rate events**2 / (2 age)`` up to ``age``, ``rate (events - age / 2)`` beyond.

    >>> charged_deletions(0.01, 20_000, 100_000), charged_deletions(0.01, 400_000, 100_000)
    (20.0, 3500.0)
    """
    if age is None or age <= 0:
        return rate * events
    if events <= age:
        return rate * events * events / (2.0 * age)
    return rate * (events - age / 2.0)


def planned_capacity(rate: float, lifetime_events: int, variant: str, age: int | None = None) -> int:
    """Deletions one model is planned to be charged in its lifetime at a deletion ``rate`` per event:
    all of them in the overlap variant, about half in the disjoint one (it holds half the records).
    With ``age`` (requests name records inserted uniformly among the last ``age``), only those of
    records the model holds: :func:`charged_deletions`. A lifetime shorter than the age is charged
    for a fraction of the requests (the others name records older than the model, which it never
    applied): the lever that makes short lifetimes cheap (docs/accounting.md 12.6).

    >>> planned_capacity(0.001, 400_000, "overlap"), planned_capacity(0.001, 400_000, "disjoint")
    (400, 200)
    >>> planned_capacity(0.01, 20_000, "overlap", age=100_000), planned_capacity(0.01, 20_000, "disjoint", 100_000)
    (20, 10)
    """
    model_budget("all-deletions", variant, 1.0)
    if age is None:
        events = lifetime_events if variant == "overlap" else max(1, lifetime_events // 2)
        return capacity_for_rate(rate, events)
    charged = charged_deletions(rate, lifetime_events, age) * (1.0 if variant == "overlap" else 0.5)
    return max(1, math.ceil(charged - 1e-9))


class Rotation:
    """Active and standby models of ``cls`` with the interface the stream layer uses of one model.

    >>> from worker.olu import PassiveOLU
    >>> r = Rotation(PassiveOLU, lifetime_events=4, dim=2, rho=1.0)
    >>> r.learn_many([f"r{i}" for i in range(5)], [[0.6, 0.8]] * 5, [1] * 5)
    5
    >>> r.generation, r.events, r.standby is not None, r.unlearn_request(["r4"]).outcome
    (1, 5, True, 'noised')
    """

    state_name = "rotation"

    def __init__(self, cls: type[OnlineUnlearner], *, lifetime_events: int, variant: str = "overlap",
                 noise_rng: np.random.Generator | None = None, **kwargs):
        if not getattr(cls, "rotates", False):
            raise ConfigError(f"algorithm {cls.algorithm!r} does not rotate (docs/accounting.md 12.5)")
        if isinstance(lifetime_events, bool) or not isinstance(lifetime_events, int) or lifetime_events < 2:
            raise ConfigError(f"model_lifetime_events must be an integer >= 2, got {lifetime_events!r}")
        unit = kwargs.get("privacy_unit", "all-deletions")
        rho = cls.resolve_rho(kwargs.get("rho"), kwargs.get("target_epsilon"), kwargs.get("delta", 1e-5), unit)
        per_model = {k: v for k, v in kwargs.items() if k not in ("rho", "target_epsilon")}
        per_model["rho"] = model_budget(unit, variant, rho)
        self.cls, self.variant, self.unit = cls, variant, unit
        self.lifetime_events, self.half = lifetime_events, lifetime_events // 2
        self.rho, self.target_epsilon = rho, kwargs.get("target_epsilon")
        self.model_kwargs = per_model
        self.config = {"algorithm": cls.algorithm, "lifetime_events": lifetime_events, "variant": variant,
                       "rho": rho, "target_epsilon": self.target_epsilon, "model": dict(per_model)}
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
    algorithm = property(lambda self: self.cls.algorithm, doc="The rotated algorithm (releases show it).")
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
    def model_age(self) -> int:
        """Events since the active model was born."""
        return self.events - (self.generation * self.half if self.generation else 0)

    def _fresh(self) -> OnlineUnlearner:
        return self.cls(noise_rng=self._noise_rng, **self.model_kwargs)

    # ----------------------------------------------------------------- learning
    def learn_one(self, record_id: str, x, y, *, subject=None) -> bool:
        xv = self.active.features.check(x)  # the one-row checks and errors of OnlineUnlearner.learn_one
        return self.learn_many([record_id], xv[None, :], [y], subjects=None if subject is None else [subject]) == 1

    def learn_many(self, record_ids, X, y, *, keys=None, subjects=None) -> int:
        """Rows in stream order, split at the rotation points; the whole batch is checked first."""
        return self.learn_prepared(*self.prepare_batch(record_ids, X, y, keys=keys), subjects=subjects)

    def prepare_batch(self, record_ids, X, y, *, keys=None):
        """The checked batch (``OnlineUnlearner.prepare_batch``: every model of a rotation has the same checks)."""
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
        """At a multiple of H: promote the standby (retiring the active), then start a fresh standby."""
        if self.standby is not None:
            old = self.active
            if self.retired:
                self.closed_pair_spent = max(self.closed_pair_spent, self.retired[-1]["rho"] + old.accountant.spent)
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
    def unlearn_one(self, record_id: str, *, post_state: dict | None = None) -> Deletion:
        return self.unlearn_request([record_id], post_state=post_state)

    def prefetch_deletes(self, keys: np.ndarray) -> None:
        """:meth:`OnlineUnlearner.prefetch_deletes` for every model."""
        for m in self.models:
            m.prefetch_deletes(keys)

    def unlearn_request(self, record_ids, *, post_state: dict | None = None, keys=None) -> Deletion:
        """Honour the request in every model (each with its own noise and charge). ``keys``: the
        ``record_key`` of each id, when the caller has them."""
        ids = list(record_ids)
        if keys is None:
            keys = [record_key(r) for r in ids] if ids and all(isinstance(r, str) for r in ids) else []
        models = self.models

        def holds(m) -> bool:  # an index lookup: asked only where the answer matters
            return any(k not in m.tombstones and m.index.holds(k) for k in keys)

        for m in models:  # nothing changes unless every holding model can take the charge
            if m.accountant.capacity_left == 0 and holds(m):
                raise BudgetExhausted(f"deletion capacity {m.accountant.capacity} of a rotated model is used up")
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
        return base.for_request(len(ids) - len(not_applied) - len(duplicates), not_applied, duplicates)

    def learn_and_unlearn(self, keys, X, y, spans, delete_rows, delete_keys, delete_ids,
                          subjects=None) -> MixedBatch | None:
        """:func:`worker.olu.core.mixed.learn_and_unlearn` of a rotation: the batch in one pass per
        model (each with its own noise and charges; under the disjoint variant each over its own
        rows), each delete answered and its state given as :meth:`unlearn_request` and
        :meth:`deletion_state` would. None, nothing changed, for a batch that reaches a promotion,
        a per-request delete both disjoint models hold (each then takes half the noise share), or
        where a pass does not apply to one of the models (the others' pops are undone)."""
        learned = sum(stop - first for first, stop in spans)
        if self.events % self.half + learned >= self.half:
            return None
        disjoint = self.variant == "disjoint" and self.standby is not None
        passes = []
        for m in self.models:
            own = _parity_spans(spans, keys, self._standby_parity(), m is self.standby) if disjoint else spans
            prepared = prepare_pass(m, keys, X, y, own, delete_rows, delete_keys, delete_ids, subjects)
            if prepared is None:
                break
            passes.append(prepared)
        shared = disjoint and self.unit == "per-request" and len(passes) == 2 and any(
            a and b for a, b in zip(passes[0].popped, passes[1].popped))
        if len(passes) < len(self.models) or shared:
            for prepared in reversed(passes):
                prepared.cancel()
            return None
        events, done = self.events, [p.run() for p in passes]
        self.events += learned
        deletions, at = [], []
        for k, (row, record_id) in enumerate(zip(delete_rows, delete_ids)):
            results, points = [b.deletions[k] for b in done], [b.points[k] for b in done]
            changed = [r for r in results if r.changed_model]
            self.deletions_applied += bool(changed)
            self.requests += bool(changed)
            base = changed[0] if changed else results[0]
            not_applied = (record_id,) if all(record_id in r.not_applied for r in results) else ()
            duplicates = results[0].duplicates
            deletions.append(base.for_request(1 - len(not_applied) - len(duplicates), not_applied, duplicates))
            before = sum(max(0, min(stop, row) - first) for first, stop in spans)  # events learned before it
            at.append(self._state_at(points, events + before))
        # the active model's, as learn_prepared counts (disjoint: each row is one model's)
        applied = sum(b.applied for b in done) if disjoint else done[0].applied
        states = [state if d.changed_model else None for d, state in zip(deletions, at)]
        return MixedBatch(applied, learned - applied, deletions, states, at)

    def _state_at(self, points: list[dict], events: int) -> dict:
        """:meth:`deletion_state` from each model's state (``MixedBatch.points``) at one deletion."""
        active = points[0]
        state = {"t": active["t"], "epoch": active["epoch"], "generation": self.generation, "events": events,
                 "deletions": sum(p["deletions"] for p in points), "deletions_applied": self.deletions_applied,
                 "z": active["z"], "models": [{k: v for k, v in p.items() if k != "z"} for p in points]}
        if len(points) > 1:
            state["z_standby"] = points[1]["z"]
        return state

    def deletion_state(self) -> dict:
        """The post-noise iterates of both models (``z``, ``z_standby``) and checkable counters."""
        state = {"t": self.t, "epoch": self.epoch, "generation": self.generation, "events": self.events,
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
        """The unit's figures over the window the rotation promises: under all-deletions the slope
        of the worst two consecutive generations (:meth:`pair_spent`), under per-request the slope of
        any charged request (``rho``, split over the models that held it; docs/accounting.md 12.3)."""
        active = self.active.accountant
        if self.unit == "all-deletions":
            spent = self.pair_spent()
            used = spent / self.rho
        else:
            spent, used = (self.rho if self.requests else 0.0), 0.0
        return {
            "unit": self.unit, "rho": self.rho, "target_epsilon": self.target_epsilon, "requests": self.requests,
            "eps_rdp_slope": spent, "budget_used": used, "epsilon": unit_epsilon(self.unit, spent, active.delta),
            "delta": active.delta, "deletions_capacity_left": active.capacity_left, **active.split_facts(),
            "generation": self.generation, "rotation": self.variant, "model_rho": active.budget,
            "model_age": self.model_age, "rotations": self.rotations, "lifetime_events": self.lifetime_events,
            **{k: v for k, v in self.active.privacy_unit_facts().items() if k in KEY_CAP_FACTS},
        }

    # ---------------------------------------------------------------------- state
    def export_state(self) -> dict:
        """Both models' states under ``m0_`` (active) and ``m1_`` (standby); round-trips bit-exactly."""
        meta = {"format": ROTATION_FORMAT, "algorithm": self.state_name, "config": dict(self.config),
                "events": self.events, "generation": self.generation, "rotations": self.rotations,
                "deletions_applied": self.deletions_applied, "requests": self.requests,
                "retired": [dict(r) for r in self.retired], "closed_pair_spent": self.closed_pair_spent,
                "models": []}
        arrays, shared = {}, {}
        for slot, model in zip(_SLOTS, self.models):
            state = model.export_state()
            meta["models"].append(state["meta"])
            arrays.update({f"{slot}_{k}": v for k, v in state["arrays"].items()})
            shared.update({f"{slot}_{k}": v for k, v in state.get("shared", {}).items()})
        return {"meta": meta, "arrays": arrays, "shared": shared}

    @classmethod
    def from_state(cls, state: dict, noise_rng: np.random.Generator | None = None) -> Rotation:
        """Rebuild from :meth:`export_state`; ``InvalidState`` on anything inconsistent."""
        try:
            meta, arrays, shared = state["meta"], state["arrays"], state.get("shared", {})
            if meta["algorithm"] != cls.state_name or meta["format"] != ROTATION_FORMAT:
                raise InvalidState(f"not a rotation state of format {ROTATION_FORMAT}")
            config = meta["config"]
            inner = [OnlineUnlearner.from_state(_slot(slot, m, arrays, shared), noise_rng)
                     for slot, m in zip(_SLOTS, meta["models"])]
            kwargs = dict(config["model"])
            kwargs.pop("rho")
            kwargs["rho" if config["target_epsilon"] is None else "target_epsilon"] = (
                config["rho"] if config["target_epsilon"] is None else config["target_epsilon"])
            rotation = cls(type(inner[0]), lifetime_events=config["lifetime_events"], variant=config["variant"],
                           noise_rng=noise_rng, **kwargs)
            if rotation.config != config:
                raise InvalidState("rotation config does not rebuild to itself")
            events = int(meta["events"])
            generation = max(0, events // rotation.half - 1)
            if int(meta["generation"]) != generation or len(inner) != 1 + (events >= rotation.half):
                raise InvalidState(f"{len(inner)} models at generation {meta['generation']} after {events} events")
            if any(type(m) is not rotation.cls for m in inner):
                raise InvalidState("the rotated models are of different algorithms")
            rotation.active, rotation.standby = inner[0], (inner[1] if len(inner) > 1 else None)
            rotation.events, rotation.generation = events, generation
            rotation.rotations = int(meta["rotations"])
            rotation.deletions_applied, rotation.requests = int(meta["deletions_applied"]), int(meta["requests"])
            rotation.retired = [dict(r) for r in meta["retired"]]
            # states before the field: the pairs the archive still shows
            rotation.closed_pair_spent = float(meta.get("closed_pair_spent", max(
                (a["rho"] + b["rho"] for a, b in zip(rotation.retired, rotation.retired[1:])), default=0.0)))
            return rotation
        except InvalidState:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InvalidState(f"malformed rotation state: {exc!r}") from None


def _slot(slot: str, meta: dict, arrays: dict, shared: dict) -> dict:
    prefix = slot + "_"
    return {"meta": meta, "arrays": {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)},
            "shared": {k[len(prefix):]: v for k, v in shared.items() if k.startswith(prefix)}}


def _parity_spans(spans, keys: np.ndarray, parity: int, standby: bool) -> list[tuple[int, int]]:
    """The rows of ``spans`` one disjoint model learns (the standby: keys whose low bit is
    ``parity``; the active: the others), as maximal runs (one vectorised pass over the batch)."""
    if not spans:
        return []
    inside = np.zeros(len(keys) + 1, np.bool_)  # a False sentinel: every run ends
    for first, stop in spans:
        inside[first:stop] = True
    low = (keys & np.uint64(1)) == np.uint64(parity)
    inside[:-1] &= low if standby else ~low
    edges = np.flatnonzero(np.diff(inside, prepend=False))  # run starts and stops, alternating
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))
