"""The ``olu-worker`` command line: ``run`` (the streaming worker), ``demo`` (embedded defaults),
``follow`` (the released versions), ``plan`` (what deletions will cost, before deploying) and
``receipts`` (what became of each deletion request)."""

from __future__ import annotations

import os

# One BLAS thread unless told otherwise, set before numpy loads: the loop is single-threaded, and a
# threaded BLAS competing for a small pod's cores made full-batch passes over 20,000+ retained
# rows ~10x slower (bench/rewind_cost.py; active-d2d and rewind run such passes).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import orjson  # noqa: E402

from . import __version__  # noqa: E402
from .audit import AUDIT_OPTIONS  # noqa: E402
from .audit import add_parser as add_receipts_parser  # noqa: E402
from .config import add_arguments, load_settings  # noqa: E402
from .exceptions import ConfigError  # noqa: E402
from .follow import add_parser as add_follow_parser  # noqa: E402
from .logs import configure_logging, get_logger  # noqa: E402
from .planning.command import PLAN_OPTIONS  # noqa: E402
from .planning.command import add_parser as add_plan_parser  # noqa: E402
from .produce import PRODUCE_OPTIONS  # noqa: E402
from .produce import add_parser as add_produce_parser  # noqa: E402

log = get_logger("olu.cli")
UNIT_REQUIRED = (
    "OLU_PRIVACY_UNIT (--privacy-unit) is required: per-request protects each deletion request on "
    "its own (its noise fades as the stream grows), all-deletions protects every deleted record "
    "together (its noise grows with the share deleted, often near chance); `olu-worker plan` shows "
    "what each costs on your events")
DEMO_OPTIONS = ("events", "delete_rate", "seed", "json", "state_dir")
#: The settings ``demo --help`` lists (every other one of ``run`` is accepted, unlisted).
DEMO_SHOWN_SETTINGS = ("bootstrap_servers", "privacy_unit", "target_epsilon", "algorithm",
                       "rotation", "dim", "input_format", "schema_registry_url")


def _start(settings, command: str):
    """Logging, the effective configuration (secrets redacted), metrics and the health server."""
    from .http import HealthServer
    from .metrics import Metrics

    configure_logging(settings.log_level, settings.log_format)
    log.info("effective configuration", extra={"command": command, "settings": settings.redacted()})
    metrics = Metrics()
    health = HealthServer(metrics, settings.http_host, settings.http_port,
                          liveness_window=settings.liveness_seconds)
    try:
        port = health.start()
    except OSError as exc:  # the port is taken, or the host is not this machine's
        raise ConfigError(
            f"OLU_HTTP_PORT (--http-port) {settings.http_port} on {settings.http_host}: cannot "
            f"listen ({exc.strerror or exc}); choose another port, or 0 for any free one") from None
    log.info("http listening", extra={"port": port, "paths": ["/metrics", "/healthz", "/readyz"]})
    return metrics, health


def _is_config_error(exc) -> bool:
    """librdkafka refused a property when the client was created (unknown key, bad value)."""
    from confluent_kafka import KafkaError, KafkaException

    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and err.code() == KafkaError._INVALID_ARG


def _refused(exc) -> ConfigError:
    return ConfigError(
        f"a Kafka client setting was refused: {exc.args[0].str()} (OLU_KAFKA_<KEY> / --kafka "
        "key=value pass librdkafka properties as they are)")


def run(args, _opts) -> int:
    from .stream.app import Worker

    settings = load_settings(args, command="run")
    if settings.origin("privacy_unit") == "default":
        # the one choice no default can make for an operator
        raise ConfigError(UNIT_REQUIRED)
    metrics, health = _start(settings, "run")
    from .planning.startup import unit_warning

    if (warning := unit_warning(settings)) is not None:
        # a near-chance model, said before it happens
        log.warning(warning, extra={"privacy_unit": settings.privacy_unit,
                                    "expected_deletion_rate": settings.expected_deletion_rate})
    try:
        Worker(settings, metrics, health).run()
    except ConfigError:
        # found at start (a release larger than the params topic takes): exit 2, named
        raise
    except Exception as exc:  # one structured line an operator can alert on, then exit non-zero
        if _is_config_error(exc):
            raise _refused(exc) from None
        log.critical("worker failed", exc_info=True,
                     extra={"error": str(exc), "error_type": type(exc).__name__})
        return 1
    finally:
        health.stop()
    return 0


