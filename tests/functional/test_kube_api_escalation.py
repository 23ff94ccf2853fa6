"""A hostile kube-api consumer tries every escalation path of Kubernetes' RBAC good practices.

Issue 29 item 1 (review S1). For each path (`tests/kube_api_escalations.py`):
- the control plane's policy (`kube_api.check_policy`, what `KubeApiProvider.requests()`
  answers) refuses the request with a message naming the path;
- the token the control plane hands out for what the consumer may have (its own namespace,
  the allowed cluster-wide reads), applied by the control plane's `rbac` module, is refused
  by the fake API server when it makes the request itself, as kube-apiserver's RBAC
  authorizer refuses it (403, or `allowed: false` for the verbs only a
  SelfSubjectAccessReview asks: escalate, bind, impersonate, approve).
Then the namespace: a consumer may not take a system namespace or another grant's, and the
control plane never applies its Namespace onto one it does not hold.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
import yaml
from charm_modules import load
from kube_api_escalations import (
    ADMISSION_ESCALATIONS,
    CONTROL_PLANE_NODE,
    ESCALATION_TARGETS,
    ESCALATIONS,
    HOSTILE,
    LARGEST,
    LEGITIMATE_CLUSTER_RULES,
    LEGITIMATE_RULES,
    MIRROR_ANNOTATION,
    RUNNER,
    Escalation,
    _restricted_pod,
)

from charms.gpu_k8s.v0.kube_api import (
    MAX_RULES,
    SYSTEM_NAMESPACES,
    RequirerAppData,
    Rule,
    check_policy,
    without_legacy_reads,
)
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes.csi_node import daemon_pod
from fakes.kube_apiserver import ADMIN_TOKEN, FakeKubeApiServer
from fakes.taint_eviction import default_tolerations, extended_resource_tolerations

SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
RBAC_V1 = "rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def rbac():
    """The control-plane charm's `rbac` module."""
    return load("kubernetes-control-plane", "rbac")


def _grant(rbac, app: str, namespace: str, rules: list[dict], cluster_rules: list[dict]):
    return rbac.consumer_grant(
        app,
        namespace,
        [Rule.model_validate(r) for r in rules],
        [Rule.model_validate(r) for r in cluster_rules],
    )


def call(api: FakeKubeApiServer, token: str, method: str, path: str, body=None, ctype=None):
    """One request over HTTP with `token`: (status, decoded body)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(api.url + path, data=data, method=method)
    request.add_header("Content-Type", ctype or "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text.decode()


@pytest.mark.parametrize("path", ESCALATIONS, ids=lambda e: e.id)
def test_policy_refuses_the_escalation_naming_it(path: Escalation):
    request = RequirerAppData.model_validate(path.databag())
    error = check_policy(request)
    assert error is not None, f"{path.id} was granted"
    assert path.names.lower() in error.lower(), error


def test_the_legitimate_request_passes_the_policy():
    request = RequirerAppData.model_validate(
        {
            "namespace": HOSTILE,
            "rules": LEGITIMATE_RULES,
            "cluster-rules": LEGITIMATE_CLUSTER_RULES,
        }
    )
    assert check_policy(request) is None


def _rbac_refused(status: int, answer) -> bool:
    """The answer is RBAC's 403 for the consumer's ServiceAccount (responsewriters.Forbidden)."""
    user = f"system:serviceaccount:{HOSTILE}:{HOSTILE}"
    return (
        status == 403
        and isinstance(answer, dict)
        and answer.get("reason") == "Forbidden"
        and f'User "{user}" cannot ' in answer.get("message", "")
    )


def _attempt(path: Escalation, kube_api: FakeKubeApiServer, token: str) -> tuple[int, object]:
    """Make `path`'s attempt with `token`: (status, answer), a review's `allowed` as a bool."""
    kube_api.put_object("/api/v1/nodes/node-1", {"metadata": {"labels": {}}})
    for where, obj in ESCALATION_TARGETS:
        kube_api.put_object(where, obj)
    attempt = path.attempt
    if attempt.review is not None:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attempt.review},
        }
        status, answer = call(kube_api, token, "POST", SSAR, body)
        assert status == 201, answer
        return status, answer["status"]["allowed"]
    return call(kube_api, token, attempt.method, attempt.path, attempt.body, attempt.content_type)


@pytest.mark.parametrize("path", ESCALATIONS, ids=lambda e: e.id)
def test_the_granted_token_is_refused_by_the_api_server(path: Escalation, rbac, kube, kube_api):
    grant = _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, LEGITIMATE_CLUSTER_RULES)
    status, answer = _attempt(path, kube_api, rbac.apply(kube, grant))
    if path.attempt.review is not None:
        assert answer is False
    else:
        assert _rbac_refused(status, answer), (status, answer)


@pytest.mark.parametrize("path", ESCALATIONS, ids=lambda e: e.id)
def test_each_attempt_passes_rbac_with_its_escalation_granted(
    path: Escalation, rbac, kube, kube_api
):
    """The positive control: each probe above can fail, its attempt being what it grants.

    The escalation's own rules are granted directly (check_policy, which refuses them, is
    not asked): RBAC must then let the attempt through (what answers after it, a 201, a
    404 for a kind this fake does not serve, is not RBAC's). Rules that grant nothing
    (`grants_nothing`: a Role naming a cluster-scoped resource) leave it refused.
    """
    grant = _grant(
        rbac,
        HOSTILE,
        HOSTILE,
        LEGITIMATE_RULES + path.rules,
        LEGITIMATE_CLUSTER_RULES + path.cluster_rules,
    )
    status, answer = _attempt(path, kube_api, rbac.apply(kube, grant))
    if path.attempt.review is not None:
        assert answer is True
    elif path.grants_nothing:
        assert _rbac_refused(status, answer), (status, answer)
    else:
        assert not _rbac_refused(status, answer) and status < 500, (status, answer)


def test_a_binding_puts_a_teams_pod_on_the_control_plane_node(rbac, kube, kube_api):
    """The fourth review's G1, as it was: a grant with `pods/binding` skips the scheduler.

    The team's pod, ungated (Kueue admitted it) and bound to no node (its schedulerName
    names no scheduler), is bound by the team itself to the control-plane node: kube-
    apiserver checks only that the pod is not being deleted, not bound and not gated.
    """
    (binding,) = [e for e in ESCALATIONS if e.id == "pods-binding"]
    grant = _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES + binding.rules, [])
    status, answer = _attempt(binding, kube_api, rbac.apply(kube, grant))
    assert status == 201, answer
    pod = kube_api.get_object(f"/api/v1/namespaces/{HOSTILE}/pods/web")
    assert pod["spec"]["nodeName"] == CONTROL_PLANE_NODE
    error = check_policy(RequirerAppData.model_validate(binding.databag()))
    assert error is not None and "pods/binding" in error


@pytest.fixture
def policies(kube):
    """The control plane's ValidatingAdmissionPolicies, applied as it applies them."""
    module = load("kubernetes-control-plane", "admission_policies")
    for obj in module.manifests():
        kube.apply(obj, field_manager="kubernetes-control-plane")
    return module


