"""Shared pieces of the learning-quality benches (quality, regret, privacy_audit).

Not a bench itself: the datasets, scaled to the engine's feature bound ||x|| <= 1; deletion
schedules; models built exactly as the worker builds them; a prequential (test-then-train) runner
that interleaves inserts and deletes through the public API; and the "retrained" reference model
of docs/guarantee.md 2.2 (OGD from z = 0 over the retained records in arrival order, each at its original
step index, deleted steps being the skip element ⊥).

Feature scaling (the engine rejects ||x|| > feature_bound = 1, the worker default):

- Phishing (River, 1,250 x 9): features are in [0, 1] by construction, so a constant 1 is appended
  (the engine has no intercept) and rows are divided by sqrt(d + 1): a public, data-independent map.
- digits (scikit-learn, 1,797 x 64, binary task "digit >= 5"): pixels are in [0, 16] by
  construction: x / 16, a constant 1, divided by sqrt(65); public as well.
- breast_cancer (scikit-learn, 569 x 30): no public bounds exist, so features are min-max scaled
  with the dataset's own minima and maxima (an offline preprocessing step that sees every record,
  deleted or not), then the constant 1 and sqrt(d + 1) as above.
- synthetic logistic / ridge: directions uniform on the sphere, norms uniform in [0, 1], labels
  from a fixed linear rule with noise (logistic: 10% flipped through Gaussian margin noise;
  ridge: |y| <= 1 as the worker's label_bound requires).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from worker.config import load_settings  # noqa: E402
from worker.olu import ALGORITHMS, OnlineUnlearner  # noqa: E402
from worker.olu.core.examples import ExampleStore  # noqa: E402
from worker.olu.core.replay import replay_ogd  # noqa: E402

SCHEDULES = ("uniform", "bursts", "early-late", "in-order")
EPS_FREE = frozenset({"ogd", "restart", "retrain", "active-newton"})  # eps does not change them


# --------------------------------------------------------------------------- datasets
@dataclass
class Dataset:
    name: str
    X: np.ndarray  # (n, d), every row ||x|| <= 1
    y: np.ndarray  # +-1 (logistic) or real with |y| <= 1 (ridge)
    loss: str
    note: str = ""
    ids: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.X = np.ascontiguousarray(self.X, np.float64)
        self.y = np.asarray(self.y, np.float64)
        norms = np.linalg.norm(self.X, axis=1)
        assert norms.max() <= 1.0 + 1e-12, f"{self.name}: a row exceeds the feature bound ({norms.max()})"
        if not self.ids:
            self.ids = [f"{self.name}-{j}" for j in range(len(self.y))]

    @property
    def n(self) -> int:
        return len(self.y)

    @property
    def dim(self) -> int:
        return self.X.shape[1]

    def subset(self, rows: np.ndarray, name: str | None = None) -> Dataset:
        rows = np.asarray(rows)
        return Dataset(name or self.name, self.X[rows], self.y[rows], self.loss, self.note,
                       [self.ids[j] for j in rows])


def _unit01_with_bias(X01: np.ndarray) -> np.ndarray:
    """[0, 1] features plus a constant 1, divided by sqrt(d + 1): ||x|| <= 1 always."""
    Xb = np.hstack([X01, np.ones((len(X01), 1))])
    return Xb / math.sqrt(Xb.shape[1])


def phishing() -> Dataset:
    from river import datasets

    rows = list(datasets.Phishing())
    names = list(rows[0][0])
    X = np.array([[float(x[k]) for k in names] for x, _ in rows])
    y = np.array([1.0 if label else -1.0 for _, label in rows])
    assert X.min() >= 0.0 and X.max() <= 1.0
    return Dataset("phishing", _unit01_with_bias(X), y, "logistic", "River Phishing, file order, [0,1] + bias")


def breast_cancer() -> Dataset:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X = data.data.astype(np.float64)
    lo, hi = X.min(axis=0), X.max(axis=0)
    X01 = (X - lo) / np.where(hi > lo, hi - lo, 1.0)
    y = np.where(data.target == 1, 1.0, -1.0)
    return Dataset("breast_cancer", _unit01_with_bias(X01), y, "logistic",
                   "sklearn breast_cancer, file order, min-max (dataset stats) + bias")


def digits() -> Dataset:
    from sklearn.datasets import load_digits

    data = load_digits()
    y = np.where(data.target >= 5, 1.0, -1.0)
    return Dataset("digits", _unit01_with_bias(data.data / 16.0), y, "logistic",
                   "sklearn digits, binary digit >= 5, file order, x/16 + bias")


def _ball_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    X = rng.normal(size=(n, d))
    X *= (rng.random(n) / np.linalg.norm(X, axis=1))[:, None]
    return X


def synthetic_logistic(n: int, d: int = 10, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    X = _ball_rows(rng, n, d)
    w = rng.normal(size=d) * 4.0
    y = np.where(X @ w + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return Dataset(f"synthetic-{_short(n)}", X, y, "logistic", f"d={d}, ||x||<=1, y = sign(x.w + N(0, 0.25))")


def synthetic_ridge(n: int, d: int = 10, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    X = _ball_rows(rng, n, d)
    w = rng.normal(size=d)
    w /= np.linalg.norm(w)
    y = np.clip(X @ w + 0.1 * rng.normal(size=n), -1.0, 1.0)
    return Dataset(f"ridge-{_short(n)}", X, y, "ridge", f"d={d}, ||x||<=1, y = clip(x.w + N(0, 0.01), -1, 1)")


def _short(n: int) -> str:
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


# --------------------------------------------------------------------------- deletion schedules
@dataclass
class DeletionPlan:
    """Delete ``records[i]`` once ``times[i]`` inserts have been applied (times non-decreasing)."""

    times: np.ndarray
    records: np.ndarray
    schedule: str
    rate: float

    @property
    def k(self) -> int:
        return len(self.times)

    def retained_mask(self, n: int) -> np.ndarray:
        keep = np.ones(n, bool)
        keep[self.records] = False
        return keep


def plan_deletions(n: int, rate: float, schedule: str, rng: np.random.Generator, k: int | None = None) -> DeletionPlan:
    """k = max(1, round(rate n)) deletions of distinct, already inserted records.

    - ``uniform``: deletion times uniform over the stream, each deleting a uniformly random record
      among those inserted so far and not yet deleted;
    - ``bursts``: the same records rule, but all deletions come in 5 bursts (or k if fewer) at
      uniformly random times;
    - ``early-late``: the earliest k records, deleted in arrival order during the last 10% of the
      stream (the schedule that makes passive noise largest for the convex analysis, docs/algorithms.md 3.2);
    - ``in-order`` (extra, not in the issue): each deletion hits a record inserted after the
      previous deletion, the arrival-order condition of the active algorithms (docs/algorithms.md 4.2).
    """
    k = max(1, round(rate * n)) if k is None else k
    if k > n // 2:
        raise ValueError(f"{k} deletions of {n} records: too many")
    if schedule == "early-late":
        start = max(k, int(0.9 * n))
        times = np.sort(rng.integers(start, n + 1, size=k))
        return DeletionPlan(times, np.arange(k), schedule, rate)
    if schedule == "in-order":
        times = np.sort(rng.choice(np.arange(2, n + 1), size=k, replace=False))
        prev = np.concatenate(([0], times[:-1]))
        records = prev + (rng.random(k) * (times - prev)).astype(np.int64)  # in [prev, time)
        return DeletionPlan(times, records, schedule, rate)
    if schedule == "uniform":
        times = np.sort(rng.integers(1, n + 1, size=k))
    elif schedule == "bursts":
        bursts = np.sort(rng.integers(max(1, n // 20), n + 1, size=min(5, k)))
        times = np.sort(bursts[rng.integers(0, len(bursts), size=k)])
    else:
        raise ValueError(f"unknown schedule {schedule!r}")
    records = np.empty(k, np.int64)
    taken: set[int] = set()
    for i, t in enumerate(times.tolist()):
        while True:  # rejection: k <= n/2, and times are mostly late enough
            j = int(rng.integers(0, t))
            if j not in taken or len(taken) >= t:
                break
        if j in taken:  # every record so far already deleted: push the deletion later
            j = next(r for r in range(n) if r not in taken)
            times[i] = max(t, j + 1)
        taken.add(j)
        records[i] = j
    order = np.argsort(times, kind="stable")
    return DeletionPlan(times[order], records[order], schedule, rate)


# --------------------------------------------------------------------------- models
def worker_settings(algorithm: str, dim: int, loss: str, eps: float, max_deletions: int | None):
    """The worker's settings (its documented defaults) with only these values set."""
    argv = ["--dim", str(dim), "--algorithm", algorithm, "--loss", loss, "--rho" if algorithm != "rewind" else "--target-epsilon", repr(float(eps))]
    if max_deletions is not None:
        argv += ["--max-deletions", str(int(max_deletions))]
    return load_settings(argv, {}, command="demo")


