"""Compiled (numba) pass over a poll batch of inserts and passive deletions in row order
(core/mixed.py drives it): the program (:func:`plan_pass`), the pass (:func:`mixed_steps`) and
its driver (:func:`run_mixed`), each deletion's shift and sigma from ``worker.olu.formulas``, as
``PassiveOLU._delete`` computes them (see :mod:`.ogd` for the arithmetic rules the kernels keep)."""

from __future__ import annotations

import numpy as np

from ....compiled.intrinsics import data_pointer
from ....compiled.jit import inline, jit
from ....compiled.lanes import lane_axpy
from ....compiled.sorted_keys import lower_bound
from ... import formulas
from .ogd import DONE, TAIL_FULL, contiguous, ogd_steps, paced, project, tombstone_arrays

_strongly_convex_step = inline(formulas.strongly_convex_step)
_shifted_log_contraction = inline(formulas.shifted_log_contraction)
_sensitivity = inline(formulas.sensitivity)
_passive_shift = inline(formulas.passive_shift)
_deletion_sigma = inline(formulas.deletion_sigma)


@jit
def _unlearn_step(z, radius, tau, mu, t0, lipschitz, diameter, u, multiplier, noise_row):
    """One passive deletion of the record applied at step ``u``, at step ``tau``, on ``z`` in place:
    ``PassiveOLU._delete`` for a StronglyConvex schedule past
    its irregular head, formula by formula.

    log Gamma_{u,tau} = log(u + t0) - log(tau + t0), Delta_u = min(eta_u L, D),
    shift = Gamma * Delta_u, sigma from ``multiplier`` (``formulas.deletion_sigma``: the
    accountant's next multiplier, or minus a per-request divisor), then
    z <- Proj(z + sigma * noise_row). A shift of 0 (every influence contracted away) adds no noise.
    Returns (shift, sigma)."""
    lc = _shifted_log_contraction(t0, u, tau)
    shift = _passive_shift(lc, _sensitivity(_strongly_convex_step(mu, t0, u), lipschitz, diameter))
    if shift == 0.0:
        return 0.0, 0.0
    sigma = _deletion_sigma(shift, multiplier)
    project(z, lane_axpy(data_pointer(z), data_pointer(noise_row), 0, z.shape[0], sigma), radius)
    return shift, sigma


@jit(nogil=False)
def plan_pass(keys, spans, rows, dkeys, ops, here):
    """The program of :func:`mixed_steps` for a poll batch, or False where the pass cannot keep
    the one-by-one order: a key deleted twice, inserted twice in the learned rows, or inserted
    after its delete. ``spans`` (m x 2: first, stop) are the rows to learn and ``rows`` (ascending)
    the deletes' rows, ``dkeys`` their keys. Fills ``ops`` (m + len(rows) entries, row order: see
    :func:`mixed_steps`) and ``here[k]``, the learned row that inserts delete k's key before it
    (-1: none, the usual case)."""
    n_del = dkeys.shape[0]
    order = np.argsort(dkeys)
    wanted = dkeys[order]
    for i in range(1, n_del):
        if wanted[i] == wanted[i - 1]:
            return False
    here[:] = -1
    for s in range(spans.shape[0]):
        for j in range(spans[s, 0], spans[s, 1]):
            key = keys[j]
            if key < wanted[0] or key > wanted[n_del - 1]:
                continue
            lo = lower_bound(wanted, n_del, key)
            if wanted[lo] == key:
                k = order[lo]
                if here[k] >= 0 or j > rows[k]:
                    return False
                here[k] = j
    a, b, m = 0, 0, 0
    while a < spans.shape[0] or b < n_del:
        if b >= n_del or (a < spans.shape[0] and spans[a, 0] < rows[b]):
            ops[m, 0], ops[m, 1], ops[m, 2] = spans[a, 0], spans[a, 1], -1
            a += 1
        else:
            ops[m, 0], ops[m, 1], ops[m, 2] = rows[b], rows[b], b
            b += 1
        m += 1
    return True


