"""Builders of ops.testing states for the kubernetes-worker tests."""

import json
from pathlib import Path

from ops import testing

TOKEN = "abcdef.0123456789abcdef"
SA_TOKEN = "worker-sa-token-5c1d9e"
CA_HASH = "sha256:" + "ab" * 32
NODE = "ip-10-0-1-17"
CP_APP = "kubernetes-control-plane"
API_SERVERS = ["10.0.0.10:6443", "10.0.0.11:6443", "10.0.0.12:6443"]


def join_secret(api, *, token=TOKEN, kubeconfig=None):
    return testing.Secret(
        {"token": token, "kubeconfig": kubeconfig or api.kubeconfig(token=SA_TOKEN)}
    )


def cluster_relation(secret, **overrides):
    data = {
        "endpoint": "https://127.0.0.1:6444",
        "api-servers": json.dumps(API_SERVERS),
        "ca-cert-hash": CA_HASH,
        "join-secret-id": secret.id if secret else "secret:missing",
        "kubernetes-version": "1.35",
    }
    data.update(overrides)
    data = {k: v for k, v in data.items() if v is not None}
    return testing.Relation(
        "cluster", remote_app_name=CP_APP, remote_app_data=data, remote_units_data={0: {}}
    )


def joined_state(api, *, config=None, **overrides):
    secret = join_secret(api)
    relation = cluster_relation(secret, **overrides)
    return testing.State(leader=False, config=config or {}, relations={relation}, secrets={secret})


# What kubelet posts in the Node's Ready condition (kubernetes pkg/kubelet/nodestatus/
# setters.go ReadyCondition: "KubeletReady"/"kubelet is posting ready status" when the
# runtime, network and storage checks pass, else "KubeletNotReady" with their errors
# joined, for example the CNI error below before a network plugin runs).
READY_CONDITION = {
    "type": "Ready",
    "status": "True",
    "reason": "KubeletReady",
    "message": "kubelet is posting ready status",
}
NO_CNI = (
    "container runtime network not ready: NetworkReady=false "
    "reason:NetworkPluginNotReady message:Network plugin returns error: "
    "cni plugin not initialized"
)


def not_ready_condition(message=NO_CNI, status="False"):
    return {"type": "Ready", "status": status, "reason": "KubeletNotReady", "message": message}


def register_node(api, name=NODE, labels=None, ready=READY_CONDITION):
    """The Node as its kubelet registers it and then posts its status (Ready by default)."""
    api.put_object(
        f"/api/v1/nodes/{name}",
        {
            "metadata": {"labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "status": {"conditions": [ready]} if ready else {},
        },
    )


def node(api, name=NODE):
    return api.get_object(f"/api/v1/nodes/{name}")


def leader_applies_taint(api, out, name=NODE):
    """The control-plane leader answering the worker's `gpu-taint` request, as admin.

    A worker acting as its kubelet may not change its Node's taints (NodeRestriction);
    it asks over the relation and the leader patches the Node that unit registered with
    `kubernetes_cluster.gpu_taint_patch` (the same function). Returns `out`.
    """
    from charms.gpu_k8s.v0.kubernetes_cluster import gpu_taint_patch

    cluster = next(r for r in out.relations if r.endpoint == "cluster")
    request = cluster.local_unit_data.get("gpu-taint")
    current = node(api, name)
    if request is None or current is None:
        return out
    patch = gpu_taint_patch(current, json.loads(request))
    if patch is not None:
        current.setdefault("spec", {})["taints"] = patch["spec"]["taints"]
        if not current["spec"]["taints"]:
            del current["spec"]["taints"]
        api.put_object(f"/api/v1/nodes/{name}", current)
    return out


# GPU 1 of the fake driver (nvidia_driver.FakeDriver.uuid(1), as its `nvidia-smi -L` lists
# it: the repair looks the GPU up by UUID); a literal, so that this module needs no charm code
QUARANTINED_GPU = "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"
WATCHER_STATE = "/var/lib/gpu-k8s/gpu-health.json"


# The watcher's memory faults (its `memory_reasons`), from the catalog it reads
_CATALOG = Path(__file__).parents[2] / "charms/kubernetes-worker/src/xid_catalog.json"


def _memory_reasons() -> set[str]:
    catalog = json.loads(_CATALOG.read_text())
    found = {f"Xid{x}" for x in catalog["memory"]["xids"]}
    return found | {catalog["health"][h]["reason"] for h in catalog["memory"]["health"]}


def watcher_quarantines(machine, uuid=QUARANTINED_GPU, index="1", reason="Xid79"):
    """The GPU health watcher's state file with `uuid` quarantined, as gpu_watcher.py writes it.

    The record's fields are the ones `Watcher.quarantine` writes (applied: the node was
    cordoned, its condition set and the GPU's pods evicted). The state file outlives a
    reboot (/var/lib), as the quarantine must.
    """
    path = machine.path(WATCHER_STATE)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = json.loads(path.read_text()) if path.exists() else {}
    state.setdefault("quarantined", {})[uuid] = {
        "index": index,
        "uuid": uuid,
        "reason": reason,
        "message": f"GPU {index} ({uuid}): XID 79 GPU has fallen off the bus; repair: reboot",
        "action": "reboot",
        "at": "2026-11-28T10:00:00Z",
        "since": 1_795_000_000.0,
        "applied": True,
    } | ({"memory": True} if reason in _memory_reasons() else {})
    state.setdefault("events", []).append(
        {
            "at": "2026-11-28T10:00:00Z",
            "gpu": index,
            "uuid": uuid,
            "reason": reason,
            "meaning": "XID 79 GPU has fallen off the bus",
            "action": "reboot",
        }
    )
    path.write_text(json.dumps(state))
