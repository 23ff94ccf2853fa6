"""Every example output of the docs is produced by a test that runs the code.

The tests that run a command call `readme_examples.show(<name>, <what it printed>)`,
which compares the block after `<!-- example: <name> -->` on whichever page holds it
(README.md or a hand-written page under docs/; see tests/readme_examples.py), or
`aws_cli.transcript(<name>, ...)` for a block of `$ ` commands and their output
(tests/aws_cli.py). Here: each such block has a test that shows it, a name is used on one
page only, once, and the formatting is `juju run`'s.
"""

from __future__ import annotations

import re
from pathlib import Path

import docs_pages
import readme_examples

ROOT = Path(__file__).resolve().parents[3]
TESTS = [p for p in (ROOT / "tests").rglob("test_*.py") if p.resolve() != Path(__file__)]


def _shown() -> set[str]:
    """The example names some test shows."""
    found = set()
    for path in TESTS:
        found |= set(re.findall(r'\b(?:show|transcript)\(\s*"([a-z0-9-]+)"', path.read_text()))
    return found


def test_every_example_in_the_docs_is_produced_by_a_test():
    names = readme_examples.names()
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"example names used twice (across all pages): {twice}"
    assert {"cluster-info", "train", "job-status", "serve"} <= set(names)
    assert set(names) - _shown() == set(), "examples no test produces"


def test_an_example_is_read_from_the_page_that_holds_it():
    for name in ("demo-end", "serve", "delete-kept"):  # README.md, the tutorial, a how-to
        page = readme_examples.page_of(name)
        assert f"<!-- example: {name} -->\n```\n{readme_examples.block(name)}```" in (
            page.read_text()
        )
    assert readme_examples.page_of("demo-end") == docs_pages.README
    assert readme_examples.page_of("delete-kept").parent.name == "how-to"


def test_the_update_mode_writes_the_page_that_holds_the_block(monkeypatch, tmp_path):
    readme, page = tmp_path / "README.md", tmp_path / "docs" / "how-to" / "x.md"
    page.parent.mkdir(parents=True)
    readme.write_text("# front\n")
    page.write_text("a\n<!-- example: here -->\n```\nold\n```\nb\n")
    monkeypatch.setattr(docs_pages, "pages", lambda: [readme, page])
    monkeypatch.setattr(docs_pages, "ROOT", tmp_path)
    monkeypatch.setattr(readme_examples, "UPDATE", True)
    readme_examples.show("here", "new\n")
    assert page.read_text() == "a\n<!-- example: here -->\n```\nnew\n```\nb\n"
    assert readme.read_text() == "# front\n"
    monkeypatch.setattr(readme_examples, "UPDATE", False)
    readme_examples.show("here", "new\n")


def test_a_name_on_two_pages_is_caught():
    text = "<!-- example: a -->\n```\nx\n```\n" + "<!-- example: a -->\n```\ny\n```\n"
    assert readme_examples.names(text) == ["a", "a"]


def test_a_block_no_test_produces_is_caught():
    readme = "<!-- example: typed-by-hand -->\n```\nall good\n```\n"
    assert set(readme_examples.names(readme)) - _shown() == {"typed-by-hand"}


def test_results_print_as_juju_run_prints_them():
    text = readme_examples.juju_results(
        {
            "state": "running",
            "gpus": 2,
            "created": "true",
            "pods": {"worker": "2/2"},
            "note": "a\nb",
        }
    )
    # every value a string; one that reads as another type quoted; keys sorted; blocks
    assert text == (
        'created: "true"\ngpus: "2"\nnote: |-\n  a\n  b\npods:\n  worker: 2/2\nstate: running\n'
    )


def test_an_example_the_code_no_longer_prints_fails(monkeypatch):
    import pytest

    monkeypatch.setattr(readme_examples, "UPDATE", False)
    with pytest.raises(AssertionError, match="is not what the code prints"):
        readme_examples.show("cluster-info", "summary: 0 nodes\n")
    # what varies from run to run may differ, nothing else
    page = readme_examples.page_of("job-status").read_text()
    block = re.search(r"<!-- example: job-status -->\n```\n(.*?)```", page, re.S)
    assert block
    volatile = (r"\d+\.\d+", r"loss-trend: .*")
    other_run = re.sub(r'loss: "\d+\.\d+"', 'loss: "0.5"', block.group(1))
    assert other_run != block.group(1)
    readme_examples.show("job-status", other_run, volatile=volatile)
    with pytest.raises(AssertionError):
        readme_examples.show("job-status", other_run.replace("mwms", "ps"), volatile=volatile)
