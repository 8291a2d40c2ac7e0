"""A real Schema Registry for tests and local use, without Docker: Apicurio Registry on the JVM.

Why Apicurio: its Confluent-compatible API (``/apis/ccompat/v7``) is what confluent-kafka's
``SchemaRegistryClient`` speaks, it is one self-contained Quarkus application on Maven Central
(``io.apicurio:apicurio-registry-app:<version>``, classifier ``all``, type ``tar.gz``), runs on
Java 17 and keeps its schemas in memory, so each start is a clean registry.

Pieces (the same pattern as the local Kafka broker's, :mod:`worker.devtools.kafka_jars` and
:mod:`worker.devtools.kafka_broker`):

* :func:`resolve_app` fetches the tar.gz into the local Maven repository with
  ``mvn dependency:copy`` and extracts it into ``${XDG_CACHE_HOME:-~/.cache}/olu-worker/
  apicurio-registry-<version>/`` (``apicurio-registry-app-<version>-runner.jar`` and ``lib/``).
  Needs ``mvn`` and network once per machine; later calls return the cached directory at once.
* :class:`SchemaRegistry` runs it on a free loopback port, waits until the API answers and sets
  the global compatibility to BACKWARD (Confluent Schema Registry's default; Apicurio's is NONE).
  :meth:`SchemaRegistry.stop` and :meth:`SchemaRegistry.start` on the same port simulate an
  outage (the schemas are gone afterwards: in-memory storage).
* ``python -m worker.devtools.registry_local`` runs one until Ctrl-C and prints
  ``OLU_SCHEMA_REGISTRY_URL=http://127.0.0.1:<port>/apis/ccompat/v7``.

Only the standard library is used. POSIX only (flock, signals).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from .processes import stop_process

DEFAULT_VERSION = "3.0.9"
GROUP, ARTIFACT = "io.apicurio", "apicurio-registry-app"
CCOMPAT_PATH = "/apis/ccompat/v7"
_MARKER = ".resolved"
_MAVEN_TIMEOUT_S = 1800
_STOP_GRACE_S = 20.0
_LOG_TAIL_LINES = 40
_PR_SET_PDEATHSIG = 1


def default_cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/olu-worker`` (shared with the Kafka jars)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "olu-worker"


def runner_jar(home: Path, version: str = DEFAULT_VERSION) -> Path:
    return home / f"{ARTIFACT}-{version}-runner.jar"


def resolve_app(version: str = DEFAULT_VERSION, cache_dir: str | os.PathLike | None = None) -> Path:
    """The directory holding the extracted application (runner
    jar and ``lib/``), resolved if needed."""
    base = Path(cache_dir) if cache_dir is not None else default_cache_root()
    home = base / f"apicurio-registry-{version}"
    if (home / _MARKER).exists():
        return home
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # serialises processes and threads; dropped if we die
        if (home / _MARKER).exists():
            return home
        with tempfile.TemporaryDirectory(dir=home) as tmp:
            archive = _maven_copy(version, Path(tmp))
            for leftover in ("lib", "meta", runner_jar(home, version).name):
                shutil.rmtree(home / leftover, ignore_errors=True)
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    (home / leftover).unlink()
            with tarfile.open(archive) as tar:
                tar.extractall(home, filter="data")
        if not runner_jar(home, version).exists():
            raise RuntimeError(f"{archive.name} has no {runner_jar(home, version).name}")
        (home / _MARKER).write_text(version + "\n", encoding="utf-8")
    return home


def _maven_copy(version: str, out: Path) -> Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(
            "`mvn` not found on PATH: Maven is needed once to fetch Apicurio Registry")
    coordinate = f"{GROUP}:{ARTIFACT}:{version}:tar.gz:all"
    cmd = [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={coordinate}",
           f"-DoutputDirectory={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S,
                          check=False, cwd=out)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-_LOG_TAIL_LINES:])
        raise RuntimeError(f"Maven failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")
    found = sorted(out.glob(f"{ARTIFACT}-{version}*.tar.gz"))
    if not found:
        raise RuntimeError(f"Maven copied no {ARTIFACT}-{version} tar.gz into {out}")
    return found[0]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise RuntimeError(
            "no `java` found (set JAVA_HOME or put java on PATH); Apicurio 3 needs Java 17+")
    return java


def _die_with_parent() -> None:  # in the child before exec: SIGTERM when the test run dies
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class SchemaRegistry:
    """One Apicurio Registry process on 127.0.0.1 with in-memory storage.

    :attr:`url` is the Confluent-compatible base URL a ``SchemaRegistryClient`` takes. The port is
    kept across :meth:`stop` / :meth:`start`.
    """

    def __init__(self, version: str = DEFAULT_VERSION, *, port: int | None = None,
                 cache_dir: str | os.PathLike | None = None, heap: str = "256m",
                 startup_timeout: float = 120.0, compatibility: str = "BACKWARD"):
        self.version, self.cache_dir, self.heap = version, cache_dir, heap
        self.port = port or _free_port()
        self.startup_timeout, self.compatibility = startup_timeout, compatibility
        self.log_dir = Path(tempfile.mkdtemp(prefix="apicurio-local-"))
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.startup_seconds: float | None = None  # of the last start, launch to first answer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> SchemaRegistry:
        if self.is_running:
            return self
        home = resolve_app(self.version, self.cache_dir)
        self._log = open(self.log_dir / "registry.log", "ab")
        started = time.monotonic()
        self._proc = subprocess.Popen(
            [_java(), f"-Xmx{self.heap}", f"-Dquarkus.http.port={self.port}",
             "-Dquarkus.http.host=127.0.0.1",
             "-jar", str(runner_jar(home, self.version))],
            cwd=home, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent if sys.platform.startswith("linux")
            else None)
        try:
            self._wait_ready(started)
            self._request("PUT", "/config", {"compatibility": self.compatibility})
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        stop_process(proc, _STOP_GRACE_S)
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> SchemaRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, body: dict | None = None, timeout: float = 5.0):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={
                                         "Content-Type": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")

    def _wait_ready(self, started: float) -> None:
        deadline = started + self.startup_timeout
        while True:
            if self._proc is None or self._proc.poll() is not None:
                raise RuntimeError(f"Apicurio Registry exited early.\n{self.log_tail()}")
            with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
                self._request("GET", "/subjects", timeout=2.0)
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Apicurio Registry not ready after {self.startup_timeout:.0f} s.\n"
                    f"{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self) -> str:
        try:
            lines = (self.log_dir / "registry.log").read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log yet)"
        return "\n".join(lines[-_LOG_TAIL_LINES:])


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.devtools.registry_local",
                                     description="Run Apicurio Registry (Confluent API) on "
                                                 "127.0.0.1 until Ctrl-C.")
    parser.add_argument("--version", default=DEFAULT_VERSION,
                        help="Apicurio Registry release (default %(default)s)")
    parser.add_argument("--port", type=int, help="HTTP port; default: a free one")
    parser.add_argument("--resolve-only", action="store_true",
                        help="only fetch/cache the application, print its dir")
    args = parser.parse_args(argv)
    if args.resolve_only:
        print(resolve_app(args.version))
        return 0
    signal.signal(signal.SIGTERM, _interrupt)
    registry = SchemaRegistry(args.version, port=args.port)
    try:
        registry.start()
        print(f"OLU_SCHEMA_REGISTRY_URL={registry.url}", flush=True)
        print(f"apicurio registry {args.version} ready in {registry.startup_seconds:.1f} s; Ctrl-C "
              "to stop",
              file=sys.stderr, flush=True)
        while registry.is_running:
            time.sleep(0.5)
        print(f"Apicurio Registry exited unexpectedly.\n{registry.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        registry.close()


if __name__ == "__main__":
    sys.exit(main())
