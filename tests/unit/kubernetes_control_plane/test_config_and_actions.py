"""Invalid config, and the get-kubeconfig and cluster-info actions."""

from __future__ import annotations

import dataclasses
import json

import cluster_info
import juju_secret_ids
import pytest
import readme_examples
import yaml
from ops import testing

from charms.gpu_k8s.v0.kubeclient import Kube
from fakes.control_plane import ADMIN_TOKEN, node, peers


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"kubernetes-version": "1.2"},
            "Invalid config: kubernetes-version: must be a supported minor version, one of 1.35",
        ),
        (
            {"pod-cidr": "10.244.0.0/33"},
            "Invalid config: pod-cidr: '10.244.0.0/33' is not a network such as 10.244.0.0/16",
        ),
        ({"service-cidr": "banana"}, "Invalid config: service-cidr: 'banana' is not a network"),
        (
            {"pod-cidr": "10.96.0.0/16"},
            "Invalid config: service-cidr: overlaps pod-cidr 10.96.0.0/16; choose disjoint",
        ),
        ({"join-token-ttl": 1}, "Invalid config: join-token-ttl: must be at least 2 (hours)"),
        ({"package-mirror": "ftp://x"}, "Invalid config: package-mirror: must be empty or an"),
    ],
)
def test_invalid_config_blocks_naming_the_fix_and_runs_nothing(ctx, machine, api, config, message):
    out = ctx.run(
        ctx.on.config_changed(), testing.State(leader=True, relations=[peers()], config=config)
    )

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(message)
    assert machine.calls == []
    assert api.requests == []


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "kubernetes-version",
            "1.35",
            "kubernetes-version 1.35 is older than the running cluster's 1.36: "
            "downgrades are not supported; set it back to 1.36",
        ),
        (
            "pod-cidr",
            "10.200.0.0/16",
            "pod-cidr 10.200.0.0/16 differs from the running cluster's 10.244.0.0/16; "
            "set it back to 10.244.0.0/16",
        ),
        (
            "service-cidr",
            "172.30.0.0/16",
            "service-cidr 172.30.0.0/16 differs from the running cluster's 10.96.0.0/12; "
            "set it back to 10.96.0.0/12",
        ),
    ],
)
def test_changing_fixed_option_of_running_cluster_blocks(
    ctx, machine, api, option, value, message
):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    before, requests = len(machine.calls), len(api.requests)
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config={option: value}))
    assert out.unit_status == testing.BlockedStatus(message)
    assert len(machine.calls) == before
    assert len(api.requests) == requests


def test_secret_remove_drops_the_unused_revision(ctx, machine, clock):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    clock.advance(hours=24)
    out = ctx.run(ctx.on.update_status(), out)  # token rotated: a new revision
    out = ctx.run(ctx.on.update_status(), out)  # the leader now tracks the new one
    join = next(s for s in out.secrets if s.label == "control-plane-join")
    ctx.run(ctx.on.secret_remove(join, revision=1), out)
    assert ctx.removed_secret_revisions == [1]


def test_unreachable_mirror_blocks_with_hint(ctx, machine):
    config = {"package-mirror": "https://mirror.invalid/k8s"}
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()], config=config))
    assert out.unit_status.name == "blocked"
    assert "cannot use package source kubernetes" in out.unit_status.message
    assert out.unit_status.message.endswith("or fix package-mirror")
    assert machine.inits == []


def test_without_peers_relation_waits(ctx, machine):
    out = ctx.run(ctx.on.install(), testing.State(leader=True))
    assert out.unit_status == testing.WaitingStatus("waiting for the peers relation")
    assert machine.calls == []


def test_get_kubeconfig_stores_admin_config_in_unit_secret(ctx, machine):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    out = ctx.run(ctx.on.action("get-kubeconfig"), out)

    results = ctx.action_results
    sec = next(s for s in out.secrets if s.label == "admin-kubeconfig")
    assert sec.owner == "unit"
    # admin.conf names the node-local proxy; the operator's copy this unit's public address.
    admin = yaml.safe_load(machine.read("/etc/kubernetes/admin.conf"))
    given = yaml.safe_load(sec.latest_content["kubeconfig"])
    assert given["clusters"][0]["cluster"]["server"] == "https://203.0.113.7:6443"
    assert given["users"] == admin["users"]
    assert results["secret-id"] == sec.id
    assert juju_secret_ids.XID.fullmatch(sec.id.removeprefix("secret:"))  # as Juju makes it
    assert results["command"] == (
        f"juju show-secret --reveal {sec.id} --format json"
        " | jq -r '.[].content.Data.kubeconfig' > kubeconfig"
    )
    assert ADMIN_TOKEN not in json.dumps(results)
    readme_examples.show(
        "get-kubeconfig", readme_examples.juju_results(results), volatile=(r"secret:\w+",)
    )
    # running it again reuses the secret
    out = ctx.run(ctx.on.action("get-kubeconfig"), out)
    assert [s.id for s in out.secrets if s.label == "admin-kubeconfig"] == [sec.id]


