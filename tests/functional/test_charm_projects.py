"""Every charm would pack: charmcraft's own model accepts it, and its assembly imports alone."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pack
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHARMS = pack.charm_names()
DASHED = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
CONFIG_TYPES = {"string", "int", "float", "boolean", "secret"}
# charmcraft 4.5 reads its own deprecated `charmhub` field while validating any project.
CHARMCRAFT_OWN_WARNING = pytest.mark.filterwarnings(
    "ignore:The 'charmhub' field is deprecated:DeprecationWarning"
)


def load(charm: str) -> dict:
    return yaml.safe_load((ROOT / "charms" / charm / "charmcraft.yaml").read_text())


def test_the_cluster_charms_are_found():
    assert {"kubernetes-control-plane", "kubernetes-worker"} <= set(CHARMS)


@CHARMCRAFT_OWN_WARNING
@pytest.mark.parametrize("charm", CHARMS)
def test_charmcraft_model_accepts_the_charm(charm):
    from charmcraft.models.project import CharmcraftProject

    project = CharmcraftProject.unmarshal(load(charm))
    assert project.name == charm


@pytest.mark.parametrize("charm", CHARMS)
def test_charm_follows_the_project_conventions(charm):
    data = load(charm)
    assert "juju >= 3.6" in data["assumes"]
    assert data["parts"]["charm"]["plugin"] == "uv"
    for kind in ("requires", "provides", "peers"):
        for name, endpoint in (data.get(kind) or {}).items():
            assert DASHED.match(name), f"endpoint {name} is not dashed lowercase"
            assert "interface" in endpoint, f"endpoint {name} has no interface"
            if kind != "peers":
                assert "optional" in endpoint, f"endpoint {name} does not set optional"
    for name, action in (data.get("actions") or {}).items():
        assert DASHED.match(name), f"action {name} is not dashed lowercase"
        assert action.get("additionalProperties") is False, f"action {name}"
        assert action.get("description"), f"action {name} has no description"
        for param in action.get("params") or {}:
            assert DASHED.match(param), f"{name} param {param} is not dashed lowercase"
    for name, option in ((data.get("config") or {}).get("options") or {}).items():
        assert DASHED.match(name), f"option {name} is not dashed lowercase"
        assert option.get("type") in CONFIG_TYPES, f"option {name} has type {option.get('type')}"
        assert option.get("description"), f"option {name} has no description"


@pytest.mark.parametrize("charm", CHARMS)
def test_charm_has_a_lock_file_and_pinned_project(charm):
    directory = ROOT / "charms" / charm
    assert (directory / "uv.lock").is_file(), "run `uv lock` in the charm directory"
    assert "ops" in (directory / "pyproject.toml").read_text()


@CHARMCRAFT_OWN_WARNING
def test_a_charmcraft_yaml_that_would_not_pack_is_rejected():
    from charmcraft.models.project import CharmcraftProject

    broken = load("kubernetes-worker")
    broken["base"] = "ubuntu@99.04"
    with pytest.raises(Exception, match="base"):
        CharmcraftProject.unmarshal(broken)


@pytest.mark.parametrize("charm", CHARMS)
def test_assembled_charm_imports_with_nothing_else_on_the_path(charm, tmp_path):
    directory = pack.assemble(charm, tmp_path)
    # Only the assembled charm and the third-party packages its venv would hold: not the
    # repository's lib/, tests/ or actions/, not the other charms.
    site = sysconfig.get_paths()["purelib"]
    probe = (
        "import json, sys\n"
        f"sys.path[:] = [{str(directory / 'src')!r}, {str(directory / 'lib')!r}, "
        f"{site!r}] + [p for p in sys.path if 'python3' in p and 'site-packages' not in p]\n"
        "import charm\n"
        "print(json.dumps({n: getattr(m, '__file__', None) or '' for n, m in "
        "sys.modules.items()}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    ours = {n: f for n, f in modules.items() if n == "charm" or n.startswith("charms.")}
    assert ours, "the charm module was not imported"
    for name, path in ours.items():
        if path:
            assert Path(path).is_relative_to(directory), f"{name} came from {path}"
    # heavy packages only where a hook uses them (DESIGN: import cost at most 1.1x the
    # floor); cosl only when a cos-agent relation has data to write
    for heavy in ("kubernetes", "boto3", "botocore", "cosl"):
        assert heavy not in modules, f"importing the charm must not import {heavy}"


def test_assembly_copies_only_the_libraries_a_charm_imports(tmp_path):
    directory = pack.assemble("kubernetes-worker", tmp_path)
    shipped = {p.name for p in (directory / "lib").rglob("*.py")}
    assert "system.py" in shipped
    assert "kube_api.py" not in shipped, "the worker does not use kube-api"
    assert (directory / "charmcraft.yaml").is_file()
    assert (directory / "uv.lock").is_file()
