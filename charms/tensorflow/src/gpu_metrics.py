# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""GPU use per training pod, from the DCGM exporters of the nodes it runs on (no ops).

The control plane runs NVIDIA's DCGM exporter on every GPU node with the node's network
(its dcgm_exporter.py), so the exporter answers at `http://<node InternalIP>:9400/metrics`
from any machine of the model. With kubelet's pod-resources API it labels each GPU's
series with the `pod` and `namespace` the GPU is allocated to (NVIDIA/dcgm-exporter
internal/pkg/transformation/kubernetes.go; a GPU nobody holds has no pod label).
`job-status` reads one page per node that runs a pod of the job: GPUs, utilisation
(DCGM_FI_DEV_GPU_UTIL, %) and framebuffer memory (DCGM_FI_DEV_FB_USED and _FREE, MiB)
per pod. A MIG instance (series with GPU_I_PROFILE and GPU_I_ID, render_metrics.go)
counts as one GPU, busy as its graphics engine (DCGM_FI_PROF_GR_ENGINE_ACTIVE, a ratio):
DCGM reports no GPU_UTIL for MIG instances (dcgm-exporter issue #216). Where no
exporter answers (no GPU pods yet, a CPU-only job, the exporter not running) it says so
rather than guessing.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from charms.gpu_k8s.v0.cos_agent import DCGM_EXPORTER_PORT

UTIL = "DCGM_FI_DEV_GPU_UTIL"
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
TIMEOUT = 3.0  # seconds per node: job-status must stay quick when a node is gone


def fetch(url: str) -> str:
    """One exporter page (the text exposition format)."""
    with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
        return response.read().decode()


def node_ip(node: dict) -> str | None:
    """A Node's InternalIP (the address the exporter listens on, with the node's network)."""
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return address.get("address")
    return None


def per_pod(text: str, namespace: str, pods: Iterable[str]) -> dict[str, dict[str, float]]:
    """Pod -> {"gpus", "util" (mean %), "used", "total" (MiB)} for the named pods.

    "total" is what the pod's programs may allocate on its GPUs: the whole GPU's used and
    free memory (NVML's total less what the driver reserves: DCGM reads
    nvmlDeviceGetMemoryInfo_v2, whose `used` leaves `reserved` out, and divides FB_USED
    by total - reserved for its own FB_USED_RATIO; NVIDIA/DCGM 4.6.0
    dcgmlib/src/DcgmCacheManager.cpp). Under time-slicing (KUBERNETES_VIRTUAL_GPUS) a
    sharing pod's FB_USED is its own processes' and FB_FREE the whole GPU's, so their
    sum is too small: the GPU's own FB_USED is the series left without pod labels
    (dcgm-exporter 4.6.0-4.8.3, 7ad58324, kubernetes.go PodMapper.Process keeps it
    beside the per-pod ones; tests/fakes/dcgm_exporter.py). A pod that holds two slices
    of one GPU has a series per slice (`vgpu`), each with the pod's whole figure: one GPU.
    """
    wanted = set(pods)
    # (pod, GPU uuid, MIG instance) -> its samples
    gpus: dict[tuple[str, str, str], dict[str, float]] = {}
    # (GPU uuid, MIG instance) -> the GPU's own FB_USED, where the GPU is shared
    shared_used: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in (UTIL, ENGINE, FB_USED, FB_FREE):
                continue
            labels = sample.labels
            uuid = labels.get("UUID", labels.get("gpu", ""))
            instance = labels.get("GPU_I_ID", "")
            if sample.name == FB_USED and "pod" not in labels:
                shared_used[(uuid, instance)] = float(sample.value)
            if labels.get("namespace") != namespace or labels.get("pod") not in wanted:
                continue
            gpu = gpus.setdefault((labels["pod"], uuid, instance), {})
            gpu[sample.name] = float(sample.value)
    out: dict[str, dict[str, float]] = {}
    for (pod, uuid, instance), sample in gpus.items():
        row = out.setdefault(pod, {"gpus": 0, "util": 0.0, "used": 0.0, "total": 0.0})
        row["gpus"] += 1
        row["util"] += 100 * sample.get(ENGINE, 0.0) if instance else sample.get(UTIL, 0.0)
        used = sample.get(FB_USED, 0.0)
        row["used"] += used
        row["total"] += shared_used.get((uuid, instance), used) + sample.get(FB_FREE, 0.0)
    for row in out.values():
        row["util"] /= row["gpus"]
    return out


def describe(row: dict[str, float]) -> str:
    """`2 GPUs, 93% busy, 15.2 of 45.0 GiB`."""
    count = int(row["gpus"])
    return (
        f"{count} GPU{'s' if count != 1 else ''}, {row['util']:.0f}% busy, "
        f"{row['used'] / 1024:.1f} of {row['total'] / 1024:.1f} GiB"
    )


def _placed(pods: list[dict]) -> tuple[int, dict[str, list[str]]]:
    """(how many pods ask for GPUs, node -> the running ones there)."""
    placed: dict[str, list[str]] = {}
    asking = 0
    for pod in pods:
        spec = pod.get("spec") or {}
        asks = any(
            "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
            for c in spec.get("containers") or []
        )
        asking += asks
        if asks and spec.get("nodeName") and (pod.get("status") or {}).get("phase") == "Running":
            placed.setdefault(spec["nodeName"], []).append(pod["metadata"]["name"])
    return asking, placed


def gpu_use(
    kube: Any, namespace: str, pods: list[dict], get: Callable[[str], str] = fetch
) -> dict[str, str] | str | None:
    """`job-status`'s GPU use: pod -> its line, or one sentence saying why there is none.

    `pods`: the job's pods; those that asked for GPUs and run on a node are looked up.
    None when no pod of the job asks for a GPU.
    """
    asking, placed = _placed(pods)
    if not asking:
        return None
    if not placed:
        return "no pod of this job runs on its GPUs yet"
    out: dict[str, str] = {}
    unreachable = []
    # one list of every Node, not a read per node the job runs on: job-status costs the
    # same API requests whatever the job's size (issue 31 item 4)
    nodes = {n["metadata"]["name"]: n for n in kube.list("v1", "Node")}
    for node_name, names in sorted(placed.items()):
        node = nodes.get(node_name)
        ip = node_ip(node) if node else None
        if ip is None:
            unreachable.append(f"{node_name}: no InternalIP")
            continue
        try:
            rows = per_pod(get(f"http://{ip}:{DCGM_EXPORTER_PORT}/metrics"), namespace, names)
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            unreachable.append(f"{node_name} ({ip}:{DCGM_EXPORTER_PORT}): {reason}")
            continue
        for name in names:
            out[name] = describe(rows[name]) if name in rows else "not in its node's metrics yet"
    if unreachable and not out:
        return "no DCGM metrics: the exporter did not answer on " + "; ".join(unreachable)
    if unreachable:
        out["unavailable"] = "; ".join(unreachable)
    return out
