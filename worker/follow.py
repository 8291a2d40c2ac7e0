"""``olu-worker follow``: print the released parameter versions as they arrive.

    olu-worker follow --bootstrap-servers broker:9092 --topic olu.params
    olu-worker follow --json --once                       # catch up, one JSON line per version,
    exit olu-worker follow --predict "0.1,0.2,0.3"             # and a prediction after each update
    olu-worker follow --predict '{"age": 41, "plan": "pro"}'  # a raw record, under a feature spec

One line per accepted new version on stdout (a JSON object with ``--json``: the release record
plus ``trigger``, ``prediction`` with ``--predict`` and, under a feature spec, ``feature_names``;
a text line then names the largest weights, ``plan=pro=+1.2 age=-0.4 ...``). A softmax release
shows its classes and shape, ``classes=cat,dog,owl (3x4)``, its largest weights named
``class:feature``, and ``--predict`` gives the most probable class with its probability (with
``--json`` also ``probabilities``, in class order). The release a deletion request published
shows the request: ``request=applied 2/3 not_applied=1 [r-9] duplicates=0`` (its ``request``
object in JSON, every not-applied id included; the text line shows the first few). Duplicates
and versions older than the one held are skipped silently; invalid records are reported on stderr
and skipped. With
``--once`` the command exits 0 once it has read every partition of the topic to its end, or 1
if ``--timeout`` seconds pass first; with ``--timeout`` alone it follows for that long, else until
interrupted (SIGINT/SIGTERM).

Wired into ``olu-worker`` by :func:`add_parser`; ``python -m worker.follow`` runs it standalone.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

import orjson

from .wire import PARAMS_TOPIC

if TYPE_CHECKING:  # the client (numpy, confluent-kafka) is imported when the command runs
    from .client import ModelRelease
    from .exceptions import InvalidRelease

__all__ = ["add_parser", "follow", "main"]

BOOTSTRAP_ENV = ("OLU_KAFKA_BOOTSTRAP_SERVERS", "KAFKA_BOOTSTRAP_SERVERS")
_SHOWN_IDS = 5  # not-applied ids listed on a text line (--json has them all)
_SHOWN_WEIGHTS = 8  # under a feature spec: the largest weights, named, on a text line
_SHOWN_CLASSES = 10  # softmax: class labels listed on a text line


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``follow`` subcommand to an ``argparse`` subparsers object; returns its parser.

    The parser's default ``func`` is :func:`follow` (called as ``func(args, opts)`` like the
    other subcommands of :mod:`worker.cli`).
    """
    p = subparsers.add_parser(
        "follow",
        help="follow the parameter topic: print each new released version (and predictions)",
        description="Subscribe to the parameter topic, keep the latest version of every input "
                    "partition's model and print each new one. Invalid records are reported on "
                    "stderr and skipped.")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT",
                   help="Kafka bootstrap servers (default: $OLU_KAFKA_BOOTSTRAP_SERVERS or "
                        "$KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--topic", default=None,
                   help=f"parameter topic (default: $OLU_PARAMS_TOPIC or {PARAMS_TOPIC})")
    p.add_argument("--group-id", default=None,
                   help="consumer group (default: a new one, so every partition is read; "
                        "subscribers sharing a group split the partitions)")
    p.add_argument("--model", default=None, help="only releases of this model name")
    p.add_argument("--isolation", choices=("read_committed", "read_uncommitted"),
                   default="read_committed",
                   help="isolation level (default read_committed: never show releases of aborted "
                        "transactions)")
    p.add_argument("--json", action="store_true", help="one JSON object per accepted new version")
    p.add_argument("--predict", metavar="X1,X2,...",
                   help="features, or a raw JSON record under a feature spec: after each update, "
                        "print the prediction of the averaged model of that update's input topic "
                        "(probability for logistic, w.x for ridge, the most probable class for "
                        "softmax)")
    p.add_argument("--partition", type=int, default=None,
                   help="with --predict: use this input partition's model instead of the average")
    p.add_argument("--once", action="store_true",
                   help="exit after catching up (every partition read to its end); exit 1 on "
                        "--timeout")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="stop after this many seconds (with --once: give up catching up, exit 1)")
    p.add_argument("--kafka", action="append", default=None, metavar="KEY=VALUE",
                   help="librdkafka setting for the subscriber, repeatable (SASL, TLS, ...)")
    p.add_argument("--schema-registry-url", default=None, metavar="URL",
                   help="read releases in a Schema Registry format (avro, json-schema) too "
                        "(default: $OLU_SCHEMA_REGISTRY_URL; JSON releases need none)")
    p.set_defaults(func=follow)
    return p


