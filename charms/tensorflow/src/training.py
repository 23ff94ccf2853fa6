# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What the tensorflow charm's actions do on the cluster (no ops: a `Kube` client in, data out).

Every operation takes a `kubeclient.Kube`, a `manifests.Context` and, where it waits, a `log`
callback plus `sleep`/`clock` so that tests drive time. Failures the operator can fix raise
`JobError` with a message that says what to change; nothing is left half-created.

A job is one JobSet (manifests.jobset) queued in the application's LocalQueue: Kueue admits it
when the whole gang fits the team's quota and the cluster, JobSet restarts it as a gang and
ends it when the chief succeeds, and deletes it `job-ttl` hours after it finished. The charm
only refuses what could never run (placement.never_fits) and reports what Kueue says.

Launch cost: a constant number of API requests, whatever the number of workers (existence
checks, one node list, one apply per object, one Workload list per poll for the queue
state, then one pod list per poll while waiting).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import datasets
import gpu_metrics
import job_state
import manifests
import oneshot
import placement
import queues
import scale_records
import serving
from literals import (
    ACTION_FILES,
    ANNOTATION_KUEUE_PARENT,
    ANNOTATION_REQUEST,
    COHORT,
    COMPONENT_PURGE,
    COMPONENT_SCALE,
    COMPONENT_TENSORBOARD,
    COMPONENT_TRAINING,
    GRACE_SECONDS,
    JOBSET_API,
    KUEUE_API,
    LABEL_COMPONENT,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_PRIORITY,
    PROGRESS_LOG_LINES,
)
from manifests import Context
from params import TrainRequest
from progress import parse_progress, progress_phrase, resumed_step

from charms.gpu_k8s.v0 import kube_objects
from charms.gpu_k8s.v0.unit_state import Gauge

logger = logging.getLogger(__name__)