@jit
def mixed_steps(loss_kind, lam, sched_kind, sa, sb, radius, z, X, y, keys, tombstones,
                recent_tombstones,
                tomb_filter, tail_keys, tail_steps, tail_len, t, steps_out, ops, op, start,
                lipschitz, diameter,
                steps_u, multipliers, noise, drawn, taus, shifts, sigmas, z_after):
    """A poll batch of inserts and passive deletions in one call, from ``ops[op]`` and row ``start``
    (a StronglyConvex schedule: ``sa`` = mu, ``sb`` = t0).

    ``ops[m] = (first, stop, k)``: learn rows first..stop-1 as :func:`ogd_steps` does, then, when
    k >= 0, apply deletion k (:func:`_unlearn_step`) of the record applied at step ``steps_u[k]``,
    or, where that is -(r + 1), of the record row r of this batch applied (0: nothing to apply). The
    ``drawn``-th deletion that adds noise takes ``noise[drawn]`` and ``multipliers[drawn]`` (the
    accountant's next ones). Deletion k leaves its record's step in ``steps_u[k]``, ``shifts[k]``
    and ``sigmas[k]``; every delete k, applied or not, the step it happens at in ``taus[k]`` and the
    (post-noise) iterate after it in ``z_after[k]``. Stops like
    :func:`ogd_steps` (tail full, step overflow), before a row.

    Returns (next op, next row, t, tail length, noise rows used, stop reason).
    """
    m = ops.shape[0]
    j = start
    while op < m:
        stop = ops[op, 1]
        if j < stop:
            j, t, tail_len, _, reason = ogd_steps(loss_kind, lam, sched_kind, sa, sb, radius, z,
                                                  X[:stop], y[:stop],
                                                  keys[:stop], tombstones, recent_tombstones,
                                                  tomb_filter,
                                                  tail_keys, tail_steps, tail_len, t, steps_out, j)
            if reason != DONE:
                return op, j, t, tail_len, drawn, reason
        k = ops[op, 2]
        if k >= 0 and steps_u[k] != 0:
            # 0: a delete that changes nothing (duplicate, never applied)
            if steps_u[k] < 0:  # applied in this batch, at the step the pass gave its row
                steps_u[k] = steps_out[-steps_u[k] - 1]
            shift, sigma = _unlearn_step(z, radius, t, sa, sb, lipschitz, diameter, steps_u[k],
                                         multipliers[drawn],
                                         noise[drawn])
            shifts[k], sigmas[k] = shift, sigma
            if shift != 0.0:
                drawn += 1
        if k >= 0:
            # where the model stands at every delete, changed or not (a rotation's other model)
            taus[k] = t
            z_after[k, :] = z
        op += 1
        if op < m:
            j = ops[op, 0]
    return op, j, t, tail_len, drawn, DONE



def run_mixed(plan, z, t, index, tombstones, keys, X, y, ops, lipschitz, diameter, steps_u,
              multipliers, noise):
    """:func:`run_batch` for a batch with deletions (:func:`mixed_steps`), pacing the index's merges
    the same way. ``steps_u`` is updated in place. Returns (t, steps, taus, shifts, sigmas, z_after,
    stop reason); on a step overflow the ops from the stopping one on were not applied."""
    lk, lam, sk, sa, sb, radius = plan
    (keys, X, y), (tomb, recent,
                   tomb_filter) = contiguous(keys, X, y, z), tombstone_arrays(tombstones)
    noise = np.ascontiguousarray(noise, dtype=np.float64)
    k = len(steps_u)
    steps = np.zeros(len(keys), np.int64)
    taus, shifts, sigmas = np.zeros(k, np.int64), np.zeros(k), np.zeros(k)
    z_after = np.empty((k, len(z)))
    op, j, t, drawn, reason = 0, int(ops[0, 0]) if len(ops) else 0, int(t), 0, DONE
    while True:
        tail_keys, tail_steps, tail_len = index.tail_buffers()
        op, j, t, tail_len, drawn, reason = mixed_steps(
            lk, lam, sk, sa, sb, radius, z, X, y, keys, tomb, recent, tomb_filter, tail_keys,
            tail_steps, tail_len, t,
            steps, ops, op, j, lipschitz, diameter, steps_u, multipliers, noise, drawn, taus,
            shifts, sigmas, z_after)
        paced(index, tail_len, reason)
        if reason != TAIL_FULL:
            return t, steps, taus, shifts, sigmas, z_after, reason
