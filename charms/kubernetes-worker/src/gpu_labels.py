# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The GPU labels and the GPU taint a worker keeps on its Node.

Labels with the keys and values of NVIDIA's GPU Feature Discovery (sources below), the
`nvidia.com/gpu=present:NoSchedule` taint, and the one merge patch that brings the Node
to them (`apply_node_gpu_state`). Named `gpu_labels` rather than `node_labels`: that is
the name of its main function and of the `node-labels` option (the operator's own
labels, `worker.py`). Pure functions of the inventory, plus one read of the machine
(`machine_type`) and one of the Node; no ops imports.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import gpu

from charms.gpu_k8s.v0.kubernetes_cluster import GPU_TAINT, retry_on_conflict, taints_precondition
from charms.gpu_k8s.v0.system import Host

# Node labels: the keys and value formats of NVIDIA's GPU Feature Discovery (GFD) in
# NVIDIA/k8s-device-plugin at tag v0.20.0 (the release the control plane's device plugin
# runs), so that tools written for GFD find what they select on. Each constant names the
# file of internal/lm/ that writes the key; docs/gpu-feature-discovery/README.md
# ("Generated Labels") lists them. Not written: `gfd.timestamp` (the time of each run,
# optional upstream: it would patch the Node on every hook), `gpu.clique` (IMEX fabric
# ids), `vgpu.*` (vGPU guests) and the MIG device labels of mig-strategy single/mixed
# (`gpu.multiprocessors`, `gpu.slices.*`, `gpu.engines.*`, `mig-<profile>.*`, product
# `<model>-MIG-<profile>`): MIG GPUs keep the labels of their whole GPU.
LABEL_PRESENT = "nvidia.com/gpu.present"  # the device plugin's node selector (ours)
# resource.go baseLabeler: <sanitised model>, with "-SHARED" appended when the GPU is
# replicated (time-slicing replicas > 1; the plugin's config never renames the resource).
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"  # resource.go baseLabeler: GPUs of that model
LABEL_REPLICAS = "nvidia.com/gpu.replicas"  # resource.go getReplicas: replicas, else 1
# resource.go baseLabeler: "time-slicing" when replicas > 1, else "none"
# (api/config/v1/sharing.go SharingStrategyTimeSlicing / SharingStrategyNone).
LABEL_SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
LABEL_MEMORY = "nvidia.com/gpu.memory"  # resource.go: total MiB, left out when unknown
# resource.go newArchitectureLabels: from the CUDA compute capability (left out when it is
# unknown); the family from its major and minor as getArchFamily maps them (ARCH_FAMILIES).
LABEL_FAMILY = "nvidia.com/gpu.family"
LABEL_COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
LABEL_COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
# machine-type.go: the sanitised content of --machine-type-file, whose default is
# /sys/class/dmi/id/product_name (cmd/gpu-feature-discovery/main.go); "unknown" when it
# cannot be read. On EC2 Nitro instances the DMI product name is the instance type
# (`dmidecode -s system-product-name` prints `t3.small` in mondoohq/mql#10418;
# awslabs/aws-crt-python#515 reads `c5n.xlarge` and `p4d.24xlarge` from this file);
# unverified on a GPU instance here, and Xen-based types (p3, g3) name no instance type.
LABEL_MACHINE = "nvidia.com/gpu.machine"
MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"
MACHINE_UNKNOWN = "unknown"
# nvml.go newGPUModeLabeler: "compute" (PCI class 0x0302), "graphics" (0x0300), or
# "unknown" when the GPUs differ.
LABEL_MODE = "nvidia.com/gpu.mode"
# nvml.go newVersionLabeler: the driver version split at dots (X.Y[.Z]; revision "" for
# X.Y) and the CUDA driver version as NVML reports it, major.minor as integers.
LABEL_DRIVER_MAJOR = "nvidia.com/cuda.driver-version.major"
LABEL_DRIVER_MINOR = "nvidia.com/cuda.driver-version.minor"
LABEL_DRIVER_REVISION = "nvidia.com/cuda.driver-version.revision"
LABEL_DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
LABEL_CUDA_MAJOR = "nvidia.com/cuda.runtime-version.major"
LABEL_CUDA_MINOR = "nvidia.com/cuda.runtime-version.minor"
LABEL_CUDA_FULL = "nvidia.com/cuda.runtime-version.full"
# nvml.go "Deprecated labels": the same values under the older keys, still written.
LABEL_OLD_DRIVER_MAJOR = "nvidia.com/cuda.driver.major"
LABEL_OLD_DRIVER_MINOR = "nvidia.com/cuda.driver.minor"
LABEL_OLD_DRIVER_REV = "nvidia.com/cuda.driver.rev"
LABEL_OLD_CUDA_MAJOR = "nvidia.com/cuda.runtime.major"
LABEL_OLD_CUDA_MINOR = "nvidia.com/cuda.runtime.minor"
LABEL_MIG_CAPABLE = "nvidia.com/mig.capable"  # nvml.go: "true" when any GPU supports MIG
# strategy.go: the plugin's MIG strategy, only when it is not "none".
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"
# nvml.go newSharingLabeler: "false" unless the plugin shares GPUs through MPS, which the
# control plane never configures.
LABEL_MPS_CAPABLE = "nvidia.com/mps.capable"
GPU_LABELS = (
    LABEL_PRESENT,
    LABEL_PRODUCT,
    LABEL_COUNT,
    LABEL_REPLICAS,
    LABEL_SHARING_STRATEGY,
    LABEL_MEMORY,
    LABEL_FAMILY,
    LABEL_COMPUTE_MAJOR,
    LABEL_COMPUTE_MINOR,
    LABEL_MACHINE,
    LABEL_MODE,
    LABEL_DRIVER_MAJOR,
    LABEL_DRIVER_MINOR,
    LABEL_DRIVER_REVISION,
    LABEL_DRIVER_FULL,
    LABEL_CUDA_MAJOR,
    LABEL_CUDA_MINOR,
    LABEL_CUDA_FULL,
    LABEL_OLD_DRIVER_MAJOR,
    LABEL_OLD_DRIVER_MINOR,
    LABEL_OLD_DRIVER_REV,
    LABEL_OLD_CUDA_MAJOR,
    LABEL_OLD_CUDA_MINOR,
    LABEL_MIG_CAPABLE,
    LABEL_MIG_STRATEGY,
    LABEL_MPS_CAPABLE,
)
# resource.go getArchFamily: compute capability major -> family; where a major holds two
# families, minors from the second value on belong to the third.
ARCH_FAMILIES: Mapping[int, tuple[str, int, str] | str] = {
    1: "tesla",
    2: "fermi",
    3: "kepler",
    5: "maxwell",
    6: "pascal",
    7: ("volta", 5, "turing"),
    8: ("ampere", 9, "ada-lovelace"),
    9: "hopper",
    10: "blackwell",
    12: "blackwell",
    13: "rubin",
}
ARCH_UNDEFINED = "undefined"


