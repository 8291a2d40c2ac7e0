"""The closed-form check ``olu-worker run`` makes at start: under the all-deletions unit, does the
expected deletion rate leave a useful model? Pure (the noise formula of worker/planning/predict.py).

Under all-deletions every deleted record is protected together, so the noise grows with the share of
records deleted and never fades; at 0.5% deletions and epsilon 1 the release is mostly noise. The
worker cannot know the workload, but when ``OLU_EXPECTED_DELETION_RATE`` states it, it says at start
what the formula predicts rather than let an operator find a near-chance model later.
"""

from __future__ import annotations

import math

from .advice import NOISE_TO_SIGNAL_LIMIT
from .predict import noise_std
from .target import PLANNED_ALGORITHMS, build_engine, resolve_target

__all__ = ["HORIZON", "unit_warning"]

HORIZON = 1_000_000  # events a model without rotation is judged at
AGE = 100_000


def unit_warning(settings) -> str | None:
    """One sentence when the all-deletions release is predicted to be mostly noise, else None."""
    rate = settings.expected_deletion_rate
    if (settings.privacy_unit != "all-deletions" or not rate
            or settings.algorithm not in PLANNED_ALGORITHMS):
        return None
    target = resolve_target(settings)
    model = build_engine(settings, target)
    rotating = settings.rotation == "on"
    events = settings.model_lifetime_events if rotating else HORIZON
    rho = target.rho / 2 if rotating else target.rho  # each model of a rotation has half the slope
    std = noise_std(model, type(target)(target.unit, rho, target.delta, None), deletion_rate=rate,
                    events=events,
                    omega=settings.omega, age=min(AGE, events))
    ratio = std * math.sqrt(model.param_dim) / model.ball.radius  # K d coordinates for softmax
    if ratio <= NOISE_TO_SIGNAL_LIMIT:
        return None
    return (f"under OLU_PRIVACY_UNIT=all-deletions at OLU_EXPECTED_DELETION_RATE={rate:g} the "
            f"noise formula predicts a noise norm of {ratio:.2f} times the radius after {events:,} "
            f"events (a lower bound of the noise-to-signal; above {NOISE_TO_SIGNAL_LIMIT} the "
            f"release is mostly noise): consider OLU_PRIVACY_UNIT=per-request, or run olu-worker "
            "plan on a sample of your events")
