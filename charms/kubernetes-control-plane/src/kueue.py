# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Kueue made this cluster's: its manager configuration and the cluster-wide objects (no ops).

Sources, kubernetes-sigs/kueue at tag v0.19.2:
- `config/components/manager/controller_manager_config.yaml`: the shipped Configuration
  (`config.kueue.x-k8s.io/v1beta2`), `waitForPodsReady` commented out, and
  `integrations.frameworks` listing `jobset.x-k8s.io/jobset`;
- `apis/config/v1beta2/configuration_types.go` `WaitForPodsReady`: `timeout` (required),
  `blockAdmission`, `requeuingStrategy` {`timestamp`, `backoffLimitCount` (null: requeue
  forever), `backoffBaseSeconds`, `backoffMaxSeconds`}, `recoveryTimeout` (defaults to
  `timeout`); v1beta2 has no `enable`, and since v0.19 an absent block means enabled
  with a 30m timeout (`apis/config/v1beta2/defaults.go`, kueue#11855; only the alpha gate
  DisableWaitForPodsReady turns it off): the charm always writes it, with
  pods-ready-timeout, and `recoveryTimeout` apart (RECOVERY_TIMEOUT_MINUTES);
- `apis/kueue/v1beta2/*_types.go` and `config/components/crd/bases/*.yaml`: the storage
  version v1beta2 of ResourceFlavor {nodeLabels, nodeTaints, tolerations}, Cohort,
  WorkloadPriorityClass {value, description}, ClusterQueue {cohortName, ...} and
  LocalQueue; Cohort, ResourceFlavor, WorkloadPriorityClass and ClusterQueue are
  cluster-scoped.

