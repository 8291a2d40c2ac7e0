"""The compiled kernels as the engine uses them, imported on first use (numba takes ~0.2 s to
import); ``None`` where numba is unavailable, and the engine stays correct, only slower."""

from __future__ import annotations

import logging
from types import ModuleType

log = logging.getLogger(__name__)

_LOADED: ModuleType | bool | None = None


def compiled() -> ModuleType | None:
    """:mod:`worker.olu.core.kernels.api`, loaded once; None if numba is missing or broken."""
    global _LOADED
    if _LOADED is None:
        try:
            from . import api

            _LOADED = api
        except ImportError as exc:  # numba missing or broken: stay correct, just slower
            log.warning("compiled OGD kernel unavailable (%s); using numpy", exc)
            _LOADED = False
    return _LOADED or None
