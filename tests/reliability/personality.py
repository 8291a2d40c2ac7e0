"""One stream with deletions through every path that promises bit-identical results, as digests.

Run as ``python -m tests.reliability.personality`` in a subprocess whose environment gives it a CPU
personality (``OPENBLAS_CORETYPE``, ``NPY_DISABLE_CPU_FEATURES``, ``NUMBA_CPU_NAME``); it prints one
JSON object, {workload: sha256 of its state, deltas and release bytes}. ``test_cpu_personalities.py``
compares the objects of several personalities, and of the paths within one, bit for bit.

``--blas-products`` puts numpy's BLAS products back into the engine's reference step (what the
engine did before ``worker/olu/arith.py``): the test runs it once to show its comparison catches
that. ``--half`` and ``--resume``: the first half of a partition's stream from a fresh model, saved
to a state file, and the rest from that file (a restore on another node).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import pickle
import sys
from pathlib import Path

import numpy as np
import orjson
from confluent_kafka import Message

from worker.compiled import jit
from worker.config import load_settings
from worker.olu import ALGORITHMS, PassiveOLU, arith, load_model
from worker.olu.batches import apply as apply_mod
from worker.olu.core import domain, entropy, losses
from worker.olu.rotation import Rotation
from worker.state.store import SnapshotStore, open_store
from worker.stream.partition import PartitionRunner


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return next((set(line.split(":", 1)[1].split()) for line in text.splitlines() if line.startswith("flags")), set())


FLAGS = _cpu_flags()
#: Environments that change what the numeric libraries pick on this very machine.
PERSONALITIES = {
    "host": {},
    "openblas-prescott": {"OPENBLAS_CORETYPE": "Prescott"},  # SSE2 kernels
    "numpy-baseline": {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4"},  # no AVX2/AVX-512 loops
    "numba-generic": {"NUMBA_CPU_NAME": "generic"},
    **({"openblas-sandybridge": {"OPENBLAS_CORETYPE": "Sandybridge"}} if "avx" in FLAGS else {}),
    **({"openblas-haswell": {"OPENBLAS_CORETYPE": "Haswell"}} if {"avx2", "fma"} <= FLAGS else {}),
    **({"openblas-skylakex": {"OPENBLAS_CORETYPE": "SkylakeX"}} if "avx512f" in FLAGS else {}),
}
PERSONALITY_VARIABLES = ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES", "NUMBA_CPU_NAME")

# Wide enough that every BLAS kernel and numpy SIMD width sums in an order of its own (at d = 10,
# some kernels happen to add left to right).
DIM = 37
EVENTS = 2_400
BATCH = 200


def stream(n: int = EVENTS, dim: int = DIM, seed: int = 5) -> list[Message]:
    """Inserts (norms up to the bound, some a hair over it) with ~4% single-id deletes of earlier
    records, of the same poll batch's and of ids never seen."""
    rng = np.random.default_rng(seed)
    out, inserted = [], 0
    for j in range(n):
        roll = rng.random()
        if roll < 0.04 and inserted > 10:
            rid = f"r-{int(rng.integers(inserted))}" if roll < 0.03 else f"r-{inserted - 2}" if roll < 0.037 \
                else f"nobody-{j}"
            value = orjson.dumps({"op": "delete", "id": rid})
        else:
            x = rng.normal(size=dim)
            x *= (1.0 + 1e-9 if roll > 0.97 else rng.uniform(0.2, 1.0)) / arith.norm(x)  # the input is the same too
            rid = f"r-{inserted}"
            value = orjson.dumps({"op": "insert", "id": rid, "x": x.tolist(), "y": int(x[0] + 0.3 * x[1] > 0)})
            inserted += 1
        out.append(Message(topic="t", partition=0, offset=j, key=rid.encode(), value=value,
                           timestamp=(1, 1_700_000_000_000 + j)))
    return out


def fixed_noise() -> None:
    """Noise rows that do not depend on the order two models draw in (a rotation's pass)."""
    row = np.sin(np.arange(DIM) * 1.3 + 0.7)
    entropy.OsEntropy.gaussian = lambda self, dim: row[:dim].copy()
    entropy.OsEntropy.gaussian_rows = lambda self, n, dim: np.tile(row[:dim], (n, 1))


def blas_products() -> None:
    """The engine's reference step as it was: BLAS dot products and norms."""
    losses.dot = lambda a, b: float(a @ b)
    losses.sqnorm = domain.sqnorm = lambda a: float(a @ a)


