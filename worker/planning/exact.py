"""Exact unlearning as an alternative to the noised units: what ``retrain`` would score on the
workload and what its deletions would cost.

An exact deletion adds no noise: the model after it is plain OGD over the stream without the
record (docs/algorithms.md 8.1), so its score is the plain OGD yardstick the search already
simulates at each l2 (the search replays OGD without the requests, which differs from the masked
stream only by the deleted share of records). What it costs instead is time and memory: a
deletion replays every retained row after the newest checkpoint before the record (its age plus
half a checkpoint interval, on average), at about :data:`NS_PER_COORDINATE` a coordinate of a dense
row; and every retained row stays in memory, dense (8 bytes a coordinate). Rows of few non-zeros
(at most :data:`SPARSE_SHARE` of the coordinates on the sample) are kept sparse
(``OLU_RETAINED_ROWS=sparse``): 16 bytes and about :data:`NS_PER_NONZERO` a non-zero.

>>> cost = replay_cost(ages=[1_000, 3_000], dim=100, rate=0.01, events=1_000_000, every=256)
>>> cost["replayed_per_deletion"], round(cost["seconds_per_deletion"], 6), cost["memory_bytes"]
(2128.0, 0.001128, 816750000)
>>> sparse = replay_cost(ages=[1_000, 3_000], dim=5_000, rate=0.01, events=1_000_000, every=256,
...                      nonzeros=50.0)
>>> sparse["retained_rows"], round(sparse["seconds_per_deletion"], 6), sparse["memory_bytes"]
('sparse', 0.001128, 824670000)
"""

from __future__ import annotations

import numpy as np

__all__ = ["NS_PER_COORDINATE", "NS_PER_NONZERO", "exact_option", "replay_cost"]

#: A replayed dense OGD step costs about this many nanoseconds a coordinate (measured: 25 us a step
#: at d = 4,748 on the 2-core bench machine, bench/model_capacity.py's exact column).
NS_PER_COORDINATE = 5.3
#: A replayed sparse step, per non-zero (measured: ~6 us a step, learning included, at 564
#: non-zeros of d = 5,260 on the same machine, bench/model_capacity.py's exact column).
NS_PER_NONZERO = 10.6
#: Rows whose mean non-zeros are at most this share of d are kept sparse (a sparse step costs
#: ~2x a dense one per coordinate it touches, its rows 2x the bytes per value).
SPARSE_SHARE = 0.25
#: Bytes a retained row costs besides its features: label, step, key and liveness (and, sparse,
#: its start in the row offsets).
ROW_OVERHEAD_BYTES = 25


def replay_cost(*, ages, dim: int, rate: float, events: int, every: int,
                nonzeros: float | None = None) -> dict:
    """Replayed steps, seconds per deletion and retained-row memory after ``events`` events, for
    deleted records of these ``ages`` (in events), ``rate`` requests per event, checkpoints
    ``every`` steps and rows of ``nonzeros`` non-zeros on average (None: dense); the rate of
    events a partition can sustain while replaying (None without deletions), and how the rows
    are kept."""
    ages = np.asarray(list(ages), np.float64)
    steps = float(ages.mean() + every / 2) if len(ages) else 0.0
    sparse = nonzeros is not None and nonzeros <= SPARSE_SHARE * dim
    if sparse:
        seconds = steps * nonzeros * NS_PER_NONZERO * 1e-9
        row_bytes = 16 * nonzeros + ROW_OVERHEAD_BYTES + 8
    else:
        seconds = steps * dim * NS_PER_COORDINATE * 1e-9
        row_bytes = 8 * dim + ROW_OVERHEAD_BYTES
    retained = events * (1.0 - rate)
    return {"replayed_per_deletion": steps, "seconds_per_deletion": seconds,
            "memory_bytes": int(retained * row_bytes),
            "retained_rows": "sparse" if sparse else "dense",
            "events_per_s_ceiling": 1.0 / (rate * seconds) if rate > 0 and seconds > 0 else None}


def exact_option(ogd_by_l2: dict, *, metric: str, workload, dim: int, events: int,
                 every: int) -> dict:
    """The exact alternative: the best plain OGD l2, its score and settings, and its cost."""
    better = max if metric == "accuracy" else min
    l2 = better(ogd_by_l2, key=lambda k: ogd_by_l2[k])
    X = workload.X
    nonzeros = float(np.count_nonzero(X)) / len(X) if len(X) and X.shape[1] == dim else None
    cost = replay_cost(ages=workload.ages(), dim=dim, rate=workload.rate, events=events,
                       every=every, nonzeros=nonzeros)
    rows = " OLU_RETAINED_ROWS=sparse" if cost["retained_rows"] == "sparse" else ""
    return {"l2": float(l2), "score": ogd_by_l2[l2],
            "settings": f"OLU_ALGORITHM=retrain OLU_L2={float(l2):g}{rows}", **cost}
