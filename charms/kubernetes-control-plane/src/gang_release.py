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

Peer databag key (JSON): `kueue-deactivated`: [[namespace, name], ...] the Workloads
this charm deactivated and has not activated yet; absent when there are none.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, MutableMapping
from typing import Any

import kueue

from charms.gpu_k8s.v0.kubeclient import Kube

logger = logging.getLogger(__name__)

WORKLOAD_API = kueue.API
DEACTIVATED_KEY = "kueue-deactivated"


def _owners(kube: Kube, pods: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(namespace, uid) of what a pod's Workload can be owned by: the pod, its owners, a Job's.

    Kueue's Workload is owned by the job it runs, in the job's namespace: a JobSet (owner
    of the pod's Job), a batch Job, or the pod itself (the pod integration). A reference
    is taken in the pod's own namespace only (an owner elsewhere is no owner: the garbage
    collector's rule), so a team's pod can name no other team's job.
    """
    uids: set[tuple[str, str]] = set()
    jobs: dict[tuple[str, str], dict[str, Any] | None] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace") or ""
        uids.add((ns, meta.get("uid") or ""))
        for ref in meta.get("ownerReferences") or []:
            uids.add((ns, ref.get("uid") or ""))
            if ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1":
                key = (ns, ref.get("name") or "")
                if key not in jobs:
                    jobs[key] = kube.get("batch/v1", "Job", key[1], ns)
                for up in ((jobs[key] or {}).get("metadata") or {}).get("ownerReferences") or []:
                    uids.add((ns, up.get("uid") or ""))
    return {(ns, uid) for ns, uid in uids if uid}


def release(
    kube: Kube,
    nodes: Collection[str],
    have: kueue.Quotas,
    teams: Collection[str],
    bag: MutableMapping[str, str],
) -> list[str]:
    """Deactivate the team Workloads on `nodes` that no longer fit `have`; their names.

    `nodes`: the Nodes just quarantined; `have`: what Kueue may give now (the first
    half of `kueue.capacity`'s answer without those nodes); `teams`: the team namespaces.
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
        if (w.get("metadata") or {}).get("namespace") in teams
        and {
            (w["metadata"]["namespace"], r.get("uid"))
            for r in w["metadata"].get("ownerReferences") or []
        }
        & owners
    ]
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
    return done


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
