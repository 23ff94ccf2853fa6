# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The `kube-api` interface: least-privilege Kubernetes access for other charms.

A consumer (`KubeApiRequirer`) asks in its application databag for a namespace and the
RBAC rules it needs there (`rules`) and cluster-wide (`cluster-rules`):

    namespace: training
    rules: '[{"api-groups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get"]}]'
    cluster-rules: '[{"api-groups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]'

The control plane (`KubeApiProvider`) checks the request against the least-privilege
policy (`check_policy`), creates the namespace, a ServiceAccount and the bindings, and
answers in its application databag with the endpoint, namespace, service account name
and the ID of a Juju secret holding the kubeconfig (granted to that relation only), or
with `error` when it refuses the request. The kubeconfig never travels in a databag.
Its token is short-lived: the provider writes a new revision of the secret before it
expires (`grant(..., rotate=...)` sets the secret's rotate policy, so Juju fires
`secret-rotate` on the provider); the requirer reads the latest revision in every hook
(`kubeconfig()` reads with refresh=True) and hears of a new one by `secret-changed`,
which a consumer must observe and reconcile on.
A consumer that queues work through Kueue (it asks for `localqueues` in its namespace) may
add the quota it wants for its team (`gpu-quota`: GPUs per GPU model, `cpu-quota`,
`memory-quota`: Kubernetes quantities); the control plane writes the team's ClusterQueue
`team-<namespace>` from these numbers (its kueue.py), checks that all teams' quotas fit
the cluster, and never reads a quota back from the cluster. A consumer never writes a
ClusterQueue (issue 29 item 6): unset quotas are none of its own (it borrows from the
cohort), as for a requester older than these fields.

The control plane answers a team with what capped its ask (`quota-capped`, a JSON list,
absent when nothing did): each field it was given less of, the GPU flavor (model) or
`cpu`, the numbers asked and given, and why: `team-quotas` (the control plane's option
names the team's allowance), `fair-share` (it names none for the team: the cluster split
between the teams without one) or `cluster` (the operator's allowances overcommit it; the
control plane is Blocked saying so). `quota_capped()` reads it; a control plane before
LIBPATCH 22 publishes none, which reads as nothing capped.

A storage provisioner (efs-storage) also publishes whom it serves (`storage-consumers`: each
`shared-storage` consumer's application and the EFS access point its volume mounts, "" for
a plain NFS volume), which the control plane cannot see: it fences that provisioner's
volumes and claims to those consumers' namespaces and access points
(`gpu-k8s-efs-within-consumers`: kubernetes-control-plane's admission_policies.py) and
answers with the same field once that policy is applied (so the provisioner hears of it
by relation-changed); until then the API server refuses that consumer's writes. The field
is written by the provisioner's leader agent, not with its token: a stolen token cannot
widen it.

It also publishes `node-set`, a digest of the cluster's worker nodes: it changes when a
node joins or leaves, so a consumer that follows the nodes (efs-storage's mount target
per zone) gets `relation-changed` at once instead of waiting for update-status.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Collection
from typing import Annotated, Any

import ops
import pydantic

from charms.gpu_k8s.v0.databag import Databag, Endpoint, explain, write

LIBID = "26b1d42dbc2949cb8a83e29b11759d4f"
LIBAPI = 0
LIBPATCH = 32

logger = logging.getLogger(__name__)

FORBIDDEN_VERBS = frozenset({"escalate", "bind", "impersonate"})
RBAC_GROUP = "rbac.authorization.k8s.io"
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_WORD = re.compile(r"^[a-z0-9.\-/*]*$", re.IGNORECASE)
# A non-negative Kubernetes quantity, as a quota: digits with an optional fraction and one of
# apimachinery resource.Quantity's suffixes (binary Ki..Ei, decimal m k M G T P E).
# A Juju application name (juju/names ValidApplication: lowercase words joined by dashes, not
# ending in a number-only word) and an EFS access point ID (AWS: fsap- and 17 hex digits;
# the range leaves room), as `storage-consumers` carries them.
_APPLICATION = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]*[a-z][a-z0-9]*)*$")
_ACCESS_POINT = re.compile(r"^fsap-[0-9a-f]{8,40}$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")

# How much a request may ask (review44a G1): Juju bounds no relation value below MongoDB's
# 16 MB document (canonical/operator#1304), and kube-apiserver refuses a body over 3 MiB
# (413) and etcd an object over 1.5 MiB (a 500, kubernetes/kubernetes#112152): a request
# of 60,000 rules once made the grant of every consumer after it fail, and cost the leader
# 1.5 s of parsing in every hook. Each bound leaves room over what the charms ask
# (tensorflow: 13 rules and 4, at most 5 items in a list, words of at most 28 characters,
# 1.3 KB of JSON; efs-storage: 2 rules and 5) and keeps the largest Role or ClusterRole a request
# can make near 64 KiB, far under both limits.
# - MAX_RULES: rules in `rules`, and in `cluster-rules`;
# - MAX_ITEMS: items in each list of a rule (api-groups, resources, verbs, resource-names);
# - MAX_WORD: characters of an API group, resource, verb or name: a DNS subdomain's 253
#   (kubernetes.io/docs/concepts/overview/working-with-objects/names), the longest a
#   group or an object's name may be;
# - MAX_JSON: characters of the JSON of each of `rules` and `cluster-rules` in the
#   databag, checked before it is parsed; MAX_STORAGE_JSON those of `storage-consumers`:
#   a file system has at most 10,000 access points unless AWS raises it (docs.aws.amazon.com
#   efs/latest/ug/create-access-point.html, read 2026-11-28), an entry is its application's
#   name and an access point ID (`"<app>": "fsap-<17 hex>", `: at most ~80 characters), so
#   10,000 consumers fit in 1 MiB (64 KiB stopped a provisioner at ~1,400: final44a N1);
#   parsing 1 MiB costs the leader ~10 ms, and only a named provisioner's is used;
# - MAX_QUANTITY: characters of a quota (`gpu-quota`, `cpu-quota`, `memory-quota`): the
#   control plane keeps each in its peer data.
MAX_RULES = 64
MAX_ITEMS = 32
MAX_WORD = 253
MAX_JSON = 64 * 1024
MAX_STORAGE_JSON = 1024 * 1024
MAX_QUANTITY = 32

