"""Delete-to-release latency under a steady insert load, state on a real S3 server (not a test).

    .venv/bin/python bench/delete_latency.py [--rate 50000] [--duration 30] [--delete-every-ms 20] [--quick] [--out DIR]

Pieces, all on loopback (a local Kafka broker unless ``KAFKA_BOOTSTRAP_SERVERS`` is set, and a
SeaweedFS S3 server from worker.devtools.s3_local unless ``OLU_TEST_S3_ENDPOINT`` names one):

- the worker, in this process's main thread: ``Worker(settings, metrics).run()``, state on
  ``s3://`` (so each deletion's delta object is PUT to the S3 server before its release is handed
  to the producer: the deletion is durable first), release_every_events 10000,
  snapshot_every_events 200000, everything else at its default;
- a paced producer, by default in its own process (``--producer thread`` runs the same loop as a
  thread of the worker's process instead; it then competes with the worker for the GIL and the
  worker falls behind: an artefact of the bench, not of a deployment): once the worker has its
  partition (so no backlog builds up during the group join), d = 10 logistic inserts
  (schemas/insert.schema.json) paced by a token bucket at ``--rate`` events/s (default 50,000);
  after ``--warmup`` seconds (2), also a delete of an earlier (hence applied) record every
  ``--delete-every-ms`` (20 ms) for ``--duration`` seconds (30). Producer settings: acks=all,
  idempotent, linger.ms ``--linger-ms`` (5, librdkafka's default). The delete's produce time is
  ``time.monotonic()`` right before its ``produce()`` call; its offset comes from the delivery
  report;
- an observer *process* (so its timestamps do not wait for this process's GIL): a
  ``read_committed`` consumer of the params topic stamping ``time.monotonic()`` (one system-wide
  clock) on every release as it is received.

Two latencies per deletion:

- end to end: (first release received with version >= delete offset + 1, i.e. the first release
  that reflects the deletion; normally the deletion's own release) minus (the delete's produce
  time). It includes the producer's linger, the broker, the worker's queueing behind the inserts
  already fetched, the unlearning, the delta PUT to S3, the release's produce/ack and the fetch by
  a downstream read_committed consumer;
- worker: ``olu_delete_to_release_seconds``, the worker's own histogram (handling of the delete to
  the delivery report of its release). The exact observed values are captured by a Metrics
  subclass; the histogram's Prometheus-style quantile estimates are reported next to them.

Also reported: achieved insert rate, the worker's lag behind the producer (sampled every 100 ms;
when it grows, end-to-end latency is queueing), delta PUT durations, full-snapshot durations (a
full snapshot blocks the loop, and deletes that arrive meanwhile wait) and how many deletions were
in flight during one, and the average CPU cores each piece used (broker, S3 server, producer,
observer, and the worker's threads by role), while a full snapshot was being written and otherwise.
``--set NAME=VALUE`` overrides a worker setting (e.g. ``poll_timeout``, ``batch_size``; ``kafka=KEY=VALUE``
repeats for librdkafka keys) to try a change without editing anything. ``--cores split`` pins the
broker and the S3 server to the last CPU and this process (worker, producer, observer) to the
others: the servers on their own cores, as in a deployment; ``shared`` (the default) lets every
process run anywhere. The PNG has the latency histogram, the CDFs, and latency and lag over time
with the full snapshots shaded.

Target (issue): end-to-end p99 <= 50 ms at 50,000 inserts/s with the deletion durable on S3.

Writes ``delete_latency.json`` and ``.png`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import bisect  # noqa: E402
import gc  # noqa: E402
import multiprocessing as mp  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import numpy as np  # noqa: E402
from _targets import DELETE_TO_RELEASE_P99_S, Checks  # noqa: E402

TARGET_P99_S = DELETE_TO_RELEASE_P99_S.threshold
SLOW_ROUND_S = 0.025  # loop rounds longer than this are kept with their breakdown
RELEASE_EVERY = 10_000
SNAPSHOT_EVERY = 200_000
REPORT_KEYS = ("broker", "s3", "config", "counts", "end_to_end_s", "worker_histogram_exact_s",
               "worker_histogram_prometheus", "delta_put_s", "worker_lag_events", "full_snapshots", "over_50ms",
               "delete_produce_to_ack_s", "loop_stalls", "cpu_cores", "end_to_end_samples_s", "targets", "wall_s")
SERVICES = ("kafka", "s3")


# --------------------------------------------------------------------------- observer process
def observe_releases(bootstrap: str, params: str, ready, stop, conn) -> None:
    """Runs in its own process: (received monotonic time, version, trigger) of every release."""
    import orjson
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-observer-{os.getpid()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, "log_level": 3})
    consumer.assign([TopicPartition(params, 0, OFFSET_BEGINNING)])
    seen = []
    consumer.poll(0.5)  # connect and fetch once before saying ready
    ready.set()
    try:
        while not stop.is_set():
            # poll(), not consume(n, timeout): consume waits for n messages or the timeout, which
            # would add up to the timeout to every timestamp at a few releases per second.
            m = consumer.poll(0.05)
            if m is None or m.error():
                continue
            now = time.monotonic()
            trigger = dict(m.headers() or ()).get("olu.trigger", b"").decode()
            seen.append((now, int(orjson.loads(m.value())["version"]), trigger))
    finally:
        consumer.close()
        conn.send(seen)
        conn.close()


# --------------------------------------------------------------------------- paced producer
def paced_producer(bootstrap: str, topic: str, cfg: dict, consuming, produced, conn) -> None:
    """Token-bucket producer (run as a thread or as a process). Once ``consuming`` is set (the
    worker has its partition), inserts at ``cfg['rate']``/s; after ``cfg['warmup']`` s, also a
    delete of an earlier record every ``cfg['delete_every']`` s, for ``cfg['duration']`` s.
    ``produced`` (a shared integer) counts the events produced so far; at the end a dict of results
    goes through ``conn``."""
    from confluent_kafka import Producer

    out = {"deletes": {}, "offsets": {}, "acked": {}, "inserts": 0, "errors": [], "window": None, "failed": None}
    try:
        rate, delete_every = cfg["rate"], cfg["delete_every"]
        records = h.Records(dim=10, seed=cfg["seed"])
        rng = np.random.default_rng(cfg["seed"] + 7)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": cfg["linger_ms"], "queue.buffering.max.messages": 1_000_000,
                             "log_level": 3})
        produce, insert, delete = producer.produce, records.insert, records.delete
        burst = max(1.0, rate * 0.05)  # up to 50 ms of events at once (catch up after a stall)
        deletes, offsets, acked, errors = out["deletes"], out["offsets"], out["acked"], out["errors"]

        def on_delete(j):
            def delivered(err, msg):
                if err is not None:
                    errors.append(str(err))
                else:
                    offsets[j] = msg.offset()
                    acked[j] = time.monotonic()  # the broker has it (acks=all); served by poll(0) below
            return delivered

        def on_insert(err, _msg):
            if err is not None:
                errors.append(str(err))

        inserts = 0
        if not consuming.wait(120):  # no backlog: start once the worker has its partition
            raise TimeoutError("the worker was not assigned its partition within 120 s")
        tokens, last = 0.0, time.monotonic()
        phase_start = last + cfg["warmup"]
        next_delete, end = phase_start, phase_start + cfg["duration"]
        window = None
        while True:
            now = time.monotonic()
            if now >= end:
                break
            tokens = min(burst, tokens + (now - last) * rate)
            last = now
            while tokens >= 1.0:
                key, value = insert(inserts)
                try:
                    produce(topic, value, key, on_delivery=on_insert)
                except BufferError:
                    producer.poll(0.001)
                    break
                inserts += 1
                tokens -= 1.0
            if now >= next_delete and inserts > 100:
                while True:
                    j = int(rng.integers(inserts))
                    if j not in deletes:
                        break
                key, value = delete(j)
                t = time.monotonic()
                produce(topic, value, key, on_delivery=on_delete(j))
                deletes[j] = t
                window = (t, inserts) if window is None else window
                out["window"] = (*window, t, inserts)
                next_delete += delete_every
            produced.value = inserts + len(deletes)
            producer.poll(0)
            if tokens < 1.0:
                time.sleep(max(0.0, min(0.0005, (1.0 - tokens) / rate)))
        left = producer.flush(30)
        if left:
            errors.append(f"{left} records undelivered at the end")
        out["inserts"] = inserts
        produced.value = inserts + len(deletes)
    except BaseException as exc:  # reported by the main process
        out["failed"] = repr(exc)
    finally:
        conn.send(out)
        conn.close()


# --------------------------------------------------------------------------- report helpers
def match(deletes: dict[int, float], offsets: dict[int, int], releases: list) -> tuple[list, int, int]:
    """([(produce time, end-to-end latency s)] by produce time, exact matches (a deletion release
    at offset + 1), unmatched)."""
    releases = sorted(releases, key=lambda r: (r[1], r[0]))
    versions = [r[1] for r in releases]
    out, exact, unmatched = [], 0, 0
    for j, produced_at in deletes.items():
        off = offsets.get(j)
        if off is None:
            unmatched += 1
            continue
        i = bisect.bisect_left(versions, off + 1)
        if i == len(versions):
            unmatched += 1
            continue
        out.append((produced_at, releases[i][0] - produced_at))
        if versions[i] == off + 1 and releases[i][2] == "deletion":
            exact += 1
    out.sort()
    return out, exact, unmatched


def chart(e2e: list, worker: list, timeline: list, lag: list, snapshots: list, t0: float, rate: float,
          path: Path, title: str) -> None:
    plt = h.plt()
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.2))
    ms_e2e, ms_w = np.asarray(e2e) * 1e3, np.asarray(worker) * 1e3
    hi = max([1.0] + list(ms_e2e) + list(ms_w))
    bins = np.logspace(np.log10(max(0.05, min([hi] + list(ms_w) + list(ms_e2e)))), np.log10(hi * 1.05), 50)
    ax1.hist(ms_e2e, bins=bins, alpha=0.6, label="end to end (produce -> read_committed consume)")
    ax1.hist(ms_w, bins=bins, alpha=0.6, label="worker histogram (handling -> delivery)")
    ax1.set_xscale("log")
    ax1.axvline(TARGET_P99_S * 1e3, color="black", ls="--", lw=1, label="50 ms")
    ax1.set_xlabel("ms (log)")
    ax1.set_ylabel("deletions")
    ax1.legend(fontsize=7)
    for data, label in ((ms_e2e, "end to end"), (ms_w, "worker")):
        if len(data):
            xs = np.sort(data)
            ax2.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=label)
    ax2.axvline(TARGET_P99_S * 1e3, color="black", ls="--", lw=1)
    ax2.axhline(0.99, color="tab:red", ls=":", lw=1, label="p99")
    ax2.set_xscale("log")
    ax2.set_xlabel("ms (log)")
    ax2.set_ylabel("fraction of deletions")
    ax2.set_ylim(0, 1.01)
    ax2.legend(fontsize=7)
    for a, b in snapshots:
        ax3.axvspan(a - t0, b - t0, color="tab:orange", alpha=0.25, lw=0)
    if timeline:
        ax3.plot([t - t0 for t, _ in timeline], [1e3 * v for _, v in timeline], ".", ms=3,
                 label="end-to-end latency of each deletion")
    if lag:
        ax3.plot([t - t0 for t, _, _ in lag], [1e3 * max(0, p_ - w) / rate for t, p_, w in lag], lw=1,
                 color="tab:green", label="worker lag (ms of input at the insert rate)")
    ax3.axhline(TARGET_P99_S * 1e3, color="black", ls="--", lw=1)
    ax3.set_yscale("log")
    ax3.set_xlabel("s since the first delete (orange: full snapshots)")
    ax3.set_ylabel("ms (log)")
    ax3.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def stall_report(worker, merges: list, t0: float, t1: float) -> dict:
    """Print and return where the loop's slow rounds (> SLOW_ROUND_S) went during the delete phase."""
    slow = [r for r in worker.slow_rounds if t0 <= r["t"] <= t1]
    phases = ("fetch", "process", "start_snapshot", "collect_snapshots")
    in_window = [m for m in merges if t0 <= m[0] <= t1]
    gcs = [g for g in worker.gc_pauses if t0 <= g[0] <= t1]
    bg = [(a, b) for a, b in worker.background_snapshots if t0 <= a <= t1]

    def overlaps(r, spans):
        return any(a < r["t"] + r["total"] and b > r["t"] for a, b in spans)

    with_merge = [r for r in slow if overlaps(r, [(a, a + d) for a, d, _ in in_window])]
    with_gc = [r for r in slow if overlaps(r, [(a, a + d) for a, _, d in gcs])]
    with_bg = [r for r in slow if overlaps(r, bg)]
    print(f"\nloop rounds over {1e3 * SLOW_ROUND_S:.0f} ms during the delete phase: {len(slow)}, "
          f"{sum(r['total'] for r in slow):.2f} s in all")
    for phase in phases:
        secs = sum(r.get(phase, 0.0) for r in slow)
        print(f"  {phase:18} {secs:6.2f} s")
    print(f"  overlapping an index merge: {len(with_merge)}; a gen>=1 GC: {len(with_gc)}; "
          f"a background full-snapshot write: {len(with_bg)}")
    md = [d for _, d, _ in in_window]
    print(f"index merges: {len(md)}, max {1e3 * max(md, default=0):.1f} ms, total {sum(md):.2f} s; "
          f"GC gen>=1 pauses: {len(gcs)}, max {1e3 * max((g[2] for g in gcs), default=0):.1f} ms; "
          f"background full snapshots: {len(bg)}, {', '.join(f'{1e3 * (b - a):.0f}' for a, b in bg)} ms")
    worst = sorted(slow, key=lambda r: -r["total"])[:8]
    for r in worst:
        parts = "  ".join(f"{k} {1e3 * r[k]:.1f}" for k in phases if k in r)
        print(f"  t={r['t'] - t0:6.2f} s  {1e3 * r['total']:6.1f} ms  ({parts}; {r.get('messages', 0)} messages)")
    return {"threshold_s": SLOW_ROUND_S, "rounds": [{**r, "t": r["t"] - t0} for r in slow],
            "with_index_merge": len(with_merge), "with_gc": len(with_gc), "with_background_snapshot": len(with_bg),
            "index_merges": [(a - t0, d, n) for a, d, n in in_window], "gc_pauses": [(a - t0, g, d) for a, g, d in gcs],
            "background_snapshots": [(a - t0, b - a) for a, b in bg]}


