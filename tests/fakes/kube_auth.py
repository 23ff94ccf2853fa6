"""Authentication and authorization of the fake Kubernetes API server, as kube-apiserver's.

`FakeKubeApiServer` (kube_apiserver.py) asks `ClusterAuth` who sent each request and whether
that identity may do it, before anything else answers. Every rule is read from upstream
Kubernetes (kubernetes/kubernetes at 1.36; `staging/src/k8s.io/X` is written `k8s.io/X`):

Authentication (kube-apiserver as kubeadm configures it):
- `Authorization: Bearer <token>` (k8s.io/apiserver pkg/authentication/request/bearertoken/
  bearertoken.go): a token no authenticator accepts is 401 `Unauthorized` (Status reason
  Unauthorized, message "Unauthorized": pkg/endpoints/filters/authentication.go); no header,
  an empty token or another scheme is the anonymous user `system:anonymous` in the group
  `system:unauthenticated` (pkg/authentication/request/anonymous; --anonymous-auth defaults
  to true and kubeadm leaves it); every authenticated user also gets `system:authenticated`
  (pkg/authentication/group/authenticated_group_adder.go).
- kubeadm's admin.conf: user `kubernetes-admin` in group `kubeadm:cluster-admins`, which the
  ClusterRoleBinding of that name binds to cluster-admin (kubernetes cmd/kubeadm/app/constants/
  constants.go `ClusterAdminsGroupAndClusterRoleBinding`, kubeadm 1.29+; phases/kubeconfig).
  Its client certificate is a token here (`add_token`) unless a test presents a real one.
- x509 client certificates (k8s.io/apiserver pkg/authentication/request/x509/x509.go), first in
  the chain (kubernetes pkg/kubeapiserver/authenticator/config.go): the TLS server requests a
  certificate without verifying it (pkg/server/secure_serving.go `tls.RequestClientCert` when
  a client CA is set, so "other auth types" still work); the authenticator then verifies it
  against the client CA (kubeadm's --client-ca-file is the cluster CA, the one that signed the
  serving certificate) with `DefaultVerifyOptions` (ExtKeyUsageClientAuth: a certificate whose
  extended key usages lack clientAuth is refused) at the current time (`clock`): not signed by
  that CA, expired or not yet valid is an error. `CommonNameUserConversion`: the subject's CN
  is the user, each O a group, `authentication.kubernetes.io/credential-id` is
  `X509SHA256=<hex sha256 of the DER>`; an empty CN is no answer (the other authenticators
  decide). The union of authenticators (pkg/authentication/request/union/union.go) lets a
  valid bearer token win over a certificate that failed; if none succeeds and one failed, the
  request is 401 and never anonymous (`union.NewFailOnError(authenticator, anonymous)`). A
  kubelet's certificate is `system:node:<name>` in `system:nodes` (pkg/auth/nodeidentifier/
  default.go); `node_token` stands in for it where a test needs no TLS.
- ServiceAccounts (k8s.io/apiserver pkg/authentication/serviceaccount/util.go; kubernetes
  pkg/serviceaccount/legacy.go, claims.go): user `system:serviceaccount:<ns>:<name>`, uid the
  ServiceAccount's, groups `system:serviceaccounts` and `system:serviceaccounts:<ns>`. A token
  of a `kubernetes.io/service-account-token` Secret holds while the Secret (not terminating)
  and its ServiceAccount exist; a TokenRequest token while its ServiceAccount (same uid)
  exists, until it expires (`clock`), and only if its audiences include the API server's
  (kubeadm's --service-account-issuer, which --api-audiences defaults to).
- bootstrap tokens (kube-apiserver --enable-bootstrap-token-auth, which kubeadm sets; kubernetes
  plugin/pkg/auth/authenticator/token/bootstrap/bootstrap.go AuthenticateToken): a bearer
  token `<id>.<secret>` is looked up as the Secret `kube-system/bootstrap-token-<id>`; it is
  accepted only while that Secret exists and is not being deleted, has the type
  `bootstrap.kubernetes.io/token`, the same `token-secret` and `token-id`, an `expiration`
  (RFC 3339) not past, and `usage-bootstrap-authentication: "true"`; the user is
  `system:bootstrap:<id>` in `system:bootstrappers` plus the Secret's `auth-extra-groups`.
  A deleted (`kubeadm token delete`) or expired token is 401.
- TokenRequest, `POST .../serviceaccounts/<name>/token` (pkg/registry/core/serviceaccount/
  storage/token.go; pkg/apis/authentication/validation ValidateTokenRequest; v1 defaults):
  `spec.expirationSeconds` defaults to 3600, is at least 600 ("may not specify a duration
  less than 10 minutes") and at most 2^32; audiences default to the API server's; the
  answer is the TokenRequest with `status.token` and `status.expirationTimestamp`, 201.
- a token bound to a Pod (`spec.boundObjectRef` kind Pod, what kubelet asks for a pod's
  projected token; pkg/registry/core/serviceaccount/storage/token.go): the pod must exist
  (else 404), run as that ServiceAccount (else 400 `cannot bind token for serviceaccount
  "<sa>" to pod running with different serviceaccount name.`) and have the reference's uid
  when one is given (else 409 `the UID in the bound object reference (<uid>) does not match
  the UID in record. ...`); the pod's node (`spec.nodeName`) goes into the token with the
  Node's uid when that Node exists (ServiceAccountTokenPodNodeInfo, KEP-4193: alpha 1.29,
  beta 1.30, GA and locked on in 1.32, pkg/features/versioned_kube_features.go). The
  authenticated user then carries the extras `authentication.kubernetes.io/pod-name`,
  `pod-uid`, `node-name` and `node-uid` (when known) and `credential-id` `JTI=<jti>`
  (k8s.io/apiserver pkg/authentication/serviceaccount/util.go, kubernetes
  pkg/serviceaccount/claims.go); the token is refused (401) once its pod is gone or was
  replaced (another uid), as the claims validator does.

Authorization (kube-apiserver --authorization-mode=Node,RBAC as kubeadm sets it, behind the
always-first system:masters authorizer: kubernetes pkg/kubeapiserver/authorizer/config.go):
- the request's attributes (k8s.io/apiserver pkg/endpoints/request/requestinfo.go): paths
  outside `/api/<v>/...` and `/apis/<g>/<v>/...` are non-resource requests with the lower-case
  HTTP method as verb; resource verbs are get/list/watch (GET with a name, without, with
  `watch=true`), create (POST), update (PUT), patch (PATCH, server-side apply included) and
  delete/deletecollection (DELETE with/without a name); a list's `metadata.name` field
  selector names the object; `/namespaces/<ns>` is the namespace of the namespace itself.
- the union (k8s.io/apiserver pkg/authorization/union/union.go): the first Allow wins; when
  none allows, the reasons they gave are joined with newlines.
- RBAC (plugin/pkg/auth/authorizer/rbac/rbac.go; pkg/registry/rbac/validation/rule.go
  VisitRulesFor, appliesTo; pkg/apis/rbac/v1/evaluation_helpers.go): ClusterRoleBindings,
  then the RoleBindings of the request's namespace; a subject is a User (by name), a Group
  or a ServiceAccount (its namespace defaulting to the binding's); a rule allows when its
  verbs (or `*`), apiGroups (or `*`), resources (`*`, `<res>/<sub>` or `*/<sub>`) and
  resourceNames (none: all) match, or for non-resource requests its nonResourceURLs (exact,
  `*`, or a prefix ending in `*`). A binding whose role is missing adds the reason
  `RBAC: <role kind>.rbac.authorization.k8s.io "<name>" not found`. A ClusterRole with an
  `aggregationRule` holds the rules of the ClusterRoles its selectors match
  (pkg/controller/clusterroleaggregation), resolved when asked.
- Node (plugin/pkg/auth/authorizer/node/node_authorizer.go, graph_populator.go; the
  AuthorizeNodeWithSelectors gate is GA and locked on since 1.34): for `system:node:<n>` in
  `system:nodes`, Nodes: get/list/watch only its own ("node '<n>' cannot read all nodes, only
  its own Node object"), create/update/patch and status update/patch (NodeRestriction
  narrows them); pods: get one bound to it, list/watch with `spec.nodeName=<n>` ("can only
  list/watch pods with spec.nodeName field selector"), create/delete, status update/patch,
  eviction create; secrets and configmaps (get/list/watch one by name), PVCs and PVs (get)
  only when a pod bound to the node uses them ("no relationship found between node '<n>'
  and this object"); serviceaccounts/token create for a pod's ServiceAccount; leases in
  kube-node-lease named after the node; the rest by the static node rules
  (bootstrappolicy NodeRules). It has no opinion on anyone else.
- a refusal (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/errors.go Forbidden,
  forbiddenMessage; k8s.io/apimachinery pkg/api/errors NewForbidden) is 403 `Forbidden`:
  `<resource>[.<group>] ["<name>"] is forbidden: User "<u>" cannot <verb> resource
  "<res>[/<sub>]" in API group "<g>" (in the namespace "<ns>"|at the cluster scope)`, or
  `forbidden: User "<u>" cannot <verb> path "<path>"`, with `: <reason>` when there is one;
  details name the group, resource (as kind) and name.
- server-side apply that creates also needs `create` (k8s.io/apiserver pkg/endpoints/
  handlers/patch.go createAuthorizerAttributes, update.go withAuthorization): refused, it is
  `<resource> "<name>" is forbidden: <reason>`.
- escalation prevention (pkg/registry/rbac/{role,clusterrole,rolebinding,clusterrolebinding}/
  policybased/storage.go, pkg/registry/rbac/escalation_check.go, validation/rule.go
  ConfirmNoEscalation, validation/policy_compact.go, k8s.io/component-helpers auth/rbac/
  validation/policy_comparator.go Covers): a Role/ClusterRole written by someone outside
  system:masters without `escalate` on it (checked with the URL's name: none on create)
  must hold every rule it grants in that namespace, else 403 `user "<u>" (groups=[...]) is
  attempting to grant RBAC permissions not currently held:` and the missing rules
  (`{APIGroups:[...], Resources:[...], Verbs:[...]}`) a line each; setting
  an aggregationRule needs `*` on everything ("must have cluster-admin privileges to use the
  aggregationRule"); a (Cluster)RoleBinding needs `bind` on the role it references (in the
  binding's namespace), or its author must hold the role's rules; writes that only change
  ownerReferences or finalizers pass.
- reviews: SelfSubjectAccessReview, SubjectAccessReview (pkg/registry/authorization/*,
  pkg/apis/authorization/validation) answer `status.allowed`/`reason`; SelfSubjectReview
  (pkg/registry/authentication/selfsubjectreview) answers `status.userInfo`.
- the bootstrap policy the charms and tests rely on (plugin/pkg/auth/authorizer/rbac/
  bootstrappolicy/policy.go; the "Default roles and role bindings" table of the RBAC docs,
  kubernetes/website content/en/docs/reference/access-authn-authz/rbac.md): cluster-admin
  (bound to system:masters), system:discovery and system:basic-user (system:authenticated),
  system:public-info-viewer (system:authenticated and system:unauthenticated), and kubeadm's
  `kubeadm:cluster-admins` binding.

Not modelled: intermediate certificates a client sends (the leaf must be signed by the CA
itself), the UID a certificate may carry (AllowParsingUserUIDFromCertAuth), impersonation,
the legacy-token tracking labels, bound object references other than Pods, the other
bootstrap roles (admin, edit, view, controllers').
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import secrets
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_PREFIX = f"/apis/{RBAC_GROUP}/v1"
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"
# k8s.io/cluster-bootstrap token/api/types.go: SecretTypeBootstrapToken, BootstrapTokenPattern
BOOTSTRAP_TOKEN_TYPE = "bootstrap.kubernetes.io/token"
BOOTSTRAP_TOKEN_PATTERN = re.compile(r"([a-z0-9]{6})\.([a-z0-9]{16})")
# kubeadm's --service-account-issuer; --api-audiences defaults to it
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
NODES = "system:nodes"
NODE_PREFIX = "system:node:"
SA_PREFIX = "system:serviceaccount:"
# The extras of a TokenRequest token's user (k8s.io/apiserver pkg/authentication/
# serviceaccount/util.go: CredentialIDKey, PodNameKey, PodUIDKey, NodeNameKey, NodeUIDKey).
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
POD_UID_KEY = "authentication.kubernetes.io/pod-uid"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
NODE_UID_KEY = "authentication.kubernetes.io/node-uid"
CLUSTER_ADMINS = "kubeadm:cluster-admins"
NODE_LEASE_NAMESPACE = "kube-node-lease"


class AuthError(Exception):
    """A refusal answered as a `Status` body (401, 403, 404, 405, 422)."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict:
        """The `Status` object the real API server would send."""
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        body.update(message=self.message, reason=self.reason, code=self.code)
        if not self.reason:  # metav1.Status `reason,omitempty` (StatusReasonUnknown is "")
            del body["reason"]
        if self.details is not None:
            body["details"] = self.details
        return body


