"""Where a deletion's time goes in the worker, and how fast a burst of deletions is honoured (not a test).

    .venv/bin/python bench/deletion_path.py [--events 500000] [--delete-fracs 0,0.001,0.01]
        [--burst 100000] [--burst-after 200000] [--profile] [--quick] [--out DIR]

No broker: the partition's runner (worker/stream/partition.py, what the worker's loop calls) is fed
in-memory messages (worker/devtools/messages.py) carrying the exact wire bytes of
bench/worker_throughput.py's streams (``_harness.Records`` and ``stream_plan``: d = 10 logistic
inserts, deletes of earlier applied records), in batches of the worker's ``batch_size`` (2,000).
State on file:// in a temp dir: every deletion's delta is written (with fsync) by the worker's own
background delta writer, exactly as in the worker; releases every 10,000 events and after
deletions, each recorded in a ``Metrics`` as the loop does; no full snapshot inside the window.
What is left out is the broker: fetching and the producer's ``produce`` (worker_throughput.py
measures the whole worker on a real broker).

Modes:

- **Shares** (``--delete-fracs``): one stream per share, the same number of events, the shares
  taking turns ``--repeat`` times (the fastest run of each counts); the loop time of each, and the
  *in-place cost of a deletion*: (time of the stream with deletes - time of the inserts-only
  stream) / deletes. The breakdown wraps the deletion path's steps in wall-clock
  timers (inclusive, per deletion: the decoder; a poll batch's inserts and deletes up to its last
  delete in the engine's one pass, with its index lookups, tombstones and noise rows, then each
  deletion's bookkeeping; the deletes taken one by one where that pass does not apply; the
  delta's payload and its hand-off, the release and its JSON, the metrics) and, with
  ``--profile``, the deletion-heaviest stream once more under cProfile.
- **Burst** (``--burst N``, 0 to skip): ``--burst-after`` inserts, then N deletes of distinct
  applied records back to back (an account purge), then 1,000 inserts. Timed from the first batch
  holding a delete until every deletion's delta is durable and the release that follows the last
  one is ready. Checked, not assumed: each deletion drew its own noise (one ledger entry each,
  charged by the accountant) and has its own delta entry among the objects written.

Targets (issue 23): in-place cost per deletion <= 50 us at 1% deletions; a burst of 100,000
deletions honoured within 15 s. Writes ``deletion_path.json`` into ``--out``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import cProfile  # noqa: E402
import io  # noqa: E402
import pstats  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import numpy as np  # noqa: E402
from _targets import BURST_100K_S, DELETION_IN_PLACE_US, Checks  # noqa: E402

from worker.config.model import build_model  # noqa: E402
from worker.devtools.messages import messages  # noqa: E402
from worker.metrics import Metrics  # noqa: E402
from worker.olu.batches import apply as engine_module  # noqa: E402
from worker.state.store import SnapshotStore, open_store  # noqa: E402
from worker.stream import partition as partition_module  # noqa: E402
from worker.stream.input import batch as batch_module  # noqa: E402
from worker.stream.partition import PartitionRunner  # noqa: E402
from worker.stream.process import prepare_process  # noqa: E402

REPORT_KEYS = ("config", "streams", "breakdown", "burst", "targets", "wall_s")
SERVICES = ()
TOPIC = "events"

# (label, where, attribute): the steps the breakdown times, outermost first
STEPS = (
    ("decode the deletes", "input stage", "decode_message"),
    ("look the deletes up ahead (prefetch)", "model", "prefetch_deletes"),
    ("the batch through the engine (all of it)", "runner module", "apply_batch"),
    ("  engine pass: inserts and deletes", "engine module", "learn_and_unlearn"),
    ("    index lookups (pop_each)", "index", "pop_each"),
    ("    tombstone adds (add_many)", "tombstones", "add_many"),
    ("    noise rows", "model", "_noise_rows"),
    ("  deletes one by one", "engine module", "_forget"),
    ("    engine unlearn_request", "model", "unlearn_request"),
    ("    index lookup (pop)", "index", "pop"),
    ("    tombstone add", "tombstones", "add"),
    ("    noise draw", "model", "_noise"),
    ("  inserts (learn_many runs, stretches between deletes)", "engine module", "_learn"),
    ("each deletion's bookkeeping", "runner", "_honoured"),
    ("  delta payload", "runner module", "delta_payload"),
    ("delta hand-off (outbox)", "outbox", "deltas"),
    ("release (JSON)", "runner", "_release"),
    ("metrics per release", "metrics", "record_release"),
)


class Timers:
    """Inclusive wall-clock time and calls of wrapped callables (instance attributes, so the
    wrappers vanish with the objects)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, obj, attr: str, label: str) -> None:
        inner = getattr(obj, attr)
        self.seconds.setdefault(label, 0.0)
        self.calls.setdefault(label, 0)
        perf = time.perf_counter

        def timed(*args, **kwargs):
            t0 = perf()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[label] += perf() - t0
                self.calls[label] += 1

        setattr(obj, attr, timed)


