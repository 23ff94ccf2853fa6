# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Short-lived Jobs the charm runs for an action: import a dataset, export a model (no ops).

Each is a NonIndexed batch Job of one pod whose program comes from a ConfigMap of the same
name that the Job owns (so the garbage collector deletes it with the Job, after
`ttlSecondsAfterFinished` or when the charm deletes the Job). The charm follows it through
the Job's conditions (`Complete` / `Failed`, kubernetes.io/docs/concepts/workloads/
controllers/job/#terminal-job-conditions) and reads what the program printed from the log
of its newest pod, found by the label the Job controller puts on its pods
(`batch.kubernetes.io/job-name`, kubernetes.io/docs/reference/labels-annotations-taints/).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from literals import CODE_MOUNT, LABEL_PRIORITY, LABEL_QUEUE

LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
LOG_LINES = 50
# The priority of the charm's own Jobs: that of a job trained with the default priority, so
# that an ordinary job never preempts an import, export or purge in the team's queue, nor
# one of them a job (withinClusterQueue: LowerPriority, the control plane's kueue.py).
PRIORITY = "normal"


def queued(labels: Mapping[str, str], queue: str, priority: str = PRIORITY) -> dict[str, str]:
    """A batch Job's labels with the team's LocalQueue and the charm's priority.

    The control plane runs Kueue with `manageJobsWithoutQueueName` (issue 29 leftover 3):
    a Job of the team's namespace without the queue label is suspended and never admitted,
    so every Job the charm writes names the team's LocalQueue. Kueue's batch/Job
    integration (kueue v0.19.2 pkg/controller/jobs/job) reads the label on the Job
    (jobframework QueueNameForObject, pkg/controller/constants QueueLabel and
    WorkloadPriorityClassLabel), suspends it on create (jobframework/defaults.go
    ApplyDefaultForSuspend), and unsuspends it once its Workload (one pod set `main` of
    min(parallelism, completions) pods, job_controller.go PodSets) fits the team's quota:
    the pod's cpu and memory requests count against it (the purge Job asks none).
    A Deployment's labels too (`priority` its own): every pod of the team's namespace is
    gated by Kueue's pod integration until admitted (the control plane's kueue.configure),
    and the deployment integration puts the Deployment's queue and priority labels on its
    pods (deployment_webhook.go Default), each pod one Workload of one pod.
    """
    return {**labels, LABEL_QUEUE: queue, LABEL_PRIORITY: priority}


def queue_labels_addable(stored: Mapping[str, Any]) -> bool:
    """Whether Kueue lets the queue and priority labels be added to this stored Deployment.

    Kueue v0.19.2's deployment webhook refuses either label added to a Deployment with a
    ready replica (deployment_webhook.go ValidateUpdate: `isSuspended :=
    oldDeployment.Status.ReadyReplicas == 0`, the queue label immutable otherwise;
    jobframework ValidateUpdateForWorkloadPriorityClassName). Its pod template may take
    them (what Kueue admits its pods by: training.queue_older_deployments).
    """
    return not (stored.get("status") or {}).get("readyReplicas")


def finished(job: Mapping[str, Any]) -> str | None:
    """`Succeeded` or `Failed` once a Job has finished, else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return "Succeeded" if cond["type"] == "Complete" else "Failed"
    return None


def log(kube: Any, namespace: str, job: str, lines: int = LOG_LINES) -> str:
    """The end of the Job's newest pod's log ("" before a pod started)."""
    from charms.gpu_k8s.v0.kubeclient import KubeError

    pods = kube.list("v1", "Pod", namespace, label_selector=f"{LABEL_JOB_NAME}={job}")
    pods.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
    for pod in reversed(pods):  # the last attempt's pod says the most
        try:
            return kube.pod_logs(pod["metadata"]["name"], namespace, tail_lines=lines)
        except KubeError as e:
            if e.status not in (400, 404):
                raise
    return ""


# Waiting reasons that will not clear by waiting (kubelet's, as `kubectl describe` shows).
STUCK = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "RunContainerError",
)


def stuck_pod(pods: Iterable[dict]) -> tuple[str, str, str] | None:
    """(pod, reason, message) of the first container waiting for a STUCK reason, or None."""
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK:
                return pod["metadata"]["name"], waiting["reason"], waiting.get("message", "")
    return None


def stuck(kube: Any, namespace: str, job: str) -> str | None:
    """Why the Job's pod cannot start (bad image, missing Secret), or None."""
    pods = kube.list("v1", "Pod", namespace, label_selector=f"{LABEL_JOB_NAME}={job}")
    found = stuck_pod(pods)
    return f"{found[1]}: {found[2]}".rstrip(": ") if found else None


