"""The fake API server's create order and strategic merge patch, as kube-apiserver 1.36.

Create: validation (422) and the validating admission plugins (403) answer before storage
finds the name taken (409): apiserver registry/generic/registry/store.go `Create`. Strategic
merge patch: tests/fakes/kube_smp.py (each list's patch tags from k8s.io/api core/v1
types.go). Sizes: a body over 3 MiB is 413, an object over 1.5 MiB etcd's 500
(fakes/kube_apiserver.py MAX_REQUEST_BODY_BYTES, MAX_STORED_BYTES). Each test sends a
real request with the real `kubernetes` client.
"""

from __future__ import annotations

from typing import Any

import pytest

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes import crds
from fakes.kube_apiserver import FakeKubeApiServer

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
NODE = "/api/v1/nodes/gpu-0"


@pytest.fixture
def work(kube: Kube) -> Kube:
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "work"}})
    return kube


def _deployment(**spec: Any) -> dict:
    labels = {"app": "web"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "work"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
            **spec,
        },
    }


def _refused(call) -> KubeError:
    with pytest.raises(KubeError) as info:
        call()
    return info.value


# ------------------------------------------------------------------- create's order


def test_an_invalid_object_is_invalid_even_when_its_name_is_taken(work: Kube):
    work.create(_deployment())
    invalid = _deployment()
    del invalid["spec"]["selector"]

    error = _refused(lambda: work.create(invalid))
    assert (error.status, error.reason) == (422, "Invalid")
    assert error.message == 'Deployment.apps "web" is invalid: spec.selector: Required value'

    error = _refused(lambda: work.create(_deployment()))
    assert (error.status, error.reason) == (409, "AlreadyExists")


def test_pod_security_refuses_before_the_name_is_found_taken(work: Kube):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "work"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    work.create(pod)
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    work.patch("v1", "Namespace", "work", {"metadata": {"labels": labels}})

    error = _refused(lambda: work.create(pod))
    assert (error.status, error.reason) == (403, "Forbidden")
    assert error.message.startswith('pods "p" is forbidden: violates PodSecurity "restricted')


def test_a_name_held_by_a_terminating_object_says_it_is_being_deleted(work: Kube):
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": "work", "finalizers": ["example.com/keep"]},
    }
    work.create(config)
    work.delete("v1", "ConfigMap", "held", "work")

    error = _refused(lambda: work.create(config))
    assert (error.status, error.reason) == (409, "AlreadyExists")
    assert error.message == 'object is being deleted: configmaps "held" already exists'


# ---------------------------------------------------------------- strategic merge patch


@pytest.fixture
def node(kube_api: FakeKubeApiServer) -> dict:
    return kube_api.put_object(
        NODE,
        {
            "spec": {"taints": [{"key": "a", "value": "1", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True"},
                ],
            },
        },
    )


def _patch(kube: Kube, path: str, body: Any, content_type: str = SMP) -> dict:
    return kube.request("PATCH", path, body=body, content_type=content_type)


def _conditions(node: dict) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in node["status"]["conditions"]]


def test_node_conditions_merge_by_type(kube: Kube, node: dict):
    """NodeStatus.Conditions: patchStrategy merge, patchMergeKey type."""
    gpu = {"type": "GpuHealthy", "status": "False"}
    patched = _patch(kube, f"{NODE}/status", {"status": {"conditions": [gpu]}})
    assert _conditions(patched) == [
        ("MemoryPressure", "False"),
        ("Ready", "True"),
        ("GpuHealthy", "False"),
    ]

    ready = {"type": "Ready", "status": "False"}
    patched = _patch(kube, f"{NODE}/status", {"status": {"conditions": [ready]}})
    assert ("Ready", "False") in _conditions(patched) and len(_conditions(patched)) == 3

    gone = {"type": "GpuHealthy", "$patch": "delete"}
    patched = _patch(kube, f"{NODE}/status", {"status": {"conditions": [gone]}})
    assert _conditions(patched) == [("MemoryPressure", "False"), ("Ready", "False")]

    # a JSON merge patch replaces the list, as RFC 7386 says
    patched = _patch(kube, f"{NODE}/status", {"status": {"conditions": [gpu]}}, MERGE)
    assert _conditions(patched) == [("GpuHealthy", "False")]


