# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""NVIDIA's MIG manager: repartitions a node's GPUs when its MIG label changes (no ops).

The worker charm asks for a MIG layout by labelling its drained node
`nvidia.com/mig.config=all-1g.10gb`; NVIDIA's `k8s-mig-manager`, a DaemonSet on nodes
labelled `nvidia.com/gpu.deploy.mig-manager=true`, sees the label change and runs
NVIDIA's own sequence (NVIDIA/mig-parted v0.15.0 `pkg/mig/reconfigure/reconfigure.go`):
`nvidia.com/mig.config.state=pending`; `nvidia.com/gpu.deploy.device-plugin` set to
`paused-for-mig-change`, which takes the device plugin off the node (its node affinity
excludes that value, see `device_plugin.py`), waiting until no pod labelled
`app=nvidia-device-plugin-daemonset` is left on it in device_plugin.NAMESPACE; `nvidia-mig-parted
apply` of the named config; with CDI, `nvidia-smi` and a management CDI spec; the label
back to `true`; then `nvidia.com/mig.config.state=success` (or `failed`), which the
worker waits for. This module writes no MIG logic of its own.

The named configs come from what the workers report (`gpu-inventory`: per MIG-capable
model its PCI device id and, per GPU-instance profile, how many instances one GPU holds),
with the instance counts of NVIDIA's table for that model (NVIDIA_MIG_PROFILES: a report
that disagrees is refused, a model outside the table gets no layouts), since one config
serves every node of a model and root on a worker writes its report:
`all-<profile>` fills every GPU of each model with that profile, as the configs NVIDIA
ships and the ones `nvidia-mig-manager` generates from the hardware are named
(`pkg/mig/builder/builder.go`: `+` becomes `.`, so `1g.10gb+me` is `all-1g.10gb.me`),
plus `all-disabled` and `all-enabled` (`deployments/systemd/config-default.yaml`). One
config file serves the whole cluster, so every entry names its models' PCI ids in a
`device-filter`; a GPU that no entry of the chosen config names is left as it is
(`cmd/nvidia-mig-parted/assert/assert.go` `WalkSelectedMigConfigForEachGPU`).

