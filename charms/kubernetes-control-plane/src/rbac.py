# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Least-privilege credentials for consumers of the cluster (no ops imports).

For each consumer application: its namespace, a ServiceAccount, and Role/RoleBinding
(namespaced rules) and ClusterRole/ClusterRoleBinding (cluster rules) holding exactly
what it asked for; its credential is a short-lived TokenRequest token (`request_token`),
never a Secret. Every object is applied with server-side apply, so applying twice
changes nothing. Teardown deletes the credentials and bindings but keeps the namespace
(its data is never lost with a relation).

The workers' grant still reads a long-lived `kubernetes.io/service-account-token` Secret
(`apply`); consumers granted before TokenRequest had one too (`legacy_token_secret`),
which `delete_legacy_token` removes once they hold a TokenRequest kubeconfig.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import yaml
from literals import (
    CONSUMER_LABEL,
    FIELD_MANAGER,
    GPU_VALIDATION_NAMESPACE,
    GPU_VALIDATION_POD_SECURITY,
    KUEUE_NAMESPACE_LABEL,
    KUEUE_NAMESPACE_VALUE,
    MANAGED_BY_LABEL,
    PROVISIONER_POD_SECURITY,
    TEAM_POD_SECURITY,
    WORKER_NAMESPACE,
    WORKER_SERVICE_ACCOUNT,
)

if TYPE_CHECKING:
    from charms.gpu_k8s.v0.kubeclient import Kube

logger = logging.getLogger(__name__)

RBAC = "rbac.authorization.k8s.io/v1"
RuleDict = dict[str, list[str]]

# What a worker needs to drain and label itself and to run GPU validation pods.
WORKER_CLUSTER_RULES: list[RuleDict] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]
WORKER_RULES: list[RuleDict] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]},
]


# Every node may read its own metrics with its kubelet's client certificate (group
# system:nodes): the API server's /metrics, and kubelet's /metrics/* (the nodes/metrics
# subresource, kubernetes pkg/kubelet/server/auth.go). The node's HAProxy forwards the
# COS agent's scrapes with it (api_proxy.MetricsAccess).
NODE_METRICS = "gpu-k8s:node-metrics"
NODE_METRICS_RULES: list[RuleDict] = [
    {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
]


def node_metrics_manifests() -> list[dict]:
    """The ClusterRole NODE_METRICS and its binding to the group system:nodes."""
    labels = {MANAGED_BY_LABEL: FIELD_MANAGER}
    meta = {"name": NODE_METRICS, "labels": labels}
    group = RBAC.split("/")[0]
    return [
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": meta, "rules": NODE_METRICS_RULES},
        {
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": group, "kind": "ClusterRole", "name": NODE_METRICS},
            "subjects": [{"apiGroup": group, "kind": "Group", "name": "system:nodes"}],
        },
    ]


# A storage provisioner lists the pods of each namespace it serves a consumer in, before it
# deletes or moves that consumer's claim (efs-storage storage.py pods_using; review44a G8:
# no longer cluster-wide, lib kube_api PROVISIONER_RULES). The control plane writes this
# Role and its RoleBinding to the provisioner's ServiceAccount in the namespace granted to
# each consumer of its `storage-consumers` that it admits (addons.apply_provisioner_claims_
# policy), and deletes them when it admits that consumer no more. The name holds colons,
# which no application name (`gpu-k8s-<app>`, Grant.role_name) can: RBAC names are path
# segments (kubernetes pkg/apis/rbac/validation/validation.go ValidateRBACName,
# path.IsValidPathSegmentName; Kubernetes' own Roles are named so, e.g. kube-system's
# `system:controller:bootstrap-signer`, plugin/pkg/auth/authorizer/rbac/bootstrappolicy/
# namespace_policy.go). No consumer writes Roles (kube_api refuses the RBAC group), no
# ResourceQuota counts them (team_quota), the sweep and the admission policies look at none.
PROVISIONER_PODS_RULES: list[RuleDict] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
]