UNAUTHORIZED = AuthError(401, "Unauthorized", "Unauthorized")
# user.CredentialIDKey (k8s.io/apiserver pkg/authentication/user/user.go)
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"


class _CertificateRefusedError(Exception):
    """x509.go's Verify failed: the request is 401 unless another authenticator succeeds."""


def x509_user(der: bytes, client_ca_pem: str, now: float) -> UserInfo | None:
    """The user a client certificate names, as kube-apiserver's x509 authenticator finds it.

    None when its CN is empty (CommonNameUserConversion has no answer).

    Raises:
        _CertificateRefusedError: not signed by the client CA, outside its validity at `now`, or
            its extended key usages lack clientAuth (crypto/x509 Verify with KeyUsages
            [ExtKeyUsageClientAuth]).
    """
    import hashlib

    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    try:
        cert = x509.load_der_x509_certificate(der)
        ca = x509.load_pem_x509_certificate(client_ca_pem.encode())
        cert.verify_directly_issued_by(ca)
    except Exception as e:  # ValueError, TypeError, InvalidSignature: "unknown authority"
        reason = f"x509: certificate signed by unknown authority ({e})"
        raise _CertificateRefusedError(reason) from None
    moment = datetime.fromtimestamp(now, timezone.utc)
    for one in (cert, ca):
        if not one.not_valid_before_utc <= moment <= one.not_valid_after_utc:
            raise _CertificateRefusedError("x509: certificate has expired or is not yet valid")
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usages = None  # no extension: any usage (crypto/x509 checkChainForKeyUsage)
    if usages is not None and not {
        ExtendedKeyUsageOID.CLIENT_AUTH,
        ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,
    } & set(usages):
        raise _CertificateRefusedError("x509: certificate specifies an incompatible key usage")
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    common_name = str(names[0].value) if names else ""
    if not common_name:
        return None
    groups = tuple(
        str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    )
    credential = "X509SHA256=" + hashlib.sha256(der).hexdigest()
    return UserInfo(common_name, groups, extra={CREDENTIAL_ID: (credential,)})


