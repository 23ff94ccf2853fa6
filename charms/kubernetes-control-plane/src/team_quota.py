# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The object counts every kube-api consumer's namespace may hold (a ResourceQuota; no ops).

Every object a team writes is stored in etcd, whose storage quota (2 GiB: kubeadm sets no
other, backups.py) is the whole cluster's: once it is full etcd raises NOSPACE and the API
server refuses every write, every team's and the control plane's. Nothing bounded a team's
objects (issue 29 review43 G4; RBAC good practices, "Denial of service risks": "consider
using object count quota"). So the control plane writes the ResourceQuota NAME into every
consumer's namespace (addons.apply_team_quotas, in the hook that grants it, and into every
namespace granted before, or labelled a consumer's by an earlier revision, on the first
hook of this revision: tenant_sweep.NAMESPACES_KEY), with an object count for each
kind a grant may create there (kubernetes.io/docs/concepts/policy/resource-quotas, "Quota on
object count": `count/<resource>.<group>`, `count/<resource>` for the core group, and the
older names `configmaps`, `secrets`, `services`, `persistentvolumeclaims`,
`replicationcontrollers`). kube-apiserver's ResourceQuota admission plugin refuses a create
that would pass a count ("exceeded quota: gpu-k8s-object-counts, requested: ..., used: ...,
limited: ..."; k8s.io/apiserver pkg/admission/plugin/resourcequota/controller.go
CheckRequest), whoever writes it: the team, its controllers (a Job's pods), Kueue (its
Workloads). A namespace already holding more keeps what it has and creates no more of that
kind until it is under the count again: nothing is deleted.

Consumers cannot change or delete it: kube_api refuses `resourcequotas` writes in any scope
(lib kube_api _OWN_NAMESPACE_WRITES), so no grant holds them.

What no count bounds:
- Events: the quota system ignores them ("events haven't been quota-ed before": kubernetes
  pkg/quota/v1/install/registry.go ignoredResources, both groups). kube_api refuses a
  consumer's writes of them, so only the cluster's components write Events into a team's
  namespace (kubelet, the controllers, the scheduler, Kueue), each through client-go's event
  correlator (k8s.io/client-go tools/record events_cache.go: an event repeated more than
  10 times in 10 minutes aggregated, 25 per source and object then one per 5 minutes),
  about objects the counts here bound, and each Event is deleted an hour after its last
  write (kube-apiserver reference, `--event-ttl` "Amount of time to retain events",
  default 1h0m0s; kubeadm sets no other, and this charm keeps it: a longer one keeps
  more, a shorter one loses what `kubectl describe` shows of a failed job).
- Endpoints and EndpointSlices: kube_api refuses consumers' writes; the Endpoints and
  EndpointSlice controllers write them per Service, which `services` bounds.
- Roles, RoleBindings, LimitRanges and ResourceQuotas: kube_api refuses consumers' writes.
- Bytes: a count bounds the number of objects, not their size; an object is at most what
  etcd takes in one request (1.5 MiB by default, --max-request-bytes: etcd.io/docs
  dev-guide/limit, which also gives the 2 GiB storage quota), a ConfigMap's or Secret's
  data at most 1 MiB (kubernetes pkg/apis/core/validation MaxSecretSize). These counts
  are sized for the largest legitimate use, so a hostile team can still store GiBs before
  a count stops it: the etcd alert (80% of the quota, etcd.rules) is the signal,
  `team-object-counts` the lever (lower the counts of the kinds a team does not use).