def test_node_taints_have_no_patch_strategy_and_are_replaced(kube: Kube, node: dict):
    """NodeSpec.Taints: `json:"taints,omitempty"`, no patchStrategy tag."""
    taint = {"key": "b", "value": "2", "effect": "NoExecute"}
    patched = _patch(kube, NODE, {"spec": {"taints": [taint]}})
    assert patched["spec"]["taints"] == [taint]


def test_finalizers_merge_as_a_set_and_a_directive_removes_one(kube: Kube, node: dict):
    """ObjectMeta.Finalizers: patchStrategy merge (a list of strings)."""
    _patch(kube, NODE, {"metadata": {"finalizers": ["x.example.com/a"]}})
    patched = _patch(kube, NODE, {"metadata": {"finalizers": ["x.example.com/b"]}})
    assert patched["metadata"]["finalizers"] == ["x.example.com/a", "x.example.com/b"]
    drop = {"$deleteFromPrimitiveList/finalizers": ["x.example.com/a"]}
    patched = _patch(kube, NODE, {"metadata": drop})
    assert patched["metadata"]["finalizers"] == ["x.example.com/b"]


def test_a_container_merges_by_name_and_its_env_too(work: Kube):
    base = _deployment()
    base["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    work.create(base)
    change = {"name": "c", "image": "busybox:1.37", "env": [{"name": "B", "value": "2"}]}
    path = work.path("apps/v1", "Deployment", "work", "web")

    patched = _patch(work, path, {"spec": {"template": {"spec": {"containers": [change]}}}})

    [container] = patched["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "busybox:1.37"
    assert container["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]


def test_an_item_without_its_merge_key_fails_the_patch(kube: Kube, node: dict):
    """In strategicpatch mergeSlice: mergepatch.ErrNoMergeKey, answered as a 500."""
    error = _refused(
        lambda: _patch(kube, f"{NODE}/status", {"status": {"conditions": [{"status": "True"}]}})
    )
    assert (error.status, error.reason) == (500, "InternalError")
    assert error.message == (
        "Internal error occurred: map: map[status:True] does not contain declared merge key: type"
    )


def test_a_custom_resource_takes_no_strategic_merge_patch(kube: Kube, kube_api: FakeKubeApiServer):
    """apiextensions-apiserver serves JSON patch, merge patch and apply to custom resources."""
    name = "resourceflavors.kueue.x-k8s.io"
    kube_api.put_shared(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", crds.shared(name)
    )
    path = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/cpu"
    kube_api.put_object(path, {"spec": {}})

    error = _refused(lambda: _patch(kube, path, {"metadata": {"labels": {"a": "b"}}}))

    assert (error.status, error.reason) == (415, "UnsupportedMediaType")
    assert error.message == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )
    patched = _patch(kube, path, {"metadata": {"labels": {"a": "b"}}}, MERGE)
    assert patched["metadata"]["labels"] == {"a": "b"}


# ------------------------------------------------------------- a patch's precondition


@pytest.mark.parametrize("content_type", [MERGE, SMP])
def test_a_patch_naming_a_stale_resource_version_is_a_conflict(
    kube: Kube, node: dict, content_type: str
):
    """A patch's optimistic lock: a stale resourceVersion in it is a Conflict (409).

    The patched object keeps the patch's resourceVersion and store.go Update refuses one
    unequal to the stored object's, as for a PUT.
    """
    read = node["metadata"]["resourceVersion"]
    _patch(kube, NODE, {"metadata": {"labels": {"a": "1"}}}, content_type)  # moves it on

    stale = {"metadata": {"resourceVersion": read, "labels": {"a": "2"}}}
    error = _refused(lambda: _patch(kube, NODE, stale, content_type))
    assert (error.status, error.reason) == (409, "Conflict")
    assert "the object has been modified" in error.message

    current = kube.get("v1", "Node", "gpu-0")
    assert current is not None
    fresh = {
        "metadata": {
            "resourceVersion": current["metadata"]["resourceVersion"],
            "labels": {"a": "3"},
        }
    }
    patched = _patch(kube, NODE, fresh, content_type)
    assert patched["metadata"]["labels"]["a"] == "3"


def test_what_another_client_does_meanwhile_lands_between_two_requests(
    kube_api: FakeKubeApiServer, kube: Kube, node: dict
):
    """`meanwhile`: after each recorded request is answered, before the client's next one.

    A taint written there makes the client's stale read a Conflict on its next patch, as
    a `kubectl taint` between its GET and PATCH does; requests of the controllers the
    tests emulate (`controller=True`) set nothing off.
    """
    seen: list[tuple[str, str]] = []

    def operator(method: str, path: str) -> None:
        seen.append((method, path))
        if len(seen) == 1:
            current = kube_api.get_object(NODE)
            taints = [*current["spec"]["taints"], {"key": "b", "effect": "NoSchedule"}]
            kube_api.put_object(NODE, {**current, "spec": {"taints": taints}})

    kube_api.meanwhile.append(operator)
    read = kube.get("v1", "Node", "gpu-0")
    assert read is not None and seen == [("GET", NODE)]
    stale = {"metadata": {"resourceVersion": read["metadata"]["resourceVersion"]}}
    error = _refused(lambda: kube.patch("v1", "Node", "gpu-0", {**stale, "spec": {}}))
    assert (error.status, error.reason) == (409, "Conflict")
    assert [t["key"] for t in kube_api.get_object(NODE)["spec"]["taints"]] == ["a", "b"]
    kube_api.handle("GET", NODE, {"Authorization": "Bearer admin-token"}, b"", controller=True)
    assert seen == [("GET", NODE), ("PATCH", NODE)]


def test_a_delete_whose_precondition_names_another_object_is_a_conflict(work: Kube):
    """DeleteOptions.preconditions (rest/delete.go BeforeDelete): nothing is deleted.

    An object deleted and made again under its name is not the one a stale UID names.
    """
    made = work.create(_deployment())
    path = work.path("apps/v1", "Deployment", "work", "web")
    stale = {"preconditions": {"uid": "0000-gone", "resourceVersion": None}}

    error = _refused(lambda: work.request("DELETE", path, body=stale))
    assert (error.status, error.reason) == (409, "Conflict")
    assert error.message == (
        'Operation cannot be fulfilled on Deployment.apps "web": the UID in the precondition '
        f"(0000-gone) does not match the UID in record ({made['metadata']['uid']}). The "
        "object might have been deleted and then recreated"
    )
    moved = {"preconditions": {"resourceVersion": "1"}}
    error = _refused(lambda: work.request("DELETE", path, body=moved))
    assert "the ResourceVersion in the precondition (1) does not match" in error.message
    assert work.get("apps/v1", "Deployment", "web", "work") is not None

    own = {"preconditions": {"uid": made["metadata"]["uid"]}}
    work.request("DELETE", path, body=own)
    assert work.get("apps/v1", "Deployment", "web", "work") is None


@pytest.mark.parametrize("content_type", [MERGE, SMP])
def test_a_patch_naming_another_uid_is_invalid_after_its_resource_version_is_checked(
    kube: Kube, node: dict, content_type: str
):
    """A uid in a patch is a change to an immutable field (422), not a precondition.

    A PATCH's UpdatedObjectInfo holds no object, so it has no UID precondition (k8s.io/
    apiserver endpoints/handlers/patch.go patchResource, DefaultUpdatedObjectInfo(nil,
    ...); registry/rest/update.go Preconditions), unlike a PUT's: the patched object's
    other uid fails BeforeUpdate's ValidateObjectMetaUpdate, which registry/generic/
    registry/store.go Update reaches only once the resourceVersion matched (a stale one:
    409 first). Nothing is written.
    """
    read = node["metadata"]["resourceVersion"]
    other = {"uid": "0a1b2c3d-0000-4000-8000-000000000000", "labels": {"a": "1"}}
    error = _refused(lambda: _patch(kube, NODE, {"metadata": other}, content_type))
    assert (error.status, error.reason) == (422, "Invalid")
    assert error.message == (
        f'Node "gpu-0" is invalid: metadata.uid: Invalid value: "{other["uid"]}": '
        "field is immutable"
    )
    _patch(kube, NODE, {"metadata": {"labels": {"b": "1"}}}, content_type)  # moves it on
    stale = {"metadata": {**other, "resourceVersion": read}}
    error = _refused(lambda: _patch(kube, NODE, stale, content_type))
    assert (error.status, error.reason) == (409, "Conflict")
    own = {"uid": node["metadata"]["uid"], "labels": {"a": "2"}}
    assert _patch(kube, NODE, {"metadata": own}, content_type)["metadata"]["labels"]["a"] == "2"


# ------------------------------------------------------------------- one event storage


def test_an_event_written_through_either_group_is_read_through_both(work: Kube):
    """kube-apiserver serves events.k8s.io/v1 events from the core events' storage.

    pkg/registry/events/rest/storage_events.go (eventstore.NewREST), converted by
    pkg/apis/events/v1/conversion.go: regarding is involvedObject, note is message,
    reportingController is core/v1's reportingComponent. A controller on the new API
    (JobSet's GetEventRecorder) is read by `kubectl describe`, which lists core/v1 events.
    """
    new = "/apis/events.k8s.io/v1/namespaces/work/events"
    core = "/api/v1/namespaces/work/events"
    regarding = {"apiVersion": "v1", "kind": "Pod", "namespace": "work", "name": "p"}
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "p.1"},
        "eventTime": "2026-11-27T20:30:00.000000Z",
        "reportingController": "jobset",
        "reportingInstance": "jobset-x",
        "action": "Reconciling",
        "reason": "Tested",
        "regarding": regarding,
        "note": "hello",
        "type": "Normal",
    }
    work.request("POST", new, body=body)
    seen = work.request("GET", f"{core}/p.1")
    assert (seen["apiVersion"], seen["message"], seen["reason"]) == ("v1", "hello", "Tested")
    assert (seen["involvedObject"], seen["reportingComponent"]) == (regarding, "jobset")
    work.request("DELETE", f"{core}/p.1")
    assert work.request("GET", new)["items"] == []


