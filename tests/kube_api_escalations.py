"""What a hostile kube-api consumer asks for: one entry per escalation path.

The paths are those of Kubernetes' RBAC good practices
(https://kubernetes.io/docs/concepts/security/rbac-good-practices/, "Privilege escalation
risks" and "Denial of service risks" sections, read 2026-11-27): each entry is the request
a consumer writes into its `kube-api` application databag, the words the control plane's
refusal must contain (`names`), and the request the consumer would make with its token if
the grant had been made (`attempt`), which the API server must refuse. Shared by the
control plane's unit tests (the provider refuses, nothing is applied) and the functional
probes (`tests/functional/test_kube_api_escalation.py`: the fake API server refuses the
attempt made with the token of the consumer's legitimate grant).
"""

from __future__ import annotations

import dataclasses
from typing import Any

HOSTILE = "hostile"  # the consumer's application name and its own namespace
RUNNER = "runner"  # another ServiceAccount of that namespace (ESCALATION_TARGETS)


def rule(group: str, resources: list[str], verbs: list[str], **extra: Any) -> dict:
    """One rule as a consumer writes it on the relation."""
    return {"api-groups": [group], "resources": resources, "verbs": verbs, **extra}


@dataclasses.dataclass(frozen=True)
class Attempt:
    """A request with the consumer's token: an HTTP call, or a SelfSubjectAccessReview."""

    method: str = ""
    path: str = ""
    body: dict | None = None
    content_type: str = "application/json"
    # For verbs no plain request carries (escalate, bind, impersonate, approve): the
    # resourceAttributes of a SelfSubjectAccessReview, which the authorizer answers.
    review: dict | None = None


@dataclasses.dataclass(frozen=True)
class Escalation:
    """One escalation path: the request, what the refusal names, the attempt."""

    id: str
    names: str
    rules: list[dict] = dataclasses.field(default_factory=list)
    cluster_rules: list[dict] = dataclasses.field(default_factory=list)
    attempt: Attempt = Attempt()
    # The rules grant nothing even if granted (a Role naming a cluster-scoped resource):
    # refused only because they would mislead the grant's reader.
    grants_nothing: bool = False

    def databag(self) -> dict[str, Any]:
        """The request as `kube_api.RequirerAppData` reads it."""
        return {"namespace": HOSTILE, "rules": self.rules, "cluster-rules": self.cluster_rules}


_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "escape"},
    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
}
_HOST_PV = {
    "apiVersion": "v1",
    "kind": "PersistentVolume",
    "metadata": {"name": "host-root"},
    "spec": {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": "/"},
    },
}
_WEBHOOK = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "steal"},
    "webhooks": [],
}
_CSR = {
    "apiVersion": "certificates.k8s.io/v1",
    "kind": "CertificateSigningRequest",
    "metadata": {"name": "admin"},
    "spec": {"request": "", "signerName": "kubernetes.io/kube-apiserver-client", "usages": []},
}

_CONTAINER = {
    "name": "c",
    "image": "busybox",
    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
}
# The team's running pod the own-namespace attempts name (ESCALATION_TARGETS seeds it):
# Pod Security `restricted`, not bound, not gated.
_WEB = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web"},
    "spec": {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_CONTAINER],
    },
}
CONTROL_PLANE_NODE = "cp-0"
WORKER_NODE = "gpu-0"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # pkg/apis/core MirrorPodAnnotationKey


