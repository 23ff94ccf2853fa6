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

`fetch-model destination=s3://bucket/prefix` instead runs a Job `upload-<job>`
(actions/model_upload.py, beside dataset_import.py whose S3 signing it uses) with the
claim read-only and the `dataset-credentials` keys from the Secret datasets.py writes:
the version lands under `s3://bucket/prefix/<version>/`, never over existing objects,
saved_model.pb last, and what a failed upload wrote is deleted again.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import datasets
import oneshot
import pydantic
from literals import (
    CODE_MOUNT,
    DATA_MOUNT,
    LABEL_COMPONENT,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    TRAINER,
    UPLOADER,
)
from params import JobParams

from charms.gpu_k8s.v0.config import between

COMPONENT_EXPORT = "export"
RESULT_MARKER = "GPU_K8S_EXPORT"  # tf_trainer.py's line once exported
EXPORT_TTL_SECONDS = 3600
POLL_SECONDS = 5.0


class ExportError(Exception):
    """The export cannot be made (the message says why)."""


class ExportParams(JobParams):
    """The `export` action's parameters."""

    timeout: between(1, 7200, "seconds") = 600  # type: ignore[valid-type]


def job_name(job: str) -> str:
    """The export Job of a training job."""
    return f"export-{job}"


def export_dir(job: str) -> str:
    """Where a job's SavedModel versions are, in every pod of the application."""
    return f"{DATA_MOUNT}/jobs/{job}/export"


def export_job(job: str, ctx: Any, image: str) -> dict[str, Any]:
    """The Job that exports the job's latest checkpoint (`ctx`: manifests.Context)."""
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


class _Follow:
    """One look per poll at a one-shot Job of a training job: its answer, or why not.

    `what` names it in messages ("export"), `marker` starts its answer's line, `prefix`
    its failure's; `progress` (a marker) has its progress lines logged as they change.
    """

    def __init__(
        self,
        kube: Any,
        ctx: Any,
        name: str,
        job: str,
        *,
        what: str,
        marker: str,
        prefix: str,
        progress: str = "",
        log: Any = None,
    ):
        self.kube, self.ctx, self.name, self.job = kube, ctx, name, job
        self.what, self.marker, self.prefix = what, marker, prefix
        self.progress, self.log = progress, log
        self.shown = ""

    def __call__(self) -> dict | None:
        kube, ns, name = self.kube, self.ctx.namespace, self.name
        current = kube.get("batch/v1", "Job", name, ns)
        if current is None:
            raise ExportError(f"the {self.what} Job of {self.job} disappeared: run it again")
        text = oneshot.log(kube, ns, name)
        if self.progress and self.log and (now := datasets.progress(text, self.progress)):
            if now != self.shown:
                self.shown = now
                self.log(now)
        state = oneshot.finished(current)
        if state is None:
            if why := oneshot.stuck(kube, ns, name):
                kube.delete("batch/v1", "Job", name, ns)
                raise ExportError(f"the {self.what} pod of {self.job} cannot start: {why}")
            return None
        if state == "Failed" or (answer := oneshot.marked(text, self.marker)) is None:
            kube.delete("batch/v1", "Job", name, ns)
            why = oneshot.last_words(text, self.prefix)
            raise ExportError(f"{self.what} of {self.job} failed: {why}")
        return answer


def _wait(follow: _Follow, timeout: float, *, sleep: Any, clock: Any) -> dict | None:
    from charms.gpu_k8s.v0.system import poll_until

    return poll_until(follow, timeout, poll=POLL_SECONDS, clock=clock, sleep=sleep)


def _make_way(kube: Any, ctx: Any, name: str, what: str, job: str) -> None:
    """Delete a finished Job of that name; refuse while one runs or without the claim."""
    current = kube.get("batch/v1", "Job", name, ctx.namespace)
    if current is not None and oneshot.finished(current) is None:
        raise ExportError(f"an {what} of {job} is running: wait for it")
    if current is not None:
        kube.delete("batch/v1", "Job", name, ctx.namespace)
    if kube.get("v1", "PersistentVolumeClaim", ctx.claim, ctx.namespace) is None:
        raise ExportError(f"claim {ctx.claim} is missing: check the efs-storage relation")


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
    name = job_name(params.job)
    _make_way(kube, ctx, name, "export", params.job)
    oneshot.start(kube, export_job(params.job, ctx, image), {TRAINER: trainer}, ctx.app)
    log(f"exporting the latest checkpoint of {params.job} (Job {name})")
    follow = _Follow(
        kube, ctx, name, params.job, what="export", marker=RESULT_MARKER, prefix="export failed: "
    )
    answer = _wait(follow, params.timeout, sleep=sleep, clock=clock)
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


