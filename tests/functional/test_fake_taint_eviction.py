"""The fake taint eviction controller does what kube-controller-manager's does (T1-T6).

kubernetes pkg/controller/tainteviction/taint_eviction.go (processPodOnNode,
handleNodeUpdate, addConditionAndDeletePod), k8s.io/api core/v1 toleration.go
ToleratesTaint, pkg/apis/core/v1/helper GetMatchingTolerations, and the
DefaultTolerationSeconds admission plugin: see tests/fakes/taint_eviction.py. Time is the
API server's clock, set by each test; `graceful_pods` keeps a deleted pod, terminating,
so that what the controller wrote on it can be read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from fakes.kube_apiserver import ADMIN_TOKEN, FakeKubeApiServer, stamp
from fakes.taint_eviction import (
    MESSAGE,
    REASON,
    TaintEvictionController,
    default_tolerations,
    extended_resource_tolerations,
    tolerates,
)

NS = "team-a"
QUARANTINE = {"key": "gpu-k8s.io/gpu-unhealthy", "effect": "NoExecute"}
START = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def api(clock: Clock) -> Iterator[FakeKubeApiServer]:
    server = FakeKubeApiServer(graceful_pods=True)
    server.clock = clock
    server.put_object(f"/api/v1/namespaces/{NS}", {})
    for name in ("n1", "n2"):
        server.put_object(f"/api/v1/nodes/{name}", {"spec": {}})
    yield server


@pytest.fixture
def taints(api: FakeKubeApiServer) -> TaintEvictionController:
    return TaintEvictionController(api)


def pod(api: FakeKubeApiServer, name: str, node: str = "n1", *tolerations: dict) -> None:
    spec: dict = {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]}
    if tolerations:
        spec["tolerations"] = list(tolerations)
    api.put_object(
        f"/api/v1/namespaces/{NS}/pods/{name}",
        {"spec": spec, "status": {"phase": "Running"}},
    )


def taint(api: FakeKubeApiServer, node: str, *taints: dict) -> None:
    path = f"/api/v1/nodes/{node}"
    obj = api.get_object(path)
    obj["spec"]["taints"] = list(taints)
    api.put_object(path, obj)


def get(api: FakeKubeApiServer, name: str) -> dict | None:
    return api.get_object(f"/api/v1/namespaces/{NS}/pods/{name}")


def deleted(api: FakeKubeApiServer, name: str) -> bool:
    """Gone, or terminating (graceful_pods: the controller's DELETE set a deletionTimestamp)."""
    found = get(api, name)
    return found is None or bool(found["metadata"].get("deletionTimestamp"))


def left(api: FakeKubeApiServer, *names: str) -> set[str]:
    return {name for name in names if not deleted(api, name)}


def quarantine_for(seconds: int | None) -> dict:
    toleration = {**QUARANTINE, "operator": "Exists"}
    if seconds is not None:
        toleration["tolerationSeconds"] = seconds
    return toleration


def test_an_untolerated_noexecute_taint_deletes_the_nodes_pods_at_once_as_upstream(
    api, taints, clock
):
    """T2, T6: DisruptionTarget DeletionByTaintManager, then a DELETE with no options.

    With no DeleteOptions the pod's own grace period applies (30 s, the default): the
    pod terminates until then. The pods of another node, and those tolerating the taint
    for ever (a DaemonSet's `operator: Exists`, the DCGM exporter's keyed toleration),
    stay; a NoSchedule taint evicts nothing.
    """
    pod(api, "victim")
    pod(api, "other-key", "n1", {"key": "nvidia.com/gpu", "operator": "Exists"})
    pod(api, "daemon", "n1", {"operator": "Exists"})
    pod(api, "exporter", "n1", quarantine_for(None))
    pod(api, "elsewhere", "n2")
    everyone = ("victim", "other-key", "daemon", "exporter", "elsewhere")
    taint(api, "n1", {"key": "gpu", "effect": "NoSchedule"})
    assert taints.tick() == 0
    assert left(api, *everyone) == set(everyone)

    clock.now += 5
    taint(api, "n1", {"key": "gpu", "effect": "NoSchedule"}, QUARANTINE)
    assert taints.tick() == 2
    assert left(api, *everyone) == {"daemon", "exporter", "elsewhere"}
    victim = get(api, "victim")
    assert victim is not None
    meta = victim["metadata"]
    assert (meta["deletionTimestamp"], meta["deletionGracePeriodSeconds"]) == (
        stamp(clock.now + 30),
        30,
    )
    (condition,) = [c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert condition == {
        "type": "DisruptionTarget",
        "status": "True",
        "observedGeneration": 1,  # the generation it was written for (the DELETE bumped it)
        "reason": REASON,
        "message": MESSAGE,
        "lastTransitionTime": stamp(clock.now),
    }
    assert (REASON, MESSAGE) == (
        "DeletionByTaintManager",
        "Taint manager: deleting due to NoExecute taint",
    )
    assert taints.refused == []


def test_a_pod_already_disrupted_keeps_the_time_its_condition_turned_true(api, taints, clock):
    """T6, UpdatePodCondition: reason and message replaced, lastTransitionTime kept."""
    pod(api, "evicted")
    path = f"/api/v1/namespaces/{NS}/pods/evicted"
    evicted = api.get_object(path)
    earlier = stamp(START - 40)
    evicted["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
            "lastTransitionTime": earlier,
        }
    ]
    api.put_object(path, evicted)
    taint(api, "n1", QUARANTINE)
    taints.tick()
    (condition,) = api.get_object(path)["status"]["conditions"]
    assert (condition["reason"], condition["lastTransitionTime"]) == (REASON, earlier)


def test_tolerated_pods_leave_after_their_least_toleration_seconds(api, taints, clock):
    """T3, T4: from when the taint was seen, the least tolerationSeconds of those matched.

    Each taint is matched by the first toleration that tolerates it (GetMatchingTolerations
    stops there): a for-ever `Exists` listed after a 60 s one does not save the pod, and
    one listed before does.
    """
    pod(api, "minute", "n1", quarantine_for(60))
    pod(api, "two", "n1", quarantine_for(120), {"operator": "Exists", "tolerationSeconds": 600})
    pod(api, "first-wins", "n1", quarantine_for(60), {"operator": "Exists"})
    pod(api, "forever-first", "n1", {"operator": "Exists"}, quarantine_for(60))
    pod(api, "zero", "n1", quarantine_for(0))
    b = {"key": "b", "effect": "NoExecute"}
    b_for = {**b, "operator": "Exists", "tolerationSeconds": 90}
    pod(api, "least", "n2", quarantine_for(120), b_for)  # two taints: the lesser, 90 s
    pods = ("minute", "two", "first-wins", "forever-first", "zero", "least")
    taints.tick()
    taint(api, "n1", QUARANTINE)
    taint(api, "n2", QUARANTINE, b)
    taints.tick()
    assert left(api, *pods) == set(pods) - {"zero"}
    assert taints.scheduled() == {
        f"{NS}/minute": START + 60,
        f"{NS}/two": START + 120,
        f"{NS}/first-wins": START + 60,
        f"{NS}/least": START + 90,
    }
    clock.now += 59
    assert taints.tick() == 0
    clock.now += 1
    assert taints.tick() == 2
    assert left(api, *pods) == {"two", "forever-first", "least"}
    clock.now += 30
    taints.tick()
    clock.now += 30
    taints.tick()
    assert left(api, *pods) == {"forever-first"}

    # T4: a taint added later with a shorter toleration does not bring a deletion nearer
    api.put_object("/api/v1/nodes/n3", {"spec": {}})
    pod(api, "late", "n3", quarantine_for(300), {**b_for, "tolerationSeconds": 10})
    taint(api, "n3", QUARANTINE)
    taints.tick()
    clock.now += 100
    taint(api, "n3", QUARANTINE, b)
    taints.tick()
    assert taints.scheduled() == {f"{NS}/late": clock.now - 100 + 300}


def test_a_taint_removed_before_its_time_cancels_the_deletion(api, taints, clock):
    """T5: the node's last NoExecute taint gone, every waiting deletion is cancelled.

    Tainted again, the pod's time counts from then.
    """
    pod(api, "patient", "n1", quarantine_for(300))
    taint(api, "n1", QUARANTINE)
    taints.tick()
    clock.now += 200
    taint(api, "n1", {"key": "gpu", "effect": "NoSchedule"})  # the quarantine lifted
    taints.tick()
    assert taints.scheduled() == {}
    clock.now += 200  # past the first deadline
    assert taints.tick() == 0
    assert not deleted(api, "patient")
    taint(api, "n1", QUARANTINE)
    taints.tick()
    assert taints.scheduled() == {f"{NS}/patient": clock.now + 300}
    clock.now += 300
    assert taints.tick() == 1
    assert deleted(api, "patient")


def test_a_pod_gone_or_bound_later_is_handled_as_it_changes(api, taints, clock):
    """T1, T5: a pod deleted loses its waiting deletion; one bound to a tainted node is seen."""
    pod(api, "going", "n1", quarantine_for(60))
    taint(api, "n1", QUARANTINE)
    taints.tick()
    api.delete_object(f"/api/v1/namespaces/{NS}/pods/going")
    taints.tick()
    assert taints.scheduled() == {}
    pod(api, "again", "n1", quarantine_for(60))
    taints.tick()
    clock.now += 30
    api.delete_object(f"/api/v1/namespaces/{NS}/pods/again")  # made again under its name
    pod(api, "again", "n1", quarantine_for(600))
    taints.tick()
    assert taints.scheduled() == {f"{NS}/again": clock.now + 600}
    api.delete_object(f"/api/v1/namespaces/{NS}/pods/again")
    pod(api, "unbound", "")  # the scheduler has not placed it: nothing to do
    clock.now += 10
    assert taints.tick() == 0
    bound = get(api, "unbound")
    assert bound is not None
    bound["spec"]["nodeName"] = "n1"  # pods/binding
    api.put_object(f"/api/v1/namespaces/{NS}/pods/unbound", bound)
    assert taints.tick() == 1
    assert deleted(api, "unbound")


def test_the_delete_is_any_clients_delete(api, taints, clock):
    """T6: without `graceful_pods` the pod goes at once; an admission refusal leaves it.

    A ValidatingAdmissionPolicy that refuses pods' DELETEs refuses the controller's too
    (its condition was written first), and the controller records it.
    """
    api.graceful_pods = False
    pod(api, "at-once")
    taint(api, "n1", QUARANTINE)
    taints.tick()
    assert get(api, "at-once") is None

    vap = "/apis/admissionregistration.k8s.io/v1"
    deletes = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"]}
    refuse = {"expression": "false", "message": "kept"}
    api.put_object(
        f"{vap}/validatingadmissionpolicies/keep",
        {
            "spec": {
                "matchConstraints": {"resourceRules": [{**deletes, "resources": ["pods"]}]},
                "validations": [refuse],
            }
        },
    )
    api.put_object(
        f"{vap}/validatingadmissionpolicybindings/keep",
        {"spec": {"policyName": "keep", "validationActions": ["Deny"]}},
    )
    pod(api, "kept", "n2")
    taint(api, "n2", QUARANTINE)
    taints.tick()
    kept = get(api, "kept")
    assert kept is not None and not kept["metadata"].get("deletionTimestamp")
    assert [c["reason"] for c in kept["status"]["conditions"]] == [REASON]
    (refused,) = taints.refused
    assert refused.startswith(f"DELETE /api/v1/namespaces/{NS}/pods/kept:") and "kept" in refused


def test_extended_resource_toleration_adds_one_toleration_per_extended_resource(api):
    """ExtendedResourceToleration: `<resource>` Exists NoSchedule per extended resource asked.

    By any container or init container, in requests or in limits alone (which stand for
    the requests: SetDefaults_Pod), sorted, never twice, and not for native resources
    (cpu, memory, hugepages-*, kubernetes.io/...).
    """
    api.mutators.append(extended_resource_tolerations)
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

    def create(name: str, spec: dict) -> list[dict] | None:
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
        answer = api.handle(
            "POST", f"/api/v1/namespaces/{NS}/pods", headers, json.dumps(body).encode()
        )
        assert answer[0] == 201, answer
        return json.loads(answer[2])["spec"].get("tolerations")

    def container(**resources: dict) -> dict:
        return {"name": "c", "image": "busybox", "resources": resources}

    native = {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "2Mi", "example.kubernetes.io/x": "1"}
    assert create("plain", {"containers": [container(requests=native)]}) is None
    limits = container(limits={"nvidia.com/gpu": "1", "cpu": "1"})
    assert create("limits", {"containers": [limits]}) == [gpu]
    mixed = {
        "initContainers": [container(requests={"example.com/fpga": "1"})],
        "containers": [container(requests={"nvidia.com/gpu": "2"})],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    }
    assert create("mixed", mixed) == [
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"key": "example.com/fpga", "operator": "Exists", "effect": "NoSchedule"},
        gpu,
    ]
    assert create("once", {"containers": [limits], "tolerations": [gpu]}) == [gpu]


def test_default_toleration_seconds_adds_not_ready_and_unreachable_unless_tolerated(
    api, taints, clock
):
    """DefaultTolerationSeconds: 300 s of not-ready and unreachable, on a pod's create.

    A pod tolerating the quarantine for ever still leaves a node also NotReady after
    300 s (the least of the tolerations matched); one tolerating nothing leaves at once.
    """
    api.mutators.append(default_tolerations)
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}

    def create(name: str, *tolerations: dict) -> dict:
        spec = {"nodeName": "n1", "containers": [{"name": "main", "image": "busybox"}]}
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
        if tolerations:
            spec["tolerations"] = list(tolerations)
        answer = api.handle(
            "POST", f"/api/v1/namespaces/{NS}/pods", headers, json.dumps(body).encode()
        )
        assert answer[0] == 201, answer
        return json.loads(answer[2])

    plain = create("plain")
    assert plain["spec"]["tolerations"] == [
        {
            "key": key,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        }
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]
    every = create("every", {"operator": "Exists"})
    assert every["spec"]["tolerations"] == [{"operator": "Exists"}]
    unreachable = {"key": "node.kubernetes.io/unreachable", "operator": "Exists"}
    one = create("one", unreachable)
    assert [t["key"] for t in one["spec"]["tolerations"]] == [
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
    ]
    create("exporter", quarantine_for(None))

    taint(api, "n1", QUARANTINE, {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"})
    taints.tick()
    assert left(api, "plain", "every", "one", "exporter") == {"every", "exporter"}
    assert taints.scheduled() == {f"{NS}/exporter": START + 300}


@pytest.mark.parametrize(
    ("toleration", "taint_", "expected"),
    [
        ({"operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),
        (
            {"key": "k", "operator": "Exists"},
            {"key": "k", "value": "v", "effect": "NoSchedule"},
            True,
        ),
        ({"key": "k", "value": "v"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),
        ({"key": "k", "value": "w"}, {"key": "k", "value": "v", "effect": "NoExecute"}, False),
        (
            {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
            QUARANTINE | {"key": "k"},
            False,
        ),
        ({"key": "other", "operator": "Exists"}, QUARANTINE, False),
        ({"key": "k", "operator": "Lt", "value": "5"}, {"key": "k", "value": "4"}, True),
        ({"key": "k", "operator": "Lt", "value": "5"}, {"key": "k", "value": "5"}, False),
        ({"key": "k", "operator": "Gt", "value": "5"}, {"key": "k", "value": "6"}, True),
        ({"key": "k", "operator": "Gt", "value": "5"}, {"key": "k", "value": "x"}, False),
        ({"key": "k", "operator": "Unknown"}, {"key": "k"}, False),
    ],
)
def test_tolerates_as_tolerates_taint(toleration: dict, taint_: dict, expected: bool):
    assert tolerates(toleration, taint_) is expected