class Digest:
    def __init__(self):
        self.h = hashlib.sha256()

    def arrays(self, mapping: dict) -> None:
        for key in sorted(mapping):
            value = np.asarray(mapping[key])
            self.h.update(key.encode() + str(value.dtype).encode() + value.tobytes())

    def state(self, model) -> None:
        state = model.export_state()
        self.h.update(orjson.dumps(state["meta"], option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY))
        self.arrays(state["arrays"])

    def hex(self) -> str:
        return self.h.hexdigest()


def run_partition(model, msgs, one_pass: bool = True) -> tuple[PartitionRunner, str]:
    """The runner over ``msgs`` in poll batches: the model, its deltas and its releases, digested."""
    settings = load_settings([], env={"OLU_DIM": str(DIM), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                                      "OLU_RELEASE_EVERY_EVENTS": "300"})
    real = apply_mod.learn_and_unlearn
    apply_mod.learn_and_unlearn = real if one_pass else (lambda *a: None)
    try:
        snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
        digest, deltas = Digest(), []
        snapshots.write_deltas = lambda topic, partition, entries: deltas.extend(entries)
        runner = PartitionRunner("t", 0, model, snapshots=snapshots, settings=settings, model_name="m")
        for j in range(0, len(msgs), BATCH):
            for release in runner.process(msgs[j:j + BATCH]).releases:
                digest.h.update(release.trigger.encode() + str(release.version).encode() + release.value)
        for offset, header, arrays in deltas:
            digest.h.update(orjson.dumps([offset, header], option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY))
            digest.arrays(arrays)
        digest.state(runner.model)
        return runner, digest.hex()
    finally:
        apply_mod.learn_and_unlearn = real


def engine_runs(msgs) -> dict[str, str]:
    """Every algorithm through the engine's API: learn_many in poll batches, then its deletes; and
    passive OLU and plain OGD again through the pure-numpy reference step (``*:reference``)."""
    rows = [orjson.loads(m.value()) for m in msgs]
    inserts = [r for r in rows if r["op"] == "insert"]
    ids = [r["id"] for r in inserts]
    X = np.array([r["x"] for r in inserts])
    out = {}
    runs = [(name, cls, False) for name, cls in sorted(ALGORITHMS.items())]
    runs += [(name, ALGORITHMS[name], True) for name in ("passive", "ogd")]
    for name, cls, reference in runs:
        params = dict(cls.example_params)
        labels = np.array([r["y"] for r in inserts], np.float64)
        if params.get("loss") == "ridge":
            labels = np.clip(X[:, 0] + 0.5 * X[:, 1], -1.0, 1.0)
        model = cls(dim=DIM, noise_rng=np.random.default_rng(3), **params)
        with jit.reference() if reference else contextlib.nullcontext():
            for j in range(0, min(len(ids), 600), 150):
                model.learn_many(ids[j:j + 150], X[j:j + 150], labels[j:j + 150])
                for k in range(j, j + 150, 50):
                    model.unlearn_one(ids[k])
        digest = Digest()
        digest.state(model)
        out[f"engine:{name}" + (":reference" if reference else "")] = digest.hex()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blas-products", action="store_true")
    ap.add_argument("--half", metavar="STATE_FILE", help="first half only; save the partition's state here")
    ap.add_argument("--resume", metavar="STATE_FILE", help="the second half, from the state saved by --half")
    args = ap.parse_args(argv)
    fixed_noise()
    if args.blas_products:
        blas_products()
    msgs = stream()
    half = len(msgs) // 2
    new_model = lambda: PassiveOLU(dim=DIM)  # noqa: E731  (noise: fixed_noise's rows)
    if args.half or args.resume:
        if args.half:
            runner, digest = run_partition(new_model(), msgs[:half])
            with open(args.half, "wb") as f:
                pickle.dump(runner.model.export_state(), f)
        else:
            with open(args.resume, "rb") as f:
                model = load_model(pickle.load(f))
            runner, digest = run_partition(model, msgs[half:])
        print(orjson.dumps({"partition": digest}).decode())
        return 0
    out = {}
    _, out["runner:passive:one-pass"] = run_partition(new_model(), msgs)
    _, out["runner:passive:one-by-one"] = run_partition(new_model(), msgs, one_pass=False)
    for variant in ("overlap", "disjoint"):
        rotation = Rotation(PassiveOLU, lifetime_events=900, variant=variant, dim=DIM)
        _, out[f"runner:rotation-{variant}"] = run_partition(rotation, msgs)
    out.update(engine_runs(msgs))
    print(orjson.dumps(out, option=orjson.OPT_SORT_KEYS).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
