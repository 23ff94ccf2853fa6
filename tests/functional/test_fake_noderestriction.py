"""The fake API server refuses what NodeRestriction refuses a kubelet (fakes.kube_noderestriction).

Each test drives the server over HTTP with a node's token (`api.node_token`), as kubelet
`system:node:<name>` in `system:nodes`, and names the rule of upstream
plugin/pkg/admission/noderestriction/admission.go (Kubernetes 1.36) it shows, with the
refusal's words. The request is one the Node authorizer lets through, so that what refuses
it is the admission plugin. The last test runs the real kubectl as a node.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubectl_runner import Kubectl

from fakes.kube_apiserver import ADMIN_TOKEN, FakeKubeApiServer

MERGE = "application/merge-patch+json"
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        for name in ("n1", "n2"):
            server.put_object(f"/api/v1/nodes/{name}", {"metadata": {"labels": {}}})
        yield server


def call(
    api: FakeKubeApiServer,
    method: str,
    path: str,
    token: str,
    body: dict | None = None,
    content_type: str = "application/json",
) -> tuple[int, dict]:
    """One request over HTTP: (status, decoded JSON body)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(api.url + path, data=data, method=method)
    request.add_header("Content-Type", content_type)
    request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def refused(answer: tuple[int, dict], message: str) -> bool:
    """A 403 Forbidden of admission.NewForbidden with exactly `message`."""
    status, body = answer
    assert (status, body.get("reason"), body.get("message")) == (403, "Forbidden", message)
    return True


def node_uid(api: FakeKubeApiServer, name: str) -> str:
    return api.get_object(f"/api/v1/nodes/{name}")["metadata"]["uid"]


def mirror_pod(api: FakeKubeApiServer, name: str, node: str = "n1", **spec: object) -> dict:
    """A mirror pod as kubelet posts it: annotated, bound, owned by its Node."""
    owner = {
        "apiVersion": "v1",
        "kind": "Node",
        "name": node,
        "uid": node_uid(api, node),
        "controller": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {"kubernetes.io/config.mirror": "hash"},
            "ownerReferences": [owner],
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}], **spec},
    }


def bound_pod(api: FakeKubeApiServer, name: str, node: str, **spec: object) -> None:
    """A pod the scheduler bound to `node` (stored directly, as the scheduler's write)."""
    body = {"nodeName": node, "containers": [{"name": "c", "image": "i"}], **spec}
    api.put_object(f"{PODS}/{name}", {"metadata": {"labels": {"app": "a"}}, "spec": body})


# ---------------------------------------------------------------- nodes


def test_a_node_creates_and_modifies_only_its_own_node(api):
    # admitNode: `node %q is not allowed to modify node %q` (the Node authorizer lets any
    # node create/update/patch nodes: NodeRestriction is what confines it).
    token = api.node_token("n3")
    assert call(api, "POST", "/api/v1/nodes", token, {"metadata": {"name": "n3"}})[0] == 201
    assert refused(
        call(api, "POST", "/api/v1/nodes", token, {"metadata": {"name": "n4"}}),
        'nodes "n4" is forbidden: node "n3" is not allowed to modify node "n4"',
    )
    patch = {"metadata": {"labels": {"foo": "bar"}}}
    assert refused(
        call(api, "PATCH", "/api/v1/nodes/n1", token, patch, MERGE),
        'nodes "n1" is forbidden: node "n3" is not allowed to modify node "n1"',
    )
    assert call(api, "PATCH", "/api/v1/nodes/n3", token, patch, MERGE)[0] == 200