def _features(text: str) -> list[float] | dict:
    if text.lstrip().startswith("{"):  # a raw record, for releases under a feature spec
        try:
            record = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise ValueError(f"--predict: {text!r} is not a JSON object") from None
        if not isinstance(record, dict):
            raise ValueError(f"--predict: {text!r} is not a JSON object")
        return record
    try:
        values = [float(item) for item in text.replace(" ", "").split(",") if item]
    except ValueError:
        raise ValueError(f"--predict takes comma-separated numbers, got {text!r}") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"--predict takes comma-separated finite numbers, got {text!r}")
    return values


def _kafka_config(items: list[str] | None) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--kafka takes KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    return conf


def _kafka_log(err: TextIO) -> logging.Logger:
    """The client's log lines and errors on ``err``, a repeating one (a broker down) shown once per
    doubling window instead of at every reconnect (worker/kafka_log.py)."""
    from .kafka_log import RepeatLimiter

    logger = logging.getLogger(f"olu.follow.kafka.{id(err)}")
    if not logger.handlers:
        handler = logging.StreamHandler(err)
        handler.setFormatter(logging.Formatter("olu-worker follow: kafka: %(message)s"))
        logger.addHandler(handler)
        logger.addFilter(RepeatLimiter())
        logger.propagate = False
        logger.setLevel(logging.WARNING)
    return logger


def _where(msg) -> str:
    try:
        return f"{msg.topic()}/{msg.partition()}@{msg.offset()}"
    except Exception:
        return "?"


def _text_line(release: ModelRelease, prediction: float | str | int | None,
               probability: float | None = None) -> str:
    p = release.privacy
    line = (f"{release.topic}/{release.partition} v{release.version} model={release.model} "
            f"algorithm={release.algorithm} t={release.t} deletions={release.deletions} "
            f"unit={p.get('unit', 'all-deletions')} epsilon={p['epsilon']:.4g} "
            f"budget_used={p['budget_used']:.2%}")
    if release.classes is not None:  # softmax: the labels, and the K x d shape of the weights
        shown = ",".join(str(c) for c in release.classes[:_SHOWN_CLASSES])
        more = ",..." if len(release.classes) > _SHOWN_CLASSES else ""
        line += f" classes={shown}{more} ({len(release.classes)}x{release.dim})"
    if release.generation is not None:  # a rotation: which model, and how old
        line += (f" generation={release.generation} epoch={release.epoch} "
                 f"model_age={p.get('model_age')}")
    if release.trigger:
        line += f" trigger={release.trigger}"
    if release.request is not None:
        line += " " + _request_text(release.request)
    if release.feature_names is not None:  # the strongest weights, by the spec's names
        line += " weights: " + _largest_weights(release)
    if prediction is not None:
        line += (f" prediction={prediction:.6g}" if isinstance(prediction, float)
                 else f" prediction={prediction}")
    if probability is not None:
        line += f" (p={probability:.4g})"
    return line


def _largest_weights(release: ModelRelease) -> str:
    """The :data:`_SHOWN_WEIGHTS` largest weights by magnitude, each named by its feature (by
    ``class:feature`` in a softmax's K x dim matrix)."""
    names, weights, dim = release.feature_names, release.weights, release.dim

    def name(i: int) -> str:
        if release.classes is None:
            return names[i % dim]
        return f"{release.classes[i // dim]}:{names[i % dim]}"

    order = sorted(range(len(weights)), key=lambda i: -abs(weights[i]))[:_SHOWN_WEIGHTS]
    text = " ".join(f"{name(i)}={weights[i]:+.3g}" for i in order)
    return text + (f" (largest {_SHOWN_WEIGHTS} of {len(weights)})" if len(weights) > _SHOWN_WEIGHTS
                   else "")


def _request_text(request) -> str:
    """The deletion request of a release in a few words (at most :data:`_SHOWN_IDS` ids listed)."""
    missing = request["not_applied"]
    text = f"request=applied {request['applied']}/{request['ids']} not_applied={len(missing)}"
    if missing:
        shown = ",".join(missing[:_SHOWN_IDS]) + (",..." if len(missing) > _SHOWN_IDS else "")
        text += f" [{shown}]"
    return text + f" duplicates={request['duplicates']}"


