"""Online learning-unlearning (OLU) engine: pure Python and numpy, no I/O.

Usable alone, like a River estimator::

    >>> from worker.olu import PassiveOLU
    >>> model = PassiveOLU(dim=2, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, eps=1.0)
    >>> model.learn_one("r-1", [0.6, 0.8], 1)
    True
    >>> model.unlearn_one("r-1").outcome
    'noised'
    >>> 0.0 <= model.predict_proba_one([0.6, 0.8]) <= 1.0
    True
"""

from .accountant import BudgetExhausted, PrivacyAccountant
from .active import ActiveAnchor, ActiveD2D
from .base import ALGORITHMS, Deletion, OnlineUnlearner, load_model
from .dptofw import DPTreeOnlineFrankWolfe
from .baselines import DiscardRestart, PlainOGD
from .errors import InvalidExample, InvalidState, OLUError
from .examples import ExampleStore
from .memorypair import MemoryPair
from .newton import RidgeNewton
from .passive import PassiveOLU, PassiveRestartOLU
from .retrain import Retrain
from .rewind import RewindToDelete

__all__ = [
    "ALGORITHMS", "ActiveAnchor", "ActiveD2D", "BudgetExhausted", "Deletion", "DiscardRestart", "DPTreeOnlineFrankWolfe",
    "ExampleStore", "InvalidExample", "InvalidState", "MemoryPair", "OLUError", "OnlineUnlearner", "PassiveOLU",
    "PassiveRestartOLU", "PlainOGD", "PrivacyAccountant", "Retrain", "RewindToDelete", "RidgeNewton", "load_model",
]