# Namespaces no consumer may ask for: Kubernetes' own (kube-system, kube-public,
# kube-node-lease, default: kubernetes.io/docs/concepts/overview/working-with-objects/
# namespaces, "Initial namespaces"; the page also says the `kube-` prefix is reserved, which
# `check_policy` refuses as a whole) and those the control plane fills: gpu-k8s-system (GPU
# validation pods), the batch engines' jobset-system and kueue-system (their release
# manifests' config/default kustomizations), flannel's kube-flannel (files/kube-flannel.yml)
# and, for the NetworkPolicy CNI of issue 29 item 4, Calico's operator install
# (tigera-operator and calico-system: projectcalico/calico manifests/ocp/00-namespace-*;
# calico-apiserver is kept reserved for older operator releases, which ran the API server
# there before tigera/operator#3989 moved it into calico-system in 2025).
SYSTEM_NAMESPACES = frozenset(
    {
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "kube-flannel",
        "gpu-k8s-system",
        "gpu-k8s-gpu",  # the privileged NVIDIA components (Pod Security `privileged`)
        "gpu-k8s-efs-csi",  # the EFS CSI driver's node plugin (Pod Security `privileged`)
        "jobset-system",
        "kueue-system",
        "tigera-operator",
        "calico-system",
        "calico-apiserver",
    }
)

READ_VERBS = frozenset({"get", "list", "watch"})
# The cluster-wide reads a consumer may hold, each with who needs it and why. Nothing else
# is granted outside the consumer's own namespace (but NAMED_CLUSTER_OBJECTS and, for an
# application the operator trusts as a storage provisioner, PROVISIONER_RULES).
CLUSTER_READS: dict[tuple[str, str], str] = {
    ("", "nodes"): (
        "tensorflow sizes its team's quota and refuses jobs no node can hold from the Nodes'"
        " GPU capacity (queues.py, placement.py) and reads a pod's Node for GPU metrics;"
        " efs-storage serves a mount target in each zone that has a Node (efs.py)"
    ),
    ("kueue.x-k8s.io", "resourceflavors"): (
        "tensorflow's ClusterQueue names the ResourceFlavors the control plane made (queues.py)"
    ),
    ("kueue.x-k8s.io", "cohorts"): (
        "tensorflow refuses a job larger than its cohort's whole quota, the Cohort's own"
        " nominal quota plus its members' (placement.py beyond_cohort)"
    ),
    ("kueue.x-k8s.io", "clusterqueues"): (
        "tensorflow reads the cohort's members' nominal quota (placement.py beyond_cohort)"
        " and its own team's use (job-status, train dry-run=true: queues.py); it writes"
        " none: the control plane writes each team's (_QUEUES)"
    ),
}
# Cluster-scoped objects a consumer may write only by name (`resource-names`): RBAC then
# allows the verbs on those names only. `create` by name works through server-side apply,
# whose create is authorized with the object's name (kubernetes staging/src/k8s.io/
# apiserver/pkg/endpoints/handlers/patch.go, withAuthorization of the create attributes); a
# plain POST carries no name and is refused ("You cannot restrict create or
# deletecollection requests by their resource name", kubernetes.io/docs/reference/
# access-authn-authz/rbac/#referring-to-resources).
# None today: a team's ClusterQueue, the one such object before LIBPATCH 17, is the control
# plane's since (a team writing its own could claim the cluster as its guarantee, raise its
# fair-sharing weight or change its preemption policy: _QUEUES).
NAMED_CLUSTER_OBJECTS: dict[tuple[str, str], str] = {}
# The one name each of those a consumer may use: its own, from its namespace. Any other
# name would let it rewrite, delete or take first another consumer's object.
OWN_NAMES: dict[tuple[str, str], str] = {}
NAMED_VERBS = frozenset({"get", "create", "patch", "update", "delete"})
# A storage provisioner (efs-storage) makes the PersistentVolume and the claim of each of its
# consumers, in the consumer's namespace. PersistentVolume creation is an escalation path
# (a hostPath volume: RBAC good practices, "Persistent volume creation"), so these are
# granted only to the applications the control plane's operator names as provisioners, and
# fenced by admission: the control plane's ValidatingAdmissionPolicy
# `gpu-k8s-efs-volumes-only` (charms/kubernetes-control-plane/src/admission_policies.py)
# refuses any ServiceAccount outside kube-system a PersistentVolume create or update that is
# not EFS (the EFS CSI driver with an `<fs-id>::<fsap-id>` handle, or NFS to an EFS DNS
# name): no hostPath, no other driver, whatever RBAC grants; and `gpu-k8s-efs-own-volumes`
# lets it create, change or delete only the volumes labelled `gpu-k8s.io/efs-app: <its
# ServiceAccount's name>`, a claimRef changed only as efs-storage does (it may only lose
# uid and resourceVersion). `gpu-k8s-efs-own-claims` matches the provisioners' accounts
# the control plane granted: each creates, changes or deletes only the claims labelled
# `gpu-k8s.io/efs-app: <its ServiceAccount's name>`, and writes one only into the
# namespace granted to the consumer its `gpu-k8s.io/consumer` label names.
# It reads a Namespace (get, by name) to put a consumer's claim only into a namespace the
# control plane granted that consumer (labelled `gpu-k8s.io/consumer: <app>`; review N3):
# a read, and no write on namespaces is ever granted, so the label is the control plane's.
# It checks which pods mount a claim before it deletes one (efs-storage storage.py): those
# reads are no cluster-wide rule (every team's pod specs, their env values and command lines:
# review44a G8) but a Role the control plane writes in each namespace granted to a consumer
# the provisioner serves (`storage-consumers`; kubernetes-control-plane rbac.py
# provisioner_pods_manifests), removed when it serves that consumer no more.
PROVISIONER_RULES: dict[tuple[str, str], frozenset[str]] = {
    ("", "namespaces"): frozenset({"get"}),
    ("", "persistentvolumes"): frozenset({*READ_VERBS, "create", "patch", "update", "delete"}),
    ("", "persistentvolumeclaims"): frozenset(
        {*READ_VERBS, "create", "patch", "update", "delete"}
    ),
}
# What a provisioner of LIBPATCH 28 and earlier still asks for cluster-wide: reading pods.
# The provider drops such a rule from a provisioner's request (`without_legacy_reads`) and
# grants the rest, so an efs-storage not yet refreshed keeps its grant (it reads pods where
# it serves through the control plane's Roles); anyone else asking for it is refused.
LEGACY_PROVISIONER_READS = frozenset({("", "pods")})

