"""The EFS CSI driver's node plugin runs in a namespace of its own (issue 29 item 5).

The control plane applies the driver's node DaemonSet in `gpu-k8s-efs-csi`, labelled Pod
Security `privileged` (efs_csi.py says why not kube-system or gpu-k8s-gpu):
- the fake API server's PodSecurity admission admits the pod the DaemonSet makes there on
  every node (control plane and GPU workers included: it tolerates every taint), and
  kubelet then names `efs.csi.aws.com` in each Node's `csi.volume.kubernetes.io/nodeid`
  annotation (fakes.csi_node), which is what efs-storage waits for before it moves its
  consumers onto access points;
- the same pod is refused in a namespace labelled `baseline`, naming what baseline forbids;
- no kube-api consumer may ask for the namespace, and a team's token is refused there.
"""

from __future__ import annotations

import copy

import pytest
from charm_modules import load
from kube_api_escalations import HOSTILE, LEGITIMATE_CLUSTER_RULES, LEGITIMATE_RULES
from test_kube_api_escalation import _grant, call

from charms.gpu_k8s.v0.kube_api import RequirerAppData, check_policy
from fakes.addons import EFS_CSI_FILES, efs_csi_file
from fakes.csi_node import daemon_pod, run_daemonset
from fakes.kube_apiserver import ADMIN_TOKEN

CP = "kubernetes-control-plane"
NAMESPACE = "gpu-k8s-efs-csi"
NODES = {
    "cp-0": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
    "gpu-0": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    "cpu-0": [],
}


def _objects() -> list[dict]:
    efs_csi = load(CP, "efs_csi")
    return efs_csi.manifests({f: efs_csi_file(f) for f in EFS_CSI_FILES})


def _daemonset(objects: list[dict]) -> dict:
    (ds,) = [o for o in objects if o["kind"] == "DaemonSet"]
    return ds


def _nodes(kube_api) -> None:
    for name, taints in NODES.items():
        kube_api.put_object(
            f"/api/v1/nodes/{name}",
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux"}},
                "spec": {"taints": taints},
            },
        )


def test_the_node_plugin_runs_on_every_node_and_kubelet_registers_the_driver(kube, kube_api):
    for obj in _objects():
        kube.apply(obj, field_manager="kubernetes-control-plane")
    labels = kube_api.get_object(f"/api/v1/namespaces/{NAMESPACE}")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    _nodes(kube_api)
    efs_storage = load("efs-storage", "charm")
    assert not efs_storage.csi_driver_on_every_node(kube_api.objects("/api/v1/nodes/"))

    ran = run_daemonset(kube_api, call, ADMIN_TOKEN, _daemonset(_objects()))
    assert [(node, status) for node, status, _ in ran] == [(n, 201) for n in sorted(NODES)]
    for node in kube_api.objects("/api/v1/nodes/"):
        annotation = node["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"]
        assert annotation == f'{{"efs.csi.aws.com": "{node["metadata"]["name"]}"}}'
    # efs-storage's own test of "the driver runs on every node" now holds
    assert efs_storage.csi_driver_on_every_node(kube_api.objects("/api/v1/nodes/"))


def test_baseline_refuses_the_node_plugin(kube_api):
    ds = copy.deepcopy(_daemonset(_objects()))
    ds["metadata"]["namespace"] = "not-privileged"
    kube_api.put_object(
        "/api/v1/namespaces/not-privileged",
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}},
    )
    _nodes(kube_api)
    ran = run_daemonset(kube_api, call, ADMIN_TOKEN, ds)
    for _node, status, answer in ran:
        assert (status, answer["reason"]) == (403, "Forbidden"), answer
        assert 'violates PodSecurity "baseline:latest"' in answer["message"]
        for check in ("host namespaces", "privileged", "hostPath volumes"):
            assert check in answer["message"], (check, answer["message"])
    for node in kube_api.objects("/api/v1/nodes/"):
        assert "annotations" not in node["metadata"] or not node["metadata"]["annotations"]


def test_the_daemonset_controller_gives_its_pods_the_node_condition_tolerations(kube_api):
    """D2: not-ready and unreachable for ever, pressure and cordons, network for hostNetwork.

    So a DaemonSet's pod runs on a cordoned, a not-ready and a pressured node (only the
    taints nobody added a toleration for keep it off: the control plane's here), and the
    controller's toleration replaces a template's that matches it but for its seconds.
    """
    kube_api.put_object("/api/v1/namespaces/daemons", {})
    taints = {
        "cp-0": NODES["cp-0"],
        "cordoned": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
        "lost": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}],
        "pressed": [{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}],
    }
    for name, node_taints in taints.items():
        kube_api.put_object(f"/api/v1/nodes/{name}", {"spec": {"taints": node_taints}})
    soon = {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 30,
    }
    spec = {"containers": [{"name": "c", "image": "busybox"}], "tolerations": [soon]}
    ds = {
        "metadata": {"name": "d", "namespace": "daemons", "uid": "u-1"},
        "spec": {"template": {"metadata": {"labels": {"app": "d"}}, "spec": spec}},
    }
    ran = run_daemonset(kube_api, call, ADMIN_TOKEN, ds)
    assert [(node, status) for node, status, _ in ran] == [
        ("cordoned", 201),
        ("lost", 201),
        ("pressed", 201),
    ]
    expected = [
        {"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": effect}
        for key, effect in (
            ("not-ready", "NoExecute"),
            ("unreachable", "NoExecute"),
            ("disk-pressure", "NoSchedule"),
            ("memory-pressure", "NoSchedule"),
            ("pid-pressure", "NoSchedule"),
            ("unschedulable", "NoSchedule"),
        )
    ]
    for _node, _status, answer in ran:
        assert answer["spec"]["tolerations"] == expected
    pod = daemon_pod(
        {
            **ds,
            "spec": {
                "template": {**ds["spec"]["template"], "spec": {**spec, "hostNetwork": True}}
            },
        },
        "lost",
    )
    assert "nodeName" not in pod["spec"]
    assert pod["spec"]["tolerations"][-1] == {
        "key": "node.kubernetes.io/network-unavailable",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["lost"]}]}
        ]
    }
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "DaemonSet",
        "d",
        "u-1",
        True,
    )


def test_no_consumer_may_ask_for_the_namespace():
    error = check_policy(RequirerAppData.model_validate({"namespace": NAMESPACE}))
    assert error == f"namespace {NAMESPACE} is reserved; ask for a namespace of your own"


WRITES = [
    ("POST", f"/api/v1/namespaces/{NAMESPACE}/pods"),
    ("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/efs-csi-node-sa/token"),
    ("PATCH", f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/efs-csi-node"),
]


@pytest.mark.parametrize(("method", "path"), WRITES, ids=[f"{m} {p}" for m, p in WRITES])
def test_a_teams_token_is_refused_in_the_namespace(method, path, kube, kube_api):
    rbac = load(CP, "rbac")
    for obj in _objects():
        kube.apply(obj, field_manager="kubernetes-control-plane")
    token = rbac.apply(
        kube, _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, LEGITIMATE_CLUSTER_RULES)
    )
    body = {"metadata": {"name": "x"}}
    ctype = "application/merge-patch+json" if method == "PATCH" else None
    status, answer = call(kube_api, token, method, path, body, ctype)
    assert status == 403, (status, answer)
    assert isinstance(answer, dict), answer
    assert "system:serviceaccount:hostile:hostile" in answer["message"]
