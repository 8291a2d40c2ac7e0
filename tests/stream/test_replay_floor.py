"""A replay holds its releases below the floor (the input's end at assignment) and makes one there
(worker/stream/replay_floor.py, docs/worker.md 5.4)."""

from __future__ import annotations

import numpy as np
import pytest

from worker.config import load_settings
from worker.olu import PassiveOLU
from worker.state.store import SnapshotStore, open_store
from worker.stream.partition import PartitionRunner
from worker.stream.replay_floor import ReplayFloor
from worker.wire import TRIGGER_DELETION

from .test_partition_runner import _deleting_stream


def _runner(floor=None, **env):
    settings = load_settings([], env={"OLU_DIM": "3", "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                                      "OLU_RELEASE_EVERY_EVENTS": "500", **env})
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    snapshots.write_deltas = lambda topic, partition, entries: None
    runner = PartitionRunner("t", 0, PassiveOLU(dim=3, noise_rng=np.random.default_rng(11)), snapshots=snapshots,
                             settings=settings, model_name="m")
    runner.replay_floor = ReplayFloor(floor)
    return runner


def _releases(runner, msgs, batch):
    return [r for j in range(0, len(msgs), batch) for r in runner.process(msgs[j:j + batch]).releases]


@pytest.mark.parametrize("deletion_releases", ["batch", "each"])
def test_a_replay_publishes_nothing_below_its_floor_and_one_release_there(deletion_releases):
    msgs = _deleting_stream()
    floor = 1_900
    first = _releases(_runner(OLU_DELETION_RELEASES=deletion_releases), msgs[:floor], 200)  # the dead process
    replay = _releases(_runner(floor, OLU_DELETION_RELEASES=deletion_releases), msgs, 137)  # other batch cuts
    published = {r.version for r in first}
    if deletion_releases == "batch":  # coalesced per poll batch: the versions follow the batch cuts
        # without the floor the replay's other cuts publish versions the dead process never did,
        # below its newest: what a compacted topic would keep last
        unheld = _releases(_runner(OLU_DELETION_RELEASES=deletion_releases), msgs, 137)
        assert any(r.version < max(published) and r.version not in published for r in unheld)
    assert [r.version for r in replay] == sorted({r.version for r in replay})  # never back, no repeat
    assert min(r.version for r in replay) >= floor
    caught_up = replay[0]
    assert caught_up.version == 137 * (floor // 137 + 1)  # the first batch end at or past the floor
    assert caught_up.trigger == TRIGGER_DELETION  # deletions were held: the release says so
    # its state is the one a never-interrupted run has there
    plain = _runner(OLU_DELETION_RELEASES=deletion_releases)
    _releases(plain, msgs[:caught_up.version], 137)
    assert plain._release(TRIGGER_DELETION).value == caught_up.value


def test_a_batch_that_releases_at_the_floor_makes_no_second_release_there():
    msgs = _deleting_stream()
    runner = _runner(400, OLU_RELEASE_EVERY_EVENTS="100")
    out = _releases(runner, msgs[:400], 100)  # the batch ending at 400 releases there (every 100 events)
    assert [r.version for r in out] == [400]
    assert runner.replay_floor.floor is None


def test_without_a_floor_nothing_is_held():
    msgs = _deleting_stream()
    replay = _releases(_runner(), msgs, 137)
    assert min(r.version for r in replay) < 500
