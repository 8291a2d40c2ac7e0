"""``olu-worker plan``: what a deployment's deletions will cost, before deploying.

    olu-worker plan --dim 10 --target-epsilon 1 --deletion-rate 0.01
    olu-worker plan --privacy-unit per-request --sample events.jsonl          # its own deletes
    olu-worker plan --sample inserts.jsonl --deletion-rate 0.005 --request-records key --json
    olu-worker plan --from-topic 200000 --bootstrap-servers broker:9092      # the live input topic
    olu-worker plan --loss softmax --classes fraud,ok,review
    --sample events.jsonl --deletion-rate 0.01

Takes the model settings of ``run`` (flags or ``OLU_*``, the same checks) and the deletion workload:
from the sample's own deletes when it has some (their rate, records per request and ages), else
from the flags (``--deletion-rate``, ``--request-records``, ``--deletion-age``, ``--recent-share``,
...). With a sample (``--sample`` or ``--from-topic``) it simulates every candidate configuration on
the workload and recommends the best under the unit. Prints the text report, or one JSON object with
``--json`` (fields: worker/planning/render.py); ``--plot`` also writes a PNG. Bad input is one line
on stderr and exit code 2. A softmax model (``--loss softmax --classes ...``) is planned over its
K x d parameter, its sample's labels being the class labels, and scored by multiclass accuracy.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from ..config.loading import add_arguments, load_settings
from ..config.options import OPTION_BY_NAME
from .exceptions import PlanError
from .workload import RECORDS, Shape

__all__ = ["PLAN_OPTIONS", "PlanError", "add_parser", "plan"]

#: Options of the plan itself (not settings); :func:`worker.cli.main` leaves them to :func:`plan`.
PLAN_OPTIONS = ("deletion_rate", "events", "deletion_age", "sample", "sim_events", "seed", "json",
                "plot", "request_records", "recent_share", "recent_age", "keys", "key_skew",
                "from_topic")
#: The model settings a plan depends on; the flags of the other groups are not offered, except the
#: input's connection (for --from-topic).
MODEL_GROUP = "model"
CONNECTION = ("bootstrap_servers", "input_topics", "input_format", "schema_registry_url",
              "input_fields", "input_feature_fields")
DEFAULT_EVENTS = 1_000_000
DEFAULT_AGE = 100_000
DESCRIBED_BY_FLAGS = ("deletion_rate", "request_records", "deletion_age", "recent_share",
                      "recent_age", "keys", "key_skew")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "plan", help="before deploying: the noise, epsilon and accuracy a deletion workload will "
                     "cost",
        description="Predict the privacy guarantee and the deletion noise of the model settings "
                    "for a deletion workload and, with a sample of your events (--sample or "
                    "--from-topic), simulate every candidate configuration (unit, rotation, "
                    "lifetime, l2, per-key cap) on it and recommend the best, with the released "
                    "model's predicted accuracy beside plain OGD's. Model settings are read as by "
                    "'run' (flags or OLU_*).")
    g = p.add_argument_group("the sample")
    g.add_argument("--sample", metavar="FILE",
                   help="keyed JSON lines of your events (olu-worker produce's --file format): "
                        "inserts, and deletes if you have them; with deletes, the workload is "
                        "theirs")
    g.add_argument("--from-topic", metavar="N",
                   help="the last N records of the input topic as the sample (run's connection "
                        "settings: --bootstrap-servers, OLU_KAFKA_*, the input format)")
    w = p.add_argument_group("the workload, when the sample has no deletes (or without a sample)")
    w.add_argument("--deletion-rate", metavar="P",
                   help="deletion requests per event, in [0, 1) (required then)")
    w.add_argument("--request-records", choices=RECORDS,
                   help="what one request names: single (one record, the default) or key (every "
                        "record of its key, i.e. an account deletion; the sample's keys, or --keys "
                        "keys of --key-skew activity when it has none)")
    w.add_argument("--deletion-age", metavar="N",
                   help=f"age of a deleted record at its deletion, in events: drawn uniformly up "
                        f"to N (default {DEFAULT_AGE:g})")
    w.add_argument("--recent-share", metavar="F",
                   help="share of requests naming a recent record instead, in [0, 1] (default 0)")
    w.add_argument("--recent-age", metavar="N",
                   help="what recent means, in events: uniformly up to N (default 2000)")
    w.add_argument("--keys", metavar="N",
                   help="with --request-records key and a keyless sample: how many keys (default: "
                        "inserts / 50)")
    w.add_argument("--key-skew", metavar="S",
                   help="their activity: Zipf exponent > 0, larger is more skewed (default 1.2)")
    r = p.add_argument_group("the run")
    r.add_argument("--events", metavar="N",
                   help=f"stream length in events (default {DEFAULT_EVENTS:g})")
    r.add_argument("--sim-events", metavar="N",
                   help="events simulated on the sample, cycled as needed (default: --events, at "
                        "most 200000)")
    r.add_argument("--seed", metavar="N",
                   help="seed of the drawn requests and the simulated noise (default 0)")
    r.add_argument("--json", action="store_true",
                   help="print one JSON object instead of the text report")
    r.add_argument("--plot", metavar="FILE.png",
                   help="write a PNG of the predicted noise (and the simulated accuracy) against "
                        "the stream length")
    add_arguments(p, exclude=[o.name for o in OPTION_BY_NAME.values()
                              if o.group != MODEL_GROUP and o.name not in CONNECTION])
    p.set_defaults(func=plan)
    return p


def _number(flag: str, raw, default, *, integer: bool = False, lo: float = 0.0,
            hi: float = math.inf,
            hi_open: bool = False):
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    ok = math.isfinite(value) and lo <= value and (value < hi if hi_open else value <= hi)
    if integer and ok and value != int(value):
        ok = False
    if not ok:
        kind = "an integer" if integer else "a number"
        bound = f"in [{lo:g}, {hi:g})" if hi_open else f">= {lo:g}"
        raise PlanError(f"{flag} must be {kind} {bound}, got {raw!r}")
    return int(value) if integer else value


def _settings(options: dict, sample_path: str | None, from_topic: int | None):
    names = {o.name for o in OPTION_BY_NAME.values()}
    # removed_*: the hidden flags of removed settings, so the loader refuses them by name
    namespace = argparse.Namespace(**{k: v for k, v in options.items()
                                      if k in names or k == "kafka" or k.startswith("removed_")})
    spec_given = getattr(namespace, "features_file",
                         None) or os.environ.get(OPTION_BY_NAME["features_file"].env)
    if namespace.dim is None and not os.environ.get(OPTION_BY_NAME["dim"].env) and not spec_given:
        if sample_path is None:
            raise PlanError(
                f"{OPTION_BY_NAME['dim'].label} is required (or --sample, whose records give it)")
        from .sample import sample_dimension

        namespace.dim = str(sample_dimension(sample_path))
    settings = load_settings(namespace, command="plan")
    if from_topic is not None and not settings.bootstrap_servers:
        raise PlanError(
            f"--from-topic needs {OPTION_BY_NAME['bootstrap_servers'].label}, as run does")
    return settings


def plan(args, opts) -> int:
    """The subcommand (``func(args, opts)`` like the others of :mod:`worker.cli`)."""
    from .sample import SampleError

    options = {**vars(args), **vars(opts)}
    try:
        return _plan(options)
    except (PlanError, SampleError) as exc:
        print(f"olu-worker plan: {exc}", file=sys.stderr)
        return 2


def _plan(options: dict) -> int:
    from .plan import make_plan
    from .render import PlotUnavailable, plot, to_json, to_text
    from .target import build_engine, resolve_target

    events = _number("--events", options.get("events"), DEFAULT_EVENTS, integer=True, lo=1)
    sim_events = _number("--sim-events", options.get("sim_events"), None, integer=True, lo=1)
    seed = _number("--seed", options.get("seed"), 0, integer=True)
    from_topic = _number("--from-topic", options.get("from_topic"), None, integer=True, lo=1)
    if options.get("plot") and not str(options["plot"]).lower().endswith(".png"):
        raise PlanError(
            f"--plot writes a PNG: give a file name ending in .png, got {options['plot']!r}")
    sample_path = options.get("sample")
    if sample_path is not None and from_topic is not None:
        raise PlanError("give --sample FILE or --from-topic N, not both")
    settings = _settings(options, sample_path, from_topic)
    target = resolve_target(settings)
    engine = build_engine(settings, target)
    sample, where = _sample(settings, engine, sample_path, from_topic)
    shape = _shape(options, sample, events)
    resample = None
    if sample_path is not None and settings.feature_spec is not None:
        from .sample import read_sample

        def resample(spec):  # the sample under a spec of other Fourier bandwidths (fourier.py)
            return read_sample(sample_path, engine, spec)
    try:
        result = make_plan(settings, target, shape=shape, events=events, sample=sample,
                           sample_path=where,
                           sim_events=sim_events, seed=seed, resample=resample)
    except ValueError as exc:  # a plan the analysis refuses (e.g. no insert left to simulate)
        raise PlanError(str(exc)) from None
    if options.get("plot"):
        try:
            plot(result, options["plot"])
        except PlotUnavailable as exc:
            raise PlanError(str(exc)) from None
        except OSError as exc:
            raise PlanError(
                f"cannot write the plot {options['plot']!r}: {exc.strerror or exc}") from None
    sys.stdout.write((to_json(result) if options.get("json") else to_text(result)) + "\n")
    return 0


def _sample(settings, model, path: str | None, from_topic: int | None):
    """(the sample or None, where it came from)."""
    from .sample import read_sample, sample_from_records

    if path is not None:
        return read_sample(path, model, settings.feature_spec), path
    if from_topic is None:
        return None, None
    from .topic import read_topic_records

    records, left_out = read_topic_records(settings, from_topic)
    where = f"topic {settings.input_topics[0]} (last {from_topic:,} records" + (
        f", {left_out:,} the worker would dead-letter left out)" if left_out else ")")
    return sample_from_records(records, model, f"topic {settings.input_topics[0]}"), where


def _shape(options: dict, sample, events: int) -> Shape:
    """The workload's description by the flags; refused where
    the sample's own deletes describe it."""
    given = [f"--{name.replace('_', '-')}" for name in DESCRIBED_BY_FLAGS
             if options.get(name) is not None]
    if sample is not None and sample.requests:
        if given:
            raise PlanError(
                f"the sample has its own deletes ({len(sample.requests):,} requests): their rate, "
                f"sizes and ages are the workload, so {', '.join(given)} would be ignored; drop "
                f"{'it' if len(given) == 1 else 'them'}, or give a sample of inserts only")
        return Shape(rate=0.0)  # replaced by the sample's own figures (worker/planning/plan.py)
    if options.get("deletion_rate") is None:
        raise PlanError(
            "--deletion-rate is required (deletion requests per event, in [0, 1)), or a sample "
            "with deletes (--sample FILE, --from-topic N)")
    rate = _number("--deletion-rate", options["deletion_rate"], None, hi=1.0, hi_open=True)
    if math.floor(rate * events + 0.5) >= events:
        raise PlanError(f"--deletion-rate {rate:g} leaves no insert in {events} events")
    keys = _number("--keys", options.get("keys"), None, integer=True, lo=1)
    skew = _number("--key-skew", options.get("key_skew"), 1.2)
    if skew <= 0:
        raise PlanError(f"--key-skew must be a number > 0, got {options.get('key_skew')!r}")
    return Shape(rate=rate, records=options.get("request_records") or "single",
                 age=_number("--deletion-age", options.get("deletion_age"), DEFAULT_AGE,
                             integer=True, lo=1),
                 recent_share=_number("--recent-share", options.get("recent_share"), 0.0, hi=1.0),
                 recent_age=_number("--recent-age", options.get("recent_age"), 2_000, integer=True,
                                    lo=1),
                 keys=keys, key_skew=skew)
