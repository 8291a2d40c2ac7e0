"""PartitionRunner.process: the batch fast path and the record-by-record path give the same model."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.config import load_settings
from worker.config.model import build_model
from worker.olu import PassiveOLU
from worker.olu.batches import apply as apply_mod
from worker.olu.rotation import Rotation
from worker.state.store import SnapshotStore, open_store
from worker.stream import partition as partition_mod
from worker.stream.input import batch as batch_mod
from worker.stream.input import scan
from worker.stream.input.decode import InsertRun
from worker.stream.partition import PartitionRunner

from ..olu.test_contract import assert_same_state


def _stream(n=300, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    msgs = []
    for i in range(n):
        if i % 50 == 49:  # a delete of an earlier record, and now and then a poison record
            rid = f"r-{i - 20}"
            value = orjson.dumps({"op": "delete", "id": rid}) if i % 100 != 99 else b"{not json"
        else:
            rid = f"r-{i}"
            x = rng.normal(size=dim)
            x /= 2 * np.linalg.norm(x)
            fields = {"op": "insert", "id": rid, "x": x.tolist(), "y": int(rng.integers(0, 2))}
            if i % 7 == 0:
                fields["ts"] = 1_700_000_000_000 + i  # an optional field: the general decoder's case
            value = orjson.dumps(fields)
        msgs.append(Message(topic="t", partition=0, offset=i, key=rid.encode(), value=value,
                            timestamp=(1, 1_700_000_000_000 + (i * 31) % 1000)))
    return msgs


def _run(msgs, dim=3, **env):
    settings = load_settings([], env={"OLU_DIM": str(dim), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                                      "OLU_RELEASE_EVERY_EVENTS": "64", **env})
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    model = PassiveOLU(dim=dim, noise_rng=np.random.default_rng(7))
    runner = PartitionRunner("t", 0, model, snapshots=snapshots, settings=settings, model_name="m")
    outs = [runner.process(msgs[j:j + 37]) for j in range(0, len(msgs), 37)]
    return runner, outs


def _assert_same(slow, slow_outs, fast, fast_outs, msgs):
    assert slow.model.t == fast.model.t > 0
    assert np.array_equal(slow.model.z, fast.model.z)
    assert slow.next_offset == fast.next_offset == len(msgs)
    assert slow.event_time_ms == fast.event_time_ms
    for name in ("inserts", "deletes", "skipped"):
        assert sum(getattr(o, name) for o in slow_outs) == sum(getattr(o, name) for o in fast_outs)
    assert [d.reason for o in slow_outs for d in o.dead_letters] == [d.reason for o in fast_outs
                                                                     for d in o.dead_letters] == ["not_json"] * 3
    assert ([(r.trigger, r.version, r.value) for o in slow_outs for r in o.releases]
            == [(r.trigger, r.version, r.value) for o in fast_outs for r in o.releases])


def test_record_by_record_fallback_matches_the_batch_path(monkeypatch):
    msgs = _stream()
    with scan.python_decoder():
        fast, fast_outs = _run(msgs)
        # Force every insert through the fallback: the fast path finds no run at all.
        monkeypatch.setattr(batch_mod, "decode_inserts",  # the input stage's Python decoder
                            lambda messages, start, **_: InsertRun(start, [], np.empty((0, 3)), np.empty(0), 0))
        slow, slow_outs = _run(msgs)
    _assert_same(slow, slow_outs, fast, fast_outs, msgs)


def _unusual(msgs):
    """The stream with some inserts only the Python decoder takes (ids with a non-ASCII character)."""
    out = []
    for m in msgs:
        is_insert = m.value().startswith(b'{"op":"insert"')
        if is_insert and m.offset() % 5 == 0:
            obj = orjson.loads(m.value())
            obj["id"] = obj["id"] + "-é"
            m = Message(topic="t", partition=0, offset=m.offset(), key=obj["id"].encode(), value=orjson.dumps(obj),
                        timestamp=m.timestamp())
        out.append(m)
    return out


def test_compiled_decoder_matches_the_python_decoder():
    msgs = _unusual(_stream())
    fast, fast_outs = _run(msgs)
    with scan.python_decoder():
        slow, slow_outs = _run(msgs)
    _assert_same(slow, slow_outs, fast, fast_outs, msgs)
    assert scan.scan_batch(msgs, dim=3, max_bytes=1 << 20).accepted.mean() > 0.5  # the fast path ran


def test_every_offset_is_accounted_for():
    msgs = _stream()
    runner, outs = _run(msgs)
    accounted = sum(o.inserts + o.deletes + o.skipped + len(o.dead_letters) for o in outs)
    assert accounted == len(msgs)
    assert runner.model.counters["applied"] == sum(o.inserts for o in outs)


class _ErrorsSeen:
    def __init__(self):
        self.errors = []

    def _on_consume_error(self, err):
        self.errors.append(err.code())


def test_fetched_messages_are_grouped_by_partition_in_order():
    from confluent_kafka import KafkaError

    from worker.stream.app import Worker

    one = [Message(topic="t", partition=0, offset=i, key=b"k", value=b"v") for i in range(4)]
    assert Worker._by_partition(_ErrorsSeen(), one) == {("t", 0): one}
    assert Worker._by_partition(_ErrorsSeen(), []) == {}
    mixed = [Message(topic="t", partition=i % 2, offset=i, key=b"k", value=b"v") for i in range(4)]
    mixed.insert(2, Message(topic="t", partition=0, error=KafkaError(KafkaError._PARTITION_EOF)))
    mixed.append(Message(topic="u", partition=0, offset=9, key=b"k", value=b"v"))
    seen = _ErrorsSeen()
    groups = Worker._by_partition(seen, mixed)
    assert {k: [m.offset() for m in v] for k, v in groups.items()} == {("t", 0): [0, 2], ("t", 1): [1, 3], ("u", 0): [9]}
    assert seen.errors == [KafkaError._PARTITION_EOF]
    # an error event alone in a one-partition batch is not taken for a message
    seen = _ErrorsSeen()
    groups = Worker._by_partition(seen, one[:2] + [Message(topic="t", partition=0, error=KafkaError(KafkaError._PARTITION_EOF))])
    assert {k: len(v) for k, v in groups.items()} == {("t", 0): 2} and len(seen.errors) == 1


class _RecordingSnapshots(SnapshotStore):
    """memory:// snapshots that remember the upload spread each full snapshot was given."""

    def __init__(self):
        super().__init__(open_store("memory://"), prefix="p", group="g", keep=3)
        self.spreads: list[float] = []

    def write_full(self, *args, spread_seconds: float = 0.0, **kwargs):
        self.spreads.append(spread_seconds)
        return super().write_full(*args, spread_seconds=spread_seconds, **kwargs)


