"""The reference pages under docs/reference/ are what tools/reference.py writes now.

Each is regenerated in memory from the charms' charmcraft.yaml and code and compared with
the committed file: an action, option, endpoint, status message or alert rule changed
without rerunning `python tools/reference.py` fails here, naming that command.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import reference
import yaml

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
PAGES = reference.render()


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_committed_page_is_what_the_charms_generate(name):
    path = DOCS / "reference" / name
    assert path.exists(), f"docs/reference/{name} is missing: run `{reference.COMMAND}`"
    assert path.read_text() == PAGES[name], (
        f"docs/reference/{name} is out of date: run `{reference.COMMAND}`"
    )


def test_no_page_is_left_over_and_the_check_agrees():
    assert reference.stale(PAGES) == [], f"run `{reference.COMMAND}`"
    assert reference.main(["--check"]) == 0


def test_an_action_or_option_added_without_regenerating_is_stale(monkeypatch):
    meta = yaml.safe_load((ROOT / "charms" / "tensorflow" / "charmcraft.yaml").read_text())
    meta["actions"]["rewind"] = {"description": "Go back.", "params": {}}
    meta["config"]["options"]["colour"] = {"type": "string", "default": "", "description": "."}
    monkeypatch.setattr(reference, "charmcraft", lambda charm: meta)
    changed = reference.render()
    assert "## `rewind`" in changed["tensorflow/actions.md"]
    assert "## `colour`" in changed["tensorflow/config.md"]
    assert set(reference.stale(changed)) >= {"tensorflow/actions.md", "tensorflow/config.md"}


def test_every_action_option_endpoint_and_alert_is_on_its_page():
    for charm in reference.charm_names():
        meta = reference.charmcraft(charm)
        actions = PAGES[f"{charm}/actions.md"]
        for action, spec in (meta.get("actions") or {}).items():
            assert f"## `{action}`" in actions
            for param in spec.get("params") or {}:
                assert f"| `{param}`" in actions
        config = PAGES[f"{charm}/config.md"]
        for option in meta["config"]["options"]:
            assert f"## `{option}`" in config
        relations = PAGES[f"{charm}/relations.md"]
        for role in ("provides", "requires", "peers"):
            for endpoint in meta.get(role) or {}:
                assert f"| `{endpoint}` | {role} |" in relations
        statuses = PAGES[f"{charm}/statuses.md"]
        for _, rule in reference.alert_rules(charm):
            assert f"### `{rule['alert']}`" in statuses
    assert "Runs without the machine lock" in PAGES["tensorflow/actions.md"]
    assert "Takes the machine lock" in PAGES["kubernetes-control-plane/actions.md"]


def test_the_status_pages_list_what_the_code_sets():
    worker = PAGES["kubernetes-worker/statuses.md"]
    # a literal, a named constant (LEFT), an error's own message (AptError.__init__)
    assert "| waiting | `waiting for join material` |" in worker
    assert "| maintenance | `left the cluster` |" in worker
    assert "`cannot use package source <package>: <detail>; " in worker
    assert "| blocked | `Invalid config: <error>` |" in worker
    # every charm's Statuses: kube_status's messages
    for charm in reference.charm_names():
        assert "Kubernetes API unavailable (<status> <reason>)" in PAGES[f"{charm}/statuses.md"]
    assert "### `GpuNodeNotReady`" in PAGES["kubernetes-control-plane/statuses.md"]


def test_every_module_that_sets_a_status_is_on_the_page():
    """A status made in a charm's module is listed: as a message, or as composed."""
    for charm in reference.charm_names():
        messages = reference.Messages(charm).scan()
        listed = {f.module for f in messages.found} | {m for _, _, m in messages.composed}
        setting = {
            module.name
            for module in messages.own
            for node in module.calls
            if reference._status_kind(node.func) and node.args
        }
        assert setting and setting <= listed, (charm, setting - listed)


def test_the_docs_index_and_the_readme_link_the_reference():
    index = (DOCS / "README.md").read_text()
    for name in PAGES:
        assert f"reference/{name}" in index, f"docs/README.md does not link reference/{name}"
    assert "](docs/reference/" in (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", "".join(PAGES.values()))
    for name, text in PAGES.items():
        base = (DOCS / "reference" / name).parent
        for link in re.findall(r"\]\(([^)#]+)\)", text):
            assert (base / link).resolve().exists(), f"{name} links {link}, which is not there"
    assert links
