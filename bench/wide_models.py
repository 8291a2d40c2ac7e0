"""Wide models: the dense learning step against the machine's memory bandwidth, a deletion and a
release at large d (issue 42).

    .venv/bin/python bench/wide_models.py [--array-mb 256] [--pairs 5] [--quick] [--out DIR]

**Dense learn_many.** ``PassiveOLU.learn_many`` (logistic, per-request unit, worker defaults:
l2 0.01, radius 10, feature bound 1), batches of 1,000 rows with their keys (the stream
decoder's form: ids hashed beforehand), over an array of ``--array-mb`` MB of fresh rows (larger
than the caches) at d = 10, 100 and 1,000. Rows have norms uniform in [0, 1) (``bounded``); at
d = 1,000 also rows normalised to exactly 1 (``unit``: about half land an ulp over the bound and
are clipped, as ``FeatureBound`` clips them, into a copy of the batch). The **probe** is a single
read pass over the same array (``X.sum()``: numpy's pairwise SIMD sum, bandwidth-bound at this
size), timed in the same pair as the learning pass; ``--pairs`` pairs, the median ratio reported.
Goals: d = 1,000 at least 0.3x the probe's rows per second; d = 100 at least 3 M events/s.

**Sparse rows.** ``learn_many`` of ``SparseRows`` (30 non-zeros at random coordinates of
d = 2^16, norms uniform in [0, 1)), batches of 1,000 with their keys, ``--sparse-events`` rows
(1,000,000); next to it the same rows in dense form (``--dense-events``, 5,000: a dense step reads
all 65,536 coordinates). Goal: at least 2 M events/s.

**A deletion at d = 10,000.** A model that has learned 2,000 rows; per deletion of an applied
record: ``unlearn_request`` (the shift, the accountant's charge, the Gaussian draw of d
coordinates, the projection), ``deletion_state`` (the copy that must be durable) and the delta's
encoding (``worker.state.codec.encode``, what is PUT to object storage), each in microseconds.

**Release size.** One release value at d = 10, 1,000 and 10,000 in each release format: JSON, and
the Avro and JSON Schema framings (the bytes confluent-kafka's serializers write: fastavro's
schemaless writer for Avro, the JSON text for JSON Schema, after the 5 framing bytes).

Writes ``wide_models.json`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core: no BLAS threads

import argparse  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import orjson  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
from _targets import Checks, Target  # noqa: E402

from worker.olu import (
    PassiveOLU,  # noqa: E402
    warm_up,  # noqa: E402
)
from worker.state import codec  # noqa: E402
from worker.stream.output.releases import release_value  # noqa: E402

REPORT_KEYS = ("config", "dense", "sparse", "deletion", "release_bytes")
SERVICES = ()
BATCH = 1000
DENSE_X_PROBE = Target("wide_d1000_x_probe", "learn_many at d = 1,000 >= 0.3x a read pass over the same rows",
                       ">=", 0.3, "x", "issue 42")
SPARSE_EVENTS = Target("wide_sparse_events_per_s", "learn_many, 30 non-zeros in d = 2^16, >= 2,000,000 events/s",
                       ">=", 2_000_000, "events/s", "issue 42")
DENSE_D100 = Target("wide_d100_events_per_s", "learn_many at d = 100 >= 3,000,000 events/s", ">=", 3_000_000,
                    "events/s", "issue 42")


def model(d: int) -> PassiveOLU:
    return PassiveOLU(dim=d, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0,
                      noise_rng=np.random.default_rng(7))


def rows(n: int, d: int, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.sqrt((X * X).sum(axis=1))[:, None]
    if kind == "bounded":
        X *= rng.random(n)[:, None]
    y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0, 1.0, 0.0)
    return X, y, rng.integers(1, 2**63, n, dtype=np.uint64)


def learn_pass(d: int, X, y: np.ndarray, keys: np.ndarray) -> float:
    """Seconds of ``learn_many`` over the whole array, batch by batch, on a fresh model."""
    m = model(d)
    m.learn_many(None, X[:8], y[:8], keys=keys[:8] ^ np.uint64(1))  # first call's set-up out of the timing
    start = time.perf_counter()
    for s in range(0, len(X), BATCH):
        m.learn_many(None, X[s:s + BATCH], y[s:s + BATCH], keys=keys[s:s + BATCH])
    return time.perf_counter() - start


def probe_pass(X: np.ndarray) -> float:
    start = time.perf_counter()
    X.sum()
    return time.perf_counter() - start


def dense(array_mb: float, pairs: int, seed: int) -> list[dict]:
    out = []
    for d, kind in ((10, "bounded"), (100, "bounded"), (1000, "bounded"), (1000, "unit")):
        n = max(BATCH, int(array_mb * 2**20 / (8 * d)) // BATCH * BATCH)
        X, y, keys = rows(n, d, kind, seed)
        learn, probe = [], []
        for _ in range(pairs):
            probe.append(probe_pass(X))
            learn.append(learn_pass(d, X, y, keys))
        ratios = [p / t for p, t in zip(probe, learn)]
        row = {"d": d, "rows": kind, "n": n, "array_mb": round(X.nbytes / 2**20, 1),
               "events_per_s": n / statistics.median(learn), "probe_rows_per_s": n / statistics.median(probe),
               "x_probe": statistics.median(ratios), "ns_per_dim": statistics.median(learn) / n / d * 1e9}
        out.append(row)
        print(f"d = {d:5,} {kind:7s}: {row['events_per_s']:>12,.0f} events/s, probe {row['probe_rows_per_s']:>13,.0f} "
              f"rows/s, {row['x_probe']:.2f}x probe, {row['ns_per_dim']:.2f} ns a dimension", flush=True)
    return out


def sparse(n: int, n_dense: int, d: int, nnz: int, repeat: int, seed: int) -> dict:
    from worker.olu import SparseRows

    rng = np.random.default_rng(seed)
    pool = 4096
    idx = np.sort(np.stack([rng.choice(d, nnz, replace=False) for _ in range(pool)]), axis=1)
    vals = rng.normal(size=(pool, nnz))
    vals *= (rng.random(pool) / np.sqrt((vals * vals).sum(axis=1)))[:, None]
    pick = rng.integers(0, pool, n)
    rows = SparseRows(np.arange(0, n * nnz + 1, nnz, dtype=np.int64), idx[pick].ravel().astype(np.int64),
                      vals[pick].ravel())
    y = np.where(rng.random(n) < 0.5, 1.0, 0.0)
    keys = rng.integers(1, 2**63, n, dtype=np.uint64)
    best = min(learn_pass(d, rows, y, keys) for _ in range(repeat))
    dense_rows = rows[:n_dense].to_dense(d)
    dense_s = learn_pass(d, dense_rows, y[:n_dense], keys[:n_dense])
    out = {"d": d, "nnz": nnz, "events": n, "events_per_s": n / best, "dense_events": n_dense,
           "dense_events_per_s": n_dense / dense_s}
    print(f"sparse, {nnz} non-zeros in d = {d:,}: {out['events_per_s']:,.0f} events/s; the same rows dense: "
          f"{out['dense_events_per_s']:,.0f} events/s", flush=True)
    return out


def deletion(d: int, count: int, seed: int) -> dict:
    m = model(d)
    X, y, _ = rows(2000, d, "bounded", seed)
    ids = [f"r-{j}" for j in range(len(X))]
    m.learn_many(ids, X, y)
    timings = {"unlearn_us": [], "state_us": [], "encode_us": []}
    size = 0
    for j in range(count):
        t0 = time.perf_counter()
        m.unlearn_request([ids[j]])
        t1 = time.perf_counter()
        state = m.deletion_state()
        t2 = time.perf_counter()
        z = state.pop("z")
        blob = codec.encode({"offset": j, **state}, {"z": z})
        t3 = time.perf_counter()
        size = len(blob)
        for key, value in zip(timings, (t1 - t0, t2 - t1, t3 - t2)):
            timings[key].append(value * 1e6)
    out = {"d": d, "deletions": count, "delta_bytes": size,
           **{key: statistics.median(values) for key, values in timings.items()}}
    out["total_us"] = out["unlearn_us"] + out["state_us"] + out["encode_us"]
    print(f"deletion at d = {d:,}: {out['unlearn_us']:.0f} us unlearn (noise, charge, projection), "
          f"{out['state_us']:.0f} us state, {out['encode_us']:.0f} us delta ({size:,} bytes): "
          f"{out['total_us']:.0f} us", flush=True)
    return out


def release_sizes(seed: int) -> list[dict]:
    import fastavro

    from worker.formats.release import avro_schema

    schema = fastavro.parse_schema(json.loads(avro_schema()))
    out = []
    for d in (10, 1000, 10_000):
        m = model(d)
        X, y, _ = rows(500, d, "bounded", seed)
        m.learn_many([f"r-{j}" for j in range(len(X))], X, y)
        def json_value(m=m):
            return release_value(model_name="bench", topic="events", partition=0, offset=500, event_time_ms=0, model=m)

        def avro_value(value):  # what AvroSerializer does after the worker's JSON value (formats/release.py)
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, schema, orjson.loads(value))
            return buf.getvalue()

        value = json_value()
        avro = avro_value(value)
        row = {"d": d, "json": len(value), "json_schema": 5 + len(value), "avro": 5 + len(avro),
               "json_us": _us(json_value), "avro_us": _us(lambda: avro_value(value)),
               "avro_read_us": _us(lambda: fastavro.schemaless_reader(io.BytesIO(avro), schema)),
               "json_read_us": _us(lambda: orjson.loads(value))}
        out.append(row)
        print(f"release at d = {d:6,}: JSON {row['json']:>9,} B in {row['json_us']:,.0f} us (read "
              f"{row['json_read_us']:,.0f} us), Avro {row['avro']:>9,} B ({row['avro'] / row['json']:.2f}x) in "
              f"{row['json_us'] + row['avro_us']:,.0f} us (read {row['avro_read_us']:,.0f} us)", flush=True)
    return out


def _us(call, repeat: int = 20) -> float:
    """Median microseconds of ``call()``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--array-mb", type=float, default=256.0, help="size of each dense pass's input array")
    ap.add_argument("--pairs", type=int, default=5, help="probe and learning passes, alternated")
    ap.add_argument("--deletions", type=int, default=200)
    ap.add_argument("--sparse-events", type=int, default=1_000_000)
    ap.add_argument("--dense-events", type=int, default=5_000)
    ap.add_argument("--seed", type=int, default=0)
    args = h.arguments(ap, argv, quick="8 MB arrays, one pair, 20 deletions, 20,000 sparse rows")
    if args.quick:
        args.array_mb, args.pairs, args.deletions, args.sparse_events, args.dense_events = 8.0, 1, 20, 20_000, 1_000
    info = h.machine()
    print(h.machine_line(info))
    warm_up()
    dense_rows = dense(args.array_mb, args.pairs, args.seed)
    sparse_row = sparse(args.sparse_events, args.dense_events, 2**16, 30, 1 if args.quick else 3, args.seed)
    deleted = deletion(10_000, args.deletions, args.seed)
    sizes = release_sizes(args.seed)
    checks = Checks()
    by = {(r["d"], r["rows"]): r for r in dense_rows}
    checks.check(DENSE_X_PROBE, by[1000, "bounded"]["x_probe"], where="norms in [0, 1)",
                 note=f"rows normalised to 1: {by[1000, 'unit']['x_probe']:.2f}x")
    checks.check(DENSE_D100, by[100, "bounded"]["events_per_s"])
    checks.check(SPARSE_EVENTS, sparse_row["events_per_s"])
    report = {"machine": info, "config": {"array_mb": args.array_mb, "pairs": args.pairs, "batch": BATCH,
                                          "deletions": args.deletions, "quick": args.quick},
              "dense": dense_rows, "sparse": sparse_row, "deletion": deleted, "release_bytes": sizes}
    return h.finish("wide_models", report, args.out, checks=checks)


