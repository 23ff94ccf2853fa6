# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What tenants made before this revision's refusals, swept once per charm revision (no ops).

A cluster upgraded to this revision keeps what its tenants made while earlier revisions
allowed it (issue 29, rereview43a F2): the new refusals (lib kube_api, admission_policies,
team_quota) act on requests, not on what is stored. So the leader goes once per charm
revision (`done`: the charm URL under SWEEP_KEY, as addons.Addons._built records what it
built) through every Namespace labelled `gpu-k8s.io/consumer` (literals.CONSUMER_LABEL:
only the control plane writes Namespaces, rbac.manifests; kube_api refuses every grant
namespace writes, so a tenant cannot label one) and, there:

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
  propagation, the garbage collector).
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
the rest go on; the sweep is done once none failed, else it runs again in the next hook.
The namespaces found are recorded (NAMESPACES_KEY) for the object-count quota, which
addons.apply_team_quotas applies to each of them, granted this hook or not.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import MutableMapping
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
    """What one sweep did: the namespaces, `Kind ns/name` changed and failed (the log says why)."""

    namespaces: list[str] = dataclasses.field(default_factory=list)
    changed: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)

    def note(self) -> str | None:
        """The status note of this hook: how many were changed or failed, None for none."""
        if self.failed:
            return (
                f"consumer namespaces swept: {len(self.changed)} objects changed,"
                f" {len(self.failed)} failed (tried again next hook; see the log)"
            )
        if self.changed:
            return f"consumer namespaces swept: {len(self.changed)} objects changed (see the log)"
        return None


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


def sweep(kube: Kube, bag: MutableMapping[str, str], charm: str) -> Sweep:
    """Sweep every consumer's namespace once (`done` records it), what it did.

    Raises:
        KubeError: the Namespaces or control-plane Nodes could not be listed (nothing was
            changed; the next hook tries again).
    """
    consumers = consumer_namespaces(kube)
    result = Sweep(namespaces=sorted(consumers))
    if bag.get(NAMESPACES_KEY) != (found := json.dumps(result.namespaces)):
        bag[NAMESPACES_KEY] = found
    nodes = frozenset(
        n["metadata"]["name"] for n in kube.list("v1", "Node", label_selector=CONTROL_PLANE_LABEL)
    )
    for namespace in result.namespaces:
        _sweep_namespace(kube, _Where(namespace, consumers[namespace], nodes), result)
    if result.changed or result.failed:
        logger.info(
            "swept %d consumer namespaces: %d objects changed, %d failed%s",
            len(result.namespaces),
            len(result.changed),
            len(result.failed),
            " (tried again next hook)" if result.failed else "",
        )
    if not result.failed:
        bag[SWEEP_KEY] = charm
    return result


def consumer_namespaces(kube: Kube) -> dict[str, str]:
    """The Namespaces the control plane labelled as a consumer's: name -> the consumer.

    System namespaces are left out: an earlier revision labelled gpu-k8s-system for the
    workers' shared grant (rbac.worker_grant, consumer `worker`).
    """
    found = {}
    for ns in kube.list("v1", "Namespace", label_selector=CONSUMER_LABEL):
        meta = ns["metadata"]
        name, labels = meta["name"], meta.get("labels") or {}
        if name in SYSTEM_NAMESPACES or name.startswith("kube-"):
            continue
        if labels.get(MANAGED_BY_LABEL) == FIELD_MANAGER:
            found[name] = labels.get(CONSUMER_LABEL, "")
    return found


@dataclasses.dataclass(frozen=True)
class _Where:
    """One consumer's namespace, its consumer and the control-plane nodes."""

    namespace: str
    consumer: str
    control_plane: frozenset[str]


def _sweep_namespace(kube: Kube, where: _Where, result: Sweep) -> None:
    for kind, step in (
        ("Calico policies", _calico),
        ("Services", _services),
        ("DaemonSets", _daemonsets),
        ("Pods", _pods),
    ):
        try:
            step(kube, where, result)
        except KubeError as e:  # the listing failed: this kind is tried again next hook
            logger.warning("sweep: %s of %s could not be listed: %s", kind, where.namespace, e)
            result.failed.append(f"{kind} of {where.namespace}")


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


def _calico(kube: Kube, where: _Where, result: Sweep) -> None:
    namespace = where.namespace
    for plural in CALICO_KINDS:
        path = f"/apis/{CALICO_GROUP_VERSION}/namespaces/{quote(namespace, safe='')}/{plural}"
        try:
            items = kube.request("GET", path).get("items") or []
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
    try:
        kube.request("DELETE", path, query={"propagationPolicy": "Background"})
    except KubeError as e:
        if e.status != 404:
            raise


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
    for service in kube.list("v1", "Service", namespace):
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
    for daemonset in kube.list("apps/v1", "DaemonSet", namespace):
        name = daemonset["metadata"]["name"]
        _change(
            result,
            f"DaemonSet {namespace}/{name}",
            "deleted with its pods (they tolerate cordons: no grant may make one)",
            lambda name=name: kube.delete("apps/v1", "DaemonSet", name, namespace),
        )


def _pods(kube: Kube, where: _Where, result: Sweep) -> None:
    namespace = where.namespace
    for pod in kube.list("v1", "Pod", namespace):
        meta, status = pod["metadata"], pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        kind, owner = _controller(meta)
        if kind == "DaemonSet":
            continue  # deleted with its DaemonSet (a failure there is tried again)
        why = refusal(pod, where.consumer, where.control_plane)
        if why is None:
            continue
        name = meta["name"]
        again = (
            f"; its {kind} {owner} makes it again through admission, refused while its template is"
            if kind
            else ""
        )
        _change(
            result,
            f"Pod {namespace}/{name}",
            f"deleted ({why}){again}",
            lambda name=name: kube.delete("v1", "Pod", name, namespace),
        )


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
