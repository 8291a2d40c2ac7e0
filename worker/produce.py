"""``olu-worker produce``: send events to the input topic of a broker, to try a worker out.

    olu-worker produce --bootstrap-servers 127.0.0.1:9092 --generate 20000      # the demo's stream
    olu-worker produce --bootstrap-servers 127.0.0.1:9092 --file events.jsonl   # your own events
    some-command | olu-worker produce --file -                                  # from stdin

``--file`` reads keyed JSON lines (worker/formats/keyed_lines.py: an event, keyed by its id, or
``{"key": ..., "value": ...}``); ``--generate N`` writes the demo's synthetic stream (a noisy
linear rule over ``--dim`` features, ``--delete-rate`` deletes of earlier ids, with ``--poison`` a
malformed record every 997 events). The connection is ``run``'s: the same flags and ``OLU_*``
settings (``OLU_KAFKA_*`` for SASL and TLS, the input topic, the input format with its Schema
Registry), so what is produced is what that worker reads. The producer is idempotent with
``acks=all`` and waits on a full queue, so every event is delivered or the command says which
was not. It ends with one summary line on stderr (``--json``: a JSON object on stdout); exit 0
when every event was delivered, 1 when the broker refused or lost one, 2 on bad input or settings.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import orjson

from .config import add_arguments, load_settings
from .exceptions import ConfigError
from .formats.exceptions import BadKeyedLine

__all__ = ["PRODUCE_OPTIONS", "add_parser", "produce"]

#: This command's own options (worker/cli.py moves them out of the settings' namespace).
PRODUCE_OPTIONS = ("file", "generate", "poison")
#: The settings ``produce --help`` lists; every other setting of ``run`` is accepted unlisted.
SHOWN_SETTINGS = ("bootstrap_servers", "input_topics", "input_format", "schema_registry_url", "dim",
                  "kafka")
TOPIC_WAIT_SECONDS = 15.0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "produce",
        help="send events to the input topic: your JSON lines, or the demo's synthetic stream",
        description="Send events to the worker's input topic (the first of OLU_INPUT_TOPICS), with "
                    "run's connection settings (flags or OLU_*; OLU_KAFKA_* for SASL/TLS). Every "
                    "other setting of `olu-worker run` is accepted too.")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", metavar="PATH",
                        help="JSON lines, '-' for stdin: an event of schemas/insert.schema.json or "
                             "delete.schema.json (keyed by its id), "
                             'or {"key": K, "value": EVENT} (null: a tombstone) with the '
                             'partitioning key')
    source.add_argument("--generate", type=int, metavar="N",
                        help="the demo's synthetic stream of N events")
    p.add_argument("--delete-rate", type=float, default=0.01,
                   help="with --generate: share of events that delete an earlier record, in [0, 1) "
                        "(default 0.01)")
    p.add_argument("--seed", type=int, default=0,
                   help="with --generate: seed of the stream (default 0)")
    p.add_argument("--poison", action="store_true",
                   help="with --generate: a malformed record every 997 events (to see the "
                        "dead-letter topic)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    add_arguments(p, shown=SHOWN_SETTINGS)
    p.set_defaults(func=produce)
    return p


def produce(args, opts) -> int:
    from .stream import demo

    settings = load_settings(args, command="produce")
    if opts.generate is not None and opts.generate < 1:
        raise ConfigError(f"--generate must be a whole number >= 1, got {opts.generate}")
    if not 0.0 <= opts.delete_rate < 1.0:
        raise ConfigError(
            f"--delete-rate must be a share of events in [0, 1), got {opts.delete_rate:g}")
    topic = settings.input_topics[0]
    config = {k: v for k, v in settings.producer_config().items() if k != "transactional.id"}
    config["client.id"] = "olu-worker-produce"
    _wait_for_topic(config, topic)
    encode = demo.event_encoder(settings)  # registers the event schema now: a refusal fails here
    counts = {"inserts": 0, "deletes": 0, "tombstones": 0, "other": 0}
    done = threading.Event()
    started = time.monotonic()
    try:
        if opts.generate is not None:
            events = demo.synthetic_stream(opts.generate, settings.dim, opts.delete_rate, opts.seed,
                                           poison_every=demo.POISON_EVERY if opts.poison else 0)
        else:
            events = _file_events(opts.file)
        demo.produce(config, topic, _counted(events, counts), done, encode, partitions=None)
    except BadKeyedLine as exc:
        raise ConfigError(
            f"--file {opts.file}: {exc}; {done.sent} events before it were sent") from None
    except OSError as exc:
        raise ConfigError(f"--file {opts.file}: cannot read it ({exc.strerror or exc})") from None
    except Exception as exc:  # the registry serializer refused an event
        raise ConfigError(
            f"an event could not be serialized as {settings.input_format}: {type(exc).__name__}: "
            f"{str(exc)[:300]}; {done.sent} events before it were sent") from None
    summary = {"topic": topic, "bootstrap_servers": settings.bootstrap_servers,
               "format": settings.input_format,
               "sent": done.sent, **counts, "seconds": round(time.monotonic() - started, 3),
               "all_delivered": done.failed is None, "failure": None if done.failed is None
               else str(done.failed)}
    if opts.json:
        sys.stdout.write(orjson.dumps(summary).decode() + "\n")
    else:
        print(f"olu-worker produce: {done.sent:,} events to {topic} on "
              f"{settings.bootstrap_servers} ({counts['inserts']:,} inserts, {counts['deletes']:,} "
              f"deletes, {counts['tombstones']:,} tombstones, {counts['other']:,} other) in "
              f"{summary['seconds']:.1f} s"
              + ("" if done.failed is None else f"; NOT all delivered: {done.failed}"),
              file=sys.stderr)
    return 0 if done.failed is None else 1


def _file_events(path: str):
    from .formats.keyed_lines import keyed_records

    if path == "-":
        yield from keyed_records(sys.stdin.buffer)
        return
    with open(path, "rb") as lines:
        yield from keyed_records(lines)


def _counted(events, counts: dict):
    for key, event in events:
        if event is None:
            counts["tombstones"] += 1
        elif isinstance(event, dict) and event.get("op") in ("insert", "delete"):
            counts[event["op"] + "s"] += 1
        else:
            counts["other"] += 1
        yield key, event


def _wait_for_topic(config: dict, topic: str) -> None:
    """The input topic exists (a broker that creates topics on first use does so now), or one line
    says it does not, or that the broker did not answer."""
    from confluent_kafka import KafkaException, Producer

    from .kafka_log import client_logger

    probe = Producer({**config, "logger": client_logger()})
    deadline = time.monotonic() + TOPIC_WAIT_SECONDS
    where = config.get("bootstrap.servers")
    while True:
        try:
            found = probe.list_topics(topic, timeout=5).topics.get(topic)
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"no answer from the Kafka broker at {where} ({exc.args[0].str()}); is it "
                    "running? (OLU_KAFKA_BOOTSTRAP_SERVERS / --bootstrap-servers)") from None
            continue
        if found is not None and found.error is None and found.partitions:
            return
        if time.monotonic() > deadline:
            raise ConfigError(
                f"topic {topic!r} does not exist on {where} and the broker did not create it: "
                "create it, or name another with --input-topics")
        time.sleep(0.2)
