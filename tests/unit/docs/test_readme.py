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
TEXT = docs_pages.text()  # every hand-written page, read once


def _deployed() -> dict[str, str]:
    """Applications the pages deploy themselves: `juju deploy ./build/<charm>.charm <app>`."""
    found = re.findall(r"juju deploy \./build/([a-z-]+)\.charm ([a-z0-9-]+)", TEXT)
    return {app: charm for charm, app in found}


def _from_charmhub() -> dict[str, str]:
    """Applications the pages deploy from Charmhub, recorded in tests/fixtures/charmhub."""
    found = re.findall(r"juju deploy ([a-z-]+) ([a-z0-9-]+) --channel", TEXT)
    return {app: charm for charm, app in found}


def _charm(app: str) -> dict:
    body = BUNDLE["applications"].get(app)
    if body is None and app in _deployed():
        body = {"charm": f"../build/{_deployed()[app]}.charm"}
    if body is None and app in _from_charmhub():  # `juju deploy <charm> <app> --channel`
        return yaml.safe_load((CHARMHUB / f"{_from_charmhub()[app]}.yaml").read_text())
    assert body is not None, f"the docs name an application the bundle lacks: {app}"
    name = Path(body["charm"]).name.removesuffix(".charm")
    return yaml.safe_load((ROOT / "charms" / name / "charmcraft.yaml").read_text())


def _commands(tool: str, text: str | None = None) -> list[list[str]]:
    """Every `juju <tool> ...` of the pages (code blocks and inline code), as words."""
    text = (TEXT if text is None else text).replace("\\\n", " ")
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
    paths = set(re.findall(rf"`((?:{PATH_ROOTS})/[^`\s]*)`", TEXT))
    assert paths, "the pages name no repository path"
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists())
    assert missing == []


def test_every_tox_environment_it_names_exists():
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini")
    envs = {s.removeprefix("testenv:") for s in config.sections() if s.startswith("testenv:")}
    named = set(re.findall(r"tox -e ([a-z]+)", TEXT))
    assert named and named <= envs, named - envs


CHARMHUB = ROOT / "tests" / "fixtures" / "charmhub"
OFFERS = yaml.safe_load((CHARMHUB / "cos-lite-offers.yaml").read_text())
INTEGRATES = _commands("integrate")


def _endpoint(app: str, name: str | None) -> tuple[str, str]:
    """(provides|requires, interface) of `app:name`: a charm here, Charmhub's, or an offer."""
    text = TEXT
    consumed = {url.rsplit(".", 1)[-1] for url in re.findall(r"juju consume (\S+)", text)}
    if app in consumed:
        offer = OFFERS[app]
        assert name in (None, offer["endpoint"]), f"offer {app} has no endpoint {name}"
        return offer["kind"], offer["interface"]
    meta = _charm(app)  # a charm here or Charmhub's
    for kind in ("provides", "requires"):
        if name in (meta.get(kind) or {}):
            return kind, meta[kind][name]["interface"]
    raise AssertionError(f"{app} has no endpoint {name}")


def test_the_pages_show_integrations_to_check():
    assert len(INTEGRATES) >= 10


@pytest.mark.parametrize("words", INTEGRATES, ids=[" ".join(w) for w in INTEGRATES])
def test_every_juju_integrate_joins_two_endpoints_of_one_interface(words):
    """COS on a running model (review F11): each `juju integrate` is one Juju accepts."""
    ends = [w.partition(":") for w in words if not w.startswith("-")]
    assert len(ends) == 2, words
    (a, _, a_end), (b, _, b_end) = ends
    kind_a, interface_a = _endpoint(a, a_end)
    kind_b, interface_b = _endpoint(b, b_end or None)
    assert interface_a == interface_b, words
    assert {kind_a, kind_b} == {"provides", "requires"}, words


# Juju 3.6 model configuration keys the pages set (documentation.ubuntu.com/juju/3.6,
# "List of model configuration keys", read 2026-11-27).
JUJU_MODEL_KEYS = {
    "apt-mirror", "apt-http-proxy", "apt-https-proxy", "apt-no-proxy", "juju-http-proxy",
    "juju-https-proxy", "juju-no-proxy", "snap-http-proxy", "snap-https-proxy",
    "agent-metadata-url", "image-metadata-url",
}  # fmt: skip


def test_every_juju_model_config_key_is_one_of_jujus():
    keys = {
        setting.split("=", 1)[0]
        for words in _commands("model-config")
        for setting in words
        if "=" in setting
    }
    assert keys and keys <= JUJU_MODEL_KEYS, keys - JUJU_MODEL_KEYS


def test_every_secret_id_is_one_juju_can_make():
    """Juju's secret ids are xids (tests/juju_secret_ids.py): `0-9a-v`, 20 characters."""
    from juju_secret_ids import XID

    found = re.findall(r"\bsecret:([0-9a-z]{20})\b", docs_pages.text())
    assert found  # get-kubeconfig's example
    assert [i for i in found if not XID.fullmatch(i)] == []
