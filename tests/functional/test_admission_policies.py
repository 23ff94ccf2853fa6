"""Root on a node cannot use its DaemonSets' cluster-wide rights elsewhere (issue 29, left 1-2).

The control plane applies ValidatingAdmissionPolicies (admission_policies.py) keyed on the
node a pod-bound ServiceAccount token names. Each probe makes a real request with the real
identity: the token kubelet would mount into the DaemonSet's pod on node A (a TokenRequest
bound to that pod, so the fake API server puts `authentication.kubernetes.io/node-name: A`
into its user, as kube-apiserver 1.32+ does), or the storage provisioner's grant token;
the fake refuses with the policy's denial as kube-apiserver does (fakes.kube_admission
ValidatingAdmissionPolicies, the CEL evaluated by cel-python).
"""

from __future__ import annotations

import pytest
from charm_modules import load
from test_kube_api_escalation import call

from fakes import kube_grants
from fakes.kube_apiserver import ADMIN_TOKEN

CP = "kubernetes-control-plane"
MERGE = "application/merge-patch+json"


@pytest.fixture
def policies(kube):
    module = load(CP, "admission_policies")
    for obj in module.manifests():
        kube.apply(obj, field_manager="kubernetes-control-plane")
    return module


def _daemonset_token(kube_api, account: tuple[str, str], node: str) -> str:
    """The token kubelet mounts into `account`'s DaemonSet pod on `node` (bound to the pod)."""
    namespace, name = account
    for path, obj in (
        (f"/api/v1/namespaces/{namespace}", {"metadata": {"name": namespace}}),
        (f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}", {"metadata": {"name": name}}),
    ):
        if kube_api.get_object(path) is None:
            kube_api.put_object(path, obj)
    pod = f"{name}-{node}"
    kube_api.put_object(
        f"/api/v1/namespaces/{namespace}/pods/{pod}",
        {
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {"serviceAccountName": name, "nodeName": node, "containers": []},
        },
    )
    request = {"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod}}}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    status, answer = call(kube_api, ADMIN_TOKEN, "POST", path, request)
    assert status == 201, answer
    return answer["status"]["token"]


def _nodes(kube_api, *names: str) -> None:
    for name in names:
        kube_api.put_object(f"/api/v1/nodes/{name}", {"metadata": {"name": name}})


def _grant_cluster_role(kube_api, account: tuple[str, str], rules: list[dict]) -> None:
    """The DaemonSet's upstream ClusterRole (what it holds today, cluster-wide)."""
    name = f"probe:{account[1]}"
    kube_api.put_object(
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}",
        {"metadata": {"name": name}, "rules": rules},
    )
    kube_api.put_object(
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}",
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account[1], "namespace": account[0]}],
        },
    )


