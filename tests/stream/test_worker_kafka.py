"""``olu-worker run`` end to end against the real broker: releases, dead letters, probes, invariant 1.

One worker process (plus an independent twin in another group, for the noise-independence check)
runs over a two-partition input with inserts, deletes (JSON and tombstones), duplicate deletes,
deletes of ids never seen, deletes before their insert, and poison records of every kind. The run
is module-scoped; the tests below inspect what it left on the topics, in the store and in its log.
"""

from __future__ import annotations

import math
import re
import uuid
from collections import Counter
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.infra.schema_samples import decode_headers, validate
from tests.stream.kafka_harness import (
    DIM,
    SnapshotStore,
    Topics,
    WorkerProcess,
    assert_identical_duplicates,
    covered,
    create_topics,
    delete_topics,
    end_offsets,
    event_stream,
    input_by_partition,
    newest_full,
    oracle_replay,
    post_states_from_deltas,
    produce,
    read_topic,
    releases,
    releases_by_partition,
    settings_of,
    stored_objects,
    verify_against_oracle,
    wait_for,
    worker_env,
)
from worker import __version__
from worker.olu import ALGORITHMS
from worker.olu.privacy.accountant import noise_multiplier
from worker.state.store import open_store

pytestmark = pytest.mark.kafka

MAX_RECORD_BYTES = 2048
OK_X = [0.1, -0.2, 0.3, 0.05]


def _j(obj) -> bytes:
    return orjson.dumps(obj)


# (key, value, label) -> expected dead-letter reason. Labels are unique so each can be found again.
POISON = [
    (b"p-notjson", b"{not json", "not_json"),
    (b"p-nan", b'{"op":"insert","id":"p-nan","x":[NaN,0,0,0],"y":1}', "not_json"),
    (b"p-utf8", b"\xff\xfe\x00\x01", "not_utf8"),
    (b"p-notobj", b"[1, 2, 3]", "not_object"),
    (b"p-op", _j({"op": "upsert", "id": "p-op"}), "unknown_op"),
    (b"p-noid", _j({"op": "insert", "x": OK_X, "y": 1}), "missing_id"),
    (None, None, "missing_id"),  # a tombstone without a key
    (b"p-badid", _j({"op": "delete", "id": 42}), "bad_id"),
    (None, _j({"op": "insert", "id": "someone-else", "x": OK_X, "y": 1}), "key_mismatch"),  # unkeyed
    (b"p-dim", _j({"op": "insert", "id": "p-dim", "x": [0.1, 0.2, 0.3], "y": 1}), "wrong_dimension"),
    (b"p-feat", _j({"op": "insert", "id": "p-feat", "x": "abc", "y": 1}), "bad_features"),
    (b"p-label", _j({"op": "insert", "id": "p-label", "x": OK_X, "y": "1"}), "bad_label"),
    (b"p-label3", _j({"op": "insert", "id": "p-label3", "x": OK_X, "y": 3}), "bad_label"),  # engine check
    (b"p-norm", _j({"op": "insert", "id": "p-norm", "x": [1, 1, 1, 1], "y": 1}), "norm_exceeded"),  # engine
    # finite, but the plain sum of squares overflows: still over the bound, not non_finite
    (b"p-huge", _j({"op": "insert", "id": "p-huge", "x": [1e308, 0.1, 0.1, 0.1], "y": 1}), "norm_exceeded"),
    (b"p-big", _j({"op": "insert", "id": "p-big", "x": OK_X, "y": 1, "ts": 1}) + b" " * 3000, "oversized"),
    (b"p-extra", _j({"op": "insert", "id": "p-extra", "x": OK_X, "y": 1, "w": 2}), "schema_violation"),
]
CARRIED = [("traceparent", b"00-0af7651916cd43dd-01"), ("olu.error.reason", b"forged")]


def _stream():
    """Valid events with the poison records spread through them (the last one carries headers)."""
    events = event_stream(1400, seed=11, delete_rate=0.08)
    out = []
    step = len(events) // (len(POISON) + 1)
    poison = list(POISON)
    for j, ev in enumerate(events):
        out.append(ev)
        if j and j % step == 0 and poison:
            key, value, reason = poison.pop(0)
            out.append((key, value, f"poison:{reason}", CARRIED if not poison else None))
    assert not poison
    return out


def _ready(worker):
    status, body = worker.get("/readyz")
    return (status, body) if status == 200 else None


