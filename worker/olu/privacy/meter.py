"""The noise the current release carries, kept up to date in O(1) per event (docs/accounting.md 8).

:class:`NoiseMeter` maintains the value :func:`~.analysis.noise.release_noise_std` computes from the
ledger, ``sqrt(sum_i Gamma_{tau_i,t}**2 sigma_i**2)`` over the current epoch's noised deletions,
without rereading the ledger: a running variance ``V`` at step ``t_last`` is advanced to a later
step t by ``V <- V exp(2 log Gamma_{t_last,t})`` (the additivity of ``log_contraction``), and a
deletion at tau adds ``sigma**2`` after advancing to tau. An epoch change (a restart or a retrain
from a data-independent point) resets ``V`` to 0.

Cost: every advance covers steps no earlier advance covered, and each schedule's
``log_contraction(u, tau)`` costs O(1) beyond the finitely many early steps it sums term by term
(worker/olu/core/schedules.py: the strongly convex schedule's irregular head, the convex schedule's
expansive steps; the base class sums every step, which is one term per step advanced). So the
meter costs O(1) amortised per applied step and per deletion, whatever the stream length.

Range: ``exp(2 log Gamma)`` is taken in log space when it would overflow (``inf`` beyond the float
range, never an OverflowError); an underflow to 0 means the old noises contracted below 1e-154 of
the unit, which the value then ignores.

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

from .analysis.noise import contract_variance

__all__ = ["NoiseMeter"]


class NoiseMeter:
    """Running bound on the per-coordinate noise std of the release (one model, one epoch at a time).

    ``add(epoch, tau, sigma)`` after a noise N(0, sigma**2 I) is added at step tau;
    ``std(epoch, t)`` is the bound for the release at step t. Steps never go back within an epoch
    (ValueError otherwise); a new epoch starts from no noise at whatever step it starts.
    """

    __slots__ = ("_log_contraction", "epoch", "t", "var")

    def __init__(self, schedule, epoch: int = 0, t: int = 0):
        self._log_contraction = schedule.log_contraction
        self.epoch, self.t, self.var = int(epoch), int(t), 0.0

    def _advance(self, epoch: int, t: int) -> None:
        if epoch != self.epoch:
            if epoch < self.epoch:
                raise ValueError(f"epoch {epoch} is before the meter's epoch {self.epoch}")
            self.epoch, self.t, self.var = epoch, t, 0.0  # the model restarted data-independently
            return
        if t < self.t:
            raise ValueError(f"step {t} is before the meter's step {self.t} in epoch {epoch}")
        if t > self.t:
            if self.var > 0.0:
                self.var = contract_variance(self.var, self._log_contraction(self.t, t))
            self.t = t

    def add(self, epoch: int, tau: int, sigma: float) -> None:
        """A noise of per-coordinate std ``sigma`` was added at step ``tau`` of ``epoch``."""
        self._advance(epoch, tau)
        self.var += sigma * sigma

    def std(self, epoch: int, t: int) -> float:
        """The bound for the release at step ``t`` of ``epoch`` (0.0 with no noise in the epoch)."""
        self._advance(epoch, t)
        return math.sqrt(self.var)

    def rebuild(self, entries: Iterable[Mapping], epoch: int, t: int) -> None:
        """Start over from ledger ``entries`` in order (restore): those of ``epoch`` are added."""
        self.epoch, self.t, self.var = int(epoch), 0, 0.0
        for entry in entries:
            if entry.get("epoch") == epoch:
                tau, sigma = entry["tau"], float(entry["sigma"])
                if isinstance(tau, bool) or not isinstance(tau, int) or not 0 <= tau <= t:
                    raise ValueError(f"ledger entry {entry.get('i')!r} has step {tau!r} outside [0, {t}]")
                if not (math.isfinite(sigma) and sigma >= 0.0):
                    raise ValueError(f"ledger entry {entry.get('i')!r} has sigma {sigma!r}")
                self.add(epoch, tau, sigma)
        self._advance(epoch, t)

    def restore(self, ledger, epoch: int, t: int) -> None:
        """:meth:`rebuild` from a :class:`~.ledger.Ledger`, reading only its tail: the current
        epoch's entries are the last ones (epochs only grow), so older sealed segments stay sealed."""
        tail = []
        for entry in reversed(ledger):
            if entry.get("epoch") != epoch:
                break
            tail.append(entry)
        tail.reverse()
        self.rebuild(tail, epoch, t)
