"""Shared pieces of the benches; not a bench itself.

Machine info, the command as typed at the repository root, a real Kafka broker / S3 server /
Schema Registry (started here unless the environment points at one), topic creation, worker settings, synthetic
d-dimensional insert/delete records in the wire format of schemas/insert.schema.json,
percentiles, and the options and the ending every bench shares (:func:`arguments`,
:func:`finish`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
QUICK_RESULTS = RESULTS / "quick"  # git-ignored: a smoke run never overwrites a full run's results
#: What every report has (written by :func:`finish`); each bench adds its own ``REPORT_KEYS``.
COMMON_KEYS = ("bench", "command", "date", "commit", "machine", "target_checks")
#: Set by the bench smoke test: the benches must use the servers it passes, never start their own.
NO_OWN_SERVERS = "OLU_TEST_NO_OWN_SERVERS"  # OLU_TEST_*: reserved for tests, ignored by the worker


# --------------------------------------------------------------------------- facts about the run
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def loadavg() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def machine() -> dict:
    """Platform, CPU, interpreter and library versions, and the load average at start."""
    import confluent_kafka
    import orjson

    info = {
        "platform": platform.platform(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": sys.version.split()[0], "numpy": np.__version__,
        "confluent_kafka": confluent_kafka.version()[0], "librdkafka": confluent_kafka.libversion()[0],
        "orjson": orjson.__version__,
    }
    for name, dist in (("numba", "numba"), ("obstore", "obstore"), ("river", "river"),
                       ("scikit_learn", "scikit-learn")):
        try:  # the installed distribution's version: no import (scikit-learn's takes seconds)
            info[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            info[name] = None
    info["loadavg_at_start"] = loadavg()
    return info


def machine_line(info: dict) -> str:
    load = info.get("loadavg_at_start")
    return (f"machine: {info['cpu']} ({info['cpus_usable']} usable of {info['cpu_count']} cpus), "
            f"{info['platform']}, python {info['python']}, numpy {info['numpy']}, "
            f"confluent-kafka {info['confluent_kafka']} (librdkafka {info['librdkafka']})"
            + (f", load average {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}" if load else ""))


def command(argv: list[str] | None = None) -> str:
    """This run's command as typed at the repository root (``python bench/x.py --quick``): the
    interpreter is "python", paths under the repository are relative and paths under the home
    directory start with ``~``, so no report names one machine's directories."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve() if argv else None
    if script is not None and script.is_file() and script.is_relative_to(ROOT):
        argv[0] = str(script.relative_to(ROOT))  # the same whatever directory it was run from
    return " ".join(shlex.quote(portable_path(a)) for a in ["python", *argv])


def portable_path(text: str) -> str:
    """``text`` with the repository root and the home directory taken out of any path in it."""
    root, home = str(ROOT), str(Path.home())
    text = text.replace(root + "/", "").replace("=" + root, "=.")
    if text == root:
        return "."
    return text.replace(home + "/", "~/") if home not in ("/", "") else text


def today() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def git_commit() -> str | None:
    """The checked-out commit (short), ``+dirty`` when tracked files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def write_json(path: Path, report: dict) -> None:
    """Strict JSON (NaN and infinities refused: a value that is not defined is written as null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=_jsonable, allow_nan=False) + "\n")
    tmp.replace(path)


def arguments(parser: argparse.ArgumentParser, argv: list[str] | None, quick: str) -> argparse.Namespace:
    """Add the options every bench has, then parse ``argv``.

    ``--quick`` (``quick`` says what it shrinks): the same code paths on small sizes, done in
    seconds. ``--out DIR``: where the JSON and the PNG go; by default ``bench/results``, or
    ``bench/results/quick`` with ``--quick``, so a smoke run never overwrites a full run's results.
    """
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {quick}")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory of the JSON and PNG (default bench/results; bench/results/quick "
                             "with --quick)")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = QUICK_RESULTS if args.quick else RESULTS
    return args


def finish(name: str, report: dict, out: Path, *, checks=None, plot: Callable[[Path], None] | None = None) -> int:
    """The end of every bench: write ``out/<name>.json``, draw ``out/<name>.png`` when the bench
    has a plot, say where they went; returns the exit status for ``sys.exit(main())``.

    The JSON gets what every report carries (``COMMON_KEYS``): the bench's name, the command as
    typed at the repository root, the date, the commit, the machine (measured here unless the
    bench did it at its start, which keeps the load average at start) with the load average at the
    end, and ``target_checks``: the results of ``checks`` (a ``_targets.Checks``), one per MET /
    NOT MET line the bench printed.
    """
    report = {"bench": name, "command": command(), "date": today(), "commit": git_commit(), **report}
    report["machine"] = {**(report.get("machine") or machine()), "loadavg_at_end": loadavg()}
    report["target_checks"] = list(checks.results) if checks is not None else []
    written = [out / f"{name}.json"]
    write_json(written[0], report)
    if plot is not None:
        written.append(out / f"{name}.png")
        plot(written[-1])
    wall = report.get("wall_s")
    print(f"\nwrote {' and '.join(map(str, written))}" + (f" ({wall:.0f} s total)" if wall else ""))
    return 0


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON-able: {type(value).__name__}")


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


def cores_layout(cores: str) -> dict:
    """Apply a bench's ``--cores`` once its servers have started: ``shared`` (every process on every
    core) or ``split`` (the broker and the S3 server on the last usable CPU, this process and
    whatever it starts on the others, as in a deployment). Returns what was done, for the report."""
    usable = sorted(os.sched_getaffinity(0))
    if cores == "shared":
        return {"cores": "shared", "cpus": usable}
    if len(usable) < 2:
        raise SystemExit("--cores split needs at least 2 usable CPUs")
    servers, rest = {usable[-1]}, set(usable[:-1])
    pinned = confine(("java", "weed"), servers)
    confine_self(rest)
    print(f"cores split: broker and S3 server ({pinned} threads) on CPU {usable[-1]}; this process (the worker "
          f"and its clients) on CPU {', '.join(map(str, sorted(rest)))}")
    return {"cores": "split", "servers_cpus": sorted(servers), "worker_cpus": sorted(rest), "server_threads": pinned}


