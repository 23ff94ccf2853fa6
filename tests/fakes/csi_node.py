"""A DaemonSet's pods on the nodes, and kubelet registering the CSI drivers they run.

The fake API server runs no controller and no kubelet. `run_daemonset(api, token, ds)`
does, for one DaemonSet, what these do, each rule from the upstream source named:
- D1 The DaemonSet controller wants a pod on every node whose labels match the pod
  template's nodeSelector and its required node affinity and whose NoSchedule/NoExecute
  taints it tolerates (kubernetes pkg/controller/daemon/daemon_controller.go
  NodeShouldRunDaemonPod: predicates on the node selector and affinity, then taints;
  k8s.io/component-helpers scheduling/corev1/nodeaffinity: any one of the
  nodeSelectorTerms, all expressions of a term; `NotIn` and `DoesNotExist` match a node
  without the key), and removes its pod from a node that stops matching
  (`sync_daemonset`); a toleration with `operator: Exists` and no key tolerates every
  taint (k8s.io/api core/v1 toleration.go ToleratesTaint). The pod is created
  through the API server in the DaemonSet's namespace, so admission (PodSecurity
  included) decides whether it exists at all; here bound to its node at once.
- D2 Every pod (and the pod D1 checks a node against) is the template with the
  tolerations the controller adds (`daemon_tolerations`: kubernetes pkg/controller/daemon/
  util/daemonset_util.go AddOrUpdateDaemonPodTolerations, stored commit 05c351a9, called
  by CreatePodTemplate and NewPod): node.kubernetes.io/not-ready and /unreachable
  NoExecute with no tolerationSeconds, /disk-pressure, /memory-pressure, /pid-pressure
  and /unschedulable NoSchedule, and /network-unavailable NoSchedule for a hostNetwork
  pod; each replaces a toleration of the template that matches it (same key, operator,
  value and effect: core/v1 helper AddOrUpdateTolerationInPodSpec, MatchToleration).
  `daemon_pod` is the pod as the controller creates it: unbound, its node named by a
  required node affinity on `metadata.name` (ReplaceDaemonSetPodNodeNameNodeAffinity,
  daemon_controller.go syncNodes), its DaemonSet its controller.
- K1 Once such a pod runs, kubelet's plugin watcher finds the registration socket of its
  node-driver-registrar container, learns the driver name and the endpoint it was
  started with (`--kubelet-registration-path=/var/lib/kubelet/plugins/<driver>/csi.sock`,
  kubernetes-csi/node-driver-registrar README; `$(VAR)` in args expanded from the
  container's env as kubelet does, pkg/kubelet/container/helpers.go
  ExpandContainerCommandAndArgs), calls the driver's NodeGetInfo and writes
  the node id it answers into the Node's `csi.volume.kubernetes.io/nodeid` annotation,
  a JSON map of driver name to node id (kubernetes pkg/volume/csi/nodeinfomanager/
  nodeinfomanager.go annotationKeyNodeID, updateNodeIDInNode). The fake takes the driver
  name from the registration path and uses the node's name as its id (the EFS plugin
  answers its EC2 instance id; the consumers read only the keys).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from fakes.kube_apiserver import FakeKubeApiServer
from fakes.taint_eviction import tolerated

NODE_ID_ANNOTATION = "csi.volume.kubernetes.io/nodeid"
_REGISTRATION = "--kubelet-registration-path=/var/lib/kubelet/plugins/"


def _expression(labels: dict, e: dict) -> bool:
    key, op, values = e["key"], e["operator"], e.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise NotImplementedError(f"node affinity operator {op} is not modelled")


def _affinity(pod_spec: dict, labels: dict) -> bool:
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    return any(
        all(_expression(labels, e) for e in term.get("matchExpressions") or []) for term in terms
    )


def fits(pod_spec: dict, node: dict) -> bool:
    """D1: whether the DaemonSet controller wants its pod on `node`."""
    labels = node["metadata"].get("labels") or {}
    selector = pod_spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    if not _affinity(pod_spec, labels):
        return False
    taints = [
        t
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute")
    ]
    return all(tolerated(pod_spec.get("tolerations") or [], t) for t in taints)


_DAEMON_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)
_NETWORK_UNAVAILABLE = ("node.kubernetes.io/network-unavailable", "NoSchedule")


def daemon_tolerations(pod_spec: dict) -> dict:
    """D2: a copy of `pod_spec` with the tolerations the DaemonSet controller adds."""
    spec = copy.deepcopy(pod_spec)
    wanted = list(_DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        wanted.append(_NETWORK_UNAVAILABLE)
    tolerations = spec.setdefault("tolerations", [])
    for key, effect in wanted:
        added = {"key": key, "operator": "Exists", "effect": effect}
        same = ("key", "operator", "value", "effect")
        match = [
            i for i, t in enumerate(tolerations) if all(t.get(f) == added.get(f) for f in same)
        ]
        if match:
            tolerations[match[0]] = added
        else:
            tolerations.append(added)
    return spec


def daemon_pod(daemonset: dict, node: str) -> dict:
    """D2: the pod the DaemonSet controller creates for `node`, which the scheduler binds."""
    meta, template = daemonset["metadata"], daemonset["spec"]["template"]
    spec = daemon_tolerations(template["spec"])
    field = {"key": "metadata.name", "operator": "In", "values": [node]}
    spec["affinity"] = {
        **(spec.get("affinity") or {}),
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [field]}]
            }
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{node}",
            "labels": dict(template["metadata"]["labels"]),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": meta["name"],
                    "uid": meta.get("uid") or f"uid-{meta['name']}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def drivers_registered(pod_spec: dict) -> list[str]:
    """K1: the CSI drivers a pod's registrar containers register with kubelet."""
    found = []
    for c in pod_spec.get("containers") or []:
        env = {e["name"]: e["value"] for e in c.get("env") or [] if "value" in e}
        for arg in c.get("args") or []:
            arg = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), arg)
            if arg.startswith(_REGISTRATION) and arg.endswith("/csi.sock"):
                found.append(arg[len(_REGISTRATION) : -len("/csi.sock")])
    return found


