# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The NVIDIA device plugin: a pinned DaemonSet on GPU nodes only (no ops imports).

It advertises `nvidia.com/gpu` on nodes the worker charm labelled
`nvidia.com/gpu.present=true`, except where `nvidia.com/gpu.deploy.device-plugin` says
`paused-for-mig-change` or `false` (the MIG manager pauses it while it repartitions the
GPUs), tolerates the
`nvidia.com/gpu` taint, runs through the `nvidia` RuntimeClass, and reads its MIG
strategy and time-slicing replicas from a ConfigMap. A hash of that config on the pod
template rolls the pods when it changes.

GPUs reach the pods that request them through CDI (the `cdi-cri` device list strategy):
the plugin writes a CDI spec for the node's GPUs into `/var/run/cdi` and answers each
allocation with the CDI device names, which kubelet passes to containerd in the CRI
request (`CDIDevices`). containerd 2.x has CDI on by default and injects the devices, so
a pod gets its GPUs under runc, without `runtimeClassName: nvidia`. The spec sets
`NVIDIA_VISIBLE_DEVICES=void`, so a pod that does use the `nvidia` class (whose image
may say `NVIDIA_VISIBLE_DEVICES=all`) still sees only the GPUs it was allocated.

Upstream sources (NVIDIA/k8s-device-plugin at tag v0.20.0, tagged 2026-08-19, checked
2026-11-23): `docs/cdi.md` (the plugin runs with `runtimeClassName=nvidia` and
`nvidiaDriverRoot=/` so that it can generate the spec); `deployments/helm/
nvidia-device-plugin/templates/daemonset-device-plugin.yml` (host `/var/run/cdi` as
`cdi-root`, type DirectoryOrCreate; the driver root read-only at `/driver-root`;
`NVIDIA_MIG_MONITOR_DEVICES=all` when a MIG strategy is set) and `_helpers.tpl`
(`requiresCapSysAdmin`: SYS_ADMIN added when any MIG strategy is not `none`, otherwise
`allowPrivilegeEscalation: false` and all capabilities dropped); `api/config/v1/flags.go`
(the config file keys used below) and `cmd/nvidia-device-plugin/main.go` (their defaults).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import yaml
from literals import FIELD_MANAGER, GPU_NAMESPACE, MANAGED_BY_LABEL, PRIVILEGED_POD_SECURITY

from charms.gpu_k8s.v0 import images, kube_objects

if TYPE_CHECKING:
    from charms.gpu_k8s.v0.kubeclient import Kube

