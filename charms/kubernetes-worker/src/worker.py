# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The kubernetes-worker workload: node setup, joining, the node's labels, leaving.

No ops imports: the charm hands in a `Host` (the machine) and a `Kube` client (the
cluster) and turns what comes back, or what is raised, into a status. Each system has
its own module (`charms.gpu_k8s.v0.containerd`, `.kubeadm`, `gpu_node.py` for GPUs,
`node_upgrade.py` for the Kubernetes minor; the options are `charm_config.py`); this
module only sequences them for a worker node.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from charms.gpu_k8s.v0 import apt, containerd, drain, images, kubeadm
from charms.gpu_k8s.v0.kubeclient import KubeError
from charms.gpu_k8s.v0.system import Host

if TYPE_CHECKING:
    from charm_config import WorkerConfig

    from charms.gpu_k8s.v0.drain import DrainResult
    from charms.gpu_k8s.v0.kubeclient import Kube
    from charms.gpu_k8s.v0.kubernetes_cluster import JoinInfo

logger = logging.getLogger(__name__)

DEFAULT_API_PORT = 6443
NFS_CLIENT = "nfs-common"
# Annotation recording which labels came from `node-labels`, so that a label removed
# from the config is removed from the node and labels set by others are left alone.
MANAGED_LABELS_ANNOTATION = "gpu-k8s.io/node-labels"


def sandbox_image(config: WorkerConfig, info: JoinInfo | None) -> str:
    """The pause image for containerd: this unit's image-registry, else the control plane's.

    kubeadm names it `<imageRepository>/pause:<tag>` under a custom imageRepository, which
    is what moving `registry.k8s.io/pause:<tag>` below a registry gives.
    """
    registry = config.image_registry or (info.image_registry if info else "")
    return images.mirrored(containerd.SANDBOX_IMAGE, registry)


def join_material(endpoint_url: str, ca_cert_hash: str, token: str) -> kubeadm.JoinMaterial:
    """Build kubeadm join material from the control plane's published values.

    Raises:
        ValueError: a value is malformed (the message never contains the token).
    """
    endpoint = re.sub(r"^https://", "", endpoint_url.strip()).rstrip("/")
    if not re.search(r":[0-9]+$", endpoint):
        endpoint = f"{endpoint}:{DEFAULT_API_PORT}"
    return kubeadm.JoinMaterial(endpoint=endpoint, ca_cert_hash=ca_cert_hash, token=token)


class JoinError(Exception):
    """The node could not join (yet); the message is the Waiting status.

    Retried on the next event: the control plane publishes new material, or kubeadm
    gets through.
    """


def join_cluster(
    host: Host,
    endpoint_url: str,
    ca_cert_hash: str,
    token: str,
    *,
    node: str,
    labels: Mapping[str, str],
    taints: Sequence[Mapping[str, str]] = (),
) -> bool:
    """Join the cluster with the control plane's material unless joined; True when it did.

    `taints` are the ones the Node registers with (the node itself may not change them
    later: `kubeadm.render_join_config`).

    Raises:
        JoinError: the material is malformed, or kubeadm failed (message without secrets).
    """
    if kubeadm.is_joined(host):
        return False
    if not token:  # the control plane keeps a token only while a unit joins: it mints one
        raise JoinError("waiting for the control plane's bootstrap token")
    try:
        material = join_material(endpoint_url, ca_cert_hash, token)
    except ValueError as e:
        raise JoinError(f"control plane join material is invalid: {e}") from None
    try:
        kubeadm.join(
            host, material, node_name=node, labels=labels, control_plane=False, taints=taints
        )
    except kubeadm.KubeadmError as e:
        logger.error("%s", e)
        raise JoinError(f"{e}; retrying on the next update-status") from None
    logger.info("node %s joined the cluster at %s", node, material.endpoint)
    return True


def prepare(host: Host) -> bool:
    """Prepare the kernel, install containerd and the NFS client; True when anything changed.

    Raises:
        apt.AptError: containerd or nfs-common could not be installed.
    """
    changed = containerd.prepare_kernel(host)
    changed = containerd.install(host) or changed
    # kubelet mounts NFS volumes (the shared EFS claim) with mount(8), which needs
    # /sbin/mount.nfs from nfs-common; without it every such pod stays ContainerCreating
    # with "mount failed: exit status 32 ... you might need a /sbin/mount.<type> helper"
    # (kubernetes/kubernetes#30310). Charmed Kubernetes' worker installs it the same way
    # (charm-kubernetes-worker layer.yaml). Not pinned and not held: unattended-upgrades
    # keeps it current.
    return apt.install(host, {NFS_CLIENT: None}, hold=False) or changed


def label_patch(node: Mapping[str, Any], labels: Mapping[str, str]) -> dict | None:
    """The merge patch that makes the node carry `labels`, or None when it already does.

    Labels this charm set before but that are no longer configured are removed; other
    labels (kubelet's, GPU labels, an operator's) are never touched.
    """
    metadata = node.get("metadata") or {}
    current = metadata.get("labels") or {}
    annotation = (metadata.get("annotations") or {}).get(MANAGED_LABELS_ANNOTATION, "")
    managed = {key for key in annotation.split(",") if key}
    wanted_keys = ",".join(sorted(labels))
    patch_labels: dict[str, str | None] = {
        key: value for key, value in labels.items() if current.get(key) != value
    }
    patch_labels.update({key: None for key in managed - set(labels) if key in current})
    if not patch_labels and annotation == wanted_keys:
        return None
    return {
        "metadata": {
            "labels": patch_labels,
            "annotations": {MANAGED_LABELS_ANNOTATION: wanted_keys},
        }
    }


