# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Where a job stands, read off the objects the API server returns (no ops, no I/O).

Three sources, in this order in the file: the job's pods (running per role, a pod stuck on
its image or in a crash loop, a container's restarts and exits, a Deployment's newest
pod); its Kueue Workload (queued, admitted, preempted, requeued, and where it stands in
the team's queue); its JobSet's conditions. `phase` joins them into one word and
`summarise`/`one_line` into what `job-status` and `list-jobs` answer. `training.py`
reads the objects; `progress.py` reads the chief's progress report.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from typing import Any

import oneshot
import scale_records
from literals import LABEL_COMPLETION_INDEX, LABEL_ROLE
from manifests import tensorboard_url
from params import TrainRequest
from progress import eta_seconds, evaluation_phrase, format_duration, sparkline

from charms.gpu_k8s.v0 import kube_objects
from charms.gpu_k8s.v0.kube_objects import pod_gpus


def _active(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _pod_ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    conds = status.get("conditions")
    if not conds:
        return True
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def running_counts(request: TrainRequest, pods: Iterable[dict]) -> dict[str, int]:
    """Running (ready) training pods per role."""
    counts = dict.fromkeys(request.replicas(), 0)
    for pod in pods:
        role = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE)
        if role in counts and _pod_ready(pod):
            counts[role] += 1
    return counts


def pod_problem(pods: Iterable[dict]) -> str | None:
    """A pod failure that will not clear by waiting (bad image, crash loop), or None."""
    found = oneshot.stuck_pod(pods)
    if found is None:
        return None
    name, reason, message = found
    return f"pod {name}: {reason} {message}".strip()


# Kueue v0.19.2's pod integration gates every pod of the team's namespace until it admits
# it within the team's quota (pkg/controller/jobs/pod/constants SchedulingGateName; the
# control plane's kueue.configure), TensorBoard's and the model servers' included.
KUEUE_GATE = "kueue.x-k8s.io/admission"
QUEUED = "queued (Kueue admits it when the team's quota has room)"


def tensorboard_state(pods: Iterable[dict]) -> str:
    """How a job's TensorBoard pod is doing (server_state)."""
    return server_state(pods, "tensorboard-image", "tensorboard")


def server_state(pods: Iterable[dict], option: str, command: str) -> str:
    """How a Deployment's newest pod is doing: `running`, `queued (...)`, `starting (...)`...

    Or `failed: ...`.

    A container that cannot start (the image has no `command`: containerd reports the
    runc exec error as the last termination, reason StartError, and kubelet then backs
    off with CrashLoopBackOff) or whose image cannot be pulled is `failed`, with
    kubelet's reason and message and the config `option` that names the image.
    """
    pods = [p for p in pods if _active(p)]
    if not pods:
        return "starting (no pod yet)"
    pod = max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
    if _pod_ready(pod) and (pod.get("status") or {}).get("phase") == "Running":
        return "running"
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    if any(g.get("name") == KUEUE_GATE for g in gates):
        return QUEUED
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if waiting.get("reason") in oneshot.STUCK:
            detail = last.get("message") or waiting.get("message") or ""
            reason = waiting["reason"] + (f" after {last['reason']}" if last.get("reason") else "")
            return (
                f"failed: {reason}: {detail}".rstrip(": ")
                + f"; check the {option} config (the image must provide `{command}`)"
            )
        if waiting.get("reason"):
            return f"starting ({waiting['reason']})"
    return f"starting ({(pod.get('status') or {}).get('phase', 'Pending')})"


def pod_index(pod: dict) -> int:
    """The completion index of an Indexed Job's pod (-1 when unknown)."""
    meta = pod.get("metadata") or {}
    raw = (meta.get("labels") or {}).get(LABEL_COMPLETION_INDEX)
    if raw is None:
        raw = (meta.get("annotations") or {}).get(LABEL_COMPLETION_INDEX)
    if raw is None:
        return -1
    try:
        return int(raw)
    except (TypeError, ValueError):
        return -1


def _termination(state: Mapping[str, Any]) -> str:
    terminated = state.get("terminated") or {}
    if not terminated:
        return ""
    reason = terminated.get("reason") or ""
    text = f"exit code {terminated.get('exitCode', '?')}"
    if reason and reason not in ("Error", "Completed"):
        text += f" ({reason})"  # OOMKilled, ContainerCannotRun, DeadlineExceeded, ...
    return text


def container_history(pod: Mapping[str, Any]) -> tuple[str | None, bool]:
    """What happened to the pod's container: (a line for `logs`, whether it restarted).

    From `status.containerStatuses[0]`: `restartCount`, `lastState.terminated` (the
    previous instance's exit) and `state.terminated` (the current one's, for a container
    that will not restart). None when it simply runs.
    """
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if not statuses:
        return None, False
    status = statuses[0]
    restarts = int(status.get("restartCount") or 0)
    parts = []
    if restarts:
        last = _termination(status.get("lastState") or {})
        parts.append(f"restarted {restarts} time{'s' if restarts != 1 else ''}")
        if last:
            parts.append(f"previous container ended with {last}")
    current = _termination(status.get("state") or {})
    if current:
        parts.append(f"container ended with {current}")
    return ("; ".join(parts) or None), restarts > 0


def find_pod(pods: Iterable[dict], role: str, index: int) -> dict | None:
    """The newest active pod of `role` with completion index `index` (any when none active)."""
    matching = [
        p
        for p in pods
        if ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE) == role
        and pod_index(p) == index
    ]
    matching.sort(key=lambda p: (_active(p), p["metadata"].get("creationTimestamp", "")))
    return matching[-1] if matching else None


