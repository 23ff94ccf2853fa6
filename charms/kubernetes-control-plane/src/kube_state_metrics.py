# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""kube-state-metrics: the cluster's state as metrics, for COS's alerts (no ops imports).

The alerts a GPU cluster needs beyond the GPUs' own (a GPU node NotReady, a job that
keeps restarting its gang, a job waiting long for admission) are about objects in the
API: Nodes, JobSets, Kueue Workloads. kube-apiserver, Kueue and JobSet serve metrics
only to a bearer token, which the `cos_agent` databag cannot carry (plain relation
data), so the leader runs kube-state-metrics, which reads those objects with its own
ServiceAccount and serves plain HTTP: one replica, with the host's network, on the
leader's node, listening on 127.0.0.1 only, where the leader's COS agent scrapes it as
localhost. Nothing outside the machine reaches it. When leadership moves, the new
leader moves it to its own node.

It serves node metrics (kube_node_status_condition, kube_node_status_capacity), and
the workload metrics the standard Kubernetes alerts read (`--resources=nodes,pods,jobs,
daemonsets`: a crash-looping container, a failed Job, a DaemonSet such as the DCGM
exporter or the device plugin with pods missing; the kubernetes-apps rules of
kube-prometheus v0.16.0 that Canonical's k8s charm ships, canonical/k8s-operator
charms/worker/k8s/src/prometheus_alert_rules/kubernetesControlPlane-prometheusRule.yaml
at 0fd507e; the metric names are kube-state-metrics v2.20.0's docs/metrics/workload/
{pod,job,daemonset}-metrics.md) and, through its Custom Resource State configuration
(`kube-state-metrics-resources.yaml` next to this module), JobSet restarts and Kueue
Workloads' creation times, conditions (with when each last changed) and whether they are
active. It finds those kinds through their CRDs, so it starts before JobSet and Kueue
are installed (or without them) and picks them up when they come. Of all that it serves
only the families a rule or a dashboard reads (METRICS).

Upstream sources (kubernetes/kube-state-metrics v2.20.0, checked 2026-11-24):
pkg/options/options.go (flags: --host and --telemetry-host default to "::", ports 8080
and 8081), pkg/app/server.go (/livez on the metrics port asks the API server, /readyz
on the telemetry port; CRS resources are added to --resources, while
--custom-resource-state-only would drop the node metrics), internal/discovery (CRS
watches customresourcedefinitions: list/watch on them is needed), Dockerfile (distroless,
user nobody), examples/standard (probes, security context). A probe goes to the pod IP
unless it names a host, and with the host's network that is the node's address, where
nothing listens: the probes name 127.0.0.1.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from batch_engines import CONTROL_PLANE_TOLERATION
from literals import FIELD_MANAGER, MANAGED_BY_LABEL

from charms.gpu_k8s.v0 import images

# The newest release on 2026-11-24 (tagged 2026-08-17), the one whose compatibility
# matrix names Kubernetes 1.36 (README.md at v2.20.0; built with client-go v0.36.3).
VERSION = "v2.20.0"
IMAGE = f"registry.k8s.io/kube-state-metrics/kube-state-metrics:{VERSION}"
# kube-system, where upstream's examples/standard manifests put it: it runs as nobody with
# no capability and no host path, but on the host's network (its COS agent scrapes it at
# 127.0.0.1), which Pod Security `baseline` refuses; kube-system enforces no level (no
# label: the admission plugin's default, privileged) and holds kubeadm's own components.
# Not in literals.GPU_NAMESPACE: that one holds the privileged GPU components and nothing
# else (issue 29 item 3).
NAMESPACE = "kube-system"
NAME = "kube-state-metrics"
PORT = 8080  # /metrics, /livez
TELEMETRY_PORT = 8081  # its own metrics, /readyz
LISTEN_HOST = "127.0.0.1"
RESOURCES_FILE = Path(__file__).with_name("kube-state-metrics-resources.yaml")
CONFIG_DIR = "/etc/kube-state-metrics"
HOSTNAME_LABEL = "kubernetes.io/hostname"  # kubelet's, the node name on kubeadm nodes

