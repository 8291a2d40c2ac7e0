"""Exceptions of the settings layer.

:class:`ConfigError` is the one the callers see; it is defined with the package's root in
:mod:`worker.exceptions` (the engine raises the same class). :class:`BadValue` never leaves the
layer: a parser raises it, and the loader turns it into a :class:`ConfigError` that names the
setting.
"""

from __future__ import annotations

from ..exceptions import ConfigError, OluWorkerError

__all__ = ["BadValue", "ConfigError"]


class BadValue(OluWorkerError, ValueError):
    """Raised by a parser with what the value must be ("a number > 0")."""
