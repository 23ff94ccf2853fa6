# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What the cluster looks like, from Node and Pod objects (no ops imports)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, ClassVar

from listing import LIMIT, shown

from charms.gpu_k8s.v0 import kube_objects
from charms.gpu_k8s.v0.drain import stays
from charms.gpu_k8s.v0.kube_objects import GPU_RESOURCE, node_ready, pod_gpus
from charms.gpu_k8s.v0.unit_state import Gauge

if TYPE_CHECKING:
    from registry import Registry

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
ROLE_PREFIX = "node-role.kubernetes.io/"


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """One node, summarised for `cluster-info` and the status line."""

    name: str
    roles: tuple[str, ...]
    version: str
    ready: bool
    schedulable: bool
    gpus: int
    gpu_product: str | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form with dashed keys."""
        out: dict[str, Any] = {
            "name": self.name,
            "roles": list(self.roles) or ["worker"],
            "version": self.version,
            "ready": self.ready,
            "schedulable": self.schedulable,
            "gpus": self.gpus,
        }
        if self.gpu_product:
            out["gpu-product"] = self.gpu_product
        return out


def summarize(node: dict) -> NodeInfo:
    """Summarise one Node object."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = node.get("status") or {}
    roles = tuple(sorted(k[len(ROLE_PREFIX) :] for k in labels if k.startswith(ROLE_PREFIX)))
    return NodeInfo(
        name=meta.get("name", ""),
        roles=roles,
        version=(status.get("nodeInfo") or {}).get("kubeletVersion", "unknown"),
        ready=node_ready(node),
        schedulable=not (node.get("spec") or {}).get("unschedulable", False),
        gpus=kube_objects.count((status.get("allocatable") or {}).get(GPU_RESOURCE)),
        gpu_product=labels.get(GPU_PRODUCT_LABEL),
    )


def gpu_totals(models: list[dict[str, int]]) -> str:
    """`8x NVIDIA A10G, 4x NVIDIA H100`: GPUs per model over many nodes, most first."""
    totals: dict[str, int] = {}
    for per_node in models:
        for model, count in per_node.items():
            totals[model] = totals.get(model, 0) + count
    ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{count}x {model}" for model, count in ranked if count)


def summarize_all(nodes: list[dict]) -> list[NodeInfo]:
    """Summaries of `nodes`, sorted by name."""
    return sorted((summarize(n) for n in nodes), key=lambda n: n.name)


# -- GPUs held by pods (`arena top node`) ----------------------------------------------

# Pods that hold what they were given: bound to a node and not finished (kubelet frees a
# finished pod's devices). A field selector the API server supports for pods
# (pkg/registry/core/pod/strategy.go PodToSelectableFields: status.phase, spec.nodeName).
HOLDING_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def gpu_holders(pods: Iterable[dict]) -> dict[str, list[tuple[str, int]]]:
    """Node name -> the pods holding GPUs there, as (`namespace/name`, GPUs)."""
    out: dict[str, list[tuple[str, int]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        count = pod_gpus(pod)
        if not node or not count or phase in ("Succeeded", "Failed"):
            continue
        meta = pod.get("metadata") or {}
        out.setdefault(node, []).append((f"{meta.get('namespace')}/{meta.get('name')}", count))
    for holders in out.values():
        holders.sort()
    return out


def gpu_table(nodes: list[NodeInfo], holders: Mapping[str, list[tuple[str, int]]]) -> str:
    """Allocated/total GPUs per GPU node with the pods holding them (`arena top node`)."""
    rows = [("NODE", "MODEL", "ALLOCATED", "PODS")]
    for node in nodes:
        held = holders.get(node.name, [])
        if not node.gpus and not held:
            continue
        pods = ", ".join(f"{name} ({count})" for name, count in held) or "-"
        allocated = sum(count for _, count in held)
        rows.append((node.name, node.gpu_product or "-", f"{allocated}/{node.gpus}", pods))
    if len(rows) == 1:
        return "no GPU nodes"
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3]
        for row in rows
    )