def cpu_report(cpu, worker, t0: float, t1: float) -> dict:
    """Print and return the average cores each piece used in the delete phase, split into the
    stretches while a full snapshot was being written in the background and the rest."""
    writing = sorted((max(a, t0), min(b, t1)) for a, b in worker.background_snapshots if b > t0 and a < t1)
    quiet, start = [], t0
    for a, b in writing:
        quiet.append((start, a))
        start = max(start, b)
    quiet.append((start, t1))
    use = {"delete_phase": cpu.cores([(t0, t1)]), "writing_a_snapshot": cpu.cores(writing),
           "not_writing_a_snapshot": cpu.cores(quiet)}
    labels = sorted(use["delete_phase"], key=lambda k: -use["delete_phase"][k])
    print(f"\nCPU, average cores (2 usable)    {'whole phase':>12} {'writing a snapshot':>19} {'otherwise':>10}")
    for label in labels:
        print(f"  {label:30} " + " ".join(f"{use[k].get(label, 0.0):{w}.2f}" for k, w in (
            ("delete_phase", 12), ("writing_a_snapshot", 19), ("not_writing_a_snapshot", 10))))
    print(f"  {'all':30} " + " ".join(f"{sum(use[k].values()):{w}.2f}" for k, w in (
        ("delete_phase", 12), ("writing_a_snapshot", 19), ("not_writing_a_snapshot", 10))))
    return use


