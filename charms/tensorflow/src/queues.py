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
- what the cohort lends now, in numbers (`Tree`): the grant reads the Cohort `gpu-k8s` and
  every ClusterQueue (literals.cluster_rules), whose status Kueue writes with what each
  holds (flavorsReservation: its cache's usage, the Workloads holding quota; kueue
  v0.19.2 pkg/cache/scheduler/cache.go Usage, getUsage). From their nominal quotas,
  lending and borrowing limits and that usage, `Tree` computes what Kueue's scheduler
  computes (pkg/cache/scheduler/resource_node.go available, potentialAvailable): what the
  team's ClusterQueue may take now and ever. Kueue admits a workload at once when each pod
  set's request fits what it may take now in one flavor per resource group (pkg/scheduler/
  flavorassigner/flavorassigner.go fitsResourceQuota: Fit), never when it is over what it
  could ever take ("... > maximum capacity", ExceedsMaxQuota), and otherwise keeps it
  waiting, or preempts for it (Kueue's QuotaReserved message: "insufficient unused quota
  for <r> in flavor <f>, <n> more needed").
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from literals import (
    CLUSTER_QUEUE_PREFIX,
    COHORT,
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


def pod_sets(js: Mapping[str, Any]) -> list[dict[str, float]]:
    """What each pod set of a JobSet's Workload asks of the quota, per resource.

    A pod set per replicated Job, count = replicas x min(parallelism, completions) (kueue
    pkg/controller/jobs/jobset/jobset_controller.go podsCount).
    """
    out = []
    for rj in js["spec"]["replicatedJobs"]:
        job = rj["template"]["spec"]
        per = min(job.get("parallelism", 1), job.get("completions", job.get("parallelism", 1)))
        count = rj.get("replicas", 1) * per
        out.append({k: v * count for k, v in _requests(job["template"]["spec"]).items() if v})
    return out


def asks(js: Mapping[str, Any]) -> dict[str, float]:
    """What a JobSet's Workload asks of the quota, per resource: its pod sets summed."""
    total: dict[str, float] = {}
    for ps in pod_sets(js):
        for name, value in ps.items():
            total[name] = total.get(name, 0.0) + value
    return total


@dataclasses.dataclass(frozen=True)
class Held:
    """One flavor and resource of the team's ClusterQueue."""

    flavor: str
    resource: str
    nominal: float
    total: float
    borrowed: float


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
    cq: Mapping[str, Any] | None,
    wants: Mapping[str, float],
    message: str = "",
    tree: Tree | None = None,
) -> dict[str, str]:
    """One line per resource the job asks for: the ask and the team's quota, use, borrowing.

    With the cohort's `tree`, what it lends the team now; from Kueue's message, how far
    that falls short, or the most the team could hold.

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
            if tree is not None and cq is not None:
                lends = tree.lends(cq["metadata"]["name"], (h.flavor, resource))
                text += f", the cohort lends now {show(resource, lends)}"
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
    cq: Mapping[str, Any] | None,
    tree: Tree,
    pod_sets: list[dict[str, float]],
    pending: int,
    never: str | None,
) -> tuple[str, str]:
    """`train dry-run=true`'s answer: (admit now | wait | never, why in numbers).

    never: no node, or not the whole cohort, could ever hold the gang (training.never).
    wait, whatever the numbers, while the ClusterQueue is not Active: Kueue admits nothing
    from it (its condition's message says why, e.g. a ResourceFlavor missing:
    pkg/cache/scheduler/clusterqueue.go inactiveReason). admit now: each pod set fits
    what the team may take now in a flavor of each resource group (`Tree.assign`, as
    Kueue's flavor assigner does). Otherwise wait, with the numbers: Kueue admits it once
    jobs holding the quota finish or it preempts them (a team reclaiming its guarantee,
    fair sharing, a lower priority).
    """
    if never:
        return "never", never
    # status.pendingWorkloads counts every pending Workload of the team: its jobs', and
    # since Kueue queues every pod of the namespace (issue 29 item 6) its model servers'
    # and TensorBoards' pods too, one Workload each (pod_controller.go constructPodSets)
    queued = f"{pending} workload{'s' if pending != 1 else ''} of the team waiting"
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
    team = ((cq or {}).get("metadata") or {}).get("name", "")
    groups = ((cq or {}).get("spec") or {}).get("resourceGroups") or []
    wants: dict[str, float] = {}
    for ps in pod_sets:
        for r, v in ps.items():
            wants[r] = wants.get(r, 0.0) + v
    best = {r: tree.best(team, groups, r) for r in wants}
    if cq is not None and tree.assign(team, groups, pod_sets):
        fits = "; ".join(
            f"{r}: asks {show(r, wants[r])} of {show(r, tree.available(team, (f, r)))} "
            f"in flavor {f}"
            for r, f in sorted(best.items())
        )
        return "admit now", f"within what the team may take now ({fits}); {queued}"
    short = []
    for r, f in sorted(best.items()):
        may = tree.available(team, (f, r)) if f else 0.0
        if wants[r] <= may and len(best) > 1:
            continue
        unused = tree.unused(team, (f, r)) if f else 0.0
        lends = tree.lends(team, (f, r)) if f else 0.0
        where = f" in flavor {f}" if f else " (not in the team's ClusterQueue)"
        short.append(
            f"{r}: asks {show(r, wants[r])} but the team may take {show(r, may)} now{where} "
            f"(its unused nominal {show(r, unused)} + what the cohort lends now "
            f"{show(r, lends)}): admitted once jobs holding {show(r, wants[r] - may)} finish "
            "or Kueue preempts them"
        )
    return "wait", f"{'; '.join(short)}; {queued}"


FlavorResource = tuple[str, str]


def _quotas(obj: Mapping[str, Any] | None) -> dict[FlavorResource, Mapping[str, Any]]:
    return {
        (f.get("name", ""), r.get("name", "")): r
        for g in ((obj or {}).get("spec") or {}).get("resourceGroups") or []
        for f in g.get("flavors") or []
        for r in f.get("resources") or []
    }


def _amount(quota: Mapping[str, Any] | None, key: str) -> float | None:
    value = (quota or {}).get(key)
    return None if value is None else quantity(value)


@dataclasses.dataclass(frozen=True)
class Tree:
    """One cohort's quota as Kueue v0.19.2's scheduler cache holds it (a flat cohort).

    pkg/cache/scheduler/resource_node.go, per flavor and resource: a ClusterQueue's
    SubtreeQuota is its nominalQuota, its localQuota nominal - lendingLimit (0 without a
    lendingLimit), kept from the cohort; the cohort's SubtreeQuota is its own nominalQuota
    plus each member's SubtreeQuota less its localQuota (accumulateFromChild), its usage
    each member's usage past its localQuota. A member's usage is its status'
    flavorsReservation total (module docstring). Without a cohort, a ClusterQueue has its
    nominal quota only.
    """

    cohort: Mapping[FlavorResource, Mapping[str, Any]]
    queues: Mapping[str, Mapping[FlavorResource, Mapping[str, Any]]]
    usage: Mapping[str, Mapping[FlavorResource, float]]
    members: frozenset[str]

    @classmethod
    def of(
        cls, cohort: Mapping[str, Any] | None, cluster_queues: Iterable[Mapping[str, Any]]
    ) -> Tree:
        """The tree of the Cohort `COHORT` (None: not there, no quota of its own)."""
        queues: dict[str, dict[FlavorResource, Mapping[str, Any]]] = {}
        usage: dict[str, dict[FlavorResource, float]] = {}
        members = set()
        for q in cluster_queues:
            cq = q["metadata"]["name"]
            queues[cq] = _quotas(q)
            usage[cq] = {(h.flavor, h.resource): h.total for h in held(q)}
            if (q.get("spec") or {}).get("cohortName") == COHORT:
                members.add(cq)
        return cls(_quotas(cohort), queues, usage, frozenset(members))

    def nominal(self, cq: str, fr: FlavorResource) -> float:
        """`cq`'s nominalQuota."""
        return _amount(self.queues.get(cq, {}).get(fr), "nominalQuota") or 0.0

    def used(self, cq: str, fr: FlavorResource) -> float:
        """What `cq`'s Workloads hold (its usage)."""
        return self.usage.get(cq, {}).get(fr, 0.0)

    def local(self, cq: str, fr: FlavorResource) -> float:
        """localQuota: what lendingLimit keeps from the cohort."""
        limit = _amount(self.queues.get(cq, {}).get(fr), "lendingLimit")
        return 0.0 if limit is None else max(0.0, self.nominal(cq, fr) - limit)

    def subtree(self, fr: FlavorResource) -> float:
        """The cohort's SubtreeQuota."""
        own = _amount(self.cohort.get(fr), "nominalQuota") or 0.0
        return own + sum(self.nominal(m, fr) - self.local(m, fr) for m in self.members)

    def kept(self, fr: FlavorResource) -> float:
        """What the members' lendingLimits keep out of the cohort."""
        return sum(self.local(m, fr) for m in self.members)

    def left(self, fr: FlavorResource) -> float:
        """The cohort's available: its SubtreeQuota less its usage."""
        return self.subtree(fr) - sum(
            max(0.0, self.used(m, fr) - self.local(m, fr)) for m in self.members
        )

    def available(self, cq: str, fr: FlavorResource) -> float:
        """What `cq` may take now (ClusterQueueSnapshot.Available: available, at least 0)."""
        nominal, used = self.nominal(cq, fr), self.used(cq, fr)
        if cq not in self.members:
            return max(0.0, nominal - used)
        local = self.local(cq, fr)
        parent = self.left(fr)
        limit = _amount(self.queues.get(cq, {}).get(fr), "borrowingLimit")
        if limit is not None:
            stored = nominal - local
            parent = min(parent, stored - max(0.0, used - local) + limit)
        return max(0.0, max(0.0, local - used) + parent)

    def potential(self, cq: str, fr: FlavorResource) -> float:
        """The most `cq` could ever take (potentialAvailable)."""
        nominal = self.nominal(cq, fr)
        if cq not in self.members:
            return nominal
        most = self.local(cq, fr) + self.subtree(fr)
        limit = _amount(self.queues.get(cq, {}).get(fr), "borrowingLimit")
        return most if limit is None else min(most, nominal + limit)

    def unused(self, cq: str, fr: FlavorResource) -> float:
        """What is left of `cq`'s own guarantee."""
        return max(0.0, self.nominal(cq, fr) - self.used(cq, fr))

    def lends(self, cq: str, fr: FlavorResource) -> float:
        """What the cohort lends `cq` now: what it may take beyond its unused nominal."""
        return max(0.0, self.available(cq, fr) - self.unused(cq, fr))

    def best(self, cq: str, groups: list[Mapping[str, Any]], resource: str) -> str:
        """The flavor of `resource` in which `cq` may take the most now ("" if none)."""
        flavors = [
            f["name"]
            for g in groups
            if resource in (g.get("coveredResources") or [])
            for f in g.get("flavors") or []
        ]
        return max(flavors, key=lambda f: self.available(cq, (f, resource)), default="")

    def assign(
        self, cq: str, groups: list[Mapping[str, Any]], pod_sets: list[dict[str, float]]
    ) -> bool:
        """Whether Kueue's flavor assigner fits every pod set now, without preempting.

        flavorassigner.go: per pod set and resource group, the first flavor (in the
        ClusterQueue's order) where what the Workload's earlier pod sets took plus this
        request is within `available` for every covered resource it asks (Fit); a
        resource no group covers fits nowhere.
        """
        assumed: dict[FlavorResource, float] = {}
        for ps in pod_sets:
            for resource in ps:
                if not any(resource in (g.get("coveredResources") or []) for g in groups):
                    return False
            for g in groups:
                wanted = {r: v for r, v in ps.items() if r in (g.get("coveredResources") or [])}
                if not wanted:
                    continue
                chosen = next(
                    (
                        f["name"]
                        for f in g.get("flavors") or []
                        if all(
                            assumed.get((f["name"], r), 0.0) + v
                            <= self.available(cq, (f["name"], r))
                            for r, v in wanted.items()
                        )
                    ),
                    None,
                )
                if chosen is None:
                    return False
                for r, v in wanted.items():
                    assumed[(chosen, r)] = assumed.get((chosen, r), 0.0) + v
        return True
