"""How a model honours a deletion request: the records' steps popped, the rule, noise and charge.

:class:`Unlearning` is the deletion half of :class:`~worker.olu.core.base.OnlineUnlearner`, which
mixes it in: a request's applied steps leave the index and its ids join the tombstones; the
subclass's ``_delete`` (the unlearning rule) runs once per record, or once per request where the
class ``groups_requests``; ``_release_with_noise`` draws the calibrated noise after charging it
(core/deletion.py books the charge); a replay adopts the stored post-noise iterate instead of
drawing again (docs/worker.md 4.2).
"""

from __future__ import annotations

import math

import numpy as np

from ..exceptions import ConfigError, InvalidState
from ..formulas import sensitivity
from .deletion import Deletion, charge_noised, exact_deletion, request_ids
from .index import AppliedIndex
from .record_keys import record_key
from .tombstones import KeySet


class Unlearning:
    """The deletion paths of a model (its ``index``, ``tombstones``, ``accountant``, ``ledger``,
    ``noise_meter``, ``noise_share``, ``z``, ``t`` and ``epoch`` are the estimator's)."""

    def prefetch_deletes(self, keys: np.ndarray) -> None:
        """Look up the ``record_key`` s (uint64) of a poll batch's deletes about to come, in one
        compiled call each for the index runs and the tombstones; the requests then take the
        answers instead of a call each. Only a hint: results are the same with or without it
        (``AppliedIndex.prefetch`` and ``KeySet.prefetch`` say how long the answers hold)."""
        if type(self.index) is AppliedIndex:
            self.index.prefetch(keys)
        if type(self.tombstones) is KeySet:
            self.tombstones.prefetch(keys)

    @property
    def forgets_by_key(self) -> bool:
        """True when the model keeps which records each subject gave it (``forget_by_key``)."""
        return self.subject_index is not None

    def subject_records(self, subject: int) -> np.ndarray:
        """The record keys (uint64) the model learned under ``subject`` (the subject's 64-bit key,
        ``record_key`` of the Kafka key's text), in the order first learned; the ids a deletion
        request forgetting the subject names (``unlearn_request(..., keys=...)``)."""
        if self.subject_index is None:
            raise ConfigError("this model does not keep records by subject (forget_by_key off)")
        return self.subject_index.records(subject)

    def unlearn_one(self, record_id: str, *, post_state: dict | None = None) -> Deletion:
        """Honour the deletion of ``record_id``: ``unlearn_request([record_id])``."""
        return self.unlearn_request([record_id], post_state=post_state)

    def unlearn_request(self, record_ids, *, post_state: dict | None = None, keys=None) -> Deletion:
        """Honour one deletion request naming ``record_ids``; the next release must be
        ``self.weights``.

        Ids the model never applied cost nothing and add no noise; ids deleted before are no-ops.
        When the class ``groups_requests``, the applied records are unlearned with ONE noise draw
        calibrated to the sum of their shifts and charged once (docs/accounting.md 8.3); otherwise
        one after another, each with its own noise and charge. The result's ``outcome`` is that of
        the (last) deletion that changed the model, else ``not_applied`` or ``duplicate``.

        ``post_state`` replays a request whose result is already durable (restore after a
        crash): the deterministic bookkeeping runs as usual, but the stored post-noise iterate
        is adopted instead of drawing fresh noise, so one deletion never yields two independent
        noisy views (docs/worker.md 4.2). It must come from :meth:`deletion_state`. ``keys``: the
        ``record_key`` of each id, when the caller has them (a rotation hashes once for its models).
        """
        ids = request_ids(record_ids)
        keys = [record_key(r) for r in ids] if keys is None else keys
        tombstones = self.tombstones
        fresh = [j for j, k in enumerate(keys) if k not in tombstones]
        seen = set(fresh) if len(fresh) < len(ids) else None
        duplicates = () if seen is None else tuple(ids[j] for j in range(len(ids)) if j not in seen)
        # a request is a point fixed by the events: its state is stored with scale 1
        self.fold_scale()
        self._replaying = post_state is not None
        try:
            if self.groups_requests:
                popped, not_applied, results = self._delete_grouped(keys, ids, fresh)
            else:
                popped, not_applied, results = self._delete_each(keys, ids, fresh)
        finally:
            self._replaying = False
        changed = [r for r in results if r.changed_model]
        self.deletions_applied += len(changed)
        if changed and post_state is not None:
            self._adopt(post_state)
        # results hold only applied records' rule calls (dp-tofw's ``dp_covered`` changes nothing)
        base = (changed or results or [Deletion("not_applied" if fresh else "duplicate")])[-1]
        return base.for_request(popped, not_applied, duplicates)

    def _delete_grouped(self, keys, ids, fresh):
        """One rule call on the union of the request's applied steps: one noise draw for the summed
        shift, charged once (the shifts add through the coupling, docs/accounting.md 8.3)."""
        self.index.begin_pops()
        steps, popped, not_applied = [], 0, []
        try:
            for j in fresh:
                record_steps = self.index.pop(keys[j])
                steps.extend(record_steps)
                popped += bool(record_steps)
                if not record_steps:
                    not_applied.append(ids[j])
            results = [self._delete(keys[fresh[0]], sorted(steps))] if steps else []
        except BaseException:
            for _ in fresh:  # leave the model exactly as it was (e.g. BudgetExhausted)
                self.index.undo_pop()
            raise
        for j in fresh:
            self.tombstones.add(keys[j])
        return popped, not_applied, results

    def _delete_each(self, keys, ids, fresh):
        """The records one after another, each with its own rule call (noise and charge). A failure
        leaves the failing record and the ones after it untouched; the ones before stay deleted."""
        popped, not_applied, results = 0, [], []
        for j in fresh:
            self.index.begin_pops()
            steps = self.index.pop(keys[j])
            try:
                result = self._delete(keys[j], steps) if steps else Deletion("not_applied")
            except BaseException:
                if steps:
                    self.index.undo_pop()
                # the records before it stay deleted: count them (the caller never sees results)
                self.deletions_applied += sum(r.changed_model for r in results)
                raise
            self.tombstones.add(keys[j])
            if steps:
                popped += 1
                results.append(result)
            else:
                not_applied.append(ids[j])
        return popped, not_applied, results

    def deletion_state(self) -> dict:
        """What must be durable after a deletion: the post-noise iterate and checkable counters
        (``deletions``: the accountant's charged deletions; ``deletions_applied``: all of them)."""
        return {"z": self.z.copy(), **self.deletion_counters()}

    def deletion_counters(self) -> dict:
        """:meth:`deletion_state` without the iterate."""
        return {"t": self.t, "epoch": self.epoch, "deletions": self.accountant.lifetime_deletions,
                "deletions_applied": self.deletions_applied}

    def _adopt(self, post_state: dict) -> None:
        # Either counter may be missing: deltas stored before deletions_applied existed have only
        # ``deletions``; a state read back from a release has only the applied count.
        counters = {"t": self.t, "epoch": self.epoch,
                    "deletions": self.accountant.lifetime_deletions,
                    "deletions_applied": self.deletions_applied}
        mine = {k: v for k, v in counters.items() if post_state.get(k) is not None}
        stored = {k: int(post_state[k]) for k in mine}
        if not {"t", "epoch"} <= set(mine) or mine != stored:
            raise InvalidState(f"replay diverged from the stored deletion: {mine} != {stored}")
        z = np.asarray(post_state["z"], np.float64)
        if z.shape != (self.param_dim,) or not np.all(np.isfinite(z)):
            raise InvalidState(f"stored post-noise iterate has shape {z.shape} or is not finite")
        self.z = z.copy()

    def _delete(self, key: int, steps: list[int]) -> Deletion:
        raise NotImplementedError

    def _entropy(self) -> np.random.Generator:
        """The test generator, or one seeded from OS entropy and never stored (entropy.py)."""
        return self._noise_rng if self._noise_rng is not None else self._os_entropy.generator()

    def _noise(self, sigma: float) -> np.ndarray:
        if self._replaying:  # the stored post-noise iterate replaces whatever would be drawn
            return np.zeros(self.param_dim)
        if self._noise_rng is not None:  # the test generator: its stream of draws, as ever
            return self._noise_rng.normal(0.0, sigma, size=self.param_dim)
        noise = self._os_entropy.gaussian(self.param_dim)  # N(0, I), a row of its own
        noise *= sigma  # N(0, sigma^2 I), scaled in place: no array more on the deletion's path
        return noise

    def _noise_rows(self, n: int) -> np.ndarray:
        """``n`` draws of N(0, I) as rows, for a batch's deletions: the test generator's stream of
        draws, or OS entropy (:meth:`_noise` scales one row by its sigma)."""
        if self._noise_rng is not None:
            return self._noise_rng.standard_normal((n, self.param_dim))
        return self._os_entropy.gaussian_rows(n, self.param_dim)

    def _release_with_noise(self, z_hat: np.ndarray, shift: float, steps, **extra) -> Deletion:
        """z <- Proj_K(z_hat + N(0, sigma_i^2 I)) with sigma_i calibrated to ``shift``.

        ``z_hat`` is the pre-noise state: it lives only in this frame and is never stored.
        """
        if shift == 0.0:  # every influence of the record has contracted away exactly
            self.z = z_hat
            return exact_deletion(self.accountant, steps)
        sigma = self.accountant.sigma_for_next(shift)
        if self.noise_share != 1.0:  # x / sqrt(1.0) is x: skip it in the common case
            sigma /= math.sqrt(self.noise_share)
        # charged first: BudgetExhausted leaves the model untouched
        deletion = charge_noised(self.accountant, self.ledger, self.noise_meter, epoch=self.epoch,
                                 tau=self.t, steps=steps, shift=shift, sigma=sigma, extra=extra,
                                 share=self.noise_share)
        self.z = self.ball.project(z_hat + self._noise(sigma))
        return deletion

    def sensitivity(self, u: int) -> float:
        """Delta_u = min(eta_u L, D): the most one example can move the iterate
        (docs/calibration.md 3.1)."""
        return sensitivity(self.schedule.eta(u), self.constants.L, self.ball.diameter)
