# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""This application as a Kueue team: its LocalQueue; the numbers of its ClusterQueue.

No ops here. The control plane installs Kueue and keeps the cluster-wide objects (the
cohort `gpu-k8s`, a ResourceFlavor `cpu` and one per GPU model, labelled
`app.kubernetes.io/managed-by: kubernetes-control-plane`) and this team's ClusterQueue
`team-<namespace>` in the cohort, admitting from this namespace only (its kueue.py). Its
nominal quota is the team's guarantee, `cpu-quota`, `memory-quota` and, per GPU model,
`gpu-quota`, which this charm asks for in its kube-api request (charm_config.
quota_request); left unset, 0: the team holds nothing of its own and borrows from the
cohort, which the control plane sizes to the cluster less every team's guarantee and the
GPUs pods outside Kueue hold, so that the quotas of all teams never sum past what the
cluster has (issue 29 item 6). This charm never writes a ClusterQueue (kube-api refuses
the write: a team writing its own could claim the whole cluster); it reads its own for
the numbers job-status and `train dry-run=true` show. With the control plane's fair
sharing on, teams borrowing the pool split it, a team's own guarantee is reclaimed from
borrowers, and within the team a higher priority preempts a lower one.
- LocalQueue `training` in the namespace, pointing at it: the queue every job names
  (`kueue.x-k8s.io/queue-name`), the one-shot Jobs included (oneshot.py). Never
  `default`, which Kueue would make the namespace's default queue for TensorBoard's
  Deployment too (literals.LOCAL_QUEUE).

Kueue API (kubernetes-sigs/kueue v0.19.2, apis/kueue/v1beta2/clusterqueue_types.go and
localqueue_types.go): ClusterQueue {cohortName, namespaceSelector, queueingStrategy,
preemption {reclaimWithinCohort, borrowWithinCohort {policy}, withinClusterQueue},
resourceGroups [{coveredResources, flavors [{name, resources [{name, nominalQuota}]}]}]};
LocalQueue {clusterQueue}. A null namespaceSelector admits from no namespace.

