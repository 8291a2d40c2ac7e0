"""The root of every exception olu-worker raises, and the errors of its top-level modules.

Every exception class defined under ``worker/`` derives from :class:`OluWorkerError`, so one
``except OluWorkerError`` catches anything the worker raises on purpose. Each keeps its standard
base as well (``ValueError``, ``RuntimeError``), so callers that catch those keep working.

Each layer lists its own exceptions in an ``exceptions`` module (``worker.config.exceptions``,
``worker.stream.exceptions``, ``worker.state.exceptions``); the ones defined here belong to the
modules at the top: the settings (:class:`ConfigError`) and the release subscriber
(:class:`InvalidRelease`).

>>> issubclass(ConfigError, OluWorkerError) and issubclass(ConfigError, ValueError)
True
"""

from __future__ import annotations

__all__ = ["ConfigError", "InvalidRelease", "OluWorkerError"]


class OluWorkerError(Exception):
    """Root of every exception olu-worker raises on purpose."""


class ConfigError(OluWorkerError, ValueError):
    """A bad setting; the message names it by environment variable and flag."""


class InvalidRelease(OluWorkerError, ValueError):
    """A parameter record that cannot be used; ``reason`` is a short code, the message says why."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
