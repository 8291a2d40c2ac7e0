"""Setting the process up for the loop: compiled kernels, the GIL switch interval, a frozen GC."""

from __future__ import annotations

import gc
import sys
import time

from ..logs import get_logger
from ..memory import fix_malloc_thresholds
from ..olu import warm_up
from .input import framed_scan, scan

log = get_logger("olu.worker")


def _warm_up_kernels(settings=None) -> None:
    seconds = warm_up(sparse=getattr(settings, "sparse_input", False))
    if seconds is None:
        return  # numba unavailable: the engine uses its numpy reference step
    started = time.perf_counter()
    scan.warm_up(features=getattr(settings, "feature_spec", None),
                 sparse=getattr(settings, "sparse_input", False))
    if getattr(settings, "input_format", "json") in ("avro", "protobuf"):
        framed_scan.warm_up_reader(settings.input_format)
    seconds += time.perf_counter() - started
    log.info("compiled kernels ready", extra={"seconds": round(seconds, 3)})


GIL_SWITCH_INTERVAL_S = 0.0005


def prepare_process(settings=None) -> float:
    """Set the process up for the loop, before the first batch (the worker; benches that drive
    the partition runner without it): returns the GIL switch interval it replaced. ``settings``:
    also compile the readers its input needs (a feature spec's, a registry format's)."""
    _warm_up_kernels(settings)  # compile before the first batch, not inside it
    # The delta and snapshot writers hand the GIL back and forth with the loop around every
    # store call and fsync; at the default 5 ms switch interval each hand-over can cost a
    # deletion 5 ms of latency while the loop is busy learning.
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    # Everything loaded so far (numpy, numba, the Kafka clients: ~120,000 objects) lives as long
    # as the process: keep the cyclic GC from walking it in every full collection (~60 ms each,
    # a pause every deletion in flight would wait out).
    gc.freeze()
    fix_malloc_thresholds()  # as the CLI does first thing: in-process runs (benches) get it too
    return switch_interval
