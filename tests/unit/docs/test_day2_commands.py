"""Day-2 commands of the how-to pages, checked against Juju, the bundle, tox and the code.

- `juju set-constraints` and `juju add-unit` (how-to/ha-control-plane.md "On a running
  model"): Juju's constraint names, the bundle's applications, the very machine
  constraints the bundle and the HA overlay give the control plane, as many units as the
  overlay, and the status line the control plane prints with that many.
- `juju refresh <app> --path ./build/<charm>.charm` (how-to/upgrade.md "The charms"):
  each application one the bundle deploys (or a team a page deploys), each path what
  `tox -e pack` (tools/pack.py) writes, every application of the bundle refreshed, in
  the order the page gives.
- The page's claims about older charms during that upgrade, with the code that makes
  them true (lib kube_api check_policy) and the tests of the control plane that show
  the rest (PROOFS).
"""

from __future__ import annotations

import configparser
import json
import re
import stat
from pathlib import Path

import charm_modules
import docs_pages
import pack
import pytest
import yaml
from older_charms import old_efs_cluster_rules, old_tensorflow_cluster_rules

from charms.gpu_k8s.v0.kube_api import RequirerAppData, check_policy, without_legacy_reads

ROOT = docs_pages.ROOT
BUNDLE = yaml.safe_load((ROOT / "bundles" / "gpu-k8s.yaml").read_text())
HA = yaml.safe_load((ROOT / "bundles" / "overlays" / "ha-control-plane.yaml").read_text())
HA_PAGE = (docs_pages.DOCS / "how-to" / "ha-control-plane.md").read_text()
UPGRADE = (docs_pages.DOCS / "how-to" / "upgrade.md").read_text()
CONTROL_PLANE = "kubernetes-control-plane"
# The constraint names Juju parses (juju/juju core/constraints/constraints.go, the
# constants "the supported constraint attribute names", and its one alias cpu-cores for
# cores; read 2026-11-27). `juju set-constraints` refuses any other key.
JUJU_CONSTRAINTS = {
    "arch", "container", "cores", "cpu-cores", "cpu-power", "nested-virtualization", "mem",
    "root-disk", "root-disk-source", "tags", "instance-role", "instance-type", "spaces",
    "virt-type", "zones", "allocate-public-ip", "image-id",
}  # fmt: skip


def _constraints(text: str) -> dict[str, str]:
    """`cores=4 mem=16G` as {"cores": "4", "mem": "16G"} (Juju's form: key=value, spaces)."""
    return dict(word.split("=", 1) for word in text.split())


def _deployed_teams() -> dict[str, str]:
    """Applications a page deploys itself: `juju deploy ./build/<charm>.charm <app>`."""
    found = re.findall(r"juju deploy \./build/([a-z-]+)\.charm ([a-z0-9-]+)", docs_pages.text())
    return {app: charm for charm, app in found}


def _charm_of(app: str) -> str:
    """The charm an application of the bundle (or a page's team) runs."""
    if app in BUNDLE["applications"]:
        return Path(BUNDLE["applications"][app]["charm"]).name.removesuffix(".charm")
    assert app in _deployed_teams(), f"no bundle application or deployed team {app}"
    return _deployed_teams()[app]


# -- How to run three control-plane machines: on a running model -----------------------

SET_CONSTRAINTS = re.findall(r"juju set-constraints ([a-z0-9-]+) ([^`\n#]+)", docs_pages.text())
ADD_UNITS = re.findall(r"juju add-unit ([a-z0-9-]+) -n (\d+)", docs_pages.text())


def test_the_pages_set_constraints_and_add_units():
    assert (CONTROL_PLANE, "cores=4 mem=16G root-disk=64G") in [
        (app, args.strip()) for app, args in SET_CONSTRAINTS
    ]
    assert (CONTROL_PLANE, "2") in ADD_UNITS


@pytest.mark.parametrize(("app", "args"), SET_CONSTRAINTS)
def test_every_set_constraints_names_a_bundle_application_and_jujus_keys(app, args):
    assert app in BUNDLE["applications"], app
    keys = set(_constraints(args))
    assert keys and keys <= JUJU_CONSTRAINTS, keys - JUJU_CONSTRAINTS


def test_a_wrong_constraint_name_is_caught():
    with pytest.raises(AssertionError, match="memory"):
        test_every_set_constraints_names_a_bundle_application_and_jujus_keys(
            CONTROL_PLANE, "cores=4 memory=16G"
        )


@pytest.mark.parametrize(("app", "n"), ADD_UNITS)
def test_every_add_unit_names_a_bundle_application(app, n):
    assert app in BUNDLE["applications"] or app in _deployed_teams(), app


