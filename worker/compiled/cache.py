"""numba's disk cache keyed by every source a kernel depends on, not only its own file.

numba stamps a cached kernel with a hash of the file that defines it. A kernel that calls a
compiled helper in another module, or folds in another module's constant, would load stale
machine code after that module changed. :class:`SourcesCache` adds to numba's stamp one digest of
the package's compiled sources: every module that imports numba, llvmlite or this layer, and every
module of the package those import, directly or not. A change to any of them recompiles every
kernel once (a few seconds), which is what lets kernels and their helpers live in several modules.

The digest is computed once per process, from the files as installed; it does not depend on which
modules happen to be imported, so every process of one installation agrees on it.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

from numba.core.caching import CompileResultCacheImpl, FunctionCache

PACKAGE = Path(__file__).resolve().parents[1]  # worker/
_COMPILED_IMPORTS = ("numba", "llvmlite")


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# Module-level imports only: a kernel sees its module's globals, never a function's deferred import.
_IMPORT = re.compile(r"^(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)"
                     r"|import[ \t]+([^\n]*))", re.MULTILINE)


def _imports(module: str, text: str, is_package: bool) -> set[str]:
    """The absolute names ``text`` imports at module level (relative ones resolved)."""
    out: set[str] = set()
    for source, names, plain in _IMPORT.findall(text):
        if plain:
            out.update(part.split(" as ")[0].strip() for part in plain.split("#")[0].split(","))
            continue
        level = len(source) - len(source.lstrip("."))
        target = source[level:]
        if level:
            parts = module.split(".")
            base = parts[: len(parts) - level + (1 if is_package else 0)]
            target = ".".join(base + ([target] if target else []))
        out.add(target)
        for name in re.split(r"[,\s()]+", re.sub(r"#[^\n]*", "", names)):
            if name and name != "as":
                out.add(f"{target}.{name}")
    return out


@functools.cache
def compiled_sources() -> list[Path]:
    """The package's modules a kernel may depend on, sorted: those importing numba, llvmlite or
    ``worker.compiled``, and everything of the package they import, transitively."""
    trees = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_of(path)
        trees[module] = (path, _imports(module, path.read_text(), path.name == "__init__.py"))
    roots = [m for m, (_, names) in trees.items()
             if m.startswith("worker.compiled") or any(n.split(".")[0] in _COMPILED_IMPORTS
                                                       or n.startswith("worker.compiled")
                                                       for n in names)]
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        module = stack.pop()
        if module in seen or module not in trees:
            continue
        seen.add(module)
        stack.extend(n for n in trees[module][1] if n in trees)
        # a package's __init__ runs before any of its modules
        parent = module.rsplit(".", 1)[0]
        stack.append(parent)
    return sorted(trees[m][0] for m in seen)


@functools.lru_cache(maxsize=1)
def sources_digest() -> str:
    """SHA-256 over the relative path and bytes of every :func:`compiled_sources` file."""
    digest = hashlib.sha256()
    for path in compiled_sources():
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _stamped(locator: type) -> type:
    """``locator`` whose source stamp also carries :func:`sources_digest`."""
    def get_source_stamp(self):
        return locator.get_source_stamp(self), sources_digest()

    return type(f"Sources{locator.__name__}", (locator,), {"get_source_stamp": get_source_stamp})


class _SourcesCacheImpl(CompileResultCacheImpl):
    _locator_classes = [_stamped(cls) for cls in CompileResultCacheImpl._locator_classes]


class SourcesCache(FunctionCache):
    """numba's function cache, stamped with :func:`sources_digest` as well as the kernel's file."""

    _impl_class = _SourcesCacheImpl