def _binding(pod: str) -> dict:
    """A Binding of `pod` to the control-plane node, as kube-scheduler POSTs one."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": CONTROL_PLANE_NODE},
    }


_CALICO_POLICY = {
    "apiVersion": "crd.projectcalico.org/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "first"},
    "spec": {
        "order": 1,
        "selector": "all()",
        "types": ["Egress"],
        "egress": [{"action": "Allow"}],
    },
}

_PRIORITY_CLASS = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "mine-first"},
    "value": 1000000000,
}

# A team's DaemonSet: one pod on every node, GPU nodes included, Pod Security `restricted`.
_DAEMONSET = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "everywhere"},
    "spec": {
        "selector": {"matchLabels": {"app": "everywhere"}},
        "template": {
            "metadata": {"labels": {"app": "everywhere"}},
            "spec": {
                **_WEB["spec"],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            },
        },
    },
}

ESCALATIONS: list[Escalation] = [
    Escalation(
        "pods-cluster-wide",
        "workload creation",
        cluster_rules=[rule("", ["pods"], ["create"])],
        attempt=Attempt("POST", "/api/v1/namespaces/kube-system/pods", _POD),
    ),
    Escalation(
        "deployments-cluster-wide",
        "workload creation",
        cluster_rules=[rule("apps", ["deployments", "daemonsets"], ["create", "patch"])],
        attempt=Attempt(
            "POST",
            "/apis/apps/v1/namespaces/kube-system/daemonsets",
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "x"}},
        ),
    ),
    Escalation(
        "jobs-cluster-wide",
        "workload creation",
        cluster_rules=[rule("batch", ["jobs", "cronjobs"], ["create"])],
        attempt=Attempt(
            "POST",
            "/apis/batch/v1/namespaces/kueue-system/jobs",
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}},
        ),
    ),
    Escalation(
        "hostpath-persistent-volume",
        "persistentvolume creation",
        cluster_rules=[rule("", ["persistentvolumes"], ["create"])],
        attempt=Attempt("POST", "/api/v1/persistentvolumes", _HOST_PV),
    ),
    Escalation(
        "nodes-proxy",
        "nodes/proxy",
        cluster_rules=[rule("", ["nodes/proxy"], ["get", "create"])],
        attempt=Attempt("GET", "/api/v1/nodes/node-1/proxy/pods"),
    ),
    Escalation(
        "token-request-elsewhere",
        "token request",
        cluster_rules=[rule("", ["serviceaccounts/token"], ["create"])],
        attempt=Attempt(
            "POST",
            "/api/v1/namespaces/kube-system/serviceaccounts/default/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        ),
    ),
    Escalation(
        "csr-create",
        "certificatesigningrequests",
        cluster_rules=[rule("certificates.k8s.io", ["certificatesigningrequests"], ["create"])],
        attempt=Attempt("POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests", _CSR),
    ),
    Escalation(
        "csr-approve",
        "certificatesigningrequests",
        cluster_rules=[
            rule("certificates.k8s.io", ["certificatesigningrequests/approval"], ["update"]),
            rule("certificates.k8s.io", ["signers"], ["approve"]),
        ],
        attempt=Attempt(
            review={
                "group": "certificates.k8s.io",
                "resource": "signers",
                "verb": "approve",
                "name": "kubernetes.io/kube-apiserver-client",
            }
        ),
    ),
    Escalation(
        "mutating-webhook",
        "admission webhooks",
        cluster_rules=[
            rule("admissionregistration.k8s.io", ["mutatingwebhookconfigurations"], ["create"])
        ],
        attempt=Attempt(
            "POST",
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            _WEBHOOK,
        ),
    ),
    Escalation(
        "validating-webhook",
        "admission webhooks",
        cluster_rules=[
            rule(
                "admissionregistration.k8s.io",
                ["validatingwebhookconfigurations", "validatingadmissionpolicies"],
                ["patch", "delete"],
            )
        ],
        attempt=Attempt(
            "DELETE",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kueue",
        ),
    ),
    Escalation(
        # A Role in the consumer's own namespace granting `namespaces patch` lets it patch
        # that Namespace (RequestInfo sets the namespace of /namespaces/<name> to <name>),
        # so the Pod Security labels go: refused in `rules` too.
        "own-namespace-labels",
        "namespace modification",
        rules=[rule("", ["namespaces"], ["patch", "update"])],
        attempt=Attempt(
            "PATCH",
            f"/api/v1/namespaces/{HOSTILE}",
            {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}},
            "application/merge-patch+json",
        ),
    ),
    Escalation(
        "namespaces-cluster-wide",
        "namespace modification",
        cluster_rules=[rule("", ["namespaces"], ["create", "patch", "delete"])],
        attempt=Attempt("DELETE", "/api/v1/namespaces/kueue-system"),
    ),
    Escalation(
        "secrets-cluster-wide",
        "secrets",
        cluster_rules=[rule("", ["secrets"], ["get", "list"])],
        attempt=Attempt("GET", "/api/v1/namespaces/kueue-system/secrets"),
    ),
    Escalation(
        "escalate",
        "escalate",
        rules=[rule("rbac.authorization.k8s.io", ["roles"], ["create", "escalate"])],
        attempt=Attempt(
            review={
                "group": "rbac.authorization.k8s.io",
                "resource": "roles",
                "verb": "escalate",
                "namespace": HOSTILE,
            }
        ),
    ),
    Escalation(
        "bind",
        "bind",
        cluster_rules=[rule("rbac.authorization.k8s.io", ["clusterroles"], ["bind"])],
        attempt=Attempt(
            review={
                "group": "rbac.authorization.k8s.io",
                "resource": "clusterroles",
                "verb": "bind",
                "name": "cluster-admin",
            }
        ),
    ),
    Escalation(
        "impersonate",
        "impersonate",
        cluster_rules=[rule("", ["users", "groups"], ["impersonate"])],
        attempt=Attempt(review={"group": "", "resource": "groups", "verb": "impersonate"}),
    ),
    # the attempt is what the wildcard grants (a named get in its own namespace) and the
    # legitimate grant does not (no persistentvolumeclaims)
    Escalation(
        "wildcard-resources",
        "wildcard",
        rules=[rule("", ["*"], ["get"])],
        attempt=Attempt("GET", f"/api/v1/namespaces/{HOSTILE}/persistentvolumeclaims/data"),
    ),
    Escalation(
        "wildcard-verbs",
        "wildcard",
        cluster_rules=[rule("", ["nodes"], ["*"])],
        attempt=Attempt("DELETE", "/api/v1/nodes/node-1"),
    ),
    Escalation(
        "another-teams-cluster-queue",
        "clusterqueues writes",
        cluster_rules=[
            rule(
                "kueue.x-k8s.io",
                ["clusterqueues"],
                ["get", "patch", "delete"],
                **{"resource-names": ["team-alice"]},
            )
        ],
        attempt=Attempt("DELETE", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-alice"),
    ),
    # Issue 29 item 6: a team's own ClusterQueue is the control plane's too. Writing it, a
    # team claimed the whole cluster as its guarantee (emptying the cohort for the others),
    # raised its fairSharing weight or changed its preemption policy.
    Escalation(
        "own-cluster-queue",
        "clusterqueues writes",
        cluster_rules=[
            rule(
                "kueue.x-k8s.io",
                ["clusterqueues"],
                ["get", "create", "patch", "delete"],
                **{"resource-names": [f"team-{HOSTILE}"]},
            )
        ],
        attempt=Attempt(
            "PATCH",
            f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-{HOSTILE}?fieldManager=hostile",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": f"team-{HOSTILE}"},
                "spec": {"cohortName": "gpu-k8s", "fairSharing": {"weight": "1000"}},
            },
            content_type="application/apply-patch+yaml",
        ),
    ),
    Escalation(
        "endpoints-writes",
        "CVE-2021-25740",
        rules=[rule("", ["endpoints"], ["create", "patch"])],
        attempt=Attempt(
            "POST",
            f"/api/v1/namespaces/{HOSTILE}/endpoints",
            {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": "steal"},
                "subsets": [{"addresses": [{"ip": "10.0.0.10"}], "ports": [{"port": 443}]}],
            },
        ),
    ),
    # Own-namespace rules that are escalations although they stay in the namespace
    # (issue 29 item 1, the reviewer's second pass): status subresources are the
    # controllers' to write, pods/ephemeralcontainers adds an unaccounted container to a
    # running pod, and the namespace's ResourceQuota and LimitRange are the operator's.
    Escalation(
        "own-service-status-load-balancer-ip",
        "CVE-2020-8554",
        rules=[rule("", ["services/status"], ["patch", "update"])],
        attempt=Attempt(
            "PATCH",
            f"/api/v1/namespaces/{HOSTILE}/services/mitm/status",
            {"status": {"loadBalancer": {"ingress": [{"ip": "10.96.0.10"}]}}},
            "application/merge-patch+json",
        ),
    ),
    Escalation(
        "own-workload-status-admission",
        "admits",
        rules=[rule("kueue.x-k8s.io", ["workloads/status"], ["patch"])],
        attempt=Attempt(
            "PATCH",
            f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{HOSTILE}/workloads/jump/status",
            {"status": {"admission": {"clusterQueue": "team-alice", "podSetAssignments": []}}},
            "application/merge-patch+json",
        ),
    ),
    # `update` is PUT: the attempt replaces the status of the pod `web` (ESCALATION_TARGETS)
    Escalation(
        "own-pod-status",
        "status subresource",
        rules=[rule("", ["pods/status"], ["update"])],
        attempt=Attempt(
            "PUT",
            f"/api/v1/namespaces/{HOSTILE}/pods/web/status",
            {**_WEB, "status": {"podIP": "10.0.0.10", "podIPs": [{"ip": "10.0.0.10"}]}},
        ),
    ),
    # what `kubectl debug` sends: a container that Pod Security `restricted` admits
    Escalation(
        "own-pod-ephemeral-containers",
        "ephemeral container",
        rules=[rule("", ["pods/ephemeralcontainers"], ["patch", "update"])],
        attempt=Attempt(
            "PATCH",
            f"/api/v1/namespaces/{HOSTILE}/pods/web/ephemeralcontainers",
            {"spec": {"ephemeralContainers": [{**_CONTAINER, "name": "debugger"}]}},
            "application/strategic-merge-patch+json",
        ),
    ),
    # an in-place resize of an admitted pod: Kueue does not admit the new size again
    Escalation(
        "own-pod-resize",
        "pods/resize",
        rules=[rule("", ["pods/resize"], ["patch"])],
        attempt=Attempt(
            "PATCH",
            f"/api/v1/namespaces/{HOSTILE}/pods/web/resize",
            {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "64"}}}]}},
            "application/strategic-merge-patch+json",
        ),
    ),
    Escalation(
        "own-resource-quota-delete",
        "resourcequotas",
        rules=[rule("", ["resourcequotas"], ["delete"])],
        attempt=Attempt("DELETE", f"/api/v1/namespaces/{HOSTILE}/resourcequotas/limits"),
    ),
    Escalation(
        "own-limit-range-delete",
        "limitranges",
        rules=[rule("", ["limitranges"], ["delete", "deletecollection"])],
        attempt=Attempt("DELETE", f"/api/v1/namespaces/{HOSTILE}/limitranges/defaults"),
    ),
    # Issue 29, the fourth review (G1): a Binding sets a pod's node as kube-scheduler does,
    # skipping it: a pod with schedulerName of no scheduler, once Kueue lifted its gate,
    # bound to the control-plane node (kube-apiserver checks only that it is not deleted,
    # not bound and not gated; kubelet only NoExecute taints), beside admin.conf.
    Escalation(
        "pods-binding",
        "pods/binding",
        rules=[rule("", ["pods/binding"], ["create"])],
        attempt=Attempt("POST", f"/api/v1/namespaces/{HOSTILE}/pods/web/binding", _binding("web")),
    ),
    # the same through the legacy `bindings` resource (the name in the body)
    Escalation(
        "legacy-bindings",
        "bindings",
        rules=[rule("", ["bindings"], ["create"])],
        attempt=Attempt("POST", f"/api/v1/namespaces/{HOSTILE}/bindings", _binding("web")),
    ),
    # G2: Calico's own NetworkPolicy (calico.yaml installs its CRD, namespaced): Calico
    # evaluates a tier's policies by `order`, the first Allow or Deny ending it, so one
    # that allows every egress before the Kubernetes policies reopens the instance metadata
    # service and the DCGM exporter's port that the control plane's egress policy closes
    Escalation(
        "calico-network-policy",
        "Calico",
        rules=[rule("crd.projectcalico.org", ["networkpolicies"], ["create", "patch"])],
        attempt=Attempt(
            "POST",
            f"/apis/crd.projectcalico.org/v1/namespaces/{HOSTILE}/networkpolicies",
            _CALICO_POLICY,
        ),
    ),
    # the same kind through Calico's API server group (projectcalico.org/v3)
    Escalation(
        "calico-api-server-policy",
        "Calico",
        rules=[rule("projectcalico.org", ["networkpolicies"], ["create"])],
        attempt=Attempt(
            "POST",
            f"/apis/projectcalico.org/v3/namespaces/{HOSTILE}/networkpolicies",
            {**_CALICO_POLICY, "apiVersion": "projectcalico.org/v3"},
        ),
    ),
    # G7: EndpointSlices carry a Service's endpoints as Endpoints do (CVE-2021-25740)
    Escalation(
        "endpointslices-writes",
        "CVE-2021-25740",
        rules=[rule("discovery.k8s.io", ["endpointslices"], ["create", "patch"])],
        attempt=Attempt(
            "POST",
            f"/apis/discovery.k8s.io/v1/namespaces/{HOSTILE}/endpointslices",
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": "steal", "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.0.0.10"]}],
                "ports": [{"port": 443}],
            },
        ),
    ),
    # A PriorityClass is cluster-scoped: a team's own class of a high value would let its
    # pods preempt every other team's (kube-scheduler evicts lower priorities for a higher
    # one). Refused in any scope, naming why; no grant holds priorityclasses create.
    Escalation(
        "priority-class-create",
        "a PriorityClass is cluster-wide",
        cluster_rules=[rule("scheduling.k8s.io", ["priorityclasses"], ["create"])],
        attempt=Attempt(
            "POST",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            _PRIORITY_CLASS,
        ),
    ),
    # The same in a Role of the consumer's own namespace: RBAC grants nothing on a
    # cluster-scoped resource there (a RoleBinding's rules apply in its namespace only),
    # so the rule would only mislead the reader of the grant; refused like the others.
    Escalation(
        "priority-class-in-own-namespace",
        "a PriorityClass is cluster-wide",
        rules=[rule("scheduling.k8s.io", ["priorityclasses"], ["get", "create"])],
        attempt=Attempt(
            "POST",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            _PRIORITY_CLASS,
        ),
        grants_nothing=True,
    ),
    Escalation(
        "cluster-write-not-on-allow-list",
        "allow-list",
        cluster_rules=[rule("", ["nodes"], ["patch"])],
        attempt=Attempt(
            "PATCH",
            "/api/v1/nodes/node-1",
            {"spec": {"unschedulable": True}},
            "application/merge-patch+json",
        ),
    ),
    # review43 G4: the namespace's object counts are the control plane's (team_quota.py);
    # raising them would let the team fill the cluster's store
    Escalation(
        "own-object-count-quota-raise",
        "resourcequotas",
        rules=[rule("", ["resourcequotas"], ["get", "patch", "update"])],
        attempt=Attempt(
            "PATCH",
            f"/api/v1/namespaces/{HOSTILE}/resourcequotas/gpu-k8s-object-counts",
            {"spec": {"hard": {"configmaps": "1000000"}}},
            "application/merge-patch+json",
        ),
    ),
    # no ResourceQuota counts Events (kubernetes pkg/quota/v1/install/registry.go), and
    # each stays an hour: a team writing them would fill the store past its counts
    Escalation(
        "own-events-create",
        "events writes",
        rules=[rule("", ["events"], ["create", "patch"])],
        attempt=Attempt(
            "POST",
            f"/api/v1/namespaces/{HOSTILE}/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "spam"},
                "involvedObject": {"kind": "Pod", "name": "p", "namespace": HOSTILE},
                "reason": "Spam",
                "message": "x" * 1024,
            },
        ),
    ),
    Escalation(
        "own-events-k8s-io-create",
        "events writes",
        rules=[rule("events.k8s.io", ["events"], ["create"])],
        attempt=Attempt(
            "POST",
            f"/apis/events.k8s.io/v1/namespaces/{HOSTILE}/events",
            {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "spam"},
                "eventTime": "2026-11-28T00:00:00.000000Z",
                "reportingController": "hostile.example/spam",
                "reportingInstance": "spam",
                "action": "Spam",
                "reason": "Spam",
                "regarding": {"kind": "Pod", "name": "p", "namespace": HOSTILE},
                "type": "Normal",
            },
        ),
    ),
    # G6: a DaemonSet in its own namespace. The DaemonSet controller gives its pods
    # tolerations of cordons (node.kubernetes.io/unschedulable) and of a lost node for ever
    # (not-ready, unreachable: kubernetes pkg/controller/daemon/util daemonset_util.go
    # AddOrUpdateDaemonPodTolerations), and a drain leaves them (lib drain.py `stays`): a
    # team's GPU DaemonSet kept its GPUs through a GPU reset and a driver upgrade's drain.
    Escalation(
        "own-namespace-daemonsets",
        "daemonsets",
        rules=[rule("apps", ["daemonsets"], ["create", "patch"])],
        attempt=Attempt("POST", f"/apis/apps/v1/namespaces/{HOSTILE}/daemonsets", _DAEMONSET),
    ),
]

# Issue 29, the reviewer's third pass: requests the legitimate grant below allows by RBAC
# (pods, secrets and serviceaccounts/token in the consumer's own namespace) that are still
# escalations, refused by the control plane's ValidatingAdmissionPolicies in every
# consumer's namespace (admission_policies.py CONSUMER_PODS, CONSUMER_TOKENS): `names` is
# the policy the 403 names.
_RESTRICTED = _WEB["spec"]


def _restricted_pod(**spec: Any) -> dict:
    """A pod Pod Security `restricted` admits, with `spec` added."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "escape"},
        "spec": {**_RESTRICTED, **spec},
    }


