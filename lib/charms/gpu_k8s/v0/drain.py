# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Taking a node out of service and back, as `kubectl drain` and `kubectl uncordon` do.

`drain` cordons the node and evicts its pods through the Eviction API, so that
PodDisruptionBudgets are honoured: an eviction a budget refuses (429) is asked again
every `poll` seconds until the timeout, and evicted pods are awaited until they are gone
from the node. Pods whose controller is a DaemonSet, and static (mirror) pods, stay
(`stays`): kubectl's `daemonSetFilter` and `mirrorPodFilter` (k8s.io/kubectl/pkg/drain
filters.go, which look at the controller reference and the mirror annotation). Unlike a
plain `kubectl drain`, pods without a controller and pods with emptyDir volumes are
evicted too, as `--force --delete-emptydir-data` would: the charms drain a node that is
about to be reset or rebooted, where those pods would stop anyway.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from charms.gpu_k8s.v0.kubeclient import KubeError
from charms.gpu_k8s.v0.system import poll_until

if TYPE_CHECKING:  # pragma: no cover
    from charms.gpu_k8s.v0.kubeclient import Kube

LIBID = "116c6d0a40fc4868b9255085e370d5c8"
LIBAPI = 0
LIBPATCH = 2

logger = logging.getLogger(__name__)

CORDON_ANNOTATION = "gpu-k8s/cordoned"
# On the mirror pod the kubelet makes for a static pod (kubernetes/kubernetes
# pkg/kubelet/types/pod_update.go ConfigMirrorAnnotationKey).
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclasses.dataclass
class DrainResult:
    """What `drain` did: pods (as "namespace/name") evicted and still remaining."""

    evicted: list[str]
    remaining: list[str]
    timed_out: bool


def _cordoned_by_us(node: dict) -> bool:
    return CORDON_ANNOTATION in (node.get("metadata", {}).get("annotations") or {})


def cordon(kube: Kube, node: str) -> None:
    """Mark the node unschedulable, noting on it that the cordon is ours."""
    kube.patch(
        "v1",
        "Node",
        node,
        {
            "metadata": {"annotations": {CORDON_ANNOTATION: "true"}},
            "spec": {"unschedulable": True},
        },
    )


def uncordon(kube: Kube, node: str) -> bool:
    """Lift a cordon that `cordon` set; True when the node is schedulable again.

    A cordon someone else set (no `CORDON_ANNOTATION`) stays, and so does a node that is
    gone: False.
    """
    current = kube.get("v1", "Node", node)
    if current is None:
        return False
    if not _cordoned_by_us(current):
        if current.get("spec", {}).get("unschedulable"):
            logger.info("node %s stays cordoned: it was cordoned by someone else", node)
            return False
        return True
    kube.patch(
        "v1",
        "Node",
        node,
        {
            "metadata": {"annotations": {CORDON_ANNOTATION: None}},
            "spec": {"unschedulable": None},
        },
    )
    return True


def stays(pod: dict) -> bool:
    """Whether a drain leaves `pod` on its node: a DaemonSet's pod, or a mirror pod."""
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return True
    return any(
        ref.get("kind") == "DaemonSet" and ref.get("controller")
        for ref in meta.get("ownerReferences") or []
    )


def _evictable_pods(kube: Kube, node: str) -> dict[str, str]:
    """Pods on the node that a drain evicts, as {"ns/name": uid}."""
    pods = {}
    for pod in kube.list("v1", "Pod", field_selector=f"spec.nodeName={node}"):
        if not stays(pod):
            meta = pod["metadata"]
            pods[f"{meta['namespace']}/{meta['name']}"] = meta.get("uid", "")
    return pods


def _evict(kube: Kube, pod: str) -> bool:
    """Ask the Eviction API to evict "ns/name": True if evicted or gone, False if blocked."""
    namespace, name = pod.split("/", 1)
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    try:
        kube.request("POST", kube.path("v1", "Pod", namespace, name, "eviction"), body=eviction)
    except KubeError as e:
        if e.status == 404:
            return True
        if e.status == 429:
            logger.info("eviction of %s blocked: %s", pod, e.message)
            return False
        raise
    return True


def drain(
    kube: Kube,
    node: str,
    *,
    timeout: float,
    poll: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DrainResult | None:
    """Cordon the node and evict its pods (not DaemonSet or mirror pods), waiting for them.

    Returns None when the node is not registered. A node someone else cordoned keeps
    that cordon (no annotation is added), so `uncordon` leaves it cordoned.
    Evictions refused with 429 (a PodDisruptionBudget) are retried every `poll` seconds
    until `timeout`; evicted pods are then awaited until they are gone from the node.
    Bounded by the clock and by the number of polls `timeout` allows.
    """
    current = kube.get("v1", "Node", node)
    if current is None:
        return None
    if _cordoned_by_us(current) or not current.get("spec", {}).get("unschedulable"):
        cordon(kube, node)
    pending = _evictable_pods(kube, node)
    evicted: list[str] = []
    terminating: dict[str, str] = {}

    def drained() -> bool | None:
        nonlocal terminating
        for pod in sorted(pending):
            if _evict(kube, pod):
                evicted.append(pod)
                terminating[pod] = pending.pop(pod)
        if terminating:
            present = _evictable_pods(kube, node)
            terminating = {p: u for p, u in terminating.items() if present.get(p) == u}
        return True if not pending and not terminating else None

    if poll_until(drained, timeout, poll=poll, clock=clock, sleep=sleep):
        return DrainResult(evicted, [], False)
    return DrainResult(evicted, sorted({*pending, *terminating}), True)
