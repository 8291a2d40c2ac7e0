"""Corrupted snapshots and deltas are detected and never loaded silently: per
``OLU_ON_CORRUPT_SNAPSHOT`` an older valid snapshot is used (``fallback``) or the restore fails
loudly, naming the object (``fail``). A corrupt *delta* is fatal under either policy: it holds a
deletion's post-noise state, which must never be redrawn (docs/worker.md 4.2).

``tests/state/test_snapshots.py`` already covers, on memory://, file:// and S3: a newest full
snapshot that is truncated to half, a 20-byte stub, has a flipped byte in the middle, a future
format or layout version, or is a valid snapshot of another partition, group, offset or kind
(both policies); a needed delta with a flipped byte or of another partition. This file adds, on
file:// and the real S3 server:

* the remaining kinds for full snapshots (empty, one byte short, bad magic, zeroed checksum,
  flipped header or array byte, format version 0, another topic);
* every other corruption kind for deltas, under both policies;
* writing a snapshot again over a *misplaced* object (a valid snapshot under the wrong key) after
  falling back past it: before the fix in ``worker/state/store.py`` this was a
  ``SnapshotConflict``, so the worker crashed when its replay reached that offset again;
* the restore path the worker takes on assignment (``PartitionRunner.restore``) with a real
  model: after the fallback, replaying the input gives the bit-identical state (no noise redrawn);
* the worker itself on the real broker: it falls back (and its replay republishes byte-identical
  releases), or fails fast with a log line naming the object.
"""

from __future__ import annotations

import shutil
import uuid
from types import SimpleNamespace

import numpy as np
import obstore
import pytest

from tests.stream.kafka_harness import (
    Topics,
    WorkerProcess,
    assert_identical_duplicates,
    covered,
    create_topics,
    delete_topics,
    end_offsets,
    event_stream,
    produce,
    releases,
    stored_objects,
    verify_against_oracle,
    wait_for,
    worker_env,
)
from worker.config import load_settings
from worker.devtools.messages import messages
from worker.olu import ALGORITHMS
from worker.state.codec import FORMAT_VERSION, MAGIC, encode
from worker.state.exceptions import SnapshotConflict, SnapshotCorrupt
from worker.state.groups import GROUP_LAYOUTS
from worker.state.layout import LAYOUT_VERSION
from worker.state.store import SnapshotStore, open_store
from worker.stream.partition import PartitionRunner

T = "events"
_HEAD_SIZE = len(MAGIC) + 1 + 4  # magic, format byte, u32 header length (worker/state/codec.py)


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3)])
def raw(request, tmp_path):
    if request.param == "file":
        return open_store(f"file://{tmp_path}/snapshots")
    return request.getfixturevalue("s3_store")


@pytest.fixture
def snaps(raw):
    return SnapshotStore(raw, prefix="olu", group="g1", keep=2)