Log = Callable[[str], None]
POLL_SECONDS = 2.0
# How long `train` looks for Kueue's first answer (the Workload it makes for the JobSet).
QUEUE_SETTLE_SECONDS = 10.0
# Replicas whose logs one `logs` reads (one API request each, two with a restarted
# container's previous log): a constant whatever the job's size (issue 31 item 4), as
# kubectl caps `logs -l` at --max-log-requests (default 5). The rest: role= index=.
LOG_REPLICAS = 8
# Kinds a job is made of, deleted by `stop` (the JobSet first: its Jobs and pods go with
# it; batch Jobs are the purge Job).
JOB_KINDS = (
    (JOBSET_API, "JobSet"),
    ("batch/v1", "Job"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
)


class JobError(Exception):
    """A request that cannot be done; the message says what to change."""


class RefusedError(JobError):
    """The API server refused an object of a job; what was created meanwhile is deleted."""

    def __init__(self, refusal: str):
        super().__init__(f"{refusal}; nothing was kept")
        self.refusal = refusal


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


def image_of(kube: Any, ctx: Context, job: str) -> str:
    """The CPU image a job's own programs run in (its `image`, else the default one)."""
    js = _jobset(kube, ctx, job)
    request = _request_of(js, job, ctx) if js is not None else None
    if request is not None and request.image:
        return request.image
    return ctx.pulled(ctx.default_image)


def read_program(name: str, directory: Path | None = None) -> str:
    """One program of actions/ (dataset_import.py for the import Job)."""
    return ((directory or actions_dir()) / name).read_text()


def read_code(directory: Path | None = None) -> dict[str, str]:
    """The sources that go into a job's ConfigMap."""
    where = directory or actions_dir()
    return {name: (where / name).read_text() for name in ACTION_FILES}


def _training_pods(kube: Any, ctx: Context, job: str) -> list[dict]:
    selector = manifests.selector(ctx.app, job, COMPONENT_TRAINING)
    return kube.list("v1", "Pod", ctx.namespace, label_selector=selector)


def tensorboard_state(kube: Any, ctx: Context, job: str) -> str:
    """The state of the job's TensorBoard pod (job_state.tensorboard_state)."""
    pods = kube.list(
        "v1",
        "Pod",
        ctx.namespace,
        label_selector=manifests.selector(ctx.app, job, COMPONENT_TENSORBOARD),
    )
    return job_state.tensorboard_state(pods)


def load_request(kube: Any, ctx: Context, job: str) -> TrainRequest:
    """The stored request of an existing job.

    Raises:
        JobError: there is no such job (or it is not this application's).
    """
    return _request_of(_jobset(kube, ctx, job), job, ctx)


def _jobset(kube: Any, ctx: Context, job: str) -> dict | None:
    found = kube.get(JOBSET_API, "JobSet", job, ctx.namespace)
    labels = ((found or {}).get("metadata") or {}).get("labels") or {}
    return found if labels.get(LABEL_MANAGED_BY) == ctx.app else None


def _request_of(js: dict | None, job: str, ctx: Context) -> TrainRequest:
    if js is None:
        raise JobError(f"no job {job!r} in namespace {ctx.namespace}: list-jobs shows the jobs")
    annotations = (js.get("metadata") or {}).get("annotations") or {}
    try:
        return TrainRequest.from_annotations(annotations)
    except ValueError as e:
        raise JobError(f"job {job!r} has an unreadable request annotation ({e})") from None


def _workloads(kube: Any, ctx: Context) -> list[dict]:
    """Kueue's Workloads in the namespace (one per queued or admitted JobSet)."""
    return kube.list(KUEUE_API, "Workload", ctx.namespace)


def _workload_of(js: dict | None, workloads: list[dict]) -> dict | None:
    """The Workload Kueue made for `js` (it owns it through an ownerReference)."""
    if js is None:
        return None
    uid = js["metadata"].get("uid")
    for workload in workloads:
        for ref in workload["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "JobSet" and ref.get("uid") == uid:
                return workload
    return None


def _cohort(kube: Any) -> tuple[dict | None, list[dict]]:
    """The Cohort and, when it is there, every ClusterQueue (two reads)."""
    cohort = kube.get(KUEUE_API, "Cohort", COHORT)
    return cohort, kube.list(KUEUE_API, "ClusterQueue") if cohort is not None else []


def _queues(kube: Any, team: str) -> tuple[dict | None, list[dict], dict | None]:
    """The Cohort, every ClusterQueue and the team's among them (two reads)."""
    members = kube.list(KUEUE_API, "ClusterQueue")
    cq = next((q for q in members if q["metadata"]["name"] == team), None)
    return kube.get(KUEUE_API, "Cohort", COHORT), members, cq


def _never(
    request: TrainRequest,
    nodes: list[dict],
    cohort: dict | None,
    members: list[dict],
    team: str,
) -> str | None:
    """Why the job could never run on this cluster, as train refuses it and dry-run says it.

    First by the `nodes` (placement.never_fits), then by what Kueue could ever give the
    team's ClusterQueue `team`: its cohort's whole quota (placement.beyond_cohort).
    """
    why = placement.never_fits(request, nodes)
    if why:
        return f"job {request.job!r} can never run on this cluster: {why}"
    why = placement.beyond_cohort(request, cohort, members, team)
    if why:
        return f"job {request.job!r} can never be admitted: {why}"
    return None


def _check_fits(kube: Any, ctx: Context, request: TrainRequest, nodes: list[dict]) -> None:
    """Refuse a job that could never run on this cluster, before anything is created."""
    cohort, members = _cohort(kube)
    why = _never(request, nodes, cohort, members, queues.cluster_queue_name(ctx.namespace))
    if why:
        raise JobError(why)


def _check_new(kube: Any, ctx: Context, request: TrainRequest) -> bool:
    """Whether the job must be created; False when the same job already exists.

    Raises:
        JobError: a different job of that name exists, or its data is being purged.
    """
    existing = kube.list(
        "batch/v1", "Job", ctx.namespace, label_selector=manifests.selector(ctx.app, request.job)
    )
    for job in existing:
        component = job["metadata"].get("labels", {}).get(LABEL_COMPONENT)
        if component == COMPONENT_PURGE and oneshot.finished(job) is None:
            raise JobError(
                f"job {request.job!r} is still being purged: run train again in a minute"
            )
    js = _jobset(kube, ctx, request.job)
    if js is None:
        return True
    try:
        stored = _request_of(js, request.job, ctx)
    except JobError:
        stored = None
    if stored is not None and stored.same_job(request):
        return False
    raise JobError(
        f"job {request.job!r} already exists with other parameters: "
        f"stop it first (stop job={request.job}) or choose another job name"
    )


def _check_dataset(kube: Any, ctx: Context, name: str) -> None:
    """The dataset a job names was imported (imports that finished meanwhile count)."""
    if not name:
        return
    found, _ = datasets.settle(kube, ctx)
    if name not in found:
        have = ", ".join(sorted(found)) or "none yet"
        raise JobError(
            f"dataset {name!r} has not been imported (import-dataset name={name} "
            f"source=https://... or s3://...; run it again with the same source if the "
            f"copy is there but unlisted); imported: {have}"
        )


def _check_claim(kube: Any, ctx: Context) -> None:
    if kube.get("v1", "PersistentVolumeClaim", ctx.claim, ctx.namespace) is None:
        raise JobError(
            f"claim {ctx.claim} is missing from namespace {ctx.namespace}: "
            "check the shared-storage relation (efs-storage creates it)"
        )


def _apply_all(kube: Any, ctx: Context, objects: list[dict]) -> None:
    """Apply objects in order; on an error delete the ones created here and raise.

    The JobSet goes first; the others name it as their owner, so that the garbage
    collector deletes them with it (JobSet's `ttlSecondsAfterFinished`, `stop`, `scale`).
    """
    from charms.gpu_k8s.v0.kubeclient import KubeError

    created: list[dict] = []
    objects = sorted(objects, key=lambda m: m["kind"] != "JobSet")
    try:
        owner: dict[str, Any] | None = None
        for manifest in objects:
            if owner is not None:
                manifest = {
                    **manifest,
                    "metadata": {**manifest["metadata"], "ownerReferences": [owner]},
                }
            applied = kube.apply(manifest, field_manager=ctx.app)
            created.append(manifest)
            if manifest["kind"] == "JobSet":
                owner = {
                    "apiVersion": manifest["apiVersion"],
                    "kind": "JobSet",
                    "name": manifest["metadata"]["name"],
                    "uid": applied["metadata"]["uid"],
                }
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
        what = f"{objects[len(created)]['kind']} {objects[len(created)]['metadata']['name']}"
        raise RefusedError(f"the API server refused {what}: {e.message}") from None


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
    from charms.gpu_k8s.v0.system import poll_until

    replicas = request.replicas()
    pods: list[dict] = []
    last = ""

    def all_running() -> bool | None:
        nonlocal pods, last
        pods = _training_pods(kube, ctx, request.job)
        counts = job_state.running_counts(request, pods)
        text = ", ".join(f"{counts[r]}/{n} {r}s running" for r, n in replicas.items())
        if text != last:
            log(text)
            last = text
        if counts == replicas:
            return True
        if problem := job_state.pod_problem(pods):
            raise JobError(f"{problem}: fix the image or command, then stop and train again")
        return None

    ready = poll_until(all_running, timeout, poll=poll, clock=clock, sleep=sleep)
    return pods, bool(ready)


def queue_answer(
    kube: Any,
    ctx: Context,
    job: str,
    *,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    settle: float = QUEUE_SETTLE_SECONDS,
) -> tuple[str, str]:
    """(state, why) once Kueue admitted the job or said why not, or after `settle` seconds.

    `why` for a queued job: its position in the team's queue and Kueue's message.
    """
    from charms.gpu_k8s.v0.system import poll_until

    answer: tuple[str, str] = ("Unknown", "Kueue has not picked the job up yet")

    def answered() -> bool | None:
        nonlocal answer
        js = _jobset(kube, ctx, job)
        workloads = _workloads(kube, ctx)
        workload = _workload_of(js, workloads)
        if job_state.unqueued(js, workload):
            answer = ("Unqueued", job_state.UNQUEUED)
            return True
        state, why = job_state.queue_state(workload, workloads)
        if workload is not None and state in job_state.WAITING:
            why = f"position {job_state.queue_position(workload, workloads)}: {why}"
        answer = (state, why)
        # Kueue has decided once it admitted the job or said why not (a fresh Workload
        # has no reason yet: its admission may be a moment away).
        return True if state == "Admitted" or job_state.queue_reason(workload) else None

    poll_until(answered, settle, poll=POLL_SECONDS, clock=clock, sleep=sleep)
    return answer


def dry_run(
    kube: Any, ctx: Context, request: TrainRequest, code: Mapping[str, str], nodes: list[dict]
) -> dict:
    """`train dry-run=true`: admit now, wait or never, with the numbers; nothing is written.

    Reads only: the Cohort and every ClusterQueue (never as train refuses: _never; what
    the team may take now: queues.Tree) and its queue through Kueue's visibility API
    (queues.py).
    """
    js = next(m for m in manifests.manifests(request, ctx, code) if m["kind"] == "JobSet")
    team = queues.cluster_queue_name(ctx.namespace)
    cohort, members, cq = _queues(kube, team)
    never = _never(request, nodes, cohort, members if cohort is not None else [], team)
    from charms.gpu_k8s.v0.kubeclient import KubeError

    try:
        pending = len(kube.request("GET", queues.pending_path(ctx.namespace)).get("items") or [])
    except KubeError as e:
        if e.status not in (404, 503):
            raise
        pending = queues.pending_count(cq)
        if pending is None:
            pending = sum(
                1
                for w in _workloads(kube, ctx)
                if job_state.queue_state(w)[0] in job_state.WAITING
            )
    tree = queues.Tree.of(cohort, members)
    answer, why = queues.verdict(cq, tree, queues.pod_sets(js), pending, never)
    return {
        "job": request.job,
        "dry-run": f"{answer}: {why}",
        "quota": queues.numbers(cq, queues.asks(js), tree=tree),
        "created": "false",
    }


def launch(
    kube: Any,
    ctx: Context,
    request: TrainRequest,
    code: Mapping[str, str],
    *,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    now: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Check and create a job, report Kueue's answer and wait for its pods.

    A job Kueue cannot admit yet stays queued: `train` returns at once saying why, unless
    `wait=true`, which waits (up to `timeout`) for every pod to run. A job that a scale
    holds (its record's lease, `now`: the wall clock) is refused; one that a failed scale
    kept is made anew from this request, and its record deleted.

    Raises:
        JobError: the job cannot run as asked (or could never run here); nothing was created.
    """
    nodes = kube.list("v1", "Node")
    request = placement.with_gpu_defaults(request, nodes)
    if request.dry_run:
        return dry_run(kube, ctx, request, code, nodes)
    new = _check_new(kube, ctx, request)
    if new:
        record = _read_record(_scale_record(kube, ctx, request.job), request.job)
        if record is not None and record.held(now()):  # a scale is relaunching it
            raise JobError(scale_records.refused_while_held(request.job, record))
        if record is not None and _training_pods(kube, ctx, request.job):
            raise JobError(  # a failed scale's old pods linger
                f"old pods of {request.job} are still terminating after a scale: "
                + _retry_scale(request.job, record.request.workers)
            )
        _check_claim(kube, ctx)
        _check_dataset(kube, ctx, request.dataset)
        _check_fits(kube, ctx, request, nodes)
        _apply_all(kube, ctx, manifests.manifests(request, ctx, code))
        if record is not None:  # this job replaces the one the scale kept
            kube.delete("v1", "ConfigMap", scale_records.name(request.job), ctx.namespace)
        roles = ", ".join(f"{n} {r}" for r, n in request.replicas().items())
        log(f"created job {request.job}: {roles}; queue {ctx.queue}, priority {request.priority}")
    else:
        log(f"job {request.job} already exists with these parameters")
    state, why = queue_answer(kube, ctx, request.job, sleep=sleep, clock=clock)
    results: dict[str, Any] = {
        "job": request.job,
        "created": str(new).lower(),
        "tensorboard-url": manifests.tensorboard_url(request.job, ctx.namespace),
    }
    if state == "Unqueued":
        log(f"warning: {why}")
        results["warning"] = why
    if state in (*job_state.WAITING, "Unknown"):
        log(f"{state.lower()}: {why}")
        results["state"] = f"{state.lower()}: {why}"
        if not request.wait:
            results["pods-running"] = "not yet: queued (job-status shows when it is admitted)"
            results["tensorboard"] = tensorboard_state(kube, ctx, request.job)
            return results
    pods, ready = wait_for_pods(
        kube, ctx, request, request.timeout, log=log, sleep=sleep, clock=clock
    )
    results["state"] = "running" if ready else results.get("state", "admitted")
    results["pods"] = " ".join(sorted(p["metadata"]["name"] for p in pods))
    results["pods-running"] = "all" if ready else "not yet: see job-status"
    results["tensorboard"] = tensorboard_state(kube, ctx, request.job)
    return results


def _chief_log(kube: Any, ctx: Context, request: TrainRequest, pods: list[dict]) -> str:
    from charms.gpu_k8s.v0.kubeclient import KubeError

    pod = job_state.find_pod(pods, *request.chief())
    if pod is None:
        return ""
    try:
        return kube.pod_logs(pod["metadata"]["name"], ctx.namespace, tail_lines=PROGRESS_LOG_LINES)
    except KubeError as e:
        if e.status in (400, 404):  # container not started yet, or pod gone
            return ""
        raise


def _summary(
    kube: Any,
    ctx: Context,
    request: TrainRequest,
    js: dict | None,
    workloads: list[dict],
    pods: list[dict],
    now: float,
) -> dict[str, Any]:
    """`job-status`'s answer for one job; `now`: the wall clock.

    A waiting job's position in the team's queue, unless Kueue holds it out of the queue
    until its requeue backoff ends (job_state.requeues says until when).
    """
    workload = _workload_of(js, workloads)
    progress = parse_progress(_chief_log(kube, ctx, request, pods))
    position = None
    at = scale_records.stamp(now)
    if workload is not None and job_state.queue_state(workload)[0] in job_state.WAITING:
        if not job_state.backing_off(workload, at):
            position = job_state.queue_position(workload, workloads, at)
    # the nodes its pods leave now: which of them had a GPU quarantined (Nodes: get)
    faulty = {
        n for n in job_state.leaving(pods) if kube_objects.gpu_fault(kube.get("v1", "Node", n))
    }
    return job_state.summarise(
        request,
        js,
        workload,
        pods,
        progress,
        ctx.namespace,
        position=position,
        workloads=workloads,
        now=now,
        faulty=faulty,
    )


def _why_numbers(
    kube: Any, ctx: Context, js: dict, workload: dict, workloads: list[dict], summary: dict
) -> None:
    """A waiting job's position as Kueue's visibility API says it, and the numbers (queues.py)."""
    position = queues.visible_position(kube, ctx.namespace, workload["metadata"]["name"])
    if position is not None:
        _, why = job_state.queue_state(workload, workloads)
        summary["queue"] = f"position {position}: {why}"
    cohort, members, cq = _queues(kube, queues.cluster_queue_name(ctx.namespace))
    tree = queues.Tree.of(cohort, members)
    reason = job_state.queue_reason(workload)
    summary["quota"] = queues.numbers(cq, queues.asks(js), reason, tree)


def status(
    kube: Any, ctx: Context, job: str, now: Callable[[], float] = time.time
) -> dict[str, Any]:
    """`job-status` results for one job (one that only a scale's record holds included)."""
    js = _jobset(kube, ctx, job)
    if js is None and (record := _read_record(_scale_record(kube, ctx, job), job)):
        return scale_records.summary(record, now(), _training_pods(kube, ctx, job))
    request = _request_of(js, job, ctx)
    pods = _training_pods(kube, ctx, job)
    workloads = _workloads(kube, ctx)
    summary = _summary(kube, ctx, request, js, workloads, pods, now())
    workload = _workload_of(js, workloads)
    if js is not None and workload is not None and summary["phase"] in job_state.WAITING:
        _why_numbers(kube, ctx, js, workload, workloads, summary)
    summary["tensorboard"] = tensorboard_state(kube, ctx, job)
    use = gpu_metrics.gpu_use(kube, ctx.namespace, pods)
    if use is not None:
        summary["gpu-use"] = use
    return summary


def _records(kube: Any, ctx: Context) -> list[dict]:
    """Every record a scale wrote (scale_records), in one list (label_older_records)."""
    selector = manifests.selector(ctx.app, component=COMPONENT_SCALE)
    return kube.list("v1", "ConfigMap", ctx.namespace, label_selector=selector)


def label_older_records(kube: Any, ctx: Context) -> list[str]:
    """Label as component `scale` the records earlier revisions wrote without it; their jobs.

    Before f64c7fa a record carried the job's labels only (fc34adc `scale_record`:
    manifests.labels(app, job)), so `_records` (list-jobs, the leader's stale-record sweep)
    missed its job until the next scale; job-status, which reads the record by name, did
    not. Labelling them once (the leader, after a refresh) keeps list-jobs at one list:
    here one list of the application's per-job ConfigMaps without a component label (each
    job's `<job>-code` too, left alone) and one merge patch per such record.
    """
    selector = f"{manifests.selector(ctx.app)},{LABEL_JOB},!{LABEL_COMPONENT}"
    labelled = []
    for found in kube.list("v1", "ConfigMap", ctx.namespace, label_selector=selector):
        meta = found["metadata"]
        job = meta["labels"][LABEL_JOB]
        if meta["name"] != scale_records.name(job) or ANNOTATION_REQUEST not in (
            meta.get("annotations") or {}
        ):
            continue
        patch = {"metadata": {"labels": {LABEL_COMPONENT: COMPONENT_SCALE}}}
        kube.patch("v1", "ConfigMap", meta["name"], patch, ctx.namespace)
        labelled.append(job)
    return labelled


def queue_older_deployments(kube: Any, ctx: Context) -> tuple[list[str], list[str]]:
    """Queue this app's TensorBoard and model-server Deployments earlier revisions made.

    Returns the names of those Kueue now marked, and of those it has not marked yet.
    Before kueuepod41 these Deployments named no LocalQueue. In a team's namespace, where
    the control plane now runs Kueue v0.19.2's deployment and pod integrations with
    manageJobsWithoutQueueName, a pod of a Deployment whose template Kueue's deployment
    webhook did not mark is never gated: jobframework FindAncestorJobManagedByKueue counts
    its Deployment as managed (a registered JobType; manageJobsWithoutQueueName), so
    pod_webhook.go Default leaves it alone and it runs outside the team's quota. The
    webhook marks a template (`ANNOTATION_KUEUE_PARENT`, the managed label, the queue and
    priority labels) on a Deployment's create and update only (verbs create;update), so
    one made before the control plane's refresh stays unmarked until its next write.

    Each Deployment the charm owns (by its labels: `gpu-k8s.io/serving`, or component
    `tensorboard`, managed-by this app) whose template Kueue has not marked gets, by one
    merge patch (the team's grant: deployments patch), the queue and priority labels a
    fresh `serve` or `train` writes (oneshot.queued; a TensorBoard its job's priority
    where its JobSet says): on its pod template always, so that the rolled-out pods name
    the team's queue; on the Deployment itself only while Kueue allows it
    (oneshot.queue_labels_addable: no ready replica).
    Where the webhook runs, its answer is marked and the Deployment rolls out pods Kueue
    gates and admits in the team's queue. Where it does not yet (the teams are refreshed
    before the control plane, docs/how-to/upgrade.md), the patch changes nothing after its
    first and the caller tries again at its next hook. A marked Deployment (every one
    made since kueuepod41) is left alone: no request, no rollout.
    """
    wanted: list[tuple[Mapping[str, Any], str | None]] = []  # (Deployment, its job if TB)
    selector = manifests.selector(ctx.app)
    for found in kube.list("apps/v1", "Deployment", ctx.namespace, label_selector=selector):
        lbls = found["metadata"].get("labels") or {}
        if _kueue_marked(found):
            continue
        if lbls.get(serving.LABEL_SERVING):
            wanted.append((found, None))
        elif lbls.get(LABEL_COMPONENT) == COMPONENT_TENSORBOARD and lbls.get(LABEL_JOB):
            wanted.append((found, lbls[LABEL_JOB]))
    priorities: dict[str, str | None] = {}
    if any(job for _, job in wanted):  # a TensorBoard's priority is its job's
        training = manifests.selector(ctx.app, component=COMPONENT_TRAINING)
        for js in kube.list(JOBSET_API, "JobSet", ctx.namespace, label_selector=training):
            job_labels = js["metadata"]["labels"]
            priorities[job_labels.get(LABEL_JOB, "")] = job_labels.get(LABEL_PRIORITY)
    marked: list[str] = []
    waiting: list[str] = []
    for found, job in wanted:
        priority = serving.PRIORITY if job is None else priorities.get(job) or oneshot.PRIORITY
        added = oneshot.queued({}, ctx.queue, priority)
        patch: dict[str, Any] = {"spec": {"template": {"metadata": {"labels": added}}}}
        if oneshot.queue_labels_addable(found):
            patch["metadata"] = {"labels": added}
        name = found["metadata"]["name"]
        answer = kube.patch("apps/v1", "Deployment", name, patch, ctx.namespace)
        (marked if _kueue_marked(answer) else waiting).append(name)
    return marked, waiting


def _kueue_marked(deployment: Mapping[str, Any]) -> bool:
    template = deployment["spec"]["template"].get("metadata") or {}
    return ANNOTATION_KUEUE_PARENT in (template.get("annotations") or {})


def list_jobs(kube: Any, ctx: Context, now: Callable[[], float] = time.time) -> dict[str, str]:
    """One line per job of this application (one that only a scale's record holds included)."""
    training = manifests.selector(ctx.app, component=COMPONENT_TRAINING)
    all_jobsets = kube.list(JOBSET_API, "JobSet", ctx.namespace, label_selector=training)
    names = {js["metadata"]["name"] for js in all_jobsets}
    out: dict[str, str] = {}
    for found in _records(kube, ctx):
        job = found["metadata"]["labels"].get(LABEL_JOB, "")
        if job in names:  # its JobSet holds it (a scale is about to delete it, or stale)
            continue
        try:
            out[job] = scale_records.one_line(scale_records.Record.of(found), now())
        except ValueError:
            out[job] = "unreadable scale record"
    workloads = _workloads(kube, ctx)
    all_pods = kube.list("v1", "Pod", ctx.namespace, label_selector=training)
    for js in all_jobsets:
        name = js["metadata"]["name"]
        try:
            request = _request_of(js, name, ctx)
        except JobError:
            out[name] = "unreadable request annotation"
            continue
        pods = [p for p in all_pods if p["metadata"]["labels"].get(LABEL_JOB) == name]
        summary = _summary(kube, ctx, request, js, workloads, pods, now())
        out[name] = job_state.one_line(summary)
    return out


GLANCE_DETAILS = 3  # running jobs named in the status line (one log read each)
_GLANCE_ORDER = ("Running", "Restarting", *job_state.WAITING, "Admitted", "Failed")


# Every phase job_state.phase gives a JobSet that exists, for the `gpu_k8s_training_jobs` gauge
PHASES = (*_GLANCE_ORDER, "Succeeded")


@dataclasses.dataclass(frozen=True)
class Glance:
    """The jobs as one reconcile saw them: the status line and how many are in each phase."""

    line: str
    phases: Mapping[str, int]

    def gauges(self) -> list[Gauge]:
        """One `gpu_k8s_training_jobs{phase=...}` sample per phase (0 included)."""
        return [
            Gauge(
                "gpu_k8s_training_jobs",
                "Training jobs (JobSets) of this application, by phase.",
                self.phases.get(name, 0),
                {"phase": name.lower()},
            )
            for name in PHASES
        ]


def drop_stale_records(
    kube: Any, ctx: Context, jobsets: list[dict], now: Callable[[], float] = time.time
) -> list[str]:
    """Delete the records (scale_records) that a JobSet of their job holds again; their jobs.

    Such a record is stale once no scale holds it (a scale's action that ended between
    making the new JobSet and deleting the record, or an earlier revision's). A record
    without a JobSet is its job until the operator scales, trains or stops it.
    """
    names = {js["metadata"]["name"] for js in jobsets}
    dropped = []
    for found in _records(kube, ctx) if names else []:
        job = found["metadata"]["labels"].get(LABEL_JOB, "")
        try:
            held = scale_records.Record.of(found).held(now())
        except ValueError:
            held = False
        if job in names and not held:
            kube.delete("v1", "ConfigMap", found["metadata"]["name"], ctx.namespace)
            dropped.append(job)
    return dropped


def at_a_glance(kube: Any, ctx: Context, now: Callable[[], float] = time.time) -> Glance:
    """The jobs on one line for `juju status`: `2 running (mnist 45% ETA 12m), 1 queued`.

    Succeeded jobs are left out of the line (JobSet deletes them after `job-ttl`) but
    counted; the first running jobs carry their progress from the chief's log. Stale
    scale records are deleted on the way (drop_stale_records).
    """
    training = manifests.selector(ctx.app, component=COMPONENT_TRAINING)
    all_jobsets = kube.list(JOBSET_API, "JobSet", ctx.namespace, label_selector=training)
    if not all_jobsets:
        return Glance("", {})
    for job in drop_stale_records(kube, ctx, all_jobsets, now):
        logger.info("deleted %s: its JobSet holds the job again", scale_records.name(job))
    workloads = _workloads(kube, ctx)
    all_pods = kube.list("v1", "Pod", ctx.namespace, label_selector=training)
    by_phase: dict[str, list[str]] = {}
    for js in sorted(all_jobsets, key=lambda j: j["metadata"]["name"]):
        name = js["metadata"]["name"]
        pods = [p for p in all_pods if p["metadata"]["labels"].get(LABEL_JOB) == name]
        phase = job_state.phase(js, _workload_of(js, workloads), pods)
        detail = name
        if phase == "Running" and len(by_phase.get("Running", [])) < GLANCE_DETAILS:
            try:
                request = _request_of(js, name, ctx)
            except JobError:
                request = None
            progress = parse_progress(_chief_log(kube, ctx, request, pods)) if request else None
            detail = progress_phrase(name, progress)
        by_phase.setdefault(phase, []).append(detail)
    parts = []
    for phase in _GLANCE_ORDER:
        names = by_phase.get(phase) or []
        if not names:
            continue
        text = f"{len(names)} {phase.lower()}"
        if phase == "Running":
            text += f" ({', '.join(names[:GLANCE_DETAILS])})"
        parts.append(text)
    return Glance(", ".join(parts), {phase: len(names) for phase, names in by_phase.items()})


def logs(kube: Any, ctx: Context, job: str, lines: int, role: str = "all", index: int = -1) -> str:
    """The last `lines` lines of every replica, each prefixed with `[role-index]`.

    `role` (and `index`) pick one role (or replica), as `arena logs -i` does: a 64-worker
    job is otherwise 64 log reads into one result.

    At most LOG_REPLICAS replicas are read (one request each, the API server has no log
    read for many pods): the chief's, those that need a look, then the first others; a
    last line names the rest (job_state.replicas_to_read).

    A container that restarted also shows the end of its previous instance's log (where a
    crash's traceback is), and how each instance ended (exit code, OOMKilled). A replica
    whose pod is gone points at its copy on the shared volume (the launcher writes every
    replica's output to `jobs/<job>/pod-logs/<role>-<index>.log`).
    """
    request = load_request(kube, ctx, job)
    replicas = request.replicas()
    if role != "all" and role not in replicas:
        raise JobError(f"job {job!r} has no {role}: its roles are {', '.join(replicas)}")
    if role != "all" and index >= replicas[role]:
        raise JobError(
            f"job {job!r} has {replicas[role]} {role} replicas (index 0 to {replicas[role] - 1})"
        )
    wanted = [
        (r, i)
        for r, count in replicas.items()
        for i in range(count)
        if role in ("all", r) and (index < 0 or i == index)
    ]
    pods = _training_pods(kube, ctx, job)
    wanted, not_shown = job_state.replicas_to_read(wanted, pods, request.chief(), LOG_REPLICAS)
    out: list[str] = []
    for r, i in wanted:
        prefix = f"[{r}-{i}]"
        pod = job_state.find_pod(pods, r, i)
        if pod is None:
            kept = f"jobs/{job}/pod-logs/{r}-{i}.log"
            out.append(f"{prefix} (no pod; its output is kept on the shared volume in {kept})")
            continue
        history, restarted = job_state.container_history(pod)
        if history:
            out.append(f"{prefix} ({history})")
        if restarted:
            text = _pod_log(kube, ctx, pod, lines, previous=True)
            out.extend(f"{prefix} previous: {line}" for line in text.splitlines())
        text = _pod_log(kube, ctx, pod, lines)
        out.extend(f"{prefix} {line}" for line in text.splitlines() or ["(empty log)"])
    if not_shown:
        out.append(not_shown)
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
            api_version, kind, ctx.namespace, label_selector=manifests.selector(ctx.app, job)
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
        data = (
            f"kept on the shared volume in jobs/{job}: checkpoints, TensorBoard logs, every "
            "replica's output in pod-logs/ (purge=true removes it)"
        )
        return {"job": job, "deleted-objects": str(deleted), "data": data}
    if not _wait_gone(kube, ctx, job, timeout, sleep=sleep, clock=clock):
        log(f"pods of {job} are still terminating; purging anyway")
    kube.apply(manifests.purge_job(job, ctx), field_manager=ctx.app)
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
    from charms.gpu_k8s.v0.system import poll_until

    def gone() -> bool | None:
        return True if not _training_pods(kube, ctx, job) else None

    return bool(poll_until(gone, timeout, poll=poll, clock=clock, sleep=sleep))


# The least `scale` waits for the old pods: they save on SIGTERM for up to their grace
# period, then kubelet kills them, reports it and the pod objects go (literals GRACE_SECONDS);
# looked for every OLD_PODS_POLL seconds (one pod list each)
OLD_PODS_SECONDS = GRACE_SECONDS + 30
OLD_PODS_POLL = 5.0


def _scale_record(kube: Any, ctx: Context, job: str) -> dict | None:
    """The job's record (scale_records) when a scale left one (of this application only)."""
    found = kube.get("v1", "ConfigMap", scale_records.name(job), ctx.namespace)
    labels = ((found or {}).get("metadata") or {}).get("labels") or {}
    return found if labels.get(LABEL_MANAGED_BY) == ctx.app else None


def _read_record(found: dict | None, job: str) -> scale_records.Record | None:
    if found is None:
        return None
    try:
        return scale_records.Record.of(found)
    except ValueError as e:
        raise JobError(f"job {job!r} has an unreadable scale record ({e})") from None


def _retry_scale(job: str, workers: int) -> str:
    return (
        f"run scale job={job} workers={workers} again in a minute (it waits for them, then "
        "relaunches the job from its last checkpoint)"
    )


def _hold(
    kube: Any, ctx: Context, scaled: TrainRequest, found: dict | None, words: str, until: float
) -> str:
    """Write the job's record, leased to `until`; its resourceVersion.

    A new record is created (refused 409 when another scale made one meanwhile); an old
    one (its scale failed, its lease ended, or stale) is taken over by a patch carrying the
    resourceVersion read (refused 409 when another scale took it meanwhile).

    Raises:
        JobError: another scale holds the job.
    """
    from charms.gpu_k8s.v0.kubeclient import KubeError

    job = scaled.job
    record = scale_records.manifest(scaled, ctx.namespace, ctx.app, words, until)
    try:
        if found is None:
            return kube.create(record)["metadata"]["resourceVersion"]
        meta = record["metadata"]
        patch = {
            "metadata": {
                "resourceVersion": found["metadata"]["resourceVersion"],
                "labels": meta["labels"],
                "annotations": meta["annotations"],
            }
        }
        taken = kube.patch("v1", "ConfigMap", meta["name"], patch, ctx.namespace)
        return taken["metadata"]["resourceVersion"]
    except KubeError as e:
        if e.status != 409:
            raise
    other = _read_record(_scale_record(kube, ctx, job), job)
    if other is None:  # taken and let go meanwhile
        raise JobError(f"job {job!r} was being scaled by another scale action: run scale again")
    raise JobError(scale_records.refused_while_held(job, other))


def _say(kube: Any, ctx: Context, job: str, version: str, words: str) -> None:
    """Put a failed scale's words on its record and end its lease (if it is still its own)."""
    from charms.gpu_k8s.v0.kubeclient import KubeError

    annotations = {scale_records.ANNOTATION_STATE: words, scale_records.ANNOTATION_UNTIL: None}
    patch = {"metadata": {"resourceVersion": version, "annotations": annotations}}
    try:
        kube.patch("v1", "ConfigMap", scale_records.name(job), patch, ctx.namespace)
    except KubeError as e:  # stopped (404) or taken over (409) meanwhile: not its words
        logger.warning("could not record how the scale of %s ended: %s", job, e.message)


def _still_held(kube: Any, ctx: Context, job: str, version: str) -> bool:
    """Whether the record is still the one this scale wrote (`stop` deletes it)."""
    found = _scale_record(kube, ctx, job)
    return found is not None and found["metadata"].get("resourceVersion") == version


def scale(
    kube: Any,
    ctx: Context,
    job: str,
    workers: int,
    timeout: float,
    code: Mapping[str, str],
    *,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    now: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Relaunch a job with `workers` workers; it resumes from the last checkpoint.

    A JobSet's replicated Jobs are immutable (JobSet v0.12.0 webhook ValidateUpdate), so
    the JobSet is deleted (its code ConfigMap and TensorBoard with it), its pods awaited
    until gone, and the job made again with the new size: Kueue admits it when it fits,
    like any job. Its parameters are kept in its record (scale_records) meanwhile, so that
    a scale whose old pods outlive the wait (a pod saves for up to its grace period) loses
    nothing: it says to run scale again, which relaunches the job from the record. The
    record is leased to this scale (`now`: the wall clock) until it could have ended: a
    second scale of the job is refused meanwhile, and a `stop` meanwhile wins (nothing is
    relaunched).

    Raises:
        JobError: no such job, it already finished, another scale holds it, the new size
            could never run here, or the old pods are still there (the record kept: scale
            again).
    """
    from charms.gpu_k8s.v0.kubeclient import KubeError

    js = _jobset(kube, ctx, job)
    found = _scale_record(kube, ctx, job)
    record = _read_record(found, job)
    if record is not None and record.held(now()):
        raise JobError(scale_records.refused_while_held(job, record))
    request = _request_of(js or found, job, ctx)
    if js is not None:
        pods = _training_pods(kube, ctx, job)
        workload = _workload_of(js, _workloads(kube, ctx))
        if job_state.phase(js, workload, pods) in ("Succeeded", "Failed"):
            raise JobError(f"job {job!r} has finished: train a new job instead of scaling it")
        if workers == request.workers:
            return {"job": job, "workers": str(workers), "changed": "false"}
    scaled = request.model_copy(update={"workers": workers})  # ScaleParams checked it
    _check_fits(kube, ctx, scaled, kube.list("v1", "Node"))
    wait = max(timeout, OLD_PODS_SECONDS)
    start = now()
    until = start + wait + scale_records.MARGIN_SECONDS
    words = scale_records.under_way(workers, start, until)
    version = _hold(kube, ctx, scaled, found, words, until)
    try:
        if js is not None:
            log(f"stopping {request.workers} workers of {job} (they resume from its checkpoint)")
            kube.delete(JOBSET_API, "JobSet", job, ctx.namespace)
        if not _wait_gone(kube, ctx, job, wait, sleep=sleep, clock=clock, poll=OLD_PODS_POLL):
            _say(kube, ctx, job, version, scale_records.old_pods_left(job, workers, now(), wait))
            raise JobError(
                f"old pods of {job} are still terminating after {wait:.0f} s; the job's "
                f"parameters are kept: {_retry_scale(job, workers)}"
            )
        if not _still_held(kube, ctx, job, version):
            raise JobError(
                f"job {job!r} was stopped while this scale waited for its old pods (or "
                "another scale took it over): nothing was relaunched"
            )
        _relaunch(kube, ctx, request, scaled, code, version, now)
    except KubeError as e:
        _say(kube, ctx, job, version, scale_records.half_way(job, workers, now(), e.message))
        raise
    kube.delete("v1", "ConfigMap", scale_records.name(job), ctx.namespace)
    log(f"relaunched {job} with {workers} workers")
    state, why = queue_answer(kube, ctx, job, sleep=sleep, clock=clock)
    if state in (*job_state.WAITING, "Unknown"):
        log(f"{state.lower()}: {why}")
        return {
            "job": job,
            "workers": str(workers),
            "changed": "true",
            "state": f"{state.lower()}: {why}",
            "resumed-from-step": "not yet: queued",
            "pods-running": "not yet: queued (job-status shows when it is admitted)",
        }
    pods, ready = wait_for_pods(kube, ctx, scaled, timeout, log=log, sleep=sleep, clock=clock)
    resumed = _wait_resumed(
        kube, ctx, scaled, pods, timeout if ready else 0, sleep=sleep, clock=clock
    )
    return {
        "job": job,
        "workers": str(workers),
        "changed": "true",
        "state": "running" if ready else "admitted",
        "resumed-from-step": "unknown (not reported yet)" if resumed is None else str(resumed),
        "pods-running": "all" if ready else "not yet: see job-status",
    }


def _relaunch(
    kube: Any,
    ctx: Context,
    old: TrainRequest,
    new: TrainRequest,
    code: Mapping[str, str],
    version: str,
    now: Callable[[], float],
) -> None:
    """Make the job again at its new size; when refused, make it again as it was (N9).

    The old JobSet is already gone (its replicated Jobs are immutable), so a refusal of
    the new objects would otherwise lose the job and its request: it is restored (and its
    record deleted), and the operator told to scale again; if even that is refused, the
    record is kept, saying so, and the operator told to scale again once it is fixed.

    Raises:
        JobError: the new size was refused (saying whether the old one was restored).
    """
    try:
        _apply_all(kube, ctx, manifests.manifests(new, ctx, code))
        return
    except RefusedError as e:
        refused = e.refusal
    job = new.job
    try:
        _apply_all(kube, ctx, manifests.manifests(old, ctx, code))
    except RefusedError:
        _say(kube, ctx, job, version, scale_records.not_restored(job, new.workers, now(), refused))
        raise JobError(
            f"scale to {new.workers} workers failed: {refused}; job {job} is stopped and "
            f"could not be restored either; its checkpoints are kept in jobs/{job} and its "
            f"parameters with them: run scale job={job} workers={new.workers} again once "
            "that is fixed (it relaunches the job from its last checkpoint)"
        ) from None
    kube.delete("v1", "ConfigMap", scale_records.name(job), ctx.namespace)
    raise JobError(
        f"scale to {new.workers} workers failed: {refused}; job {job} was restored with "
        f"{old.workers} workers (it resumes from its last checkpoint): run scale again "
        "once that is fixed"
    )


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
    from charms.gpu_k8s.v0.system import poll_until

    def resumed() -> int | None:
        return resumed_step(_chief_log(kube, ctx, request, pods))

    return poll_until(resumed, timeout, poll=poll, clock=clock, sleep=sleep)
