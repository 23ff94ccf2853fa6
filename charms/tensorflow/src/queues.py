# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""This application as a Kueue team: its ClusterQueue in the shared cohort, its LocalQueue.

No ops here. The control plane installs Kueue and keeps the cluster-wide objects (the
cohort `gpu-k8s`, a ResourceFlavor `cpu` and one per GPU model, labelled
`app.kubernetes.io/managed-by: kubernetes-control-plane`); this charm adds its team:

- ClusterQueue `team-<namespace>` in cohort `gpu-k8s`, admitting from this namespace only,
  with two resource groups (cpu/memory on flavor `cpu`; `nvidia.com/gpu` on each GPU
  flavor). Its nominal quota is `cpu-quota`, `memory-quota` and, per GPU model,
  `gpu-quota`; left at their defaults they are what the schedulable nodes have (the whole
  cluster: fine for one team; teams sharing a cluster set theirs), less the GPUs this
  team's model servers hold: Kueue counts only what it admits, and a quota should be
  "the resources in the cluster available for running jobs (after discounting resources
  consumed by ... pods not managed by kueue)" (clusterqueue_types.go NominalQuota), or
  Kueue admits a job whose pods then cannot be scheduled. Unused quota is lent to
  the other teams of the cohort and reclaimed by preemption (`reclaimWithinCohort: Any`);
  within the team a higher priority preempts a lower one.
- LocalQueue `training` in the namespace, pointing at it: the queue every job names
  (`kueue.x-k8s.io/queue-name`). Never `default`, which Kueue would make the namespace's
  default queue for TensorBoard's Deployment and the purge Job too (literals.LOCAL_QUEUE).

Kueue API (kubernetes-sigs/kueue v0.19.2, apis/kueue/v1beta2/clusterqueue_types.go and
localqueue_types.go): ClusterQueue {cohortName, namespaceSelector, queueingStrategy,
preemption {reclaimWithinCohort, borrowWithinCohort {policy}, withinClusterQueue},
resourceGroups [{coveredResources, flavors [{name, resources [{name, nominalQuota}]}]}]};
LocalQueue {clusterQueue}. A null namespaceSelector admits from no namespace.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

import params
import placement
import serving
from literals import (
    CLUSTER_QUEUE_PREFIX,
    KUEUE_API,
    LABEL_GPU_PRODUCT,
    LOCAL_QUEUE,
    RETIRED_LOCAL_QUEUES,
)

from charms.gpu_k8s.v0.kube_objects import GPU_RESOURCE, fingerprint, pod_gpus

logger = logging.getLogger(__name__)

API = KUEUE_API
COHORT = "gpu-k8s"
CPU_FLAVOR = "cpu"
FLAVOR_OWNER = ("app.kubernetes.io/managed-by", "kubernetes-control-plane")


@dataclasses.dataclass(frozen=True)
class Quotas:
    """The team's nominal quota; None (or -1 GPUs) means what the cluster has."""

    gpus: int = -1
    cpu: str = ""
    memory: str = ""


def cluster_queue_name(namespace: str) -> str:
    """The team's ClusterQueue."""
    return f"{CLUSTER_QUEUE_PREFIX}{namespace}"


@dataclasses.dataclass(frozen=True)
class Capacity:
    """What the schedulable nodes offer: CPUs, memory bytes, GPUs per product label."""

    cpu: float
    memory: float
    gpus: dict[str, int]


def capacity(nodes: Iterable[dict[str, Any]]) -> Capacity:
    """The allocatable resources of the nodes pods can land on."""
    cpu = memory = 0.0
    gpus: dict[str, int] = {}
    for node in nodes:
        if not placement.schedulable(node):
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        cpu += params.quantity(allocatable.get("cpu", "0"))
        memory += params.quantity(allocatable.get("memory", "0"))
        count = int(params.quantity(allocatable.get(GPU_RESOURCE, "0")))
        product = ((node.get("metadata") or {}).get("labels") or {}).get(LABEL_GPU_PRODUCT)
        if count and product:
            gpus[product] = gpus.get(product, 0) + count
    return Capacity(cpu, memory, gpus)


def held_outside_kueue(
    pods: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]]
) -> dict[str, int]:
    """GPUs per product label that `pods` (not Kueue's: model servers) hold on their nodes.

    Pods bound to a schedulable node (the ones `capacity` counts) and not being deleted
    count; a pending one holds nothing yet. Only GPUs: a server's CPU and memory requests
    (500m, 1Gi) are small beside a node's, and left in the cpu quota.
    """
    products = {
        (n.get("metadata") or {}).get("name"): ((n.get("metadata") or {}).get("labels") or {}).get(
            LABEL_GPU_PRODUCT
        )
        for n in nodes
        if placement.schedulable(n)
    }
    held: dict[str, int] = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        product = products.get(spec.get("nodeName"))
        phase = (pod.get("status") or {}).get("phase")
        if not product or meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            continue
        held[product] = held.get(product, 0) + pod_gpus(pod)
    return held


