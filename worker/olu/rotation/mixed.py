"""A rotation's mixed pass: a poll batch's inserts and deletes in one pass per model.

The rotation form of core/mixed.py: every model's pass is prepared before any runs (so a model
the pass does not apply to leaves every model as it was), under the disjoint variant each model
over the rows of its own key parity, and each delete answered as ``unlearn_request`` would.
"""

from __future__ import annotations

import numpy as np

from ..core.mixed import MixedBatch, prepare_pass


class RotationMixedPass:
    """``learn_and_unlearn`` of a :class:`~worker.olu.rotation.Rotation` (its ``models``,
    ``events``, ``half``, ``variant``, ``unit`` and counters are the rotation's)."""

    def learn_and_unlearn(self, keys, X, y, spans, delete_rows, delete_keys, delete_ids,
                          subjects=None) -> MixedBatch | None:
        """:func:`worker.olu.core.mixed.learn_and_unlearn` of a rotation: the batch in one pass per
        model (each with its own noise and charges; under the disjoint variant each over its own
        rows), each delete answered and its state given as :meth:`unlearn_request` and
        :meth:`deletion_state` would; a batch whose last row reaches a promotion is promoted
        after it, as :meth:`learn_prepared` does. None, nothing changed, for a batch that passes
        a promotion (or has a delete after the row reaching it), a per-request delete both
        disjoint models hold (each then takes half the noise share), or where a pass does not
        apply to one of the models (the others' pops are undone)."""
        spans = np.asarray(spans, np.int64).reshape(-1, 2)
        learned = int(np.sum(spans[:, 1] - spans[:, 0]))
        room = self.events_to_renewal
        if learned > room or learned == room and max(delete_rows) >= spans[-1, 1]:
            return None  # a promotion inside the batch (batches/apply.py splits the batch there)
        disjoint = self.variant == "disjoint" and self.standby is not None
        passes = []
        for m in self.models:
            if disjoint:
                own = parity_spans(spans, keys, self._standby_parity(), m is self.standby)
            else:
                own = spans
            prepared = prepare_pass(m, keys, X, y, own, delete_rows, delete_keys, delete_ids,
                                    subjects)
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
        renewed = learned == room
        # the events learned before each delete (a delete is never inside a span)
        learned_before = np.concatenate([[0], np.cumsum(spans[:, 1] - spans[:, 0])])[
            np.searchsorted(spans[:, 0], np.asarray(delete_rows, np.int64))].tolist()
        deletions, at = [], []
        for k, record_id in enumerate(delete_ids):
            results, points = [b.deletions[k] for b in done], [b.points[k] for b in done]
            changed = [r for r in results if r.changed_model]
            self.deletions_applied += bool(changed)
            self.requests += bool(changed)
            base = changed[0] if changed else results[0]
            missed = all(record_id in r.not_applied for r in results)
            not_applied = (record_id,) if missed else ()
            duplicates = results[0].duplicates
            records = 1 - len(not_applied) - len(duplicates)
            deletions.append(base.for_request(records, not_applied, duplicates))
            at.append(self._state_at(points, events + learned_before[k]))
        # the active model's, as learn_prepared counts (disjoint: each row is one model's)
        applied = sum(b.applied for b in done) if disjoint else done[0].applied
        states = [state if d.changed_model else None for d, state in zip(deletions, at)]
        if renewed:  # its last row reached the promotion, after every delete (learn_prepared's)
            self._rotate()
        return MixedBatch(applied, learned - applied, deletions, states, at)

    def _state_at(self, points: list[dict], events: int) -> dict:
        """:meth:`deletion_state` from each model's state (``MixedBatch.points``) at one
        deletion."""
        active = points[0]
        state = {"t": active["t"], "epoch": active["epoch"], "generation": self.generation,
                 "events": events, "deletions": sum(p["deletions"] for p in points),
                 "deletions_applied": self.deletions_applied, "z": active["z"],
                 "models": [{k: v for k, v in p.items() if k != "z"} for p in points]}
        if len(points) > 1:
            state["z_standby"] = points[1]["z"]
        return state


def parity_spans(spans: np.ndarray, keys: np.ndarray, parity: int, standby: bool) -> np.ndarray:
    """The rows of ``spans`` ((n, 2): first, stop) one disjoint model learns (the standby: keys
    whose low bit is ``parity``; the active: the others), as maximal runs (one vectorised pass
    over the batch)."""
    if not len(spans):
        return spans
    inside = np.zeros(len(keys) + 1, np.bool_)  # a False sentinel: every run ends
    for first, stop in spans:
        inside[first:stop] = True
    low = (keys & np.uint64(1)) == np.uint64(parity)
    inside[:-1] &= low if standby else ~low
    edges = np.flatnonzero(np.diff(inside, prepend=False))  # run starts and stops, alternating
    return np.stack([edges[0::2], edges[1::2]], axis=1)
