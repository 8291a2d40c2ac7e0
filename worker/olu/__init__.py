"""Online learning-unlearning (OLU) engine: pure Python and numpy, no I/O.

Usable alone, like a River estimator::

    >>> from worker.olu import PassiveOLU
    >>> model = PassiveOLU(dim=2, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)
    >>> model.learn_one("r-1", [0.6, 0.8], 1)
    True
    >>> model.unlearn_one("r-1").outcome
    'noised'
    >>> 0.0 <= model.predict_proba_one([0.6, 0.8]) <= 1.0
    True
"""

from .algorithms.active import ActiveAnchor, ActiveD2D
from .algorithms.baselines import DiscardRestart, PlainOGD
from .algorithms.dptofw import DPTreeOnlineFrankWolfe
from .algorithms.memorypair import MemoryPair
from .algorithms.newton import RidgeNewton
from .algorithms.passive import PassiveOLU, PassiveRestartOLU
from .algorithms.retrain import Retrain
from .algorithms.rewind import RewindToDelete
from .batches import (
    Applied,
    Batch,
    Columns,
    Forget,
    Forgotten,
    Learn,
    Learned,
    Published,
    apply_batch,
    mean_loss,
)
from .core.base import Deletion, OnlineUnlearner
from .core.examples import ExampleStore
from .core.losses import Softmax
from .core.record_keys import MAX_ID_BYTES, record_key, record_keys
from .core.sparse import SparseRows
from .exceptions import BudgetExhausted, InvalidExample, InvalidState, OLUError
from .privacy.accountant import PrivacyAccountant
from .protocol import Model
from .registry import ALGORITHMS, load_model
from .warm import warm_up

__all__ = [
    "ALGORITHMS", "MAX_ID_BYTES", "ActiveAnchor", "ActiveD2D", "Applied", "Batch",
    "BudgetExhausted", "Columns",
    "Deletion", "DiscardRestart", "DPTreeOnlineFrankWolfe", "ExampleStore", "Forget", "Forgotten",
    "InvalidExample",
    "InvalidState", "Learn", "Learned", "MemoryPair", "Model", "OLUError", "OnlineUnlearner",
    "PassiveOLU",
    "PassiveRestartOLU", "PlainOGD", "PrivacyAccountant", "Published", "Retrain", "RewindToDelete",
    "RidgeNewton",
    "Softmax", "SparseRows", "apply_batch", "load_model", "mean_loss", "record_key", "record_keys",
    "warm_up",
]
