"""The fake API server refuses what kube-apiserver refuses: authentication and authorization.

One test per rule of `fakes.kube_auth`, each against the server over real HTTP (the
`kubernetes` client through `Kube` where a charm would use it), each naming the upstream
source of the rule it shows. The last ones show that the grants the control plane makes
confine a consumer to what it asked for (issue 29's first proofs).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes.kube_apiserver import ADMIN_TOKEN, FakeKubeApiServer
from fakes.kube_grants import consumer_grant, store_grant, worker_grant

RBAC = "/apis/rbac.authorization.k8s.io/v1"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        yield server


def call(
    api: FakeKubeApiServer,
    method: str,
    path: str,
    token: str | None = ADMIN_TOKEN,
    body: dict | None = None,
    content_type: str = "application/json",
) -> tuple[int, dict | str]:
    """One request over HTTP: (status, decoded JSON body or text)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(api.url + path, data=data, method=method)
    request.add_header("Content-Type", content_type)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, text, ctype = response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as e:
        status, text, ctype = e.code, e.read().decode(), e.headers
    return status, json.loads(text) if "json" in (ctype.get("Content-Type") or "") else text


def user_token(api: FakeKubeApiServer, name: str, *groups: str) -> str:
    token = f"token-of-{name}"
    api.add_token(token, name, groups)
    return token


def grant(api: FakeKubeApiServer, name: str, rules: list[dict], *, namespace: str = "") -> None:
    """A Role (or ClusterRole without a namespace) `name` bound to User `name`."""
    ref = {"apiGroup": "rbac.authorization.k8s.io", "name": name}
    subjects = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}]
    if namespace:
        api.put_object(f"{RBAC}/namespaces/{namespace}/roles/{name}", {"rules": rules})
        api.put_object(
            f"{RBAC}/namespaces/{namespace}/rolebindings/{name}",
            {"roleRef": {**ref, "kind": "Role"}, "subjects": subjects},
        )
    else:
        api.put_object(f"{RBAC}/clusterroles/{name}", {"rules": rules})
        api.put_object(
            f"{RBAC}/clusterrolebindings/{name}",
            {"roleRef": {**ref, "kind": "ClusterRole"}, "subjects": subjects},
        )


def allowed(api: FakeKubeApiServer, token: str, **attributes: str) -> bool:
    """`kubectl auth can-i`: a SelfSubjectAccessReview's answer."""
    key = "nonResourceAttributes" if "path" in attributes else "resourceAttributes"
    status, body = call(api, "POST", SSAR, token, {"spec": {key: attributes}})
    assert status == 201, body
    assert isinstance(body, dict)
    return body["status"]["allowed"]


def add_namespace(api: FakeKubeApiServer, name: str) -> None:
    api.put_object(f"/api/v1/namespaces/{name}", {"metadata": {"name": name}})


# ---------------------------------------------------------------- authentication


def test_an_unknown_token_is_401_unauthorized(api):
    """k8s.io/apiserver bearertoken.go: a token no authenticator accepts fails the request."""
    assert call(api, "GET", "/api/v1/namespaces", "not-a-token") == (
        401,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        },
    )
    # even on the health paths: authentication comes before everything
    assert call(api, "GET", "/readyz", "not-a-token")[0] == 401


def test_no_token_is_system_anonymous_who_may_read_only_the_public_info(api):
    # anonymous.go: system:anonymous in system:unauthenticated; bootstrappolicy's
    # system:public-info-viewer is bound to that group (/healthz, /livez, /readyz, /version).
    for path in ("/readyz", "/livez", "/healthz"):
        assert call(api, "GET", path, None) == (200, "ok")
    status, body = call(api, "GET", "/api/v1/namespaces", None)
    assert status == 403
    assert body["message"] == (
        'namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" '
        'in API group "" at the cluster scope'
    )
    # discovery is for authenticated users only since 1.14 (system:discovery)
    status, body = call(api, "GET", "/api", None)
    assert (status, body["message"]) == (
        403,
        'forbidden: User "system:anonymous" cannot get path "/api"',
    )
    assert body["details"] == {}
    review = {"user": "system:anonymous", "groups": ["system:unauthenticated"]}
    for path, expected in (("/version", True), ("/version/", True), ("/metrics", False)):
        spec = {**review, "nonResourceAttributes": {"path": path, "verb": "get"}}
        assert call(api, "POST", SAR, body={"spec": spec})[1]["status"]["allowed"] is expected


