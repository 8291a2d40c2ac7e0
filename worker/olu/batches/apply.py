"""A poll batch through the engine in one call: the route is chosen here, not by the stream.

:func:`apply_batch` takes the batch's steps in order and returns one outcome per step. Three ways
to the same state (each bit-identical to learning and unlearning record by record, invariant 3):

1. **checked columns**: a batch split by deletes whose inserts came as one set of columns (the
   compiled scan) is checked by the model once, not stretch by stretch (a check per stretch cost
   ~30 us, once per deletion at 1% deletes), and its test-then-train loss is measured once;
2. **one compiled pass** (core/mixed.py) over its inserts and single-record deletes up to the
   last delete, where that pass applies (one pass per stretch between a rotation's renewal
   points); the inserts after the last delete are left to route 1, so a release right after the
   last deletion shows the state there;
3. **step by step**: ``learn_many`` per stretch (a refused row found one by one, the rest
   learned), ``unlearn_request`` per deletion request, the deletes looked up together first.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.deletion import Deletion
from ..core.mixed import learn_and_unlearn
from ..core.record_keys import record_keys
from ..exceptions import BudgetExhausted, ConfigError, InvalidExample
from .guarantee import request_guarantee
from .published import Published
from .quality import ALL_ROWS, mean_loss
from .steps import Applied, Batch, Forget, Forgotten, Learn, Learned


def apply_batch(model, batch: Batch) -> Applied:
    """Apply ``batch`` (its inserts and deletion requests in order) to ``model``; module doc."""
    out = Applied()
    checked = _checked(model, batch)
    rest = batch.steps
    if checked is not None:
        _observe(out, batch, model, checked[1], checked[2], batch.columns.accepted, positions=True)
        rest = _passes(model, batch, checked, out)
    _prefetch(model, rest)
    for step in rest:
        if isinstance(step, Learn):
            _add_learned(out, step, _learn(model, batch, step, checked, out))
            continue
        forgotten = _forget(model, step)
        out.outcomes.append(forgotten)
        if forgotten.partial:
            break
    return out


class _Piece(Learn):
    """The part of a :class:`Learn` step after a renewal point (its outcome joins the part
    before it: one outcome per step of the batch)."""

    __slots__ = ()


def _add_learned(out: Applied, step, learned: Learned) -> None:
    if isinstance(step, _Piece):
        out.outcomes[-1].rejected.extend(learned.rejected)
    else:
        out.outcomes.append(learned)


def _observe(out: Applied, batch: Batch, model, X, y, rows=ALL_ROWS,
             positions: bool = False) -> None:
    """The model's mean loss on rows about to be learned (test-then-train), if measured."""
    if not batch.quality or len(y) == 0:
        return
    mean = mean_loss(model, X, y, rows, positions)
    if math.isfinite(mean):
        out.losses.append(mean)


def _subjects(batch: Batch, start: int, stop: int):
    return None if batch.subjects is None else batch.subjects[start:stop]


def _checked(model, batch: Batch):
    """The batch's columns through the model's checks, row j for position j, as (keys, X, y);
    None without columns, for a single step, or when a row fails (then each stretch finds its
    bad rows). The rows of other records (deletes, dead letters) are zeroed first: they pass
    the checks and are never learned, and the inserts need no copy out of the batch."""
    cols = batch.columns
    if cols is None or len(batch.steps) < 2:
        return None
    declined = ~cols.accepted
    if not hasattr(cols.X, "indptr"):  # a declined record's sparse row is empty already
        cols.X[declined] = 0.0
    cols.y[declined] = getattr(model.loss, "classes", (0.0,))[0]  # a label the loss takes
    try:
        return model.prepare_batch(None, cols.X, cols.y, keys=cols.keys)
    except InvalidExample:
        return None


def _learn(model, batch: Batch, step: Learn, checked, out: Applied) -> Learned:
    count = step.stop - step.start
    subjects = _subjects(batch, step.start, step.stop)
    if step.X is None and checked is not None:
        keys, X, y = (a[step.start:step.stop] for a in checked)
        applied = model.learn_prepared(keys, X, y, subjects)
        out.applied += applied
        out.skipped += count - applied
        return Learned()
    if step.X is None:
        cols = batch.columns
        X, y, ids, keys = (cols.X[step.start:step.stop], cols.y[step.start:step.stop], None,
                           cols.keys[step.start:step.stop])
    else:
        X, y, ids, keys = step.X, step.y, step.ids, step.keys
    _observe(out, batch, model, X, y)
    learned = Learned()
    try:
        applied = model.learn_many(ids, X, y, keys=keys, subjects=subjects)
    except InvalidExample:
        # Rare: find the bad rows one by one (learn_many changed nothing, and one row of it is
        # learn_one bit for bit, so the result does not depend on this path being taken).
        applied = 0
        for j in range(count):
            one = slice(j, j + 1)
            try:
                applied += model.learn_many(None if ids is None else ids[one], X[one], y[one],
                                            keys=None if keys is None else keys[one],
                                            subjects=None if subjects is None else subjects[one])
            except InvalidExample as bad:
                learned.rejected.append((step.start + j, bad))
    out.applied += applied
    out.skipped += count - applied - len(learned.rejected)  # ids deleted before they arrived
    return learned