@dataclasses.dataclass(frozen=True)
class PluginConfig:
    """How the control plane runs the device plugin, as it tells workers over `cluster`.

    Attributes:
        mig_strategy: the plugin's MIG strategy: none, single or mixed.
        replicas: time-slicing replicas of each GPU; 1 shares nothing.
    """

    mig_strategy: str = "none"
    replicas: int = 1


# A Kubernetes label value: at most 63 characters, empty or beginning and ending with a
# letter or digit, with `-`, `_` and `.` between (apimachinery validation IsValidLabelValue).
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_VERSION = re.compile(r"(\d+)\.(\d+)")
SHARED_SUFFIX = "-SHARED"


def is_label_value(value: str) -> bool:
    """True when `value` is a valid Kubernetes label value."""
    return len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


def sanitise(text: str, room: int = 63) -> str:
    """A name as GFD writes it into a label value: `NVIDIA A10G` -> `NVIDIA-A10G`.

    As resource.go `sanitise`: characters other than letters, digits, `-`, `_`, `.` and
    space are dropped, and the words are joined with `-`. What GFD would leave longer than
    `room` or not ending in a letter or digit is cut and trimmed, to stay a valid value.
    """
    joined = "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", text).split())
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", joined[:room])


def arch_family(major: int, minor: int) -> str:
    """GFD's family of a compute capability: 8.6 `ampere`, 8.9 `ada-lovelace`, 9.0 `hopper`."""
    family = ARCH_FAMILIES.get(major, ARCH_UNDEFINED)
    if isinstance(family, tuple):
        first, split, second = family
        return first if minor < split else second
    return family