def test_the_running_model_gets_the_machines_and_units_of_the_ha_overlay():
    """The same machines as `--overlay ha-control-plane.yaml` on a new model, as many units."""
    (args,) = [a for app, a in SET_CONSTRAINTS if app == CONTROL_PLANE]
    asked = _constraints(args)
    # the application has none of its own: the bundle puts it on machine 0's constraints
    assert "constraints" not in BUNDLE["applications"][CONTROL_PLANE]
    assert _constraints(BUNDLE["machines"]["0"]["constraints"]) == asked
    for machine in HA["machines"].values():
        assert _constraints(machine["constraints"]) == asked
    (added,) = [int(n) for app, n in ADD_UNITS if app == CONTROL_PLANE]
    units = BUNDLE["applications"][CONTROL_PLANE]["num_units"] + added
    assert units == HA["applications"][CONTROL_PLANE]["num_units"] == 3


MACHINE_CONSTRAINTS = re.findall(r"--constraints \"([^\"]+)\"", docs_pages.text())


def test_every_constraints_flag_uses_jujus_keys():
    assert MACHINE_CONSTRAINTS
    for args in MACHINE_CONSTRAINTS:
        keys = set(_constraints(args))
        assert keys <= JUJU_CONSTRAINTS, keys - JUJU_CONSTRAINTS


def test_the_new_machine_0_of_an_etcd_restore_is_the_bundles_machine_0():
    """`--map-machines=existing` puts the bundle's machine 0 there: the same constraints."""
    page = (docs_pages.DOCS / "how-to" / "etcd-backup.md").read_text()
    (args,) = re.findall(r"^juju add-machine --constraints \"([^\"]+)\"$", page, re.M)
    assert "juju deploy ./bundles/gpu-k8s.yaml --trust --map-machines=existing" in page
    assert _constraints(args) == _constraints(BUNDLE["machines"]["0"]["constraints"])


def test_the_status_quoted_is_the_control_planes_line_with_that_many_units():
    """What the charm's ready_line (summary.py) prints once the three units joined."""
    (quote,) = re.findall(r"`(Ready: v[^`]*control-plane, \.\.\.)`", " ".join(HA_PAGE.split()))
    fixed = quote.removesuffix("...")
    peers = charm_modules.load(CONTROL_PLANE, "peers")
    cluster_info = charm_modules.load(CONTROL_PLANE, "cluster_info")
    registry = charm_modules.load(CONTROL_PLANE, "registry")
    # each unit's peer databag once it joined (membership.py: joined, node-name, api-server)
    units = {
        f"{CONTROL_PLANE}/{i}": {
            "joined": "true",
            "node-name": f"ip-10-0-0-{5 + i}",
            "api-server": f"10.0.0.{5 + i}:6443",
        }
        for i in range(3)
    }
    me = f"{CONTROL_PLANE}/0"
    app = {
        "cluster-version": BUNDLE["applications"][CONTROL_PLANE]["options"]["kubernetes-version"]
    }
    seen = peers.Peers(app, me, units[me], {u: d for u, d in units.items() if u != me})
    line = cluster_info.status_line(
        seen.cluster_version,
        cluster_info.NodeHealth(),  # every node Ready at the leader's last look
        planes=seen.control_plane_nodes(units[me]["node-name"]),
        workers=registry.Registry(),
        behind=0,
        pending_removal=0,
        notes=[],
    )
    assert line.startswith(fixed), (line, quote)


# -- How to upgrade the charms: juju refresh --path --------------------------------------

REFRESHES = re.findall(r"^juju refresh ([a-z0-9-]+) --path (\S+)", UPGRADE, re.M)


def test_the_upgrade_page_refreshes_every_application_of_the_bundle():
    refreshed = [app for app, _ in REFRESHES]
    assert set(BUNDLE["applications"]) <= set(refreshed), set(BUNDLE["applications"]) - set(
        refreshed
    )
    teams = [app for app in refreshed if app not in BUNDLE["applications"]]
    assert teams == ["team-b"]  # the example team of share-between-teams.md
    assert len(refreshed) == len(set(refreshed))


@pytest.mark.parametrize(("app", "path"), REFRESHES)
def test_each_refresh_takes_the_file_tox_pack_writes_for_that_applications_charm(app, path):
    charm = _charm_of(app)
    assert charm in pack.charm_names()
    assert path == f"./build/{charm}.charm", (app, path)