def _forget(model, step: Forget) -> Forgotten:
    """One deletion request: one engine call for all its ids (a subject's: the records the model
    learned under it; none, and nothing to unlearn, for a subject it never saw)."""
    ids, keys = list(step.ids), step.keys
    if step.subject is not None:
        if not model.forgets_by_key:
            return Forgotten(refused=ConfigError(
                "a request to forget a subject, but this model keeps no records by subject "
                "(forget_by_key off when it was created)"))
        found = model.subject_records(step.subject)
        if not len(found):
            return Forgotten(Deletion("not_applied"))
        keys = found.tolist()
        ids = [f"{k:016x}" for k in keys]  # stand-ins: the engine reports by id, never stores them
    z_before = model.z  # the engine replaces z on every change, never writes into it
    try:
        deletion = model.unlearn_request(ids, post_state=step.post_state, keys=keys)
    except BudgetExhausted as exc:
        return Forgotten(refused=exc, partial=model.z is not z_before)
    if not deletion.changed_model:
        return Forgotten(deletion)
    published = Published.of(model) if step.publish else None
    return Forgotten(deletion, model.deletion_state() if step.post_state is None else None,
                     published, guarantee=request_guarantee(model, deletion))


def _prefetch(model, steps: list) -> None:
    """Look the deletes of ``steps`` up at once (one compiled call each for the index and the
    tombstones instead of one per delete). Only a hint: results are the same without it."""
    wanted = [k for step in steps if isinstance(step, Forget) and step.keys for k in step.keys]
    if len(wanted) >= 2:
        model.prefetch_deletes(np.array(wanted, np.uint64))


def _passes(model, batch: Batch, checked, out: Applied) -> list:
    """The steps up to the batch's last delete in compiled passes (core/mixed.py), one per
    stretch between the model's renewal points (a rotation renews between two rows, which one
    pass cannot do); the steps left for the step-by-step route (all of them from the first
    stretch the pass does not apply to, the model as that stretch found it)."""
    rest = batch.steps
    while any(isinstance(step, Forget) for step in rest):
        taken, after = _stretch(model, rest)
        if any(isinstance(step, Forget) for step in taken):
            if not _one_pass(model, batch, checked, taken, out):
                return rest
        else:  # inserts up to a renewal, no delete among them
            for step in taken:
                _add_learned(out, step, _learn(model, batch, step, checked, out))
        rest = after
    return rest


def _stretch(model, steps: list) -> tuple[list, list]:
    """``steps`` up to their last delete, or to the model's next renewal point if that comes
    first (the Learn step it falls in split there: the rows before it, and a :class:`_Piece`
    after); and the steps after."""
    last = max(k for k, step in enumerate(steps) if isinstance(step, Forget))
    room = getattr(model, "events_to_renewal", None)
    if room is not None:
        for k, step in enumerate(steps[:last + 1]):
            if not isinstance(step, Learn):
                continue
            rows = step.stop - step.start
            if rows >= room:
                cut = step.start + room
                head = Learn(step.start, cut) if not isinstance(step, _Piece) else _Piece(
                    step.start, cut)
                tail = [_Piece(cut, step.stop)] if cut < step.stop else []
                return steps[:k] + [head], tail + steps[k + 1:]
            room -= rows
    return steps[:last + 1], steps[last + 1:]


def _one_pass(model, batch: Batch, checked, taken: list, out: Applied) -> bool:
    """``taken`` (steps with at least one delete, inside one renewal stretch) in one compiled
    pass; False, the model unchanged, where that pass does not apply: requests of several ids, a
    stored post-noise state to adopt, a release wanted before the last delete, rows of their
    own."""
    deletes = [step for step in taken if isinstance(step, Forget)]
    if (any(isinstance(s, Learn) and s.X is not None for s in taken)
            or any(d.post_state is not None or len(d.ids) != 1 for d in deletes)
            or any(d.publish for d in deletes[:-1])):
        return False
    try:
        deleted = [d.keys[0] if d.keys else int(record_keys([d.ids[0]])[0]) for d in deletes]
    except InvalidExample:
        return False
    spans = [(s.start, s.stop) for s in taken if isinstance(s, Learn)]
    done = learn_and_unlearn(model, *checked, spans, [d.position for d in deletes], deleted,
                             [d.ids[0] for d in deletes], batch.subjects)
    if done is None:
        return False
    out.applied += done.applied
    out.skipped += done.skipped
    answers = iter(zip(done.deletions, done.states))
    for step in taken:
        if isinstance(step, Learn):
            _add_learned(out, step, Learned())
            continue
        deletion, state = next(answers)
        if not deletion.changed_model:
            out.outcomes.append(Forgotten(deletion, state))
            continue
        published = Published.of(model) if step.publish else None
        out.outcomes.append(Forgotten(deletion, state, published,
                                      guarantee=request_guarantee(model, deletion)))
    return True