def test_a_bound_token_names_its_pods_node(kube_api):
    _nodes(kube_api, "node-a")
    token = _daemonset_token(kube_api, ("gpu-k8s-efs-csi", "efs-csi-node-sa"), "node-a")
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    status, answer = call(
        kube_api, token, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body
    )
    assert status == 201, answer
    extra = answer["status"]["userInfo"]["extra"]
    assert extra["authentication.kubernetes.io/node-name"] == ["node-a"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["efs-csi-node-sa-node-a"]
    # a pod of another ServiceAccount cannot be named (token.go)
    kube_api.put_object(
        "/api/v1/namespaces/gpu-k8s-efs-csi/serviceaccounts/other", {"metadata": {"name": "other"}}
    )
    request = {"spec": {"boundObjectRef": {"kind": "Pod", "name": "efs-csi-node-sa-node-a"}}}
    path = "/api/v1/namespaces/gpu-k8s-efs-csi/serviceaccounts/other/token"
    status, answer = call(kube_api, ADMIN_TOKEN, "POST", path, request)
    assert (status, answer["message"]) == (
        400,
        'cannot bind token for serviceaccount "other" to pod running with different '
        "serviceaccount name.",
    )
    # the token dies with its pod
    kube_api.delete_object("/api/v1/namespaces/gpu-k8s-efs-csi/pods/efs-csi-node-sa-node-a")
    status, _ = call(kube_api, token, "GET", "/api/v1/nodes/node-a")
    assert status == 401


NODE_PATCH = {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.10gb"}}}


@pytest.mark.parametrize("account", ["EFS_CSI_NODE", "MIG_MANAGER", "CALICO_NODE"])
def test_a_daemonset_token_may_patch_only_its_own_node(account, kube_api, policies):
    account = getattr(policies, account)
    _nodes(kube_api, "node-a", "node-b")
    _grant_cluster_role(
        kube_api,
        account,
        [{"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "patch"]}],
    )
    token = _daemonset_token(kube_api, account, "node-a")
    status, answer = call(kube_api, token, "PATCH", "/api/v1/nodes/node-b", NODE_PATCH, MERGE)
    short = policies.NODE_BOUND[account][0]
    name = f"gpu-k8s-node-bound-{short}"
    cause = (
        f"ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: "
        "this user may only modify the node its pod runs on"
    )
    assert (status, answer["reason"]) == (403, "Forbidden"), answer
    assert answer["message"] == f'nodes "node-b" is forbidden: {cause}'
    assert answer["details"]["causes"] == [{"message": cause}]
    assert "labels" not in kube_api.get_object("/api/v1/nodes/node-b")["metadata"]

    status, answer = call(kube_api, token, "PATCH", "/api/v1/nodes/node-a", NODE_PATCH, MERGE)
    assert status == 200, answer
    assert (
        kube_api.get_object("/api/v1/nodes/node-a")["metadata"]["labels"]
        == (NODE_PATCH["metadata"]["labels"])
    )


def test_a_token_of_the_account_that_names_no_node_is_refused(kube_api, policies):
    account = policies.MIG_MANAGER
    _nodes(kube_api, "node-a")
    _grant_cluster_role(
        kube_api, account, [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
    )
    _daemonset_token(kube_api, account, "node-a")  # the namespace and account
    path = f"/api/v1/namespaces/{account[0]}/serviceaccounts/{account[1]}/token"
    status, answer = call(kube_api, ADMIN_TOKEN, "POST", path, {"spec": {}})
    token = answer["status"]["token"]
    status, answer = call(kube_api, token, "PATCH", "/api/v1/nodes/node-a", NODE_PATCH, MERGE)
    assert status == 403, answer
    assert 'must have a "authentication.kubernetes.io/node-name" claim' in answer["message"]


def test_calico_node_may_write_the_status_only_of_pods_on_its_node(kube_api, policies):
    account = policies.CALICO_NODE
    _nodes(kube_api, "node-a", "node-b")
    _grant_cluster_role(
        kube_api, account, [{"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}]
    )
    token = _daemonset_token(kube_api, account, "node-a")
    kube_api.put_object("/api/v1/namespaces/team", {"metadata": {"name": "team"}})
    for node in ("node-a", "node-b"):
        kube_api.put_object(
            f"/api/v1/namespaces/team/pods/on-{node}",
            {
                "metadata": {"name": f"on-{node}", "namespace": "team"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": "Running"},
            },
        )
    patch = {"status": {"podIP": "192.168.1.7"}}
    status, answer = call(
        kube_api, token, "PATCH", "/api/v1/namespaces/team/pods/on-node-b/status", patch, MERGE
    )
    assert status == 403, answer
    assert answer["message"].startswith(
        'pods "on-node-b" is forbidden: ValidatingAdmissionPolicy '
        "'gpu-k8s-node-bound-calico-node' with binding 'gpu-k8s-node-bound-calico-node' denied"
        " request: this user may only modify pods on the node its pod runs on"
    )
    status, answer = call(
        kube_api, token, "PATCH", "/api/v1/namespaces/team/pods/on-node-a/status", patch, MERGE
    )
    assert status == 200, answer


AP_A, AP_B = "fsap-0123456789abcdef0", "fsap-0bbbbbbbbbbbbbbbb"
PROVISIONER = ("efs-storage", "efs-storage")


def _provisioner_token(kube_api, served: dict[str, str] | None = None) -> str:
    """efs-storage's grant token; the control plane admitted it `served` (namespace -> AP).

    By default it serves team-a through AP_A (lib kube_api storage-consumers).
    """
    efs = load("efs-storage", "literals")
    grant = kube_grants.consumer_grant(
        "efs-storage", "efs-storage", efs.NAMESPACED_RULES, efs.CLUSTER_RULES, provisioner=True
    )
    token = kube_grants.store_grant(kube_api, grant, "provisioner-token")
    kube_grants.admit_served(kube_api, PROVISIONER, {"team-a": AP_A} if served is None else served)
    return token


def _volume(name: str, source: dict) -> dict:
    """A volume labelled as the provisioner's own (gpu-k8s-efs-own-volumes asks for it)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"gpu-k8s.io/efs-app": "efs-storage"}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            **source,
        },
    }


REFUSED = {
    "hostPath": {"hostPath": {"path": "/", "type": "Directory"}},
    "another driver": {"csi": {"driver": "hostpath.csi.k8s.io", "volumeHandle": "x"}},
    "efs driver, another handle": {
        "csi": {"driver": "efs.csi.aws.com", "volumeHandle": "fs-0123abcd:/:fsap-0123abcd"}
    },
    "nfs elsewhere": {"nfs": {"server": "10.0.0.9", "path": "/"}},
}
ALLOWED = {
    "efs access point": {
        "csi": {"driver": "efs.csi.aws.com", "volumeHandle": "fs-0123abcd::fsap-0123456789abcdef0"}
    },
    "efs nfs": {"nfs": {"server": "fs-0123abcd.efs.us-east-1.amazonaws.com", "path": "/"}},
}


@pytest.mark.parametrize("source", REFUSED, ids=list(REFUSED))
def test_the_provisioner_cannot_create_a_volume_that_is_not_efs(source, kube_api):
    token = _provisioner_token(kube_api)
    status, answer = call(
        kube_api, token, "POST", "/api/v1/persistentvolumes", _volume("pv-x", REFUSED[source])
    )
    assert status == 403, answer
    assert answer["message"].startswith(
        'persistentvolumes "pv-x" is forbidden: ValidatingAdmissionPolicy '
        "'gpu-k8s-efs-volumes-only' with binding 'gpu-k8s-efs-volumes-only' denied request: "
        "a PersistentVolume must be an EFS access point"
    )
    assert kube_api.get_object("/api/v1/persistentvolumes/pv-x") is None


@pytest.mark.parametrize("source", ALLOWED, ids=list(ALLOWED))
def test_the_provisioner_creates_efs_volumes(source, kube_api):
    """Named as its own and pre-bound into a consumer's namespace (gpu-k8s-efs-within-consumers).

    Updated when that policy came: an unbound volume named anything is refused now.
    """
    point = AP_A if "csi" in ALLOWED[source] else ""
    token = _provisioner_token(kube_api, {"team-a": point})
    volume = _volume("efs-storage-team-a-x", ALLOWED[source])
    volume["spec"]["claimRef"] = {"namespace": "team-a", "name": "efs-storage-team-a"}
    status, answer = call(kube_api, token, "POST", "/api/v1/persistentvolumes", volume)
    assert status == 201, answer


def test_the_cluster_admin_is_not_fenced(kube_api, policies):
    status, answer = call(
        kube_api,
        ADMIN_TOKEN,
        "POST",
        "/api/v1/persistentvolumes",
        _volume("pv-x", REFUSED["hostPath"]),
    )
    assert status == 201, answer


# --- Calico's accounts, with upstream's ClusterRoles (calico.yaml at v3.32.1) ---------------

CALICO_CRD = "/apis/crd.projectcalico.org/v1"


@pytest.fixture
def calico(kube_api, policies):
    """Calico's ServiceAccounts, CRDs and upstream ClusterRoles, as the charm applies them."""
    from fakes.addons import calico_objects

    kinds = {"ServiceAccount", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    _nodes(kube_api, "node-a", "node-b")
    for obj in calico_objects():
        if obj["kind"] in kinds:
            status, answer = call(kube_api, ADMIN_TOKEN, "POST", _collection(obj), obj)
            assert status == 201, answer
    kube_api.put_object("/api/v1/namespaces/team", {"metadata": {"name": "team"}})
    for node in ("node-a", "node-b"):
        kube_api.put_object(
            f"/api/v1/namespaces/team/pods/on-{node}",
            {
                "metadata": {
                    "name": f"on-{node}",
                    "namespace": "team",
                    "labels": {"app": "trainer"},
                    "annotations": {"team": "a"},
                },
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": "Running", "podIP": "10.1.0.5"},
            },
        )
    return policies


def _collection(obj: dict) -> str:
    kind, namespace = obj["kind"], obj["metadata"].get("namespace")
    if kind == "ServiceAccount":
        return f"/api/v1/namespaces/{namespace}/serviceaccounts"
    if kind == "CustomResourceDefinition":
        return "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    return f"/apis/rbac.authorization.k8s.io/v1/{kind.lower()}s"


def _cni_token(kube_api, calico_node_token: str) -> str:
    """What calico-node does for the CNI binary (its ClusterRole's serviceaccounts/token)."""
    path = "/api/v1/namespaces/kube-system/serviceaccounts/calico-cni-plugin/token"
    status, answer = call(kube_api, calico_node_token, "POST", path, {"spec": {}})
    assert status == 201, answer
    return answer["status"]["token"]


def _pod_status(kube_api, token: str, pod: str, patch: dict):
    path = f"/api/v1/namespaces/team/pods/{pod}/status"
    return call(kube_api, token, "PATCH", path, patch, MERGE)


def test_calico_node_cannot_write_another_nodes_pod_through_the_cni_plugins_token(
    kube_api, calico
):
    """The reviewer's probe: calico-node, refused another node's pod, uses the CNI account.

    calico-node on node-a asks for a token of calico-cni-plugin (which names no node) and
    tries the same patch with it.
    """
    node_token = _daemonset_token(kube_api, calico.CALICO_NODE, "node-a")
    status, _ = _pod_status(kube_api, node_token, "on-node-b", {"status": {"podIP": "10.9.9.9"}})
    assert status == 403
    cni = _cni_token(kube_api, node_token)
    for patch in (
        {"status": {"podIP": "10.9.9.9"}},
        {"metadata": {"labels": {"app": "thief"}}},
        {"metadata": {"annotations": {"team": "b"}}},
    ):
        status, answer = _pod_status(kube_api, cni, "on-node-b", patch)
        assert (status, answer["reason"]) == (403, "Forbidden"), (patch, answer)
        assert "ValidatingAdmissionPolicy 'gpu-k8s-calico-cni-plugin'" in answer["message"]
    pod = kube_api.get_object("/api/v1/namespaces/team/pods/on-node-b")
    assert pod["status"]["podIP"] == "10.1.0.5"
    assert pod["metadata"]["labels"] == {"app": "trainer"}
    assert pod["metadata"]["annotations"] == {"team": "a"}


def test_the_cni_plugins_token_writes_only_its_pod_ip_annotations(kube_api, calico):
    """What the CNI plugin writes on ADD and DEL, through pods/status.

    libcalico-go resources/workloadendpoint.go calcCNIAnnotations / patchOutAnnotations.
    """
    cni = _cni_token(kube_api, _daemonset_token(kube_api, calico.CALICO_NODE, "node-a"))
    add = {
        "cni.projectcalico.org/podIP": "192.168.7.3/32",
        "cni.projectcalico.org/podIPs": "192.168.7.3/32",
        "cni.projectcalico.org/containerID": "0123abcd",
    }
    status, answer = _pod_status(kube_api, cni, "on-node-a", {"metadata": {"annotations": add}})
    assert status == 200, answer
    delete = {"cni.projectcalico.org/podIP": "", "cni.projectcalico.org/podIPs": ""}
    status, answer = _pod_status(kube_api, cni, "on-node-a", {"metadata": {"annotations": delete}})
    assert status == 200, answer
    annotations = kube_api.get_object("/api/v1/namespaces/team/pods/on-node-a")["metadata"][
        "annotations"
    ]
    assert annotations == {"team": "a", **add, **delete}


POOL = {
    "apiVersion": "crd.projectcalico.org/v1",
    "kind": "IPPool",
    "metadata": {"name": "steal"},
    "spec": {"cidr": "10.1.0.0/24", "natOutgoing": True},
}


def test_the_cni_plugins_token_writes_no_ippool(kube_api, calico):
    cni = _cni_token(kube_api, _daemonset_token(kube_api, calico.CALICO_NODE, "node-a"))
    status, answer = call(kube_api, cni, "POST", f"{CALICO_CRD}/ippools", POOL)
    assert status == 403, answer
    assert answer["message"].startswith(
        'ippools.crd.projectcalico.org "steal" is forbidden: ValidatingAdmissionPolicy '
        "'gpu-k8s-calico-cni-plugin' with binding 'gpu-k8s-calico-cni-plugin' denied request: "
        "this user may not write IPPools"
    )
    call(kube_api, ADMIN_TOKEN, "POST", f"{CALICO_CRD}/ippools", POOL)
    body = {**POOL, "spec": {"cidr": "0.0.0.0/0"}}
    status, answer = call(kube_api, cni, "PUT", f"{CALICO_CRD}/ippools/steal", body)
    assert status == 403, answer
    status, answer = call(kube_api, cni, "DELETE", f"{CALICO_CRD}/ippools/steal")
    assert status == 403, answer
    assert "this user may not write IPPools" in answer["message"]
    assert kube_api.get_object(f"{CALICO_CRD}/ippools/steal") is not None


def _crd_object(kind: str, name: str, spec: dict) -> dict:
    return {
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def test_calico_node_writes_only_what_its_startup_writes_and_its_nodes_settings(kube_api, calico):
    """What calico-node writes at startup, and nothing more.

    Calico v3.32.1 node/pkg/lifecycle/startup/startup.go ensureDefaultConfig and
    libcalico-go clientv3 EnsureInitialized.
    """
    token = _daemonset_token(kube_api, calico.CALICO_NODE, "node-a")

    def write(method, plural, obj):
        path = f"{CALICO_CRD}/{plural}" + (
            "" if method == "POST" else f"/{obj['metadata']['name']}"
        )
        return call(kube_api, token, method, path, obj)

    info = _crd_object(
        "ClusterInformation", "default", {"calicoVersion": "v3.32.0", "clusterType": "k8s"}
    )
    felix = _crd_object("FelixConfiguration", "default", {"bpfEnabled": False})
    for plural, obj in (("clusterinformations", info), ("felixconfigurations", felix)):
        assert call(kube_api, ADMIN_TOKEN, "POST", f"{CALICO_CRD}/{plural}", obj)[0] == 201
    allowed = [
        (
            "PUT",
            "clusterinformations",
            _crd_object(
                "ClusterInformation",
                "default",
                {
                    "calicoVersion": "v3.32.1",
                    "clusterType": "k8s,bgp,kdd",
                    "clusterGUID": "0123",
                    "datastoreReady": True,
                },
            ),
        ),
        (
            "PUT",
            "felixconfigurations",
            _crd_object(
                "FelixConfiguration",
                "default",
                {"bpfEnabled": False, "reportingInterval": "0s", "logSeverityScreen": "Info"},
            ),
        ),
        (
            "POST",
            "felixconfigurations",
            _crd_object("FelixConfiguration", "node.node-a", {"bpfEnabled": True}),
        ),
        (
            "POST",
            "ippools",
            _crd_object("IPPool", "default-ipv4-ippool", {"cidr": "192.168.0.0/16"}),
        ),
        ("POST", "bgpconfigurations", _crd_object("BGPConfiguration", "default", {})),
        (
            "POST",
            "tiers",
            _crd_object("Tier", "default", {"order": 1000000, "defaultAction": "Deny"}),
        ),
    ]
    for method, plural, obj in allowed:
        status, answer = write(method, plural, obj)
        assert status in (200, 201), (plural, answer)
    refused = [
        (
            "PUT",
            "clusterinformations",
            _crd_object(
                "ClusterInformation",
                "default",
                {
                    "calicoVersion": "v3.32.1",
                    "clusterType": "k8s,bgp,kdd",
                    "clusterGUID": "0123",
                    "datastoreReady": False,
                },
            ),
        ),
        (
            "PUT",
            "felixconfigurations",
            _crd_object(
                "FelixConfiguration",
                "default",
                {"bpfEnabled": True, "reportingInterval": "0s", "logSeverityScreen": "Info"},
            ),
        ),
        (
            "POST",
            "felixconfigurations",
            _crd_object("FelixConfiguration", "node.node-b", {"bpfEnabled": True}),
        ),
        ("POST", "ippools", _crd_object("IPPool", "steal", {"cidr": "10.1.0.0/24"})),
        ("PUT", "ippools", _crd_object("IPPool", "default-ipv4-ippool", {"cidr": "10.1.0.0/24"})),
        (
            "PUT",
            "bgpconfigurations",
            _crd_object("BGPConfiguration", "default", {"asNumber": 65000}),
        ),
        ("POST", "tiers", _crd_object("Tier", "first", {"order": 1, "defaultAction": "Pass"})),
    ]
    for method, plural, obj in refused:
        status, answer = write(method, plural, obj)
        assert (status, answer.get("reason")) == (403, "Forbidden"), (plural, obj, answer)
        assert "ValidatingAdmissionPolicy 'gpu-k8s-calico-node-settings'" in answer["message"]


CALICO_KINDS = {
    "blockaffinities": "BlockAffinity",
    "ipamblocks": "IPAMBlock",
    "ipamconfigs": "IPAMConfig",
    "ipreservations": "IPReservation",
    "bgppeers": "BGPPeer",
    "caliconodestatuses": "CalicoNodeStatus",
    "clusterinformations": "ClusterInformation",
}


def _ipam(kube_api, token: str):
    """A writer of Calico's cluster-scoped CRD objects with `token` (status, answer)."""

    def write(method: str, plural: str, name: str, spec: dict | None = None):
        path = f"{CALICO_CRD}/{plural}" + ("" if method == "POST" else f"/{name}")
        if method == "DELETE":
            return call(kube_api, token, method, path)
        kind = CALICO_KINDS[plural]
        if method == "PUT":
            current = kube_api.get_object(path)
            obj = {**current, "spec": spec}
        else:
            obj = _crd_object(kind, name, spec or {})
        return call(kube_api, token, method, path, obj)

    return write


def _affinity(node: str, state: str = "pending", deleted: str = "false") -> dict:
    return {"state": state, "node": node, "type": "host", "cidr": CIDRS[node], "deleted": deleted}


def _block(node: str | None, used: int = 0, deleted: bool = False) -> dict:
    """A block of `node` (None: affine to none) with its first `used` ordinals in use."""
    spec = {
        "cidr": CIDRS[node or "node-b"],
        "allocations": [0 if i < used else None for i in range(SIZE)],
        "unallocated": list(range(used, SIZE)),
        "attributes": [{"handle_id": "k8s-pod-network.c0", "secondary": {"node": "node-b"}}]
        if used
        else [],
        "sequenceNumber": used,
        "deleted": deleted,
    }
    if node:
        spec["affinity"] = f"host:{node}"
    return spec


# libcalico-go names a BlockAffinity `<node>-<cidr with - for . and />` and an IPAMBlock
# by its CIDR (names.CIDRToName)
# (blocks of 4 addresses, an IPPool's blockSize 30, to keep cel-python's walk short)
CIDRS = {"node-a": "192.168.0.0/30", "node-b": "192.168.0.4/30"}
SIZE = 4
BLOCKS = {node: cidr.replace(".", "-").replace("/", "-") for node, cidr in CIDRS.items()}


def _seed_node_b(kube_api, used: int) -> None:
    """node-b's confirmed affinity and its block with `used` addresses in use."""
    write = _ipam(kube_api, ADMIN_TOKEN)
    name = BLOCKS["node-b"]
    assert (
        write("POST", "blockaffinities", f"node-b-{name}", _affinity("node-b", "confirmed"))[0]
        == 201
    )
    assert write("POST", "ipamblocks", name, _block("node-b", used))[0] == 201


def _assert_refused(result: tuple[int, dict], policy: str) -> None:
    status, answer = result
    assert (status, answer.get("reason")) == (403, "Forbidden"), answer
    assert f"ValidatingAdmissionPolicy '{policy}'" in answer["message"], answer


def test_calico_node_claims_and_releases_only_its_own_nodes_blocks(kube_api, calico):
    """Root on node-a, with calico-node's token, cannot take or free node-b's addresses.

    What libcalico-go v3.32.1 lib/ipam writes for node-a (claim a block, borrow from
    node-b's, reclaim node-b's empty block) is still allowed.
    """
    _seed_node_b(kube_api, used=1)
    write = _ipam(kube_api, _daemonset_token(kube_api, calico.CALICO_NODE, "node-a"))
    a, b = BLOCKS["node-a"], BLOCKS["node-b"]
    in_use = _block("node-b", used=1)
    refused = [
        (
            "POST",
            "blockaffinities",
            f"node-b-{a}",
            _affinity("node-b") | {"cidr": CIDRS["node-a"]},
        ),
        ("POST", "ipamblocks", a, {**_block("node-a"), "affinity": "host:node-b"}),
        (
            "PUT",
            "blockaffinities",
            f"node-b-{b}",
            _affinity("node-a", "confirmed") | {"cidr": CIDRS["node-b"]},
        ),
        ("PUT", "blockaffinities", f"node-b-{b}", _affinity("node-b", "pending")),
        ("PUT", "ipamblocks", b, {**in_use, "affinity": "host:node-a"}),
        ("PUT", "ipamblocks", b, {k: v for k, v in in_use.items() if k != "affinity"}),
        ("PUT", "ipamblocks", b, {**in_use, "deleted": True}),
        ("DELETE", "ipamblocks", b, None),
        ("DELETE", "blockaffinities", f"node-b-{b}", None),
        ("POST", "ipamconfigs", "default", {"strictAffinity": False, "autoAllocateBlocks": False}),
        ("POST", "bgppeers", "steal", {"peerIP": "10.0.0.9", "asNumber": 64512}),
    ]
    for method, plural, name, spec in refused:
        _assert_refused(write(method, plural, name, spec), "gpu-k8s-calico-node-settings")
    assert kube_api.get_object(f"{CALICO_CRD}/ipamblocks/{b}")["spec"] == in_use

    # node-b's CalicoNodeStatus is node-b's; node-a's own is written as its reporter does
    admin = _ipam(kube_api, ADMIN_TOKEN)
    for node in ("node-a", "node-b"):
        spec = {"node": node, "classes": ["Agent"], "updatePeriodSeconds": 10}
        assert admin("POST", "caliconodestatuses", node, spec)[0] == 201
    result = write("PUT", "caliconodestatuses", "node-b", {"node": "node-b", "x": 1})
    _assert_refused(result, "gpu-k8s-calico-node-settings")
    status, answer = write("PUT", "caliconodestatuses", "node-a", {"node": "node-a", "x": 1})
    assert status == 200, answer

    # the legitimate writes: the default IPAM config, a claim, a borrow, a release
    allowed = [
        ("POST", "ipamconfigs", "default", {"strictAffinity": False, "autoAllocateBlocks": True}),
        ("POST", "blockaffinities", f"node-a-{a}", _affinity("node-a")),
        ("POST", "ipamblocks", a, _block("node-a")),
        ("PUT", "blockaffinities", f"node-a-{a}", _affinity("node-a", "confirmed")),
        (
            "PUT",
            "ipamblocks",
            a,
            {
                **_block("node-a"),
                "sequenceNumber": 1,
                "unallocated": list(range(1, SIZE)),
                "allocations": [0] + [None] * (SIZE - 1),
                "attributes": [{"handle_id": "h", "secondary": {"node": "node-a"}}],
            },
        ),
        ("PUT", "ipamblocks", b, {**_block("node-b", used=2)}),
        ("PUT", "ipamblocks", b, in_use),
        # node-a releases its own non-empty block: pendingDeletion, the affinity off, deleted
        ("PUT", "blockaffinities", f"node-a-{a}", _affinity("node-a", "pendingDeletion")),
        (
            "PUT",
            "ipamblocks",
            a,
            {
                k: v
                for k, v in {
                    **_block("node-a"),
                    "allocations": [0] + [None] * (SIZE - 1),
                    "unallocated": list(range(1, SIZE)),
                    "attributes": [{"handle_id": "h"}],
                }.items()
                if k != "affinity"
            },
        ),
        ("PUT", "blockaffinities", f"node-a-{a}", _affinity("node-a", "pendingDeletion", "true")),
        ("DELETE", "blockaffinities", f"node-a-{a}", None),
    ]
    for method, plural, name, spec in allowed:
        status, answer = write(method, plural, name, spec)
        assert status in (200, 201), (method, plural, spec, answer)


def test_calico_node_reclaims_another_nodes_empty_block(kube_api, calico):
    """A reclaim (libcalico-go findUsableBlock): node-b's empty block freed, then node-a's."""
    _seed_node_b(kube_api, used=0)
    write = _ipam(kube_api, _daemonset_token(kube_api, calico.CALICO_NODE, "node-a"))
    b = BLOCKS["node-b"]
    for method, plural, name, spec in (
        ("PUT", "blockaffinities", f"node-b-{b}", _affinity("node-b", "pendingDeletion")),
        ("PUT", "ipamblocks", b, _block("node-b", deleted=True)),
        ("DELETE", "ipamblocks", b, None),
        ("PUT", "blockaffinities", f"node-b-{b}", _affinity("node-b", "pendingDeletion", "true")),
        ("DELETE", "blockaffinities", f"node-b-{b}", None),
        (
            "POST",
            "blockaffinities",
            f"node-a-{b}",
            _affinity("node-a") | {"cidr": CIDRS["node-b"]},
        ),
        ("POST", "ipamblocks", b, {**_block("node-b"), "affinity": "host:node-a"}),
    ):
        status, answer = write(method, plural, name, spec)
        assert status in (200, 201), (method, plural, spec, answer)


def test_the_cni_plugins_token_writes_ipam_only_as_libcalico_does(kube_api, calico):
    """The CNI account names no node: what no node ever writes is refused, the rest is not.

    cni-plugin v3.32.1 only reads the ClusterInformation (plugin.go) and libcalico-go only
    lists IPReservations; no IPAM write moves a block or frees one in use.
    """
    _seed_node_b(kube_api, used=1)
    cni = _cni_token(kube_api, _daemonset_token(kube_api, calico.CALICO_NODE, "node-a"))
    write = _ipam(kube_api, cni)
    admin = _ipam(kube_api, ADMIN_TOKEN)
    info = {"calicoVersion": "v3.32.1", "clusterType": "k8s", "datastoreReady": True}
    assert admin("POST", "clusterinformations", "default", info)[0] == 201
    b = BLOCKS["node-b"]
    in_use = _block("node-b", used=1)
    for method, plural, name, spec in (
        ("PUT", "clusterinformations", "default", {**info, "datastoreReady": False}),
        ("POST", "ipreservations", "hold", {"reservedCIDRs": ["192.168.0.0/16"]}),
        ("PUT", "ipamblocks", b, {**in_use, "affinity": "host:node-a"}),
        ("PUT", "ipamblocks", b, {**in_use, "deleted": True}),
        ("DELETE", "ipamblocks", b, None),
        (
            "PUT",
            "blockaffinities",
            f"node-b-{b}",
            _affinity("node-a", "confirmed") | {"cidr": CIDRS["node-b"]},
        ),
        ("POST", "ipamconfigs", "default", {"strictAffinity": True, "autoAllocateBlocks": True}),
    ):
        _assert_refused(write(method, plural, name, spec), "gpu-k8s-calico-cni-plugin")
    assert kube_api.get_object(f"{CALICO_CRD}/clusterinformations/default")["spec"] == info
    a = BLOCKS["node-a"]
    for method, plural, name, spec in (
        ("POST", "ipamconfigs", "default", {"strictAffinity": False, "autoAllocateBlocks": True}),
        ("POST", "blockaffinities", f"node-a-{a}", _affinity("node-a")),
        ("POST", "ipamblocks", a, _block("node-a")),
        ("PUT", "blockaffinities", f"node-a-{a}", _affinity("node-a", "confirmed")),
        ("PUT", "ipamblocks", b, _block("node-b", used=2)),
    ):
        status, answer = write(method, plural, name, spec)
        assert status in (200, 201), (method, plural, spec, answer)


# --- Jobs owned by a JobSet: only the JobSet controller makes them ---------------------------

JOBS = "/apis/batch/v1/namespaces/team/jobs"


def _account_token(kube_api, namespace: str, name: str, rules: list[dict]) -> str:
    """A ServiceAccount of `namespace` holding `rules` there (a Role), and a token of it."""
    for path, obj in (
        (f"/api/v1/namespaces/{namespace}", {"metadata": {"name": namespace}}),
        (f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}", {"metadata": {"name": name}}),
    ):
        if kube_api.get_object(path) is None:
            kube_api.put_object(path, obj)
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    kube_api.put_object(f"{rbac}/roles/{name}", {"metadata": {"name": name}, "rules": rules})
    kube_api.put_object(
        f"{rbac}/rolebindings/{name}",
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    status, answer = call(kube_api, ADMIN_TOKEN, "POST", path, {"spec": {}})
    assert status == 201, answer
    return answer["status"]["token"]


def _job(name: str, owned: bool) -> dict:
    meta: dict = {"name": name, "namespace": "team"}
    if owned:
        meta["ownerReferences"] = [
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "name": "train",
                "uid": "5b0c6f1e-0000-4000-8000-000000000001",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            }
        },
    }


JOB_RULES = [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "update"]}]


def test_a_team_cannot_create_a_job_owned_by_its_jobset(kube_api, policies):
    """Kueue v0.19.2 shouldSuspendChildJob lets such a Job run on the JobSet's admission."""
    team = _account_token(kube_api, "team", "trainer", JOB_RULES)
    status, answer = call(kube_api, team, "POST", JOBS, _job("sneak", owned=True))
    assert (status, answer["reason"]) == (403, "Forbidden"), answer
    assert answer["message"] == (
        'jobs.batch "sneak" is forbidden: ValidatingAdmissionPolicy '
        "'gpu-k8s-jobset-children-only-by-jobset' with binding "
        "'gpu-k8s-jobset-children-only-by-jobset' denied request: only the JobSet controller"
        " may create a Job owned by a JobSet or a Job"
    )
    # nor adopt one of its own Jobs into the JobSet afterwards
    status, answer = call(kube_api, team, "POST", JOBS, _job("plain", owned=False))
    assert status == 201, answer
    answer_uid = answer["metadata"]["uid"]
    adopted = {**answer, "metadata": {**answer["metadata"], **_job("x", True)["metadata"]}}
    adopted["metadata"]["name"] = "plain"
    status, answer = call(kube_api, team, "PUT", f"{JOBS}/plain", adopted)
    assert status == 403, answer
    # nor hang a Job under an admitted Job (Kueue's batch/job integration walks it too)
    child = _job("child", owned=False)
    child["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "plain",
            "uid": answer_uid,
            "controller": True,
        }
    ]
    status, answer = call(kube_api, team, "POST", JOBS, child)
    assert status == 403, answer


def test_the_jobset_controller_creates_its_child_jobs(kube_api, policies):
    namespace, name = policies.JOBSET_CONTROLLER
    controller = _account_token(kube_api, namespace, name, [])
    _grant_cluster_role(kube_api, policies.JOBSET_CONTROLLER, JOB_RULES)
    kube_api.put_object("/api/v1/namespaces/team", {"metadata": {"name": "team"}})
    status, answer = call(kube_api, controller, "POST", JOBS, _job("train-w-0", owned=True))
    assert status == 201, answer


# --- DELETE is admitted too (the fake, as kube-apiserver) -------------------------------------

CONFIGMAPS = "/api/v1/namespaces/team/configmaps"
KEEP = "gpu-k8s-probe-keep"


def _keep_policy(kube_api) -> None:
    """A policy on DELETE that reads both objects: `object` null, `oldObject` the stored one.

    k8s.io/apiserver v0.36.3 pkg/admission/plugin/policy/generic/plugin.go handles Create,
    Update, Delete and Connect; pkg/registry/rest/delete.go AdmissionToValidateObjectDelete
    Func validates a delete with (object nil, oldObject the stored object), and a
    deletecollection item with the request's empty name (handlers/delete.go).
    """
    spec = _on_delete(
        "configmaps",
        {"expression": "object == null", "message": "object is set", "reason": "Invalid"},
        {
            "expression": "oldObject.data.keep != 'yes'",
            "message": "this ConfigMap is kept",
            "reason": "Forbidden",
        },
    )
    _store_policy(kube_api, KEEP, spec)
    kube_api.put_object("/api/v1/namespaces/team", {"metadata": {"name": "team"}})
    for name, keep in (("a-gone", "no"), ("b-kept", "yes"), ("c-gone", "no")):
        kube_api.put_object(
            f"{CONFIGMAPS}/{name}",
            {"metadata": {"name": name, "namespace": "team"}, "data": {"keep": keep}},
        )


def _on_delete(resource: str, *validations: dict) -> dict:
    """A failing-closed policy's spec: `validations` on a DELETE of core/v1 `resource`."""
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"]}
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{**rule, "resources": [resource]}]},
        "validations": list(validations),
    }


def _store_policy(kube_api, name: str, spec: dict) -> None:
    """A ValidatingAdmissionPolicy `name` of `spec`, bound with Deny under the same name."""
    vap = "/apis/admissionregistration.k8s.io/v1"
    binding = {
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    kube_api.put_object(
        f"{vap}/validatingadmissionpolicies/{name}", {"metadata": {"name": name}, "spec": spec}
    )
    kube_api.put_object(f"{vap}/validatingadmissionpolicybindings/{name}", binding)


def test_a_policy_sees_the_requests_namespace_as_namespace_object(kube_api):
    """The request's Namespace, as CreateNamespaceObject copies it; null for a Namespace.

    k8s.io/apiserver pkg/admission/plugin/policy/validating dispatcher.go and plugin/cel
    CreateNamespaceObject: its labels, annotations and a few more fields, no managedFields.
    """
    spec = {
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["configmaps", "namespaces"],
                }
            ]
        },
        "validations": [
            {
                "expression": (
                    "request.resource.resource != 'namespaces' || namespaceObject == null"
                ),
                "message": "a Namespace has a namespaceObject",
            },
            {
                "expression": "request.resource.resource == 'namespaces' || "
                "(namespaceObject.metadata.labels.tier == 'open' && "
                "!has(namespaceObject.metadata.managedFields))",
                "message": "closed namespace",
                "reason": "Forbidden",
            },
        ],
    }
    _store_policy(kube_api, "ns", spec)
    for name, tier in (("open", "open"), ("closed", "closed")):
        body = {"metadata": {"name": name, "labels": {"tier": tier}}}
        status, answer = call(kube_api, ADMIN_TOKEN, "POST", "/api/v1/namespaces", body)
        assert status == 201, answer
    opened = kube_api.get_object("/api/v1/namespaces/open")
    opened["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update"}]
    kube_api.put_object("/api/v1/namespaces/open", opened)
    for name, expected in (("open", 201), ("closed", 403)):
        body = {"metadata": {"name": "c"}}
        status, answer = call(
            kube_api, ADMIN_TOKEN, "POST", f"/api/v1/namespaces/{name}/configmaps", body
        )
        assert status == expected, answer