def test_a_background_snapshot_spreads_its_uploads_over_a_share_of_the_last_interval(monkeypatch):
    clock = {"now": 1000.0}
    monkeypatch.setattr(partition_mod.time, "monotonic", lambda: clock["now"])
    settings = load_settings([], env={"OLU_DIM": "3", "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1"})
    snapshots = _RecordingSnapshots()
    runner = PartitionRunner("t", 0, PassiveOLU(dim=3, noise_rng=np.random.default_rng(7)),
                             snapshots=snapshots, settings=settings, model_name="m")
    msgs = _stream(200)
    runner.process(msgs[:100])
    clock["now"] += 8.0  # 8 s after the runner started
    runner.write_snapshot(runner.begin_snapshot(), 1e6, 0.5)
    runner.process(msgs[100:])
    clock["now"] += 3.0
    pending = runner.begin_snapshot()
    pending.purge_due_at = clock["now"]  # a purge's snapshot: invariant 6's deadline, never spread
    runner.write_snapshot(pending, 1e6, 0.5)
    assert snapshots.spreads == [4.0, 0.0]


# ------------------------------------------------------------------ features over the whole double range
_MAX = float(np.finfo(np.float64).max)
_coordinate = (st.floats(allow_nan=False, allow_infinity=False)
               | st.floats(min_value=1e150, max_value=_MAX) | st.floats(min_value=-1e-150, max_value=1e-150)
               | st.sampled_from([_MAX, -_MAX, 1e308, 1e155, 5e-324, 0.0, 0.1]))