def test_tox_pack_writes_build_charm_files(tmp_path, monkeypatch):
    """`tox -e pack` runs tools/pack.py from the repository root into ./build/<charm>.charm.

    charmcraft is the boundary: it writes `<name>_<platform>.charm` in the project it
    packs (canonical/charmcraft charmcraft/services/package.py get_charm_path), here
    played by a script on PATH.
    """
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini")
    assert (
        config["testenv:pack"]["commands"].strip() == "python {tox_root}/tools/pack.py {posargs}"
    )
    assert pack.BUILD == ROOT / "build"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "charmcraft"
    fake.write_text(
        "#!/bin/sh\n"
        'name=$(sed -n "s/^name: *//p" charmcraft.yaml)\n'
        'echo packed > "${name}_amd64.charm"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    directory = tmp_path / "build" / "tensorflow"
    directory.mkdir(parents=True)
    (directory / "charmcraft.yaml").write_text("name: tensorflow\n")

    written = pack.pack("tensorflow", directory)

    assert written == tmp_path / "build" / "tensorflow.charm"
    assert written.read_text() == "packed\n"


def test_the_refreshes_come_in_the_order_the_page_gives():
    """Every team first, then the control plane and the workers, then efs-storage."""
    charms = [_charm_of(app) for app, _ in REFRESHES]
    order = {"tensorflow": 0, CONTROL_PLANE: 1, "kubernetes-worker": 1, "efs-storage": 2}
    ranks = [order[c] for c in charms]
    assert ranks == sorted(ranks), list(zip(charms, ranks, strict=True))
    # and the page's prose says so
    flat = " ".join(UPGRADE.split())
    assert (
        "every tensorflow application (each team) first, then the control plane and the "
        "workers together, then efs-storage" in flat
    )


# -- What older charms meet during that upgrade ------------------------------------------

# The tests that show what the page says follows (test file -> test names): the control
# plane refuses an older team's whole request and revokes its grant, and keeps an older
# efs-storage's grant while it serves none of its consumers; the admission policy then
# refuses a claim for a consumer not published.
PROOFS = {
    "tests/unit/kubernetes_control_plane/test_older_consumers.py": (
        "test_a_team_charm_that_still_asks_to_write_its_cluster_queue_loses_its_grant",
        "test_an_efs_storage_that_publishes_no_consumers_keeps_its_grant_and_serves_none",
        "test_an_efs_storage_that_still_asks_to_read_pods_keeps_its_grant_without_them",
    ),
    "tests/functional/test_admission_policies.py": (
        "test_a_consumer_is_served_once_the_control_plane_admits_it",
    ),
}


def test_the_tests_the_claims_rest_on_are_there():
    for file, names in PROOFS.items():
        defined = set(re.findall(r"^def (test_\w+)\(", (ROOT / file).read_text(), re.M))
        assert set(names) <= defined, (file, set(names) - defined)


def test_an_older_tensorflow_charm_is_refused_its_whole_request():
    request = RequirerAppData.model_validate(
        {
            "namespace": "team-b",
            "cluster-rules": json.dumps(old_tensorflow_cluster_rules("team-b")),
        }
    )
    refusal = check_policy(request)
    assert refusal is not None and "clusterqueues refused: clusterqueues writes" in refusal
    # today's tensorflow charm asks for none of that
    literals = charm_modules.load("tensorflow", "literals")
    today = {"namespace": "team-b", "cluster-rules": json.dumps(literals.cluster_rules("team-b"))}
    assert check_policy(RequirerAppData.model_validate(today)) is None
    flat = " ".join(UPGRADE.split())
    assert (
        "still asks on `kube-api` for the right to write ClusterQueues, and the control plane "
        "refuses its whole request and revokes what it had granted" in flat
    )
    # the note the control plane's status adds (access.py), for the page's team-b
    assert "`refused kube-api request of team-b`" in flat
    assert "no new credentials" not in flat  # it loses those it had (PROOFS)


def test_an_older_efs_storage_keeps_its_grant_but_publishes_no_consumer():
    """Its request is still granted (existing volumes work); whom it serves is unknown."""
    efs = charm_modules.load("efs-storage", "literals")
    older = RequirerAppData.model_validate(
        {
            "namespace": "efs-storage",
            "rules": json.dumps(efs.NAMESPACED_RULES),
            "cluster-rules": json.dumps(old_efs_cluster_rules(efs.CLUSTER_RULES)),
        }
    )
    # its cluster-wide pod reads are left out (KubeApiProvider.requests), the rest granted
    assert check_policy(older, provisioner=True) is not None
    assert check_policy(without_legacy_reads(older), provisioner=True) is None
    assert older.storage_consumers is None  # access.py records {} served: every claim refused
    flat = " ".join(UPGRADE.split())
    assert (
        "an efs-storage older than that publishes none, so until it is refreshed its new claims"
        in flat
    )
    assert "Volumes and claims that exist keep working" in flat
    assert "the control plane leaves that one rule out and grants the rest" in flat
