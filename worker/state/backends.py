"""Opening the object stores the worker keeps its state in (memory://, file://, s3://), and the
fsync that makes a file:// write as durable as an S3 PUT."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path

from obstore.store import LocalStore, MemoryStore, S3Store

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_TRUE = {"1", "true", "yes", "on"}

# Fail fast: a down server costs ~1 s, a hung one ``timeout``; the worker counts and retries.
DEFAULT_RETRY = {"max_retries": 3, "retry_timeout": timedelta(seconds=8),
                 "backoff": {"init_backoff": timedelta(milliseconds=200),
                             "max_backoff": timedelta(seconds=2), "base": 2}}
DEFAULT_CLIENT_OPTIONS = {"connect_timeout": "2s", "timeout": "10s"}


def open_store(url: str, *, retry_config: dict | None = None, client_options: dict | None = None):
    """An obstore store for ``memory://``, ``file:///abs`` / ``file://./rel`` or
    ``s3://bucket[/prefix]``.

    S3 takes endpoint, region, credentials and ``allow_http`` from the standard ``AWS_*``
    variables; path-style requests when an endpoint is given. ``retry_config`` replaces and
    ``client_options`` extends the fail-fast defaults (S3 only).

    >>> type(open_store("memory://")).__name__
    'MemoryStore'
    """
    scheme, sep, rest = url.partition("://")
    if sep and scheme == "memory" and rest in ("", "/"):
        return MemoryStore()
    if sep and scheme == "file" and rest:
        return _local_store(rest)
    if sep and scheme in ("s3", "s3a") and _BUCKET.fullmatch(rest.partition("/")[0]):
        return _s3_store(rest, retry_config, client_options)
    raise ValueError(f"unsupported state store URL {url!r}: use memory://, file:///abs/path, "
                     f"file://./relative/path or s3://bucket[/prefix]")


def _local_store(path: str) -> LocalStore:
    if path.startswith("localhost/"):
        path = path[len("localhost"):]
    root = Path(path).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    return LocalStore(root, mkdir=True)


def _s3_store(rest: str, retry_config: dict | None, client_options: dict | None) -> S3Store:
    env = os.environ.get
    bucket, _, prefix = rest.partition("/")
    config = {"endpoint": env("AWS_ENDPOINT_URL") or env("AWS_ENDPOINT"),
              "region": env("AWS_REGION") or env("AWS_DEFAULT_REGION"),
              "access_key_id": env("AWS_ACCESS_KEY_ID"),
              "secret_access_key": env("AWS_SECRET_ACCESS_KEY"),
              "session_token": env("AWS_SESSION_TOKEN")}
    config = {k: v for k, v in config.items() if v}
    if "endpoint" in config:
        config["virtual_hosted_style_request"] = False
    client = {**DEFAULT_CLIENT_OPTIONS,
              "allow_http": (env("AWS_ALLOW_HTTP") or "").lower() in _TRUE,
              **(client_options or {})}
    return S3Store(bucket, prefix=prefix.strip("/") or None, client_options=client,
                   retry_config=DEFAULT_RETRY if retry_config is None else retry_config, **config)


_SYNCED_DIRS: set[Path] = set()  # ancestors whose entries (our subdirectories) are already durable


def sync_local(store, key: str) -> None:
    """Make a LocalStore write durable: obstore 0.12's LocalStore never fsyncs (S3 is durable on
    ack). Sync the file and its directory every time (a new entry); the directories above it
    only change when a partition directory is first created, so each is synced once per process.
    Raises ``OSError`` (the store turns it into ``StorageUnavailable``)."""
    if not isinstance(store, LocalStore):
        return
    root = Path(store.prefix or "/")
    path = root / key
    _fsync(path)
    _fsync(path.parent)
    for directory in path.parent.parents:
        if directory in _SYNCED_DIRS:
            break
        _fsync(directory)
        _SYNCED_DIRS.add(directory)
        if directory == root:
            break


def _fsync(target: Path) -> None:
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
