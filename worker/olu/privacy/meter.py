"""The noise the current release carries, kept up to date in O(1) per event (docs/accounting.md 10).

:class:`NoiseMeter` maintains the value :func:`~.analysis.noise.release_noise_std` computes from the
ledger, ``sqrt(sum_i Gamma_{tau_i,t}**2 sigma_i**2)`` over the current epoch's noised deletions,
without rereading the ledger. It runs the same recursion, operation for operation: at each
deletion the variance ``V`` anchored at the previous deletion's step is contracted to the new step
and ``sigma**2`` added; a query at step t contracts the anchored ``V`` by ``Gamma_{tau_a,t}``
without moving the anchor. So the value is a function of the ledger and t alone, bit for bit equal
to ``release_noise_std`` and to a meter rebuilt from the ledger at restore, whenever and however
often it was asked: a replayed release is byte-identical (docs/worker.md 4.3). An epoch change (a
restart or a retrain from a data-independent point) resets ``V`` to 0.

Cost: one ``log_contraction`` per deletion and per query. The schedules evaluate it in O(1)
(closed forms) beyond their finitely many early steps, which they sum term by term and memoise
(worker/olu/core/schedules.py), so a query repeated against the same anchor costs O(1) whatever
the stream length.

Range: ``exp(2 log Gamma)`` is taken in log space when it would overflow (``inf`` beyond the float
range, never an OverflowError); an underflow to 0 means the old noises contracted below anything
a float can show.

>>> class Halving:  # every step halves distances
...     def log_contraction(self, u, tau): return (tau - u) * math.log(0.5)
>>> meter = NoiseMeter(Halving())
>>> meter.add(0, 3, 4.0); meter.add(0, 5, 3.0)
>>> meter.std(0, 5), meter.std(0, 6), meter.std(1, 0)  # same as release_noise_std's doctest
(3.1622776601683795, 1.5811388300841898, 0.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ..arith import norm
from .analysis.noise import contract_variance, noise_to_signal

__all__ = ["MeteredNoise", "NoiseMeter"]


class MeteredNoise:
    """The noise figures of a model that keeps a :class:`NoiseMeter` as ``noise_meter`` (with
    ``epoch``, ``t``, ``z``, ``dim``): the engine's base class mixes them in."""

    def release_noise_std(self) -> float | None:
        """Bound on the per-coordinate noise std of the release (its weights ``z``) from public
        constants and the ledger, O(1); None where an algorithm's noise is not tracked."""
        return self.noise_meter.std(self.epoch, self.t)

    def noise_to_signal(self) -> float | None:
        """``release_noise_std() sqrt(d) / ||z||``: inf for noise on zero weights, None for neither
        (or untracked noise)."""
        return self._to_signal(self.release_noise_std())

    def noise_figures(self) -> tuple[float | None, float | None]:
        """(:meth:`release_noise_std`, :meth:`noise_to_signal`), the bound computed once (a release
        needs both)."""
        std = self.release_noise_std()
        return std, self._to_signal(std)

    def _to_signal(self, std: float | None) -> float | None:
        if std is None:
            return None
        # on every CPU, the same bits (arith.py)
        return noise_to_signal(std, self.param_dim, norm(self.z))


class NoiseMeter:
    """Running bound on the per-coordinate noise std of the
    release (one model, one epoch at a time).

    ``add(epoch, tau, sigma)`` after a noise N(0, sigma**2 I) is added at step tau;
    ``std(epoch, t)`` is the bound for the release at step t. Steps never go back within an epoch
    (ValueError otherwise); a new epoch starts from no noise at whatever step it starts.
    """

    __slots__ = ("_log_contraction", "epoch", "tau", "var")

    def __init__(self, schedule, epoch: int = 0):
        self._log_contraction = schedule.log_contraction
        # tau: the anchor, the last deletion's step
        self.epoch, self.tau, self.var = int(epoch), None, 0.0

    def _epoch(self, epoch: int, t: int) -> None:
        if epoch != self.epoch:
            if epoch < self.epoch:
                raise ValueError(f"epoch {epoch} is before the meter's epoch {self.epoch}")
            # the model restarted data-independently
            self.epoch, self.tau, self.var = epoch, None, 0.0
        elif self.tau is not None and t < self.tau:
            raise ValueError(f"step {t} is before the meter's step {self.tau} in epoch {epoch}")

    def add(self, epoch: int, tau: int, sigma: float) -> None:
        """A noise of per-coordinate std ``sigma`` was added at step ``tau`` of ``epoch`` (0:
        nothing to add, and the anchor stays, as :func:`release_noise_std` skips such entries)."""
        self._epoch(epoch, tau)
        if sigma == 0.0:
            return
        if self.tau is not None and tau > self.tau:
            self.var = contract_variance(self.var, self._log_contraction(self.tau, tau))
        self.var, self.tau = self.var + sigma * sigma, tau

    def std(self, epoch: int, t: int) -> float:
        """The bound for the release at step ``t`` of ``epoch`` (0.0 with no noise in the epoch)."""
        self._epoch(epoch, t)
        if self.tau is None or t == self.tau:
            return math.sqrt(self.var)
        return math.sqrt(contract_variance(self.var, self._log_contraction(self.tau, t)))

    def rebuild(self, entries: Iterable[Mapping], epoch: int, t: int) -> None:
        """Start over from ledger ``entries`` in step order
        (restore): those of ``epoch`` are added."""
        self.epoch, self.tau, self.var = int(epoch), None, 0.0
        for entry in entries:
            if entry.get("epoch") == epoch:
                tau, sigma = entry["tau"], float(entry["sigma"])
                if isinstance(tau, bool) or not isinstance(tau, int) or not 0 <= tau <= t:
                    raise ValueError(
                        f"ledger entry {entry.get('i')!r} has step {tau!r} outside [0, {t}]")
                if not (math.isfinite(sigma) and sigma >= 0.0):
                    raise ValueError(f"ledger entry {entry.get('i')!r} has sigma {sigma!r}")
                self.add(epoch, tau, sigma)

    def restore(self, ledger, epoch: int, t: int) -> None:
        """:meth:`rebuild` from a :class:`~.ledger.Ledger`, reading only its tail: the current
        epoch's entries are the last ones (epochs only grow), so
        older sealed segments stay sealed."""
        tail = []
        for entry in reversed(ledger):
            if entry.get("epoch") != epoch:
                break
            tail.append(entry)
        tail.reverse()
        self.rebuild(tail, epoch, t)