Upstream sources, checked 2026-11-23: NVIDIA/mig-parted at tag v0.15.0 (2026-08-19,
commit e2d5ad1f): `cmd/nvidia-mig-manager/main.go` (flags and their environment
variables), `pkg/mig/reconfigure/reconfigure.go` (the API calls, hence the RBAC below),
`api/spec/v1/spec.go` and `pkg/types/device.go` (the config format, device ids as
`0x<device><vendor>`), `deployments/container/nvidia-mig-manager-example.yaml` and
`Dockerfile`; NVIDIA/gpu-operator at tag v26.7.0 (2026-08-20), which runs v0.15.0:
`assets/state-mig-manager/` (RBAC, DaemonSet), `controllers/object_controls.go`
`TransformMIGManager`, and `cmd/nvidia-validator/driver.go` `getDriverInfo` (the driver
and device roots for a driver installed on the host, as the worker charm installs it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

import dcgm_exporter
import device_plugin
import yaml
from listing import LIMIT, shown
from literals import FIELD_MANAGER, MANAGED_BY_LABEL

from charms.gpu_k8s.v0 import images

# The newest release tag of NVIDIA/mig-parted on 2026-11-23 (v0.15.0, tagged 2026-08-19);
# its deployments/container/Makefile (REGISTRY nvcr.io/nvidia/cloud-native, IMAGE_NAME
# k8s-mig-manager) and nvidia-mig-manager-example.yaml name this image, and GPU Operator
# v26.7.0's values.yaml `migManager` pins the same version.
VERSION = "v0.15.0"
IMAGE = f"nvcr.io/nvidia/cloud-native/k8s-mig-manager:{VERSION}"
NAME = "nvidia-mig-manager"
NAMESPACE = device_plugin.NAMESPACE
CONFIG_MAP = f"{NAME}-config"
CLIENTS_CONFIG_MAP = f"{NAME}-gpu-clients"
RBAC = "rbac.authorization.k8s.io/v1"

# Node labels (reconfigure.go; main.go MigConfigLabel). The worker charm sets the first
# two and reads the third; the MIG manager runs where DEPLOY_LABEL is "true" (the
# example manifest's and the GPU Operator's nodeSelector).
DEPLOY_LABEL = "nvidia.com/gpu.deploy.mig-manager"
CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"

# NVIDIA's PCI vendor id: device filters are `0x<device><vendor>` in hex, upper case as
# mig-parted prints them (pkg/types/device.go DeviceID.String, `0x%04X%04X`).
NVIDIA_VENDOR = "10DE"
# A GPU-instance profile as go-nvlib parses one (vendored pkg/nvlib/device/mig_profile.go
# parseMigProfile): `[<c>c.]<g>g.<gb>gb`, then optionally `+` or `-` and a comma-separated
# list of attributes (letters, digits and dots, not starting with a digit or a dot, not
# ending with a dot).
_ATTRIBUTE = r"[A-Za-z](?:[A-Za-z0-9.]*[A-Za-z0-9])?"
_PROFILE = re.compile(
    rf"^(?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.\d+gb(?:[+-]{_ATTRIBUTE}(?:,{_ATTRIBUTE})*)?$"
)
# A config name is what the worker writes as a label value (apimachinery validation).
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")

# Where the ConfigMaps are mounted and the environment that names them (main.go flags
# --config-file/CONFIG_FILE, --gpu-clients-file/GPU_CLIENTS_FILE; paths as upstream's
# example manifest mounts them).
CONFIG_DIR = "/mig-parted-config"
CLIENTS_DIR = "/gpu-clients"
# --host-root-mount/HOST_ROOT_MOUNT (default /host): the host's / in the container;
# reconfigure.New reaches the host's systemd over D-Bus through
# <mount>/run/dbus/system_bus_socket, and with CDI `chroot`s there to run nvidia-smi.
HOST_ROOT_MOUNT = "/host"


class MigGpu(NamedTuple):
    """One MIG-capable GPU model as a worker reported it."""

    model: str
    pci_device_id: str | None  # 4 hex digits, `2330`; None from workers that do not say
    profiles: Mapping[str, int]  # GPU-instance profile -> instances one GPU holds


def config_name(profile: str) -> str | None:
    """The named config that fills every GPU with `profile`, or None when there is none.

    `all-<profile>` with `+` as `.` (builder.go normalizeProfileName), for GPU-instance
    profiles only: compute-instance profiles (`1c.3g.20gb`, fewer compute slices than
    the instance has) are skipped as `nvidia-mig-manager` skips them
    (pkg/mig/discovery/discovery.go isCIProfile). None as well for a name that could not
    be a label value, since no worker could ask for it.
    """
    match = _PROFILE.match(profile)
    if match is None:
        return None
    if match["c"] is not None and int(match["c"]) < int(match["g"]):
        return None
    name = "all-" + profile.replace("+", ".")
    return name if _LABEL_VALUE.match(name) else None


def device_filter(pci_device_id: str) -> str:
    """mig-parted's id for an NVIDIA GPU model: `2330` (or `0x2330`) -> `0x233010DE`."""
    return f"0x{pci_device_id.upper().removeprefix('0X')}{NVIDIA_VENDOR}"


# NVIDIA's per-model MIG profile table (the MIG user guide, "Supported MIG Profiles":
# "Number of Instances Available" per GPU-instance profile) for every model the worker
# charm counts as MIG-capable (its gpu.py MIG_CAPABLE), keyed by PCI device id as workers
# report it (names from pciutils/pciids pci.ids). The counts are the ones mig-parted
# v0.15.0 (commit e2d5ad1f) ships in deployments/systemd/config-default.yaml: the
# `all-<profile>` configs under the comment naming the model's group, the group being
# the comment over the `all-balanced` entry whose `device-filter` names the model
# (quoted per model below; `all-1g.10gb` and `all-1g.35gb` filter by model too). Where
# config-default.yaml has no entry for a model, the comment says so and names NVIDIA's
# table used instead. `1g.24gb+me` (config-default.yaml's `all-1g.24gb.me`, under no
# comment of its own) is given to no model: NVIDIA AI Enterprise's MIG-backed vGPU tables
# for the H100 NVL and the 96GB H20 list no such profile (the RTX PRO 6000 has one).
# The counts are the hardware's: a worker's report is checked against them and never
# changes them, so no unit's `gpu-inventory` changes the layout of another node.
_A100_40GB = {  # all-balanced "A100-40GB, A800-40GB": 0x20B010DE, 0x20F110DE, ...
    "1g.5gb": 7,
    "1g.5gb+me": 1,
    "1g.10gb": 4,  # all-1g.10gb's second entry, device-filter 0x20B010DE, 0x20F110DE, ...
    "2g.10gb": 3,
    "3g.20gb": 2,
    "4g.20gb": 1,
    "7g.40gb": 1,
}
# all-balanced "H100-80GB, H800-80GB, A100-80GB, A800-80GB": 0x233010DE, 0x233110DE,
# 0x20B210DE, 0x20B510DE, ... (all-1g.10gb's first entry filters the same ids)
_80GB = {
    "1g.10gb": 7,
    "1g.10gb+me": 1,
    "1g.20gb": 4,
    "2g.20gb": 3,
    "3g.40gb": 2,
    "4g.40gb": 1,
    "7g.80gb": 1,
}
# all-balanced "H200 141GB, H200 NVL": 0x233510DE, 0x233B10DE; all-1g.18gb and
# all-1g.18gb.me under "H200-141GB, GH200 144G HBM3e", then all-1g.35gb and the 2g.35gb
# to 7g.141gb configs after it (the MIG user guide's "GPU Instance Profiles on H200" has
# the same counts). all-1g.35gb filters 0x233510DE (4) and GB300's 0x31C210DE (7) only:
# config-default.yaml has no 1g.35gb entry for the H200 NVL, whose 4 is that H200 table's
# (the guide's Supported GPUs page lists the H200 NVL as the same 141GB GH100 part) and
# NVIDIA AI Enterprise's "MIG-Backed NVIDIA vGPU for Compute for NVIDIA H200 PCIe 141GB
# (H200 NVL)" (H200-1-35C on MIG 1g.35gb, 4 per GPU).
_H200 = {
    "1g.18gb": 7,
    "1g.18gb+me": 1,
    "1g.35gb": 4,
    "2g.35gb": 3,
    "3g.71gb": 2,
    "4g.71gb": 1,
    "7g.141gb": 1,
}
NVIDIA_MIG_PROFILES: dict[str, dict[str, int]] = {
    "20b0": _A100_40GB,  # A100 SXM4 40GB (p4d)
    "20f1": _A100_40GB,  # A100 PCIe 40GB
    "20b2": _80GB,  # A100 SXM4 80GB (p4de)
    "20b5": _80GB,  # A100 PCIe 80GB
    "2330": _80GB,  # H100 SXM5 80GB (p5)
    "2331": _80GB,  # H100 PCIe
    "20b7": {  # A30 PCIe: all-balanced "A30-24GB", device-filter 0x20B710DE
        "1g.6gb": 4,
        "1g.6gb+me": 1,
        "2g.12gb": 2,
        "2g.12gb+me": 1,
        "4g.24gb": 1,
    },
    # H100L 94GB (H100 NVL): all-balanced "H100 NVL, H800 NVL", 0x232110DE; the configs
    # under "H100 NVL, H800 NVL, GH200" (1g.12gb, 1g.12gb+me, 1g.24gb, 2g.24gb) and
    # "H100 NVL, H800 NVL" (3g.47gb, 4g.47gb, 7g.94gb)
    "2321": {
        "1g.12gb": 7,
        "1g.12gb+me": 1,
        "1g.24gb": 4,
        "2g.24gb": 3,
        "3g.47gb": 2,
        "4g.47gb": 1,
        "7g.94gb": 1,
    },
    # GH200 120GB / 480GB (its H100 96GB): all-balanced "H100-96GB, PG506-96GB, GH200,
    # H20", 0x234210DE; the configs under "H100 NVL, H800 NVL, GH200" (1g.12gb,
    # 1g.12gb+me, 1g.24gb, 2g.24gb) and "H100-96GB, PG506-96GB, GH200" (3g.48gb, 4g.48gb,
    # 7g.96gb)
    "2342": {
        "1g.12gb": 7,
        "1g.12gb+me": 1,
        "1g.24gb": 4,
        "2g.24gb": 3,
        "3g.48gb": 2,
        "4g.48gb": 1,
        "7g.96gb": 1,
    },
    "2335": _H200,  # H200 SXM 141GB (p5e, p5en)
    "233b": _H200,  # H200 NVL
    # B200 (p6-b200): all-balanced "B200", 0x290110DE; the configs under "GB200, B200"
    # (1g.23gb, 1g.23gb+me) and all-1g.45gb, all-2g.45gb, all-3g.90gb, all-4g.90gb (commit
    # 453b5af4 "[B200] add MIG profile for the 4g.90gb instance"), all-7g.180gb, which no
    # comment names: the MIG user guide's "GPU Instance Profiles on B200" has these counts
    "2901": {
        "1g.23gb": 7,
        "1g.23gb+me": 1,
        "1g.45gb": 4,
        "2g.45gb": 3,
        "3g.90gb": 2,
        "4g.90gb": 1,
        "7g.180gb": 1,
    },
    # B300 SXM6 AC (p6-b300): all-balanced "B300", 0x318210DE; no comment names its
    # configs: they are the ones commit 47c56d96 "add support for the B300 GPU node"
    # added with that device filter
    "3182": {
        "1g.34gb": 7,
        "1g.34gb+me": 1,
        "1g.67gb": 4,
        "2g.67gb": 3,
        "3g.135gb": 2,
        "4g.135gb": 1,
        "7g.269gb": 1,
    },
}


def nvidia_profiles(pci_device_id: str | None) -> Mapping[str, int] | None:
    """NVIDIA's instance counts for a model, by PCI device id; None for one not listed."""
    if not pci_device_id:
        return None
    return NVIDIA_MIG_PROFILES.get(pci_device_id.lower().removeprefix("0x"))


def disagreement(gpu: MigGpu) -> str | None:
    """What a report says that NVIDIA's table does not (None: nothing, or no table).

    A report naming a count NVIDIA's table does not have for that model and profile is
    refused (`_profile_counts` leaves it out): root on a worker writes its
    `gpu-inventory` (relation-set). A count below 1 says the profile is not offered.
    """
    table = nvidia_profiles(gpu.pci_device_id)
    if table is None:
        return None
    for profile, count in sorted(gpu.profiles.items()):
        if profile in table and count >= 1 and count != table[profile]:
            return f"{count} {profile} per {gpu.model}, NVIDIA's table {table[profile]}"
    return None


def unlisted(gpu: MigGpu) -> bool:
    """Whether a MIG-capable model is outside NVIDIA_MIG_PROFILES (it gets no layouts)."""
    return bool(gpu.pci_device_id) and nvidia_profiles(gpu.pci_device_id) is None


def report_notes(reports: Iterable[tuple[str, MigGpu]], limit: int = LIMIT) -> list[str]:
    """Status notes on the units' MIG reports (`reports`: unit, GPU model), bounded.

    Each refused report names its unit (root on that worker wrote it, or its driver is
    not NVIDIA's): the first `limit`, then how many more; each model outside the table
    once, with the first unit that reported it.
    """
    refused: list[str] = []
    models: dict[tuple[str, str], str] = {}
    for unit, gpu in reports:
        why = disagreement(gpu)
        if why is not None:
            refused.append(f"{unit}: gpu-inventory says {why} (refused)")
        elif unlisted(gpu):
            models.setdefault((gpu.model, str(gpu.pci_device_id)), unit)
    notes = [shown(sorted(refused), limit, more="MIG report(s) refused")] if refused else []
    notes += [
        f"no MIG layouts for {model} (PCI {pci}, {unit}): not in NVIDIA's MIG table here"
        for (model, pci), unit in sorted(models.items())
    ]
    return notes


def _profile_counts(gpus: Iterable[MigGpu]) -> dict[tuple[str, str], dict[str, int]]:
    """Per (config name, profile), per device filter: the instances one GPU holds.

    NVIDIA's counts (NVIDIA_MIG_PROFILES) for each profile a worker reports for a listed
    model: what a report says decides which profiles are offered, never how many
    instances one holds, and a report that disagrees with the table is left out. A
    model outside the table gets no configs (one worker could otherwise set the count
    every node of that model gets), nor does a profile outside its model's table.
    """
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for gpu in gpus:
        table = nvidia_profiles(gpu.pci_device_id)
        if table is None or not gpu.pci_device_id or disagreement(gpu) is not None:
            continue
        device = device_filter(gpu.pci_device_id)
        for profile, count in gpu.profiles.items():
            name = config_name(profile)
            if profile not in table or count < 1 or name is None:
                continue
            counts.setdefault((name, profile), {})[device] = table[profile]
    return counts


def mig_parted_config(gpus: Iterable[MigGpu]) -> dict:
    """The mig-parted config (version v1) for every MIG-capable model the workers report.

    As builder.go buildMigConfigSpec does for one node's GPUs, for the cluster's: per
    profile one entry per instance count, naming the models that hold that many.
    """
    configs: dict[str, list[dict]] = {
        # config-default.yaml's first two configs, verbatim in meaning
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    for (name, profile), per_device in sorted(_profile_counts(gpus).items()):
        by_count: dict[int, list[str]] = {}
        for device, count in per_device.items():
            by_count.setdefault(count, []).append(device)
        configs[name] = [
            {
                "device-filter": sorted(devices),
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": {profile: count},
            }
            for count, devices in sorted(by_count.items())
        ]
    return {"version": "v1", "mig-configs": configs}


def config_text(gpus: Iterable[MigGpu]) -> str:
    """The config file; PyYAML quotes `0x...` filters, which YAML would read as numbers."""
    return yaml.safe_dump(mig_parted_config(gpus), sort_keys=False)


# Host services the MIG manager would stop around a change (main.go GPUClients, the
# `systemd-services` list). None: WITH_SHUTDOWN_HOST_GPU_CLIENTS is false (see _env), so
# the list is never read; an empty one parses (main.go parseGPUCLientsFile).
CLIENTS_TEXT = yaml.safe_dump({"version": "v1", "systemd-services": []}, sort_keys=False)

# What reconfigure.go and main.go ask the API for, and nothing more:
# - nodes: get (getCurrentNodeLabels), list and watch (the informer on its own Node,
#   ContinuouslySyncMigConfigChanges), patch (setNodeLabels, a merge patch of labels);
# - pods, every namespace: list (waitForPodsWithNodeSelector lists the node's pods in
#   all namespaces; waitForPodDeletion and deletePod list in DEFAULT_GPU_CLIENTS_NAMESPACE).
# No ConfigMap access: with CONFIG_FILE set, main.go setupMigConfig neither generates a
# config nor writes the per-node ConfigMap (createNodeConfigMap). The GPU Operator's
# asset grants more (nodes update, configmaps, pods get/watch) for that path.
CLUSTER_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
]
# - pods in DEFAULT_GPU_CLIENTS_NAMESPACE: delete (deletePod, for the GPU Operator's
#   validator pods, which this cluster does not run: the lists come back empty).
NAMESPACE_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
]
# The `app` labels of the pods deletePod deletes (reconfigure.go waitForPodsToBeDeleted:
# the CUDA and plugin validators; restartValidatorPod: the operator's validator), each
# listed with `spec.nodeName=<its node>`: admission_policies fences the delete to these.
VALIDATOR_APPS = (
    "nvidia-cuda-validator",
    "nvidia-device-plugin-validator",
    "nvidia-operator-validator",
)