# Escalation paths of kubernetes.io/docs/concepts/security/rbac-good-practices/ ("Privilege
# escalation risks", read 2026-11-27), named in the refusal of a rule that touches them.
_WORKLOAD_GROUPS = frozenset({"apps", "batch", "jobset.x-k8s.io"})
_WORKLOAD_CORE = frozenset({"pods", "replicationcontrollers"})
_WORKLOAD = "workload creation outside the own namespace (RBAC good practices: Workload creation)"
_PV = "persistentvolume creation (hostPath; RBAC good practices: Persistent volume creation)"
_NODES_PROXY = "nodes/proxy, the kubelet's API (RBAC good practices: Access to proxy subresource)"
_TOKEN = "token request outside the own namespace (RBAC good practices: Token request)"
_CSR = "certificatesigningrequests and signers (RBAC good practices: CSRs and certificate issuing)"
_WEBHOOKS = "admission webhooks and policies (RBAC good practices: Control admission webhooks)"
_NAMESPACES = "namespace modification (RBAC good practices: Namespace modification)"
# Writing Endpoints or EndpointSlices lets a Service send traffic to any address, other
# namespaces' pods included (CVE-2021-25740, kubernetes/kubernetes#103675; Kubernetes took
# these writes out of its `edit` and `admin` roles for that reason).
_ENDPOINTS = "endpoints writes (traffic to other namespaces' pods: CVE-2021-25740)"
# "A PriorityClass is a non-namespaced object" and "a malicious user could create Pods at
# the highest possible priorities, causing other Pods to be evicted/not get scheduled"
# (kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/, read
# 2026-11-27). In `cluster-rules` a class of its own lets a team's pods preempt the others';
# in `rules` a Role grants nothing on it (kubernetes pkg/registry/rbac/validation/rule.go
# VisitRulesFor visits a namespace's RoleBindings only for a request in that namespace,
# and a cluster-scoped one has none), so the rule could only mislead. The control plane's
# policy refuses a consumer's pod naming any class, whatever RBAC grants
# (admission_policies.py CONSUMER_PODS).
_PRIORITY_CLASSES = (
    "a PriorityClass is cluster-wide (its pods preempt lower priorities: Pod Priority and"
    " Preemption), and a pod in a consumer's namespace may name none"
    " (gpu-k8s-consumer-pods-off-the-control-plane); order a team's jobs with Kueue's"
    " WorkloadPriorityClasses instead"
)
_SECRETS = (
    "secrets cannot be granted cluster-wide, only in rules (RBAC good practices: Listing secrets)"
)