def make_model(algorithm: str, dim: int, loss: str, eps: float, k: int) -> OnlineUnlearner:
    """``ALGORITHMS[name](**settings.model_kwargs())`` as the worker does.

    ``max_deletions`` is set to the planned number of deletions k for the algorithms whose theory
    needs k in advance (docs/algorithms.md 4.4: the active algorithms' capacity and I_2, passive-restart's
    k~); plain passive keeps the worker default (no capacity: the omega split supports any k).
    """
    needs_k = algorithm in ("passive-restart", "active-d2d", "active-anchor")
    settings = worker_settings(algorithm, dim, loss, eps, max(1, k) if needs_k else None)
    return ALGORITHMS[settings.algorithm](**settings.model_kwargs())


def model_defaults() -> dict:
    s = worker_settings("passive", 10, "logistic", 1.0, None)
    return {n: getattr(s, n) for n in ("l2", "radius", "feature_bound", "schedule", "t0", "omega", "delta",
                                       "order_fallback", "restart_c", "batch_size")}


# --------------------------------------------------------------------------- running a stream
@dataclass
class RunResult:
    accuracy: float  # prequential accuracy over every insert (nan for ridge)
    loss: float  # mean prequential loss (log loss / half squared error), regulariser excluded
    weights: np.ndarray
    outcomes: dict
    seconds: float