DELETION_RELEASES = "batch"  # --deletion-releases
SETS: dict = {}  # --set NAME=VALUE


def settings_for(state_dir: str):
    return h.worker_settings("127.0.0.1:9", topic=TOPIC, params="params", dlq="dlq", group="bench",
                             state_url=Path(state_dir).as_uri(), **{
                                 "release_every_events": 10_000,
                                 "deletion_releases": DELETION_RELEASES, **SETS})


def wire_messages(plan, records: h.Records) -> list:
    encoded = [records.insert(j) if op == "i" else records.delete(j) for op, j in plan]
    return messages(TOPIC, 0, encoded)


class Loop:
    """A runner as the worker drives it: process a batch, collect what became publishable."""

    def __init__(self, settings, state_dir: str):
        self.settings = settings
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="olu-delta")
        store = SnapshotStore(open_store(settings.state_url), prefix=settings.state_prefix,
                              group=settings.group_id, keep=settings.snapshot_keep)
        self.runner = PartitionRunner(TOPIC, 0, build_model(settings), snapshots=store, settings=settings,
                                      model_name="bench", delta_writer=self.executor.submit)
        self.metrics = Metrics()
        self.releases = 0
        self.delta_entries = 0
        write = store.write_deltas

        def counted(topic, partition, deltas):
            write(topic, partition, deltas)
            self.delta_entries += len(deltas)

        store.write_deltas = counted

    def publish(self, releases) -> None:
        for release in releases:
            self.metrics.record_release(self.runner, release)
            self.releases += 1

    def feed(self, msgs: list) -> None:
        size = self.settings.batch_size
        runner = self.runner
        for i in range(0, len(msgs), size):
            out = runner.process(msgs[i:i + size])
            if out.resume_at is not None:
                raise RuntimeError(f"a delta could not be stored: {runner.outbox.failed}")
            self.publish(out.releases)
            self.publish(runner.ready_releases())

    def drain(self) -> None:
        """Wait until every delta is durable and publish what it held."""
        if not self.runner.outbox.settle(60.0):
            raise RuntimeError("deltas still not durable after 60 s")
        self.publish(self.runner.ready_releases())

    def close(self) -> None:
        self.executor.shutdown(wait=True)


def instrument(loop: Loop, timers: Timers) -> list:
    """Wrap the steps of :data:`STEPS`; returns what to undo (module-level functions)."""
    runner, model = loop.runner, loop.runner.model
    owners = {"runner": runner, "model": model, "index": model.index,
              "tombstones": getattr(model, "tombstones", None),  # a rotation's are its models'
              "outbox": runner.outbox, "metrics": loop.metrics}
    undo = []
    modules = {"input stage": batch_module, "runner module": partition_module, "engine module": engine_module}
    for label, where, attr in STEPS:
        if where in modules:
            undo.append((modules[where], attr, getattr(modules[where], attr)))
            timers.wrap(modules[where], attr, label)
        elif owners[where] is not None and hasattr(owners[where], attr):
            timers.wrap(owners[where], attr, label)
    return undo


def run_stream(msgs: list, *, timed_steps: bool = False, profile: cProfile.Profile | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="olu-bench-") as state:
        loop = Loop(settings_for(state), state)
        timers, undo = Timers(), []
        if timed_steps:
            undo = instrument(loop, timers)
        try:
            t0, c0 = time.perf_counter(), time.process_time()
            if profile is not None:
                profile.enable()
            loop.feed(msgs)
            loop.drain()
            if profile is not None:
                profile.disable()
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        finally:
            for obj, attr, original in undo:
                setattr(obj, attr, original)
            loop.close()
        model = loop.runner.model
        return {"events": len(msgs), "seconds": seconds, "cpu_seconds": cpu, "events_per_s": len(msgs) / seconds,
                "deletions": int(model.deletions_applied), "releases": loop.releases,
                "delta_entries": loop.delta_entries, "steps": {k: {"seconds": timers.seconds[k],
                                                                  "calls": timers.calls[k]} for k in timers.seconds}}