def apply_labels(kube: Kube, node: str, labels: Mapping[str, str]) -> bool | None:
    """Make `node` carry `labels`; True when patched, None when the node is not registered."""
    obj = kube.get("v1", "Node", node)
    if obj is None:
        return None
    patch = label_patch(obj, labels)
    if patch is None:
        return False
    kube.patch("v1", "Node", node, patch)
    return True


def not_ready(node: Mapping[str, Any]) -> str | None:
    """Why the Node is not Ready, from its `Ready` condition; None when it is Ready.

    kubelet posts the condition (kubernetes pkg/kubelet/nodestatus/setters.go
    `ReadyCondition`: status False, reason `KubeletNotReady`, its runtime, network and
    storage errors as the message); the node lifecycle controller sets it Unknown with
    "Kubelet stopped posting node status." when kubelet goes silent
    (pkg/controller/nodelifecycle). A Node with no such condition was registered and has
    not posted a status yet.
    """
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            if condition.get("status") == "True":
                return None
            return (
                condition.get("message")
                or condition.get("reason")
                or f"Ready is {condition.get('status') or 'Unknown'}"
            )
    return "kubelet has not reported its status yet"


def drain_summary(node: str, result: DrainResult | None, timeout: float, limit: int = 5) -> str:
    """One line saying what the drain did, naming pods left behind."""
    if result is None:
        return f"node {node} was not registered; nothing to drain"
    if not result.remaining:
        return f"drained node {node} ({len(result.evicted)} pods evicted)"
    shown = ", ".join(result.remaining[:limit])
    more = len(result.remaining) - limit
    if more > 0:
        shown += f" and {more} more"
    return (
        f"drain of node {node} timed out after {timeout:g}s; "
        f"{len(result.remaining)} pods were still running: {shown}"
    )


def drain_for_reboot(
    kube: Kube,
    node: str,
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Drain a node that is about to reboot; True when it was registered (now cordoned).

    Pods still there at the timeout are named in a warning: they stop with the reboot.

    Raises:
        KubeError: the Kubernetes API refused (the node must not reboot undrained).
    """
    result = drain.drain(kube, node, timeout=timeout, clock=clock, sleep=sleep)
    if result is not None and result.remaining:
        logger.warning("%s; they stop with the reboot", drain_summary(node, result, timeout))
    return result is not None


# Answers that mean no API server can serve the drain now, after the client's own retries
# (kubeclient.py retries connection errors and 502/503/504): no answer at all (status 0:
# every server refused, timed out or dropped the connection, as once the control plane's
# machines are released in `juju destroy-model`), or a proxy or API server saying it
# cannot serve. Any other answer (403, 404, 409, 422, 500) is a refusal, and a refused
# drain fails the hook as before.
API_DOWN = frozenset({0, 502, 503, 504})
# How long leaving waits for an API that does not answer while the cluster stays, and
# how often it asks again. canonical/k8s-operator's worker waits 30 s on `stop` for its
# node to leave the cluster and then goes on whatever it saw (charms/worker/k8s/src/
# charm.py `_last_gasp`: busy_wait 30, sleep 1); `kubectl drain` retries an eviction only
# on 429 and fails on any other error (k8s.io/kubectl pkg/drain/drain.go `evictPods`:
# "error when evicting pods/..."). Each try here already spends the client's retries
# (five, backing off from 0.5 s); one minute more covers an API server's restart.
API_WAIT = 60.0
API_RETRY = 10.0


def drain_for_removal(
    kube: Kube,
    node: str,
    timeout: float,
    *,
    everyone_leaves: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Drain a node that is about to be reset; what happened, for the unit's status.

    Pods still there at the timeout are named in a warning: they stop with the reset and
    their controllers recreate them elsewhere once the node is gone.

    An API that does not answer (`API_DOWN`) is not waited for when `everyone_leaves`
    (the whole application goes: `juju remove-application`, `juju destroy-model`, where
    the control plane's machines may already be gone): there is nowhere left to drain
    to. Otherwise it is asked again every `API_RETRY` seconds for `API_WAIT` seconds,
    then the node is reset undrained with a warning naming what that means.

    Raises:
        KubeError: the Kubernetes API refused (the node must not be reset undrained).
    """
    since = clock()
    while True:
        try:
            result = drain.drain(kube, node, timeout=timeout, clock=clock, sleep=sleep)
            break
        except KubeError as e:
            if e.status not in API_DOWN:
                raise
            waited = clock() - since
            if everyone_leaves or waited >= API_WAIT:
                why = (
                    "the application is being removed"
                    if everyone_leaves
                    else f"it did not answer for {waited:.0f}s"
                )
                logger.warning(
                    "cannot drain node %s: the Kubernetes API is unreachable (%s) and %s; "
                    "resetting it undrained: its pods stop with the reset and are "
                    "rescheduled once Kubernetes marks the node lost",
                    node,
                    e,
                    why,
                )
                return f"reset node {node} without draining it: the Kubernetes API is unreachable"
            logger.warning(
                "cannot drain node %s yet: the Kubernetes API is unreachable (%s); "
                "asking again in %.0fs (gives up after %.0fs)",
                node,
                e,
                API_RETRY,
                API_WAIT,
            )
            sleep(min(API_RETRY, API_WAIT - waited))
    summary = drain_summary(node, result, timeout)
    if result is not None and result.remaining:
        logger.warning("%s; they stop with the reset: %s", summary, " ".join(result.remaining))
        return f"{summary}; see juju debug-log"
    logger.info("%s", summary)
    return summary
