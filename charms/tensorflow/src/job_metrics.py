# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""How the COS agent reaches each training pod's progress metrics (no ops).

Every training pod's launcher serves its task's progress on METRICS_PORT
(actions/tf_launcher.py, "Metrics"). Pods are not on the host network, so the agent on
this charm's machine (a cluster node: the bundle places the charm on the control plane's
machine) scrapes them at their pod IPs, which every node routes to (the CNI's overlay).

Which pods there are changes while no hook runs, and the scrape jobs of the `cos_agent`
interface are Prometheus `scrape_configs` the agent runs as given, but for their
interval and timeout (canonical/opentelemetry-collector-operator 9f17dec on track/2,
which `2/stable` is released from: src/charm.py puts the cos_agent jobs into the
receiver `prometheus/cos-agent/<unit>`, and src/config_builder.py sets every job's
`scrape_interval` and `scrape_timeout` to the charm's global_scrape_interval and
global_scrape_timeout, 1m and 10s by default, and escapes `$`; the receiver embeds
Prometheus' service discovery, so `kubernetes_sd_configs` would be accepted). Kubernetes
discovery needs a credential for the API server in the job, though, and the databag is
plain relation data where nothing secret may go (lib cos_agent.py). So the leader lists
the application's training pods (one request, by label selector) at every reconcile
(update-status included) and publishes one static target per running pod: a new pod is
scraped from the next hook on, a gone pod's target is dropped then. Its labels name the
pod (`namespace`, `pod`, `node`, `training_job`, `role`): `job` is Prometheus' own (the
scrape job's name). Each target's `up` carries those labels too, so the training dashboard
lists jobs that print no progress: the receiver's embedded scrape loop sets every target
label on its report samples (prometheus/prometheus scrape/scrape.go
mutateReportSampleLabels) and the receiver keeps them as the sample's attributes
(opentelemetry-collector-contrib v0.130.0, the snap's build:
receiver/prometheusreceiver/internal/transaction.go Append, metricfamily.go
populateAttributes).

The pods accept METRICS_PORT only from this node's addresses (network_policies.metrics).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import manifests
import network_policies
from literals import COMPONENT_TRAINING, LABEL_JOB, LABEL_ROLE, METRICS_PORT

JOB_NAME = "training"


def sync(
    kube: Any, ctx: manifests.Context, own: Iterable[str], applied: str
) -> tuple[dict[str, Any] | None, str]:
    """Open METRICS_PORT to this unit's node; return the running pods' scrape job.

    `own`: the unit's addresses; `applied`: the fingerprint of the policy last applied
    (returned with the job: pass it next time). Nothing is written while no training pod
    runs, nor when the policy is unchanged. When the unit is on no node of the cluster,
    the pods' IPs are out of its reach: the policy opens nothing and no job is returned.
    """
    training = manifests.selector(ctx.app, component=COMPONENT_TRAINING)
    job = scrape_job(kube.list("v1", "Pod", ctx.namespace, label_selector=training))
    if job is None:
        return None, applied
    scrapers = network_policies.own_node_addresses(kube.list("v1", "Node"), own)
    policy = network_policies.metrics(ctx.app, ctx.namespace, COMPONENT_TRAINING, scrapers)
    digest = hashlib.sha256(json.dumps(policy, sort_keys=True).encode()).hexdigest()[:16]
    if digest != applied:
        kube.apply(policy, field_manager=ctx.app)
    return (job if scrapers else None), digest


def scrape_job(pods: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """One scrape config with a static target per running pod that has an IP; None if none."""
    configs = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        meta, status = pod["metadata"], pod.get("status") or {}
        ip = status.get("podIP")
        if status.get("phase") != "Running" or not ip:
            continue
        labels = meta.get("labels") or {}
        configs.append(
            {
                "targets": [f"{ip}:{METRICS_PORT}"],
                "labels": {
                    "instance": meta["name"],
                    "namespace": meta.get("namespace", ""),
                    "pod": meta["name"],
                    "node": (pod.get("spec") or {}).get("nodeName", ""),
                    "training_job": labels.get(LABEL_JOB, ""),
                    "role": labels.get(LABEL_ROLE, ""),
                },
            }
        )
    if not configs:
        return None
    return {"job_name": JOB_NAME, "metrics_path": "/metrics", "static_configs": configs}