# Writes that are escalations even in the consumer's own namespace, though RBAC would keep
# them there (issue 29 item 1, second review): neither tensorflow nor efs-storage asks for
# any (their literals.py), so each is refused in `rules` as in `cluster-rules`.
# - A status subresource is its controller's record of the world, which other components
#   act on: a Service's status.loadBalancer.ingress makes kube-proxy on every node send
#   that IP's traffic to the Service, other namespaces' included (CVE-2020-8554,
#   kubernetes/kubernetes#97076, GHSA-j9wf-vvm6-4r9w: "patch services/status"); a Pod's
#   status.podIP goes into its Services' EndpointSlices (as CVE-2021-25740's writes do).
_STATUS = "status subresources are their controllers' to write"
_BINDING = (
    "pods/binding and bindings (a Binding puts a pod on any node, the control plane's"
    " included, past the scheduler: only kube-scheduler binds)"
)
_EVENTS = (
    "events writes (no ResourceQuota counts Events: the cluster's components write them,"
    " each kept an hour)"
)
_OWN_NAMESPACE_WRITES = {
    ("", "services/status"): (
        "services/status (a LoadBalancer ingress IP intercepts the cluster's traffic to it:"
        " CVE-2020-8554, kubernetes/kubernetes#97076)"
    ),
    # Kueue starts a suspended Job once its Workload is admitted (kueue pkg/controller/
    # jobframework/reconciler.go: "start the job if the workload has been admitted"); the
    # admission is written in workloads/status, so writing it admits a job past the quota.
    ("kueue.x-k8s.io", "workloads/status"): (
        "kueue workloads/status (writing status.admission admits a job past the quota)"
    ),
    # An ephemeral container joins a running pod, its volumes and service account included,
    # with no resources of its own ("Ephemeral containers use spare resources already
    # allocated to the pod", core/v1 EphemeralContainer.resources; kubernetes.io/docs/
    # concepts/workloads/pods/ephemeral-containers): into the pods of another party in the
    # namespace (efs-storage's claims' users, the control plane's), past Kueue's accounting.
    ("", "pods/ephemeralcontainers"): (
        "pods/ephemeralcontainers (an ephemeral container joins a running pod, unaccounted)"
    ),
    # An in-place resize changes a running pod's cpu and memory (kubernetes.io/docs/tasks/
    # configure-pod-container/resize-container-resources, "Resize CPU and Memory Resources
    # assigned to Containers": cpu and memory only, through the pods/resize subresource
    # since 1.32, on by default since 1.33). Kueue v0.19.2 admitted the pod's requests as
    # created and does not admit them again on a resize (kubernetes-sigs/kueue#5257, open:
    # "a potential way to bypass Kueue quota"), so a resize grows an admitted pod past
    # what its team's quota gave.
    ("", "pods/resize"): (
        "pods/resize (an in-place resize grows an admitted pod's cpu and memory past what"
        " Kueue admitted)"
    ),
    # The namespace's ResourceQuota and LimitRange bound what the team may use
    # (kubernetes.io/docs/concepts/policy/resource-quotas): the operator's, not the team's.
    ("", "resourcequotas"): "resourcequotas writes (the namespace's quota is the operator's)",
    ("", "limitranges"): "limitranges writes (the namespace's limits are the operator's)",
    # A Binding sets a pod's node as kube-scheduler does, skipping the scheduler and the
    # control plane's NoSchedule taint: kube-apiserver checks only that the pod is not being
    # deleted, not bound yet and not gated (kubernetes pkg/registry/core/pod/storage/
    # storage.go BindingREST.Create, setPodHostAndAnnotations), and kubelet admits a pod
    # bound to its node checking only NoExecute taints (pkg/kubelet/lifecycle/predicate.go
    # generalFilter). A team's ungated pod naming no scheduler was one Binding away from the
    # control-plane node, beside admin.conf. `bindings` is the same create, the legacy way.
    ("", "pods/binding"): _BINDING,
    ("", "bindings"): _BINDING,
    # No ResourceQuota counts Events ("events haven't been quota-ed before": kubernetes
    # pkg/quota/v1/install/registry.go ignoredResources, both groups), and each stays in
    # etcd for kube-apiserver's --event-ttl (1 h): a consumer writing them could fill the
    # cluster's store past the object counts the control plane gives its namespace.
    ("", "events"): _EVENTS,
    ("events.k8s.io", "events"): _EVENTS,
    # A DaemonSet's pods tolerate cordons, node pressure and a lost node for ever (kubernetes
    # pkg/controller/daemon/util/daemonset_util.go AddOrUpdateDaemonPodTolerations), and
    # drains leave them (lib drain.py, as kubectl drain's daemonSetFilter): a team's GPU
    # DaemonSet kept a node's GPUs through a GPU reset and a driver upgrade's drain. The
    # control plane's admission policy refuses such pods in a consumer's namespace too.
    ("apps", "daemonsets"): (
        "daemonsets writes (a DaemonSet's pods tolerate cordons and lost nodes and stay"
        " through drains, keeping a node's GPUs from its reset and driver upgrade: DaemonSets"
        " are the cluster admin's)"
    ),
}


def _own_namespace_write(group: str, resource: str, verbs: set[str]) -> str | None:
    """Why writing (group, resource) is refused in any scope (_OWN_NAMESPACE_WRITES)."""
    if verbs <= READ_VERBS:
        return None
    named = _OWN_NAMESPACE_WRITES.get((group, resource))
    if named:
        return named
    if resource.endswith("/status"):
        what = f"{group}/{resource}" if group else resource
        return f"{what}: {_STATUS}"
    return None


# By API group, or by (group, resource) in any scope (a Role naming these cluster-scoped
# objects is refused too: it could only mislead), or outside the own namespace only.
# A ClusterQueue's nominalQuota is its team's guarantee, its fairSharing weight and
# preemption policy how it competes with the others (kueue v0.19.2 apis/kueue/v1beta2/
# clusterqueue_types.go); Kueue's docs: "Only batch administrators should create
# ClusterQueue objects" (site/content/en/docs/concepts/cluster_queue.md). The control
# plane writes each team's from the quota in its request (`gpu-quota`, ...).
_QUEUES = (
    "clusterqueues writes (a team's ClusterQueue is the control plane's: ask for your quota"
    " with gpu-quota, cpu-quota and memory-quota instead)"
)
_KUEUE_QUEUES = ("kueue.x-k8s.io", "clusterqueues")
# Calico's policy API: calico.yaml (v3.32.1, the pinned manifest) installs the
# crd.projectcalico.org CRDs, namespaced NetworkPolicy and NetworkSet among them, and the
# ClusterRoles that read them (tests/fixtures/calico/calico-v3.32.1-rbac.yaml); projectcalico.
# org is its API server's group (not applied here), the same kinds. Calico evaluates the
# policies of a tier by their `order` and the first Allow or Deny ends it (docs.tigera.io
# calico 3.32 network-policy/policy-tiers/tiered-policy, and the Tier reference, "How
# policy is evaluated"): a team's Calico policy allowing every egress before the Kubernetes
# NetworkPolicies reopened what the control plane's egress allow-list leaves out (every
# address and port it does not name: network_policies.py), which the admission policy
# guarding networking.k8s.io cannot see. Calico policy is the cluster admin's alone.
_CALICO = (
    "Calico policy (crd.projectcalico.org, projectcalico.org: a Calico NetworkPolicy ordered"
    " first overrides the control plane's egress policy; Calico policy is the cluster"
    " admin's alone)"
)
_GROUP_PATHS = {
    "certificates.k8s.io": _CSR,
    "admissionregistration.k8s.io": _WEBHOOKS,
    "crd.projectcalico.org": _CALICO,
    "projectcalico.org": _CALICO,
}
_ANY_SCOPE_PATHS = {
    ("", "namespaces"): _NAMESPACES,
    ("", "endpoints"): _ENDPOINTS,
    ("discovery.k8s.io", "endpointslices"): _ENDPOINTS,
    ("", "nodes/proxy"): _NODES_PROXY,
    ("", "persistentvolumes"): _PV,
    ("scheduling.k8s.io", "priorityclasses"): _PRIORITY_CLASSES,
}
_CLUSTER_PATHS = {
    ("", "secrets"): _SECRETS,
    ("", "serviceaccounts/token"): _TOKEN,
    **{("", resource): _WORKLOAD for resource in _WORKLOAD_CORE},
}


