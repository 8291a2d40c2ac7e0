"""What the stream hands the engine for one poll batch, and what it gets back.

A batch is its steps in input order: :class:`Learn` (a stretch of inserts) and :class:`Forget`
(one deletion request). Positions count the batch's records, dead letters included, so the
caller maps each outcome back to its record; the engine never sees a Kafka message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.deletion import Deletion
from ..exceptions import BudgetExhausted, ConfigError
from .published import Published


@dataclass(frozen=True, slots=True)
class Learn:
    """The inserts at positions ``start:stop``: their own rows, or (``X`` None) rows ``start:stop``
    of the batch's :class:`Columns`. ``keys``: each id's ``record_key`` when the decoder hashed
    them already (``ids`` is then not read)."""

    start: int
    stop: int
    X: object = None  # a matrix, or SparseRows
    y: np.ndarray | None = None
    ids: list | None = None
    keys: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class Forget:
    """One deletion request at ``position``: every id in one engine call (one noise draw, one
    charge). ``post_state``: the post-noise state an earlier process stored for it (a replay
    adopts it instead of drawing noise again). ``publish``: the caller releases right after it,
    so the engine captures the state it would release (:class:`Forgotten.published`).
    ``subject``: a request that names the data subject, not its records (core/subjects.py)."""

    position: int
    ids: tuple
    keys: list | None = None
    post_state: dict | None = None
    publish: bool = False
    #: set: forget this data subject (its 64-bit key) instead: every record the model learned
    #: under it, in one request (``ids`` is then empty)
    subject: int | None = None


@dataclass(slots=True)
class Columns:
    """The whole batch decoded into columns, row j for position j (the compiled scan's);
    ``accepted[j]``: row j is an insert. The other rows are overwritten (the engine zeroes them
    so the batch passes the model's checks in one call; they are never learned). ``X``: a
    matrix, or SparseRows (the other rows empty)."""

    X: object  # np.ndarray or SparseRows
    y: np.ndarray
    keys: np.ndarray
    accepted: np.ndarray


@dataclass(slots=True)
class Batch:
    """One poll batch for :func:`~worker.olu.batches.apply.apply_batch`. ``subjects``: each
    position's partitioning key (hashes) for a model that caps what one key contributes;
    ``quality``: measure the test-then-train loss (a metric outside the certificate)."""

    steps: list
    columns: Columns | None = None
    subjects: np.ndarray | None = None
    quality: bool = True


@dataclass(slots=True)
class Learned:
    """A :class:`Learn` step's rows the model refused: (position, the ``InvalidExample``)."""

    rejected: list = field(default_factory=list)


@dataclass(slots=True)
class Forgotten:
    """A :class:`Forget` step's answer. ``state``: the model's deletion state right after it, to
    make durable (None when it changed nothing or adopted a stored one). ``refused``: the budget
    could not cover it, or the model cannot forget by subject (``ConfigError``), and nothing
    changed; ``partial``: the budget ran out inside it, after some
    of its records were unlearned (the batch stops there)."""

    deletion: Deletion | None = None
    state: dict | None = None
    published: Published | None = None
    refused: BudgetExhausted | ConfigError | None = None
    partial: bool = False
    #: for a request that changed the model: what it got (batches/guarantee.py)
    guarantee: dict | None = None


@dataclass(slots=True)
class Applied:
    """What a batch did: one outcome per step, in order (fewer after a partial request);
    ``applied`` and ``skipped`` count its inserts (skipped: ids deleted before they arrived, or
    over their key's cap); ``losses``: the batch's mean test-then-train losses, each measured
    before the rows it covers were learned (finite ones only)."""

    outcomes: list = field(default_factory=list)
    applied: int = 0
    skipped: int = 0
    losses: list = field(default_factory=list)
