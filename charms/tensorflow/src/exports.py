# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""`export job=<n>` and `fetch-model job=<n>`: a job's SavedModels, made and taken out (no ops).

The built-in trainer's chief exports at the end of training by itself; this is for a job
still running or stopped: a short-lived Job `export-<job>` (oneshot.py) runs the trainer
with `--export-only` over `/data/jobs/<job>/checkpoints` (where the chief also keeps the
model's shape, model.json) and writes `/data/jobs/<job>/export/<step>`, the numbered
version directory TensorFlow Serving loads. A failed export leaves no Job behind and no
version directory (the trainer writes it beside and renames it).

`fetch-model` starts a short-lived Job `fetch-<job>` whose pod lists the job's versions
and then waits (FETCH_SECONDS) with the claim mounted read-only, and answers the exact
`kubectl cp` that copies the highest (or the asked) version to the operator's machine
(kubectl cp needs `tar` in the container: the tensorflow image, Ubuntu, has it). The Job
goes by itself (activeDeadlineSeconds, then ttlSecondsAfterFinished).
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
    return oneshot.manifest(
        job_name(job),
        ctx,
        labels,
        container,
        [oneshot.claim_volume(ctx.claim), oneshot.code_volume(job_name(job))],
        backoff_limit=0,
        ttl_seconds=EXPORT_TTL_SECONDS,
    )


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
            if why := oneshot.stuck(kube, ctx.namespace, name):
                kube.delete("batch/v1", "Job", name, ctx.namespace)
                raise ExportError(f"the export pod of {params.job} cannot start: {why}")
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


FETCH_SECONDS = 3600  # how long the fetch pod stays for kubectl cp
FETCH_MARKER = "GPU_K8S_VERSIONS"


class FetchParams(jobs.JobParams):
    """The `fetch-model` action's parameters."""

    version: between(0, 2**62) = 0  # type: ignore[valid-type]  # 0: the highest
    timeout: between(10, 3600, "seconds") = 300  # type: ignore[valid-type]


def fetch_name(job: str) -> str:
    """The fetch Job of a training job."""
    return f"fetch-{job}"


def fetch_job(job: str, ctx: Any, image: str) -> dict[str, Any]:
    """The Job whose pod holds the export for `kubectl cp` (`ctx`: jobs.Context)."""
    labels = {LABEL_MANAGED_BY: ctx.app, LABEL_COMPONENT: "fetch", LABEL_JOB: job}
    script = (
        f'cd "{export_dir(job)}" 2>/dev/null || {{ echo "fetch failed: no export in '
        f'{export_dir(job)} (export job={job} first)"; exit 1; }}; '
        f'echo "{FETCH_MARKER} $(ls -d [0-9]* 2>/dev/null | tr "\\n" " ")"; '
        f"exec sleep {FETCH_SECONDS}"
    )
    container = {
        "name": "fetch",
        "image": image,
        "command": ["sh", "-c", script],
        "env": ctx.identity_env_list(),
        "volumeMounts": [{"name": "data", "mountPath": DATA_MOUNT, "readOnly": True}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
    }
    return oneshot.manifest(
        fetch_name(job),
        ctx,
        labels,
        container,
        [oneshot.claim_volume(ctx.claim, read_only=True)],
        backoff_limit=0,
        ttl_seconds=60,
        deadline_seconds=FETCH_SECONDS + 60,
    )


def fetch(
    kube: Any, ctx: Any, params: FetchParams, image: str, *, log: Any, sleep: Any, clock: Any
) -> dict[str, str]:
    """Start the fetch pod and say how to copy the export out.

    Raises:
        ExportError: the job has no export (or not the asked version); nothing is left.
    """
    from charms.gpu_k8s.v0.kubeclient import poll_until

    name = fetch_name(params.job)
    kube.delete("batch/v1", "Job", name, ctx.namespace)  # an earlier one: start afresh
    kube.apply(fetch_job(params.job, ctx, image), field_manager=ctx.app)
    log(f"starting pod of Job {name} with the claim mounted read-only")

    def listed() -> tuple[str, list[int]] | None:
        job = kube.get("batch/v1", "Job", name, ctx.namespace)
        text = oneshot.log(kube, ctx.namespace, name)
        if job is not None and oneshot.finished(job) == "Failed":
            kube.delete("batch/v1", "Job", name, ctx.namespace)
            raise ExportError(oneshot.last_words(text, "fetch failed: "))
        if why := oneshot.stuck(kube, ctx.namespace, name):
            kube.delete("batch/v1", "Job", name, ctx.namespace)
            raise ExportError(f"the fetch pod of {params.job} cannot start: {why}")
        for line in reversed(text.splitlines()):
            if line.startswith(FETCH_MARKER):
                versions = sorted(int(v) for v in line.split()[1:] if v.isdigit())
                pods = kube.list(
                    "v1", "Pod", ctx.namespace, label_selector=f"{oneshot.LABEL_JOB_NAME}={name}"
                )
                running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
                if running:
                    return running[-1]["metadata"]["name"], versions
        return None

    found = poll_until(listed, params.timeout, poll=POLL_SECONDS, clock=clock, sleep=sleep)
    if found is None:
        kube.delete("batch/v1", "Job", name, ctx.namespace)
        raise ExportError(f"the fetch pod of {params.job} did not start within {params.timeout}s")
    pod, versions = found
    wanted = params.version or (versions[-1] if versions else 0)
    if wanted not in versions:
        kube.delete("batch/v1", "Job", name, ctx.namespace)
        have = ", ".join(map(str, versions)) or "none"
        raise ExportError(
            f"{params.job} has no export version {wanted or ''} (versions: {have}); "
            f"export job={params.job} makes one"
        )
    source = f"{export_dir(params.job)}/{wanted}"
    return {
        "job": params.job,
        "version": str(wanted),
        "versions": " ".join(map(str, versions)),
        "pod": pod,
        "copy": f"kubectl -n {ctx.namespace} cp {pod}:{source} ./{params.job}-{wanted}",
        "then": f"kubectl -n {ctx.namespace} delete job {name}  (or it goes within the hour)",
    }
