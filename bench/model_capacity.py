"""Model capacity: certified models under declared nonlinear features against River's learners (issue 53).

    .venv/bin/python bench/model_capacity.py [--events 20000] [--streams agrawal-0,...] [--quick] [--out DIR]

Streams (binary; prequential accuracy over the second half of each stream, every record
predicted before it is learned):

- ``agrawal-0`` to ``agrawal-9``: River's ``synth.Agrawal`` (its ten classification functions, 5 %
  label noise): six numeric fields and three categorical ones, ``--events`` records each;
- ``bananas``: River's bundled Bananas (5,300 rows, two numeric fields, a curved boundary);
- ``phishing``: River's bundled Phishing (1,250 rows, nine fields in [0, 1]);
- ``rbf-2``: River's ``synth.RandomRBF`` (2 classes, 10 numeric fields, 50 centroids);
- held out (``--streams held-out``: River generators nothing here was tuned on): ``sea``, ``sine``,
  ``mixed``, ``stagger``, ``hyperplane`` (:data:`HELD_OUT`).

Each stream has two specs written from the fields' documented domains, never fitted to the data:
``plain`` (the fields' own coordinates) and ``capacity`` (the fields, 16 one-hot bins of every
numeric field over its range, a hashed cross of every pair of fields, numeric ones by their bins,
128 buckets each, and 512 random Fourier features over the numeric fields). Models:

1. River 0.26's ``LogisticRegression`` pipeline (scaler and one-hot), ``HoeffdingTreeClassifier``,
   ``HoeffdingAdaptiveTreeClassifier`` and ``ARFClassifier``, their defaults, one record at a time;
2. our plain OGD under each spec (``ogd``, l2 1e-4, radius 100: the capacity the planner does not
   search yet; the worker's defaults underfit wide specs);
3. exact unlearning under the capacity spec (``retrain`` at OGD's l2 and radius, from its checkpoints:
   no noise, so OGD's accuracy on the stream without the deleted records, at the cost of a replay
   per deletion), with the same deletions as 4; skipped where its dense rows would pass
   ``EXACT_MAX_BYTES``;
4. the planner's certified recommendation under the capacity spec (``olu-worker plan``'s
   per-request configuration at epsilon 1, delta 1e-5, for 0.5 % single-record deletions, half of
   records at most 2,000 events old, half of any age, declared to the planner as such: its sample
   the stream's first 10,000 records), run with those deletions; beside it the planner's predicted
   accuracy.

Our models learn in chunks of 50 records, each chunk predicted by the model before it learns it.
Speed: records per second of the worker's compiled reader (named-field JSON in batches of 2,000,
dense rows) plus ``learn_many`` (dense, in those chunks of 50), and of each River model's loop.

Writes ``model_capacity.json`` and ``model_capacity.png`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import orjson
from confluent_kafka import Message

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
from _targets import Checks, Target  # noqa: E402
from feature_spec import AGRAWAL_CATEGORICAL, AGRAWAL_NUMERIC, _settings  # noqa: E402

from worker.features.derived import MAX_FOURIER_FIELDS  # noqa: E402
from worker.features.spec import parse_spec  # noqa: E402
from worker.features.transform import vectorize  # noqa: E402
from worker.olu import ALGORITHMS  # noqa: E402
from worker.planning.plan import make_plan  # noqa: E402
from worker.planning.sample import Sample  # noqa: E402
from worker.planning.search import Candidate, candidate_model  # noqa: E402
from worker.planning.target import resolve_target  # noqa: E402
from worker.planning.workload import Shape  # noqa: E402
from worker.stream.input.scan import scan_batch  # noqa: E402

REPORT_KEYS = ("config", "rows")
SERVICES = ()
CHUNK = 50
READ_BATCH = 2000  # the worker's default poll batch (OLU_BATCH_SIZE)
BINS = 16
CROSS_BUCKETS = 128
# Random Fourier features over the numeric fields (at most 8): 512 components, an RBF bandwidth of a
# quarter of the [-1, 1]-scaled domain per pair of fields (distances grow as sqrt(fields)); chosen on
# bananas at 20,000 records (0.80 -> 0.87 for OGD), neutral or better on agrawal-2 and -5 at 10,000.
FOURIER_COMPONENTS, FOURIER_BANDWIDTH, FOURIER_SEED = 512, 0.25, 11
OGD_L2, OGD_RADIUS = 1e-4, 100.0
DELETE_SHARE = 0.005
RECENT_SHARE, RECENT_AGE = 0.5, 2_000  # half of the deletions are of recent records
SAMPLE_EVENTS = 10_000
EXACT_MAX_BYTES = 3 << 30  # the bench's dense matrix of the rows retrain learns
RIVER_MODELS = ("river_lr", "river_ht", "river_hat", "river_arf")
WITHIN_BEST = Target("certified_vs_river_best", "the planner's certified model within 2 points of River's best "
                     "(prequential accuracy, second half)", ">=", -0.02, "accuracy", "issue 53")


# ----------------------------------------------------------------------------- streams and specs
def agrawal(function: int, n: int, seed: int) -> tuple[list[dict], list[int], dict]:
    from river.datasets import synth

    records, labels = [], []
    for x, y in synth.Agrawal(classification_function=function, perturbation=0.05, seed=seed).take(n):
        records.append({k: (str(v + (k == "car")) if k in AGRAWAL_CATEGORICAL else v) for k, v in x.items()})
        labels.append(int(y))
    fields = ([{"name": k, "type": "numeric", "range": r} for k, r in AGRAWAL_NUMERIC.items()]
              + [{"name": k, "type": "categorical", "vocabulary": [str(v + (k == "car")) for v in range(c)]}
                 for k, c in AGRAWAL_CATEGORICAL.items()])
    return records, labels, {"features": fields}


def bundled(name: str, n: int) -> tuple[list[dict], list[int], dict]:
    """River's bundled data sets, with each field's documented domain as its range."""
    from river import datasets

    data = {"bananas": datasets.Bananas, "phishing": datasets.Phishing}[name]()
    domain = {"bananas": (-3.0, 3.0), "phishing": (0.0, 1.0)}[name]
    rows = list(data)[:n]
    records = [{k: float(v) for k, v in x.items()} for x, _ in rows]
    fields = [{"name": k, "type": "numeric", "range": list(domain)} for k in rows[0][0]]
    return records, [int(bool(y)) for _, y in rows], {"features": fields}


#: River generators nothing here was tuned on (issue 53: judge on streams the specs did not see),
#: each field with the domain River's docs give it: (generator(seed), {field: domain}), a domain
#: being a numeric range, "boolean" or a categorical vocabulary size.
HELD_OUT = {
    "rbf-2": (lambda synth, seed: synth.RandomRBF(seed_model=seed, seed_sample=seed + 1, n_classes=2,
                                                  n_features=10, n_centroids=50),
              {k: (-0.5, 1.5) for k in range(10)}),  # centroids in [0, 1], spread around them
    "sea": (lambda synth, seed: synth.SEA(variant=0, noise=0.05, seed=seed), {k: (0.0, 10.0) for k in range(3)}),
    "sine": (lambda synth, seed: synth.Sine(classification_function=0, seed=seed), {0: (0.0, 1.0), 1: (0.0, 1.0)}),
    "mixed": (lambda synth, seed: synth.Mixed(classification_function=0, seed=seed),
              {0: "boolean", 1: "boolean", 2: (0.0, 1.0), 3: (0.0, 1.0)}),
    "stagger": (lambda synth, seed: synth.STAGGER(classification_function=0, seed=seed),
                {"size": 3, "color": 3, "shape": 3}),
    "hyperplane": (lambda synth, seed: synth.Hyperplane(n_features=10, seed=seed),
                   {k: (0.0, 1.0) for k in range(10)}),
}


def held_out(name: str, n: int, seed: int) -> tuple[list[dict], list[int], dict]:
    """A :data:`HELD_OUT` generator's records (fields named ``x<k>`` or by River's names) and the
    plain spec of its documented domains."""
    from river.datasets import synth

    make, domains = HELD_OUT[name]
    field = {k: (f"x{k}" if isinstance(k, int) else k) for k in domains}
    fields = []
    for k, domain in domains.items():
        if domain == "boolean":
            fields.append({"name": field[k], "type": "boolean"})
        elif isinstance(domain, int):
            fields.append({"name": field[k], "type": "categorical", "vocabulary": [str(v) for v in range(domain)]})
        else:
            fields.append({"name": field[k], "type": "numeric", "range": list(domain)})
    records, labels = [], []
    for x, y in make(synth, seed).take(n):
        records.append({field[k]: (str(v) if isinstance(domains[k], int) else v) for k, v in x.items()})
        labels.append(int(y))
    return records, labels, {"features": fields}


def capacity_spec(plain: dict, bins: int = BINS, buckets: int = CROSS_BUCKETS) -> dict:
    """The plain spec, plus bins of every numeric field, a cross of every pair of fields and random
    Fourier features over the numeric fields (weight 1 each: scaling the blocks down to keep the norm
    bound near the plain spec's scored worse, certified and not, on agrawal-1 at 10,000 records)."""
    fields = plain["features"]
    numeric = [f for f in fields if f["type"] == "numeric"]
    derived = [{"type": "bins", "field": f["name"], "range": f["range"], "count": bins} for f in numeric]
    names = [f["name"] for f in fields]
    derived += [{"type": "cross", "fields": [a, b], "buckets": buckets}
                for i, a in enumerate(names) for b in names[i + 1:]]
    curved = [f["name"] for f in numeric][:MAX_FOURIER_FIELDS]
    if curved:
        derived.append({"type": "fourier", "fields": curved, "components": FOURIER_COMPONENTS,
                        "bandwidth": FOURIER_BANDWIDTH * (len(curved) / 2) ** 0.5,
                        "seed": FOURIER_SEED})
    return {**plain, "derived": derived}


def stream(name: str, n: int, seed: int):
    if name.startswith("agrawal-"):
        return agrawal(int(name.split("-")[1]), n, seed)
    if name in HELD_OUT:
        return held_out(name, n, seed)
    return bundled(name, n)


# ----------------------------------------------------------------------------- models
def vectors(spec, records: list[dict]) -> tuple[np.ndarray, float]:
    """The rows of ``records`` as the worker reads them: named-field JSON through its compiled
    reader, in poll batches of the worker's size (the reference transform's bits: a record the
    reader declines, if any, is transformed by it); and the reader's records per second."""
    values = [orjson.dumps({"op": "insert", "id": f"r-{j}", "y": 0, **r}) for j, r in enumerate(records)]
    messages = [Message(key=b"k", value=v, timestamp=(1, j)) for j, v in enumerate(values)]
    def read():
        return [scan_batch(messages[i:i + READ_BATCH], dim=spec.dim, max_bytes=1 << 20, features=spec)
                for i in range(0, len(messages), READ_BATCH)]
    read()  # compiled, and its batch memory touched once, before the clock (a VM's first touch is slow)
    start = time.perf_counter()
    scans = read()
    rate = len(records) / (time.perf_counter() - start)
    X = np.concatenate([scan.X for scan in scans]) if scans else np.zeros((0, spec.dim))
    for j in np.flatnonzero(~np.concatenate([scan.accepted for scan in scans])).tolist() if scans else []:
        X[j] = vectorize(spec, records[j])[0]
    return X, rate


def chunked(model, X: np.ndarray, y: np.ndarray, deletions: dict[int, list[int]] | None = None) -> tuple[float, float]:
    """Accuracy over the second half (each chunk predicted before it is learned), and the learning
    rate in records per second; ``deletions``: {chunk start: records to unlearn first}."""
    ids = [f"r-{j}" for j in range(len(y))]
    half, correct, learning = len(y) // 2, 0, 0.0
    for s in range(0, len(y), CHUNK):
        for j in (deletions or {}).get(s, ()):
            model.unlearn_one(ids[j])
        e = min(s + CHUNK, len(y))
        if s >= half:
            correct += int(((X[s:e] @ model.z >= 0.0) == (y[s:e] > 0)).sum())
        started = time.perf_counter()
        model.learn_many(ids[s:e], X[s:e], y[s:e])
        learning += time.perf_counter() - started
    return correct / (len(y) - half), len(y) / max(learning, 1e-9)


def ogd(spec, X, y) -> tuple[float, float]:
    model = ALGORITHMS["ogd"](dim=spec.dim, feature_bound=spec.norm_bound * (1 + 1e-9), l2=OGD_L2, radius=OGD_RADIUS)
    return chunked(model, X, y)


def workload(n: int) -> Shape:
    """The deletions the bench makes, as the planner is told them: 0.5 % of events, half of them of
    records at most RECENT_AGE events old, the rest of any age (uniform over the stream so far)."""
    return Shape(rate=DELETE_SHARE, age=n, recent_share=RECENT_SHARE, recent_age=RECENT_AGE)


def deletion_schedule(n: int, seed: int) -> dict[int, list[int]]:
    """{chunk start: records to unlearn before it}: the law :func:`workload` declares (an age in
    events back from the deletion, the nearest record not yet deleted)."""
    rng = np.random.default_rng([seed, 3])
    deletions: dict[int, list[int]] = {}
    victims: set[int] = set()
    for t in sorted(rng.choice(np.arange(CHUNK, n), size=int(DELETE_SHARE * n), replace=False).tolist()):
        start = t - t % CHUNK
        age = int(rng.integers(1, (RECENT_AGE if rng.random() < RECENT_SHARE else n) + 1))
        j = max(0, start - age)
        while j in victims and j < start - 1:
            j += 1
        if j in victims:
            continue
        victims.add(j)
        deletions.setdefault(start, []).append(j)
    return deletions


def exact(spec, X, y, seed: int) -> dict:
    """Exact unlearning (retrain from checkpoints) with the bench's deletions: accuracy, events/s
    with the replays, and the steps replayed per deletion."""
    if X.nbytes > EXACT_MAX_BYTES:
        return {}
    # the capacity rows are mostly zeros (one-hot bins, hashed crosses): kept sparse, as the
    # planner recommends for them (worker/planning/exact.py)
    rows = "sparse" if np.count_nonzero(X) <= 0.25 * X.size else "dense"
    model = ALGORITHMS["retrain"](dim=spec.dim, feature_bound=spec.norm_bound * (1 + 1e-9), l2=OGD_L2,
                                  radius=OGD_RADIUS, retained_rows=rows)
    schedule = deletion_schedule(len(y), seed)
    started = time.perf_counter()
    accuracy, _ = chunked(model, X, y, schedule)
    deletions = max(model.counters["retrains"], 1)
    return {"exact": accuracy, "exact_events_per_s": len(y) / (time.perf_counter() - started),
            "exact_replayed_per_deletion": model.counters["replayed_steps"] / deletions,
            "exact_retained_rows": rows, "exact_store_bytes": model.examples.nbytes}


def certified(raw_spec: dict, X, y, seed: int) -> tuple[dict, float, float]:
    """The planner's per-request recommendation at epsilon 1 for the bench's deletions: its
    settings, its predicted accuracy and its accuracy with those deletions."""
    settings = _settings(raw_spec)
    target = resolve_target(settings, unit="per-request", target_epsilon=1.0)
    k = min(SAMPLE_EVENTS, len(y))
    sample = Sample([f"s-{j}" for j in range(k)], X[:k], np.where(y[:k] > 0, 1.0, -1.0), 0, None, ())
    plan = make_plan(settings, target, shape=workload(len(y)), events=len(y), sample=sample,
                     sim_events=min(len(y), 50_000), seed=seed)
    best = plan["search"]["best"]["per-request"]
    c = Candidate("per-request", best["rotation"], best["lifetime"], best["l2"], best["cap"], best.get("radius"))
    model = candidate_model(settings, target, c, best["capacity"], np.random.default_rng(seed))
    accuracy, _ = chunked(model, X, y, deletion_schedule(len(y), seed))
    return best["settings"], float(best["score"]), accuracy


def river(kind: str, records: list[dict], labels: list[int], categorical: list[str]) -> tuple[float, float]:
    from river import compose, forest, linear_model, preprocessing, tree

    if kind == "river_lr":
        numeric = [k for k in records[0] if k not in categorical]
        features = compose.Select(*numeric) | preprocessing.StandardScaler()
        if categorical:
            features = features + (compose.Select(*categorical) | preprocessing.OneHotEncoder())
        model = features | linear_model.LogisticRegression()
    else:
        model = {"river_ht": tree.HoeffdingTreeClassifier, "river_hat": tree.HoeffdingAdaptiveTreeClassifier,
                 "river_arf": forest.ARFClassifier}[kind]()
    half, correct = len(labels) // 2, 0
    start = time.perf_counter()
    for j, (x, y) in enumerate(zip(records, labels)):
        if j >= half:
            correct += int(model.predict_one(x) == bool(y))
        model.learn_one(x, bool(y))
    return correct / (len(labels) - half), len(labels) / (time.perf_counter() - start)


# ----------------------------------------------------------------------------- one stream
def run(name: str, n: int, seed: int, river_models: tuple[str, ...]) -> dict:
    records, labels, plain = stream(name, n, seed)
    wide = capacity_spec(plain)
    y = np.array(labels, np.float64)
    row = {"stream": name, "events": len(y), "majority": float(max(y.mean(), 1 - y.mean()))}
    categorical = [f["name"] for f in plain["features"] if f["type"] == "categorical"]
    for kind in river_models:
        row[kind], row[f"{kind}_events_per_s"] = river(kind, records, labels, categorical)
    for label, raw in (("plain", plain), ("capacity", wide)):
        spec = parse_spec(raw)
        X, transform_rate = vectors(spec, records)
        row[f"ogd_{label}"], learn_rate = ogd(spec, X, y)
        row[f"dim_{label}"] = spec.dim
        row[f"ours_{label}_events_per_s"] = 1.0 / (1.0 / transform_rate + 1.0 / learn_rate)
    row.update(exact(spec, X, y, seed))
    row["plan_settings"], row["plan_predicted"], row["certified"] = certified(wide, X, y, seed)
    row["river_best"] = max(row[k] for k in river_models)
    row["certified_vs_river_best"] = row["certified"] - row["river_best"]
    row["certified_vs_ogd"] = row["certified"] - row["ogd_capacity"]
    if "exact" in row:
        row["exact_vs_river_best"] = row["exact"] - row["river_best"]
    row["predicted_miss"] = row["plan_predicted"] - row["certified"]
    print(f"{name:11s} n={len(y):,} d={row['dim_capacity']}: River best {row['river_best']:.4f} | OGD plain "
          f"{row['ogd_plain']:.4f} capacity {row['ogd_capacity']:.4f} | certified {row['certified']:.4f} "
          f"(predicted {row['plan_predicted']:.4f}) [{row['plan_settings']}] | exact "
          f"{row.get('exact', float('nan')):.4f}", flush=True)
    return row


DEFAULT_STREAMS = [f"agrawal-{k}" for k in range(10)] + ["bananas", "phishing", "rbf-2"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000, help="records per generated stream (default 20,000)")
    ap.add_argument("--streams", default=",".join(DEFAULT_STREAMS),
                    help="comma-separated stream names; held-out: the River generators of HELD_OUT")
    ap.add_argument("--seed", type=int, default=7)
    args = h.arguments(ap, argv, quick="2,000 records of agrawal-1 and bananas, without ARF")
    streams = [s for name in args.streams.split(",")
               for s in (HELD_OUT if name == "held-out" else [name])]
    river_models = RIVER_MODELS
    if args.quick:
        args.events, streams, river_models = min(args.events, 2_000), ["agrawal-1", "bananas"], RIVER_MODELS[:3]
    info = h.machine()
    print(h.machine_line(info))
    checks = Checks()
    rows = [run(name, args.events, args.seed, river_models) for name in streams]
    for row in rows:
        checks.check(WITHIN_BEST, row["certified_vs_river_best"], where=row["stream"])
    report = {"machine": info, "config": {"events": args.events, "seed": args.seed, "quick": args.quick,
                                          "streams": streams, "river_models": list(river_models), "chunk": CHUNK,
                                          "bins": BINS, "cross_buckets": CROSS_BUCKETS,
                                          "fourier_components": FOURIER_COMPONENTS,
                                          "fourier_bandwidth": FOURIER_BANDWIDTH, "ogd_l2": OGD_L2,
                                          "ogd_radius": OGD_RADIUS, "delete_share": DELETE_SHARE}, "rows": rows}
    return h.finish("model_capacity", report, args.out, checks=checks, plot=lambda path: plot(rows, path))


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [("river_best", "River's best"), ("ogd_plain", "OGD, plain spec"), ("ogd_capacity", "OGD, capacity spec"),
              ("exact", "exact unlearning (retrain)"), ("certified", "certified (plan, eps 1, 0.5 % deletions)")]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    width = 0.8 / len(series)
    for i, (key, label) in enumerate(series):
        ax.bar([j + i * width for j in range(len(rows))], [r.get(key, 0.0) for r in rows], width, label=label)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))], [r["stream"] for r in rows], rotation=45, ha="right")
    ax.set_ylim(0.4, 1.0)
    ax.set_ylabel("prequential accuracy (second half)")
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def render(report: dict) -> str:
    lines = ["| stream | events | River LR | HT | HAT | ARF | OGD plain | OGD capacity (d) | exact (events/s) "
             "| certified | predicted | vs River's best |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        arf = f"{r['river_arf']:.4f}" if "river_arf" in r else "-"
        exact_cell = f"{r['exact']:.4f} ({r['exact_events_per_s']:,.0f})" if "exact" in r else "-"
        lines.append(f"| {r['stream']} | {r['events']:,} | {r['river_lr']:.4f} | {r['river_ht']:.4f} "
                     f"| {r['river_hat']:.4f} | {arf} | {r['ogd_plain']:.4f} | {r['ogd_capacity']:.4f} "
                     f"({r['dim_capacity']:,}) | {exact_cell} | {r['certified']:.4f} | {r['plan_predicted']:.4f} "
                     f"| {r['certified_vs_river_best'] * 100:+.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
