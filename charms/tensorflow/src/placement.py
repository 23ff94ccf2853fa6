# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Where a job's pods could land: the nodes that count, and jobs no queue would ever admit.

No ops, no I/O: functions of the Node objects as the API server returns them. Kueue
admits a JobSet when the whole gang fits the team's quota (`job_state.queue_state` says
where it stands); the charm itself only refuses a job that could never run on the
cluster (`never_fits`), before anything is created. `queues.py` sizes the team's default
quota from the same schedulable nodes.

Whether a node is Ready comes from `charms.gpu_k8s.v0.kube_objects` (so do the GPUs a
pod holds, as the scheduler counts them, for `queues.py` and `job_state.py`).
"""

from __future__ import annotations

from collections.abc import Iterable

from literals import LABEL_GPU_PRODUCT, LABEL_GPU_SHARING, TIME_SLICING
from params import CPU_DEFAULT, MEMORY_DEFAULT, TrainRequest, quantity
from queues import CPU_FLAVOR, Tree

from charms.gpu_k8s.v0 import kube_objects
from charms.gpu_k8s.v0.kube_objects import GPU_RESOURCE, node_ready


def _tolerated(node: dict) -> bool:
    """Whether our GPU pods tolerate every NoSchedule/NoExecute taint of the node."""
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and taint.get("key") != GPU_RESOURCE:
            return False
    return True


def schedulable(node: dict) -> bool:
    """Ready, not cordoned, and no NoSchedule/NoExecute taint but the GPU one."""
    spec = node.get("spec") or {}
    return not spec.get("unschedulable") and node_ready(node) and _tolerated(node)


def never_fits(request: TrainRequest, nodes: Iterable[dict]) -> str | None:
    """Why the job could never run on this cluster (no queue would help), or None.

    More GPUs per pod than any schedulable node has, more GPUs in all than the schedulable
    nodes have together, or a role whose GPUs no single GPU model has: Kueue gives each
    pod set (one role's pods) one flavor per resource (Kueue docs, concepts/cluster_queue:
    it "assigns to the Workload pod sets a flavor for each resource the pod set
    requests"), and each GPU flavor is one product (queues.py), so 2 A10G and 2 T4 never
    hold 4 workers of one GPU. And cpu or memory requests larger than any node, or than
    all of them (`_no_room_for_requests`). Whether they are free now is Kueue's business:
    a job that fits the cluster but not its free GPUs or quota waits in the queue.
    """
    nodes = list(nodes)  # read more than once
    return _no_room_for_gpus(request, nodes) or _no_room_for_requests(request, nodes)


def time_sliced(node: dict) -> bool:
    """Whether the node's GPUs are time-sliced (its GPU Feature Discovery label says so)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_GPU_SHARING) == TIME_SLICING


def _no_room_for_gpus(request: TrainRequest, nodes: list[dict]) -> str | None:
    per_pod = request.gpus_per_worker
    if not per_pod:
        return None
    if per_pod > 1:
        # A time-sliced node's `nvidia.com/gpu` are replicas, and the device plugin may
        # hand one pod two replicas of the same GPU: it would see one GPU while Kueue, the
        # scheduler and job-status count two. The control plane sets the plugin's
        # `failRequestsGreaterThanOne` (device_plugin.py), so kubelet fails such a pod
        # (UnexpectedAdmissionError, NVIDIA/k8s-device-plugin v0.20.0 README "With CUDA
        # Time-Slicing", internal/rm/rm.go ValidateRequest): only whole GPUs hold it.
        shared = [n for n in nodes if time_sliced(n) and schedulable(n)]
        nodes = [n for n in nodes if not time_sliced(n)]
        if shared and not any(_gpus(n) for n in nodes if schedulable(n)):
            return (
                f"each worker asks for {per_pod} GPUs but this cluster's GPUs are "
                "time-sliced: a pod gets one shared GPU (the device plugin refuses a pod "
                "that asks for more, two slices may be the same GPU): use "
                "gpus-per-worker=1 and more workers"
            )
    sizes = [_gpus(n) for n in nodes if schedulable(n)]
    largest = max(sizes, default=0)
    if per_pod > largest:
        return (
            f"each worker needs {per_pod} GPUs but the largest schedulable node has {largest}: "
            "lower gpus-per-worker or add larger GPU nodes"
        )
    total = sum(request.gpu_demands())
    if total > sum(sizes):
        return (
            f"the job needs {total} GPUs but the cluster's schedulable nodes have "
            f"{sum(sizes)}: lower workers or gpus-per-worker, or add GPU nodes"
        )
    return _no_model_holds_a_role(request, nodes)


def _gpus(node: dict) -> int:
    return kube_objects.count(
        ((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE)
    )


def _no_room_for_requests(request: TrainRequest, nodes: Iterable[dict]) -> str | None:
    """Why the pods' cpu or memory requests fit no schedulable node, or not all of them.

    A pod is placed only on a node whose allocatable holds its requests (kube-scheduler's
    NodeResourcesFit), so no queue helps a pod larger than every node, or a job larger
    than all of them together.
    """
    usable = [
        (n.get("status") or {}).get("allocatable") or {}
        for n in nodes
        if schedulable(n) and not _unknown_quantity(n)
    ]
    if not usable:  # nodes still joining: nothing to measure against (GPUs checked above)
        return None
    for index, what in enumerate(("cpu", "memory")):
        have = [quantity(a.get(what, "0")) for a in usable]
        need = {role: quantity(request.resources(role)[index]) for role in request.replicas()}
        for role, each in need.items():
            if each > max(have, default=0):
                return (
                    f"each {role} requests {request.resources(role)[index]} of {what} but "
                    f"the largest schedulable node has {_amount(max(have, default=0), what)}: "
                    f"lower {_option(role, what)}"
                )
        total = sum(need[r] * n for r, n in request.replicas().items())
        if total > sum(have):
            return (
                f"the job requests {_amount(total, what)} of {what} but the schedulable "
                f"nodes have {_amount(sum(have), what)}: lower workers or {what}"
            )
    return None


def _unknown_quantity(node: dict) -> bool:
    """A node whose allocatable cpu or memory does not parse is left out."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    try:
        quantity(allocatable.get("cpu", "0"))
        quantity(allocatable.get("memory", "0"))
    except ValueError:
        return True
    return False


def _option(role: str, option: str) -> str:
    return option if role == "worker" else f"{role}-{option}"


def _amount(value: float, what: str) -> str:
    if what == "memory":
        return f"{value / 2**30:.1f}Gi"
    return f"{value:g}"


def _no_model_holds_a_role(request: TrainRequest, nodes: Iterable[dict]) -> str | None:
    """Why one role's GPUs fit no single GPU model's schedulable nodes (see never_fits)."""
    models: dict[str, list[int]] = {}
    for n in nodes:
        count = kube_objects.count(
            ((n.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE)
        )
        product = ((n.get("metadata") or {}).get("labels") or {}).get(LABEL_GPU_PRODUCT)
        if count and product and schedulable(n):
            models.setdefault(product, []).append(count)
    for role, pods in request.replicas().items():
        per_pod = request.gpus(role)
        if not per_pod:
            continue
        need = pods * per_pod
        if not any(max(sizes) >= per_pod and sum(sizes) >= need for sizes in models.values()):
            have = ", ".join(f"{sum(v)} {k}" for k, v in sorted(models.items())) or "none"
            return (
                f"the {pods} {role} pods need {need} GPUs of one model (Kueue gives a role "
                f"one GPU flavor) but no model has that many on schedulable nodes ({have}): "
                "lower workers or gpus-per-worker, or add nodes of one GPU model"
            )
        # A pod's GPUs come from one node (kube-scheduler NodeResourcesFit: the node's
        # allocatable must hold the pod's whole request), while Kueue's quota counts GPUs
        # only: a node of 3 holds one pod of 2, and the third GPU is no use to this role.
        # Only workers have GPUs (params.TrainRequest.gpus), so the pods are all one size
        # and the count per node is exact.
        fits = {k: sum(s // per_pod for s in v) for k, v in models.items()}
        best = max(fits, key=lambda k: (fits[k], k))
        if fits[best] < pods:
            sizes = ", ".join(str(s) for s in sorted(models[best], reverse=True))
            return (
                f"the {pods} {role} pods need {per_pod} GPUs each on one node, but the "
                f"schedulable nodes of one GPU model hold at most {fits[best]} such pods "
                f"({len(models[best])} {best} nodes: {sizes} GPUs): lower workers or "
                "gpus-per-worker, or add GPU nodes"
            )
    return None


def beyond_cohort(
    request: TrainRequest, cohort: dict | None, cluster_queues: Iterable[dict], team: str
) -> str | None:
    """Why Kueue could never admit the job to ClusterQueue `team`, by its cohort's quota.

    Kueue gives a ClusterQueue at most `potentialAvailable` (kueue v0.19.2 pkg/cache/
    scheduler/resource_node.go): the root cohort's SubtreeQuota, the Cohort's own nominal
    quota plus every member's less what a member's lendingLimit keeps (its nominal -
    lendingLimit), plus what the team's own lendingLimit keeps, at most its nominal +
    borrowingLimit (queues.Tree), per flavor and resource; a workload asking more is
    "insufficient quota ... > maximum capacity" for ever. Each pod set (role) gets one
    flavor per resource group (Kueue docs, concepts/cluster_queue), so a role's GPUs must
    fit one GPU flavor; every role's cpu and memory count on the `cpu` flavor together. The
    control plane sizes the cohort to the cluster less the teams' guarantees and the GPUs
    pods outside Kueue hold, on its update-status (kubernetes-control-plane kueue.py), so
    this can be lower than the nodes (a pod outside Kueue holds GPUs; a node joined since). A
    cohort not sized yet (no resourceGroups), or a ClusterQueue `team` not there yet,
    decides nothing: None.
    """
    groups = ((cohort or {}).get("spec") or {}).get("resourceGroups")
    name = ((cohort or {}).get("metadata") or {}).get("name")
    members = [q for q in cluster_queues if (q.get("spec") or {}).get("cohortName") == name]
    own = next((q for q in members if q["metadata"]["name"] == team), None)
    if not groups or own is None:
        return None
    tree = Tree.of(cohort, members)
    pool, lent = _nominal([cohort or {}]), _nominal(members)

    def most(key: tuple[str, str]) -> float:
        return tree.potential(team, key)

    def numbers(key: tuple[str, str], resource: str) -> str:
        kept = tree.kept(key) - tree.local(team, key)
        whole = pool.get(key, 0.0) + lent.get(key, 0.0) - kept
        limit = (
            f", and at most its nominal + borrowingLimit {_amount(most(key), resource)}"
            if most(key) < whole
            else ""
        )
        return (
            f"the cohort {name} can give {team} at most {_amount(most(key), resource)} ("
            + (f"flavor {key[0]}: " if resource == GPU_RESOURCE else "")
            + f"the cohort's own {_amount(pool.get(key, 0.0), resource)} + its "
            f"ClusterQueues' nominal {_amount(lent.get(key, 0.0), resource)}"
            + (f", less {_amount(kept, resource)} kept by their lendingLimit" if kept else "")
            + f"{limit})"
        )

    hint = "or add nodes (the control plane counts them into the cohort on its next update-status)"
    for index, resource in enumerate(("cpu", "memory")):
        need = sum(
            quantity(request.resources(role)[index]) * pods
            for role, pods in request.replicas().items()
        )
        key = (CPU_FLAVOR, resource)
        if need > most(key):
            return (
                f"it needs {_amount(need, resource)} {resource} of flavor {CPU_FLAVOR} but "
                f"{numbers(key, resource)}: lower workers or {resource}, {hint}"
            )
    gpu_flavors = {k for k in _nominal([own], keep_zero=True) if k[1] == GPU_RESOURCE}
    for role, pods in request.replicas().items():
        need = pods * request.gpus(role)
        if not need:
            continue
        best = max(sorted(gpu_flavors), key=most, default=("none", GPU_RESOURCE))
        if need > most(best):
            return (
                f"its {pods} {role} pods need {need} {GPU_RESOURCE} of one flavor but "
                f"{numbers(best, GPU_RESOURCE)}: lower workers or gpus-per-worker, {hint}"
            )
    return None


def _nominal(queues: Iterable[dict], *, keep_zero: bool = False) -> dict[tuple[str, str], float]:
    """The nominal quota per (flavor, resource) summed over Cohorts or ClusterQueues."""
    out: dict[tuple[str, str], float] = {}
    for queue in queues:
        for group in (queue.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for r in flavor.get("resources") or []:
                    try:
                        amount = quantity(r.get("nominalQuota", "0"))
                    except ValueError:
                        continue
                    if amount or keep_zero:
                        key = (flavor.get("name", ""), r.get("name", ""))
                        out[key] = out.get(key, 0.0) + amount
    return out


# Kept back on a GPU node for its DaemonSets before its cpu and memory are shared among
# its GPUs: the bundle's flannel (100m, 50Mi: kube-flannel.yml), DCGM exporter (100m,
# 128Mi: kubernetes-control-plane dcgm_exporter.py), device plugin and MIG manager (no
# requests) sum well under it. A node's allocatable is already its capacity less kubelet's
# kube-reserved, system-reserved and eviction threshold (kubernetes.io/docs/tasks/
# administer-cluster/reserve-compute-resources/).
NODE_RESERVE_CPU = 1.0
NODE_RESERVE_MEMORY = 2 * 2**30


def with_gpu_defaults(request: TrainRequest, nodes: Iterable[dict]) -> TrainRequest:
    """`request` with the cpu and memory its GPU workers were left to default to.

    A GPU worker's share of a GPU node: (allocatable - NODE_RESERVE) / the node's GPUs,
    times the worker's GPUs (cpu in millicores, memory in Mi, rounded down), the smallest
    over the schedulable nodes that could hold it (so that it fits whichever Kueue's
    flavor and the scheduler pick), so that the node's GPUs all fit their workers at once.
    The roles without GPUs (chief, parameter servers), which `cpu`/`memory` would
    otherwise size, keep CPU_DEFAULT/MEMORY_DEFAULT. The fields filled in are marked
    (TrainRequest.filled_in): the nodes change, what the user asked does not. A request
    that gives them, or has no GPUs, or that no node could hold (never_fits says why) is
    returned as it is.
    """
    per_pod = request.gpus_per_worker
    shares = []
    for n in nodes:
        allocatable = (n.get("status") or {}).get("allocatable") or {}
        gpus = kube_objects.count(allocatable.get(GPU_RESOURCE))
        if not schedulable(n) or gpus < max(per_pod, 1) or _unknown_quantity(n):
            continue
        cpu = (quantity(allocatable.get("cpu", "0")) - NODE_RESERVE_CPU) / gpus
        memory = (quantity(allocatable.get("memory", "0")) - NODE_RESERVE_MEMORY) / gpus
        shares.append((max(cpu, 0.001), max(memory, 2**20)))
    if not per_pod or not shares or (request.cpu and request.memory):
        return request
    update: dict[str, str] = {}
    if not request.cpu:
        update["cpu"] = f"{int(min(c for c, _ in shares) * per_pod * 1000)}m"
        if request.strategy == "ps":
            update |= {
                f"{r}_cpu": getattr(request, f"{r}_cpu") or CPU_DEFAULT for r in ("chief", "ps")
            }
    if not request.memory:
        update["memory"] = f"{int(min(m for _, m in shares) * per_pod / 2**20)}Mi"
        if request.strategy == "ps":
            update |= {
                f"{r}_memory": getattr(request, f"{r}_memory") or MEMORY_DEFAULT
                for r in ("chief", "ps")
            }
    return request.filled_in(update)