# The newest release tag of NVIDIA/k8s-device-plugin on 2026-11-23 (v0.20.0, tagged
# 2026-08-19; its deployments/static/nvidia-device-plugin.yml and the Helm chart's
# image.repository + appVersion name this image).
VERSION = "v0.20.0"
IMAGE = f"nvcr.io/nvidia/k8s-device-plugin:{VERSION}"
# Its own namespace, Pod Security `privileged` (literals.GPU_NAMESPACE), shared with the DCGM
# exporter and the MIG manager only. Clusters set up before issue 29 ran all three in
# LEGACY_NAMESPACE; addons.py moves them (retire_legacy below).
NAMESPACE = GPU_NAMESPACE
LEGACY_NAMESPACE = "kube-system"
NAME = "nvidia-device-plugin"
GPU_NODE_LABEL = "nvidia.com/gpu.present"
# The plugin steps aside while NVIDIA's MIG manager repartitions a node (mig_manager.py):
# the manager turns this label from "true" (which the worker charm sets on GPU nodes) to
# `paused-for-mig-change` and back (NVIDIA/mig-parted v0.15.0 pkg/mig/reconfigure/
# reconfigure.go devicePluginDeployLabel, maybeSetPaused). The GPU Operator selects on
# "true"; a node affinity `NotIn` those values does the same, and also runs the plugin on
# GPU nodes whose worker has not set the label yet (a control plane refreshed before its
# workers): `NotIn` matches a node without the label, and the DaemonSet controller removes
# its pod from a node that stops matching (daemon_controller NodeShouldRunDaemonPod).
DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"
STEPPED_ASIDE = ("false", "paused-for-mig-change")
# The pod label the MIG manager waits to see gone from the node, in its
# DEFAULT_GPU_CLIENTS_NAMESPACE, before it changes the GPUs (reconfigure.go
# waitForPodsToBeDeleted). On the pods only: a DaemonSet's spec.selector cannot change.
MIG_CLIENT_POD_LABEL = {"app": "nvidia-device-plugin-daemonset"}
# The plugin and the DCGM exporter hold NVML handles on every GPU of their node, so they
# also step aside while the worker resets a GPU (kube_objects.GPU_CLIENTS_LABEL: the
# worker pauses them by that node label and waits until no pod of theirs, found by
# GPU_CLIENT, is left on its node; gpu_repair.py).
GPU_CLIENT = {kube_objects.GPU_CLIENT_POD_LABEL: "true"}
# Unlike the DCGM exporter (dcgm_exporter.QUARANTINE_TOLERATION), the plugin does not
# tolerate the GPU quarantine's NoExecute taint (lib kubernetes_cluster.QUARANTINE_TAINT):
# it leaves a quarantined node and a fresh one starts there at readmission. The plugin
# marks a GPU unhealthy on an XID it does not skip (IN_SERVICE_XIDS below: those the
# watcher quarantines for) and "will then leave it unhealthy forever ... the only
# way out of this situation is to restart the plugin" (NVIDIA's maintainer on
# NVIDIA/k8s-device-plugin#234; still so in #1014, gpu-operator#1065): one that stayed
# through the quarantine would report the repaired GPU unhealthy to kubelet after a
# readmission without reboot or reset (readmit-gpu), one GPU fewer allocatable. Nothing is
# lost meanwhile: the taint keeps every new pod off the node, what the plugin would report
# to kubelet, and the watcher and the exporter show the GPUs' health.
RUNTIME_CLASS = "nvidia"
MIG_STRATEGIES = ("none", "single", "mixed")