def report(nodes: list[NodeInfo], pods: Iterable[dict]) -> dict[str, str]:
    """The `cluster-info` results: every node, and who holds the GPUs."""
    holders = gpu_holders(pods)
    ready = sum(1 for n in nodes if n.ready)
    total = sum(n.gpus for n in nodes)
    allocated = sum(count for held in holders.values() for _, count in held)
    listed = []
    for n in nodes:
        entry = n.as_dict()
        if n.gpus or n.name in holders:
            held = holders.get(n.name, [])
            entry["gpus-allocated"] = sum(count for _, count in held)
            entry["gpu-pods"] = dict(held)
        listed.append(entry)
    return {
        "summary": f"{len(nodes)} nodes, {ready} ready, {allocated} of {total} GPUs allocated",
        "gpus-by-model": allocated_by_model(nodes, holders) or "none",
        "gpu-nodes": gpu_table(nodes, holders),
        "nodes": json.dumps(listed, sort_keys=True),
    }


def allocated_by_model(nodes: list[NodeInfo], holders: Mapping[str, list[tuple[str, int]]]) -> str:
    """`3/4 NVIDIA-A10G, 0/8 NVIDIA-H100`: allocated/total GPUs per model, most first."""
    total: dict[str, int] = {}
    used: dict[str, int] = {}
    for node in nodes:
        if node.gpu_product:
            total[node.gpu_product] = total.get(node.gpu_product, 0) + node.gpus
            held = sum(count for _, count in holders.get(node.name, []))
            used[node.gpu_product] = used.get(node.gpu_product, 0) + held
    ranked = sorted(total.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{used[model]}/{count} {model}" for model, count in ranked if count)


def _is_finished(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def removable(node: dict, pods: list[dict]) -> tuple[bool, str]:
    """Whether a departed worker's Node can be deleted now, and why (not).

    It can once it is NotReady (the machine is gone), or once it is cordoned and runs
    nothing but DaemonSet, mirror or finished pods (it drained itself).
    """
    if not node_ready(node):
        return True, "node is NotReady"
    if not (node.get("spec") or {}).get("unschedulable", False):
        return False, "node is not cordoned yet"
    busy = [p for p in pods if not stays(p) and not _is_finished(p)]
    if busy:
        return False, f"{len(busy)} pods still running"
    return True, "node is drained"


@dataclasses.dataclass
class NodeHealth:
    """Which of the Nodes the charms expect the API reports not Ready, or does not have.

    Kept in the peer application databag (`node-health`) by the leader: refreshed from the
    Node Table (a few columns per node, not whole objects) on update-status (and when
    leadership moves or the charm is upgraded; from the whole Nodes when the hook lists
    them anyway, for Kueue's cohort), and for a single Node when a worker or
    control-plane unit publishes a new node name. Every unit reads it for its status
    line, so actions and other hooks that reconcile nothing still show what the API said.
    """

    not_ready: set[str] = dataclasses.field(default_factory=set)
    missing: set[str] = dataclasses.field(default_factory=set)

    KEY: ClassVar[str] = "node-health"

    @classmethod
    def load(cls, bag: Mapping[str, str]) -> NodeHealth | None:
        """The health stored in `bag`, or None when the API was never asked."""
        raw = bag.get(cls.KEY)
        if raw is None:
            return None
        data = json.loads(raw)
        return cls(set(data.get("not-ready", [])), set(data.get("missing", [])))

    def save(self, bag: MutableMapping[str, str]) -> None:
        """Store in `bag` when it changed."""
        text = json.dumps(
            {"missing": sorted(self.missing), "not-ready": sorted(self.not_ready)}, sort_keys=True
        )
        if bag.get(self.KEY) != text:
            bag[self.KEY] = text

    @classmethod
    def from_table(cls, expected: Iterable[str], rows: Iterable[dict]) -> NodeHealth:
        """Health of the `expected` node names from the Node Table (`kubectl get nodes`).

        The Status column is `Ready`, `NotReady` or `Unknown`, followed by
        `,SchedulingDisabled` for a cordoned node (kube-apiserver's printNode).
        """
        status = {row.get("Name"): str(row.get("Status") or "") for row in rows}
        health = cls()
        for name in expected:
            health.not_ready.discard(name)
            health.missing.discard(name)
            if name not in status:
                health.missing.add(name)
            elif status[name].split(",")[0] != "Ready":
                health.not_ready.add(name)
        return health

    @classmethod
    def from_nodes(cls, expected: Iterable[str], nodes: Iterable[dict]) -> NodeHealth:
        """Health of the `expected` node names from a list of whole Nodes.

        The same answer as `from_table`: printNode (kubernetes pkg/printers/internalversion/
        printers.go) writes `Ready` first in the Status column only when the Ready
        condition's status is True, which is what `node_ready` checks.
        """
        by_name = {(n.get("metadata") or {}).get("name"): n for n in nodes}
        health = cls()
        for name in expected:
            health.observe(name, by_name.get(name))
        return health

    def observe(self, name: str, node: dict | None) -> None:
        """Record what the API returned for one Node (None: it has no such Node)."""
        self.not_ready.discard(name)
        self.missing.discard(name)
        if node is None:
            self.missing.add(name)
        elif not node_ready(node):
            self.not_ready.add(name)

    def keep_only(self, expected: set[str]) -> None:
        """Forget nodes the charms no longer expect (departed units)."""
        self.not_ready &= expected
        self.missing &= expected

    def ready(self, names: Iterable[str]) -> list[str]:
        """Those of `names` the API reported Ready."""
        return [n for n in names if n not in self.not_ready and n not in self.missing]

    def problems(self, limit: int = LIMIT) -> str:
        """`; not Ready: a, b; not registered: c` for the status line (empty when healthy)."""
        out = ""
        for label, names in (("not Ready", self.not_ready), ("not registered", self.missing)):
            if names:
                out += f"; {label}: {shown(sorted(names), limit, sep=', ')}"
        return out


def status_line(
    version: str,
    health: NodeHealth,
    *,
    planes: Iterable[str],
    workers: Registry,
    behind: int,
    pending_removal: int,
    notes: Iterable[str],
    head: str = "Ready",
) -> str:
    """`Ready: v1.36, 3 control-plane, 5 workers (2 with 8 GPUs: 8x NVIDIA A10G)` and notes.

    Nodes count once the API reported them Ready; GPUs count on Ready workers; nodes not
    Ready or not registered, an upgrade in progress, departed nodes still to delete,
    `notes` and workers whose data is invalid follow, each after a `; `. `head` is what
    the line starts with (`node X not Ready` while this unit's own node is not).
    """
    down = health.not_ready | health.missing  # what `health.ready` leaves out, once
    ready = [w for w in workers.workers.values() if w.node not in down]
    line = f"{head}: v{version}, {len(health.ready(planes))} control-plane, {len(ready)} workers"
    gpu_workers = [w for w in ready if w.gpus]
    if gpu_workers:
        models = gpu_totals([w.models for w in gpu_workers])
        total = sum(w.gpus for w in gpu_workers)
        noun = "GPU" if total == 1 else "GPUs"
        line += f" ({len(gpu_workers)} with {total} {noun}{': ' + models if models else ''})"
    line += health.problems()
    if behind:
        line += f"; upgrading to v{version}: {behind} node(s) to go"
    if pending_removal:
        line += f"; {pending_removal} departed node(s) pending removal"
    line += "".join(f"; {note}" for note in notes)
    _, kept = workers.refused()
    if kept:
        line += f"; refused: {shown(kept)}"
    skipped = workers.invalid()
    if skipped:
        line += f"; ignoring {len(skipped)} worker(s) with invalid data: {shown(skipped)}"
    return line


def refusal_lines(workers: Registry) -> list[str]:
    """The Blocked line naming the worker units refused service, if any (bounded).

    A refused request is root on a worker asking for another node (or a control-plane
    node), or a registered unit asking to join again: a security event the operator sees
    in `juju status`, each unit named. Units that keep the node they registered first
    are named in the Ready line instead (`status_line`).
    """
    unserved, _ = workers.refused()
    if not unserved:
        return []
    return [f"{len(unserved)} worker unit(s) refused, no node: {shown(unserved)}"]


def gauges(health: NodeHealth, *, behind: int, pending_removal: int) -> list[Gauge]:
    """What the charms know of the cluster and kube-state-metrics cannot see (unit_state).

    Nodes of related units that the API does not have, and nodes the charms still have
    to upgrade or delete.
    """
    return [
        Gauge(
            "gpu_k8s_cluster_nodes_missing",
            "Nodes of related units that the Kubernetes API does not have.",
            len(health.missing),
        ),
        Gauge(
            "gpu_k8s_cluster_nodes_behind",
            "Nodes not yet on the cluster's Kubernetes version (an upgrade under way).",
            behind,
        ),
        Gauge(
            "gpu_k8s_cluster_nodes_pending_removal",
            "Nodes of departed workers still to be deleted from the cluster.",
            pending_removal,
        ),
    ]