def gpu_flavors(flavors: Iterable[dict[str, Any]]) -> dict[str, str]:
    """The control plane's GPU ResourceFlavors: name -> the product label they select."""
    out = {}
    for flavor in flavors:
        labels = (flavor.get("metadata") or {}).get("labels") or {}
        if labels.get(FLAVOR_OWNER[0]) != FLAVOR_OWNER[1]:
            continue
        product = ((flavor.get("spec") or {}).get("nodeLabels") or {}).get(LABEL_GPU_PRODUCT)
        if product:
            out[flavor["metadata"]["name"]] = product
    return out


def _cpu_text(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{int(value * 1000)}m"


def team_objects(
    app: str,
    namespace: str,
    flavors: Iterable[dict[str, Any]],
    nodes: Iterable[dict[str, Any]],
    quotas: Quotas,
    held: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """The ClusterQueue and LocalQueue of this team (see the module docstring).

    `held`: GPUs per product that the team's model servers hold (`held_outside_kueue`),
    taken off the default GPU quota.
    """
    have = capacity(nodes)
    held = held or {}
    cpu = quotas.cpu or _cpu_text(have.cpu)
    memory = quotas.memory or str(int(have.memory))
    groups: list[dict[str, Any]] = [
        {
            "coveredResources": ["cpu", "memory"],
            "flavors": [
                {
                    "name": CPU_FLAVOR,
                    "resources": [
                        {"name": "cpu", "nominalQuota": cpu},
                        {"name": "memory", "nominalQuota": memory},
                    ],
                }
            ],
        }
    ]
    gpu = [
        {
            "name": name,
            "resources": [
                {
                    "name": GPU_RESOURCE,
                    "nominalQuota": str(
                        max(0, have.gpus.get(product, 0) - held.get(product, 0))
                        if quotas.gpus < 0
                        else quotas.gpus
                    ),
                }
            ],
        }
        for name, product in sorted(gpu_flavors(flavors).items())
    ]
    if gpu:
        groups.append({"coveredResources": [GPU_RESOURCE], "flavors": gpu})
    labels = {"app.kubernetes.io/managed-by": app}
    name = cluster_queue_name(namespace)
    return [
        {
            "apiVersion": API,
            "kind": "ClusterQueue",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "cohortName": COHORT,
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {
                    "reclaimWithinCohort": "Any",
                    "borrowWithinCohort": {"policy": "LowerPriority"},
                    "withinClusterQueue": "LowerPriority",
                },
                "resourceGroups": groups,
            },
        },
        {
            "apiVersion": API,
            "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": namespace, "labels": labels},
            "spec": {"clusterQueue": name},
        },
    ]


def retired(local_queues: Iterable[dict[str, Any]], app: str) -> list[str]:
    """This application's LocalQueues of earlier revisions, which it should delete."""
    return [
        q["metadata"]["name"]
        for q in local_queues
        if q["metadata"]["name"] in RETIRED_LOCAL_QUEUES
        and ((q["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == app)
    ]


class NotInstalledError(Exception):
    """Kueue's API is not in the cluster (the message says what to do)."""


def reconcile(kube: Any, app: str, namespace: str, quotas: Quotas, applied: str | None) -> str:
    """Apply this team's ClusterQueue and LocalQueue when they differ from `applied`.

    Returns their fingerprint (what to pass as `applied` next time).

    Raises:
        NotInstalledError: the cluster serves no Kueue API.
    """
    from charms.gpu_k8s.v0.kubeclient import KubeError

    try:
        flavors = kube.list(API, "ResourceFlavor")
    except KubeError as e:
        if e.status != 404:
            raise
        raise NotInstalledError(
            "Kueue is not installed in the cluster: set batch-engines=true on "
            "kubernetes-control-plane"
        ) from None
    nodes = kube.list("v1", "Node")
    servers = kube.list("v1", "Pod", namespace, label_selector=serving.LABEL_SERVING)
    objects = team_objects(
        app, namespace, flavors, nodes, quotas, held_outside_kueue(servers, nodes)
    )
    digest = fingerprint(objects)
    if digest == applied:
        return digest
    for obj in objects:
        kube.apply(obj, field_manager=app)
    for name in retired(kube.list(API, "LocalQueue", namespace), app):
        kube.delete(API, "LocalQueue", name, namespace)
        logger.info("deleted LocalQueue %s of an earlier revision", name)
    logger.info("applied ClusterQueue %s", objects[0]["metadata"]["name"])
    return digest
