"""Searching the bandwidth of a spec's random Fourier features on the sample.

A ``fourier`` block approximates an RBF kernel whose width is the declared bandwidth
(docs/features.md): too wide and the curved boundary is smoothed away, too narrow and the features
fit noise. The bandwidth changes neither the block's norm bound (sqrt 2 times its weight) nor the
model's dimension, so the certificate and every noise figure of the plan stay as they are; what it
changes is what the model can learn. So the plan replays plain OGD (at the search's best l2) on the
sample transformed by the spec with each block's bandwidth times :data:`FACTORS`, and says when
one scores :data:`MIN_GAIN` better than the declared one. The map stays declared: the operator
writes the new bandwidth into the spec (a new spec, so a new model), never the worker.
"""

from __future__ import annotations

from collections.abc import Callable

from ..features.spec import FeatureSpec, parse_spec
from .simulate import better, replay, score
from .target import build_engine

__all__ = ["FACTORS", "MIN_GAIN", "bandwidth_search", "with_bandwidth"]

#: Multiples of each block's declared bandwidth tried (a ladder: a bandwidth off by 8x is found).
FACTORS = (0.125, 0.25, 0.5, 2.0, 4.0)
#: Accuracy (or RMSE) a bandwidth must gain over the declared one to be recommended.
MIN_GAIN = 0.005


def with_bandwidth(spec: FeatureSpec, block: int, bandwidth: float) -> FeatureSpec:
    """``spec`` with its ``block``-th derived block (a ``fourier`` one) at ``bandwidth``."""
    derived = [dict(d) for d in spec.source["derived"]]
    derived[block]["bandwidth"] = bandwidth
    return parse_spec({**spec.source, "derived": derived})


def bandwidth_search(settings, target, workload, *, rebuild: Callable[[FeatureSpec], object],
                     l2: float, declared_score: float, metric: str) -> dict | None:
    """Each ``fourier`` block of the settings' spec at each of :data:`FACTORS` times its
    bandwidth: plain OGD at ``l2`` on the workload ``rebuild(spec)`` makes of the same sample
    (its requests left out, as the search's yardstick does). None without such a block."""
    spec = settings.feature_spec
    blocks = [k for k, d in enumerate(spec.source.get("derived", ()))
              if d["type"] == "fourier"] if spec is not None else []
    if not blocks:
        return None
    pick, tried = better(metric), []
    for k in blocks:
        declared = spec.source["derived"][k]
        for factor in FACTORS:
            bandwidth = declared["bandwidth"] * factor
            variant = rebuild(with_bandwidth(spec, k, bandwidth))
            scores = replay(build_engine(settings, target, l2=l2, cap=None), variant,
                            loss=settings.loss, requests=False)
            tried.append({"block": k, "fields": list(declared["fields"]),
                          "declared": declared["bandwidth"], "bandwidth": bandwidth,
                          "score": score(scores, settings.loss)})
    top = pick(tried, key=lambda r: r["score"])
    gain = (top["score"] - declared_score) * (1 if metric == "accuracy" else -1)
    return {"l2": l2, "declared_score": declared_score, "tried": tried,
            "best": top if gain >= MIN_GAIN else None}
