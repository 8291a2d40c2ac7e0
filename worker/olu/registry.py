"""Every algorithm the worker can run, by its name in settings, state and releases.

One explicit dict: a new algorithm is added here, and the stream and config layers read what they
need from the class itself (``keeps_examples``, ``settings``), so no other module lists algorithms.
Registering also puts it under the contract suite (tests/olu/test_contract.py).
"""

from __future__ import annotations

import numpy as np

from .algorithms.active import ActiveAnchor, ActiveD2D
from .algorithms.baselines import DiscardRestart, PlainOGD
from .algorithms.dptofw import DPTreeOnlineFrankWolfe
from .algorithms.memorypair import MemoryPair
from .algorithms.newton import RidgeNewton
from .algorithms.passive import PassiveOLU, PassiveRestartOLU
from .algorithms.retrain import Retrain
from .algorithms.rewind import RewindToDelete
from .core.base import OnlineUnlearner
from .exceptions import InvalidState
from .rotation import Rotation

ALGORITHMS: dict[str, type[OnlineUnlearner]] = {
    cls.algorithm: cls
    for cls in (
        PassiveOLU, PassiveRestartOLU,  # certified, noise per deletion
        ActiveD2D, ActiveAnchor, RidgeNewton,  # certified, work on retained data
        MemoryPair, RewindToDelete,  # certified, second-order / rewind-to-delete
        DPTreeOnlineFrankWolfe,  # online DP: deletions covered by the DP guarantee
        Retrain, DiscardRestart, PlainOGD,  # baselines: exact retraining, restart, no unlearning
    )
}


def load_model(state: dict,
               noise_rng: np.random.Generator | None = None) -> OnlineUnlearner | Rotation:
    """Rebuild any registered algorithm's model, or a rotation of one, from ``export_state()``;
    ``InvalidState`` otherwise.

    >>> from worker.olu import PassiveOLU
    >>> m = PassiveOLU(dim=2)
    >>> _ = m.learn_one("r-1", [0.6, 0.8], 1)
    >>> type(load_model(m.export_state())).__name__
    'PassiveOLU'
    """
    try:
        name = state["meta"]["algorithm"]
    except (KeyError, TypeError) as exc:
        raise InvalidState(f"malformed model state: {exc!r}") from None
    if name == Rotation.state_name:  # two models of one algorithm (worker.olu.rotation)
        return Rotation.from_state(state, noise_rng)
    cls = ALGORITHMS.get(name)
    if cls is None:
        raise InvalidState(f"unknown algorithm {name!r} (this build knows {sorted(ALGORITHMS)})")
    return cls.from_state(state, noise_rng)
