"""Helpers for the tests that run ``olu-worker run`` as a subprocess against the real broker.

- :class:`WorkerProcess`: start / SIGTERM / SIGKILL one worker, read its JSON log (stderr) and
  query its HTTP port (discovered from the ``http listening`` log line).
- :func:`produce`: write (key, value) records and return where each one landed.
- :func:`read_topic`: every record of a topic from the beginning up to its end (EOF).
- :func:`stored_objects`: every snapshot and delta of a partition, decoded.
- :class:`BackgroundProducer`: a paced stream in a thread, held at a limit until the test allows more.
- :func:`replay_partition`: the in-process oracle. A fresh engine (same settings) is fed the
  partition's input in offset order, one ``learn_one`` per insert; a deletion that changes the
  model adopts the post-noise state the worker made durable, exactly as the worker's restore path
  does (``unlearn_one(id, post_state=...)``). Nothing else is random, so the result must equal
  the worker's bit for bit: every release, every stored snapshot and delta, and the final state.

  Where the post-noise state comes from: the delta object at delete offset + 1. Deltas older
  than the oldest kept full snapshot are garbage-collected by design even with a large
  ``OLU_SNAPSHOT_KEEP`` (the full snapshot covers them), so for those the release at version
  delete offset + 1 is used (release weights round-trip float64 exactly through JSON). Where
  both exist they must agree bit for bit; every delta must be used by exactly one deletion that
  changed the model, and a deletion that changed the model without either fails the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import obstore
import orjson
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from worker.config import load_settings
from worker.olu import ALGORITHMS, load_model, record_key
from worker.olu.core.sparse import SparseRows
from worker.olu.exceptions import BudgetExhausted, InvalidExample
from worker.state.codec import decode
from worker.state.groups import GROUP_KIND, unpack_group
from worker.state.store import SnapshotStore, open_store
from worker.stream.exceptions import DeadLetter
from worker.stream.input.decode import Insert, decode_event
from worker.stream.input.keys import partitioning_keys

REPO = Path(__file__).resolve().parents[2]
DIM = 4
HANG_GUARD_S = 90.0  # generous bounds on waits; a test that needs them is broken, not slow


# --------------------------------------------------------------------------- waiting

def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll ``predicate`` until it returns something truthy; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------- topics

def create_topics(bootstrap: str, specs: dict[str, int], timeout: float = 30.0) -> None:
    """Create ``{name: partitions}`` and wait until every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=p, replication_factor=1) for n, p in specs.items()])
    for f in futures.values():
        f.result(timeout=timeout)
    deadline = time.monotonic() + timeout
    for name, partitions in specs.items():
        while True:
            md = admin.list_topics(topic=name, timeout=5).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions and \
                    all(p.leader >= 0 for p in md.partitions.values()):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} not ready")
            time.sleep(0.1)


def delete_topics(bootstrap: str, names) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_topics(list(names)).values():
        try:
            f.result(timeout=30)
        except Exception:  # noqa: BLE001 - best effort on the shared broker
            pass


@dataclass
class Topics:
    input: str
    params: str
    dlq: str
    partitions: int


def topics_for(kafka_topic, partitions: int) -> Topics:
    """Input, params and dead-letter topics from the ``kafka_topic`` fixture factory."""
    return Topics(kafka_topic(partitions=partitions), kafka_topic(partitions=1), kafka_topic(partitions=1),
                  partitions)


# --------------------------------------------------------------------------- producing

@dataclass(frozen=True)
class Produced:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    kind: str  # insert, delete, tombstone, or a poison label


