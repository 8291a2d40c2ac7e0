"""Shared pieces of the broker-backed benches (worker_throughput, delete_latency, restore_time).

Not a bench itself: machine info, the exact command, a real Kafka broker / S3 server (started here
unless the environment points at one), topic creation, worker settings, synthetic d-dimensional
insert/delete records in the wire format of schemas/insert.schema.json, percentiles and JSON output.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"


# --------------------------------------------------------------------------- facts about the run
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine() -> dict:
    """Platform, CPU, interpreter and library versions, and the load average when asked."""
    import confluent_kafka
    import orjson

    info = {
        "platform": platform.platform(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": sys.version.split()[0], "numpy": np.__version__,
        "confluent_kafka": confluent_kafka.version()[0], "librdkafka": confluent_kafka.libversion()[0],
        "orjson": orjson.__version__,
    }
    for name in ("numba", "obstore"):
        try:
            info[name] = __import__(name).__version__
        except (ImportError, AttributeError):
            info[name] = None
    info["loadavg_at_start"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    return info


def machine_line(info: dict) -> str:
    load = info.get("loadavg_at_start")
    return (f"machine: {info['cpu']} ({info['cpus_usable']} usable of {info['cpu_count']} cpus), "
            f"{info['platform']}, python {info['python']}, numpy {info['numpy']}, "
            f"confluent-kafka {info['confluent_kafka']} (librdkafka {info['librdkafka']})"
            + (f", load average {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}" if load else ""))


def command() -> str:
    return " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])


def write_json(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=_jsonable) + "\n")
    tmp.replace(path)


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON-able: {type(value).__name__}")


def met(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def percentiles(values, qs=(50, 90, 99)) -> dict:
    """p50/p90/p99 (linear interpolation), max, mean and count of ``values``; Nones when empty."""
    a = np.asarray(list(values), dtype=np.float64)
    out = {"count": int(a.size)}
    for q in qs:
        out[f"p{q}"] = float(np.percentile(a, q)) if a.size else None
    out["max"] = float(a.max()) if a.size else None
    out["mean"] = float(a.mean()) if a.size else None
    return out


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Prometheus ``histogram_quantile`` on cumulative ``(upper bound, count)`` pairs (+Inf last):
    linear interpolation inside the bucket holding the q-th observation."""
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return prev_bound  # like Prometheus: the highest finite bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


def histogram_buckets(histogram) -> tuple[list[tuple[float, float]], float, float]:
    """(cumulative buckets, sum, count) of an unlabelled prometheus_client Histogram."""
    buckets, total, count = [], 0.0, 0.0
    for metric in histogram.collect():
        for s in metric.samples:
            if s.name.endswith("_bucket"):
                buckets.append((float(s.labels["le"]), float(s.value)))
            elif s.name.endswith("_sum"):
                total = float(s.value)
            elif s.name.endswith("_count"):
                count = float(s.value)
    buckets.sort()
    return buckets, total, count