def run_prequential(model: OnlineUnlearner, data: Dataset, plan: DeletionPlan, batch: int = 1) -> RunResult:
    """Test-then-train over ``data`` in order, with ``plan``'s deletions at their times.

    Each insert is predicted by the model before it learns it. With ``batch > 1`` inserts are
    learned in micro-batches (``learn_many``), each predicted by the model as it was before the
    batch, as the worker's own prequential loss is (``PartitionRunner._observe_loss``); a batch is
    always cut at a deletion, so every deletion sees exactly the inserts before it.
    """
    import time

    X, y, ids, n = data.X, data.y, data.ids, data.n
    correct, loss_sum = 0, 0.0
    outcomes: dict[str, int] = {}
    ridge = data.loss == "ridge"
    t0 = time.perf_counter()
    pos, di = 0, 0
    while True:
        while di < plan.k and plan.times[di] <= pos:  # deletions due before insert number pos
            out = model.unlearn_one(ids[plan.records[di]]).outcome
            outcomes[out] = outcomes.get(out, 0) + 1
            di += 1
        if pos >= n:
            break
        end = min(int(plan.times[di]) if di < plan.k else n, n)  # > pos: the next deletion's time
        while pos < end:
            stop = min(end, pos + batch)
            if stop - pos == 1:
                m = float(X[pos] @ model.z)
                correct_j, loss_j = _score(m, y[pos], ridge)
                correct += correct_j
                loss_sum += loss_j
                model.learn_one(ids[pos], X[pos], y[pos])
            else:
                m = X[pos:stop] @ model.z
                if ridge:
                    loss_sum += float(0.5 * np.sum((m - y[pos:stop]) ** 2))
                else:
                    correct += int(np.sum(np.where(m >= 0, 1.0, -1.0) == y[pos:stop]))
                    loss_sum += float(np.sum(np.logaddexp(0.0, -y[pos:stop] * m)))
                model.learn_many(ids[pos:stop], X[pos:stop], y[pos:stop])
            pos = stop
    seconds = time.perf_counter() - t0
    return RunResult(float("nan") if ridge else correct / n, loss_sum / n, model.weights, outcomes, seconds)


def _score(margin: float, y: float, ridge: bool) -> tuple[int, float]:
    if ridge:
        return 0, 0.5 * (margin - y) ** 2
    # predict_one's rule: +1 when P(y = +1) >= 0.5, i.e. margin >= 0
    return int((1.0 if margin >= 0 else -1.0) == y), float(np.logaddexp(0.0, -y * margin))


def retrained_weights(data: Dataset, plan: DeletionPlan, eps: float = 1.0) -> np.ndarray:
    """The "retrained" model of docs/guarantee.md 2.2 at the end of the stream: OGD from z = 0 over the
    retained records in arrival order at their original steps 1..n (deleted steps are ⊥), with
    the worker's default constants, through the engine's own replay (``worker.olu.algorithms.retrain``)."""
    ref = make_model("ogd", data.dim, data.loss, eps, plan.k)
    keep = plan.retained_mask(data.n)
    rows = np.flatnonzero(keep)
    store = ExampleStore(data.dim, capacity=len(rows))
    store.extend(np.arange(1, len(rows) + 1, dtype=np.uint64), rows + 1, data.X[rows], data.y[rows])
    return replay_ogd(ref, store)


def mean_ci(values, z: float = 1.96) -> tuple[float, float]:
    """(mean, half-width of a normal 95% interval); half-width 0 for a single value."""
    a = np.asarray(values, np.float64)
    if a.size <= 1:
        return float(a.mean()) if a.size else float("nan"), 0.0
    return float(a.mean()), float(z * a.std(ddof=1) / math.sqrt(a.size))