@pytest.mark.parametrize(
    "labels, allowed",
    [
        # getForbiddenLabels: the node-restriction.kubernetes.io prefix and its subdomains
        ({"node-restriction.kubernetes.io/gpu": "a100"}, False),
        ({"foo.node-restriction.kubernetes.io/gpu": "a100"}, False),
        # kubernetes.io and k8s.io labels outside the kubelet's (well_known_labels.go)
        ({"node-role.kubernetes.io/worker": ""}, False),
        ({"other.k8s.io/foo": "x"}, False),
        # the kubelet's own labels and prefixes, and labels outside those domains
        (
            {
                "kubernetes.io/hostname": "n3",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "p4d",
                "topology.kubernetes.io/zone": "z",
                "node.kubernetes.io/foo": "x",
                "kubelet.kubernetes.io/foo": "x",
                "nvidia.com/gpu.present": "true",
                "foo": "bar",
            },
            True,
        ),
    ],
)
def test_a_node_registers_only_with_labels_it_may_set(api, labels, allowed):
    # admitNode create: `node %q is not allowed to set the following labels: %s`.
    token = api.node_token("n3")
    answer = call(
        api, "POST", "/api/v1/nodes", token, {"metadata": {"name": "n3", "labels": labels}}
    )
    if allowed:
        assert answer[0] == 201
    else:
        assert refused(
            answer,
            f'nodes "n3" is forbidden: node "n3" is not allowed to set the following labels: '
            f"{', '.join(sorted(labels))}",
        )


def test_a_node_may_not_register_with_a_config_source(api):
    # admitNode create: a non-nil spec.configSource is refused (its words say "pods").
    token = api.node_token("n3")
    source = {"configMap": {"name": "c", "namespace": "kube-system", "kubeletConfigKey": "k"}}
    body = {"metadata": {"name": "n3"}, "spec": {"configSource": source}}
    assert refused(
        call(api, "POST", "/api/v1/nodes", token, body),
        'nodes "n3" is forbidden: node "n3" is not allowed to create pods with a non-nil '
        "configSource",
    )


def test_a_node_may_not_change_a_forbidden_label_on_update(api):
    # admitNode update: `is not allowed to modify labels: %s` (added, changed or removed).
    api.put_object(
        "/api/v1/nodes/n1", {"metadata": {"labels": {"node-role.kubernetes.io/gpu": ""}}}
    )
    token = api.node_token("n1")
    for labels, key in (
        ({"node-role.kubernetes.io/gpu": None}, "node-role.kubernetes.io/gpu"),
        ({"node-restriction.kubernetes.io/pool": "a"}, "node-restriction.kubernetes.io/pool"),
    ):
        assert refused(
            call(api, "PATCH", "/api/v1/nodes/n1", token, {"metadata": {"labels": labels}}, MERGE),
            f'nodes "n1" is forbidden: is not allowed to modify labels: {key}',
        )
    allowed = {"metadata": {"labels": {"kubernetes.io/hostname": "n1", "team": "ml"}}}
    assert call(api, "PATCH", "/api/v1/nodes/n1", token, allowed, MERGE)[0] == 200


def test_a_node_may_not_modify_its_own_taints(api):
    # admitNode update: `node %q is not allowed to modify taints` - neither add nor remove.
    #
    # The finding for issue 32: a node-local watcher acting with the node's own identity cannot
    # put a NoExecute taint on its Node at 1.36 (admission.go admitNode, "Don't allow a node to
    # update its own taints"); the control plane (here kubeadm's admin) can.
    #
    token = api.node_token("n1")
    taint = {"key": "gpu-k8s/gpu-unhealthy", "effect": "NoExecute"}
    message = 'nodes "n1" is forbidden: node "n1" is not allowed to modify taints'
    patch = {"spec": {"taints": [taint]}}
    assert refused(call(api, "PATCH", "/api/v1/nodes/n1", token, patch, MERGE), message)
    node = api.get_object("/api/v1/nodes/n1")
    node["spec"] = {"taints": [taint]}
    assert refused(call(api, "PUT", "/api/v1/nodes/n1", token, node), message)
    assert call(api, "PATCH", "/api/v1/nodes/n1", ADMIN_TOKEN, patch, MERGE)[0] == 200
    assert refused(
        call(api, "PATCH", "/api/v1/nodes/n1", token, {"spec": {"taints": None}}, MERGE), message
    )
    # its status (conditions) it keeps writing, taints untouched
    status = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert call(api, "PATCH", "/api/v1/nodes/n1/status", token, status, MERGE)[0] == 200