def _node_port_service(**spec: Any) -> dict:
    port = {"port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30080}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "np", "namespace": "work"},
        "spec": {"type": "NodePort", "ports": [port], "externalTrafficPolicy": "Cluster", **spec},
    }


def test_a_clusterip_service_names_no_node_port(work: Kube):
    """ValidateService: a ClusterIP Service's ports carry no nodePort (kube_services.py)."""
    service = _node_port_service(type="ClusterIP", externalTrafficPolicy=None)
    error = _refused(lambda: work.create(service))
    assert error.status == 422
    assert "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'" in (
        error.message
    )


def test_a_type_change_clears_the_node_ports_it_left_as_they_were(work: Kube):
    """dropTypeDependentFields: NodePort -> ClusterIP frees the node ports left unchanged.

    And the externalTrafficPolicy a NodePort Service needs, when left as it was.
    """
    work.create(_node_port_service())
    changed = work.patch("v1", "Service", "np", {"spec": {"type": "ClusterIP"}}, "work")
    assert changed["spec"]["type"] == "ClusterIP"
    assert "nodePort" not in changed["spec"]["ports"][0]
    assert "externalTrafficPolicy" not in changed["spec"]


def test_a_type_change_keeps_a_node_port_it_adds_and_is_refused(work: Kube):
    work.create(_node_port_service())
    port = {"port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30099}
    patch = {"spec": {"type": "ClusterIP", "externalTrafficPolicy": None, "ports": [port]}}
    error = _refused(lambda: work.patch("v1", "Service", "np", patch, "work"))
    assert error.status == 422 and "may not be used when `type` is 'ClusterIP'" in error.message


def test_a_load_balancers_fields_go_with_its_type_or_are_refused(work: Kube):
    lb = _node_port_service(
        type="LoadBalancer",
        allocateLoadBalancerNodePorts=True,
        loadBalancerClass="example.com/lb",
        loadBalancerSourceRanges=["10.0.0.0/8"],
    )
    work.create(lb)
    patch = {"spec": {"type": "ClusterIP", "externalTrafficPolicy": None}}
    error = _refused(lambda: work.patch("v1", "Service", "np", patch, "work"))
    assert "spec.LoadBalancerSourceRanges: Forbidden: may only be used when `type` is" in (
        error.message
    )
    ingress = {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}
    work.patch("v1", "Service", "np", {"status": ingress}, "work", subresource="status")
    patch["spec"]["loadBalancerSourceRanges"] = None
    changed = work.patch("v1", "Service", "np", patch, "work")
    spec = changed["spec"]
    assert spec["type"] == "ClusterIP"
    assert not {"allocateLoadBalancerNodePorts", "loadBalancerClass"} & spec.keys()
    assert not changed["status"].get("loadBalancer")  # no load balancer stands for it


def test_the_source_ranges_annotation_goes_with_a_load_balancer_or_is_refused(work: Kube):
    """ValidateService checks the annotation as the field (kube_services.py)."""
    key = "service.beta.kubernetes.io/load-balancer-source-ranges"
    service = _node_port_service(type="LoadBalancer")
    service["metadata"]["annotations"] = {key: "10.0.0.0/8"}
    work.create(service)
    patch = {"spec": {"type": "ClusterIP", "externalTrafficPolicy": None}}
    error = _refused(lambda: work.patch("v1", "Service", "np", patch, "work"))
    assert error.status == 422
    assert f"metadata.annotations[{key}]: Forbidden: may only be used when `type` is" in (
        error.message
    )
    patch["metadata"] = {"annotations": {key: None}}
    assert work.patch("v1", "Service", "np", patch, "work")["spec"]["type"] == "ClusterIP"


def test_a_list_is_read_in_chunks_and_a_bad_continue_token_is_refused(work: Kube):
    """ListOptions limit/continue, ListMeta continue and remainingItemCount."""
    for name in ("a", "b", "c"):
        meta = {"name": name, "namespace": "work"}
        work.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    path = "/api/v1/namespaces/work/configmaps"
    first = work.request("GET", path, query={"limit": 2})
    assert [i["metadata"]["name"] for i in first["items"]] == ["a", "b"]
    assert first["metadata"]["remainingItemCount"] == 1
    token = first["metadata"]["continue"]
    rest = work.request("GET", path, query={"limit": 2, "continue": token})
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c"]
    assert "continue" not in rest["metadata"]
    error = _refused(lambda: work.request("GET", path, query={"continue": "not base64!"}))
    assert error.status == 400


# ------------------------------------------------------------------- sizes


def _role(size: int) -> dict:
    """A Role of about `size` bytes as JSON (RBAC validation bounds no rule's length)."""
    rules = [
        {"apiGroups": [""], "resources": [f"r{i}" + "x" * 50_000], "verbs": ["get"]}
        for i in range(size // 50_000)
    ]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "big", "namespace": "work"},
        "rules": rules,
    }


