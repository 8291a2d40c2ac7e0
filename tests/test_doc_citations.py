"""Citations of the repository's own documentation resolve, and nothing cites the old design documents.

Code comments, docstrings, tests, benchmarks, schemas, the chart and the README cite sections of
``docs/`` in one form: ``docs/<name>.md <number>``, where ``<number>`` (``3`` or ``3.2``) is the
number at the start of a Markdown heading of that file. This module checks, over every tracked text
file under worker/, tests/, bench/, schemas/, helm/ and README.md (and, for (d), docs/):

(a) every such citation names an existing file and a heading with exactly that number, and no
    citation uses another form (``... .md section 3``, ``... .md §3``);
(b) none of the design documents that preceded ``docs/`` is named any more;
(c) every paper label used (``[P0]``, ``[P1]``, ``[R2D]``, ...) is defined in the references of
    docs/README.md;
(d) every repository path cited (``worker/olu/core/base.py``, ``bench/``, ...) exists, and every
    dotted name of the package (``worker.olu.core.replay.replay_ogd``) imports and resolves.

Failures name the file and line. This file itself is not scanned (it has to name what it forbids).
"""

from __future__ import annotations

import os
import re
import subprocess
from functools import cache, lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
THIS = Path(__file__).resolve()
SCANNED = ("worker", "tests", "bench", "schemas", "helm", "README.md")

#: Documents that lived outside the repository before docs/ existed; citing them is an error.
OLD_DOCUMENTS = (
    "olu-spec",
    "design.md",
    "r2d-memorypair-spec",
    "private-oco-spec",
    "anchors-streaming.md",
    "anchors-ml-dp-storage.md",
    "sustained-unlearning.md",
)

#: ``docs/<name>.md`` and what follows it: optional spaces or one line break (a comment may continue
#: on the next line after ``#``, ``*`` or ``//``), then the section number.
DOC_REF = re.compile(r"docs/([A-Za-z0-9_-]+)\.md")
SECTION_AFTER = re.compile(r"[ \t]*(?:\r?\n[ \t]*(?:#+|\*|//)?[ \t]*)?(\d+(?:\.\d+)*)(?![\d.]*\d)")
WRONG_FORM = re.compile(r"[ \t]*(?:\r?\n[ \t]*(?:#+|\*|//)?[ \t]*)?(?:sections?\b|sec\.|§)", re.IGNORECASE)
HEADING = re.compile(r"^#{1,6}[ \t]+(\d+(?:\.\d+)*)\.?(?:[ \t]|$)")

#: Label shapes that mean "a paper": the numbered forms used before docs/ existed, plus any label
#: docs/README.md defines. Anything of these shapes must be defined there.
LABEL_SHAPES = (r"P\d+", r"seed \d+")


