"""The control plane's RBAC module against the fake API server through the real client."""

from __future__ import annotations

import base64

import pytest
import yaml
from charm_modules import load

RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def rbac():
    """The control-plane charm's `rbac` module."""
    return load("kubernetes-control-plane", "rbac")


class Rule:
    """Stands in for `kube_api.Rule` (anything with `manifest()`)."""

    def __init__(self, groups, resources, verbs):
        self._m = {"apiGroups": groups, "resources": resources, "verbs": verbs}

    def manifest(self):
        return self._m


def whoami(kube_api, token: str) -> str:
    """Who the fake API server takes `token` for (SelfSubjectReview)."""
    from charms.gpu_k8s.v0.kubeclient import Kube

    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    with Kube.from_kubeconfig(kube_api.kubeconfig(token), retries=0) as kube:
        answer = kube.request(
            "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review
        )
    return answer["status"]["userInfo"]["username"]


def test_consumer_grant_creates_objects_once_and_token_works(rbac, kube, kube_api):
    grant = rbac.consumer_grant(
        "tensorflow",
        "training",
        [Rule(["batch"], ["jobs"], ["create", "get"])],
        [Rule([""], ["nodes"], ["get", "list"])],
    )
    token = rbac.apply(kube, grant)
    # a TokenRequest token (issue 29 item 7): no long-lived token Secret is made
    assert kube_api.get_object("/api/v1/namespaces/training/secrets/tensorflow-token") is None
    assert whoami(kube_api, token) == "system:serviceaccount:training:tensorflow"
    count = len(kube_api.objects("/"))
    again = rbac.apply(kube, grant)  # applying again: same objects, a new token
    assert len(kube_api.objects("/")) == count
    assert whoami(kube_api, again) == whoami(kube_api, token)
    for path in (
        "/api/v1/namespaces/training",
        "/api/v1/namespaces/training/serviceaccounts/tensorflow",
        f"{RBAC}/namespaces/training/roles/gpu-k8s-tensorflow",
        f"{RBAC}/namespaces/training/rolebindings/gpu-k8s-tensorflow",
        f"{RBAC}/clusterroles/gpu-k8s-tensorflow",
        f"{RBAC}/clusterrolebindings/gpu-k8s-tensorflow",
    ):
        obj = kube_api.get_object(path)
        assert obj is not None, path
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == (
            "kubernetes-control-plane"
        )
    config = yaml.safe_load(
        rbac.kubeconfig(
            server="https://10.0.0.1:6443",
            ca_pem="PEM",
            token=token,
            namespace="training",
            user="tensorflow",
        )
    )
    assert config["users"][0]["user"]["token"] == token
    assert base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]) == (
        b"PEM"
    )


def test_remove_keeps_namespace_and_its_data(rbac, kube, kube_api):
    grant = rbac.consumer_grant("efs", "storage", [Rule([""], ["pods"], ["get"])], [])
    rbac.apply(kube, grant)
    kube_api.put_object("/api/v1/namespaces/storage/configmaps/keep", {"data": {"a": "b"}})

    deleted = rbac.remove(kube, grant)

    assert sorted(deleted) == [  # no token Secret: its tokens die with the ServiceAccount
        "Role/gpu-k8s-efs",
        "RoleBinding/gpu-k8s-efs",
        "ServiceAccount/efs",
    ]
    assert kube_api.get_object("/api/v1/namespaces/storage") is not None
    assert kube_api.get_object("/api/v1/namespaces/storage/configmaps/keep") is not None
    assert rbac.remove(kube, grant) == []  # twice: nothing left to delete


def test_worker_grant_is_least_privilege(rbac, kube, kube_api):
    rbac.apply(kube, rbac.worker_grant())
    role = kube_api.get_object(f"{RBAC}/clusterroles/gpu-k8s-worker")
    verbs = {(r["resources"][0], v) for r in role["rules"] for v in r["verbs"]}
    assert ("secrets", "get") not in verbs
    assert ("nodes", "delete") not in verbs
    assert ("pods/eviction", "create") in verbs
    gpu = kube_api.get_object(f"{RBAC}/namespaces/gpu-k8s-system/roles/gpu-k8s-worker")
    assert gpu["rules"][0]["verbs"] == ["create", "delete"]
    assert kube_api.get_object("/api/v1/namespaces/kube-system/serviceaccounts/gpu-k8s-worker")


def test_transient_server_errors_are_retried(rbac, kube, kube_api):
    kube_api.inject(status=503, times=2, method="PATCH")
    token = rbac.apply(kube, rbac.consumer_grant("tf", "tf", [], []))
    assert token
