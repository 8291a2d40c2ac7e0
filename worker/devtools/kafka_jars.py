"""The Kafka broker's jars from Maven Central, resolved once per machine and cached.

:func:`resolve_jars` copies the broker's runtime classpath (``kafka-pom.xml``, shipped next to
this module) into ``${XDG_CACHE_HOME:-~/.cache}/olu-worker/kafka-<version>/libs`` with
``mvn dependency:copy-dependencies``. Needs ``mvn`` and network once per machine; later calls
return the cached directory at once. Standard library only; POSIX only (flock).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

# Newest 4.x release whose artifacts are all on Maven Central (4.4.0's
# kafka-tools-api is missing there, so 4.4.0 cannot be resolved).
DEFAULT_VERSION = "4.3.1"

_POM_RESOURCE = "kafka-pom.xml"
_MARKER = ".resolved"  # written last: its presence means libs/ is complete
_MAVEN_TIMEOUT_S = 1800
_MAVEN_TAIL_LINES = 40


def default_cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/olu-worker`` (per the XDG base-dir spec)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "olu-worker"


def resolve_jars(version: str = DEFAULT_VERSION,
                 cache_dir: str | os.PathLike | None = None) -> Path:
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
    pom, n = re.subn(r"<kafka\.version>[^<]*</kafka\.version>",
                     f"<kafka.version>{version}</kafka.version>", template)
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
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S,
                          check=False)
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip().splitlines()
        tail = "\n".join(output[-_MAVEN_TAIL_LINES:])
        raise RuntimeError(f"Maven failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")
