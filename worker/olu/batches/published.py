"""The state a release shows, captured at one point of a batch (the stream serialises it later)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Published:
    """Everything a release reads from a model, as of one moment: a batch may go on learning
    after the deletion whose release shows the state right after it."""

    weights: np.ndarray
    privacy: dict
    t: int
    deletions_applied: int
    epoch: int
    algorithm: str
    loss: object  # the loss (its name; a softmax's classes)
    dim: int
    noise: tuple  # (noise std bound, noise-to-signal), None where the algorithm does not track them

    @classmethod
    def of(cls, model) -> Published:
        """The model's state now (every algorithm and a rotation)."""
        return cls(model.weights, model.privacy(), model.t, model.deletions_applied, model.epoch,
                   model.algorithm, model.loss, model.dim, model.noise_figures())
