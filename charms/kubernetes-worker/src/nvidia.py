# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""NVIDIA container toolkit, reboots, node labels and the validation pod of a GPU worker.

The driver itself is `driver.py`. Decisions are pure functions (`reboot_action`,
`node_labels`, `validation_pod`, ...);
the few functions that act take a `Host` and run every program through it. Packages go
through `charms.gpu_k8s.v0.apt` (pinned, held) and the containerd runtime handler through
`charms.gpu_k8s.v0.containerd`. No ops imports: the charm turns errors into statuses.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gpu
import mig

from charms.gpu_k8s.v0 import apt
from charms.gpu_k8s.v0.containerd import RuntimeHandler
from charms.gpu_k8s.v0.system import Host

NVIDIA_SMI = "/usr/bin/nvidia-smi"
DPKG = "/usr/bin/dpkg"
SH = "/bin/sh"

# NVIDIA's container toolkit repository (a flat repository per architecture).
TOOLKIT_SOURCE_NAME = "nvidia-container-toolkit"
TOOLKIT_URI = "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
TOOLKIT_KEY_URL = "https://nvidia.github.io/libnvidia-container/gpgkey"
TOOLKIT_KEY_PATH = "/etc/apt/keyrings/nvidia-container-toolkit.gpg"
# Pinned release; the four packages are released together at the same version.
# 2026-11-23: v1.20.0 (tagged 2026-08-12) is the newest release tag in
# NVIDIA/nvidia-container-toolkit; its CHANGELOG adds the `update-application-profile`
# CDI hook that the device plugin v0.20.0 (the control plane's pin, built on the same
# toolkit code) writes into CDI specs. Debian packages are versioned `<tag>-1`.
TOOLKIT_VERSION = "1.20.0-1"
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
RUNTIME_NAME = "nvidia"
RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
NVIDIA_CTK = "/usr/bin/nvidia-ctk"
# The toolkit's config (api/config/v1 RelativeFilePath under /etc). Its default accepts
# NVIDIA_VISIBLE_DEVICES from unprivileged containers (`GetDefault`:
# AcceptEnvvarUnprivileged true), so any pod run by the nvidia runtime could claim every
# GPU without asking the scheduler; the charm turns that off with upstream's own
# `nvidia-ctk config --in-place --set`. GPUs then come only from the device plugin (CDI).
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
ENVVAR_UNPRIVILEGED = "accept-nvidia-visible-devices-envvar-when-unprivileged"

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
TAINT_KEY = "nvidia.com/gpu"
TAINT_VALUE = "present"
TAINT_EFFECT = "NoSchedule"
GPU_RESOURCE = "nvidia.com/gpu"

# CUDA vectorAdd sample from NGC; prints "Test PASSED" and exits 0 on success.
VALIDATION_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
VALIDATION_COMMAND = ("/cuda-samples/vectorAdd",)
VALIDATION_TIMEOUT_S = 300
_STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)


# ---------------------------------------------------------------------------- nvidia-smi


def _run_combined(host: Host, *argv: str) -> tuple[int, str]:
    # nvidia-smi prints NVML errors on stdout and exits non-zero; a Runner keeps only
    # stderr of a failed command, so capture both streams and the status through sh.
    out = host.run(SH, "-c", '"$@" 2>&1; echo "exit-status=$?"', "sh", *argv)
    body, _, status = out.rstrip("\n").rpartition("exit-status=")
    try:
        return int(status), body
    except ValueError:
        return 1, out


def read_smi(host: Host) -> gpu.SmiReport:
    """Run nvidia-smi (GPU query, then `--version` for CUDA) and report what it said.

    A driver whose nvidia-smi does not know `compute_cap` is asked again without it.
    """
    if not host.path(NVIDIA_SMI).exists():
        return gpu.SmiReport(state=gpu.SmiState.ABSENT, detail=f"{NVIDIA_SMI} not installed")
    query = _run_combined(host, NVIDIA_SMI, *gpu.SMI_QUERY_ARGS)
    if query[0] != 0 and gpu.UNKNOWN_FIELD_TEXT in query[1]:
        query = _run_combined(host, NVIDIA_SMI, *gpu.SMI_QUERY_ARGS_WITHOUT_COMPUTE_CAP)
    version = _run_combined(host, NVIDIA_SMI, "--version") if query[0] == 0 else None
    return gpu.smi_report(query, version)


def read_mig_profiles(host: Host) -> dict[int, dict[str, int]]:
    """{GPU index: {MIG profile: instances}} from `nvidia-smi mig -lgip`; {} when it fails."""
    code, out = _run_combined(host, NVIDIA_SMI, "mig", "-lgip")
    return gpu.parse_mig_profiles(out) if code == 0 else {}