def test_the_kubeadm_admin_is_kubernetes_admin_in_kubeadm_cluster_admins(api):
    # kubeadm constants.go ClusterAdminsGroupAndClusterRoleBinding: admin.conf's group,
    # bound to cluster-admin by the ClusterRoleBinding of that name (kubeadm 1.29+).
    status, body = call(api, "POST", WHOAMI, body={})
    assert status == 201
    assert body["status"]["userInfo"] == {
        "username": "kubernetes-admin",
        "groups": ["kubeadm:cluster-admins", "system:authenticated"],
    }
    status, body = call(
        api, "POST", SSAR, body={"spec": {"resourceAttributes": {"verb": "*", "resource": "*"}}}
    )
    assert body["status"] == {
        "allowed": True,
        "reason": 'RBAC: allowed by ClusterRoleBinding "kubeadm:cluster-admins" of ClusterRole '
        '"cluster-admin" to Group "kubeadm:cluster-admins"',
    }


def test_a_service_account_token_secret_holds_while_the_secret_and_its_account_exist(api):
    # pkg/serviceaccount/legacy.go: the Secret's token names the ServiceAccount; a deleted
    # Secret or ServiceAccount invalidates it (401).
    with Kube.from_kubeconfig(api.kubeconfig(), backoff=0.01) as admin:
        admin.create(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "app", "namespace": "default"},
            }
        )
        secret = admin.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {
                    "name": "app-token",
                    "namespace": "default",
                    "annotations": {"kubernetes.io/service-account.name": "app"},
                },
            }
        )
    token = base64.b64decode(secret["data"]["token"]).decode()
    status, body = call(api, "POST", WHOAMI, token, {})
    info = body["status"]["userInfo"]
    assert (info["username"], info["groups"]) == (
        "system:serviceaccount:default:app",
        ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"],
    )
    assert (
        info["uid"]
        == api.get_object("/api/v1/namespaces/default/serviceaccounts/app")["metadata"]["uid"]
    )
    api.delete_object("/api/v1/namespaces/default/serviceaccounts/app")
    assert call(api, "POST", WHOAMI, token, {})[0] == 401


def test_token_request_issues_tokens_that_expire(api):
    # pkg/registry/core/serviceaccount/storage/token.go; authentication validation:
    # expirationSeconds defaults to 3600 and may not be under 600; the token expires.
    api.clock = lambda: 1_800_000_000.0
    api.put_object("/api/v1/namespaces/default/serviceaccounts/app", {})
    path = "/api/v1/namespaces/default/serviceaccounts/app/token"
    status, body = call(api, "POST", path, body={"spec": {}})
    assert status == 201
    assert body["spec"]["expirationSeconds"] == 3600
    assert body["spec"]["audiences"] == ["https://kubernetes.default.svc.cluster.local"]
    assert body["status"]["expirationTimestamp"] == "2027-01-15T09:00:00Z"
    token = body["status"]["token"]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == "system:serviceaccount:default:app"
    assert call(api, "POST", WHOAMI, token, {})[0] == 201

    api.clock = lambda: 1_800_000_000.0 + 3600
    assert call(api, "POST", WHOAMI, token, {})[0] == 401

    status, body = call(api, "POST", path, body={"spec": {"expirationSeconds": 60}})
    assert (status, body["message"]) == (
        422,
        'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: '
        "Invalid value: 60: may not specify a duration less than 10 minutes",
    )
    status, body = call(api, "POST", path.replace("/app/", "/nobody/"), body={"spec": {}})
    assert (status, body["message"]) == (404, 'serviceaccounts "nobody" not found')


def test_a_token_for_another_audience_is_not_valid_at_the_api_server(api):
    """The API server accepts only tokens whose audiences include its own (--api-audiences)."""
    api.put_object("/api/v1/namespaces/default/serviceaccounts/app", {})
    path = "/api/v1/namespaces/default/serviceaccounts/app/token"
    _, body = call(api, "POST", path, body={"spec": {"audiences": ["vault"]}})
    assert call(api, "POST", WHOAMI, body["status"]["token"], {})[0] == 401


