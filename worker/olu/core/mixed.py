"""A poll batch of inserts and single-record deletions in one compiled pass (passive OLU).

The stream's batches mix inserts with deletes. Taken one by one, each delete splits the batch:
a learning call for the inserts before it, then ``unlearn_request`` with ~40 Python calls (index,
tombstones, noise, accountant, ledger, meter), each running cold in the CPU's caches after the
batch's other work. :func:`learn_and_unlearn` does the same work in three phases instead:

1. Before the pass: the deletes' bookkeeping that does not depend on the inserts around them.
   The conflict checks and the pass's program (``kernels.mixed_pass.plan_pass``), which keys are
   tombstoned already (duplicates), each applied record's step ``u`` (the batch's pops in one
   search, ``AppliedIndex.pop_each``), the accountant's next noise multipliers, and one N(0, I)
   row per applied record.
2. One compiled pass (``kernels.mixed_pass.mixed_steps``): the inserts and deletions in row order. A
   deletion's shift needs the step ``tau`` it happens at, and its noise moves the iterate the
   later inserts learn from, so both run inside the pass. A record this batch inserted before
   its delete takes its step from the pass and leaves the index after it.
3. After the pass, in row order: the charges, ledger entries and noise meter from the pass's
   (tau, shift, sigma) of each deletion, and the batch's tombstones (``KeySet.add_many``).

Same state changes as the one-by-one path: the same formulas (each deletion its own noise draw,
charge and ledger entry), in the same order, so the same state bit for bit, the index's and the
tombstones' layout included. The phases may be reordered only because nothing in the batch reads
what they write before the pass does. Where that could fail, the function returns None having
changed nothing, and the caller takes the one-by-one path: a key inserted after its delete, or
twice, or deleted twice, a record applied more than once, an index tail that would fill inside
the pass (its merge would see the pops early), a step before the schedule's closed form, an
accountant that could refuse a charge (or whose sigma is not shift times a multiplier:
``per-request``), or any model but a plain passive one. A rotation
(worker/olu/rotation/mixed.py) runs the pass on each of its models, all of them prepared (phase 1)
before any runs, so that one whose pass does not apply leaves every model as it was
(:meth:`Pass.cancel`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .contribution import subject_keys
from .deletion import Deletion, charge_noised, exact_deletion
from .kernels.loader import compiled
from .schedules import StronglyConvex
from .sparse import SparseRows

_MAX_STEP = 2**32 - 1  # the index's step type (kernels/ogd.py)


class MixedBatch(NamedTuple):
    """What :func:`learn_and_unlearn` did. ``deletions[k]`` answers delete k as
    ``unlearn_request`` would; ``states[k]`` is the model's ``deletion_state()`` right after it
    when it changed the model, else None; ``points[k]`` is that state for every delete, changed
    or not (a rotation's delta holds both of its models' states at each of its deletions)."""

    applied: int
    skipped: int
    deletions: list[Deletion]
    states: list[dict | None]
    points: list[dict]


def learn_and_unlearn(model, keys, X, y, spans, delete_rows, delete_keys, delete_ids,
                      subjects=None) -> MixedBatch | None:
    """Learn the rows of ``spans`` ([(first, stop)], row order) and honour delete k at row
    ``delete_rows[k]`` (its record's key ``delete_keys[k]``, id ``delete_ids[k]``), interleaved
    in row order; rows in neither are passed over. ``keys``, ``X``, ``y``: the batch's checked
    rows (``prepare_batch``); ``subjects``: each row's partitioning key (hashes) for
    ``max_records_per_key``. None, with the model unchanged, when this path does not apply.
    A model with its own ``learn_and_unlearn`` (a rotation: one pass per model) is asked to."""
    own = getattr(model, "learn_and_unlearn", None)
    if own is not None:
        return own(keys, X, y, spans, delete_rows, delete_keys, delete_ids, subjects)
    prepared = prepare_pass(model, keys, X, y, spans, delete_rows, delete_keys, delete_ids,
                            subjects)
    return None if prepared is None else prepared.run()


#: What the compiled pass reproduces: a class whose instances take it keeps these as declared by the
#: class that set ``mixes_deletions`` (a subclass that changes one gets the one-by-one path).
MIXED_METHODS = ("_learn", "_after_learn", "_after_learn_batch", "_delete", "shift",
                 "_release_with_noise")


def keeps_mixed_steps(cls: type) -> bool:
    """``cls.mixes_deletions``, and every one of :data:`MIXED_METHODS` is the declaring class's.

    >>> from worker.olu.algorithms.passive import PassiveOLU, PassiveRestartOLU
    >>> class Hooked(PassiveOLU):
    ...     def _after_learn(self, key, step, x, y): pass
    >>> (keeps_mixed_steps(PassiveOLU), keeps_mixed_steps(PassiveRestartOLU),
    ...  keeps_mixed_steps(Hooked))
    (True, False, False)
    """
    if not cls.mixes_deletions:
        return False
    owner = next(k for k in cls.__mro__ if "mixes_deletions" in vars(k))
    return all(getattr(cls, name, None) is getattr(owner, name, None) for name in MIXED_METHODS)


def prepare_pass(model, keys, X, y, spans, delete_rows, delete_keys, delete_ids,
                 subjects=None) -> Pass | None:
    """Phase 1 of :func:`learn_and_unlearn`: every check, the program and the index pops; the
    :class:`Pass` to run (or to cancel, which leaves the model as it was), or None with the model
    unchanged where this path does not apply. Rows of a key past ``max_records_per_key`` leave
    the spans (passed over, as in ``learn_prepared``); they are counted only when the pass runs."""
    if not keeps_mixed_steps(type(model)):
        return None
    kernels, plan, schedule = compiled(), model.kernel_plan(), model.schedule
    if (plan is None or type(schedule) is not StronglyConvex or model.noise_share != 1.0
            or not delete_rows or model.t + len(keys) >= _MAX_STEP
            or isinstance(X, SparseRows)):  # the pass steps dense rows
        return None
    spans = np.ascontiguousarray(np.reshape(spans, (-1, 2)), np.int64)  # many under parity
    offered = int(np.sum(spans[:, 1] - spans[:, 0]))
    count_arrivals = None
    owners = (None if model.key_cap is None and model.subject_index is None
              else subject_keys(subjects, keys))
    if model.key_cap is not None:
        spans, count_arrivals = _admitted_spans(model.key_cap, owners, spans)
    learned = int(np.sum(spans[:, 1] - spans[:, 0]))
    if learned >= model.index.tail_room():  # a merge inside the pass would see the pops early
        return None
    keys, dkeys = np.ascontiguousarray(keys, np.uint64), np.asarray(delete_keys, np.uint64)
    ops = np.empty((len(spans) + len(delete_rows), 3), np.int64)
    in_batch = np.empty(len(delete_rows), np.int64)
    if not kernels.plan_pass(keys, spans,
                             np.array(delete_rows, np.int64),
                             dkeys, ops, in_batch):
        return None
    tombstoned = model.tombstones.holds_each(dkeys)
    popped = _pop_applied(model, delete_keys, tombstoned, in_batch.tolist())
    if popped is None:
        return None
    steps_u = np.array([steps[0] if steps else 0 for steps in popped], np.int64)
    applied = int(np.count_nonzero(steps_u))
    earliest = min([model.t + 1] + [steps[0] for steps in popped if steps and steps[0] > 0])
    multipliers = model.accountant.multipliers(applied)
    if (multipliers is None or earliest + 1 < schedule._regular_from
        or not earliest + schedule.t0 > 0):
        _undo_pops(model, popped)  # a step before the closed form (log_contraction), or a refusal
        return None
    checked = Pass(model, plan, (keys, X, y, ops), (learned, offered, count_arrivals),
                   (dkeys, delete_keys, delete_ids),
                   tombstoned, in_batch.tolist(), popped, steps_u, multipliers)
    if model.subject_index is not None:  # the learned rows' pairs, added when the pass runs
        checked.owners = owners
        checked.learned_rows = _span_rows(spans)
    return checked


def _span_rows(spans: np.ndarray) -> np.ndarray:
    """The rows of ``spans`` ((n, 2) array of (first, stop)), in order.

    >>> _span_rows(np.array([[2, 4], [7, 8]])).tolist()
    [2, 3, 7]
    """
    lengths = spans[:, 1] - spans[:, 0]
    before = np.cumsum(lengths) - lengths  # rows of the earlier spans
    return np.repeat(spans[:, 0] - before, lengths) + np.arange(int(lengths.sum()))


def _admitted_spans(cap, subjects: np.ndarray, spans: np.ndarray) -> tuple[np.ndarray, object]:
    """``spans`` without the rows ``cap`` refuses (maximal runs of the admitted rows), and the
    function that counts the spans' rows as arrived."""
    rows = _span_rows(spans)
    admitted, count_arrivals = cap.plan(subjects[rows])
    kept = rows[admitted]
    if len(kept) == 0:
        return np.zeros((0, 2), np.int64), count_arrivals
    cuts = np.flatnonzero(np.diff(kept) != 1) + 1
    starts, stops = kept[np.r_[0, cuts]], kept[np.r_[cuts - 1, len(kept) - 1]] + 1
    return np.stack([starts, stops], axis=1), count_arrivals


class Pass:
    """A checked batch whose index pops are done: :meth:`run` does phases 2 and 3, :meth:`cancel`
    undoes the pops (a rotation whose other model's pass does not apply)."""

    def __init__(self, model, plan, rows, sizes, deletes, tombstoned, in_batch, popped, steps_u,
                 multipliers):
        self.model, self.plan, self.rows, self.deletes = model, plan, rows, deletes
        # rows in the spans: learned, before the key cap
        self.learned, self.offered, self.count_arrivals = sizes
        self.tombstoned, self.in_batch, self.popped = tombstoned, in_batch, popped
        self.steps_u, self.multipliers = steps_u, multipliers

    def cancel(self) -> None:
        _undo_pops(self.model, self.popped)

    def run(self) -> MixedBatch:
        model, (keys, X, y, ops), (dkeys, delete_keys,
                                   delete_ids) = self.model, self.rows, self.deletes
        tombstoned, popped, steps_u = self.tombstoned, self.popped, self.steps_u
        noise = model._noise_rows(int(np.count_nonzero(steps_u)))
        z = np.array(model.z, dtype=np.float64)
        try:
            t, steps, taus, shifts, sigmas, z_after, _ = compiled().run_mixed(
                self.plan, z, model.t, model.index, model.tombstones, keys, X, y, ops,
                model.constants.L,
                model.ball.diameter, steps_u, np.asarray(self.multipliers, np.float64), noise)
        finally:
            noise[:] = 0.0  # the noise lives in the iterate only (invariant 1)
        for k, (dead, here) in enumerate(zip(tombstoned, self.in_batch)):
            if here >= 0 and not dead:  # the record this batch applied: out of the index now
                popped[k] = model.index.pop(delete_keys[k])
        # in delete order, as one by one: the key set's layout depends on it
        model.tombstones.add_many(dkeys[[not dead for dead in tombstoned]])
        n_applied, learned = int(np.count_nonzero(steps)), self.learned
        model.z, model.t = z, t
        model.counters["applied"] += n_applied
        model.counters["skipped_deleted"] += learned - n_applied
        if self.count_arrivals is not None:
            self.count_arrivals()
        if model.subject_index is not None:
            rows = self.learned_rows
            model.subject_index.add(self.owners[rows], keys[rows])
        deletions, points = _account(model, popped, tombstoned, delete_ids, steps_u, taus, shifts,
                                     sigmas, z_after)
        states = [p if d.changed_model else None for d, p in zip(deletions, points)]
        return MixedBatch(n_applied, self.offered - n_applied, deletions, states, points)


def _pop_applied(model, delete_keys, tombstoned, in_batch) -> list[list[int]] | None:
    """Each delete's applied steps, popped from the index ([] for a duplicate or a record never
    applied; [-(r + 1)] for a record row r of this batch inserts); None, with every pop undone,
    if a record was applied more than once."""
    index = model.index
    index.begin_pops()
    fresh = [k for k, dead in zip(delete_keys, tombstoned) if not dead]
    found = iter(index.pop_each(fresh))
    popped = []
    for dead, here in zip(tombstoned, in_batch):
        steps = [] if dead else next(found)
        popped.append(steps if here < 0 or dead else [-(here + 1)] + steps)
    if any(len(steps) > 1 for steps in popped):
        _undo_pops(model, popped)
        return None
    return popped


def _undo_pops(model, popped) -> None:
    for _ in popped:  # newest first, as undo_pop requires; a duplicate's [] popped nothing
        model.index.undo_pop()


def _account(model, popped, tombstoned, ids, steps_u, taus, shifts, sigmas, z_after):
    """Phase 3: charge, ledger and meter of each deletion in row order; the answers, and where
    the model stands after each delete (its ``deletion_state()``)."""
    accountant, epoch, ledger, meter = (model.accountant, model.epoch, model.ledger,
                                        model.noise_meter)
    earlier = accountant.lifetime_deletions - accountant.deletions  # of closed epochs
    facts = zip(steps_u.tolist(), taus.tolist(), shifts.tolist(), sigmas.tolist(), z_after)
    deletions, points = [], []
    for j, (steps, (u, tau, shift, sigma, z)) in enumerate(zip(popped, facts)):
        if not steps:
            dead = tombstoned[j]
            deletions.append(Deletion("duplicate" if dead else "not_applied", not_applied=() if dead
                                      else (ids[j],),
                                      duplicates=(ids[j],) if dead else ()))
        elif shift == 0.0:
            deletions.append(exact_deletion(accountant, (u,), records=1))
        else:  # the charge cannot refuse: multipliers() said so
            deletions.append(charge_noised(accountant, ledger, meter, epoch=epoch, tau=tau,
                                           steps=(u,), shift=shift,
                                           sigma=sigma, records=1))
        model.deletions_applied += bool(steps)
        points.append(
            {"z": z, "t": tau, "epoch": epoch, "deletions": earlier + accountant.deletions,
             "deletions_applied": model.deletions_applied})
    return deletions, points
