"""The planner's exceptions, under the root :class:`worker.exceptions.OluWorkerError`.

Each is one line for the operator: ``olu-worker plan`` prints it and exits 2.
"""

from __future__ import annotations

from ..exceptions import OluWorkerError

__all__ = ["PlanError", "PlanningError", "PlotUnavailable", "SampleError"]


class PlanningError(OluWorkerError):
    """Root of the planner's errors."""


class PlanError(PlanningError, ValueError):
    """Bad plan input; the message is the one line shown."""


class SampleError(PlanningError, ValueError):
    """The sample cannot be used; the message names the file and line."""


class PlotUnavailable(PlanningError, RuntimeError):
    """matplotlib is not installed."""
