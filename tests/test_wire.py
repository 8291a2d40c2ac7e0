"""worker/wire.py owns the output's wire format: no other module under worker/ spells its names.

The checks read the source (the AST, so comments and docstrings do not count): a string constant
equal to a wire name, an f-string that is exactly ``"{a}/{b}"`` (the release key's shape), a
literal of the trigger set, or a second ``*SCHEMA_VERSION`` constant anywhere but wire.py fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from worker import wire

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "worker"
WIRE = WORKER / "wire.py"

NAMES = {wire.PARAMS_TOPIC, wire.HEADER_PREFIX, wire.TRIGGER_HEADER, wire.WORKER_VERSION_HEADER,
         wire.BUDGET_HEADER, *wire.DEAD_LETTER_HEADERS}
#: ``"{topic}/{partition}"`` f-strings that are not release keys, by file: a partition's name in the
#: logs and in the demo's report, for people to read.
PARTITION_NAMES = {
    "worker/stream/app.py": {'f"{p.topic}/{p.partition}"'},
    "worker/stream/checkpoints.py": {'f"{o.topic}/{o.partition}"', 'f"{p.topic}/{p.partition}"'},
    "worker/stream/demo.py": {'f"{t}/{p}"'},
}


def _sources():
    return [(path.relative_to(ROOT).as_posix(), path.read_text()) for path in sorted(WORKER.rglob("*.py"))
            if path != WIRE]


def _docstrings(tree) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _is_key_shape(node: ast.JoinedStr) -> bool:
    parts = node.values
    return (len(parts) == 3 and isinstance(parts[0], ast.FormattedValue) and isinstance(parts[2], ast.FormattedValue)
            and isinstance(parts[1], ast.Constant) and parts[1].value == "/")


def test_the_scan_sees_the_sources():
    files = dict(_sources())
    assert {"worker/stream/output/releases.py", "worker/client/subscriber.py",
            "worker/config/settings.py"} <= set(files)


def test_no_other_module_spells_a_wire_name():
    found = []
    for path, source in _sources():
        tree = ast.parse(source)
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in docstrings:
                value = node.value.decode("utf-8", "replace") if isinstance(node.value, bytes) else node.value
                if value in NAMES:
                    found.append(f"{path}:{node.lineno}: {value!r}")
    assert not found, f"use the constants of worker/wire.py: {found}"


def test_no_other_module_builds_a_release_key():
    found = []
    for path, source in _sources():
        allowed = PARTITION_NAMES.get(path, set())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.JoinedStr) and _is_key_shape(node):
                text = ast.get_source_segment(source, node)
                if text not in allowed:
                    found.append(f"{path}:{node.lineno}: {text}")
    assert not found, f"use worker.wire.release_key / release_key_text: {found}"


def test_no_other_module_lists_the_triggers_or_a_schema_version():
    found = []
    for path, source in _sources():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
                    isinstance(e, ast.Constant) for e in node.elts):
                if {e.value for e in node.elts} == set(wire.TRIGGERS):
                    found.append(f"{path}:{node.lineno}: the trigger set")
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id.endswith("SCHEMA_VERSION"):
                    found.append(f"{path}:{node.lineno}: {target.id}")
    assert not found, f"use worker.wire.TRIGGERS / RELEASE_SCHEMA_VERSION: {found}"


def test_partition_name_allow_list_is_current():
    """Each allowed f-string still exists, so the list cannot hide a new one under an old entry."""
    for path, allowed in PARTITION_NAMES.items():
        source = (ROOT / path).read_text()
        assert all(text in source for text in allowed), path


def test_wire_imports_nothing():
    """No Kafka client and no I/O: the subscriber, the settings and the worker all import it."""
    tree = ast.parse(WIRE.read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert all(isinstance(node, ast.ImportFrom) and node.module == "__future__" for node in imports)


@pytest.mark.parametrize("topic,partition", [("olu.events", 0), ("a-b_c.d", 127)])
def test_release_key_round_trip(topic, partition):
    key = wire.release_key(topic, partition)
    assert key == f"{topic}/{partition}".encode()
    assert wire.decode_key(key) == wire.decode_key(bytearray(key)) == wire.release_key_text(topic, partition)
    assert wire.decode_key(key.decode()) == wire.release_key_text(topic, partition)


def test_dead_letter_headers_are_in_the_namespace_and_distinct():
    assert len(set(wire.DEAD_LETTER_HEADERS)) == len(wire.DEAD_LETTER_HEADERS) == 7
    assert all(name.startswith(wire.HEADER_PREFIX) for name in NAMES - {wire.PARAMS_TOPIC})