def test_a_token_request_token_dies_with_its_service_account(api):
    """jwt.go validator: the ServiceAccount must still exist with the token's uid."""
    api.put_object("/api/v1/namespaces/default/serviceaccounts/app", {})
    _, body = call(api, "POST", "/api/v1/namespaces/default/serviceaccounts/app/token", body={})
    token = body["status"]["token"]
    api.delete_object("/api/v1/namespaces/default/serviceaccounts/app")
    api.put_object("/api/v1/namespaces/default/serviceaccounts/app", {})  # a new uid
    assert call(api, "POST", WHOAMI, token, {})[0] == 401


def test_creating_a_token_needs_create_on_serviceaccounts_token(api):
    """RBAC: the token subresource is its own resource, `serviceaccounts/token`."""
    api.put_object("/api/v1/namespaces/default/serviceaccounts/app", {})
    token = user_token(api, "dev")
    grant(api, "dev", [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["*"]}])
    status, body = call(
        api, "POST", "/api/v1/namespaces/default/serviceaccounts/app/token", token, {}
    )
    assert (status, body["message"]) == (
        403,
        'serviceaccounts "app" is forbidden: User "dev" cannot create resource '
        '"serviceaccounts/token" in API group "" in the namespace "default"',
    )


# ---------------------------------------------------------------- RBAC


def test_a_refusal_is_rbacs_403_with_the_real_status(api):
    """responsewriters/errors.go forbiddenMessage and apimachinery NewForbidden."""
    token = user_token(api, "dev")
    status, body = call(api, "GET", "/apis/batch/v1/namespaces/team/jobs/train", token)
    assert status == 403
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'jobs.batch "train" is forbidden: User "dev" cannot get resource "jobs" '
        'in API group "batch" in the namespace "team"',
        "reason": "Forbidden",
        "code": 403,
        "details": {"name": "train", "group": "batch", "kind": "jobs"},
    }


@pytest.mark.parametrize(
    ("method", "path", "verb", "resource", "name", "namespace"),
    [  # paths under /api/v1
        ("GET", "/pods", "list", "pods", "", ""),
        ("GET", "/pods?watch=true", "watch", "pods", "", ""),
        ("GET", "/namespaces/a/pods?fieldSelector=metadata.name%3Dp", "list", "pods", "p", "a"),
        ("POST", "/namespaces/a/pods", "create", "pods", "", "a"),
        ("PUT", "/namespaces/a/pods/p", "update", "pods", "p", "a"),
        ("PATCH", "/namespaces/a/pods/p", "patch", "pods", "p", "a"),
        ("DELETE", "/namespaces/a/pods/p", "delete", "pods", "p", "a"),
        ("DELETE", "/namespaces/a/pods", "deletecollection", "pods", "", "a"),
        ("GET", "/namespaces/a", "get", "namespaces", "a", "a"),
        ("GET", "/namespaces/a/pods/p/log", "get", "pods/log", "p", "a"),
        ("GET", "/namespaces/a/services/s:80/proxy/v1/m", "get", "services/proxy", "s:80", "a"),
    ],
)  # fmt: skip
def test_the_verb_and_resource_are_derived_as_kube_apiserver_does(
    api, method, path, verb, resource, name, namespace
):
    # k8s.io/apiserver pkg/endpoints/request/requestinfo.go: GET is get, list or watch,
    # DELETE delete or deletecollection; a metadata.name field selector names the object; a
    # namespace is its own namespace; subresources are `<resource>/<sub>`.
    token = user_token(api, "dev")
    sent = {} if method in ("POST", "PUT", "PATCH") else None
    status, body = call(api, method, "/api/v1" + path, token, sent)
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    named = f'{resource.split("/")[0]} "{name}"' if name else resource.split("/")[0]
    assert (status, body["message"]) == (
        403,
        f'{named} is forbidden: User "dev" cannot {verb} resource "{resource}" in API group '
        f'"" {scope}',
    )