def test_get_kubeconfig_fails_before_joining(ctx, machine):
    with pytest.raises(testing.ActionFailed, match="has not joined the cluster yet"):
        ctx.run(ctx.on.action("get-kubeconfig"), testing.State(relations=[peers()]))


def test_cluster_info_reports_nodes(ctx, machine, api):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    api.put_object("/api/v1/nodes/gpu-0", node("gpu-0", gpus=4))
    api.put_object("/api/v1/nodes/cpu-0", node("cpu-0", ready=False))
    ctx.run(ctx.on.action("cluster-info"), out)

    results = ctx.action_results
    nodes = {n["name"]: n for n in json.loads(results["nodes"])}
    assert results["summary"] == "3 nodes, 2 ready, 0 of 4 GPUs allocated"
    assert results["gpus-by-model"] == "0/4 NVIDIA-A10G"
    assert nodes["ip-10-0-1-17"]["roles"] == ["control-plane"]
    assert nodes["gpu-0"] == {
        "name": "gpu-0",
        "roles": ["worker"],
        "version": "v1.36.4",
        "ready": True,
        "schedulable": True,
        "gpus": 4,
        "gpu-product": "NVIDIA-A10G",
        "gpus-allocated": 0,
        "gpu-pods": {},
    }
    assert nodes["cpu-0"]["ready"] is False and nodes["cpu-0"]["gpus"] == 0
    assert "gpus-allocated" not in nodes["cpu-0"]


def _pod(name, node=None, phase="Running", gpus=0, init_gpus=0, sidecar_gpus=0, ns="tensorflow"):
    def container(n, count, **extra):
        limits = {"nvidia.com/gpu": str(count)} if count else {}
        return {"name": n, "image": "x", "resources": {"limits": limits}, **extra}

    spec = {"containers": [container("main", gpus)]}
    if node:
        spec["nodeName"] = node
    inits = []
    if sidecar_gpus:
        inits.append(container("sidecar", sidecar_gpus, restartPolicy="Always"))
    if init_gpus:
        inits.append(container("warmup", init_gpus))
    if inits:
        spec["initContainers"] = inits
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
        "status": {"phase": phase},
    }


def test_cluster_info_shows_which_pods_hold_the_gpus_of_each_node(ctx, machine, api):
    """`arena top node`: allocated/total per node and model, and the pods holding them."""
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    api.put_object("/api/v1/nodes/gpu-0", node("gpu-0", gpus=4))
    api.put_object("/api/v1/nodes/gpu-1", node("gpu-1", gpus=4))
    pods = [
        _pod("mnist-worker-0", "gpu-0", gpus=2),
        _pod("mnist-worker-1", "gpu-1", gpus=1),
        _pod("bench", "gpu-1", gpus=1, sidecar_gpus=1, ns="team-b"),  # 2 with its sidecar
        _pod("warm", "gpu-0", gpus=0, init_gpus=1, phase="Pending", ns="team-b"),  # 1 at start
        _pod("done", "gpu-0", gpus=1, phase="Succeeded"),  # finished: freed
        _pod("queued", None, gpus=4, phase="Pending"),  # not bound: holds nothing
        _pod("web", "gpu-1", gpus=0, ns="default"),
    ]
    for pod in pods:
        meta = pod["metadata"]
        api.put_object(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", pod)

    ctx.run(ctx.on.action("cluster-info"), out)

    results = ctx.action_results
    assert results["summary"] == "3 nodes, 3 ready, 6 of 8 GPUs allocated"
    assert results["gpus-by-model"] == "6/8 NVIDIA-A10G"
    nodes = {n["name"]: n for n in json.loads(results["nodes"])}
    assert nodes["gpu-0"]["gpus-allocated"] == 3
    assert nodes["gpu-0"]["gpu-pods"] == {"team-b/warm": 1, "tensorflow/mnist-worker-0": 2}
    assert nodes["gpu-1"]["gpu-pods"] == {"team-b/bench": 2, "tensorflow/mnist-worker-1": 1}
    assert results["gpu-nodes"].splitlines() == [
        "NODE   MODEL        ALLOCATED  PODS",
        "gpu-0  NVIDIA-A10G  3/4        team-b/warm (1), tensorflow/mnist-worker-0 (2)",
        "gpu-1  NVIDIA-A10G  3/4        team-b/bench (2), tensorflow/mnist-worker-1 (1)",
    ]
    readme_examples.show(
        "cluster-info",
        readme_examples.juju_results(results, keys=("gpu-nodes", "gpus-by-model", "summary")),
    )


def test_cluster_info_fails_cleanly_on_api_errors(ctx, machine, api):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    api.inject(status=403, times=1)
    with pytest.raises(testing.ActionFailed, match="cannot list nodes and pods: 403"):
        ctx.run(ctx.on.action("cluster-info"), out)


def test_cluster_info_fails_before_joining(ctx, machine):
    with pytest.raises(testing.ActionFailed, match="has not joined"):
        ctx.run(ctx.on.action("cluster-info"), testing.State(relations=[peers()]))


@pytest.mark.parametrize(
    "hook",
    [
        lambda ctx, out: ctx.on.action("cluster-info"),
        lambda ctx, out: ctx.on.action("get-kubeconfig"),
        lambda ctx, out: ctx.on.secret_remove(
            next(s for s in out.secrets if s.label == "control-plane-join"), revision=1
        ),
    ],
    ids=["cluster-info", "get-kubeconfig", "secret-remove"],
)
def test_a_blocked_status_stays_blocked_through_actions_and_secret_hooks(
    ctx, machine, clock, hook
):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    clock.advance(hours=24)
    out = ctx.run(ctx.on.update_status(), out)  # token rotated: revision 1 is old now
    out = ctx.run(ctx.on.update_status(), out)  # and no longer tracked
    out = ctx.run(
        ctx.on.config_changed(), dataclasses.replace(out, config={"pod-cidr": "10.1.0.0/16"})
    )
    blocked = out.unit_status
    assert blocked.name == "blocked"

    out = ctx.run(hook(ctx, out), out)
    assert out.unit_status == blocked


def test_an_invalid_config_stays_blocked_through_an_action(ctx, machine):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config={"join-token-ttl": 1}))
    out = ctx.run(ctx.on.action("cluster-info"), out)
    assert out.unit_status == testing.BlockedStatus(
        "Invalid config: join-token-ttl: must be at least 2 (hours)"
    )