def _needs_a_look(pod: dict | None) -> bool:
    """No pod, a container that restarted or ended, or a pod that does not run."""
    if pod is None:
        return True
    history, _ = container_history(pod)
    return history is not None or not _pod_ready(pod)


def _ranges(indexes: list[int]) -> str:
    """`0-3, 7`: sorted indexes as runs."""
    runs: list[list[int]] = []
    for i in sorted(indexes):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def replicas_to_read(
    wanted: list[tuple[str, int]], pods: Iterable[dict], chief: tuple[str, int], limit: int
) -> tuple[list[tuple[str, int]], str | None]:
    """The replicas whose logs `logs` reads (at most `limit`), and a line for the others.

    The API server serves one pod's log per request, so reading every replica of a
    256-worker job is 256 requests and a result Juju may refuse: the chief's log first
    (progress), then those that need a look (no pod, restarted, ended, not running), then
    the rest in order, `limit` in all. Returned in role and index order.
    """
    pods = list(pods)
    if len(wanted) <= limit:
        return wanted, None
    ranked = sorted(
        wanted,
        key=lambda ri: (ri != chief, not _needs_a_look(find_pod(pods, *ri)), wanted.index(ri)),
    )
    shown = set(ranked[:limit])
    others: dict[str, list[int]] = {}
    for role, index in wanted:
        if (role, index) not in shown:
            others.setdefault(role, []).append(index)
    listed = "; ".join(f"{role} {_ranges(indexes)}" for role, indexes in others.items())
    line = (
        f"({len(wanted) - limit} of {len(wanted)} replicas not shown: {listed}; "
        "logs role=<role> index=<i> shows one)"
    )
    return [ri for ri in wanted if ri in shown], line


# The states in which a job's Workload waits for Kueue to admit it (again).
WAITING = ("Queued", "Preempted", "Requeued", "Evicted")
# Outside the namespaces labelled gpu-k8s.io/kueue=managed a JobSet is neither suspended
# nor queued: the control plane scopes Kueue's webhooks to that label (its
# kueue.narrow_webhooks), and Kueue's reconciler ignores namespaces outside its
# managedJobsNamespaceSelector (v0.19: ManagedJobsNamespaceSelectorAlwaysRespected, GA
# and locked; jobframework/reconciler.go). Such a job runs at once, outside the team's
# queue and quota.
UNQUEUED = (
    "Kueue does not manage this namespace, so the job runs outside the team's queue and "
    "quota: the control plane labels it gpu-k8s.io/kueue=managed for a kube-api relation "
    "that asks for queues"
)


def unqueued(js: Mapping[str, Any] | None, workload: Mapping[str, Any] | None) -> bool:
    """Whether Kueue left the job alone (no Workload, not suspended): see UNQUEUED."""
    return js is not None and workload is None and not (js.get("spec") or {}).get("suspend")


# Kueue v0.19.2 pkg/scheduler/preemption/preemption.go preemptionMessage: "Preempted to
# accommodate a workload (UID: <uid>, JobUID: <uid>) due to <reason>; preemptor path:
# <path>; preemptee path: <path>" (the JobUID is the preemptor's JobSet's uid).
_PREEMPTION = re.compile(
    r"Preempted to accommodate a workload \(UID: [^,]*, JobUID: ([^)]*)\) due to ([^;]*)"
)


