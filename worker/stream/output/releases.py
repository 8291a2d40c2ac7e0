"""Release records on the parameter topic (schemas/release.schema.json).

The value is a pure function of the model state and the input position, so a replay after a
crash republishes byte-identical values: ``released_at`` is the Kafka timestamp of the last
applied event, not the wall clock, and why a release was published travels in a header. The key,
the header names and their values are defined in :mod:`worker.wire`.
"""

from __future__ import annotations

import math

import numpy as np
import orjson

from ... import __version__
from ...olu import Published
from ...wire import (
    BUDGET_HEADER,
    BUDGET_OUTCOMES,
    RELEASE_SCHEMA_VERSION,
    TRIGGER_HEADER,
    WORKER_VERSION_HEADER,
)
from ..exceptions import UnreleasableState

#: What a release adds to ``privacy`` for a rotation and for the planned split
#: (schemas/release.schema.json).
ROTATION_PRIVACY = ("rotation", "model_rho", "model_age", "rotations")
PLANNED_PRIVACY = ("split", "capacity_planned", "capacity_used", "overflow_deletions")
KEY_CAP_PRIVACY = ("max_records_per_key", "records_over_key_cap")  # OLU_MAX_RECORDS_PER_KEY set
_MAX_DOUBLE = 1.7976931348623157e308  # JSON has no infinity: the largest double stands for it


def _json_number(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else _MAX_DOUBLE


def request_report(event, deletion, request_id: str) -> dict:
    """The release's ``request`` object for the deletion request ``event`` (schemas/README.md):
    its id, how many ids it named, how many the model applied, the ids it never applied (in
    request order) and how many an earlier request had already deleted (no-ops). A request that
    names its subject names no ids: ``ids`` counts the subject's records the model still held or
    an earlier request had unlearned, and none is listed (a release never carries the subject, nor
    stand-ins for its records; the receipt counts the rest)."""
    named = event.subject is None
    not_applied = list(deletion.not_applied) if named else []
    count = len(event.ids) if named else deletion.records + len(deletion.duplicates)
    return {"request_id": request_id, "ids": count, "applied": int(deletion.records),
            "not_applied": not_applied, "duplicates": len(deletion.duplicates),
            **({} if named else {"subject": True})}


def _classes(loss) -> dict:
    """``{"classes": [...]}`` for a softmax (its labels in class order: row k of the weights is
    class k), else ``{}``: the binary and linear losses' releases carry no such key."""
    classes = getattr(loss, "classes", None)
    return {} if classes is None else {"classes": list(classes)}


def release_value(*, model_name: str, topic: str, partition: int, offset: int, event_time_ms: int,
                  model,
                  noise: tuple[float | None, float | None] | None = None,
                  request: dict | None = None,
                  features=None) -> bytes:
    """The release's JSON value of ``model`` (or its :class:`Published` state, captured earlier);
    ``noise``: (noise std bound, noise-to-signal) when the caller has them already (default: the
    state's, ``Model.noise_figures()``, docs/accounting.md 10); ``request``: the report of
    the deletion request the state directly follows (see :func:`request_report`), else None;
    ``features``: the feature spec the model learns under."""
    model = model if isinstance(model, Published) else Published.of(model)
    weights = model.weights
    if not np.isfinite(weights).all():  # the method: np.all's wrapper cost ~10 us a release
        raise UnreleasableState(f"{topic}/{partition}: non-finite weights at offset {offset}")
    privacy = model.privacy
    noise_std, noise_to_signal = model.noise if noise is None else noise
    record = {
        "schema_version": RELEASE_SCHEMA_VERSION,
        "model": model_name,
        "topic": topic,
        "partition": partition,
        "version": offset,  # the next offset: strictly increasing and a function of the input only
        "offset": offset,
        "t": model.t,
        "deletions": model.deletions_applied,  # lifetime, every algorithm (not only charged ones)
        "epoch": model.epoch,
        "algorithm": model.algorithm,
        "loss": model.loss.name,
        **_classes(model.loss),
        "dim": model.dim,  # features d; a softmax's weights are its K x d matrix, row by row
        "weights": weights,
        "privacy": {
            "unit": privacy["unit"],
            "rho": privacy["rho"],
            "target_epsilon": privacy["target_epsilon"],
            "requests": privacy["requests"],
            "eps_rdp_slope": privacy["eps_rdp_slope"],
            "budget_used": min(1.0, privacy["budget_used"]),
            "epsilon": _json_number(privacy["epsilon"]),
            "delta": privacy["delta"],
            "deletions_capacity_left": privacy["deletions_capacity_left"],
            "noise_std": _json_number(noise_std),
            "noise_to_signal": _json_number(noise_to_signal),
        },
        "released_at": max(0, event_time_ms) / 1000.0,
    }
    if request is not None:
        record["request"] = request
    if features is not None:
        record["features"] = {"digest": features.digest, "spec": features.text}
    if "rotation" in privacy:
        # a warm-standby rotation: which model this is (docs/accounting.md 12.1)
        record["generation"] = privacy["generation"]
        record["privacy"].update({k: privacy[k] for k in ROTATION_PRIVACY})
    if privacy.get("split") == "planned":
        record["privacy"].update({k: privacy[k] for k in PLANNED_PRIVACY})
    if "max_records_per_key" in privacy:
        record["privacy"].update({k: privacy[k] for k in KEY_CAP_PRIVACY})
    return orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY)


def release_headers(trigger: str) -> list[tuple[str, bytes]]:
    return [(TRIGGER_HEADER, trigger.encode()), (WORKER_VERSION_HEADER, __version__.encode())]


def budget_header(outcome: str) -> tuple[str, bytes]:
    """The budget header: what the exhausted budget led to (``retrained``)."""
    if outcome not in BUDGET_OUTCOMES:
        raise ValueError(f"budget outcome must be one of {BUDGET_OUTCOMES}, got {outcome!r}")
    return (BUDGET_HEADER, outcome.encode())