def test_a_node_may_not_modify_its_owner_references(api):
    # admitNode update: `node %q is not allowed to modify ownerReferences` (PR #133467,
    # CVE-2025-5187: a node could otherwise have itself garbage-collected and re-register).
    token = api.node_token("n1")
    owner = {"apiVersion": "v1", "kind": "Namespace", "name": "x", "uid": "u"}
    assert refused(
        call(
            api,
            "PATCH",
            "/api/v1/nodes/n1",
            token,
            {"metadata": {"ownerReferences": [owner]}},
            MERGE,
        ),
        'nodes "n1" is forbidden: node "n1" is not allowed to modify ownerReferences',
    )


# ---------------------------------------------------------------- pods


def test_a_node_creates_only_mirror_pods_of_its_own(api):
    # admitPodCreate: the mirror pod annotation, then spec.nodeName.
    token = api.node_token("n1")
    plain = mirror_pod(api, "p")
    del plain["metadata"]["annotations"]
    assert refused(
        call(api, "POST", PODS, token, plain),
        'pods "p" is forbidden: pod does not have "kubernetes.io/config.mirror" annotation, '
        'node "n1" can only create mirror pods',
    )
    other = mirror_pod(api, "p")
    other["spec"]["nodeName"] = "n2"
    assert refused(
        call(api, "POST", PODS, token, other),
        'pods "p" is forbidden: node "n1" can only create pods with spec.nodeName set to itself',
    )
    assert call(api, "POST", PODS, token, mirror_pod(api, "p"))[0] == 201


@pytest.mark.parametrize(
    "change, reason",
    [
        (
            lambda o: o.clear(),
            'node "n1" can only create pods with an owner reference set to itself',
        ),
        (
            lambda o: o.append(dict(o[0])),
            'node "n1" can only create pods with a single owner reference set to itself',
        ),
        (
            lambda o: o[0].update(name="n2"),
            'node "n1" can only create pods with an owner reference set to itself',
        ),
        (
            lambda o: o[0].update(controller=False),
            'node "n1" can only create pods with a controller owner reference set to itself',
        ),
        (
            lambda o: o[0].update(blockOwnerDeletion=True),
            'node "n1" must not set blockOwnerDeletion on an owner reference',
        ),
        (lambda o: o[0].update(uid="stale"), "node n1 UID mismatch: expected stale got {uid}"),
    ],
    ids=["none", "two", "other-node", "not-controller", "block-deletion", "uid"],
)
def test_a_mirror_pod_is_owned_by_its_node_alone(api, change, reason):
    # admitPodCreate: one controller ownerReference to the node itself, its uid current.
    token = api.node_token("n1")
    pod = mirror_pod(api, "p")
    change(pod["metadata"].setdefault("ownerReferences", []))
    reason = reason.format(uid=node_uid(api, "n1"))
    assert refused(call(api, "POST", PODS, token, pod), f'pods "p" is forbidden: {reason}')


@pytest.mark.parametrize(
    "spec, resource",
    [
        ({"serviceAccountName": "sa"}, "serviceaccounts"),
        ({"imagePullSecrets": [{"name": "reg"}]}, "secrets"),
        (
            {"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}]}]},
            "configmaps",
        ),
        (
            {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "d"}}]},
            "persistentvolumeclaims",
        ),
        (
            {
                "volumes": [
                    {
                        "name": "v",
                        "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
                    }
                ]
            },
            "serviceaccounts (via projected volumes)",
        ),
        ({"volumes": [{"name": "v", "csi": {"driver": "d"}}]}, "csidrivers (via CSI volumes)"),
    ],
)
def test_a_mirror_pod_references_no_other_api_object(api, spec, resource):
    # admitPodCreate, pkg/api/pod/util.go HasAPIObjectReference:
    # `node %q can not create pods that reference %s`.
    token = api.node_token("n1")
    assert refused(
        call(api, "POST", PODS, token, mirror_pod(api, "p", **spec)),
        f'pods "p" is forbidden: node "n1" can not create pods that reference {resource}',
    )
    local = {
        "volumes": [{"name": "h", "hostPath": {"path": "/etc"}}, {"name": "e", "emptyDir": {}}]
    }
    assert call(api, "POST", PODS, token, mirror_pod(api, "q", **local))[0] == 201