def read_mig_devices(host: Host) -> dict[int, list[dict[str, str]]]:
    """The MIG devices per GPU index from `nvidia-smi -L`; {} when it fails."""
    code, out = _run_combined(host, NVIDIA_SMI, "-L")
    return mig.parse_devices(out) if code == 0 else {}


def boot_id(host: Host) -> str:
    """This boot's id (changes on every reboot)."""
    return (host.read("/proc/sys/kernel/random/boot_id") or "").strip()


class RebootAction(enum.Enum):
    """What the charm does about a reboot the driver needs."""

    NONE = "none"  # nothing needed, or a reboot we asked for has not happened yet
    BLOCK = "block"  # tell the operator (auto-reboot off, or a reboot did not help)
    DRAIN_AND_REBOOT = "drain-and-reboot"  # cordon, drain, then `unit.reboot()`
    UNCORDON = "uncordon"  # back from our reboot and the driver works: uncordon


def reboot_action(
    reason: str | None, auto_reboot: bool, *, started_at_boot: str | None, current_boot: str
) -> RebootAction:
    """Decide the reboot step.

    Args:
        reason: `reboot_reason()` now (None: the driver works).
        auto_reboot: the `auto-reboot` option.
        started_at_boot: boot id the charm recorded when it cordoned the node to reboot
            (None when it has not).
        current_boot: `boot_id()` now.
    """
    if started_at_boot is not None:
        if started_at_boot == current_boot:
            return RebootAction.NONE  # the reboot is still to come
        return RebootAction.BLOCK if reason else RebootAction.UNCORDON
    if reason is None:
        return RebootAction.NONE
    return RebootAction.DRAIN_AND_REBOOT if auto_reboot else RebootAction.BLOCK


def reboot_blocked_message(
    reason: str,
    unit: str,
    node: str,
    *,
    rebooted: bool = False,
    install: Sequence[str] = (),
) -> str:
    """Blocked status for a reboot the charm will not do: the reason and what to run.

    `install` names packages to install after the drain and before the reboot.
    """
    if rebooted:  # it keeps its turn: other nodes do not reboot into the same fault
        return (
            f"driver still not working after reboot: {reason}; check `journalctl -k | grep "
            f"-i nvidia` on {unit}, then `kubectl uncordon {node}`; other GPU nodes of this "
            "application reboot only once this one works or is removed"
        )
    apt_step = (
        f"`juju ssh {unit} -- sudo apt-get install -y --allow-change-held-packages "
        f"{' '.join(install)}`, "
        if install
        else ""
    )
    return (
        f"reboot needed: {reason}; run `kubectl drain {node} --ignore-daemonsets "
        f"--delete-emptydir-data`, {apt_step}`juju ssh {unit} -- sudo reboot`, then "
        f"`kubectl uncordon {node}` (or set auto-reboot=true)"
    )


def apt_blocked_message(error: apt.AptError) -> str:
    """Blocked status for a failed install: the package, apt's words, what to check."""
    return (
        f"failed to install {error.package}: {error.detail}; check the package source and "
        "that the nvidia-driver branch exists for this kernel, or set nvidia-driver=none"
    )


# ----------------------------------------------------------------------- container toolkit


@dataclasses.dataclass(frozen=True)
class ToolkitSource:
    """Where nvidia-container-toolkit comes from (the `nvidia-apt-source` option).

    Empty means NVIDIA's repository. Otherwise `<uri> [<suite> [<component>...]]
    [key=<url>]`: a mirror of it (suite `/` when omitted); without `key=` the signing
    key must already be at `TOOLKIT_KEY_PATH` (air-gapped machines). `$(ARCH)` in the URI
    becomes the machine's Debian architecture.
    """

    uri: str = TOOLKIT_URI
    suite: str = "/"
    components: tuple[str, ...] = ()
    key_url: str | None = TOOLKIT_KEY_URL

    @classmethod
    def parse(cls, value: str) -> ToolkitSource:
        """Parse the option value.

        Raises:
            ValueError: the value has no URI or an unknown key; the message shows the form.
        """
        tokens = str(value).split()
        if not tokens:
            return cls()
        key_url = None
        rest = []
        for token in tokens:
            if token.startswith("key="):
                key_url = token.removeprefix("key=")
            else:
                rest.append(token)
        form = "nvidia-apt-source must be '<uri> [<suite> [<component>...]] [key=<url>]'"
        if not rest or not re.match(r"^(https?|file)://\S+$", rest[0]):
            raise ValueError(f"{form}, such as 'http://mirror.example/nvidia/deb/$(ARCH) /'")
        if key_url is not None and not re.match(r"^(https?|file)://\S+$", key_url):
            raise ValueError(f"{form}; key= must be an http(s) or file URL")
        return cls(
            uri=rest[0],
            suite=rest[1] if len(rest) > 1 else "/",
            components=tuple(rest[2:]),
            key_url=key_url,
        )