Why a job waits, in numbers (issue 31 item 6; what kubernetes-sigs/kueue#13854 asks for):
- its position: Kueue's on-demand visibility API, `GET /apis/visibility.kueue.x-k8s.io/
  v1beta2/namespaces/<ns>/localqueues/<lq>/pendingworkloads` (apis/visibility/v1beta2/
  types.go PendingWorkloadsSummary, PendingWorkload.positionInLocalQueue from 0; docs
  "Pending Workloads on-demand", site/content/en/docs/tasks/manage/
  monitor_pending_workloads/pending_workloads_on_demand.md). kueue-controller-manager
  serves it as an aggregated API (config/components/visibility/apiservice_v1beta2.yaml);
  the VisibilityOnDemand gate is Beta, on by default since 0.9 (pkg/features/
  kube_features.go), so the control plane has nothing to enable. The team reads it with
  `get` on `localqueues/pendingworkloads` in its own namespace (literals.NAMESPACED_RULES,
  as Kueue's pending-workloads-lq-viewer-role grants batch users): another team's queue
  is refused. Where the API is not served (404, 503: the APIService unavailable), the
  position is counted from the namespace's Workloads as the queue orders them
  (job_state.queue_position), and dry-run's count of waiting jobs is the ClusterQueue's
  `status.pendingWorkloads` (pending_count);
- the reason: the Workload's QuotaReserved=False message;
- the team's numbers: nominalQuota from its ClusterQueue's spec and, from its status
  (clusterqueue_types.go ClusterQueueStatus.flavorsReservation, ResourceUsage {total,
  borrowed}: borrowed is what it holds over nominalQuota), what it holds and borrows;
- what the job asks: its pod sets' requests (count x one pod's requests, a limit standing
  for a missing request), as Kueue sums a JobSet's Workload;
- what the cohort lends: Kueue shows the Cohort and the other teams' ClusterQueues to batch
  admins only (config/components/rbac/cohort_viewer_role.yaml, clusterqueue_viewer_role.yaml)
  and the Cohort's status holds no usage (cohort_types.go CohortStatus: fairSharing only),
  so a team learns it from Kueue's own message: "insufficient unused quota for <r> in
  flavor <f>, <n> more needed" is what the cohort lends now short of the ask
  (flavorassigner.go fitsResourceQuota), "... > maximum capacity (<m>)" the most it could
  ever hold (potentialAvailable), which is `never`.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from literals import (
    CLUSTER_QUEUE_PREFIX,
    KUEUE_API,
    LOCAL_QUEUE,
    RETIRED_LOCAL_QUEUES,
)
from params import quantity

from charms.gpu_k8s.v0.kube_objects import fingerprint

logger = logging.getLogger(__name__)

API = KUEUE_API
CPU_FLAVOR = "cpu"
FLAVOR_OWNER = ("app.kubernetes.io/managed-by", "kubernetes-control-plane")


def cluster_queue_name(namespace: str) -> str:
    """The team's ClusterQueue (the control plane's)."""
    return f"{CLUSTER_QUEUE_PREFIX}{namespace}"


def team_objects(app: str, namespace: str) -> list[dict[str, Any]]:
    """The LocalQueue of this team (see the module docstring)."""
    labels = {"app.kubernetes.io/managed-by": app}
    return [
        {
            "apiVersion": API,
            "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": namespace, "labels": labels},
            "spec": {"clusterQueue": cluster_queue_name(namespace)},
        },
    ]


def retired(local_queues: Iterable[dict[str, Any]], app: str) -> list[str]:
    """This application's LocalQueues of earlier revisions, which it should delete."""
    return [
        q["metadata"]["name"]
        for q in local_queues
        if q["metadata"]["name"] in RETIRED_LOCAL_QUEUES
        and ((q["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == app)
    ]


class NotInstalledError(Exception):
    """Kueue's API is not in the cluster (the message says what to do)."""


def reconcile(kube: Any, app: str, namespace: str, applied: str | None) -> str:
    """Apply this team's LocalQueue when it differs from `applied`.

    Returns their fingerprint (what to pass as `applied` next time).

    Raises:
        NotInstalledError: the cluster serves no Kueue API.
    """
    from charms.gpu_k8s.v0.kubeclient import KubeError

    try:
        kube.list(API, "ResourceFlavor")
    except KubeError as e:
        if e.status != 404:
            raise
        raise NotInstalledError(
            "Kueue is not installed in the cluster: set batch-engines=true on "
            "kubernetes-control-plane"
        ) from None
    objects = team_objects(app, namespace)
    digest = fingerprint(objects)
    if digest == applied:
        return digest
    for obj in objects:
        kube.apply(obj, field_manager=app)
    for name in retired(kube.list(API, "LocalQueue", namespace), app):
        kube.delete(API, "LocalQueue", name, namespace)
        logger.info("deleted LocalQueue %s of an earlier revision", name)
    logger.info("applied LocalQueue %s", LOCAL_QUEUE)
    return digest


VISIBILITY_API = "visibility.kueue.x-k8s.io/v1beta2"


def pending_path(namespace: str, local_queue: str = LOCAL_QUEUE) -> str:
    """The visibility API's pending workloads of a LocalQueue (see the module docstring)."""
    return (
        f"/apis/{VISIBILITY_API}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads"
    )


def visible_position(kube: Any, namespace: str, workload: str) -> int | None:
    """1 + the Workload's positionInLocalQueue as Kueue says; None where it is not served.

    None also when the Workload is not among the pending ones (admitted meanwhile).

    Raises:
        KubeError: any other refusal (403: the grant lacks the visibility rule).
    """
    from charms.gpu_k8s.v0.kubeclient import KubeError

    try:
        answer = kube.request("GET", pending_path(namespace))
    except KubeError as e:
        if e.status in (404, 503):
            return None
        raise
    for item in (answer or {}).get("items") or []:
        if (item.get("metadata") or {}).get("name") == workload:
            return int(item.get("positionInLocalQueue", 0)) + 1
    return None


def _requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for c in pod_spec.get("containers") or []:
        resources = c.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in asked.items():
            total[name] = total.get(name, 0.0) + quantity(value)
    return total


def asks(js: Mapping[str, Any]) -> dict[str, float]:
    """What a JobSet's Workload asks of the quota, per resource (see the module docstring).

    A pod set per replicated Job, count = replicas x min(parallelism, completions) (kueue
    pkg/controller/jobs/jobset/jobset_controller.go podsCount).
    """
    total: dict[str, float] = {}
    for rj in js["spec"]["replicatedJobs"]:
        job = rj["template"]["spec"]
        per = min(job.get("parallelism", 1), job.get("completions", job.get("parallelism", 1)))
        count = rj.get("replicas", 1) * per
        for name, value in _requests(job["template"]["spec"]).items():
            total[name] = total.get(name, 0.0) + value * count
    return {k: v for k, v in total.items() if v}


@dataclasses.dataclass(frozen=True)
class Held:
    """One flavor and resource of the team's ClusterQueue."""

    flavor: str
    resource: str
    nominal: float
    total: float
    borrowed: float

    @property
    def free(self) -> float:
        """What is left of the team's own guarantee."""
        return max(0.0, self.nominal - self.total)


def held(cq: Mapping[str, Any] | None) -> list[Held]:
    """The team's quota per flavor and resource: nominal (spec), reserved and borrowed (status)."""
    if not cq:
        return []
    used = {
        (f.get("name"), r.get("name")): r
        for f in ((cq.get("status") or {}).get("flavorsReservation") or [])
        for r in f.get("resources") or []
    }
    out = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for f in group.get("flavors") or []:
            for r in f.get("resources") or []:
                u = used.get((f["name"], r["name"])) or {}
                out.append(
                    Held(
                        f["name"],
                        r["name"],
                        quantity(r.get("nominalQuota", "0")),
                        quantity(u.get("total", "0")),
                        quantity(u.get("borrowed", "0")),
                    )
                )
    return out


def pending_count(cq: Mapping[str, Any] | None) -> int | None:
    """The team's waiting jobs as Kueue counts them, or None before Kueue wrote its status.

    The team's ClusterQueue admits from its namespace only, so its `status.pendingWorkloads`
    (clusterqueue_types.go ClusterQueueStatus; the queue manager's pending Workloads,
    admissible or not: pkg/cache/queue/cluster_queue.go PendingTotal) is the team's.
    """
    count = ((cq or {}).get("status") or {}).get("pendingWorkloads")
    return count if isinstance(count, int) else None


def show(resource: str, value: float) -> str:
    """An amount as a person reads it (memory in Gi, cpu in cores or m)."""
    if resource == "memory":
        gib = value / 2**30
        return f"{gib:g}Gi"
    if value != int(value):
        return f"{round(value * 1000)}m"
    return str(int(value))


_SHORT = re.compile(r"insufficient unused quota for (\S+) in flavor (\S+), (\S+) more needed")
_CAPACITY = re.compile(
    r"insufficient quota for (\S+) in flavor (\S+), previously considered podsets requests "
    r"\(([^)]*)\) \+ current podset request \(([^)]*)\) > maximum capacity \(([^)]*)\)"
)


def kueue_short(message: str) -> dict[tuple[str, str], tuple[str, float]]:
    """(flavor, resource) -> ("more", n) or ("capacity", m), from Kueue's QuotaReserved message."""
    out: dict[tuple[str, str], tuple[str, float]] = {}
    for r, f, m in _SHORT.findall(message):
        out[(f, r)] = ("more", quantity(m))
    for r, f, _before, _want, most in _CAPACITY.findall(message):
        out[(f, r)] = ("capacity", quantity(most))
    return out


def numbers(
    cq: Mapping[str, Any] | None, wants: Mapping[str, float], message: str = ""
) -> dict[str, str]:
    """One line per resource the job asks for: the ask and the team's quota, use, borrowing.

    From Kueue's message too: how far the cohort falls short now, or the most it could hold.

    Keys are the resource names as action results allow them (`nvidia-com-gpu`).
    """
    short = kueue_short(message)
    out: dict[str, str] = {}
    rows = held(cq)
    for resource, want in sorted(wants.items()):
        parts = []
        for h in (h for h in rows if h.resource == resource):
            text = (
                f"{h.flavor}: team nominal {show(resource, h.nominal)}, uses "
                f"{show(resource, h.total)}, borrows {show(resource, h.borrowed)}"
            )
            kind, n = short.get((h.flavor, resource), ("", 0.0))
            if kind == "more":
                text += (
                    f"; Kueue: {show(resource, n)} more needed than the team's unused quota "
                    "and what the cohort lends now"
                )
            elif kind == "capacity":
                text += (
                    f"; the cohort could lend at most {show(resource, max(0.0, n - h.nominal))}"
                )
            parts.append(text)
        line = f"job asks {show(resource, want)}"
        out[re.sub(r"[^a-z0-9]+", "-", resource.lower()).strip("-")] = "; ".join(
            [line, *parts] if parts else [line, "not in the team's ClusterQueue"]
        )
    return out


def verdict(
    cq: Mapping[str, Any] | None, wants: Mapping[str, float], pending: int, never: str | None
) -> tuple[str, str]:
    """`train dry-run=true`'s answer: (admit now | wait | never, why in numbers).

    never: no node could ever hold the gang (placement.never_fits). admit now: each
    resource it asks fits what is left of the team's own guarantee in one flavor (Kueue
    admits a workload within its nominal quota, reclaiming it from borrowers:
    preemption.go). Otherwise it waits unless the cohort lends the rest now, which only the
    admission shows (see the module docstring: a team cannot read the cohort's use).
    wait, whatever the numbers, while the ClusterQueue is not Active: Kueue admits nothing
    from it (its condition's message says why, e.g. a ResourceFlavor missing:
    pkg/cache/scheduler/clusterqueue.go inactiveReason).
    """
    if never:
        return "never", never
    queued = f"{pending} job{'s' if pending != 1 else ''} of the team waiting"
    inactive = next(
        (
            c
            for c in ((cq or {}).get("status") or {}).get("conditions") or []
            if c.get("type") == "Active" and c.get("status") == "False"
        ),
        None,
    )
    if inactive is not None:
        return "wait", f"the team's ClusterQueue is inactive: {inactive.get('message')}; {queued}"
    rows = held(cq)
    short: dict[str, float] = {}
    for resource, want in wants.items():
        free = max((h.free for h in rows if h.resource == resource), default=0.0)
        if want > free:
            short[resource] = want - free
    if not short:
        return "admit now", f"within the team's own quota; {queued}"
    lend = ", ".join(f"{show(r, v)} {r}" for r, v in sorted(short.items()))
    return "wait", (
        f"over the team's own quota by {lend}: admitted at once only if the cohort lends that "
        f"now (it lends what the other teams leave unused); {queued}"
    )