def run_daemonset(
    api: FakeKubeApiServer, call: Any, token: str, daemonset: dict
) -> list[tuple[str, int, Any]]:
    """D1 and K1 for `daemonset`: (node, status, answer) of each pod create.

    `call(api, token, method, path, body)` makes one HTTP request as `token` (the
    DaemonSet controller's identity). A pod admitted (201) runs, and its drivers are
    written into its Node's annotation.
    """
    meta, template = daemonset["metadata"], daemonset["spec"]["template"]
    out = []
    for node in api.objects("/api/v1/nodes/"):
        spec = daemon_tolerations(template["spec"])
        if not fits(spec, node):
            continue
        name = node["metadata"]["name"]
        spec["nodeName"] = name
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-{name}",
                "labels": template["metadata"]["labels"],
            },
            "spec": spec,
        }
        status, answer = call(
            api, token, "POST", f"/api/v1/namespaces/{meta['namespace']}/pods", pod
        )
        out.append((name, status, answer))
        if status != 201:
            continue
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{pod['metadata']['name']}"
        stored = api.get_object(path)
        assert stored is not None, path
        stored["status"] = {"phase": "Running"}
        api.put_object(path, stored)
        annotations = node["metadata"].setdefault("annotations", {})
        ids = json.loads(annotations.get(NODE_ID_ANNOTATION) or "{}")
        ids.update(dict.fromkeys(drivers_registered(spec), name))
        annotations[NODE_ID_ANNOTATION] = json.dumps(ids, sort_keys=True)
        api.put_object(f"/api/v1/nodes/{name}", node)
    return out


def sync_daemonset(api: FakeKubeApiServer, daemonset: dict) -> list[str]:
    """D1 as the controller and kubelet act over time: pods where `daemonset` fits, none else.

    Stored directly (the controller's own writes are not what these tests check): a
    Running pod `<name>-<node>` on each node that fits, and the pod of a node that no
    longer fits deleted (its graceful termination over by the next sync). Returns the
    nodes that run it now.
    """
    meta, template = daemonset["metadata"], daemonset["spec"]["template"]
    prefix = f"/api/v1/namespaces/{meta['namespace']}/pods/"
    running = []
    for node in api.objects("/api/v1/nodes/"):
        name = node["metadata"]["name"]
        path = f"{prefix}{meta['name']}-{name}"
        if not fits(daemon_tolerations(template["spec"]), node):
            api.delete_object(path)
            continue
        running.append(name)
        if api.get_object(path) is None:
            # the controller's reference, which a drain reads to leave the pod (kubectl
            # drain daemonSetFilter; lib drain.py), and bound at once
            pod = daemon_pod(daemonset, name)
            pod["metadata"]["namespace"] = meta["namespace"]
            pod["spec"]["nodeName"] = name
            pod["status"] = {"phase": "Running"}
            api.put_object(path, pod)
    return running