def test_a_node_deletes_only_pods_bound_to_it(api):
    # admitPod delete: `node %q can only delete pods with spec.nodeName set to itself`; a pod
    # the informer lacks is the lister's NotFound (singular `pod`).
    bound_pod(api, "mine", "n1")
    bound_pod(api, "theirs", "n2")
    token = api.node_token("n1")
    assert refused(
        call(api, "DELETE", f"{PODS}/theirs", token),
        'pods "theirs" is forbidden: node "n1" can only delete pods with spec.nodeName set to '
        "itself",
    )
    assert call(api, "DELETE", f"{PODS}/mine", token)[0] == 200
    status, body = call(api, "DELETE", f"{PODS}/gone", token)
    assert (status, body["reason"], body["message"]) == (404, "NotFound", 'pod "gone" not found')


def test_a_node_may_not_update_a_pod(api):
    # admitPod: any other operation is `unexpected operation %q, node %q can only create and
    # delete mirror pods` (the Node authorizer already refuses update and patch of pods, so this
    # shows through a ClusterRole granting them).
    bound_pod(api, "mine", "n1")
    role = {
        "metadata": {"name": "pod-writer"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}],
    }
    api.put_object("/apis/rbac.authorization.k8s.io/v1/clusterroles/pod-writer", role)
    binding = {
        "metadata": {"name": "pod-writer"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "pod-writer",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:node:n1"}
        ],
    }
    api.put_object("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/pod-writer", binding)
    patch = {"metadata": {"labels": {"app": "b"}}}
    assert refused(
        call(api, "PATCH", f"{PODS}/mine", api.node_token("n1"), patch, MERGE),
        'pods "mine" is forbidden: unexpected operation "UPDATE", node "n1" can only create and '
        "delete mirror pods",
    )


def test_a_node_updates_the_status_of_its_own_pods_without_relabelling_them(api):
    # admitPodStatus: only pods bound to it; `node %q cannot update labels through pod status`.
    bound_pod(api, "mine", "n1")
    bound_pod(api, "theirs", "n2")
    token = api.node_token("n1")
    running = {"status": {"phase": "Running"}}
    assert refused(
        call(api, "PATCH", f"{PODS}/theirs/status", token, running, MERGE),
        'pods "theirs" is forbidden: node "n1" can only update pod status for pods with '
        "spec.nodeName set to itself",
    )
    assert call(api, "PATCH", f"{PODS}/mine/status", token, running, MERGE)[0] == 200
    pod = api.get_object(f"{PODS}/mine")
    pod["metadata"]["labels"] = {"app": "b"}
    assert refused(
        call(api, "PUT", f"{PODS}/mine/status", token, pod),
        'pods "mine" is forbidden: node "n1" cannot update labels through pod status',
    )


def test_a_node_evicts_only_pods_bound_to_it(api):
    # admitPodEviction: `node %s can only evict pods with spec.nodeName set to itself`.
    bound_pod(api, "mine", "n1")
    bound_pod(api, "theirs", "n2")
    token = api.node_token("n1")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "theirs"}}
    assert refused(
        call(api, "POST", f"{PODS}/theirs/eviction", token, eviction),
        'pods "theirs" is forbidden: node n1 can only evict pods with spec.nodeName set to itself',
    )
    eviction["metadata"]["name"] = "mine"
    assert call(api, "POST", f"{PODS}/mine/eviction", token, eviction)[0] == 201
    status, body = call(api, "POST", f"{PODS}/gone/eviction", token, eviction)
    assert (status, body["message"]) == (404, 'pod "gone" not found')


# ---------------------------------------------------------------- other resources