def test_a_token_request_is_admitted_as_its_subresources_create_after_its_defaults(kube_api):
    """A TokenRequest meets the validating admission plugins as kube-apiserver's TokenREST.

    kubernetes pkg/registry/core/serviceaccount/storage/token.go Create: the account is
    looked up (404) and the request defaulted (expirationSeconds 3600) and validated (422)
    before createValidation admits it, as `serviceaccounts/token` CREATE with the
    TokenRequest as `object`.
    """
    spec = {
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["serviceaccounts/token"],
                }
            ]
        },
        "validations": [
            {
                "expression": "request.kind.kind == 'TokenRequest' && "
                "request.kind.group == 'authentication.k8s.io' && "
                "request.subResource == 'token' && request.name == 'sa' && "
                "request.namespace == 'ns' && object.metadata.name == 'sa'",
                "message": "not the TokenRequest kube-apiserver admits",
            },
            {
                "expression": "object.spec.expirationSeconds <= 3600",
                "message": "too long",
                "reason": "Forbidden",
            },
        ],
    }
    _store_policy(kube_api, "t", spec)
    kube_api.put_object("/api/v1/namespaces/ns", {"metadata": {"name": "ns"}})
    kube_api.put_object("/api/v1/namespaces/ns/serviceaccounts/sa", {"metadata": {"name": "sa"}})
    path = "/api/v1/namespaces/ns/serviceaccounts/{}/token"
    for account, seconds, expected in (
        ("sa", None, 201),  # defaulted to 3600 before admission
        ("sa", 7200, 403),
        ("missing", 7200, 404),  # the lookup answers first
        ("sa", 60, 422),  # so does validation
    ):
        body = {"spec": {} if seconds is None else {"expirationSeconds": seconds}}
        status, answer = call(kube_api, ADMIN_TOKEN, "POST", path.format(account), body)
        assert status == expected, answer
        if status == 403:
            assert answer["message"].endswith("denied request: too long"), answer


