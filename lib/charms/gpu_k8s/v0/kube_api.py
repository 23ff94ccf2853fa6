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
It also publishes `node-set`, a digest of the cluster's worker nodes: it changes when a
node joins or leaves, so a consumer that follows the nodes (efs-storage's mount target
per zone) gets `relation-changed` at once instead of waiting for update-status.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import Any

import ops
import pydantic

from charms.gpu_k8s.v0.databag import Databag, Endpoint, explain, write

LIBID = "26b1d42dbc2949cb8a83e29b11759d4f"
LIBAPI = 0
LIBPATCH = 6

logger = logging.getLogger(__name__)

FORBIDDEN_VERBS = frozenset({"escalate", "bind", "impersonate"})
RBAC_GROUP = "rbac.authorization.k8s.io"
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_WORD = re.compile(r"^[a-z0-9.\-/*]*$", re.IGNORECASE)
_PROTECTED_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease", "default"})


def secret_label(relation_id: int) -> str:
    """The label of the provider's kubeconfig secret for one relation."""
    return f"kube-api-{relation_id}"


class Rule(Databag):
    """One RBAC policy rule."""

    api_groups: list[str] = pydantic.Field(alias="api-groups", min_length=1)
    resources: list[str] = pydantic.Field(min_length=1)
    verbs: list[str] = pydantic.Field(min_length=1)

    @pydantic.field_validator("api_groups", "resources", "verbs")
    @classmethod
    def _words(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _WORD.match(value):
                raise ValueError(f"{value!r} is not an API group, resource or verb")
        return values

    def manifest(self) -> dict[str, list[str]]:
        """The rule as it appears in a Role or ClusterRole."""
        return {"apiGroups": self.api_groups, "resources": self.resources, "verbs": self.verbs}


def _json_list(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ValueError("must be a JSON list of rules") from None
    return value


class RequirerAppData(Databag):
    """What a consumer asks for."""

    namespace: str
    rules: list[Rule] = pydantic.Field(default_factory=list)
    cluster_rules: list[Rule] = pydantic.Field(default_factory=list, alias="cluster-rules")

    @pydantic.field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not _LABEL.match(value):
            raise ValueError("must be a DNS-1123 label (lowercase, digits, dashes, <= 63)")
        return value

    @pydantic.field_validator("rules", "cluster_rules", mode="before")
    @classmethod
    def _rules(cls, value: Any) -> Any:
        return _json_list(value)


class ProviderAppData(Databag):
    """What the control plane answers: the grant, or the reason for a refusal."""

    endpoint: str | None = None
    namespace: str | None = None
    service_account: str | None = pydantic.Field(default=None, alias="service-account")
    kubeconfig_secret_id: str | None = pydantic.Field(default=None, alias="kubeconfig-secret-id")
    node_set: str | None = pydantic.Field(default=None, alias="node-set")
    error: str | None = None


def check_policy(request: RequirerAppData) -> str | None:
    """Return why `request` breaks the least-privilege policy, or None when it is fine."""
    if request.namespace in _PROTECTED_NAMESPACES:
        return f"namespace {request.namespace} is reserved; ask for a namespace of your own"
    for scope, rules in (("rules", request.rules), ("cluster-rules", request.cluster_rules)):
        for rule in rules:
            for kind, values in (
                ("verbs", rule.verbs),
                ("resources", rule.resources),
                ("api-groups", rule.api_groups),
            ):
                if any("*" in v for v in values):
                    return f"{scope}: wildcard '*' in {kind} is not allowed; list them explicitly"
            bad = sorted(FORBIDDEN_VERBS.intersection(v.lower() for v in rule.verbs))
            if bad:
                return f"{scope}: verb {bad[0]} is not allowed"
            if RBAC_GROUP in rule.api_groups:
                return f"{scope}: {RBAC_GROUP} resources are not allowed"
            if scope == "cluster-rules" and any(
                r.split("/")[0] == "secrets" for r in rule.resources
            ):
                return "cluster-rules: secrets cannot be granted cluster-wide; use rules"
    return None


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

    def requests(self) -> list[Request]:
        """Every related application's request; those not made yet are left out.

        `error` is set when the request is malformed or breaks the policy.
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
            out.append(Request(relation, relation.app.name, request, check_policy(request)))
        return out

    def grant(
        self,
        relation: ops.Relation,
        endpoint: str,
        namespace: str,
        service_account: str,
        kubeconfig: str,
        node_set: str | None = None,
    ) -> None:
        """Hand `kubeconfig` to one relation in a secret granted to it only (leader only)."""
        content = {"kubeconfig": kubeconfig}
        label = secret_label(relation.id)
        try:
            secret = self.model.get_secret(label=label)
            if secret.peek_content() != content:
                secret.set_content(content)
        except ops.SecretNotFoundError:
            secret = self.charm.app.add_secret(
                content, label=label, description=f"kubeconfig for {relation.app.name}"
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

    def announce_nodes(self, relation: ops.Relation, node_set: str) -> None:
        """Tell a granted consumer the node set changed (written only when it did)."""
        data = relation.data[self.charm.app]
        if data.get("node-set") != node_set:
            data["node-set"] = node_set

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
    ):
        super().__init__(charm, relation_name)
        try:
            self.request = RequirerAppData.model_validate(
                {
                    "namespace": namespace,
                    "rules": rules or [],
                    "cluster-rules": cluster_rules or [],
                }
            )
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

    def problem(self) -> str | None:
        """Why no kubeconfig is available, or None when it is."""
        answer, problem = self._answer()
        if problem:
            return problem
        if self.kubeconfig() is None:
            return "waiting for access to the kubeconfig secret"
        return None
