"""Privacy accounting of deletions: the Rényi accountant of the certified algorithms, memory-pair's
zCDP odometer, the deletion ledger and dp-tofw's tree aggregation; the pure conversions and
calibrations live in :mod:`.analysis`. Depends on nothing else in the engine but its exceptions
and formulas.

What the layers above the engine (the planner, the settings) may use of it is exported here: the
privacy units, their conversions, and the noise and capacity a plan predicts.
"""

from .analysis.noise import plan_deletions, predicted_noise_growth, predicted_noise_std
from .analysis.rdp import noise_multiplier, rho_for_epsilon
from .analysis.split import DEFAULT_RESERVE, SPLIT_NAMES, capacity_for_rate
from .analysis.units import UNITS, per_request_sigma, unit_epsilon, unit_rho_for_epsilon

__all__ = ["DEFAULT_RESERVE", "SPLIT_NAMES", "UNITS", "capacity_for_rate", "noise_multiplier",
           "per_request_sigma", "plan_deletions", "predicted_noise_growth", "predicted_noise_std",
           "rho_for_epsilon", "unit_epsilon", "unit_rho_for_epsilon"]