def produce(bootstrap: str, topic: str, records) -> list[Produced]:
    """Produce ``(key, value, kind[, headers])`` records in order; returns them with partition and offset."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
                         "log_level": 3})
    out: list[Produced] = []
    errors: list = []

    def report(kind, key, value):
        def cb(err, msg):
            if err is not None:
                errors.append(err)
            else:
                out.append(Produced(msg.partition(), msg.offset(), key, value, kind))
        return cb

    for key, value, kind, *headers in records:
        producer.produce(topic, key=key, value=value, headers=headers[0] if headers else None,
                         on_delivery=report(kind, key, value))
        producer.poll(0)
    assert producer.flush(30) == 0, "producer did not deliver everything"
    assert not errors, errors
    return sorted(out, key=lambda p: (p.partition, p.offset))


class BackgroundProducer(threading.Thread):
    """Produce ``records`` in chunks with a pause between them (a stream that takes a while).

    Only the first ``limit`` records go out until :meth:`allow` raises the limit, so a test can be
    sure the stream is still going when it acts (e.g. kills the worker); :meth:`hurry` lifts the
    limit and drops the pause.
    """

    def __init__(self, bootstrap: str, topic: str, records, *, chunk: int = 100, pause: float = 0.05,
                 limit: int | None = None, flush_timeout: float = 30.0):
        super().__init__(name="test-producer", daemon=True)
        self.bootstrap, self.topic, self.records = bootstrap, topic, list(records)
        self.chunk, self.pause = chunk, pause
        self.flush_timeout = flush_timeout  # longer than any planned broker outage
        self.limit = len(self.records) if limit is None else limit
        self.position = 0  # records handed to the producer so far
        self.produced: list[Produced] = []
        self.error: BaseException | None = None
        self._fast = False
        self._cond = threading.Condition()

    def allow(self, limit: int) -> None:
        with self._cond:
            self.limit = max(self.limit, limit)
            self._cond.notify_all()

    def hurry(self) -> None:
        with self._cond:
            self._fast, self.limit = True, len(self.records)
            self._cond.notify_all()

    @property
    def waiting(self) -> bool:
        """At its limit (the stream pauses until :meth:`allow`)."""
        return self.position >= self.limit and self.position < len(self.records)

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                             "log_level": 3})
        errors: list = []

        def report(kind):
            def cb(err, msg):
                if err is not None:
                    errors.append(err)
                else:
                    self.produced.append(Produced(msg.partition(), msg.offset(), msg.key(), msg.value(), kind))
            return cb

        try:
            while self.position < len(self.records):
                with self._cond:
                    self._cond.wait_for(lambda: self.position < self.limit)
                    end = min(self.position + self.chunk, self.limit)
                for key, value, kind in self.records[self.position:end]:
                    producer.produce(self.topic, key=key, value=value, on_delivery=report(kind))
                self.position = end
                assert producer.flush(self.flush_timeout) == 0, "producer did not deliver everything"
                assert not errors, errors
                with self._cond:
                    if not self._fast:
                        self._cond.wait(self.pause)
        except BaseException as exc:  # noqa: BLE001 - reported by result()
            self.error = exc

    def result(self, timeout: float = HANG_GUARD_S) -> list[Produced]:
        self.hurry()
        self.join(timeout)
        assert not self.is_alive(), "background producer did not finish"
        if self.error is not None:
            raise self.error
        return sorted(self.produced, key=lambda p: (p.partition, p.offset))


def insert(rid: str, x, y, key: str | None = None) -> tuple[bytes, bytes, str]:
    """An insert keyed by its id, or by ``key`` (e.g. its data subject)."""
    value = orjson.dumps({"op": "insert", "id": rid, "x": [float(v) for v in x], "y": y})
    return (rid if key is None else key).encode(), value, "insert"


def delete(rid: str, tombstone: bool = False) -> tuple[bytes, bytes | None, str]:
    if tombstone:
        return rid.encode(), None, "tombstone"
    return rid.encode(), orjson.dumps({"op": "delete", "id": rid}), "delete"


def event_stream(n: int, *, seed: int, prefix: str = "r", delete_rate: float = 0.08, dim: int = DIM,
                 start: int = 0, deletable: list[str] | None = None, bursts: dict[int, int] | None = None):
    """``n`` events: inserts of a noisy linear rule and deletes of earlier ids (JSON or tombstone),
    plus duplicate deletes, deletes of ids never seen, and deletes that arrive before their insert.

    ``deletable`` (optional, shared between calls) is the pool of live ids deletes pick from.
    ``bursts`` {position: count}: from that position on, ``count`` deletes of live ids in a row (an
    account purge), in place of the events that would have been there.
    (``tests/stream/subjects.py`` has the same stream keyed by data subject, deleting by requests.)
    """
    rng = np.random.default_rng(seed)
    w = np.linspace(-1.0, 1.0, dim)
    live = deletable if deletable is not None else []
    deleted: list[str] = []
    early: list[str] = []
    out = []
    burst_left = 0
    for j in range(start, start + n):
        burst_left = max(burst_left, (bursts or {}).get(j, 0))
        r = rng.random()
        if live and burst_left:
            burst_left -= 1
            victim = live.pop(int(rng.integers(len(live))))
            deleted.append(victim)
            out.append(delete(victim, tombstone=bool(rng.random() < 0.4)))
        elif live and r < delete_rate:
            victim = live.pop(int(rng.integers(len(live))))
            deleted.append(victim)
            out.append(delete(victim, tombstone=bool(rng.random() < 0.4)))
        elif deleted and r < delete_rate + 0.01:
            out.append(delete(deleted[int(rng.integers(len(deleted)))]))  # duplicate: a no-op
        elif r < delete_rate + 0.015:
            out.append(delete(f"{prefix}-ghost-{j}"))  # never inserted: not_applied
        elif r < delete_rate + 0.02:
            rid = f"{prefix}-early-{j}"
            early.append(rid)
            out.append(delete(rid))  # the delete comes first: the later insert is skipped
        else:
            if early and rng.random() < 0.05:
                rid = early.pop(0)
            else:
                rid = f"{prefix}-{j}"
                live.append(rid)
            x = rng.normal(size=dim)
            x *= 0.95 / max(1.0, float(np.linalg.norm(x)))
            y = 1 if float(x @ w) + 0.3 * rng.normal() >= 0 else 0
            out.append(insert(rid, x, y))
    return out


# --------------------------------------------------------------------------- reading topics

@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict
    timestamp_ms: int = 0  # the record's CreateTime: when the worker handed it to its producer

    def json(self):
        return orjson.loads(self.value)


def read_topic(bootstrap: str, topic: str, *, isolation: str = "read_committed",
               timeout: float = 30.0) -> list[Record]:
    """Every record of every partition, from the beginning to the end (read_committed: the LSO)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation, "log_level": 3})
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = sorted(md.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])  # offset 0: from the beginning
        pending, out = set(parts), []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise AssertionError(f"no EOF on {topic} partitions {sorted(pending)} within {timeout:.0f} s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                    continue
                raise AssertionError(f"consumer error on {topic}: {msg.error()}")
            headers = {k: v for k, v in (msg.headers() or [])}
            out.append(Record(msg.partition(), msg.offset(), msg.key(), msg.value(), headers, msg.timestamp()[1]))
        return out
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4().hex}", "log_level": 3})
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions}
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (negative: none); does not join the group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def releases(bootstrap: str, params_topic: str, *, isolation: str = "read_committed") -> list[Record]:
    return read_topic(bootstrap, params_topic, isolation=isolation)