def _norm_over(x, bound: float) -> float:
    """||x|| / bound without overflow (math.hypot of x scaled by its largest |x_i|)."""
    top = max(abs(v) for v in x)
    return 0.0 if top == 0 else math.hypot(*(v / top for v in x)) * (top / bound)


def _runner(policy: str, dim: int) -> PartitionRunner:
    settings = load_settings([], env={"OLU_DIM": str(dim), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                                      "OLU_FEATURE_POLICY": policy, "OLU_RELEASE_EVERY_EVENTS": "4"})
    model = PassiveOLU(dim=dim, feature_policy=policy, noise_rng=np.random.default_rng(7))
    snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
    return PartitionRunner("t", 0, model, snapshots=snapshots, settings=settings, model_name="m")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.lists(_coordinate, min_size=3, max_size=3), min_size=1, max_size=12),
       policy=st.sampled_from(["reject", "clip"]))
def test_features_anywhere_in_the_double_range_get_the_same_outcome_on_both_paths(rows, policy):
    msgs = [Message(topic="t", partition=0, offset=i, key=f"r-{i}".encode(),
                    value=orjson.dumps({"op": "insert", "id": f"r-{i}", "x": x, "y": 1}), timestamp=(1, 1000 + i))
            for i, x in enumerate(rows)]
    fast = _runner(policy, 3)
    fast_out = fast.process(msgs)
    with scan.python_decoder():
        slow = _runner(policy, 3)
        slow_out = slow.process(msgs)
    dead = [(d.message.offset(), d.reason) for d in fast_out.dead_letters]
    assert dead == [(d.message.offset(), d.reason) for d in slow_out.dead_letters]
    assert (fast.model.t, fast.model.z.tobytes()) == (slow.model.t, slow.model.z.tobytes())
    assert [r.value for r in fast_out.releases] == [r.value for r in slow_out.releases]
    # and the outcome is the one the true norm decides: over the bound (plus the rounding slack)
    # is norm_exceeded under reject, clipped and learned under clip; never non_finite
    over = [i for i, x in enumerate(rows) if _norm_over(x, 1.0 + 1e-6) > 1 + 1e-12]
    unsure = [i for i, x in enumerate(rows) if abs(_norm_over(x, 1.0 + 1e-6) - 1) <= 1e-12]
    if policy == "clip":
        assert dead == [] and fast.model.t == len(rows)
    elif not unsure:
        assert dead == [(i, "norm_exceeded") for i in over]
        assert fast.model.t == len(rows) - len(over)
    assert np.all(np.isfinite(fast.model.z))


def _burst_stream(dim=3, seed=1):
    """Inserts, then runs of deletes back to back: duplicates, an unknown id, a two-id request and
    a poison record inside a run, re-inserts of deleted ids, then a second run."""
    rng = np.random.default_rng(seed)
    values = []

    def insert(i):
        x = rng.normal(size=dim)
        x /= 2 * np.linalg.norm(x)
        values.append((f"r-{i}", orjson.dumps({"op": "insert", "id": f"r-{i}", "x": x.tolist(), "y": int(i % 2)})))

    def delete(*ids):
        body = {"op": "delete", "id": ids[0]} if len(ids) == 1 else {"op": "delete", "ids": list(ids)}
        values.append((ids[0], orjson.dumps(body)))

    for i in range(120):
        insert(i)
    for i in range(10, 40):
        delete(f"r-{i}")
        if i == 20:
            delete("r-15"), delete("r-nobody"), values.append(("x", b"{not json")), delete("r-50", "r-51")
    for i in (12, 13, 200):
        insert(i)  # 12 and 13 were deleted: skipped
    for i in range(60, 110, 2):
        delete(f"r-{i}")
    return [Message(topic="t", partition=0, offset=j, key=k.encode(), value=v,
                    timestamp=(1, 1_700_000_000_000 + j)) for j, (k, v) in enumerate(values)]


