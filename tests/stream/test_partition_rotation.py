"""A rotating partition (docs/accounting.md 12) through PartitionRunner: deltas hold both models'
post-noise iterates, a crash at, before or after a promotion restores to the bit-identical state,
and releases name their generation with versions monotone across promotions."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from confluent_kafka import Message

from tests.infra.schema_samples import validate
from worker import follow as follow_mod
from worker.client import parse_release
from worker.config import load_settings
from worker.config.model import build_model
from worker.olu.rotation import Rotation
from worker.state.store import SnapshotStore, open_store
from worker.stream.partition import PartitionRunner

DIM, E = 3, 100  # promotions every 50 inserts


def _stream(n=400, seed=0):
    rng = np.random.default_rng(seed)
    msgs = []
    for i in range(n):
        if i % 9 == 8:  # deletes of records 5 to 70 events old: held by one model or both
            rid = f"r-{i - 5 - (i * 7) % 66}"
            value = orjson.dumps({"op": "delete", "id": rid})
        else:
            rid = f"r-{i}"
            x = rng.normal(size=DIM)
            x /= 2 * np.linalg.norm(x)
            value = orjson.dumps({"op": "insert", "id": rid, "x": x.tolist(), "y": int(rng.integers(0, 2))})
        msgs.append(Message(topic="t", partition=0, offset=i, key=rid.encode(), value=value,
                            timestamp=(1, 1_700_000_000_000 + i)))
    return msgs


def _settings(variant="overlap"):
    return load_settings([], env={
        "OLU_DIM": str(DIM), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1", "OLU_RELEASE_EVERY_EVENTS": "20",
        "OLU_ROTATION": "on", "OLU_ROTATION_VARIANT": variant, "OLU_MODEL_LIFETIME_EVENTS": str(E),
        "OLU_BUDGET_SPLIT": "planned", "OLU_EXPECTED_DELETION_RATE": "0.1"})


def _bytes(model) -> dict:
    state = model.export_state()
    return {"meta": orjson.dumps(state["meta"]),
            **{k: np.asarray(v).tobytes() for k, v in state["arrays"].items()}}


def test_settings_build_a_rotation_with_the_planned_capacity():
    model = build_model(_settings("disjoint"))
    assert isinstance(model, Rotation) and model.variant == "disjoint"
    assert model.active.accountant.planned == 5  # 0.1 x E / 2: a disjoint model holds half the records
    assert build_model(_settings("overlap")).active.accountant.planned == 10


@pytest.mark.parametrize("variant", ["overlap", "disjoint"])
@pytest.mark.parametrize("crash_at", [59, 60, 61, 115, 200])  # inserts 50 and 100 sit at offsets 56 and 112
def test_a_crash_around_a_promotion_restores_to_the_bit_identical_state(variant, crash_at):
    msgs = _stream()
    settings = _settings(variant)
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=5)
    runner = PartitionRunner("t", 0, build_model(settings), snapshots=snapshots, settings=settings, model_name="m")
    runner.process(msgs[:30])
    runner.snapshot()  # the full snapshot the restart starts from; deltas after it replay the deletions
    releases = []
    for j in range(30, crash_at, 7):
        releases += runner.process(msgs[j:min(j + 7, crash_at)]).releases
    assert runner.next_offset == crash_at
    before = _bytes(runner.model)
    # SIGKILL: the runner is gone; a new one restores from the snapshot and the stored deltas.
    restored, found = PartitionRunner.restore("t", 0, snapshots=snapshots, settings=settings,
                                              model_factory=lambda: build_model(settings), model_name="m",
                                              on_corrupt="fail")
    assert found is not None and restored.next_offset == 30
    replayed = []
    for j in range(30, crash_at, 11):
        replayed += restored.process(msgs[j:min(j + 11, crash_at)]).releases
    assert _bytes(restored.model) == before
    # which versions are released depends on the batching (deletion releases are coalesced per
    # poll batch); a version released by both runs is byte for byte the same release
    mine, theirs = {r.version: r.value for r in releases}, {r.version: r.value for r in replayed}
    assert any(r.trigger == "deletion" for r in replayed) or not any(r.trigger == "deletion" for r in releases)
    assert all(mine[v] == theirs[v] for v in mine.keys() & theirs.keys())


def test_releases_name_their_generation_and_versions_stay_monotone():
    msgs = _stream()
    settings = _settings("overlap")
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    runner = PartitionRunner("t", 0, build_model(settings), snapshots=snapshots, settings=settings, model_name="m")
    out = []
    for j in range(0, len(msgs), 13):
        out += runner.process(msgs[j:j + 13]).releases
    runner.final_release()
    out += runner.ready_releases()
    for r in out:  # the wire contract, with the rotation's and the planned split's fields
        validate("release", orjson.loads(r.value))
    parsed = [parse_release(r.value, key=r.key) for r in out]
    line = follow_mod._text_line(parsed[-1], None)  # what olu-worker follow prints
    assert f"generation={parsed[-1].generation} epoch=" in line and "model_age=" in line
    versions = [p.version for p in parsed]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    generations = [p.generation for p in parsed]
    assert generations == sorted(generations) and generations[-1] == runner.model.generation >= 5
    last = parsed[-1].privacy
    assert last["rotation"] == "overlap" and last["split"] == "planned" and last["model_rho"] == last["rho"] / 2
    assert 0 <= last["model_age"] <= E


def test_a_planned_split_without_a_plan_is_refused_at_start():
    from worker.exceptions import ConfigError
    with pytest.raises(ConfigError, match="OLU_DELETION_CAPACITY"):
        load_settings([], env={"OLU_DIM": "3", "OLU_KAFKA_BOOTSTRAP_SERVERS": "k:1", "OLU_BUDGET_SPLIT": "planned"})
    with pytest.raises(ConfigError, match="OLU_PRIVACY_UNIT.*budget_split planned applies"):
        load_settings([], env={"OLU_DIM": "3", "OLU_KAFKA_BOOTSTRAP_SERVERS": "k:1", "OLU_BUDGET_SPLIT": "planned",
                               "OLU_DELETION_CAPACITY": "5", "OLU_PRIVACY_UNIT": "per-request"})
    with pytest.raises(ConfigError, match="rotate"):
        load_settings([], env={"OLU_DIM": "3", "OLU_KAFKA_BOOTSTRAP_SERVERS": "k:1", "OLU_ROTATION": "on",
                               "OLU_ALGORITHM": "memory-pair"})


def test_metrics_show_capacity_overflow_generation_and_age():
    from worker.metrics import Metrics
    settings = _settings("overlap")
    model = build_model(settings)
    msgs = _stream(180)
    runner = PartitionRunner("t", 0, model, snapshots=SnapshotStore(open_store("memory://"), prefix="p", group="g",
                                                                    keep=3), settings=settings, model_name="m")
    runner.process(msgs)
    metrics = Metrics()
    metrics.update_privacy("t", 0, model)
    text = metrics.render().decode()
    p = model.privacy()
    for name, key in (("olu_deletion_capacity_planned", "capacity_planned"), ("olu_deletion_capacity_used",
                      "capacity_used"), ("olu_deletion_overflow", "overflow_deletions"),
                      ("olu_model_generation", "generation"), ("olu_model_age_events", "model_age")):
        assert f'{name}{{partition="0",topic="t"}} {float(p[key])}' in text, name
    assert p["generation"] == 2 and p["capacity_planned"] == 10
