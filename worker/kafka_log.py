"""librdkafka's log lines through Python logging, a repeating failure shown once per backoff.

A client that cannot reach its broker logs the same failure on every reconnect attempt, every
50-100 ms at first: ``follow`` against a dead address printed 155 raw lines in 8 s, and the worker
as many, drowning the one line that says what is wrong. Every client of ours passes
:func:`client_logger` as librdkafka's ``logger``: its lines then go through the process's log
handler (JSON or text) and :class:`RepeatLimiter` lets a line through the first time, then once
per window that doubles up to a minute, saying how many it held back.

>>> clock = iter([0.0, 0.1, 0.5, 1.2, 1.3, 3.5, 20.0]).__next__
>>> limiter = RepeatLimiter(first_gap=1.0, clock=clock)
>>> def line(text):
...     record = logging.LogRecord("olu.kafka", logging.ERROR, "", 0, "%s", (text,), None)
...     return record.getMessage() if limiter.filter(record) else None
>>> line("Connect to 127.0.0.1:1 failed (after 0ms)")
'Connect to 127.0.0.1:1 failed (after 0ms)'
>>> (line("Connect to 127.0.0.1:1 failed (after 1ms)"),
...  line("Connect to 127.0.0.1:1 failed (after 0ms)"))
(None, None)
>>> line("Connect to 127.0.0.1:1 failed (after 0ms)")
'Connect to 127.0.0.1:1 failed (after 0ms) (2 more like it held back; next report within 2 s)'
>>> line("Connect to 127.0.0.1:1 failed (after 2ms)") is None
True
>>> line("Connect to 127.0.0.1:1 failed (after 0ms)")
'Connect to 127.0.0.1:1 failed (after 0ms) (1 more like it held back; next report within 4 s)'
>>> # 16.5 s without one: a new outage, shown at once
>>> line("Connect to 127.0.0.1:1 failed (after 0ms)")
'Connect to 127.0.0.1:1 failed (after 0ms)'
"""

from __future__ import annotations

import logging
import re
import time

__all__ = ["RepeatLimiter", "client_logger"]

_NUMBERS = re.compile(r"\d+")


class RepeatLimiter(logging.Filter):
    """Show a line, then hold back lines like it (the same text but for its numbers) until a window
    has passed; the window doubles on each report up to ``max_gap``. After ``quiet`` seconds
    without such a line the next one starts a new episode and is shown at once (a new outage):
    ``quiet`` exceeds librdkafka's longest reconnect backoff (10 s), so one outage stays one."""

    def __init__(self, first_gap: float = 1.0, max_gap: float = 60.0, quiet: float = 15.0,
                 clock=time.monotonic):
        super().__init__()
        self.first_gap, self.max_gap, self.quiet, self.clock = first_gap, max_gap, quiet, clock
        # shape -> [next report due, window, held back, last seen]
        self._seen: dict[tuple, list] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        message = record.getMessage()
        shape = (record.name, record.levelno, _NUMBERS.sub("#", message))
        state = self._seen.get(shape)
        if state is None or now - state[3] > self.quiet:
            self._seen[shape] = [now + self.first_gap, self.first_gap, 0, now]
            return True
        state[3] = now
        if now < state[0]:
            state[2] += 1
            return False
        held, state[2] = state[2], 0
        state[1] = min(2 * state[1], self.max_gap)
        state[0] = now + state[1]
        if held:
            record.msg, record.args = (
                f"{message} ({held} more like it held back; next report within {state[1]:g} "
                f"s)"), None
        return True


def client_logger(name: str = "olu.kafka") -> logging.Logger:
    """The logger to pass as a confluent-kafka client's ``logger`` (installs the limiter once)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, RepeatLimiter) for f in logger.filters):
        logger.addFilter(RepeatLimiter())
    return logger
