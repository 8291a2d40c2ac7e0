"""A real single-node Apache Kafka (KRaft) broker for tests and local use, without Docker.

Why: librdkafka's mock cluster does not implement transactions faithfully (a
``read_committed`` consumer still sees aborted records) and Docker is not available
everywhere, so tests run the genuine broker from Maven Central jars on the local JVM.

Pieces:

* :func:`resolve_jars` copies the broker's runtime classpath (``kafka-pom.xml``,
  shipped next to this module) into ``${XDG_CACHE_HOME:-~/.cache}/olu-worker/
  kafka-<version>/libs`` with ``mvn dependency:copy-dependencies``. Needs ``mvn``
  and network once per machine; later calls return the cached directory at once.
* :class:`KafkaBroker` formats KRaft storage and runs ``kafka.Kafka`` as one
  combined broker+controller on free loopback ports. With ``sasl_users`` it also
  opens a ``SASL_PLAINTEXT`` listener (mechanism PLAIN, those users) on a port of
  its own, so clients' SASL settings can be tested; the broker's own traffic
  (inter-broker, controller) stays on the PLAINTEXT listeners.
* ``python -m worker.devtools.kafka_local`` runs a broker until Ctrl-C / SIGTERM
  and prints ``KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:<port>`` (and, with
  ``--sasl-user NAME:PASSWORD``, ``KAFKA_SASL_BOOTSTRAP_SERVERS=127.0.0.1:<port>``).

Only the standard library and confluent_kafka are used. POSIX only (flock, signals).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import IO

# Newest 4.x release whose artifacts are all on Maven Central (4.4.0's
# kafka-tools-api is missing there, so 4.4.0 cannot be resolved).
DEFAULT_VERSION = "4.3.1"

# What Kafka's own start script runs the broker with (bin/kafka-run-class.sh,
# KAFKA_JVM_PERFORMANCE_OPTS): G1 aiming at 20 ms pauses. The JVM's default target is 200 ms,
# and on a busy 2-core machine the broker then stalls fetches for ~100 ms at a time.
KAFKA_JVM_PERFORMANCE_OPTS = (
    "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
)

_POM_RESOURCE = "kafka-pom.xml"
_MARKER = ".resolved"  # written last: its presence means libs/ is complete
_MAVEN_TIMEOUT_S = 1800
_STOP_GRACE_S = 20.0
_LOG_TAIL_LINES = 40
_START_ATTEMPTS = 3  # only retried when a port we picked was taken meanwhile
_PR_SET_PDEATHSIG = 1
SASL_LISTENER = "SASL_PLAINTEXT"
SASL_MECHANISM = "PLAIN"
# Characters that would break out of the quoted JAAS option value or the properties line.
_JAAS_UNSAFE = re.compile(r'["\\;\s=]')


# --------------------------------------------------------------------------- jars


def default_cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/olu-worker`` (per the XDG base-dir spec)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "olu-worker"


def resolve_jars(version: str = DEFAULT_VERSION, cache_dir: str | os.PathLike | None = None) -> Path:
    """Return the directory holding the broker's jars for ``version``, resolving it if needed.

    ``cache_dir`` replaces ``${XDG_CACHE_HOME:-~/.cache}/olu-worker``; the jars land
    in ``<cache_dir>/kafka-<version>/libs``.
    """
    base = Path(cache_dir) if cache_dir is not None else default_cache_root()
    home = base / f"kafka-{version}"
    libs, marker = home / "libs", home / _MARKER
    if marker.exists():  # fast path: no lock, no subprocess
        return libs
    home.mkdir(parents=True, exist_ok=True)
    with _file_lock(home / ".lock"):
        if marker.exists():  # another process finished while we waited
            return libs
        shutil.rmtree(libs, ignore_errors=True)  # leftovers of an interrupted resolve
        pom = home / "pom.xml"
        pom.write_text(_pom_for(version), encoding="utf-8")
        _run_maven(pom, libs)
        marker.write_text(version + "\n", encoding="utf-8")
    return libs


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    # flock conflicts between separate open()s, so this serialises both
    # processes and threads; the kernel drops it if the holder dies.
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _pom_for(version: str) -> str:
    template = resources.files(__package__).joinpath(_POM_RESOURCE).read_text(encoding="utf-8")
    pom, n = re.subn(r"<kafka\.version>[^<]*</kafka\.version>", f"<kafka.version>{version}</kafka.version>", template)
    if n != 1:
        raise RuntimeError(f"{_POM_RESOURCE} must define exactly one <kafka.version> property")
    return pom


def _run_maven(pom: Path, libs: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("`mvn` not found on PATH: Maven is needed once to fetch the Kafka jars")
    cmd = [
        mvn, "-q", "-B", "-f", str(pom),
        "dependency:copy-dependencies", f"-DoutputDirectory={libs}", "-DincludeScope=runtime",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip().splitlines()
        tail = "\n".join(output[-_LOG_TAIL_LINES:])
        raise RuntimeError(f"Maven failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")


# ------------------------------------------------------------------------- broker


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback TCP ports that were free a moment ago (the kernel picks them).

    All sockets are held open together so the kernel cannot hand out one port twice.
    """
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def free_port() -> int:
    """One loopback TCP port that was free a moment ago."""
    return free_ports(1)[0]


