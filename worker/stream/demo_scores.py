"""What the demo's released models are worth, beside plain OGD on the same events.

The demo knows its own data: a noisy linear rule (:func:`worker.stream.demo_scores.rule`). Each
released model (the newest release of each partition, as a subscriber holds it) is scored on fresh
points of that rule: accuracy for the logistic loss, mean squared error for ridge. Beside it, plain
OGD (the same loss, constants and schedule, never unlearning) learns the same events of the same
partition in the same order, and is scored on the same points: the gap is what certified
deletion costs on this stream. A large gap gets one line saying why and what to try.

>>> import numpy as np
>>> from types import SimpleNamespace
>>> s = DemoScores(SimpleNamespace(dim=10, loss="logistic", l2=0.01, label_bound=1.0, radius=10.0,
...                                feature_bound=1.0), partitions=1, seed=0, test_n=2000)
>>> X, y = fresh_points(s.w, 3000, seed=7)
>>> for j in range(3000):
...     s.observe(0, {"op": "insert", "id": f"r-{j}", "x": X[j].tolist(), "y": int(y[j])})
>>> s.ogd_scores()[0] > 0.85 > 0.6 > s.score(np.zeros(10))  # learned; zero weights predict class 0
True
"""

from __future__ import annotations

import threading

import numpy as np

from ..olu import PlainOGD

# One line is said when the released models trail plain OGD by more than this (accuracy points,
# or this share of OGD's squared error for ridge).
GAP_WORTH_A_LINE = 0.03
# OGD learns a partition's events in batches of this many (the worker batches too)
_FLUSH_ROWS = 512


def rule(dim: int, seed: int) -> np.ndarray:
    """The weights of the demo's rule: y = 1 where x.w + noise >= 0 (the stream's first draw)."""
    return np.random.default_rng(seed).normal(size=dim)


def fresh_points(w: np.ndarray, n: int, seed: int, spec=None) -> tuple[np.ndarray, np.ndarray]:
    """Fresh points of the rule, drawn as the stream draws them (norm at most 1, label noise 0.3;
    under a feature spec: records of its named fields, as demo.named_record draws them)."""
    rng = np.random.default_rng([seed, 1])
    if spec is not None:
        from ..features.transform import vectorize
        from .demo import named_record

        X = np.array([vectorize(spec, named_record(spec, rng))[0] for _ in range(n)])
        return X, (X @ w + 0.3 * rng.normal(size=n) >= 0).astype(np.float64)
    X = rng.normal(size=(n, len(w)))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = (X @ w + 0.3 * rng.normal(size=n) >= 0).astype(np.float64)
    return X, y


def _vector(spec, event: dict) -> list[float]:
    from ..features.transform import vectorize

    return vectorize(spec, event)[0].tolist()


class DemoScores:
    """Plain OGD per partition on the produced events, and scores of weights on fresh points."""

    def __init__(self, settings, partitions: int, seed: int, test_n: int = 4000):
        self.ridge = settings.loss == "ridge"
        self.unit = getattr(settings, "privacy_unit", None)
        self.metric = "mean_squared_error" if self.ridge else "accuracy"
        self.w = rule(settings.dim, seed)
        self.spec = getattr(settings, "feature_spec", None)
        self.X, self.y = fresh_points(self.w, test_n, seed, self.spec)
        constants = {k: getattr(settings, k)
                     for k in ("dim", "loss", "l2", "label_bound", "radius", "feature_bound")}
        self.ogd = [PlainOGD(**constants, feature_policy="clip") for _ in range(partitions)]
        self._rows: list[list] = [[] for _ in range(partitions)]
        self._lock = threading.Lock()

    def observe(self, partition: int, event) -> None:
        """An event the demo produced to ``partition`` (deletes
        and poison records teach OGD nothing)."""
        if not isinstance(event, dict) or event.get("op") != "insert":
            return
        x = event["x"] if self.spec is None else _vector(self.spec, event)
        with self._lock:
            rows = self._rows[partition]
            rows.append((event["id"], x, event["y"]))
            if len(rows) >= _FLUSH_ROWS:
                self._flush(partition)

    def _flush(self, partition: int) -> None:
        rows, self._rows[partition] = self._rows[partition], []
        if rows:
            ids, X, y = zip(*rows)
            self.ogd[partition].learn_many(list(ids), np.array(X, np.float64),
                                           np.array(y, np.float64))

    def score(self, weights) -> float:
        """Accuracy (logistic: the sign of x.w against the label) or mean squared error (ridge)."""
        margin = self.X @ np.asarray(weights, np.float64)
        if self.ridge:
            return float(np.mean((margin - self.y) ** 2))
        return float(np.mean((margin > 0) == (self.y > 0)))

    def ogd_scores(self) -> dict[int, float]:
        with self._lock:
            for p in range(len(self.ogd)):
                self._flush(p)
            return {p: self.score(m.z) for p, m in enumerate(self.ogd) if m.t > 0}

    def released_scores(self, latest_release: dict) -> dict[int, float]:
        """Score of each partition's newest release (``Worker.latest_release``'s values)."""
        import orjson

        return {p: self.score(orjson.loads(r.value)["weights"]) for (_, p),
                r in sorted(latest_release.items())}

    def report(self, latest_release: dict) -> dict:
        """The figures the demo prints and puts in its JSON summary, with a verdict line or None."""
        released, ogd = self.released_scores(latest_release), self.ogd_scores()
        noise = {p: r.noise_to_signal for (_, p), r in sorted(latest_release.items())}
        mean = (lambda d: round(float(np.mean(list(d.values()))), 4) if d else None)
        out = {"metric": self.metric, "released": mean(released), "plain_ogd": mean(ogd),
               "released_by_partition": {str(p): round(v, 4) for p, v in released.items()},
               "plain_ogd_by_partition": {str(p): round(v, 4) for p, v in ogd.items()},
               "noise_to_signal_by_partition": {str(p): None if v is None else round(float(v), 3)
                                                for p, v in noise.items()}}
        out["verdict"] = self.verdict(out["released"], out["plain_ogd"], noise)
        return out

    def verdict(self, released: float | None, ogd: float | None, noise: dict) -> str | None:
        if released is None or ogd is None:
            return None
        gap = (released - ogd) / max(ogd, 1e-12) if self.ridge else ogd - released
        if gap <= GAP_WORTH_A_LINE:
            return None
        worst = max((v for v in noise.values() if v is not None), default=None)
        figure = (f"error {released:.3f} against plain OGD's {ogd:.3f}" if self.ridge
                  else f"accuracy {released:.1%} against plain OGD's {ogd:.1%} ({gap * 100:.0f} "
                       "points)")
        why = (f"deletion noise dominates the weights (noise-to-signal up to {worst:.1f})"
               if worst is not None and worst >= 0.5 else "deletion noise costs accuracy here")
        if self.unit == "per-request":  # its noise fades as the stream grows past each deletion
            tries = (
                "a longer stream (per-request noise fades as later events contract it), a larger "
                "--target-epsilon")
        else:
            tries = (
                "--privacy-unit per-request (each request protected alone), a larger "
                "--target-epsilon")
        return (f"the released models trail plain OGD: {figure}; {why}. Try {tries}, or "
                "`olu-worker plan` to size the settings for your workload")