ROLES = "/apis/rbac.authorization.k8s.io/v1/namespaces/work/roles"


def test_a_body_over_3_mib_is_413_before_anything_is_stored(work: Kube):
    """kube-apiserver's MaxRequestBodyBytes (fakes/kube_apiserver.py cites it)."""
    refused = _refused(lambda: work.request("POST", ROLES, body=_role(4 * 1024 * 1024)))
    assert (refused.status, refused.reason) == (413, "RequestEntityTooLarge")
    assert refused.message == "Request entity too large: limit is 3145728"
    assert work.get("rbac.authorization.k8s.io/v1", "Role", "big", "work") is None


def test_an_object_over_1_5_mib_is_etcds_500_and_is_not_stored(work: Kube):
    """The etcd limit (--max-request-bytes) as kube-apiserver answers it: 500, etcd's text."""
    refused = _refused(lambda: work.request("POST", ROLES, body=_role(2 * 1024 * 1024)))
    assert (refused.status, refused.message) == (500, "etcdserver: request is too large")
    assert work.get("rbac.authorization.k8s.io/v1", "Role", "big", "work") is None
    # an object grown past it by a patch is refused too, and stays as it was
    work.request("POST", ROLES, body=_role(1024 * 1024))
    grown = {"rules": _role(1024 * 1024)["rules"] + _role(1024 * 1024)["rules"]}
    patch = lambda: work.request(  # noqa: E731
        "PATCH", f"{ROLES}/big", body=grown, content_type=MERGE
    )
    assert _refused(patch).message == "etcdserver: request is too large"
    kept = work.get("rbac.authorization.k8s.io/v1", "Role", "big", "work")
    assert len(kept["rules"]) == len(_role(1024 * 1024)["rules"])
