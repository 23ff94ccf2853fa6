# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The NVIDIA device plugin: a pinned DaemonSet on GPU nodes only (no ops imports).

It advertises `nvidia.com/gpu` on nodes the worker charm labelled
`nvidia.com/gpu.present=true`, tolerates the `nvidia.com/gpu` taint, runs through the
`nvidia` RuntimeClass, and reads its MIG strategy and time-slicing replicas from a
ConfigMap. A hash of that config on the pod template rolls the pods when it changes.
"""

from __future__ import annotations

import hashlib

import yaml
from literals import FIELD_MANAGER, MANAGED_BY_LABEL

VERSION = "v0.18.2"
IMAGE = f"nvcr.io/nvidia/k8s-device-plugin:{VERSION}"
NAMESPACE = "kube-system"
NAME = "nvidia-device-plugin"
GPU_NODE_LABEL = "nvidia.com/gpu.present"
RUNTIME_CLASS = "nvidia"
MIG_STRATEGIES = ("none", "single", "mixed")


def config_text(mig_strategy: str, replicas: int) -> str:
    """The plugin's config file: MIG strategy and, above one replica, time-slicing."""
    if mig_strategy not in MIG_STRATEGIES:
        raise ValueError(f"MIG strategy must be one of {', '.join(MIG_STRATEGIES)}")
    if replicas < 1:
        raise ValueError("time-slicing replicas must be at least 1")
    config: dict = {
        "version": "v1",
        "flags": {"migStrategy": mig_strategy, "failOnInitError": True},
    }
    if replicas > 1:
        config["sharing"] = {
            "timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}
        }
    return yaml.safe_dump(config, sort_keys=False)


def runtime_class() -> dict:
    """The cluster-wide RuntimeClass that selects containerd's `nvidia` handler.

    Worker charms register that handler on GPU nodes only; the device plugin and every
    GPU pod (validation pods, training jobs) run through it.
    """
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS, "labels": {MANAGED_BY_LABEL: FIELD_MANAGER}},
        "handler": RUNTIME_CLASS,
        "scheduling": {"nodeSelector": {GPU_NODE_LABEL: "true"}},
    }


def manifests(mig_strategy: str, replicas: int) -> list[dict]:
    """The RuntimeClass, ConfigMap and DaemonSet, in the order they are applied."""
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
        "nodeSelector": {GPU_NODE_LABEL: "true"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
        ],
        "containers": [
            {
                "name": NAME,
                "image": IMAGE,
                "args": ["--config-file=/config/config.yaml"],
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [
                    {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"},
                    {"name": "config", "mountPath": "/config", "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {"name": "device-plugins", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
            {"name": "config", "configMap": {"name": f"{NAME}-config"}},
        ],
    }
    daemon_set = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {
                    "labels": {"app.kubernetes.io/name": NAME},
                    "annotations": {"gpu-k8s.io/config-hash": digest},
                },
                "spec": pod_spec,
            },
        },
    }
    return [runtime_class(), config_map, daemon_set]