def _escalation(group: str, resource: str, *, cluster: bool) -> str | None:
    """The escalation path a rule on (group, resource) opens, or None."""
    base = resource.partition("/")[0]
    path = (
        _GROUP_PATHS.get(group)
        or _ANY_SCOPE_PATHS.get((group, resource))
        or _ANY_SCOPE_PATHS.get((group, base))
    )
    if path or not cluster:
        return path
    path = _CLUSTER_PATHS.get((group, resource)) or _CLUSTER_PATHS.get((group, base))
    return path or (_WORKLOAD if group in _WORKLOAD_GROUPS else None)


_SECRET_PREFIX = "kube-api-"


def secret_label(relation_id: int) -> str:
    """The label of the provider's kubeconfig secret for one relation."""
    return f"{_SECRET_PREFIX}{relation_id}"


def relation_id_of(label: str | None) -> int | None:
    """The relation whose kubeconfig secret has `label` (`secret_label`), or None."""
    if not label or not label.startswith(_SECRET_PREFIX):
        return None
    rest = label[len(_SECRET_PREFIX) :]
    return int(rest) if rest.isdigit() else None


class Rule(Databag):
    """One RBAC policy rule."""

    api_groups: list[str] = pydantic.Field(alias="api-groups", min_length=1)
    resources: list[str] = pydantic.Field(min_length=1)
    verbs: list[str] = pydantic.Field(min_length=1)
    resource_names: list[str] | None = pydantic.Field(default=None, alias="resource-names")

    @pydantic.field_validator("api_groups", "resources", "verbs", "resource_names")
    @classmethod
    def _words(cls, values: list[str] | None, info: pydantic.ValidationInfo) -> list[str] | None:
        if values is not None and len(values) > MAX_ITEMS:
            raise ValueError(f"at most {MAX_ITEMS} items (MAX_ITEMS), not {len(values)}")
        for value in values or ():
            if len(value) > MAX_WORD:
                raise ValueError(
                    f"at most {MAX_WORD} characters a word (MAX_WORD), not {len(value)}"
                )
            if not _WORD.match(value):
                raise ValueError(f"{value!r} is not an API group, resource, verb or name")
            # "" is the core API group; as a name it would match a create by POST, which
            # carries no name (RBAC matches resourceNames exactly), so it is no name
            if not value and info.field_name != "api_groups":
                raise ValueError("must not be empty")
        return values

    def manifest(self) -> dict[str, list[str]]:
        """The rule as it appears in a Role or ClusterRole."""
        out = {"apiGroups": self.api_groups, "resources": self.resources, "verbs": self.verbs}
        if self.resource_names:
            out["resourceNames"] = self.resource_names
        return out


def _bounded_json(value: Any, bound: int = MAX_JSON, name: str = "MAX_JSON") -> None:
    """Refuse a databag value over `bound` characters before it is parsed."""
    if isinstance(value, str) and len(value) > bound:
        raise ValueError(f"at most {bound} characters of JSON ({name}), not {len(value)}")


def _storage_json(value: Any) -> Any:
    """`storage-consumers` as an object, within MAX_STORAGE_JSON characters."""
    _bounded_json(value, MAX_STORAGE_JSON, "MAX_STORAGE_JSON")
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):  # nesting too deep: last44a H1
            raise ValueError("must be a JSON object") from None
    return value


def _storage_consumers(value: dict[str, str] | None) -> dict[str, str] | None:
    """`storage-consumers`: application name -> its access point ID, or "" (plain NFS)."""
    for app, access_point in (value or {}).items():
        if not _APPLICATION.match(app):
            raise ValueError(f"{app!r} is not an application name")
        if access_point and not _ACCESS_POINT.match(access_point):
            raise ValueError(f"{access_point!r} is not an EFS access point ID (fsap-...)")
    return value


# `storage-consumers` in either databag: a JSON object, checked by _storage_consumers
StorageConsumers = Annotated[
    dict[str, str] | None,
    pydantic.BeforeValidator(_storage_json),
    pydantic.AfterValidator(_storage_consumers),
]


def _json_list(value: Any, what: str = "rules") -> Any:
    _bounded_json(value)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):  # nesting too deep: last44a H1
            raise ValueError(f"must be a JSON list of {what}") from None
    return value


