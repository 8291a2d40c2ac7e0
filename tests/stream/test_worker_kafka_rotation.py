"""Warm-standby rotation against the real broker (docs/accounting.md 12), state on disk or on the S3
server: SIGKILL while promotions happen every 100 inserts, then an in-process replay of the same input that adopts the stored deletion
states (both models' post-noise iterates) must equal every release and the final snapshot bit for bit.
"""

from __future__ import annotations

import random
import time
import uuid

import numpy as np
import pytest

from tests.stream.kafka_harness import (
    BackgroundProducer,
    WorkerProcess,
    assert_identical_duplicates,
    assert_same_state,
    covered,
    end_offsets,
    event_stream,
    input_by_partition,
    produce,
    releases,
    releases_by_partition,
    settings_of,
    stored_objects,
    topics_for,
    wait_for,
    worker_env,
    worker_on_s3,
)
from worker.olu import load_model
from worker.olu.exceptions import InvalidExample
from worker.olu.rotation import Rotation
from worker.state.store import SnapshotStore, open_store
from worker.stream.exceptions import DeadLetter
from worker.stream.input.decode import Insert, decode_event

pytestmark = pytest.mark.kafka


def _replay(settings, records, deltas: dict[int, dict], start):
    """The worker's model restored from the full snapshot ``start``, fed the ``records`` after it;
    every deletion that changed a model adopts its stored deletion state. Returns the model and, per
    offset + 1, (generation, t, active iterate bytes)."""
    model = load_model({"meta": start.header["model"], "arrays": start.arrays, "shared": start.shared})
    assert isinstance(model, Rotation)
    deltas = {k: v for k, v in deltas.items() if k > start.offset}
    trace, used = {}, set()
    for offset, key, value in records:
        if offset < start.offset:
            continue
        try:
            event = decode_event(key, value, dim=settings.dim, max_bytes=settings.max_record_bytes)
        except DeadLetter:
            event = None
        if isinstance(event, Insert):
            try:
                model.learn_one(event.id, event.x, event.y)
            except InvalidExample:
                pass
        elif event is not None:
            post = deltas.get(offset + 1)
            if model.unlearn_request(list(event.ids), post_state=post).changed_model:
                assert post is not None, f"deletion at {offset} changed a model without a stored state"
                used.add(offset + 1)
        trace[offset + 1] = (model.generation, model.t, model.z.tobytes())
    assert used == set(deltas), "stored deletion states that match no deletion"
    return model, trace


ROTATING = dict(OLU_BATCH_SIZE="40", OLU_ROTATION="on", OLU_MODEL_LIFETIME_EVENTS="200", OLU_BUDGET_SPLIT="planned",
                OLU_EXPECTED_DELETION_RATE="0.1")


@pytest.mark.parametrize("store", ["file", pytest.param("s3", marks=pytest.mark.s3)])
def test_sigkill_around_promotions_restarts_to_bit_identical_state(store, kafka_bootstrap, kafka_topic, tmp_path,
                                                                   request):
    variant = "disjoint" if store == "file" else "overlap"
    if store == "s3":
        run = worker_on_s3(
            kafka_bootstrap, kafka_topic, request.getfixturevalue("s3_server"), "rot", root=tmp_path, stoppable=False,
            OLU_ROTATION_VARIANT=variant, **ROTATING)
        topics, group, env, snapshots = run.topics, run.group, run.env, run.snapshots
        env["OLU_KAFKA_GROUP_INSTANCE_ID"] = f"{group}-0"
    else:
        topics = topics_for(kafka_topic, partitions=1)
        group = f"rot-{uuid.uuid4().hex[:8]}"
        env = worker_env(kafka_bootstrap, topics, group, f"file://{tmp_path}/state",
                         OLU_KAFKA_GROUP_INSTANCE_ID=f"{group}-0", OLU_ROTATION_VARIANT=variant, **ROTATING)
        snapshots = SnapshotStore(open_store(f"file://{tmp_path}/state"), prefix="olu", group=group)
    stream = event_stream(3000, seed=19, delete_rate=0.1)
    feeder = BackgroundProducer(kafka_bootstrap, topics.input, stream[200:], chunk=40, pause=0.2, limit=1200)
    worker = WorkerProcess(env, tmp_path / "worker.log")
    rnd = random.Random()
    try:
        worker.start()
        worker.wait_assigned({0})
        produce(kafka_bootstrap, topics.input, stream[:200])
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 60, "the warm-up")
        feeder.start()
        for phase_end in (2200, None):
            done = worker.metric_sum("olu_deletions_total")
            wait_for(lambda d=done: worker.metric_sum("olu_deletions_total") >= d + 5, 60, "deletions before the kill",
                     interval=0.05)
            time.sleep(rnd.uniform(0.0, 1.0))
            worker.kill()
            worker.start()
            worker.wait_assigned({0})
            if phase_end is not None:
                feeder.allow(phase_end)
        feeder.hurry()
        feeder.result()
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 90,
                 "the restarted worker caught up", interval=0.3)
        assert worker.terminate() == 0, worker.log_text(all_runs=False)[-3000:]
    finally:
        feeder.hurry()
        feeder.join(30)
        worker.cleanup()

    published = releases(kafka_bootstrap, topics.params)
    assert_identical_duplicates(published)
    values = releases_by_partition(published)[0]
    objects = stored_objects(snapshots, topics.input, 0)
    deltas = {o.offset: {**{k: v for k, v in o.header.items() if k not in ("kind", "offset", "event_time_ms")},
                         **o.arrays} for o in objects if o.kind == "delta"}
    assert deltas and all("z_standby" in d for d in deltas.values() if d["events"] >= 100)
    fulls = [o for o in objects if o.kind == "full"]
    first = fulls[0]  # the oldest kept: the replay starts there (deltas behind it are collected)
    assert first.offset < 1500, "the replay should cover the kills"
    model, trace = _replay(settings_of(env), input_by_partition(kafka_bootstrap, topics.input)[0], deltas, first)
    assert model.generation >= 20  # about 2700 inserts, a promotion every 100
    later = [v for v in values if v["version"] > first.offset]
    assert len({v["generation"] for v in later}) >= 10
    for v in later:  # every release: the replay's released model at its version, and its generation
        generation, t, z = trace[v["version"]]
        assert (v["generation"], v["t"]) == (generation, t), v["version"]
        assert np.array(v["weights"], np.float64).tobytes() == z, v["version"]
    by_version = sorted(values, key=lambda v: v["version"])
    assert [v["generation"] for v in by_version] == sorted(v["generation"] for v in by_version)
    assert_same_state(model, fulls[-1])
