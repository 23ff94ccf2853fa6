# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""NVIDIA's DCGM exporter: GPU metrics from every GPU node, for COS (no ops imports).

A DaemonSet on the nodes the worker charm labelled `nvidia.com/gpu.present=true`,
tolerating the GPU taint, runs the exporter with the host's network on port 9400, where
the COS agent of that machine (related to the worker's `cos-agent` endpoint) scrapes it
as localhost and the tensorflow charm reads the GPU use of its pods (`job-status`) at
the node's address: GPU metrics and pod names, nothing secret, readable by the
machines of the model (Juju's model security group), not from outside. It gets the GPUs
and the driver's libraries through the `nvidia` RuntimeClass (the image sets
NVIDIA_VISIBLE_DEVICES=all), as NVIDIA's GPU Operator runs it, and maps each GPU to the
pod it is allocated to through kubelet's pod-resources socket, which adds `pod`,
`namespace` and `container` labels to that GPU's metrics. It steps aside while NVIDIA's
MIG manager repartitions the node: that manager sets `nvidia.com/gpu.deploy.dcgm-exporter`
to `paused-for-mig-change` and waits until no pod labelled `app=nvidia-dcgm-exporter` is
left in its DEFAULT_GPU_CLIENTS_NAMESPACE, device_plugin.NAMESPACE (NVIDIA/mig-parted
v0.15.0 pkg/mig/reconfigure/reconfigure.go dcgmExporterDeployLabel, waitForPodDeletion),
as for the device plugin.

The metrics are ours to choose (COUNTERS, mounted over the image's own list): the
exporter's defaults that the dashboards and alert rules use, plus the ECC and
throttling counters its default list leaves commented out.

Upstream sources (NVIDIA/dcgm-exporter, checked 2026-11-24): the Helm chart
`deployment/templates/daemonset.yaml` and `values.yaml` at 4.5.3-4.8.2 and release
commit 7ad58324 (4.6.0-4.8.3): environment DCGM_EXPORTER_KUBERNETES, DCGM_EXPORTER_LISTEN,
NODE_NAME (the `hostname` label); root with the SYS_ADMIN capability (profiling
metrics), all others dropped, no privilege escalation; kubelet's pod-resources
directory read-only; `/health` probes after 45 s; requests 100m / 128Mi, limit 512Mi.
`pkg/cmd/app.go` for DCGM_EXPORTER_COLLECTORS (`-f`). Issue #612: without the NVIDIA
runtime the exporter cannot load NVML. Issue #703: `-distroless` is the only image
published from 4.5.3 on.
"""

from __future__ import annotations

import hashlib

import device_plugin
from literals import FIELD_MANAGER, MANAGED_BY_LABEL

from charms.gpu_k8s.v0 import images
from charms.gpu_k8s.v0.cos_agent import DCGM_EXPORTER_PORT
from charms.gpu_k8s.v0.kubernetes_cluster import QUARANTINE_TAINT

# The newest release of NVIDIA/dcgm-exporter confirmed in its repository on 2026-11-24:
# DCGM 4.6.1, exporter 4.8.4 (hack/versions.env; deployment/examples/dcgm-exporter.yaml
# names this image). 4.9.0 renames metrics and labels and changes units: moving to it
# means changing COUNTERS, the alert rules and the dashboards with it.
VERSION = "4.6.1-4.8.4"
IMAGE = f"nvcr.io/nvidia/k8s/dcgm-exporter:{VERSION}-distroless"
NAMESPACE = device_plugin.NAMESPACE
NAME = "dcgm-exporter"
DEPLOY_LABEL = "nvidia.com/gpu.deploy.dcgm-exporter"
MIG_CLIENT_POD_LABEL = {"app": "nvidia-dcgm-exporter"}
POD_RESOURCES = "/var/lib/kubelet/pod-resources"
COUNTERS_DIR = "/etc/gpu-k8s"
COUNTERS_FILE = "counters.csv"

# DCGM field, Prometheus type, help: the exporter's collectors file format
# (etc/default-counters.csv). Names and units: DCGM's dcgmlib/dcgm_fields.h. Each type is
# the one upstream's default-counters.csv gives the field (NVIDIA/dcgm-exporter 7ad5832,
# which pins 4.6.0-4.8.3, the release before ours; the tag is not stored:
# tests/fixtures/dcgm/default-counters-types.txt), which the exporter copies into
# `# TYPE` (rendermetrics/render_metrics.go): a `counter` is read with rate() or
# increase(), and the collector's prometheus receiver turns it into a monotonic sum.
COUNTERS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    # energy per job or team: increase() over the job's pods' GPUs
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Energy used since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    # the exporter's own: each XID, and each clock event reason, in its last window (5
    # minutes). A count that falls as events age out (expcollector.go: GetValuesSince(now
    # - window)) is a gauge, as upstream's CSV declares both since 4.6.0-4.8.3.
    ("DCGM_EXP_XID_ERRORS_COUNT", "gauge", "XIDs reported during the last window."),
    ("DCGM_EXP_CLOCK_EVENTS_COUNT", "gauge", "Clock events reported during the last window."),
    # per MIG instance, where DCGM has no GPU_UTIL (needs the SYS_ADMIN the pod has)
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    # what training uses of a GPU, beyond "a kernel runs" (GPU_UTIL): its tensor cores and
    # its memory bandwidth (profiling fields, like GR_ENGINE_ACTIVE)
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles device memory is active."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped (uncorrectable)."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed."),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power limits."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to heat."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    # all lanes of all links: 0 on GPUs without NVLink (the A10G), the fabric's traffic on
    # the p4d/p5 machines bigger-gpu-nodes.yaml names. A gauge: DCGM turns NVML's
    # cumulative KiB counters into a throughput (DcgmCacheManager.cpp
    # ReadAndCacheNvLinkBandwidth), so rate() of it means nothing (NVIDIA/dcgm-exporter
    # pull 658, in 4.6.0-4.8.3's CSV)
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "gauge", "NVLink throughput of all lanes (in MiB/s)."),
    # a label on every other series (upstream's default too), as the recorded page has it
    ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
)
# Time-slicing (the device plugin's `gpu-time-slicing-replicas` > 1) hands one GPU to
# several pods; without this the exporter labels each GPU with one of them, arbitrarily
# (transformation/kubernetes.go toDeviceToPod keeps the last). With it, each metric of a
# shared GPU is given once per pod sharing it (toDeviceToSharingPods; pkg/cmd/app.go
# --kubernetes-virtual-gpus, env KUBERNETES_VIRTUAL_GPUS, d5e5f51), and GPU_UTIL and
# FB_USED are each pod's own: NVML's per-process figures summed over the pod's processes
# (process_metrics.go isPerProcessMetric, kubernetes.go createPerProcessMetrics; fb5e3dc,
# PR #594, in every release from 4.5.3-4.8.2 on, unchanged at 4.6.0-4.8.3's 7ad58324).
VIRTUAL_GPUS_ENV = "KUBERNETES_VIRTUAL_GPUS"
# The exporter stays on a quarantined node (the GPU quarantine's NoExecute taint, lib
# kubernetes_cluster.QUARANTINE_TAINT): its GPUs' metrics (the XID, ECC and remap counters)
# are what the operator most wants to see there. An untolerated NoExecute taint evicts a
# DaemonSet's pod too: the DaemonSet controller adds tolerations only for the node
# condition taints (not-ready, unreachable, pressure, unschedulable; kubernetes
# pkg/controller/daemon/util AddOrUpdateDaemonPodTolerations), never for ours. Off the GPUs
# only while the worker resets one or runs DCGM's diagnostic (gpu_repair.
# gpu_clients_paused, by node affinity: device_plugin.stepping_aside): one DCGM host engine
# per node (this exporter embeds one; NVIDIA/DCGM#108: several on one node are "not an
# officially supported configuration ... may lead to deadlocks in the driver").
QUARANTINE_TOLERATION = {**QUARANTINE_TAINT, "operator": "Exists"}


def counters_text() -> str:
    """The collectors file (COUNTERS), as the exporter reads it."""
    lines = ["# DCGM field, Prometheus type, help (written by gpu-k8s)"]
    lines += [f"{field}, {kind}, {text}" for field, kind, text in COUNTERS]
    return "\n".join(lines) + "\n"


def manifests(image_registry: str = "", *, shared_gpus: bool = False) -> list[dict]:
    """The Namespace, the ConfigMap and the DaemonSet, in the order they are applied.

    `image_registry` (the charm's `image-registry`, validated) moves the image there;
    `shared_gpus`: pods share GPUs by time-slicing (VIRTUAL_GPUS_ENV, with the host's PIDs).
    """
    text = counters_text()
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    labels = {"app.kubernetes.io/name": NAME, MANAGED_BY_LABEL: FIELD_MANAGER}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{NAME}-counters", "namespace": NAMESPACE, "labels": labels},
        "data": {COUNTERS_FILE: text},
    }
    listen = f":{DCGM_EXPORTER_PORT}"
    probe = {
        "httpGet": {"path": "/health", "port": DCGM_EXPORTER_PORT},
        "initialDelaySeconds": 45,
        "periodSeconds": 10,
    }
    container = {
        "name": NAME,
        "image": images.mirrored(IMAGE, image_registry),
        "env": [
            {"name": "DCGM_EXPORTER_LISTEN", "value": listen},
            {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
            {"name": "DCGM_EXPORTER_COLLECTORS", "value": f"{COUNTERS_DIR}/{COUNTERS_FILE}"},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            *([{"name": VIRTUAL_GPUS_ENV, "value": "true"}] if shared_gpus else []),
        ],
        # SYS_ADMIN: for the profiling fields upstream, and here also what makes the
        # toolkit count the container privileged and honour the image's
        # NVIDIA_VISIBLE_DEVICES=all, which GPU workers ignore in unprivileged containers
        # (see device_plugin._container): without it the exporter sees no GPU.
        "securityContext": {
            "runAsNonRoot": False,
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]},
        },
        "livenessProbe": probe,
        "readinessProbe": probe,
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
        "volumeMounts": [
            {"name": "pod-resources", "mountPath": POD_RESOURCES, "readOnly": True},
            {"name": "counters", "mountPath": COUNTERS_DIR, "readOnly": True},
        ],
    }
    pod_spec = {
        "runtimeClassName": device_plugin.RUNTIME_CLASS,
        "priorityClassName": "system-node-critical",
        "hostNetwork": True,
        # Per-process attribution (VIRTUAL_GPUS_ENV) needs the host's PID namespace: the
        # exporter finds a process's pod by the pod UID in /proc/<pid>/cgroup for NVML's
        # host PIDs (pidmapper.go getPodUIDForPID). In its own namespace no other pod's
        # process is there, the PID is skipped and every sharing pod is given "0"
        # (kubernetes.go buildIdlePodValues), the GPU's figure left on the series without
        # pod labels: job-status said 0% busy and GpuAllocatedButIdle fired for pods that
        # train. Only when shared, the one path that reads /proc (PodMapper.Process): a
        # whole GPU per pod needs no PID. Upstream's chart has the same switch for this
        # mapping (deployment/values.yaml `hostPID`, PR #503). What it opens: the exporter
        # sees the node's processes and what /proc shows anyone (cgroup, command line);
        # another user's or a more capable process's memory, environment and namespaces
        # need ptrace access, which SYS_ADMIN alone (CAP_SYS_PTRACE dropped) does not give.
        # The pod runs in device_plugin.NAMESPACE, Pod Security `privileged`, which holds
        # only our GPU components (the MIG manager there has hostPID already): whoever may
        # create pods there could ask for hostPID anyway, so it widens nobody's rights but
        # the exporter's own process (NVIDIA's pinned image).
        **({"hostPID": True} if shared_gpus else {}),
        "dnsPolicy": "ClusterFirstWithHostNet",
        "automountServiceAccountToken": False,
        "nodeSelector": {device_plugin.GPU_NODE_LABEL: "true"},
        "affinity": device_plugin.stepping_aside(DEPLOY_LABEL),
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            QUARANTINE_TOLERATION,
        ],
        "containers": [container],
        "volumes": [
            {"name": "pod-resources", "hostPath": {"path": POD_RESOURCES, "type": "Directory"}},
            {"name": "counters", "configMap": {"name": f"{NAME}-counters"}},
        ],
    }
    ds = device_plugin.daemon_set(
        NAME, {**MIG_CLIENT_POD_LABEL, **device_plugin.GPU_CLIENT}, digest, pod_spec
    )
    return [device_plugin.namespace(), config_map, ds]