def check_destination(destination: str) -> str:
    """`s3://bucket[/prefix]`, or "" for `kubectl cp`; no user, password or query in it."""
    if not destination:
        return ""
    parts = urllib.parse.urlsplit(destination)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError("the destination must be s3://<bucket>[/<prefix>]")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(
            "the destination must hold no user, password, query or fragment: the keys "
            "come from the dataset-credentials secret"
        )
    return destination


class FetchParams(JobParams):
    """The `fetch-model` action's parameters."""

    version: between(0, 2**62) = 0  # type: ignore[valid-type]  # 0: the highest
    destination: str = ""
    timeout: between(10, 86400, "seconds") = 300  # type: ignore[valid-type]

    @pydantic.field_validator("destination")
    @classmethod
    def _destination(cls, value: str) -> str:
        return check_destination(value.strip())


def fetch_name(job: str) -> str:
    """The fetch Job of a training job."""
    return f"fetch-{job}"


def fetch_job(job: str, ctx: Any, image: str) -> dict[str, Any]:
    """The Job whose pod holds the export for `kubectl cp` (`ctx`: manifests.Context)."""
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
    from charms.gpu_k8s.v0.system import poll_until

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


UPLOAD_MARKER = "GPU_K8S_UPLOADED"  # model_upload.py's answer
UPLOAD_PROGRESS = "GPU_K8S_UPLOAD"  # and its progress lines


def upload_name(job: str) -> str:
    """The upload Job of a training job."""
    return f"upload-{job}"


def upload_job(params: FetchParams, ctx: Any, image: str) -> dict[str, Any]:
    """The Job that uploads a version to S3 (`ctx`: manifests.Context).

    No retries (backoffLimit 0): the program retries each request itself, and a second
    pod after a lost node would find the first one's objects and refuse to overwrite them.
    """
    name = upload_name(params.job)
    labels = {LABEL_MANAGED_BY: ctx.app, LABEL_COMPONENT: "upload", LABEL_JOB: params.job}
    container = {
        "name": "upload",
        "image": image,
        "command": [
            "python3",
            f"{CODE_MOUNT}/{UPLOADER}",
            f"--export-dir={export_dir(params.job)}",
            f"--version={params.version}",
            f"--destination={params.destination}",
        ],
        "env": ctx.identity_env_list(),
        "envFrom": [{"secretRef": {"name": datasets.credentials_name(ctx.app)}}],
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_MOUNT, "readOnly": True},
            oneshot.code_mount(),
        ],
        # a part (64 MiB) is held in memory while it is sent
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
    }
    return oneshot.manifest(
        name,
        ctx,
        labels,
        container,
        [oneshot.claim_volume(ctx.claim, read_only=True), oneshot.code_volume(name)],
        backoff_limit=0,
        ttl_seconds=EXPORT_TTL_SECONDS,
    )


def upload(
    kube: Any,
    ctx: Any,
    params: FetchParams,
    programs: dict[str, str],
    image: str,
    *,
    credentials: bool,
    log: Any,
    sleep: Any,
    clock: Any,
) -> dict[str, str]:
    """Upload the version to `params.destination` and wait for it.

    `programs`: the sources of model_upload.py and dataset_import.py.

    Raises:
        ExportError: no credentials, no claim, an upload of the job running, or it failed
            (the program's reason: no such version, objects already there, S3 refused;
            its Job is deleted and what it wrote taken back).
    """
    if not credentials:
        raise ExportError(
            "an s3 destination needs credentials: juju add-secret <name> access-key-id=... "
            "secret-access-key=...; juju grant-secret <name> <app>; "
            "juju config <app> dataset-credentials=<the secret URI add-secret printed>"
        )
    name = upload_name(params.job)
    _make_way(kube, ctx, name, "upload", params.job)
    oneshot.start(kube, upload_job(params, ctx, image), programs, ctx.app)
    log(f"uploading the export of {params.job} to {params.destination} (Job {name})")
    follow = _Follow(
        kube,
        ctx,
        name,
        params.job,
        what="upload",
        marker=UPLOAD_MARKER,
        prefix="upload failed: ",
        progress=UPLOAD_PROGRESS,
        log=log,
    )
    answer = _wait(follow, params.timeout, sleep=sleep, clock=clock)
    if answer is None:
        raise ExportError(
            f"the upload of {params.job} did not finish within {params.timeout}s; it goes "
            f"on (Job {name}): kubectl -n {ctx.namespace} logs job/{name}"
        )
    destination = str(answer["destination"])
    return {
        "job": params.job,
        "version": str(answer["version"]),
        "destination": destination,
        "files": str(answer["files"]),
        "size": datasets.human_size(int(answer["size"])),
        "list": f"aws s3 ls --recursive {destination}",
    }