@pytest.fixture(scope="module")
def e2e(kafka_bootstrap, tmp_path_factory):
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"e2e-{tag}.events", f"e2e-{tag}.params", f"e2e-{tag}.dlq", 2)
    twin_topics = Topics(topics.input, f"e2e-{tag}.twin.params", f"e2e-{tag}.twin.dlq", 2)
    names = {topics.input: 2, topics.params: 1, topics.dlq: 1, twin_topics.params: 1, twin_topics.dlq: 1}
    create_topics(kafka_bootstrap, names)
    root = tmp_path_factory.mktemp("e2e")
    env = worker_env(kafka_bootstrap, topics, f"e2e-{tag}", f"file://{root}/state",
                     OLU_MAX_RECORD_BYTES=MAX_RECORD_BYTES)
    twin_env = worker_env(kafka_bootstrap, twin_topics, f"e2e-twin-{tag}", f"file://{root}/twin-state",
                          OLU_MAX_RECORD_BYTES=MAX_RECORD_BYTES)
    worker = WorkerProcess(env, root / "worker.log")
    twin = WorkerProcess(twin_env, root / "twin.log")
    try:
        produced = produce(kafka_bootstrap, topics.input, _stream())
        worker.start()
        twin.start()
        ready = wait_for(lambda: _ready(worker), 60, "/readyz 200 after assignment")
        assert set(worker.wait_assigned({0, 1})) == {0, 1}
        ends = end_offsets(kafka_bootstrap, topics.input)
        wait_for(covered(kafka_bootstrap, topics, ends), 90, "releases up to the end of the input", interval=0.3)
        wait_for(covered(kafka_bootstrap, twin_topics, ends), 90, "the twin's releases", interval=0.3)
        run = SimpleNamespace(
            topics=topics, twin_topics=twin_topics, env=env, twin_env=twin_env, root=root, produced=produced,
            ends=ends, worker=worker, twin=twin, ready=ready, health=worker.get("/healthz"),
            unknown=worker.get("/nope"), metrics=worker.metrics(),
        )
        run.exit_code = worker.terminate()
        run.twin_exit_code = twin.terminate()
        run.releases = releases(kafka_bootstrap, topics.params)
        run.twin_releases = releases(kafka_bootstrap, twin_topics.params)
        run.dead_letters = read_topic(kafka_bootstrap, topics.dlq)
        run.snapshots = SnapshotStore(open_store(f"file://{root}/state"), prefix="olu", group=f"e2e-{tag}")
        run.twin_snapshots = SnapshotStore(open_store(f"file://{root}/twin-state"), prefix="olu",
                                           group=f"e2e-twin-{tag}")
        yield run
    finally:
        worker.cleanup()
        twin.cleanup()
        delete_topics(kafka_bootstrap, names)


def test_clean_shutdown_and_probes(e2e):
    assert e2e.exit_code == 0, e2e.worker.log_text()[-3000:]
    assert e2e.twin_exit_code == 0
    assert e2e.ready == (200, "ready\n")
    status, body = e2e.health
    assert status == 200 and body.startswith("ok")
    assert e2e.unknown[0] == 404
    stopped = e2e.worker.log_lines("worker stopped", all_runs=True)
    assert len(stopped) == 1


def test_releases_validate_increase_and_reach_the_end(kafka_bootstrap, e2e):
    by_part = releases_by_partition(e2e.releases)
    assert set(by_part) == {0, 1}
    for rec in e2e.releases:
        value = rec.json()
        validate("release", value)
        assert rec.key == f"{e2e.topics.input}/{value['partition']}".encode()
        assert rec.headers["olu.trigger"].decode() in ("deletion", "events", "interval", "final")
        assert value["topic"] == e2e.topics.input and value["dim"] == DIM
        assert value["model"] == e2e.env["OLU_GROUP_ID"]
    for p, values in by_part.items():
        versions = [v["version"] for v in values]
        assert versions == sorted(set(versions)), f"partition {p}: versions not strictly increasing"
        assert values[-1]["offset"] == values[-1]["version"] == e2e.ends[p]
        assert [v["deletions"] for v in values] == sorted(v["deletions"] for v in values)
        assert values[-1]["deletions"] > 5
        assert any(rec.headers["olu.trigger"] == b"deletion" for rec in e2e.releases
                   if rec.json()["partition"] == p)
    assert_identical_duplicates(e2e.releases)