class RequirerAppData(Databag):
    """What a consumer asks for."""

    namespace: str
    rules: list[Rule] = pydantic.Field(default_factory=list)
    cluster_rules: list[Rule] = pydantic.Field(default_factory=list, alias="cluster-rules")
    # The team's wanted Kueue quota (see the module docstring); None: none of its own.
    gpu_quota: str | None = pydantic.Field(default=None, alias="gpu-quota")
    cpu_quota: str | None = pydantic.Field(default=None, alias="cpu-quota")
    memory_quota: str | None = pydantic.Field(default=None, alias="memory-quota")
    # A storage provisioner's consumers and their access points (see the module docstring).
    storage_consumers: StorageConsumers = pydantic.Field(default=None, alias="storage-consumers")

    @pydantic.field_validator("gpu_quota", "cpu_quota", "memory_quota", mode="before")
    @classmethod
    def _short(cls, value: Any) -> Any:
        if isinstance(value, str) and len(value) > MAX_QUANTITY:
            raise ValueError(f"at most {MAX_QUANTITY} characters (MAX_QUANTITY), not {len(value)}")
        return value

    @pydantic.field_validator("gpu_quota")
    @classmethod
    def _gpus(cls, value: str | None) -> str | None:
        if value is not None and not value.isdigit():
            raise ValueError("must be a whole number of GPUs (per GPU model)")
        return value

    @pydantic.field_validator("cpu_quota", "memory_quota")
    @classmethod
    def _quantity(cls, value: str | None) -> str | None:
        if value is not None and not _QUANTITY.match(value):
            raise ValueError("must be a Kubernetes quantity such as 8, 500m or 64Gi")
        return value

    @pydantic.field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not _LABEL.match(value):
            raise ValueError("must be a DNS-1123 label (lowercase, digits, dashes, <= 63)")
        return value

    @pydantic.field_validator("rules", "cluster_rules", mode="before")
    @classmethod
    def _rules(cls, value: Any) -> Any:
        value = _json_list(value)
        if isinstance(value, list) and len(value) > MAX_RULES:
            raise ValueError(f"at most {MAX_RULES} rules (MAX_RULES), not {len(value)}")
        return value


class QuotaCap(Databag):
    """One ask a team was given less of (`quota-capped`, see the module docstring)."""

    field: str  # gpu-quota, cpu-quota or memory-quota
    flavor: str  # the ResourceFlavor: one per GPU model, `cpu` for CPUs and memory
    asked: str
    given: str
    by: str  # team-quotas, fair-share or cluster

    def words(self) -> str:
        """The cap as a status says it: `gpu-quota 8 given 4 on gpu-nvidia-a10g (...)`."""
        on = f" on {self.flavor}" if self.field == "gpu-quota" else ""
        why = _CAPPED_BY.get(self.by, self.by)
        return f"{self.field} {self.asked} given {self.given}{on} ({why})"


# Why, in words, for each `QuotaCap.by` (the control plane's kueue.py decides which)
_CAPPED_BY = {
    "team-quotas": "its allowance in team-quotas of the control plane",
    "fair-share": "a fair share: team-quotas of the control plane names none for it",
    "cluster": "the cluster has no more",
}


class ProviderAppData(Databag):
    """What the control plane answers: the grant, or the reason for a refusal."""

    endpoint: str | None = None
    namespace: str | None = None
    service_account: str | None = pydantic.Field(default=None, alias="service-account")
    kubeconfig_secret_id: str | None = pydantic.Field(default=None, alias="kubeconfig-secret-id")
    node_set: str | None = pydantic.Field(default=None, alias="node-set")
    # What the control plane's policy admits of a provisioner's `storage-consumers`
    # (absent: a control plane before it, which fences no consumer).
    storage_consumers: StorageConsumers = pydantic.Field(default=None, alias="storage-consumers")
    # What capped a team's quota ask (absent: nothing, or a control plane before it).
    quota_capped: list[QuotaCap] | None = pydantic.Field(default=None, alias="quota-capped")
    error: str | None = None

    @pydantic.field_validator("quota_capped", mode="before")
    @classmethod
    def _caps(cls, value: Any) -> Any:
        return _json_list(value, "caps")


def check_policy(request: RequirerAppData, *, provisioner: bool = False) -> str | None:
    """Return why `request` leaves the allow-list, or None when it is fine.

    A consumer gets rules in its own namespace (`rules`: anything but RBAC objects, the
    Namespace itself, the API groups of _GROUP_PATHS (CSRs, admission, Calico policy), the
    cluster-scoped escalation paths and the writes of _OWN_NAMESPACE_WRITES (bindings
    among them) and status subresources) and, cluster-wide
    (`cluster-rules`), only CLUSTER_READS, NAMED_CLUSTER_OBJECTS by name and, when the
    operator trusts it as a storage `provisioner`, PROVISIONER_RULES. Its namespace must not
    be a system one (SYSTEM_NAMESPACES, or `kube-`); that no other grant holds it is the
    provider's check (it knows the other grants).
    """
    if request.namespace in SYSTEM_NAMESPACES or request.namespace.startswith("kube-"):
        return f"namespace {request.namespace} is reserved; ask for a namespace of your own"
    for scope, rules in (("rules", request.rules), ("cluster-rules", request.cluster_rules)):
        for rule in rules:
            problem = _rule_problem(scope, rule, request.namespace, provisioner=provisioner)
            if problem:
                return problem
    return None


def _wildcard(scope: str, rule: Rule) -> str | None:
    for kind, values in (
        ("verbs", rule.verbs),
        ("resources", rule.resources),
        ("api-groups", rule.api_groups),
        ("resource-names", rule.resource_names or ()),
    ):
        if any("*" in v for v in values):
            return f"{scope}: wildcard '*' in {kind} is not allowed; list them explicitly"
    return None


def _rule_problem(scope: str, rule: Rule, namespace: str, *, provisioner: bool) -> str | None:
    wildcard = _wildcard(scope, rule)
    if wildcard:
        return wildcard
    verbs = {v.lower() for v in rule.verbs}
    bad = sorted(FORBIDDEN_VERBS & verbs)
    if bad:
        return f"{scope}: verb {bad[0]} is not allowed"
    if RBAC_GROUP in rule.api_groups:
        return f"{scope}: {RBAC_GROUP} resources are not allowed"
    for group in rule.api_groups:
        for resource in rule.resources:
            problem = _resource_problem(
                scope, group, resource, verbs, rule, namespace, provisioner
            )
            if problem:
                return problem
    return None