def releases_by_partition(records: list[Record]) -> dict[int, list[dict]]:
    """Release values per input partition, in publish order."""
    out: dict[int, list[dict]] = defaultdict(list)
    for rec in records:
        value = rec.json()
        out[value["partition"]].append(value)
    return out


def covered(bootstrap: str, topics: Topics, ends: dict[int, int]):
    """Predicate: every partition has a release at its end offset (the worker caught up)."""
    def check():
        latest: dict[int, int] = {}
        for rec in releases(bootstrap, topics.params):
            value = rec.json()
            latest[value["partition"]] = max(latest.get(value["partition"], -1), value["version"])
        return all(latest.get(p, -1) >= end for p, end in ends.items() if end > 0)
    return check


def assert_versions_never_go_back(records: list[Record]) -> int:
    """In topic order, every key's release versions never decrease (docs/worker.md 5.4): a repeat
    of the newest version is the only repeat allowed (its bytes are checked by
    :func:`assert_identical_duplicates`). Returns how many releases were checked."""
    newest: dict[bytes | None, tuple[int, int]] = {}
    back = []
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        version = rec.json()["version"]
        seen = newest.get(rec.key)
        if seen is not None and version < seen[0]:
            back.append(f"{rec.key!r}: version {version} at offset {rec.offset} after {seen[0]} at {seen[1]}")
        if seen is None or version > seen[0]:
            newest[rec.key] = (version, rec.offset)
    assert not back, f"{len(back)} releases older than one published before them: {back[:5]}"
    return len(records)


def assert_identical_duplicates(records: list[Record]) -> dict[tuple[str, int, int], bytes]:
    """Each (topic, partition, version) appears with one value only (duplicates byte-identical)."""
    seen: dict[tuple[str, int, int], bytes] = {}
    for rec in records:
        value = rec.json()
        ident = (value["topic"], value["partition"], value["version"])
        assert rec.key == f"{value['topic']}/{value['partition']}".encode()
        if ident in seen:
            assert seen[ident] == rec.value, f"two different releases for {ident}"
        else:
            seen[ident] = rec.value
    return seen


# --------------------------------------------------------------------------- the worker process

class WorkerProcess:
    """``python -m worker.cli run`` with OLU_* settings in the environment; logs to ``log_path``."""

    def __init__(self, env: dict[str, str], log_path: Path):
        self.env, self.log_path = env, log_path
        self.proc: subprocess.Popen | None = None
        self._log = None
        self._http_port: int | None = None

    def start(self, personality: dict[str, str] | None = None) -> WorkerProcess:
        """``personality``: environment for this run only, e.g. another OpenBLAS kernel
        (tests/reliability/personality.py)."""
        full = {k: v for k, v in os.environ.items()
                if not k.startswith(("OLU_", "AWS_")) and k != "KAFKA_BOOTSTRAP_SERVERS"}
        full.update(self.env)
        full.update(personality or {})
        self._log = open(self.log_path, "ab")
        self._offset = self.log_path.stat().st_size
        self._http_port = None
        self.proc = subprocess.Popen([sys.executable, "-m", "worker.cli", "run"], cwd=REPO, env=full,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log)
        return self

    # ---------------------------------------------------------------- logs
    def log_text(self, all_runs: bool = True) -> str:
        data = self.log_path.read_bytes()
        return data.decode("utf-8", "replace") if all_runs else data[self._offset:].decode("utf-8", "replace")

    def log_lines(self, msg: str | None = None, all_runs: bool = False) -> list[dict]:
        out = []
        for line in self.log_text(all_runs).splitlines():
            if not line.startswith("{"):
                continue  # librdkafka's own lines
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if msg is None or entry.get("msg") == msg:
                out.append(entry)
        return out

    def assigned(self) -> dict[int, dict]:
        """Partitions assigned in the current run (partition -> its ``partition assigned`` line)."""
        return {e["partition"]: e for e in self.log_lines("partition assigned")}

    # ---------------------------------------------------------------- http
    @property
    def http_port(self) -> int:
        if self._http_port is None:
            self.check_alive()
            lines = wait_for(lambda: self.log_lines("http listening"), 30, "the worker's HTTP port")
            self._http_port = int(lines[-1]["port"])
        return self._http_port

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def metrics(self) -> str:
        status, body = self.get("/metrics")
        assert status == 200
        return body

    def metric_sum(self, name: str, **labels) -> float:
        """Sum of a metric's samples (matching ``labels``) on /metrics; 0 if there are none."""
        from prometheus_client.parser import text_string_to_metric_families

        total = 0.0
        for family in text_string_to_metric_families(self.metrics()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    # ---------------------------------------------------------------- lifecycle
    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.log_text(False)[-4000:]}")

    def wait_assigned(self, partitions: set[int] | None = None, timeout: float = 60.0) -> dict[int, dict]:
        def ready():
            self.check_alive()
            got = self.assigned()
            return got if (got if partitions is None else partitions <= set(got)) else None
        return wait_for(ready, timeout, "partition assignment")

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._close_log()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()  # SIGKILL
        self.proc.wait(30)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def cleanup(self) -> None:
        """For finally blocks: make sure nothing is left running."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._close_log()


def worker_env(bootstrap: str, topics: Topics, group: str, state_url: str, **extra) -> dict[str, str]:
    env = {
        "OLU_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "OLU_GROUP_ID": group,
        "OLU_INPUT_TOPICS": topics.input,
        "OLU_PARAMS_TOPIC": topics.params,
        "OLU_DLQ_TOPIC": topics.dlq,
        # each run's own: a receipt schema registered in one format must not meet another's
        "OLU_RECEIPTS_TOPIC": f"{topics.input}.receipts",
        "OLU_DIM": str(DIM),
        "OLU_STATE_URL": state_url,
        "OLU_PRIVACY_UNIT": "all-deletions",  # run requires one; these tests were written for it
        "OLU_SNAPSHOT_KEEP": "1000",
        "OLU_SNAPSHOT_EVERY_EVENTS": "300",
        "OLU_SNAPSHOT_EVERY_SECONDS": "2",
        "OLU_RELEASE_EVERY_EVENTS": "150",
        "OLU_RELEASE_EVERY_SECONDS": "0.5",
        "OLU_BATCH_SIZE": "200",
        "OLU_HTTP_HOST": "127.0.0.1",
        "OLU_HTTP_PORT": "0",
        "OLU_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "OLU_KAFKA_HEARTBEAT_INTERVAL_MS": "500",
        "OLU_KAFKA_LOG__LEVEL": "4",
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


def settings_of(env: dict[str, str]):
    """The worker's effective settings for ``env`` (the oracle builds the same engine)."""
    return load_settings([], env, command="run")


