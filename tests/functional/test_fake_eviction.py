"""The fake API server evicts as kube-apiserver 1.36 does (`pods/eviction`).

kubernetes pkg/registry/core/pod/storage/eviction.go (EvictionREST.Create,
addConditionAndDeletePod, canIgnorePDB, checkAndDecrement) behind the create handler
(k8s.io/apiserver pkg/endpoints/handlers/create.go): the Eviction is admitted as the object
of a CREATE of `pods/eviction` (its kind policy/v1 Eviction), the pod gets the
DisruptionTarget condition before it is deleted, the Eviction's deleteOptions' preconditions
hold, and a PodDisruptionBudget is read and decremented as the eviction handler reads it.
Each test sends the Eviction through the real `kubernetes` client's CoreV1Api
(create_namespaced_pod_eviction) as the cluster admin, so that what refuses it is the
eviction handler or admission, not RBAC.

With `graceful_pods` (the last tests), a deleted or evicted pod terminates as
kube-apiserver and kubelet end it: k8s.io/apiserver pkg/registry/rest/delete.go
BeforeDelete and registry/store.go Delete (a deadline of now + the grace period, only ever
shortened; a pending deletion answered without admission), kubelet's last status and
DELETE with grace 0 (pkg/kubelet/status/status_manager.go syncPod), by the server's clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from fakes.kube_apiserver import ADMIN_TOKEN, FakeKubeApiServer

NS = "work"
VAP = "admissionregistration.k8s.io/v1"
BUDGETS = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        server.put_object(f"/api/v1/namespaces/{NS}", {})
        yield server


@pytest.fixture
def kube(api: FakeKubeApiServer) -> Iterator[client.CoreV1Api]:
    kubeconfig = yaml.safe_load(api.kubeconfig(token=ADMIN_TOKEN))
    with config.new_client_from_config_dict(kubeconfig) as api_client:
        yield client.CoreV1Api(api_client)


def pod(api: FakeKubeApiServer, name: str, phase: str = "Running", ready: bool = True, **meta):
    """A pod of app=db, bound to n1, in `phase` (Ready as `ready` says)."""
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    api.put_object(
        f"/api/v1/namespaces/{NS}/pods/{name}",
        {
            "metadata": {"labels": {"app": "db"}, **meta},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "busybox"}]},
            "status": {"phase": phase, "conditions": conditions},
        },
    )
    return api.get_object(f"/api/v1/namespaces/{NS}/pods/{name}")


def budget(api: FakeKubeApiServer, name: str = "db", **spec) -> None:
    api.put_object(
        f"{BUDGETS}/{name}",
        {"spec": {"selector": {"matchLabels": {"app": "db"}}, **spec}},
    )


def eviction(name: str, **delete_options) -> dict:
    body: dict = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    if delete_options:
        body["deleteOptions"] = delete_options
    return body


def evict(kube: client.CoreV1Api, name: str, body: dict | None = None) -> object:
    return kube.create_namespaced_pod_eviction(name, NS, body or eviction(name))


class Refusal:
    """An ApiException's status and its `Status` body."""

    def __init__(self, e: ApiException) -> None:
        self.status = e.status
        self.body = json.loads(e.body)
        self.reason, self.message = self.body.get("reason"), self.body.get("message")


def refusal(kube: client.CoreV1Api, name: str, body: dict | None = None) -> Refusal:
    with pytest.raises(ApiException) as info:
        evict(kube, name, body)
    return Refusal(info.value)


def test_an_eviction_names_its_pod_and_its_namespace(
    api: FakeKubeApiServer, kube: client.CoreV1Api
):
    # eviction.go Create: `name in URL does not match name in Eviction object` (400);
    # create.go EnsureObjectNamespaceMatchesRequestNamespace: the namespace likewise
    pod(api, "db-0")
    wrong = refusal(kube, "db-0", eviction("db-1"))
    assert (wrong.status, wrong.reason, wrong.message) == (
        400,
        "BadRequest",
        "name in URL does not match name in Eviction object",
    )
    elsewhere = eviction("db-0")
    elsewhere["metadata"]["namespace"] = "default"
    wrong = refusal(kube, "db-0", elsewhere)
    assert (wrong.status, wrong.message) == (
        400,
        "the namespace of the provided object does not match the namespace sent on the request",
    )
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/db-0") is not None


