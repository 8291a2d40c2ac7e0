"""Exact retraining over sparse retained rows (OLU_RETAINED_ROWS=sparse) in the partition runner,
in process: sparse x on the wire, deletions exact, and a runner restored from a snapshot taken
mid-stream plus its deltas replays to the bits of the run that never stopped (docs/worker.md 5.4).
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from worker.config import load_settings
from worker.devtools.messages import messages
from worker.olu import ALGORITHMS
from worker.state.store import SnapshotStore, open_store
from worker.stream.partition import PartitionRunner

DIM = 200
ENV = {"OLU_DIM": str(DIM), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1", "OLU_ALGORITHM": "retrain",
       "OLU_RETAINED_ROWS": "sparse", "OLU_CHECKPOINT_EVERY": "16", "OLU_RELEASE_EVERY_EVENTS": "100000",
       "OLU_DELETION_RELEASES": "each"}


def _stream(n: int, seed: int) -> list[tuple[bytes, bytes]]:
    """Inserts of 5 non-zeros of DIM (half as {"indices", "values"}, half dense), a delete of an
    earlier record every 10th event."""
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        if j % 10 == 9:
            out.append((b"k", orjson.dumps({"op": "delete", "id": f"r-{int(rng.integers(0, j - 1))}"})))
            continue
        cols = np.sort(rng.choice(DIM, 5, replace=False))
        vals = rng.standard_normal(5)
        vals *= rng.uniform(0.2, 0.95) / np.linalg.norm(vals)
        if j % 2:
            x = {"indices": cols.tolist(), "values": vals.tolist()}
        else:
            x = np.zeros(DIM)
            x[cols] = vals
            x = x.tolist()
        out.append((b"k", orjson.dumps({"op": "insert", "id": f"r-{j}", "x": x, "y": int(rng.integers(0, 2))})))
    return out


def _runner(settings, snapshots) -> PartitionRunner:
    model = ALGORITHMS["retrain"](**settings.model_kwargs())
    return PartitionRunner("t", 0, model, snapshots=snapshots, settings=settings, model_name="m")


@pytest.mark.parametrize("cut", [7, 40])
def test_a_restored_sparse_retrain_replays_to_the_bits_of_the_run_that_never_stopped(cut):
    settings = load_settings([], env={**ENV, "OLU_SPARSE_INPUT": "true"})
    msgs = messages("t", 0, _stream(400, seed=3))
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    whole = _runner(settings, snapshots)
    outs = []
    for j in range(0, len(msgs), cut):
        outs.append(whole.process(msgs[j:j + cut]))
        if j <= 200 < j + cut:
            whole.snapshot()  # mid-stream; the deletions after it are deltas
    assert not [d for o in outs for d in o.dead_letters]
    model = whole.model
    assert model.sparse_steps and model.counters["retrains"] > 20 and model.scale != 1.0
    assert {d.outcome for o in outs for d in o.deletions} <= {"exact", "not_applied", "duplicate"}
    released = {orjson.loads(r.value)["version"]: r.value for o in outs for r in o.releases
                if r.trigger == "deletion"}

    again, _ = PartitionRunner.restore("t", 0, snapshots=snapshots, settings=settings, model_name="m",
                                       model_factory=lambda: ALGORITHMS["retrain"](**settings.model_kwargs()),
                                       on_corrupt="fail")
    start = again.next_offset
    assert 0 < start < len(msgs)  # from the snapshot, not from the start
    outs_again = [again.process(msgs[j:j + 13]) for j in range(start, len(msgs), 13)]
    assert again.model.z.tobytes() == model.z.tobytes() and again.model.scale == model.scale
    replayed = {orjson.loads(r.value)["version"]: r.value for o in outs_again for r in o.releases
                if r.trigger == "deletion"}
    assert replayed and replayed == {v: b for v, b in released.items() if v > start}
    assert np.array_equal(again.model.examples.to_arrays()["values"], model.examples.to_arrays()["values"])