# --------------------------------------------------------------------------- the state store

@dataclass
class Stored:
    key: str
    kind: str
    offset: int
    blob: bytes
    envelope: dict
    header: dict
    arrays: dict
    shared: dict = field(default_factory=dict)  # full snapshots: group -> arrays, from the blobs named
    shared_blobs: dict = field(default_factory=dict)  # blob key -> its bytes


def stored_model(full: Stored):
    """The engine model a full snapshot holds."""
    return load_model({"meta": full.header["model"], "arrays": full.arrays, "shared": full.shared})


def stored_objects(snapshots: SnapshotStore, topic: str, partition: int) -> list[Stored]:
    """Every full snapshot and delta (with the shared blobs each full snapshot names), by offset.

    A delta group (several deletions' deltas in one object) gives one ``Stored`` per deletion,
    each with the group object's key, bytes and envelope.
    """
    out = []
    where = snapshots.directory(topic, partition)
    for ref in snapshots.list(topic, partition):
        blob = bytes(obstore.get(snapshots.store, ref.key).bytes())
        head, arrays = decode(blob)
        if head["meta"].get("kind") == GROUP_KIND:  # either group layout (stacked or one array each)
            for offset, member, member_arrays in unpack_group(ref.offset, head["snapshot"]["layout"],
                                                              head["meta"], arrays):
                out.append(Stored(ref.key, "delta", offset, blob, head["snapshot"], member, member_arrays))
            continue
        stored = Stored(ref.key, ref.kind, ref.offset, blob, head["snapshot"], head["meta"], arrays)
        for group, blob_ref in (head.get("shared") or {}).items():
            pieces = []
            for name in blob_ref["blobs"]:
                raw = bytes(obstore.get(snapshots.store, where + name).bytes())
                stored.shared_blobs[where + name] = raw
                pieces.append(decode(raw)[1])
            stored.shared[group] = {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}
        out.append(stored)
    return out


def newest_full(snapshots: SnapshotStore, topic: str, partition: int) -> Stored:
    fulls = [s for s in stored_objects(snapshots, topic, partition) if s.kind == "full"]
    assert fulls, f"no full snapshot for {topic}/{partition}"
    return fulls[-1]


# --------------------------------------------------------------------------- the oracle

@dataclass
class Replayed:
    model: object
    inserts_applied: int = 0
    inserts_skipped: int = 0
    dead: int = 0
    noised_deletes: list[int] = field(default_factory=list)  # offsets of deletes that changed the model
    noop_deletes: list[int] = field(default_factory=list)
    from_delta: int = 0
    from_release: int = 0
    pre_noise: dict = field(default_factory=dict)  # delete offset -> pre-noise iterate (if asked)
    # offset + 1 -> (t, epoch, deletions applied, z bytes, deletions charged by the accountant) after
    # it; None while the iterate is unknown (see replay_partition's ``anchors``)
    trace: dict = field(default_factory=dict)
    z_unknown: bool = False
    gc_floor: int | None = None  # the oldest stored full snapshot's offset (replay_partition)
    unknown_spans: int = 0  # deletions whose noise no object held, resynced at an anchor


