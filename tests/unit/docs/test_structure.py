"""README.md is the front door and docs/ holds the rest, in Diátaxis, every page linked.

README.md stays short (MAX_README_LINES) and links every hand-written page under docs/
and the generated reference's index; every page of docs/ is reachable from the README by
following links (no orphan), and no relative link of any page points at a file or a
heading that is not there (issue 33).
"""

from __future__ import annotations

from pathlib import Path

import docs_pages
import pytest

MAX_README_LINES = 150
KINDS = ("tutorial.md", "how-to", "reference", "explanation")  # Diátaxis' four


def test_the_readme_is_a_front_door():
    lines = docs_pages.README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"
    text = "\n".join(lines)
    for heading in ("## What it costs", "## Requirements", "## A first deploy"):
        assert heading in text
    assert "tox -e demo" in text and "\ntox  " in text  # the two local commands
    assert "What keeps billing after a teardown" in text


def test_docs_holds_the_four_kinds():
    for kind in KINDS:
        assert (docs_pages.DOCS / kind).exists(), kind
    assert list((docs_pages.DOCS / "how-to").glob("*.md"))
    assert list((docs_pages.DOCS / "explanation").glob("*.md"))


def test_the_readme_links_every_hand_written_page_and_the_reference():
    linked = docs_pages.linked_pages(docs_pages.README)
    missing = [docs_pages.name(p) for p in docs_pages.pages()[1:] if p.resolve() not in linked]
    assert not missing, f"README.md does not link {missing}"
    assert (docs_pages.GENERATED / "README.md").resolve() in linked


def test_no_page_is_an_orphan():
    reachable = docs_pages.reachable()
    orphans = [docs_pages.name(p) for p in docs_pages.all_pages() if p.resolve() not in reachable]
    assert not orphans, f"no link leads to {orphans}"


@pytest.mark.parametrize("page", docs_pages.all_pages(), ids=docs_pages.name)
def test_no_relative_link_is_dead(page: Path):
    assert docs_pages.dead_links(page) == []


def test_a_dead_link_an_unknown_anchor_and_an_orphan_are_caught(tmp_path: Path):
    page = tmp_path / "a.md"
    other = tmp_path / "b.md"
    page.write_text("# A\n\n[b](b.md#there) [c](c.md) [top](#a) [web](https://x.org/y)\n")
    other.write_text("# B\n\n## Here\n\n```\n## there\n```\n")
    assert docs_pages.dead_links(page) == ["b.md#there", "c.md"]
    assert docs_pages.slug("## 10. Tear down, until nothing bills".lstrip("# ")) == (
        "10-tear-down-until-nothing-bills"
    )
    assert docs_pages.reachable(other) == {other.resolve()}
