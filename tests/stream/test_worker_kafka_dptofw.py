"""The online-DP baseline (dp-tofw) in the worker, against the real broker.

Every release carries the tree mechanism's own epsilon; deletions are DP-covered no-ops (no
delta, no deletion release); and a SIGKILL followed by a replay from the last snapshot re-forms
the same noisy tree nodes, so every re-published version is byte-identical: no second noisy view
of a node that a release already used (docs/algorithms.md 11.6, docs/worker.md 4.2, docs/worker.md 4.3).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.stream.kafka_harness import (
    assert_identical_duplicates,
    assert_same_state,
    event_stream,
    input_by_partition,
    settings_of,
    stored_objects,
    wait_for,
)
from worker.olu import ALGORITHMS, load_model
from worker.olu.exceptions import InvalidExample
from worker.olu.privacy.tree import record_levels
from worker.stream.exceptions import DeadLetter
from worker.stream.input.decode import Insert, decode_event

pytestmark = pytest.mark.kafka

HORIZON = 256  # small, so the stream crosses tree epochs


def _oracle(settings, noise_key: str):
    """A fresh engine with the worker's settings and the worker's noise key (read from its snapshot)."""
    blank = ALGORITHMS[settings.algorithm](**settings.model_kwargs()).export_state()
    blank["meta"]["extra"]["noise_key"] = noise_key
    return load_model(blank)


def _replay(model, settings, records) -> dict[int, tuple]:
    """offset + 1 -> (t, epoch, weights bytes, privacy) after each input record."""
    trace = {}
    for offset, key, value in records:
        try:
            event = decode_event(key, value, dim=settings.dim, max_bytes=settings.max_record_bytes)
            if isinstance(event, Insert):
                model.learn_one(event.id, event.x, event.y)
            else:
                assert model.unlearn_request(list(event.ids)).outcome in ("dp_covered", "not_applied", "duplicate")
        except (DeadLetter, InvalidExample):
            pass
        trace[offset + 1] = (model.t, model.epoch, model.weights.tobytes(), model.privacy())
    return trace


def test_dp_tofw_worker_releases_its_epsilon_and_replays_bit_identically_after_sigkill(kafka_run):
    run = kafka_run("dptofw", OLU_ALGORITHM="dp-tofw", OLU_DP_HORIZON=str(HORIZON), OLU_RHO="0.5",
                    OLU_BATCH_SIZE="50", OLU_SNAPSHOT_EVERY_EVENTS="250", OLU_SNAPSHOT_EVERY_SECONDS="0")
    stream = event_stream(700, seed=71, delete_rate=0.08)
    worker = run.worker(OLU_KAFKA_GROUP_INSTANCE_ID=f"{run.group}-0")  # the restart takes over at once
    worker.start()
    worker.wait_assigned({0})
    run.produce(stream[:400])
    first_end = run.end_offsets()[0]
    run.wait_covered({0: first_end}, 60, "the first part released")
    before = {r.json()["version"] for r in run.releases()}

    worker.kill()  # the events after the last full snapshot were released but not snapshotted
    worker.start()
    restored = worker.wait_assigned({0})[0]
    assert restored["snapshot"] is not None and restored["snapshot"] < first_end, restored

    def republished():
        versions = [r.json()["version"] for r in run.releases()]
        return [v for v in set(versions) if versions.count(v) > 1 and v in before]
    assert wait_for(republished, 60, "a version republished after the replay", interval=0.3)

    run.produce(stream[400:])
    run.wait_covered(what="the whole stream released")
    metrics = {name: worker.metric_sum(name, partition="0") for name in (
        "olu_privacy_epsilon", "olu_dp_noise_sigma", "olu_dp_horizon_remaining")}
    covered_deletes = worker.metric_sum("olu_deletions_noop_total", reason="dp_covered")
    changed_deletes = worker.metric_sum("olu_deletions_total")
    assert worker.terminate() == 0, worker.log_text(all_runs=False)[-3000:]

    records = run.releases()
    assert_identical_duplicates(records)  # the replay re-formed every noisy node bit for bit
    assert all(r.headers.get("olu.trigger") != b"deletion" for r in records)  # covered: nothing to publish
    objects = stored_objects(run.snapshots, run.topics.input, 0)
    assert objects and all(o.kind == "full" for o in objects)  # no deletion needed a durable delta
    keys = {o.header["model"]["extra"]["noise_key"] for o in objects}
    assert len(keys) == 1  # one key for the model's life, carried through the restore

    settings = settings_of(worker.env)
    oracle = _oracle(settings, keys.pop())
    trace = _replay(oracle, settings, input_by_partition(run.bootstrap, run.topics.input)[0])
    values = [r.json() for r in records]
    for v in values:
        t, epoch, weights, privacy = trace[v["version"]]
        assert (v["algorithm"], v["t"], v["epoch"]) == ("dp-tofw", t, epoch)
        assert np.array(v["weights"], np.float64).tobytes() == weights, f"release {v['version']}"
        # the tree accounting, as published; its noise is not the deletions' (no contraction bound)
        noise = {k: v["privacy"].pop(k) for k in ("noise_std", "noise_to_signal")}
        assert noise == {"noise_std": None, "noise_to_signal": None}
        assert v["privacy"] == {k: privacy[k] for k in v["privacy"]}
        tree_t = t - epoch * HORIZON
        rho = max(epoch and record_levels(HORIZON), record_levels(tree_t)) * oracle.rho_node
        assert v["privacy"]["eps_rdp_slope"] == rho and v["privacy"]["epsilon"] <= oracle.epsilon_at_horizon
        assert v["privacy"]["deletions_capacity_left"] is None and v["deletions"] == 0
    assert max(v["epoch"] for v in values) >= 1  # the stream crossed the horizon
    assert_same_state(oracle, [o for o in objects if o.kind == "full"][-1])

    last = max(values, key=lambda v: v["version"])
    assert metrics["olu_privacy_epsilon"] == last["privacy"]["epsilon"]
    assert metrics["olu_dp_noise_sigma"] == oracle.sigma
    assert metrics["olu_dp_horizon_remaining"] == oracle.horizon - oracle.tree.t
    assert covered_deletes >= 1 and changed_deletes == 0
