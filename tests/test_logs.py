"""Structured logs: one JSON object per line with the extra fields."""

from __future__ import annotations

import io
import logging
import re
from datetime import datetime

import numpy as np
import orjson
import pytest

from worker.logs import configure_logging, get_logger


@pytest.fixture
def stream():
    buf = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    handler = configure_logging("DEBUG", "json", stream=buf)
    try:
        yield buf
    finally:
        root.removeHandler(handler)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.captureWarnings(False)


def lines(buf: io.StringIO) -> list[dict]:
    text = buf.getvalue()
    assert text.endswith("\n")
    return [orjson.loads(line) for line in text.splitlines()]


def test_json_line_with_core_and_extra_fields(stream):
    log = get_logger("olu.test")
    log.info("partition %s assigned", 3, extra={"topic": "olu.events", "partition": 3, "offset": 1200,
                                                "skipped": [("a", 1)], "lag": np.float64(1.5)})
    [entry] = lines(stream)
    assert entry["msg"] == "partition 3 assigned"
    assert entry["level"] == "INFO" and entry["logger"] == "olu.test"
    assert entry["topic"] == "olu.events" and entry["partition"] == 3 and entry["offset"] == 1200
    assert entry["skipped"] == [["a", 1]] and entry["lag"] == 1.5
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["ts"])
    assert datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).utcoffset().total_seconds() == 0
    for internal in ("args", "levelno", "pathname", "thread", "msecs", "exc_info"):
        assert internal not in entry


def test_one_line_per_record_even_with_tracebacks_and_newlines(stream):
    log = get_logger("olu.test")
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        log.exception("failed\nbadly", extra={"detail": "a\nb"})
    log.warning("next")
    entries = lines(stream)
    assert len(entries) == 2 and len(stream.getvalue().splitlines()) == 2
    assert "RuntimeError: boom" in entries[0]["exc"] and entries[0]["msg"] == "failed\nbadly"
    assert entries[1]["msg"] == "next" and entries[1]["level"] == "WARNING"


def test_extra_cannot_overwrite_core_fields(stream):
    get_logger("olu.test").info("hello", extra={"level": "fake", "ts": "fake", "logger": "fake"})
    [entry] = lines(stream)
    assert entry["level"] == "INFO" and entry["ts"] != "fake" and entry["logger"] == "olu.test"
    assert entry["extra_level"] == "fake"


def test_unserialisable_extras_become_strings(stream):
    class Thing:
        def __str__(self):
            return "thing!"

    get_logger("olu.test").info("x", extra={"obj": Thing(), "tags": {"b"}, "huge": 2 ** 80})
    [entry] = lines(stream)
    assert entry["obj"] == "thing!" and entry["tags"] == ["b"] and entry["huge"] == str(2 ** 80)


def test_level_filtering_and_reconfigure(stream):
    log = get_logger("olu.test")
    buf = io.StringIO()
    configure_logging("warning", "json", stream=buf)  # replaces the earlier handler
    log.info("dropped")
    log.error("kept")
    assert stream.getvalue() == ""
    assert [e["msg"] for e in lines(buf)] == ["kept"]
    ours = [h for h in logging.getLogger().handlers if getattr(h, "_olu_handler", False)]
    assert len(ours) == 1


def test_text_format(stream):
    buf = io.StringIO()
    configure_logging("INFO", "text", stream=buf)
    get_logger("olu.test").info("hello", extra={"partition": 2})
    line = buf.getvalue().strip()
    assert "INFO" in line and "olu.test: hello" in line and "partition=2" in line


@pytest.mark.parametrize("level,fmt", [("LOUD", "json"), ("INFO", "xml")])
def test_bad_arguments(level, fmt):
    with pytest.raises(ValueError):
        configure_logging(level, fmt, stream=io.StringIO())