def preemption_phrase(message: str, workloads: Iterable[Mapping[str, Any]] = ()) -> str:
    """Kueue's preemption message in words: which job took the quota, and why.

    The preemptor is named when its Workload is among `workloads` (this team's), else it
    is another team's job; a message of another form is kept as it is.
    """
    found = _PREEMPTION.search(message)
    if not found:
        return f"Preempted: {message}"
    job_uid, why = found.groups()
    by = next(
        (
            owners[0].get("name")
            for w in workloads
            if ((w.get("metadata") or {}).get("labels") or {}).get("kueue.x-k8s.io/job-uid")
            == job_uid
            and (owners := (w.get("metadata") or {}).get("ownerReferences") or [])
        ),
        None,
    )
    who = f"job {by}" if by else "a job of another team"
    return f"preempted by {who} ({why}); it waits for quota and resumes from its checkpoint"


def queue_state(
    workload: Mapping[str, Any] | None, workloads: Iterable[Mapping[str, Any]] = ()
) -> tuple[str, str]:
    """(state, why) of a job's Kueue Workload, from its conditions.

    `workloads`: the team's Workloads, to name the job that preempted this one.

    Kueue v0.19.2 (apis/kueue/v1beta2/workload_types.go; pkg/workload/workload.go,
    finish/finish.go; jobframework/reconciler.go) sets them in this order:
    - `Finished` True once the job ended; QuotaReserved and Admitted stay True: `Finished`.
    - `Evicted` True while Admitted is still True (Kueue clears the reservation only once
      the job stopped), and it stays True while the Workload waits again, until a new
      admission sets it False. By its reason: `Preempted` (another workload needed the
      quota), `Requeued` (PodsReadyTimeout: its pods did not all run within
      pods-ready-timeout, or were not all running again within waitForPodsReady's
      recoveryTimeout after one failed: one message for both), `Evicted` (any other:
      Deactivated, ClusterQueueStopped, ...).
    - `Admitted` True: admitted.
    - Otherwise `Queued`, why being Kueue's QuotaReserved message.
    `Unknown` before Kueue made the Workload.
    """
    if workload is None:
        return "Unknown", "Kueue has not picked the job up yet"
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}

    def true(kind: str) -> dict | None:
        cond = conditions.get(kind) or {}
        return cond if cond.get("status") == "True" else None

    if finished := true("Finished"):
        return "Finished", finished.get("reason", "")
    if evicted := true("Evicted"):
        reason, message = evicted.get("reason", ""), evicted.get("message", "")
        if reason == "Preempted":
            return "Preempted", preemption_phrase(message, workloads)
        if reason == "PodsReadyTimeout":
            return "Requeued", (
                "its pods did not all run within pods-ready-timeout (or, after one failed, "
                "within Kueue's recovery timeout), so Kueue released its quota and requeued "
                f"it ({message})"
            )
        return "Evicted", f"{reason}: {message}"
    if true("Admitted"):
        return "Admitted", ""
    reserved = conditions.get("QuotaReserved") or {}
    return "Queued", reserved.get("message") or "waiting for quota"


def queue_reason(workload: Mapping[str, Any] | None) -> str:
    """Kueue's message on a Workload it could not admit yet ("" before it evaluated it)."""
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "QuotaReserved" and cond.get("status") == "False":
            return cond.get("message") or ""
    return ""


def queue_position(
    workload: Mapping[str, Any], workloads: Iterable[Mapping[str, Any]], now: str = ""
) -> int:
    """1 + the waiting workloads of the same queue Kueue would admit first.

    BestEffortFIFO orders a queue by priority (higher first), then by its queue-order
    timestamp, which is the creation time except for a workload evicted by
    PodsReadyTimeout: with `requeuingStrategy.timestamp: Eviction` (kubernetes-control-
    plane's Kueue configuration) that one queues from its eviction (kueue v0.19.2
    pkg/workload/workload.go GetQueueOrderTimestamp). A workload waiting out its requeue
    backoff (`backing_off`) is not a candidate yet. This charm's LocalQueue feeds one
    ClusterQueue.
    """
    now = now or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def key(w: Mapping[str, Any]) -> tuple[int, str]:
        priority = int((w.get("spec") or {}).get("priority") or 0)
        stamp = (w.get("metadata") or {}).get("creationTimestamp", "")
        for cond in (w.get("status") or {}).get("conditions") or []:
            if (cond.get("type"), cond.get("status"), cond.get("reason")) == (
                "Evicted",
                "True",
                "PodsReadyTimeout",
            ):
                stamp = cond.get("lastTransitionTime") or stamp
        return (-priority, stamp)

    mine = key(workload)
    ahead = [
        w
        for w in workloads
        if queue_state(w)[0] in WAITING
        and not backing_off(w, now)
        and w["metadata"]["name"] != workload["metadata"]["name"]
        and key(w) < mine
    ]
    return len(ahead) + 1