def _resource_problem(
    scope: str,
    group: str,
    resource: str,
    verbs: set[str],
    rule: Rule,
    namespace: str,
    provisioner: bool,
) -> str | None:
    cluster = scope == "cluster-rules"
    if written := _own_namespace_write(group, resource, verbs):
        return f"{scope}: {resource} refused: {written}"
    if (group, resource.partition("/")[0]) == _KUEUE_QUEUES and not verbs <= READ_VERBS:
        return f"{scope}: {resource} refused: {_QUEUES}"
    if cluster and (named := _not_own_name(group, resource, rule, namespace)):
        return named
    if cluster and _cluster_allowed(group, resource, verbs, rule, provisioner):
        return None
    path = _escalation(group, resource, cluster=cluster)
    if path and path in (_WORKLOAD, _TOKEN, _ENDPOINTS) and verbs <= READ_VERBS:
        path = None  # reading pods, jobs or endpoints is no escalation
    if path:
        return f"{scope}: {resource} refused: {path}"
    if cluster:
        what = f"{group}/{resource}" if group else resource
        return (
            f"cluster-rules: {', '.join(sorted(verbs))} on {what} is not on the "
            "cluster-wide allow-list; ask for it in rules (your own namespace)"
        )
    return None


def _not_own_name(group: str, resource: str, rule: Rule, namespace: str) -> str | None:
    """Why `rule` names cluster objects that are not the consumer's own (OWN_NAMES)."""
    own = OWN_NAMES.get((group, resource))
    if own is None or not rule.resource_names:
        return None
    name = own.format(namespace=namespace)
    if rule.resource_names == [name]:
        return None
    return f"cluster-rules: {resource} may be named only {name}, your own (another is a team's)"


def _cluster_allowed(
    group: str, resource: str, verbs: set[str], rule: Rule, provisioner: bool
) -> bool:
    key = (group, resource)
    if key in CLUSTER_READS and verbs <= READ_VERBS:
        return True
    if key in NAMED_CLUSTER_OBJECTS and rule.resource_names and verbs <= NAMED_VERBS:
        return True
    return provisioner and verbs <= PROVISIONER_RULES.get(key, frozenset())


def without_legacy_reads(request: RequirerAppData) -> RequirerAppData:
    """A provisioner's `request` less the cluster-wide reads it no longer gets.

    A cluster rule of the core group's LEGACY_PROVISIONER_READS, read verbs only and no
    names (what efs-storage of LIBPATCH 28 and earlier asks for), is left out; any other
    rule is checked as it is (`check_policy`).
    """
    kept = [
        r
        for r in request.cluster_rules
        if not (
            r.api_groups == [""]
            and not r.resource_names
            and {("", res) for res in r.resources} <= LEGACY_PROVISIONER_READS
            and {v.lower() for v in r.verbs} <= READ_VERBS
        )
    ]
    if len(kept) == len(request.cluster_rules):
        return request
    return request.model_copy(update={"cluster_rules": kept})


@dataclasses.dataclass(frozen=True)
class Request:
    """One consumer's request as the provider sees it."""

    relation: ops.Relation
    app_name: str
    request: RequirerAppData | None
    error: str | None


class KubeApiProvider(Endpoint):
    """The control-plane side: validates requests and hands over kubeconfigs."""

    def __init__(self, charm: ops.CharmBase, relation_name: str = "kube-api"):
        super().__init__(charm, relation_name)

    def requests(self, provisioners: Collection[str] = ()) -> list[Request]:
        """Every related application's request; those not made yet are left out.

        `error` is set when the request is malformed or leaves the allow-list
        (`check_policy`); `provisioners` names the applications trusted with
        PROVISIONER_RULES.
        """
        out: list[Request] = []
        for relation in self.relations:
            if relation.app is None:
                continue
            raw = dict(relation.data[relation.app])
            if not raw:
                continue
            try:
                request = RequirerAppData.model_validate(raw)
            except pydantic.ValidationError as e:
                out.append(Request(relation, relation.app.name, None, explain(e)))
                continue
            trusted = relation.app.name in provisioners
            if trusted:
                request = without_legacy_reads(request)
            error = check_policy(request, provisioner=trusted)
            out.append(Request(relation, relation.app.name, request, error))
        return out

    def grant(
        self,
        relation: ops.Relation,
        endpoint: str,
        namespace: str,
        service_account: str,
        kubeconfig: str,
        node_set: str | None = None,
        *,
        rotate: ops.SecretRotate | None = None,
    ) -> int | None:
        """Hand `kubeconfig` to one relation in a secret granted to it only (leader only).

        `rotate`: the secret's rotate policy, for a kubeconfig whose credential expires:
        Juju fires `secret-rotate` on this application when it is due, and again until a
        new revision is written (ops SecretRotateEvent). Returns the revision the
        kubeconfig replaced, or None when it replaced none (a new secret, or no change).
        """
        content = {"kubeconfig": kubeconfig}
        label = secret_label(relation.id)
        replaced = None
        try:
            secret = self.model.get_secret(label=label)
            if secret.peek_content() != content:
                info = secret.get_info()
                replaced = info.revision
                secret.set_content(content)
                if rotate is not None and info.rotation != rotate:
                    secret.set_info(rotate=rotate)
        except ops.SecretNotFoundError:
            secret = self.charm.app.add_secret(
                content,
                label=label,
                description=f"kubeconfig for {relation.app.name}",
                rotate=rotate,
            )
        secret_id = secret.id or secret.get_info().id
        bag = ProviderAppData.model_validate(
            {
                "endpoint": endpoint,
                "namespace": namespace,
                "service-account": service_account,
                "kubeconfig-secret-id": secret_id,
                "node-set": node_set,
            }
        ).dump()
        data = relation.data[self.charm.app]
        if data.get("kubeconfig-secret-id") != secret_id:
            secret.grant(relation)
        write(data, bag, remove=list(data))
        return replaced

    def announce_nodes(self, relation: ops.Relation, node_set: str) -> None:
        """Tell a granted consumer the node set changed (written only when it did)."""
        data = relation.data[self.charm.app]
        if data.get("node-set") != node_set:
            data["node-set"] = node_set

    def admit_storage(self, relation: ops.Relation, consumers: dict[str, str]) -> None:
        """Tell a provisioner which of its `storage-consumers` the policy now admits.

        Written after the policy was applied, and again after `grant` rewrote the databag
        (only when it changed).
        """
        data = relation.data[self.charm.app]
        text = json.dumps(consumers, sort_keys=True)
        if data.get("storage-consumers") != text:
            data["storage-consumers"] = text

    def announce_quota(self, relation: ops.Relation, capped: list[dict[str, str]]) -> None:
        """Tell a team what capped its quota ask (`QuotaCap` fields), or nothing did.

        Written after `grant` rewrote the databag, and only when it changed.
        """
        data = relation.data[self.charm.app]
        if not capped:
            write(data, {}, remove=["quota-capped"])
            return
        bag = ProviderAppData.model_validate({"quota-capped": capped}).dump()
        write(data, {"quota-capped": bag["quota-capped"]})

    def refuse(self, relation: ops.Relation, reason: str) -> None:
        """Refuse a request: `error` set, nothing else published, secret removed."""
        self.remove(relation.id)
        data = relation.data[self.charm.app]
        write(data, ProviderAppData(error=reason).dump(), remove=list(data))

    def remove(self, relation_id: int) -> None:
        """Remove the kubeconfig secret of a relation, if there is one."""
        try:
            self.model.get_secret(label=secret_label(relation_id)).remove_all_revisions()
        except ops.SecretNotFoundError:
            pass