def test_verbs_groups_and_resources_must_all_match(api):
    # rbac.go RuleAllows, evaluation_helpers.go VerbMatches/APIGroupMatches: `*` matches
    # every verb; the group is part of the rule.
    add_namespace(api, "team")
    token = user_token(api, "dev")
    grant(
        api,
        "dev",
        [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["*"]}],
        namespace="team",
    )
    assert allowed(api, token, verb="delete", group="batch", resource="jobs", namespace="team")
    assert not allowed(api, token, verb="delete", group="apps", resource="jobs", namespace="team")
    assert not allowed(
        api, token, verb="get", group="batch", resource="cronjobs", namespace="team"
    )
    assert not allowed(api, token, verb="get", group="batch", resource="jobs", namespace="other")
    assert not allowed(api, token, verb="list", group="batch", resource="jobs")  # cluster-wide


def test_subresources_are_granted_on_their_own_or_by_star_slash(api):
    # evaluation_helpers.go ResourceMatches: `pods/log` grants the log, not the pod;
    # `*/status` every status subresource.
    token = user_token(api, "dev")
    grant(
        api,
        "dev",
        [{"apiGroups": ["", "apps"], "resources": ["pods/log", "*/status"], "verbs": ["get"]}],
    )
    assert allowed(api, token, verb="get", resource="pods", subresource="log", namespace="a")
    assert not allowed(api, token, verb="get", resource="pods", namespace="a")
    assert allowed(
        api, token, verb="get", group="apps", resource="deployments", subresource="status"
    )
    assert not allowed(api, token, verb="get", resource="pods", subresource="exec")


def test_resource_names_grant_the_named_objects_only(api):
    """evaluation_helpers.go ResourceNameMatches: a named rule allows no list (no name)."""
    add_namespace(api, "a")
    api.put_object("/api/v1/namespaces/a/configmaps/mine", {"data": {}})
    api.put_object("/api/v1/namespaces/a/configmaps/theirs", {"data": {}})
    token = user_token(api, "dev")
    grant(
        api,
        "dev",
        [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": ["mine"],
                "verbs": ["get", "list"],
            }
        ],
        namespace="a",
    )
    with Kube.from_kubeconfig(api.kubeconfig(token), backoff=0.01) as kube:
        assert kube.get("v1", "ConfigMap", "mine", "a") is not None
        with pytest.raises(KubeError) as theirs:
            kube.get("v1", "ConfigMap", "theirs", "a")
        with pytest.raises(KubeError) as listing:
            kube.list("v1", "ConfigMap", "a")
        assert kube.list("v1", "ConfigMap", "a", field_selector="metadata.name=mine")
    assert theirs.value.status == listing.value.status == 403


