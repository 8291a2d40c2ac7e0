"""Steady-load soak: the worker's memory and consumer lag over a long run (not a test, not in CI).

    .venv/bin/python bench/soak.py [--minutes 30] [--rate 20000] [--delete-every-ms 100] [--s3] [--quick] [--out DIR]

Pieces, all on loopback (a local Kafka broker unless ``KAFKA_BOOTSTRAP_SERVERS`` is set):

- the worker as its own process, exactly as deployed: ``python -m worker.cli run`` configured by
  ``OLU_*`` variables, d = 10 logistic, state on ``file://`` in a temporary directory (``--s3``: on
  a local SeaweedFS server), its HTTP endpoint on a free loopback port, its JSON log in the
  temporary directory (the last lines are printed if it dies);
- the paced producer of ``delete_latency.py`` in its own process: once the worker has its
  partition, inserts at ``--rate`` events/s (default 20,000) and a delete of an earlier (hence
  applied) record every ``--delete-every-ms`` (100 ms), for ``--minutes`` (30);
- every ``--sample-s`` (5 s): the worker's RSS (``VmRSS`` of ``/proc/<pid>/status``) and, from its
  ``/metrics``, ``olu_consumer_lag`` (last stable offset minus the committed offset: offsets are
  committed with full snapshots, so it includes the input since the last one),
  ``olu_consumer_processing_lag`` (what the worker has not received yet), events consumed, releases,
  deletions honoured and the records in the applied-record index (``olu_applied_records``, 12
  bytes each: every insert has a new id, and the worker must remember each applied id to honour
  its delete, so that part of the memory grows with the stream by design; the report splits the
  RSS slope into it and the rest).

Full snapshots every ``--snapshot-every-events`` (default 50,000 = 2.5 s of input at the default
rate, instead of the worker's 100,000): ``olu_consumer_lag`` counts from the committed offset, so
with the default cadence its sawtooth alone would reach the lag bound below.

Targets (stated for this bench): "RSS flat" = the least-squares slope of RSS over the second half
of the run is below 1 MiB per 10 minutes (the first half is warm-up: allocator arenas, librdkafka
queues and the applied-record index grow to their steady size); "lag bounded" = the p99 of
``olu_consumer_lag`` over the second half is below 5 seconds of input (rate x 5 events).

Writes ``soak.json`` (every sample, machine, command, load average at start and end) and ``soak.png``
(RSS and lag against time) into ``--out`` (bench/results).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from contextlib import ExitStack  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import numpy as np  # noqa: E402
from _targets import Checks, Target  # noqa: E402
from delete_latency import paced_producer  # noqa: E402

MIB = 1024 * 1024
INDEX_BYTES_PER_RECORD = 12  # uint64 key + uint32 step (worker/olu/core/index.py)
RSS_FLAT = Target("soak_rss_slope_mib_per_10min",
                  "RSS flat: least-squares RSS slope over the second half < 1 MiB per 10 minutes",
                  "<=", 1.0, "MiB/10 min", "soak")
LAG_SECONDS = 5.0  # "lag bounded": p99 olu_consumer_lag over the second half below this much input
REPORT_KEYS = ("broker", "worker_command", "state", "config", "producer", "worker", "second_half", "targets",
               "samples")
SERVICES = ("kafka",)  # and "s3" with --s3


def lag_target(rate: float) -> Target:
    return Target("soak_lag_p99_events", f"lag bounded: p99 olu_consumer_lag over the second half < "
                  f"{LAG_SECONDS:g} s of input ({rate * LAG_SECONDS:,.0f} events)", "<=", rate * LAG_SECONDS,
                  "events", "soak")


# --------------------------------------------------------------------------- the worker process
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(bootstrap: str, topic: str, params: str, dlq: str, group: str, state_url: str, port: int,
               snapshot_every: int, extra: dict[str, str]) -> dict[str, str]:
    """The parent's environment without any OLU_* of its own, plus the worker's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLU_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
    env.update({
        "OLU_KAFKA_BOOTSTRAP_SERVERS": bootstrap, "OLU_GROUP_ID": group, "OLU_INPUT_TOPICS": topic,
        "OLU_PARAMS_TOPIC": params, "OLU_DLQ_TOPIC": dlq, "OLU_DIM": "10", "OLU_STATE_URL": state_url,
        "OLU_HTTP_HOST": "127.0.0.1", "OLU_HTTP_PORT": str(port), "OLU_PRIVACY_UNIT": "all-deletions",
        "OLU_SNAPSHOT_EVERY_EVENTS": str(snapshot_every),
    })
    env.update(extra)
    return env


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def scrape(port: int) -> dict[str, float] | None:
    """Sums over the worker's series of the metrics the soak follows; None if /metrics is not up."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    wanted = {"olu_consumer_lag": "lag", "olu_consumer_processing_lag": "processing_lag",
              "olu_events_total": "events", "olu_releases_total": "releases",
              "olu_deletions_total": "deletions", "olu_snapshot_failures_total": "snapshot_failures"}
    out = {v: 0.0 for v in wanted.values()}
    out["state_bytes"] = None
    seen_lag = False
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "olu_applied_records":
                # the applied-record index: 12 bytes per record (index.py), plus a fixed tail
                out["state_bytes"] = (out["state_bytes"] or 0.0) + s.value * INDEX_BYTES_PER_RECORD
                continue
            key = wanted.get(s.name)
            if key is None:
                continue
            if key == "lag":
                seen_lag = True
            out[key] += s.value
    if not seen_lag:
        out["lag"] = None  # no statistics callback yet
    return out


def wait_assigned(proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited with {proc.returncode}:\n{tail(log)}")
        if b'"partition assigned"' in log.read_bytes():
            return
        time.sleep(0.2)
    raise TimeoutError(f"the worker was not assigned its partition within {timeout:.0f} s:\n{tail(log)}")


def tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --------------------------------------------------------------------------- analysis
def slope_mib_per_10min(samples: list[dict], field: str = "rss") -> float | None:
    """Least-squares slope of ``field`` (bytes) against time, in MiB per 10 minutes."""
    pts = [(s["t"], s[field]) for s in samples if s.get(field) is not None]
    if len(pts) < 3:
        return None
    t, rss = np.array(pts, dtype=np.float64).T
    return float(np.polyfit(t, rss / MIB, 1)[0] * 600.0)


def p99(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.percentile(vals, 99)) if vals else None


def chart(samples: list[dict], rate: float, second_half_from: float, slope: float | None, path: Path) -> None:
    plt = h.plt()
    t = np.array([s["t"] for s in samples]) / 60.0
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    rss = np.array([np.nan if s["rss"] is None else s["rss"] / MIB for s in samples])
    ax1.plot(t, rss, ".-", ms=3, label="worker RSS")
    half = [(s["t"], s["rss"]) for s in samples if s["t"] >= second_half_from and s["rss"] is not None]
    if len(half) >= 3:
        ht, hr = np.array(half, dtype=np.float64).T
        a, b = np.polyfit(ht, hr / MIB, 1)
        ax1.plot(ht / 60.0, a * ht + b, "--", label=f"fit over the second half: {slope:+.2f} MiB / 10 min")
    state = np.array([np.nan if s.get("state_bytes") is None else s["state_bytes"] / MIB for s in samples])
    ax1.plot(t, state, ".-", ms=3, alpha=0.7, label="applied-record index (12 B x olu_applied_records)")
    ax1.set_ylabel("MiB")
    ax1.legend(loc="lower right")
    ax1.grid(alpha=0.3)
    lag = np.array([np.nan if s["lag"] is None else s["lag"] for s in samples], dtype=np.float64)
    plag = np.array([np.nan if s["processing_lag"] is None else s["processing_lag"] for s in samples],
                    dtype=np.float64)
    ax2.plot(t, lag, ".-", ms=3, label="olu_consumer_lag (vs committed offset)")
    ax2.plot(t, plag, ".-", ms=3, alpha=0.7, label="olu_consumer_processing_lag (not yet received)")
    ax2.axhline(rate * LAG_SECONDS, color="red", ls=":", label=f"bound: {LAG_SECONDS:g} s of input")
    ax2.set_ylabel("lag (events)")
    ax2.set_xlabel("minutes since the producer started")
    ax2.legend(loc="upper right")
    ax2.grid(alpha=0.3)
    for ax in (ax1, ax2):
        ax.axvline(second_half_from / 60.0, color="grey", lw=0.8)
    fig.suptitle(f"soak: {rate:,.0f} events/s, worker subprocess")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=20_000, help="inserts per second")
    p.add_argument("--delete-every-ms", type=float, default=100.0)
    p.add_argument("--s3", action="store_true", help="state on a local SeaweedFS S3 server instead of file://")
    p.add_argument("--sample-s", type=float, default=5.0)
    p.add_argument("--snapshot-every-events", type=int, default=50_000)
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="extra worker setting as an OLU_* variable (repeatable), e.g. --set batch_size=5000")
    p.add_argument("--seed", type=int, default=0)
    args = h.arguments(p, argv, quick="15 s at 2,000 inserts/s, a sample every second")
    if args.quick:
        args.minutes, args.rate, args.sample_s = min(args.minutes, 0.25), min(args.rate, 2_000), min(args.sample_s, 1.0)
    extra = {f"OLU_{k.upper()}": v for k, v in h.parse_sets(args.set).items()}
    duration = args.minutes * 60.0

    info = h.machine()
    print(h.machine_line(info))
    samples: list[dict] = []
    with ExitStack() as stack:
        bootstrap, broker_from = stack.enter_context(h.kafka())
        server = stack.enter_context(h.s3()) if args.s3 else None
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="olu-soak-")))
        topic, params, dlq, group = (h.unique(n) for n in ("soak-in", "soak-params", "soak-dlq", "soak"))
        h.create_topics(bootstrap, [topic, params, dlq])
        state_url = f"s3://{server.bucket}/{group}" if server else f"file://{tmp}/state"
        port = free_port()
        env = worker_env(bootstrap, topic, params, dlq, group, state_url, port, args.snapshot_every_events, extra)
        log = tmp / "worker.log"
        worker_cmd = [sys.executable, "-m", "worker.cli", "run"]
        with open(log, "wb") as log_file:
            proc = subprocess.Popen(worker_cmd, cwd=h.ROOT, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=log_file)
        stack.callback(stop_worker, proc)  # whatever happens, nothing is left running
        wait_assigned(proc, log)

        ctx = mp.get_context("spawn")
        consuming, produced = ctx.Event(), ctx.Value("q", 0)
        p_recv, p_send = ctx.Pipe(duplex=False)
        cfg = {"rate": args.rate, "delete_every": args.delete_every_ms / 1e3, "warmup": 0.0,
               "duration": duration, "linger_ms": 5.0, "seed": args.seed}
        producer = ctx.Process(target=paced_producer, args=(bootstrap, topic, cfg, consuming, produced, p_send),
                               name="soak-producer")
        producer.start()
        stack.callback(stop_process, producer)
        consuming.set()
        print(f"running {args.minutes:g} min: inserts at {args.rate:,.0f}/s and a delete every "
              f"{args.delete_every_ms:g} ms; worker pid {proc.pid}, state on {state_url}, "
              f"metrics on :{port}; broker: {broker_from}")
        print(f"\n{'min':>5} {'RSS MiB':>9} {'state MiB':>9} {'lag':>10} {'proc lag':>10} {'produced':>12} {'applied':>12} "
              f"{'releases':>9} {'deletions':>9}")
        t0 = time.monotonic()
        next_sample, next_row = t0, t0
        printed, prod = None, None
        while producer.is_alive() or time.monotonic() < t0 + duration:
            if prod is None and p_recv.poll():
                # Read the producer's report as soon as it is sent: it can outgrow the pipe's
                # buffer (a 30-minute run's deletes), and the producer cannot exit before it is read.
                prod = p_recv.recv()
            if proc.poll() is not None:
                raise RuntimeError(f"the worker exited with {proc.returncode}:\n{tail(log)}")
            now = time.monotonic()
            if now >= next_sample:
                m = scrape(port) or {}
                sample = {"t": now - t0, "rss": rss_bytes(proc.pid), "lag": m.get("lag"),
                          "processing_lag": m.get("processing_lag"), "produced": produced.value,
                          "events": m.get("events"), "releases": m.get("releases"),
                          "deletions": m.get("deletions"), "snapshot_failures": m.get("snapshot_failures"),
                          "state_bytes": m.get("state_bytes"),
                          "loadavg": list(os.getloadavg())}
                samples.append(sample)
                next_sample += args.sample_s
                if now >= next_row:
                    print_row(sample)
                    printed = sample
                    next_row += 60.0
            if (prod is not None or not producer.is_alive()) and now >= t0 + duration:
                break
            time.sleep(min(0.5, max(0.0, next_sample - time.monotonic())))
        if samples and samples[-1] is not printed:
            print_row(samples[-1])  # the last sample, if it fell between the minute rows
        if prod is None:
            prod = p_recv.recv() if p_recv.poll(60) else None
        producer.join(30)
        if prod is None or prod["failed"]:
            raise RuntimeError(f"producer failed: {prod and prod['failed']}")
        final = scrape(port) or {}
        exit_code = stop_worker(proc)
        print(f"\nworker stopped (SIGTERM) with exit code {exit_code}")

    # ------------------------------------------------------------------ report
    second_half_from = duration / 2.0
    half = [s for s in samples if s["t"] >= second_half_from]
    slope = slope_mib_per_10min(half)
    lag99 = p99(s["lag"] for s in half)
    rss_mib = [s["rss"] / MIB for s in samples if s["rss"] is not None]
    print(f"\nproduced {prod['inserts']:,} inserts and {len(prod['deletes']):,} deletes "
          f"({len(prod['errors'])} producer errors); worker consumed {final.get('events', 0):,.0f} events, "
          f"published {final.get('releases', 0):,.0f} releases, honoured {final.get('deletions', 0):,.0f} deletions")
    if rss_mib:
        print(f"RSS: start {rss_mib[0]:.1f} MiB, max {max(rss_mib):.1f} MiB, end {rss_mib[-1]:.1f} MiB; "
              f"second half: {len(half)} samples")
    state_slope = slope_mib_per_10min(half, "state_bytes")
    if state_slope is not None and slope is not None:
        # Every insert has a new id, and the worker must remember each applied id to honour its
        # delete: the applied-record index grows with the stream by design.
        print(f"second half: RSS {slope:+.1f} MiB / 10 min, of which the applied-record index "
              f"{state_slope:+.1f} MiB / 10 min; RSS minus state {slope - state_slope:+.1f} MiB / 10 min")
    checks = Checks()
    checks.check(RSS_FLAT, slope, where=f"{len(half)} samples over the last {args.minutes / 2:g} min")
    checks.check(lag_target(args.rate), lag99, where=f"{args.rate:,.0f} events/s")
    if args.minutes < 20:
        print("  (a run this short says little about the RSS slope: the warm-up may not be over by half-time)")

    report = {
        "machine": info, "broker": broker_from,
        "worker_command": " ".join(["python", *worker_cmd[1:]]), "state": "s3" if args.s3 else "file",
        "config": {"minutes": args.minutes, "rate": args.rate, "delete_every_ms": args.delete_every_ms,
                   "sample_s": args.sample_s, "snapshot_every_events": args.snapshot_every_events,
                   "set": extra, "seed": args.seed},
        "producer": {"inserts": prod["inserts"], "deletes": len(prod["deletes"]), "errors": prod["errors"][:10]},
        "worker": {"exit_code": exit_code, "final_metrics": final},
        "second_half": {"from_s": second_half_from, "samples": len(half), "rss_slope_mib_per_10min": slope,
                        "state_slope_mib_per_10min": state_slope,
                        "lag_p99_events": lag99},
        "targets": checks.results, "samples": samples,
    }
    return h.finish("soak", report, args.out, checks=checks,
                    plot=lambda path: chart(samples, args.rate, second_half_from, slope, path))


def render(report: dict) -> str:
    """The README table: the sample nearest to the start, each third of the run and its end."""
    samples, minutes = report["samples"], report["config"]["minutes"]
    lines = ["| min | RSS MiB | applied-record index MiB | olu_consumer_lag | events consumed | deletions |",
             "|---:|---:|---:|---:|---:|---:|"]
    picked = []
    for share in (0, 1 / 3, 2 / 3, 1):
        s = min(samples, key=lambda x: abs(x["t"] - share * minutes * 60))
        if s not in picked:
            picked.append(s)

    def num(v, scale=1.0, fmt="{:,.0f}"):
        return "-" if v is None else fmt.format(v / scale)

    for s in picked:
        lines.append(f"| {s['t'] / 60:.1f} | {num(s['rss'], MIB, '{:.1f}')} | {num(s['state_bytes'], MIB, '{:.1f}')} "
                     f"| {num(s['lag'])} | {num(s['events'])} | {num(s['deletions'])} |")
    half = report["second_half"]
    lines += ["", f"Second half: RSS {num(half['rss_slope_mib_per_10min'], 1, '{:+.1f}')} MiB / 10 min, of which "
                  f"the applied-record index {num(half['state_slope_mib_per_10min'], 1, '{:+.1f}')}; p99 "
                  f"olu_consumer_lag {num(half['lag_p99_events'])} events. " + "; ".join(
                      f"{t['text'].split(':')[0]}: {'MET' if t['met'] else 'NOT MET'}" for t in report["targets"]) + "."]
    return "\n".join(lines)


def print_row(s: dict) -> None:
    def num(v, fmt="{:,.0f}"):
        return "-" if v is None else fmt.format(v)
    print(f"{s['t'] / 60:5.1f} {num(s['rss'] and s['rss'] / MIB, '{:.1f}'):>9} "
          f"{num(s['state_bytes'] and s['state_bytes'] / MIB, '{:.1f}'):>9} {num(s['lag']):>10} "
          f"{num(s['processing_lag']):>10} {s['produced']:>12,} {num(s['events']):>12} {num(s['releases']):>9} "
          f"{num(s['deletions']):>9}", flush=True)


def stop_worker(proc: subprocess.Popen, timeout: float = 60.0) -> int:
    """SIGTERM (a clean stop: final snapshot and commit), SIGKILL if it does not exit in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
    return proc.returncode


def stop_process(process) -> None:
    if process.is_alive():
        process.terminate()
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join(10)


if __name__ == "__main__":
    sys.exit(main())