def _refused_by(answer: dict, policy: str) -> bool:
    return answer.get("reason") == "Forbidden" and (
        f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request"
        in answer.get("message", "")
    )


@pytest.mark.parametrize("path", ADMISSION_ESCALATIONS, ids=lambda e: e.id)
def test_the_granted_token_is_refused_by_the_admission_policies(
    path: Escalation, rbac, kube, kube_api, policies
):
    # a cluster bootstrapped before kubeadm's config enabled DenyServiceExternalIPs: each
    # refusal is the control plane's policies' own
    kube_api.deny_service_external_ips = False
    grant = _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, LEGITIMATE_CLUSTER_RULES)
    status, answer = _attempt(path, kube_api, rbac.apply(kube, grant))
    assert status == 403, (status, answer)
    assert _refused_by(answer, path.names), answer


@pytest.mark.parametrize("path", ADMISSION_ESCALATIONS, ids=lambda e: e.id)
def test_each_attempt_is_admitted_without_the_policies(path: Escalation, rbac, kube, kube_api):
    """The positive control: without the control plane's policies each attempt succeeds."""
    kube_api.deny_service_external_ips = False  # bootstrapped before kubeadm enabled it
    grant = _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, LEGITIMATE_CLUSTER_RULES)
    status, answer = _attempt(path, kube_api, rbac.apply(kube, grant))
    assert status == 201, (status, answer)


def test_the_control_planes_egress_policy_stands_against_its_consumer(
    rbac, kube, kube_api, policies
):
    """Issue 29: a team cannot reopen its nodes' ports (or the metadata service).

    The control plane's egress policy (network_policies.py) keeps every node's own
    listeners but the API server's (the DCGM exporter, the COS collector) and the instance
    metadata service from every pod of a consumer's namespace; the consumer's own token may
    neither change nor delete it, nor add an egress policy (additive: it would reopen
    them). Its own ingress policies (tensorflow's per job) are admitted as before, and the
    control plane (kubeadm's admin) still applies its own.
    """
    grant = _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, LEGITIMATE_CLUSTER_RULES)
    token = rbac.apply(kube, grant)
    netpol = load("kubernetes-control-plane", "network_policies")
    for obj in netpol.manifests([HOSTILE]):
        kube.apply(obj, field_manager="kubernetes-control-plane")
    base = f"/apis/networking.k8s.io/v1/namespaces/{HOSTILE}/networkpolicies"
    ours = f"{base}/{netpol.METADATA_NAME}"
    opened = {"spec": {"egress": [{}]}}
    merge = "application/merge-patch+json"
    for method, body, ctype in (("PATCH", opened, merge), ("DELETE", None, None)):
        status, answer = call(kube_api, token, method, ours, body, ctype)
        assert status == 403 and _refused_by(answer, policies.CONSUMER_EGRESS), answer
    ingress = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "job-a"},
        "spec": {
            "podSelector": {"matchLabels": {"job": "a"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"job": "a"}}}]}],
        },
    }
    status, answer = call(kube_api, token, "POST", base, ingress)
    assert status == 201, answer
    status, answer = call(kube_api, token, "DELETE", f"{base}/job-a")
    assert status == 200, answer
    for obj in netpol.manifests([HOSTILE]):  # the control plane's own writes pass
        kube.apply(
            {**obj, "metadata": {**obj["metadata"], "labels": {"seen": "yes"}}},
            field_manager="kubernetes-control-plane",
        )
    assert kube_api.get_object(ours)["spec"]["egress"][0]["ports"]