def test_every_release_and_snapshot_matches_the_in_process_replay(kafka_bootstrap, e2e):
    """Invariants 2-4 on one run: every release, snapshot and delta equals the oracle bit for bit."""
    results = verify_against_oracle(kafka_bootstrap, e2e.topics, e2e.snapshots, e2e.env, e2e.releases)
    by_part = releases_by_partition(e2e.releases)
    poison_per_partition = Counter(p.partition for p in e2e.produced if p.kind.startswith("poison:"))
    for p, replayed in results.items():
        last = by_part[p][-1]
        assert last["deletions"] == len(replayed.noised_deletes) == replayed.model.accountant.lifetime_deletions
        assert last["t"] == replayed.inserts_applied
        assert replayed.noop_deletes, "the stream has duplicate and unknown deletes"
        assert replayed.inserts_skipped, "the stream has inserts that arrive after their delete"
        assert replayed.dead == poison_per_partition[p]
        # The ledger numbers every deletion once, in order.
        assert [e["i"] for e in replayed.model.ledger] == list(range(1, len(replayed.noised_deletes) + 1))


def test_twin_worker_draws_independent_noise_but_is_deterministic_until_then(kafka_bootstrap, e2e):
    """Two groups over the same input. Each matches its own in-process replay bit for bit; the
    replays agree up to the first noised deletion (invariant 3 across processes) and every later
    release differs between the two (each deletion drew fresh noise from OS entropy, invariant 1)."""
    mine = verify_against_oracle(kafka_bootstrap, e2e.topics, e2e.snapshots, e2e.env, e2e.releases)
    theirs = verify_against_oracle(kafka_bootstrap, e2e.twin_topics, e2e.twin_snapshots, e2e.twin_env,
                                   e2e.twin_releases)
    a_values, b_values = releases_by_partition(e2e.releases), releases_by_partition(e2e.twin_releases)
    for p in (0, 1):
        a, b = mine[p], theirs[p]
        assert a.noised_deletes == b.noised_deletes and a.noop_deletes == b.noop_deletes
        first = a.noised_deletes[0] + 1  # the first offset whose state holds noise
        assert all(a.trace[v] == b.trace[v] for v in a.trace if v < first)
        # From there on every state both oracles know differs (an early deletion whose delta was
        # garbage-collected and whose release was coalesced leaves the iterate unknown until the
        # next release or snapshot: None in the trace).
        known = [v for v in sorted(a.trace) if v >= first and a.trace[v] is not None and b.trace[v] is not None]
        assert known and known[0] - first < 2_000
        assert all(a.trace[v][3] != b.trace[v][3] for v in known)
        common = {v["version"] for v in a_values[p]} & {v["version"] for v in b_values[p]}
        assert any(v >= first for v in common)
        for v in common:  # same position, same counters; weights differ exactly after the first deletion
            x = next(r for r in a_values[p] if r["version"] == v)
            y = next(r for r in b_values[p] if r["version"] == v)
            assert (x["t"], x["deletions"], x["epoch"]) == (y["t"], y["deletions"], y["epoch"])
            assert (x["weights"] == y["weights"]) == (v < first)


def test_dead_letters_carry_reason_and_original_bytes(e2e):
    poison = {(p.partition, p.offset): p for p in e2e.produced if p.kind.startswith("poison:")}
    assert len(poison) == len(POISON)
    seen = set()
    for rec in e2e.dead_letters:
        headers = decode_headers(list(rec.headers.items()))
        validate("dead-letter", headers)
        source = (int(headers["olu.source.partition"]), int(headers["olu.source.offset"]))
        assert headers["olu.source.topic"] == e2e.topics.input
        assert source in poison, f"unexpected dead letter {headers}"
        expected = poison[source]
        assert headers["olu.error.reason"] == expected.kind.removeprefix("poison:")
        assert headers["olu.worker.version"] == __version__
        assert rec.key == expected.key and rec.value == expected.value  # the original bytes
        if source in seen:
            continue
        seen.add(source)
        if expected.value and b"someone-else" in expected.value:
            assert "someone-else" not in headers["olu.error.detail"]  # no ids in details
    assert seen == set(poison), f"missing dead letters for {sorted(set(poison) - seen)}"
    carried = [rec for rec in e2e.dead_letters if "traceparent" in rec.headers]
    assert len(carried) == 1
    assert carried[0].headers["traceparent"] == CARRIED[0][1]
    assert carried[0].headers["olu.error.reason"] != b"forged"


