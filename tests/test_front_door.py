"""The README is a front door: short, with the two commands, and every link of it and of the docs
pages resolves (a file of the repository, and a heading of it where an anchor is named)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (lower case, punctuation dropped, spaces as dashes)."""
    text = FENCE.sub("", page.read_text())
    heads = re.findall(r"^#{1,6}[ \t]+(.+?)[ \t]*$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_the_readme_is_a_page_not_a_manual():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 300
    assert ".venv/bin/olu-worker demo" in text and ".venv/bin/python -m pytest -q" in text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_page_is_reachable_from_the_readme():
    """A page nobody links to is a page nobody reads."""
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in LINK.findall((ROOT / "README.md").read_text())}
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked
               and p.name not in (ROOT / "docs" / "README.md").read_text()]
    assert not orphans, f"docs pages no link reaches: {orphans}"