@dataclasses.dataclass(frozen=True)
class UserInfo:
    """Who sent a request, as authenticators hand it on (k8s.io/apiserver user.Info)."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def authenticated(self) -> UserInfo:
        """With `system:authenticated` added, as every authenticated request has it."""
        if AUTHENTICATED in self.groups:
            return self
        return dataclasses.replace(self, groups=(*self.groups, AUTHENTICATED))

    def info(self) -> dict:
        """The `UserInfo` of authentication.k8s.io/v1 (SelfSubjectReview)."""
        out: dict = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


ANONYMOUS = UserInfo("system:anonymous", (UNAUTHENTICATED,))
KUBEADM_ADMIN = UserInfo("kubernetes-admin", (CLUSTER_ADMINS,))


def node_user(name: str) -> UserInfo:
    """A kubelet's identity (its client certificate's CN and O)."""
    return UserInfo(NODE_PREFIX + name, (NODES,))


def service_account_user(namespace: str, name: str, uid: str = "") -> UserInfo:
    """A ServiceAccount's identity, groups in the order the authenticator gives them."""
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")
    return UserInfo(f"{SA_PREFIX}{namespace}:{name}", groups, uid)


@dataclasses.dataclass
class Attributes:
    """What the authorizers decide on (k8s.io/apiserver authorizer.AttributesRecord)."""

    user: UserInfo
    verb: str
    resource_request: bool
    path: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    field_selector: str = ""


def _field_requirements(selector: str) -> dict[str, str]:
    """The `field=value` / `field==value` terms of a field selector (exact matches)."""
    out = {}
    for term in selector.split(","):
        if "!=" in term:
            continue
        key, sep, value = term.partition("=")
        if sep:
            out[key.strip()] = value.lstrip("=").strip()
    return out


def request_attributes(user: UserInfo, method: str, path: str, query: Mapping) -> Attributes:
    """The attributes kube-apiserver derives from a request (RequestInfoFactory)."""
    parts = [p for p in path.strip("/").split("/") if p]
    attrs = Attributes(user, method.lower(), False, path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return attrs
    rest = parts[1:]
    if parts[0] == "apis":
        if len(rest) < 3:
            return attrs
        attrs.api_group, rest = rest[0], rest[1:]
    attrs.resource_request, attrs.api_version, rest = True, rest[0], rest[1:]
    attrs.verb = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update"}.get(
        method, {"PATCH": "patch", "DELETE": "delete"}.get(method, "")
    )
    if rest[0] in ("watch", "proxy") and len(rest) > 1:
        attrs.verb, rest = rest[0], rest[1:]
    if rest[0] == "namespaces" and len(rest) > 1:
        attrs.namespace = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    _resource_name_sub(attrs, rest)
    _collection_verb(attrs, query)
    return attrs


def _resource_name_sub(attrs: Attributes, rest: list[str]) -> None:
    if len(rest) >= 3 and attrs.verb != "proxy":
        attrs.subresource = rest[2]
    if len(rest) >= 2:
        attrs.name = rest[1]
    attrs.resource = rest[0]


def _collection_verb(attrs: Attributes, query: Mapping) -> None:
    """GET without a name is list or watch; DELETE without one is deletecollection."""
    if not attrs.name and attrs.verb == "get":
        watch = str(query.get("watch", "")).lower()
        attrs.verb = "watch" if watch not in ("", "false", "0") else "list"
        attrs.field_selector = str(query.get("fieldSelector") or "")
        name = _field_requirements(attrs.field_selector).get("metadata.name", "")
        if name and "/" not in name and name not in (".", ".."):
            attrs.name = name
    if not attrs.name and attrs.verb == "delete":
        attrs.verb = "deletecollection"


# ---------------------------------------------------------------- refusals


# One encoder for every quote: `json.dumps` with an option builds a new JSONEncoder per call.
_quote = json.JSONEncoder(ensure_ascii=False).encode


def _go_quote(value: str) -> str:
    return _quote(value)


def _go_list(values: Any) -> str:
    """A []string as Go's %q prints it: ["a" "b"]."""
    return "[" + " ".join(_go_quote(v) for v in values) + "]"


def forbidden_message(attrs: Attributes) -> str:
    """responsewriters.forbiddenMessage (HTML-unsafe characters escaped as it does)."""
    user = _go_quote(attrs.user.name)
    if not attrs.resource_request:
        text = f"User {user} cannot {attrs.verb} path {_go_quote(attrs.path)}"
    else:
        resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
        scope = (
            f"in the namespace {_go_quote(attrs.namespace)}"
            if attrs.namespace
            else "at the cluster scope"
        )
        text = (
            f"User {user} cannot {attrs.verb} resource {_go_quote(resource)} in API group "
            f"{_go_quote(attrs.api_group)} {scope}"
        )
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def forbidden(group: str, resource: str, name: str, error: str) -> AuthError:
    """apierrors.NewForbidden(schema.GroupResource{group, resource}, name, error)."""
    qualified = f"{resource}.{group}" if group else resource
    if not resource and not group:
        message = f"forbidden: {error}"
    elif not name:
        message = f"{qualified} is forbidden: {error}"
    else:
        message = f"{qualified} {_go_quote(name)} is forbidden: {error}"
    details = {k: v for k, v in (("name", name), ("group", group), ("kind", resource)) if v}
    return AuthError(403, "Forbidden", message, details)


def refusal(attrs: Attributes, reason: str) -> AuthError:
    """The 403 the authorization filter answers (responsewriters.Forbidden)."""
    text = forbidden_message(attrs) + (f": {reason}" if reason else "")
    if not attrs.resource_request:
        return forbidden("", "", "", text)
    return forbidden(attrs.api_group, attrs.resource, attrs.name, text)


def invalid(group_kind: str, name: str, field: str, value: str, detail: str) -> AuthError:
    """apierrors.NewInvalid with one field.Invalid error."""
    kind, _, group = group_kind.partition(".")
    cause = {"reason": "FieldValueInvalid", "message": f"Invalid value: {value}: {detail}"}
    cause["field"] = field
    message = (
        f"{group_kind} {_go_quote(name)} is invalid: {field}: Invalid value: {value}: {detail}"
    )
    details = {"name": name, "group": group, "kind": kind, "causes": [cause]}
    return AuthError(422, "Invalid", message, {k: v for k, v in details.items() if v})


# ---------------------------------------------------------------- RBAC rules


def _matches(values: list, wanted: str, star: str = "*") -> bool:
    return star in values or wanted in values


def resource_matches(rule: Mapping, resource: str, subresource: str) -> bool:
    """ResourceMatches: `*`, the combined `res/sub`, or `*/sub`."""
    combined = f"{resource}/{subresource}" if subresource else resource
    for allowed in rule.get("resources") or []:
        if allowed in ("*", combined):
            return True
        if subresource and allowed == f"*/{subresource}":
            return True
    return False


def url_matches(rule: Mapping, path: str) -> bool:
    """NonResourceURLMatches: `*`, the exact path, or a prefix ending in `*`."""
    for allowed in rule.get("nonResourceURLs") or []:
        if allowed in ("*", path):
            return True
        if allowed.endswith("*") and path.startswith(allowed.rstrip("*")):
            return True
    return False


def rule_allows(attrs: Attributes, rule: Mapping) -> bool:
    """RuleAllows (plugin/pkg/auth/authorizer/rbac/rbac.go)."""
    if not _matches(rule.get("verbs") or [], attrs.verb):
        return False
    if not attrs.resource_request:
        return url_matches(rule, attrs.path)
    names = rule.get("resourceNames") or []
    return (
        _matches(rule.get("apiGroups") or [], attrs.api_group)
        and resource_matches(rule, attrs.resource, attrs.subresource)
        and (not names or attrs.name in names)
    )


