"""promtool for the alert-rule tests: found on PATH, or
fetched from Debian without installing anything.

:func:`find_promtool` returns, first match wins:

1. ``promtool`` on PATH (CI installs Debian's ``prometheus`` package);
2. the one fetched earlier into ``${XDG_CACHE_HOME:-~/.cache}/olu-worker/promtool/bin/``;
3. a new fetch: ``apt-get download prometheus`` (the .deb only: no install, no service, no root;
   ~19 MB) and ``dpkg-deb -x``, keeping ``usr/bin/promtool`` in that cache.

Without apt-get and dpkg-deb, or when the download fails, it raises :class:`PromtoolUnavailable`
saying what to install. ``python -m worker.devtools.promtool`` prints the path (fetching if needed).

Standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from worker.devtools.kafka_jars import default_cache_root

PACKAGE = "prometheus"
INSTALL = (
    "install Debian's prometheus package (apt-get install -y --no-install-recommends prometheus) "
    "or put promtool on PATH")
_TIMEOUT_S = 600


class PromtoolUnavailable(RuntimeError):
    """No promtool here, and none could be fetched; the message says what to install."""


def cached_binary(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where a fetched promtool is kept."""
    base = Path(cache_dir) if cache_dir is not None else default_cache_root() / "promtool"
    return base / "bin" / "promtool"


def find_promtool(cache_dir: str | os.PathLike | None = None, *,
                  which: Callable[[str], str | None] = shutil.which) -> Path:
    """A promtool to run: on PATH, cached, or fetched now (see the module doc)."""
    if found := which("promtool"):
        return Path(found)
    binary = cached_binary(cache_dir)
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    return fetch(binary, which)


def fetch(binary: Path, which: Callable[[str], str | None] = shutil.which) -> Path:
    """Download Debian's prometheus package and keep its promtool at ``binary``."""
    apt_get, dpkg_deb = which("apt-get"), which("dpkg-deb")
    if apt_get is None or dpkg_deb is None:
        missing = " and ".join(n for n, p in (("apt-get", apt_get), ("dpkg-deb", dpkg_deb))
                               if p is None)
        raise PromtoolUnavailable(
            f"promtool is not on PATH and there is no {missing} to fetch it: {INSTALL}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    # Work next to the destination, so that the final rename is atomic: processes fetching at the
    # same time each end with a complete binary.
    with tempfile.TemporaryDirectory(dir=binary.parent, prefix=".fetch-") as tmp:
        work = Path(tmp)
        got = _run([apt_get, "download", PACKAGE], work)
        debs = sorted(work.glob(f"{PACKAGE}_*.deb"))
        if got.returncode != 0 or not debs:
            raise PromtoolUnavailable(
                f"`apt-get download {PACKAGE}` failed ({_last(got)}); the package lists may be "
                f"missing (apt-get update), or {INSTALL}")
        tree = work / "tree"
        got = _run([dpkg_deb, "-x", str(debs[-1]), str(tree)], work)
        extracted = tree / "usr" / "bin" / "promtool"
        if got.returncode != 0 or not extracted.is_file():
            raise PromtoolUnavailable(
                f"no usr/bin/promtool in {debs[-1].name} ({_last(got)}): {INSTALL}")
        extracted.chmod(0o755)
        os.replace(extracted, binary)
    return binary


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S)


def _last(result: subprocess.CompletedProcess) -> str:
    text = (result.stderr or result.stdout or "").strip()
    code = f"exit {result.returncode}"
    return f"{code}: {text.splitlines()[-1]}" if text else code


def main() -> int:
    try:
        print(find_promtool())
    except PromtoolUnavailable as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
