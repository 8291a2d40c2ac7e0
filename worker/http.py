"""``/metrics``, ``/healthz`` and ``/readyz`` on a small stdlib HTTP server in a daemon thread.

- ``/metrics``: the worker's Prometheus registry (text exposition format).
- ``/healthz`` (liveness): 200 while the worker loop called :meth:`HealthServer.heartbeat` within
  the liveness window (default 60 s; the window also runs from :meth:`start`, so a starting worker
  is live), 503 otherwise. Keep the window above the longest restore or final-snapshot pause of
  the loop (rebalance callbacks run inside ``poll()``).
- ``/readyz`` (readiness): 200 once :meth:`HealthServer.set_ready` was called with True (the loop
  does so when every assigned partition is restored), 503 before and after ``set_ready(False)``.

Nothing is logged per request.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from .metrics import CONTENT_TYPE

__all__ = ["HealthServer"]

DEFAULT_LIVENESS_WINDOW = 60.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Handler(BaseHTTPRequestHandler):
    server_version = "olu-worker"
    sys_version = ""
    health: HealthServer  # set on the per-server subclass

    def log_message(self, format, *args):  # no request logging to stderr
        pass

    def _send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
              head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _route(self, head: bool) -> None:
        path = urlsplit(self.path).path.rstrip("/") or "/"
        health = self.health
        try:
            if path == "/metrics":
                self._send(200, health.metrics.render(), CONTENT_TYPE, head)
            elif path == "/healthz":
                alive, age = health.liveness()
                text = f"{'ok' if alive else 'stalled'}: last progress {age:.1f}s ago\n"
                self._send(200 if alive else 503, text.encode(), head=head)
            elif path == "/readyz":
                ready = health.ready
                self._send(200 if ready else 503, b"ready\n" if ready else b"not ready\n",
                           head=head)
            else:
                self._send(404, b"not found\n", head=head)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception:  # never let a scrape take the thread down with a traceback on stderr
            try:
                self._send(500, b"internal error\n", head=head)
            except OSError:
                pass

    def do_GET(self):
        self._route(head=False)

    def do_HEAD(self):
        self._route(head=True)


class HealthServer:
    """Serve ``metrics`` (a :class:`worker.metrics.Metrics`) and the probes on ``host:port``."""

    def __init__(self, metrics, host: str = "0.0.0.0", port: int = 9464, *,
                 liveness_window: float = DEFAULT_LIVENESS_WINDOW, clock=time.monotonic):
        if not liveness_window > 0:
            raise ValueError(f"liveness_window must be > 0, got {liveness_window!r}")
        self.metrics = metrics
        self.host, self.port = host, int(port)
        self.liveness_window = float(liveness_window)
        self._clock = clock
        self._last_beat = clock()
        self._ready = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ called by the loop
    def heartbeat(self) -> None:
        """The loop made progress (call once per iteration)."""
        self._last_beat = self._clock()

    def set_ready(self, ready: bool) -> None:
        self._ready = bool(ready)

    # ------------------------------------------------------------------ state
    @property
    def ready(self) -> bool:
        return self._ready

    def liveness(self) -> tuple[bool, float]:
        """(alive, seconds since the last heartbeat)."""
        age = max(0.0, self._clock() - self._last_beat)
        return age <= self.liveness_window, age

    @property
    def alive(self) -> bool:
        return self.liveness()[0]

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> int:
        """Bind and serve in a daemon thread; returns the bound port (useful with port 0)."""
        if self._server is not None:
            return self.port
        handler = type("Handler", (_Handler,), {"health": self})
        self._server = _Server((self.host, self.port), handler)
        self.port = self._server.server_address[1]
        self._last_beat = self._clock()
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.2},
                                        name=f"olu-http-{self.port}", daemon=True)
        self._thread.start()
        return self.port

    def stop(self, timeout: float = 5.0) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout)

    def __enter__(self) -> HealthServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
