"""The privileged GPU components live in a namespace of their own (issue 29 item 3).

NVIDIA's device plugin, DCGM exporter and MIG manager run in `gpu-k8s-gpu`, labelled Pod
Security `privileged`, and nothing else does:
- the fake API server's PodSecurity admission (kube-apiserver's plugin, enforce on pod
  create) admits the pods their DaemonSets make there, and refuses each of them in a
  namespace labelled `baseline`, naming what baseline forbids: the label is what lets them
  run, so no other namespace may carry it;
- a kube-api consumer may not ask for that namespace (kube_api's reserved namespaces), and
  the token a team's grant gives is refused there by the API server for every write.
"""

from __future__ import annotations

import copy

import pytest
from charm_modules import load
from kube_api_escalations import HOSTILE, LEGITIMATE_CLUSTER_RULES, LEGITIMATE_RULES
from test_kube_api_escalation import _grant, call

from charms.gpu_k8s.v0.kube_api import RequirerAppData, check_policy
from fakes.kube_apiserver import ADMIN_TOKEN

CP = "kubernetes-control-plane"
GPUS = [("NVIDIA A100-SXM4-40GB", "20b0", {"1g.5gb": 7, "3g.20gb": 2})]


def _components():
    device_plugin = load(CP, "device_plugin")
    dcgm_exporter = load(CP, "dcgm_exporter")
    mig_manager = load(CP, "mig_manager")
    gpus = [mig_manager.MigGpu(*g) for g in GPUS]
    return {
        "device-plugin": device_plugin.manifests("none", 1),
        "device-plugin-mig": device_plugin.manifests("mixed", 1),
        "dcgm-exporter": dcgm_exporter.manifests(),
        "mig-manager": mig_manager.manifests(gpus),
    }


COMPONENTS = _components()


def _pod(objects: list[dict], namespace: str) -> dict:
    """The pod the DaemonSet controller makes from the DaemonSet's template."""
    (ds,) = [o for o in objects if o["kind"] == "DaemonSet"]
    template = copy.deepcopy(ds["spec"]["template"])
    template["spec"]["nodeName"] = "gpu-0"
    meta = {"name": f"{ds['metadata']['name']}-x1", "labels": template["metadata"]["labels"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def _namespace(kube_api, objects: list[dict]) -> str:
    (ns,) = [o for o in objects if o["kind"] == "Namespace"]
    kube_api.put_object(f"/api/v1/namespaces/{ns['metadata']['name']}", copy.deepcopy(ns))
    return ns["metadata"]["name"]


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_component_runs_in_the_privileged_namespace(component, kube_api):
    objects = COMPONENTS[component]
    literals = load(CP, "literals")
    namespace = _namespace(kube_api, objects)
    assert namespace == literals.GPU_NAMESPACE == "gpu-k8s-gpu"
    labels = next(o for o in objects if o["kind"] == "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "v1.36"
    for obj in objects:
        if obj["kind"] not in ("Namespace", "RuntimeClass", "ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == namespace, obj["kind"]

    status, answer = call(
        kube_api,
        ADMIN_TOKEN,
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        _pod(objects, namespace),
    )
    assert status == 201, answer


# What each pod holds that `baseline` refuses (kube-apiserver 1.36's check names).
BASELINE_REFUSES = {
    "device-plugin": ("hostPath volumes", "non-default capabilities"),
    "device-plugin-mig": ("hostPath volumes", "non-default capabilities"),
    "dcgm-exporter": ("host namespaces", "hostPath volumes", "non-default capabilities"),
    "mig-manager": ("host namespaces", "privileged", "hostPath volumes"),
}


@pytest.mark.parametrize("component", COMPONENTS)
def test_baseline_refuses_every_component(component, kube_api):
    objects = COMPONENTS[component]
    kube_api.put_object(
        "/api/v1/namespaces/not-privileged",
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}},
    )
    status, answer = call(
        kube_api,
        ADMIN_TOKEN,
        "POST",
        "/api/v1/namespaces/not-privileged/pods",
        _pod(objects, "not-privileged"),
    )
    assert (status, answer["reason"]) == (403, "Forbidden"), answer
    assert 'violates PodSecurity "baseline:latest"' in answer["message"]
    for check in BASELINE_REFUSES[component]:
        assert check in answer["message"], (check, answer["message"])


def test_no_consumer_may_ask_for_the_namespace():
    error = check_policy(RequirerAppData.model_validate({"namespace": "gpu-k8s-gpu"}))
    assert error == "namespace gpu-k8s-gpu is reserved; ask for a namespace of your own"


def test_a_consumer_namespaced_at_the_gpu_namespace_is_never_applied_onto(kube, kube_api):
    rbac = load(CP, "rbac")
    _namespace(kube_api, COMPONENTS["device-plugin"])
    with pytest.raises(rbac.NamespaceTakenError, match="gpu-k8s-gpu"):
        rbac.apply(kube, _grant(rbac, "intruder", "gpu-k8s-gpu", LEGITIMATE_RULES, []))
    assert kube_api.get_object("/api/v1/namespaces/gpu-k8s-gpu/serviceaccounts/intruder") is None


WRITES = [
    ("POST", "/api/v1/namespaces/gpu-k8s-gpu/pods"),
    ("POST", "/apis/apps/v1/namespaces/gpu-k8s-gpu/daemonsets"),
    ("POST", "/api/v1/namespaces/gpu-k8s-gpu/configmaps"),
    ("POST", "/api/v1/namespaces/gpu-k8s-gpu/serviceaccounts/default/token"),
    ("PATCH", "/apis/apps/v1/namespaces/gpu-k8s-gpu/daemonsets/nvidia-device-plugin"),
    ("DELETE", "/apis/apps/v1/namespaces/gpu-k8s-gpu/daemonsets/nvidia-device-plugin"),
    ("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/gpu-k8s-gpu/rolebindings"),
]


@pytest.mark.parametrize(("method", "path"), WRITES, ids=[f"{m} {p}" for m, p in WRITES])
def test_a_teams_token_is_refused_in_the_gpu_namespace(method, path, kube, kube_api):
    rbac = load(CP, "rbac")
    for obj in COMPONENTS["device-plugin"]:
        kube.apply(obj, field_manager="kubernetes-control-plane")
    token = rbac.apply(
        kube, _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, LEGITIMATE_CLUSTER_RULES)
    )
    body = {"metadata": {"name": "x"}}
    ctype = "application/merge-patch+json" if method == "PATCH" else None
    status, answer = call(kube_api, token, method, path, body, ctype)
    assert status == 403, (status, answer)
    assert "system:serviceaccount:hostile:hostile" in answer["message"]
