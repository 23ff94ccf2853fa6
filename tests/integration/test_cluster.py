"""Deploy the two cluster charms on a real controller, grow and shrink the cluster.

Run with `tox -e integration` after `tox -e pack`; set JUJU_CONTROLLER to choose the
controller (default: the current one). Skipped when no controller is configured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTROL_PLANE = "kubernetes-control-plane"
WORKER = "kubernetes-worker"


def _charm(name: str) -> Path:
    path = ROOT / "build" / f"{name}.charm"
    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} is missing: run `tox -e pack` first")
    return path


@pytest.mark.abort_on_fail
async def test_deploy_gives_a_ready_cluster(ops_test):
    await ops_test.model.deploy(
        _charm(CONTROL_PLANE),
        application_name=CONTROL_PLANE,
        constraints="cores=2 mem=4G root-disk=30G",
    )
    await ops_test.model.deploy(
        _charm(WORKER), application_name=WORKER, constraints="cores=2 mem=4G root-disk=30G"
    )
    await ops_test.model.integrate(f"{CONTROL_PLANE}:workers", f"{WORKER}:cluster")
    await ops_test.model.wait_for_idle([CONTROL_PLANE, WORKER], status="active", timeout=1800)
    status = ops_test.model.applications[CONTROL_PLANE].units[0].workload_status_message
    assert status.startswith("Ready: v1."), status
    assert "1 worker" in status, status


async def test_cluster_info_lists_every_node(ops_test):
    unit = ops_test.model.applications[CONTROL_PLANE].units[0]
    action = await (await unit.run_action("cluster-info")).wait()
    assert action.status == "completed"
    assert "nodes" in action.results


async def test_batch_engines_run_and_kueue_knows_the_cohort(ops_test):
    """JobSet and Kueue from their release manifests: controllers up, cluster objects made."""
    unit = ops_test.model.applications[CONTROL_PLANE].units[0].name
    kubectl = ["sudo", "kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"]
    for namespace, deployment in (
        ("jobset-system", "jobset-controller-manager"),
        ("kueue-system", "kueue-controller-manager"),
    ):
        code, out, err = await ops_test.juju(
            "ssh", unit, *kubectl, "-n", namespace, "rollout", "status",
            f"deployment/{deployment}", "--timeout=300s",
        )  # fmt: skip
        assert code == 0, err or out
    code, out, err = await ops_test.juju(
        "ssh", unit, *kubectl, "get", "cohorts.kueue.x-k8s.io,resourceflavors.kueue.x-k8s.io",
        "-o", "name",
    )  # fmt: skip
    assert code == 0, err
    assert "cohort.kueue.x-k8s.io/gpu-k8s" in out and "resourceflavor.kueue.x-k8s.io/cpu" in out


async def test_add_unit_joins_and_remove_unit_drains(ops_test):
    app = ops_test.model.applications[WORKER]
    await app.add_unit(count=1)
    await ops_test.model.wait_for_idle([CONTROL_PLANE, WORKER], status="active", timeout=1800)
    assert len(app.units) == 2
    await app.units[-1].destroy()
    await ops_test.model.wait_for_idle([CONTROL_PLANE, WORKER], status="active", timeout=1800)
    assert len(app.units) == 1


async def _proxy_servers(ops_test, unit_name: str) -> list[str]:
    code, out, err = await ops_test.juju("ssh", unit_name, "cat", "/etc/gpu-k8s/api-proxy.json")
    assert code == 0, err
    return json.loads(out)["servers"]


async def test_ha_control_plane_survives_losing_a_unit(ops_test):
    """Three control-plane units; every node's API proxy lists all three; one goes, all stays."""
    planes = ops_test.model.applications[CONTROL_PLANE]
    await planes.add_unit(count=2)
    await ops_test.model.wait_for_idle([CONTROL_PLANE, WORKER], status="active", timeout=2400)
    status = planes.units[0].workload_status_message
    assert "3 control-plane" in status, status
    worker = ops_test.model.applications[WORKER].units[0].name
    assert len(await _proxy_servers(ops_test, worker)) == 3

    leader = None
    for unit in planes.units:
        if await unit.is_leader_from_status():
            leader = unit
    assert leader is not None
    await leader.destroy()
    await ops_test.model.wait_for_idle([CONTROL_PLANE, WORKER], status="active", timeout=1800)
    assert len(await _proxy_servers(ops_test, worker)) == 2
    survivor = planes.units[0]
    assert "2 control-plane" in survivor.workload_status_message
    action = await (await survivor.run_action("cluster-info")).wait()
    assert action.status == "completed"
    nodes = json.loads(action.results["nodes"])
    assert all(n["ready"] for n in nodes), nodes


async def test_upgrade_to_the_next_minor_reaches_every_node(ops_test):
    """One minor up: the control plane first, then every worker, all Ready again."""
    planes = ops_test.model.applications[CONTROL_PLANE]
    before = planes.units[0].workload_status_message.split(",")[0]  # "Ready: v1.36"
    current = before.removeprefix("Ready: v")
    major, minor = current.split(".")
    target = f"{major}.{int(minor) + 1}"
    await planes.set_config({"kubernetes-version": target})
    await ops_test.model.wait_for_idle([CONTROL_PLANE, WORKER], status="active", timeout=3600)
    status = planes.units[0].workload_status_message
    assert status.startswith(f"Ready: v{target}"), status
    assert "to go" not in status, status
    action = await (await planes.units[0].run_action("cluster-info")).wait()
    nodes = json.loads(action.results["nodes"])
    assert {n["version"].lstrip("v").rsplit(".", 1)[0] for n in nodes} == {target}, nodes