# --------------------------------------------------------------------------- CPU use
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_of(stat_path: str) -> tuple[str, float] | None:
    """(comm, user + system CPU seconds) from a /proc/<pid>[/task/<tid>]/stat file; None if gone."""
    try:
        text = Path(stat_path).read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return comm, (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime (fields 14, 15)


class CpuSampler:
    """CPU seconds used so far by named processes, and by this process's threads grouped by name.

    ``labels``: {pid: label}; processes found by command name (``java`` = the broker, ``weed`` =
    the S3 server) are added by :meth:`find`. Each :meth:`sample` appends (monotonic, {label:
    seconds}); :meth:`cores` turns a time window into average cores used per label.
    """

    THREAD_GROUPS = (("rdk:", "worker librdkafka threads"), ("olu-snapshot", "worker snapshot writer"),
                     ("olu-delta", "worker delta writer"))

    def __init__(self, labels: dict[int, str]):
        self.labels = dict(labels)
        self.samples: list[tuple[float, dict[str, float]]] = []

    def find(self, comm: str, label: str) -> None:
        for pid in _pids_named((comm,)):
            self.labels[pid] = label

    def sample(self) -> None:
        used: dict[str, float] = {}
        for pid, label in self.labels.items():
            got = _cpu_of(f"/proc/{pid}/stat")
            if got:
                used[label] = used.get(label, 0.0) + got[1]
        me = os.getpid()
        names = {t.native_id: t.name for t in threading.enumerate()}  # Python does not set comm
        for task in Path(f"/proc/{me}/task").iterdir():
            got = _cpu_of(str(task / "stat"))
            if not got:
                continue
            name = names.get(int(task.name), got[0])
            group = next((g for prefix, g in self.THREAD_GROUPS if name.startswith(prefix)),
                         "worker loop thread" if int(task.name) == me else "worker other threads")
            used[group] = used.get(group, 0.0) + got[1]
        self.samples.append((time.monotonic(), used))

    def cores(self, spans: list[tuple[float, float]]) -> dict[str, float]:
        """Average cores per label over the sampling intervals that fall inside ``spans``."""
        total: dict[str, float] = {}
        seconds = 0.0
        for (ta, a), (tb, b) in zip(self.samples, self.samples[1:]):
            if any(lo <= ta and tb <= hi for lo, hi in spans):
                seconds += tb - ta
                for label in b:
                    total[label] = total.get(label, 0.0) + b[label] - a.get(label, b[label])
        return {label: used / seconds for label, used in sorted(total.items())} if seconds else {}


def _pids_named(comms: tuple[str, ...]) -> list[int]:
    """The processes whose command name (``/proc/<pid>/stat``'s comm) is in ``comms``."""
    return [int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat")
            if (got := _cpu_of(str(stat))) and got[0] in comms]


def _pin_threads(pid: int, cpus: set[int]) -> int:
    """Pin every thread of ``pid`` to ``cpus``; returns how many were pinned."""
    pinned = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that has just exited
            os.sched_setaffinity(int(task.name), cpus)
            pinned += 1
    return pinned


def confine(comms: tuple[str, ...], cpus: set[int]) -> int:
    """Pin every thread of every process whose command name is in ``comms`` to ``cpus`` (Linux);
    returns the number of threads pinned. Threads started later inherit it from their creator."""
    return sum(_pin_threads(pid, cpus) for pid in _pids_named(comms))


def confine_self(cpus: set[int]) -> None:
    """Pin every thread of this process to ``cpus``; processes and threads it starts inherit it."""
    _pin_threads(os.getpid(), cpus)


# --------------------------------------------------------------------------- servers
@contextlib.contextmanager
def kafka() -> Iterator[tuple[str, str]]:
    """(bootstrap servers, where from): ``KAFKA_BOOTSTRAP_SERVERS`` if set, else our own broker."""
    if bootstrap := os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield bootstrap, "KAFKA_BOOTSTRAP_SERVERS"
        return
    from worker.devtools.kafka_local import KafkaBroker

    t0 = time.perf_counter()
    with KafkaBroker(heap="1g") as broker:
        print(f"started a local Kafka {broker.version} broker at {broker.bootstrap_servers} "
              f"in {time.perf_counter() - t0:.1f} s")
        yield broker.bootstrap_servers, f"local KafkaBroker {broker.version} (worker.devtools.kafka_local)"


@contextlib.contextmanager
def s3() -> Iterator[object]:
    """A SeaweedFS S3 server on loopback; its ``AWS_*`` variables are in ``os.environ`` meanwhile
    (obstore's S3Store reads them when the worker opens ``s3://``)."""
    from worker.devtools.s3_local import SeaweedS3

    saved = {k: os.environ.get(k) for k in os.environ if k.startswith("AWS_")}
    with SeaweedS3() as server:
        print(f"started SeaweedFS S3 at {server.endpoint} in {server.startup_seconds:.1f} s")
        for k in saved:
            os.environ.pop(k, None)
        os.environ.update(server.env())
        try:
            yield server
        finally:
            for k in server.env():
                os.environ.pop(k, None)
            os.environ.update({k: v for k, v in saved.items() if v is not None})


def create_topics(bootstrap: str, names: list[str], partitions: int = 1, timeout: float = 30.0) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names],
                                  operation_timeout=timeout)
    for f in futures.values():
        f.result(timeout)
    end = time.monotonic() + timeout
    while time.monotonic() < end:  # metadata: every partition has a leader
        md = admin.list_topics(timeout=5)
        if all(n in md.topics and md.topics[n].error is None and len(md.topics[n].partitions) == partitions
               and all(p.leader >= 0 for p in md.topics[n].partitions.values()) for n in names):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topics {names} not ready after {timeout} s")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def worker_settings(bootstrap: str, *, topic: str, params: str, dlq: str, group: str, state_url: str,
                    dim: int = 10, **extra):
    """Worker settings through the real loader (hermetic: no ``OLU_*`` from our environment).

    ``extra`` maps setting names to values (``release_every_events=10000``, ...).
    """
    from worker.config import load_settings

    argv = ["--dim", str(dim), "--input-topics", topic, "--params-topic", params, "--dlq-topic", dlq,
            "--group-id", group, "--state-url", state_url]
    for name, value in extra.items():
        for one in value if isinstance(value, list) else [value]:  # --kafka KEY=VALUE repeats
            argv += [f"--{name.replace('_', '-')}", str(one)]
    return load_settings(argv, {"KAFKA_BOOTSTRAP_SERVERS": bootstrap}, command="run")