def measure_shares(args, records: h.Records) -> tuple[list[dict], dict | None, str | None]:
    rows, best = [], {}
    plans = {share: h.stream_plan(args.events, share, args.seed) for share in args.delete_fracs}
    streams = {share: wire_messages(plan, records) for share, plan in plans.items()}
    # per delete request, as worker_throughput.py counts: under rotation many name a record that
    # left with a retired model (nothing to unlearn), and each of them costs the loop too
    requests = {share: sum(op == "d" for op, _ in plan) for share, plan in plans.items()}
    # the shares take turns (0, 0.001, 0.01, 0, ...): a slow spell of a shared machine then hits
    # each of them, not the inserts-only baseline alone, which every in-place cost is taken against
    runs = {share: [] for share in args.delete_fracs}
    for _ in range(args.repeat):
        for share, msgs in streams.items():
            runs[share].append(run_stream(msgs))
    for share, msgs in streams.items():
        run = min(runs[share], key=lambda r: r["seconds"])
        run["delete_frac"], run["deletes"] = share, requests[share]
        best[share] = (msgs, run)
        rows.append(run)
        print(f"share {share:<6g}: {run['events']:,} events, {run['deletes']:,} deletes ({run['deletions']:,} "
              f"changed the model), {run['releases']:,} "
              f"releases, {run['delta_entries']:,} delta entries in {run['seconds']:.2f} s = "
              f"{run['events_per_s']:,.0f} events/s (best of {args.repeat})")
    base = best.get(0.0)
    for row in rows:
        if base is not None and row["deletes"]:
            row["in_place_us"] = (row["seconds"] - base[1]["seconds"]) / row["deletes"] * 1e6
            row["x_inserts_only"] = row["events_per_s"] / base[1]["events_per_s"]
            print(f"  share {row['delete_frac']:g}: each delete request costs the loop {row['in_place_us']:.1f} us in place; "
                  f"{row['x_inserts_only']:.2f}x the inserts-only rate")
    heaviest = max(best, default=None)
    if heaviest is None or not best[heaviest][1]["deletes"]:
        return rows, None, None
    msgs = best[heaviest][0]
    timed = run_stream(msgs, timed_steps=True)
    n = requests[heaviest]
    print(f"\nbreakdown (share {heaviest:g}, wall clock, inclusive, per delete request; timers add ~0.3 us a call):")
    breakdown = {"delete_frac": heaviest, "deletions": n, "seconds": timed["seconds"], "steps": []}
    for label in dict.fromkeys(label for label, _, _ in STEPS):  # a label may time several steps
        step = timed["steps"].get(label)
        if step is None:
            continue
        per = step["seconds"] / n * 1e6
        breakdown["steps"].append({"step": label.strip(), "depth": (len(label) - len(label.lstrip())) // 2,
                                   "seconds": step["seconds"], "calls": step["calls"], "us_per_deletion": per})
        print(f"  {label:<44s} {per:8.1f} us  ({step['calls']:,} calls, {step['seconds']:.3f} s)")
    profile_text = None
    if args.profile:
        prof = cProfile.Profile()
        run_stream(msgs, profile=prof)
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.sort_stats("tottime").print_stats(20)
        profile_text = buf.getvalue()
        print(f"\nprofile (cProfile, share {heaviest:g}, top 20 by own time):\n{profile_text}")
    return rows, breakdown, profile_text


def burst_plan(after: int, burst: int, seed: int) -> list[tuple[str, int]]:
    rng = np.random.default_rng(seed + 7)
    victims = rng.choice(after, size=min(burst, after), replace=False)
    return ([("i", j) for j in range(after)] + [("d", int(j)) for j in victims]
            + [("i", after + j) for j in range(1000)])