def provisioner_pods_name(provisioner: str) -> str:
    """The Role and RoleBinding that let `provisioner` list a served namespace's pods."""
    return f"gpu-k8s:provisioner-pods:{provisioner}"


def provisioner_pods_manifests(account: tuple[str, str], namespace: str) -> list[dict]:
    """The Role and RoleBinding in `namespace` for the provisioner `account` (ns, name)."""
    home, name = account
    role = provisioner_pods_name(name)
    meta = {"name": role, "namespace": namespace, "labels": {MANAGED_BY_LABEL: FIELD_MANAGER}}
    ref = {"apiGroup": RBAC.split("/")[0], "kind": "Role", "name": role}
    return [
        {"apiVersion": RBAC, "kind": "Role", "metadata": meta, "rules": PROVISIONER_PODS_RULES},
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": ref,
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": home}],
        },
    ]


class TokenNotReadyError(Exception):
    """The token controller has not filled the ServiceAccount token yet (retry later)."""


@dataclasses.dataclass(frozen=True)
class IssuedToken:
    """A TokenRequest token and when the API server says it expires."""

    token: str = dataclasses.field(repr=False)
    expires: datetime.datetime


# The TokenRequest API (kubernetes.io/docs/reference/kubernetes-api/authentication-resources/
# token-request-v1/; kubernetes pkg/registry/core/serviceaccount/storage/token.go): POST a
# TokenRequest to .../serviceaccounts/<name>/token; `spec.expirationSeconds` is the lifetime
# asked for, at least 600 (pkg/apis/authentication/validation: "may not specify a duration
# less than 10 minutes"); kube-apiserver's --service-account-max-token-expiration, when an
# operator sets it (kubeadm does not), shortens a longer one, so the lifetime granted is the
# answer's `status.expirationTimestamp`, never the one asked for. `audiences` left out
# default to the API server's own (--api-audiences, kubeadm: the service-account issuer).
MIN_TOKEN_SECONDS = 600
# What a consumer's token lives: 48 hours (why: access.py, where it is renewed).
TOKEN_SECONDS = 48 * 3600
TOKEN_REQUEST = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}


class NamespaceTakenError(Exception):
    """The consumer's namespace exists and is not its own: another grant's, or the system's."""


@dataclasses.dataclass(frozen=True)
class Grant:
    """Who gets what: one ServiceAccount and its rules."""

    consumer: str
    namespace: str
    service_account: str
    rules: Sequence[RuleDict] = ()
    cluster_rules: Sequence[RuleDict] = ()
    extra_namespaces: dict[str, Sequence[RuleDict]] = dataclasses.field(default_factory=dict)
    # A consumer's namespace is its own: created for it, never applied onto one that exists
    # without its consumer label (another grant's, the system's or an operator's).
    own_namespace: bool = False
    # Labels each Namespace the grant applies carries beyond its own (Pod Security's).
    namespace_labels: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    # Its credential is a TokenRequest token (`request_token`), not a token Secret.
    token_request: bool = False

    @property
    def role_name(self) -> str:
        """Name of the Role/ClusterRole and their bindings."""
        return f"gpu-k8s-{self.consumer}"

    @property
    def token_secret(self) -> str:
        """Name of the service-account-token Secret (a consumer's before TokenRequest)."""
        return f"{self.service_account}-token"


# The consumer name of the workers' shared grant (`worker_grant`): its Role, ClusterRole and
# bindings are `gpu-k8s-worker`, as a kube-api consumer's are `gpu-k8s-<app>`.
WORKER_CONSUMER = "worker"
# Application names no kube-api consumer may have (review44a G9), and why: a consumer's
# Role, ClusterRole and bindings are `gpu-k8s-<app>` (`Grant.role_name`) and its
# ServiceAccount `<app>`. Refused rather than renamed: renaming every consumer's objects
# (a prefix) would change the ServiceAccount of each existing grant, whose name efs-storage
# labels its volumes and claims with (`gpu-k8s.io/efs-app`, admission_policies.py), and the
# name each consumer's token is for. The control plane's other ClusterRoles are named
# otherwise (`gpu-k8s:node-metrics`, the add-ons' upstream names).
RESERVED_CONSUMERS: dict[str, str] = {
    WORKER_CONSUMER: (
        "the workers' shared grant of earlier revisions is ClusterRole gpu-k8s-worker,"
        " which a consumer's grant would replace"
    ),
    # "The default service account in each namespace" (kubernetes.io/docs/concepts/
    # security/service-accounts): every pod there that names none runs as it
    "default": "a namespace's default ServiceAccount, which its pods run as when they name none",
}