def _env() -> list[dict]:
    """The container's environment, each variable a main.go flag (source in the comment)."""
    value = {
        "CONFIG_FILE": f"{CONFIG_DIR}/config.yaml",
        "GPU_CLIENTS_FILE": f"{CLIENTS_DIR}/clients.yaml",
        "HOST_ROOT_MOUNT": HOST_ROOT_MOUNT,
        # Where the GPU clients it stops run: the device plugin (device_plugin.NAMESPACE).
        "DEFAULT_GPU_CLIENTS_NAMESPACE": device_plugin.NAMESPACE,
        # A failed MIG mode change reports `failed` instead of rebooting the node: reboots
        # are the worker charm's, in turns (upstream's example manifest sets false too).
        "WITH_REBOOT": "false",
        # The GPU Operator sets this to true for a host driver (0420_configmap.yaml,
        # IS_HOST_DRIVER), to stop the host services in gpu-clients (NVSM, DCGM, none of
        # which the worker installs) and, when the MIG mode changes, kubelet. The worker
        # drains the node first, and kubelet stays up, so pods keep being accounted for.
        "WITH_SHUTDOWN_HOST_GPU_CLIENTS": "false",
        # CDI (TransformMIGManager with CDI enabled): the device plugin hands GPUs out as
        # CDI devices, so after a change the manager creates the control device nodes and
        # nvidia-cap* nodes (nvidia-smi) and writes the management CDI spec.
        "CDI_ENABLED": "true",
        # A driver installed on the host (nvidia-validator driver.go getDriverInfo,
        # isHostDriver): driver and device nodes at the host's /, seen at /host.
        "NVIDIA_DRIVER_ROOT": device_plugin.HOST_DRIVER_ROOT,
        "DRIVER_ROOT_CTR_PATH": HOST_ROOT_MOUNT,
        "NVIDIA_DEV_ROOT": device_plugin.HOST_DRIVER_ROOT,
        "DEV_ROOT_CTR_PATH": HOST_ROOT_MOUNT,
        # The host's hook for the management spec (default /usr/local/nvidia/toolkit/...,
        # where the GPU Operator's toolkit installs it); the worker's toolkit package puts
        # it where the device plugin's spec names it.
        "NVIDIA_CDI_HOOK_PATH": device_plugin.CDI_HOOK_PATH,
    }
    node = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    return [node, *({"name": k, "value": v} for k, v in value.items())]