def test_non_resource_urls_match_exactly_or_by_a_trailing_star(api):
    """evaluation_helpers.go NonResourceURLMatches."""
    token = user_token(api, "dev")
    grant(api, "dev", [{"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]}])
    assert allowed(api, token, path="/metrics", verb="get")
    assert allowed(api, token, path="/logs/kube-apiserver.log", verb="get")
    assert not allowed(api, token, path="/metrics/slis", verb="get")
    assert not allowed(api, token, path="/logs", verb="get")
    assert not allowed(api, token, path="/metrics", verb="post")


def test_a_role_binding_grants_in_its_namespace_only_even_a_cluster_role(api):
    """rule.go VisitRulesFor: RoleBindings of the request's namespace only."""
    token = user_token(api, "dev")
    api.put_object(
        f"{RBAC}/clusterroles/reader",
        {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
    )
    api.put_object(
        f"{RBAC}/namespaces/a/rolebindings/dev-reads",
        {
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "reader",
            },
            "subjects": [{"kind": "User", "name": "dev"}],
        },
    )
    assert allowed(api, token, verb="list", resource="pods", namespace="a")
    assert not allowed(api, token, verb="list", resource="pods", namespace="b")
    assert not allowed(api, token, verb="list", resource="pods")


def test_groups_and_service_accounts_are_subjects_too(api):
    # rule.go appliesToUser: a Group by membership, a ServiceAccount by its user name (its
    # namespace defaulting to the binding's).
    api.put_object("/api/v1/namespaces/a/serviceaccounts/bot", {})
    _, body = call(api, "POST", "/api/v1/namespaces/a/serviceaccounts/bot/token", body={})
    bot = body["status"]["token"]
    team = user_token(api, "carol", "team-a")
    api.put_object(
        f"{RBAC}/namespaces/a/roles/r",
        {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
    )
    api.put_object(
        f"{RBAC}/namespaces/a/rolebindings/r",
        {
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "bot"},
                {"kind": "Group", "name": "team-a"},
            ],
        },
    )
    assert allowed(api, bot, verb="get", resource="pods", namespace="a")
    assert allowed(api, team, verb="get", resource="pods", namespace="a")
    assert not allowed(api, user_token(api, "mallory"), verb="get", resource="pods", namespace="a")


def test_a_binding_to_a_missing_role_says_so_in_the_refusal(api):
    """rbac.go: resolution errors become the reason appended to the 403."""
    token = user_token(api, "dev")
    api.put_object(
        f"{RBAC}/clusterrolebindings/dangling",
        {
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "gone",
            },
            "subjects": [{"kind": "User", "name": "dev"}],
        },
    )
    status, body = call(api, "GET", "/api/v1/nodes", token)
    assert (status, body["message"]) == (
        403,
        'nodes is forbidden: User "dev" cannot list resource "nodes" in API group "" at the '
        'cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found',
    )


def test_an_aggregated_cluster_role_holds_the_rules_its_selector_matches(api):
    """pkg/controller/clusterroleaggregation: rules of the ClusterRoles the selector matches."""
    token = user_token(api, "dev")
    api.put_object(
        f"{RBAC}/clusterroles/monitoring",
        {
            "aggregationRule": {
                "clusterRoleSelectors": [
                    {"matchLabels": {"example.com/aggregate-to-monitoring": "true"}}
                ]
            }
        },
    )
    api.put_object(
        f"{RBAC}/clusterrolebindings/dev",
        {
            "roleRef": {"kind": "ClusterRole", "name": "monitoring"},
            "subjects": [{"kind": "User", "name": "dev"}],
        },
    )
    assert not allowed(api, token, verb="get", path="/metrics")
    api.put_object(
        f"{RBAC}/clusterroles/metrics-reader",
        {
            "metadata": {"labels": {"example.com/aggregate-to-monitoring": "true"}},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
    )
    assert allowed(api, token, verb="get", path="/metrics")


def test_apply_that_creates_needs_create_as_well_as_patch(api):
    """handlers/patch.go: server-side apply of a missing object checks `create` too."""
    add_namespace(api, "a")
    token = user_token(api, "dev")
    grant(
        api,
        "dev",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}],
        namespace="a",
    )
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "a"},
    }
    with Kube.from_kubeconfig(api.kubeconfig(token), backoff=0.01) as kube:
        with pytest.raises(KubeError) as info:
            kube.apply(manifest, field_manager="dev")
    assert (info.value.status, info.value.message) == (403, 'configmaps "c" is forbidden: ')
    api.put_object("/api/v1/namespaces/a/configmaps/c", {"data": {}})
    with Kube.from_kubeconfig(api.kubeconfig(token), backoff=0.01) as kube:
        assert kube.apply({**manifest, "data": {"k": "v"}}, field_manager="dev")["data"] == {
            "k": "v"
        }


def test_an_injected_403_is_rbacs_refusal_of_the_requesting_user(api):
    """The fault injection words a 403 as the authorization filter would for that user."""
    api.inject(status=403, times=1)
    status, body = call(api, "GET", "/api/v1/namespaces/a/pods")
    assert (status, body["message"]) == (
        403,
        'pods is forbidden: User "kubernetes-admin" cannot list resource "pods" in API group '
        '"" in the namespace "a"',
    )


# ---------------------------------------------------------------- escalation prevention


ROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role"}
BINDING = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding"}
MANAGE_RBAC = {
    "apiGroups": ["rbac.authorization.k8s.io"],
    "resources": ["roles", "rolebindings"],
    "verbs": ["create", "update", "patch", "get"],
}