def _pod(name: str, spec: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_the_grant_still_makes_the_pods_secrets_and_tokens_it_needs(
    rbac, kube, kube_api, policies
):
    grant = _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, LEGITIMATE_CLUSTER_RULES)
    token = rbac.apply(kube, grant)  # the control plane's own TokenRequest of TOKEN_SECONDS
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    spec = {**ADMISSION_ESCALATIONS[1].attempt.body["spec"], "tolerations": [gpu]}
    del spec["nodeName"]
    pods = f"/api/v1/namespaces/{HOSTILE}/pods"
    status, answer = call(kube_api, token, "POST", pods, _pod("gpu", spec))
    assert status == 201, answer
    # tolerations may only be added to (ValidatePodUpdate): the old ones stay admitted
    patch = {"metadata": {"labels": {"seen": "yes"}}}
    merge = "application/merge-patch+json"
    status, answer = call(kube_api, token, "PATCH", f"{pods}/gpu", patch, merge)
    assert status == 200, answer
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "pull"},
        "data": {".dockerconfigjson": "e30="},
    }
    status, answer = call(kube_api, token, "POST", f"/api/v1/namespaces/{HOSTILE}/secrets", secret)
    assert status == 201, answer
    # tokens of the namespace's other accounts (the pods' own), as long as the grant's own
    kube_api.put_object(f"/api/v1/namespaces/{HOSTILE}/serviceaccounts/{RUNNER}", {})
    path = f"/api/v1/namespaces/{HOSTILE}/serviceaccounts/{RUNNER}/token"
    for spec in ({"expirationSeconds": rbac.TOKEN_SECONDS}, {}):  # {}: 3600 s by default
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        status, answer = call(kube_api, token, "POST", path, request)
        assert status == 201, answer
    request["spec"] = {"expirationSeconds": rbac.TOKEN_SECONDS + 1}
    status, answer = call(kube_api, token, "POST", path, request)
    assert status == 403 and _refused_by(answer, policies.CONSUMER_TOKENS), answer
    assert f"at most {rbac.TOKEN_SECONDS} s" in answer["message"]


def test_only_the_control_plane_renews_the_grants_own_token(rbac, kube, kube_api, policies):
    """The fourth review's G3: a stolen kubeconfig cannot renew itself.

    The grant's token asks a new token of its own account (even a short one) and is
    refused naming the account; the control plane, kubeadm's admin, still renews it.
    """
    grant = _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, LEGITIMATE_CLUSTER_RULES)
    token = rbac.apply(kube, grant)  # the control plane's TokenRequest, admitted
    path = f"/api/v1/namespaces/{HOSTILE}/serviceaccounts/{HOSTILE}/token"
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    status, answer = call(kube_api, token, "POST", path, request)
    assert status == 403 and _refused_by(answer, policies.CONSUMER_TOKENS), answer
    assert answer["message"].startswith(f'serviceaccounts "{HOSTILE}" is forbidden'), answer
    assert "serviceaccounts/token of the consumer's own ServiceAccount" in answer["message"]
    renewed = rbac.request_token(kube, grant, rbac.TOKEN_SECONDS)
    assert call(kube_api, renewed.token, "GET", "/api/v1/nodes")[0] == 200


def test_a_teams_pod_runs_at_the_priority_of_every_teams_pods(rbac, kube, kube_api, policies):
    """Issue 29: no pod of a team's namespace outranks the other teams' training pods.

    kube-scheduler preempts lower priorities for a pending pod, so a priority of its own
    would let a team's bare pod evict other teams' admitted jobs from their GPUs. The
    Priority plugin (the fake's kube_priority.py, as kube-apiserver's) refuses a priority
    the pod states itself; the policy refuses any class, a system one (the
    ADMISSION_ESCALATIONS probe) or one an operator made for other uses.
    """
    token = rbac.apply(kube, _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, []))
    pods = f"/api/v1/namespaces/{HOSTILE}/pods"
    status, answer = call(kube_api, token, "POST", pods, _restricted_pod(priority=1000000))
    assert status == 403, answer
    assert "the integer value of priority (1000000) must not be provided" in answer["message"]
    operators = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "inference-first"},
        "value": 1000000,
    }
    kube.create(operators)  # kubeadm's admin: not a team
    body = _restricted_pod(priorityClassName="inference-first")
    status, answer = call(kube_api, token, "POST", pods, body)
    assert status == 403 and _refused_by(answer, policies.CONSUMER_PODS), answer
    status, answer = call(kube_api, token, "POST", pods, _restricted_pod())
    assert status == 201, answer
    assert answer["spec"]["priority"] == 0


def test_the_namespace_is_fenced_whoever_makes_the_pod(rbac, kube, kube_api, policies):
    """The Job, ReplicaSet and JobSet controllers create a consumer's pods, not the consumer.

    kube-controller-manager runs each controller as its own ServiceAccount in kube-system
    (kubeadm sets --use-service-account-credentials=true, cmd/kubeadm/app/phases/
    controlplane/manifests.go), so the policy matches the pod's namespace, not who asks:
    even the cluster admin is refused there, and is not fenced elsewhere.
    """
    rbac.apply(kube, _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, []))
    bound = ADMISSION_ESCALATIONS[0].attempt.body
    status, answer = call(
        kube_api, ADMIN_TOKEN, "POST", f"/api/v1/namespaces/{HOSTILE}/pods", bound
    )
    assert status == 403 and _refused_by(answer, ADMISSION_ESCALATIONS[0].names), answer
    status, answer = call(
        kube_api, ADMIN_TOKEN, "POST", "/api/v1/namespaces/kube-system/pods", bound
    )
    assert status == 201, answer
    assert answer["spec"]["nodeName"] == CONTROL_PLANE_NODE