def _samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_metrics_show_privacy_dead_letters_and_work(e2e):
    samples = _samples(e2e.metrics)
    topic = e2e.topics.input
    by_part = releases_by_partition(e2e.releases)
    eps = {s.labels["partition"]: s.value for s in samples["olu_privacy_epsilon"] if s.labels["topic"] == topic}
    assert set(eps) == {"0", "1"}
    for p in (0, 1):
        assert eps[str(p)] > 0
        assert math.isclose(eps[str(p)], by_part[p][-1]["privacy"]["epsilon"], rel_tol=1e-12)
    dead = Counter()
    for s in samples["olu_dead_letters_total"]:
        assert s.labels["topic"] == topic
        dead[s.labels["reason"]] += s.value
    assert dead == Counter(reason for _, _, reason in POISON)
    deletions = {s.labels["partition"]: s.value for s in samples["olu_deletions_total"]}
    assert deletions == {str(p): float(by_part[p][-1]["deletions"]) for p in (0, 1)}
    assert [s.value for s in samples["olu_assigned_partitions"]] == [2.0]
    assert sum(s.value for s in samples["olu_releases_total"]) > 0
    inserts = sum(s.value for s in samples["olu_events_total"] if s.labels["op"] == "insert")
    assert inserts == sum(1 for p in e2e.produced if p.kind == "insert")
    tombstones = sum(s.value for s in samples["olu_events_total"] if s.labels["op"] == "tombstone")
    assert tombstones == sum(1 for p in e2e.produced if p.kind == "tombstone")


# --------------------------------------------------------------------------- invariant 1

_FLOAT = re.compile(rb"-?\d+\.\d+(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+")


def _candidates(e2e, p, replayed_noised, inputs) -> list[int]:
    """Noised deletes right after an applied insert, at an offset where nothing was released or
    snapshotted: their pre-noise iterate is a state that no legitimate artifact may hold."""
    versions = {v["version"] for v in releases_by_partition(e2e.releases)[p]}
    fulls = {o.offset for o in stored_objects(e2e.snapshots, e2e.topics.input, p) if o.kind == "full"}
    kinds = {off: value for off, _, value in inputs}
    out = []
    for d in replayed_noised:
        prev = kinds.get(d - 1)
        if prev is None or b'"insert"' not in prev or d in versions or d in fulls:
            continue
        out.append(d)
    return out


def test_no_pre_noise_iterate_or_noise_is_persisted_logged_or_released(kafka_bootstrap, e2e):
    settings = settings_of(e2e.env)
    inputs = input_by_partition(kafka_bootstrap, e2e.topics.input)
    by_part = releases_by_partition(e2e.releases)
    logs = e2e.worker.log_text().encode() + e2e.twin.log_text().encode()
    log_floats = {float(m) for m in _FLOAT.findall(logs)}
    release_texts = [rec.value for rec in e2e.releases]
    release_floats = {w for v in (r.json() for r in e2e.releases) for w in v["weights"]}
    checked = 0
    for p in (0, 1):
        objects = stored_objects(e2e.snapshots, e2e.topics.input, p)
        deltas = post_states_from_deltas(objects)
        first = oracle_replay(settings, inputs[p], objects, by_part[p])
        # deletions whose own delta holds their noise (earlier ones may have left the store)
        chosen = [d for d in _candidates(e2e, p, first.noised_deletes, inputs[p]) if d + 1 in deltas]
        assert chosen, f"partition {p}: no deletion to check"
        replayed = oracle_replay(settings, inputs[p], objects, by_part[p], pre_noise_at=set(chosen))
        stored_float_arrays = [a for o in objects for a in o.arrays.values() if a.dtype == np.float64]
        for d in chosen:
            z_hat = replayed.pre_noise[d]
            post = np.frombuffer(replayed.trace[d + 1][3], np.float64)
            assert post.tobytes() != z_hat.tobytes(), "the deletion added no noise"
            # Binary artifacts: the iterate as a whole and each coordinate's 8 bytes.
            for o in objects:
                assert z_hat.tobytes() not in o.blob, f"pre-noise iterate of {p}@{d} stored in {o.key}"
                for c in z_hat:
                    assert np.float64(c).tobytes() not in o.blob, f"pre-noise coordinate stored in {o.key}"
            # Text artifacts: releases and logs.
            for c in z_hat:
                assert float(c) not in release_floats
                assert float(c) not in log_floats
                for text in (repr(float(c)).encode(), orjson.dumps(float(c))):
                    assert text not in logs
                    assert not any(text in r for r in release_texts)
            # The noise itself (recoverable up to rounding when no projection happened).
            if np.linalg.norm(post) < settings.radius * (1 - 1e-9):
                noise = post - z_hat
                for arr in stored_float_arrays:
                    if arr.shape == noise.shape:
                        assert not np.allclose(arr, noise, rtol=1e-9, atol=0), "noise vector stored"
                for c in noise:
                    assert not any(math.isclose(c, f, rel_tol=1e-9) for f in log_floats), "noise logged"
                    assert not any(math.isclose(c, f, rel_tol=1e-9) for f in release_floats), "noise released"
            checked += 1
    assert checked >= 2