def post_states_from_releases(values: list[dict]) -> dict[int, dict]:
    """version -> the state a release shows (z, t, epoch, deletions), for :func:`replay_partition`."""
    out = {}
    for v in values:
        out[v["version"]] = {"z": np.array(v["weights"], np.float64), "t": v["t"], "epoch": v["epoch"],
                             "deletions_applied": v["deletions"]}
    return out


def post_states_from_deltas(objects: list[Stored]) -> dict[int, dict]:
    return {o.offset: {"z": o.arrays["z"], "t": o.header["t"], "epoch": o.header["epoch"],
                       "deletions": o.header["deletions"], "deletions_applied": o.header["deletions_applied"]}
            for o in objects if o.kind == "delta"}


def replay_partition(settings, records, *, deltas: dict[int, dict], released: dict[int, dict],
                     pre_noise_at: set[int] = frozenset(), anchors: dict[int, np.ndarray] | None = None,
                     gc_floor: int | None = None) -> Replayed:
    """Feed ``records`` ((offset, key, value) in offset order) to a fresh engine like the worker.

    A deletion that changes the model must find its post-noise state in ``deltas`` (keyed by
    delete offset + 1) or, for deletions whose delta was garbage-collected behind a full
    snapshot, in ``released`` (release version == delete offset + 1). Where both exist they
    must agree bit for bit. ``pre_noise_at``: delete offsets whose pre-noise iterate to record
    (computed on a copy of the model with the noise patched to zeros).

    Deletion releases are coalesced per poll batch (``OLU_DELETION_RELEASES=batch``), so a deletion
    before ``gc_floor`` (the oldest stored full snapshot) may have neither: its noise is then
    unknown, and so is the iterate until the next ``anchors`` entry (offset -> the iterate a release
    or full snapshot holds there) or the next stored deletion state; everything else (counters,
    ledger, index) stays exact, and the trace holds None over that span.
    """
    model = ALGORITHMS[settings.algorithm](**settings.model_kwargs())
    out = Replayed(model)
    used: set[int] = set()
    out.gc_floor = gc_floor
    for offset, key, value in records:
        _apply(model, settings, out, used, offset, key, value, deltas, released, pre_noise_at)
        if out.z_unknown and anchors is not None and offset + 1 in anchors:
            model.z = np.array(anchors[offset + 1], np.float64)
            out.z_unknown = False
        out.trace[offset + 1] = None if out.z_unknown else (
            model.t, model.epoch, model.deletions_applied, model.z.tobytes(), model.accountant.lifetime_deletions)
    unused = set(deltas) - used
    assert not unused, f"deltas that match no deletion that changed the model: {sorted(unused)}"
    return out


def _apply(model, settings, out: Replayed, used: set, offset, key, value, deltas, released, pre_noise_at) -> None:
    try:
        event = decode_event(key, value, dim=settings.dim, max_bytes=settings.max_record_bytes,
                             sparse=settings.sparse_input, labels=settings.string_labels)
    except DeadLetter:
        out.dead += 1
        return
    if isinstance(event, Insert):
        subject = _subject_key(key)  # the Kafka key: the subject the worker maps the record to
        try:
            if settings.sparse_input:  # one row of learn_many: the sparse step, as the worker takes it
                applied = model.learn_many([event.id], SparseRows.from_rows([event.x]), [event.y],
                                           subjects=[subject])
            else:
                applied = model.learn_one(event.id, event.x, event.y, subject=subject)
        except InvalidExample:
            out.dead += 1
            return
        out.inserts_applied += applied
        out.inserts_skipped += not applied
        return
    ids, keys = list(event.ids), None
    if event.subject is not None:  # forget the subject: every record the model learned under its key
        if not model.forgets_by_key:
            out.dead += 1  # forget_by_key_off
            return
        keys = model.subject_records(record_key(event.subject)).tolist()
        if not keys:
            out.noop_deletes.append(offset)
            return
        ids = [f"{k:016x}" for k in keys]
    after = offset + 1
    delta, release = deltas.get(after), released.get(after)
    if delta is not None and release is not None:
        assert np.asarray(delta["z"]).tobytes() == np.asarray(release["z"]).tobytes(), \
            f"delta and release at {after} differ"
        assert (delta["t"], delta["epoch"], delta["deletions_applied"]) == \
            (release["t"], release["epoch"], release["deletions_applied"])
    if offset in pre_noise_at:  # the iterate the noise is added to, on a throw-away copy
        twin = load_model(model.export_state())
        twin._noise = lambda sigma, d=model.dim: np.zeros(d)
        twin.unlearn_request(ids, keys=keys)
        out.pre_noise[offset] = twin.z.copy()
    post = delta if delta is not None else release
    try:
        deletion = model.unlearn_request(ids, post_state=post, keys=keys)
    except BudgetExhausted:  # refused (on_budget=refuse): the worker dead-letters it, the model is unchanged
        assert delta is None and release is None, f"a refused deletion at offset {offset} has a stored state"
        out.dead += 1
        return
    if deletion.changed_model:
        if post is None and out.gc_floor is not None and after <= out.gc_floor:
            out.z_unknown = True  # garbage-collected and released only after later deletions
            out.unknown_spans += 1
            out.noised_deletes.append(offset)
            return
        assert post is not None, (f"deletion at offset {offset} changed the model but neither a delta "
                                  f"nor a release holds its post-noise state")
        out.z_unknown = False
        out.noised_deletes.append(offset)
        out.from_delta += delta is not None
        out.from_release += delta is None
        used.add(after)
    else:
        assert delta is None, f"a delta exists for the no-op deletion at offset {offset}"
        out.noop_deletes.append(offset)


