"""``olu-worker plan``: what a deployment's deletions will cost, before deploying.

    olu-worker plan --dim 10 --target-epsilon 1 --deletion-rate 0.01
    olu-worker plan --loss ridge --sample events.jsonl --deletion-rate 0.001 --json
    olu-worker plan --privacy-unit per-request --sample events.jsonl --deletion-rate 0.01 --plot plan.png

Takes the model settings of ``run`` (flags or ``OLU_*``, the same checks) and the plan: the
deletion rate, the stream length, the age of deleted records, and optionally a sample of the
operator's insert events to simulate on. Prints the text report, or one JSON object with
``--json`` (fields: worker/planning/render.py); ``--plot`` also writes a PNG. Bad input is one
line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from ..config.loading import add_arguments, load_settings
from ..config.options import OPTION_BY_NAME
from .exceptions import PlanError

__all__ = ["PLAN_OPTIONS", "PlanError", "add_parser", "plan"]

#: Options of the plan itself (not settings); :func:`worker.cli.main` leaves them to :func:`plan`.
PLAN_OPTIONS = ("deletion_rate", "events", "deletion_age", "sample", "sim_events", "seed", "json", "plot")
#: The model settings a plan depends on; the flags of the other groups are not offered.
MODEL_GROUP = "model"
DEFAULT_EVENTS = 1_000_000
DEFAULT_AGE = 100_000


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "plan", help="before deploying: the noise, epsilon and accuracy a deletion rate will cost",
        description="Predict the privacy guarantee and the deletion noise of the model settings for an expected "
                    "deletion rate and, with --sample, simulate the released model's accuracy against plain OGD "
                    "for several l2 values. Model settings are read as by 'run' (flags or OLU_*).")
    g = p.add_argument_group("plan")
    g.add_argument("--deletion-rate", metavar="P", help="share of events that are deletion requests, in [0, 1) "
                   "(required)")
    g.add_argument("--events", metavar="N", help=f"stream length in events (default {DEFAULT_EVENTS:g})")
    g.add_argument("--deletion-age", metavar="N", help="events between a deleted record's insert and its deletion "
                   f"(the simulation draws it uniformly up to N; default {DEFAULT_AGE:g})")
    g.add_argument("--sample", metavar="FILE", help="JSON lines of insert events to simulate on")
    g.add_argument("--sim-events", metavar="N", help="events simulated on the sample, cycled as needed "
                   "(default: --events, at most 100000)")
    g.add_argument("--seed", metavar="N", help="seed of the synthetic deletions and the simulated noise (default 0)")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of the text report")
    g.add_argument("--plot", metavar="FILE.png", help="write a PNG of the predicted noise (and the simulated "
                   "accuracy) against the stream length")
    add_arguments(p, exclude=[o.name for o in OPTION_BY_NAME.values() if o.group != MODEL_GROUP] + ["kafka"])
    p.set_defaults(func=plan)
    return p


def _number(flag: str, raw, default, *, integer: bool = False, lo: float = 0.0, hi: float = math.inf,
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


def _settings(options: dict, sample_path: str | None):
    names = {o.name for o in OPTION_BY_NAME.values()}
    # removed_*: the hidden flags of removed settings, so the loader refuses them by name
    namespace = argparse.Namespace(**{k: v for k, v in options.items() if k in names or k.startswith("removed_")})
    if namespace.dim is None and not os.environ.get(OPTION_BY_NAME["dim"].env):
        if sample_path is None:
            raise PlanError(f"{OPTION_BY_NAME['dim'].label} is required (or --sample, whose records give it)")
        from .sample import sample_dimension

        namespace.dim = str(sample_dimension(sample_path))
    return load_settings(namespace, command="plan")


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
    from .sample import read_sample
    from .target import build_engine, resolve_target

    if options.get("deletion_rate") is None:
        raise PlanError("--deletion-rate is required (share of events that are deletion requests, in [0, 1))")
    rate = _number("--deletion-rate", options["deletion_rate"], None, hi=1.0, hi_open=True)
    events = _number("--events", options.get("events"), DEFAULT_EVENTS, integer=True, lo=1)
    age = _number("--deletion-age", options.get("deletion_age"), DEFAULT_AGE, integer=True, lo=1)
    sim_events = _number("--sim-events", options.get("sim_events"), None, integer=True, lo=1)
    seed = _number("--seed", options.get("seed"), 0, integer=True)
    if math.floor(rate * events + 0.5) >= events:
        raise PlanError(f"--deletion-rate {rate:g} leaves no insert in {events} events")
    if options.get("plot") and not str(options["plot"]).lower().endswith(".png"):
        raise PlanError(f"--plot writes a PNG: give a file name ending in .png, got {options['plot']!r}")
    sample_path = options.get("sample")
    settings = _settings(options, sample_path)
    target = resolve_target(settings)
    sample = read_sample(sample_path, build_engine(settings, target)) if sample_path is not None else None
    try:
        result = make_plan(settings, target, deletion_rate=rate, events=events, age=age, sample=sample,
                           sample_path=sample_path, sim_events=sim_events, seed=seed)
    except ValueError as exc:  # a plan the analysis refuses (e.g. no insert left to simulate)
        raise PlanError(str(exc)) from None
    if options.get("plot"):
        try:
            plot(result, options["plot"])
        except PlotUnavailable as exc:
            raise PlanError(str(exc)) from None
        except OSError as exc:
            raise PlanError(f"cannot write the plot {options['plot']!r}: {exc.strerror or exc}") from None
    sys.stdout.write((to_json(result) if options.get("json") else to_text(result)) + "\n")
    return 0