def test_a_policy_that_matches_delete_sees_the_stored_object_as_old_object(kube_api):
    _keep_policy(kube_api)
    status, answer = call(kube_api, ADMIN_TOKEN, "DELETE", f"{CONFIGMAPS}/b-kept")
    assert (status, answer["reason"]) == (403, "Forbidden"), answer
    cause = f"ValidatingAdmissionPolicy '{KEEP}' with binding '{KEEP}' denied request: "
    assert answer["message"] == f'configmaps "b-kept" is forbidden: {cause}this ConfigMap is kept'
    assert kube_api.get_object(f"{CONFIGMAPS}/b-kept") is not None
    status, answer = call(kube_api, ADMIN_TOKEN, "DELETE", f"{CONFIGMAPS}/a-gone")
    assert status == 200, answer
    assert kube_api.get_object(f"{CONFIGMAPS}/a-gone") is None
    # a missing object is 404 before admission (the store reads it first)
    status, answer = call(kube_api, ADMIN_TOKEN, "DELETE", f"{CONFIGMAPS}/a-gone")
    assert status == 404, answer


def test_a_deletecollection_is_admitted_item_by_item(kube_api):
    """A deletecollection validates each item; one refusal fails it, the admitted items go.

    k8s.io/apiserver registry/generic/registry/store.go DeleteCollection deletes each item
    through the same validation; the request's name is empty, so a denial says "Unknown".
    """
    _keep_policy(kube_api)
    status, answer = call(kube_api, ADMIN_TOKEN, "DELETE", CONFIGMAPS)
    assert (status, answer["reason"]) == (403, "Forbidden"), answer
    assert answer["message"].startswith('configmaps "Unknown" is forbidden: ValidatingAdmission')
    left = [o["metadata"]["name"] for o in kube_api.objects(f"{CONFIGMAPS}/", "ConfigMap")]
    assert left == ["b-kept"]