def gpu_mode(classes: frozenset[int]) -> str:
    """GFD's `gpu.mode`: the one PCI class of all GPUs as compute or graphics."""
    if len(classes) != 1:
        return "unknown"
    return {0x0302: "compute", 0x0300: "graphics"}.get(next(iter(classes)), "unknown")


def _resource_labels(inventory: gpu.GpuInventory, plugin: PluginConfig) -> dict:
    shared = plugin.replicas > 1
    product = sanitise(inventory.model or "")
    if product and shared:
        product = sanitise(product, 63 - len(SHARED_SUFFIX)) + SHARED_SUFFIX
    return {
        LABEL_PRODUCT: product or None,
        LABEL_COUNT: str(inventory.count),
        LABEL_REPLICAS: str(max(plugin.replicas, 1)),
        LABEL_SHARING_STRATEGY: "time-slicing" if shared else "none",
        LABEL_MEMORY: str(inventory.memory_mib) if inventory.memory_mib else None,
    }


def _version_labels(driver: str | None, cuda: str | None) -> dict:
    labels: dict[str, str] = {}
    parts = (driver or "").split(".")
    if driver and len(parts) in (2, 3) and all(is_label_value(p) and p for p in parts):
        major, minor, revision = (*parts, "")[:3]
        labels |= {
            LABEL_DRIVER_MAJOR: major,
            LABEL_DRIVER_MINOR: minor,
            LABEL_DRIVER_REVISION: revision,
            LABEL_DRIVER_FULL: driver,
            LABEL_OLD_DRIVER_MAJOR: major,
            LABEL_OLD_DRIVER_MINOR: minor,
            LABEL_OLD_DRIVER_REV: revision,
        }
    match = _VERSION.fullmatch(cuda or "")
    if match:
        major, minor = (str(int(g)) for g in match.groups())
        labels |= {
            LABEL_CUDA_MAJOR: major,
            LABEL_CUDA_MINOR: minor,
            LABEL_CUDA_FULL: f"{major}.{minor}",
            LABEL_OLD_CUDA_MAJOR: major,
            LABEL_OLD_CUDA_MINOR: minor,
        }
    return labels


def _architecture_labels(capability: str | None) -> dict:
    match = _VERSION.fullmatch(capability or "")
    if not match or not int(match.group(1)):
        return {}  # GFD writes none of them for an unknown capability
    major, minor = (int(g) for g in match.groups())
    return {
        LABEL_FAMILY: arch_family(major, minor),
        LABEL_COMPUTE_MAJOR: str(major),
        LABEL_COMPUTE_MINOR: str(minor),
    }


