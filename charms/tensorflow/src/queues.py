# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""This application as a Kueue team: its ClusterQueue in the shared cohort, its LocalQueue.

No ops here. The control plane installs Kueue and keeps the cluster-wide objects (the
cohort `gpu-k8s`, a ResourceFlavor `cpu` and one per GPU model, labelled
`app.kubernetes.io/managed-by: kubernetes-control-plane`); this charm adds its team:

- ClusterQueue `team-<namespace>` in cohort `gpu-k8s`, admitting from this namespace only,
  with two resource groups (cpu/memory on flavor `cpu`; `nvidia.com/gpu` on each GPU
  flavor). Its nominal quota is the team's guarantee: `cpu-quota`, `memory-quota` and,
  per GPU model, `gpu-quota`; left unset, 0: the team holds nothing of its own and
  borrows from the cohort, which the control plane sizes to the cluster less every
  team's guarantee and the GPUs pods outside Kueue hold (its kueue.py), so that the
  quotas of all teams never sum past what the cluster has (issue 29 item 6). A member
  may borrow whatever the cohort has left (borrowingLimit unset), the cohort's whole
  quota at most (Kueue pkg/cache/scheduler/resource_node.go available,
  potentialAvailable). With the control plane's fair sharing on, teams borrowing the
  pool split it (a team with a lower share preempts in one with a higher,
  `reclaimWithinCohort: Any`, flavorassigner.go canPreemptWhileBorrowing), a team's own
  guarantee is reclaimed from borrowers, and within the team a higher priority preempts
  a lower one. This charm reads and writes only its own ClusterQueue (kube-api allow-
  list, by name): the cohort and the other teams' queues are the control plane's.
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

from literals import (
    CLUSTER_QUEUE_PREFIX,
    COHORT,
    KUEUE_API,
    LABEL_GPU_PRODUCT,
    LOCAL_QUEUE,
    RETIRED_LOCAL_QUEUES,
)

from charms.gpu_k8s.v0.kube_objects import GPU_RESOURCE, fingerprint

logger = logging.getLogger(__name__)

API = KUEUE_API
CPU_FLAVOR = "cpu"
FLAVOR_OWNER = ("app.kubernetes.io/managed-by", "kubernetes-control-plane")


@dataclasses.dataclass(frozen=True)
class Quotas:
    """The team's guarantee (its nominal quota); unset (-1 GPUs, "") is none: 0."""

    gpus: int = -1
    cpu: str = ""
    memory: str = ""


def cluster_queue_name(namespace: str) -> str:
    """The team's ClusterQueue."""
    return f"{CLUSTER_QUEUE_PREFIX}{namespace}"


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
    app: str, namespace: str, flavors: Iterable[dict[str, Any]], quotas: Quotas
) -> list[dict[str, Any]]:
    """The ClusterQueue and LocalQueue of this team (see the module docstring)."""
    gpus = str(max(0, quotas.gpus))
    groups: list[dict[str, Any]] = [
        {
            "coveredResources": ["cpu", "memory"],
            "flavors": [
                {
                    "name": CPU_FLAVOR,
                    "resources": [
                        {"name": "cpu", "nominalQuota": quotas.cpu or "0"},
                        {"name": "memory", "nominalQuota": quotas.memory or "0"},
                    ],
                }
            ],
        }
    ]
    gpu = [
        {"name": name, "resources": [{"name": GPU_RESOURCE, "nominalQuota": gpus}]}
        for name in sorted(gpu_flavors(flavors))
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
    objects = team_objects(app, namespace, flavors, quotas)
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