@pytest.mark.parametrize("rotating", [False, True], ids=["passive", "rotation"])
def test_a_burst_of_deletes_looked_up_at_once_gives_what_one_by_one_gives(rotating, monkeypatch):
    """The compiled decoder looks a run of deletes up in one call (prefetch); the Python decoder
    takes them one by one. Same model, ledger, tombstones, index and outcomes, bit for bit."""
    from worker.olu.core import entropy

    # the same noise in both runs, for every model a rotation makes too
    monkeypatch.setattr(entropy.OsEntropy, "gaussian", lambda self, dim: np.linspace(-1.0, 1.0, dim))
    monkeypatch.setattr(entropy.OsEntropy, "gaussian_rows",
                        lambda self, n, dim: np.tile(np.linspace(-1.0, 1.0, dim), (n, 1)))
    env = {"OLU_DIM": "3", "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1", "OLU_RELEASE_EVERY_EVENTS": "64"}
    if rotating:
        env.update(OLU_ROTATION="on", OLU_MODEL_LIFETIME_EVENTS="100")
    settings = load_settings([], env=env)
    msgs = _burst_stream()

    def run(prefetching: bool):
        model = build_model(settings)
        calls = []
        if prefetching:
            real = model.prefetch_deletes
            model.prefetch_deletes = lambda keys: (calls.append(len(keys)), real(keys))
        snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
        runner = PartitionRunner("t", 0, model, snapshots=snapshots, settings=settings, model_name="m")
        if prefetching:
            outs = [runner.process(msgs[j:j + 50]) for j in range(0, len(msgs), 50)]
        else:
            with scan.python_decoder():
                outs = [runner.process(msgs[j:j + 50]) for j in range(0, len(msgs), 50)]
        return runner, outs, calls

    fast, fast_outs, calls = run(True)
    slow, slow_outs, _ = run(False)
    assert calls and max(calls) > 10  # the runs of deletes were looked up at once
    for a, b in zip(getattr(fast.model, "models", [fast.model]), getattr(slow.model, "models", [slow.model])):
        assert np.array_equal(a.z, b.z) and a.t == b.t
        assert list(a.ledger) == list(b.ledger) and a.tombstones.keys.tolist() == b.tombstones.keys.tolist()
        fa, sa = a.index.to_arrays(), b.index.to_arrays()
        assert all(np.array_equal(fa[k], sa[k]) for k in fa)
    outcomes = [[(d.outcome, d.records, d.not_applied, d.duplicates) for o in outs for d in o.deletions]
                for outs in (fast_outs, slow_outs)]
    assert outcomes[0] == outcomes[1]
    assert ("duplicate", 0, (), ("r-15",)) in outcomes[0] and ("not_applied", 0, ("r-nobody",), ()) in outcomes[0]
    assert [d.reason for o in fast_outs for d in o.dead_letters] == ["not_json"]
    assert ([(r.trigger, r.version, r.value) for o in fast_outs for r in o.releases]
            == [(r.trigger, r.version, r.value) for o in slow_outs for r in o.releases])


