"""Every `juju expose` the project shows names the addresses it opens to (`--to-cidrs`).

Without `--to-cidrs` (or `--to-spaces`) Juju opens the application's ports to 0.0.0.0/0
(Juju CLI reference, `juju expose`: "If no additional options are specified, the command
will, by default, allow access from 0.0.0.0/0 to all ports opened by the application").
"""

from __future__ import annotations

import ipaddress
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


# Addresses reserved for documentation, which no network routes to: RFC 5737 section 3
# (192.0.2.0/24 TEST-NET-1, 198.51.100.0/24 TEST-NET-2, 203.0.113.0/24 TEST-NET-3) and
# RFC 3849 (2001:db8::/32). An example output may show one; a command the operator pastes
# must not, or `juju expose --to-cidrs` opens the API server to nobody.
DOCUMENTATION_RANGES = [
    ipaddress.ip_network(n)
    for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
]
ADDRESS = re.compile(
    r"(?<![\w.:])(\d{1,3}(?:\.\d{1,3}){3}|[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{0,4}){2,7})"
)
EXAMPLE_OR_FENCE = re.compile(r"(<!-- example: [a-z0-9-]+ -->\n)?```[a-z]*\n(.*?)```", re.S)


def _runnable(text: str) -> list[str]:
    """The lines of the fenced blocks that are commands: not an example's output."""
    lines = []
    for m in EXAMPLE_OR_FENCE.finditer(text):
        block = m.group(2).splitlines()
        if m.group(1):  # an example: only a transcript's `$ ` lines are commands
            block = [line[2:] for line in block if line.startswith("$ ")]
        lines += block
    return lines


def _documentation_addresses(line: str) -> list[str]:
    found = []
    for candidate in ADDRESS.findall(line):
        try:
            address = ipaddress.ip_address(candidate)
        except ValueError:
            continue
        if any(address in net for net in DOCUMENTATION_RANGES):
            found.append(candidate)
    return found


def test_no_command_on_any_page_uses_a_documentation_address():
    hits = [
        (docs_pages.name(page), line)
        for page, text in docs_pages.texts()
        for line in _runnable(text)
        if _documentation_addresses(line)
    ]
    assert not hits, f"commands using an RFC 5737/3849 documentation address: {hits}"


def test_the_documentation_address_scan_finds_one():
    page = "```\njuju expose kubernetes-control-plane --to-cidrs 198.51.100.0/24\n```\n"
    assert [_documentation_addresses(line) for line in _runnable(page)] == [["198.51.100.0"]]
    output = "<!-- example: x -->\n```\nserver: https://203.0.113.7:6443\n```\n"
    assert _runnable(output) == []
    assert _documentation_addresses("ip 2001:db8::1 and 10.0.0.1") == ["2001:db8::1"]
