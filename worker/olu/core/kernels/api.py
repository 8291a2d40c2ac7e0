"""What the estimator base and the replay helpers call of the compiled kernels, by name (one
import: importing numba takes ~0.2 s, so :func:`worker.olu.core.kernels.loader.compiled` imports
this module on first use)."""

from __future__ import annotations

from ....compiled.jit import reference_forced
from ..record_keys import record_keys
from .ingest import checked_rows, ingest_batch
from .mixed_pass import plan_pass, run_mixed
from .ogd import DONE, STEP_OVERFLOW, check_labels, ogd_steps, plan_for, run_batch
from .sparse_ogd import run_sparse, sparse_rows_pass, sparse_sqnorms, sparse_steps

__all__ = ["DONE", "STEP_OVERFLOW", "check_labels", "front", "ogd_steps", "plan_for", "plan_pass",
           "record_keys", "reference_forced", "run_batch", "run_mixed", "run_sparse",
           "sparse_rows_pass", "sparse_sqnorms", "sparse_steps"]


def front(model, record_ids, X, y, keys=None):
    """``learn_many``'s compiled front for ``model``: the batch's (keys, X, labels) when it passes
    untouched, else None (the general path). Ids are hashed (:func:`ingest_batch`) unless the
    caller has their ``keys`` (:func:`checked_rows`: checks only)."""
    if keys is None:
        return ingest_batch(model.loss, model.features, record_ids, X, y)
    return checked_rows(model.loss, model.features, keys, X, y)
