"""The shape of the package: imports form no cycle, point one way inside the engine, never reach
for another module's private names, and no module grows past 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "worker"
MAX_LINES = 500
MAX_COLUMNS = 100
# The package's tiers (docs/layout.md), each allowed to import only the tiers after it; a module
# imports freely inside its own package. ``worker`` alone is the package's __init__ (its version).
TIERS = (("worker.cli",), ("worker.planning", "worker.produce", "worker.follow", "worker.audit", "worker.http",
                          "worker.devtools"),
         ("worker.metrics",), ("worker.stream", "worker.client"),
         ("worker.config", "worker.state", "worker.formats", "worker.kafka_log", "worker.logs", "worker.memory"),
         ("worker.features",), ("worker.olu",), ("worker.compiled",),
         ("worker.wire", "worker.exceptions", "worker"))
# The engine's layers, each allowed to import only the ones after it (and itself).
ENGINE_LAYERS = ("worker.olu.batches", "worker.olu.registry", "worker.olu.algorithms", "worker.olu.core", "worker.olu.privacy",
                 "worker.olu.exceptions", "worker.olu.formulas", "worker.olu.arith")


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = modules()


def resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module: str) -> list[tuple[str, list[str], int]]:
    """(imported module, names, line) for every import in ``module``, wherever it sits (also in
    functions: a deferred import is still a dependency)."""
    tree = ast.parse(MODULES[module].read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module, node)
            names = [alias.name for alias in node.names]
            # "from pkg import mod" imports the submodule pkg.mod
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            out.append((target, [n for n in names if f"{target}.{n}" not in MODULES], node.lineno))
            out += [(s, [], node.lineno) for s in subs]
    return [(t, n, line) for t, n, line in out if t.startswith("worker")]


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for target, _, _ in imports(module):
            if target in MODULES and target != module:
                edges[module].add(target)
    return edges


def test_no_import_cycle_in_the_package():
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            # a package's __init__ importing its own submodules is not a cycle through them
            if MODULES[nxt].name == "__init__.py" and node.startswith(nxt + "."):
                continue
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)


def _layer(module: str) -> int | None:
    for rank, prefix in enumerate(ENGINE_LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return None


def test_engine_layers_point_one_way():
    """registry -> algorithms -> core -> privacy -> exceptions -> arith, never back."""
    wrong = []
    for module in MODULES:
        here = _layer(module)
        if here is None:
            continue
        for target, _, line in imports(module):
            there = _layer(target)
            if there is not None and there < here:
                wrong.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)


def _package(module: str) -> str:
    """The top-level package (or module) of ``worker`` a module belongs to."""
    return ".".join(module.split(".")[:2])


def _tier(package: str) -> int:
    return next(rank for rank, members in enumerate(TIERS) if package in members)


def test_every_package_has_a_tier():
    assert {_package(m) for m in MODULES} == {p for members in TIERS for p in members}


def test_the_package_tiers_point_one_way():
    """cli -> commands -> metrics -> (stream, client) -> (config, state, formats, ...) -> olu -> (wire, exceptions)."""
    wrong = []
    for module in MODULES:
        here = _package(module)
        for target, _, line in imports(module):
            there = _package(target)
            if there != here and _tier(there) <= _tier(here):
                wrong.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_the_engine_imports_only_the_root_exception_and_the_compiled_layer():
    outside = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {target}" for m in MODULES if m.startswith("worker.olu")
               for target, _, line in imports(m)
               if not target.startswith(("worker.olu", "worker.compiled")) and target != "worker.exceptions"]
    assert not outside, "\n".join(outside)


def test_the_engine_does_no_io():
    banned = {"socket", "confluent_kafka", "obstore", "prometheus_client", "urllib", "http", "subprocess",
              "requests", "pathlib", "shutil"}
    found = []
    for module, path in MODULES.items():
        if not module.startswith("worker.olu"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] in banned]
    assert not found, "\n".join(found)


def test_no_module_imports_another_modules_private_names():
    wrong = []
    for module in MODULES:
        for target, names, line in imports(module):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private and target != module:
                wrong.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {private} from {target}")
    assert not wrong, "\n".join(wrong)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_is_longer_than_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values() if (n := _lines(p)) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: split them by responsibility: {long}"


def test_no_line_in_the_package_is_wider_than_100_columns():
    """ruff holds the same limit (line-length); this names every offender at once, docstrings
    included, where the linter's per-file ignores might hide one."""
    wide = [f"{p.relative_to(ROOT)}:{i}" for p in MODULES.values()
            for i, line in enumerate(p.read_text().splitlines(), 1) if len(line) > MAX_COLUMNS]
    assert not wide, f"{len(wide)} lines over {MAX_COLUMNS} columns: {wide[:20]}"


#: What the layers above the engine may import of it: the package's exports, and the public modules
#: (arith: the fixed-order arithmetic a subscriber's predict shares with the engine).
ENGINE_SURFACE = ("worker.olu", "worker.olu.arith", "worker.olu.exceptions", "worker.olu.formulas", "worker.olu.privacy",
                  "worker.olu.registry", "worker.olu.rotation")


def test_the_rest_of_the_worker_uses_the_engine_through_its_surface():
    """Nothing outside worker/olu reaches into olu.core, olu.algorithms, olu.batches or the privacy
    internals: the stream learns through ``worker.olu.apply_batch`` and the ``Model`` Protocol."""
    inside = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {target}" for m in MODULES
              if not m.startswith("worker.olu") for target, _, line in imports(m)
              if target.startswith("worker.olu") and target not in ENGINE_SURFACE]
    assert not inside, "\n".join(inside)