# `flags.plugin.deviceListStrategy` (env DEVICE_LIST_STRATEGY, default `envvar`): the
# CRI's CDIDevices field; kubelet forwards it since the DevicePluginCDIDevices feature
# (GA and locked on in Kubernetes 1.31, pkg/features/kube_features.go).
DEVICE_LIST_STRATEGY = "cdi-cri"
# `flags.plugin.deviceIDStrategy`: CDI device names carry the GPU UUID (the default).
DEVICE_ID_STRATEGY = "uuid"
# Where containerd reads CDI specs (its Linux default cdi_spec_dirs: /etc/cdi,
# /var/run/cdi) and where the plugin writes its spec (internal/cdi/cdi.go `cdiRoot`).
CDI_ROOT = "/var/run/cdi"
# `flags.nvidiaDriverRoot`: the driver's root on the host, which the paths in the spec
# are made relative to; the worker charm installs the driver from Ubuntu's packages at /.
HOST_DRIVER_ROOT = "/"
# `flags.plugin.containerDriverRoot` (default /driver-root): where the plugin finds the
# host's driver files to list in the spec; the Helm chart mounts the host root there.
CONTAINER_DRIVER_ROOT = "/driver-root"
# `flags.plugin.nvidiaCTKPath` (env NVIDIA_CDI_HOOK_PATH): the hook binary the spec's
# hooks run on the host. nvidia-container-toolkit-base installs /usr/bin/nvidia-cdi-hook
# (packaging/debian/nvidia-container-toolkit-base.install, v1.18.1 and v1.20.0, the
# worker's pin), the default of the
# toolkit's own spec generator (internal/discover/hooks.go defaultNvidiaCDIHookPath).
CDI_HOOK_PATH = "/usr/bin/nvidia-cdi-hook"
# `sharing.timeSlicing.failRequestsGreaterThanOne`: a container asking for more than one
# replica of a time-sliced GPU fails at kubelet admission (UnexpectedAdmissionError,
# "maximum request size for shared resources is 1"; internal/rm/rm.go ValidateRequest,
# from Allocate in internal/plugin/server.go) instead of getting N replicas that may be
# slices of the same GPU: the pod would see one GPU while Kueue's quota, the scheduler,
# the DCGM exporter's per-pod series and job-status count N. README.md "With CUDA
# Time-Slicing": more than one replica "does not imply ... a proportional amount of
# compute power"; setting it "is recommended" (false by default for compatibility).
FAIL_REQUESTS_GREATER_THAN_ONE = True
# Set on the plugin when a MIG strategy is in use, as the Helm chart does.
MIG_MONITOR_ENV = {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"}
# The XIDs that never take a GPU out of service, which the plugin is told to ignore: the
# worker's GPU health watcher owns GPU health (quarantine, repair, gate, readmission).
# v0.20.0 internal/rm/health.go: on every NVML XidCriticalError event whose XID is not
# skipped the plugin marks the GPU Unhealthy until it restarts (server.go ListAndWatch,
# "there is no way to recover from the Unhealthy state"); by default it skips only 13, 31,
# 43, 45, 68 and 109, so an XID 94 (NVIDIA: restart the application) would take a GPU
# out of kubelet's allocatable with no quarantine, repair or alert (k8s-device-plugin#1974).
# DP_DISABLE_HEALTHCHECKS is a comma-separated list of XIDs skipped on top of those six
# (getDisabledHealthCheckXids, newHealthCheckXIDs). Not `all` or `xids`: either stops the
# health check before it watches anything (checkHealth returns at IsAllDisabled), and
# DP_ENABLE_HEALTHCHECKS cannot bring single XIDs back then, since IsAllDisabled still
# holds; with a list the plugin still marks a GPU that fell off the bus (XID 79), any
# XID the catalog answers with a reset, a reboot or support, and an XID newer than the
# catalog, all of which the watcher quarantines too, and the NVML failures that mark
# every GPU. These are the catalog's `application` and `info` XIDs, and 154 (its recovery
# action is in the kernel's line, which the watcher reads; NVML's event carries the XID
# number only: go-nvml EventData): a copy of charms/kubernetes-worker/src/xid_catalog.json
# (read 2026-11-27), which tests/unit/kubernetes_control_plane/test_device_plugin.py
# compares with that file.
IN_SERVICE_XIDS = (
    *(8, 11, 13, 14, 25, 31, 32, 37, 38, 39, 40, 41, 43, 44, 45, 60, 63, 66, 67, 68),
    *(69, 70, 71, 72, 75, 76, 77, 80, 82, 83, 84, 85, 86, 88, 89, 92, 93, 94, 96, 97),
    *(98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 121, 126, 127, 128, 129),
    *(130, 131, 132, 133, 134, 135, 137, 139, 141, 152, 153, 154, 157, 160, 161, 162),
    *(163, 164, 165),
)
HEALTH_CHECK_ENV = {
    "name": "DP_DISABLE_HEALTHCHECKS",
    "value": ",".join(str(xid) for xid in IN_SERVICE_XIDS),
}


def config_text(mig_strategy: str, replicas: int) -> str:
    """The plugin's config file: MIG strategy, CDI, and above one replica time-slicing."""
    if mig_strategy not in MIG_STRATEGIES:
        raise ValueError(f"MIG strategy must be one of {', '.join(MIG_STRATEGIES)}")
    if replicas < 1:
        raise ValueError("time-slicing replicas must be at least 1")
    config: dict = {
        "version": "v1",
        "flags": {
            "migStrategy": mig_strategy,
            "failOnInitError": True,
            "nvidiaDriverRoot": HOST_DRIVER_ROOT,
            "plugin": {
                "deviceListStrategy": DEVICE_LIST_STRATEGY,
                "deviceIDStrategy": DEVICE_ID_STRATEGY,
                "containerDriverRoot": CONTAINER_DRIVER_ROOT,
                "nvidiaCTKPath": CDI_HOOK_PATH,
            },
        },
    }
    if replicas > 1:
        config["sharing"] = {
            "timeSlicing": {
                "failRequestsGreaterThanOne": FAIL_REQUESTS_GREATER_THAN_ONE,
                "resources": [{"name": "nvidia.com/gpu", "replicas": replicas}],
            }
        }
    return yaml.safe_dump(config, sort_keys=False)


def runtime_class() -> dict:
    """The cluster-wide RuntimeClass that selects containerd's `nvidia` handler.

    Worker charms register that handler on GPU nodes only. The device plugin runs
    through it (it needs the driver and every GPU to list them); pods that request GPUs
    get them through CDI and may, but need not, use it.
    """
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS, "labels": {MANAGED_BY_LABEL: FIELD_MANAGER}},
        "handler": RUNTIME_CLASS,
        "scheduling": {"nodeSelector": {GPU_NODE_LABEL: "true"}},
    }