def test_rbac_wants_create_on_pods_eviction_not_delete_on_pods(api: FakeKubeApiServer):
    # The authorizer sees verb create, resource pods, subresource eviction (RequestInfo of
    # a POST to .../pods/<name>/eviction): deleting pods grants no eviction
    pod(api, "db-0")
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}]
    api.put_object(f"{rbac}/namespaces/{NS}/roles/deleter", {"rules": rules})
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deleter"}
    api.put_object(
        f"{rbac}/namespaces/{NS}/rolebindings/deleter",
        {"roleRef": ref, "subjects": [{"kind": "User", "name": "ops"}]},
    )
    api.add_token("ops-token", "ops")
    kubeconfig = yaml.safe_load(api.kubeconfig(token="ops-token"))
    with config.new_client_from_config_dict(kubeconfig) as api_client:
        denied = refusal(client.CoreV1Api(api_client), "db-0")
    assert (denied.status, denied.message) == (
        403,
        'pods "db-0" is forbidden: User "ops" cannot create resource "pods/eviction" in API '
        'group "" in the namespace "work"',
    )


def _policy(api: FakeKubeApiServer, name: str, rules: list[dict], expression: str) -> None:
    api.put_object(
        f"/apis/{VAP}/validatingadmissionpolicies/{name}",
        {
            "spec": {
                "matchConstraints": {"resourceRules": rules},
                "validations": [
                    {"expression": expression, "message": "no", "reason": "Forbidden"}
                ],
            }
        },
    )
    api.put_object(
        f"/apis/{VAP}/validatingadmissionpolicybindings/{name}",
        {"spec": {"policyName": name, "validationActions": ["Deny"]}},
    )


def test_a_policy_on_pods_eviction_sees_the_eviction_and_one_on_pod_deletes_does_not_run(
    api: FakeKubeApiServer, kube: client.CoreV1Api
):
    # The Eviction is the object of a CREATE of pods/eviction (createValidation in
    # eviction.go Create); its own delete passes rest.ValidateAllObjectFunc: no admission
    pod(api, "db-0")
    pod(api, "db-1")
    core = {"apiGroups": [""], "apiVersions": ["v1"]}
    _policy(
        api,
        "evictions",
        [{**core, "operations": ["CREATE"], "resources": ["pods/eviction"]}],
        "object.kind == 'Eviction' && request.kind.group == 'policy' "
        "&& request.kind.kind == 'Eviction' && request.resource.resource == 'pods' "
        "&& request.subResource == 'eviction' && request.name == object.metadata.name "
        "&& object.metadata.namespace == 'work' && oldObject == null "
        "&& object.metadata.name != 'db-1'",
    )
    _policy(
        api, "pod-deletes", [{**core, "operations": ["DELETE"], "resources": ["pods"]}], "false"
    )
    denied = refusal(kube, "db-1")
    assert (denied.status, denied.message) == (
        403,
        "pods \"db-1\" is forbidden: ValidatingAdmissionPolicy 'evictions' with binding "
        "'evictions' denied request: no",
    )
    evict(kube, "db-0")
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/db-0") is None


def test_the_policy_refuses_before_the_pod_is_looked_up(
    api: FakeKubeApiServer, kube: client.CoreV1Api
):
    core = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"]}
    _policy(api, "evictions", [{**core, "resources": ["pods/*"]}], "false")
    assert refusal(kube, "absent").status == 403


def test_the_evicted_pod_carries_disruption_target_while_it_terminates(
    api: FakeKubeApiServer, kube: client.CoreV1Api
):
    # addConditionAndDeletePod: the condition first (an update), then the delete
    before = pod(api, "db-0", finalizers=["example.com/hold"])
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name="db-0", namespace=NS))
    kube.create_namespaced_pod_eviction("db-0", NS, body)
    after = api.get_object(f"/api/v1/namespaces/{NS}/pods/db-0")
    assert after["metadata"]["deletionTimestamp"]
    target = [c for c in after["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert [(c["status"], c["reason"], c["message"]) for c in target] == [
        ("True", "EvictionByEvictionAPI", "Eviction API: evicting")
    ]
    assert target[0]["lastTransitionTime"]
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])


def test_a_dry_run_eviction_changes_nothing(api: FakeKubeApiServer, kube: client.CoreV1Api):
    before = pod(api, "db-0")
    evict(kube, "db-0", eviction("db-0", dryRun=["All"]))
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/db-0") == before


