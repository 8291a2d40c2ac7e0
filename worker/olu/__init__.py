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
from .base import ALGORITHMS, Deletion, OnlineUnlearner, load_model
from .baselines import DiscardRestart, PlainOGD
from .errors import InvalidExample, InvalidState, OLUError
from .passive import PassiveOLU, PassiveRestartOLU

__all__ = [
    "ALGORITHMS", "BudgetExhausted", "Deletion", "DiscardRestart", "InvalidExample", "InvalidState",
    "OLUError", "OnlineUnlearner", "PassiveOLU", "PassiveRestartOLU", "PlainOGD", "PrivacyAccountant",
    "load_model",
]

# --- active algorithms and exact retraining (appended by the active-OLU change; lead to tidy) ---
from .active import ActiveAnchor, ActiveD2D  # noqa: E402  (registers "active-d2d", "active-anchor")
from .examples import ExampleStore  # noqa: E402
from .newton import RidgeNewton  # noqa: E402  (registers "active-newton")
from .retrain import Retrain  # noqa: E402  (registers "retrain")

__all__ += ["ActiveAnchor", "ActiveD2D", "ExampleStore", "Retrain", "RidgeNewton"]
# --- end of the active-OLU block ---
