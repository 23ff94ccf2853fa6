"""Where the charms send the operator, the page is: no pointer into a README section gone.

README.md became a front door (issue 33): its few sections (`## ...`) hold no GPU health,
IAM policy or etcd restore any more; those live in docs/. An operator reads the charms'
words literally: their status and action messages (every string literal of the charms,
their libraries and the action programs, docstrings left out) and the help of every
option and action in charmcraft.yaml (`juju config`, `juju actions`, docs/reference).
Each pointer there must lead somewhere: a `README` names one of README.md's headings,
and a `docs/....md` path is a page that exists.
"""

from __future__ import annotations

import ast
import re

import docs_pages
import pytest
import reference
import yaml

ROOT = docs_pages.ROOT
SOURCES = [
    *ROOT.glob("charms/*/src/**/*.py"),
    *ROOT.glob("lib/charms/gpu_k8s/**/*.py"),
    *ROOT.glob("actions/*.py"),
]
README_HEADINGS = re.findall(r"^#+ (.+)$", docs_pages.README.read_text(), re.M)
DOC_PATH = re.compile(r"\bdocs/[\w./-]+\.md\b")


def _code_texts() -> list[tuple[str, str]]:
    """(where, text) of every string literal a charm, library or action program says."""
    found = []
    for path in SOURCES:
        tree = reference.parse(path).tree
        skipped = {  # docstrings, and the parts of an f-string (read whole)
            id(n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, (ast.Constant, ast.JoinedStr))
        } | {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            text = reference.literal_text(node, lambda _: "<...>")
            if text and id(node) not in skipped:
                found.append((f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}", text))
    return found


def _help_texts() -> list[tuple[str, str]]:
    """(where, text) of every description in the charms' charmcraft.yaml."""
    found = []
    for meta in sorted(ROOT.glob("charms/*/charmcraft.yaml")):
        data = yaml.safe_load(meta.read_text())
        where = str(meta.relative_to(ROOT))
        found.append((where, str(data.get("description", ""))))
        for name, option in (data.get("config", {}).get("options") or {}).items():
            found.append((f"{where} option {name}", str(option.get("description", ""))))
        for name, action in (data.get("actions") or {}).items():
            found.append((f"{where} action {name}", str(action.get("description", ""))))
            for param, spec in (action.get("params") or {}).items():
                found.append((f"{where} action {name} {param}", str(spec.get("description", ""))))
    return found


def pointers(text: str) -> list[str]:
    """The places `text` sends the reader to that are not there."""
    flat = " ".join(text.split())
    dead = []
    for match in re.finditer(r"README\b(?!\.md\s*#)", flat):
        after = flat[match.end() : match.end() + 80]
        if not any(heading in after for heading in README_HEADINGS):
            dead.append(flat[max(0, match.start() - 30) : match.end() + 40])
    for path in DOC_PATH.findall(flat):
        if not (ROOT / path).is_file():
            dead.append(path)
    # `docs/x.md says (<part>)`: the part is named on that page
    for path, part in re.findall(rf"({DOC_PATH.pattern}) says \(([^)]+)\)", flat):
        if (ROOT / path).is_file() and part not in " ".join((ROOT / path).read_text().split()):
            dead.append(f"{path} says ({part})")
    return dead


TEXTS = [(w, t) for w, t in _code_texts() + _help_texts() if "README" in t or "docs/" in t]


def test_a_pointer_into_a_section_the_readme_lost_is_caught():
    assert pointers("restore it by hand as the README's 'Back up and restore etcd' says")
    assert pointers("(README, GPU health: kubernetes-worker-gpu/0)")
    assert pointers("see docs/how-to/nowhere.md")
    assert not pointers("see docs/how-to/gpu-day-2.md")
    assert pointers("as docs/how-to/etcd-backup.md says (Restore, three units)")
    assert not pointers(
        "as docs/how-to/etcd-backup.md says (Restore, several control-plane units)"
    )
    assert not pointers(f"README's '{README_HEADINGS[-1]}' section")


@pytest.mark.parametrize(("where", "text"), TEXTS, ids=[w for w, _ in TEXTS])
def test_every_pointer_the_charms_give_leads_to_a_page_that_is_there(where, text):
    assert not pointers(text), (where, pointers(text))