def _subject_key(key: bytes | None) -> int:
    """The 64-bit key of a record's subject, as the worker hashes a Kafka key (its bytes)."""
    return int(partitioning_keys([Message(key=key)])[0])


def input_by_partition(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes, bytes]]]:
    out: dict[int, list] = defaultdict(list)
    for rec in read_topic(bootstrap, topic):
        out[rec.partition].append((rec.offset, rec.key, rec.value))
    return out


def assert_same_state(model, full: Stored) -> None:
    """The oracle's model equals the worker's snapshot: every meta field and every array, bit for bit."""
    state = model.export_state()
    mine = orjson.loads(orjson.dumps(state["meta"], option=orjson.OPT_SERIALIZE_NUMPY))
    assert mine == full.header["model"]
    mine_arrays = {**state["arrays"], **{f"{g}/{k}": a for g, arrs in state["shared"].items() for k, a in arrs.items()}}
    theirs_arrays = {**full.arrays, **{f"{g}/{k}": a for g, arrs in full.shared.items() for k, a in arrs.items()}}
    assert set(mine_arrays) == set(theirs_arrays)
    for name, arr in mine_arrays.items():
        theirs = theirs_arrays[name]
        assert arr.dtype == theirs.dtype and arr.shape == theirs.shape, name
        assert np.asarray(arr).tobytes() == theirs.tobytes(), f"array {name} differs"


def oracle_replay(settings, records, objects: list, release_values: list[dict], *,
                  pre_noise_at: set[int] = frozenset()) -> Replayed:
    """:func:`replay_partition` over one partition's ``records`` with what the worker stored
    (``objects``: :func:`stored_objects`) and published (``release_values``: parsed releases):
    the post-noise states of deltas and releases, and the releases and full snapshots as anchors
    over deletions whose noise no object holds any more."""
    fulls = [o for o in objects if o.kind == "full"]
    anchors = {v["version"]: v["weights"] for v in release_values}
    anchors.update({o.offset: o.arrays["z"] for o in fulls})
    return replay_partition(settings, records, deltas=post_states_from_deltas(objects),
                            released=post_states_from_releases(release_values), pre_noise_at=pre_noise_at,
                            anchors=anchors, gc_floor=min((o.offset for o in fulls), default=None))


def verify_against_oracle(bootstrap: str, topics: Topics, snapshots: SnapshotStore, env: dict[str, str],
                          release_records: list[Record]) -> dict[int, Replayed]:
    """Replay every partition in process; compare with every release and stored object of the worker.

    Every release and every full snapshot and delta must equal the oracle's state at its offset
    bit for bit; the final snapshot (at the end of the input) must equal the oracle's whole model
    state (iterate, counters, ledger, accountant, applied index, tombstones).
    """
    settings = settings_of(env)
    inputs = input_by_partition(bootstrap, topics.input)
    by_part = releases_by_partition(release_records)
    results = {}
    for p in range(topics.partitions):
        objects = stored_objects(snapshots, topics.input, p)
        replayed = oracle_replay(settings, inputs.get(p, []), objects, by_part.get(p, []))
        gc_floor = replayed.gc_floor
        trace = replayed.trace
        for v in by_part.get(p, []):
            if trace[v["version"]] is None:  # the anchor that ends an unknown span (the iterate is its own)
                assert gc_floor is not None and v["version"] <= gc_floor
                continue
            t, epoch, deletions, z, _ = trace[v["version"]]
            assert (v["t"], v["epoch"], v["deletions"]) == (t, epoch, deletions), f"release {p}@{v['version']}"
            assert np.array(v["weights"], np.float64).tobytes() == z, f"release {p}@{v['version']} weights"
        for o in objects:
            t, epoch, deletions, z, charged = trace[o.offset]
            assert o.arrays["z"].tobytes() == z, f"{o.kind} {p}@{o.offset} iterate"
            if o.kind == "full":
                assert (o.header["model"]["t"], o.header["model"]["epoch"]) == (t, epoch)
            else:
                assert (o.header["t"], o.header["epoch"], o.header["deletions_applied"], o.header["deletions"]) == \
                    (t, epoch, deletions, charged)
        full = [o for o in objects if o.kind == "full"][-1]
        end = inputs[p][-1][0] + 1 if inputs.get(p) else 0
        assert full.offset == end, f"partition {p}: final snapshot at {full.offset}, input ends at {end}"
        assert_same_state(replayed.model, full)
        last = max(by_part[p], key=lambda v: v["version"])
        assert last["version"] == end
        results[p] = replayed
    return results


# --------------------------------------------------------------------------- state on S3

