"""``olu-worker receipts``: what became of a deletion request, checked against the params topic.

    olu-worker receipts --id DSR-2291               # its receipt (text, or --json)
    olu-worker receipts --id DSR-2291 --verify      # ... and does the params topic bear it out?
    olu-worker receipts --verify                    # every receipt
    olu-worker receipts --pending                   # deletes of the input topic without a receipt
    olu-worker receipts --late                      # ... pending, or answered, past the deadline

Connection and topics are read as by ``run`` (``--bootstrap-servers``, ``OLU_KAFKA_*``,
``OLU_RECEIPTS_TOPIC``, ``OLU_PARAMS_TOPIC``, ``OLU_INPUT_TOPICS``,
``OLU_DELETION_DEADLINE_SECONDS``).
Each topic is read to its end by a consumer that joins no group.

A receipt verifies when its params topic bears it out: an honoured one names a version, and a
release of the same model and input partition exists at that version or above; the first such
release states the same privacy unit and delta, is of the receipt's epoch or later, and (a noised
request, same epoch) its epsilon is what the receipt says under per-request, at most that under
all-deletions. A refused or nothing-to-unlearn receipt names no release and verifies as it is.

Exit codes: 0 found and verified (none pending or late); 1 a receipt failed verification; 3 the
request has no receipt (yet), or some request is pending or late; 4 a topic could not be read
within ``--timeout``; 2 a configuration error.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import orjson

__all__ = ["EXIT_FAILED", "EXIT_MISSING", "EXIT_UNREADABLE", "add_parser", "check_receipt",
           "receipts"]

EXIT_FAILED, EXIT_MISSING, EXIT_UNREADABLE = 1, 3, 4
AUDIT_OPTIONS = ("request_id", "pending", "late", "verify", "json", "timeout")
CONNECTION = ("bootstrap_servers", "input_topics", "params_topic", "receipts_topic", "kafka",
              "deletion_deadline_seconds", "schema_registry_url")
_EPSILON_RTOL = 1e-9


def add_parser(subparsers) -> argparse.ArgumentParser:
    from .config.loading import add_arguments

    p = subparsers.add_parser(
        "receipts", help="deletion receipts: look one up, list pending and late requests, verify "
                         "them against the params topic",
        description="Read the receipts topic (and, as asked, the params and input topics) to its "
                    "end and report on deletion requests. Connection and topics as for 'run'. "
                    "Exit 0 found and verified, 1 a receipt failed verification, 3 missing, "
                    "pending or late, 4 a topic could not be read.")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--id", dest="request_id", metavar="REQUEST_ID",
                      help="the request to look up (its request_id, or topic/partition@offset)")
    what.add_argument("--pending", action="store_true",
                      help="list the deletes of the input topic that have no receipt yet")
    what.add_argument("--late", action="store_true",
                      help="list the requests past the deadline: pending longer, or answered later")
    p.add_argument("--verify", action="store_true",
                   help="check each receipt shown against the params topic")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to read each topic to its end (default 60)")
    add_arguments(p, shown=CONNECTION)
    p.set_defaults(func=receipts)
    return p


# ------------------------------------------------------------------ reading
def read_to_end(settings, topic: str, timeout: float) -> list:
    """Every record of ``topic``, partition by partition in offset order (no group is joined)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from .kafka_log import client_logger

    conf = {**settings.consumer_config(), "group.id": "olu-receipts-audit",
            "enable.auto.commit": False, "enable.partition.eof": True,
            "isolation.level": "read_committed", "logger": client_logger()}
    consumer = Consumer(conf)
    deadline = time.monotonic() + timeout
    try:
        meta = consumer.list_topics(topic, timeout=min(15.0, timeout)).topics.get(topic)
        if meta is None or meta.error is not None:
            return []  # no such topic yet: nothing was published to it
        parts = [TopicPartition(topic, p, 0) for p in sorted(meta.partitions)]
        ends = {}
        for tp in parts:
            low, high = consumer.get_watermark_offsets(tp, timeout=min(15.0, timeout))
            if high > low:
                ends[tp.partition] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        out, pending = [], set(ends)
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} was not read to its end within {timeout:g} s")
            for msg in consumer.consume(1000, timeout=0.5):
                err = msg.error()
                if err is None:
                    out.append(msg)
                    if msg.offset() + 1 >= ends[msg.partition()]:
                        pending.discard(msg.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                else:
                    raise TimeoutError(f"{topic}: {err.str()}")
        return out
    finally:
        consumer.close()


def latest_receipts(messages, reader=None) -> dict[str, tuple[dict, int]]:
    """request id -> (its receipt, the receipt record's timestamp in ms): each one's newest (a
    framed one read through ``reader``, a ReleaseReader)."""
    found = {}
    for msg in messages:
        value = msg.value()
        if value is None:
            continue
        try:
            framed = value[:1] == b"\0" and reader is not None
            receipt = orjson.loads(reader.read(msg.topic(), value, "receipt") if framed else value)
        except Exception:  # noqa: BLE001 - not a receipt this tool can read
            continue
        if isinstance(receipt, dict) and isinstance(receipt.get("request_id"), str):
            found[receipt["request_id"]] = (receipt, msg.timestamp()[1])
    return found


def registry_reader(settings):
    """A reader of framed releases and receipts, when OLU_SCHEMA_REGISTRY_URL names a registry."""
    if not settings.schema_registry_url:
        return None
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from .formats.release import ReleaseReader

    return ReleaseReader(SchemaRegistryClient({"url": settings.schema_registry_url}))


def releases_by_partition(messages, reader=None) -> dict[tuple[str, int], list[dict]]:
    """(input topic, partition) -> its releases in params-topic order, as JSON records (a framed
    one read through ``reader``)."""
    out: dict[tuple[str, int], list[dict]] = {}
    for msg in messages:
        value = msg.value()
        try:
            framed = value[:1] == b"\0" and reader is not None
            record = orjson.loads(reader.read(msg.topic(), value) if framed else value)
        except Exception:  # noqa: BLE001 - not a release this tool can read: not evidence
            continue
        if isinstance(record, dict) and "topic" in record and "partition" in record:
            out.setdefault((record["topic"], record["partition"]), []).append(record)
    return out


# ------------------------------------------------------------------ checking
def check_receipt(receipt: dict, releases: dict[tuple[str, int], list[dict]]) -> str | None:
    """None if the params topic bears ``receipt`` out (module doc), else what does not hold.

    >>> r = {"status": "honoured", "model": "m", "topic": "t", "partition": 0, "version": 5,
    ...      "guarantee": {"outcome": "noised", "unit": "per-request", "delta": 1e-5,
    ...                    "epsilon": 1.0, "epoch": 0}}
    >>> rel = {"model": "m", "version": 7, "epoch": 0,
    ...        "privacy": {"unit": "per-request", "delta": 1e-5, "epsilon": 1.0}}
    >>> check_receipt(r, {("t", 0): [rel]}) is None, check_receipt(r, {})
    (True, 'no release of t/0 at version 5 or above')
    """
    if receipt.get("status") != "honoured":
        return None
    where = (receipt["topic"], receipt["partition"])
    later = [r for r in releases.get(where, ()) if r.get("version", -1) >= receipt["version"]
             and r.get("model") == receipt["model"]]
    if not later:
        return f"no release of {where[0]}/{where[1]} at version {receipt['version']} or above"
    first = min(later, key=lambda r: r["version"])
    g, p = receipt["guarantee"], first.get("privacy", {})
    at = f"release {first['version']}"
    if p.get("unit") != g["unit"] or p.get("delta") != g["delta"]:
        return (f"{at} states unit {p.get('unit')} delta {p.get('delta')}, the receipt "
                f"{g['unit']} delta {g['delta']}")
    if first.get("epoch", -1) < g["epoch"]:
        return f"{at} is of epoch {first.get('epoch')}, before the receipt's {g['epoch']}"
    if g["outcome"] == "noised" and first.get("epoch") == g["epoch"] and "generation" not in g:
        released = p.get("epsilon")
        if not isinstance(released, (int, float)):
            return f"{at} states no epsilon"
        same = math.isclose(released, g["epsilon"], rel_tol=_EPSILON_RTOL)
        if (g["unit"] == "per-request" and not same) or (
                g["unit"] == "all-deletions" and released > g["epsilon"] and not same):
            return f"{at} states epsilon {released}, the receipt {g['epsilon']}"
    return None


def pending_deletes(settings, messages, receipts: dict) -> list[dict]:
    """The deletes of the input topic that have no receipt: (request id, where, its timestamp)."""
    from .stream.exceptions import DeadLetter
    from .stream.input.decode import Delete
    from .stream.input.framed import RegistryInput, decode_message, original
    from .stream.output.receipts import request_id

    registry = RegistryInput.from_settings(settings)
    if registry is not None:  # framed input: as the worker reads it, through the registry
        from .formats.input import transcode

        messages, _, error = transcode(registry.decoder, messages)
        if error is not None:
            raise TimeoutError(f"the Schema Registry could not decode the input ({error})")
    out = []
    for msg in messages:
        if registry is None and msg.value() is not None and b'"delete"' not in msg.value():
            continue  # not a delete: no JSON parse for each insert
        try:
            event = decode_message(msg, dim=settings.dim, max_bytes=settings.max_record_bytes,
                                   features=settings.feature_spec, labels=True)
        except DeadLetter:
            continue  # dead-lettered (or an insert this check need not read): not a request
        if isinstance(event, Delete):
            msg = original(msg)
            rid = request_id(event, msg.topic(), msg.partition(), msg.offset())
            if rid not in receipts:
                out.append({"request_id": rid, "topic": msg.topic(), "partition": msg.partition(),
                            "offset": msg.offset(), "at_ms": msg.timestamp()[1]})
    return out


# ------------------------------------------------------------------ the command
def _line(receipt: dict, problem: str | None, verified: bool) -> str:
    named = (f"subject {receipt['subject']}" if "subject" in receipt
             else f"{len(receipt.get('ids', []))} id(s)")
    rec = receipt["records"]
    text = (f"{receipt['request_id']}: {receipt['status']} ({named}; applied {rec['applied']}/"
            f"{rec['named']}, not_applied {rec['not_applied']}, duplicates {rec['duplicates']})")
    if receipt["status"] == "honoured":
        g = receipt["guarantee"]
        text += (f" in effect from {receipt['topic']}/{receipt['partition']} version "
                 f"{receipt['version']}: {g['outcome']}, {g['unit']} epsilon {g['epsilon']:.4g} "
                 f"at delta {g['delta']:g}")
    elif receipt.get("reason"):
        text += f": {receipt['reason']}"
    if verified:
        text += " [verified]" if problem is None else f" [NOT VERIFIED: {problem}]"
    return text


def receipts(args, opts) -> int:
    from .config import load_settings

    settings = load_settings(args, command="produce")  # the connection is required
    out = sys.stdout
    reader = registry_reader(settings)
    try:
        found = latest_receipts(read_to_end(settings, settings.receipts_topic, opts.timeout),
                                reader)
        needs_input = opts.pending or opts.late
        inputs = [m for t in settings.input_topics
                  for m in read_to_end(settings, t, opts.timeout)] if needs_input else []
        releases = (releases_by_partition(read_to_end(settings, settings.params_topic,
                                                      opts.timeout), reader)
                    if opts.verify else {})
    except TimeoutError as exc:
        print(f"olu-worker receipts: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    if needs_input:
        return _report_pending(settings, inputs, found, opts, out)
    if opts.request_id is not None:
        if opts.request_id not in found:
            print(f"olu-worker receipts: no receipt for {opts.request_id!r} (yet)", file=sys.stderr)
            return EXIT_MISSING
        shown = [found[opts.request_id][0]]
    else:
        shown = [receipt for receipt, _ in found.values()]
    failed = 0
    for receipt in shown:
        problem = check_receipt(receipt, releases) if opts.verify else None
        failed += problem is not None
        if opts.json:
            extra = {"verified": problem is None, "problem": problem} if opts.verify else {}
            out.write(orjson.dumps({**receipt, **extra}).decode() + "\n")
        else:
            out.write(_line(receipt, problem, opts.verify) + "\n")
    return EXIT_FAILED if failed else 0


def _report_pending(settings, inputs, found, opts, out) -> int:
    deadline_ms = settings.deletion_deadline_seconds * 1000.0
    now_ms = time.time() * 1000.0
    pending = pending_deletes(settings, inputs, found)
    rows = [dict(p, status="pending", age_s=(now_ms - p["at_ms"]) / 1000.0) for p in pending]
    if opts.late:
        rows = [r for r in rows if r["age_s"] * 1000.0 > deadline_ms]
        at = {(m.topic(), m.partition(), m.offset()): m.timestamp()[1] for m in inputs}
        for receipt, stamped in found.values():
            asked = at.get((receipt["topic"], receipt["partition"], receipt["offset"]))
            if asked is not None and stamped - asked > deadline_ms:
                rows.append({"request_id": receipt["request_id"], "status": "answered_late",
                             "topic": receipt["topic"], "partition": receipt["partition"],
                             "offset": receipt["offset"], "at_ms": asked,
                             "age_s": (stamped - asked) / 1000.0})
    for row in rows:
        out.write(orjson.dumps(row).decode() + "\n" if opts.json else
                  f"{row['request_id']}: {row['status']} ({row['topic']}/{row['partition']}@"
                  f"{row['offset']}, {row['age_s']:.1f} s)\n")
    if not opts.json:
        what = "late" if opts.late else "pending"
        out.write(f"{len(rows)} {what} (deadline {settings.deletion_deadline_seconds:g} s)\n")
    return EXIT_MISSING if rows else 0
