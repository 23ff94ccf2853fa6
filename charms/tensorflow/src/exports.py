# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""`export job=<n>`: the latest checkpoint of a job as a SavedModel version (no ops).

The built-in trainer's chief exports at the end of training by itself; this is for a job
still running or stopped: a short-lived Job `export-<job>` (oneshot.py) runs the trainer
with `--export-only` over `/data/jobs/<job>/checkpoints` (where the chief also keeps the
model's shape, model.json) and writes `/data/jobs/<job>/export/<step>`, the numbered
version directory TensorFlow Serving loads. A failed export leaves no Job behind and no
version directory (the trainer writes it beside and renames it).
"""

from __future__ import annotations

from typing import Any

import jobs
import oneshot
from literals import CODE_MOUNT, DATA_MOUNT, LABEL_COMPONENT, LABEL_JOB, LABEL_MANAGED_BY, TRAINER

from charms.gpu_k8s.v0.config import between

COMPONENT_EXPORT = "export"
RESULT_MARKER = "GPU_K8S_EXPORT"  # tf_trainer.py's line once exported
EXPORT_TTL_SECONDS = 3600
POLL_SECONDS = 5.0


class ExportError(Exception):
    """The export cannot be made (the message says why)."""


class ExportParams(jobs.JobParams):
    """The `export` action's parameters."""

    timeout: between(1, 7200, "seconds") = 600  # type: ignore[valid-type]


def job_name(job: str) -> str:
    """The export Job of a training job."""
    return f"export-{job}"


def export_dir(job: str) -> str:
    """Where a job's SavedModel versions are, in every pod of the application."""
    return f"{DATA_MOUNT}/jobs/{job}/export"


def export_job(job: str, ctx: Any, image: str) -> dict[str, Any]:
    """The Job that exports the job's latest checkpoint (`ctx`: jobs.Context)."""
    labels = {LABEL_MANAGED_BY: ctx.app, LABEL_COMPONENT: COMPONENT_EXPORT, LABEL_JOB: job}
    jobs_dir = f"{DATA_MOUNT}/jobs/{job}"
    container = {
        "name": "export",
        "image": image,
        "command": [
            "python3",
            f"{CODE_MOUNT}/{TRAINER}",
            "--export-only",
            f"--checkpoint-dir={jobs_dir}/checkpoints",
            f"--export-dir={export_dir(job)}",
        ],
        "env": [*ctx.identity_env_list(), {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"}],
        "volumeMounts": [{"name": "data", "mountPath": DATA_MOUNT}, oneshot.code_mount()],
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(job), "namespace": ctx.namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": EXPORT_TTL_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    **ctx.pod_basics(),
                    "containers": [container],
                    "volumes": [
                        {"name": "data", "persistentVolumeClaim": {"claimName": ctx.claim}},
                        oneshot.code_volume(job_name(job)),
                    ],
                },
            },
        },
    }


def run(
    kube: Any,
    ctx: Any,
    params: ExportParams,
    trainer: str,
    image: str,
    *,
    log: Any,
    sleep: Any,
    clock: Any,
) -> dict[str, str]:
    """Export the job's latest checkpoint and wait for it.

    Raises:
        ExportError: an export of the job is running, it failed (the trainer's reason; its
            Job is deleted), or it did not finish in time.
    """
    from charms.gpu_k8s.v0.kubeclient import poll_until

    name = job_name(params.job)
    current = kube.get("batch/v1", "Job", name, ctx.namespace)
    if current is not None and oneshot.finished(current) is None:
        raise ExportError(f"an export of {params.job} is running: wait for it")
    if current is not None:
        kube.delete("batch/v1", "Job", name, ctx.namespace)
    if kube.get("v1", "PersistentVolumeClaim", ctx.claim, ctx.namespace) is None:
        raise ExportError(f"claim {ctx.claim} is missing: check the efs-storage relation")
    oneshot.start(kube, export_job(params.job, ctx, image), {TRAINER: trainer}, ctx.app)
    log(f"exporting the latest checkpoint of {params.job} (Job {name})")

    def done() -> dict | None:
        job = kube.get("batch/v1", "Job", name, ctx.namespace)
        if job is None:
            raise ExportError(f"the export Job of {params.job} disappeared: run it again")
        state = oneshot.finished(job)
        if state is None:
            return None
        text = oneshot.log(kube, ctx.namespace, name)
        if state == "Failed" or (answer := oneshot.marked(text, RESULT_MARKER)) is None:
            kube.delete("batch/v1", "Job", name, ctx.namespace)
            raise ExportError(
                f"export of {params.job} failed: {oneshot.last_words(text, 'export failed: ')}"
            )
        return answer

    answer = poll_until(done, params.timeout, poll=POLL_SECONDS, clock=clock, sleep=sleep)
    if answer is None:
        raise ExportError(
            f"the export of {params.job} did not finish within {params.timeout}s; "
            f"it goes on (Job {name}): see {export_dir(params.job)}"
        )
    return {
        "job": params.job,
        "version": str(answer["step"]),
        "path": str(answer["path"]),
        "signature": "serving_default: x (float32 [batch, inputs]) -> class, probabilities",
    }
