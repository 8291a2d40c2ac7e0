"""Baselines the papers compare against (docs/algorithms.md 8), with the same API.

- :class:`DiscardRestart`: forget everything after each deletion; trivially (alpha, 0)-OLU.
- :class:`PlainOGD`: never unlearns; the accuracy ceiling, not a certified unlearner.
- Exact retraining lives in ``retrain.py`` (it needs the stored examples).
"""

from __future__ import annotations

import numpy as np

from ..core.base import Deletion, OnlineUnlearner


class DiscardRestart(OnlineUnlearner):
    """Reinitialise OGD (z = 0, t = 0, new epoch) after every deletion of an applied record.

    >>> m = DiscardRestart(dim=2)
    >>> _ = m.learn_one("a", [0.6, 0.8], 1)
    >>> m.unlearn_one("a").outcome, m.weights.tolist(), m.t
    ('restarted', [0.0, 0.0], 0)
    """

    algorithm = "restart"

    def _delete(self, key: int, steps: list[int]) -> Deletion:
        self.epoch += 1
        self.t = 0
        self.index.clear()
        self.z = np.zeros(self.param_dim)
        return Deletion("restarted", 0, 0.0, 0.0, tuple(steps))

    def _legacy_deletions_applied(self) -> int:
        return self.epoch  # every deletion of an applied record started a new epoch


class PlainOGD(OnlineUnlearner):
    """Projected OGD that ignores deletions (records the tombstone only)."""

    algorithm = "ogd"

    def _delete(self, key: int, steps: list[int]) -> Deletion:
        return Deletion("ignored", 0, 0.0, 0.0, tuple(steps))