def test_a_role_granting_what_its_author_lacks_is_refused(api):
    """role/policybased/storage.go, validation/rule.go ConfirmNoEscalation, policy_compact.go."""
    add_namespace(api, "a")
    token = user_token(api, "dev", "devs")
    grant(
        api,
        "dev",
        [MANAGE_RBAC, {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        namespace="a",
    )
    role = {
        **ROLE,
        "metadata": {"name": "more", "namespace": "a"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        ],
    }
    status, body = call(api, "POST", f"{RBAC}/namespaces/a/roles", token, role)
    assert status == 403
    assert body["message"] == (
        'roles.rbac.authorization.k8s.io "more" is forbidden: user "dev" (groups=["devs" '
        '"system:authenticated"]) is attempting to grant RBAC permissions not currently '
        'held:\n{APIGroups:[""], Resources:["pods"], Verbs:["list" "delete"]}\n'
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}'
    )
    assert body["details"] == {
        "name": "more",
        "group": "rbac.authorization.k8s.io",
        "kind": "roles",
    }
    held = {**role, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}
    assert call(api, "POST", f"{RBAC}/namespaces/a/roles", token, held)[0] == 201
    # and it cannot be widened by an update either
    status, _ = call(api, "PUT", f"{RBAC}/namespaces/a/roles/more", token, role)
    assert status == 403


def test_escalate_on_roles_lets_a_user_write_rules_it_lacks(api):
    """escalation_check.go RoleEscalationAuthorized: `escalate` on the role resource."""
    add_namespace(api, "a")
    token = user_token(api, "dev")
    escalate = {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles"],
        "verbs": ["escalate"],
    }
    grant(api, "dev", [MANAGE_RBAC, escalate], namespace="a")
    role = {
        **ROLE,
        "metadata": {"name": "any", "namespace": "a"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }
    assert call(api, "POST", f"{RBAC}/namespaces/a/roles", token, role)[0] == 201


def test_binding_a_role_its_author_does_not_hold_needs_bind(api):
    """rolebinding/policybased/storage.go, escalation_check.go BindingAuthorized."""
    add_namespace(api, "a")
    token = user_token(api, "dev")
    grant(api, "dev", [MANAGE_RBAC], namespace="a")
    binding = {
        **BINDING,
        "metadata": {"name": "admin-for-me", "namespace": "a"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "User", "name": "dev"}],
    }
    status, body = call(api, "POST", f"{RBAC}/namespaces/a/rolebindings", token, binding)
    assert status == 403
    assert body["message"].startswith(
        'rolebindings.rbac.authorization.k8s.io "admin-for-me" is forbidden: user "dev" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not '
        'currently held:\n{APIGroups:["*"], Resources:["*"], Verbs:["*"]}'
    )
    bind = {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["clusterroles"],
        "resourceNames": ["cluster-admin"],
        "verbs": ["bind"],
    }
    grant(api, "dev", [MANAGE_RBAC, bind], namespace="a")
    assert call(api, "POST", f"{RBAC}/namespaces/a/rolebindings", token, binding)[0] == 201
    assert allowed(api, token, verb="delete", resource="secrets", namespace="a")  # now it has
    assert not allowed(api, token, verb="delete", resource="secrets", namespace="b")


def test_binding_a_role_whose_rules_its_author_holds_needs_no_bind(api):
    """ConfirmNoEscalation on the referenced role's rules, in the binding's namespace."""
    add_namespace(api, "a")
    token = user_token(api, "dev")
    reader = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    grant(api, "dev", [MANAGE_RBAC, reader], namespace="a")
    api.put_object(f"{RBAC}/namespaces/a/roles/reader", {"rules": [reader]})
    binding = {
        **BINDING,
        "metadata": {"name": "bot-reads", "namespace": "a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot"}],
    }
    assert call(api, "POST", f"{RBAC}/namespaces/a/rolebindings", token, binding)[0] == 201


def test_an_aggregation_rule_needs_cluster_admin_powers(api):
    # clusterrole/policybased/storage.go: "must have cluster-admin privileges to use the
    # aggregationRule".
    token = user_token(api, "dev")
    manage = {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["clusterroles"],
        "verbs": ["create"],
    }
    grant(api, "dev", [manage])
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "sweeping"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]},
    }
    status, body = call(api, "POST", f"{RBAC}/clusterroles", token, role)
    assert (status, body["message"]) == (
        403,
        'clusterroles.rbac.authorization.k8s.io "sweeping" is forbidden: must have '
        "cluster-admin privileges to use the aggregationRule",
    )
    assert call(api, "POST", f"{RBAC}/clusterroles", body=role)[0] == 201  # the admin may


# ---------------------------------------------------------------- the Node authorizer