def _pod_spec(image_registry: str) -> dict:
    """The pod: the GPU Operator's 0600_daemonset.yaml, less its operator-only parts.

    Left out: the init container waiting for the operator's toolkit validation, the
    entrypoint that reads the validator's driver-ready file (its variables are set in
    `_env` instead), and the /run/nvidia/driver mount (the driver is at /host).
    """
    config_volume = {"name": "config", "configMap": {"name": CONFIG_MAP}}
    clients_volume = {"name": "gpu-clients", "configMap": {"name": CLIENTS_CONFIG_MAP}}
    # Paused with the device plugin and the DCGM exporter while the worker resets a GPU or
    # runs DCGM's diagnostic (device_plugin.NOT_PAUSED; the pod carries device_plugin.
    # GPU_CLIENT, which the worker waits to see gone): a reset "can't" have "any
    # applications using these devices" (nvidia-smi(1) -r), and the manager runs
    # `nvidia-mig-parted` (NVML) whenever its pod starts or its label changes (mig-parted
    # v0.15.0 cmd/nvidia-mig-manager/main.go start: the loop runs migReconfigure for the
    # label's value, the first time at start-up). Idle, it holds no GPU; what pausing it
    # buys is that no apply can start on a GPU being reset, and that its new pod after the
    # pause checks the node's layout again (reconfigure.go Run: `assert`, then apply when
    # the GPUs do not hold it). It tolerates the GPU quarantine's NoExecute taint, as the
    # DCGM exporter does (dcgm_exporter.QUARANTINE_TOLERATION; GPU Operator v26.7.0's
    # DaemonSet tolerates only nvidia.com/gpu NoSchedule, knowing no such taint): a
    # quarantined GPU is repaired and gated in its node's MIG layout, and MIG devices do not
    # survive the repair's reboot (mig-parted v0.15.0 README.md: it "does not ensure that MIG
    # device configurations will persist across node reboots"); its container, started
    # again after the boot (main.go `start` -> `migReconfigure`), makes them again, which
    # the worker's gate waits for (its mig.py GATE_WAIT_S). Evicted by the taint, it would
    # come back only at readmission, which waits for that gate.
    return {
        "serviceAccountName": NAME,
        "nodeSelector": {DEPLOY_LABEL: "true"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [device_plugin.NOT_PAUSED]}]
                }
            }
        },
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            dcgm_exporter.QUARANTINE_TOLERATION,
        ],
        "priorityClassName": "system-node-critical",
        # The nvidia runtime gives the container the driver's NVML and every GPU
        # (the image sets NVIDIA_VISIBLE_DEVICES=all, NVIDIA_MIG_CONFIG_DEVICES=all;
        # the container is privileged, so the worker's toolkit honours them);
        # TransformMIGManager setRuntimeClassName.
        "runtimeClassName": device_plugin.RUNTIME_CLASS,
        "hostPID": True,
        "hostIPC": True,
        "containers": [
            {
                "name": NAME,
                "image": images.mirrored(IMAGE, image_registry),
                "imagePullPolicy": "IfNotPresent",
                "env": _env(),
                "securityContext": {"privileged": True},
                "volumeMounts": [
                    {
                        "name": "host-root",
                        "mountPath": HOST_ROOT_MOUNT,
                        "mountPropagation": "HostToContainer",
                    },
                    {"name": "host-sys", "mountPath": "/sys"},
                    {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                    {"name": "gpu-clients", "mountPath": CLIENTS_DIR, "readOnly": True},
                    # where reconfigure.go createCDISpec writes management.nvidia.com-gpu.yaml
                    {"name": "cdi-root", "mountPath": device_plugin.CDI_ROOT},
                ],
            }
        ],
        "volumes": [
            {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}},
            {"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}},
            config_volume,
            clients_volume,
            {
                "name": "cdi-root",
                "hostPath": {"path": device_plugin.CDI_ROOT, "type": "DirectoryOrCreate"},
            },
        ],
    }