def test_status_counts_the_nodes_the_api_reports_ready(ctx, machine, api):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    api.put_object(
        "/api/v1/nodes/ip-10-0-1-17", node("ip-10-0-1-17", control_plane=True, ready=False)
    )
    out = ctx.run(ctx.on.update_status(), out)
    # not Active: no node of the cluster runs pods (review deploy.md N4)
    assert out.unit_status == testing.WaitingStatus(
        "node ip-10-0-1-17 not Ready: v1.36, 0 control-plane, 0 workers; not Ready: ip-10-0-1-17"
    )
    assert out.app_status == out.unit_status
    # an action in between shows the same status, without asking the API again
    requests = len(api.requests)
    out = ctx.run(ctx.on.action("get-kubeconfig"), out)
    assert out.unit_status.message.endswith("not Ready: ip-10-0-1-17")
    assert len(api.requests) == requests
    api.put_object("/api/v1/nodes/ip-10-0-1-17", node("ip-10-0-1-17", control_plane=True))
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")


@pytest.mark.parametrize(("batch_engines", "asked"), [(False, ["None"]), (True, [""])])
def test_readiness_comes_from_the_node_table_not_whole_node_objects(
    ctx, machine, api, batch_engines, asked
):
    """One list of Nodes per update-status: the table, or whole Nodes Kueue's cohort needs.

    Readiness alone needs the table's Status column. With the batch engines, update-status
    also sizes Kueue's cohort by the Nodes' allocatable (issue 29 item 6), which the table
    has not: that one list of whole Nodes, read in this hook, gives the readiness too
    (issue 29's cost rule at 1,000 workers: the table and the whole Nodes were two lists).
    """
    config = {"batch-engines": batch_engines}
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()], config=config))
    api.put_object(
        "/api/v1/nodes/ip-10-0-1-17", node("ip-10-0-1-17", control_plane=True, ready=False)
    )
    before = len(api.requests)
    out = ctx.run(ctx.on.update_status(), out)
    lists = [r for r in api.requests[before:] if r == ("GET", "/api/v1/nodes")]
    assert [r.query.get("includeObject") or "" for r in lists] == asked
    assert out.unit_status.message.endswith("not Ready: ip-10-0-1-17")
    api.put_object("/api/v1/nodes/ip-10-0-1-17", node("ip-10-0-1-17", control_plane=True))
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")


def test_whole_nodes_give_the_health_the_node_table_gives(machine, api):
    """`NodeHealth.from_nodes` (update-status with the batch engines) agrees with the table.

    Whatever the Node: Ready, NotReady, Unknown, cordoned, without a Ready condition, or
    not registered at all; the table as the fake API server prints it (printNode).
    """
    seeds = {
        "ready": node("ready"),
        "not-ready": node("not-ready", ready=False),
        "cordoned": node("cordoned", unschedulable=True),
        "cordoned-not-ready": node("cordoned-not-ready", ready=False, unschedulable=True),
        "unknown": node("unknown"),
        "no-condition": node("no-condition"),
    }
    seeds["unknown"]["status"]["conditions"][0]["status"] = "Unknown"
    seeds["no-condition"]["status"]["conditions"] = []
    for name, obj in seeds.items():
        api.put_object(f"/api/v1/nodes/{name}", obj)
    expected = [*seeds, "never-registered"]
    with Kube.from_kubeconfig(api.kubeconfig(ADMIN_TOKEN), retries=0) as kube:
        table = cluster_info.NodeHealth.from_table(expected, kube.table("v1", "Node"))
        whole = cluster_info.NodeHealth.from_nodes(expected, kube.list("v1", "Node"))
    assert (
        whole
        == table
        == cluster_info.NodeHealth(
            not_ready={"not-ready", "cordoned-not-ready", "unknown", "no-condition"},
            missing={"never-registered"},
        )
    )
