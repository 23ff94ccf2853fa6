"""Root on one GPU node is not the cluster: what a worker's credential may do (issue 29 item 2).

Review efs-security.md S2: every worker held one ServiceAccount token (the control plane's
`rbac.worker_grant()`) that patches every Node, reads every pod's log, evicts any pod and
creates pods in gpu-k8s-system. A worker acts as its kubelet instead: the client
certificate of /etc/kubernetes/kubelet.conf (`system:node:<name>` in `system:nodes`), which
kube-apiserver's Node authorizer and NodeRestriction confine to its own Node and the pods
bound to it (fakes/kube_auth.py and fakes/kube_noderestriction.py name the upstream rules).

Each probe is a real request, over TLS, with the real identity, refused by the fake as
kube-apiserver 1.36 refuses it. The shared token is probed as a worker that kept it would
hold it after the control plane's leader removed the grant (every worker says
`node-identity`; access.py `worker_kubeconfig` runs `rbac.remove` on the worker grant):
its ServiceAccount and token Secret are gone, so kube-apiserver no longer authenticates it
(401: the legacy token authenticator looks the Secret up, kubernetes
pkg/serviceaccount/legacy.go).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes.kube_apiserver import FakeKubeApiServer
from fakes.kube_grants import rbac, store_grant, worker_grant

OWN, OTHER = "gpu-node-1", "gpu-node-2"
SYSTEM = "gpu-k8s-system"
SHARED_TOKEN = "shared-worker-token"


def _pod(name: str, node: str, namespace: str = "team-a") -> tuple[str, dict]:
    spec = {"nodeName": node, "containers": [{"name": "main", "image": "busybox:1.37"}]}
    obj = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
    return f"/api/v1/namespaces/{namespace}/pods/{name}", obj


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    """Two GPU nodes, a pod on each; the workers' shared grant made, then removed by the CP.

    The control plane's own `rbac.remove` deletes it (as its leader does once every
    worker acts as its kubelet) with kubeadm's admin identity, over the real API.
    """
    with FakeKubeApiServer(tls=True) as server:
        store_grant(server, worker_grant(), SHARED_TOKEN)
        with Kube.from_kubeconfig(server.kubeconfig(), retries=0) as admin:
            assert rbac().remove(admin, worker_grant())
        server.put_object("/api/v1/namespaces/team-a", {"metadata": {"name": "team-a"}})
        for node in (OWN, OTHER):
            labels = {"kubernetes.io/hostname": node}
            server.put_object(f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}})
        for name, node in (("mine", OWN), ("theirs", OTHER)):
            path, obj = _pod(name, node)
            server.put_object(path, obj)
            server.set_pod_log("team-a", name, f"secret output of {name}\n")
        yield server


def node_kube(api: FakeKubeApiServer, node: str = OWN) -> Kube:
    """The worker on `node` acting as its kubelet (kubelet-client-current.pem)."""
    return Kube.from_kubeconfig(api.certificate_kubeconfig(api.node_certificate(node)), retries=0)


def shared_kube(api: FakeKubeApiServer) -> Kube:
    """The worker acting with the shared ServiceAccount token the CP handed every worker."""
    return Kube.from_kubeconfig(api.kubeconfig(token=SHARED_TOKEN), retries=0)


def refused(action: Callable[[], object]) -> KubeError:
    """`action` is refused: 401 (no such credential) or 403 (not allowed)."""
    with pytest.raises(KubeError) as e:
        action()
    assert e.value.status in (401, 403), e.value
    return e.value


def _validation_pod(namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {
            "nodeName": OWN,
            "restartPolicy": "Never",
            "containers": [{"name": "probe", "image": "busybox:1.37"}],
        },
    }


def _eviction(name: str) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "team-a"},
    }


PROBES: dict[str, Callable[[Kube], object]] = {
    "patch another Node": lambda kube: kube.patch(
        "v1", "Node", OTHER, {"metadata": {"labels": {"nvidia.com/gpu.present": "false"}}}
    ),
    "cordon another Node": lambda kube: kube.patch(
        "v1", "Node", OTHER, {"spec": {"unschedulable": True}}
    ),
    "create a pod in gpu-k8s-system": lambda kube: kube.create(_validation_pod(SYSTEM)),
    "create a pod in a team's namespace": lambda kube: kube.create(_validation_pod("team-a")),
    "read another node's pod log": lambda kube: kube.pod_logs("theirs", "team-a"),
    "evict a pod on another node": lambda kube: kube.request(
        "POST", kube.path("v1", "Pod", "team-a", "theirs", "eviction"), body=_eviction("theirs")
    ),
    "list every pod": lambda kube: kube.list("v1", "Pod"),
}


@pytest.mark.parametrize("probe", list(PROBES))
def test_a_node_identity_is_refused_beyond_its_own_node(api, probe):
    with node_kube(api) as kube:
        refused(lambda: PROBES[probe](kube))


@pytest.mark.parametrize("probe", list(PROBES))
def test_the_shared_worker_token_is_refused_beyond_its_own_node(api, probe):
    with shared_kube(api) as kube:
        assert refused(lambda: PROBES[probe](kube)).status == 401  # no such credential


def test_a_node_identity_labels_cordons_and_drains_its_own_node(api):
    """What the worker needs for itself: the Node authorizer allows it, NodeRestriction too."""
    with node_kube(api) as kube:
        labels = {"nvidia.com/gpu.present": "true", "gpu-k8s.io/team": "a"}
        kube.patch("v1", "Node", OWN, {"metadata": {"labels": labels}})
        kube.patch("v1", "Node", OWN, {"spec": {"unschedulable": True}})
        pods = kube.list("v1", "Pod", field_selector=f"spec.nodeName={OWN}")
        assert [p["metadata"]["name"] for p in pods] == ["mine"]
        path = kube.path("v1", "Pod", "team-a", "mine", "eviction")
        kube.request("POST", path, body=_eviction("mine"))
    node = api.get_object(f"/api/v1/nodes/{OWN}")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["gpu-k8s.io/team"] == "a"
    assert api.get_object("/api/v1/namespaces/team-a/pods/mine") is None


def test_a_node_identity_cannot_change_its_own_taints_or_read_its_own_pods_logs(api):
    """NodeRestriction keeps taints to the control plane; logs are not the node's to read.

    plugin/pkg/admission/noderestriction/admission.go admitNode: "node ... is not allowed
    to modify taints"; node_authorizer.go authorizePod has no opinion on pods/log and no
    RBAC binding gives system:nodes one (bootstrappolicy: the system:node ClusterRole is
    bound to nobody since 1.8).
    """
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    with node_kube(api) as kube:
        error = refused(lambda: kube.patch("v1", "Node", OWN, {"spec": {"taints": [taint]}}))
        assert "is not allowed to modify taints" in error.message
        refused(lambda: kube.pod_logs("mine", "team-a"))