def test_a_batch_with_deletes_scores_its_inserts_once_before_learning():
    """Test-then-train on a poll batch split by deletes: one prequential loss over its inserts (the
    scan's accepted rows, scored in place: the deletes' rows are never counted), under the model
    as it was before the batch."""
    from worker.olu.batches.quality import ALL_ROWS, batch_mean_loss

    msgs = _stream(n=200)
    runner, _ = _run(msgs[:100])
    batch = msgs[100:200]  # holds deletes and a poison record
    z_before = runner.model.z.copy()
    inserts = [orjson.loads(m.value()) for m in batch if m.value().startswith(b"{") and b'"insert"' in m.value()]
    assert 0 < len(inserts) < len(batch)
    X = np.array([r["x"] for r in inserts])
    y = np.array([float(r["y"]) for r in inserts])
    previous = runner.prequential_loss
    runner.process(batch)
    expected = batch_mean_loss(X, y, z_before, False, ALL_ROWS)
    assert runner.prequential_loss == 0.99 * previous + 0.01 * expected


def test_the_quality_figure_travels_with_releases_and_can_be_turned_off():
    """olu_prequential_loss is outside the certificate (docs/guarantee.md 2.4): each release carries
    the figure as of its own state (the metrics export it when the release is published, after its
    delta is durable); OLU_QUALITY_METRIC=false computes none at all."""
    msgs = _stream(n=400)
    on, on_outs = _run(msgs)
    off, off_outs = _run(msgs, OLU_QUALITY_METRIC="false")
    released_on = [r for o in on_outs for r in o.releases]
    released_off = [r for o in off_outs for r in o.releases]
    assert released_on and [r.value for r in released_on] == [r.value for r in released_off]
    assert all(r.prequential_loss is not None and math.isfinite(r.prequential_loss) for r in released_on)
    assert on.prequential_loss is not None
    assert off.prequential_loss is None and all(r.prequential_loss is None for r in released_off)


def test_the_guarantee_page_says_what_the_quality_metric_is():
    """The docs are held to the code: the page names the metric as outside the certificate and the
    setting that turns it off, and the setting exists."""
    from pathlib import Path

    from worker.config import OPTION_BY_NAME

    page = (Path(__file__).resolve().parents[2] / "docs" / "guarantee.md").read_text()
    section = page[page.index("### 2.4"):page.index("### 2.5")]
    assert "olu_prequential_loss" in section and "not covered" in section
    assert OPTION_BY_NAME["quality_metric"].env in section
    assert "treat it as an output of the same kind as a release" not in page


def _deleting_stream(n=3_000, dim=3, seed=2):
    """Inserts with ~3% single-id deletes: of earlier records, of records of the same poll batch,
    of ids never seen, repeated ones, a delete before its record's insert, and a poison record."""
    rng = np.random.default_rng(seed)
    values, inserted = [], 0
    for j in range(n):
        roll = rng.random()
        if roll < 0.03 and inserted > 10:
            rid = (f"r-{int(rng.integers(inserted))}" if roll < 0.02 else f"r-{inserted - 3}" if roll < 0.025
                   else f"r-{inserted + 5}" if roll < 0.027 else f"nobody-{j}")
            values.append((rid, orjson.dumps({"op": "delete", "id": rid})))
        elif roll > 0.999:
            values.append(("x", b"{not json"))
        else:
            x = rng.normal(size=dim)
            x /= 2 * np.linalg.norm(x)
            rid = f"r-{inserted}"
            values.append((rid, orjson.dumps({"op": "insert", "id": rid, "x": x.tolist(), "y": int(j % 2)})))
            inserted += 1
    return [Message(topic="t", partition=0, offset=j, key=k.encode(), value=v,
                    timestamp=(1, 1_700_000_000_000 + j)) for j, (k, v) in enumerate(values)]


ONE_PASS_CASES = {"passive": {}, "rotation": {"variant": "overlap"},
                  "per-request": {"privacy_unit": "per-request"},
                  "per-request-disjoint": {"privacy_unit": "per-request", "variant": "disjoint"}}