PODS_POLICY = "gpu-k8s-consumer-pods-off-the-control-plane"
TOKENS_POLICY = "gpu-k8s-consumer-short-lived-tokens"
EGRESS_POLICY = "gpu-k8s-consumer-egress-by-the-control-plane"
CONTROLLERS_POLICY = "gpu-k8s-consumer-controllers-by-kube-system"
SERVICES_POLICY = "gpu-k8s-consumer-services-no-external-ips"


def _pod_refused(path_id: str, **spec: Any) -> Escalation:
    """The consumer creates a `_restricted_pod` with `spec` in its namespace: CONSUMER_PODS."""
    pods = f"/api/v1/namespaces/{HOSTILE}/pods"
    return Escalation(path_id, PODS_POLICY, attempt=Attempt("POST", pods, _restricted_pod(**spec)))


ADMISSION_ESCALATIONS: list[Escalation] = [
    # the reviewer's pod: bound by name to the control-plane node, tolerating every taint
    _pod_refused(
        "pod-bound-to-the-control-plane",
        nodeName=CONTROL_PLANE_NODE,
        tolerations=[{"operator": "Exists"}],
    ),
    # spec.nodeName alone: kubelet admits a pod bound to its node checking only NoExecute
    # taints, so the control plane's NoSchedule taint does not keep it off
    _pod_refused("pod-node-name", nodeName=CONTROL_PLANE_NODE),
    # a toleration of kubeadm's control-plane taint: the scheduler may place it there
    _pod_refused(
        "pod-tolerates-the-control-plane",
        tolerations=[
            {
                "key": "node-role.kubernetes.io/control-plane",
                "operator": "Exists",
                "effect": "NoSchedule",
            }
        ],
        nodeSelector={"node-role.kubernetes.io/control-plane": ""},
    ),
    # a key-less Exists toleration tolerates every taint, the control plane's included
    _pod_refused(
        "pod-tolerates-every-taint", tolerations=[{"operator": "Exists", "effect": "NoSchedule"}]
    ),
    # a toleration of the GPU quarantine's NoExecute taint (issue 32): the pod would stay on a
    # node whose GPU the watcher found bad, hold it from draining for its repair, and be
    # placed there by the scheduler once the node is uncordoned before the taint is lifted
    _pod_refused(
        "pod-tolerates-the-gpu-quarantine",
        tolerations=[
            {
                "key": "gpu-k8s.io/gpu-unhealthy",
                "operator": "Exists",
                "effect": "NoExecute",
            }
        ],
    ),
    # G6: a toleration of a cordon (kubectl cordon and every drain set spec.unschedulable,
    # which the node lifecycle controller mirrors as node.kubernetes.io/unschedulable:
    # NoSchedule): the scheduler would place the pod on a node being drained for a GPU
    # reset or a driver upgrade
    _pod_refused(
        "pod-tolerates-cordons",
        tolerations=[
            {
                "key": "node.kubernetes.io/unschedulable",
                "operator": "Exists",
                "effect": "NoSchedule",
            }
        ],
    ),
    # G6: a lost node tolerated for ever (no tolerationSeconds, so DefaultTolerationSeconds
    # adds nothing): the pod stays bound to a node that is gone, its Kueue quota and GPUs
    # held in the cohort's accounting until someone deletes it
    _pod_refused(
        "pod-stays-on-a-lost-node",
        tolerations=[
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        ],
    ),
    # a pod naming no scheduler stays unbound (kube-scheduler places only its own), for
    # whoever may bind it: the fourth review's chain to the control-plane node (G1)
    Escalation(
        "pod-names-another-scheduler",
        PODS_POLICY,
        attempt=Attempt(
            "POST", f"/api/v1/namespaces/{HOSTILE}/pods", _restricted_pod(schedulerName="none")
        ),
    ),
    # a mirror pod (kubelet's annotation kubernetes.io/config.mirror on the API copy of a
    # static pod) on a GPU worker: a drain leaves it, as kubectl drain does (lib drain.py
    # `stays`), and no kubelet runs or removes it but the named node's. kube-apiserver lets
    # any user who may create pods make one (NodeRestriction restricts only nodes), but only
    # naming its node (ValidatePodSpecificAnnotations: tests/fakes/kube_pod_annotations.py),
    # which a consumer's pod may not; an update may not add the annotation
    Escalation(
        "pod-mirror-of-a-static-pod",
        PODS_POLICY,
        attempt=Attempt(
            "POST",
            f"/api/v1/namespaces/{HOSTILE}/pods",
            {
                **_restricted_pod(nodeName=WORKER_NODE),
                "metadata": {"name": "escape", "annotations": {MIRROR_ANNOTATION: "static"}},
            },
        ),
    ),
    # a pod running as the consumer's own ServiceAccount: kubelet keeps a fresh token of the
    # grant in it (projected, renewed) for as long as the pod lives, past the 48 h token
    _pod_refused("pod-runs-as-the-grant", serviceAccountName=HOSTILE),
    # a critical PriorityClass: kube-apiserver's Priority plugin admits system-node-critical
    # in any namespace since 1.17 (kubernetes/kubernetes#60596), and kube-scheduler then
    # evicts other teams' admitted training pods (priority 0) to take their GPUs
    _pod_refused("pod-priority-class", priorityClassName="system-node-critical"),
    # a bare pod naming the team's own queued Job as its controller: Kueue v0.19.2 does not
    # gate a pod a job it manages owns (FindAncestorJobManagedByKueue), so it would run
    # outside the team's quota (issue 29 item 6)
    Escalation(
        "pod-claims-a-queued-job",
        PODS_POLICY,
        attempt=Attempt(
            "POST",
            f"/api/v1/namespaces/{HOSTILE}/pods",
            {
                **_restricted_pod(),
                "metadata": {
                    "name": "escape",
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": "admitted",
                            "uid": "6b9bd7a3-5f4e-4c1d-9a57-0c6b1d1f2e3a",
                            "controller": True,
                        }
                    ],
                },
            },
        ),
    ),
    # a Job naming the team's Deployment as its controller: Kueue v0.19.2 neither suspends
    # a job with a managed ancestor (WorkloadShouldBeSuspended: FindAncestorJobManagedBy-
    # Kueue, a Deployment counts) nor gates its pods (a managed job's), so it would run
    # outside the team's quota (issue 29 item 6)
    Escalation(
        "job-claims-a-deployment",
        CONTROLLERS_POLICY,
        attempt=Attempt(
            "POST",
            f"/apis/batch/v1/namespaces/{HOSTILE}/jobs",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": "escape",
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "name": "served",
                            "uid": "0d1f5a2e-7c3b-4e8a-9f6d-2b4c6e8a1d3f",
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "template": {"spec": {**_restricted_pod()["spec"], "restartPolicy": "Never"}}
                },
            },
        ),
    ),
    # an egress policy of its own: policies are additive, so allowing every egress reopens
    # what the control plane's egress policy keeps from its pods (the instance metadata
    # service, the DCGM exporter's page of every GPU node on port 9400)
    Escalation(
        "egress-policy-of-its-own",
        EGRESS_POLICY,
        attempt=Attempt(
            "POST",
            f"/apis/networking.k8s.io/v1/namespaces/{HOSTILE}/networkpolicies",
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "everywhere"},
                "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]},
            },
        ),
    ),
    # a legacy token Secret: the token controller fills it with a token that never expires
    Escalation(
        "legacy-token-secret",
        TOKENS_POLICY,
        attempt=Attempt(
            "POST",
            f"/api/v1/namespaces/{HOSTILE}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {
                    "name": "forever",
                    "annotations": {"kubernetes.io/service-account.name": HOSTILE},
                },
            },
        ),
    ),
    # a TokenRequest for a year (of another account of the namespace: ESCALATION_TARGETS):
    # outlives every rotation of the consumer's 48 h token
    Escalation(
        "year-long-token-request",
        TOKENS_POLICY,
        attempt=Attempt(
            "POST",
            f"/api/v1/namespaces/{HOSTILE}/serviceaccounts/{RUNNER}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 365 * 24 * 3600},
            },
        ),
    ),
    # the fourth review (G3): a new token of the grant's own account, however short: a
    # stolen kubeconfig renewed itself so, every 47 h, until the relation went; only the
    # control plane (kubeadm's admin) renews it
    Escalation(
        "token-for-the-grants-own-account",
        TOKENS_POLICY,
        attempt=Attempt(
            "POST",
            f"/api/v1/namespaces/{HOSTILE}/serviceaccounts/{HOSTILE}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        ),
    ),
    # review43 G5, CVE-2020-8554: a Service whose externalIPs name another address (here
    # kube-dns's) takes over the cluster's traffic to it; refused on a cluster bootstrapped
    # before kubeadm's config enabled DenyServiceExternalIPs too
    Escalation(
        "service-external-ips",
        SERVICES_POLICY,
        attempt=Attempt(
            "POST",
            f"/api/v1/namespaces/{HOSTILE}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "mitm-by-external-ip"},
                "spec": {
                    "ports": [{"port": 53, "protocol": "UDP"}],
                    "externalIPs": ["10.96.0.10"],
                },
            },
        ),
    ),
]

# What the attempts above name in the consumer's namespace, seeded before they are made
# (so that, with the escalation granted, each would succeed: the suite's positive control):
# the pod `web`, the Service `mitm`, the namespace's ResourceQuota and LimitRange, and a
# second ServiceAccount.
ESCALATION_TARGETS: list[tuple[str, dict]] = [
    (f"/api/v1/namespaces/{HOSTILE}/pods/web", _WEB),
    (
        f"/api/v1/namespaces/{HOSTILE}/services/mitm",
        {"spec": {"type": "LoadBalancer", "ports": [{"port": 443}]}},
    ),
    (
        f"/api/v1/namespaces/{HOSTILE}/resourcequotas/limits",
        {"spec": {"hard": {"pods": "10"}}},
    ),
    (
        f"/api/v1/namespaces/{HOSTILE}/limitranges/defaults",
        {"spec": {"limits": [{"type": "Container", "default": {"cpu": "1"}}]}},
    ),
    (f"/api/v1/namespaces/{HOSTILE}/serviceaccounts/{RUNNER}", {}),
]

# What a consumer may hold (tensorflow's kind of request): workloads, tokens and secrets in
# its own namespace, the allowed cluster-wide reads. Its token makes every attempt above.
LEGITIMATE_RULES: list[dict] = [
    rule("", ["pods", "services", "configmaps", "secrets", "serviceaccounts"], ["get", "list"]),
    rule("", ["pods", "secrets"], ["create", "patch", "delete"]),
    rule("", ["serviceaccounts/token"], ["create"]),
    rule("batch", ["jobs"], ["get", "list", "create", "patch", "delete"]),
    rule("networking.k8s.io", ["networkpolicies"], ["get", "create", "patch", "delete"]),
    rule("", ["configmaps", "services"], ["create", "patch"]),
]
LEGITIMATE_CLUSTER_RULES: list[dict] = [rule("", ["nodes"], ["get", "list"])]