def node_labels(
    inventory: gpu.GpuInventory,
    driver: str | None,
    cuda: str | None,
    *,
    machine: str | None = None,
    plugin: PluginConfig = PluginConfig(),
) -> dict[str, str | None]:
    """Every GPU label this charm manages; None means remove it (merge-patch ready).

    The keys and values GFD would write for the GPUs of the most common model, given the
    driver and CUDA versions, the DMI product name (`machine`, None when unreadable) and
    the device plugin's config. A node without GPUs (or one that lost them) gets all of
    them removed.
    """
    labels: dict[str, str | None] = dict.fromkeys(GPU_LABELS)
    if not inventory.count:
        return labels
    labels |= _resource_labels(inventory, plugin)
    labels |= _version_labels(driver, cuda)
    labels |= _architecture_labels(inventory.compute_capability)
    labels[LABEL_PRESENT] = "true"
    labels[LABEL_MACHINE] = MACHINE_UNKNOWN if machine is None else sanitise(machine)
    labels[LABEL_MODE] = gpu_mode(inventory.pci_classes)
    labels[LABEL_MIG_CAPABLE] = "true" if inventory.mig_capable else "false"
    labels[LABEL_MIG_STRATEGY] = None if plugin.mig_strategy == "none" else plugin.mig_strategy
    labels[LABEL_MPS_CAPABLE] = "false"
    return labels


def machine_type(host: Host) -> str | None:
    """The DMI product name GFD labels as the machine (`g5.12xlarge` on EC2), or None."""
    try:
        text = host.read(MACHINE_TYPE_FILE)
    except (OSError, UnicodeDecodeError):
        return None
    return None if text is None else text.strip()


def node_taints(gpu_taint: bool, has_gpu: bool = True) -> list[dict]:
    """The taints this charm wants on the node (`nvidia.com/gpu=present:NoSchedule`)."""
    if not (gpu_taint and has_gpu):
        return []
    return [dict(GPU_TAINT)]


def merge_taints(existing: Sequence[Mapping], wanted: Sequence[Mapping]) -> list[dict]:
    """The node's full taint list: others' taints kept, ours replaced by `wanted`."""
    kept = [dict(t) for t in existing if t.get("key") != GPU_TAINT["key"]]
    return kept + [dict(t) for t in wanted]


def apply_node_gpu_state(
    kube: Any,
    node: str,
    labels: Mapping[str, str | None],
    taints: Sequence[Mapping] | None,
    keep: Mapping[str, Sequence[str]] | None = None,
) -> bool:
    """Bring the Node's GPU labels and taint to `labels`/`taints`; True when it changed.

    `taints` None leaves the taints alone: a worker acting as its kubelet may not change
    them (NodeRestriction), the control plane does on its request (`gpu_node.label_node`).

    `kube` is a `charms.gpu_k8s.v0.kubeclient.Kube`. Labels set to None are removed;
    taints of other owners are kept; a label whose current value is one `keep` names for
    it is left as it is (another controller, or the operator, holds it). One merge patch, only when
    something differs; one that rewrites the taints carries the resourceVersion read
    (`kubernetes_cluster.taints_precondition`), a 409 Conflict reads the Node again.

    Raises:
        LookupError: the Node is not registered (yet).
        KubeError: the API server refused.
    """
    return retry_on_conflict(lambda: _patch_node_gpu_state(kube, node, labels, taints, keep or {}))


def _patch_node_gpu_state(
    kube: Any,
    node: str,
    labels: Mapping[str, str | None],
    taints: Sequence[Mapping] | None,
    keep: Mapping[str, Sequence[str]],
) -> bool:
    obj = kube.get("v1", "Node", node)
    if obj is None:
        raise LookupError(f"node {node} is not registered")
    current = (obj.get("metadata") or {}).get("labels") or {}
    held = {k for k, values in keep.items() if current.get(k) in values}
    label_patch = {
        key: value
        for key, value in labels.items()
        if current.get(key) != value
        and not (value is None and key not in current)
        and key not in held
    }
    existing = (obj.get("spec") or {}).get("taints") or []
    merged = existing if taints is None else merge_taints(existing, taints)
    patch: dict[str, Any] = {}
    if label_patch:
        patch["metadata"] = {"labels": label_patch}
    if merged != existing:
        patch["spec"] = {"taints": merged or None}
        patch["metadata"] = {**patch.get("metadata", {}), **taints_precondition(obj)}
    if patch:
        kube.patch("v1", "Node", node, patch)
    return bool(patch)