def worker_on_s3(bootstrap: str, kafka_topic, s3_server, name: str, *, root: Path, partitions: int = 1,
                 stoppable: bool = True, **extra) -> KafkaRun:
    """A :class:`KafkaRun` (workers' logs under ``root``) with its state on the S3 server: topics, a
    fresh group, the workers' env and a reader of that state. Its workers are the caller's to kill
    (:meth:`KafkaRun.cleanup`; the ``s3_kafka_run`` fixture of tests/stream/conftest.py does it).

    ``stoppable``: the test stops and restarts the server, so it must be the local SeaweedFS (an
    external server is skipped); either way an earlier test may have left it stopped or paused.
    """
    from tests.fixtures.s3 import make_s3_store
    from worker.devtools.s3_local import SeaweedS3

    local = isinstance(s3_server, SeaweedS3)
    if stoppable and not local:
        import pytest

        pytest.skip("needs the local SeaweedFS server (stopped and restarted by this test)")
    if local:
        s3_server.resume()
        s3_server.start()
    def on_s3(group: str) -> tuple[str, SnapshotStore]:
        prefix = f"tests/{group}"
        return (f"s3://{s3_server.bucket}/{prefix}",
                SnapshotStore(make_s3_store(s3_server, prefix=prefix), prefix="olu", group=group))

    return start_run(bootstrap, kafka_topic, root, name, partitions=partitions, state=on_s3,
                     **s3_server.env(), **extra)


# --------------------------------------------------------------------------- one test's run

@dataclass
class KafkaRun:
    """One test's run against the real broker: its topics, a fresh group, the workers' env and a
    reader of their state. The ``kafka_run`` fixture (tests/stream/conftest.py) makes them and
    kills whatever worker a failing test left running."""

    bootstrap: str
    topics: Topics
    group: str
    env: dict[str, str]
    snapshots: SnapshotStore
    root: Path
    workers: list[WorkerProcess] = field(default_factory=list)

    def worker(self, log_name: str = "worker.log", **extra) -> WorkerProcess:
        """A worker of this run (not started); ``extra`` settings override the run's for it only."""
        process = WorkerProcess({**self.env, **{k: str(v) for k, v in extra.items()}},
                                self.root / log_name)
        self.workers.append(process)
        return process

    def produce(self, records) -> list[Produced]:
        return produce(self.bootstrap, self.topics.input, records)

    def end_offsets(self) -> dict[int, int]:
        return end_offsets(self.bootstrap, self.topics.input)

    def releases(self) -> list[Record]:
        return releases(self.bootstrap, self.topics.params)

    def wait_covered(self, ends: dict[int, int] | None = None, timeout: float = 60.0,
                     what: str = "releases up to the end of the input") -> None:
        wait_for(covered(self.bootstrap, self.topics, self.end_offsets() if ends is None else ends),
                 timeout, what, interval=0.3)

    def verify(self, records: list[Record] | None = None) -> dict[int, Replayed]:
        """:func:`verify_against_oracle` over this run's releases (or ``records``)."""
        return verify_against_oracle(self.bootstrap, self.topics, self.snapshots, self.env,
                                     self.releases() if records is None else records)

    def cleanup(self) -> None:
        for process in self.workers:
            process.cleanup()


def start_run(bootstrap: str, kafka_topic, root: Path, name: str, *, partitions: int = 1,
              state=None, **settings) -> KafkaRun:
    """Topics from ``kafka_topic``, group ``name-<random>``, logs under ``root``; the state where
    ``state(group)`` says (its URL and a reader of it), files under ``root`` by default."""
    topics = topics_for(kafka_topic, partitions=partitions)
    group = f"{name}-{uuid.uuid4().hex[:8]}"
    root.mkdir(parents=True, exist_ok=True)
    state_url, snapshots = (state or (lambda g: _on_files(root, g)))(group)
    env = worker_env(bootstrap, topics, group, state_url, **settings)
    return KafkaRun(bootstrap, topics, group, env, snapshots, root)


def _on_files(root: Path, group: str) -> tuple[str, SnapshotStore]:
    url = f"file://{root}/state"
    return url, SnapshotStore(open_store(url), prefix="olu", group=group)


def latest_version(bootstrap: str, topics: Topics) -> int:
    """The highest release version on the params topic (any partition); -1 if none."""
    return max((r.json()["version"] for r in releases(bootstrap, topics.params)), default=-1)


def latest_versions(bootstrap: str, topics: Topics) -> dict[int, int]:
    """The highest release version per input partition (-1 where none)."""
    out = {p: -1 for p in range(topics.partitions)}
    for rec in releases(bootstrap, topics.params):
        value = rec.json()
        out[value["partition"]] = max(out[value["partition"]], value["version"])
    return out


# --------------------------------------------------------------------------- expectations from the input alone

def model_changing_deletes(settings, records) -> list[int]:
    """Offsets of the deletes in ``records`` ((offset, key, value), one partition, offset order)
    that must change the model: a deletion request naming an id, not deleted before, whose insert
    was applied before it.

    Worked out from the input alone (not from the engine), so it checks that every delete was
    honoured: an insert is applied unless it fails decoding or its id was deleted earlier; a
    second delete of an id is a no-op, and so is a delete of an id never inserted. A request
    naming several ids changes the model once if any of them does.
    """
    applied: set[str] = set()
    deleted: set[str] = set()
    out = []
    for offset, key, value in records:
        try:
            event = decode_event(key, value, dim=settings.dim, max_bytes=settings.max_record_bytes,
                                 labels=settings.string_labels)
        except DeadLetter:
            continue
        if isinstance(event, Insert):
            if event.id not in deleted:
                applied.add(event.id)
            continue
        fresh = [rid for rid in event.ids if rid not in deleted]
        deleted.update(fresh)
        if any(rid in applied for rid in fresh):
            applied.difference_update(fresh)
            out.append(offset)
    return out