def test_a_node_reads_its_own_node_only(api):
    """node_authorizer.go authorizeNode (AuthorizeNodeWithSelectors, GA in 1.34)."""
    for name in ("n1", "n2"):
        api.put_object(f"/api/v1/nodes/{name}", {})
    token = api.node_token("n1")
    assert call(api, "GET", "/api/v1/nodes/n1", token)[0] == 200
    status, body = call(api, "GET", "/api/v1/nodes/n2", token)
    assert (status, body["message"]) == (
        403,
        'nodes "n2" is forbidden: User "system:node:n1" cannot get resource "nodes" in API '
        "group \"\" at the cluster scope: node 'n1' cannot read 'n2', only its own Node object",
    )
    status, body = call(api, "GET", "/api/v1/nodes", token)
    assert body["message"].endswith(": node 'n1' cannot read all nodes, only its own Node object")
    assert (
        call(api, "PATCH", "/api/v1/nodes/n1/status", token, {}, "application/merge-patch+json")[0]
        == 200
    )


def test_a_node_lists_only_the_pods_bound_to_it(api):
    """node_authorizer.go authorizePod: list/watch needs the spec.nodeName field selector."""
    token = api.node_token("n1")
    assert call(api, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", token)[0] == 200
    status, body = call(api, "GET", "/api/v1/pods", token)
    assert body["message"].endswith(": can only list/watch pods with spec.nodeName field selector")
    assert call(api, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn2", token)[0] == 403


def test_a_node_reads_the_secrets_and_volumes_of_its_own_pods_only(api):
    # node_authorizer.go authorizeReadNamespacedObject/authorizeGet over the graph of
    # graph_populator.go: pod -> secret, configmap, pvc -> pv.
    add_namespace(api, "a")
    for kind, name in (("secrets", "used"), ("secrets", "other"), ("configmaps", "conf")):
        api.put_object(f"/api/v1/namespaces/a/{kind}/{name}", {})
    api.put_object("/api/v1/persistentvolumes/pv-1", {"spec": {}})
    claim = {"volumeName": "pv-1", "accessModes": ["ReadWriteOnce"]}
    claim["resources"] = {"requests": {"storage": "1Gi"}}
    api.put_object("/api/v1/namespaces/a/persistentvolumeclaims/data", {"spec": claim})
    spec = {
        "nodeName": "n1",
        "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "conf"}}]}],
        "volumes": [
            {"name": "s", "secret": {"secretName": "used"}},
            {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
        ],
    }
    api.put_object("/api/v1/namespaces/a/pods/p", {"spec": spec})
    n1, n2 = api.node_token("n1"), api.node_token("n2")
    for path in (
        "/api/v1/namespaces/a/secrets/used",
        "/api/v1/namespaces/a/configmaps/conf",
        "/api/v1/namespaces/a/persistentvolumeclaims/data",
        "/api/v1/persistentvolumes/pv-1",
        "/api/v1/namespaces/a/pods/p",
    ):
        assert call(api, "GET", path, n1)[0] == 200, path
        status, body = call(api, "GET", path, n2)
        assert status == 403 and body["message"].endswith(
            ": no relationship found between node 'n2' and this object"
        ), path
    status, body = call(api, "GET", "/api/v1/namespaces/a/secrets/other", n1)
    assert body["message"].endswith(": no relationship found between node 'n1' and this object")
    status, body = call(api, "GET", "/api/v1/namespaces/a/secrets", n1)
    assert body["message"].endswith(": No Object name found")
    status, body = call(api, "DELETE", "/api/v1/namespaces/a/secrets/used", n1)
    assert body["message"].endswith(": can only read resources of this type")


def test_a_node_keeps_its_own_lease_in_kube_node_lease(api):
    """node_authorizer.go authorizeLease."""
    token = api.node_token("n1")
    lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "n1"}}
    assert call(api, "POST", lease, token, body)[0] == 201
    assert call(api, "GET", f"{lease}/n1", token)[0] == 200
    status, body = call(api, "GET", f"{lease}/n2", token)
    assert body["message"].endswith(
        ": can only access node lease with the same name as the requesting node"
    )


# ---------------------------------------------------------------- reviews


def test_subject_access_reviews_need_their_own_permission_and_a_subject(api):
    """pkg/registry/authorization/subjectaccessreview; authorization validation."""
    token = user_token(api, "dev")
    spec = {"user": "x", "resourceAttributes": {"verb": "get", "resource": "pods"}}
    status, body = call(api, "POST", SAR, token, {"spec": spec})
    assert (status, body["message"]) == (
        403,
        'subjectaccessreviews.authorization.k8s.io is forbidden: User "dev" cannot create '
        'resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope',
    )
    status, body = call(api, "POST", SAR, body={"spec": {"resourceAttributes": {"verb": "get"}}})
    assert (status, body["message"]) == (
        422,
        'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": '
        "at least one of user or group must be specified",
    )
    assert call(api, "GET", SSAR)[0] == 405


# ---------------------------------------------------------------- the grants confine


def test_a_consumer_grant_confines_the_consumer_to_what_it_asked_for(api):
    # The control plane's rbac.consumer_grant for efs-storage (its literals' rules): its
    # own namespace's Jobs, no other team's namespace, no Secrets, no new RBAC.
    add_namespace(api, "tensorflow")
    rules = [
        {
            "api-groups": ["batch"],
            "resources": ["jobs"],
            "verbs": ["get", "create", "patch", "delete"],
        }
    ]
    cluster = [{"api-groups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
    token = store_grant(
        api, consumer_grant("efs-storage", "efs-storage", rules, cluster), "efs-token"
    )
    template = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "mkdir", "image": "busybox:1.37", "command": ["true"]}],
        }
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "mkdir"},
        # as efs-storage's directory Jobs (gpu-k8s-consumer-terminating-pods-bounded)
        "spec": {"podReplacementPolicy": "Failed", "template": template},
    }
    with Kube.from_kubeconfig(api.kubeconfig(token), backoff=0.01) as kube:
        ours = {**job, "metadata": {**job["metadata"], "namespace": "efs-storage"}}
        assert kube.apply(ours, field_manager="efs-storage")
        assert kube.list("v1", "Node") == []
        for attempt in (
            lambda: kube.apply(
                {**job, "metadata": {"name": "mkdir", "namespace": "tensorflow"}},
                field_manager="efs-storage",
            ),
            lambda: kube.list("batch/v1", "Job", "tensorflow"),
            lambda: kube.get("v1", "Secret", "tensorflow-token", "tensorflow"),
            lambda: kube.list("v1", "Secret", "efs-storage"),
            lambda: kube.delete("v1", "Node", "n1"),
            lambda: kube.apply(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": "me-admin", "namespace": "efs-storage"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "cluster-admin",
                    },
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "name": "efs-storage",
                            "namespace": "efs-storage",
                        }
                    ],
                },
                field_manager="efs-storage",
            ),
        ):
            with pytest.raises(KubeError) as info:
                attempt()
            assert info.value.status == 403, info.value