def _label_selector_matches(selector: Mapping, labels: Mapping) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, values = expr.get("key"), expr.get("values") or []
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,  # codespell:ignore notin
            "Exists": present,
            "DoesNotExist": not present,
        }.get(expr.get("operator"), False)
        if not ok:
            return False
    return True


def _describe_subject(subject: Mapping, namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        ns = subject.get("namespace") or namespace
        return f"ServiceAccount {_go_quote(subject.get('name', '') + '/' + ns)}"
    return f"{subject.get('kind')} {_go_quote(subject.get('name', ''))}"


# ---------------------------------------------------------------- escalation checks


def _breakdown(rule: Mapping) -> list[dict]:
    """BreakdownRule: one verb, one resource (or URL) and at most one name per rule."""
    out = []
    names = rule.get("resourceNames") or []
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in rule.get("verbs") or []:
                base = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                out += [{**base, "resourceNames": [n]} for n in names] if names else [base]
    for url in rule.get("nonResourceURLs") or []:
        for verb in rule.get("verbs") or []:
            out.append({"nonResourceURLs": [url], "verbs": [verb]})
    return out


def _has_all(owned: list, wanted: list) -> bool:
    return set(wanted) <= set(owned)


def _resources_cover(owned: list, wanted: list) -> bool:
    if "*" in owned or _has_all(owned, wanted):
        return True
    for path in wanted:
        if path in owned:
            continue
        if "/" not in path or "*/" + path.split("/", 1)[1] not in owned:
            return False
    return True


def _url_covers(owner: str, path: str) -> bool:
    return owner == path or (owner.endswith("*") and path.startswith(owner.rstrip("*")))


def _rule_covers(owner: Mapping, sub: Mapping) -> bool:
    """Whether `owner` covers `sub` (ruleCovers, auth/rbac/validation/policy_comparator.go)."""
    verbs, groups = owner.get("verbs") or [], owner.get("apiGroups") or []
    owner_names, sub_names = owner.get("resourceNames") or [], sub.get("resourceNames") or []
    names_ok = not owner_names or (bool(sub_names) and _has_all(owner_names, sub_names))
    urls_ok = all(
        any(_url_covers(o, p) for o in owner.get("nonResourceURLs") or [])
        for p in sub.get("nonResourceURLs") or []
    )
    return (
        ("*" in verbs or _has_all(verbs, sub.get("verbs") or []))
        and ("*" in groups or _has_all(groups, sub.get("apiGroups") or []))
        and _resources_cover(owner.get("resources") or [], sub.get("resources") or [])
        and names_ok
        and urls_ok
    )


def uncovered(owner_rules: list[Mapping], rules: list[Mapping]) -> list[dict]:
    """Covers: the broken-down rules no owner rule covers."""
    return [
        sub
        for rule in rules
        for sub in _breakdown(rule)
        if not any(_rule_covers(owner, sub) for owner in owner_rules)
    ]


def _compact(rules: list[dict]) -> list[dict]:
    """CompactRules: simple rules of one group and resource merged across verbs."""
    simple: dict[tuple[str, str], dict] = {}
    out = []
    for rule in rules:
        if set(rule) == {"apiGroups", "resources", "verbs"}:
            key = (rule["apiGroups"][0], rule["resources"][0])
            if key in simple:
                simple[key]["verbs"] = simple[key]["verbs"] + rule["verbs"]
            else:
                simple[key] = {k: list(v) for k, v in rule.items()}
        else:
            out.append(rule)
    return out + list(simple.values())


def compact_string(rule: Mapping) -> str:
    """CompactString (pkg/apis/rbac/v1/evaluation_helpers.go)."""
    fields = ("apiGroups", "resources", "nonResourceURLs", "resourceNames", "verbs")
    labels = ("APIGroups", "Resources", "NonResourceURLs", "ResourceNames", "Verbs")
    parts = [f"{label}:{_go_list(rule[f])}" for f, label in zip(fields, labels) if rule.get(f)]
    return "{" + ", ".join(parts) + "}"


FULL_AUTHORITY = [
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
    {"nonResourceURLs": ["*"], "verbs": ["*"]},
]
GC_FIELDS = ("ownerReferences", "finalizers")


def _only_gc_fields_change(new: Mapping, old: Mapping) -> bool:
    """IsOnlyMutatingGCFields: equal once ownerReferences and finalizers are set aside."""

    def strip(obj: Mapping) -> dict:
        meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in GC_FIELDS}
        meta.pop("managedFields", None)
        meta.pop("resourceVersion", None)
        return {**obj, "metadata": meta}

    return strip(new) == strip(old)


# ---------------------------------------------------------------- the Node authorizer's graph


def _pod_spec_refs(spec: Mapping) -> dict[str, set[str]]:
    """Secrets, ConfigMaps, PVCs and the ServiceAccount a pod uses (graph_populator.go)."""
    refs: dict[str, set[str]] = {"secrets": set(), "configmaps": set(), "pvcs": set()}
    refs["serviceaccounts"] = {spec.get("serviceAccountName") or "default"}
    refs["secrets"] |= {s.get("name", "") for s in spec.get("imagePullSecrets") or []}
    for volume in spec.get("volumes") or []:
        refs["secrets"].add((volume.get("secret") or {}).get("secretName", ""))
        refs["configmaps"].add((volume.get("configMap") or {}).get("name", ""))
        refs["pvcs"].add((volume.get("persistentVolumeClaim") or {}).get("claimName", ""))
        refs["secrets"].add(
            ((volume.get("csi") or {}).get("nodePublishSecretRef") or {}).get("name", "")
        )
        for source in (volume.get("projected") or {}).get("sources") or []:
            refs["secrets"].add((source.get("secret") or {}).get("name", ""))
            refs["configmaps"].add((source.get("configMap") or {}).get("name", ""))
    kinds = ("containers", "initContainers", "ephemeralContainers")
    for container in [c for kind in kinds for c in spec.get(kind) or []]:
        for env in container.get("env") or []:
            source = env.get("valueFrom") or {}
            refs["secrets"].add((source.get("secretKeyRef") or {}).get("name", ""))
            refs["configmaps"].add((source.get("configMapKeyRef") or {}).get("name", ""))
        for env in container.get("envFrom") or []:
            refs["secrets"].add((env.get("secretRef") or {}).get("name", ""))
            refs["configmaps"].add((env.get("configMapRef") or {}).get("name", ""))
    return {k: v - {""} for k, v in refs.items()}


_PV_SECRET_REFS = (
    "nodePublishSecretRef",
    "nodeStageSecretRef",
    "controllerPublishSecretRef",
    "controllerExpandSecretRef",
    "nodeExpandSecretRef",
)


# ---------------------------------------------------------------- bootstrap policy


def _meta(name: str, **labels: str) -> dict:
    labels = {"kubernetes.io/bootstrapping": "rbac-defaults", **labels}
    annotations = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
    return {"name": name, "labels": labels, "annotations": annotations}


def _binding(name: str, role: str, *groups: str) -> tuple[str, dict]:
    subjects = [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": g} for g in groups]
    obj = {
        "metadata": _meta(name),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }
    return f"{RBAC_PREFIX}/clusterrolebindings/{name}", obj


def bootstrap_policy() -> list[tuple[str, dict]]:
    """The default ClusterRoles/bindings kube-apiserver keeps, and kubeadm's admin binding."""
    discovery = [
        "/livez", "/readyz", "/healthz", "/version", "/version/",
        "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*",
    ]  # fmt: skip
    roles = {
        "cluster-admin": FULL_AUTHORITY,
        "system:discovery": [{"nonResourceURLs": discovery, "verbs": ["get"]}],
        "system:basic-user": [
            {
                "apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                "verbs": ["create"],
            },
            {
                "apiGroups": ["authentication.k8s.io"],
                "resources": ["selfsubjectreviews"],
                "verbs": ["create"],
            },
        ],
        "system:public-info-viewer": [
            {
                "nonResourceURLs": ["/livez", "/readyz", "/healthz", "/version", "/version/"],
                "verbs": ["get"],
            }
        ],
    }
    out = [
        (f"{RBAC_PREFIX}/clusterroles/{name}", {"metadata": _meta(name), "rules": rules})
        for name, rules in roles.items()
    ]
    out += [
        _binding("cluster-admin", "cluster-admin", MASTERS),
        _binding("system:discovery", "system:discovery", AUTHENTICATED),
        _binding("system:basic-user", "system:basic-user", AUTHENTICATED),
        _binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            AUTHENTICATED,
            UNAUTHENTICATED,
        ),
    ]
    path, kubeadm = _binding(CLUSTER_ADMINS, "cluster-admin", CLUSTER_ADMINS)
    kubeadm["metadata"] = {"name": CLUSTER_ADMINS}  # kubeadm's own, no bootstrapping label
    return [*out, (path, kubeadm)]


# Static node rules (bootstrappolicy NodeRules) for what the Node authorizer does not
# subdivide: the resources subdivided above are decided before these are consulted.
NODE_RULES: list[dict] = [
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews", "localsubjectaccessreviews"],
        "verbs": ["create"],
    },
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["", "events.k8s.io"],
        "resources": ["events"],
        "verbs": ["create", "patch", "update"],
    },
    {"apiGroups": [""], "resources": ["endpoints"], "verbs": ["get"]},
    {
        "apiGroups": ["certificates.k8s.io"],
        "resources": ["certificatesigningrequests"],
        "verbs": ["create", "get", "list", "watch"],
    },
    {
        "apiGroups": ["storage.k8s.io"],
        "resources": ["csidrivers"],
        "verbs": ["get", "watch", "list"],
    },
    {
        "apiGroups": ["node.k8s.io"],
        "resources": ["runtimeclasses"],
        "verbs": ["get", "list", "watch"],
    },
]


# ---------------------------------------------------------------- the cluster's auth


def _b64decode(value: str) -> str:
    try:
        return base64.b64decode(value).decode()
    except (ValueError, UnicodeDecodeError):
        return ""


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _b64url(data: dict) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclasses.dataclass(frozen=True)
class _Issued:
    namespace: str
    name: str
    uid: str
    expires: float
    audiences: tuple[str, ...]
    # the pod a token is bound to: (name, uid); and the extras its user carries
    pod: tuple[str, str] | None = None
    extra: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)