def reserved_consumer(app: str) -> str | None:
    """Why `app` may not be a kube-api consumer's name (RESERVED_CONSUMERS), or None."""
    why = RESERVED_CONSUMERS.get(app)
    if why is None:
        return None
    return (
        f"application name {app} is reserved ({why}): deploy the consumer under another"
        " name, or consume its offer under another"
    )


def consumer_grant(
    app: str,
    namespace: str,
    rules: Sequence[Any],
    cluster_rules: Sequence[Any],
    *,
    provisioner: bool = False,
):
    """The `Grant` for a kube-api consumer (rules are `kube_api.Rule` models).

    Its namespace enforces Pod Security `restricted`; a storage `provisioner`'s (the
    operator trusts it with PersistentVolumes) `baseline`: its Jobs mount the file
    system as root to make the consumers' directories (literals.PROVISIONER_POD_SECURITY).

    Every consumer's namespace but a provisioner's is Kueue's (KUEUE_NAMESPACE_LABEL),
    whether it asked for LocalQueues or not: Kueue v0.19.2 suspends every batch Job and
    JobSet there on create, gates every other pod, and admits only those of a LocalQueue
    (kueue.configure), so a consumer that asked for none has its Jobs and pods held, never
    run outside the teams' quotas (issue 29 review item 1, item 6). A provisioner's
    directory Jobs would be held the same way, so its namespace is left out; the GPUs
    any pod there holds come off what Kueue may hand out (kueue.capacity counts every
    GPU pod outside a managed namespace).
    """
    labels = PROVISIONER_POD_SECURITY if provisioner else TEAM_POD_SECURITY
    if not provisioner:
        labels = {**labels, KUEUE_NAMESPACE_LABEL: KUEUE_NAMESPACE_VALUE}
    return Grant(
        consumer=app,
        namespace=namespace,
        service_account=app,
        rules=[r.manifest() for r in rules],
        cluster_rules=[r.manifest() for r in cluster_rules],
        own_namespace=True,
        namespace_labels={namespace: labels},
        token_request=True,
    )


def worker_grant() -> Grant:
    """The `Grant` behind the kubeconfig every worker receives."""
    return Grant(
        consumer=WORKER_CONSUMER,
        namespace=WORKER_NAMESPACE,
        service_account=WORKER_SERVICE_ACCOUNT,
        cluster_rules=WORKER_CLUSTER_RULES,
        extra_namespaces={GPU_VALIDATION_NAMESPACE: WORKER_RULES},
        namespace_labels={GPU_VALIDATION_NAMESPACE: GPU_VALIDATION_POD_SECURITY},
    )


def _meta(name: str, grant: Grant, namespace: str | None = None) -> dict:
    meta: dict = {
        "name": name,
        "labels": {MANAGED_BY_LABEL: FIELD_MANAGER, CONSUMER_LABEL: grant.consumer},
    }
    if namespace:
        meta["namespace"] = namespace
    return meta


def _subject(grant: Grant) -> list[dict]:
    return [
        {"kind": "ServiceAccount", "name": grant.service_account, "namespace": grant.namespace}
    ]


def manifests(grant: Grant) -> list[dict]:
    """Every object for `grant`, in the order they must be applied."""
    ns = grant.namespace
    objs: list[dict] = []
    for name in [ns, *grant.extra_namespaces]:
        if name != "kube-system":
            meta = _meta(name, grant)
            meta["labels"].update(grant.namespace_labels.get(name, {}))
            objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    objs.append(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(grant.service_account, grant, ns),
        }
    )
    if not grant.token_request:
        secret_meta = _meta(grant.token_secret, grant, ns)
        secret_meta["annotations"] = {"kubernetes.io/service-account.name": grant.service_account}
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": secret_meta,
            }
        )
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "name": grant.role_name}
    scopes = ([(ns, grant.rules)] if grant.rules else []) + list(grant.extra_namespaces.items())
    for namespace, rules in scopes:
        objs.append(
            {
                "apiVersion": RBAC,
                "kind": "Role",
                "metadata": _meta(grant.role_name, grant, namespace),
                "rules": list(rules),
            }
        )
        objs.append(
            {
                "apiVersion": RBAC,
                "kind": "RoleBinding",
                "metadata": _meta(grant.role_name, grant, namespace),
                "roleRef": {**role_ref, "kind": "Role"},
                "subjects": _subject(grant),
            }
        )
    if grant.cluster_rules:
        objs.append(
            {
                "apiVersion": RBAC,
                "kind": "ClusterRole",
                "metadata": _meta(grant.role_name, grant),
                "rules": list(grant.cluster_rules),
            }
        )
        objs.append(
            {
                "apiVersion": RBAC,
                "kind": "ClusterRoleBinding",
                "metadata": _meta(grant.role_name, grant),
                "roleRef": {**role_ref, "kind": "ClusterRole"},
                "subjects": _subject(grant),
            }
        )
    return objs


def apply(kube: Kube, grant: Grant) -> str:
    """Create or update everything for `grant`; return its credential.

    A TokenRequest grant's (a consumer's) is a new token of TOKEN_SECONDS (use
    `apply_objects` and `request_token` to know its expiry); another's (the workers') is
    its token Secret's token.

    Raises:
        TokenNotReadyError: the token controller has not filled the token yet.
        NamespaceTakenError: the namespace exists and is not this consumer's.
    """
    apply_objects(kube, grant)
    if grant.token_request:
        return request_token(kube, grant, TOKEN_SECONDS).token
    secret = kube.get("v1", "Secret", grant.token_secret, grant.namespace) or {}
    encoded = (secret.get("data") or {}).get("token")
    if not encoded:
        raise TokenNotReadyError(
            f"token for {grant.namespace}/{grant.service_account} not issued yet"
        )
    return base64.b64decode(encoded).decode()


def apply_objects(kube: Kube, grant: Grant) -> None:
    """Create or update the namespace(s), ServiceAccount and bindings of `grant`.

    Bindings a consumer no longer asks for are deleted. A consumer's namespace is created
    when absent; one that exists must carry this consumer's label (it made it before),
    else nothing is applied: one GET, made only when the grant is (re)applied.

    Raises:
        NamespaceTakenError: the namespace exists and is not this consumer's.
    """
    if grant.own_namespace:
        check_namespace(kube, grant)
    for manifest in manifests(grant):
        kube.apply(manifest, field_manager=FIELD_MANAGER)
    if not grant.rules:
        kube.delete(RBAC, "RoleBinding", grant.role_name, grant.namespace)
        kube.delete(RBAC, "Role", grant.role_name, grant.namespace)
    if not grant.cluster_rules:
        kube.delete(RBAC, "ClusterRoleBinding", grant.role_name)
        kube.delete(RBAC, "ClusterRole", grant.role_name)


def request_token(kube: Kube, grant: Grant, seconds: int) -> IssuedToken:
    """A new TokenRequest token for `grant`'s ServiceAccount, valid `seconds` at most.

    One POST; the ServiceAccount must exist (`apply_objects`). The expiry is the API
    server's answer (its --service-account-max-token-expiration may cut `seconds`).
    """
    if seconds < MIN_TOKEN_SECONDS:
        raise ValueError(f"a TokenRequest lives at least {MIN_TOKEN_SECONDS} s, not {seconds}")
    path = kube.path("v1", "ServiceAccount", grant.namespace, grant.service_account, "token")
    body = {**TOKEN_REQUEST, "spec": {"expirationSeconds": seconds}}
    answer = kube.request("POST", path, body=body) or {}
    status = answer.get("status") or {}
    token, stamp = status.get("token"), status.get("expirationTimestamp")
    if not token or not stamp:
        raise TokenNotReadyError(
            f"no token for {grant.namespace}/{grant.service_account} in the TokenRequest answer"
        )
    expires = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return IssuedToken(token, expires)


def delete_legacy_token(kube: Kube, grant: Grant) -> bool:
    """Delete the long-lived token Secret a consumer had before TokenRequest (if any).

    Deleting it revokes its token: the token authenticator accepts a Secret's token only
    while the Secret exists (kubernetes pkg/serviceaccount/legacy.go).
    """
    return bool(kube.delete("v1", "Secret", grant.token_secret, grant.namespace))


def check_namespace(kube: Kube, grant: Grant) -> None:
    """Raise NamespaceTakenError unless `grant`'s namespace is absent or its consumer's own."""
    existing = kube.get("v1", "Namespace", grant.namespace)
    if existing is None:
        return
    labels = (existing.get("metadata") or {}).get("labels") or {}
    holder = labels.get(CONSUMER_LABEL)
    if labels.get(MANAGED_BY_LABEL) == FIELD_MANAGER and holder == grant.consumer:
        return
    who = f"held by {holder}" if holder else "not made for a kube-api consumer"
    raise NamespaceTakenError(
        f"namespace {grant.namespace} is {who}; relate {grant.consumer} with another namespace"
    )


def remove(kube: Kube, grant: Grant) -> list[str]:
    """Delete the credentials and bindings of `grant`; keep its namespace(s).

    Returns `Kind/name` of what was deleted.
    """
    deleted = []
    ns = grant.namespace
    targets = [
        (RBAC, "ClusterRoleBinding", grant.role_name, None),
        (RBAC, "ClusterRole", grant.role_name, None),
        (RBAC, "RoleBinding", grant.role_name, ns),
        (RBAC, "Role", grant.role_name, ns),
        ("v1", "Secret", grant.token_secret, ns),
        ("v1", "ServiceAccount", grant.service_account, ns),
    ]
    for namespace in grant.extra_namespaces:
        targets += [
            (RBAC, "RoleBinding", grant.role_name, namespace),
            (RBAC, "Role", grant.role_name, namespace),
        ]
    for api_version, kind, name, namespace in targets:
        if kube.delete(api_version, kind, name, namespace):
            deleted.append(f"{kind}/{name}")
    logger.info(
        "removed access of %s; namespace %s is kept with its data (delete it by hand if unwanted)",
        grant.consumer,
        ns,
    )
    return deleted


def kubeconfig(
    *,
    server: str,
    ca_pem: str,
    token: str,
    namespace: str,
    user: str,
    also: Sequence[str] = (),
) -> str:
    """A kubeconfig for a ServiceAccount token (the text is secret: Juju secrets only).

    `also`: the cluster's other API servers. A kubeconfig cluster names one server, so
    each gets a cluster and a context of its own, with the same user, namespace and CA
    (lib kubeconfig.py: what kubectl users do, `kubectl --context`, and what `Kube`
    fails over along when `server` cannot be reached).
    """
    ca = base64.b64encode(ca_pem.encode()).decode()
    others = [s for s in dict.fromkeys(also) if s != server]
    clusters = [("gpu-k8s", user, server)]
    clusters += [(f"gpu-k8s-{i}", f"{user}-{i}", s) for i, s in enumerate(others, start=2)]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": url, "certificate-authority-data": ca}}
            for name, _, url in clusters
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": context, "context": {"cluster": name, "user": user, "namespace": namespace}}
            for name, context, _ in clusters
        ],
        "current-context": user,
    }
    return yaml.safe_dump(config, sort_keys=False)