def _requeue_state(workload: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((workload or {}).get("status") or {}).get("requeueState") or {}


def backing_off(workload: Mapping[str, Any] | None, now: str) -> bool:
    """Whether Kueue holds the Workload out of its queue until after `now` (RFC 3339).

    Kueue v0.19.2 requeues a job its PodsReadyTimeout evicted only once
    `status.requeueState.requeueAt` has passed (core/workload_controller.go Reconcile,
    "Waiting for backoff to finish"), then clears requeueAt.
    """
    return _requeue_state(workload).get("requeueAt", "") > now


def requeues(workload: Mapping[str, Any] | None, now: float) -> str:
    """How often Kueue requeued the job and, while it waits out the backoff, until when.

    `status.requeueState` (kueue v0.19.2 apis/kueue/v1beta2/workload_types.go
    RequeueState): `count`, the PodsReadyTimeout evictions of this Workload, kept across
    admissions for as long as the job exists (pkg/workload/workload.go
    UpdateRequeueState; only a deactivation clears it), and `requeueAt`, the end of the
    backoff after the last one: waitForPodsReady.requeuingStrategy's base doubled per
    requeue, up to its cap (the control plane's kueue.BACKOFF_MAX_SECONDS). `now`: the
    wall clock. "" for a job never requeued.
    """
    state = _requeue_state(workload)
    count = int(state.get("count") or 0)
    if not count:
        return ""
    text = f"{count} (its pods were not all ready in time)"
    at = state.get("requeueAt")
    if not at:
        return text
    if backing_off(workload, scale_records.stamp(now)):
        left = format_duration((scale_records.seconds(at) or now) - now)
        return (
            f"{text}; Kueue holds it out of the queue until {at} ({left} from now), its "
            "backoff doubling with each requeue"
        )
    return f"{text}; Kueue's backoff ended at {at}: it is queued again any moment"


# Who took a pod back, from its DisruptionTarget condition's reason (set until the pod is
# gone): kubernetes pkg/registry/core/pod/storage/eviction.go (the Eviction API: a drain,
# the GPU watcher's eviction), pkg/controller/tainteviction/taint_eviction.go (a NoExecute
# taint: the GPU quarantine's), pkg/scheduler (preemption), pkg/kubelet (node pressure).
DISRUPTIONS = {
    "EvictionByEvictionAPI": "evicted",
    "DeletionByTaintManager": "NoExecute taint",
    "PreemptionByScheduler": "preempted by the scheduler",
    "TerminationByKubelet": "node pressure",
}
UNCOUNTED = (
    "not counted toward max-restarts: a drain, a GPU quarantine or an eviction took the "
    "job's pods back"
)


def leaving(pods: Iterable[dict]) -> dict[str, str]:
    """{node: reason} of the pods taken back now (DisruptionTarget True, not yet gone)."""
    found: dict[str, str] = {}
    for pod in pods:
        cond = _true(pod, "DisruptionTarget")
        node = (pod.get("spec") or {}).get("nodeName")
        if cond and node:
            found.setdefault(node, str(cond.get("reason") or ""))
    return found


def moves(js: Mapping[str, Any] | None, away: Mapping[str, str], faulty: set[str]) -> str:
    """`job-status`'s `moves`: how often the job moved off a node for no fault of its own.

    Two counts, each move in one only:
    - JobSet's gang restarts not counted toward max-restarts (v0.12.0
      api/jobset/v1alpha2/jobset_types.go JobSetStatus `restarts`, every restart, less
      `restartsCountTowardsMax`): with this charm's failure policy only a stop on a SIGTERM
      restarts uncounted (manifests.jobset `stoppedNotCounted`): a drain, or a GPU
      quarantine of a node the gang shared with healthy ones;
    - the control plane's record on the JobSet of each GPU quarantine that took pods of
      the job (kube_objects.MOVES_ANNOTATION, its leader's quarantine hook): its `count`
      has the moves of a gang whose every pod was on the node, which each Job replaces
      one by one and JobSet never restarts, and its newest entries say which node, when
      the fault began and what it was. The job's team may edit the record: it only
      misleads this answer.
    `away` (`leaving`): the nodes the pods taken back leave now, and why (a pod's
    DisruptionTarget goes with the pod); `faulty`: those with a quarantined GPU. "" when
    there is nothing to say.
    """
    status = (js or {}).get("status") or {}
    uncounted = int(status.get("restarts") or 0) - int(status.get("restartsCountTowardsMax") or 0)
    recorded, last = kube_objects.moves_of(js)
    total = max(uncounted, 0) + recorded
    where = "".join(
        f"; off node {e['node']} after a GPU fault at {e['at']}: {e['reason']}" for e in last
    )
    if not away:
        return f"{total} ({UNCOUNTED}){where}" if total > 0 or last else ""
    now = "; ".join(
        f"off node {node}: {'GPU fault' if node in faulty else DISRUPTIONS.get(why, why)}"
        for node, why in sorted(away.items())
    )
    return f"{total} so far, now {now}{where}"


def _true(obj: Mapping[str, Any] | None, kind: str) -> dict | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def phase(
    js: Mapping[str, Any] | None, workload: Mapping[str, Any] | None, pods: Iterable[dict]
) -> str:
    """Succeeded, Failed, Queued, Preempted, Restarting, Running, Admitted or Stopped."""
    if js is None:
        return "Stopped"
    if _true(js, "Completed"):
        return "Succeeded"
    if _true(js, "Failed"):
        return "Failed"
    state, _ = queue_state(workload)
    if state in WAITING:
        return state
    if (js.get("spec") or {}).get("suspend"):
        return "Queued"
    if _true(js, "RestartingJobSet"):
        return "Restarting"
    if any(((p.get("status") or {}).get("phase") == "Running") for p in pods):
        return "Running"
    return "Admitted"


def summarise(
    request: TrainRequest,
    js: Mapping[str, Any] | None,
    workload: Mapping[str, Any] | None,
    pods: list[dict],
    progress: Mapping[str, Any] | None,
    namespace: str,
    *,
    position: int | None = None,
    workloads: Iterable[Mapping[str, Any]] = (),
    now: float,
    faulty: set[str] | frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The status of one job as action results (dashed keys, printable values).

    `now`: the wall clock, for a requeued job's backoff (`requeues`); `faulty`: the nodes
    its pods leave (`leaving`) that have a quarantined GPU (kube_objects.gpu_fault).
    """
    active = [p for p in pods if _active(p)]
    counts = running_counts(request, pods)
    status = (js or {}).get("status") or {}
    spec = (js or {}).get("spec") or {}
    maximum = (spec.get("failurePolicy") or {}).get("maxRestarts", 0)
    current = phase(js, workload, pods)
    out: dict[str, Any] = {
        "job": request.job,
        "phase": current,
        "strategy": request.strategy,
        "priority": request.priority,
        "restarts": f"{status.get('restartsCountTowardsMax', 0)} of {maximum}",
        "pods-ready": {r: f"{counts[r]}/{n}" for r, n in request.replicas().items()},
        "gpus-held": str(sum(pod_gpus(p) for p in active)),
        "tensorboard-url": tensorboard_url(request.job, namespace),
    }
    if current in WAITING:
        _, why = queue_state(workload, workloads)
        out["queue"] = f"position {position}: {why}" if position else why
    elif unqueued(js, workload):
        out["queue"] = f"none: {UNQUEUED}"
    if requeued := requeues(workload, now):
        out["requeues"] = requeued
    if moved := moves(js, leaving(pods), set(faulty)):
        out["moves"] = moved
    if progress:
        loss = progress.get("loss")
        out["step"] = f"{progress.get('step', '?')}/{progress.get('steps', request.steps)}"
        out["loss"] = f"{loss:.4f}" if isinstance(loss, int | float) else "unknown"
        out["examples-per-sec"] = str(progress.get("examples_per_sec", "unknown"))
        out["eta"] = format_duration(eta_seconds(progress))
        out["loss-trend"] = sparkline(progress.get("loss_history") or [])
        evaluation = evaluation_phrase(progress)
        if evaluation:
            out["eval"] = evaluation
        if progress.get("export"):
            out["export"] = str(progress["export"])
    else:
        out["step"] = f"unknown/{request.steps}"
        out["progress"] = "no progress report yet in the chief's log"
    return out


def one_line(summary: Mapping[str, Any]) -> str:
    """A job's summary on one line, for `list-jobs`."""
    ready = " ".join(f"{r} {c}" for r, c in summary["pods-ready"].items())
    parts = [summary["phase"], ready, f"{summary['gpus-held']} GPU", f"step {summary['step']}"]
    if "queue" in summary:
        parts.insert(1, summary["queue"])
    if "loss" in summary:
        parts.append(f"loss {summary['loss']} {summary.get('loss-trend', '')}".rstrip())
        parts.append(f"eta {summary['eta']}")
    return ", ".join(parts)