# --------------------------------------------------------------------------- servers
def _own_server(what: str, variables: str) -> None:
    if os.environ.get(NO_OWN_SERVERS):
        raise RuntimeError(f"this bench needs {what} and {NO_OWN_SERVERS} is set: declare it in the "
                           f"script's SERVICES so that the smoke test passes {variables}")


@contextlib.contextmanager
def kafka() -> Iterator[tuple[str, str]]:
    """(bootstrap servers, where from): ``KAFKA_BOOTSTRAP_SERVERS`` if set, else our own broker."""
    if bootstrap := os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield bootstrap, "KAFKA_BOOTSTRAP_SERVERS"
        return
    _own_server("a Kafka broker", "KAFKA_BOOTSTRAP_SERVERS")
    from worker.devtools.kafka_broker import KafkaBroker

    t0 = time.perf_counter()
    with KafkaBroker(heap="1g") as broker:
        print(f"started a local Kafka {broker.version} broker at {broker.bootstrap_servers} "
              f"in {time.perf_counter() - t0:.1f} s")
        yield broker.bootstrap_servers, f"local KafkaBroker {broker.version} (worker.devtools.kafka_local)"


@contextlib.contextmanager
def s3() -> Iterator[object]:
    """An S3 server: the one ``OLU_TEST_S3_ENDPOINT`` names (with ``OLU_TEST_S3_BUCKET``,
    ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``: what the tests'
    ``s3_server`` fixture reads), else SeaweedFS on loopback started here. Its ``AWS_*`` variables
    are in ``os.environ`` meanwhile (obstore's S3Store reads them when the worker opens ``s3://``)."""
    from worker.devtools.s3_local import SeaweedS3, external_from_env

    with contextlib.ExitStack() as stack:
        server = external_from_env()
        if server is not None:
            print(f"using the S3 server at {server.endpoint} (OLU_TEST_S3_ENDPOINT), bucket {server.bucket}")
        else:
            _own_server("an S3 server", "OLU_TEST_S3_ENDPOINT and its keys")
            server = stack.enter_context(SeaweedS3())
            print(f"started SeaweedFS S3 at {server.endpoint} in {server.startup_seconds:.1f} s")
        saved = {k: os.environ.get(k) for k in os.environ if k.startswith("AWS_")}
        for k in saved:
            os.environ.pop(k, None)
        os.environ.update(server.env())
        try:
            yield server
        finally:
            for k in server.env():
                os.environ.pop(k, None)
            os.environ.update({k: v for k, v in saved.items() if v is not None})


@contextlib.contextmanager
def registry() -> Iterator[tuple[str, str]]:
    """(Schema Registry URL, where from): ``OLU_TEST_SCHEMA_REGISTRY_URL`` if set (what the tests'
    ``schema_registry_url`` fixture reads), else Apicurio Registry on loopback started here."""
    if url := os.environ.get("OLU_TEST_SCHEMA_REGISTRY_URL"):
        yield url.rstrip("/"), "OLU_TEST_SCHEMA_REGISTRY_URL"
        return
    _own_server("a Schema Registry", "OLU_TEST_SCHEMA_REGISTRY_URL")
    from worker.devtools.registry_local import SchemaRegistry

    with SchemaRegistry() as server:
        print(f"started Apicurio Registry {server.version} at {server.url} in {server.startup_seconds:.1f} s")
        yield server.url, f"local Apicurio Registry {server.version} (worker.devtools.registry_local)"


def create_topics(bootstrap: str, names: list[str], partitions: int = 1, timeout: float = 30.0,
                  config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1, config=config or {})
                                   for n in names], operation_timeout=timeout)
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
        flag = name.replace("_", "-")
        if isinstance(value, bool):  # a switch: --NAME or --no-NAME
            argv.append(f"--{flag}" if value else f"--no-{flag}")
            continue
        for one in value if isinstance(value, list) else [value]:  # --kafka KEY=VALUE repeats
            argv += [f"--{flag}", str(one)]
    return load_settings(argv, {"KAFKA_BOOTSTRAP_SERVERS": bootstrap}, command="run")


def parse_sets(items: list[str]) -> dict[str, str]:
    """``["poll_timeout=0.01", ...]`` -> ``{"poll_timeout": "0.01"}`` (validated by load_settings);
    ``kafka=KEY=VALUE`` (librdkafka pass-through) may repeat and gives a list; ``true`` and
    ``false`` are a switch's two positions (``--set sparse_input=true``)."""
    out: dict = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"--set takes NAME=VALUE, got {item!r}")
        name = name.strip().replace("-", "_")
        if name == "kafka":
            out.setdefault(name, []).append(value.strip())
        else:
            value = value.strip()
            out[name] = {"true": True, "false": False}.get(value.lower(), value)
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


def produce_all(bootstrap: str, topic: str, records: Records, plan, *, label: str = "pre-produce",
                encode: Callable[[str, int], tuple[bytes, bytes]] | None = None) -> dict:
    """Produce every planned event as fast as possible; returns counts and the rate. ``encode(op, j)``
    gives (key, value) instead of the JSON records (a registry format, say); its time is included."""
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
    if encode is None:
        ins, dele = records.insert, records.delete
    else:
        ins, dele = (lambda j: encode("i", j)), (lambda j: encode("d", j))  # records: unused (may be None)
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
