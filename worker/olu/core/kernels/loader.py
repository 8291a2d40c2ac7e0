"""The compiled kernels as the engine uses them, imported on first use (numba takes ~0.2 s to
import); ``None`` where numba is unavailable, and the engine stays correct, only slower."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class CompiledKernels:
    """What the estimator base and the replay helpers call, from the per-job kernel modules."""

    def __init__(self):
        from . import hashing, jit, ogd

        self._jit = jit
        self.record_keys, self.check_labels = hashing.record_keys, ogd.check_labels
        self._ingest_batch, self._checked_rows = hashing.ingest_batch, hashing.checked_rows
        self.plan_for, self.run_batch, self.ogd_steps = ogd.plan_for, ogd.run_batch, ogd.ogd_steps
        self.run_mixed, self.plan_pass = ogd.run_mixed, ogd.plan_pass
        self.run_sparse, self.sparse_sqnorms = ogd.run_sparse, ogd.sparse_sqnorms
        self.sparse_rows_pass = ogd.sparse_rows_pass
        self.DONE, self.STEP_OVERFLOW = ogd.DONE, ogd.STEP_OVERFLOW

    def front(self, model, record_ids, X, y, keys=None):
        """``learn_many``'s compiled front for ``model``: the batch's (keys, X, labels) when it
        passes untouched, else None (the general path). Ids are hashed (``hashing.ingest_batch``)
        unless the caller has their ``keys`` (``hashing.checked_rows``: checks only)."""
        if keys is None:
            return self._ingest_batch(model.loss, model.features, record_ids, X, y)
        return self._checked_rows(model.loss, model.features, keys, X, y)

    @property
    def force_reference(self) -> bool:
        """``OLU_REFERENCE_KERNEL=1`` or inside ``jit.reference()``: every model takes the reference."""
        return self._jit.FORCE_REFERENCE


_LOADED: CompiledKernels | bool | None = None


def compiled() -> CompiledKernels | None:
    """The kernels, loaded once; None if numba is missing or broken."""
    global _LOADED
    if _LOADED is None:
        try:
            _LOADED = CompiledKernels()
        except ImportError as exc:  # numba missing or broken: stay correct, just slower
            log.warning("compiled OGD kernel unavailable (%s); using numpy", exc)
            _LOADED = False
    return _LOADED or None