def parse_sets(items: list[str]) -> dict[str, str]:
    """``["poll_timeout=0.01", ...]`` -> ``{"poll_timeout": "0.01"}`` (validated by load_settings);
    ``kafka=KEY=VALUE`` (librdkafka pass-through) may repeat and gives a list."""
    out: dict = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"--set takes NAME=VALUE, got {item!r}")
        name = name.strip().replace("-", "_")
        if name == "kafka":
            out.setdefault(name, []).append(value.strip())
        else:
            out[name] = value.strip()
    return out


# --------------------------------------------------------------------------- records
class Records:
    """Synthetic logistic records (d features, ||x|| <= 1, labels in {-1, 1} from a noisy linear
    rule) serialised once into a pool of ``x`` JSON fragments; values are assembled from the pool.

    Values are the exact wire format of schemas/insert.schema.json / delete.schema.json
    (``{"op":"insert","id":...,"x":[...],"y":...}``, keys = the id as UTF-8), as orjson writes them
    (features at full double precision).
    """

    def __init__(self, dim: int = 10, pool: int = 65_536, seed: int = 0):
        import orjson

        rng = np.random.default_rng(seed)
        X = rng.normal(size=(pool, dim))
        X *= (rng.random(pool) / np.linalg.norm(X, axis=1))[:, None]
        w = rng.normal(size=dim) * 4.0
        y = np.where(X @ w + 0.5 * rng.normal(size=pool) > 0, 1, -1)
        self.dim, self.pool = dim, pool
        self.x_json = [orjson.dumps(row) for row in X.tolist()]
        self.y = [int(v) for v in y]
        # The same values as arrays, for in-memory runs on the very events that went to the broker
        # (orjson writes the shortest round-trip form of each double, so decoding gives them back).
        self.X, self.labels = X, y.astype(np.float64)

    def arrays(self, plan) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(ids, X, y) of the inserts of ``plan`` (see :func:`stream_plan`), in stream order."""
        js = np.fromiter((j for op, j in plan if op == "i"), np.int64)
        k = js % self.pool
        return [f"r-{j}" for j in js.tolist()], self.X[k], self.labels[k]

    def insert(self, j: int) -> tuple[bytes, bytes]:
        rid = b"r-%d" % j
        k = j % self.pool
        return rid, b'{"op":"insert","id":"%s","x":%s,"y":%d}' % (rid, self.x_json[k], self.y[k])

    @staticmethod
    def delete(j: int) -> tuple[bytes, bytes]:
        rid = b"r-%d" % j
        return rid, b'{"op":"delete","id":"%s"}' % rid


def stream_plan(n: int, delete_frac: float, seed: int = 0) -> list[tuple[str, int]]:
    """``n`` events in order: ("i", j) inserts of r-j and ("d", j) deletes of an earlier,
    not yet deleted r-j (so every delete hits an applied record), about ``delete_frac`` of them."""
    rng = np.random.default_rng(seed + 1)
    is_delete = rng.random(n) < delete_frac
    plan: list[tuple[str, int]] = []
    inserted = 0
    deleted: set[int] = set()
    for k in range(n):
        if is_delete[k] and inserted > 10:
            for _ in range(8):
                j = int(rng.integers(inserted))
                if j not in deleted:
                    deleted.add(j)
                    plan.append(("d", j))
                    break
            else:
                plan.append(("i", inserted))
                inserted += 1
        else:
            plan.append(("i", inserted))
            inserted += 1
    return plan


def produce_all(bootstrap: str, topic: str, records: Records, plan, *, label: str = "pre-produce") -> dict:
    """Produce every planned event as fast as possible; returns counts and the rate."""
    from confluent_kafka import Producer

    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10_000,
                         "batch.size": 4_000_000, "queue.buffering.max.messages": 2_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, "acks": "all", "enable.idempotence": True,
                         "compression.type": "none"})
    produce = producer.produce
    ins, dele = records.insert, records.delete
    nbytes = 0
    t0 = time.perf_counter()
    for n, (op, j) in enumerate(plan):
        key, value = ins(j) if op == "i" else dele(j)
        nbytes += len(key) + len(value)
        while True:
            try:
                produce(topic, value, key, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if n % 20_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    seconds = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"{label}: {left} undelivered, {len(errors)} errors (first: {errors[:1]})")
    n = len(plan)
    deletes = sum(1 for op, _ in plan if op == "d")
    print(f"{label}: {n:,} events ({deletes:,} deletes, {nbytes / n:.0f} B/record) in {seconds:.1f} s "
          f"= {n / seconds:,.0f} events/s")
    return {"events": n, "deletes": deletes, "bytes": nbytes, "bytes_per_record": nbytes / n,
            "seconds": seconds, "events_per_s": n / seconds}


def plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot
