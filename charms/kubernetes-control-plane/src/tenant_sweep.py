# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What tenants made before this revision's refusals, swept once per charm revision (no ops).

A cluster upgraded to this revision keeps what its tenants made while earlier revisions
allowed it (issue 29, rereview43a F2): the new refusals (lib kube_api, admission_policies,
team_quota) act on requests, not on what is stored. So the leader goes once per charm
revision (`done`: the charm URL under SWEEP_KEY, as addons.Addons._built records what it
built) through every Namespace labelled `gpu-k8s.io/consumer` (literals.CONSUMER_LABEL:
only the control plane writes Namespaces, rbac.manifests; kube_api refuses every grant
namespace writes, so a tenant cannot label one) that the control plane made
(`consumer_namespaces`: one an earlier revision only labelled is named and left) and,
there:

- deletes Calico's namespaced policy objects (CALICO_KINDS, calico.yaml v3.32.1's CRDs;
  no grant may write them any more and the control plane makes none: team_quota counts
  them at 0). An ordered Calico Allow there outranks the control plane's Kubernetes
  NetworkPolicies (review43 G2). On a flannel cluster the CRDs are not served (404): none.
- sets NodePort and LoadBalancer Services back to ClusterIP and removes every Service's
  externalIPs (`service_patch`): a node port opens on every node, the control plane's
  included; an external IP takes any address's traffic (CVE-2020-8554). No charm makes
  either, so a Service of the charms is never touched.
- deletes DaemonSets (their pods tolerate cordons and a lost node for ever, and a drain
  leaves them: admission_policies CONSUMER_PODS); their pods go with them (background
  propagation, the garbage collector) or, being refused, are deleted as any pod.
- deletes each pod the current CONSUMER_PODS would refuse, judged from what the stored
  pod shows (`refusal`). A pod whose controller makes it again (a ReplicaSet's, a Job's)
  is made through admission: the same refused template is refused again (the controller
  records FailedCreate and retries with its backoff), a template that passes runs as
  any other pod. Finished and terminating pods are left: they hold no node.

What the stored pod cannot show is left, and said so in docs/explanation/security.md: a
pod that a Binding or spec.nodeName put on a worker the scheduler could have picked looks
like any scheduled pod, and a bare pod naming a controller that does not own it looks like
that controller's.

Objects of the control plane and the charms in those namespaces are never touched, not by
their labels (a tenant can copy labels) but because none of them is refused: the
default-deny and egress policies and the tensorflow charm's are Kubernetes
NetworkPolicies, never Calico's; the quota, Kueue's LocalQueues and Workloads are not
looked at; the charms' Services are ClusterIP without external IPs and their pods pass
CONSUMER_PODS (tests/functional/test_kube_api_escalation.py, the charms' own pods).

Each change is logged (kind, namespace, name, what); a change that fails is logged and
the rest go on; a deleted object counts once it is gone (`_delete`). The sweep is done
once none failed; else the steps that failed, per namespace, are tried again at
update-status (PROGRESS_KEY, MAX_TRIES), and lists are read PAGE items at a time.
The namespaces found are recorded (NAMESPACES_KEY) for the object-count quota, which
addons.apply_team_quotas applies to each of them, granted this hook or not.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator, MutableMapping
from typing import Any
from urllib.parse import quote

import admission_policies as policies
from batch_engines import CONTROL_PLANE_LABEL
from literals import CONSUMER_LABEL, FIELD_MANAGER, MANAGED_BY_LABEL

from charms.gpu_k8s.v0.kube_api import SYSTEM_NAMESPACES
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import GPU_TAINT

logger = logging.getLogger(__name__)

SWEEP_KEY = "consumer-sweep"  # the charm URL whose sweep finished (peer application data)
NAMESPACES_KEY = "consumer-namespaces"  # the consumers' namespaces it found (a JSON list)
# What a sweep that failed in part left (a JSON object): the charm URL, the tries so far and,
# per namespace, its consumer and the steps (STEPS' names) still to do; `left` is null
# while the namespaces were never listed. A retry does only those, in an update-status
# hook (every 5 minutes by default), MAX_TRIES times at most: then the status names
# what is left until another charm revision sweeps again.
PROGRESS_KEY = "consumer-sweep-left"
MAX_TRIES = 12
PAGE = 500  # items per list request (limit/continue: a namespace's pods may be many)

# Calico v3.32.1's namespaced policy kinds (calico.yaml's CustomResourceDefinitions in
# crd.projectcalico.org/v1; the projectcalico.org/v3 API serves the same objects only
# through a Calico API server, which this bundle does not run).
CALICO_GROUP_VERSION = "crd.projectcalico.org/v1"
CALICO_KINDS = (
    "networkpolicies",
    "stagednetworkpolicies",
    "stagedkubernetesnetworkpolicies",
    "networksets",
)
# The fields only a NodePort or LoadBalancer Service (or one with external IPs) may carry,
# set back for a ClusterIP Service without external IPs (kubernetes pkg/apis/core/validation
# validation.go ValidateService, stored commit 000f260: externalTrafficPolicy "may only be
# set for externally-accessible services", loadBalancerSourceRanges and its annotation "may
# only be used when `type` is 'LoadBalancer'"; loadBalancerIP is deprecated and unchecked,
# cleared as meaningless). The node ports, healthCheckNodePort, allocateLoadBalancerNodePorts
# and loadBalancerClass the API server clears itself on such a type change, when the
# update leaves them as they were, and the load balancer's status (pkg/registry/core/
# service/strategy.go dropTypeDependentFields, stored commit 184c250), and releases the
# node ports; it keeps externalTrafficPolicy on a ClusterIP Service losing its external
# IPs, hence the patch clears that too.
SOURCE_RANGES_ANNOTATION = "service.beta.kubernetes.io/load-balancer-source-ranges"
EXTERNAL_TYPES = ("NodePort", "LoadBalancer")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # lib drain.MIRROR_ANNOTATION


@dataclasses.dataclass
class Sweep:
    """What one sweep did: `Kind ns/name` changed and failed (the log says why).

    `foreign`: namespaces labelled as a consumer's that the control plane did not make
    (name -> the other field managers found), left as they are.
    """

    namespaces: list[str] = dataclasses.field(default_factory=list)
    changed: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    foreign: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    gave_up: bool = False

    def note(self) -> str | None:
        """The status note of this hook: what was changed, failed or left, None for nothing."""
        notes = []
        if self.gave_up:
            notes.append(
                f"consumer namespaces not swept after {MAX_TRIES} tries:"
                f" {len(self.failed)} steps left (see the log)"
            )
        elif self.failed:
            notes.append(
                f"consumer namespaces swept: {len(self.changed)} objects changed,"
                f" {len(self.failed)} failed (tried again at update-status; see the log)"
            )
        elif self.changed:
            notes.append(
                f"consumer namespaces swept: {len(self.changed)} objects changed (see the log)"
            )
        if self.foreign:
            notes.append(
                f"not swept, not made by the control plane: {', '.join(sorted(self.foreign))}"
            )
        return "; ".join(notes) or None


@dataclasses.dataclass(frozen=True)
class _Where:
    """One consumer's namespace, its consumer and the control-plane nodes."""

    namespace: str
    consumer: str
    control_plane: frozenset[str]


def done(bag: MutableMapping[str, str], charm: str) -> bool:
    """Whether this charm revision's sweep finished (without a charm URL: once ever)."""
    return SWEEP_KEY in bag and bag[SWEEP_KEY] == charm


def recorded_namespaces(bag: MutableMapping[str, str]) -> list[str]:
    """The consumers' namespaces the last sweep found (NAMESPACES_KEY)."""
    try:
        found = json.loads(bag.get(NAMESPACES_KEY) or "[]")
    except ValueError:
        return []
    return [ns for ns in found if isinstance(ns, str)] if isinstance(found, list) else []


def _progress(bag: MutableMapping[str, str], charm: str) -> dict | None:
    """What this charm's earlier tries left (PROGRESS_KEY), None before its first try."""
    try:
        progress = json.loads(bag.get(PROGRESS_KEY) or "null")
    except ValueError:
        return None
    if not isinstance(progress, dict) or progress.get("charm") != charm:
        return None
    left = progress.get("left")
    if not isinstance(left, dict) or not all(
        isinstance(t, dict) and isinstance(t.get("steps"), list) for t in left.values()
    ):
        left = None  # never listed (or unreadable): listed again
    return {"tries": int(progress.get("tries") or 0), "left": left}


def sweep(kube: Kube, bag: MutableMapping[str, str], charm: str, *, retry: bool) -> Sweep | None:
    """Sweep every consumer's namespace once (`done` records it), what it did.

    The first try runs in any hook; what it left (PROGRESS_KEY) is tried again only where
    `retry` (update-status), MAX_TRIES times at most. None: nothing tried in this hook.

    Raises:
        KubeError: the Namespaces or control-plane Nodes could not be listed (nothing was
            changed; tried again as any failed step).
    """
    progress = _progress(bag, charm)
    tries = progress["tries"] if progress else 0
    if tries >= MAX_TRIES:
        left = (progress or {}).get("left") or {}
        failed = [f"{s} of {ns}" for ns, todo in left.items() for s in todo["steps"]]
        return Sweep(failed=failed or ["listing the namespaces"], gave_up=True)
    if progress and not retry:
        return None
    bag[PROGRESS_KEY] = json.dumps({"charm": charm, "tries": tries + 1, "left": None})
    result = Sweep()
    todo = progress["left"] if progress and progress["left"] is not None else None
    if todo is None:
        todo = _first(kube, bag, result)
    result.namespaces = sorted(todo)
    nodes: frozenset[str] = frozenset()
    if any("Pods" in t["steps"] for t in todo.values()):
        listed = kube.list("v1", "Node", label_selector=CONTROL_PLANE_LABEL)
        nodes = frozenset(n["metadata"]["name"] for n in listed)
    left = {}
    for namespace in result.namespaces:
        where = _Where(namespace, todo[namespace]["consumer"], nodes)
        if steps := _sweep_namespace(kube, where, todo[namespace]["steps"], result):
            left[namespace] = {"consumer": where.consumer, "steps": steps}
    if result.changed or result.failed:
        logger.info(
            "swept %d consumer namespaces: %d objects changed, %d failed%s",
            len(result.namespaces),
            len(result.changed),
            len(result.failed),
            " (tried again at update-status)" if result.failed else "",
        )
    if left:
        bag[PROGRESS_KEY] = json.dumps({"charm": charm, "tries": tries + 1, "left": left})
    else:
        bag[SWEEP_KEY] = charm
        del bag[PROGRESS_KEY]
    return result


def _first(kube: Kube, bag: MutableMapping[str, str], result: Sweep) -> dict[str, dict]:
    """The first try's work: every step in each consumer's namespace (NAMESPACES_KEY)."""
    consumers, result.foreign = consumer_namespaces(kube)
    found = json.dumps(sorted(consumers))
    if bag.get(NAMESPACES_KEY) != found:
        bag[NAMESPACES_KEY] = found
    for name, managers in sorted(result.foreign.items()):
        logger.warning(
            "sweep: namespace %s is labelled as a consumer's by an earlier revision but"
            " was not made by it (also written by %s): not swept, nothing changed there",
            name,
            ", ".join(managers),
        )
    return {ns: {"consumer": c, "steps": list(STEPS)} for ns, c in consumers.items()}


def consumer_namespaces(kube: Kube) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The consumers' Namespaces the control plane made, and those it labelled only.

    The first: name -> the consumer; the second: name -> the other field managers.

    System namespaces are left out: an earlier revision labelled gpu-k8s-system for the
    workers' shared grant (rbac.worker_grant, consumer `worker`). Before f69ccc6
    (2026-11-27) rbac applied a consumer's Namespace onto an existing one too, labels
    included, so the labels alone do not say the control plane made it: every revision
    wrote Namespaces by server-side apply as FIELD_MANAGER, and kube-apiserver records
    each writer of an object in metadata.managedFields, a create or update under its
    fieldManager or its user agent's first word (k8s.io/apiserver pkg/endpoints/handlers
    rest.go managerOrUserAgent; kubectl create's is kubectl-create, Helm's helm). So
    only a namespace whose every entry is FIELD_MANAGER's is swept; one another writer
    made or also wrote (an operator's label included) is named and left alone.
    """
    found, foreign = {}, {}
    for ns in kube.list("v1", "Namespace", label_selector=CONSUMER_LABEL):
        meta = ns["metadata"]
        name, labels = meta["name"], meta.get("labels") or {}
        if name in SYSTEM_NAMESPACES or name.startswith("kube-"):
            continue
        if labels.get(MANAGED_BY_LABEL) != FIELD_MANAGER:
            continue
        managers = sorted({m.get("manager") or "" for m in meta.get("managedFields") or []})
        if managers == [FIELD_MANAGER]:
            found[name] = labels.get(CONSUMER_LABEL, "")
        else:
            others = [m or "<no manager>" for m in managers if m != FIELD_MANAGER]
            foreign[name] = others or ["<no managedFields record>"]
    return found, foreign


def _sweep_namespace(kube: Kube, where: _Where, steps: list[str], result: Sweep) -> list[str]:
    """Run `steps` (STEPS' names) in the namespace; the names of those that failed."""
    failed = []
    for kind in [k for k in STEPS if k in steps]:
        before = len(result.failed)
        try:
            STEPS[kind](kube, where, result)
        except KubeError as e:  # the listing failed: this kind is tried again
            logger.warning("sweep: %s of %s could not be listed: %s", kind, where.namespace, e)
            result.failed.append(f"{kind} of {where.namespace}")
        if len(result.failed) > before:
            failed.append(kind)
    return failed


def _change(result: Sweep, what: str, how: str, act: Any) -> None:
    """Do `act()`; log and record `what` (`Kind ns/name`) as changed, or as failed."""
    try:
        act()
    except KubeError as e:
        logger.warning("sweep: %s could not be %s: %s", what, how, e)
        result.failed.append(what)
        return
    logger.info("sweep: %s %s", what, how)
    result.changed.append(what)


def _pages(kube: Kube, path: str, query: dict[str, str] | None = None) -> Iterator[dict]:
    """The items of a list, PAGE at a time.

    kube-apiserver's chunked lists: k8s.io/apimachinery pkg/apis/meta/v1 types.go
    ListOptions Limit and Continue, ListMeta.Continue.
    """
    token = None
    while True:
        answer = kube.request(
            "GET", path, query={**(query or {}), "limit": PAGE, "continue": token}
        )
        yield from answer.get("items") or []
        token = (answer.get("metadata") or {}).get("continue")
        if not token:
            return


def _calico(kube: Kube, where: _Where, result: Sweep) -> None:
    namespace = where.namespace
    for plural in CALICO_KINDS:
        path = f"/apis/{CALICO_GROUP_VERSION}/namespaces/{quote(namespace, safe='')}/{plural}"
        try:
            items = list(_pages(kube, path))
        except KubeError as e:
            if e.status == 404:  # not served (a flannel cluster: none is)
                continue
            raise
        for item in items:
            name = item["metadata"]["name"]
            one = f"{path}/{quote(name, safe='')}"
            _change(
                result,
                f"{plural} {namespace}/{name}",
                "deleted (Calico policy: only the control plane writes a team's policy)",
                lambda one=one: _delete(kube, one),
            )


def _delete(kube: Kube, path: str) -> None:
    """Delete the object at `path` and see it gone, its finalizers removed if they keep it.

    kube-apiserver answers a DELETE that removed the object with a Status, one that a
    finalizer keeps (terminating) with the object (k8s.io/apiserver pkg/registry/generic/
    registry/store.go Delete: deleteImmediately false while finalizers remain). Kept
    objects of the kinds swept here do harm while terminating: Felix keeps enforcing a
    terminating Calico policy or NetworkSet (libcalico-go conversion reads
    deletionTimestamp for pods only), and the DaemonSet controller stops syncing a
    terminating DaemonSet while the garbage collector deletes its pods only once it is
    gone. No controller of this bundle sets a finalizer on them (a background
    propagation adds none: only Foreground adds foregroundDeletion, store.go
    deletionFinalizersForGarbageCollection), so the finalizers a tenant set are removed;
    with the last one the server deletes it (store.go ShouldDeleteDuringUpdate).

    Raises:
        KubeError: a request failed, or the object is still there (status 409).
    """
    try:
        answer = kube.request("DELETE", path, query={"propagationPolicy": "Background"})
    except KubeError as e:
        if e.status == 404:
            return
        raise
    if not isinstance(answer, dict) or answer.get("kind") == "Status":
        return
    if (answer.get("metadata") or {}).get("finalizers"):
        body = {"metadata": {"finalizers": None}}
        try:
            kube.request("PATCH", path, body=body, content_type="application/merge-patch+json")
        except KubeError as e:
            if e.status == 404:
                return
            raise
    try:
        kube.request("GET", path)
    except KubeError as e:
        if e.status == 404:
            return
        raise
    raise KubeError(409, "Conflict", f"{path} is still there after its deletion")


def service_patch(service: dict) -> dict | None:
    """The merge patch that makes `service` a ClusterIP one without external IPs, or None."""
    spec = service.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    if kind not in EXTERNAL_TYPES and not spec.get("externalIPs"):
        return None
    patch: dict[str, Any] = {
        "spec": {
            "externalIPs": None,
            "externalTrafficPolicy": None,
            "loadBalancerSourceRanges": None,
            "loadBalancerIP": None,
        }
    }
    if kind in EXTERNAL_TYPES:
        patch["spec"]["type"] = "ClusterIP"
    annotations = (service.get("metadata") or {}).get("annotations") or {}
    if SOURCE_RANGES_ANNOTATION in annotations:
        patch["metadata"] = {"annotations": {SOURCE_RANGES_ANNOTATION: None}}
    return patch


def _services(kube: Kube, where: _Where, result: Sweep) -> None:
    namespace = where.namespace
    for service in _pages(kube, kube.path("v1", "Service", namespace)):
        patch = service_patch(service)
        if patch is None:
            continue
        name = service["metadata"]["name"]
        kind = (service.get("spec") or {}).get("type") or "ClusterIP"
        how = f"set from {kind} to ClusterIP" if kind in EXTERNAL_TYPES else "kept ClusterIP"
        _change(
            result,
            f"Service {namespace}/{name}",
            f"{how}, without node ports, load balancer or external IPs",
            lambda name=name, patch=patch: kube.patch("v1", "Service", name, patch, namespace),
        )


def _daemonsets(kube: Kube, where: _Where, result: Sweep) -> None:
    namespace = where.namespace
    path = kube.path("apps/v1", "DaemonSet", namespace)
    for daemonset in _pages(kube, path):
        name = daemonset["metadata"]["name"]
        _change(
            result,
            f"DaemonSet {namespace}/{name}",
            "deleted with its pods (they tolerate cordons: no grant may make one)",
            lambda name=name: _delete(kube, f"{path}/{quote(name, safe='')}"),
        )


def _pods(kube: Kube, where: _Where, result: Sweep) -> None:
    namespace = where.namespace
    # running and pending only: a tenant's finished pods may be many, and hold no node
    # (the pod field selectors include status.phase: pkg/registry/core/pod strategy.go)
    query = {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}
    for pod in _pages(kube, kube.path("v1", "Pod", namespace), query):
        meta, status = pod["metadata"], pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        # a DaemonSet's pod is judged too: its DaemonSet is deleted first, and one kept
        # there (a failed step) no longer makes pods once terminating, nor through
        # admission while they tolerate cordons
        kind, owner = _controller(meta)
        why = refusal(pod, where.consumer, where.control_plane)
        if why is None:
            continue
        name = meta["name"]
        again = (
            f"; its {kind} {owner} makes it again through admission, refused while its template is"
            if kind and kind != "DaemonSet"
            else ""
        )
        _change(
            result,
            f"Pod {namespace}/{name}",
            f"deleted ({why}){again}",
            lambda name=name: kube.delete("v1", "Pod", name, namespace),
        )


STEPS = {  # what is swept in a namespace, in this order
    "Calico policies": _calico,
    "Services": _services,
    "DaemonSets": _daemonsets,
    "Pods": _pods,
}


def _controller(meta: dict) -> tuple[str, str]:
    """The kind and name of the pod's controller reference, ("", "") for none."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("kind", ""), ref.get("name", "")
    return "", ""


def _tolerated(toleration: dict) -> bool:
    """CONSUMER_PODS' allow-list of tolerations (admission_policies consumer_pods_policy)."""
    key = toleration.get("key")
    if key == GPU_TAINT["key"]:
        return True
    seconds = toleration.get("tolerationSeconds")
    return (
        key in policies.LOST_NODE_TAINTS
        and toleration.get("effect") == "NoExecute"
        and isinstance(seconds, int)
        and seconds <= policies.LOST_NODE_SECONDS
    )


def refusal(pod: dict, consumer: str, control_plane_nodes: frozenset[str]) -> str | None:
    """Why CONSUMER_PODS would refuse this stored pod's creation now, None when it would not.

    From what the pod shows: its tolerations, scheduler, priority, ServiceAccount and
    mirror annotation are what was admitted; a pod on a control-plane node was bound by
    name or tolerated the control plane's taint (kubeadm's NoSchedule taint keeps
    kube-scheduler from it otherwise), both refused. Its nodeName on a worker and its
    controller reference cannot be judged from the pod (see the module's docstring).
    """
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return "a mirror pod: created bound to a node, which a team's pod may not be"
    if spec.get("nodeName") in control_plane_nodes:
        return f"on the control-plane node {spec['nodeName']}"
    refused = [t for t in spec.get("tolerations") or [] if not _tolerated(t)]
    if refused:
        keys = ", ".join(sorted({t.get("key") or "<every taint>" for t in refused}))
        return f"tolerates {keys}"
    if spec.get("schedulerName") not in (None, "", policies.DEFAULT_SCHEDULER):
        return f"names the scheduler {spec['schedulerName']}"
    if spec.get("priorityClassName") or (spec.get("priority") or 0) > 0:
        return "has a priority above the teams'"
    if consumer and consumer in (spec.get("serviceAccountName"), spec.get("serviceAccount")):
        return "runs as the consumer's own ServiceAccount"
    return None