def marked(text: str, marker: str) -> dict | None:
    """The JSON object of the last `<marker> {...}` line, or None."""
    for line in reversed(text.splitlines()):
        if line.startswith(marker + " "):
            try:
                value = json.loads(line[len(marker) + 1 :])
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def last_words(text: str, prefix: str) -> str:
    """Why a program failed: its `<prefix>...` line, else its last lines."""
    for line in reversed(text.splitlines()):
        if line.startswith(prefix):
            return line.removeprefix(prefix)
    tail = [line for line in text.splitlines() if line.strip()][-3:]
    return " / ".join(tail) or "no output (see kubectl describe job)"


def code_mount() -> dict[str, Any]:
    """The container's mount of the program ConfigMap."""
    return {"name": "code", "mountPath": CODE_MOUNT, "readOnly": True}


def code_volume(name: str) -> dict[str, Any]:
    """The pod's volume of the program ConfigMap `name` (executable files)."""
    return {"name": "code", "configMap": {"name": name, "defaultMode": 0o555}}


def manifest(
    name: str,
    ctx: Any,
    labels: Mapping[str, str],
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    *,
    backoff_limit: int,
    ttl_seconds: int,
    deadline_seconds: int | None = None,
    failure_policy: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A one-pod Job (`ctx`: manifests.Context, for the namespace and the pods' basics).

    The Job replaces a pod only once the old one is gone (podReplacementPolicy Failed,
    the only value allowed with `failure_policy`'s podFailurePolicy rules), so two
    attempts never overlap (kubernetes.io/docs/concepts/workloads/controllers/job/
    #pod-replacement-policy) nor hold the team's quota twice: the control plane refuses
    any other in a consumer's namespace (admission_policies CONSUMER_TERMINATING).
    """
    spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "podReplacementPolicy": "Failed",
        "ttlSecondsAfterFinished": ttl_seconds,
        "template": {
            "metadata": {"labels": dict(labels)},
            "spec": {
                "restartPolicy": "Never",
                **ctx.pod_basics(),
                "containers": [ctx.restricted(container)],
                "volumes": volumes,
            },
        },
    }
    if deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = deadline_seconds
    if failure_policy:
        spec["podFailurePolicy"] = {"rules": failure_policy}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": queued(labels, ctx.queue),
        },
        "spec": spec,
    }


def claim_volume(claim: str, read_only: bool = False) -> dict[str, Any]:
    """The pod's volume of the shared claim."""
    source: dict[str, Any] = {"claimName": claim}
    if read_only:
        source["readOnly"] = True
    return {"name": "data", "persistentVolumeClaim": source}


def start(kube: Any, job: dict[str, Any], files: Mapping[str, str], manager: str) -> None:
    """Create the Job, then its program ConfigMap (same name) owned by it."""
    applied = kube.apply(job, field_manager=manager)
    meta = job["metadata"]
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": meta["name"],
        "uid": applied["metadata"]["uid"],
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {
                k: v
                for k, v in (meta.get("labels") or {}).items()
                if k not in (LABEL_QUEUE, LABEL_PRIORITY)
            },
            "ownerReferences": [owner],
        },
        "data": dict(files),
    }
    kube.apply(configmap, field_manager=manager)