def test_the_charms_own_pods_are_admitted_in_a_consumer_namespace(rbac, kube, kube_api, policies):
    """The charms' pods in consumers' namespaces, with the tolerations they get on the way.

    The tensorflow charm's training, TensorBoard, serving, purge and one-shot (import,
    export) pods and efs-storage's directory Job's, each as its template is made, with the
    tolerations of the ResourceFlavors Kueue assigns merged in (Kueue v0.19.2 pkg/podset/
    podset.go FromAssignment, Merge: none, the control plane's flavors carry nodeTaints
    only) and those kube-apiserver's mutating admission plugins add before the policies
    run (ExtendedResourceToleration, DefaultTolerationSeconds: fakes/taint_eviction.py).
    """
    kube_api.mutators += [extended_resource_tolerations, default_tolerations]
    namespace = "training"
    rbac.apply(kube, _grant(rbac, "tensorflow", namespace, LEGITIMATE_RULES, []))
    manifests = load("tensorflow", "manifests")
    params = load("tensorflow", "params")
    serving = load("tensorflow", "serving")
    oneshot = load("tensorflow", "oneshot")
    ctx = manifests.Context(
        namespace=namespace, app="tensorflow", claim="c", default_image="i", tensorboard_image="t"
    )
    templates = []
    for request in (
        params.TrainRequest(job="g", workers=2, gpus_per_worker=1),
        params.TrainRequest(job="p", strategy="ps", workers=1, ps=1),
    ):
        jobset = manifests.jobset(request, ctx)
        templates += [
            rj["template"]["spec"]["template"] for rj in jobset["spec"]["replicatedJobs"]
        ]
        templates += [
            o["spec"]["template"]
            for o in manifests.tensorboard(request, ctx)
            if o["kind"] == "Deployment"
        ]
    templates.append(manifests.purge_job("g", ctx)["spec"]["template"])
    container = {"name": "import", "image": "i", "command": ["true"]}
    one = oneshot.manifest("import-g", ctx, {}, container, [], backoff_limit=0, ttl_seconds=60)
    templates.append(one["spec"]["template"])  # every import's and export's pod
    deployments = serving.manifests(serving.ServeParams(job="g", gpus=1), ctx, "serving")
    templates += [o["spec"]["template"] for o in deployments if o["kind"] == "Deployment"]
    assert any(t["spec"].get("tolerations") for t in templates)
    kueue = load("kubernetes-control-plane", "kueue")
    flavors = [o for o in kueue.cluster_objects(["A10G"]) if o["kind"] == "ResourceFlavor"]
    assert len(flavors) == 2 and not any(f["spec"].get("tolerations") for f in flavors)
    made = []
    for index, template in enumerate(templates):
        spec = dict(template["spec"])
        tolerations = list(spec.get("tolerations") or [])
        for flavor in flavors:  # Merge: those not there yet, appended
            tolerations += [
                t for t in flavor["spec"].get("tolerations") or [] if t not in tolerations
            ]
        spec["tolerations"] = tolerations
        path = f"/api/v1/namespaces/{namespace}/pods"
        status, answer = call(kube_api, ADMIN_TOKEN, "POST", path, _pod(f"p{index}", spec))
        assert status == 201, (template, answer)
        made.append(answer["spec"]["tolerations"])
    lost = {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    assert all({"key": "node.kubernetes.io/not-ready", **lost} in t for t in made)
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert any(gpu in t for t in made)  # ExtendedResourceToleration's, for a GPU pod

    efs = "efs-storage"  # a storage provisioner's namespace (Pod Security baseline)
    rules = [Rule.model_validate(r) for r in LEGITIMATE_RULES]
    rbac.apply(kube, rbac.consumer_grant(efs, efs, rules, [], provisioner=True))
    assert (
        "gpu-k8s.io/consumer"
        in kube_api.get_object(f"/api/v1/namespaces/{efs}")["metadata"]["labels"]
    )
    owner = load(efs, "claims").Owner(efs, "0b9a4e1c-5f0a-4c5e-8a5f-2d7f1f3b7c11")
    fs = "fs-0123456789abcdef0"
    served = {"consumer": "tensorflow", "namespace": namespace, "directory": "tensorflow"}
    where = {"server": f"{fs}.efs.us-east-1.amazonaws.com", "path": "/", "file_system_id": fs}
    claim = load(efs, "storage").claim_spec(owner, capacity="1Ti", **served, **where)
    job = load(efs, "directories").job_manifest(owner, claim, namespace=efs, image="busybox")
    pod = _pod("directory", job["spec"]["template"]["spec"])
    status, answer = call(kube_api, ADMIN_TOKEN, "POST", f"/api/v1/namespaces/{efs}/pods", pod)
    assert status == 201, answer


def test_a_teams_pod_tolerates_only_the_gpu_taint_and_a_lost_node_for_minutes(
    rbac, kube, kube_api, policies
):
    """The fifth review's G6: a team's tolerations are an allow-list.

    Allowed: the GPU nodes' taint in any form, and node.kubernetes.io/not-ready and
    /unreachable with effect NoExecute for at most 300 s (what DefaultTolerationSeconds
    gives every pod). Every other taint the charms, Kubernetes, JobSet or an operator put on
    nodes is refused, on create and when an update adds it or changes an allowed one, with
    a message naming the allowed set; tolerations a pod already had stay.
    """
    token = rbac.apply(kube, _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, []))
    pods = f"/api/v1/namespaces/{HOSTILE}/pods"
    allowed = [
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 0,
        },
    ]
    status, answer = call(kube_api, token, "POST", pods, _restricted_pod(tolerations=allowed))
    assert status == 201, answer
    refused = [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},  # cordons
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 301,
        },
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},  # NoSchedule too
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists"},
        {"key": "node.kubernetes.io/network-unavailable", "operator": "Exists"},
        {"key": "node.kubernetes.io/out-of-service", "operator": "Exists"},
        {"key": "efs.csi.aws.com/agent-not-ready", "operator": "Exists"},  # efs_csi's
        {"key": "alpha.jobset.sigs.k8s.io/no-schedule", "operator": "Exists"},  # JobSet's
        {"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"},
    ]
    for index, toleration in enumerate(refused):
        body = _restricted_pod(tolerations=[*allowed, toleration])
        body["metadata"]["name"] = f"refused-{index}"
        status, answer = call(kube_api, token, "POST", pods, body)
        assert status == 403 and _refused_by(answer, policies.CONSUMER_PODS), (toleration, answer)
        assert "tolerates only the GPU nodes' taint (nvidia.com/gpu)" in answer["message"]
        assert "tolerationSeconds at most 300" in answer["message"]
    merge = "application/merge-patch+json"
    # an update that adds a refused toleration, or changes an allowed one into one (an
    # update may change an existing toleration's tolerationSeconds: ValidatePodUpdate)
    forever = {k: v for k, v in allowed[2].items() if k != "tolerationSeconds"}
    for tolerations in ([*allowed, refused[0]], [*allowed[:2], forever, allowed[3]]):
        patch = {"spec": {"tolerations": tolerations}}
        status, answer = call(kube_api, token, "PATCH", f"{pods}/escape", patch, merge)
        assert status == 403 and _refused_by(answer, policies.CONSUMER_PODS), answer
    shorter = [*allowed[:2], {**allowed[2], "tolerationSeconds": 60}, allowed[3]]
    status, answer = call(
        kube_api, token, "PATCH", f"{pods}/escape", {"spec": {"tolerations": shorter}}, merge
    )
    assert status == 200, answer
    # a pod stored before this policy keeps what it tolerated through its updates
    old = _restricted_pod(tolerations=[refused[0]])
    old["metadata"]["name"] = "older"
    kube_api.put_object(f"{pods}/older", old)
    labelled = {"metadata": {"labels": {"seen": "yes"}}}
    status, answer = call(kube_api, token, "PATCH", f"{pods}/older", labelled, merge)
    assert status == 200, answer


def test_a_daemonsets_pods_are_refused_in_a_consumer_namespace(rbac, kube, kube_api, policies):
    """G6: a DaemonSet in a team's namespace gets no pod, whoever made the DaemonSet.

    Its controller (kube-system:daemon-set-controller) gives each pod tolerations of
    cordons and of a lost node for ever (fakes/csi_node.py D2), and drains leave its pods
    (lib drain.py): a team's GPU DaemonSet kept a node's GPUs through a GPU reset and a
    driver upgrade. No grant holds daemonsets writes (lib kube_api); an operator's
    DaemonSet made there is refused its pods too, and runs in a namespace of its own.
    """
    rbac.apply(kube, _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, []))
    account = "system:serviceaccount:kube-system:daemon-set-controller"
    kube_api.add_token("daemon-set-controller-token", account, ("system:masters",))
    (path,) = [e for e in ESCALATIONS if e.id == "own-namespace-daemonsets"]
    kube_api.put_object("/api/v1/namespaces/operator", {})
    for namespace, expected in ((HOSTILE, 403), ("operator", 201)):
        base = f"/apis/apps/v1/namespaces/{namespace}/daemonsets"
        status, daemonset = call(kube_api, ADMIN_TOKEN, "POST", base, path.attempt.body)
        assert status == 201, daemonset
        pod = daemon_pod(daemonset, "node-1")
        status, answer = call(
            kube_api,
            "daemon-set-controller-token",
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            pod,
        )
        assert status == expected, answer
        if expected == 403:
            assert _refused_by(answer, policies.CONSUMER_PODS), answer
            assert "a cordon's (node.kubernetes.io/unschedulable)" in answer["message"]
            # the same pod without the controller's tolerations would have been admitted
            plain = {
                **pod,
                "spec": {
                    **pod["spec"],
                    "tolerations": path.attempt.body["spec"]["template"]["spec"]["tolerations"],
                },
            }
            status, answer = call(
                kube_api,
                "daemon-set-controller-token",
                "POST",
                f"/api/v1/namespaces/{namespace}/pods",
                plain,
            )
            assert status == 201, answer


def test_no_team_pod_tolerates_the_gpu_quarantine_and_the_gpu_daemonsets_still_do(
    rbac, kube, kube_api, policies
):
    """Issue 32: a team's pod may not stay on a quarantined GPU node; NVIDIA's pods do.

    The quarantine's NoExecute taint (lib kubernetes_cluster.QUARANTINE_TAINT) deletes
    every pod that does not tolerate it (the taint manager, fakes/taint_eviction.py): a
    toleration of it, however spelled, is refused in a consumer's namespace on create and
    on update (the ADMISSION_ESCALATIONS probe is the bare create), whoever makes the pod.
    The DCGM exporter and the MIG manager tolerate it on purpose (dcgm_exporter.
    QUARANTINE_TOLERATION: the bad GPU's counters are what the operator wants to see) and
    run in their own namespace: admitted as the DaemonSet controller makes them.
    """
    token = rbac.apply(kube, _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, []))
    pods = f"/api/v1/namespaces/{HOSTILE}/pods"
    quarantine = {"key": "gpu-k8s.io/gpu-unhealthy"}
    for toleration in (
        {**quarantine, "operator": "Exists"},  # every effect
        {**quarantine, "operator": "Equal", "value": "", "effect": "NoExecute"},
        {**quarantine, "operator": "Exists", "tolerationSeconds": 3600},
    ):
        body = _restricted_pod(tolerations=[toleration])
        status, answer = call(kube_api, token, "POST", pods, body)
        assert status == 403 and _refused_by(answer, policies.CONSUMER_PODS), answer
        assert "the GPU quarantine's" in answer["message"]
    status, answer = call(kube_api, token, "POST", pods, _restricted_pod())
    assert status == 201, answer
    added = {"spec": {"tolerations": [{**quarantine, "operator": "Exists"}]}}
    merge = "application/merge-patch+json"
    status, answer = call(kube_api, token, "PATCH", f"{pods}/escape", added, merge)
    assert status == 403 and _refused_by(answer, policies.CONSUMER_PODS), answer

    device_plugin = load("kubernetes-control-plane", "device_plugin")
    kube.apply(device_plugin.namespace(), field_manager="kubernetes-control-plane")
    made = [
        *load("kubernetes-control-plane", "dcgm_exporter").manifests(),
        *load("kubernetes-control-plane", "mig_manager").manifests([]),
    ]
    daemonsets = [o for o in made if o["kind"] == "DaemonSet"]
    assert len(daemonsets) == 2
    for ds in daemonsets:
        spec = ds["spec"]["template"]["spec"]
        assert {**quarantine, "operator": "Exists", "effect": "NoExecute"} in spec["tolerations"]
        path = f"/api/v1/namespaces/{ds['metadata']['namespace']}/pods"
        status, answer = call(
            kube_api, ADMIN_TOKEN, "POST", path, _pod(ds["metadata"]["name"], spec)
        )
        assert status == 201, answer


