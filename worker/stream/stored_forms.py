"""What a partition's runner stores and reads back: the headers of its snapshots and deltas, a
deletion's delta payload, a stored delta as the post-noise state a replay adopts, and the check
that a restored state was trained under the configured feature spec."""

from __future__ import annotations

import numpy as np

from ..logs import get_logger
from .exceptions import FeatureSpecChanged

log = get_logger("olu.partition")


def features_header(spec) -> dict:
    """The feature spec's digest, in every snapshot and delta (none without a spec)."""
    return {} if spec is None else {"features": spec.digest}


def delta_payload(after: int, state: dict, event_time_ms: int, spec) -> tuple[dict, dict]:
    """(header, arrays) of the delta of a deletion whose next offset is ``after``.

    The model's deletion state: its arrays (the post-noise iterate ``z``; a rotation's standby
    ``z_standby`` too) and its counters. "deletions" counts charged deletions (the accountant's),
    "deletions_applied" all of them (the release's "deletions"); a replay checks both
    (OnlineUnlearner._adopt), a rotation also its generation and event count."""
    header = {"kind": "delta", "offset": after, "event_time_ms": event_time_ms,
              **features_header(spec)}
    arrays = {}
    for k, v in state.items():
        (arrays if isinstance(v, np.ndarray) else header)[k] = v
    return header, arrays


def post_state(stored: tuple[dict, dict]) -> dict:
    """A stored delta (header, arrays) as the post-noise state ``unlearn_request`` adopts."""
    header, arrays = stored
    state = {k: v for k, v in header.items()
             if k not in ("kind", "offset", "event_time_ms", "features")}
    state.setdefault("deletions_applied", None)  # absent from older deltas
    return {**state, **arrays}


def spec_changed(restored, settings, topic: str, partition: int) -> bool:
    """Whether the stored state was trained under another feature spec (every header says which);
    raises :class:`FeatureSpecChanged` unless ``features_reset`` lets a new model start."""
    wanted = None if settings.feature_spec is None else settings.feature_spec.digest
    headers = (([restored.header] if restored.key is not None else [])
               + [hdr for _, hdr, _ in restored.deltas])
    stored = {hdr.get("features") for hdr in headers}
    if stored <= {wanted}:
        return False
    other = next(iter(stored - {wanted}))
    if not settings.features_reset:
        raise FeatureSpecChanged(
            f"{topic}/{partition}: the stored state (offset {restored.offset}) was trained under "
            f"feature spec {other or 'none'}, the worker is configured with {wanted or 'none'}: a "
            f"different model. Restore with the spec it was trained under, or set "
            "OLU_FEATURES_RESET=true to start a new model from here")
    log.warning("feature spec changed: a new model starts at the stored offset", extra={
        "topic": topic, "partition": partition, "offset": restored.offset, "stored": other,
        "configured": wanted})
    return True