def install_toolkit(host: Host, source: ToolkitSource, version: str = TOOLKIT_VERSION) -> bool:
    """Configure the package source, then install and hold the pinned toolkit.

    Returns True when anything changed.

    Raises:
        apt.AptError: the source or a package failed; `.package` names it.
    """
    uri = source.uri
    if "$(ARCH)" in uri:
        uri = uri.replace("$(ARCH)", host.run(DPKG, "--print-architecture").strip())
    try:
        changed = apt.add_source(
            host,
            TOOLKIT_SOURCE_NAME,
            uri=uri,
            suite=source.suite,
            components=list(source.components),
            key_url=source.key_url,
            key_path=TOOLKIT_KEY_PATH,
        )
    except ValueError as e:  # no key URL and no keyring on the machine
        raise apt.AptError(TOOLKIT_SOURCE_NAME, str(e), source=True) from None
    changed = apt.install(host, dict.fromkeys(TOOLKIT_PACKAGES, version), hold=True) or changed
    return configure_toolkit(host) or changed


def configure_toolkit(host: Host) -> bool:
    """Refuse NVIDIA_VISIBLE_DEVICES from unprivileged containers; True when changed."""
    text = host.read(TOOLKIT_CONFIG) or ""
    if re.search(rf"^\s*{ENVVAR_UNPRIVILEGED}\s*=\s*false\s*$", text, re.MULTILINE):
        return False
    host.run(NVIDIA_CTK, "config", "--in-place", "--set", f"{ENVVAR_UNPRIVILEGED}=false")
    return True


def containerd_runtimes(
    has_gpu: bool, default_nvidia: bool = False
) -> tuple[dict[str, RuntimeHandler], str]:
    """Runtime handlers and default runtime to pass to `containerd.configure`.

    GPU nodes get an `nvidia` handler; pods use it through the `nvidia` RuntimeClass,
    and it becomes the default for every pod only when `default_nvidia` is set.
    """
    if not has_gpu:
        return {}, "runc"
    runtimes = {RUNTIME_NAME: RuntimeHandler(RUNTIME_BINARY)}
    return runtimes, RUNTIME_NAME if default_nvidia else "runc"


# ---------------------------------------------------------------------- labels and taints


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
    return [{"key": TAINT_KEY, "value": TAINT_VALUE, "effect": TAINT_EFFECT}]


def merge_taints(existing: Sequence[Mapping], wanted: Sequence[Mapping]) -> list[dict]:
    """The node's full taint list: others' taints kept, ours replaced by `wanted`."""
    kept = [dict(t) for t in existing if t.get("key") != TAINT_KEY]
    return kept + [dict(t) for t in wanted]


def apply_node_gpu_state(
    kube: Any,
    node: str,
    labels: Mapping[str, str | None],
    taints: Sequence[Mapping],
    keep: Mapping[str, Sequence[str]] | None = None,
) -> bool:
    """Bring the Node's GPU labels and taint to `labels`/`taints`; True when it changed.

    `kube` is a `charms.gpu_k8s.v0.kubeclient.Kube`. Labels set to None are removed;
    taints of other owners are kept; a label whose current value is one `keep` names for
    it is left as it is (another controller, or the operator, holds it). One merge patch, only when
    something differs.

    Raises:
        LookupError: the Node is not registered (yet).
        KubeError: the API server refused.
    """
    obj = kube.get("v1", "Node", node)
    if obj is None:
        raise LookupError(f"node {node} is not registered")
    current = (obj.get("metadata") or {}).get("labels") or {}
    held = {k for k, values in (keep or {}).items() if current.get(k) in values}
    label_patch = {
        key: value
        for key, value in labels.items()
        if current.get(key) != value
        and not (value is None and key not in current)
        and key not in held
    }
    existing = (obj.get("spec") or {}).get("taints") or []
    merged = merge_taints(existing, taints)
    patch: dict[str, Any] = {}
    if label_patch:
        patch["metadata"] = {"labels": label_patch}
    if merged != existing:
        patch["spec"] = {"taints": merged or None}
    if patch:
        kube.patch("v1", "Node", node, patch)
    return bool(patch)