def test_the_granted_token_works_in_its_own_namespace(rbac, kube, kube_api):
    grant = _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, LEGITIMATE_CLUSTER_RULES)
    token = rbac.apply(kube, grant)
    container = {"name": "c", "image": "busybox"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mine"},
        "spec": {"containers": [container]},
    }
    # its namespace enforces Pod Security restricted: a pod that breaks it is refused...
    status, answer = call(kube_api, token, "POST", f"/api/v1/namespaces/{HOSTILE}/pods", pod)
    assert (status, answer["reason"]) == (403, "Forbidden"), answer
    assert 'violates PodSecurity "restricted:v1.36"' in answer["message"]
    # ...one that meets it is made
    pod["spec"]["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    status, answer = call(kube_api, token, "POST", f"/api/v1/namespaces/{HOSTILE}/pods", pod)
    assert status == 201, answer
    assert call(kube_api, token, "GET", "/api/v1/nodes")[0] == 200


def test_control_plane_namespaces_are_system_namespaces():
    literals = load("kubernetes-control-plane", "literals")
    owned = {
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "default",
        literals.GPU_VALIDATION_NAMESPACE,
        literals.WORKER_NAMESPACE,
        literals.JOBSET.namespace,
        literals.KUEUE.namespace,
        literals.CALICO_RELEASE.namespace,  # the manifest install's, kube-system
    }
    for module in ("device_plugin", "kube_state_metrics", "mig_manager"):
        owned.add(load("kubernetes-control-plane", module).NAMESPACE)
    manifest = load("kubernetes-control-plane", "flannel").MANIFEST.read_text()
    owned |= {
        doc["metadata"]["name"]
        for doc in yaml.safe_load_all(manifest)
        if doc and doc["kind"] == "Namespace"
    }
    assert owned <= SYSTEM_NAMESPACES


@pytest.mark.parametrize("namespace", sorted(SYSTEM_NAMESPACES))
def test_policy_refuses_system_namespaces(namespace: str):
    error = check_policy(RequirerAppData.model_validate({"namespace": namespace}))
    assert error is not None and f"namespace {namespace}" in error


def test_namespace_held_by_another_grant_is_never_applied_onto(rbac, kube, kube_api):
    first = _grant(rbac, "team-a", "shared", LEGITIMATE_RULES, [])
    rbac.apply(kube, first)
    second = _grant(rbac, "team-b", "shared", LEGITIMATE_RULES, [])

    with pytest.raises(rbac.NamespaceTakenError, match="team-a"):
        rbac.apply(kube, second)

    ns = kube_api.get_object("/api/v1/namespaces/shared")
    assert ns["metadata"]["labels"]["gpu-k8s.io/consumer"] == "team-a"
    assert kube_api.get_object("/api/v1/namespaces/shared/serviceaccounts/team-b") is None
    path = "/apis/rbac.authorization.k8s.io/v1/namespaces/shared/roles/gpu-k8s-team-b"
    assert kube_api.get_object(path) is None


def test_namespace_the_system_or_an_operator_made_is_never_applied_onto(rbac, kube, kube_api):
    kube_api.put_object(
        "/api/v1/namespaces/payroll",
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    with pytest.raises(rbac.NamespaceTakenError, match="payroll"):
        rbac.apply(kube, _grant(rbac, "intruder", "payroll", LEGITIMATE_RULES, []))
    labels = kube_api.get_object("/api/v1/namespaces/payroll")["metadata"]["labels"]
    assert "gpu-k8s.io/consumer" not in labels


def test_a_team_cannot_fill_the_store_past_its_object_counts(rbac, kube, kube_api, policies):
    """Review43 G4: the team's token makes N ConfigMaps of its namespace's count, not N + 1.

    The control plane's ResourceQuota (team_quota.py, applied as addons applies it) bounds
    every kind a grant may create there; the fake enforces its counts as kube-apiserver's
    ResourceQuota plugin does (fakes/kube_quota.py). The team can neither raise nor delete
    it, and deleting one of its objects frees a count.
    """
    team_quota = load("kubernetes-control-plane", "team_quota")
    token = rbac.apply(kube, _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, []))
    kube.apply(
        team_quota.manifest(HOSTILE, team_quota.COUNTS), field_manager="kubernetes-control-plane"
    )
    limit = team_quota.COUNTS["configmaps"]
    configmaps = f"/api/v1/namespaces/{HOSTILE}/configmaps"
    for i in range(limit):
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}"}}
        status, answer = call(kube_api, token, "POST", configmaps, body)
        assert status == 201, (i, answer)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one-more"}}
    status, answer = call(kube_api, token, "POST", configmaps, body)
    assert (status, answer["reason"]) == (403, "Forbidden"), answer
    assert answer["message"] == (
        f'configmaps "one-more" is forbidden: exceeded quota: {team_quota.NAME}, requested:'
        f" configmaps=1, used: configmaps={limit}, limited: configmaps={limit}"
    )
    quota = f"/api/v1/namespaces/{HOSTILE}/resourcequotas/{team_quota.NAME}"
    raised = {"spec": {"hard": {"configmaps": "1000000"}}}
    merge = "application/merge-patch+json"
    for method, patch, ctype in (("PATCH", raised, merge), ("DELETE", None, None)):
        status, answer = call(kube_api, token, method, quota, patch, ctype)
        assert status == 403 and "resourcequotas" in answer["message"], answer
    assert kube.delete("v1", "ConfigMap", "c0", HOSTILE)
    assert call(kube_api, token, "POST", configmaps, body)[0] == 201