def demo(args, opts) -> int:
    from .stream import demo as d
    from .stream.app import Worker
    from .stream.demo_scores import DemoScores

    if opts.events < 1:
        raise ConfigError(f"--events must be a whole number >= 1, got {opts.events}")
    if not 0.0 <= opts.delete_rate < 1.0:
        raise ConfigError(
            f"--delete-rate must be a share of events in [0, 1), got {opts.delete_rate:g}")
    olu_env = _olu_env()
    d.check_format(args.input_format or olu_env.get("OLU_INPUT_FORMAT", "json"),
                   args.schema_registry_url or olu_env.get("OLU_SCHEMA_REGISTRY_URL"))
    given = args.bootstrap_servers or olu_env.get("OLU_KAFKA_BOOTSTRAP_SERVERS")
    # A real broker: topics and a group of the run's own, so the demo never joins a running
    # worker's group or writes to its topics; else librdkafka's in-process mock cluster.
    holder, bootstrap = (None, given) if given else d.mock_cluster()
    state_dir = opts.state_dir or d.new_state_dir()  # a temporary one is removed at the end
    # The interactive view: warnings only, as text lines, so the progress line stays readable.
    view = {} if opts.json else {"OLU_LOG_FORMAT": "text", "OLU_LOG_LEVEL": "WARNING"}
    env = {**d.demo_env(bootstrap, state_dir), **view, **olu_env,
           **(d.own_names() if given else {})}
    settings = load_settings(args, env, command="demo")
    if given:
        d.create_topics(bootstrap, settings)
    metrics, health = _start(settings, "demo")
    partitions = d.input_partitions(bootstrap, settings.input_topics[0])
    scores = DemoScores(settings, partitions, opts.seed)  # the released models beside plain OGD
    worker = Worker(settings, metrics, health)
    produced = d.start_producer(bootstrap, settings, opts.events, opts.delete_rate, opts.seed,
                                partitions,
                                observe=scores.observe, consumed=lambda: worker.events)
    if not opts.json:
        print("starting: the first run compiles the numeric kernels (10 to 30 s), later runs load "
              "them",
              file=sys.stderr, flush=True)
        threading.Thread(target=_progress, args=(worker, opts.events, scores), daemon=True).start()
    started = time.monotonic()
    try:
        summary = worker.run(max_events=opts.events)
    finally:
        health.stop()
    elapsed = time.monotonic() - started
    partitions = d.partition_summary(worker)
    report = {"events": summary.get("events", 0),
              "events_applied": sum(p["t"] for p in partitions.values()),
              "deletions_honoured": summary.get("deletions_honoured", 0),
              "releases": summary.get("releases", 0),
              "dead_letters": summary.get("dead_letters", 0),
              "seconds": round(elapsed, 3), "state_dir": state_dir if opts.state_dir else None,
              "broker": "embedded mock cluster" if holder is not None else bootstrap,
              "topics": {"input": settings.input_topics[0], "params": settings.params_topic,
                         "dead_letters": settings.dlq_topic},
              "partitions": {k: {"unit": v["unit"], "epsilon": v["epsilon"], "delta": v["delta"],
                                 "target_epsilon": v["target_epsilon"], "rho": v["rho"],
                                 "requests": v["requests"],
                                 "budget_used": v["budget_used"], "deletions": v["deletions"],
                                 "t": v["t"],
                                 "offset": v["offset"]}
                             for k, v in partitions.items()}}
    produced.wait(60)
    report["events_produced_all_delivered"] = produced.is_set() and produced.failed is None
    report["quality"] = scores.report(worker.latest_release)
    if opts.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_report(report, worker)
    worker.producer = worker.consumer = None  # destroy the clients before the mock cluster goes
    del holder
    if opts.state_dir is None:
        shutil.rmtree(state_dir, ignore_errors=True)
    if given and not opts.json:
        print(f"  topics kept on {bootstrap}: {settings.input_topics[0]}, {settings.params_topic} "
              f"(try olu-worker follow --bootstrap-servers {bootstrap} --topic "
              f"{settings.params_topic} --once), {settings.dlq_topic}")
    return 0


def _olu_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k.startswith("OLU_")}


def _progress(worker, target: int, scores) -> None:
    if not sys.stderr.isatty():
        # a pipe or a file: no line rewritten in place (the summary says it all)
        return
    while not worker.stopping.is_set() and worker.events < target:
        s = worker.summary
        print(f"\r{worker.events:>9,}/{target:,} events  {s.get('deletions_honoured', 0):>6,} "
              f"deletions honoured  {s.get('releases', 0):>6,} releases  "
              f"{s.get('dead_letters', 0):>4,} dead letters"
              f"{_quality_line(scores.report(dict(worker.latest_release)))}", end="",
              file=sys.stderr, flush=True)
        time.sleep(0.5)
    print(file=sys.stderr)


def _quality_line(q: dict) -> str:
    """The released models' score beside plain OGD's, as the
    progress line and the report show it."""
    if q["released"] is None or q["plain_ogd"] is None:
        return ""
    if q["metric"] == "accuracy":
        return f"  released accuracy {q['released']:.1%} (plain OGD {q['plain_ogd']:.1%})"
    return f"  released error {q['released']:.3f} (plain OGD {q['plain_ogd']:.3f})"


