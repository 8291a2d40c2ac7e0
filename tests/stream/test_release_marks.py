"""Release marks and the tighter replay floor (worker/state/marks.py, worker/stream/assignment.py).

A partition stores a mark before any release above its newest one, so nothing it publishes passes
its newest mark; a restored partition holds releases only below the lower of the input's end and
that mark. So after a restart on a long backlog, the deletions in the backlog are released as the
replay meets them, not after the whole catch-up, and no release goes below one the predecessor
could have published.
"""

from __future__ import annotations

import numpy as np
import orjson

from worker.config import load_settings
from worker.devtools.messages import messages
from worker.olu import PassiveOLU
from worker.state.store import SnapshotStore, open_store
from worker.stream.assignment import replay_floor_at
from worker.stream.partition import MARK_STRETCH, PartitionRunner
from worker.stream.replay_floor import ReplayFloor

DIM = 3
SETTINGS = load_settings([], env={"OLU_DIM": str(DIM), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                                  "OLU_RELEASE_EVERY_EVENTS": "10000"})
BATCH = 2000


def _records(n: int, start: int, rng, delete_every: int = 0) -> list:
    out = []
    for i in range(start, start + n):
        if delete_every and i % delete_every == delete_every - 1:
            out.append((f"r-{i - 7}".encode(), None))  # a tombstone of a record 7 events back
            continue
        x = rng.normal(size=DIM)
        x *= 0.9 / np.linalg.norm(x)
        out.append((f"r-{i}".encode(),
                    orjson.dumps({"op": "insert", "id": f"r-{i}", "x": x.tolist(), "y": int(rng.integers(0, 2))})))
    return out


def _runner(snapshots) -> PartitionRunner:
    return PartitionRunner("t", 0, PassiveOLU(dim=DIM, noise_rng=np.random.default_rng(1)), snapshots=snapshots,
                           settings=SETTINGS, model_name="m")


def _feed(runner, msgs) -> list:
    released = []
    for j in range(0, len(msgs), BATCH):
        out = runner.process(msgs[j:j + BATCH])
        released += out.releases + runner.ready_releases()
    return released


def test_no_release_passes_the_newest_mark_and_old_marks_go():
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    runner = _runner(snapshots)
    rng = np.random.default_rng(0)
    released = _feed(runner, messages("t", 0, _records(120_000, 0, rng, delete_every=997)))
    newest = snapshots.newest_mark("t", 0)
    assert released and max(r.version for r in released) <= newest == runner.marked
    # a mark is stored at the version of the first release past the one before
    versions = sorted(r.version for r in released)
    marks, mark = [], None
    for v in versions:
        if mark is None or v > mark:
            mark = v + MARK_STRETCH
            marks.append(mark)
    assert newest == marks[-1] and len(marks) == 3  # 120,000 events: three stretches
    runner.snapshot()  # its garbage collection keeps the newest mark only
    directory = snapshots.directory("t", 0)
    assert [m["path"][len(directory):] for chunk in __import__("obstore").list(snapshots.store, directory)
            for m in chunk if m["path"].endswith(".mark")] == [f"mark-{newest:020d}.mark"]


def test_a_restart_on_a_backlog_releases_its_deletions_as_the_replay_meets_them():
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    first = _runner(snapshots)
    rng = np.random.default_rng(0)
    before = messages("t", 0, _records(20_000, 0, rng, delete_every=997))
    published = _feed(first, before)
    first.snapshot()  # then the process dies; 300,000 events arrive while it is down
    backlog = messages("t", 0, _records(300_000, 20_000, rng, delete_every=4_999), start=20_000)
    end = 20_000 + len(backlog)

    again, restored = PartitionRunner.restore("t", 0, snapshots=snapshots, settings=SETTINGS, model_name="m",
                                              model_factory=lambda: PassiveOLU(dim=DIM), on_corrupt="fail")
    floor = replay_floor_at(end, again.marked)
    assert floor == again.marked < end and floor >= max(r.version for r in published)
    again.replay_floor = ReplayFloor(floor)
    released = _feed(again, backlog)
    versions = [r.version for r in released]
    assert min(versions) >= floor  # never below what the predecessor may have published
    deletion_versions = [r.version for r in released if r.trigger == "deletion"]
    deletes = [m.offset() for m in backlog if m.value() is None]
    late = [d for d in deletes if d >= floor]
    # every deletion past the floor is released within its poll batch, long before the end
    for d in late:
        assert any(d < v <= d + BATCH for v in deletion_versions), d
    assert late and min(late) < end - 200_000
