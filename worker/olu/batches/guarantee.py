"""What one deletion request got: the privacy guarantee a receipt states for it.

A function of the model's constants, the request's answer and the rotation generation at the
request only, so a replay states the same guarantee byte for byte, however the stream was cut
into poll batches.

- ``noised``: Gaussian noise of ``sigma`` calibrated to the request's shift. Under the per-request
  unit the request's own (epsilon, delta), exact (the Gaussian mechanism's curve); under
  all-deletions the epoch's budget, which every release of the epoch keeps (the released
  ``privacy.epsilon`` is the spend so far, never more).
- ``exact``, ``restarted``, ``retrained``: the model no longer depends on the records at all:
  epsilon 0.
- under rotation, which model generation released the request and the rotation's event count by
  which every model that can hold the records has retired (the active one at the next promotion,
  the standby one half a lifetime after: docs/accounting.md 12).

>>> from worker.olu import PassiveOLU
>>> model = PassiveOLU(dim=2, rho=0.5, privacy_unit="per-request")
>>> model.learn_one("r-1", [0.6, 0.8], 1)
True
>>> g = request_guarantee(model, model.unlearn_one("r-1"))
>>> g["outcome"], g["unit"], round(g["epsilon"], 4), g["delta"]
('noised', 'per-request', 4.3772, 1e-05)
"""

from __future__ import annotations

from ..core.deletion import Deletion
from ..privacy.analysis.units import unit_epsilon
from ..rotation.models import Rotation

EXACT_OUTCOMES = ("exact", "restarted", "retrained")


def request_guarantee(model, deletion: Deletion) -> dict:
    """The guarantee of a request ``deletion`` answered that changed ``model`` (module doc), right
    after it."""
    rotation = isinstance(model, Rotation)
    held = model.active if rotation else model
    unit, delta = held.accountant.unit, held.accountant.delta
    if deletion.outcome in EXACT_OUTCOMES:
        epsilon = 0.0
    elif held.calibration == "gaussian":
        epsilon = unit_epsilon(unit, model.rho if rotation else held.accountant.budget, delta)
    else:  # rewind's epsilon follows the deletions so far (docs/calibration.md 6.2)
        epsilon = model.privacy()["epsilon"]
    guarantee = {"outcome": deletion.outcome, "unit": unit, "delta": delta, "epsilon": epsilon,
                 "sigma": deletion.sigma, "epoch": held.epoch}
    if rotation:
        guarantee["generation"] = model.generation
        guarantee["retired_by_event"] = (model.generation + 2) * model.half
    return guarantee
