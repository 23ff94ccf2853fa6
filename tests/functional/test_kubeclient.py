"""The `Kube` client library, through the real `kubernetes` client, against the fake API server."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from charms.gpu_k8s.v0 import drain
from charms.gpu_k8s.v0.drain import CORDON_ANNOTATION
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.kubeconfig import load_kubeconfig
from fakes.addons import crd
from fakes.kube_apiserver import FakeKubeApiServer

ROOT = Path(__file__).resolve().parents[2]


def namespace(kube: Kube, name: str) -> dict:
    return kube.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, field_manager="t"
    )


def pod_manifest(name: str, ns: str = "work", node: str = "n1", **meta: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, **meta},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
    }


def present(obj: dict | None) -> dict:
    assert obj is not None, "object missing"
    return obj


class FakeClock:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


# ---------------------------------------------------------------- import cost


def test_importing_kubeclient_does_not_import_kubernetes():
    code = (
        "import sys, charms.gpu_k8s.v0.kubeclient as k; "
        "assert 'kubernetes' not in sys.modules, 'kubernetes imported'; "
        "assert 'urllib3' not in sys.modules, 'urllib3 imported'; print(k.LIBID)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1c1c281a9eb64d9594fd86aa76205351"


# ---------------------------------------------------------------- kubeconfig


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "must be a YAML mapping"),
        ("clusters: [unclosed", "not valid YAML at line 1"),
        ("- a\n- b\n", "must be a YAML mapping"),
        ("users: []\ncontexts: []\n", "has no clusters"),
        (
            "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
            "users: [{name: u, user: {token: s3cret}}]\n"
            "contexts: [{name: a, context: {cluster: c, user: u}}, {name: b, context: {}}]\n"
            "current-context: zz\n",
            "current-context 'zz' is not among its contexts",
        ),
        (
            "clusters: [{name: c, cluster: {server: 'x.example'}}]\n"
            "users: [{name: u, user: {token: s3cret}}]\n"
            "contexts: [{name: a, context: {cluster: c, user: u}}]\n",
            "needs an http(s) server URL",
        ),
        (
            "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
            "users: [{name: u, user: {token: s3cret}}]\n"
            "contexts: [{name: a, context: {cluster: c, user: other}}]\n",
            "names an unknown user",
        ),
        (
            "clusters: [{name: c}]\nusers: [{name: u, user: {token: s3cret}}]\n"
            "contexts: [{name: a, context: {cluster: c, user: u}}]\n",
            "clusters entry 'c' has no cluster",
        ),
    ],
)
def test_malformed_kubeconfig_is_a_clear_value_error_without_secrets(text, message):
    with pytest.raises(ValueError) as info:
        Kube.from_kubeconfig(text)
    assert message in str(info.value)
    assert "s3cret" not in str(info.value)


def test_kubeconfig_with_undecodable_certificate_is_a_value_error():
    text = (
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', "
        "certificate-authority-data: '!!not-base64'}}]\n"
        "users: [{name: u, user: {token: s3cret}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u}}]\n"
    )
    with pytest.raises(ValueError, match="kubeconfig is not usable") as info:
        Kube.from_kubeconfig(text)
    assert "s3cret" not in str(info.value)


def test_fake_server_kubeconfig_loads_and_sends_the_token(kube_api: FakeKubeApiServer):
    kube_api.add_token("tok-1", "kubernetes-admin", ("kubeadm:cluster-admins",))
    config = load_kubeconfig(kube_api.kubeconfig(token="tok-1"))
    assert config["clusters"][0]["cluster"]["server"] == kube_api.url
    with Kube.from_kubeconfig(kube_api.kubeconfig(token="tok-1")) as kube:
        assert kube.get("v1", "Namespace", "default") is not None
    assert kube_api.tokens == ["tok-1"]


def test_static_credentials_are_not_reloaded_before_every_request(
    kube_api: FakeKubeApiServer, monkeypatch
):
    """A token user sends the same token without re-reading the environment's proxies.

    The kubeconfig loader's per-request hook set the server again, whose setter reads every
    proxy variable of the environment (kubernetes 37.0.1 configuration.py `host.setter`).
    An `exec` user's credentials carry an expiry (client.authentication.k8s.io/v1
    ExecCredential `expirationTimestamp`): its client keeps the hook.
    """
    import json

    import yaml
    from kubernetes.client import configuration

    calls = []
    real = configuration.getproxies
    monkeypatch.setattr(configuration, "getproxies", lambda: calls.append(1) or real())
    kube_api.add_token("tok-1", "kubernetes-admin", ("kubeadm:cluster-admins",))
    with Kube.from_kubeconfig(kube_api.kubeconfig(token="tok-1")) as kube:
        built = len(calls)
        for _ in range(3):
            kube.get("v1", "Namespace", "default")
    assert len(calls) == built
    assert kube_api.tokens == ["tok-1"] * 3

    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "tok-1", "expirationTimestamp": "2099-01-01T00:00:00Z"},
    }
    config = load_kubeconfig(kube_api.kubeconfig(token="tok-1"))
    config["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
            "interactiveMode": "Never",
        }
    }
    with Kube.from_kubeconfig(yaml.safe_dump(config)) as kube:
        built = len(calls)
        for _ in range(3):
            kube.get("v1", "Namespace", "default")
    assert len(calls) == built + 3
    assert kube_api.tokens == ["tok-1"] * 6


def test_wrong_token_is_a_401(kube_api: FakeKubeApiServer):
    with Kube.from_kubeconfig(kube_api.kubeconfig(token="wrong"), backoff=0.01) as kube:
        with pytest.raises(KubeError) as info:
            kube.list("v1", "Node")
    assert (info.value.status, info.value.reason) == (401, "Unauthorized")


# ---------------------------------------------------------------- CRUD


POD_SPEC = {"containers": [{"name": "c", "image": "busybox"}]}


@pytest.mark.parametrize(
    "manifest",
    [
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": {"a": "MQ=="}},
        {"apiVersion": "v1", "kind": "ServiceAccount"},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "x"}},  # required, as the pod template
                "template": {"metadata": {"labels": {"app": "x"}}, "spec": POD_SPEC},
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "spec": {
                "completions": 2,
                "template": {"spec": {**POD_SPEC, "restartPolicy": "Never"}},
            },
        },
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "rules": []},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "rules": []},
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "nvidia"},
        {"apiVersion": "v1", "kind": "PersistentVolume", "spec": {"capacity": {"storage": "1Gi"}}},
        {"apiVersion": "v1", "kind": "Node", "spec": {}},
    ],
    ids=lambda m: m["kind"],
)
def test_crud_round_trip(kube: Kube, kube_api: FakeKubeApiServer, manifest: dict):
    namespace(kube, "work")
    _plural, namespaced = kube.kinds[(manifest["apiVersion"], manifest["kind"])]
    ns = "work" if namespaced else None
    manifest = {**manifest, "metadata": {"name": "obj", "labels": {"app": "x"}}}
    if ns:
        manifest["metadata"]["namespace"] = ns
    api_version, kind = manifest["apiVersion"], manifest["kind"]

    created = kube.create(manifest)
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    assert kube_api.get_object(kube.path(api_version, kind, ns, "obj")) == created

    got = kube.get(api_version, kind, "obj", ns)
    assert got == created
    patched = kube.patch(api_version, kind, "obj", {"metadata": {"labels": {"b": "2"}}}, ns)
    assert patched["metadata"]["labels"] == {"app": "x", "b": "2"}
    assert patched["metadata"]["uid"] == created["metadata"]["uid"]
    listed = kube.list(api_version, kind, ns, label_selector="b=2")
    assert [(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in listed] == [
        (api_version, kind, "obj")
    ]
    assert kube.delete(api_version, kind, "obj", ns) is True
    assert kube.get(api_version, kind, "obj", ns) is None
    assert kube.delete(api_version, kind, "obj", ns) is False


def test_apply_twice_is_idempotent_and_then_merges_changes(
    kube: Kube, kube_api: FakeKubeApiServer
):
    namespace(kube, "work")
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "work", "labels": {"app": "web"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": POD_SPEC},
        },
    }
    first = kube.apply(manifest, field_manager="gpu-k8s")
    second = kube.apply(manifest, field_manager="gpu-k8s")
    assert len(kube_api.objects("/apis/apps/v1/namespaces/work/deployments/")) == 1
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert second["metadata"]["generation"] == 1

    changed = {**manifest, "spec": {**manifest["spec"], "replicas": 3}}
    third = kube.apply(changed, field_manager="gpu-k8s")
    assert third["spec"]["replicas"] == 3
    assert third["spec"]["template"] == manifest["spec"]["template"]
    assert third["metadata"]["generation"] == 2
    assert [m["manager"] for m in third["metadata"]["managedFields"]] == ["gpu-k8s"]

    applies = [r for r in kube_api.requests if r.method == "PATCH"]
    assert applies[-1].query == {"fieldManager": "gpu-k8s", "force": "true"}


def test_errors_carry_status_reason_and_server_message(kube: Kube):
    with pytest.raises(KubeError) as missing_ns:
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "nope"},
            }
        )
    assert (missing_ns.value.status, missing_ns.value.reason) == (404, "NotFound")
    assert missing_ns.value.message == 'namespaces "nope" not found'

    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"},
    }
    kube.create(cm)
    with pytest.raises(KubeError) as exists:
        kube.create(cm)
    assert (exists.value.status, exists.value.reason) == (409, "AlreadyExists")
    assert exists.value.message == 'configmaps "c" already exists'

    with pytest.raises(KubeError) as invalid:
        kube.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}}
        )
    assert (invalid.value.status, invalid.value.reason) == (422, "Invalid")
    assert "metadata.name: Required value" in invalid.value.message

    with pytest.raises(KubeError) as not_found:
        kube.patch("v1", "ConfigMap", "missing", {"data": {}}, "default")
    assert not_found.value.status == 404
    assert not_found.value.message == 'configmaps "missing" not found'


def test_bad_input_is_rejected_before_any_request(kube: Kube):
    before = kube.requests
    with pytest.raises(ValueError, match="unknown kind Widget"):
        kube.get("v1", "Widget", "w")
    with pytest.raises(ValueError, match="needs metadata.namespace"):
        kube.apply(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, field_manager="t"
        )
    with pytest.raises(ValueError, match="needs metadata.name"):
        kube.apply({"apiVersion": "v1", "kind": "Node", "metadata": {}}, field_manager="t")
    with pytest.raises(ValueError, match="give its namespace"):
        kube.get("v1", "Pod", "p")
    with pytest.raises(ValueError, match="give a label selector"):
        kube.delete_collection("v1", "Pod", "default", "")
    with pytest.raises(ValueError, match="propagation must be"):
        kube.delete("v1", "Pod", "p", "default", propagation="Now")
    assert kube.requests == before


def test_replace_with_stale_resource_version_conflicts(kube: Kube):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"},
    }
    live = kube.create({**cm, "data": {"v": "1"}})
    updated = kube.replace({**live, "data": {"v": "2"}})
    assert updated["data"] == {"v": "2"}
    assert updated["metadata"]["uid"] == live["metadata"]["uid"]
    with pytest.raises(KubeError) as info:
        kube.replace({**live, "data": {"v": "3"}})
    assert (info.value.status, info.value.reason) == (409, "Conflict")
    assert present(kube.get("v1", "ConfigMap", "c", "default"))["data"] == {"v": "2"}


def test_apply_into_a_missing_namespace_is_404_and_creates_nothing(
    kube: Kube, kube_api: FakeKubeApiServer
):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "gone"}}
    with pytest.raises(KubeError) as info:
        kube.apply(cm, field_manager="t")
    assert info.value.message == 'namespaces "gone" not found'
    assert kube_api.objects("/api/v1/namespaces/gone/") == []


def test_generate_name_and_json_patch_rejection(kube: Kube):
    made = kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "gpu-check-", "namespace": "default"},
            # a pod without containers is invalid (spec.containers: Required value), which
            # the fake says since its Priority plugin gives every pod a spec
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }
    )
    assert made["metadata"]["name"].startswith("gpu-check-")
    assert len(made["metadata"]["name"]) == len("gpu-check-") + 5
    path = kube.path("v1", "Pod", "default", made["metadata"]["name"])
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    with pytest.raises(KubeError) as info:
        kube.request("PATCH", path, body=ops, content_type="application/json-patch+json")
    assert (info.value.status, info.value.reason) == (415, "UnsupportedMediaType")


def test_deleting_a_namespace_deletes_its_contents(kube: Kube, kube_api: FakeKubeApiServer):
    namespace(kube, "work")
    namespace(kube, "keep")
    kube.create(pod_manifest("p"))
    kube.create(pod_manifest("q", "keep"))
    assert kube.delete("v1", "Namespace", "work") is True
    assert kube_api.objects("/api/v1/namespaces/work") == []
    assert [p["metadata"]["name"] for p in kube.list("v1", "Pod")] == ["q"]


def test_test_helpers_store_read_and_remove_objects(kube_api: FakeKubeApiServer):
    stored = kube_api.put_object(
        "/api/v1/namespaces/default/pods/p",
        {
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"},
        },
    )
    assert stored["kind"] == "Pod" and stored["metadata"]["namespace"] == "default"
    again = kube_api.put_object(
        "/api/v1/namespaces/default/pods/p", {"status": {"phase": "Succeeded"}}
    )
    assert again["metadata"]["uid"] == stored["metadata"]["uid"]
    assert int(again["metadata"]["resourceVersion"]) > int(stored["metadata"]["resourceVersion"])
    assert [
        o["status"]["phase"] for o in kube_api.objects("/api/v1/namespaces/default/pods/")
    ] == ["Succeeded"]
    assert kube_api.delete_object("/api/v1/namespaces/default/pods/p") is True
    assert kube_api.get_object("/api/v1/namespaces/default/pods/p") is None
    assert kube_api.delete_object("/api/v1/namespaces/default/pods/p") is False
    assert [o["metadata"]["name"] for o in kube_api.objects("/api/v1/namespaces/")] == [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
    ]


def test_label_and_field_selectors(kube: Kube):
    namespace(kube, "a")
    namespace(kube, "b")
    for name, ns, labels in [
        ("p1", "a", {"role": "worker", "job": "mnist"}),
        ("p2", "a", {"role": "ps", "job": "mnist"}),
        ("p3", "b", {"role": "worker"}),
    ]:
        kube.create(pod_manifest(name, ns, node=f"node-{name}", labels=labels))

    def names(**kw: str) -> list[str]:
        return [p["metadata"]["name"] for p in kube.list("v1", "Pod", **kw)]

    assert names() == ["p1", "p2", "p3"]
    assert names(namespace="a") == ["p1", "p2"]
    assert names(label_selector="role=worker") == ["p1", "p3"]
    assert names(label_selector="role!=worker") == ["p2"]
    assert names(label_selector="role in (ps, chief),job") == ["p2"]
    assert names(label_selector="role notin (ps)") == ["p1", "p3"]  # codespell:ignore notin
    assert names(label_selector="!job") == ["p3"]
    assert names(field_selector="spec.nodeName=node-p2") == ["p2"]
    assert names(field_selector="metadata.namespace=b,metadata.name!=p1") == ["p3"]
    with pytest.raises(KubeError) as bad:
        kube.list("v1", "Pod", label_selector="role in (")
    assert bad.value.status == 400


def test_delete_collection_by_label_and_owner_cascade(kube: Kube, kube_api: FakeKubeApiServer):
    namespace(kube, "work")
    job = kube.create(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "work"}}
    )
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job["metadata"]["uid"]}]
    kube.create(pod_manifest("j-0", labels={"job": "j"}, ownerReferences=owner))
    kube.create(pod_manifest("other", labels={"job": "k"}))
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c1", "namespace": "work", "labels": {"job": "j"}},
        }
    )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c2", "namespace": "work", "labels": {"job": "j"}},
        }
    )

    assert kube.delete_collection("v1", "ConfigMap", "work", "job=j") == 2
    assert kube.list("v1", "ConfigMap", "work") == []
    assert kube.delete_collection("v1", "ConfigMap", "work", "job=j") == 0

    assert kube.delete("batch/v1", "Job", "j", "work") is True
    assert [p["metadata"]["name"] for p in kube.list("v1", "Pod", "work")] == ["other"]


def test_status_subresource_and_main_resource_keep_their_parts(kube: Kube):
    namespace(kube, "work")
    kube.create(pod_manifest("p"))
    kube.patch("v1", "Pod", "p", {"status": {"phase": "Running"}}, "work", subresource="status")
    pod = kube.patch(
        "v1",
        "Pod",
        "p",
        {"status": {"phase": "Failed"}, "metadata": {"labels": {"x": "1"}}},
        "work",
    )
    assert pod["status"]["phase"] == "Running"
    assert pod["metadata"]["labels"] == {"x": "1"}


def test_a_pods_status_put_keeps_its_metadata_never_its_spec(kube: Kube):
    """A pods/status write keeps the labels it sends; spec stays as it was.

    podStatusStrategy.PrepareForUpdate (kubernetes pkg/registry/core/pod/strategy.go)
    resets spec, deletionTimestamp and ownerReferences only (Calico's CNI plugin writes
    its podIP annotations so).
    """
    namespace(kube, "work")
    pod = kube.create(pod_manifest("p"))
    assert pod["status"] == {"phase": "Pending"}
    sent = {**pod, "metadata": {**pod["metadata"], "labels": {"kept": "yes"}}}
    sent["spec"] = {**pod["spec"], "nodeName": "elsewhere"}
    sent["status"] = {"phase": "Running", "podIP": "10.1.0.5"}
    path = kube.path("v1", "Pod", "work", "p", "status")
    written = kube.request("PUT", path, body=sent)
    assert written["status"] == {"phase": "Running", "podIP": "10.1.0.5"}
    assert written["metadata"]["labels"] == {"kept": "yes"}
    assert written["spec"] == pod["spec"]
    assert kube.request("GET", path)["status"]["phase"] == "Running"


def test_service_account_token_secret_is_filled(kube: Kube):
    secret = kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                "name": "tf-token",
                "namespace": "default",
                "annotations": {"kubernetes.io/service-account.name": "tf"},
            },
        }
    )
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) >= 32
    assert base64.b64decode(secret["data"]["ca.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")
    other = kube.create(
        {**secret, "metadata": {"name": "tf-token-2", "namespace": "default"}, "data": {}}
    )
    assert other["data"]["token"] != secret["data"]["token"]


def test_pod_logs_tail_and_container(kube: Kube, kube_api: FakeKubeApiServer):
    namespace(kube, "work")
    kube.create(pod_manifest("p"))
    kube_api.set_pod_log("work", "p", "".join(f"line {i}\n" for i in range(10)))
    assert kube.pod_logs("p", "work", tail_lines=3) == "line 7\nline 8\nline 9\n"
    assert kube.pod_logs("p", "work").count("\n") == 10

    two = pod_manifest("two")
    two["spec"]["containers"].append({"name": "side", "image": "busybox"})
    kube.create(two)
    kube_api.set_pod_log("work", "two", "from side\n", container="side")
    assert kube.pod_logs("two", "work", container="side") == "from side\n"
    with pytest.raises(KubeError) as info:
        kube.pod_logs("two", "work")
    assert info.value.status == 400 and "choose one of: [main side]" in info.value.message
    with pytest.raises(KubeError) as missing:
        kube.pod_logs("ghost", "work")
    assert missing.value.status == 404


def test_pod_logs_of_the_previous_container(kube: Kube, kube_api: FakeKubeApiServer):
    namespace(kube, "work")
    kube.create(pod_manifest("p"))
    with pytest.raises(KubeError) as never:
        kube.pod_logs("p", "work", previous=True)
    assert never.value.status == 400
    assert 'previous terminated container "main" in pod "p" not found' in never.value.message
    kube_api.set_pod_log("work", "p", "now\n")
    kube_api.set_pod_log("work", "p", "before the crash\n", previous=True)
    assert kube.pod_logs("p", "work", previous=True) == "before the crash\n"
    assert kube.pod_logs("p", "work") == "now\n"


# ---------------------------------------------------------------- retries


@pytest.mark.parametrize("fault", [500, 429, 503, "reset"])
def test_transient_fault_is_retried_once(kube: Kube, kube_api: FakeKubeApiServer, fault):
    kube_api.inject(status=fault, times=1)
    before = kube.requests
    assert present(kube.get("v1", "Namespace", "default"))["status"]["phase"] == "Active"
    assert kube.requests - before == 2
    assert kube_api.requests[-2:] == [("GET", "/api/v1/namespaces/default")] * 2


def test_create_retried_after_a_reset_creates_one_object(kube: Kube, kube_api: FakeKubeApiServer):
    kube_api.inject(status="reset", times=1, method="POST")
    kube_api.inject(status=502, times=1, method="POST")
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "default"},
        }
    )
    assert len(kube_api.objects("/api/v1/namespaces/default/configmaps/")) == 1
    assert [r.method for r in kube_api.requests].count("POST") == 3


def test_persistent_500_raises_after_the_retries(kube_api: FakeKubeApiServer):
    kube_api.inject(status=500, times=100, path_prefix="/api/v1/nodes")
    with Kube.from_kubeconfig(kube_api.kubeconfig(), retries=3, backoff=0.01) as kube:
        with pytest.raises(KubeError) as info:
            kube.list("v1", "Node")
        assert (info.value.status, info.value.reason) == (500, "InternalError")
        assert info.value.message == "injected fault: InternalError"
        assert kube.requests == 4
        # other paths are unaffected
        assert kube.get("v1", "Namespace", "default") is not None


def test_a_service_proxy_without_endpoints_answers_once_for_its_caller_to_poll(
    kube_api: FakeKubeApiServer,
):
    kube_api.put_object("/api/v1/namespaces/default/services/s", {"spec": {}})
    path = "/api/v1/namespaces/default/services/s:8501/proxy/v1/models/m"
    with Kube.from_kubeconfig(kube_api.kubeconfig(), retries=3, backoff=0.01) as kube:
        with pytest.raises(KubeError) as info:
            kube.request("GET", path)
        assert (info.value.status, info.value.reason) == (503, "ServiceUnavailable")
        assert info.value.message == 'no endpoints available for service "s"'
        assert kube.requests == 1  # not retried: serving.serve polls on its own clock
        with pytest.raises(KubeError) as info:
            kube.request("GET", path.replace("/s:", "/missing:"))
        assert (info.value.status, info.value.reason) == (404, "NotFound")


def test_unreachable_server_is_a_connection_kube_error(kube_api: FakeKubeApiServer):
    text = kube_api.kubeconfig()
    kube_api.stop()
    with Kube.from_kubeconfig(text, retries=2, backoff=0.01) as kube:
        with pytest.raises(KubeError) as info:
            kube.get("v1", "Node", "n1")
    assert (info.value.status, info.value.reason) == (0, "ConnectionError")


# ---------------------------------------------------------------- nodes and drain


def started(kube_api: FakeKubeApiServer, name: str) -> None:
    """The pod work/<name> Running and Ready, as its kubelet reports it.

    A budget holds only such a pod: kube-apiserver evicts a Pending one without reading
    its budget (eviction.go canIgnorePDB), and an unready one does not count as healthy.
    """
    path = f"/api/v1/namespaces/work/pods/{name}"
    pod = present(kube_api.get_object(path))
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    kube_api.put_object(path, pod)


def drain_fixture(kube: Kube, kube_api: FakeKubeApiServer) -> None:
    """Node n1 running: a ReplicaSet pod, a DaemonSet pod, a mirror pod and a PDB-held pod."""
    kube_api.put_object("/api/v1/nodes/n1", {"spec": {}, "status": {"capacity": {"cpu": "4"}}})
    kube_api.put_object("/api/v1/nodes/n2", {"spec": {}})
    namespace(kube, "work")
    rs = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web",
            "uid": "u-rs",
            "controller": True,
        }
    ]
    ds = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "plugin",
            "uid": "u-ds",
            "controller": True,
        }
    ]
    kube.create(pod_manifest("web-1", ownerReferences=rs))
    kube.create(pod_manifest("plugin-1", "kube-system", ownerReferences=ds))
    kube.create(
        pod_manifest("etcd-n1", "kube-system", annotations={"kubernetes.io/config.mirror": "x"})
    )
    kube.create(pod_manifest("db-0", labels={"app": "db"}))
    started(kube_api, "db-0")
    kube.create(pod_manifest("web-2", node="n2"))
    kube.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db", "namespace": "work"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        }
    )


def pod_names(kube: Kube) -> list[str]:
    return sorted(
        f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in kube.list("v1", "Pod")
    )


def test_drain_blocked_by_pdb_times_out_without_sleeping(kube: Kube, kube_api: FakeKubeApiServer):
    drain_fixture(kube, kube_api)
    clock = FakeClock()
    result = drain.drain(kube, "n1", timeout=30, poll=5, clock=clock, sleep=clock.sleep)

    assert result.timed_out is True
    assert result.evicted == ["work/web-1"]
    assert result.remaining == ["work/db-0"]
    assert pod_names(kube) == [
        "kube-system/etcd-n1",
        "kube-system/plugin-1",
        "work/db-0",
        "work/web-2",
    ]
    assert present(kube.get("v1", "Node", "n1"))["spec"]["unschedulable"] is True
    assert clock.sleeps == [5.0] * 6
    evictions = [r.path for r in kube_api.requests if r.path.endswith("/eviction")]
    assert evictions.count("/api/v1/namespaces/work/pods/db-0/eviction") == 7


def test_drain_retries_blocked_eviction_until_budget_allows(
    kube: Kube, kube_api: FakeKubeApiServer
):
    drain_fixture(kube, kube_api)
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if len(clock.sleeps) == 2:  # the db gets a second replica elsewhere
            kube.create(pod_manifest("db-1", node="n2", labels={"app": "db"}))
            started(kube_api, "db-1")

    result = drain.drain(kube, "n1", timeout=60, poll=2, clock=clock, sleep=sleep)
    assert result.timed_out is False
    assert sorted(result.evicted) == ["work/db-0", "work/web-1"]
    assert result.remaining == []
    assert clock.sleeps == [2.0, 2.0]
    assert "work/db-0" not in pod_names(kube)


def test_drain_waits_for_evicted_pods_to_terminate(kube: Kube, kube_api: FakeKubeApiServer):
    kube_api.put_object("/api/v1/nodes/n1", {"spec": {}})
    namespace(kube, "work")
    kube.create(pod_manifest("slow", finalizers=["example.com/flush"]))
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if len(clock.sleeps) == 3:  # the pod finishes terminating
            kube.patch("v1", "Pod", "slow", {"metadata": {"finalizers": None}}, "work")

    result = drain.drain(kube, "n1", timeout=60, poll=1, clock=clock, sleep=sleep)
    assert (result.evicted, result.remaining, result.timed_out) == (["work/slow"], [], False)
    assert clock.sleeps == [1.0] * 3
    assert kube.get("v1", "Pod", "slow", "work") is None


def test_drain_reports_pods_still_terminating_at_the_timeout(
    kube: Kube, kube_api: FakeKubeApiServer
):
    kube_api.put_object("/api/v1/nodes/n1", {"spec": {}})
    namespace(kube, "work")
    kube.create(pod_manifest("stuck", finalizers=["example.com/never"]))
    clock = FakeClock()
    result = drain.drain(kube, "n1", timeout=3, poll=1, clock=clock, sleep=clock.sleep)
    assert (result.evicted, result.remaining, result.timed_out) == (
        ["work/stuck"],
        ["work/stuck"],
        True,
    )
    assert present(kube.get("v1", "Pod", "stuck", "work"))["metadata"]["deletionTimestamp"]


def test_eviction_refusal_is_a_429_naming_the_budget(kube: Kube, kube_api: FakeKubeApiServer):
    drain_fixture(kube, kube_api)
    path = kube.path("v1", "Pod", "work", "db-0", "eviction")
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "db-0", "namespace": "work"},
    }
    with Kube.from_kubeconfig(kube_api.kubeconfig(), retries=0) as once:
        with pytest.raises(KubeError) as info:
            once.request("POST", path, body=body)
    assert (info.value.status, info.value.reason) == (429, "TooManyRequests")
    assert "disruption budget" in info.value.message


def test_drain_of_an_empty_node_finishes_at_once(kube: Kube, kube_api: FakeKubeApiServer):
    kube_api.put_object("/api/v1/nodes/n3", {"spec": {}})
    clock = FakeClock()
    result = drain.drain(kube, "n3", timeout=10, clock=clock, sleep=clock.sleep)
    assert (result.evicted, result.remaining, result.timed_out) == ([], [], False)
    assert clock.sleeps == []


def test_cordon_uncordon_and_delete_node(kube: Kube, kube_api: FakeKubeApiServer):
    kube_api.put_object("/api/v1/nodes/n1", {"spec": {"podCIDR": "10.0.0.0/24"}})
    drain.cordon(kube, "n1")
    assert present(kube_api.get_object("/api/v1/nodes/n1"))["spec"] == {
        "podCIDR": "10.0.0.0/24",
        "unschedulable": True,
    }
    assert present(kube_api.get_object("/api/v1/nodes/n1"))["metadata"]["annotations"] == {
        CORDON_ANNOTATION: "true"
    }
    assert drain.uncordon(kube, "n1") is True
    node = present(kube_api.get_object("/api/v1/nodes/n1"))
    assert node["spec"] == {"podCIDR": "10.0.0.0/24"}
    assert CORDON_ANNOTATION not in (node["metadata"].get("annotations") or {})
    assert kube.delete("v1", "Node", "n1") is True
    assert kube.delete("v1", "Node", "n1") is False
    assert drain.uncordon(kube, "n1") is False
    assert drain.drain(kube, "n1", timeout=10) is None
    with pytest.raises(KubeError) as info:
        drain.cordon(kube, "n1")
    assert info.value.status == 404


def test_a_cordon_set_by_someone_else_outlives_drain_and_uncordon(
    kube: Kube, kube_api: FakeKubeApiServer
):
    kube_api.put_object("/api/v1/nodes/n1", {"spec": {"unschedulable": True}})  # kubectl cordon
    namespace(kube, "work")
    kube.create(pod_manifest("web-1"))
    clock = FakeClock()

    result = drain.drain(kube, "n1", timeout=10, clock=clock, sleep=clock.sleep)

    assert result.evicted == ["work/web-1"]
    assert drain.uncordon(kube, "n1") is False
    node = present(kube_api.get_object("/api/v1/nodes/n1"))
    assert node["spec"]["unschedulable"] is True
    assert CORDON_ANNOTATION not in (node["metadata"].get("annotations") or {})


def test_a_drain_retried_after_our_own_cordon_still_lifts_it(
    kube: Kube, kube_api: FakeKubeApiServer
):
    kube_api.put_object("/api/v1/nodes/n1", {"spec": {}})
    drain.cordon(kube, "n1")  # a first drain that failed after cordoning, in an earlier hook

    clock = FakeClock()
    assert drain.drain(kube, "n1", timeout=10, clock=clock, sleep=clock.sleep) is not None
    assert drain.uncordon(kube, "n1") is True
    assert not present(kube_api.get_object("/api/v1/nodes/n1"))["spec"].get("unschedulable")


def test_nodes_as_a_table_carry_the_status_kubectl_prints(kube: Kube, kube_api: FakeKubeApiServer):
    def node(name: str, ready: str | None, unschedulable: bool = False) -> dict:
        conditions = [{"type": "Ready", "status": ready}] if ready else []
        return {
            "metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": conditions, "nodeInfo": {"kubeletVersion": "v1.36.5"}},
        }

    kube_api.put_object("/api/v1/nodes/a", node("a", "True"))
    kube_api.put_object("/api/v1/nodes/b", node("b", "False"))
    kube_api.put_object("/api/v1/nodes/c", node("c", None))
    kube_api.put_object("/api/v1/nodes/d", node("d", "True", unschedulable=True))

    rows = kube.table("v1", "Node")

    assert [(r["Name"], r["Status"], r["Roles"]) for r in rows] == [
        ("a", "Ready", "control-plane"),
        ("b", "NotReady", "control-plane"),
        ("c", "Unknown", "control-plane"),
        ("d", "Ready,SchedulingDisabled", "control-plane"),
    ]
    listed = [r for r in kube_api.requests if r == ("GET", "/api/v1/nodes")]
    assert listed[-1].query["includeObject"] == "None"


def test_a_kind_the_server_does_not_print_is_a_clear_error(kube: Kube):
    # the fake prints most kinds as kube-apiserver does (fakes/kube_tables.py), not APIServices
    with pytest.raises(KubeError, match="406"):
        kube.table("apiregistration.k8s.io/v1", "APIService")


def test_custom_resources_are_served_only_while_their_crd_exists(
    kube: Kube, kube_api: FakeKubeApiServer
):
    kube.kinds[("example.io/v1", "Widget")] = ("widgets", True)
    namespace(kube, "work")
    widget = {
        "apiVersion": "example.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "work"},
        "spec": {"size": 1},
    }
    with pytest.raises(KubeError) as missing:
        kube.apply(widget, field_manager="t")
    assert missing.value.status == 404  # as a real server before the CRD exists
    defined = kube.apply(
        crd("example.io", "Widget", "widgets", "Namespaced", ["v1"]), field_manager="t"
    )
    assert {c["type"] for c in defined["status"]["conditions"]} >= {"Established"}
    kube.apply(widget, field_manager="t")
    kube.patch("example.io/v1", "Widget", "w", {"status": {"ok": True}}, "work")
    assert present(kube.get("example.io/v1", "Widget", "w", "work"))["spec"] == {"size": 1}
    kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.io")
    with pytest.raises(KubeError) as gone:
        kube.list("example.io/v1", "Widget", "work")
    assert gone.value.status == 404
    kube.apply(crd("example.io", "Widget", "widgets", "Namespaced", ["v1"]), field_manager="t")
    assert kube.get("example.io/v1", "Widget", "w", "work") is None  # deleted with its CRD


def test_every_client_knows_the_jobset_and_kueue_kinds_the_charms_use(kube: Kube):
    """One table for both charms, from the CRDs of JobSet v0.12 and Kueue v0.19.

    Group, version, plural and scope: neither charm teaches its clients the kinds itself.
    """
    assert kube.path("jobset.x-k8s.io/v1alpha2", "JobSet", "team", "mnist") == (
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team/jobsets/mnist"
    )
    kueue = "kueue.x-k8s.io/v1beta2"
    assert kube.path(kueue, "ClusterQueue", name="team") == f"/apis/{kueue}/clusterqueues/team"
    assert kube.path(kueue, "LocalQueue", "team", "default") == (
        f"/apis/{kueue}/namespaces/team/localqueues/default"
    )
    assert kube.path(kueue, "Workload", "team") == f"/apis/{kueue}/namespaces/team/workloads"
    for kind, plural in (
        ("ResourceFlavor", "resourceflavors"),
        ("Cohort", "cohorts"),
        ("WorkloadPriorityClass", "workloadpriorityclasses"),
    ):
        assert kube.path(kueue, kind, name="x") == f"/apis/{kueue}/{plural}/x"


# ---------------------------------------------------------------- several API servers


def several_servers_kubeconfig(urls: list[str], ca_pem: str, token: str, **other: str) -> str:
    """One context per API server, as the control plane hands its consumers (rbac.kubeconfig).

    `other`: {context name: server} of contexts that are not the same cluster (another
    user), which the client must never fail over to.
    """
    import yaml

    ca = base64.b64encode(ca_pem.encode()).decode()
    clusters = [
        {"name": f"c{i}", "cluster": {"server": url, "certificate-authority-data": ca}}
        for i, url in enumerate([*urls, *other.values()])
    ]
    contexts = [
        {"name": f"x{i}", "context": {"cluster": f"c{i}", "user": "sa", "namespace": "work"}}
        for i in range(len(urls))
    ]
    contexts += [
        {"name": name, "context": {"cluster": f"c{len(urls) + i}", "user": "other"}}
        for i, name in enumerate(other)
    ]
    users = [{"name": "sa", "user": {"token": token}}, {"name": "other", "user": {"token": "o"}}]
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": clusters,
            "users": users,
            "contexts": contexts,
            "current-context": "x0",
        }
    )


def test_servers_are_the_same_user_and_ca_at_other_addresses():
    from charms.gpu_k8s.v0.kubeconfig import servers

    text = several_servers_kubeconfig(
        ["https://10.0.0.1:6443", "https://10.0.0.2:6443", "https://10.0.0.1:6443"],
        "CA",
        "t",
        elsewhere="https://10.9.9.9:6443",
    )
    # the duplicate is tried once; another user's cluster is never a failover target
    assert servers(load_kubeconfig(text)) == ["https://10.0.0.1:6443", "https://10.0.0.2:6443"]


def test_a_lost_api_server_fails_over_to_the_next_and_stays_there():
    """Two API servers of one cluster; the first one's machine is lost: the client goes on."""
    with FakeKubeApiServer(tls=True) as api:
        assert api.tls is not None
        first, second = api.serve_also(), api.serve_also()
        try:
            text = several_servers_kubeconfig(
                [first.url, second.url], api.tls.ca_pem, "admin-token"
            )
            with Kube.from_kubeconfig(text, backoff=0.01) as kube:
                namespace(kube, "work")
                assert kube.server == first.url
                first.stop()
                # the open connection is reset and the address refuses new ones
                assert present(kube.get("v1", "Namespace", "work"))["metadata"]["name"] == "work"
                assert kube.server == second.url
                namespace(kube, "more")
            # a client built afterwards from the same kubeconfig finds the live one too
            with Kube.from_kubeconfig(text, retries=1, backoff=0.01) as kube:
                assert {n["metadata"]["name"] for n in kube.list("v1", "Namespace")} >= {
                    "work",
                    "more",
                }
                second.stop()
                with pytest.raises(KubeError) as failed:
                    kube.get("v1", "Namespace", "work")
                assert (failed.value.status, failed.value.reason) == (0, "ConnectionError")
        finally:
            first.stop()
            second.stop()


def test_one_api_server_in_the_kubeconfig_has_nowhere_to_go():
    """Before: the kubeconfig named the leader's API server only; losing it lost the cluster."""
    with FakeKubeApiServer(tls=True) as api:
        assert api.tls is not None
        first = api.serve_also()
        try:
            text = several_servers_kubeconfig([first.url], api.tls.ca_pem, "admin-token")
            with Kube.from_kubeconfig(text, retries=1, backoff=0.01) as kube:
                namespace(kube, "work")
                first.stop()
                with pytest.raises(KubeError) as failed:
                    kube.get("v1", "Namespace", "work")
                assert failed.value.status == 0
        finally:
            first.stop()
