# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What the cluster looks like, from Node and Pod objects (no ops imports)."""

from __future__ import annotations

import dataclasses
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
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


def is_ready(node: dict) -> bool:
    """Whether the node's Ready condition is True."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


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
        ready=is_ready(node),
        schedulable=not (node.get("spec") or {}).get("unschedulable", False),
        gpus=_int((status.get("allocatable") or {}).get(GPU_RESOURCE)),
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


def _is_daemon_or_mirror(pod: dict) -> bool:
    meta = pod.get("metadata") or {}
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return True
    return any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or [])


def _is_finished(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def removable(node: dict, pods: list[dict]) -> tuple[bool, str]:
    """Whether a departed worker's Node can be deleted now, and why (not).

    It can once it is NotReady (the machine is gone), or once it is cordoned and runs
    nothing but DaemonSet, mirror or finished pods (it drained itself).
    """
    if not is_ready(node):
        return True, "node is NotReady"
    if not (node.get("spec") or {}).get("unschedulable", False):
        return False, "node is not cordoned yet"
    busy = [p for p in pods if not _is_daemon_or_mirror(p) and not _is_finished(p)]
    if busy:
        return False, f"{len(busy)} pods still running"
    return True, "node is drained"