class _PortClash(RuntimeError):
    """The broker could not bind: something grabbed a port between our pick and its bind."""


def _new_cluster_id() -> str:
    # Kafka cluster ids are a UUID in unpadded URL-safe base64 (22 chars). One in 64 starts with
    # "-", which the storage tool's argument parser reads as an option: draw again.
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise RuntimeError("no `java` found (set JAVA_HOME or put java on PATH); Kafka 4.x needs Java 17+")
    return java


def _checked_sasl_users(users: Mapping[str, str] | None) -> dict[str, str]:
    """``users`` as a dict, refusing names or passwords that would break the JAAS line."""
    checked = dict(users or {})
    for user, password in checked.items():
        if not user or not password or _JAAS_UNSAFE.search(user) or _JAAS_UNSAFE.search(password):
            raise ValueError("SASL user names and passwords must be non-empty, without quotes, "
                             "backslashes, ';', '=' or whitespace")
    return checked


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log yet)"


def _die_with_parent() -> None:
    # Runs in the child before exec: on Linux ask for SIGTERM when our parent
    # dies, so a crashed/killed test run does not leave an orphan broker around.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_LOG4J2_TEMPLATE = """\
# Generated by worker.devtools.kafka_local: WARN and above only, into a file,
# so test output stays quiet but the tail is there when the broker misbehaves.
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
"""


class KafkaBroker:
    """One KRaft broker+controller process on 127.0.0.1.

    Ports are chosen in the constructor (``port``/``controller_port`` fix them) and
    kept across :meth:`restart`, so clients can reconnect to the same address.
    ``extra_properties`` override the generated server.properties entries; the
    attribute can still be changed before :meth:`start`. Without ``data_dir`` a temp
    dir is used and removed by :meth:`stop`; a caller's ``data_dir`` is kept.

    ``sasl_users`` (name -> password) adds a ``SASL_PLAINTEXT`` listener with the PLAIN
    mechanism on ``sasl_port`` (default: a free one), reachable at
    :attr:`sasl_bootstrap_servers`. No authorizer is configured: any of these users may
    do anything, a wrong password is refused at authentication.

    Layout of the data dir: ``server.properties``, ``log4j2.properties``,
    ``data/`` (``log.dirs``), ``logs/kafka.log`` (log4j) and ``logs/stdout.log``.
    """

    def __init__(
        self,
        version: str = DEFAULT_VERSION,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        data_dir: str | os.PathLike | None = None,
        extra_properties: Mapping[str, object] | None = None,
        cache_dir: str | os.PathLike | None = None,
        heap: str = "512m",
        startup_timeout: float = 60.0,
        sasl_users: Mapping[str, str] | None = None,
        sasl_port: int | None = None,
        jvm_options: Sequence[str] | None = None,
    ) -> None:
        self.version = version
        self.sasl_users = _checked_sasl_users(sasl_users)
        self._fixed_ports = (port, controller_port, sasl_port)
        self.port, self.controller_port, self.sasl_port = self._pick_ports()
        self.extra_properties: dict[str, object] = dict(extra_properties or {})
        self.cache_dir = cache_dir
        self.heap = heap
        self.jvm_options = list(KAFKA_JVM_PERFORMANCE_OPTS if jvm_options is None else jvm_options)
        self.startup_timeout = startup_timeout
        self._owns_dir = data_dir is None
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdout: IO[bytes] | None = None
        self._has_started = False  # once clients know our ports, never change them

    # -- public API ----------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        """``host:port`` of the SASL_PLAINTEXT listener (only with ``sasl_users``)."""
        if self.sasl_port is None:
            raise RuntimeError("this broker has no SASL listener (pass sasl_users)")
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:  # created lazily so an unused broker leaves nothing behind
            self._data_dir = Path(tempfile.mkdtemp(prefix="kafka-local-"))
        return self._data_dir

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "kafka.log"

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> KafkaBroker:
        """Resolve jars, format storage on first use, launch, and wait until clients are served."""
        if self.is_running:
            return self
        libs = resolve_jars(self.version, self.cache_dir)
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._start_once(libs)
                break
            except _PortClash:
                # Free ports are only "free a moment ago"; pick new ones if they are
                # ours to choose and nobody has been told the old ones yet.
                if self._has_started or attempt == _START_ATTEMPTS or not self._ports_are_ours():
                    raise
                self.port, self.controller_port, self.sasl_port = self._pick_ports()
        self._has_started = True
        return self

    def stop(self, keep_data: bool = False) -> None:
        """SIGTERM (clean shutdown), SIGKILL after ~20 s; drop the temp data dir unless ``keep_data``."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._stdout is not None:
            self._stdout.close()
            self._stdout = None
        if self._owns_dir and not keep_data:
            self._remove_data_dir()

    def restart(self) -> KafkaBroker:
        """Stop keeping the data, then start again on the same ports."""
        self.stop(keep_data=True)
        return self.start()

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return f"<KafkaBroker {self.version} {self.bootstrap_servers} {state}>"

    # -- config and internals ------------------------------------------------------

    def _pick_ports(self) -> tuple[int, int, int | None]:
        fresh = iter(free_ports(3))
        port, controller_port, sasl_port = self._fixed_ports
        return (port or next(fresh), controller_port or next(fresh),
                (sasl_port or next(fresh)) if self.sasl_users else None)

    def _ports_are_ours(self) -> bool:
        """Some port was picked here, not fixed by the caller (so picking again may help)."""
        wanted = self._fixed_ports if self.sasl_users else self._fixed_ports[:2]
        return None in wanted

    def _start_once(self, libs: Path) -> None:
        try:
            props = self._write_config()
            if not (self.data_dir / "data" / "meta.properties").exists():  # formatted already on restart
                self._format_storage(libs, props)
            self._launch(libs, props)
            self._wait_ready()
        except BaseException:
            self.stop()  # the error message carries the log tail; a caller's dir is kept anyway
            raise

    def server_properties(self) -> dict[str, str]:
        """The effective server.properties (defaults, then ``extra_properties``)."""
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            # Dynamic quorum (KIP-853), formatted with --standalone.
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir / "data"),
            "num.recovery.threads.per.data.dir": "1",
            # Single node: internal topics must not ask for 3 replicas.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Tests should not wait 3 s for the first consumer group rebalance.
            "group.initial.rebalance.delay.ms": "0",
            "transaction.state.log.num.partitions": "1",
            "offsets.topic.num.partitions": "1",
            "auto.create.topics.enable": "true",
            "num.partitions": "1",
            # The log cleaner looks for compactable segments every second, not every 15 s: tests
            # of a compacted parameter topic wait for it.
            "log.cleaner.backoff.ms": "1000",
        }
        if self.sasl_users:
            props.update(self._sasl_properties())
        props.update({k: str(v) for k, v in self.extra_properties.items()})
        return props

    def _sasl_properties(self) -> dict[str, str]:
        """The extra SASL_PLAINTEXT listener: PLAIN users from a listener-scoped JAAS config."""
        name = SASL_LISTENER.lower()
        users = " ".join(f'user_{user}="{password}"' for user, password in self.sasl_users.items())
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port},"
                         f"{SASL_LISTENER}://127.0.0.1:{self.sasl_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},{SASL_LISTENER}://127.0.0.1:{self.sasl_port}",
            "listener.security.protocol.map":
                f"CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,{SASL_LISTENER}:{SASL_LISTENER}",
            "sasl.enabled.mechanisms": SASL_MECHANISM,
            f"listener.name.{name}.sasl.enabled.mechanisms": SASL_MECHANISM,
            f"listener.name.{name}.{SASL_MECHANISM.lower()}.sasl.jaas.config":
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        }

    def _write_config(self) -> Path:
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2_TEMPLATE.format(log_file=self.log_file))
        props = self.data_dir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties().items()))
        return props

    def _java_cmd(self, libs: Path, main_class: str, *args: str) -> list[str]:
        return [
            _java(), f"-Xmx{self.heap}", f"-Xms{self.heap}", *self.jvm_options,
            f"-Xlog:gc*:file={self.data_dir / 'logs' / 'gc.log'}:time,uptime:filecount=2,filesize=20M",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp", f"{libs}/*", main_class, *args,
        ]  # fmt: skip

    def _format_storage(self, libs: Path, props: Path) -> None:
        cmd = self._java_cmd(libs, "kafka.tools.StorageTool", "format", "--standalone",
                             "-t", _new_cluster_id(), "-c", str(props))  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"kafka storage format failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")

    def _launch(self, libs: Path, props: Path) -> None:
        self._stdout = open(self.data_dir / "logs" / "stdout.log", "ab")
        self._proc = subprocess.Popen(
            self._java_cmd(libs, "kafka.Kafka", str(props)),
            stdin=subprocess.DEVNULL,
            stdout=self._stdout,
            stderr=subprocess.STDOUT,
            # Own session: a terminal Ctrl-C reaches only us, and we stop the broker
            # in order (SIGTERM, wait) instead of racing it.
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while not self._port_open():
            self._check_alive_before(deadline)
            time.sleep(0.2)
        # The socket opens before the broker has registered with its controller;
        # only a metadata answer that lists a broker means clients will work.
        while not self._metadata_ready(timeout=max(0.5, min(5.0, deadline - time.monotonic()))):
            self._check_alive_before(deadline)
            time.sleep(0.2)

    def _check_alive_before(self, deadline: float) -> None:
        if self._proc is None or self._proc.poll() is not None:
            code = None if self._proc is None else self._proc.returncode
            tail = self.log_tail()
            error = _PortClash if "Address already in use" in tail else RuntimeError
            raise error(f"Kafka broker exited early (code {code}).\n{tail}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"Kafka broker not ready after {self.startup_timeout:.0f} s.\n{self.log_tail()}")

    def _port_open(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True
        return False

    def _metadata_ready(self, timeout: float) -> bool:
        from confluent_kafka.admin import AdminClient  # heavy import, only when starting

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        try:
            return bool(admin.list_topics(timeout=timeout).brokers)
        except Exception:  # KafkaException while the broker is still coming up
            return False

    def log_tail(self) -> str:
        """The last lines of the JVM's stdout/stderr and of the log4j file, for error messages."""
        logs = self.data_dir / "logs"
        return (
            f"--- {logs / 'stdout.log'} ---\n{_tail(logs / 'stdout.log')}\n"
            f"--- {self.log_file} ---\n{_tail(self.log_file)}"
        )

    def _remove_data_dir(self) -> None:
        if self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None


# ---------------------------------------------------------------------------- CLI


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m worker.devtools.kafka_local",
        description="Run a single-node Apache Kafka (KRaft) broker on 127.0.0.1 until Ctrl-C.",
    )
    parser.add_argument("--version", default=DEFAULT_VERSION, help="Kafka release (default %(default)s)")
    parser.add_argument("--port", type=int, help="client (PLAINTEXT) port; default: a free one")
    parser.add_argument("--data-dir", help="keep broker data here (default: a temp dir removed on exit)")
    parser.add_argument("--resolve-only", action="store_true", help="only fetch/cache the jars, print their dir")
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
        broker = KafkaBroker(args.version, port=args.port, data_dir=args.data_dir, sasl_users=sasl_users,
                             sasl_port=args.sasl_port)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        broker.start()
        print(f"KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap_servers}", flush=True)
        if sasl_users:
            print(f"KAFKA_SASL_BOOTSTRAP_SERVERS={broker.sasl_bootstrap_servers}", flush=True)
        print(f"kafka {args.version} running (log: {broker.log_file}); Ctrl-C to stop", file=sys.stderr, flush=True)
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