def fmt(p: dict) -> str:
    if not p["count"]:
        return "no data"
    return "  ".join(f"{k} {1e3 * p[k]:7.1f} ms" for k in ("p50", "p90", "p99", "max"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rate", type=float, default=50_000, help="inserts per second")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of deletions")
    p.add_argument("--delete-every-ms", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of inserts only once the worker consumes")
    p.add_argument("--release-every-events", type=int, default=RELEASE_EVERY)
    p.add_argument("--snapshot-every-events", type=int, default=SNAPSHOT_EVERY,
                   help="0: by time only (snapshot_every_seconds, default 30 s)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a worker setting (repeatable), e.g. --set poll_timeout=0.01")
    p.add_argument("--linger-ms", type=float, default=5.0, help="linger.ms of the bench's producer")
    p.add_argument("--producer", choices=("process", "thread"), default="process",
                   help="run the paced producer in its own process (default: the worker keeps its GIL) "
                        "or as a thread of the worker's process")
    p.add_argument("--cores", choices=("shared", "split"), default="shared",
                   help="shared: every process may run on every CPU; split: the broker and the S3 "
                        "server on the last CPU, the worker, producer and observer on the others "
                        "(servers on their own cores, as in a deployment)")
    p.add_argument("--seed", type=int, default=0)
    args = h.arguments(p, argv, quick="3 s of deletes after 0.5 s of warm-up, at most 10,000 inserts/s")
    if args.quick:
        args.duration, args.warmup, args.rate = min(args.duration, 3.0), min(args.warmup, 0.5), min(args.rate, 10_000)
    wall = time.perf_counter()

    info = h.machine()
    print(h.machine_line(info))
    from worker.metrics import Metrics
    from worker.olu import warm_up
    from worker.stream.app import Worker

    compile_s = warm_up()

    class LatencyMetrics(Metrics):
        """The worker's Metrics, also keeping every delete-to-release observation."""

        def __init__(self):
            super().__init__()
            self.observed: list[float] = []

        def observe_delete_to_release(self, seconds: float) -> None:
            self.observed.append(seconds)
            super().observe_delete_to_release(seconds)

    from worker.olu.core.index import AppliedIndex

    # (start, seconds, records) of every index merge call, and of every paced-merge step that
    # took over a millisecond (the slices of a merge done as the next tail fills)
    merges: list[tuple[float, float, int]] = []
    merge, advance = AppliedIndex.merge, AppliedIndex.advance_merge

    def timed_merge(index, paced=False):
        t0 = time.monotonic()
        try:
            return merge(index, paced)
        finally:
            merges.append((t0, time.monotonic() - t0, len(index)))

    def timed_advance(index):
        t0 = time.monotonic()
        try:
            return advance(index)
        finally:
            if time.monotonic() - t0 > 1e-3:
                merges.append((t0, time.monotonic() - t0, len(index)))

    AppliedIndex.merge = timed_merge  # this process only: the bench's own worker
    AppliedIndex.advance_merge = timed_advance

    class BenchWorker(Worker):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.snapshot_windows: list[tuple[float, float]] = []
            self.delta_puts: list[float] = []
            self.delta_group_sizes: list[int] = []
            write_deltas = self.snapshots.write_deltas

            def timed_write_deltas(topic, partition, deltas):
                t0 = time.monotonic()
                try:
                    return write_deltas(topic, partition, deltas)
                finally:
                    self.delta_puts.append(time.monotonic() - t0)
                    self.delta_group_sizes.append(len(deltas))

            self.snapshots.write_deltas = timed_write_deltas  # this instance only

            # Where the loop's time goes: every round slower than SLOW_ROUND_S, split by phase.
            self.slow_rounds: list[dict] = []
            self._phase: dict[str, float] = {}
            self.background_snapshots: list[tuple[float, float]] = []  # written off the loop thread
            self.gc_pauses: list[tuple[float, int, float]] = []  # (start, generation, seconds)
            self._gc_started = 0.0

            def on_gc(phase, info):
                if phase == "start":
                    self._gc_started = time.monotonic()
                elif info["generation"] >= 1:
                    self.gc_pauses.append((self._gc_started, info["generation"],
                                           time.monotonic() - self._gc_started))

            gc.callbacks.append(on_gc)

        def _timed(self, phase, fn, *a, **kw):
            t0 = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                self._phase[phase] = self._phase.get(phase, 0.0) + time.monotonic() - t0

        def _round(self):
            self._phase = {}
            t0 = time.monotonic()
            super()._round()
            total = time.monotonic() - t0
            if total > SLOW_ROUND_S:
                self.slow_rounds.append({"t": t0, "total": total, **self._phase})

        def _fetch(self):
            return self._timed("fetch", super()._fetch)

        def _process(self, runner, batch):
            self._phase["messages"] = self._phase.get("messages", 0) + len(batch)
            return self._timed("process", super()._process, runner, batch)

        def _start_snapshot(self, runner):
            self.snapshot_windows.append((time.monotonic(), None))
            try:
                return self._timed("start_snapshot", super()._start_snapshot, runner)
            finally:
                self.snapshot_windows[-1] = (self.snapshot_windows[-1][0], time.monotonic())

        def _collect_snapshots(self, keys=None, timeout: float = 0.0):
            before = {k: v[2] for k, v in self._writing.items()}
            self._timed("collect_snapshots", super()._collect_snapshots, keys, timeout)
            now = time.monotonic()
            self.background_snapshots.extend((t, now) for k, t in before.items() if k not in self._writing)

        def _snapshot_and_commit(self, runner, flush_timeout: float = 10.0) -> bool:
            t0 = time.monotonic()
            try:
                return super()._snapshot_and_commit(runner, flush_timeout)
            finally:
                self.snapshot_windows.append((t0, time.monotonic()))

    with h.kafka() as (bootstrap, broker_source), h.s3() as server:
        layout = h.cores_layout(args.cores)
        topic, params, dlq = h.unique("bench.events"), h.unique("bench.params"), h.unique("bench.dlq")
        h.create_topics(bootstrap, [topic, params, dlq])
        sets = {"log_level": "WARNING", "state_url": f"s3://{server.bucket}/{h.unique('bench')}",
                **h.parse_sets(args.set)}  # --set state_url=file://... for a comparison off S3
        settings = h.worker_settings(bootstrap, topic=topic, params=params, dlq=dlq,
                                     group=h.unique("bench-worker"),
                                     release_every_events=args.release_every_events,
                                     snapshot_every_events=args.snapshot_every_events, **sets)

        ctx = mp.get_context("spawn")
        ready, stop = ctx.Event(), ctx.Event()
        recv, send = ctx.Pipe(duplex=False)
        observer = ctx.Process(target=observe_releases, args=(bootstrap, params, ready, stop, send),
                               name="bench-observer")
        observer.start()
        if not ready.wait(60):
            raise RuntimeError("release observer did not start")

        metrics = LatencyMetrics()
        worker = BenchWorker(settings, metrics)
        consuming, produced = ctx.Event(), ctx.Value("q", 0)
        p_recv, p_send = ctx.Pipe(duplex=False)
        cfg = {"rate": args.rate, "delete_every": args.delete_every_ms / 1e3, "warmup": args.warmup,
               "duration": args.duration, "linger_ms": args.linger_ms, "seed": args.seed}
        pargs = (bootstrap, topic, cfg, consuming, produced, p_send)
        if args.producer == "process":
            producer = ctx.Process(target=paced_producer, args=pargs, name="bench-producer")
        else:
            producer = threading.Thread(target=paced_producer, args=pargs, name="bench-producer", daemon=True)
        lag: list[tuple[float, int, int]] = []  # (monotonic, produced, processed by the worker)

        def supervise():
            # Until the producer is done: gone, or its report is waiting in the pipe (a report
            # larger than the pipe's buffer keeps it alive until the main thread reads it).
            while producer.is_alive() and not p_recv.poll():
                if not consuming.is_set() and worker.runners:
                    consuming.set()
                lag.append((time.monotonic(), produced.value, worker.events))
                cpu.sample()
                time.sleep(0.1)
            # Let the worker drain what was produced, then stop it.
            end = time.monotonic() + 30
            while worker.events < produced.value and time.monotonic() < end:
                lag.append((time.monotonic(), produced.value, worker.events))
                time.sleep(0.1)
            time.sleep(0.5)
            worker.stop()

        producer.start()
        cpu = h.CpuSampler({observer.pid: "observer process", **(
            {producer.pid: "producer process"} if args.producer == "process" else {})})
        cpu.find("java", "broker (java)")
        cpu.find("weed", "S3 server (weed)")
        threading.Thread(target=supervise, name="bench-supervisor", daemon=True).start()
        print(f"running: inserts at {args.rate:,.0f}/s from a producer {args.producer}, a delete every "
              f"{args.delete_every_ms:g} ms for {args.duration:g} s after {args.warmup:g} s of warm-up; "
              f"state on {server.endpoint}")
        t_run = time.monotonic()
        worker.run(install_signals=False)
        run_s = time.monotonic() - t_run
        prod = p_recv.recv() if p_recv.poll(60) else None
        producer.join(10)
        time.sleep(0.5)  # the last releases reach the observer
        stop.set()
        releases = recv.recv() if recv.poll(30) else []
        observer.join(10)
        if prod is None or prod["failed"]:
            raise RuntimeError(f"producer failed: {prod and prod['failed']}")

    # ------------------------------------------------------------------ report
    deletes, offsets, inserts, errors = prod["deletes"], prod["offsets"], prod["inserts"], prod["errors"]
    timeline, exact, unmatched = match(deletes, offsets, releases)
    e2e = [lat for _, lat in timeline]
    worker_obs = list(metrics.observed)
    buckets, hsum, hcount = h.histogram_buckets(metrics.delete_to_release)
    hist_q = {f"p{q}": h.histogram_quantile(buckets, q / 100) for q in (50, 90, 99)}
    pe, pw = h.percentiles(e2e), h.percentiles(worker_obs)
    delta = h.percentiles(worker.delta_puts)
    snaps = [b - a for a, b in worker.snapshot_windows]  # on the loop thread
    written = [b - a for a, b in worker.background_snapshots]  # capture to durable, off the loop thread
    # Deletions in flight (produced, release not yet received) during any part of a full snapshot.
    spans = [*worker.snapshot_windows, *worker.background_snapshots]
    overlapping = sum(1 for t, lat in timeline if any(a <= t + lat and b >= t for a, b in spans))
    slow = [(t, lat) for t, lat in timeline if lat > TARGET_P99_S]
    slow_overlapping = sum(1 for t, lat in slow if any(a <= t + lat and b >= t for a, b in spans))
    t0, n0, t1, n1 = prod["window"] or (0, 0, 1, 0)
    achieved = (n1 - n0) / (t1 - t0) if t1 > t0 else None
    in_phase = [(t, p_, w) for t, p_, w in lag if t0 <= t <= t1]
    lag_events = h.percentiles([max(0, p_ - w) for _, p_, w in in_phase])

    print(f"\ndeletes produced: {len(deletes):,}  delivered: {len(offsets):,}  "
          f"matched to a release: {len(e2e):,} ({exact:,} by their own 'deletion' release)  "
          f"unmatched: {unmatched}")
    print(f"inserts produced: {inserts:,}; achieved rate during the delete phase: "
          f"{achieved or 0:,.0f}/s (asked {args.rate:,.0f}/s); worker events: {worker.events:,}; "
          f"releases seen: {len(releases):,}; producer errors: {len(errors)}")
    if lag_events["count"]:
        print(f"worker lag behind the producer during the delete phase (sampled every 100 ms): "
              f"p50 {lag_events['p50']:,.0f}  p99 {lag_events['p99']:,.0f}  max {lag_events['max']:,.0f} events "
              f"(max ~{1e3 * lag_events['max'] / args.rate:,.0f} ms of input)")
    print(f"\n{'latency':46} {'':>3}")
    print(f"{'end to end (produce -> read_committed consume)':46} {fmt(pe)}")
    print(f"{'worker olu_delete_to_release_seconds (exact)':46} {fmt(pw)}")
    hq = "  ".join(f"{k} {1e3 * v:7.1f} ms" if v is not None else f"{k} -" for k, v in hist_q.items())
    print(f"{'worker histogram, Prometheus quantile estimate':46} {hq}  (count {hcount:.0f}, "
          f"mean {1e3 * hsum / max(hcount, 1):.1f} ms)")
    groups = worker.delta_group_sizes
    print(f"{'delta PUT to S3 (write_deltas)':46} {fmt(delta)}  ({len(groups):,} objects for "
          f"{sum(groups):,} deltas, largest group {max(groups, default=0)})")
    if snaps:
        print(f"full snapshots: {len(snaps)}, loop thread {1e3 * min(snaps):.0f} to {1e3 * max(snaps):.0f} ms each "
              f"(settle deltas, flush, capture; the shutdown one whole), written in the background in "
              f"{1e3 * min(written, default=0):.0f} to {1e3 * max(written, default=0):.0f} ms; "
              f"deletions in flight during one: {overlapping}")
    print(f"deletions over 50 ms end to end: {len(slow):,} of {len(timeline):,}, of which {slow_overlapping:,} "
          f"were in flight during a full snapshot")
    # Split each deletion at the broker's ack of the delete (acks=all): before it, the producer and
    # the broker; after it, the worker's fetch, handling, delta, release and the observer.
    to_ack = {deletes[j]: prod["acked"][j] - deletes[j] for j in prod["acked"] if j in deletes}
    ack = h.percentiles(list(to_ack.values()))
    slow_before_ack = sum(1 for t, lat in slow if to_ack.get(t, 0.0) > lat / 2)
    print(f"delete produce -> broker ack: {fmt(ack)}; of the deletions over 50 ms, {slow_before_ack} spent "
          f"more than half of it before the ack")
    stalls = stall_report(worker, merges, t0, t1)
    cpu_use = cpu_report(cpu, worker, t0, t1)
    ok = pe["p99"] is not None and pe["p99"] <= TARGET_P99_S and not unmatched
    print("\ntarget 2:")
    checks = Checks()
    checks.check(DELETE_TO_RELEASE_P99_S, pe["p99"] if not unmatched else None,
                 where=f"{args.rate:,.0f} inserts/s, cores {args.cores}",
                 note=f"{unmatched} deletions never released" if unmatched else "")
    if achieved is not None and achieved < 0.95 * args.rate:
        print(f"  caveat: the producer reached only {achieved:,.0f} inserts/s")

    report = {
        "machine": info,
        "broker": broker_source,
        "s3": {"server": type(server).__name__, "endpoint": server.endpoint},
        "config": {"rate": args.rate, "duration_s": args.duration, "delete_every_ms": args.delete_every_ms,
                   "warmup_s": args.warmup, "producer": args.producer, "producer_linger_ms": args.linger_ms,
                   "dim": 10,
                   "release_every_events": args.release_every_events,
                   "snapshot_every_events": args.snapshot_every_events,
                   "overrides": h.parse_sets(args.set),
                   "worker_settings": {k: getattr(settings, k) for k in (
                       "batch_size", "poll_timeout", "release_every_seconds", "snapshot_every_seconds",
                       "algorithm")},
                   "kernel_warm_up_s": compile_s, "quick": args.quick, "layout": layout},
        "counts": {"deletes": len(deletes), "delivered": len(offsets),
                   "matched": len(e2e), "exact_deletion_release": exact, "unmatched": unmatched,
                   "inserts": inserts, "achieved_insert_rate": achieved,
                   "worker_events": worker.events, "releases_seen": len(releases),
                   "producer_errors": errors[:5], "worker_run_s": run_s},
        "end_to_end_s": pe,
        "worker_histogram_exact_s": pw,
        # the last bound is +Inf, written as Prometheus writes its le label (JSON has no infinity)
        "worker_histogram_prometheus": {"quantile_estimates_s": hist_q, "sum_s": hsum,
                                        "buckets": [("+Inf" if b == float("inf") else b, c) for b, c in buckets],
                                        "count": hcount},
        "delta_put_s": delta,
        "worker_lag_events": lag_events,
        "lag_samples": [(round(t - t0, 3), p_, w) for t, p_, w in lag],
        "full_snapshots": {"count": len(snaps), "loop_seconds": snaps, "background_write_seconds": written,
                           "deletes_in_flight_during_one": overlapping},
        "over_50ms": {"count": len(slow), "in_flight_during_a_snapshot": slow_overlapping,
                      "more_than_half_before_the_broker_ack": slow_before_ack},
        "delete_produce_to_ack_s": ack,
        "loop_stalls": stalls,
        "cpu_cores": cpu_use,
        "delta_put_samples_s": worker.delta_puts,
        "delta_groups": {"objects": len(groups), "deltas": sum(groups), "largest": max(groups, default=0)},
        # the whole distributions (the PNG's histogram and CDFs), not only their percentiles
        "end_to_end_samples_s": e2e,
        "worker_histogram_samples_s": worker_obs,
        "targets": {"p99_s": pe["p99"], "<=0.050": ok, "met": ok},
        "wall_s": time.perf_counter() - wall,
    }
    return h.finish("delete_latency", report, args.out, checks=checks, plot=lambda path: chart(
        e2e, worker_obs, timeline, lag, spans, t0, args.rate, path,
        f"Delete-to-release latency, {len(e2e):,} deletions at {args.rate:,.0f} inserts/s, state on S3 "
        f"(p99 e2e {1e3 * (pe['p99'] or 0):.1f} ms)"))


def render(report: dict) -> str:
    """The README table: the run's latencies (ms), as in the session tables above it."""
    def ms(p: dict, q: str = "p99") -> str:
        return "-" if p.get(q) is None else f"{1e3 * p[q]:.1f}"

    c, cfg = report["counts"], report["config"]
    e2e = report["end_to_end_s"]
    lines = ["| cores | deletions (matched) | inserts/s reached | end to end p50 / p99 | worker p99 | delta PUT p99 "
             "| delete -> broker ack p99 | deletions over 50 ms | target (p99 <= 50 ms) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    rate = "-" if c["achieved_insert_rate"] is None else f"{c['achieved_insert_rate']:,.0f}"
    lines.append(f"| {cfg['layout']['cores']} | {c['deletes']:,} ({c['matched']:,}) | {rate} "
                 f"| {ms(e2e, 'p50')} / {ms(e2e)} ms | {ms(report['worker_histogram_exact_s'])} ms "
                 f"| {ms(report['delta_put_s'])} ms | {ms(report['delete_produce_to_ack_s'])} ms "
                 f"| {report['over_50ms']['count']} | {'MET' if report['targets']['met'] else 'NOT MET'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
