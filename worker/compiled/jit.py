"""numba set-up shared by every compiled kernel: the decorator, the disk cache and the switch to
the pure-numpy reference.

Kernels compile lazily on first use (about 1.6 to 2.2 s for all of them, plus ~0.2 s to import
numba; ~0.3 s when loaded from the cache; the stream decoder's kernel adds ~1.9 s, ~0.03 s cached)
and are cached on disk (``cache=True``). numba looks for a writable cache
directory in this order: ``$NUMBA_CACHE_DIR``, the package's ``__pycache__``, then the user cache
(``~/.cache/numba``). When none is writable (a read-only root file system), numba would raise
``RuntimeError`` at import; we then compile without the disk cache and log a warning once: the
kernels work, but every process pays the compile time. In read-only containers set
``NUMBA_CACHE_DIR`` to a writable volume (e.g. an ``emptyDir``) and call
:func:`~worker.olu.core.kernels.warmup.warm_up` at startup, before consuming, so the first message
does not wait for the compiler.

Each kernel's cache entry is stamped with a digest of every compiled source of the package
(:mod:`.cache`), so a kernel may call helpers and read constants of other modules: a change to
any of them recompiles it.

Switches: ``OnlineUnlearner.use_kernel = False`` (class or instance attribute) always uses the
reference; ``OLU_REFERENCE_KERNEL=1`` in the environment (read at import) or ``with
jit.reference():`` (tests) forces the reference for every model.
"""

from __future__ import annotations

import contextlib
import logging
import os

import numba

from .cache import SourcesCache

log = logging.getLogger(__name__)

FORCE_REFERENCE = os.environ.get("OLU_REFERENCE_KERNEL",
                                 "").strip().lower() in ("1", "true", "yes", "on")
CACHE_ENABLED = True


def jit(func=None, *, nogil: bool = True):
    """njit(cache=True, nogil=True, fastmath=False), without the disk cache if no dir is writable.

    ``@jit(nogil=False)`` for kernels of a few microseconds called once per deletion: releasing
    the GIL there only hands it to a busy thread (the delta writer), and the loop then waits for
    it to come back (up to the 5 ms switch interval) for no parallel work worth having."""
    if func is None:
        return lambda f: jit(f, nogil=nogil)
    global CACHE_ENABLED
    kernel = numba.njit(cache=False, nogil=nogil, fastmath=False)(func)
    if CACHE_ENABLED:
        try:
            # what numba's own cache=True does (Dispatcher.enable_caching), with the wider stamp
            kernel._cache = SourcesCache(kernel.py_func)
        except RuntimeError as exc:  # "cannot cache function ...: no locator available"
            CACHE_ENABLED = False
            log.warning("numba cache disabled (%s); kernels compile in every process. Set "
                        "NUMBA_CACHE_DIR to a writable directory.", exc)
    return kernel


def inline(func):
    """``func`` compiled to be inlined into every kernel that calls it (no cache of its own: it is
    compiled into its callers, whose cache stamp covers its module). The way to share a plain
    Python function, such as one of the engine's formulas, with compiled code."""
    return numba.njit(inline="always", nogil=True)(func)


@contextlib.contextmanager
def reference():
    """Within the block every model uses the pure-numpy reference step (for tests)."""
    global FORCE_REFERENCE
    saved, FORCE_REFERENCE = FORCE_REFERENCE, True
    try:
        yield
    finally:
        FORCE_REFERENCE = saved


def reference_forced() -> bool:
    """``OLU_REFERENCE_KERNEL=1`` or inside :func:`reference`: every model takes the reference."""
    return FORCE_REFERENCE