# review44a G1, "Denial of service risks": requests over the kube-api library's bounds
# (kube_api MAX_RULES, MAX_ITEMS, MAX_WORD, MAX_JSON, MAX_QUANTITY), each as the databag a
# consumer writes (JSON text, as Juju carries it) and the bound its refusal must name. The
# first is the reviewer's: 60,000 one-name rules, a 6 MB value whose Role kube-apiserver
# answers 413, which stopped the grant of every consumer after it.
@dataclasses.dataclass(frozen=True)
class Oversized:
    """One request over a bound: its databag and the name of the bound."""

    id: str
    names: str
    databag: dict[str, str]

    def request(self) -> dict[str, str]:
        """The whole databag, as `kube_api.RequirerAppData` reads it."""
        return {"namespace": HOSTILE, **self.databag}


def _text(value: Any) -> str:
    import json

    return json.dumps(value)


def _rules(count: int, **extra: Any) -> str:
    return _text([rule("", ["configmaps"], ["get"], **extra)] * count)


_VERBS = [f"verb{i}" for i in range(33)]
_NAMES = [f"name{i}" for i in range(33)]
OVERSIZED: list[Oversized] = [
    Oversized("sixty-thousand-rules", "MAX_JSON", {"rules": _rules(60_000)}),
    Oversized("65-rules", "MAX_RULES", {"rules": _rules(65)}),
    Oversized("65-cluster-rules", "MAX_RULES", {"cluster-rules": _rules(65)}),
    Oversized("33-verbs", "MAX_ITEMS", {"rules": _text([rule("", ["pods"], _VERBS)])}),
    Oversized("33-names", "MAX_ITEMS", {"rules": _rules(1, **{"resource-names": _NAMES})}),
    Oversized(
        "254-characters", "MAX_WORD", {"rules": _rules(1, **{"resource-names": ["n" * 254]})}
    ),
    Oversized("not-even-json", "MAX_JSON", {"cluster-rules": "[" + "x" * 70_000}),
    Oversized(  # 10,000 fit (EFS's access point quota): 30,000 do not
        "30000-storage-consumers",
        "MAX_STORAGE_JSON",
        {"storage-consumers": _text({f"app{i}": "fsap-0123456789abcdef0" for i in range(30_000)})},
    ),
    Oversized("33-digit-gpu-quota", "MAX_QUANTITY", {"gpu-quota": "9" * 33}),
    Oversized("40-digit-memory-quota", "MAX_QUANTITY", {"memory-quota": "1" * 40 + "Gi"}),
]


def largest(resource: str) -> str:
    """Near the largest `rules` within every bound: 64 rules of 32 names, as MAX_JSON lets."""
    names = [f"{i:02}" + "n" * 23 for i in range(32)]
    return _text([rule("", [resource], ["get"], **{"resource-names": names})] * 64)


# The largest request within the bounds (the objects a consumer could make the control plane
# apply: a Role and a ClusterRole of about 64 KiB each)
LARGEST: dict[str, str] = {"rules": largest("configmaps"), "cluster-rules": largest("nodes")}
