"""The credentials the control plane hands out, stored in a fake API server for a charm's test.

A charm that is not the control plane reaches Kubernetes with the ServiceAccount token of a
grant the control plane made: a kube-api consumer (efs-storage, tensorflow) with the grant
built from the rules it asks for (its `literals.NAMESPACED_RULES` and `CLUSTER_RULES`), a
worker of an earlier revision with `rbac.worker_grant()` (workers of this revision act as
their kubelet; the control plane removes that grant once none is left).
`store_grant(api, grant, token)` stores exactly the objects the control plane's `rbac`
module applies for that grant (charms/kubernetes-control-plane/src/rbac.py `manifests`,
loaded with `charm_modules.load`), as its server-side apply
leaves them, and a consumer's namespace's object-count quota (team_quota.py, its
default counts), and makes `token` its credential: a TokenRequest token for a consumer's
grant (valid TOKEN_SECONDS from the server's clock, as the control plane asks), or, for the
workers' grant, the token Secret's as the token controller would fill it. The charm's test
then runs with that identity and nothing more: what the grant does not allow, the fake API
server refuses with RBAC's 403, and what the control plane's ValidatingAdmissionPolicies
refuse (a PersistentVolume that is not EFS), it refuses as their denial.
"""

from __future__ import annotations

import base64
import weakref
from collections.abc import Sequence
from typing import Any

from charm_modules import load

from charms.gpu_k8s.v0.kube_api import Rule
from fakes.kube_apiserver import FAKE_CA, FakeKubeApiServer, merge_patch

CONTROL_PLANE = "kubernetes-control-plane"
TOKEN_SECONDS = 48 * 3600  # the lifetime the control plane asks for (access.TOKEN_SECONDS)


def rbac() -> Any:
    """The control plane's `rbac` module."""
    return load(CONTROL_PLANE, "rbac")


def consumer_grant(
    app: str,
    namespace: str,
    rules: Sequence[dict],
    cluster_rules: Sequence[dict],
    *,
    provisioner: bool = False,
) -> Any:
    """The grant the control plane makes for a kube-api consumer asking for these rules.

    `provisioner`: the operator names the app in kube-api-storage-provisioners.
    """
    return rbac().consumer_grant(
        app,
        namespace,
        [Rule.model_validate(r) for r in rules],
        [Rule.model_validate(r) for r in cluster_rules],
        provisioner=provisioner,
    )


def worker_grant() -> Any:
    """The grant behind the kubeconfig workers of earlier revisions shared."""
    return rbac().worker_grant()


def _path(obj: dict) -> str:
    api_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    namespace = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{prefix}{namespace}/{kind.lower()}s/{meta['name']}"


def store_grant(api: FakeKubeApiServer, grant: Any, token: str) -> str:
    """Store the objects of `grant` with its token Secret holding `token`; return `token`."""
    for manifest in rbac().manifests(grant):
        path = _path(manifest)
        existing = api.get_object(path)
        obj = merge_patch(existing, manifest) if existing else manifest
        if manifest["kind"] == "Secret":
            data = {"token": token, "ca.crt": FAKE_CA, "namespace": grant.namespace}
            obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        api.put_object(path, obj)
    if grant.own_namespace:  # a consumer's: its object counts, as addons.apply_team_quotas
        quota = load(CONTROL_PLANE, "team_quota")
        manifest = quota.manifest(grant.namespace, quota.COUNTS)
        api.put_object(_path(manifest), manifest)
    if grant.token_request:
        api.auth.issue_token(grant.namespace, grant.service_account, token, TOKEN_SECONDS)
    provisioners = _PROVISIONERS.setdefault(api, set())
    # a provisioner's namespace is the one consumer_grant labels with its Pod Security level
    if grant.namespace_labels.get(grant.namespace) == rbac().PROVISIONER_POD_SECURITY:
        provisioners.add((grant.namespace, grant.service_account))
    store_admission_policies(api)
    return token


# The provisioners' accounts granted in each fake API server (the control plane's
# addons.apply_provisioner_claims_policy names those it granted).
_PROVISIONERS: weakref.WeakKeyDictionary[FakeKubeApiServer, set[tuple[str, str]]] = (
    weakref.WeakKeyDictionary()
)


# What each provisioner's account serves, as the control plane last admitted it
# (addons.apply_provisioner_claims_policy: the namespace granted to each consumer in its
# `storage-consumers` -> that consumer's access point, or ""); none admitted: serves nobody.
_SERVED: weakref.WeakKeyDictionary[FakeKubeApiServer, dict[tuple[str, str], dict[str, str]]] = (
    weakref.WeakKeyDictionary()
)


def admit_served(api: FakeKubeApiServer, account: tuple[str, str], served: dict[str, str]) -> None:
    """The control plane admits `served` (namespace -> access point) for `account`.

    As addons.apply_provisioner_claims_policy does, with the policy: `account` may list the
    pods of each namespace served (rbac.provisioner_pods_manifests), of no other.
    """
    before = _SERVED.setdefault(api, {}).get(account, {})
    for namespace in sorted(set(before) - set(served)):
        for manifest in rbac().provisioner_pods_manifests(account, namespace):
            api.delete_object(_path(manifest))
    for namespace in sorted(served):
        for manifest in rbac().provisioner_pods_manifests(account, namespace):
            api.put_object(_path(manifest), manifest)
    _SERVED[api][account] = dict(served)
    store_admission_policies(api)


def store_admission_policies(api: FakeKubeApiServer) -> None:
    """Store the ValidatingAdmissionPolicies the control plane applies on every cluster.

    (charms/kubernetes-control-plane/src/admission_policies.py, the provisioners' claims
    policy naming the provisioners granted here): a charm's test writes under them, as its
    application does on a real cluster.
    """
    plurals = {
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    }
    module = load(CONTROL_PLANE, "admission_policies")
    accounts = sorted(_PROVISIONERS.get(api, ()))
    served = _SERVED.get(api, {})
    # as addons applies it
    claims = module.claims_manifests(accounts, served) if accounts else []
    for manifest in [*module.manifests(), *claims]:
        path = f"/apis/{manifest['apiVersion']}/{plurals[manifest['kind']]}"
        api.put_object(f"{path}/{manifest['metadata']['name']}", manifest)


def token_secret_path(grant: Any) -> str:
    """Where the workers' grant's token Secret is stored (deleting it revokes the token)."""
    return f"/api/v1/namespaces/{grant.namespace}/secrets/{grant.token_secret}"


def service_account_path(grant: Any) -> str:
    """Where the grant's ServiceAccount is stored (deleting it revokes every token of it)."""
    return f"/api/v1/namespaces/{grant.namespace}/serviceaccounts/{grant.service_account}"
