# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Kueue made this cluster's: its manager configuration and the cluster-wide objects (no ops).

Sources, kubernetes-sigs/kueue at tag v0.19.2:
- `config/components/manager/controller_manager_config.yaml`: the shipped Configuration
  (`config.kueue.x-k8s.io/v1beta2`), `waitForPodsReady` commented out, and
  `integrations.frameworks` listing `jobset.x-k8s.io/jobset`;
- `apis/config/v1beta2/configuration_types.go` `WaitForPodsReady`: `timeout` (required),
  `blockAdmission`, `requeuingStrategy` {`timestamp`, `backoffLimitCount` (null: requeue
  forever), `backoffBaseSeconds`, `backoffMaxSeconds`}, `recoveryTimeout` (defaults to
  `timeout`); v1beta2 has no `enable`, and since v0.19 an absent block means enabled
  with a 30m timeout (`apis/config/v1beta2/defaults.go`, kueue#11855; only the alpha gate
  DisableWaitForPodsReady turns it off): the charm always writes it, with
  pods-ready-timeout;
- `apis/kueue/v1beta2/*_types.go` and `config/components/crd/bases/*.yaml`: the storage
  version v1beta2 of ResourceFlavor {nodeLabels, nodeTaints, tolerations}, Cohort,
  WorkloadPriorityClass {value, description}, ClusterQueue {cohortName, ...} and
  LocalQueue; Cohort, ResourceFlavor, WorkloadPriorityClass and ClusterQueue are
  cluster-scoped.

The cluster-wide objects: one ResourceFlavor per GPU model the workers report, selecting
the nodes by the label the worker writes as NVIDIA's GPU Feature Discovery does
(`nvidia.com/gpu.product`, `-SHARED` appended under time-slicing) and naming the GPU taint
(a workload must tolerate it to be admitted there); one `cpu` flavor for every node; the
cohort `gpu-k8s` whose members (each team's ClusterQueue, made by the tensorflow charm)
lend unused quota to each other; and the priorities `low`, `normal` and `high` that
`train priority=...` names.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import batch_engines
import yaml
from literals import KUEUE_NAMESPACE_LABEL, KUEUE_NAMESPACE_VALUE

API = "kueue.x-k8s.io/v1beta2"
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
COHORT = "gpu-k8s"
CPU_FLAVOR = "cpu"
LABEL_PRODUCT = "nvidia.com/gpu.product"
SHARED_SUFFIX = "-SHARED"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PRIORITIES = {"low": 100, "normal": 1000, "high": 10000}
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "kubernetes-control-plane"


def configure(text: str, settings: batch_engines.Settings) -> str:
    """Kueue's manager configuration with waitForPodsReady and the JobSet integration on."""
    try:
        config = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise batch_engines.AddonError(f"kueue manager configuration is not YAML: {e}") from None
    if not isinstance(config, dict) or config.get("kind") != "Configuration":
        raise batch_engines.AddonError("kueue manager configuration is not a Configuration")
    config["waitForPodsReady"] = {
        "timeout": f"{settings.pods_ready_timeout_minutes}m",
        "blockAdmission": False,
        "requeuingStrategy": {
            "timestamp": "Eviction",
            "backoffBaseSeconds": 60,
            "backoffMaxSeconds": 3600,
        },
    }
    config["managedJobsNamespaceSelector"] = {
        "matchLabels": {KUEUE_NAMESPACE_LABEL: KUEUE_NAMESPACE_VALUE}
    }
    integrations = config.setdefault("integrations", {})
    frameworks = integrations.setdefault("frameworks", [])
    if JOBSET_FRAMEWORK not in frameworks:
        frameworks.append(JOBSET_FRAMEWORK)
    return yaml.safe_dump(config, sort_keys=False)


def _upstream_scope(selector: Any) -> bool:
    """Whether a webhook's namespaceSelector is upstream's "all but kube-system, kueue-system"."""
    for expression in (selector or {}).get("matchExpressions") or []:
        if expression.get("key") == "kubernetes.io/metadata.name" and (
            expression.get("operator") == "NotIn"
        ):
            return True
    return False


def narrow_webhooks(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scope Kueue's job and pod webhooks to the namespaces it manages (see literals.py).

    Only webhooks upstream scopes to "every namespace but kube-system and kueue-system"
    change; those of Kueue's own objects are left as they are.
    """
    for obj in objects:
        if obj["kind"] not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        for hook in obj.get("webhooks") or []:
            if _upstream_scope(hook.get("namespaceSelector")):
                hook["namespaceSelector"] = {
                    "matchLabels": {KUEUE_NAMESPACE_LABEL: KUEUE_NAMESPACE_VALUE}
                }
    return objects


def product_label(model: str, shared: bool) -> str:
    """The `nvidia.com/gpu.product` value GFD (and the worker charm) write for `model`."""
    joined = "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", model).split())
    value = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", joined[:63])
    if shared:
        value = f"{value[: 63 - len(SHARED_SUFFIX)]}{SHARED_SUFFIX}"
    return value


def flavor_name(model: str) -> str:
    """The ResourceFlavor of a GPU model: `gpu-nvidia-a10g` for `NVIDIA A10G`."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") or "unknown"
    name = f"gpu-{slug}"
    if len(name) > 63:
        digest = hashlib.sha256(model.encode()).hexdigest()[:8]
        name = f"{name[:54].rstrip('-')}-{digest}"
    return name


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}}


def cluster_objects(models: list[str], *, shared: bool = False) -> list[dict[str, Any]]:
    """The cohort, the priorities, the CPU flavor and one flavor per GPU model."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": API, "kind": "Cohort", "metadata": _meta(COHORT), "spec": {}},
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": _meta(CPU_FLAVOR), "spec": {}},
    ]
    for name, value in PRIORITIES.items():
        objects.append(
            {
                "apiVersion": API,
                "kind": "WorkloadPriorityClass",
                "metadata": _meta(name),
                "value": value,
                "description": f"train priority={name}",
            }
        )
    for model in sorted(set(models)):
        objects.append(
            {
                "apiVersion": API,
                "kind": "ResourceFlavor",
                "metadata": {
                    **_meta(flavor_name(model)),
                    "annotations": {"gpu-k8s.io/gpu-model": model},
                },
                "spec": {
                    "nodeLabels": {LABEL_PRODUCT: product_label(model, shared)},
                    "nodeTaints": [dict(GPU_TAINT)],
                },
            }
        )
    return objects
