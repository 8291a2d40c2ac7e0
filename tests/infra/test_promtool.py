"""worker.devtools.promtool: promtool from PATH, from the cache, or fetched from Debian.

The fetch is exercised with stand-in apt-get / dpkg-deb scripts (what they are asked, what comes
back when they fail or are missing), and once for real against Debian's package (skipped where
there is no apt-get, as the helper itself would then skip the alert tests, saying why).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from worker.devtools.promtool import PromtoolUnavailable, cached_binary, find_promtool

FAKE_APT_GET = """#!/bin/sh
echo "$@" >> "{log}"
[ "$1 $2" = "download prometheus" ] || exit 100
{download}
"""
FAKE_DPKG_DEB = """#!/bin/sh
[ "$1" = "-x" ] || exit 2
mkdir -p "$3/usr/bin" "$3/usr/share/doc"
printf '#!/bin/sh\\necho promtool, version 2.42.0\\n' > "$3/usr/bin/promtool"
"""


def script(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def tools(tmp_path: Path):
    """(which, log): a PATH lookup that finds stand-in apt-get and dpkg-deb, and no promtool."""
    log = tmp_path / "apt-get.log"
    found = {"apt-get": script(tmp_path / "apt-get", FAKE_APT_GET.format(
        log=log, download="printf 'deb' > prometheus_2.42.0+ds-5_amd64.deb")),
             "dpkg-deb": script(tmp_path / "dpkg-deb", FAKE_DPKG_DEB)}
    return found.get, log


def test_promtool_on_path_is_used_as_is(tmp_path: Path, tools):
    which, log = tools
    on_path = tmp_path / "promtool"
    assert find_promtool(tmp_path / "cache", which=lambda n: str(on_path) if n == "promtool" else which(n)) == on_path
    assert not log.exists(), "nothing may be downloaded when promtool is on PATH"


def test_fetched_once_then_served_from_the_cache(tmp_path: Path, tools):
    which, log = tools
    cache = tmp_path / "cache"
    first = find_promtool(cache, which=which)
    assert first == cached_binary(cache) == cache / "bin" / "promtool"
    assert subprocess.run([first], capture_output=True, text=True).stdout.startswith("promtool, version")
    assert log.read_text().splitlines() == ["download prometheus"]
    assert find_promtool(cache, which=which) == first
    assert log.read_text().splitlines() == ["download prometheus"], "the cached binary must be reused"
    assert [p.name for p in cache.iterdir()] == ["bin"], "the download and the rest of the package are not kept"


def test_without_apt_get_says_what_to_install(tmp_path: Path, tools):
    which, _ = tools
    with pytest.raises(PromtoolUnavailable, match=r"no apt-get to fetch it: install Debian's prometheus package "
                                                  r"\(apt-get install -y --no-install-recommends prometheus\)"):
        find_promtool(tmp_path / "cache", which=lambda n: None if n == "apt-get" else which(n))


def test_a_failed_download_is_reported_with_apt_gets_words(tmp_path: Path, tools):
    which, log = tools
    failing = script(tmp_path / "apt-get-failing", FAKE_APT_GET.format(
        log=log, download="echo 'E: Unable to locate package prometheus' >&2; exit 100"))
    with pytest.raises(PromtoolUnavailable, match=r"Unable to locate package prometheus.*apt-get update"):
        find_promtool(tmp_path / "cache", which=lambda n: failing if n == "apt-get" else which(n))
    assert not cached_binary(tmp_path / "cache").exists()


@pytest.mark.skipif(shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None,
                    reason="no apt-get / dpkg-deb: not a Debian-based machine")
def test_fetches_the_real_promtool_from_debian(tmp_path: Path):
    binary = find_promtool(tmp_path / "cache", which=lambda n: None if n == "promtool" else shutil.which(n))
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and "promtool, version" in version.stdout + version.stderr