def test_the_delete_options_preconditions_hold(api: FakeKubeApiServer, kube: client.CoreV1Api):
    # addConditionAndDeletePod's getLatestPod: a Conflict on `Pod` (its GroupResource)
    current = pod(api, "db-0")
    uid, rv = current["metadata"]["uid"], current["metadata"]["resourceVersion"]
    stale = refusal(kube, "db-0", eviction("db-0", preconditions={"uid": "not-it"}))
    assert (stale.status, stale.reason, stale.message) == (
        409,
        "Conflict",
        f'Operation cannot be fulfilled on Pod "db-0": the UID in the precondition (not-it) '
        f"does not match the UID in record ({uid}). The object might have been deleted and "
        "then recreated",
    )
    stale = refusal(kube, "db-0", eviction("db-0", preconditions={"resourceVersion": "1"}))
    assert (stale.status, stale.message) == (
        409,
        'Operation cannot be fulfilled on Pod "db-0": the ResourceVersion in the precondition '
        f"(1) does not match the ResourceVersion in record ({rv}). The object might have been "
        "modified",
    )
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/db-0") is not None
    evict(kube, "db-0", eviction("db-0", preconditions={"uid": uid, "resourceVersion": rv}))
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/db-0") is None


@pytest.mark.parametrize("phase", ["Pending", "Succeeded", "Failed"])
def test_a_pod_not_running_is_deleted_without_the_budget(
    api: FakeKubeApiServer, kube: client.CoreV1Api, phase: str
):
    # canIgnorePDB: Succeeded, Failed, Pending, or already terminating
    pod(api, "db-0", phase=phase, ready=False)
    budget(api, maxUnavailable=0)
    evict(kube, "db-0")
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/db-0") is None


def test_the_budget_is_decremented_and_then_refuses(
    api: FakeKubeApiServer, kube: client.CoreV1Api
):
    # checkAndDecrement: disruptionsAllowed 1 -> 0, the pod in disruptedPods; the next is a
    # 429 whose cause counts the healthy pods (Ready: podutil.IsPodReady)
    pod(api, "db-0")
    pod(api, "db-1")
    budget(api, minAvailable=1)
    evict(kube, "db-0")
    status = api.get_object(f"{BUDGETS}/db")["status"]
    assert (status["disruptionsAllowed"], list(status["disruptedPods"])) == (0, ["db-0"])
    assert [
        (c["type"], c["status"], c["reason"], c["observedGeneration"])
        for c in status["conditions"]
    ] == [("DisruptionAllowed", "False", "InsufficientPods", 1)]
    blocked = refusal(kube, "db-1")
    assert (blocked.status, blocked.reason, blocked.message) == (
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    )
    assert blocked.body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget db needs 1 healthy pods and has 1 currently",
        }
    ]
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/db-1") is not None


def test_an_unready_pod_goes_when_the_others_keep_the_budget(
    api: FakeKubeApiServer, kube: client.CoreV1Api
):
    # IfHealthyBudget (the default): an unready pod goes while currentHealthy >=
    # desiredHealthy > 0, without a decrement; else the budget decides (0 allowed: 429)
    pod(api, "db-0")
    pod(api, "db-1", ready=False)
    pod(api, "db-2", ready=False)
    budget(api, minAvailable=1)
    evict(kube, "db-1")
    assert "status" not in api.get_object(f"{BUDGETS}/db")  # nothing counted
    budget(api, minAvailable=2)
    assert refusal(kube, "db-2").status == 429


def test_always_allow_lets_an_unready_pod_go(api: FakeKubeApiServer, kube: client.CoreV1Api):
    pod(api, "db-0")
    pod(api, "db-1", ready=False)
    budget(api, minAvailable=2, unhealthyPodEvictionPolicy="AlwaysAllow")
    evict(kube, "db-1")
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/db-1") is None
    assert refusal(kube, "db-0").status == 429  # a healthy pod is still held


def test_two_budgets_are_a_500(api: FakeKubeApiServer, kube: client.CoreV1Api):
    pod(api, "db-0")
    pod(api, "db-1")
    budget(api, "one", maxUnavailable=1)
    budget(api, "two", minAvailable=0)
    failed = refusal(kube, "db-0")
    assert (failed.status, failed.message) == (
        500,
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
        "not support.",
    )
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/db-0") is not None


def test_a_budget_its_controller_has_not_seen_yet_refuses(
    api: FakeKubeApiServer, kube: client.CoreV1Api
):
    # checkAndDecrement: status.observedGeneration < generation (the status as written)
    api.disruption_controller = False
    pod(api, "db-0")
    budget(api, maxUnavailable=1)
    changed = api.get_object(f"{BUDGETS}/db")
    changed["metadata"]["generation"] = 2
    changed["status"] = {"observedGeneration": 1, "disruptionsAllowed": 1}
    api.put_object(f"{BUDGETS}/db", changed)
    blocked = refusal(kube, "db-0")
    assert blocked.status == 429
    assert blocked.body["details"]["causes"][0]["message"] == (
        "The disruption budget db is still being processed by the server."
    )


# -- graceful_pods: a deleted or evicted pod terminates for its grace period ----------------

T0 = 1_800_000_000  # the fake clock's start (seconds since the epoch)
PATH = f"/api/v1/namespaces/{NS}/pods"


@pytest.fixture
def clock(api: FakeKubeApiServer) -> list[float]:
    """`graceful_pods` on, the server's clock at T0 until a test moves it."""
    now = [float(T0)]
    api.graceful_pods = True
    api.clock = lambda: now[0]
    return now


def graceful(api: FakeKubeApiServer, name: str, grace: int = 60, **meta) -> dict:
    """`pod` with its own terminationGracePeriodSeconds."""
    pod(api, name, **meta)
    stored = api.get_object(f"{PATH}/{name}")
    stored["spec"]["terminationGracePeriodSeconds"] = grace
    api.put_object(f"{PATH}/{name}", stored)
    return api.get_object(f"{PATH}/{name}")


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def test_a_deleted_pod_terminates_for_its_grace_period_until_kubelet_deletes_it(
    api: FakeKubeApiServer, kube: client.CoreV1Api, clock: list[float]
):
    # BeforeDelete (CheckGracefulDelete: the pod's own period): deletionTimestamp = now +
    # grace, deletionGracePeriodSeconds, generation + 1; the pod is answered and stays
    before = graceful(api, "db-0")
    answer = kube.delete_namespaced_pod("db-0", NS)
    assert (answer.metadata.deletion_timestamp, answer.metadata.deletion_grace_period_seconds) == (
        at(T0 + 60),
        60,
    )
    kept = api.get_object(f"{PATH}/db-0")
    assert kept["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert kept["status"]["phase"] == "Running"  # kubelet has not stopped it yet
    assert api.kill_expired_pods(NS) == []
    # kubelet: the container ended; its last status, then its DELETE with grace 0
    assert api.pod_exited(NS, "db-0", 143)
    assert api.get_object(f"{PATH}/db-0") is None
    assert not api.pod_exited(NS, "db-0", 143)


def test_a_second_delete_may_only_shorten_the_grace_period(
    api: FakeKubeApiServer, kube: client.CoreV1Api, clock: list[float]
):
    graceful(api, "db-0")
    kube.delete_namespaced_pod("db-0", NS, grace_period_seconds=60)
    first = api.get_object(f"{PATH}/db-0")
    clock[0] += 20
    longer = kube.delete_namespaced_pod("db-0", NS, grace_period_seconds=600)
    assert api.get_object(f"{PATH}/db-0") == first  # pending: nothing written
    assert longer.metadata.resource_version == first["metadata"]["resourceVersion"]
    kube.delete_namespaced_pod("db-0", NS)  # no period asked: pending too
    assert api.get_object(f"{PATH}/db-0") == first
    shorter = kube.delete_namespaced_pod("db-0", NS, grace_period_seconds=10)
    # the old deadline less the old period plus the new one, from when it was first set
    assert (
        shorter.metadata.deletion_timestamp,
        shorter.metadata.deletion_grace_period_seconds,
    ) == (
        at(T0 + 10),
        10,
    )
    kube.delete_namespaced_pod("db-0", NS, grace_period_seconds=0)
    assert api.get_object(f"{PATH}/db-0") is None


@pytest.mark.parametrize(
    ("phase", "node"), [("Pending", ""), ("Succeeded", "n1"), ("Failed", "n1")]
)
def test_a_pod_not_bound_or_ended_goes_at_once(
    api: FakeKubeApiServer, kube: client.CoreV1Api, clock: list[float], phase: str, node: str
):
    # CheckGracefulDelete: 0 for a pod with no nodeName or a terminal phase
    stored = graceful(api, "db-0", phase=phase)
    stored["spec"]["nodeName"] = node
    if not node:
        del stored["spec"]["nodeName"]
    api.put_object(f"{PATH}/db-0", stored)
    kube.delete_namespaced_pod("db-0", NS)
    assert api.get_object(f"{PATH}/db-0") is None


def test_kubelet_kills_a_pod_whose_grace_period_ran_out_by_the_clock(
    api: FakeKubeApiServer, kube: client.CoreV1Api, clock: list[float]
):
    # a finalizer keeps it after kubelet's DELETE, showing the status kubelet wrote; the
    # finalizer's removal then deletes it (ShouldDeleteDuringUpdate: its period is now 0)
    graceful(api, "db-0", grace=30, finalizers=["example.com/hold"])
    kube.delete_namespaced_pod("db-0", NS)
    clock[0] += 29
    assert api.kill_expired_pods() == []
    held = api.get_object(f"{PATH}/db-0")
    held["metadata"]["finalizers"] = []  # a grace period still runs: the pod stays
    api.handle(
        "PUT",
        f"{PATH}/db-0",
        {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
        json.dumps(held).encode(),
    )
    assert api.get_object(f"{PATH}/db-0")["metadata"]["deletionGracePeriodSeconds"] == 30
    api.put_object(
        f"{PATH}/db-0", {**held, "metadata": {**held["metadata"], "finalizers": ["x/y"]}}
    )
    clock[0] += 1
    assert api.kill_expired_pods() == ["db-0"]
    killed = api.get_object(f"{PATH}/db-0")
    assert killed["metadata"]["deletionGracePeriodSeconds"] == 0
    assert killed["status"]["phase"] == "Failed"
    assert [s["state"] for s in killed["status"]["containerStatuses"]] == [
        {"terminated": {"exitCode": 137}}
    ]
    assert [(c["type"], c["status"]) for c in killed["status"]["conditions"]] == [
        ("Ready", "False")
    ]
    assert api.kill_expired_pods() == []  # ended: nothing left to kill
    killed["metadata"]["finalizers"] = []
    api.handle(
        "PUT",
        f"{PATH}/db-0",
        {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
        json.dumps(killed).encode(),
    )
    assert api.get_object(f"{PATH}/db-0") is None


def test_a_pending_delete_is_answered_without_admission(
    api: FakeKubeApiServer, kube: client.CoreV1Api, clock: list[float]
):
    # store.go Delete: a pending graceful deletion returns before any deleteValidation; a
    # shortening one is admitted with its new period
    graceful(api, "db-0", grace=600)
    core = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"]}
    _policy(
        api,
        "short-deletes",
        [{**core, "resources": ["pods"]}],
        "request.options.gracePeriodSeconds <= 100",
    )
    with pytest.raises(ApiException) as refused:
        kube.delete_namespaced_pod("db-0", NS)  # its own 600 s
    assert refused.value.status == 403
    kube.delete_namespaced_pod("db-0", NS, grace_period_seconds=100)
    kube.delete_namespaced_pod("db-0", NS, grace_period_seconds=500)  # pending: not admitted
    kube.delete_namespaced_pod("db-0", NS, grace_period_seconds=50)  # shorter: admitted
    assert api.get_object(f"{PATH}/db-0")["metadata"]["deletionGracePeriodSeconds"] == 50


def test_an_evicted_pod_terminates_with_its_disruption_target(
    api: FakeKubeApiServer, kube: client.CoreV1Api, clock: list[float]
):
    # eviction.go deletes with the Eviction's deleteOptions (here 20 s, the pod's 60 else)
    graceful(api, "db-0")
    graceful(api, "db-1")
    evict(kube, "db-0", eviction("db-0", gracePeriodSeconds=20))
    evict(kube, "db-1")
    for name, grace in (("db-0", 20), ("db-1", 60)):
        left = api.get_object(f"{PATH}/{name}")
        assert left["metadata"]["deletionTimestamp"] == at(T0 + grace).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        assert [c["type"] for c in left["status"]["conditions"]] == ["Ready", "DisruptionTarget"]
    clock[0] += 20
    assert api.kill_expired_pods(NS) == ["db-0"]
    assert api.get_object(f"{PATH}/db-0") is None


def test_a_collection_delete_is_graceful_for_each_pod(
    api: FakeKubeApiServer, kube: client.CoreV1Api, clock: list[float]
):
    graceful(api, "db-0", grace=5)
    graceful(api, "db-1", grace=50)
    kube.delete_collection_namespaced_pod(NS, label_selector="app=db")
    assert [p["metadata"]["deletionGracePeriodSeconds"] for p in api.objects(f"{PATH}/")] == [
        5,
        50,
    ]