# ------------------------------------------------------------------------- validate-gpu


def validation_pod(
    node_name: str,
    namespace: str,
    image: str = VALIDATION_IMAGE,
    name: str = "gpu-validation",
    command: Sequence[str] | None = VALIDATION_COMMAND,
    deadline: int = VALIDATION_TIMEOUT_S,
) -> dict:
    """A pod pinned to `node_name` that asks for one GPU and runs a CUDA check.

    `deadline` (the action's timeout) becomes `activeDeadlineSeconds`, so the kubelet
    stops a check that runs longer, the same as the action stops waiting for it.

    Pinning goes through the scheduler (node affinity on `metadata.name`) rather than
    `spec.nodeName`, so a node whose GPUs are all taken leaves the pod Pending with a
    reason instead of the kubelet rejecting it.
    """
    if not node_name or not namespace or not image:
        raise ValueError("validation pod needs a node name, a namespace and an image")
    container: dict = {
        "name": "cuda-check",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {GPU_RESOURCE: "1"}},
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    if command:
        container["command"] = list(command)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "gpu-validation",
                "app.kubernetes.io/managed-by": "kubernetes-worker",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "runtimeClassName": RUNTIME_NAME,
            "activeDeadlineSeconds": deadline,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [node_name],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "tolerations": [
                {"key": TAINT_KEY, "operator": "Exists", "effect": TAINT_EFFECT},
            ],
            "containers": [container],
        },
    }


def validation_progress(pod: Mapping) -> tuple[str, str | None]:
    """(progress line, reason it cannot finish or None) for a validation pod's state."""
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = condition.get("message") or condition.get("reason") or "unschedulable"
            return f"{phase}: not scheduled: {message}", None
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            reason = waiting.get("reason", "waiting")
            line = f"{phase}: {reason}" + (
                f": {waiting['message']}" if waiting.get("message") else ""
            )
            return line, (line if reason in _STUCK_REASONS else None)
    return phase, None


def parse_validation_result(phase: str, logs: str) -> tuple[bool, str]:
    """Pass/fail and a one-line summary from a finished validation pod.

    Passes when the pod Succeeded and its output does not report a failed test.

    Raises:
        ValueError: the pod has not finished (phase other than Succeeded/Failed).
    """
    if phase not in ("Succeeded", "Failed"):
        raise ValueError(f"validation pod has not finished (phase {phase})")
    lines = [line.strip() for line in logs.splitlines() if line.strip()]
    failed_marker = any("FAILED" in line or "error" in line.lower() for line in lines)
    passed = phase == "Succeeded" and not failed_marker
    tail = lines[-1] if lines else "no output"
    verdict = "passed" if passed else "failed"
    return passed, f"CUDA check {verdict} (pod {phase}): {tail}"


@dataclasses.dataclass(frozen=True)
class ValidationOutcome:
    """The result of a `validate-gpu` run."""

    passed: bool
    summary: str
    phase: str
    logs: str


def run_validation(
    kube: Any,
    node: str,
    namespace: str,
    name: str,
    *,
    image: str = VALIDATION_IMAGE,
    timeout: float = 300.0,
    poll: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] = lambda line: None,
) -> ValidationOutcome:
    """Run the validation pod on `node`, wait for it, and delete it whatever happens.

    `progress` gets each new state line (for `event.log`). Stops early when the pod
    cannot finish (image pull failure and the like) and at `timeout`.

    Raises:
        KubeError: the API server refused to create or read the pod.
    """
    from charms.gpu_k8s.v0.system import poll_until

    kube.create(validation_pod(node, namespace, image, name, deadline=max(1, round(timeout))))
    last = ""

    def outcome() -> ValidationOutcome | None:
        nonlocal last
        pod = kube.get("v1", "Pod", name, namespace)
        if pod is None:
            return ValidationOutcome(False, "validation pod was deleted", "Unknown", "")
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase in ("Succeeded", "Failed"):
            logs = kube.pod_logs(name, namespace, tail_lines=50)
            passed, summary = parse_validation_result(phase, logs)
            return ValidationOutcome(passed, summary, phase, logs)
        line, stuck = validation_progress(pod)
        if line != last:
            progress(line)
            last = line
        if stuck:
            return ValidationOutcome(False, f"CUDA check failed: {stuck}", phase, "")
        return None

    try:
        done = poll_until(outcome, timeout, poll=poll, clock=clock, sleep=sleep)
        return done or ValidationOutcome(
            False, f"CUDA check timed out after {timeout:.0f}s: {last}", "Pending", ""
        )
    finally:
        kube.delete("v1", "Pod", name, namespace)