def test_a_team_opens_no_node_port_and_no_load_balancer(rbac, kube, kube_api, policies):
    """A team's Services stay inside the cluster: no node port, no cloud load balancer.

    A NodePort (or LoadBalancer) Service opens its port on every node, the control plane's
    included, from the one range all teams share (30000-32767): a team could take the range
    or reach its pods past the model's security group. No charm makes one, so the counts
    `services.nodeports` and `services.loadbalancers` are 0 (team_quota.COUNTS), on create
    and on an update that changes the type (the ResourceQuota plugin handles both).
    """
    team_quota = load("kubernetes-control-plane", "team_quota")
    token = rbac.apply(kube, _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, []))
    kube.apply(
        team_quota.manifest(HOSTILE, team_quota.COUNTS), field_manager="kubernetes-control-plane"
    )
    services = f"/api/v1/namespaces/{HOSTILE}/services"

    def service(name: str, **spec) -> dict:
        ports = [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {"ports": ports, "selector": {"app": "web"}, **spec},
        }

    for kind, used in (
        ("NodePort", "services.nodeports=2"),
        ("LoadBalancer", "services.loadbalancers=1,services.nodeports=2"),
    ):
        status, answer = call(kube_api, token, "POST", services, service("open", type=kind))
        assert status == 403, answer
        assert f"exceeded quota: {team_quota.NAME}, requested: {used}" in answer["message"]
    assert call(kube_api, token, "POST", services, service("web"))[0] == 201  # ClusterIP
    merge = "application/merge-patch+json"
    opened = {"spec": {"type": "NodePort"}}
    status, answer = call(kube_api, token, "PATCH", f"{services}/web", opened, merge)
    assert status == 403 and "requested: services.nodeports=2" in answer["message"], answer
    renamed = {"metadata": {"labels": {"tier": "web"}}}  # an update adding no port passes
    assert call(kube_api, token, "PATCH", f"{services}/web", renamed, merge)[0] == 200


def test_a_teams_service_gains_no_external_ip_on_update(rbac, kube, kube_api, policies):
    """Review43 G5: the policy refuses what DenyServiceExternalIPs would, without it.

    On a cluster bootstrapped before kubeadm's config enabled the plugin: a team's Service
    may not be given an external IP by an update either, one it had before may stay, and
    namespaces that are no consumer's are not fenced.
    """
    kube_api.deny_service_external_ips = False
    token = rbac.apply(kube, _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, []))
    services = f"/api/v1/namespaces/{HOSTILE}/services"
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}},
    }
    assert call(kube_api, token, "POST", services, service)[0] == 201
    merge = "application/merge-patch+json"
    added = {"spec": {"externalIPs": ["10.0.0.10"]}}
    status, answer = call(kube_api, token, "PATCH", f"{services}/web", added, merge)
    assert status == 403 and _refused_by(answer, policies.CONSUMER_SERVICES), answer
    # stored before the policy (put_object: the cluster's own write): it may keep them
    kept = {**service, "metadata": {"name": "old"}}
    kept["spec"] = {**service["spec"], "externalIPs": ["192.0.2.1", "192.0.2.2"]}
    kube_api.put_object(f"{services}/old", kept)
    fewer = {"spec": {"externalIPs": ["192.0.2.1"]}, "metadata": {"labels": {"seen": "yes"}}}
    assert call(kube_api, token, "PATCH", f"{services}/old", fewer, merge)[0] == 200
    more = {"spec": {"externalIPs": ["192.0.2.1", "192.0.2.3"]}}
    status, answer = call(kube_api, token, "PATCH", f"{services}/old", more, merge)
    assert status == 403 and _refused_by(answer, policies.CONSUMER_SERVICES), answer
    elsewhere = {**kept, "metadata": {"name": "lb"}}
    status, answer = call(
        kube_api, ADMIN_TOKEN, "POST", "/api/v1/namespaces/kube-system/services", elsewhere
    )
    assert status == 201, answer


def test_a_team_makes_no_mirror_pod_another_way(rbac, kube, kube_api, policies):
    """A mirror pod needs its node named (refused: the probe above) and is never made later.

    kube-apiserver's pod validation (tests/fakes/kube_pod_annotations.py) refuses the
    annotation without spec.nodeName, and an update that adds it, whoever asks: so the
    drain's skipping of mirror pods (lib drain.py `stays`) never keeps a team's pod on a node.
    """
    token = rbac.apply(kube, _grant(rbac, HOSTILE, HOSTILE, LEGITIMATE_RULES, []))
    pods = f"/api/v1/namespaces/{HOSTILE}/pods"
    mirror = {
        **_restricted_pod(),
        "metadata": {"name": "m", "annotations": {MIRROR_ANNOTATION: "x"}},
    }
    status, answer = call(kube_api, token, "POST", pods, mirror)
    assert status == 422, answer
    assert "must set spec.nodeName if mirror pod annotation is set" in answer["message"]
    plain = {**_restricted_pod(), "metadata": {"name": "p"}}
    assert call(kube_api, token, "POST", pods, plain)[0] == 201, "the team may make pods"
    added = {"metadata": {"annotations": {MIRROR_ANNOTATION: "x"}}}
    merge = "application/merge-patch+json"
    status, answer = call(kube_api, token, "PATCH", f"{pods}/p", added, merge)
    assert status == 422, answer
    assert "Forbidden: may not add mirror pod annotation" in answer["message"]


# review44a G1: the library's bounds keep every request within what the API server stores


