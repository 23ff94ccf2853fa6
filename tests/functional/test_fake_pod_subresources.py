"""The fake API server binds, debugs and resizes pods as kube-apiserver 1.36 does.

The pod subresources a hostile tenant's grant could use past the namespace (the probes of
tests/kube_api_escalations.py make them), each served as kubernetes pkg/registry/core/pod
serves it (stored commits near 1.36, read 2026-11-28):
- `pods/binding` (and the legacy `bindings`): storage/storage.go BindingREST.Create and
  setPodHostAndAnnotations: the pod gets the node and PodScheduled, unless it is being
  deleted, already bound or gated (409 Conflict on pods/binding);
- `pods/ephemeralcontainers` and `pods/resize` (get, update, patch: the real client's
  CoreV1Api, generated from kube-apiserver's OpenAPI, has read_, replace_ and patch_
  for both): strategy.go's dropNonEphemeralContainerUpdates and dropNonResizeUpdates keep
  only their part of the spec, and validation refuses changing or removing an ephemeral
  container and renaming a container.
Each request goes through the real `kubernetes` client as the cluster admin, so that what
refuses it is the handler, not RBAC.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from fakes.kube_apiserver import ADMIN_TOKEN, FakeKubeApiServer

NS = "work"
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web"},
    "spec": {
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
        ]
    },
}


@pytest.fixture
def api(kube_api: FakeKubeApiServer) -> FakeKubeApiServer:
    kube_api.put_object(f"/api/v1/namespaces/{NS}", {})
    return kube_api


@pytest.fixture
def core(api: FakeKubeApiServer) -> Iterator[client.CoreV1Api]:
    kubeconfig = yaml.safe_load(api.kubeconfig(token=ADMIN_TOKEN))
    with config.new_client_from_config_dict(kubeconfig) as api_client:
        yield client.CoreV1Api(api_client)


def _pod(api: FakeKubeApiServer, **spec) -> dict:
    api.put_object(f"/api/v1/namespaces/{NS}/pods/web", {**POD, "spec": {**POD["spec"], **spec}})
    return api.get_object(f"/api/v1/namespaces/{NS}/pods/web")


def _binding(node: str = "n1", name: str = "web") -> dict:
    return {"metadata": {"name": name}, "target": {"kind": "Node", "name": node}}


def _refusal(e: ApiException) -> tuple[int, str]:
    return e.status, json.loads(e.body)["message"]


def test_a_binding_binds_an_unbound_pod(api, core):
    _pod(api)
    # the answer is a Status, which the client would read as a Binding (and fail: its
    # target is required, kubernetes-client/python#825): the raw answer is read
    answer = core.create_namespaced_pod_binding("web", NS, _binding(), _preload_content=False)
    assert (answer.status, json.loads(answer.data)["status"]) == (201, "Success")
    pod = api.get_object(f"/api/v1/namespaces/{NS}/pods/web")
    assert pod["spec"]["nodeName"] == "n1"
    scheduled = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert [c["status"] for c in scheduled] == ["True"]
    # the legacy resource binds by the body's name
    api.put_object(f"/api/v1/namespaces/{NS}/pods/other", {**POD, "metadata": {"name": "other"}})
    core.create_namespaced_binding(NS, _binding("n2", "other"), _preload_content=False)
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/other")["spec"]["nodeName"] == "n2"


@pytest.mark.parametrize(
    ("spec", "meta", "words"),
    [
        ({"nodeName": "n0"}, {}, 'pod web is already assigned to node "n0"'),
        ({"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}, {}, "schedulingGates"),
        ({}, {"finalizers": ["hold"], "deletionTimestamp": "2026-01-01T00:00:00Z"}, "deleted"),
    ],
    ids=["bound", "gated", "being-deleted"],
)
def test_a_binding_is_refused_where_kube_apiserver_refuses_it(api, core, spec, meta, words):
    api.put_object(
        f"/api/v1/namespaces/{NS}/pods/web",
        {**POD, "metadata": {"name": "web", **meta}, "spec": {**POD["spec"], **spec}},
    )
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod_binding("web", NS, _binding())
    status, message = _refusal(e.value)
    assert status == 409 and 'Operation cannot be fulfilled on pods/binding "web"' in message
    assert words in message
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/web")["spec"].get("nodeName") == (
        spec.get("nodeName")
    )


def test_a_binding_names_its_pod_and_a_node(api, core):
    _pod(api)
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod_binding("web", NS, _binding(name="other"))
    assert _refusal(e.value) == (400, "name in URL does not match name in Binding object")
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod_binding("web", NS, _binding(node=""))
    assert _refusal(e.value) == (
        422,
        'Binding "web" is invalid: target.name: Required value',
    )
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod_binding("nobody", NS, _binding(name="nobody"))
    assert e.value.status == 404


def test_an_ephemeral_container_joins_a_running_pod_and_stays(api, core):
    _pod(api, nodeName="n1")
    debugger = {"name": "debugger", "image": "busybox", "stdin": True}
    patch = {"spec": {"ephemeralContainers": [debugger]}, "metadata": {"labels": {"a": "b"}}}
    core.patch_namespaced_pod_ephemeralcontainers("web", NS, patch)
    pod = api.get_object(f"/api/v1/namespaces/{NS}/pods/web")
    assert pod["spec"]["ephemeralContainers"] == [debugger]
    assert pod["spec"]["containers"] == POD["spec"]["containers"]
    read = core.read_namespaced_pod_ephemeralcontainers("web", NS)
    assert [c.name for c in read.spec.ephemeral_containers] == ["debugger"]
    # it may not be removed or changed, nor take a container's name
    for containers in ([], [{**debugger, "image": "alpine"}]):
        with pytest.raises(ApiException) as e:
            body = {**pod, "spec": {**pod["spec"], "ephemeralContainers": containers}}
            core.replace_namespaced_pod_ephemeralcontainers("web", NS, body)
        status, message = _refusal(e.value)
        assert status == 422 and 'existing ephemeral containers "debugger" may not be' in message
    clash = {"spec": {"ephemeralContainers": [debugger, {"name": "main", "image": "busybox"}]}}
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_pod_ephemeralcontainers("web", NS, clash)
    assert _refusal(e.value)[0] == 422


def test_a_resize_changes_only_the_containers_resources(api, core):
    _pod(api, nodeName="n1")
    grown = {"name": "main", "image": "evil", "resources": {"requests": {"cpu": "64"}}}
    core.patch_namespaced_pod_resize("web", NS, {"spec": {"containers": [grown]}})
    (container,) = api.get_object(f"/api/v1/namespaces/{NS}/pods/web")["spec"]["containers"]
    assert container == {**POD["spec"]["containers"][0], "resources": grown["resources"]}
    renamed = {"spec": {"containers": [{**grown, "name": "other"}]}}
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_pod_resize(
            "web", NS, renamed, _content_type="application/merge-patch+json"
        )
    assert _refusal(e.value)[0] == 422


@pytest.mark.parametrize("sub", ["binding", "ephemeralcontainers", "resize"])
def test_the_pod_subresources_are_pods_only(api, sub):
    api.put_object(f"/api/v1/namespaces/{NS}/configmaps/c", {"data": {}})
    request = urllib.request.Request(
        f"{api.url}/api/v1/namespaces/{NS}/configmaps/c/{sub}", data=b"{}", method="POST"
    )
    request.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    request.add_header("Content-Type", "application/json")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=10)
    with e.value:
        assert e.value.code == 405