The counts come from what the tensorflow charm makes (charms/tensorflow/src: manifests.py,
oneshot.py, serving.py, datasets.py, scale_records.py, queues.py, registry_auth.py,
network_policies.py) and efs-storage's claims, for JOBS jobs at once, with headroom; an
operator changes any of them with the config option `team-object-counts`
(`parse_counts`), which applies to every team: a cluster of 1,000 GPU nodes runs larger
jobs than one of two, and one fixed table could not serve both.
"""

from __future__ import annotations

import re

from literals import FIELD_MANAGER, MANAGED_BY_LABEL

NAME = "gpu-k8s-object-counts"

# The jobs a team holds at once, running, queued and finished until `job-ttl` (24 hours by
# default) deletes them: training jobs, dataset imports, model exports and data purges. One
# started every 6 minutes around the clock, kept a day, is 240.
JOBS = 250
# Models served at once (tensorflow `serve`: a Deployment, a Service and a NetworkPolicy
# each, of up to 20 replicas: serving.ServeParams.replicas).
SERVED = 20
SERVING_REPLICAS = 20
# tensorflow's largest job (params MAX_WORKERS workers, plus its chief and ps).
MAX_WORKERS = 1000
# A Deployment keeps up to 10 old ReplicaSets (apps/v1 DeploymentSpec revisionHistoryLimit,
# default 10), a StatefulSet or DaemonSet 10 old ControllerRevisions (the same field).
HISTORY = 10
# Kinds neither charm makes, which a grant may still ask for in its own namespace (kube_api
# allows them there): enough for a team's own use, far from filling the store.
UNUSED = 20

LIVE_PODS = 2 * (MAX_WORKERS + 2) + JOBS + SERVED * SERVING_REPLICAS + 100
# Finished jobs of the largest size whose pods a team keeps for `job-ttl` (count/pods).
KEPT_LARGEST = 10

COUNTS: dict[str, int] = {
    # one JobSet per training job (manifests.jobset)
    "count/jobsets.jobset.x-k8s.io": JOBS,
    # a ps job is 3 Jobs (chief, ps, worker: the JobSet's replicatedJobs), an import,
    # export or purge 1 (oneshot.manifest, manifests.purge_job)
    "count/jobs.batch": 3 * JOBS,
    # the pods not yet finished (pods.go: `pods` counts those): the largest job twice
    # (running, and its restarted predecessor's still terminating), a TensorBoard pod per
    # job and every served replica
    "pods": LIVE_PODS,
    # every pod stored, finished ones included: a finished Job keeps its pods until JobSet
    # deletes it `job-ttl` after (manifests.jobset ttlSecondsAfterFinished, 24 h by
    # default), so a team running large jobs all day keeps their pods (rereview43a F1:
    # thirty 100-worker jobs a day filled the live count): the pods of KEPT_LARGEST jobs
    # of the largest size kept, besides the live ones. A pod is a few KiB in etcd, so this
    # is ~100 MiB of a 2 GiB store at most.
    "count/pods": LIVE_PODS + KEPT_LARGEST * (MAX_WORKERS + 2),
    # a job's code (manifests.code_configmap) or an import's or export's program
    # (oneshot.start), the datasets registry, scale records of jobs being resized
    # (scale_records.py), kube-root-ca.crt (kube-controller-manager's root-ca-cert-publisher
    # writes it into every namespace)
    "configmaps": JOBS + 50,
    # the image pull Secret (registry_auth.py) and the dataset credentials (datasets.py):
    # Secrets are few and up to 1 MiB each
    "secrets": 20,
    # per job the JobSet's headless Service (its subdomain) and TensorBoard's; one per
    # served model
    "services": 2 * JOBS + SERVED + 30,
    # No node port and no cloud load balancer (kubernetes pkg/quota/v1/evaluator/core/
    # services.go Usage: a NodePort or LoadBalancer Service uses one node port per port, a
    # LoadBalancer one load balancer): every Service the charms make is a ClusterIP one, and
    # a node port opens on every node, the control plane's included, from the range all
    # teams share (kube-apiserver --service-node-port-range, 30000-32767): a team could take
    # it or reach its pods past the model's security group
    "services.nodeports": 0,
    "services.loadbalancers": 0,
    # TensorBoard per job (manifests.tensorboard), one per served model
    "count/deployments.apps": JOBS + SERVED + 30,
    # a TensorBoard Deployment is written once (one ReplicaSet), a served model's at each
    # `serve` (its history too)
    "count/replicasets.apps": JOBS + SERVED * (HISTORY + 1) + 30,
    # per job its training and TensorBoard policies, one per served model, the
    # application's metrics policy and the control plane's two (network_policies.py)
    "count/networkpolicies.networking.k8s.io": 2 * JOBS + SERVED + 30,
    # Kueue's: one per JobSet or Job outside a JobSet, one per pod of a Deployment (pod
    # integration: TensorBoard, serving). A Workload refused leaves its job queued.
    "count/workloads.kueue.x-k8s.io": 2 * JOBS + SERVED * SERVING_REPLICAS + 100,
    # the team's LocalQueue (queues.py)
    "count/localqueues.kueue.x-k8s.io": 5,
    # efs-storage's claim, one per provisioner serving the team (its storage.py)
    "persistentvolumeclaims": 10,
    # the grant's own and `default`
    "count/serviceaccounts": UNUSED,
    "replicationcontrollers": UNUSED,
    "count/podtemplates": UNUSED,
    "count/statefulsets.apps": UNUSED,
    "count/daemonsets.apps": UNUSED,
    "count/controllerrevisions.apps": 2 * UNUSED * (HISTORY + 1),
    "count/cronjobs.batch": UNUSED,
    "count/horizontalpodautoscalers.autoscaling": UNUSED,
    "count/leases.coordination.k8s.io": UNUSED,
    "count/ingresses.networking.k8s.io": UNUSED,
    "count/poddisruptionbudgets.policy": UNUSED,
    "count/csistoragecapacities.storage.k8s.io": UNUSED,
    "count/resourceclaims.resource.k8s.io": UNUSED,
    "count/resourceclaimtemplates.resource.k8s.io": UNUSED,
    # Calico's namespaced policy kinds (calico.yaml v3.32.1 CRDs): only the control plane
    # writes network policy a team's pods obey (network_policies.py), so none is a team's
    "count/networkpolicies.crd.projectcalico.org": 0,
    "count/stagednetworkpolicies.crd.projectcalico.org": 0,
    "count/stagedkubernetesnetworkpolicies.crd.projectcalico.org": 0,
    "count/networksets.crd.projectcalico.org": 0,
}
MAX_COUNT = 1_000_000
_ENTRY = re.compile(r"^([a-z0-9./-]+)=([0-9]{1,7})$")


def parse_counts(text: str) -> dict[str, int]:
    """`team-object-counts`: `<resource>=<n> ...` (whitespace-separated) over COUNTS.

    Raises:
        ValueError: an entry not of that form, a resource not in COUNTS, a count past
            MAX_COUNT or a resource named twice, with the entry.
    """
    out: dict[str, int] = {}
    for entry in text.split():
        match = _ENTRY.match(entry)
        name = match.group(1) if match else ""
        if not match or name not in COUNTS or name in out or int(match.group(2)) > MAX_COUNT:
            raise ValueError(
                f"{entry!r} is not <resource>=<count> with a resource of the team quota"
                f" (for example configmaps=600 or count/pods=5000; counts 0 to {MAX_COUNT},"
                " each resource once)"
            )
        out[name] = int(match.group(2))
    return out


def counts(overrides: dict[str, int]) -> dict[str, int]:
    """COUNTS with the operator's `overrides` (`parse_counts`)."""
    return {**COUNTS, **overrides}


def manifest(namespace: str, hard: dict[str, int]) -> dict:
    """The ResourceQuota NAME of `namespace` with the counts `hard`."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: FIELD_MANAGER},
        },
        "spec": {"hard": {name: str(n) for name, n in sorted(hard.items())}},
    }