def follow(args: argparse.Namespace, opts: argparse.Namespace | None = None, *,
           stdout: TextIO | None = None,
           stderr: TextIO | None = None, stop: threading.Event | None = None) -> int:
    """Run ``olu-worker follow`` with parsed arguments; returns the exit code.

    ``opts`` is where :func:`worker.cli.main` moves the options it shares with ``demo``
    (``--json``); each option is looked up in ``args`` first, then in ``opts``.
    """
    def option(name: str, default=None):
        for space in (args, opts):
            if space is not None and getattr(space, name, None) is not None:
                return getattr(space, name)
        return default

    from confluent_kafka import KafkaException

    from .client import ParamsSubscriber
    from .features.exceptions import BadFeature

    as_json = bool(option("json", False))
    once = bool(option("once", False))
    timeout = option("timeout")
    partition = option("partition")
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    bootstrap = option("bootstrap_servers") or next(
        (os.environ[n] for n in BOOTSTRAP_ENV if os.environ.get(n)), None)
    if not bootstrap:
        print("olu-worker follow: --bootstrap-servers (or OLU_KAFKA_BOOTSTRAP_SERVERS) is required",
              file=err)
        return 2
    topic = option("topic") or os.environ.get("OLU_PARAMS_TOPIC") or PARAMS_TOPIC
    try:
        features = _features(option("predict")) if option("predict") else None
        extra_config = {**_kafka_config(option("kafka")), "logger": _kafka_log(err)}
    except ValueError as exc:
        print(f"olu-worker follow: {exc}", file=err)
        return 2

    def invalid(exc: InvalidRelease, msg) -> None:
        print(f"olu-worker follow: skipped record {_where(msg)}: {exc.reason}: {exc}", file=err,
              flush=True)

    kafka_log = _kafka_log(err)

    def kafka_error(error) -> None:
        kafka_log.error("%s", error.str() if hasattr(error, "str") else error)

    try:
        sub = ParamsSubscriber(bootstrap, topic, group_id=option("group_id"),
                               isolation=option("isolation", "read_committed"),
                               extra_config=extra_config,
                               model=option("model"), on_invalid=invalid, on_error=kafka_error,
                               schema_registry=option("schema_registry_url")
                               or os.environ.get("OLU_SCHEMA_REGISTRY_URL") or None)
    except KafkaException as exc:  # e.g. an unknown --kafka key
        reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        print(f"olu-worker follow: a Kafka client setting was refused: {reason}", file=err)
        return 2

    wrong_features: list[str] = []  # --predict does not fit the model: said once, exit 2

    def show(release: ModelRelease) -> None:
        prediction: float | str | int | None = None
        probabilities: dict | None = None  # softmax: every class's, in class order
        if features is not None:
            if isinstance(features, dict) and release.features is None:
                wrong_features.append(
                    f"--predict is a record, but the model of {release.topic}/{release.partition} "
                    "has no feature spec: give its features as numbers")
                return
            if not isinstance(features, dict) and len(features) != release.dim:
                wrong_features.append(
                    f"--predict has {len(features)} features, the model of {release.topic}/"
                    f"{release.partition} has {release.dim}")
                return
            try:
                prediction = sub.predict(features, partition=partition, topic=release.topic)
                if release.classes is not None:
                    probabilities = sub.predict_proba(features, partition=partition,
                                                      topic=release.topic)
            except BadFeature as bad:
                wrong_features.append(f"--predict: {bad.detail}")
                return
            except (LookupError, ValueError) as exc:
                prediction = None
                print(f"olu-worker follow: no prediction for {release.topic}: {exc}", file=err,
                      flush=True)
        if as_json:
            record = release.to_dict()
            if features is not None:
                record["prediction"] = prediction
            if probabilities is not None:
                record["probabilities"] = list(probabilities.values())
            if release.feature_names is not None:
                record["feature_names"] = list(release.feature_names)
            out.write(orjson.dumps(record).decode() + "\n")
        else:
            out.write(_text_line(release, prediction, None if probabilities is None
                                 else probabilities.get(prediction)) + "\n")
        out.flush()

    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while not stop.is_set():
            if once and sub.caught_up:
                return 0
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                if once:
                    print(f"olu-worker follow: not caught up with {topic} after {timeout:g} s",
                          file=err)
                    return 1
                return 0
            wait = 0.5 if remaining is None else max(0.0, min(0.5, remaining))
            for release in sub.poll(wait):
                show(release)
                if wrong_features:
                    print(f"olu-worker follow: {wrong_features[0]}", file=err)
                    return 2
        return 0
    except KafkaException as exc:  # fatal consumer error
        print(f"olu-worker follow: {exc}", file=err)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sub.close()
        s = sub.stats
        if s["invalid"] or s["conflicts"]:
            print(f"olu-worker follow: {s['accepted']} versions accepted, {s['invalid']} invalid "
                  f"and {s['conflicts']} conflicting records skipped", file=err)


def main(argv: list[str] | None = None) -> int:
    """``python -m worker.follow ...`` (the same options as ``olu-worker follow``)."""
    parser = argparse.ArgumentParser(prog="olu-worker")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["follow", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args, None)


if __name__ == "__main__":
    raise SystemExit(main())