def assert_deletes_honoured(settings, inputs: dict[int, list], results: dict[int, Replayed]) -> int:
    """Every delete of an applied record changed the model once, and its id is gone from the
    final state's applied index and is in its tombstones; returns how many deletes that is."""
    from worker.olu import record_key

    total = 0
    for p, records in inputs.items():
        expected = model_changing_deletes(settings, records)
        replayed = results[p]
        assert replayed.noised_deletes == expected, f"partition {p}: deletes honoured differ from the input's"
        applied = set(replayed.model.index.to_arrays()["applied_keys"].tolist())
        tombstones = replayed.model.tombstones
        ids = {rid for offset, key, value in records if offset in set(expected)
               for rid in decode_event(key, value, dim=settings.dim, max_bytes=settings.max_record_bytes,
                                       labels=settings.string_labels).ids}
        for rid in ids:
            k = record_key(rid)
            assert k not in applied, f"partition {p}: deleted record still in the applied index"
            assert k in tombstones, f"partition {p}: deleted record has no tombstone"
        total += len(expected)
    return total


def assert_ledger_continuous(results: dict[int, Replayed]) -> None:
    """Invariant 4: one ledger entry per deletion that changed the model, numbered 1..k in order,
    and the accountant's lifetime counter at k (a reset counter would restart the numbering)."""
    for p, replayed in results.items():
        model = replayed.model
        k = len(replayed.noised_deletes)
        assert [e["i"] for e in model.ledger] == list(range(1, k + 1)), f"partition {p}: ledger numbering"
        assert model.accountant.lifetime_deletions == k, f"partition {p}: deletion counter"
        taus = [e["tau"] for e in model.ledger]
        assert taus == sorted(taus), f"partition {p}: ledger out of order"


def _created_at_ms(stored: Stored) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(stored.envelope["created_at"]).timestamp() * 1000)


def assert_deltas_precede_releases(snapshots: SnapshotStore, topics: Topics, records: list[Record]) -> int:
    """Invariant 2 in time: every deletion release (trigger ``deletion``) was handed to the producer
    after the delta holding its post-noise state had been created (the delta's ``created_at`` is
    taken before its PUT, the release's CreateTime at ``produce``). Deltas garbage-collected
    behind a full snapshot cannot be checked; returns how many releases were."""
    deltas: dict[tuple[int, int], int] = {}
    for p in range(topics.partitions):
        for o in stored_objects(snapshots, topics.input, p):
            if o.kind == "delta":
                deltas[(p, o.offset)] = _created_at_ms(o)
    checked = 0
    for rec in records:
        if rec.headers.get("olu.trigger") != b"deletion":
            continue
        value = rec.json()
        created = deltas.get((value["partition"], value["version"]))
        if created is None:
            continue
        assert created <= rec.timestamp_ms, (f"release {value['partition']}@{value['version']} produced at "
                                             f"{rec.timestamp_ms} before its delta was created at {created}")
        checked += 1
    return checked


def verify_end_state(bootstrap: str, topics: Topics, snapshots: SnapshotStore, env: dict[str, str], group: str,
                     *, isolation: str = "read_committed") -> tuple[dict[int, Replayed], list[Record]]:
    """Everything a reliability test asserts once the worker has stopped cleanly at the end of the input.

    - nothing applied twice, nothing lost: every release, stored snapshot and delta, and the final
      state (iterate, counters, ledger, applied index, tombstones) equal the in-process replay bit
      for bit (:func:`verify_against_oracle`), and every insert was applied or skipped;
    - every delete honoured (:func:`assert_deletes_honoured`), the ledger continuous (invariant 4);
    - every published version unique or an identical duplicate, in either isolation level, and no
      release older than one published before it (:func:`assert_versions_never_go_back`);
    - invariant 2: deltas before their releases; the group offset at the final snapshot, not past it.
    Returns the replay per partition and the releases read at ``isolation``.
    """
    records = releases(bootstrap, topics.params, isolation=isolation)
    uncommitted = releases(bootstrap, topics.params, isolation="read_uncommitted")
    assert_identical_duplicates(records)
    assert_identical_duplicates(records + uncommitted)
    assert_versions_never_go_back(records)  # at read_committed: what a transactional reader sees
    assert_versions_never_go_back(uncommitted)  # and what every other reader sees
    results = verify_against_oracle(bootstrap, topics, snapshots, env, records)
    settings = settings_of(env)
    inputs = input_by_partition(bootstrap, topics.input)
    assert_deletes_honoured(settings, inputs, results)
    assert_ledger_continuous(results)
    assert assert_deltas_precede_releases(snapshots, topics, records) > 0
    committed = committed_offsets(bootstrap, group, topics.input, topics.partitions)
    for p, end in end_offsets(bootstrap, topics.input).items():
        assert newest_full(snapshots, topics.input, p).offset == end
        # A clean stop commits its final snapshot (in transactional mode inside the last
        # transaction); never anything past it.
        assert committed[p] == end, f"partition {p}: committed {committed[p]}, final snapshot at {end}"
    return results, records