def test_a_pods_delete_is_admitted_with_the_grace_period_the_store_gives_it(kube_api):
    """`request.options` of a pod's DELETE: the DeleteOptions once BeforeDelete set them.

    k8s.io/apiserver registry/generic/registry/store.go Delete runs BeforeDelete (the pod
    strategy's CheckGracefulDelete: the request's gracePeriodSeconds, else the pod's; 0
    for a pod not bound) before deleteValidation with the same options, which plugin/cel
    condition.go CreateAdmissionRequest puts into `request.options`.
    """
    grace = "request.options.gracePeriodSeconds != 45"
    spec = _on_delete("pods", {"expression": grace, "message": "45", "reason": "Forbidden"})
    _store_policy(kube_api, "grace", spec)
    kube_api.put_object("/api/v1/namespaces/team", {"metadata": {"name": "team"}})
    pods = "/api/v1/namespaces/team/pods"
    for name, grace, bound, query, body, expected in (
        ("own", 45, True, "", None, 403),  # the pod's own
        ("asked", 45, True, "", {"gracePeriodSeconds": 10}, 200),
        ("unbound", 45, False, "", None, 200),  # 0: never ran
        ("query", 10, True, "?gracePeriodSeconds=45", None, 403),
    ):
        pod_spec = {
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "c", "image": "x"}],
        }
        if bound:
            pod_spec["nodeName"] = "n"
        kube_api.put_object(f"{pods}/{name}", {"metadata": {"name": name}, "spec": pod_spec})
        status, answer = call(kube_api, ADMIN_TOKEN, "DELETE", f"{pods}/{name}{query}", body)
        assert status == expected, (name, answer)


