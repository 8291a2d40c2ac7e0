"""``python -m worker.devtools.kafka_local``: a local single-node Apache Kafka (KRaft) broker on
the command line, without Docker.

Runs a :class:`~worker.devtools.kafka_broker.KafkaBroker` until Ctrl-C / SIGTERM and prints
``KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:<port>`` (and, with ``--sasl-user NAME:PASSWORD``,
``KAFKA_SASL_BOOTSTRAP_SERVERS=127.0.0.1:<port>``); ``--resolve-only`` only fetches and caches
the broker's jars (:func:`~worker.devtools.kafka_jars.resolve_jars`) and prints their directory.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from .kafka_broker import KafkaBroker
from .kafka_jars import DEFAULT_VERSION, resolve_jars


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m worker.devtools.kafka_local",
        description="Run a single-node Apache Kafka (KRaft) broker on 127.0.0.1 until Ctrl-C.",
    )
    parser.add_argument("--version", default=DEFAULT_VERSION,
                        help="Kafka release (default %(default)s)")
    parser.add_argument("--port", type=int, help="client (PLAINTEXT) port; default: a free one")
    parser.add_argument("--data-dir",
                        help="keep broker data here (default: a temp dir removed on exit)")
    parser.add_argument("--resolve-only", action="store_true",
                        help="only fetch/cache the jars, print their dir")
    parser.add_argument("--sasl-user", action="append", default=[], metavar="NAME:PASSWORD",
                        help="add a SASL_PLAINTEXT listener (PLAIN) with this user; repeatable")
    parser.add_argument("--sasl-port", type=int, help="SASL_PLAINTEXT port; default: a free one")
    args = parser.parse_args(argv)
    sasl_users = {}
    for item in args.sasl_user:
        user, sep, password = item.partition(":")
        if not sep:
            parser.error(f"--sasl-user takes NAME:PASSWORD, got {item!r}")
        sasl_users[user] = password

    if args.resolve_only:
        print(resolve_jars(args.version))
        return 0

    # SIGTERM takes the same clean path as Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        broker = KafkaBroker(args.version, port=args.port, data_dir=args.data_dir,
                             sasl_users=sasl_users, sasl_port=args.sasl_port)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        broker.start()
        print(f"KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap_servers}", flush=True)
        if sasl_users:
            print(f"KAFKA_SASL_BOOTSTRAP_SERVERS={broker.sasl_bootstrap_servers}", flush=True)
        print(f"kafka {args.version} running (log: {broker.log_file}); Ctrl-C to stop",
              file=sys.stderr, flush=True)
        while broker.is_running:
            time.sleep(0.5)
        print(f"Kafka broker exited unexpectedly.\n{broker.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