The cluster-wide objects: one ResourceFlavor per GPU model the workers report, selecting
the nodes by the label the worker writes as NVIDIA's GPU Feature Discovery does
(`nvidia.com/gpu.product`, `-SHARED` appended under time-slicing) and naming the GPU taint
(a workload must tolerate it to be admitted there); one `cpu` flavor for every node; the
cohort `gpu-k8s` whose members (each team's ClusterQueue) borrow from it; and the
priorities `low`, `normal` and `high` that `train priority=...` names.

Each team's ClusterQueue `team-<namespace>` is the control plane's too (issue 29 item 6):
a team asking for it wrote its own guarantee, fairSharing weight and preemption policy,
and Kueue's docs say "Only batch administrators should create ClusterQueue objects"
(site/content/en/docs/concepts/cluster_queue.md). A team is a kube-api consumer that asks
for LocalQueues (access._queue); the quota it wants travels in its request
(`gpu-quota` GPUs per model, `cpu-quota`, `memory-quota`; unset: none of its own), and
the guarantees are read from those numbers, never from the live objects, and never past
the team's allowance: what the operator's `team-quotas` names for it, else a fair share
of the cluster (`allowances`), so a hostile team cannot declare the cluster its own. Every field of
ClusterQueueSpec (clusterqueue_types.go) that decides how a team shares is written, its
CRD default spelled out where there is one (config/components/crd/bases/
kueue.x-k8s.io_clusterqueues.yaml: flavorFungibility MayStopSearch/TryNextFlavor,
stopPolicy None, fairSharing weight 1), so a forced server-side apply owns them all; what
a team wrote before that this does not name (admissionChecks, lendingLimit, ...) is
removed by `takeover` (server-side apply keeps fields another manager owns).

Quotas add up (issue 29 item 6). The cohort holds the cluster: what the schedulable nodes
offer, per flavor (cpu and memory on `cpu`, GPUs on each model's flavor), less the GPUs
pods outside Kueue hold (those of namespaces it does not manage, `capacity`; ClusterQueue
nominalQuota "should represent the
resources in the cluster available for running jobs (after discounting resources
consumed by system components and pods not managed by kueue)", clusterqueue_types.go),
less what the teams' ClusterQueues hold as nominal quota of their own (their configured
`gpu-quota`, `cpu-quota`, `memory-quota` within their allowances: a guarantee; unset,
none). Kueue v0.19.2 serves
Cohort at v1beta2 with `spec.resourceGroups`, whose nominalQuota is "additional resources
on top of those defined by ClusterQueues within the Cohort ... a shared pool for the
ClusterQueues within it" (cohort_types.go); a member may take what the cohort has left,
its own nominal quota plus the pool plus the other members' unused nominal quota, and
the cohort's whole quota is the most it can ever be given (pkg/cache/scheduler/
resource_node.go available, potentialAvailable). So the members' and the cohort's nominal
quotas sum to the cluster, never past it: when the guarantees exceed the cluster (the
operator's allowances can; fair shares never do), each team's
queue is given what is left of it in the order the teams were related (`clamp`: an
earlier team keeps its guarantee whatever a later one asks), the leader says who asked
what and was given what (Blocked), and the cohort adds nothing.

A departed team's ClusterQueue (its kube-api relation gone) is deleted. Kueue v0.19.2
holds a ClusterQueue being deleted with the finalizer `kueue.x-k8s.io/resource-in-use`
while workloads hold quota in it: it is Terminating, admits nothing new ("Can't admit new
workloads; clusterQueue is terminating"), and the finalizer goes once no admitted
Workload is left (pkg/controller/core/clusterqueue_controller.go Reconcile,
pkg/cache/scheduler/cache.go ClusterQueueEmpty counts admitted Workloads,
clusterqueue.go inactiveReason). So the team's running jobs finish (their quota stays
counted until they do), its pending ones stay pending ("ClusterQueue team-<ns> doesn't
exist" once it is gone), and nothing of it is admitted again unless the team is related
again, which writes its queue anew.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from collections.abc import Callable, Collection
from typing import Any

import batch_engines
import yaml
from literals import KUEUE_NAMESPACE_LABEL, KUEUE_NAMESPACE_VALUE

from charms.gpu_k8s.v0.kubernetes_cluster import GPU_TAINT

API = "kueue.x-k8s.io/v1beta2"
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
# Kueue's integrations (pkg/controller/jobs/job, jobs/jobset, jobs/pod, jobs/deployment:
# their FrameworkName; `configure` says why each)
FRAMEWORKS = ("batch/job", JOBSET_FRAMEWORK, "pod", "deployment")
COHORT = "gpu-k8s"
CPU_FLAVOR = "cpu"
LABEL_PRODUCT = "nvidia.com/gpu.product"
SHARED_SUFFIX = "-SHARED"
PRIORITIES = {"low": 100, "normal": 1000, "high": 10000}
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# kueue v0.19.2 pkg/constants ManagedByKueueLabelKey: on every pod its pod integration gates
MANAGED_BY_KUEUE = "kueue.x-k8s.io/managed"
MANAGED_BY = "kubernetes-control-plane"


# waitForPodsReady.recoveryTimeout, at most: how long a running job's pods may stay not
# all ready (a pod failed or was evicted from a quarantined GPU, and its gang restarts)
# before Kueue evicts the job, frees its quota and requeues it (kueue v0.19.2
# core/workload_controller.go admittedNotReadyWorkload, reason WaitForRecovery, timed from
# the PodsReady=False transition; configuration_types.go: "Defaults to the value of
# timeout"). Left at that default, a gang that no longer fits after a quarantine held its
# quota, idle, for the whole pods-ready-timeout (10 minutes by default), which is sized for
# a first start with its image pulls. A recovery restarts a gang that ran: its old pods
# get a minute to save and stop (the tensorflow charm's terminationGracePeriodSeconds)
# and the new ones mostly start where the image is already pulled. 3 minutes is what the
# recoveryTimeout proposal first defaulted to (kueue PR #2737's draft of keps/349-all-or-nothing);
# a gang slower than that (a node pulling the image for the first time) is requeued,
# admitted again after Kueue's backoff (below), and resumes at its checkpoint.
# Never longer than pods-ready-timeout, which an operator may have set shorter.
RECOVERY_TIMEOUT_MINUTES = 3

# waitForPodsReady.requeuingStrategy: after a PodsReadyTimeout eviction (a first start
# past pods-ready-timeout, or a recovery past RECOVERY_TIMEOUT_MINUTES) Kueue requeues
# the job only once min(BACKOFF_BASE_SECONDS * 2^(count-1), BACKOFF_MAX_SECONDS) passed,
# `count` being that Workload's requeues so far (kueue v0.19.2 pkg/workload/workload.go
# UpdateRequeueState, pkg/util/wait/backoff.go; a preemption requeues at once,
# jobframework/reconciler.go). The count is never reset while the job exists: not by a
# readmission nor by its pods running again, only by deactivation
# (core/workload_controller.go; apis/kueue/v1beta2/workload_types.go RequeueState).
# Kueue's default cap, 3600 s (apis/config/v1beta2/defaults.go), is reached at the 7th
# requeue: a job that runs for weeks and whose gang could not come back within 3 minutes
# of a few node faults would then wait an hour before Kueue even queues it again, each
# time another fault moves it, however idle the cluster (issue 32 item 2 wants it back
# on healthy nodes soon).
# What a long backoff protects against is a job that can never become ready (an image
# that never pulls, pods that never fit the nodes): with timestamp Eviction it queues
# behind every job of its priority already waiting, so it takes back only quota nobody
# waiting could use, or preempts jobs it outranks. Capped at the default
# pods-ready-timeout (10 minutes), such a job is readmitted at most once per 20 minutes
# (10 to fail, 10 of backoff), job-status shows how often it was requeued, and a
# gang slow the first time (images pulled on first start) still gets 1, 2, 4 and 8
# minutes before the cap matters. backoffLimitCount stays unset (requeue forever): a
# deactivated job would need a person to reactivate it.
BACKOFF_BASE_SECONDS = 60
BACKOFF_MAX_SECONDS = 600


def configure(text: str, settings: batch_engines.Settings) -> str:
    """Kueue's manager configuration: waitForPodsReady, fair sharing, every team pod queued."""
    try:
        config = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise batch_engines.AddonError(f"kueue manager configuration is not YAML: {e}") from None
    if not isinstance(config, dict) or config.get("kind") != "Configuration":
        raise batch_engines.AddonError("kueue manager configuration is not a Configuration")
    recovery = min(settings.pods_ready_timeout_minutes, RECOVERY_TIMEOUT_MINUTES)
    config["waitForPodsReady"] = {
        "timeout": f"{settings.pods_ready_timeout_minutes}m",
        "recoveryTimeout": f"{recovery}m",
        "blockAdmission": False,
        "requeuingStrategy": {
            "timestamp": "Eviction",
            "backoffBaseSeconds": BACKOFF_BASE_SECONDS,
            "backoffMaxSeconds": BACKOFF_MAX_SECONDS,
        },
    }
    # Fair sharing, so that teams borrowing the cohort's pool (their ClusterQueues hold
    # no quota of their own by default) split it: a ClusterQueue whose share is lower may
    # preempt in one borrowing more (config v1beta2 configuration_types.go FairSharing;
    # present means on, cmd/kueue/main.go; flavorassigner.go canPreemptWhileBorrowing).
    # preemptionStrategies is required and must be one of pkg/config/validation.go's
    # validStrategySets; this is its third: LessThanOrEqualToFinalShare, and where the
    # preemptor still does not fit, LessThanInitialShare.
    config["fairSharing"] = {
        "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    }
    # Every batch Job and JobSet of a team's namespace goes through Kueue, queue label or
    # not (issue 29 leftover 3: an unlabelled Job ran outside the team's quota). Kueue
    # v0.19.2 suspends one on create (jobframework/utils.go WorkloadShouldBeSuspended:
    # manageJobsWithoutQueueName and the namespace matching managedJobsNamespaceSelector)
    # and manages it (reconciler.go ReconcileGenericJob: the same two checks); its Workload
    # names no LocalQueue, so it is never admitted ("LocalQueue  doesn't exist",
    # workload_controller.go getQueueBlocker). The selector keeps this to the consumers'
    # namespaces (the label the control plane gives every kube-api consumer's but a
    # storage provisioner's, rbac.consumer_grant: one that asked for no LocalQueue has its
    # Jobs held, never run outside the quotas): kube-system, kueue-system and
    # gpu-k8s-* carry no such label, so their Jobs are never suspended (for those
    # integrations "ManagedJobsNamespaceSelector ... modulat[es] the effects of
    # ManageJobsWithoutQueueName", apis/config/v1beta2/configuration_types.go).
    config["manageJobsWithoutQueueName"] = True
    config["managedJobsNamespaceSelector"] = {
        "matchLabels": {KUEUE_NAMESPACE_LABEL: KUEUE_NAMESPACE_VALUE}
    }
    # Every pod of a team's namespace goes through Kueue too (issue 29 item 6: a team's
    # bare pod or Deployment asking for 8 GPUs ran outside its quota, off the cohort's
    # pool). Kueue v0.19.2's pod integration gates, in the namespaces the selector above
    # matches, every pod no Kueue-managed job owns (pod_webhook.go Default: `suspend =
    # queue name != "" || manageJobsWithoutQueueName`; the scheduling gate
    # `kueue.x-k8s.io/admission`, the label and finalizer `kueue.x-k8s.io/managed`) and
    # makes one Workload per pod, admitted within the team's quota, which ungates it
    # (pod_controller.go Run); whatever made the pod: a bare pod, a ReplicaSet's, a
    # StatefulSet's, a DaemonSet's, a ReplicationController's (jobframework
    # FindAncestorJobManagedByKueue follows controller references through ReplicaSets and
    # every registered integration, enabled or not, a StatefulSet too, and stops at any
    # other owner, a DaemonSet or ReplicationController: integrationmanager.go
    # isKnownOwner; it finds no managed job above these pods because no team object may
    # name a controller: admission_policies CONSUMER_CONTROLLERS; a CronJob's Jobs are
    # batch Jobs, queued as such). The deployment integration
    # (which enables pod, ImplicitlyEnabledFrameworkNames) copies a Deployment's queue
    # and priority labels into its pod template on create and update
    # (deployment_webhook.go Default), so each of its pods is queued as the Deployment
    # says: the tensorflow charm's TensorBoard and model servers name the team's queue.
    # A pod the team made naming no queue waits forever ("LocalQueue  doesn't exist").
    # `pod` is named, not only implied by `deployment`: an implicitly enabled pod
    # integration skips every pod no Deployment or StatefulSet marked (pod_controller.go
    # Skip, "Pod Integration was implicitly enabled but object lacks parent annotation").
    # A framework left out gets a no-op webhook, so the release's webhook configurations
    # still answer (jobframework/setup.go setupControllers).
    config.setdefault("integrations", {})["frameworks"] = list(FRAMEWORKS)
    return yaml.safe_dump(config, sort_keys=False)


def _upstream_scope(selector: Any) -> bool:
    """Whether a webhook's namespaceSelector is upstream's "all but kube-system, kueue-system"."""
    for expression in (selector or {}).get("matchExpressions") or []:
        if expression.get("key") == "kubernetes.io/metadata.name" and (
            expression.get("operator") == "NotIn"
        ):
            return True
    return False


def narrow_webhooks(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scope Kueue's job and pod webhooks to the namespaces it manages (see literals.py).

    Only webhooks upstream scopes to "every namespace but kube-system and kueue-system"
    change; those of Kueue's own objects are left as they are.
    """
    for obj in objects:
        if obj["kind"] not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        for hook in obj.get("webhooks") or []:
            if _upstream_scope(hook.get("namespaceSelector")):
                hook["namespaceSelector"] = {
                    "matchLabels": {KUEUE_NAMESPACE_LABEL: KUEUE_NAMESPACE_VALUE}
                }
    return objects


def product_label(model: str, shared: bool) -> str:
    """The `nvidia.com/gpu.product` value GFD (and the worker charm) write for `model`."""
    joined = "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", model).split())
    value = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", joined[:63])
    if shared:
        value = f"{value[: 63 - len(SHARED_SUFFIX)]}{SHARED_SUFFIX}"
    return value


def flavor_name(model: str) -> str:
    """The ResourceFlavor of a GPU model: `gpu-nvidia-a10g` for `NVIDIA A10G`."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") or "unknown"
    name = f"gpu-{slug}"
    if len(name) > 63:
        digest = hashlib.sha256(model.encode()).hexdigest()[:8]
        name = f"{name[:54].rstrip('-')}-{digest}"
    return name


GPU_RESOURCE = "nvidia.com/gpu"
_SUFFIXES = {
    "": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]*)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")

Quotas = dict[tuple[str, str], float]  # (flavor, resource) -> amount
Guarantees = dict[tuple[str, str], dict[str, float]]  # (flavor, resource) -> {queue: amount}


def quantity(text: Any) -> float:
    """A Kubernetes quantity (apimachinery resource.Quantity's suffixes); 0 when unreadable.

    Each text is parsed once per process (a hook): `capacity` reads two or three per
    Node, and a thousand Nodes of a few instance types say the same few texts (issue 29's
    cost rule at 1,000 workers, docs/explanation/design-choices.md).
    """
    return _parsed_quantity(str(text or "0").strip())


@functools.lru_cache(maxsize=4096)
def _parsed_quantity(text: str) -> float:
    match = _QUANTITY.match(text)
    return float(match.group(1)) * _SUFFIXES[match.group(2) or ""] if match else 0.0


def _schedulable(node: dict[str, Any]) -> bool:
    """Ready, not cordoned, no NoSchedule/NoExecute taint but the GPU one (jobs land there)."""
    spec = node.get("spec") or {}
    taints = [
        t
        for t in spec.get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute") and t.get("key") != GPU_TAINT["key"]
    ]
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )
    return ready and not spec.get("unschedulable") and not taints


def _pod_gpus(pod: dict[str, Any]) -> float:
    return sum(
        quantity(((c.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE))
        for c in (pod.get("spec") or {}).get("containers") or []
    )


def capacity(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    models: list[str],
    *,
    shared: bool,
    managed: Callable[[], Collection[str]] | None = None,
) -> tuple[Quotas, Quotas]:
    """The schedulable nodes' capacity, and that less the GPUs held outside Kueue.

    The second is what Kueue may hand out; `size` needs both, from one pass over the Nodes
    (issue 29's cost rule at 1,000 workers: it read them twice).

    `pods`: the running pods. Kueue admits only the pods of the namespaces it manages
    (`managed`: those labelled KUEUE_NAMESPACE_LABEL, `configure`'s selector), so a GPU
    pod holds its GPUs outside Kueue unless, in one of them, it is a Job's (JobSet's
    child Jobs, the purge and import Jobs) or one Kueue's pod integration gated and
    admitted: every other pod made there since `configure` enabled it (model servers,
    TensorBoard, a team's own Deployment or bare pod), which its webhook labelled
    `kueue.x-k8s.io/managed: "true"` (pod_webhook.go Default; the deployment webhook puts
    the label into the template, deployment_webhook.go). A pod of a managed namespace
    without it ran before the integration was on (Kueue's pod reconciler skips pods
    without the label, pod_controller.go Skip), and a Job's pod elsewhere (a provisioner's, or any
    namespace Kueue's webhooks never see) counts like an unmanaged model server's (issue
    29 review item 1: Job-owned pods were taken for Kueue's wherever they ran, so GPUs
    used outside every quota stayed in the cohort and Kueue admitted past the nodes).
    `managed` None: every namespace is taken for Kueue's (callers that list no
    Namespaces). `managed` is asked only for a GPU pod on a flavor's node that Kueue
    would hold (labelled, or a Job's): a cluster running none of them (no team job)
    lists no Namespaces (issue 29's cost rule).

    A node under the GPU quarantine taint (NoExecute, lib kubernetes_cluster.py) is not
    schedulable: the leader resizes the cohort in the hook that sets the taint (addons.py)
    and all the node offers leaves it. What Kueue v0.19.2 does with the job that ran
    there: its pods are evicted, JobSet deletes and recreates the child Jobs, and the
    JobSet stays unsuspended with the same replicatedJobs, so its Workload keeps its
    admission and the quota it holds ("Job running with admitted workload, nothing to
    do", pkg/controller/jobframework/reconciler.go ReconcileGenericJob); it is never
    re-admitted. With waitForPodsReady (always on, `configure`) its PodsReady condition
    turns False, reason WaitForRecovery (reconciler.go generatePodsReadyCondition), and
    if the gang is not ready again within recoveryTimeout (RECOVERY_TIMEOUT_MINUTES,
    `configure`) Kueue evicts it, reason PodsReadyTimeout, and requeues it
    (core/workload_controller.go admittedNotReadyWorkload); only then is its quota free
    for others, unless another team's workload reclaims it first by preemption. A team's
    Workload the smaller cluster cannot hold is not left to wait that long: the
    quarantine hook deactivates it and activates it again once evicted (gang_release.py,
    `unfitting`).
    """
    by_product = {product_label(m, shared): flavor_name(m) for m in set(models)}
    out: Quotas = {(CPU_FLAVOR, "cpu"): 0.0, (CPU_FLAVOR, "memory"): 0.0}
    out |= {(f, GPU_RESOURCE): 0.0 for f in by_product.values()}
    flavor_of: dict[str, str] = {}
    for node in nodes:
        if not _schedulable(node):
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        out[(CPU_FLAVOR, "cpu")] += quantity(allocatable.get("cpu"))
        out[(CPU_FLAVOR, "memory")] += quantity(allocatable.get("memory"))
        product = ((node.get("metadata") or {}).get("labels") or {}).get(LABEL_PRODUCT)
        if product in by_product:
            flavor_of[node["metadata"]["name"]] = by_product[product]
            out[(by_product[product], GPU_RESOURCE)] += quantity(allocatable.get(GPU_RESOURCE))
    nodes_have = dict(out)
    namespaces = functools.cache(managed) if managed is not None else None
    for pod in pods:
        flavor = flavor_of.get((pod.get("spec") or {}).get("nodeName") or "", "")
        gpus = _pod_gpus(pod) if flavor else 0.0
        if gpus and not _held_by_kueue(pod, namespaces):
            key = (flavor, GPU_RESOURCE)
            out[key] = max(0.0, out[key] - gpus)
    return nodes_have, out


def _held_by_kueue(pod: dict[str, Any], managed: Callable[[], Collection[str]] | None) -> bool:
    """Whether Kueue admitted `pod` (`capacity`): labelled or a Job's, in a managed namespace."""
    metadata = pod.get("metadata") or {}
    admitted = (metadata.get("labels") or {}).get(MANAGED_BY_KUEUE) == "true" or any(
        o.get("kind") == "Job" for o in metadata.get("ownerReferences") or []
    )
    return admitted and (managed is None or (metadata.get("namespace") or "") in managed())


TEAM_PREFIX = "team-"


@dataclasses.dataclass(frozen=True)
class Team:
    """A team's wanted quota, from its kube-api request (strings as the request has them)."""

    namespace: str
    gpus: str = ""
    cpu: str = ""
    memory: str = ""

    @property
    def queue(self) -> str:
        """Its ClusterQueue: `team-<namespace>`."""
        return f"{TEAM_PREFIX}{self.namespace}"

    def nominal(self, flavors: list[str]) -> Quotas:
        """Its nominal quota per (flavor, resource): GPUs on each GPU flavor."""
        out: Quotas = {
            (CPU_FLAVOR, "cpu"): quantity(self.cpu),
            (CPU_FLAVOR, "memory"): quantity(self.memory),
        }
        out |= {(f, GPU_RESOURCE): quantity(self.gpus) for f in flavors}
        return out


# The words of `team-quotas` (the control plane's option) for the resources a team's
# request names (`gpu-quota`, `cpu-quota`, `memory-quota`).
ALLOWANCE_WORDS = {"gpu": GPU_RESOURCE, "cpu": "cpu", "memory": "memory"}
_TEAM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a namespace: RFC 1123 label
Allowances = dict[str, dict[str, float]]  # team namespace -> {resource: amount}


def parse_allowances(text: str) -> Allowances:
    """`team-quotas`: `<namespace>=gpu:<n>,cpu:<q>,memory:<q> ...`, whitespace-separated.

    Raises:
        ValueError: an entry that is not of that form, with the entry.
    """
    out: Allowances = {}
    for entry in text.split():
        team, _, spec = entry.partition("=")
        amounts: dict[str, float] = {}
        for part in spec.split(",") if spec else []:
            word, _, value = part.partition(":")
            if word not in ALLOWANCE_WORDS or not _QUANTITY.match(value) or word in amounts:
                amounts = {}
                break
            if word == "gpu" and not value.isdigit():
                amounts = {}
                break
            amounts[word] = quantity(value)
        if not _TEAM_NAME.match(team) or not amounts or team in out:
            raise ValueError(
                f"{entry!r} is not <namespace>=gpu:<n>,cpu:<quantity>,memory:<quantity> "
                "(each resource optional, at least one, each team once)"
            )
        out[team] = {ALLOWANCE_WORDS[w]: v for w, v in amounts.items()}
    return out


def _floor(resource: str, value: float) -> float:
    """`value` as a nominal quota can hold it: whole GPUs and bytes, millicores."""
    if resource == "cpu":
        return int(value * 1000 + 1e-9) / 1000
    return float(int(value + 1e-9))


def allowances(have: Quotas, teams: list[Team], configured: Allowances) -> Guarantees:
    """The most each team's ClusterQueue may hold as nominal quota (issue 29 item 6).

    A team's guarantee is its own ask (its kube-api request), so a hostile team related
    first could ask for the whole cluster and, with `reclaimWithinCohort: Any`, preempt
    every borrower. The operator decides instead: a team named in `team-quotas` (by
    namespace) may hold up to what it names there, per resource (`gpu`: on each GPU
    flavor, as `gpu-quota`); for a resource its entry does not name, and for every team
    not named, the allowance is a fair share: what the cluster has less the named
    allowances of the related teams, split evenly between the teams without one (whole
    GPUs, millicores, bytes, rounded down). Unconfigured, each of N teams may hold at most
    1/N of the cluster, so the allowances never sum past it; only named allowances can
    (`overcommitted`: Blocked with the numbers).
    """
    out: Guarantees = {}
    for key, cluster in have.items():
        resource = key[1]
        named = {
            t.queue: configured[t.namespace][resource]
            for t in teams
            if resource in configured.get(t.namespace, {})
        }
        rest = [t.queue for t in teams if t.queue not in named]
        left = max(0.0, cluster - sum(named.values()))
        share = _floor(resource, left / len(rest)) if rest else 0.0
        out[key] = {**named, **dict.fromkeys(rest, share)}
    return out


def capped(asked: Guarantees, allowed: Guarantees) -> Guarantees:
    """Each team's ask, no more than its allowance (`allowances`)."""
    return {
        key: {q: min(v, allowed.get(key, {}).get(q, 0.0)) for q, v in teams.items()}
        for key, teams in asked.items()
    }


def beyond_allowance(asked: Guarantees, allowed: Guarantees) -> list[str]:
    """What each team asked past its allowance, in words (the control plane logs them)."""
    out = []
    for (flavor, resource), teams in sorted(asked.items()):
        for queue, amount in sorted(teams.items()):
            most = allowed.get((flavor, resource), {}).get(queue, 0.0)
            if amount > most:
                out.append(
                    f"{queue} asked {_amount(resource, amount)} {resource} of flavor {flavor}, "
                    f"given its allowance {_amount(resource, most)}"
                )
    return out


# What capped a team's ask (`Cap.by`): its allowance named in `team-quotas`, its fair
# share (`team-quotas` names none for it), or the cluster (named allowances overcommit it).
BY_TEAM_QUOTAS, BY_FAIR_SHARE, BY_CLUSTER = "team-quotas", "fair-share", "cluster"
# The kube-api request's field for each resource (lib kube_api.py: `gpu-quota` per GPU model)
QUOTA_FIELDS = {GPU_RESOURCE: "gpu-quota", "cpu": "cpu-quota", "memory": "memory-quota"}


def caps(
    teams: list[Team],
    asked: Guarantees,
    allowed: Guarantees,
    given: Guarantees,
    configured: Allowances,
) -> dict[str, list[dict[str, str]]]:
    """Per team namespace, each ask it was given less of, for the team's own status.

    Each entry: the request's field (`QUOTA_FIELDS`), the flavor, what it asked, what its
    ClusterQueue was given (`clamp`) and what capped it (`BY_*`: the first cap that bit).
    The control plane publishes these on the team's kube-api relation (lib kube_api.py
    `quota-capped`); numbers as the status words them (`_amount`).
    """
    out: dict[str, list[dict[str, str]]] = {}
    for team in teams:
        named = configured.get(team.namespace, {})
        for (flavor, resource), queues in sorted(asked.items()):
            amount = queues.get(team.queue, 0.0)
            got = given.get((flavor, resource), {}).get(team.queue, 0.0)
            if got >= amount:
                continue
            most = allowed.get((flavor, resource), {}).get(team.queue, 0.0)
            if most >= amount:
                by = BY_CLUSTER
            else:
                by = BY_TEAM_QUOTAS if resource in named else BY_FAIR_SHARE
            out.setdefault(team.namespace, []).append(
                {
                    "field": QUOTA_FIELDS[resource],
                    "flavor": flavor,
                    "asked": _amount(resource, amount),
                    "given": _amount(resource, got),
                    "by": by,
                }
            )
    return out


def guarantees(teams: list[Team], flavors: list[str]) -> Guarantees:
    """What each team's ClusterQueue holds as nominal quota, per (flavor, resource).

    From the teams' requests (`Team`), never from the live ClusterQueues, which a team
    could once write. `flavors`: the GPU ResourceFlavors' names.
    """
    out: Guarantees = {}
    for team in teams:
        for key, amount in team.nominal(flavors).items():
            if amount:
                out.setdefault(key, {})[team.queue] = amount
    return out


def clamp(have: Quotas, asked: Guarantees, order: list[str]) -> Guarantees:
    """What each team's ClusterQueue is given: its ask, as far as the cluster still has it.

    Leftover 4 of issue 29: a team asking past the cluster Blocked the control plane while
    its ClusterQueue still held the whole ask as nominal quota, so Kueue counted a
    guarantee no node has (the members' nominal quotas are what a cohort can ever lend,
    resource_node.go potentialAvailable). First come, first served: teams in `order` (the
    queues by the kube-api relation's id, which Juju increments per model, so the order
    they were related in) each get min(ask, what the cluster has left) per flavor and
    resource, so a team asking later or more can never shrink what an earlier team holds.

    `have` is what the schedulable nodes offer (`capacity` with no pods), not what is left
    after the GPUs held outside Kueue (issue 29 review item 2: a later team's GPU
    Deployment, even `serve`'s, shrank an earlier team's guarantee at the next
    update-status). Those GPUs come off the cohort's own pool (`cohort_quota` of
    `capacity` with the pods), which every team borrows from: while they fit in it no
    guarantee is touched; past it, the guarantees stand as given and a team's admitted job
    whose pods find no free GPU waits Pending (Kueue counts quota, the scheduler the
    nodes) until the pods outside Kueue free them.
    """
    out: Guarantees = {}
    for key, teams in asked.items():
        left = have.get(key, 0.0)
        for queue in sorted(teams, key=lambda q: order.index(q) if q in order else len(order)):
            given = min(teams[queue], max(0.0, left))
            left -= given
            out.setdefault(key, {})[queue] = given
    return out


def team_queue(team: Team, flavors: list[str], given: Guarantees | None = None) -> dict[str, Any]:
    """The team's ClusterQueue (see the module docstring); `flavors`: the GPU flavors.

    `given` (`clamp`): its nominal quota where the cluster could not hold its whole ask.
    """
    nominal = team.nominal(flavors)
    for key in nominal:
        if given is not None and team.queue in given.get(key, {}):
            nominal[key] = given[key][team.queue]
    cpu = [
        {"name": r, "nominalQuota": _text(r, nominal[(CPU_FLAVOR, r)])} for r in ("cpu", "memory")
    ]
    groups: list[dict[str, Any]] = [
        {
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": CPU_FLAVOR, "resources": cpu}],
        }
    ]
    gpus = [
        {
            "name": f,
            "resources": [
                {
                    "name": GPU_RESOURCE,
                    "nominalQuota": _text(GPU_RESOURCE, nominal[(f, GPU_RESOURCE)]),
                }
            ],
        }
        for f in sorted(flavors)
    ]
    if gpus:
        groups.append({"coveredResources": [GPU_RESOURCE], "flavors": gpus})
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": _meta(team.queue),
        "spec": {
            "cohortName": COHORT,
            # this namespace's workloads only (a null selector admits from none)
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            # a team's guarantee is reclaimed from borrowers; within the team a higher
            # priority preempts a lower one. With fair sharing on (`configure`), Kueue
            # v0.19.2 picks another team's victims by share alone, whatever the priorities
            # (`train priority=high` included): pkg/scheduler/preemption/preemption.go
            # getTargets runs fairPreemptions, not classicalPreemptions (the only reader of
            # borrowWithinCohort's victims); findCandidates takes another ClusterQueue's
            # workloads only while it borrows (reclaimWithinCohort: Any) and
            # runFirstFsStrategy preempts one only while the preemptor's queue stays within
            # its nominal quota or its share after admission is at most the target's
            # (LessThanOrEqualToFinalShare, then LessThanInitialShare). A priority orders
            # the victims inside one ClusterQueue (common/ordering.go CandidatesOrdering)
            # and breaks ties of equal shares at admission (fair_sharing_iterator.go less).
            # borrowWithinCohort is kept for a Kueue without fair sharing; flavorassigner
            # canPreemptWhileBorrowing holds here either way.
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority"},
                "withinClusterQueue": "LowerPriority",
            },
            "fairSharing": {"weight": "1"},
            "flavorFungibility": {
                "whenCanBorrow": "MayStopSearch",
                "whenCanPreempt": "TryNextFlavor",
            },
            "stopPolicy": "None",
            "resourceGroups": groups,
        },
    }


def takeover(live: dict[str, Any] | None, want: dict[str, Any]) -> dict[str, Any] | None:
    """A JSON merge patch removing what `live`'s spec holds beyond `want`'s, or None.

    Server-side apply leaves the fields another manager owns (a team's, from before the
    control plane wrote its ClusterQueue); a merge patch sets each such map key to null
    (RFC 7396) and gives the lists whole, so the spec is `want`'s and nothing else.
    """

    def extra(have: Any, keep: Any) -> bool:
        if isinstance(have, dict) and isinstance(keep, dict):
            return any(k not in keep or extra(v, keep[k]) for k, v in have.items())
        if isinstance(have, list) and isinstance(keep, list):
            return len(have) != len(keep) or any(extra(h, k) for h, k in zip(have, keep))
        return False

    def nulls(have: Any, keep: Any) -> Any:
        if not (isinstance(have, dict) and isinstance(keep, dict)):
            return keep
        out = {k: None for k in have if k not in keep}
        out |= {k: nulls(have.get(k), v) for k, v in keep.items()}
        return out

    have = (live or {}).get("spec") or {}
    if not extra(have, want["spec"]):
        return None
    return {"spec": nulls(have, want["spec"])}


def _amount(resource: str, value: float) -> str:
    if resource == "memory":
        return f"{value / 2**30:g}Gi"
    return f"{value:g}"


def cohort_quota(have: Quotas, held: Guarantees) -> Quotas:
    """The cohort's own nominal quota: the cluster less the teams' guarantees (never < 0)."""
    return {k: max(0.0, v - sum(held.get(k, {}).values())) for k, v in have.items()}


def overcommitted(have: Quotas, held: Guarantees, given: Guarantees | None = None) -> str | None:
    """The Blocked message when the guarantees (`capped`) sum past the cluster, or None.

    Only the operator's named allowances can (`allowances`): the message names the option.

    With `given` (`clamp`), it says what each team that got less was given.
    """
    problems = []
    for (flavor, resource), teams in sorted(held.items()):
        total = sum(teams.values())
        cluster = have.get((flavor, resource), 0.0)
        if total > cluster:
            each = ", ".join(f"{n} {_amount(resource, v)}" for n, v in sorted(teams.items()))
            problem = (
                f"{_amount(resource, total)} {resource} of flavor {flavor} guaranteed "
                f"({each}) but the cluster has {_amount(resource, cluster)}"
            )
            mine = (given or {}).get((flavor, resource), {})
            short = [
                f"{n} given {_amount(resource, mine[n])} of {_amount(resource, v)}"
                for n, v in sorted(teams.items())
                if n in mine and mine[n] < v
            ]
            problems.append(f"{problem} ({', '.join(short)})" if short else problem)
    if not problems:
        return None
    return (
        "team-quotas overcommit the cluster: "
        + "; ".join(problems)
        + ": lower team-quotas of kubernetes-control-plane, or add nodes"
    )


@dataclasses.dataclass(frozen=True)
class Sizing:
    """The cohort's quota, each team's clamped guarantee, and the Blocked line, if any."""

    quota: Quotas
    given: Guarantees
    overcommitted: str | None
    beyond: list[str] = dataclasses.field(default_factory=list)  # asks past an allowance
    capped: dict[str, list[dict[str, str]]] = dataclasses.field(default_factory=dict)  # caps()
    have: Quotas = dataclasses.field(default_factory=dict)  # `capacity`: what Kueue may give


def size(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    models: list[str],
    teams: list[Team],
    flavors: list[str],
    *,
    shared: bool,
    managed: Callable[[], Collection[str]] | None = None,
    configured: Allowances | None = None,
) -> Sizing:
    """Size the cohort: the guarantees within each team's allowance, clamped to the nodes.

    `configured`: the operator's `team-quotas` (`allowances`: a fair share for the rest).
    GPUs held outside Kueue (`capacity` with the running `pods`) come off the cohort's
    pool, never an earlier team's guarantee (issue 29 review item 2, `clamp`).
    """
    nodes_have, have = capacity(nodes, pods, models, shared=shared, managed=managed)
    asked = guarantees(teams, flavors)
    allowed = allowances(nodes_have, teams, configured or {})
    held = capped(asked, allowed)
    given = clamp(nodes_have, held, [t.queue for t in teams])
    return Sizing(
        cohort_quota(have, given),
        given,
        overcommitted(nodes_have, held, given),
        beyond_allowance(asked, allowed),
        caps(teams, asked, allowed, given, configured or {}),
        have,
    )


def _true(workload: dict[str, Any], kind: str) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def stopped(workload: dict[str, Any]) -> bool:
    """Whether Kueue evicted the Workload or holds no quota for it (gang_release).

    Evicted True: Kueue stops its job and then clears the reservation whatever its
    spec.active (v0.19.2 jobframework/reconciler.go "handle eviction").
    """
    return _true(workload, "Evicted") or not _true(workload, "QuotaReserved")


def usage(workload: dict[str, Any]) -> Quotas | None:
    """The quota an admitted Workload holds per (flavor, resource); None if unreadable.

    status.admission.podSetAssignments[].resourceUsage, each resource on its
    `flavors` entry (v0.19.2 apis/kueue/v1beta2/workload_types.go PodSetAssignment).
    """
    out: Quotas = {}
    admission = (workload.get("status") or {}).get("admission") or {}
    try:
        for assignment in admission.get("podSetAssignments") or []:
            flavors = assignment.get("flavors") or {}
            for resource, amount in (assignment.get("resourceUsage") or {}).items():
                if not _QUANTITY.match(str(amount)):
                    return None
                key = (flavors[resource], resource)
                out[key] = out.get(key, 0.0) + quantity(amount)
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    return out or None


def _holds(workload: dict[str, Any]) -> bool:
    """Admitted (quota reserved), neither evicted nor finished, nor deactivated."""
    return (
        _true(workload, "QuotaReserved")
        and not _true(workload, "Evicted")
        and not _true(workload, "Finished")
        and (workload.get("spec") or {}).get("active", True) is not False
    )


def unfitting(
    workloads: list[dict[str, Any]], have: Quotas, candidates: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Which `candidates` to deactivate so that what Kueue holds fits `have` again.

    `workloads`: every Workload of the cluster; `have`: what the schedulable nodes give
    Kueue (`capacity`, per (flavor, resource) this charm sizes; other keys are not
    judged). While the admitted Workloads hold more than `have` of some resource, the
    candidate holding it with the lowest priority (the newest first among equals) is
    taken and its usage given back. Nothing is taken when any admitted Workload's usage
    cannot be read (the totals would be guesses).
    """
    held: Quotas = {}
    for workload in workloads:
        if not _holds(workload):
            continue
        use = usage(workload)
        if use is None:
            return []
        for key, amount in use.items():
            held[key] = held.get(key, 0.0) + amount
    ordered = sorted(
        (w for w in candidates if _holds(w)),
        key=lambda w: (
            int((w.get("spec") or {}).get("priority") or 0),
            -_stamp_order(w),
        ),
    )
    out = []
    for workload in ordered:
        over = {k for k, v in held.items() if k in have and v > have[k] + 1e-9}
        if not over:
            break
        use = usage(workload) or {}
        if not any(use.get(k, 0.0) > 0 for k in over):
            continue
        out.append(workload)
        for key, amount in use.items():
            held[key] -= amount
    return out


def _stamp_order(workload: dict[str, Any]) -> float:
    """The creationTimestamp as a sortable number (RFC 3339 UTC, as the API writes it)."""
    text = str((workload.get("metadata") or {}).get("creationTimestamp") or "")
    digits = re.sub(r"[^0-9]", "", text)
    return float(digits or 0)


def _text(resource: str, value: float) -> str:
    if resource == "cpu" and value != int(value):
        return f"{int(value * 1000)}m"
    return str(int(value))


def _cohort_spec(quota: Quotas | None) -> dict[str, Any]:
    """The Cohort's resourceGroups: the teams' two groups (queues.py), with `quota`."""
    if quota is None:
        return {}
    cpu = [
        {"name": r, "nominalQuota": _text(r, quota.get((CPU_FLAVOR, r), 0.0))}
        for r in ("cpu", "memory")
    ]
    groups: list[dict[str, Any]] = [
        {
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": CPU_FLAVOR, "resources": cpu}],
        }
    ]
    gpus = [
        {"name": f, "resources": [{"name": GPU_RESOURCE, "nominalQuota": _text(r, v)}]}
        for (f, r), v in sorted(quota.items())
        if r == GPU_RESOURCE
    ]
    if gpus:
        groups.append({"coveredResources": [GPU_RESOURCE], "flavors": gpus})
    return {"resourceGroups": groups}


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}}


def cluster_objects(
    models: list[str], *, shared: bool = False, quota: Quotas | None = None
) -> list[dict[str, Any]]:
    """The cohort (holding `quota`: `cohort_quota`), the priorities and the flavors."""
    cohort = {"apiVersion": API, "kind": "Cohort", "metadata": _meta(COHORT)}
    objects: list[dict[str, Any]] = [
        {**cohort, "spec": _cohort_spec(quota)},
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": _meta(CPU_FLAVOR), "spec": {}},
    ]
    for name, value in PRIORITIES.items():
        objects.append(
            {
                "apiVersion": API,
                "kind": "WorkloadPriorityClass",
                "metadata": _meta(name),
                "value": value,
                "description": f"train priority={name}",
            }
        )
    for model in sorted(set(models)):
        objects.append(
            {
                "apiVersion": API,
                "kind": "ResourceFlavor",
                "metadata": {
                    **_meta(flavor_name(model)),
                    "annotations": {"gpu-k8s.io/gpu-model": model},
                },
                "spec": {
                    "nodeLabels": {LABEL_PRODUCT: product_label(model, shared)},
                    "nodeTaints": [dict(GPU_TAINT)],
                },
            }
        )
    return objects
