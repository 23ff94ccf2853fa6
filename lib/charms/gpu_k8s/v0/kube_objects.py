# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What the charms read off Kubernetes objects, in one place.

The GPUs a pod holds, whether a node is Ready, and the digest that says whether a set of
objects must be applied again.

Plain functions of the objects as the API returns them (dicts); no client, no ops.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

LIBID = "58b81ae64c724083a9b79279b6369a0e"
LIBAPI = 0
LIBPATCH = 3

# The extended resource NVIDIA's device plugin advertises (k8s-device-plugin README).
GPU_RESOURCE = "nvidia.com/gpu"

# A node's GPU clients step aside while its worker resets a GPU: `nvidia-smi -r` wants no
# process on the GPU (nvidia-smi(1) -r), and the device plugin and the DCGM exporter hold
# NVML handles on every GPU of their node (NVIDIA/NVSentinel#126, #1243: their pods are
# removed for a reset). The GPU Operator's way: its DaemonSets select on a node label
# `nvidia.com/gpu.deploy.<component>` set to "true", which a pause turns to another value
# (NVIDIA/gpu-operator controllers/state_manager.go gpuStateLabels, addGPUStateLabels
# "honor the current value"; assets/state-dcgm-exporter/0800_daemonset.yaml nodeSelector
# `nvidia.com/gpu.deploy.dcgm-exporter: "true"`). Ours: the worker labels its own Node
# GPU_CLIENTS_LABEL=GPU_CLIENTS_PAUSED (NodeRestriction lets a kubelet change any label
# of its own Node outside kubernetes.io, k8s.io and node-restriction.kubernetes.io, and
# no other Node: kubernetes plugin/pkg/admission/noderestriction/admission.go admitNode,
# getForbiddenLabels), each GPU DaemonSet's node affinity excludes it (`NotIn`), and
# their pods carry GPU_CLIENT_POD_LABEL, which the worker waits to see gone from its node.
GPU_CLIENTS_LABEL = "gpu-k8s.io/gpu-clients"
GPU_CLIENTS_PAUSED = "paused"
GPU_CLIENT_POD_LABEL = "gpu-k8s.io/gpu-client"


def count(value: Any) -> int:
    """A count the API returns as a quantity string (`"4"`): 0 when absent or not whole."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def container_gpus(container: dict, resource: str = GPU_RESOURCE) -> int:
    """A container's GPUs: an extended resource, whose request equals its limit.

    kubernetes.io/docs/tasks/configure-pod-container/extended-resource/: a container may
    give the limit alone (the request defaults to it) or both, equal.
    """
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        if resource in (resources.get(part) or {}):
            return count(resources[part][resource])
    return 0


def pod_gpus(pod: dict, resource: str = GPU_RESOURCE) -> int:
    """The GPUs the scheduler sets aside for a pod: its effective request.

    The larger of its app containers plus its sidecars (init containers with
    `restartPolicy: Always`, which keep running) and of each other init container plus
    the sidecars started before it (kubernetes.io/docs/concepts/workloads/pods/
    init-containers/#resource-sharing-within-containers; sidecar-containers/
    #resource-sharing-within-containers).
    """
    spec = pod.get("spec") or {}
    sidecars = 0
    peak_init = 0
    for init in spec.get("initContainers") or []:
        if init.get("restartPolicy") == "Always":
            sidecars += container_gpus(init, resource)
        else:
            peak_init = max(peak_init, sidecars + container_gpus(init, resource))
    running = sidecars + sum(container_gpus(c, resource) for c in spec.get("containers") or [])
    return max(running, peak_init)


def node_ready(node: dict) -> bool:
    """Whether the node's `Ready` condition is `True` (absent or Unknown: not ready)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def fingerprint(data: Any, *extra: str) -> str:
    """A short digest of JSON-shaped `data` (and `extra` text), kept once it is applied.

    When the digest a charm recorded differs from the one of what it would apply now (a
    new pin, config, registry, grant), it applies again; the same digest sends nothing.
    """
    text = json.dumps(data, sort_keys=True) + "".join(extra)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
