"""The iterate as a scale times a vector, so a sparse step need not touch every coordinate.

The l2 term shrinks every coordinate at every step: z <- (1 - eta lam) z - eta s x. Kept as
z = a w, the shrinkage is one multiplication of the scale ``a`` and the step writes only the row's
non-zeros of ``w`` (docs/worker.md 4.3). ``z`` reads the iterate (a w, computed once per change and
cached: a read never changes the state); assigning ``z`` (what every dense step, deletion and
restore does) stores it with the scale 1. Both are functions of the events alone, never of when
someone read the model, so a replay gives the same bits.

>>> class Model(ScaledIterate):
...     def __init__(self):
...         self.z = np.array([2.0, 4.0])
>>> m = Model()
>>> m.set_scaled(np.array([2.0, 4.0]), 0.5, 20.0)
>>> m.z.tolist(), m.scale
([1.0, 2.0], 0.5)
>>> m.z = m.z            # a dense step: the iterate itself, scale 1
>>> m.scale, m.unscaled.tolist()
(1.0, [1.0, 2.0])
"""

from __future__ import annotations

import math

import numpy as np


class ScaledIterate:
    """``z`` = ``scale * unscaled``; ``unscaled_sqnorm`` is ||unscaled||^2 as the sparse steps keep
    it (None: not kept, computed exactly by the next sparse step)."""

    _w: np.ndarray
    _scale: float = 1.0
    _sqnorm: float | None = None
    _materialised: np.ndarray | None = None

    @property
    def z(self) -> np.ndarray:
        if self._scale == 1.0:
            return self._w
        if self._materialised is None:
            self._materialised = self._w * self._scale
        return self._materialised

    @z.setter
    def z(self, value: np.ndarray) -> None:
        self._w, self._scale, self._sqnorm, self._materialised = value, 1.0, None, None

    @property
    def scale(self) -> float:
        return self._scale

    @property
    def unscaled(self) -> np.ndarray:
        return self._w

    @property
    def unscaled_sqnorm(self) -> float | None:
        return self._sqnorm

    def set_scaled(self, unscaled: np.ndarray, scale: float, sqnorm: float | None) -> None:
        """The iterate as a sparse step leaves it (a new array: readers of ``z`` keep theirs)."""
        if not (math.isfinite(scale) and scale > 0.0):
            raise ValueError(f"the iterate's scale must be finite and > 0, got {scale!r}")
        self._w, self._scale, self._sqnorm, self._materialised = (
            unscaled, float(scale), sqnorm, None)

    def fold_scale(self) -> None:
        """Store the iterate with the scale 1 (a deletion does, at its own point in the stream)."""
        if self._scale != 1.0:
            self.z = self.z
