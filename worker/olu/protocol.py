"""What the stream may use of a model: one Protocol, met by every algorithm and by a rotation.

The stream layer (worker/stream) learns and unlearns through
:func:`~worker.olu.batches.apply_batch`, releases a :class:`~worker.olu.batches.Published` state,
snapshots ``export_state()`` and exports the privacy figures; nothing else of a model is its
business. tests/olu/test_protocol.py holds every registered algorithm and :class:`Rotation` to it,
method signatures included.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .core.base import Deletion


@runtime_checkable
class Model(Protocol):
    """A model the worker can run on a partition (facts first, then what it does)."""

    algorithm: str
    keeps_examples: bool  # holds raw features: a deletion owes a purge of older snapshots
    spends_on_learn: bool  # charges the budget while learning, not only on deletions
    dim: int
    loss: object
    key_cap: object  # the per-key contribution cap, or None
    index: object  # the applied records (its len() is exported)
    t: int
    epoch: int
    deletions_applied: int
    z: np.ndarray  # replaced on every change, never written into
    weights: np.ndarray  # what a release publishes (a copy)

    def prepare_batch(self, record_ids, X, y, *, keys=None) -> tuple: ...

    def learn_prepared(self, keys, X, y, subjects=None) -> int: ...

    def learn_many(self, record_ids, X, y, *, keys=None, subjects=None) -> int: ...

    def prefetch_deletes(self, keys: np.ndarray) -> None: ...

    @property
    def forgets_by_key(self) -> bool: ...

    def subject_records(self, subject: int) -> np.ndarray: ...

    def unlearn_request(self, record_ids, *, post_state: dict | None = None,
                        keys=None) -> Deletion: ...

    def deletion_state(self) -> dict: ...

    def export_state(self) -> dict: ...

    def privacy(self) -> dict: ...

    def noise_figures(self) -> tuple: ...

    def release_noise_std(self) -> float | None: ...

    def noise_to_signal(self) -> float | None: ...
