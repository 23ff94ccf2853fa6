"""The docs say only what the charms can do: every command they show exists as written.

On README.md and every hand-written page under docs/ (tests/docs_pages.py): every
`juju run <app>/<unit> <action> key=value` names an action of that application's charm and
only its parameters; every `juju config <app> key=value` an option of that charm; every
repository path named exists; every `tox -e <env>` is an environment of tox.ini.
Applications are the bundle's (kubernetes-worker-gpu is the worker charm) and those a page
deploys itself (`juju deploy ./build/tensorflow.charm team-b`).
"""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import docs_pages
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
BUNDLE = yaml.safe_load((ROOT / "bundles" / "gpu-k8s.yaml").read_text())
PATH_ROOTS = "bundles|charms|tests|tools|actions|lib|docs|requirements"


def _deployed() -> dict[str, str]:
    """Applications the pages deploy themselves: `juju deploy ./build/<charm>.charm <app>`."""
    found = re.findall(r"juju deploy \./build/([a-z-]+)\.charm ([a-z0-9-]+)", docs_pages.text())
    return {app: charm for charm, app in found}


def _charm(app: str) -> dict:
    body = BUNDLE["applications"].get(app)
    if body is None and app in _deployed():
        body = {"charm": f"../build/{_deployed()[app]}.charm"}
    assert body is not None, f"the docs name an application the bundle lacks: {app}"
    name = Path(body["charm"]).name.removesuffix(".charm")
    return yaml.safe_load((ROOT / "charms" / name / "charmcraft.yaml").read_text())


def _commands(tool: str, text: str | None = None) -> list[list[str]]:
    """Every `juju <tool> ...` of the pages (code blocks and inline code), as words."""
    text = (docs_pages.text() if text is None else text).replace("\\\n", " ")
    found = []
    for line in re.findall(rf"juju {tool} [^`\n#]*", text):
        words = shlex.split(line.replace("<", "'<").replace(">", ">'"))
        found.append(words[2:])
    return found


RUNS = _commands("run")
CONFIGS = _commands("config")


def test_the_readme_shows_commands_to_check():
    assert len(RUNS) > 20 and len(CONFIGS) > 3


def test_a_wrong_action_or_parameter_is_caught():
    text = "```\njuju run tensorflow/0 train job=a gpus=1   # gpus is serve's\n```\n"
    (words,) = _commands("run", text)
    assert words == ["tensorflow/0", "train", "job=a", "gpus=1"]
    with pytest.raises(AssertionError, match="train: no parameter 'gpus'"):
        test_every_juju_run_names_a_real_action_and_its_parameters(words)
    with pytest.raises(AssertionError, match="has no action teach"):
        test_every_juju_run_names_a_real_action_and_its_parameters(["tensorflow/0", "teach"])


@pytest.mark.parametrize("words", RUNS, ids=[" ".join(w[:2]) for w in RUNS])
def test_every_juju_run_names_a_real_action_and_its_parameters(words):
    target, *rest = words
    app = target.split("/")[0]
    assert re.fullmatch(r"[a-z-]+/(\d+|leader)", target), target
    actions = _charm(app).get("actions") or {}
    if not rest:
        return  # `juju run tensorflow/0 train` in prose names the action next
    action, *args = rest
    assert action in actions, f"{app} has no action {action}"
    params = actions[action].get("params") or {}
    for arg in args:
        key = arg.split("=", 1)[0]
        assert "=" in arg and key in params, f"{app} {action}: no parameter {key!r}"


@pytest.mark.parametrize("words", CONFIGS, ids=[" ".join(w[:2]) for w in CONFIGS])
def test_every_juju_config_sets_a_real_option(words):
    app, *settings = words
    options = (_charm(app).get("config") or {}).get("options") or {}
    for setting in settings:
        key = setting.split("=", 1)[0]
        assert key in options, f"{app} has no option {key!r}"


def test_every_repository_path_it_names_exists():
    paths = set(re.findall(rf"`((?:{PATH_ROOTS})/[^`\s]*)`", docs_pages.text()))
    assert paths, "the pages name no repository path"
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists())
    assert missing == []


def test_every_tox_environment_it_names_exists():
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini")
    envs = {s.removeprefix("testenv:") for s in config.sections() if s.startswith("testenv:")}
    named = set(re.findall(r"tox -e ([a-z]+)", docs_pages.text()))
    assert named and named <= envs, named - envs