class KubeApiRequirer(Endpoint):
    """The consumer side: asks for access and reads the kubeconfig."""

    def __init__(
        self,
        charm: ops.CharmBase,
        relation_name: str = "kube-api",
        *,
        namespace: str,
        rules: list[Rule | dict[str, Any]] | None = None,
        cluster_rules: list[Rule | dict[str, Any]] | None = None,
        quotas: dict[str, str] | None = None,
    ):
        """`quotas`: the team's wanted Kueue quota, `gpu-quota`, `cpu-quota`, `memory-quota`."""
        super().__init__(charm, relation_name)
        try:
            self.request = RequirerAppData.model_validate(
                {
                    "namespace": namespace,
                    "rules": rules or [],
                    "cluster-rules": cluster_rules or [],
                    **(quotas or {}),
                }
            )
            # as the provider reads it: the databag form (MAX_JSON bounds its JSON)
            RequirerAppData.model_validate(self.request.dump())
        except pydantic.ValidationError as e:
            raise ValueError(f"invalid kube-api request: {explain(e)}") from None
        events = charm.on[relation_name]
        self.framework.observe(events.relation_created, self._publish)
        self.framework.observe(events.relation_changed, self._publish)
        self.framework.observe(charm.on.leader_elected, self._publish)
        self.framework.observe(charm.on.upgrade_charm, self._publish)

    def _publish(self, _: ops.EventBase) -> None:
        self.publish()

    def publish(self) -> None:
        """Write the request into the application databag (leader only, when changed)."""
        relation = self.relation
        if relation is None or not self.charm.unit.is_leader():
            return
        write(relation.data[self.charm.app], self.request.dump())

    def publish_storage_consumers(self, consumers: dict[str, str]) -> None:
        """Publish whom this storage provisioner serves (leader only, when changed).

        `consumers`: each consumer's application -> the access point its volume mounts,
        or "" for a plain NFS volume.
        """
        relation = self.relation
        if relation is None or not self.charm.unit.is_leader():
            return
        text = json.dumps(consumers, sort_keys=True)  # checked as the provider reads it
        bag = RequirerAppData.model_validate(
            {**self.request.dump(), "storage-consumers": text}
        ).dump()
        write(relation.data[self.charm.app], {"storage-consumers": bag["storage-consumers"]})

    def _answer(self) -> tuple[ProviderAppData | None, str | None]:
        relation = self.relation
        if relation is None:
            return None, "not related to kube-api: integrate with kubernetes-control-plane"
        raw = dict(relation.data[relation.app]) if relation.app else {}
        if not raw:
            return None, "waiting for the control plane to grant Kubernetes access"
        try:
            answer = ProviderAppData.model_validate(raw)
        except pydantic.ValidationError as e:
            return None, f"control plane databag: {explain(e)}"
        if answer.error:
            return None, f"control plane refused access: {answer.error}"
        if not answer.kubeconfig_secret_id:
            return None, "waiting for the control plane to grant Kubernetes access"
        return answer, None

    def kubeconfig(self) -> str | None:
        """The kubeconfig granted to this application, or None (see `problem()`)."""
        answer, _ = self._answer()
        if answer is None or answer.kubeconfig_secret_id is None:
            return None
        try:
            secret = self.model.get_secret(id=answer.kubeconfig_secret_id)
            return secret.get_content(refresh=True).get("kubeconfig") or None
        except (ops.SecretNotFoundError, ops.ModelError):
            return None

    def namespace(self) -> str | None:
        """The namespace the control plane created for this application."""
        answer, _ = self._answer()
        return answer.namespace if answer else None

    def quota_capped(self) -> list[QuotaCap]:
        """What capped this team's quota ask, as the control plane says (none: [])."""
        answer, _ = self._answer()
        return list(answer.quota_capped or []) if answer else []

    def problem(self) -> str | None:
        """Why no kubeconfig is available, or None when it is."""
        answer, problem = self._answer()
        if problem:
            return problem
        if self.kubeconfig() is None:
            return "waiting for access to the kubeconfig secret"
        return None