@pytest.mark.parametrize("case", sorted(ONE_PASS_CASES))
def test_a_batch_of_inserts_and_deletes_in_one_pass_gives_what_one_by_one_gives(case, monkeypatch):
    """The runner hands a poll batch's single-id deletes to the engine's one pass (core/mixed.py)
    up to its last delete; a rotation runs it on each of its models, except in a batch that
    reaches a promotion. Against the message-by-message path: the same model bit for bit, the
    same deletion outcomes, the same delta of every deletion and the same releases."""
    msgs = _deleting_stream()
    settings = load_settings([], env={"OLU_DIM": "3", "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
                                      "OLU_RELEASE_EVERY_EVENTS": "500"})
    params = dict(ONE_PASS_CASES[case])
    rotating = "variant" in params
    if not rotating:
        params.pop("variant", None)
    if rotating:  # two models draw in another order in the pass: the same noise whatever the order
        from worker.olu.core import entropy

        monkeypatch.setattr(entropy.OsEntropy, "gaussian", lambda self, dim: np.linspace(-1.0, 1.0, dim))
        monkeypatch.setattr(entropy.OsEntropy, "gaussian_rows",
                            lambda self, n, dim: np.tile(np.linspace(-1.0, 1.0, dim), (n, 1)))

    def new_model():
        if rotating:
            return Rotation(PassiveOLU, lifetime_events=1000, dim=3, **params)
        return PassiveOLU(dim=3, noise_rng=np.random.default_rng(11), **params)

    def run(one_pass: bool):
        taken = []
        real = apply_mod.learn_and_unlearn
        monkeypatch.setattr(apply_mod, "learn_and_unlearn",
                            lambda *a: taken.append(real(*a) if one_pass else None) or taken[-1])
        snapshots = SnapshotStore(open_store("memory://"), prefix="p", group="g", keep=3)
        deltas = []
        snapshots.write_deltas = lambda topic, partition, entries: deltas.extend(entries)
        runner = PartitionRunner("t", 0, new_model(), snapshots=snapshots, settings=settings, model_name="m")
        outs = [runner.process(msgs[j:j + 200]) for j in range(0, len(msgs), 200)]
        return runner, outs, deltas, taken

    fast, fast_outs, fast_deltas, taken = run(True)
    slow, slow_outs, slow_deltas, _ = run(False)
    assert sum(t is not None for t in taken) >= (6 if rotating else 10)  # most batches took the one pass
    if rotating:
        assert None in taken and fast.model.rotations >= 2  # and a promotion sent some one by one
    assert_same_state(fast.model, slow.model)
    assert fast.model.deletions_applied == slow.model.deletions_applied > 40
    outcomes = [[(d.outcome, d.index, d.records, d.not_applied, d.duplicates) for o in outs for d in o.deletions]
                for outs in (fast_outs, slow_outs)]
    assert outcomes[0] == outcomes[1]
    assert {"noised", "not_applied", "duplicate"} <= {o[0] for o in outcomes[0]}
    for name in ("inserts", "deletes", "skipped"):
        assert sum(getattr(o, name) for o in fast_outs) == sum(getattr(o, name) for o in slow_outs)
    assert [d.reason for o in fast_outs for d in o.dead_letters] == [d.reason for o in slow_outs
                                                                     for d in o.dead_letters]
    assert len(fast_deltas) == len(slow_deltas) == fast.model.deletions_applied
    for (fo, fh, fa), (so, sh, sa) in zip(fast_deltas, slow_deltas):
        assert fo == so and fh == sh and fa.keys() == sa.keys()
        assert all(np.asarray(fa[k]).tobytes() == np.asarray(sa[k]).tobytes() for k in fa)
    assert ([(r.trigger, r.version, r.value) for o in fast_outs for r in o.releases]
            == [(r.trigger, r.version, r.value) for o in slow_outs for r in o.releases])
    assert fast.next_offset == slow.next_offset == len(msgs) and fast.event_time_ms == slow.event_time_ms