def _container(mig_strategy: str, image_registry: str) -> dict:
    """The plugin container: upstream's security context and mounts for CDI and MIG."""
    container: dict = {
        "name": NAME,
        "image": images.mirrored(IMAGE, image_registry),
        "args": ["--config-file=/config/config.yaml"],
    }
    container["env"] = [HEALTH_CHECK_ENV]
    if mig_strategy != "none":
        container["env"].append(MIG_MONITOR_ENV)
        container["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN"]}}
    else:
        # The plugin finds the GPUs through NVIDIA_VISIBLE_DEVICES=all (set in its image)
        # and the nvidia runtime. GPU workers tell the toolkit to ignore that variable in
        # unprivileged containers, and the toolkit counts a container as privileged when
        # CAP_SYS_ADMIN is in its bounding set (nvidia-container-toolkit v1.20.0
        # internal/config/image/privileged.go, cuda_image.go VisibleDevices), so the
        # plugin keeps SYS_ADMIN and nothing else; without it NVML finds no device and
        # the plugin crash-loops (failOnInitError).
        container["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]},
        }
    container["volumeMounts"] = [
        {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"},
        {"name": "config", "mountPath": "/config", "readOnly": True},
        {"name": "cdi-root", "mountPath": CDI_ROOT},
        {"name": "driver-root", "mountPath": CONTAINER_DRIVER_ROOT, "readOnly": True},
    ]
    return container


def namespace() -> dict:
    """The namespace of the GPU components, labelled Pod Security `privileged`.

    Each of them needs what `baseline` refuses (kubernetes.io/docs/concepts/security/
    pod-security-standards/, "Baseline": HostPath Volumes, Host Namespaces, Privileged
    Containers, Capabilities beyond the default set): the plugin hostPath volumes and
    SYS_ADMIN, the exporter the host network, a hostPath and SYS_ADMIN, the MIG manager a
    privileged container with the host's PID and IPC namespaces. The labels pin the version
    as the other namespaces' do (literals.pod_security_labels).
    """
    labels = {MANAGED_BY_LABEL: FIELD_MANAGER, **PRIVILEGED_POD_SECURITY}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": labels},
    }


# A node where the worker has not paused its GPU clients (a GPU reset, DCGM's diagnostic:
# gpu_repair.gpu_clients_paused); `NotIn` matches a node without the label.
NOT_PAUSED = {
    "key": kube_objects.GPU_CLIENTS_LABEL,
    "operator": "NotIn",
    "values": [kube_objects.GPU_CLIENTS_PAUSED],
}