def _print_report(report: dict, worker) -> None:
    from .stream.demo import DEMO_PRIVACY_UNIT

    print(f"{report['events']:,} events in {report['seconds']:.1f}s: "
          f"{report['deletions_honoured']:,} deletions honoured, {report['releases']:,} releases, "
          f"{report['dead_letters']:,} dead letters")
    unit = next(iter(report["partitions"].values()), {}).get("unit")
    if unit == DEMO_PRIVACY_UNIT:
        print(f"  privacy unit {unit} (the demo's default): each deletion request is protected on "
              "its own; --privacy-unit all-deletions protects every deleted record together, at a "
              "larger noise")
    s = worker.settings
    if s.origin("rotation") == "unit default":  # why the model renews itself, said once
        print(f"  the model is renewed every {s.model_lifetime_events // 2:,} events "
              f"({s.rotation_variant} rotation, lifetime {s.model_lifetime_events:,}: the defaults "
              f"under {s.privacy_unit}), so a subject's deletion never leaves noise in the "
              "releases for long")
    for name, p in report["partitions"].items():
        print(f"  {name:<16} t={p['t']:<8,} deletions={p['deletions']:<5} {_guarantee(p)}")
    for (topic, partition), release in sorted(worker.latest_release.items()):
        value = orjson.loads(release.value)
        spec = worker.settings.feature_spec
        names = spec.names if spec is not None else None
        if names is None:
            weights = ", ".join(f"{w:+.3f}" for w in value["weights"][:4])
        else:  # the largest weights, by the spec's names
            top = sorted(range(len(names)), key=lambda i: -abs(value["weights"][i]))[:4]
            weights = ", ".join(f"{names[i]}={value['weights'][i]:+.3f}" for i in top)
        print(f"  latest release {topic}/{partition} v{value['version']} ({release.trigger}): "
              f"[{weights}, ...]")
    q = report["quality"]
    noise = [v for v in q["noise_to_signal_by_partition"].values() if v is not None]
    print(f" {_quality_line(q)} on fresh points of the demo's rule"
          + (f"; noise-to-signal up to {max(noise):.2f}" if noise else ""))
    if q["verdict"]:
        print(f"  note: {q['verdict']}")
    state = report["state_dir"] or "a temporary directory, now removed (--state-dir keeps it)"
    print(f"  state: {state}")


def _guarantee(p: dict) -> str:
    """The guarantee in words: the unit, epsilon at delta it holds, and what it was set from."""
    target = (f"target epsilon {p['target_epsilon']:g}" if p.get("target_epsilon") is not None
              else f"rho {p['rho']:g}")
    if p["unit"] == "per-request":
        return (f"unit per-request: each of {p['requests']:,} requests has "
                f"epsilon={p['epsilon']:.3f} (delta={p['delta']:g}; {target})")
    return (f"unit all-deletions: epsilon={p['epsilon']:.3f} (delta={p['delta']:g}; {target}) for "
            f"every deleted record together, budget used={p['budget_used']:.3f}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="olu-worker",
                                     description="Kafka worker that learns and unlearns online "
                                                 "with certified privacy guarantees.")
    parser.add_argument("--version", action="version", version=f"olu-worker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser(
        "run", help="consume, learn, unlearn, snapshot and release (settings: flags or OLU_*)")
    add_arguments(r)
    r.set_defaults(func=run)
    d = sub.add_parser("demo",
                       help="the worker on embedded defaults: in-process Kafka, local state, "
                            "synthetic stream with deletions",
                       description="The worker on embedded defaults: librdkafka's in-process mock "
                                   "cluster (or --bootstrap-servers), a temporary state directory "
                                   "and a synthetic stream with deletions; at the end, the "
                                   "released models' accuracy beside plain OGD's. Every setting of "
                                   "`olu-worker run` is accepted too (flags or OLU_*; see "
                                   "olu-worker run --help); the main ones are listed below.")
    d.add_argument("--events", type=int, default=50_000, help="stop after N events (default 50000)")
    d.add_argument("--delete-rate", type=float, default=0.01,
                   help="share of events that are deletes, in [0, 1) (default 0.01)")
    d.add_argument("--seed", type=int, default=0,
                   help="seed of the synthetic data (never of the noise)")
    d.add_argument("--json", action="store_true", help="print a final JSON summary on stdout")
    d.add_argument("--state-dir", help="where snapshots go (default: a new temporary directory)")
    d.add_argument("--features", "--features-file", dest="features_file", metavar="FILE",
                   help="a feature spec (YAML or JSON): the stream's events carry its named fields "
                        "(same as --features-file)")
    add_arguments(d, shown=DEMO_SHOWN_SETTINGS, exclude=("features_file",))
    d.set_defaults(func=demo)
    add_follow_parser(sub)
    add_plan_parser(sub)
    add_produce_parser(sub)
    add_receipts_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .memory import fix_malloc_thresholds

    fix_malloc_thresholds()  # before the first large allocation (see worker/memory.py)
    parser = build_parser()
    args = parser.parse_args(argv)
    func = args.__dict__.pop("func")
    args.__dict__.pop("command", None)
    opts = argparse.Namespace(
        **{k: args.__dict__.pop(k) for k in DEMO_OPTIONS + PLAN_OPTIONS + PRODUCE_OPTIONS
           + AUDIT_OPTIONS if k in args.__dict__})
    try:
        try:
            return func(args, opts)
        except Exception as exc:
            # every command that builds a Kafka client: a refused property is one line
            if _is_config_error(exc):
                raise _refused(exc) from None
            raise
    except ConfigError as exc:
        print(f"olu-worker: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