# --------------------------------------------------------------------------- invariants 5, 6, 7

def test_calibration_uses_only_public_quantities(e2e):
    """Invariant 5: each deletion's shift and sigma are functions of public constants and the
    public step indices (u, tau, i) only: a model that saw no data computes the same numbers."""
    settings = settings_of(e2e.env)
    blank = ALGORITHMS[settings.algorithm](**settings.model_kwargs())
    for p in (0, 1):
        meta = newest_full(e2e.snapshots, e2e.topics.input, p).header["model"]
        acc = meta["accountant"]
        assert (acc["unit"], acc["budget"]) == (settings.privacy_unit, blank.accountant.budget)
        assert (acc["omega"], acc["delta"]) == (settings.omega, settings.delta)
        assert meta["config"] == blank.config
        assert meta["ledger"]
        rho = 0.0
        for entry in meta["ledger"]:
            assert entry["shift"] == blank.shift(entry["u"], entry["tau"])
            assert entry["sigma"] == entry["shift"] * noise_multiplier(entry["i"], acc["budget"], acc["omega"])
            rho += 0.5 * (entry["shift"] / entry["sigma"]) ** 2
            assert entry["rho"] == pytest.approx(rho, rel=1e-12)
        last = releases_by_partition(e2e.releases)[p][-1]
        assert last["privacy"]["eps_rdp_slope"] == acc["rho"]
        assert last["privacy"]["budget_used"] == pytest.approx(acc["rho"] / acc["budget"], rel=1e-15)


def test_passive_state_holds_no_raw_features_or_ids(e2e):
    """Invariant 6 for passive OLU: no stored object ever holds a record's features or its id."""
    rows, ids = [], set()
    for p in e2e.produced:
        if p.kind == "insert":
            value = orjson.loads(p.value)
            rows.append(np.array(value["x"], np.float64).tobytes())
            if len(value["id"]) >= 6:  # shorter ones could match random bytes by chance
                ids.add(value["id"].encode())
    objects = [o for store in (e2e.snapshots,) for p in (0, 1) for o in stored_objects(store, e2e.topics.input, p)]
    assert objects and rows and ids
    for o in objects:
        for key, blob in {o.key: o.blob, **o.shared_blobs}.items():
            assert not any(row in blob for row in rows), f"raw features in {key}"
            assert not any(i in blob for i in ids), f"a record id in {key}"
        # the subject map (forget by key) holds 64-bit hashes of keys and ids, never either
        assert all(re.fullmatch(r"z|tombstones|applied_tail_(keys|steps)|applied_run\d+_dead|subjects_open|"
                                r"subject_records_open", a) for a in o.arrays)
        assert all(set(arrays) in ({"keys", "steps"}, {"subjects", "records"}) for arrays in o.shared.values())


def test_every_insert_is_applied_skipped_or_dead_lettered(kafka_bootstrap, e2e):
    """Invariant 7 (no insert dropped silently): every insert is applied, counted as skipped
    (its id was deleted first) or dead-lettered with a reason."""
    settings = settings_of(e2e.env)
    inputs = input_by_partition(kafka_bootstrap, e2e.topics.input)
    samples = _samples(e2e.metrics)
    skipped_metric = {s.labels["partition"]: s.value for s in samples.get("olu_events_skipped_total", [])
                      if s.labels["reason"] == "deleted_before_insert"}
    dead_inserts = Counter(int(decode_headers(list(r.headers.items()))["olu.source.partition"])
                           for r in e2e.dead_letters if r.value and b'"insert"' in r.value)
    for p in (0, 1):
        inserts = sum(1 for off, key, value in inputs[p] if value and b'"op":"insert"' in value.replace(b" ", b""))
        objects = stored_objects(e2e.snapshots, e2e.topics.input, p)
        replayed = oracle_replay(settings, inputs[p], objects, releases_by_partition(e2e.releases)[p])
        t = newest_full(e2e.snapshots, e2e.topics.input, p).header["model"]["t"]
        assert t == replayed.inserts_applied
        assert skipped_metric.get(str(p), 0.0) == replayed.inserts_skipped > 0
        assert replayed.inserts_applied + replayed.inserts_skipped + dead_inserts[p] == inserts