def test_the_tensorflow_grant_reaches_no_other_team(api):
    # tensorflow's NAMESPACED_RULES hold in its namespace only: another team's JobSets,
    # pods and Secrets are refused, and it cannot write RBAC to widen its grant.
    rules = [
        {"api-groups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
        {
            "api-groups": [""],
            "resources": ["secrets"],
            "verbs": ["get", "create", "patch", "delete"],
        },
    ]
    token = store_grant(api, consumer_grant("team-a", "team-a", rules, []), "team-a-token")
    store_grant(api, consumer_grant("team-b", "team-b", rules, []), "team-b-token")
    assert allowed(api, token, verb="delete", resource="pods", namespace="team-a")
    for verb, resource in (("delete", "pods"), ("get", "secrets"), ("list", "pods")):
        assert not allowed(api, token, verb=verb, resource=resource, namespace="team-b")
    assert not allowed(api, token, verb="list", resource="pods")  # not across namespaces
    assert not allowed(
        api,
        token,
        verb="create",
        group="rbac.authorization.k8s.io",
        resource="rolebindings",
        namespace="team-a",
    )


def test_the_workers_grant_reads_no_secrets_and_runs_pods_only_in_its_namespace(api):
    """rbac.worker_grant(): nodes and evictions cluster-wide, pods only in gpu-k8s-system."""
    token = store_grant(api, worker_grant(), "worker-token")
    assert allowed(
        api, token, verb="create", resource="pods", subresource="eviction", namespace="a"
    )
    assert allowed(api, token, verb="create", resource="pods", namespace="gpu-k8s-system")
    assert not allowed(api, token, verb="create", resource="pods", namespace="default")
    assert not allowed(api, token, verb="get", resource="secrets", namespace="kube-system")
    assert not allowed(api, token, verb="delete", resource="nodes", name="n1")