def test_the_largest_request_within_the_bounds_is_granted_by_the_api_server(rbac, kube, kube_api):
    request = RequirerAppData.model_validate({"namespace": HOSTILE, **LARGEST})
    assert check_policy(request) is None
    grant = rbac.consumer_grant(HOSTILE, HOSTILE, request.rules, request.cluster_rules)
    token = rbac.apply(kube, grant)
    role = kube.get(RBAC_V1, "Role", f"gpu-k8s-{HOSTILE}", HOSTILE)
    cluster_role = kube.get(RBAC_V1, "ClusterRole", f"gpu-k8s-{HOSTILE}")
    assert len(role["rules"]) == len(cluster_role["rules"]) == MAX_RULES
    name = role["rules"][0]["resourceNames"][0]
    kube_api.put_object(f"/api/v1/namespaces/{HOSTILE}/configmaps/{name}", {"data": {}})
    status, _ = call(kube_api, token, "GET", f"/api/v1/namespaces/{HOSTILE}/configmaps/{name}")
    assert status == 200


@pytest.mark.parametrize(
    ("count", "status", "message"),
    [
        (40, 413, "Request entity too large: limit is 3145728"),
        (20, 500, "etcdserver: request is too large"),
    ],
)
def test_without_the_bounds_a_big_role_is_refused_by_the_api_server(
    rbac, kube_api, count, status, message
):
    """The positive control: what the bounds keep out, kube-apiserver and etcd refuse.

    `count` rules naming a 100,000-character object each (MAX_WORD is 253), made without
    the library's checks: a 4 MB Role (413) and a 2 MB one (etcd's 500).
    """
    name = "n" * 100_000
    big = Rule.model_construct(
        api_groups=[""], resources=["configmaps"], verbs=["get"], resource_names=[name]
    )
    grant = rbac.consumer_grant(HOSTILE, HOSTILE, [big] * count, [])
    with Kube.from_kubeconfig(kube_api.kubeconfig(token=ADMIN_TOKEN), retries=0) as kube:
        with pytest.raises(KubeError) as refused:
            rbac.apply(kube, grant)
        assert (refused.value.status, refused.value.message) == (status, message)
        assert kube.get(RBAC_V1, "Role", f"gpu-k8s-{HOSTILE}", HOSTILE) is None


# -- A storage provisioner's pod reads (review44a G8) ---------------------------------------

PROVISIONER = ("efs-storage", "efs-storage")  # its namespace and ServiceAccount


def _provisioner_grant(rbac, cluster_rules: list[dict]):
    efs = load("efs-storage", "literals")
    return rbac.consumer_grant(
        PROVISIONER[1],
        PROVISIONER[0],
        [Rule.model_validate(r) for r in efs.NAMESPACED_RULES],
        [Rule.model_validate(r) for r in cluster_rules],
        provisioner=True,
    )


def _pods_refused(status: int, answer) -> bool:
    user = f"system:serviceaccount:{PROVISIONER[0]}:{PROVISIONER[1]}"
    return status == 403 and f'User "{user}" cannot ' in (answer or {}).get("message", "")


def test_a_provisioner_may_not_ask_to_read_pods_cluster_wide():
    """Each team's pod specs (env values, command lines) are its own (review44a G8).

    efs-storage of today asks for no cluster-wide pod reads, an older one's rule is left out
    of its grant, and anyone else's is refused.
    """
    efs = load("efs-storage", "literals")
    pods = {"api-groups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
    assert pods not in efs.CLUSTER_RULES
    older = RequirerAppData.model_validate(
        {"namespace": "efs-storage", "cluster-rules": [*efs.CLUSTER_RULES, pods]}
    )
    error = check_policy(older, provisioner=True)
    assert error is not None and "get, list on pods is not on the cluster-wide" in error
    assert check_policy(without_legacy_reads(older), provisioner=True) is None
    assert without_legacy_reads(older).cluster_rules == [
        Rule.model_validate(r) for r in efs.CLUSTER_RULES
    ]
    # only reads of pods alone are left out: a write, or another resource with them, is not
    for rule in (
        {**pods, "verbs": ["get", "delete"]},
        {**pods, "resources": ["pods", "secrets"]},
        {**pods, "resources": ["pods/log"]},
    ):
        asked = RequirerAppData.model_validate(
            {"namespace": "efs-storage", "cluster-rules": [rule]}
        )
        assert check_policy(without_legacy_reads(asked), provisioner=True) is not None, rule


def test_a_provisioner_lists_pods_only_in_the_namespaces_it_serves(rbac, kube, kube_api):
    token = rbac.apply(
        kube, _provisioner_grant(rbac, load("efs-storage", "literals").CLUSTER_RULES)
    )
    for team in ("team-a", "team-b"):
        kube_api.put_object(f"/api/v1/namespaces/{team}", {"metadata": {"name": team}})
        pod = {**_restricted_pod(), "metadata": {"name": "p", "namespace": team}}
        kube_api.put_object(f"/api/v1/namespaces/{team}/pods/p", pod)
    where = {
        "team-a": "/api/v1/namespaces/team-a/pods",
        "team-b": "/api/v1/namespaces/team-b/pods",
        "cluster": "/api/v1/pods",
    }
    for path in where.values():  # the probe: serving nobody, it reads no team's pods
        assert _pods_refused(*call(kube_api, token, "GET", path)), path
    served = rbac.provisioner_pods_manifests(PROVISIONER, "team-a")
    for manifest in served:  # the control plane serves it team-a (addons)
        kube.apply(manifest, field_manager="kubernetes-control-plane")
    status, answer = call(kube_api, token, "GET", where["team-a"])
    assert status == 200 and [p["metadata"]["name"] for p in answer["items"]] == ["p"]
    assert _pods_refused(*call(kube_api, token, "GET", where["team-b"]))
    assert _pods_refused(*call(kube_api, token, "GET", where["cluster"]))
    # list only: no pod by name, no watch, no write there
    assert _pods_refused(*call(kube_api, token, "GET", f"{where['team-a']}/p"))
    assert _pods_refused(*call(kube_api, token, "GET", f"{where['team-a']}?watch=true"))
    assert _pods_refused(*call(kube_api, token, "DELETE", f"{where['team-a']}/p"))
