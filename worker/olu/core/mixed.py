"""A poll batch of inserts and single-record deletions in one compiled pass (passive OLU).

The stream's batches mix inserts with deletes. Taken one by one, each delete splits the batch:
a learning call for the inserts before it, then ``unlearn_request`` with ~40 Python calls (index,
tombstones, noise, accountant, ledger, meter), each running cold in the CPU's caches after the
batch's other work. :func:`learn_and_unlearn` does the same work in three phases instead:

1. Before the pass, in Python: the deletes' bookkeeping that does not depend on the inserts
   around them. Which keys are tombstoned already (duplicates), each applied record's step ``u``
   (popped from the index), the record's sensitivity and the first term of its contraction, the
   accountant's next noise multipliers, and one N(0, I) row per applied record.
2. One compiled pass (``kernels.ogd.mixed_steps``): the inserts and deletions in row order. A
   deletion's shift needs the step ``tau`` it happens at, and its noise moves the iterate the
   later inserts learn from, so both run inside the pass.
3. After the pass, in Python, in row order: the charges, ledger entries and noise meter, from
   the pass's (tau, shift, sigma) of each deletion.

Same state changes as the one-by-one path: the same formulas (each deletion its own noise draw,
charge and ledger entry), in the same order. The phases may be reordered only because nothing in
the batch reads what they write before the pass does. Where that could fail, the function
returns None having changed nothing, and the caller takes the one-by-one path: a delete of a
key the batch also inserts, a key deleted twice, a record applied more than once, a step before
the schedule's closed form, an accountant that could refuse a charge (or whose sigma is not
shift times a multiplier: ``per-request``), or any model but a plain passive one.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

import numpy as np

from .deletion import Deletion
from .index import merge_kernels
from .kernels.loader import compiled
from .schedules import StronglyConvex

_MAX_STEP = 2**32 - 1  # the index's step type (kernels/ogd.py)


class MixedBatch(NamedTuple):
    """What :func:`learn_and_unlearn` did. ``deletions[k]`` answers delete k as
    ``unlearn_request`` would; ``states[k]`` is the model's ``deletion_state()`` right after it
    when it changed the model, else None."""

    applied: int
    skipped: int
    deletions: list[Deletion]
    states: list[dict | None]


def learn_and_unlearn(model, keys, X, y, spans, delete_rows, delete_keys, delete_ids) -> MixedBatch | None:
    """Learn the rows of ``spans`` ([(first, stop)], row order) and honour delete k at row
    ``delete_rows[k]`` (its record's key ``delete_keys[k]``, id ``delete_ids[k]``), interleaved
    in row order; rows in neither are passed over. ``keys``, ``X``, ``y``: the batch's checked
    rows (``prepare_batch``). None, with the model unchanged, when this path does not apply."""
    if not type(model).__dict__.get("mixes_deletions", False):
        return None
    kernels, plan, schedule = compiled(), model.kernel_plan(), model.schedule
    if (plan is None or type(schedule) is not StronglyConvex or model.noise_share != 1.0 or not delete_rows
            or model.t + len(keys) >= _MAX_STEP):
        return None
    learned = sum(stop - first for first, stop in spans)
    if learned >= model.index.tail_room():  # a merge inside the pass would see the pops early
        return None
    dkeys = np.asarray(delete_keys, np.uint64)
    in_batch = _inserted_here(keys, spans, dkeys, delete_rows)
    if in_batch is None:
        return None
    tombstoned = [k in model.tombstones for k in delete_keys]
    popped = _pop_applied(model, delete_keys, tombstoned, in_batch)
    if popped is None:
        return None
    applied = [k for k, steps in enumerate(popped) if steps]
    steps_u = np.array([popped[k][0] for k in applied], np.int64)
    earliest = min([model.t + 1] + [steps[0] for steps in popped if steps and steps[0] > 0])
    multipliers = model.accountant.multipliers(len(applied))
    if multipliers is None or earliest + 1 < schedule._regular_from or not earliest + schedule.t0 > 0:
        _undo_pops(model, popped)  # a step before the closed form (log_contraction), or a refusal
        return None
    noise = model._noise_rows(len(applied))
    ops = _ops(spans, [delete_rows[k] for k in applied])
    z = np.array(model.z, dtype=np.float64)
    try:
        t, steps, taus, shifts, sigmas, z_after, _ = kernels.run_mixed(
            plan, z, model.t, model.index, model.tombstones, keys, X, y, ops, model.constants.L,
            model.ball.diameter, steps_u, np.asarray(multipliers, np.float64), noise)
    finally:
        noise[:] = 0.0  # the noise lives in the iterate only (invariant 1)
    for k, (dead, here) in enumerate(zip(tombstoned, in_batch)):
        if here >= 0 and not dead:  # the record this batch applied: out of the index now
            popped[k] = model.index.pop(delete_keys[k])
    # in delete order, as one by one: the key set's layout depends on it
    model.tombstones.add_many(dkeys[[not dead for dead in tombstoned]])
    n_applied = int(np.count_nonzero(steps))
    model.z, model.t = z, t
    model.counters["applied"] += n_applied
    model.counters["skipped_deleted"] += learned - n_applied
    deletions, states = _account(model, popped, tombstoned, delete_ids, steps_u, taus, shifts, sigmas, z_after)
    return MixedBatch(n_applied, learned - n_applied, deletions, states)


def _inserted_here(keys, spans, dkeys, delete_rows) -> list[int] | None:
    """For each delete, the learned row of this batch that inserts its key before it, or -1;
    None when the pass cannot keep the order: a key deleted twice, inserted twice, or inserted
    after its delete (the one-by-one path then keeps it)."""
    order = np.argsort(dkeys)
    wanted = dkeys[order]
    if (wanted[1:] == wanted[:-1]).any():
        return None
    found = np.empty(len(keys), np.int64)
    found = found[:merge_kernels().rows_with_keys(np.ascontiguousarray(keys, np.uint64), wanted, found)]
    here = [-1] * len(dkeys)
    firsts = [first for first, _ in spans]
    for row in found.tolist():  # few rows, if any: deletes of the batch's own inserts
        span = bisect.bisect_right(firsts, row) - 1
        if span < 0 or row >= spans[span][1]:
            continue  # a row the pass does not learn
        k = int(order[np.searchsorted(wanted, keys[row])])
        if here[k] >= 0 or row > delete_rows[k]:
            return None
        here[k] = row
    return here


def _pop_applied(model, delete_keys, tombstoned, in_batch) -> list[list[int]] | None:
    """Each delete's applied steps, popped from the index ([] for a duplicate or a record never
    applied; [-(r + 1)] for a record row r of this batch inserts); None, with every pop undone,
    if a record was applied more than once."""
    index = model.index
    index.begin_pops()
    popped = []
    for k, dead, here in zip(delete_keys, tombstoned, in_batch):
        steps = [] if dead else index.pop(k)
        popped.append(steps if here < 0 or dead else [-(here + 1)] + steps)
        if len(popped[-1]) > 1:
            _undo_pops(model, popped)
            return None
    return popped


def _undo_pops(model, popped) -> None:
    for _ in popped:  # newest first, as undo_pop requires; a duplicate's [] popped nothing
        model.index.undo_pop()


def _ops(spans, rows) -> np.ndarray:
    """The pass's program in row order: (first, stop, -1) learns a span, (row, row, k) applies
    deletion k (a deletion's row is in no span)."""
    ops = np.empty((len(spans) + len(rows), 3), np.int64)
    ops[:len(spans), :2] = spans if spans else np.empty((0, 2), np.int64)
    ops[:len(spans), 2] = -1
    ops[len(spans):, 0] = ops[len(spans):, 1] = rows
    ops[len(spans):, 2] = np.arange(len(rows))
    return ops[np.argsort(ops[:, 0], kind="stable")]


def _account(model, popped, tombstoned, ids, steps_u, taus, shifts, sigmas, z_after):
    """Phase 3: charge, ledger and meter of each deletion in row order, and the answers."""
    accountant, epoch, ledger, meter = model.accountant, model.epoch, model.ledger, model.noise_meter
    earlier = accountant.lifetime_deletions - accountant.deletions  # of closed epochs
    facts = zip(steps_u.tolist(), taus.tolist(), shifts.tolist(), sigmas.tolist(), z_after)
    deletions, states = [], []
    for j, steps in enumerate(popped):
        if not steps:
            dead = tombstoned[j]
            deletions.append(Deletion("duplicate" if dead else "not_applied", not_applied=() if dead else (ids[j],),
                                      duplicates=(ids[j],) if dead else ()))
            states.append(None)
            continue
        u, tau, shift, sigma, z = next(facts)
        if shift == 0.0:
            result = Deletion("exact", accountant.deletions, 0.0, 0.0, (u,), records=1)
        else:
            accountant.charge(shift, sigma)  # cannot refuse: multipliers() said so
            i = accountant.deletions
            ledger.append_core(i, epoch, tau, u, shift, sigma, accountant.rho)
            meter.add(epoch, tau, sigma)
            result = Deletion("noised", i, sigma, shift, (u,), records=1)
        model.deletions_applied += 1
        deletions.append(result)
        states.append({"z": z, "t": tau, "epoch": epoch, "deletions": earlier + accountant.deletions,
                       "deletions_applied": model.deletions_applied})
    return deletions, states
