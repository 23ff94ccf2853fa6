"""The application as a Kueue team: its ClusterQueue in the cohort and its LocalQueue."""

from __future__ import annotations

import dataclasses

import kubernetes_validate
import params
import pytest
import queues
from conftest import NS, add_nodes, node
from ops import testing

CQ = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-tensorflow"
LQS = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/localqueues/"
LQ = LQS + "training"
CONTROL_PLANE_TAINT = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]


def _quota(cq: dict) -> dict[tuple[str, str], str]:
    return {
        (flavor["name"], resource["name"]): resource["nominalQuota"]
        for group in cq["spec"]["resourceGroups"]
        for flavor in group["flavors"]
        for resource in flavor["resources"]
    }


def test_the_team_gets_a_queue_in_the_cohort_sized_by_the_schedulable_nodes(ctx, state, api):
    add_nodes(
        api,
        node("cpu-0"),
        node("gpu-0", 4),
        node("gpu-1", 1),
        node("control-plane-0", taints=CONTROL_PLANE_TAINT),  # never runs jobs
        node("gone", 8, ready=False),
    )
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status.name == "active", out.unit_status.message
    cq = api.get_object(CQ)
    assert cq["spec"]["cohortName"] == "gpu-k8s"
    assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NS}}
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert _quota(cq) == {
        ("cpu", "cpu"): "24",
        ("cpu", "memory"): str(3 * 64 * 2**30),
        ("gpu-nvidia-a10g", "nvidia.com/gpu"): "5",
    }
    assert api.get_object(LQ)["spec"] == {"clusterQueue": "team-tensorflow"}
    # never `default`, which Kueue would make the namespace's queue for everything
    assert [q["metadata"]["name"] for q in api.objects(LQS)] == ["training"]


def test_the_default_queue_of_an_earlier_revision_goes_and_nobody_elses(ctx, state, api):
    add_nodes(api, node("gpu-0", 1))
    ours = {"app.kubernetes.io/managed-by": "tensorflow"}
    api.put_object(LQS + "default", {"metadata": {"labels": ours}, "spec": {"clusterQueue": "x"}})
    api.put_object(LQS + "theirs", {"metadata": {}, "spec": {"clusterQueue": "y"}})
    ctx.run(ctx.on.upgrade_charm(), state)
    assert [q["metadata"]["name"] for q in api.objects(LQS)] == ["theirs", "training"]

    api.put_object(LQS + "default", {"metadata": {}, "spec": {"clusterQueue": "z"}})  # a user's
    ctx.run(ctx.on.config_changed(), dataclasses.replace(state, config={"gpu-quota": "1"}))
    assert api.get_object(LQS + "default") is not None


def test_configured_quotas_are_the_nominal_quota(ctx, state, api):
    add_nodes(api, node("gpu-0", 4))
    config = {"gpu-quota": "2", "cpu-quota": "16", "memory-quota": "100Gi"}
    ctx.run(ctx.on.config_changed(), dataclasses.replace(state, config=config))
    assert _quota(api.get_object(CQ)) == {
        ("cpu", "cpu"): "16",
        ("cpu", "memory"): "100Gi",
        ("gpu-nvidia-a10g", "nvidia.com/gpu"): "2",
    }


def test_a_node_joining_resizes_the_queue_and_nothing_else_writes(ctx, state, api):
    add_nodes(api, node("gpu-0", 1))
    out = ctx.run(ctx.on.update_status(), state)
    assert _quota(api.get_object(CQ))[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "1"
    add_nodes(api, node("gpu-1", 1))
    out = ctx.run(ctx.on.update_status(), out)
    assert _quota(api.get_object(CQ))[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "2"
    writes = len([r for r in api.requests if r.method != "GET"])
    ctx.run(ctx.on.update_status(), out)
    assert len([r for r in api.requests if r.method != "GET"]) == writes


@pytest.mark.parametrize(
    "config,fragment",
    [
        ({"gpu-quota": "-1"}, "gpu-quota"),
        ({"gpu-quota": "two"}, "gpu-quota"),
        ({"cpu-quota": "lots"}, "cpu-quota"),
        ({"memory-quota": "-5Gi"}, "memory-quota"),
    ],
)
def test_a_bad_quota_blocks_and_changes_nothing(ctx, state, api, config, fragment):
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(state, config=config))
    assert out.unit_status.name == "blocked"
    assert fragment in out.unit_status.message
    assert api.get_object(CQ) is None


def test_without_kueue_in_the_cluster_it_waits_saying_what_to_do(ctx, state, api):
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
    for crd in api.objects(crds):
        api.delete_object(crds + crd["metadata"]["name"])
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status == testing.WaitingStatus(
        "Kueue is not installed in the cluster: set batch-engines=true on kubernetes-control-plane"
    )
    assert [r for r in api.requests if r.method != "GET"] == []


def test_the_queue_objects_are_valid_kueue_objects():
    """Checked against the fields of kueue v1beta2's Go types (see queues.py)."""
    flavors = [
        {
            "metadata": {
                "name": "gpu-nvidia-a10g",
                "labels": {"app.kubernetes.io/managed-by": "kubernetes-control-plane"},
            },
            "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-A10G"}},
        }
    ]
    cq, lq = queues.team_objects("tf", "tf", flavors, [node("g", 2)], queues.Quotas())
    spec = cq["spec"]
    assert set(spec) <= {
        "resourceGroups", "cohortName", "queueingStrategy", "namespaceSelector",
        "flavorFungibility", "preemption", "admissionChecksStrategy", "stopPolicy",
        "fairSharing", "admissionScope",
    }  # fmt: skip
    assert set(spec["preemption"]) <= {
        "reclaimWithinCohort",
        "borrowWithinCohort",
        "withinClusterQueue",
    }
    assert spec["queueingStrategy"] in ("StrictFIFO", "BestEffortFIFO")
    for group in spec["resourceGroups"]:
        assert set(group) == {"coveredResources", "flavors"}
        for flavor in group["flavors"]:
            assert set(flavor) == {"name", "resources"}
            assert {r["name"] for r in flavor["resources"]} == set(group["coveredResources"])
            for r in flavor["resources"]:
                params.quantity(r["nominalQuota"])
    assert set(lq["spec"]) == {"clusterQueue"}
    # metadata and names as the API server validates any object
    for obj in (cq, lq):
        shell = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}
        kubernetes_validate.validate(shell, "1.33", strict=True)