class ClusterAuth:
    """Who a request comes from and what it may do, read from the server's own store.

    `store` is the server's dict of objects by path (read, never written here); `clock`
    gives the time in seconds since the epoch (TokenRequest expiry); `version` changes
    whenever the store does (the bindings found are reused until then).
    """

    def __init__(
        self,
        store: Mapping[str, dict],
        clock: Callable[[], float],
        version: Callable[[], object] = lambda: None,
    ):
        self._store = store
        self._clock = clock
        self._version = version
        self._bindings: tuple[object, dict[str, list[dict]]] | None = None
        # (user, groups, namespace) -> the bindings that apply, for the store version
        # `_applicable_at` (see `_applicable`)
        self._applicable_at: object = None
        self._applicable_kept: dict[tuple, list[tuple[dict, Mapping, str, list[dict], str]]] = {}
        self._static: dict[str, UserInfo] = {}
        self._issued: dict[str, _Issued] = {}
        self._secret_tokens: dict[str, str] = {}  # token -> Secret path (a cache)
        # --client-ca-file (PEM): set, client certificates are verified against it
        self.client_ca_pem = ""

    # -- authentication

    def add_token(self, token: str, user: UserInfo) -> None:
        """Accept `token` as `user` (kubeadm's admin.conf, a kubelet's certificate, a test's)."""
        self._static[token] = user

    def authenticate(self, authorization: str, peer_certificate: bytes | None = None) -> UserInfo:
        """The user a request's client certificate (DER) or `Authorization` header names.

        401 `AuthError` for a certificate the client CA does not vouch for (unless a valid
        token follows) or a token none accepts; anonymous only when nothing failed.
        """
        failed = False
        if peer_certificate and self.client_ca_pem:
            try:
                user = x509_user(peer_certificate, self.client_ca_pem, self._clock())
            except _CertificateRefusedError:
                user, failed = None, True
            if user is not None:
                return user.authenticated()
        parts = authorization.strip().split(" ", 2)
        if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
            if failed:
                raise UNAUTHORIZED
            return ANONYMOUS
        token = parts[1]
        user = (
            self._static.get(token)
            or self._issued_user(token)
            or self._secret_user(token)
            or self._bootstrap_user(token)
        )
        if user is None:
            raise UNAUTHORIZED
        return user.authenticated()

    def _service_account(self, namespace: str, name: str) -> dict | None:
        return self._store.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")

    def _issued_user(self, token: str) -> UserInfo | None:
        issued = self._issued.get(token)
        if issued is None or self._clock() >= issued.expires:
            return None
        if API_AUDIENCE not in issued.audiences:
            return None
        account = self._service_account(issued.namespace, issued.name)
        if account is None or account["metadata"].get("uid") != issued.uid:
            return None
        if issued.pod is not None:  # a bound token dies with its pod (claims.go Validate)
            pod = self._store.get(f"/api/v1/namespaces/{issued.namespace}/pods/{issued.pod[0]}")
            if pod is None or pod["metadata"].get("uid") != issued.pod[1]:
                return None
        user = service_account_user(issued.namespace, issued.name, issued.uid)
        return dataclasses.replace(user, extra=issued.extra)

    def _bound_pod(self, namespace: str, name: str, ref: Mapping) -> tuple[dict, dict | None]:
        """The Pod a TokenRequest binds to and its Node, or the error token.go answers."""
        if ref.get("kind") != "Pod" or ref.get("apiVersion", "v1") != "v1":
            kind = f"{ref.get('apiVersion', '')}, Kind={ref.get('kind', '')}"
            raise AuthError(400, "BadRequest", f"cannot bind token to object of type {kind}")
        pod_name = ref.get("name", "")
        pod = self._store.get(f"/api/v1/namespaces/{namespace}/pods/{pod_name}")
        if pod is None:
            details = {"name": pod_name, "kind": "pods"}
            raise AuthError(404, "NotFound", f'pods "{pod_name}" not found', details)
        if (pod.get("spec") or {}).get("serviceAccountName", "default") != name:
            raise AuthError(
                400,
                "BadRequest",
                f'cannot bind token for serviceaccount "{name}" to pod running with '
                "different serviceaccount name.",
            )
        if ref.get("uid") and ref["uid"] != pod["metadata"].get("uid"):
            raise AuthError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on Pod "{pod_name}": the UID in the bound object'
                f" reference ({ref['uid']}) does not match the UID in record. The object might"
                " have been deleted and then recreated",
                {"name": pod_name, "kind": "Pod"},
            )
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        node = self._store.get(f"/api/v1/nodes/{node_name}") if node_name else None
        return pod, (
            {"name": node_name, **(node or {}).get("metadata", {})} if node_name else None
        )

    def _secret_user(self, token: str) -> UserInfo | None:
        path = self._secret_tokens.get(token)
        secret = self._store.get(path) if path else None
        if secret is None or _b64decode((secret.get("data") or {}).get("token", "")) != token:
            path, secret = self._find_secret(token)
        if secret is None or path is None or secret["metadata"].get("deletionTimestamp"):
            return None
        namespace = secret["metadata"].get("namespace", "")
        name = (secret["metadata"].get("annotations") or {}).get(SA_NAME_ANNOTATION, "")
        account = self._service_account(namespace, name)
        if account is None:
            return None
        return service_account_user(namespace, name, account["metadata"].get("uid", ""))

    def _bootstrap_user(self, token: str) -> UserInfo | None:
        """The bootstrap token authenticator's user for `token`, or None (bootstrap.go)."""
        match = BOOTSTRAP_TOKEN_PATTERN.fullmatch(token)
        if match is None:
            return None
        token_id, token_secret = match.groups()
        path = f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{token_id}"
        secret = self._store.get(path)
        if secret is None or secret["metadata"].get("deletionTimestamp"):
            return None
        data = {k: _b64decode(v) for k, v in (secret.get("data") or {}).items()}
        if secret.get("type") != BOOTSTRAP_TOKEN_TYPE or not data:
            return None
        if data.get("token-secret") != token_secret or data.get("token-id") != token_id:
            return None
        expiration = data.get("expiration", "")
        if expiration and datetime.fromisoformat(expiration).timestamp() <= self._clock():
            return None
        if data.get("usage-bootstrap-authentication") != "true":
            return None
        extra = [g.strip() for g in data.get("auth-extra-groups", "").split(",") if g.strip()]
        return UserInfo(f"system:bootstrap:{token_id}", ("system:bootstrappers", *extra))

    def _find_secret(self, token: str) -> tuple[str | None, dict | None]:
        for path, obj in self._store.items():
            if obj.get("kind") != "Secret" or obj.get("type") != SA_TOKEN_TYPE:
                continue
            if _b64decode((obj.get("data") or {}).get("token", "")) == token:
                self._secret_tokens[token] = path
                return path, obj
        return None, None

    def token_request(self, namespace: str, name: str, request: Mapping) -> dict:
        """Issue a token for the ServiceAccount `namespace/name` (which must exist)."""
        account = self._service_account(namespace, name)
        if account is None:
            raise AuthError(
                404,
                "NotFound",
                f'serviceaccounts "{name}" not found',
                {"name": name, "kind": "serviceaccounts"},
            )
        spec = dict(request.get("spec") or {})
        seconds = spec.get("expirationSeconds")
        seconds = 3600 if seconds is None else int(seconds)
        if seconds < 600 or seconds > 1 << 32:
            detail = (
                "may not specify a duration less than 10 minutes"
                if seconds < 600
                else "may not specify a duration larger than 2^32 seconds"
            )
            group_kind = "TokenRequest.authentication.k8s.io"
            raise invalid(group_kind, "", "spec.expirationSeconds", str(seconds), detail)
        audiences = tuple(spec.get("audiences") or [API_AUDIENCE])
        now = self._clock()
        uid = account["metadata"].get("uid", "")
        jti = str(uuid.uuid4())
        private: dict[str, Any] = {
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": uid},
        }
        extra: dict[str, tuple[str, ...]] = {CREDENTIAL_ID: (f"JTI={jti}",)}
        bound = None
        if spec.get("boundObjectRef"):
            pod, node = self._bound_pod(namespace, name, spec["boundObjectRef"])
            bound = (pod["metadata"]["name"], pod["metadata"].get("uid", ""))
            private["pod"] = {"name": bound[0], "uid": bound[1]}
            extra[POD_NAME_KEY], extra[POD_UID_KEY] = (bound[0],), (bound[1],)
            if node is not None:
                private["node"] = {"name": node["name"], "uid": node.get("uid", "")}
                extra[NODE_NAME_KEY] = (node["name"],)
                if node.get("uid"):
                    extra[NODE_UID_KEY] = (node["uid"],)
        claims = {
            "aud": list(audiences),
            "exp": int(now + seconds),
            "iat": int(now),
            "iss": API_AUDIENCE,
            "jti": jti,
            "kubernetes.io": private,
            "nbf": int(now),
            "sub": f"{SA_PREFIX}{namespace}:{name}",
        }
        header = {"alg": "RS256", "kid": "fake"}
        token = f"{_b64url(header)}.{_b64url(claims)}.{secrets.token_urlsafe(32)}"
        self._issued[token] = _Issued(namespace, name, uid, now + seconds, audiences, bound, extra)
        spec.update(audiences=list(audiences), expirationSeconds=seconds)
        spec.setdefault("boundObjectRef", None)
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": _rfc3339(now + seconds)},
        }

    def issue_token(self, namespace: str, name: str, token: str, seconds: int) -> None:
        """Accept `token` as a TokenRequest token of `namespace/name` for `seconds` from now.

        A test's stand-in for the token the control plane asked for (`token_request`): it
        holds while that ServiceAccount (same uid) exists and until it expires.
        """
        account = self._service_account(namespace, name)
        if account is None:
            raise KeyError(f"no ServiceAccount {namespace}/{name}")
        uid = account["metadata"].get("uid", "")
        expires = self._clock() + seconds
        self._issued[token] = _Issued(namespace, name, uid, expires, (API_AUDIENCE,))

    # -- authorization

    def authorize(self, attrs: Attributes) -> tuple[bool, str]:
        """The union of system:masters, Node and RBAC: (allowed, reason)."""
        if MASTERS in attrs.user.groups:
            return True, ""
        reasons = []
        allowed, reason = self._node_authorize(attrs)
        if allowed:
            return True, reason
        if reason:
            reasons.append(reason)
        allowed, reason = self._rbac_authorize(attrs)
        if allowed:
            return True, reason
        if reason:
            reasons.append(reason)
        return False, "\n".join(reasons)

    def require(self, attrs: Attributes) -> None:
        """Raise the 403 the authorization filter answers unless `attrs` is allowed."""
        allowed, reason = self.authorize(attrs)
        if not allowed:
            raise refusal(attrs, reason)

    def require_create_on_apply(self, attrs: Attributes) -> None:
        """Server-side apply that creates needs `create` too (patch.go withAuthorization)."""
        create = dataclasses.replace(attrs, verb="create")
        allowed, reason = self.authorize(create)
        if not allowed:
            raise forbidden(attrs.api_group, attrs.resource, attrs.name, reason)

    # -- RBAC

    def _role_rules(self, kind: str, name: str, namespace: str) -> tuple[list[dict], str]:
        """GetRoleReferenceRules: (rules, error) of a binding's roleRef."""
        if kind == "Role":
            role = self._store.get(f"{RBAC_PREFIX}/namespaces/{namespace}/roles/{name}")
            if role is None:
                return [], f'role.{RBAC_GROUP} "{name}" not found'
            return list(role.get("rules") or []), ""
        if kind == "ClusterRole":
            role = self._store.get(f"{RBAC_PREFIX}/clusterroles/{name}")
            if role is None:
                return [], f'clusterrole.{RBAC_GROUP} "{name}" not found'
            return self._cluster_role_rules(role), ""
        return [], f'unsupported role reference kind: "{kind}"'

    def _cluster_role_rules(self, role: Mapping) -> list[dict]:
        selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []
        if not selectors:
            return list(role.get("rules") or [])
        rules: list[dict] = []
        prefix = f"{RBAC_PREFIX}/clusterroles/"
        for path, other in self._store.items():
            if not path.startswith(prefix) or other is role:
                continue
            labels = other["metadata"].get("labels") or {}
            if any(_label_selector_matches(s, labels) for s in selectors):
                rules += [r for r in other.get("rules") or [] if r not in rules]
        return rules

    def _applies(self, user: UserInfo, subject: Mapping, namespace: str) -> bool:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "User":
            return user.name == name
        if kind == "Group":
            return name in user.groups
        if kind == "ServiceAccount":
            ns = subject.get("namespace") or namespace
            return bool(ns) and user.name == f"{SA_PREFIX}{ns}:{name}"
        return False

    def _bindings_by_scope(self) -> dict[str, list[dict]]:
        """ClusterRoleBindings (under "") and RoleBindings by namespace, by store version."""
        version = self._version()
        if version is not None and self._bindings is not None and self._bindings[0] == version:
            return self._bindings[1]
        found: dict[str, list[dict]] = {}
        for obj in list(self._store.values()):
            if obj.get("kind") in ("ClusterRoleBinding", "RoleBinding"):
                found.setdefault(obj["metadata"].get("namespace", ""), []).append(obj)
        self._bindings = (version, found)
        return found

    def _applicable(
        self, user: UserInfo, namespace: str
    ) -> list[tuple[dict, Mapping, str, list[dict], str]]:
        """(binding, subject, scope, role's rules, error) of each binding naming `user`.

        In VisitRulesFor's order: ClusterRoleBindings, then the namespace's RoleBindings.
        Kept until the store changes (its `version`; the server never changes a stored
        object in place, a write stores a new one with a new resourceVersion): one request
        asks for the same user's rules two to four times (the request, `create` for an
        apply that creates, an RBAC write's escalation checks).
        """
        version = self._version()
        key = (user.name, tuple(user.groups), namespace)
        if version is None or version != self._applicable_at:
            self._applicable_at, self._applicable_kept = version, {}
        elif (kept := self._applicable_kept.get(key)) is not None:
            return kept
        found = []
        by_scope = self._bindings_by_scope()
        for scope in ["", namespace] if namespace else [""]:
            for binding in by_scope.get(scope, []):
                subject = next(
                    (s for s in binding.get("subjects") or [] if self._applies(user, s, scope)),
                    None,
                )
                if subject is None:
                    continue
                ref = binding.get("roleRef") or {}
                rules, error = self._role_rules(ref.get("kind", ""), ref.get("name", ""), scope)
                found.append((binding, subject, scope, rules, error))
        if version is not None:
            self._applicable_kept[key] = found
        return found

    @staticmethod
    def _source(binding: Mapping, subject: Mapping, scope: str) -> str:
        """The binding as RBAC's allow reason names it (`ruleAccumulator`'s source)."""
        ref = binding.get("roleRef") or {}
        name = binding["metadata"]["name"] + (f"/{scope}" if scope else "")
        kind = "RoleBinding" if scope else "ClusterRoleBinding"
        return (
            f"{kind} {_go_quote(name)} of {ref.get('kind')} "
            f"{_go_quote(ref.get('name', ''))} to {_describe_subject(subject, scope)}"
        )

    def visit_rules(
        self, user: UserInfo, namespace: str
    ) -> Iterator[tuple[str, dict | None, str]]:
        """VisitRulesFor: (source, rule, error) for each rule that applies to `user`."""
        for binding, subject, scope, rules, error in self._applicable(user, namespace):
            if error:
                yield "", None, error
                continue
            source = self._source(binding, subject, scope)
            for rule in rules:
                yield source, rule, ""

    def rules_for(self, user: UserInfo, namespace: str) -> list[dict]:
        """RulesFor: every rule that applies to `user` in `namespace`."""
        return [
            rule
            for _, _, _, rules, error in self._applicable(user, namespace)
            if not error
            for rule in rules
        ]

    def _rbac_authorize(self, attrs: Attributes) -> tuple[bool, str]:
        """VisitRulesFor until a rule allows; the source is named only for the one that does."""
        errors = []
        for binding, subject, scope, rules, error in self._applicable(attrs.user, attrs.namespace):
            if error:
                errors.append(error)
                continue
            if any(rule_allows(attrs, rule) for rule in rules):
                return True, f"RBAC: allowed by {self._source(binding, subject, scope)}"
        if not errors:
            return False, ""
        return False, "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")

    # -- escalation prevention (policybased storage)

    def _escalation_error(self, user: UserInfo, namespace: str, rules: list[Mapping]) -> str:
        """ConfirmNoEscalation: "" when `user` holds every rule in `namespace`."""
        missing = uncovered(self.rules_for(user, namespace), rules)
        if not missing:
            return ""
        described = sorted({compact_string(r) for r in _compact(missing)})
        return (
            f"user {_go_quote(user.name)} (groups={_go_list(user.groups)}) is attempting to "
            "grant RBAC permissions not currently held:\n" + "\n".join(described)
        )

    def check_rbac_write(
        self, attrs: Attributes, kind: str, obj: Mapping, old: Mapping | None
    ) -> None:
        """Refuse a Role/ClusterRole/(Cluster)RoleBinding write that would escalate."""
        if MASTERS in attrs.user.groups:
            return
        if old is not None and _only_gc_fields_change(obj, old):
            return
        name = (obj.get("metadata") or {}).get("name", "")
        resource = kind.lower() + "s"
        if kind in ("Role", "ClusterRole"):
            escalate = dataclasses.replace(attrs, verb="escalate", subresource="")
            if self.authorize(escalate)[0]:
                return
            error = self._escalation_error(attrs.user, attrs.namespace, obj.get("rules") or [])
            aggregating = any(
                ((o or {}).get("aggregationRule") or {}).get("clusterRoleSelectors")
                for o in (obj, old)
            )
            if (
                not error
                and aggregating
                and self._escalation_error(attrs.user, "", FULL_AUTHORITY)
            ):
                error = "must have cluster-admin privileges to use the aggregationRule"
        else:
            error = self._binding_error(attrs, obj)
        if error:
            raise forbidden(RBAC_GROUP, resource, name, error)

    def _binding_error(self, attrs: Attributes, binding: Mapping) -> str:
        """BindingAuthorized, else ConfirmNoEscalation on the referenced role's rules."""
        ref = binding.get("roleRef") or {}
        kind, name = ref.get("kind", ""), ref.get("name", "")
        if kind in ("Role", "ClusterRole"):
            bind = Attributes(
                attrs.user,
                "bind",
                True,
                api_group=ref.get("apiGroup", ""),
                namespace=attrs.namespace,
                resource=kind.lower() + "s",
                name=name,
            )
            if self.authorize(bind)[0]:
                return ""
        rules, error = self._role_rules(kind, name, attrs.namespace)
        if error:
            plural = kind.lower() + "s"
            raise AuthError(
                404,
                "NotFound",
                f'{plural}.{RBAC_GROUP} "{name}" not found',
                {"name": name, "group": RBAC_GROUP, "kind": plural},
            )
        return self._escalation_error(attrs.user, attrs.namespace, rules)

    # -- the Node authorizer

    def _node_authorize(self, attrs: Attributes) -> tuple[bool, str]:
        user = attrs.user
        if NODES not in user.groups or not user.name.startswith(NODE_PREFIX):
            return False, ""
        node = user.name[len(NODE_PREFIX) :]
        if not node:
            return False, f'unknown node for user "{user.name}"'
        if attrs.resource_request:
            decide = {
                ("", "secrets"): self._node_read_namespaced,
                ("", "configmaps"): self._node_read_namespaced,
                ("", "persistentvolumeclaims"): self._node_get,
                ("", "persistentvolumes"): self._node_get,
                ("", "serviceaccounts"): self._node_create_token,
                ("coordination.k8s.io", "leases"): self._node_lease,
                ("", "nodes"): self._node_node,
                ("", "pods"): self._node_pod,
            }.get((attrs.api_group, attrs.resource))
            if decide is not None:
                return decide(node, attrs)
        return any(rule_allows(attrs, r) for r in NODE_RULES), ""

    def _related(self, node: str, attrs: Attributes) -> tuple[bool, str]:
        if not attrs.name:
            return False, "No Object name found"
        if self._node_uses(node, attrs.resource, attrs.namespace, attrs.name):
            return True, ""
        return False, f"no relationship found between node '{node}' and this object"

    def _node_read_namespaced(self, node: str, attrs: Attributes) -> tuple[bool, str]:
        if attrs.verb not in ("get", "list", "watch"):
            return False, "can only read resources of this type"
        if attrs.subresource:
            return False, "cannot read subresource"
        if not attrs.namespace:
            return False, "can only read namespaced object of this type"
        return self._related(node, attrs)

    def _node_get(self, node: str, attrs: Attributes) -> tuple[bool, str]:
        if attrs.resource == "persistentvolumeclaims" and attrs.subresource == "status":
            if attrs.verb not in ("update", "patch"):
                return False, "can only get/update/patch this type"
            return self._related(node, attrs)
        if attrs.verb != "get":
            return False, "can only get individual resources of this type"
        if attrs.subresource:
            return False, "cannot get subresource"
        return self._related(node, attrs)

    def _node_create_token(self, node: str, attrs: Attributes) -> tuple[bool, str]:
        if attrs.verb != "create" or not attrs.name:
            return False, "can only create tokens for individual service accounts"
        if attrs.subresource != "token":
            return False, "can only create token subresource of serviceaccount"
        return self._related(node, attrs)

    def _node_lease(self, node: str, attrs: Attributes) -> tuple[bool, str]:
        if attrs.verb not in ("get", "create", "update", "patch", "delete"):
            return False, "can only get, create, update, patch, or delete a node lease"
        if attrs.namespace != NODE_LEASE_NAMESPACE:
            return (
                False,
                f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace',
            )
        if attrs.verb != "create" and attrs.name != node:
            return False, "can only access node lease with the same name as the requesting node"
        return True, ""

    def _node_node(self, node: str, attrs: Attributes) -> tuple[bool, str]:
        if attrs.subresource == "" and attrs.verb in ("create", "update", "patch"):
            return True, ""
        if attrs.subresource == "" and attrs.verb in ("get", "list", "watch"):
            if attrs.name == node:
                return True, ""
            if not attrs.name:
                return False, f"node '{node}' cannot read all nodes, only its own Node object"
            return False, f"node '{node}' cannot read '{attrs.name}', only its own Node object"
        if attrs.subresource == "status" and attrs.verb in ("update", "patch"):
            return True, ""
        return False, ""

    def _node_pod(self, node: str, attrs: Attributes) -> tuple[bool, str]:
        sub, verb = attrs.subresource, attrs.verb
        if sub == "" and verb == "get":
            return self._node_get(node, attrs)
        if sub == "" and verb in ("list", "watch"):
            if _field_requirements(attrs.field_selector).get("spec.nodeName") == node:
                return True, ""
            if attrs.name:
                return self._related(node, attrs)
            return False, "can only list/watch pods with spec.nodeName field selector"
        allowed = (sub == "" and verb in ("create", "delete")) or (
            (sub, verb) in (("status", "update"), ("status", "patch"), ("eviction", "create"))
        )
        return allowed, ""

    def _node_uses(self, node: str, resource: str, namespace: str, name: str) -> bool:
        """Whether a pod bound to `node` leads to the object (the authorizer's graph)."""
        pods = [
            o
            for o in self._store.values()
            if o.get("kind") == "Pod" and (o.get("spec") or {}).get("nodeName") == node
        ]
        if resource == "pods":
            return any(
                p["metadata"].get("namespace") == namespace and p["metadata"]["name"] == name
                for p in pods
            )
        if resource == "persistentvolumes":
            return any(self._pv_of(p, name) for p in pods)
        kind = {"persistentvolumeclaims": "pvcs"}.get(resource, resource)
        for pod in pods:
            if pod["metadata"].get("namespace") != namespace:
                if resource == "secrets" and self._pod_pv_secret(pod, namespace, name):
                    return True
                continue
            refs = _pod_spec_refs(pod.get("spec") or {})
            if name in refs.get(kind, set()):
                return True
            if resource == "secrets" and self._pod_pv_secret(pod, namespace, name):
                return True
        return False

    def _pod_pvs(self, pod: Mapping) -> list[dict]:
        namespace = pod["metadata"].get("namespace")
        out = []
        for claim in _pod_spec_refs(pod.get("spec") or {})["pvcs"]:
            pvc = self._store.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
            volume = ((pvc or {}).get("spec") or {}).get("volumeName")
            pv = self._store.get(f"/api/v1/persistentvolumes/{volume}") if volume else None
            if pv is not None:
                out.append(pv)
        return out

    def _pv_of(self, pod: Mapping, name: str) -> bool:
        return any(pv["metadata"]["name"] == name for pv in self._pod_pvs(pod))

    def _pod_pv_secret(self, pod: Mapping, namespace: str, name: str) -> bool:
        for pv in self._pod_pvs(pod):
            csi = (pv.get("spec") or {}).get("csi") or {}
            for key in _PV_SECRET_REFS:
                ref = csi.get(key) or {}
                if ref.get("name") == name and ref.get("namespace") == namespace:
                    return True
        return False

    # -- reviews

    def review(self, user: UserInfo, kind: str, body: Mapping) -> dict:
        """Answer a SelfSubjectAccessReview, SubjectAccessReview or SelfSubjectReview."""
        if kind == "SelfSubjectReview":
            return {
                "kind": kind,
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": None},
                "status": {"userInfo": user.info()},
            }
        spec = dict(body.get("spec") or {})
        group_kind = f"{kind}.authorization.k8s.io"
        resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if resource is not None and non_resource is not None:
            detail = "cannot be specified in combination with resourceAttributes"
            raise invalid(group_kind, "", "spec.nonResourceAttributes", "{...}", detail)
        if resource is None and non_resource is None:
            detail = "exactly one of nonResourceAttributes or resourceAttributes must be specified"
            raise invalid(group_kind, "", "spec.resourceAttributes", "null", detail)
        if kind == "SubjectAccessReview":
            if not spec.get("user") and not spec.get("groups"):
                detail = "at least one of user or group must be specified"
                raise invalid(group_kind, "", "spec.user", '""', detail)
            user = UserInfo(
                spec.get("user", ""), tuple(spec.get("groups") or ()), spec.get("uid", "")
            )
        allowed, reason = self.authorize(_review_attributes(user, resource, non_resource))
        status: dict[str, Any] = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        return {
            "kind": kind,
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }


def _review_attributes(
    user: UserInfo, resource: Mapping | None, other: Mapping | None
) -> Attributes:
    """authorizationutil.ResourceAttributesFrom / NonResourceAttributesFrom."""
    if resource is None:
        other = other or {}
        return Attributes(user, other.get("verb", ""), False, other.get("path", ""))
    return Attributes(
        user,
        resource.get("verb", ""),
        True,
        api_group=resource.get("group", ""),
        api_version=resource.get("version", ""),
        namespace=resource.get("namespace", ""),
        resource=resource.get("resource", ""),
        subresource=resource.get("subresource", ""),
        name=resource.get("name", ""),
    )


REVIEW_KINDS = {
    ("authorization.k8s.io/v1", "selfsubjectaccessreviews"): "SelfSubjectAccessReview",
    ("authorization.k8s.io/v1", "subjectaccessreviews"): "SubjectAccessReview",
    ("authentication.k8s.io/v1", "selfsubjectreviews"): "SelfSubjectReview",
}
