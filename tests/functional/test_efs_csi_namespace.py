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
from fakes.csi_node import run_daemonset
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
