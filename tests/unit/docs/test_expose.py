"""Every `juju expose` the project shows names the addresses it opens to (`--to-cidrs`).

Without `--to-cidrs` (or `--to-spaces`) Juju opens the application's ports to 0.0.0.0/0
(Juju CLI reference, `juju expose`: "If no additional options are specified, the command
will, by default, allow access from 0.0.0.0/0 to all ports opened by the application").
"""

from __future__ import annotations

import re
from pathlib import Path

import docs_pages

ROOT = Path(__file__).resolve().parents[3]
EXPOSE = re.compile(r"(?<![\w-])juju expose\b[^`'\"\n]*")


def _shown() -> list[tuple[str, str]]:
    """(where, command) of every `juju expose` in the docs and the charms' texts."""
    out = [
        (docs_pages.name(page), m.group(0))
        for page, text in docs_pages.texts()
        for m in EXPOSE.finditer(text)
    ]
    for path in sorted((ROOT / "charms").glob("*/src/*.py")) + sorted(
        (ROOT / "charms").glob("*/charmcraft.yaml")
    ):
        text = path.read_text().replace('"\n', "").replace('f"', "")
        out += [(str(path.relative_to(ROOT)), m.group(0)) for m in EXPOSE.finditer(text)]
    return out


def test_the_scan_finds_the_commands():
    where = {w for w, _ in _shown()}
    assert any(w == "README.md" or w.startswith("docs/") for w in where)
    assert "charms/kubernetes-control-plane/src/operator_actions.py" in where  # get-kubeconfig


def test_every_juju_expose_names_its_cidrs():
    # the command's bare name (`juju expose`, as a reference) is no example
    examples = [(w, c) for w, c in _shown() if len(c.split()) > 2]
    assert len(examples) >= 3
    missing = [(w, c) for w, c in examples if "--to-cidrs" not in c]
    assert not missing, f"juju expose without --to-cidrs (opens to 0.0.0.0/0): {missing}"


def test_the_docs_say_what_opening_to_everyone_means():
    text = docs_pages.text()
    assert "0.0.0.0/0" in text
    assert "juju unexpose kubernetes-control-plane" in text
