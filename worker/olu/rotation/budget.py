"""What a rotation plans per model: its share of the slope and the deletions it will be charged.

Pure arithmetic on the settings (docs/accounting.md 12.2, 12.3, 12.6), shared by the rotation
itself and the planning layer that sizes it.
"""

from __future__ import annotations

import math

from ..exceptions import ConfigError
from ..privacy.analysis.split import capacity_for_rate

VARIANTS = ("overlap", "disjoint")


def model_budget(unit: str, variant: str, rho: float) -> float:
    """Each model's slope: half of ``rho``, except per-request disjoint (docs/accounting.md 12.3).

    >>> model_budget("all-deletions", "disjoint", 1.0), model_budget("per-request", "disjoint", 1.0)
    (0.5, 1.0)
    """
    if variant not in VARIANTS:
        raise ConfigError(f"rotation must be one of {', '.join(VARIANTS)}, got {variant!r}")
    return rho if (unit == "per-request" and variant == "disjoint") else rho / 2.0


def charged_deletions(rate: float, events: int, age: int | None = None) -> float:
    """Expected deletions charged to a model ``events`` old when a ``rate`` of the events are
    requests, each naming a record inserted uniformly among the last ``age`` inserts (None: every
    request names a record the model holds).

    A model is charged only for records it applied (docs/accounting.md 12.2): at age ``s`` it holds
    the ``min(s, age)`` most recent of the ``age`` records a request may name, so requests reach
    it at the rate ``rate min(1, s / age)``, and over ``events`` that integrates to
    ``rate events**2 / (2 age)`` up to ``age``, ``rate (events - age / 2)`` beyond.

    >>> charged_deletions(0.01, 20_000, 100_000), charged_deletions(0.01, 400_000, 100_000)
    (20.0, 3500.0)
    """
    if age is None or age <= 0:
        return rate * events
    if events <= age:
        return rate * events * events / (2.0 * age)
    return rate * (events - age / 2.0)


def planned_capacity(rate: float, lifetime_events: int, variant: str,
                     age: int | None = None) -> int:
    """Deletions one model is planned to be charged in its lifetime at a deletion ``rate`` per
    event: all of them in the overlap variant, about half in the disjoint one (it holds half the
    records). With ``age`` (requests name records inserted uniformly among the last ``age``),
    only those of records the model holds: :func:`charged_deletions`. A lifetime shorter than the
    age is charged for a fraction of the requests (the others name records older than the model,
    which it never applied): the lever that makes short lifetimes cheap (docs/accounting.md 12.6).

    >>> planned_capacity(0.001, 400_000, "overlap"), planned_capacity(0.001, 400_000, "disjoint")
    (400, 200)
    >>> planned_capacity(0.01, 20_000, "overlap", age=100_000)
    20
    >>> planned_capacity(0.01, 20_000, "disjoint", 100_000)
    10
    """
    model_budget("all-deletions", variant, 1.0)
    if age is None:
        events = lifetime_events if variant == "overlap" else max(1, lifetime_events // 2)
        return capacity_for_rate(rate, events)
    charged = charged_deletions(rate, lifetime_events, age) * (1.0 if variant == "overlap" else 0.5)
    return max(1, math.ceil(charged - 1e-9))