def full_state(offset: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(offset)
    return ({"event_time_ms": 1_700_000_000_000 + offset, "model": {"t": offset}},
            {"z": rng.normal(size=6), "keys": rng.integers(0, 2**63, size=9, dtype=np.uint64)})


def delta_state(offset: int) -> tuple[dict, dict]:
    return {"kind": "delta", "t": offset, "epoch": 0, "deletions": offset // 3}, {"z": np.full(6, offset / 7.0)}


def get(raw, key: str) -> bytes:
    return bytes(obstore.get(raw, key).bytes())


def put_over(raw, key: str, blob: bytes) -> None:
    obstore.delete(raw, key)
    obstore.put(raw, key, blob)


def write(snaps: SnapshotStore, kind: str, topic: str, partition: int, offset: int):
    if kind == "full":
        return snaps.write_full(topic, partition, offset, *full_state(offset))
    return snaps.write_delta(topic, partition, offset, *delta_state(offset))


# --------------------------------------------------------------------------- corruptions
# Each takes the object's bytes and, by keyword, the store, the object's kind and offset; it
# returns what is stored under the object's key instead.

def _empty(blob, **_):
    return b""


def _one_byte_short(blob, **_):
    return blob[:-1]


def _half(blob, **_):
    return blob[: len(blob) // 2]


def _bad_magic(blob, **_):
    return b"NOTSNAP" + blob[len(MAGIC):]


def _zeroed_checksum(blob, **_):
    return blob[:-32] + bytes(32)


def _flip(blob, i):
    return blob[:i] + bytes([blob[i] ^ 0x20]) + blob[i + 1:]


def _flipped_header_byte(blob, **_):
    return _flip(blob, _HEAD_SIZE + 3)


def _flipped_middle_byte(blob, **_):
    return _flip(blob, len(blob) // 3)


def _flipped_array_byte(blob, **_):
    return _flip(blob, len(blob) - 33)  # the last byte before the checksum: array data


def _format(version):
    def change(blob, **_):
        return blob[:len(MAGIC)] + bytes([version]) + blob[len(MAGIC) + 1:]
    return change


def _future_layout(blob, *, kind, offset, **_):
    header, arrays = full_state(offset) if kind == "full" else delta_state(offset)
    envelope = {"layout": max(LAYOUT_VERSION, *GROUP_LAYOUTS) + 1, "kind": kind, "group": "g1", "topic": T, "partition": 0,
                "offset": offset, "created_at": "2030-01-01T00:00:00+00:00"}
    return encode({"snapshot": envelope, "meta": header}, arrays)


def _valid_elsewhere(*, group="g1", prefix="olu", topic=T, partition=0, offset_by=0, other_kind=False):
    """A valid object of the same kind written under another identity, copied under the key."""
    def change(blob, *, raw, kind, offset, **_):
        if other_kind:
            kind = "delta" if kind == "full" else "full"
        ref = write(SnapshotStore(raw, prefix=prefix, group=group), kind, topic, partition, offset + offset_by)
        return get(raw, ref.key)
    return change


# name -> (change, text the reason must contain)
CORRUPTIONS = {
    "empty object": (_empty, "too short"),
    "one byte short": (_one_byte_short, "checksum mismatch"),
    "truncated to half": (_half, "checksum mismatch"),
    "bad magic": (_bad_magic, "bad magic"),
    "zeroed checksum": (_zeroed_checksum, "checksum mismatch"),
    "flipped header byte": (_flipped_header_byte, "checksum mismatch"),
    "flipped middle byte": (_flipped_middle_byte, "checksum mismatch"),
    "flipped array byte": (_flipped_array_byte, "checksum mismatch"),
    "future format version": (_format(FORMAT_VERSION + 1), "unknown snapshot format version"),
    "format version 0": (_format(0), "unknown snapshot format version 0"),
    "future layout version": (_future_layout, "unknown snapshot layout version"),
    "other partition": (_valid_elsewhere(partition=1), "foreign snapshot: partition=1 (expected 0)"),
    "other topic": (_valid_elsewhere(topic="elsewhere"), "foreign snapshot: topic='elsewhere' (expected 'events')"),
    "other group": (_valid_elsewhere(group="g2"), "foreign snapshot: group='g2' (expected 'g1')"),
    "other offset": (_valid_elsewhere(prefix="scratch", offset_by=100), "foreign snapshot: offset="),
    # Same identity in another directory, so only the kind differs.
    "other kind": (_valid_elsewhere(prefix="scratch", other_kind=True), "foreign snapshot: kind="),
}
# Kinds tests/state/test_snapshots.py already runs for full snapshots and for deltas.
COVERED_FOR_FULL = {"truncated to half", "flipped middle byte", "future format version", "future layout version",
                    "other partition", "other group", "other offset", "other kind"}
COVERED_FOR_DELTA = {"flipped middle byte", "other partition"}
MISPLACED = ("other partition", "other topic", "other group", "other offset", "other kind")


def corrupt(snaps, raw, ref, corruption: str) -> None:
    change, _ = CORRUPTIONS[corruption]
    put_over(raw, ref.key, change(get(raw, ref.key), snaps=snaps, raw=raw, kind=ref.kind, offset=ref.offset))


def _layout(snaps):
    """full@10, delta@15, full@20 (the newest), delta@23."""
    older = write(snaps, "full", T, 0, 10)
    between = write(snaps, "delta", T, 0, 15)
    newest = write(snaps, "full", T, 0, 20)
    after = write(snaps, "delta", T, 0, 23)
    return SimpleNamespace(older=older, between=between, newest=newest, after=after)


# --------------------------------------------------------------------------- full snapshots

FULL_KINDS = [c for c in CORRUPTIONS if c not in COVERED_FOR_FULL]


@pytest.mark.parametrize("corruption", FULL_KINDS)
def test_corrupt_newest_full_snapshot_falls_back_to_the_older_one(snaps, raw, corruption):
    objs = _layout(snaps)
    corrupt(snaps, raw, objs.newest, corruption)
    got = SnapshotStore(raw, prefix="olu", group="g1").restore(T, 0, on_corrupt="fallback")
    assert (got.key, got.offset) == (objs.older.key, 10)
    want_header, want_arrays = full_state(10)
    assert got.header == want_header
    assert all(got.arrays[n].tobytes() == a.tobytes() for n, a in want_arrays.items())
    # The delta the newer snapshot covered is needed again on top of the older base.
    assert [off for off, _, _ in got.deltas] == [15, 23]
    [(key, reason)] = got.skipped
    assert key == objs.newest.key and CORRUPTIONS[corruption][1] in reason


@pytest.mark.parametrize("corruption", FULL_KINDS)
def test_corrupt_newest_full_snapshot_fails_loudly_under_fail(snaps, raw, corruption):
    objs = _layout(snaps)
    corrupt(snaps, raw, objs.newest, corruption)
    with pytest.raises(SnapshotCorrupt) as info:
        SnapshotStore(raw, prefix="olu", group="g1").restore(T, 0, on_corrupt="fail")
    assert info.value.key == objs.newest.key
    assert CORRUPTIONS[corruption][1] in info.value.reason
    assert objs.newest.key in str(info.value)  # the message names the object


@pytest.mark.parametrize("on_corrupt", ["fallback", "fail"])
@pytest.mark.parametrize("corruption", ["other partition", "bad magic"])
def test_every_full_snapshot_corrupt_is_fatal_never_a_fresh_start(snaps, raw, corruption, on_corrupt):
    """Starting fresh would reset the deletion counter (invariant 4) and redraw deletion noise."""
    objs = _layout(snaps)
    for ref in (objs.older, objs.newest):
        corrupt(snaps, raw, ref, corruption)
    with pytest.raises(SnapshotCorrupt) as info:
        SnapshotStore(raw, prefix="olu", group="g1").restore(T, 0, on_corrupt=on_corrupt)
    assert info.value.key in (objs.older.key, objs.newest.key)


# --------------------------------------------------------------------------- deltas

DELTA_KINDS = [c for c in CORRUPTIONS if c not in COVERED_FOR_DELTA]


@pytest.mark.parametrize("on_corrupt", ["fallback", "fail"])
@pytest.mark.parametrize("corruption", DELTA_KINDS)
def test_corrupt_needed_delta_is_fatal_under_either_policy(snaps, raw, corruption, on_corrupt):
    objs = _layout(snaps)
    corrupt(snaps, raw, objs.after, corruption)
    with pytest.raises(SnapshotCorrupt) as info:
        SnapshotStore(raw, prefix="olu", group="g1").restore(T, 0, on_corrupt=on_corrupt)
    assert info.value.key == objs.after.key
    assert CORRUPTIONS[corruption][1] in info.value.reason and "invariant 2" in info.value.reason


@pytest.mark.parametrize("corruption", ["truncated to half", "other offset", "future layout version"])
def test_delta_covered_by_the_newest_snapshot_is_not_read(snaps, raw, corruption):
    objs = _layout(snaps)
    corrupt(snaps, raw, objs.between, corruption)
    got = SnapshotStore(raw, prefix="olu", group="g1").restore(T, 0, on_corrupt="fail")
    assert got.offset == 20 and [off for off, _, _ in got.deltas] == [23]


# --------------------------------------------------------------------------- writing again

@pytest.mark.parametrize("corruption", MISPLACED)
def test_replay_after_fallback_replaces_a_misplaced_snapshot(snaps, raw, corruption):
    """The replay after a fallback snapshots at the skipped offset again: that write must replace
    the misplaced object (no writer of this partition made it), not report a competing writer."""
    objs = _layout(snaps)
    corrupt(snaps, raw, objs.newest, corruption)
    replica = SnapshotStore(raw, prefix="olu", group="g1")
    assert replica.restore(T, 0).offset == 10
    ref = replica.write_full(T, 0, 20, *full_state(20))
    assert ref.key == objs.newest.key
    got = SnapshotStore(raw, prefix="olu", group="g1").restore(T, 0, on_corrupt="fail")
    assert got.offset == 20 and got.skipped == [] and got.header == full_state(20)[0]


def test_an_object_in_a_future_layout_in_the_way_is_still_a_conflict(snaps, raw):
    """A newer build's object is not ours to judge or overwrite."""
    objs = _layout(snaps)
    corrupt(snaps, raw, objs.newest, "future layout version")
    before = get(raw, objs.newest.key)
    with pytest.raises(SnapshotConflict):
        SnapshotStore(raw, prefix="olu", group="g1").write_full(T, 0, 20, *full_state(20))
    assert get(raw, objs.newest.key) == before


def test_a_different_snapshot_of_ours_in_the_way_is_still_a_conflict(snaps, raw):
    """Misplaced objects are replaced, but one with this very identity and other content means
    another writer (a zombie) owns the partition: never overwrite it."""
    objs = _layout(snaps)
    header, arrays = full_state(20)
    with pytest.raises(SnapshotConflict, match="another writer"):
        SnapshotStore(raw, prefix="olu", group="g1").write_full(T, 0, 20, header, {**arrays, "z": arrays["z"] + 1})
    assert SnapshotStore(raw, prefix="olu", group="g1").restore(T, 0, on_corrupt="fail").key == objs.newest.key


# --------------------------------------------------------------------------- the worker's restore path

DIM = 4


def _settings(**extra):
    env = {"OLU_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "OLU_DIM": str(DIM), "OLU_RELEASE_EVERY_EVENTS": "0",
           **extra}
    return load_settings([], env, command="run")


def _runner(snaps, settings, on_corrupt="fallback"):
    runner, restored = PartitionRunner.restore(
        T, 0, snapshots=snaps, settings=settings, model_name="m", on_corrupt=on_corrupt,
        model_factory=lambda: ALGORITHMS[settings.algorithm](**settings.model_kwargs()))
    return runner, restored


def _feed(runner, msgs, batch: int = 37) -> None:
    for i in range(0, len(msgs), batch):
        out = runner.process(msgs[i:i + batch])
        assert out.resume_at is None


@pytest.mark.parametrize("corruption", ["other partition", "zeroed checksum"])
def test_partition_runner_falls_back_and_replays_to_the_identical_state(raw, corruption):
    """What the worker does on assignment. The newest full snapshot is corrupt: the runner starts
    from the older one, adopts the stored post-noise state of every deletion after it, and
    reaches exactly the state the crashed runner had (no noise is drawn a second time)."""
    settings = _settings()
    snaps = SnapshotStore(raw, prefix="olu", group="g1")
    msgs = messages(T, 0, event_stream(600, seed=5, delete_rate=0.1))
    first, _ = _runner(snaps, settings)
    _feed(first, msgs[:250])
    older = first.snapshot()
    _feed(first, msgs[250:500])
    newest = first.snapshot()
    _feed(first, msgs[500:])  # then the process dies before its next snapshot
    assert first.model.accountant.lifetime_deletions > 5
    corrupt(snaps, raw, newest, corruption)

    with pytest.raises(SnapshotCorrupt) as info:
        _runner(SnapshotStore(raw, prefix="olu", group="g1"), settings, on_corrupt="fail")
    assert info.value.key == newest.key

    runner, restored = _runner(SnapshotStore(raw, prefix="olu", group="g1"), settings)
    assert restored.key == older.key and runner.next_offset == 250
    assert [key for key, _ in restored.skipped] == [newest.key]
    deletions_before = runner.model.accountant.lifetime_deletions
    _feed(runner, msgs, batch=91)  # the loop re-fetches from the snapshot's offset on
    assert runner.model.accountant.lifetime_deletions > deletions_before
    assert runner.replay_deltas == {}, "every stored deletion was adopted"
    mine, theirs = runner.model.export_state(), first.model.export_state()
    assert mine["meta"] == theirs["meta"]
    for name, arr in theirs["arrays"].items():
        assert mine["arrays"][name].tobytes() == arr.tobytes(), name
    # The replay snapshots at the skipped offset again and replaces the bad object.
    assert runner.next_offset == 600
    runner.snapshot()
    assert SnapshotStore(raw, prefix="olu", group="g1").restore(T, 0, on_corrupt="fail").offset == 600


# --------------------------------------------------------------------------- the worker, real broker

@pytest.fixture(scope="module")
def stopped_run(kafka_bootstrap, tmp_path_factory):
    """A worker ran over a two-partition input and stopped cleanly; its state is kept to copy."""
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"corrupt-{tag}.events", f"corrupt-{tag}.params", f"corrupt-{tag}.dlq", 2)
    names = {topics.input: 2, topics.params: 1, topics.dlq: 1}
    create_topics(kafka_bootstrap, names)
    root = tmp_path_factory.mktemp("corrupt")
    group = f"corrupt-{tag}"
    env = worker_env(kafka_bootstrap, topics, group, f"file://{root}/state", OLU_SNAPSHOT_EVERY_EVENTS="200")
    worker = WorkerProcess(env, root / "first.log")
    try:
        produce(kafka_bootstrap, topics.input, event_stream(1400, seed=61, delete_rate=0.1))
        worker.start()
        ends = end_offsets(kafka_bootstrap, topics.input)
        wait_for(covered(kafka_bootstrap, topics, ends), 120, "the first run to reach the end", interval=0.3)
        assert worker.terminate() == 0, worker.log_text()[-3000:]
        yield SimpleNamespace(topics=topics, group=group, env=env, root=root, ends=ends)
    finally:
        worker.cleanup()
        delete_topics(kafka_bootstrap, names)


def _copy_state(run, name: str):
    """A private copy of the run's state, with its store and the env of a worker using it."""
    state = run.root / name
    shutil.copytree(run.root / "state", state)
    env = {**run.env, "OLU_STATE_URL": f"file://{state}"}
    raw = open_store(f"file://{state}")
    return env, raw, SnapshotStore(raw, prefix="olu", group=run.group)


def _fulls(snaps, topic, partition):
    return [r for r in snaps.list(topic, partition) if r.kind == "full"]


@pytest.mark.kafka
def test_worker_falls_back_past_a_misplaced_snapshot_and_replays_identically(kafka_bootstrap, stopped_run, tmp_path):
    run = stopped_run
    env, raw, snaps = _copy_state(run, "fallback")
    newest, older = _fulls(snaps, run.topics.input, 0)[-1], _fulls(snaps, run.topics.input, 0)[-2]
    assert newest.offset == run.ends[0]
    other = _fulls(snaps, run.topics.input, 1)[-1]  # partition 1's snapshot, copied over partition 0's
    put_over(raw, newest.key, get(raw, other.key))
    before = releases(kafka_bootstrap, run.topics.params)
    worker = WorkerProcess({**env, "OLU_ON_CORRUPT_SNAPSHOT": "fallback"}, tmp_path / "fallback.log")
    try:
        worker.start()
        assigned = worker.wait_assigned({0, 1})
        assert assigned[0]["snapshot"] == older.offset and assigned[0]["offset"] == older.offset
        [skipped] = assigned[0]["skipped_snapshots"]
        assert skipped["key"] == newest.key
        assert "foreign snapshot" in skipped["reason"] and "partition=1" in skipped["reason"]
        [warning] = worker.log_lines("corrupt snapshot skipped")
        assert warning["key"] == newest.key and warning["level"] == "WARNING"
        assert assigned[1]["snapshot"] == run.ends[1] and assigned[1]["skipped_snapshots"] == []
        # The replay from the older snapshot republishes partition 0's releases up to the end.
        def replayed_to_the_end():
            new = releases(kafka_bootstrap, run.topics.params)[len(before):]
            return any(r.json()["partition"] == 0 and r.json()["version"] == run.ends[0] for r in new)
        wait_for(replayed_to_the_end, 60, "the replay's release at the end of partition 0", interval=0.3)
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        worker.cleanup()
    records = releases(kafka_bootstrap, run.topics.params)
    replayed = [r for r in records[len(before):] if r.json()["partition"] == 0]
    assert replayed, "the fallback replay published nothing"
    # Releases of the replay equal the first run's byte for byte (deletions adopted, not redrawn).
    first = {(r.json()["partition"], r.json()["version"]): r.value for r in before}
    assert any((0, r.json()["version"]) in first for r in replayed)
    assert_identical_duplicates(records)
    # The final snapshot at the end replaced the misplaced object; everything matches the oracle.
    got = snaps.restore(run.topics.input, 0, on_corrupt="fail")
    assert got.offset == run.ends[0] and got.skipped == []
    verify_against_oracle(kafka_bootstrap, run.topics, snaps, env, records)
    assert all(o.envelope["partition"] == 0 for o in stored_objects(snaps, run.topics.input, 0))


@pytest.mark.kafka
def test_worker_fails_fast_naming_the_corrupt_snapshot_under_fail(kafka_bootstrap, stopped_run, tmp_path):
    run = stopped_run
    env, raw, snaps = _copy_state(run, "fail")
    newest = _fulls(snaps, run.topics.input, 1)[-1]
    put_over(raw, newest.key, _flipped_middle_byte(get(raw, newest.key)))
    before = len(releases(kafka_bootstrap, run.topics.params))
    worker = WorkerProcess({**env, "OLU_ON_CORRUPT_SNAPSHOT": "fail"}, tmp_path / "fail.log")
    try:
        worker.start()
        code = worker.proc.wait(90)  # exits on its own: no hang, no silent fresh start
    finally:
        worker.cleanup()
    assert code != 0
    [failed] = worker.log_lines("worker failed", all_runs=True)
    assert failed["level"] == "CRITICAL" and failed["error_type"] == "SnapshotCorrupt"
    assert newest.key in failed["error"] and "checksum mismatch" in failed["error"], failed
    assert 1 not in {e["partition"] for e in worker.log_lines("partition assigned", all_runs=True)}
    # Nothing of partition 1 was published (partition 0, restored before the failure, may repeat
    # its last release: an identical duplicate), and the damaged object is left for inspection.
    records = releases(kafka_bootstrap, run.topics.params)
    assert all(r.json()["partition"] != 1 for r in records[before:])
    assert_identical_duplicates(records)
    assert get(raw, newest.key) != get(open_store(f"file://{run.root}/state"), newest.key)