def test_a_node_requests_tokens_only_bound_to_its_own_pods(api):
    # admitServiceAccount: a node's TokenRequest is bound to a pod on that node, for an
    # audience the pod projects (ServiceAccountNodeAudienceRestriction, on since 1.33).
    api.put_object("/api/v1/namespaces/default/serviceaccounts/sa", {})
    projected = [
        {
            "name": "t",
            "projected": {
                "sources": [{"serviceAccountToken": {"audience": "vault", "path": "token"}}]
            },
        }
    ]
    bound_pod(api, "mine", "n1", serviceAccountName="sa", volumes=projected)
    bound_pod(api, "theirs", "n2", serviceAccountName="sa")
    token = api.node_token("n1")
    path = "/api/v1/namespaces/default/serviceaccounts/sa/token"

    def request(pod: str | None, *audiences: str) -> tuple[int, dict]:
        spec: dict = {"audiences": list(audiences)}
        if pod:
            uid = api.get_object(f"{PODS}/{pod}")["metadata"]["uid"]
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}
        return call(api, "POST", path, token, {"spec": spec})

    prefix = 'serviceaccounts "sa" is forbidden: '
    assert refused(request(None, "vault"), prefix + "node requested token not bound to a pod")
    assert refused(
        request("theirs", "vault"),
        prefix + "node requested token bound to a pod scheduled on a different node",
    )
    assert refused(
        request("mine", "other"),
        prefix + 'audience "other" not found in pod spec volume, system:node:n1 is not '
        "authorized to request tokens for this audience",
    )
    assert refused(
        request("mine", "vault", "x"), prefix + "node may only request 0 or 1 audiences"
    )
    status, body = request("mine", "vault")
    assert status == 201 and body["status"]["token"]


def test_a_node_creates_only_its_own_lease(api):
    # admitLease: `can only access node lease with the same name as the requesting node` (on
    # create the Node authorizer cannot see the name: admission refuses).
    token = api.node_token("n1")
    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "n2"}}
    assert refused(
        call(api, "POST", leases, token, body),
        'leases.coordination.k8s.io "n2" is forbidden: can only access node lease with the same '
        "name as the requesting node",
    )
    body["metadata"]["name"] = "n1"
    assert call(api, "POST", leases, token, body)[0] == 201


def test_a_node_updates_only_the_capacity_and_conditions_of_a_claim(api):
    # admitPVCStatus: a node may change status.capacity and status.conditions only.
    claim = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    api.put_object("/api/v1/namespaces/default/persistentvolumeclaims/data", {"spec": claim})
    claim = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    bound_pod(api, "mine", "n1", volumes=claim)
    token = api.node_token("n1")
    path = "/api/v1/namespaces/default/persistentvolumeclaims/data/status"
    grown = {"status": {"capacity": {"storage": "2Gi"}}}
    assert call(api, "PATCH", path, token, grown, MERGE)[0] == 200
    status, body = call(api, "PATCH", path, token, {"status": {"phase": "Lost"}}, MERGE)
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"].startswith(
        'persistentvolumeclaims "data" is forbidden: node "n1" is not allowed to update fields '
        "other than status.quantity and status.conditions: "
    )


def test_other_users_are_not_restricted(api):
    # Admit: `Our job is just to restrict nodes` - a ServiceAccount-less admin passes.
    patch = {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    assert call(api, "PATCH", "/api/v1/nodes/n2", ADMIN_TOKEN, patch, MERGE)[0] == 200
    labels = {"metadata": {"labels": {"node-role.kubernetes.io/gpu": ""}}}
    assert call(api, "PATCH", "/api/v1/nodes/n2", ADMIN_TOKEN, labels, MERGE)[0] == 200


# ---------------------------------------------------------------- the real kubectl


def test_kubectl_as_a_node_may_not_taint_or_role_label_its_node(kubectl_binary: Path):
    # kubectl v1.36.3 with a kubelet's credentials: `kubectl taint` and `kubectl label` of its
    # own Node are refused by NodeRestriction (admitNode), as against a kubeadm cluster.
    with FakeKubeApiServer(tls=True) as api:
        api.put_object("/api/v1/nodes/n1", {"metadata": {"labels": {}}})
        kubectl = Kubectl(kubectl_binary, api, token=api.node_token("n1"))
        try:
            done = kubectl.run("taint", "node", "n1", "gpu=bad:NoExecute", check=False)
            assert done.returncode == 1
            assert (
                'Error from server (Forbidden): nodes "n1" is forbidden: node "n1" is not '
                "allowed to modify taints" in done.stderr
            )
            done = kubectl.run("label", "node", "n1", "node-role.kubernetes.io/gpu=", check=False)
            assert done.returncode == 1
            assert (
                'nodes "n1" is forbidden: is not allowed to modify labels: '
                "node-role.kubernetes.io/gpu" in done.stderr
            )
            assert "labeled" in kubectl.run("label", "node", "n1", "team=ml").stdout
        finally:
            kubectl.close()