# --- NVIDIA's MIG manager deletes only the validator pods on its own node ---------------------


def _gpu_pod(kube_api, namespace: str, name: str, node: str, app: str) -> str:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    kube_api.put_object(
        path,
        {
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
        },
    )
    return path


def test_the_mig_manager_deletes_only_the_validator_pods_on_its_own_node(kube_api, policies):
    """What mig-parted v0.15.0 reconfigure.go deletePod deletes, and nothing else.

    In DEFAULT_GPU_CLIENTS_NAMESPACE, the pods on its node (spec.nodeName) labelled
    app=nvidia-cuda-validator, nvidia-device-plugin-validator or nvidia-operator-validator.
    """
    account = policies.MIG_MANAGER
    namespace = account[0]
    _nodes(kube_api, "node-a", "node-b")
    token = _daemonset_token(kube_api, account, "node-a")
    mig = load(CP, "mig_manager")
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    kube_api.put_object(
        f"{rbac}/roles/probe", {"metadata": {"name": "probe"}, "rules": mig.NAMESPACE_RULES}
    )
    kube_api.put_object(
        f"{rbac}/rolebindings/probe",
        {
            "metadata": {"name": "probe"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "probe"},
            "subjects": [{"kind": "ServiceAccount", "name": account[1], "namespace": namespace}],
        },
    )
    name = "gpu-k8s-node-bound-mig-manager"
    denied = f"ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: "
    refused = {
        "a validator on another node": (
            _gpu_pod(kube_api, namespace, "cuda-b", "node-b", "nvidia-cuda-validator"),
            "this user may only delete pods on the node its pod runs on",
        ),
        "the device plugin on its node": (
            _gpu_pod(kube_api, namespace, "plugin-a", "node-a", "nvidia-device-plugin-daemonset"),
            "this user may only delete NVIDIA's validator pods",
        ),
        "the DCGM exporter on another node": (
            _gpu_pod(kube_api, namespace, "dcgm-b", "node-b", "nvidia-dcgm-exporter"),
            "this user may only delete pods on the node its pod runs on",
        ),
    }
    for what, (path, message) in refused.items():
        status, answer = call(kube_api, token, "DELETE", path)
        assert (status, answer.get("reason")) == (403, "Forbidden"), (what, answer)
        pod = path.rpartition("/")[2]
        assert answer["message"].startswith(f'pods "{pod}" is forbidden: {denied}{message}'), (
            what,
            answer["message"],
        )
        assert kube_api.get_object(path) is not None, what
    for app in mig.VALIDATOR_APPS:
        path = _gpu_pod(kube_api, namespace, app, "node-a", app)
        status, answer = call(kube_api, token, "DELETE", path)
        assert status == 200, (app, answer)
        assert kube_api.get_object(path) is None


# --- The provisioner writes and deletes only its own volumes ------------------------------------

PVS = "/api/v1/persistentvolumes"


def _efs_volume(app: str, consumer: str) -> dict:
    """The PersistentVolume efs-storage `app` makes for `consumer` (its storage.py)."""
    claims, storage = load("efs-storage", "claims"), load("efs-storage", "storage")
    owner = claims.Owner(app, "0123-model")
    spec = storage.claim_spec(
        owner,
        consumer=consumer,
        namespace=consumer,
        capacity="1Ti",
        server="fs-0123abcd.efs.us-east-1.amazonaws.com",
        path="/",
        file_system_id="fs-0123abcd",
        access_point="fsap-0123456789abcdef0",
    )
    return storage.volume_manifest(owner, spec)


def _own_volumes(kube_api) -> tuple[str, dict, dict]:
    """The provisioner's token, its volume for team-a and another provisioner's for team-b.

    Each is bound, as the PersistentVolume controller leaves it (claimRef uid and
    resourceVersion added; pkg/controller/volume/persistentvolume bindVolumeToClaim).
    """
    token = _provisioner_token(kube_api)
    status, mine = call(kube_api, token, "POST", PVS, _efs_volume("efs-storage", "team-a"))
    assert status == 201, mine
    theirs = _efs_volume("efs-other", "team-b")
    for volume in (mine, theirs):
        volume["spec"]["claimRef"].update({"uid": "5b0c6f1e-0000-4000-8000-00000000000a"})
        volume["spec"]["claimRef"]["resourceVersion"] = "7"
        kube_api.put_object(f"{PVS}/{volume['metadata']['name']}", volume)
    return token, kube_api.get_object(f"{PVS}/{mine['metadata']['name']}"), theirs


OWN = "gpu-k8s-efs-own-volumes"
OWN_DENIED = f"ValidatingAdmissionPolicy '{OWN}' with binding '{OWN}' denied request: "


