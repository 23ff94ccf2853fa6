# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What the charms read off Kubernetes objects, in one place.

The GPUs a pod holds, whether a node is Ready or has a GPU quarantined, a job's record of
its moves off quarantined nodes, and the digest that says whether a set of objects must be
applied again.

Plain functions of the objects as the API returns them (dicts); no client, no ops.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

LIBID = "58b81ae64c724083a9b79279b6369a0e"
LIBAPI = 0
LIBPATCH = 6

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

# The Node condition the worker's GPU health watcher sets False while a GPU of its node is
# quarantined (kubernetes-worker gpu_watcher.py CONDITION): its lastTransitionTime is the
# first fault of the quarantine (kept while it lasts, a raised repair included), its message
# names each GPU (index, UUID), the fault's meaning and the repair, at most 1000 characters.
GPU_HEALTHY = "GpuHealthy"

# A job's moves off nodes whose GPU was quarantined, on its JobSet (JSON): `count`, the
# moves the JobSet's own restarts do not count, and `last`, the newest MOVES_KEPT, each
# {"node", "reason", "at", "restarted"}. The control plane's leader writes it in the hook
# that sets the quarantine taint (kubernetes-control-plane gang_release.py), the tensorflow
# charm's job-status reads it. A JobSet is its team's to write, annotations included: a
# record the team edits lies to its own job-status only, and is read as untrusted text
# (`moves_of`: bounded, malformed parts dropped), so an edit cannot make the leader's
# write larger than MOVES_KEPT bounded entries. Each field is kept printable ASCII (any
# other character read as "?": no escape sequence reaches job-status), so JSON writes at
# most 2 bytes a character (`\"`, `\\`) and the longest record the leader writes, about
# 5.2 KB, reads back under MOVES_MAX_BYTES; a text longer than that is not its own.
MOVES_ANNOTATION = "gpu-k8s.io/moves"
MOVES_KEPT = 5
# the longest field kept: a Node name (a DNS subdomain), the reason, an RFC 3339 time
_MOVE_FIELDS = {"node": 253, "reason": 200, "at": 40}
MOVES_MAX_BYTES = 8192
MOVES_MAX_COUNT = 10**6  # a larger count, only a team's own, reads as this


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


def gpu_fault(node: dict | None) -> dict | None:
    """The node's GPU_HEALTHY condition while a GPU of it is quarantined (status False)."""
    for condition in ((node or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == GPU_HEALTHY:
            return condition if condition.get("status") == "False" else None
    return None


def moves_of(obj: Mapping[str, Any] | None) -> tuple[int, list[dict[str, Any]]]:
    """(count, last) of the MOVES_ANNOTATION record on `obj`: (0, []) absent or unreadable.

    A text over MOVES_MAX_BYTES (UTF-8) is not read. An entry without a text `node`,
    `reason` and `at` is dropped, each text cut to its bound and kept printable ASCII,
    `restarted` true only when it is; a `count` that is no whole number from 0 is that
    of the entries kept, one over MOVES_MAX_COUNT is that.
    """
    raw = (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(MOVES_ANNOTATION)
    if not isinstance(raw, str) or len(raw.encode(errors="replace")) > MOVES_MAX_BYTES:
        return 0, []
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # a team's record nested past the parser's depth
        return 0, []
    if not isinstance(data, dict):
        return 0, []
    entries = data.get("last")
    if not isinstance(entries, list):
        entries = []
    last = [
        {f: _printable(e[f], size) for f, size in _MOVE_FIELDS.items()}
        | {"restarted": e.get("restarted") is True}
        for e in entries
        if isinstance(e, dict) and all(isinstance(e.get(f), str) for f in _MOVE_FIELDS)
    ][-MOVES_KEPT:]
    count = data.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        count = sum(not e["restarted"] for e in last)
    return min(count, MOVES_MAX_COUNT), last


def _printable(text: str, size: int) -> str:
    """`text` cut to `size` characters, each not printable ASCII read as "?"."""
    return "".join(c if " " <= c <= "~" else "?" for c in text[:size])


def moves_patch(
    obj: Mapping[str, Any], node: str, reason: str, at: str, restarted: bool
) -> dict | None:
    """The merge patch that adds a move off `node` to `obj`'s record; None when recorded.

    One quarantine is one move however many hooks see it: its `node` and `at` (the
    GPU_HEALTHY condition's lastTransitionTime, the quarantine's first fault) already
    among the entries kept leave the record as it is. `restarted`: the gang had pods
    elsewhere, which stop with it, so the JobSet restarts it and its own count has the
    move (`count` does not).
    """
    count, last = moves_of(obj)
    given = {"node": node, "reason": reason, "at": at}
    entry: dict[str, Any] = {f: _printable(v, _MOVE_FIELDS[f]) for f, v in given.items()}
    if any(e["node"] == entry["node"] and e["at"] == entry["at"] for e in last):
        return None
    entry["restarted"] = restarted
    count = min(count + (0 if restarted else 1), MOVES_MAX_COUNT)
    text = _moves_text(count, [*last, entry][-MOVES_KEPT:])
    if len(text.encode()) > MOVES_MAX_BYTES:  # never with the bounds above: kept readable
        text = _moves_text(count, [entry])
    return {"metadata": {"annotations": {MOVES_ANNOTATION: text}}}


def _moves_text(count: int, last: list[dict[str, Any]]) -> str:
    return json.dumps({"count": count, "last": last}, sort_keys=True, separators=(",", ":"))


def fingerprint(data: Any, *extra: str) -> str:
    """A short digest of JSON-shaped `data` (and `extra` text), kept once it is applied.

    When the digest a charm recorded differs from the one of what it would apply now (a
    new pin, config, registry, grant), it applies again; the same digest sends nothing.
    """
    text = json.dumps(data, sort_keys=True) + "".join(extra)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