def stepping_aside(deploy_label: str) -> dict:
    """Node affinity: on GPU nodes unless paused (a MIG change, a GPU reset).

    Not where `deploy_label` says STEPPED_ASIDE (MIG changes) nor where the worker paused
    its GPU clients for a GPU reset: both expressions of one term must hold, and `NotIn`
    matches a node without the label.
    """
    expressions = [
        {"key": deploy_label, "operator": "NotIn", "values": list(STEPPED_ASIDE)},
        NOT_PAUSED,
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def daemon_set(name: str, pod_labels: dict, digest: str, pod_spec: dict) -> dict:
    """A DaemonSet of the charm's in NAMESPACE, its pods rolled when `digest` changes."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/name": name, MANAGED_BY_LABEL: FIELD_MANAGER},
        },
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {
                    "labels": {"app.kubernetes.io/name": name, **pod_labels},
                    "annotations": {"gpu-k8s.io/config-hash": digest},
                },
                "spec": pod_spec,
            },
        },
    }


def manifests(mig_strategy: str, replicas: int, image_registry: str = "") -> list[dict]:
    """The Namespace, RuntimeClass, ConfigMap and DaemonSet, in the order they are applied.

    `image_registry` (the charm's `image-registry`, validated) moves the image there.
    """
    text = config_text(mig_strategy, replicas)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    labels = {"app.kubernetes.io/name": NAME, MANAGED_BY_LABEL: FIELD_MANAGER}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{NAME}-config", "namespace": NAMESPACE, "labels": labels},
        "data": {"config.yaml": text},
    }
    pod_spec = {
        "runtimeClassName": RUNTIME_CLASS,
        "priorityClassName": "system-node-critical",
        # The plugin talks to kubelet over its socket, never to the API server (with one
        # config file and no config-manager sidecar, which alone needs the chart's
        # ServiceAccount): no token in the pod.
        "automountServiceAccountToken": False,
        "nodeSelector": {GPU_NODE_LABEL: "true"},
        "affinity": stepping_aside(DEPLOY_LABEL),
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
        ],
        "containers": [_container(mig_strategy, image_registry)],
        "volumes": [
            {"name": "device-plugins", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
            {"name": "config", "configMap": {"name": f"{NAME}-config"}},
            {"name": "cdi-root", "hostPath": {"path": CDI_ROOT, "type": "DirectoryOrCreate"}},
            {"name": "driver-root", "hostPath": {"path": HOST_DRIVER_ROOT, "type": "Directory"}},
        ],
    }
    ds = daemon_set(NAME, {**MIG_CLIENT_POD_LABEL, **GPU_CLIENT}, digest, pod_spec)
    return [namespace(), runtime_class(), config_map, ds]


def retire_legacy(kube: Kube, objects: list[dict]) -> list[str]:
    """Delete the LEGACY_NAMESPACE copies of `objects`; the names of their pods still there.

    The new DaemonSet must not start on a node while the old one's pod runs there, so the
    old goes first and the caller applies `objects` once this returns nothing:
    - two device plugins of one resource share one socket, `nvidia-gpu.sock` in
      /var/lib/kubelet/device-plugins (k8s-device-plugin internal/plugin/server.go), and
      kubelet keys a plugin by resource name and socket path: when the old one stops after
      the new one registered, kubelet disconnects both (pkg/kubelet/cm/devicemanager/plugin/
      v1beta1/handler.go runClient, deregisterClient) and marks the resource's devices
      unhealthy on the one endpoint it keeps, the new one's (manager.go PluginDisconnected,
      markResourceUnhealthy, setStopTime), and drops the resource from the node 5 minutes
      later (endpoint.go endpointStopGracePeriod) while the new plugin, which registers
      again only when kubelet.sock is created anew (cmd/nvidia-device-plugin/main.go),
      still runs: the node would be left without GPUs;
    - a plugin that stops and another that registers within those 5 minutes keep the
      node's capacity, and running pods keep their devices (the checkpoint): what a
      DaemonSet rolling update of the plugin does anyway (maxUnavailable 1, no surge);
    - two DCGM exporters cannot both listen on the host's port 9400, and two MIG managers
      would both act on one `nvidia.com/mig.config` change.
    Only objects this charm made (its managed-by label on the DaemonSet) are deleted; the
    DaemonSet's pods go with it (garbage collection, background), so the names returned are
    pods still terminating, for the caller to wait on (its next hook).
    """
    daemon_sets = [o for o in objects if o["kind"] == "DaemonSet"]
    left: list[str] = []
    for ds in daemon_sets:
        name = ds["metadata"]["name"]
        old = kube.get("apps/v1", "DaemonSet", name, LEGACY_NAMESPACE)
        labels = ((old or {}).get("metadata") or {}).get("labels") or {}
        if old is not None and labels.get(MANAGED_BY_LABEL) == FIELD_MANAGER:
            for obj in objects:
                if obj["metadata"].get("namespace") == NAMESPACE:
                    kind, obj_name = obj["kind"], obj["metadata"]["name"]
                    kube.delete(obj["apiVersion"], kind, obj_name, LEGACY_NAMESPACE)
        pods = kube.list(
            "v1", "Pod", LEGACY_NAMESPACE, label_selector=f"app.kubernetes.io/name={name}"
        )
        left += [f"{LEGACY_NAMESPACE}/{p['metadata']['name']}" for p in pods]
    return left