def test_the_provisioner_deletes_only_its_own_volumes(kube_api):
    token, mine, theirs = _own_volumes(kube_api)
    name = theirs["metadata"]["name"]
    status, answer = call(kube_api, token, "DELETE", f"{PVS}/{name}")
    assert (status, answer.get("reason")) == (403, "Forbidden"), answer
    assert answer["message"] == (
        f'persistentvolumes "{name}" is forbidden: {OWN_DENIED}this user may change or delete'
        " only the PersistentVolumes labelled gpu-k8s.io/efs-app=<its ServiceAccount's name>"
    )
    assert kube_api.get_object(f"{PVS}/{name}") is not None
    # an operator's volume, unlabelled
    local = _volume("local", REFUSED["hostPath"])
    del local["metadata"]["labels"]
    kube_api.put_object(f"{PVS}/local", local)
    status, answer = call(kube_api, token, "DELETE", f"{PVS}/local")
    assert status == 403, answer
    status, answer = call(kube_api, token, "DELETE", f"{PVS}/{mine['metadata']['name']}")
    assert status == 200, answer


def test_the_provisioner_cannot_label_a_volume_as_another_provisioners(kube_api):
    token = _provisioner_token(kube_api)
    status, answer = call(kube_api, token, "POST", PVS, _efs_volume("efs-other", "team-b"))
    assert (status, answer.get("reason")) == (403, "Forbidden"), answer
    assert (
        "a PersistentVolume this user writes must carry the label gpu-k8s.io/efs-app="
        "<its ServiceAccount's name>" in answer["message"]
    )


def test_the_provisioner_changes_a_claim_ref_only_as_it_does(kube_api):
    """What efs-storage storage.py writes to a claimRef, and nothing else.

    A volume pre-bound by namespace and name; once Released, it forgets the old claim's
    uid and resourceVersion (so a new claim binds).
    """
    token, mine, theirs = _own_volumes(kube_api)
    path = f"{PVS}/{mine['metadata']['name']}"
    steal = {"spec": {"claimRef": {"namespace": "hostile", "name": "grab", "uid": None}}}
    status, answer = call(kube_api, token, "PATCH", path, steal, MERGE)
    assert (status, answer.get("reason")) == (403, "Forbidden"), answer
    assert answer["message"].endswith(
        f"{OWN_DENIED}this user may only remove a PersistentVolume's claimRef uid and"
        " resourceVersion"
    )
    status, answer = call(
        kube_api, token, "PATCH", path, {"spec": {"claimRef": {"uid": "0000-x"}}}, MERGE
    )
    assert status == 403, answer
    # another provisioner's volume: not even what it does to its own
    forget = {"spec": {"claimRef": {"uid": None, "resourceVersion": None}}}
    status, answer = call(
        kube_api, token, "PATCH", f"{PVS}/{theirs['metadata']['name']}", forget, MERGE
    )
    assert status == 403, answer
    status, answer = call(kube_api, token, "PATCH", path, forget, MERGE)
    assert status == 200, answer
    assert answer["spec"]["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "team-a",
        "name": "efs-storage-team-a",
    }


# --- The provisioner writes and deletes only its own claims, in its consumers' namespaces ------

OWN_CLAIMS = "gpu-k8s-efs-own-claims"
CLAIMS_DENIED = (
    f"ValidatingAdmissionPolicy '{OWN_CLAIMS}' with binding '{OWN_CLAIMS}' denied request: "
)
CLAIM_RULES = [
    {
        "api-groups": [""],
        "resources": ["persistentvolumeclaims"],
        "verbs": ["get", "create", "patch", "update", "delete"],
    }
]