# The built-in resources it serves (pkg/options/resource.go DefaultResources names them so).
RESOURCES = ("nodes", "pods", "jobs", "daemonsets")
# The only metrics it serves: those the alert rules and dashboards read (tests/unit/telemetry
# checks both ways). Pods alone have some 40 families, several with a series per container
# and condition, all stored in COS's one Prometheus; the rest would be read by nobody.
# `--metric-allowlist` (pkg/options/options.go) takes a comma-separated list of ECMAScript
# regexes; an allowlist keeps a family whose name any of them matches anywhere
# (pkg/allowdenylist/allowdenylist.go IsIncluded: regexp2 MatchString, unanchored), so each
# name is anchored; it filters the Custom Resource State families too, by their full
# `<metricNamePrefix>_<name>` (internal/store/builder.go buildCustomResourceStores,
# pkg/customresourcestate/registry_factory.go fullName).
METRICS = (
    "kube_node_status_condition",
    "kube_node_status_capacity",
    "kube_node_status_allocatable",
    "kube_pod_container_status_waiting_reason",
    "kube_job_failed",
    "kube_job_owner",
    "kube_daemonset_status_current_number_scheduled",
    "kube_daemonset_status_desired_number_scheduled",
    "kube_daemonset_status_number_available",
    "kube_daemonset_status_number_misscheduled",
    "kube_daemonset_status_updated_number_scheduled",
    "jobset_status_restarts",
    "kueue_workload_created_timestamp_seconds",
    "kueue_workload_condition",
    "kueue_workload_condition_last_transition_timestamp_seconds",
    "kueue_workload_spec_active",
)
# Read-only, and only what it reads: those resources, the two kinds, and the CRDs it finds
# them by (kube-state-metrics v2.20.0 examples/standard/cluster-role.yaml grants list and
# watch on each resource it serves).
RULES = [
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["list", "watch"]},
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list", "watch"]},
]


def _meta(name: str, namespaced: bool = True) -> dict:
    meta = {
        "name": name,
        "labels": {"app.kubernetes.io/name": NAME, MANAGED_BY_LABEL: FIELD_MANAGER},
    }
    if namespaced:
        meta["namespace"] = NAMESPACE
    return meta


def _container(image_registry: str) -> dict:
    def probe(path: str, port: int) -> dict:
        return {
            "httpGet": {"host": LISTEN_HOST, "path": path, "port": port},
            "initialDelaySeconds": 5,
            "timeoutSeconds": 5,
        }

    return {
        "name": NAME,
        "image": images.mirrored(IMAGE, image_registry),
        "args": [
            f"--host={LISTEN_HOST}",
            f"--port={PORT}",
            f"--telemetry-host={LISTEN_HOST}",
            f"--telemetry-port={TELEMETRY_PORT}",
            f"--resources={','.join(RESOURCES)}",
            "--metric-allowlist=" + ",".join(f"^{name}$" for name in METRICS),
            f"--custom-resource-state-config-file={CONFIG_DIR}/{RESOURCES_FILE.name}",
        ],
        "livenessProbe": probe("/livez", PORT),
        "readinessProbe": probe("/readyz", TELEMETRY_PORT),
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"memory": "256Mi"},
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }


def manifests(node: str, image_registry: str = "") -> list[dict]:
    """Everything it needs, in the order applied; it runs on `node` (the leader's).

    `image_registry` (the charm's `image-registry`, validated) moves the image there.
    """
    text = RESOURCES_FILE.read_text()
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    rbac = "rbac.authorization.k8s.io/v1"
    subject = {"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME}
    pod_spec = {
        "serviceAccountName": NAME,
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {HOSTNAME_LABEL: node},
        "tolerations": [CONTROL_PLANE_TOLERATION],
        "containers": [_container(image_registry)],
        "volumes": [{"name": "config", "configMap": {"name": f"{NAME}-resources"}}],
    }
    pod_labels = {"app.kubernetes.io/name": NAME}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(NAME),
        "spec": {
            "replicas": 1,
            # the old pod goes first (it holds 127.0.0.1:8080 on its node), but unlike
            # Recreate a rollout does not wait for a pod on a dead node (a new leader's
            # usual reason to move it) to be confirmed gone (deployment recreate.go)
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {"gpu-k8s.io/config-hash": digest},
                },
                "spec": pod_spec,
            },
        },
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME)},
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": _meta(NAME, namespaced=False),
            "rules": RULES,
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": _meta(NAME, namespaced=False),
            "roleRef": role_ref,
            "subjects": [subject],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(f"{NAME}-resources"),
            "data": {RESOURCES_FILE.name: text},
        },
        deployment,
    ]