def measure_burst(args, records: h.Records) -> dict | None:
    if not args.burst:
        return None
    plan = burst_plan(args.burst_after, args.burst, args.seed)
    msgs = wire_messages(plan, records)
    head, rest = msgs[:args.burst_after], msgs[args.burst_after:]
    with tempfile.TemporaryDirectory(prefix="olu-bench-") as state:
        loop = Loop(settings_for(state), state)
        try:
            loop.feed(head)
            loop.drain()
            model = loop.runner.model
            ledger0, charged0, entries0 = len(model.ledger), model.accountant.lifetime_deletions, loop.delta_entries
            t0 = time.perf_counter()
            loop.feed(rest)
            loop.drain()
            seconds = time.perf_counter() - t0
            last_delete = msgs[args.burst_after + args.burst - 1].offset() + 1
            released = loop.runner.released_version
        finally:
            loop.close()
        n = args.burst
        row = {"inserts_before": args.burst_after, "deletions": n, "seconds": seconds,
               "us_per_deletion": seconds / n * 1e6, "ledger_entries": len(model.ledger) - ledger0,
               "charged": model.accountant.lifetime_deletions - charged0,
               "delta_entries": loop.delta_entries - entries0, "released_after_last": released >= last_delete}
    print(f"\nburst: {n:,} deletions after {args.burst_after:,} inserts honoured in {seconds:.2f} s "
          f"({row['us_per_deletion']:.1f} us each); {row['ledger_entries']:,} noise draws in the ledger, "
          f"{row['charged']:,} charged, {row['delta_entries']:,} delta entries stored, release after the last: "
          f"{row['released_after_last']}")
    if not (row["ledger_entries"] == row["charged"] == row["delta_entries"] == n and row["released_after_last"]):
        raise SystemExit("burst: not every deletion has its own noise draw, charge and durable delta")
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=500_000)
    p.add_argument("--delete-fracs", default="0,0.001,0.01")
    p.add_argument("--repeat", type=int, default=3, help="runs per share, in turns; the fastest counts")
    p.add_argument("--burst", type=int, default=100_000, help="deletions in the burst (0: no burst)")
    p.add_argument("--burst-after", type=int, default=200_000, help="inserts before the burst")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true", help="also profile the deletion-heaviest stream")
    p.add_argument("--deletion-releases", choices=("batch", "each"), default="batch",
                   help="the worker's OLU_DELETION_RELEASES (each: one release per deletion, as before issue 23)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a worker setting (repeatable), e.g. --set privacy_unit=per-request")
    args = h.arguments(p, argv, "20,000 events, a burst of 2,000")
    SETS.update(h.parse_sets(args.set))
    args.delete_fracs = [float(v) for v in args.delete_fracs.split(",") if v.strip()]
    global DELETION_RELEASES
    DELETION_RELEASES = args.deletion_releases
    if args.quick:
        args.events, args.burst, args.burst_after, args.repeat = 20_000, 2_000, 5_000, 1
    info = h.machine()
    print(h.machine_line(info))
    prepare_process()  # as the worker does at start: kernels compiled, GIL switch interval, GC frozen
    started = time.perf_counter()
    records = h.Records(dim=10)
    rows, breakdown, profile_text = measure_shares(args, records)
    burst = measure_burst(args, records)
    checks = Checks()
    print("\ntargets (issue 23):")
    one_pct = next((r for r in rows if r["delete_frac"] == 0.01 and "in_place_us" in r), None)
    if one_pct is not None:
        checks.check(DELETION_IN_PLACE_US, one_pct["in_place_us"], where="share 0.01")
    if burst is not None and burst["deletions"] >= 100_000:
        checks.check(BURST_100K_S, burst["seconds"])
    report = {"machine": info, "config": {"events": args.events, "delete_fracs": args.delete_fracs,
                                          "repeat": args.repeat, "batch_size": 2000, "state": "file://",
                                          "deletion_releases": args.deletion_releases,
                                          "settings": dict(SETS),
                                          "seed": args.seed},
              "streams": rows, "breakdown": breakdown, "burst": burst, "targets": checks.results,
              "wall_s": time.perf_counter() - started}
    if profile_text is not None:
        report["profile_top"] = profile_text
    return h.finish("deletion_path", report, args.out, checks=checks)


def render(report: dict) -> str:
    lines = ["| stream | events/s | deletions | releases | x inserts-only | in-place cost per deletion |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in report["streams"]:
        cost = f"{r['in_place_us']:.1f} us" if "in_place_us" in r else ""
        ratio = f"{r['x_inserts_only']:.2f}" if "x_inserts_only" in r else ""
        lines.append(f"| share {r['delete_frac']:g} | {r['events_per_s']:,.0f} | {r['deletions']:,} | "
                     f"{r['releases']:,} | {ratio} | {cost} |")
    out = "\n".join(lines)
    if report.get("breakdown"):
        b = report["breakdown"]
        out += (f"\n\nBreakdown at share {b['delete_frac']:g} (wall clock, inclusive, per deletion):\n\n"
                "| step | us per deletion | calls |\n|---|---:|---:|\n")
        out += "\n".join(f"| {'&nbsp;' * 4 * s['depth']}{s['step']} | {s['us_per_deletion']:.1f} | {s['calls']:,} |"
                         for s in b["steps"] if s["calls"])
    if report.get("burst"):
        b = report["burst"]
        out += (f"\n\nBurst: {b['deletions']:,} deletions after {b['inserts_before']:,} inserts honoured in "
                f"{b['seconds']:.2f} s ({b['us_per_deletion']:.1f} us each), {b['ledger_entries']:,} noise draws, "
                f"{b['delta_entries']:,} delta entries stored.")
    return out


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