# --------------------------------------------------------------------------- files
def _tracked_files() -> list[Path]:
    """Tracked files under the scanned paths (git ls-files); a directory walk when git is unavailable."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", *SCANNED], cwd=ROOT, capture_output=True, check=True, timeout=60,
        ).stdout
        paths = [ROOT / p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        paths = []
        for top in SCANNED:
            base = ROOT / top
            if base.is_file():
                paths.append(base)
                continue
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".pytest_cache", ".hypothesis")]
                paths.extend(Path(dirpath) / f for f in filenames)
    return sorted(p for p in paths if p.is_file() and p.resolve() != THIS)


@lru_cache(maxsize=1)
def _texts() -> tuple[tuple[str, str], ...]:
    """(repository-relative path, text) of every scanned text file (binary and non-UTF-8 files skipped)."""
    out = []
    for path in _tracked_files():
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        out.append((path.relative_to(ROOT).as_posix(), text))
    return tuple(out)


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


# --------------------------------------------------------------------------- docs
@cache
def _headings(name: str) -> frozenset[str] | None:
    """Section numbers of the headings of docs/<name>.md (None if the file does not exist)."""
    path = DOCS / f"{name}.md"
    if not path.is_file():
        return None
    numbers, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            numbers.add(match.group(1))
    return frozenset(numbers)


def _references_section() -> str:
    """The references section of docs/README.md: from its "References" heading to the next heading
    of the same or a higher level."""
    text = (DOCS / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"^(#{1,6})[ \t]+(?:\d+(?:\.\d+)*\.?[ \t]+)?References\b", line)
        if match:
            level = len(match.group(1))
            body = []
            for following in lines[i + 1:]:
                other = re.match(r"^(#{1,6})[ \t]", following)
                if other and len(other.group(1)) <= level:
                    break
                body.append(following)
            return "\n".join(body)
    return ""


@lru_cache(maxsize=1)
def _defined_labels() -> frozenset[str]:
    """Labels defined in the references: the first cell of a table row, or the bold start of a list item."""
    section = _references_section()
    labels = set(re.findall(r"^\|[ \t]*\[([^\]\n]+)\][ \t]*\|", section, re.MULTILINE))
    labels |= set(re.findall(r"^[ \t]*[-*][ \t]+\*\*\[([^\]\n]+)\]\*\*", section, re.MULTILINE))
    return frozenset(labels)


# --------------------------------------------------------------------------- tests
def test_docs_readme_exists_and_defines_references():
    assert (DOCS / "README.md").is_file(), "docs/README.md is missing"
    assert _defined_labels(), "docs/README.md has no References section defining labels such as [P0]"


def test_scanned_files_are_found():
    assert any(path == "README.md" for path, _ in _texts()), "README.md was not scanned"
    assert any(path.startswith("worker/") for path, _ in _texts()), "nothing under worker/ was scanned"


def test_every_doc_citation_names_an_existing_section():
    problems = []
    for path, text in _texts():
        for ref in DOC_REF.finditer(text):
            name, where = ref.group(1), f"{path}:{_line(text, ref.start())}"
            headings = _headings(name)
            if headings is None:
                problems.append(f"{where}: docs/{name}.md does not exist")
                continue
            rest = text[ref.end():ref.end() + 200]
            if WRONG_FORM.match(rest):
                problems.append(f"{where}: write citations as 'docs/{name}.md <number>' "
                                f"(no 'section' or '§'): {text[ref.start():ref.end() + 20]!r}")
                continue
            number = SECTION_AFTER.match(rest)
            if number is None:
                continue  # a reference to the whole document, e.g. "see docs/README.md"
            if number.group(1) not in headings:
                problems.append(f"{where}: docs/{name}.md has no heading numbered {number.group(1)}")
    assert not problems, "broken documentation citations:\n" + "\n".join(problems)


def test_no_file_cites_the_old_design_documents():
    problems = []
    for path, text in _texts():
        for number, line in enumerate(text.splitlines(), start=1):
            for old in OLD_DOCUMENTS:
                if old in line:
                    problems.append(f"{path}:{number}: cites {old!r}: {line.strip()[:120]}")
    assert not problems, ("citations of documents outside the repository (cite docs/<file>.md <section> "
                          "instead):\n" + "\n".join(problems))


def test_every_paper_label_is_defined_in_docs_readme():
    defined = _defined_labels()
    shapes = list(LABEL_SHAPES) + [re.escape(label) for label in sorted(defined, key=len, reverse=True)]
    label = re.compile(r"\[(" + "|".join(shapes) + r")\]")
    problems = []
    for path, text in _texts():
        for match in label.finditer(text):
            if match.group(1) not in defined:
                problems.append(f"{path}:{_line(text, match.start())}: paper label [{match.group(1)}] is not "
                                f"defined in docs/README.md (defined: {', '.join(sorted(defined))})")
    assert not problems, "undefined paper labels:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", sorted(p.stem for p in DOCS.glob("*.md")) if DOCS.is_dir() else [])
def test_docs_cross_references_resolve(name):
    """Links between the documents ('[x.md](x.md) section 3.2') point at existing sections."""
    text = (DOCS / f"{name}.md").read_text(encoding="utf-8")
    problems = []
    link = re.compile(r"\]\(([A-Za-z0-9_-]+)\.md\)[ \t]*(?:sections?[ \t]+)?"
                      r"((?:\d+(?:\.\d+)*)(?:(?:[ \t]*,[ \t]*|[ \t]+and[ \t]+|[ \t]+to[ \t]+)\d+(?:\.\d+)*)*)")
    for match in link.finditer(text):
        headings = _headings(match.group(1))
        where = f"docs/{name}.md:{_line(text, match.start())}"
        if headings is None:
            problems.append(f"{where}: links to missing docs/{match.group(1)}.md")
            continue
        for number in re.findall(r"\d+(?:\.\d+)*", match.group(2)):
            if number not in headings:
                problems.append(f"{where}: docs/{match.group(1)}.md has no heading numbered {number}")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- paths and dotted names
#: A repository path in prose or code: under one of the project's top folders.
REPO_PATH = re.compile(r"(?<![\w/.$-])((?:worker|tests|bench|schemas|helm|docs)/[A-Za-z0-9_./{}*<>-]*[A-Za-z0-9_/])")
#: A dotted name of the package: ``worker.<module>...`` (a module, then attributes).
DOTTED = re.compile(r"(?<![\w./-])(worker(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
#: Placeholders that stand for any file (``bench/NAME.py``, ``bench/x.py``), and patterns.
PLACEHOLDER = re.compile(r"(?:^|/)(?:NAME|x)(?:[./]|$)|[{}*<>]")
#: Paths a command writes (untracked: a clean clone has none of them).
GENERATED = ("bench/results/quick",)


def _doc_texts() -> tuple[tuple[str, str], ...]:
    """The scanned files plus docs/*.md (their own paths are checked too)."""
    docs = tuple((p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8")) for p in sorted(DOCS.glob("*.md")))
    return _texts() + docs


def _resolves(dotted: str) -> bool:
    """``worker.a.b.c``: the longest importable module prefix, then attributes on it."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attribute in parts[i:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def test_every_cited_repository_path_exists():
    problems = []
    for path, text in _doc_texts():
        if path.startswith("bench/results/"):
            continue  # records of past runs (profiles name the files of their day), not pointers
        for match in REPO_PATH.finditer(text):
            cited = match.group(1)
            if PLACEHOLDER.search(cited) or cited.rstrip("/.") in GENERATED or (ROOT / cited.rstrip("/.")).exists():
                continue
            problems.append(f"{path}:{_line(text, match.start())}: {cited} does not exist")
    assert not problems, "paths that name nothing in the repository:\n" + "\n".join(problems)


def test_every_dotted_name_of_the_package_resolves():
    problems = []
    for path, text in _doc_texts():
        for match in DOTTED.finditer(text):
            name = match.group(1)
            top = name.split(".")[1]
            if not ((ROOT / "worker" / top).is_dir() or (ROOT / "worker" / f"{top}.py").is_file()):
                continue  # a variable called worker, not the package
            if not _resolves(name):
                problems.append(f"{path}:{_line(text, match.start())}: {name} does not resolve")
    assert not problems, "dotted names that name nothing:\n" + "\n".join(problems)
