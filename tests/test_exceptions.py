"""Every exception class defined under worker/ derives from the package's root, OluWorkerError.

Each module under worker/ (devtools aside: test launchers, not the worker) is imported and every
class it defines that is an exception is checked, so a new one that forgets the root fails here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import worker
from worker.exceptions import ConfigError, OluWorkerError

#: Private exceptions that never leave their module (raised and caught inside it), by
#: ``module.qualname``.
PRIVATE = {
    "worker.state.restore._Invalid":
        "a badly decoded object; restore.py turns it into a fallback or SnapshotCorrupt",
    "worker.state.restore._Vanished":
        "an object another replica's gc removed mid-read; restore.py relists",
}


def _modules():
    names = ["worker"]
    for info in pkgutil.walk_packages(worker.__path__, "worker."):
        if info.name == "worker.devtools" or info.name.startswith("worker.devtools."):
            continue
        names.append(info.name)
    return [importlib.import_module(name) for name in names]


def _exception_classes():
    found = {}
    for module in _modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == module.__name__:
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def test_the_walk_finds_the_layers_exceptions():
    names = set(_exception_classes())
    assert {"worker.exceptions.ConfigError", "worker.stream.exceptions.DeadLetter",
            "worker.state.exceptions.SnapshotCorrupt", "worker.exceptions.InvalidRelease"} <= names


def test_every_exception_derives_from_the_root():
    stray = [name for name, cls in _exception_classes().items()
             if not issubclass(cls, OluWorkerError) and name not in PRIVATE]
    assert not stray, f"derive these from worker.exceptions.OluWorkerError: {stray}"


def test_the_engine_and_the_settings_share_one_config_error():
    from worker.olu import exceptions as engine

    assert engine.ConfigError is ConfigError and issubclass(engine.OLUError, OluWorkerError)


def test_private_allow_list_names_existing_classes():
    assert set(PRIVATE) <= set(_exception_classes())


@pytest.mark.parametrize("path,name,bases", [
    ("worker.exceptions", "ConfigError", (ValueError,)),
    ("worker.exceptions", "InvalidRelease", (ValueError,)),
    ("worker.stream.exceptions", "UnreleasableState", (RuntimeError,)),
    ("worker.stream.exceptions", "DeliveryFailed", (RuntimeError,)),
    ("worker.stream.exceptions", "ClientFailed", (RuntimeError,)),
    ("worker.state.exceptions", "CorruptSnapshot", (ValueError,)),
])
def test_standard_bases_are_kept(path, name, bases):
    """``except ValueError`` / ``except RuntimeError`` callers still catch them."""
    cls = getattr(importlib.import_module(path), name)
    assert issubclass(cls, bases) and issubclass(cls, OluWorkerError)


def test_one_config_error_for_every_public_path():
    from worker import config
    from worker.config import exceptions as config_exceptions

    assert config.ConfigError is config_exceptions.ConfigError is ConfigError
