# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What the tensorflow charm's actions do on the cluster (no ops: a `Kube` client in, data out).

Every operation takes a `kubeclient.Kube`, a `jobs.Context` and, where it waits, a `log`
callback plus `sleep`/`clock` so that tests drive time. Failures the operator can fix raise
`JobError` with a message that says what to change; nothing is left half-created.

Launch cost: a constant number of API requests per role, whatever the number of workers
(existence checks, one node list and one cluster-wide pod list for admission, one apply per
object, then one pod list per poll while waiting).
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jobs
from jobs import Context, TrainRequest
from literals import (
    ACTION_FILES,
    ANNOTATION_REQUEST,
    COMPONENT_PURGE,
    COMPONENT_TRAINING,
    LABEL_COMPONENT,
    PROGRESS_LOG_LINES,
)

logger = logging.getLogger(__name__)

Log = Callable[[str], None]
POLL_SECONDS = 2.0
# Kinds a job is made of, deleted by `stop` (Jobs first so that no new pods start).
JOB_KINDS = (
    ("batch/v1", "Job"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
)


class JobError(Exception):
    """A request that cannot be done; the message says what to change."""


def actions_dir(here: Path | None = None) -> Path:
    """Where `tf_launcher.py` and `tf_trainer.py` are.

    In a packed charm the pack tool copies them to `src/actions/`; in the repository they
    are in `<repo>/actions/`.

    Raises:
        FileNotFoundError: neither place has them.
    """
    src = (here or Path(__file__)).resolve().parent
    candidates = [src / "actions", src.parent.parent.parent / "actions"]
    for candidate in candidates:
        if all((candidate / name).is_file() for name in ACTION_FILES):
            return candidate
    raise FileNotFoundError(
        f"{', '.join(ACTION_FILES)} not found in {' or '.join(map(str, candidates))}"
    )


def read_code(directory: Path | None = None) -> dict[str, str]:
    """The sources that go into a job's ConfigMap."""
    where = directory or actions_dir()
    return {name: (where / name).read_text() for name in ACTION_FILES}


def _training_pods(kube: Any, ctx: Context, job: str) -> list[dict]:
    return kube.list(
        "v1", "Pod", ctx.namespace, label_selector=jobs.selector(ctx.app, job, COMPONENT_TRAINING)
    )


def load_request(kube: Any, ctx: Context, job: str) -> TrainRequest:
    """The stored request of an existing job.

    Raises:
        JobError: there is no such job (or it is not this application's).
    """
    service = kube.get("v1", "Service", job, ctx.namespace)
    labels = ((service or {}).get("metadata") or {}).get("labels") or {}
    annotations = ((service or {}).get("metadata") or {}).get("annotations") or {}
    if service is None or labels.get(jobs.LABEL_MANAGED_BY) != ctx.app:
        raise JobError(f"no job {job!r} in namespace {ctx.namespace}: list-jobs shows the jobs")
    try:
        return TrainRequest.from_json(annotations.get(ANNOTATION_REQUEST, ""))
    except ValueError as e:
        raise JobError(f"job {job!r} has an unreadable request annotation ({e})") from None


def _check_admission(
    kube: Any, ctx: Context, request: TrainRequest, replacing: bool = False
) -> str:
    """Raise JobError unless every replica's GPUs fit now (`replacing`: the job's pods go)."""
    if not request.gpus_per_worker:
        return "no GPUs requested"
    nodes = kube.list("v1", "Node")
    pods = kube.list("v1", "Pod", field_selector="status.phase!=Succeeded,status.phase!=Failed")
    if replacing:
        ours = jobs.labels(ctx.app, request.job)
        pods = [p for p in pods if not _has_labels(p, ours)]
    ok, message = jobs.plan_admission(nodes, pods, request)
    if not ok:
        raise JobError(f"not enough free GPUs: {message}")
    return message


def _has_labels(obj: dict, wanted: Mapping[str, str]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def _check_new(kube: Any, ctx: Context, request: TrainRequest) -> bool:
    """Whether the job must be created; False when the same job already exists.

    Raises:
        JobError: a different job of that name exists, or its data is being purged.
    """
    existing = kube.list(
        "batch/v1", "Job", ctx.namespace, label_selector=jobs.selector(ctx.app, request.job)
    )
    for job in existing:
        component = job["metadata"].get("labels", {}).get(LABEL_COMPONENT)
        if component == COMPONENT_PURGE and jobs.job_finished(job) is None:
            raise JobError(
                f"job {request.job!r} is still being purged: run train again in a minute"
            )
    service = kube.get("v1", "Service", request.job, ctx.namespace)
    if service is None:
        if any(
            j["metadata"].get("labels", {}).get(LABEL_COMPONENT) == COMPONENT_TRAINING
            for j in existing
        ):
            raise JobError(f"job {request.job!r} is half-stopped: run stop job={request.job}")
        return True
    stored = ((service.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_REQUEST)
    if stored == request.to_json():
        return False
    raise JobError(
        f"job {request.job!r} already exists with other parameters: "
        f"stop it first (stop job={request.job}) or choose another job name"
    )


def _check_claim(kube: Any, ctx: Context) -> None:
    if kube.get("v1", "PersistentVolumeClaim", ctx.claim, ctx.namespace) is None:
        raise JobError(
            f"claim {ctx.claim} is missing from namespace {ctx.namespace}: "
            "check the shared-storage relation (efs-storage creates it)"
        )


def _apply_all(kube: Any, ctx: Context, manifests: list[dict]) -> None:
    """Apply objects in order; on an error delete the ones created here and raise."""
    from charms.gpu_k8s.v0.kubeclient import KubeError

    created: list[dict] = []
    try:
        for manifest in manifests:
            kube.apply(manifest, field_manager=ctx.app)
            created.append(manifest)
    except KubeError as e:
        for manifest in reversed(created):
            try:
                kube.delete(
                    manifest["apiVersion"],
                    manifest["kind"],
                    manifest["metadata"]["name"],
                    ctx.namespace,
                )
            except KubeError:
                logger.exception("could not roll back %s", manifest["metadata"]["name"])
        what = f"{manifests[len(created)]['kind']} {manifests[len(created)]['metadata']['name']}"
        raise JobError(f"the API server refused {what}: {e.message}; nothing was kept") from None


def wait_for_pods(
    kube: Any,
    ctx: Context,
    request: TrainRequest,
    timeout: float,
    *,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    poll: float = POLL_SECONDS,
) -> tuple[list[dict], bool]:
    """Poll the job's pods until every replica runs, a pod fails hard, or `timeout` passes.

    Returns:
        (the pods last seen, whether every replica is running).

    Raises:
        JobError: a pod cannot start (bad image, crash loop).
    """
    from charms.gpu_k8s.v0.kubeclient import poll_until

    replicas = request.replicas()
    pods: list[dict] = []
    last = ""

    def all_running() -> bool | None:
        nonlocal pods, last
        pods = _training_pods(kube, ctx, request.job)
        counts = jobs.running_counts(request, pods)
        text = ", ".join(f"{counts[r]}/{n} {r}s running" for r, n in replicas.items())
        if text != last:
            log(text)
            last = text
        if counts == replicas:
            return True
        if problem := jobs.pod_problem(pods):
            raise JobError(f"{problem}: fix the image or command, then stop and train again")
        return None

    ready = poll_until(all_running, timeout, poll=poll, clock=clock, sleep=sleep)
    return pods, bool(ready)


def launch(
    kube: Any,
    ctx: Context,
    request: TrainRequest,
    code: Mapping[str, str],
    *,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Check, create and start a job; returns the action results.

    Raises:
        JobError: the job cannot run as asked; nothing was created.
    """
    new = _check_new(kube, ctx, request)
    if new:
        _check_claim(kube, ctx)
        placement = _check_admission(kube, ctx, request)
        log(f"admitted: {placement}")
        _apply_all(kube, ctx, jobs.manifests(request, ctx, code))
        roles = ", ".join(f"{n} {r}" for r, n in request.replicas().items())
        log(f"created job {request.job}: {roles}")
    else:
        log(f"job {request.job} already exists with these parameters")
    pods, ready = wait_for_pods(
        kube, ctx, request, request.timeout, log=log, sleep=sleep, clock=clock
    )
    results: dict[str, Any] = {
        "job": request.job,
        "created": str(new).lower(),
        "pods": " ".join(sorted(p["metadata"]["name"] for p in pods)),
        "pods-running": "all" if ready else "not yet: see job-status",
        "tensorboard-url": jobs.tensorboard_url(request.job, ctx.namespace),
    }
    return results


def _chief_log(kube: Any, ctx: Context, request: TrainRequest, pods: list[dict]) -> str:
    from charms.gpu_k8s.v0.kubeclient import KubeError

    pod = jobs.find_pod(pods, *request.chief())
    if pod is None:
        return ""
    try:
        return kube.pod_logs(pod["metadata"]["name"], ctx.namespace, tail_lines=PROGRESS_LOG_LINES)
    except KubeError as e:
        if e.status in (400, 404):  # container not started yet, or pod gone
            return ""
        raise


def status(kube: Any, ctx: Context, job: str) -> dict[str, Any]:
    """`job-status` results for one job."""
    request = load_request(kube, ctx, job)
    role_jobs = kube.list(
        "batch/v1",
        "Job",
        ctx.namespace,
        label_selector=jobs.selector(ctx.app, job, COMPONENT_TRAINING),
    )
    pods = _training_pods(kube, ctx, job)
    progress = jobs.parse_progress(_chief_log(kube, ctx, request, pods))
    return jobs.summarise(request, role_jobs, pods, progress, ctx.namespace)


def list_jobs(kube: Any, ctx: Context) -> dict[str, str]:
    """One line per job of this application."""
    training = jobs.selector(ctx.app, component=COMPONENT_TRAINING)
    services = kube.list("v1", "Service", ctx.namespace, label_selector=training)
    all_jobs = kube.list("batch/v1", "Job", ctx.namespace, label_selector=training)
    all_pods = kube.list("v1", "Pod", ctx.namespace, label_selector=training)
    out: dict[str, str] = {}
    for service in services:
        meta = service["metadata"]
        name = meta["name"]
        try:
            request = TrainRequest.from_json(
                (meta.get("annotations") or {}).get(ANNOTATION_REQUEST, "")
            )
        except ValueError:
            out[name] = "unreadable request annotation"
            continue
        mine = [j for j in all_jobs if j["metadata"]["labels"].get(jobs.LABEL_JOB) == name]
        pods = [p for p in all_pods if p["metadata"]["labels"].get(jobs.LABEL_JOB) == name]
        progress = jobs.parse_progress(_chief_log(kube, ctx, request, pods))
        out[name] = jobs.one_line(jobs.summarise(request, mine, pods, progress, ctx.namespace))
    return out


def logs(kube: Any, ctx: Context, job: str, lines: int) -> str:
    """The last `lines` lines of every replica, each prefixed with `[role-index]`.

    A container that restarted also shows the end of its previous instance's log (where a
    crash's traceback is), and how each instance ended (exit code, OOMKilled).
    """
    request = load_request(kube, ctx, job)
    pods = _training_pods(kube, ctx, job)
    out: list[str] = []
    for role, count in request.replicas().items():
        for index in range(count):
            prefix = f"[{role}-{index}]"
            pod = jobs.find_pod(pods, role, index)
            if pod is None:
                out.append(f"{prefix} (no pod)")
                continue
            history, restarted = jobs.container_history(pod)
            if history:
                out.append(f"{prefix} ({history})")
            if restarted:
                text = _pod_log(kube, ctx, pod, lines, previous=True)
                out.extend(f"{prefix} previous: {line}" for line in text.splitlines())
            text = _pod_log(kube, ctx, pod, lines)
            out.extend(f"{prefix} {line}" for line in text.splitlines() or ["(empty log)"])
    return "\n".join(out)


def _pod_log(kube: Any, ctx: Context, pod: dict, lines: int, *, previous: bool = False) -> str:
    from charms.gpu_k8s.v0.kubeclient import KubeError

    name = pod["metadata"]["name"]
    try:
        return kube.pod_logs(name, ctx.namespace, tail_lines=lines, previous=previous)
    except KubeError as e:
        return f"(no {'previous ' if previous else ''}log: {e.message})"


def delete_job(kube: Any, ctx: Context, job: str, *, components: tuple[str, ...] = ()) -> int:
    """Delete every object of a job (or only those of some components); returns how many."""
    deleted = 0
    for api_version, kind in JOB_KINDS:
        for obj in kube.list(
            api_version, kind, ctx.namespace, label_selector=jobs.selector(ctx.app, job)
        ):
            component = obj["metadata"].get("labels", {}).get(LABEL_COMPONENT)
            if components and component not in components:
                continue
            if kube.delete(api_version, kind, obj["metadata"]["name"], ctx.namespace):
                deleted += 1
    return deleted


def stop(
    kube: Any,
    ctx: Context,
    job: str,
    purge: bool,
    *,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    timeout: float = 120.0,
) -> dict[str, str]:
    """Delete every object of the job; with `purge` also start a Job that removes its data.

    Before purging, the job's pods are awaited until gone (bounded by `timeout`) so that no
    trainer writes into the directory while it is removed.
    """
    deleted = delete_job(kube, ctx, job)
    if not purge:
        data = f"kept on the shared volume in jobs/{job} (purge=true removes it)"
        return {"job": job, "deleted-objects": str(deleted), "data": data}
    if not _wait_gone(kube, ctx, job, timeout, sleep=sleep, clock=clock):
        log(f"pods of {job} are still terminating; purging anyway")
    kube.apply(jobs.purge_job(job, ctx), field_manager=ctx.app)
    log(f"started Job {job}-purge to remove jobs/{job} from the shared volume")
    data = f"being removed by Job {job}-purge"
    return {"job": job, "deleted-objects": str(deleted), "data": data}


def _wait_gone(
    kube: Any,
    ctx: Context,
    job: str,
    timeout: float,
    *,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    poll: float = POLL_SECONDS,
) -> bool:
    from charms.gpu_k8s.v0.kubeclient import poll_until

    def gone() -> bool | None:
        return True if not _training_pods(kube, ctx, job) else None

    return bool(poll_until(gone, timeout, poll=poll, clock=clock, sleep=sleep))


def scale(
    kube: Any,
    ctx: Context,
    job: str,
    workers: int,
    timeout: float,
    *,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Relaunch a job's role Jobs with `workers` workers; they resume from the checkpoint.

    The pod template (and TF_CONFIG with it) of a Job is immutable, so every role Job is
    deleted, its pods awaited until gone, and created again with the new worker count.

    Raises:
        JobError: no such job, it already finished, or the GPUs do not fit.
    """
    request = load_request(kube, ctx, job)
    role_jobs = kube.list(
        "batch/v1",
        "Job",
        ctx.namespace,
        label_selector=jobs.selector(ctx.app, job, COMPONENT_TRAINING),
    )
    if jobs.phase(request, role_jobs, []) in ("Succeeded", "Failed"):
        raise JobError(f"job {job!r} has finished: train a new job instead of scaling it")
    if workers == request.workers:
        return {"job": job, "workers": str(workers), "changed": "false"}
    scaled = TrainRequest(**{**request.model_dump(), "workers": workers})
    _check_admission(kube, ctx, scaled, replacing=True)
    log(f"stopping {request.workers} workers of {job} (they resume from the last checkpoint)")
    for role_job in role_jobs:
        kube.delete("batch/v1", "Job", role_job["metadata"]["name"], ctx.namespace)
    if not _wait_gone(kube, ctx, job, max(timeout, 60), sleep=sleep, clock=clock):
        raise JobError(f"old pods of {job} are still terminating: run scale again shortly")
    manifests = [jobs.headless_service(scaled, ctx)]
    manifests += [jobs.role_job(scaled, ctx, role) for role in scaled.replicas()]
    _apply_all(kube, ctx, manifests)
    log(f"relaunched {job} with {workers} workers")
    pods, ready = wait_for_pods(kube, ctx, scaled, timeout, log=log, sleep=sleep, clock=clock)
    resumed = _wait_resumed(
        kube, ctx, scaled, pods, timeout if ready else 0, sleep=sleep, clock=clock
    )
    return {
        "job": job,
        "workers": str(workers),
        "changed": "true",
        "resumed-from-step": "unknown (not reported yet)" if resumed is None else str(resumed),
        "pods-running": "all" if ready else "not yet: see job-status",
    }


def _wait_resumed(
    kube: Any,
    ctx: Context,
    request: TrainRequest,
    pods: list[dict],
    timeout: float,
    *,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    poll: float = POLL_SECONDS,
) -> int | None:
    from charms.gpu_k8s.v0.kubeclient import poll_until

    def resumed() -> int | None:
        return jobs.resumed_step(_chief_log(kube, ctx, request, pods))

    return poll_until(resumed, timeout, poll=poll, clock=clock, sleep=sleep)


def _parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def housekeeping(kube: Any, ctx: Context, ttl_hours: float, now: datetime.datetime) -> list[str]:
    """Stop ps/workers of finished ps jobs and delete jobs finished more than `ttl_hours` ago.

    Returns:
        What was done, one line per action.
    """
    done: list[str] = []
    training = jobs.selector(ctx.app, component=COMPONENT_TRAINING)
    by_job: dict[str, list[dict]] = {}
    for job in kube.list("batch/v1", "Job", ctx.namespace, label_selector=training):
        by_job.setdefault(job["metadata"]["labels"].get(jobs.LABEL_JOB, ""), []).append(job)
    for name, role_jobs in sorted(by_job.items()):
        names = {j["metadata"]["name"]: j for j in role_jobs}
        chief = names.get(f"{name}-chief")
        if chief is None and f"{name}-ps" not in names:
            chief = names.get(f"{name}-worker")
        if chief is None or jobs.job_finished(chief) is None:
            continue
        finished = _parse_time(jobs.finished_at(chief))
        if finished is not None and now - finished >= datetime.timedelta(hours=ttl_hours):
            count = delete_job(kube, ctx, name)
            done.append(f"deleted job {name} ({count} objects), finished {finished.isoformat()}")
            continue
        for role in ("ps", "worker"):
            if f"{name}-chief" in names and f"{name}-{role}" in names:
                kube.delete("batch/v1", "Job", f"{name}-{role}", ctx.namespace)
                done.append(f"stopped {role} of {name}: the chief has finished")
    return done