def render(report: dict) -> str:
    lines = ["| d | rows | learn_many events/s | read pass rows/s | x probe | ns a dimension |",
             "|---:|---|---:|---:|---:|---:|"]
    for r in report["dense"]:
        lines.append(f"| {r['d']:,} | {r['rows']} | {r['events_per_s']:,.0f} | {r['probe_rows_per_s']:,.0f} "
                     f"| {r['x_probe']:.2f} | {r['ns_per_dim']:.2f} |")
    sp = report["sparse"]
    lines += ["", f"Sparse rows, {sp['nnz']} non-zeros in d = {sp['d']:,}: {sp['events_per_s']:,.0f} events/s "
                  f"in learn_many; the same rows dense: {sp['dense_events_per_s']:,.0f} events/s."]
    dl = report["deletion"]
    lines += ["", f"A deletion at d = {dl['d']:,}: {dl['unlearn_us']:,.0f} us to unlearn (shift, charge, noise "
                  f"draw, projection), {dl['state_us']:,.0f} us for the durable state, {dl['encode_us']:,.0f} us to "
                  f"encode the delta ({dl['delta_bytes']:,} bytes); {dl['total_us']:,.0f} us in all.", "",
              "| d | JSON release | JSON Schema | Avro | JSON written / read | Avro written / read |",
              "|---:|---:|---:|---:|---:|---:|"]
    for r in report["release_bytes"]:
        lines.append(f"| {r['d']:,} | {r['json']:,} B | {r['json_schema']:,} B | {r['avro']:,} B "
                     f"| {r['json_us']:,.0f} / {r['json_read_us']:,.0f} us "
                     f"| {r['json_us'] + r['avro_us']:,.0f} / {r['avro_read_us']:,.0f} us |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