def _claims(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"


def _efs_claim(app: str, consumer: str, namespace: str | None = None) -> dict:
    """The claim efs-storage `app` makes for `consumer` (its storage.py claim_manifest)."""
    claims, storage = load("efs-storage", "claims"), load("efs-storage", "storage")
    owner = claims.Owner(app, "0123-model")
    spec = storage.claim_spec(
        owner,
        consumer=consumer,
        namespace=namespace or consumer,
        capacity="1Ti",
        server="fs-0123abcd.efs.us-east-1.amazonaws.com",
        path="/",
        file_system_id="fs-0123abcd",
        access_point="fsap-0123456789abcdef0",
    )
    return storage.claim_manifest(owner, spec)


def _team(kube_api, app: str) -> str:
    """A team granted namespace `app` (labelled as its own) that may write claims there."""
    grant = kube_grants.consumer_grant(app, app, CLAIM_RULES, [])
    return kube_grants.store_grant(kube_api, grant, f"{app}-token")


def _stored_claim(kube_api, claim: dict) -> str:
    meta = claim["metadata"]
    path = f"{_claims(meta['namespace'])}/{meta['name']}"
    kube_api.put_object(path, claim)
    return path


def test_the_provisioner_writes_its_own_claims_in_its_consumers_namespace(kube_api):
    _team(kube_api, "team-a")
    token = _provisioner_token(kube_api)
    claim = _efs_claim("efs-storage", "team-a")
    status, answer = call(kube_api, token, "POST", _claims("team-a"), claim)
    assert status == 201, answer
    path = f"{_claims('team-a')}/{claim['metadata']['name']}"
    patch = {"metadata": {"annotations": {"gpu-k8s.io/efs-directory-owner": "1000:1000"}}}
    status, answer = call(kube_api, token, "PATCH", path, patch, MERGE)
    assert status == 200, answer
    status, answer = call(kube_api, token, "DELETE", path)
    assert status == 200, answer


def test_the_provisioner_cannot_touch_another_provisioners_or_a_teams_claims(kube_api):
    team = _team(kube_api, "team-a")
    token = _provisioner_token(kube_api)
    # another provisioner's claim: made as that one's, changed, deleted
    status, answer = call(
        kube_api, token, "POST", _claims("team-a"), _efs_claim("efs-b", "team-a")
    )
    assert (status, answer.get("reason")) == (403, "Forbidden"), answer
    assert answer["message"].endswith(
        f"{CLAIMS_DENIED}a PersistentVolumeClaim this user writes must carry the label"
        " gpu-k8s.io/efs-app=<its ServiceAccount's name>"
    )
    theirs = _stored_claim(kube_api, _efs_claim("efs-b", "team-a"))
    changed = f"{CLAIMS_DENIED}this user may change or delete only the PersistentVolumeClaims"
    relabel = {"metadata": {"labels": {"gpu-k8s.io/efs-app": "efs-storage"}}}
    for method, body in (("PATCH", relabel), ("DELETE", None)):
        status, answer = call(kube_api, token, method, theirs, body, MERGE if body else None)
        assert (status, answer.get("reason")) == (403, "Forbidden"), answer
        assert changed in answer["message"]
    # the team's own claim, unlabelled: the team writes it, the provisioner may not
    own = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "scratch", "namespace": "team-a"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    status, answer = call(kube_api, team, "POST", _claims("team-a"), own)
    assert status == 201, answer
    status, answer = call(kube_api, token, "DELETE", f"{_claims('team-a')}/scratch")
    assert status == 403, answer
    assert changed in answer["message"]
    status, answer = call(kube_api, team, "PATCH", f"{_claims('team-a')}/scratch", relabel, MERGE)
    assert status == 200, answer
    status, answer = call(kube_api, team, "DELETE", f"{_claims('team-a')}/scratch")
    assert status == 200, answer
    assert kube_api.get_object(theirs) is not None


def test_the_provisioner_puts_a_claim_only_into_its_consumers_namespace(kube_api):
    _team(kube_api, "team-a")
    _team(kube_api, "team-b")
    token = _provisioner_token(kube_api)
    where = (
        f"{CLAIMS_DENIED}a PersistentVolumeClaim this user writes must go into the namespace"
        " the control plane granted the consumer its label gpu-k8s.io/consumer names"
    )
    # team-a's claim in team-b's namespace; a claim in a namespace no consumer was granted
    kube_api.put_object("/api/v1/namespaces/ops", {"metadata": {"name": "ops"}})
    for consumer, namespace in (("team-a", "team-b"), ("ops", "ops"), ("team-a", "kube-system")):
        claim = _efs_claim("efs-storage", consumer, namespace)
        status, answer = call(kube_api, token, "POST", _claims(namespace), claim)
        assert (status, answer.get("reason")) == (403, "Forbidden"), answer
        assert answer["message"].endswith(where), answer
    # nor moved onto another consumer once made
    claim = _efs_claim("efs-storage", "team-a")
    status, answer = call(kube_api, token, "POST", _claims("team-a"), claim)
    assert status == 201, answer
    path = f"{_claims('team-a')}/{claim['metadata']['name']}"
    patch = {"metadata": {"labels": {"gpu-k8s.io/consumer": "team-b"}}}
    status, answer = call(kube_api, token, "PATCH", path, patch, MERGE)
    assert status == 403, answer
    assert answer["message"].endswith(where)


def test_the_claims_policy_fences_only_the_provisioners_it_names(kube_api, kube, policies):
    """Applied for no provisioner, it matches nobody; for one, that one only."""
    team = _team(kube_api, "team-a")
    token = _provisioner_token(kube_api)
    for obj in policies.claims_manifests([]):  # the provisioner was removed
        kube.apply(obj, field_manager="kubernetes-control-plane")
    theirs = _stored_claim(kube_api, _efs_claim("efs-b", "team-a"))
    status, answer = call(kube_api, token, "DELETE", theirs)
    assert status == 200, answer  # what RBAC alone allows: only the policy said no
    for obj in policies.claims_manifests([("efs-storage", "efs-storage")]):
        kube.apply(obj, field_manager="kubernetes-control-plane")
    theirs = _stored_claim(kube_api, _efs_claim("efs-b", "team-a"))
    status, answer = call(kube_api, token, "DELETE", theirs)
    assert status == 403, answer
    # a team holding the same rights is not matched
    status, answer = call(kube_api, team, "DELETE", theirs)
    assert status == 200, answer


# --- The provisioner serves only its consumers: their namespaces, their access points --------

WITHIN = "gpu-k8s-efs-within-consumers"
WITHIN_DENIED = f"ValidatingAdmissionPolicy '{WITHIN}' with binding '{WITHIN}' denied request: "
NOT_SERVED = (
    f"{WITHIN_DENIED}a PersistentVolumeClaim this user writes, and a PersistentVolume's"
    " claimRef, must be in the namespace of a consumer it serves (kube-api storage-consumers)"
)
NOT_ITS_POINT = (
    f"{WITHIN_DENIED}a PersistentVolume this user writes must mount the access point published"
    " for its consumer (kube-api storage-consumers), plain NFS only while none is"
)
NOT_OWN_VOLUME = (
    f"{WITHIN_DENIED}a PersistentVolume this user writes, and the volumeName of its claims,"
    " must be named <its ServiceAccount's name>-..."
)


def _served_world(kube_api) -> str:
    """team-a served by efs-storage (AP_A); team-b granted, served by efs-storage-b (AP_B)."""
    _team(kube_api, "team-a")
    _team(kube_api, "team-b")
    token = _provisioner_token(kube_api)
    efs = load("efs-storage", "literals")
    other = kube_grants.consumer_grant(
        "efs-storage-b", "efs-storage-b", efs.NAMESPACED_RULES, efs.CLUSTER_RULES, provisioner=True
    )
    kube_grants.store_grant(kube_api, other, "provisioner-b-token")
    kube_grants.admit_served(kube_api, ("efs-storage-b", "efs-storage-b"), {"team-b": AP_B})
    return token


def _for(consumer: str, point: str | None, namespace: str | None = None) -> dict:
    """efs-storage's volume for `consumer`, through `point` (None: plain NFS)."""
    volume = _efs_volume("efs-storage", consumer)
    volume["spec"]["claimRef"]["namespace"] = namespace or consumer
    if point is None:
        del volume["spec"]["csi"]
        volume["spec"]["nfs"] = ALLOWED["efs nfs"]["nfs"]
    else:
        volume["spec"]["csi"]["volumeHandle"] = f"fs-0123abcd::{point}"
    return volume


def test_the_provisioner_binds_a_volume_only_to_its_consumers_with_their_access_point(kube_api):
    """Issue 29 (still open 1): another's access point, or a namespace it does not serve.

    As a hostile provisioner would try: team-b's access point handed to a claim in team-a,
    or a volume pre-bound into a namespace it does not serve.
    """
    token = _served_world(kube_api)
    for volume, why in (
        (_for("team-b", AP_B), NOT_SERVED),  # team-b is another provisioner's consumer
        (_for("team-a", AP_A, "kube-system"), NOT_SERVED),
        (_for("team-a", AP_B), NOT_ITS_POINT),  # team-b's access point, into team-a
        (_for("team-a", None), NOT_ITS_POINT),  # team-a has an access point: no plain NFS
    ):
        status, answer = call(kube_api, token, "POST", PVS, volume)
        assert (status, answer.get("reason")) == (403, "Forbidden"), answer
        assert answer["message"].endswith(why), answer
    unbound = _for("team-a", AP_A)
    del unbound["spec"]["claimRef"]
    status, answer = call(kube_api, token, "POST", PVS, unbound)
    assert status == 403, answer
    assert answer["message"].endswith(NOT_SERVED)
    status, mine = call(kube_api, token, "POST", PVS, _for("team-a", AP_A))
    assert status == 201, mine
    # nor moved onto another access point once made
    path = f"{PVS}/{mine['metadata']['name']}"
    handle = {"spec": {"csi": {"volumeHandle": f"fs-0123abcd::{AP_B}"}}}
    status, answer = call(kube_api, token, "PATCH", path, handle, MERGE)
    assert status in (403, 422), (
        answer
    )  # the source is immutable too (ValidatePersistentVolumeUpdate)


def test_the_provisioners_claim_names_only_a_volume_of_its_own(kube_api):
    """Issue 29 (still open 2): its claim names only a volume of its own.

    Not an operator's unbound volume, nor another provisioner's, nor none (any matching
    unbound volume binds it).
    """
    token = _served_world(kube_api)
    local = _volume("local", REFUSED["hostPath"])
    del local["metadata"]["labels"]
    kube_api.put_object(f"{PVS}/local", local)
    for volume_name in ("local", "efs-storage-b-team-a-0123", None):
        claim = _efs_claim("efs-storage", "team-a")
        if volume_name is None:
            del claim["spec"]["volumeName"]
        else:
            claim["spec"]["volumeName"] = volume_name
        status, answer = call(kube_api, token, "POST", _claims("team-a"), claim)
        assert (status, answer.get("reason")) == (403, "Forbidden"), (volume_name, answer)
        assert answer["message"].endswith(NOT_OWN_VOLUME), answer
    # nor a volume under the longer provisioner's prefix
    volume = _for("team-a", AP_A)
    volume["metadata"]["name"] = "efs-storage-b-team-a-0123"
    status, answer = call(kube_api, token, "POST", PVS, volume)
    assert status == 403, answer
    assert answer["message"].endswith(NOT_OWN_VOLUME)
    status, answer = call(
        kube_api, token, "POST", _claims("team-a"), _efs_claim("efs-storage", "team-a")
    )
    assert status == 201, answer


def test_the_provisioner_puts_claims_only_into_the_namespaces_of_its_consumers(kube_api):
    """Issue 29 (still open 3): team-b is a kube-api consumer, not one of this provisioner's."""
    token = _served_world(kube_api)
    claim = _efs_claim("efs-storage", "team-b")  # labelled for team-b, in team-b's namespace
    status, answer = call(kube_api, token, "POST", _claims("team-b"), claim)
    assert (status, answer.get("reason")) == (403, "Forbidden"), answer
    assert answer["message"].endswith(NOT_SERVED), answer
    # the other provisioner, which serves team-b, may
    claim = _efs_claim("efs-storage-b", "team-b")
    status, answer = call(kube_api, "provisioner-b-token", "POST", _claims("team-b"), claim)
    assert status == 201, answer


def test_a_consumer_is_served_once_the_control_plane_admits_it(kube_api):
    """Until the policy names a new consumer, its claim is refused; then it is written."""
    _team(kube_api, "team-a")
    token = _provisioner_token(kube_api, {})
    claim = _efs_claim("efs-storage", "team-a")
    status, answer = call(kube_api, token, "POST", _claims("team-a"), claim)
    assert status == 403, answer
    assert answer["message"].endswith(NOT_SERVED)
    kube_grants.admit_served(kube_api, PROVISIONER, {"team-a": AP_A})
    status, answer = call(kube_api, token, "POST", _claims("team-a"), claim)
    assert status == 201, answer
