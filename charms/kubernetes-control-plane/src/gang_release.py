# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""After a GPU quarantine, a gang that no longer fits gives its Kueue quota back at once.

No ops imports. Issue 32 item 2 ("Kueue's quota for the evicted pods is free at once").
The leader re-sizes the cohort without a quarantined node in the hook that sets its
taint (addons.py). A Workload Kueue admitted keeps its admission while JobSet restarts
the gang (kueue.capacity's docstring); when the smaller cluster cannot hold it, its new
pods stay pending and Kueue frees the quota only at waitForPodsReady.recoveryTimeout
(kueue.RECOVERY_TIMEOUT_MINUTES). Here the leader deactivates such a Workload and,
once Kueue evicted it, activates it again (kueue v0.19.2
pkg/controller/core/workload_controller.go Reconcile: spec.active false evicts it,
reason Deactivated, and clears its requeueState, :672-718; the job is stopped and the
reservation cleared, jobframework/reconciler.go "handle eviction", :580-615; set true
again it gets Requeued True, reason Reactivated, and is queued without a backoff,
:640-645). Set true before Kueue evicted it, Kueue would see nothing (its controllers
read the object's state, not its history): the Workloads deactivated are recorded
(DEACTIVATED_KEY) and activated again by a later hook when this one cannot.

Only a Workload of a team namespace (KUEUE_NAMESPACE_LABEL) with a pod on a newly
quarantined node is a candidate, and only while the quota Kueue holds for admitted
Workloads exceeds what the schedulable nodes now give (`kueue.unfitting`); a gang
that still fits is never touched. A tenant cannot trigger it: only the leader's
quarantine hook, on a worker's request for its own node, runs it.

In the same hook, once the quota is released, each such gang, fitting or not, has its
move recorded on its JobSet (`mark_moves`, kube_objects.MOVES_ANNOTATION): when the
whole gang ran on the node each Job replaces its own pods and JobSet never restarts it,
so nothing else would count the move once its pods are gone. The JobSet, not the
Workload: it is the job the tensorflow charm reads and names, and it lasts as long as
the job; Kueue may delete a Workload that no longer matches its job and make another
(jobframework/reconciler.go ensureOneWorkload). No controller drops an annotation of the
JobSet: the JobSet controller writes a JobSet only through its status subresource
(jobset v0.12.0 pkg/controllers/jobset_controller.go updateJobSetStatus,
Status().Update) and copies no JobSet annotation to its Jobs but the exclusive-placement
ones (constructJob, labelAndAnnotateObject); a gang restart deletes and recreates the
Jobs, not the JobSet. Kueue writes the JobSet with merge patches of what it changes,
from the object it read, resourceVersion included (kueue v0.19.2
pkg/util/client/client.go Patch, Strict), and its webhook checks only its own labels and
annotations on update (jobframework/validation.go ValidateJobOnUpdate). The tensorflow
charm's server-side apply owns none of the annotation, so it leaves it (managed fields).
A team may edit its JobSet's annotations: that lies to its own job-status only; what the
leader reads back is bounded (`kube_objects.moves_of`) and a refused write is logged,
never fatal. The leader (kubeadm's admin) passes the consumer admission policies: an
annotation changes none of what they check (admission_policies.py; the quarantine tests
of test_batch_engines.py write through them).

Peer databag key (JSON): `kueue-deactivated`: [[namespace, name], ...] the Workloads
this charm deactivated and has not activated yet; absent when there are none.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Collection, Iterable, Mapping, MutableMapping
from typing import Any

import kueue

from charms.gpu_k8s.v0 import kube_objects
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError

logger = logging.getLogger(__name__)

WORKLOAD_API = kueue.API
JOBSET_API = "jobset.x-k8s.io/v1alpha2"  # the one version JobSet v0.12.0 serves
# the labels JobSet v0.12.0 gives each pod (api/jobset/v1alpha2/jobset_types.go
# JobSetNameKey; pkg/constants/constants.go RestartsKey, its `status.restarts` then)
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
DEACTIVATED_KEY = "kueue-deactivated"


def _owners(kube: Kube, pods: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict]]:
    """(namespace, uid) of what a pod's Workload can be owned by, each with its pods.

    Kueue's Workload is owned by the job it runs, in the job's namespace: a JobSet (owner
    of the pod's Job), a batch Job, or the pod itself (the pod integration). A reference
    is taken in the pod's own namespace only (an owner elsewhere is no owner: the garbage
    collector's rule), so a team's pod can name no other team's job.
    """
    found: dict[tuple[str, str], list[dict]] = {}
    jobs: dict[tuple[str, str], dict[str, Any] | None] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace") or ""
        uids = {meta.get("uid") or ""}
        for ref in meta.get("ownerReferences") or []:
            uids.add(ref.get("uid") or "")
            if ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1":
                key = (ns, ref.get("name") or "")
                if key not in jobs:
                    jobs[key] = kube.get("batch/v1", "Job", key[1], ns)
                for up in ((jobs[key] or {}).get("metadata") or {}).get("ownerReferences") or []:
                    uids.add(up.get("uid") or "")
        for uid in uids - {""}:
            found.setdefault((ns, uid), []).append(pod)
    return found


def release(
    kube: Kube,
    nodes: Collection[str],
    have: kueue.Quotas,
    teams: Collection[str],
    bag: MutableMapping[str, str],
    listed: Iterable[dict[str, Any]],
) -> list[str]:
    """Deactivate the team Workloads on `nodes` that no longer fit `have`; their names.

    `nodes`: the Nodes just quarantined; `have`: what Kueue may give now (the first
    half of `kueue.capacity`'s answer without those nodes); `teams`: the team namespaces;
    `listed`: the Nodes as read in this hook (their GpuHealthy condition names the fault).
    Then each gang there has its move recorded on its JobSet (`mark_moves`); a failed
    record is logged, never fatal.
    """
    if not nodes or not teams:
        return []
    pods = [
        p
        for node in sorted(nodes)
        for p in kube.list("v1", "Pod", field_selector=f"spec.nodeName={node}")
        if (p.get("metadata") or {}).get("namespace") in teams
    ]
    if not pods:
        return []
    workloads = kube.list(WORKLOAD_API, "Workload")
    owners = _owners(kube, pods)
    candidates = [
        w
        for w in workloads
        if (w.get("metadata") or {}).get("namespace") in teams and _refs(w) & owners.keys()
    ]
    faults: dict[str, dict[str, Any] | None] = dict.fromkeys(nodes)
    for n in listed:  # the Nodes just quarantined, with their GpuHealthy condition
        if n["metadata"]["name"] in faults:
            faults[n["metadata"]["name"]] = kube_objects.gpu_fault(n)
    done = []
    record = json.loads(bag.get(DEACTIVATED_KEY) or "[]")
    for workload in kueue.unfitting(workloads, have, candidates):
        meta = workload["metadata"]
        ns, name = meta["namespace"], meta["name"]
        kube.patch(WORKLOAD_API, "Workload", name, {"spec": {"active": False}}, ns)
        logger.info("deactivated Workload %s/%s: it no longer fits the cluster", ns, name)
        if [ns, name] not in record:
            record.append([ns, name])
        done.append(f"{ns}/{name}")
    if record:
        bag[DEACTIVATED_KEY] = json.dumps(record)
    for workload in candidates:  # the quota is back first: a record is worth less
        meta = workload["metadata"]
        gang = {p["metadata"]["uid"]: p for ref in _refs(workload) for p in owners.get(ref, [])}
        evicted = f"{meta['namespace']}/{meta['name']}" in done
        try:
            mark_moves(kube, workload, list(gang.values()), faults, evicted=evicted)
        except KubeError as e:
            logger.warning(
                "could not record the move of %s/%s: %s", meta["namespace"], meta["name"], e
            )
    return done


def _refs(workload: dict[str, Any]) -> set[tuple[str, str]]:
    meta = workload.get("metadata") or {}
    return {(meta.get("namespace") or "", r.get("uid")) for r in meta.get("ownerReferences") or []}


def mark_moves(
    kube: Kube,
    workload: dict[str, Any],
    gang: list[dict[str, Any]],
    faults: Mapping[str, dict[str, Any] | None],
    *,
    evicted: bool = False,
) -> None:
    """Record on the Workload's JobSet that its `gang` pods leave the quarantined nodes.

    `faults`: each Node just quarantined, with its GpuHealthy condition (None when it has
    none: the reason is then "GPU quarantine" and the time this hook's). The record is
    kube_objects.MOVES_ANNOTATION, one entry per node and quarantine (`moves_patch`: a
    quarantine already recorded, in a hook run again or a later one, adds nothing).
    `evicted`: this hook deactivated the Workload (`release`). Raises KubeError (the
    JobSet or its pods unreadable, a write refused: a team filled its annotations up to
    kube-apiserver's 256 KiB, apimachinery pkg/api/validation/objectmeta.go
    TotalAnnotationSizeLimitB), which `release` logs: the quarantine hook goes on.

    The entry says `restarted` when JobSet's own status counts the move (`_restarted`),
    so `count` does not: every other move, a whole gang on those nodes above all (each
    Job replaces its own pods, podFailurePolicy Ignore on DisruptionTarget, and JobSet
    never restarts it), has this record as its only count. The write names the JobSet's
    uid and resourceVersion: a JobSet made again under its name, or written since it was
    read (a team's edit, an old leader's hook still running), answers 409 Conflict
    (k8s.io/apiserver pkg/registry/generic/registry/store.go Update: a patched object's
    resourceVersion other than the stored one is a Conflict, before any validation; a
    recreated JobSet has another), and the JobSet is read once more.
    """
    meta = workload["metadata"]
    ns = meta["namespace"]
    owner = next(
        (
            r
            for r in meta.get("ownerReferences") or []
            if r.get("kind") == "JobSet" and r.get("apiVersion") == JOBSET_API
        ),
        None,
    )
    here = [p for p in gang if _active(p) and (p.get("spec") or {}).get("nodeName") in faults]
    if owner is None or not here:
        return
    name = owner.get("name") or ""
    found = {n: faults[n] or {} for n in sorted({p["spec"]["nodeName"] for p in here})}
    times = {n: f.get("lastTransitionTime") or _now() for n, f in found.items()}
    for again in (True, False):
        js = kube.get(JOBSET_API, "JobSet", name, ns)
        if js is None or js["metadata"].get("uid") != owner.get("uid"):
            return
        restarted = _restarted(kube, js, here, faults, min(times.values()), evicted)
        try:
            for node, fault in found.items():
                reason = fault.get("message") or fault.get("reason") or "GPU quarantine"
                patch = kube_objects.moves_patch(js, node, reason, times[node], restarted)
                if patch is None:
                    continue
                patch["metadata"] |= {k: js["metadata"].get(k) for k in ("uid", "resourceVersion")}
                js = kube.patch(JOBSET_API, "JobSet", name, patch, ns) or js
                logger.info("JobSet %s/%s moves off node %s: %s", ns, name, node, reason)
            return
        except KubeError as e:
            if e.status != 409 or not again:
                raise
            logger.info("JobSet %s/%s changed since it was read: read again", ns, name)


def _restarted(
    kube: Kube,
    js: dict[str, Any],
    here: list[dict[str, Any]],
    faults: Collection[str],
    fault_at: str,
    evicted: bool,
) -> bool:
    """Whether the JobSet restarts the gang for this move, counting it in its status.

    Each pod of a JobSet is labelled with its name (JOBSET_NAME) and restart attempt
    (RESTART_ATTEMPT: the JobSet's `status.restarts` when the pod was made; JobSet v0.12.0
    pkg/controllers/jobset_controller.go labelAndAnnotateObject). It restarted already
    when the pods `here` are of an earlier attempt. It will when a pod of this attempt
    failed on its own (no DisruptionTarget condition: a peer's launcher that saw the gang
    stop exits 143, its Job fails, and the JobSet's failure policy restarts the gang,
    tensorflow manifests.jobset), even if Kueue suspends it now: its reconcile runs the
    failure policy before it suspends (jobset_controller.go Reconcile, executeFailurePolicy
    then suspendJobs; failure_policy.go failurePolicyRecreateAll, `status.restarts` += 1).
    And when a pod of this attempt runs elsewhere, made before the fault: it stops on a
    SIGTERM with its peers, so JobSet restarts the gang, unless this hook deactivated the
    Workload (`evicted`): Kueue suspends the JobSet, whose Jobs delete those pods and
    JobSet restarts nothing; its eviction takes the restart's place.
    """
    restarts = str(int((js.get("status") or {}).get("restarts") or 0))
    if any(
        (p["metadata"].get("labels") or {}).get(RESTART_ATTEMPT) not in (None, restarts)
        for p in here
    ):
        return True
    name = js["metadata"]["name"]
    for pod in kube.list(
        "v1", "Pod", js["metadata"]["namespace"], label_selector=f"{JOBSET_NAME}={name}"
    ):
        meta = pod["metadata"]
        if (meta.get("labels") or {}).get(RESTART_ATTEMPT) not in (None, restarts):
            continue
        status = pod.get("status") or {}
        if status.get("phase") == "Failed" and not any(
            c.get("type") == "DisruptionTarget" and c.get("status") == "True"
            for c in status.get("conditions") or []
        ):
            return True
        if (
            not evicted
            and _active(pod)
            and (pod.get("spec") or {}).get("nodeName") not in faults
            and (meta.get("creationTimestamp") or "") < fault_at
        ):
            return True
    return False


def _active(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def reactivate(kube: Kube, bag: MutableMapping[str, str]) -> None:
    """Activate again each recorded Workload that Kueue evicted; keep the others recorded.

    A Workload gone, or active again by someone else's hand, leaves the record.
    """
    record = json.loads(bag.get(DEACTIVATED_KEY) or "[]")
    if not record:
        return
    left = []
    for ns, name in record:
        workload = kube.get(WORKLOAD_API, "Workload", name, ns)
        if workload is None or (workload.get("spec") or {}).get("active", True):
            continue
        if not kueue.stopped(workload):
            left.append([ns, name])
            continue
        kube.patch(WORKLOAD_API, "Workload", name, {"spec": {"active": True}}, ns)
        logger.info("activated Workload %s/%s again: Kueue requeues it", ns, name)
    if left:
        bag[DEACTIVATED_KEY] = json.dumps(left)
    else:
        bag.pop(DEACTIVATED_KEY, None)
