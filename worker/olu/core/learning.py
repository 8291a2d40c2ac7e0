"""How a model learns: the checked batch, then the compiled OGD kernel or the reference step.

:class:`Learning` is the learning half of :class:`~worker.olu.core.base.OnlineUnlearner`, which
mixes it in: ``learn_one`` and ``learn_many`` check the input, pick the path (``kernel_plan``: the
compiled kernel where it reproduces ``_learn`` exactly, else the numpy reference) and keep the
counters; the ``_after_learn`` hooks let a subclass keep the rows it learns. The step itself is
z_{t+1} = Proj_K(z_t - eta_t grad f_t(z_t)) (docs/guarantee.md 1.1).
"""

from __future__ import annotations

import numpy as np

from ..exceptions import ConfigError
from . import sparse
from .contribution import subject_keys
from .index import step_overflow
from .kernels.loader import compiled
from .record_keys import record_key
from .sparse import SparseRows


class Learning:
    """The learning paths of a model (its ``features``, ``loss``, ``schedule``, ``ball``, ``index``,
    ``tombstones``, ``key_cap``, ``z``, ``t`` and ``counters`` are the estimator's)."""

    #: True for a model whose every step is the sparse one (core/sparse.py), dense rows included:
    #: its ``_learn_batch`` takes single rows too (exact retraining over sparse retained rows).
    sparse_steps = False

    def learn_one(self, record_id: str, x, y, *, subject=None) -> bool:
        """Apply one example; False if its id was already deleted (the insert is skipped), or its
        ``subject`` (the partitioning key; default: the id) is at ``max_records_per_key``.

        Bad input raises a subclass of ``InvalidExample`` and changes no state.
        """
        key = record_key(record_id)
        xv, yv = self.features.check(x), self.loss.label(y)
        owners = subject_keys(None if subject is None else [subject], [key])
        if self.key_cap is not None and not self.key_cap.admit(owners)[0]:
            return False
        if self.subject_index is not None:
            self.subject_index.add(owners, np.array([key], np.uint64))
        if self.sparse_steps:
            return self._learn_batch(np.array([key], np.uint64), xv[None, :], np.array([yv])) == 1
        plan = self.kernel_plan()
        if plan is not None:  # the compiled path of learn_many, so the two agree bit for bit
            keys = np.array([key], np.uint64)
            return self._learn_kernel(plan, keys, xv[None, :], np.array([yv])) == 1
        return self._learn(key, xv, yv)

    def learn_many(self, record_ids, X, y, *, keys=None, subjects=None) -> int:
        """Same result as ``learn_one`` in a loop; the whole batch is validated before any step.

        ``X``: a matrix, or :class:`~worker.olu.core.sparse.SparseRows` (learned in O(non-zeros)
        a row where the model takes the plain OGD step: core/sparse.py).
        ``keys``: ``record_key`` of each id when the caller has them already (the stream decoder
        hashes ids straight from the record bytes); ``record_ids`` is then not read. ``subjects``:
        each row's partitioning key (strings, or their 64-bit hashes) for ``max_records_per_key``.
        """
        batch = self.prepare_batch(record_ids, X, y, keys=keys)
        return self.learn_prepared(*batch, subjects=subjects)

    def prepare_batch(self, record_ids, X, y, *,
                      keys=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The checked batch of :meth:`learn_many`: (keys uint64, features, labels); raises a
        subclass of ``InvalidExample`` (or ``ConfigError`` for unequal lengths) and changes no
        state."""
        # if there: vectorised hashing and label checks, same values and errors
        kernels = compiled()
        if kernels is not None and (batch := kernels.front(self, record_ids, X, y, keys)):
            return batch  # a clean batch, hashed (unless keyed) and checked in one compiled call
        if keys is not None:
            keys = np.asarray(keys, np.uint64)
        elif kernels is not None:
            keys = kernels.record_keys(record_ids)
        else:
            keys = np.array([record_key(r) for r in record_ids], np.uint64)
        if kernels is not None:
            yv = kernels.check_labels(self.loss, y)
        elif hasattr(self.loss, "labels"):
            yv = self.loss.labels(y)
        else:
            yv = np.array([self.loss.label(v) for v in y])
        if isinstance(X, SparseRows):
            Xv = sparse.check_rows(self.features, X)
        else:
            Xv = self.features.check_many(X)
        if not (len(keys) == len(Xv) == len(yv)):
            raise ConfigError(f"batch lengths differ: {len(keys)} ids, {len(Xv)} rows, {len(yv)} "
                              f"labels")
        return keys, Xv, yv

    def learn_prepared(self, keys: np.ndarray, X: np.ndarray, y: np.ndarray, subjects=None) -> int:
        """Apply a batch :meth:`prepare_batch` returned (of this model or one with the same
        checks)."""
        if self.key_cap is None and self.subject_index is None:
            return self._learn_batch(keys, X, y)
        owners = subject_keys(subjects, keys)
        if self.key_cap is not None:  # rows of a key past its cap are consumed, not learned
            admitted = self.key_cap.admit(owners)
            if not admitted.all():
                keys, X, y, owners = keys[admitted], X[admitted], y[admitted], owners[admitted]
        applied = self._learn_batch(keys, X, y)
        if self.subject_index is not None:
            self.subject_index.add(owners, keys)
        return applied

    def _learn_batch(self, keys: np.ndarray, X: np.ndarray, y: np.ndarray) -> int:
        """Apply validated rows (keys uint64): the compiled kernel, or ``_learn`` in a loop."""
        if isinstance(X, SparseRows):
            own_step = getattr(self._learn, "__func__", None) is Learning._learn
            plain = own_step and not self._hooked()
            return sparse.learn_batch(self, keys, X, y, plain=plain)
        plan = self.kernel_plan()
        if plan is None:
            return sum(self._learn(int(k), X[j], float(y[j])) for j, k in enumerate(keys))
        return self._learn_kernel(plan, keys, X, y)

    def kernel_plan(self):
        """Parameters for ``kernels.ogd_steps``, or None to use the reference ``_learn``.

        The kernel replaces exactly ``_learn``: a subclass (or instance) that overrides it, sets
        ``use_kernel = False``, or uses a loss/schedule the kernel does not know gets the
        reference, as does everything under ``OLU_REFERENCE_KERNEL=1`` or
        ``worker.compiled.jit.reference()``.
        """
        if not self.use_kernel or getattr(self._learn, "__func__", None) is not Learning._learn:
            return None
        kernels = compiled()
        if kernels is None or kernels.reference_forced():
            return None
        return kernels.plan_for(self)

    def _learn_kernel(self, plan, keys: np.ndarray, X: np.ndarray, y: np.ndarray) -> int:
        """``_learn`` over a batch in one compiled call; same state changes, in the same order.

        The hooks run once after the batch, in step order, on the applied rows only: the default
        ``_after_learn_batch`` calls ``_after_learn(key, step, x, y)`` for each. While they run,
        ``self.z`` and ``self.t`` are already those after the whole batch.
        """
        if len(keys) == 0:
            return 0
        kernels = compiled()
        z = np.array(self.z, dtype=np.float64)  # a new array per update, like the reference
        t, steps, consumed, reason = kernels.run_batch(plan, z, self.t, self.index, self.tombstones,
                                                       keys, X, y)
        self.z = z
        applied = self._took_steps(t, consumed)
        if applied and self._hooked():
            rows = np.flatnonzero(steps[:consumed])
            self._after_learn_batch(np.asarray(keys, np.uint64)[rows], steps[rows],
                                    np.asarray(X)[rows], np.asarray(y, np.float64)[rows])
        if reason == kernels.STEP_OVERFLOW:
            raise step_overflow(t + 1)
        return applied

    def _took_steps(self, t: int, consumed: int) -> int:
        """A compiled batch's bookkeeping, the iterate already stored: the step counter now ``t``,
        the applied and skipped inserts among its ``consumed`` rows. Returns the rows applied."""
        applied = t - self.t
        self.t = t
        self.counters["applied"] += applied
        self.counters["skipped_deleted"] += consumed - applied
        return applied

    def _hooked(self) -> bool:
        """True when a subclass keeps the rows it learns (``_after_learn`` or its batch form)."""
        after, after_batch = self._after_learn, self._after_learn_batch
        return (getattr(after, "__func__", None) is not Learning._after_learn
                or getattr(after_batch, "__func__", None) is not Learning._after_learn_batch)

    def _learn(self, key: int, x: np.ndarray, y: float) -> bool:
        if key in self.tombstones:
            # an insert after its delete (docs/guarantee.md 1.3)
            self.counters["skipped_deleted"] += 1
            return False
        self.t += 1
        eta = self.schedule.eta(self.t)
        self.z = self.ball.project(self.z - eta * self.loss.grad(self.z, x, y))
        self.index.add(key, self.t)
        self.counters["applied"] += 1
        self._after_learn(key, self.t, x, y)
        return True

    def _after_learn(self, key: int, step: int, x: np.ndarray, y: float) -> None:
        """Hook: algorithms that keep retained examples store them here (step = u)."""

    def _after_learn_batch(self, keys: np.ndarray, steps: np.ndarray, X: np.ndarray,
                           y: np.ndarray) -> None:
        """Batch form of :meth:`_after_learn` (for a compiled batch path); override to vectorise."""
        for j in range(len(keys)):
            self._after_learn(int(keys[j]), int(steps[j]), X[j], float(y[j]))