def _rbac(labels: dict) -> list[dict]:
    """ServiceAccount, ClusterRole and Role with their bindings (rules above)."""
    meta = {"name": NAME, "labels": labels}
    namespaced = {**meta, "namespace": NAMESPACE}
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "name": NAME}
    subjects = [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": namespaced},
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": meta, "rules": CLUSTER_RULES},
        {
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {**role_ref, "kind": "ClusterRole"},
            "subjects": subjects,
        },
        {"apiVersion": RBAC, "kind": "Role", "metadata": namespaced, "rules": NAMESPACE_RULES},
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": namespaced,
            "roleRef": {**role_ref, "kind": "Role"},
            "subjects": subjects,
        },
    ]


def manifests(gpus: Iterable[MigGpu], image_registry: str = "") -> list[dict]:
    """Every object, in the order they are applied.

    A digest of the config on the pod template replaces the pods when a model or a
    profile is added, so that a node's MIG manager never checks a requested config
    against a file kubelet has not refreshed yet.
    """
    text = config_text(gpus)
    digest = hashlib.sha256(f"{text}{CLIENTS_TEXT}".encode()).hexdigest()[:16]
    labels = {"app.kubernetes.io/name": NAME, MANAGED_BY_LABEL: FIELD_MANAGER}

    def config_map(name: str, key: str, data: str) -> dict:
        meta = {"name": name, "namespace": NAMESPACE, "labels": labels}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {key: data}}

    # `app` as upstream labels the pods, for `kubectl logs -l app=...`
    daemon_set = device_plugin.daemon_set(
        NAME, {"app": NAME, **device_plugin.GPU_CLIENT}, digest, _pod_spec(image_registry)
    )
    return [
        device_plugin.namespace(),
        *_rbac(labels),
        config_map(CONFIG_MAP, "config.yaml", text),
        config_map(CLIENTS_CONFIG_MAP, "clients.yaml", CLIENTS_TEXT),
        daemon_set,
    ]
