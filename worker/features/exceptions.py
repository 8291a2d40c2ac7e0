"""Exceptions of the feature spec: a spec that cannot be
used, a record it cannot turn into a vector."""

from __future__ import annotations

from ..exceptions import OluWorkerError

__all__ = ["BadFeature", "FeatureSpecError"]


class FeatureSpecError(OluWorkerError, ValueError):
    """The feature spec has mistakes: ``problems``, one line each."""

    def __init__(self, problems: list[str]):
        super().__init__(
            "the feature spec has mistakes:\n" + "\n".join(f"  - {p}" for p in problems))
        self.problems = problems


class BadFeature(OluWorkerError, ValueError):
    """A record whose named fields do not fit the spec: ``reason`` is a dead-letter code, ``detail``
    names the field (never its value)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail
