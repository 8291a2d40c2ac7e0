"""Metrics registry and the /metrics /healthz /readyz server."""

from __future__ import annotations

import math
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import orjson
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from worker.http import HealthServer
from worker.metrics import LABEL_NAMES, Metrics
from worker.olu.core.deletion import Deletion
from worker.stream.outcome import Outcome, Release
from worker.stream.receipt_book import ReceiptBook

# A consumer's statistics as librdkafka emits them (STATISTICS.md: top level, brokers, topics ->
# partitions, cgrp), cut down to the fields that matter and a few that do not.
STATS = {
    "name": "olu-worker-consumer#consumer-1", "client_id": "olu-worker-consumer", "type": "consumer",
    "ts": 5_016_483_227_792, "time": 1_527_060_869, "age": 5_016_483_227, "replyq": 0,
    "msg_cnt": 22_710, "msg_size": 704_010, "msg_max": 500_000, "msg_size_max": 1_073_741_824,
    "simple_cnt": 0, "metadata_cache_cnt": 1, "tx": 631, "tx_bytes": 168_584, "rx": 631,
    "rx_bytes": 6_542_834, "txmsgs": 0, "txmsg_bytes": 0, "rxmsgs": 97_120, "rxmsg_bytes": 3_981_000,
    "brokers": {
        "localhost:9092/1": {
            "name": "localhost:9092/1", "nodeid": 1, "nodename": "localhost:9092", "source": "configured",
            "state": "UP", "stateage": 9_057_234, "outbuf_cnt": 0, "outbuf_msg_cnt": 0, "waitresp_cnt": 1,
            "tx": 320, "txbytes": 84_283, "rx": 320, "rxbytes": 3_271_417,
            "rtt": {"min": 1_044, "max": 20_163, "avg": 3_578, "sum": 1_144_770, "cnt": 320,
                    "stddev": 2_024, "p50": 3_071, "p75": 3_583, "p90": 4_607, "p95": 5_631,
                    "p99": 14_335, "p99_99": 20_223, "outofrange": 0, "hdrsize": 13_424},
            "toppars": {"olu.events-0": {"topic": "olu.events", "partition": 0}},
        },
    },
    "topics": {
        "olu.events": {
            "topic": "olu.events", "age": 9_057, "metadata_age": 9_034,
            "batchsize": {"min": 0, "max": 0, "avg": 0, "sum": 0, "cnt": 0},
            "partitions": {
                "0": {"partition": 0, "broker": 1, "leader": 1, "desired": True, "unknown": False,
                      "msgq_cnt": 0, "fetchq_cnt": 3, "fetchq_size": 2_410, "fetch_state": "active",
                      "query_offset": -1001, "next_offset": 4_110, "app_offset": 4_100,
                      "stored_offset": -1001, "committed_offset": 3_000, "eof_offset": 4_110,
                      "lo_offset": 0, "hi_offset": 4_142, "ls_offset": 4_142,
                      "consumer_lag": 1_142, "consumer_lag_stored": -1, "txmsgs": 0, "rxmsgs": 4_110},
                "1": {"partition": 1, "broker": 1, "leader": 1, "desired": True, "unknown": False,
                      "fetch_state": "active", "app_offset": 10, "committed_offset": 10, "hi_offset": 10,
                      "ls_offset": 10, "consumer_lag": 0, "consumer_lag_stored": -1},
                "2": {"partition": 2, "broker": -1, "leader": -1, "desired": True, "unknown": False,
                      "fetch_state": "none", "app_offset": -1001, "committed_offset": -1001,
                      "hi_offset": -1, "ls_offset": -1, "consumer_lag": -1, "consumer_lag_stored": -1},
                "3": {"partition": 3, "broker": 1, "leader": 1, "desired": False, "unknown": False,
                      "fetch_state": "stopped", "consumer_lag": 77},
                "-1": {"partition": -1, "broker": -1, "leader": -1, "desired": False, "unknown": False,
                       "msgq_cnt": 0, "fetchq_cnt": 0, "fetch_state": "none", "consumer_lag": -1},
            },
        },
    },
    "cgrp": {"state": "up", "stateage": 8_997, "join_state": "steady", "rebalance_age": 8_912,
             "rebalance_cnt": 1, "rebalance_reason": "", "assignment_size": 3},
}


def samples(metrics: Metrics) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(metrics: Metrics, name: str, **labels) -> float | None:
    return samples(metrics).get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


class FakeAccountant:
    lifetime_deletions = 2


class FakeModel:
    t = 120
    deletions_applied = 3  # the model's lifetime count (the release's deletions)
    accountant = FakeAccountant()
    index = range(97)  # the applied-record index: only its length is read

    def __init__(self, capacity_left=None):
        self.capacity_left = capacity_left

    spends_on_learn = False

    def release_noise_std(self):
        return None

    def noise_to_signal(self):
        return None

    def privacy(self):
        return {"eps_rdp_slope": 0.25, "budget_used": 0.25, "epsilon": 1.75, "delta": 1e-5,
                "deletions_capacity_left": self.capacity_left}


def runner(partition=0, capacity_left=None, released_version=4_000, next_offset=4_000):
    """A RunnerView (worker/metrics/loop.py): what the metrics read of a PartitionRunner."""
    return SimpleNamespace(topic="olu.events", partition=partition, model=FakeModel(capacity_left), settings=None,
                           released_version=released_version, next_offset=next_offset, receipts=ReceiptBook())


def deletion(outcome, sigma=0.0):
    return Deletion(outcome, 1, sigma, 0.0, (3,))


def outcome(**kw):
    return Outcome(**kw)


def release(trigger, version, noise_std=None, noise_to_signal=None, prequential_loss=None):
    return Release(b"k", b"v", [], version, trigger, noise_std=noise_std, noise_to_signal=noise_to_signal,
                   prequential_loss=prequential_loss)


# --------------------------------------------------------------------------- metrics
def test_own_registry_not_the_global_one():
    a, b = Metrics(), Metrics()  # two workers in one process: no duplicate-registration error
    a.rebalance("assign")
    assert value(a, "olu_rebalances_total", type="assign") == 1.0
    assert value(b, "olu_rebalances_total", type="assign") == 0.0 or value(b, "olu_rebalances_total",
                                                                            type="assign") is None
    assert REGISTRY.get_sample_value("olu_rebalances_total", {"type": "assign"}) is None


def test_update_from_stats_sets_lag():
    m = Metrics()
    assert m.update_from_stats(orjson.dumps(STATS).decode()) == 2
    assert value(m, "olu_consumer_lag", topic="olu.events", partition=0) == 1_142  # against the commit
    assert value(m, "olu_consumer_processing_lag", topic="olu.events", partition=0) == 42  # not yet received
    assert value(m, "olu_consumer_lag", topic="olu.events", partition=1) == 0
    assert value(m, "olu_consumer_processing_lag", topic="olu.events", partition=2) is None
    assert value(m, "olu_consumer_lag", topic="olu.events", partition=2) is None  # unknown lag (-1)
    assert value(m, "olu_consumer_lag", topic="olu.events", partition=3) is None  # not desired
    assert value(m, "olu_consumer_lag", topic="olu.events", partition=-1) is None  # internal partition
    stats = orjson.loads(orjson.dumps(STATS))
    stats["topics"]["olu.events"]["partitions"]["0"]["consumer_lag"] = 5
    stats["topics"]["olu.events"]["partitions"]["1"]["desired"] = False  # revoked meanwhile
    m.update_from_stats(orjson.dumps(stats))  # bytes work too
    assert value(m, "olu_consumer_lag", topic="olu.events", partition=0) == 5
    assert value(m, "olu_consumer_lag", topic="olu.events", partition=1) is None


@pytest.mark.parametrize("junk", ["", "not json", "[]", "null", '{"topics": 3}',
                                  '{"topics": {"t": {"partitions": {"0": {"partition": "x"}}}}}',
                                  '{"topics": {"t": {"partitions": {"0": {"partition": 0, "consumer_lag": "7"}}}}}'])
def test_update_from_stats_never_raises(junk):
    assert Metrics().update_from_stats(junk) == 0


def test_loop_facing_updates_and_remove_partition():
    m = Metrics()
    r0, r1 = runner(0, capacity_left=7), runner(1)
    m.rebalance("assign")
    m.record_restore(r0, 0.2)
    m.record_restore(r1, 0.1)
    m.set_assigned(2)
    m.record_outcome(r0, outcome(inserts=10, skipped=2, deletes=4, tombstones=1, deletions=[
        deletion("noised", 0.7), deletion("exact"), deletion("not_applied"), deletion("duplicate")]))
    # the quality figure is exported with a release only, never from the state before it
    assert value(m, "olu_prequential_loss", topic="olu.events", partition=0) is None
    m.record_release(r0, release("deletion", 4_001, prequential_loss=0.42))
    m.observe_delete_to_release(0.003)
    m.record_dead_letter("olu.events", "not_json")
    m.record_snapshot(r0, "full", 0.05, 12_345)
    m.snapshot_failure("delta")

    tp = {"topic": "olu.events", "partition": 0}
    assert value(m, "olu_events_total", op="insert", **tp) == 12
    assert value(m, "olu_events_total", op="delete", **tp) == 3
    assert value(m, "olu_events_total", op="tombstone", **tp) == 1
    assert value(m, "olu_events_skipped_total", reason="deleted_before_insert", **tp) == 2
    assert value(m, "olu_deletions_total", **tp) == 2
    assert value(m, "olu_deletions_noop_total", reason="not_applied", **tp) == 1
    assert value(m, "olu_deletions_noop_total", reason="duplicate", **tp) == 1
    assert value(m, "olu_deletion_noise_sigma", **tp) == 0.7
    assert value(m, "olu_deletion_capacity_left", **tp) == 7
    assert value(m, "olu_deletion_capacity_left", topic="olu.events", partition=1) is None  # infinite
    assert value(m, "olu_privacy_epsilon", unit="all-deletions", **tp) == 1.75
    assert value(m, "olu_privacy_delta", unit="all-deletions", **tp) == 1e-5
    assert value(m, "olu_privacy_budget_used_ratio", unit="all-deletions", **tp) == 0.25
    assert value(m, "olu_privacy_rdp_slope", unit="all-deletions", **tp) == 0.25
    assert value(m, "olu_model_steps", **tp) == 120
    assert value(m, "olu_model_deletions", **tp) == 3
    assert value(m, "olu_applied_records", **tp) == 97
    assert value(m, "olu_model_version", **tp) == 4_001
    assert value(m, "olu_prequential_loss", **tp) == pytest.approx(0.42)
    assert value(m, "olu_releases_total", trigger="deletion", **tp) == 1
    assert value(m, "olu_delete_to_release_seconds_count") == 1
    assert value(m, "olu_dead_letters_total", topic="olu.events", reason="not_json") == 1
    assert value(m, "olu_snapshot_bytes", kind="full") == 12_345
    assert value(m, "olu_snapshot_duration_seconds_count", kind="full") == 1
    assert value(m, "olu_snapshot_failures_total", kind="delta") == 1
    assert value(m, "olu_snapshot_last_success_timestamp_seconds", **tp) > 1e9
    assert 0 <= value(m, "olu_snapshot_age_seconds", **tp) < 60
    assert value(m, "olu_restore_duration_seconds_count") == 2
    assert value(m, "olu_assigned_partitions") == 2
    assert value(m, "olu_rebalances_total", type="assign") == 1

    m.update_from_stats(orjson.dumps(STATS))
    m.remove_partition("olu.events", 0)
    left = [key for key in samples(m) if ("partition", "0") in key[1]]
    assert left == []
    assert value(m, "olu_privacy_epsilon", topic="olu.events", partition=1, unit="all-deletions") == 1.75  # others stay


def test_a_restored_partition_exports_its_model_and_lag_before_any_input():
    m = Metrics()
    m.record_restore(runner(0, released_version=None, next_offset=5_210), 0.1)  # nothing released yet
    m.record_restore(runner(1, released_version=None, next_offset=None), 0.1)  # a new partition
    m.set_lag("olu.events", 0, committed=7, processing=0)
    m.set_lag("olu.events", 1, committed=None, processing=-1)  # unknown: no series
    tp = {"topic": "olu.events", "partition": 0}
    assert value(m, "olu_model_version", **tp) == 5_210
    assert value(m, "olu_model_deletions", **tp) == 3
    assert value(m, "olu_consumer_lag", **tp) == 7 and value(m, "olu_consumer_processing_lag", **tp) == 0
    for name in ("olu_model_version", "olu_consumer_lag", "olu_consumer_processing_lag"):
        assert value(m, name, topic="olu.events", partition=1) is None, name
    m.remove_partition("olu.events", 0)  # revoked: these go with the rest
    assert value(m, "olu_consumer_lag", **tp) is None and value(m, "olu_model_deletions", **tp) is None


def test_noise_gauges_follow_the_published_release_and_the_restored_model():
    m = Metrics()
    tp = {"topic": "olu.events", "partition": 0}
    m.record_release(runner(0), release("deletion", 4_001, noise_std=0.02, noise_to_signal=0.75))
    assert value(m, "olu_release_noise_std", **tp) == 0.02
    assert value(m, "olu_noise_to_signal_ratio", **tp) == 0.75
    m.record_release(runner(0), release("events", 4_002, noise_std=0.0, noise_to_signal=float("inf")))  # zero weights
    assert value(m, "olu_release_noise_std", **tp) == 0.0 and value(m, "olu_noise_to_signal_ratio", **tp) == math.inf
    m.record_release(runner(0), release("events", 4_003))  # not tracked: no series
    assert value(m, "olu_release_noise_std", **tp) is None and value(m, "olu_noise_to_signal_ratio", **tp) is None

    restored = runner(1)
    restored.model.release_noise_std = lambda: 0.5
    restored.model.noise_to_signal = lambda: 0.25
    m.record_restore(restored, 0.1)
    assert value(m, "olu_release_noise_std", topic="olu.events", partition=1) == 0.5
    assert value(m, "olu_noise_to_signal_ratio", topic="olu.events", partition=1) == 0.25
    m.remove_partition("olu.events", 1)
    assert value(m, "olu_release_noise_std", topic="olu.events", partition=1) is None


def test_a_series_dropped_is_exported_again_when_it_is_set_again():
    # the labelled children are cached: a dropped series must not leave a stale child behind
    m = Metrics()
    tp = {"topic": "olu.events", "partition": 0}
    m.set_noise("olu.events", 0, 0.5, 0.1)
    m.set_noise("olu.events", 0, None, None)
    assert value(m, "olu_release_noise_std", **tp) is None
    m.set_noise("olu.events", 0, 0.7, 0.2)
    assert value(m, "olu_release_noise_std", **tp) == 0.7 and value(m, "olu_noise_to_signal_ratio", **tp) == 0.2
    m.record_deletion("olu.events", 0, "noised", 0.3)
    m.remove_partition("olu.events", 0)  # revoked, then assigned again
    assert value(m, "olu_deletions_total", **tp) is None
    m.set_noise("olu.events", 0, 0.9, 0.3)
    m.record_deletion("olu.events", 0, "noised", 0.3)
    assert value(m, "olu_release_noise_std", **tp) == 0.9 and value(m, "olu_deletions_total", **tp) == 1


def test_label_values_are_bounded():
    m = Metrics()
    m.count_events("t", 0, "upsert")
    m.record_dead_letter("t", "Some Detail With Spaces and an id r-42")
    m.rebalance("weird")
    m.count_release("t", 0, "whenever")
    m.record_deletion("t", 0, "something-else")
    text = m.render().decode()
    assert 'op="other"' in text and 'type="other"' in text and 'trigger="other"' in text
    assert "r-42" not in text and "Spaces" not in text


def test_every_label_name_is_in_the_allowed_set():
    m = Metrics()
    r = runner(0, capacity_left=3)
    m.record_restore(r, 0.1)
    m.record_outcome(r, outcome(inserts=1, deletes=1, skipped=1, deletions=[deletion("noised", 1.0),
                                                                            deletion("duplicate")]))
    m.record_release(r, release("events", 1))
    m.record_dead_letter("olu.events", "wrong_dimension")
    m.record_snapshot(r, "full", 0.1, 10)
    m.snapshot_failure("full")
    m.rebalance("revoke")
    m.update_from_stats(orjson.dumps(STATS))
    names = set()
    for family in m.registry.collect():
        assert family.name.startswith("olu_"), family.name
        for s in family.samples:
            names.update(set(s.labels) - {"le"})  # le: histogram buckets
    assert names <= LABEL_NAMES, names - LABEL_NAMES
    # The API has no parameter that could carry a record id or a feature.
    import inspect

    for attr in dir(Metrics):
        fn = getattr(Metrics, attr)
        if callable(fn) and not attr.startswith("_"):
            params = set(inspect.signature(fn).parameters)
            assert not params & {"record_id", "id", "key", "x", "features", "y", "label"}, attr


# --------------------------------------------------------------------------- HTTP
def get(port: int, path: str):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type"), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type"), err.read()


@pytest.fixture
def server():
    metrics = Metrics()
    clock = SimpleNamespace(now=1000.0)
    health = HealthServer(metrics, "127.0.0.1", 0, liveness_window=60.0, clock=lambda: clock.now)
    port = health.start()
    try:
        yield SimpleNamespace(metrics=metrics, health=health, port=port, clock=clock)
    finally:
        health.stop()


def test_ephemeral_port_and_metrics_endpoint(server):
    assert server.port > 0
    status, ctype, body = get(server.port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain") and "version=" in ctype
    assert b"olu_assigned_partitions" in body
    server.metrics.record_restore(runner(2), 0.01)
    server.metrics.rebalance("assign")
    _, _, body = get(server.port, "/metrics")
    text = body.decode()
    assert 'olu_privacy_epsilon{partition="2",topic="olu.events",unit="all-deletions"} 1.75' in text
    assert 'olu_rebalances_total{type="assign"} 1.0' in text
    assert "python_gc" not in text  # not the default registry


def test_healthz_follows_heartbeats(server):
    assert get(server.port, "/healthz")[0] == 200
    server.clock.now += 61
    status, _, body = get(server.port, "/healthz")
    assert status == 503 and b"stalled" in body
    server.health.heartbeat()
    assert get(server.port, "/healthz")[0] == 200
    assert server.health.alive


def test_readyz_after_set_ready(server):
    assert get(server.port, "/readyz")[0] == 503
    server.health.set_ready(True)
    assert get(server.port, "/readyz")[0] == 200
    server.health.set_ready(False)
    assert get(server.port, "/readyz")[0] == 503


def test_unknown_path_is_404_and_query_is_ignored(server):
    assert get(server.port, "/")[0] == 404
    assert get(server.port, "/metrics/extra")[0] == 404
    assert get(server.port, "/metrics?name[]=x")[0] == 200
    assert get(server.port, "/healthz/")[0] == 200


def test_no_request_logging(server, capfd):
    get(server.port, "/metrics")
    get(server.port, "/nope")
    assert capfd.readouterr().err == ""


def test_stop_releases_the_port():
    health = HealthServer(Metrics(), "127.0.0.1", 0)
    port = health.start()
    assert get(port, "/readyz")[0] == 503
    health.stop()
    health.stop()  # idempotent
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)


def test_liveness_window_must_be_positive():
    with pytest.raises(ValueError):
        HealthServer(Metrics(), liveness_window=0)


def test_pending_requests_and_the_oldest_ones_age_are_read_at_scrape_time():
    from worker.stream.output.receipts import Receipt

    m = Metrics()
    r = runner(0)
    m.record_restore(r, 0.1)
    assert "olu_deletion_requests_pending{partition=\"0\",topic=\"olu.events\"} 0.0" in m.render().decode()
    asked = int(time.time() * 1000) - 90_000  # a request made 90 s ago, answered, not yet released
    r.receipts.keep(Receipt(b"DSR-1", b"{}", 7, 8, "honoured", asked), waits=True)
    text = m.render().decode()
    assert "olu_deletion_requests_pending{partition=\"0\",topic=\"olu.events\"} 1.0" in text
    age = float(next(line.split()[-1] for line in text.splitlines()
                     if line.startswith("olu_deletion_request_oldest_pending_seconds{")))
    assert 89.0 <= age <= 120.0
    m.count_receipt("olu.events", 0, "honoured")
    assert "olu_receipts_total{partition=\"0\",status=\"honoured\",topic=\"olu.events\"} 1.0" in m.render().decode()
    r.receipts.delivered(Receipt(b"DSR-1", b"{}", 7, 8))
    assert "olu_deletion_request_oldest_pending_seconds{partition=\"0\",topic=\"olu.events\"} 0.0" in m.render().decode()
