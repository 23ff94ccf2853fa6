"""The project's drain and `kubectl drain` leave the same pods (issue 28, part 5).

`charms.gpu_k8s.v0.drain.drain` evicts what `kubectl drain --ignore-daemonsets
--delete-emptydir-data --force` evicts (kubernetes/kubectl pkg/drain/filters.go: DaemonSet
pods stay, mirror pods stay, emptyDir and unmanaged pods go). Each scenario is built twice, on
two fake API servers: the lib drains one through the real `kubernetes` client, the real kubectl
drains the other, and the pods left on the node are compared. The last tests show where they
differ: kubectl evicts a DaemonSet's pod that has finished, and (with --force) one whose
DaemonSet is gone (filters.go `daemonSetFilter`); the lib keeps both (`drain.stays` looks at the
controller reference only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubectl_runner import Kubectl

from charms.gpu_k8s.v0 import drain
from charms.gpu_k8s.v0.kubeclient import Kube
from fakes.kube_apiserver import FakeKubeApiServer

NODE = "n1"
KUBECTL_DRAIN = ("drain", NODE, "--ignore-daemonsets", "--delete-emptydir-data", "--force")


class FakeClock:
    """A clock that moves only when the drain sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _owner(api: FakeKubeApiServer, path: str, kind: str) -> dict:
    obj = api.get_object(path)
    assert obj is not None
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
    }


def _pod(name: str, namespace: str = "default", phase: str = "Running", **extra: object) -> dict:
    spec: dict = {"nodeName": NODE, "containers": [{"name": "main", "image": "busybox"}]}
    spec.update(extra.pop("spec", {}))  # type: ignore[arg-type]
    return {
        "metadata": {"name": name, "namespace": namespace, **extra},
        "spec": spec,
        "status": {"phase": phase},
    }


def _selecting(app: str) -> dict:
    """A workload's selector and pod template, labelled app=<app>."""
    template = {"containers": [{"name": "c", "image": "busybox"}]}
    return {
        "selector": {"matchLabels": {"app": app}},
        "template": {"metadata": {"labels": {"app": app}}, "spec": template},
    }


def _workloads(api: FakeKubeApiServer) -> tuple[dict, dict]:
    api.put_object(
        f"/api/v1/nodes/{NODE}", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    rs = "/apis/apps/v1/namespaces/default/replicasets/web"
    api.put_object(rs, {"spec": _selecting("web")})
    ds = "/apis/apps/v1/namespaces/kube-system/daemonsets/agent"
    api.put_object(ds, {"spec": _selecting("agent")})
    return _owner(api, rs, "ReplicaSet"), _owner(api, ds, "DaemonSet")


def mixed(api: FakeKubeApiServer) -> None:
    """A DaemonSet pod, a mirror pod, an emptyDir pod, an unmanaged pod, a ReplicaSet's pod."""
    rs, ds = _workloads(api)
    pods = [
        _pod("agent-x", "kube-system", labels={"app": "agent"}, ownerReferences=[ds]),
        _pod("etcd-n1", "kube-system", annotations={"kubernetes.io/config.mirror": "a1"}),
        _pod(
            "scratch",
            labels={"app": "web"},
            ownerReferences=[rs],
            spec={"volumes": [{"name": "tmp", "emptyDir": {}}]},
        ),
        _pod("bare"),
        _pod("web-1", labels={"app": "web"}, ownerReferences=[rs]),
    ]
    for p in pods:
        meta = p["metadata"]
        api.put_object(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", p)


def blocked_by_budget(api: FakeKubeApiServer) -> None:
    """The only pod of a PodDisruptionBudget that wants one available."""
    rs, _ = _workloads(api)
    api.put_object(
        "/api/v1/namespaces/default/pods/web-1",
        _pod("web-1", labels={"app": "web"}, ownerReferences=[rs]),
    )
    api.put_object(
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web",
        {"spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}},
    )


def never_terminates(api: FakeKubeApiServer) -> None:
    """A pod whose finalizer nobody removes: evicted, it stays terminating."""
    rs, _ = _workloads(api)
    api.put_object(
        "/api/v1/namespaces/default/pods/stuck",
        _pod(
            "stuck", labels={"app": "web"}, ownerReferences=[rs], finalizers=["example.com/hold"]
        ),
    )


def finished_daemonset_pod(api: FakeKubeApiServer) -> None:
    """A DaemonSet's pod that has Succeeded."""
    _, ds = _workloads(api)
    api.put_object(
        "/api/v1/namespaces/kube-system/pods/agent-done",
        _pod("agent-done", "kube-system", "Succeeded", ownerReferences=[ds]),
    )


def orphaned_daemonset_pod(api: FakeKubeApiServer) -> None:
    """A pod whose controller reference names a DaemonSet that no longer exists."""
    _, ds = _workloads(api)
    api.delete_object("/apis/apps/v1/namespaces/kube-system/daemonsets/agent")
    api.put_object(
        "/api/v1/namespaces/kube-system/pods/agent-left",
        _pod("agent-left", "kube-system", ownerReferences=[ds]),
    )


def left_on_node(api: FakeKubeApiServer) -> list[str]:
    return sorted(
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in api.objects("/api/v1/namespaces/", kind="Pod")
        if p["spec"].get("nodeName") == NODE
    )


@pytest.fixture
def servers(kubectl_binary: Path) -> Iterator[Callable]:
    """Build a scenario on two servers: (lib's server, kubectl's server, kubectl)."""
    opened: list[FakeKubeApiServer] = []
    clients: list[Kubectl] = []

    def build(scenario: Callable[[FakeKubeApiServer], None]):
        ours, theirs = FakeKubeApiServer().start(), FakeKubeApiServer(tls=True).start()
        opened.extend([ours, theirs])
        scenario(ours)
        scenario(theirs)
        kubectl = Kubectl(kubectl_binary, theirs)
        clients.append(kubectl)
        return ours, theirs, kubectl

    yield build
    for client in clients:
        client.close()
    for api in opened:
        api.stop()


def lib_drain(api: FakeKubeApiServer, timeout: float = 30) -> drain.DrainResult | None:
    clock = FakeClock()
    with Kube.from_kubeconfig(api.kubeconfig(), backoff=0.01) as kube:
        return drain.drain(kube, NODE, timeout=timeout, poll=2, clock=clock, sleep=clock.sleep)


def test_both_leave_daemonset_and_mirror_pods_and_evict_the_rest(servers):
    ours, theirs, kubectl = servers(mixed)
    result = lib_drain(ours)
    done = kubectl.run(*KUBECTL_DRAIN)
    assert (
        left_on_node(ours)
        == left_on_node(theirs)
        == ["kube-system/agent-x", "kube-system/etcd-n1"]
    )
    assert result is not None and sorted(result.evicted) == [
        "default/bare",
        "default/scratch",
        "default/web-1",
    ]
    assert done.stdout.splitlines()[0] == "node/n1 cordoned"
    assert done.stdout.splitlines()[-1] == "node/n1 drained"
    assert {line for line in done.stdout.splitlines() if line.endswith(" evicted")} == {
        "pod/bare evicted",
        "pod/scratch evicted",
        "pod/web-1 evicted",
    }
    assert done.stderr.startswith("Warning: ")  # its parts in map order, which varies
    assert set(done.stderr[len("Warning: ") :].strip().split("; ")) == {
        "deleting Pods that declare no controller: default/bare",
        "ignoring DaemonSet-managed Pods: kube-system/agent-x",
    }
    for api in (ours, theirs):
        assert api.get_object(f"/api/v1/nodes/{NODE}")["spec"]["unschedulable"] is True


def test_both_leave_a_pod_its_budget_protects(servers):
    ours, theirs, kubectl = servers(blocked_by_budget)
    result = lib_drain(ours, timeout=10)
    done = kubectl.run(*KUBECTL_DRAIN, "--timeout=1s", check=False)
    assert left_on_node(ours) == left_on_node(theirs) == ["default/web-1"]
    assert result is not None and (result.timed_out, result.remaining) == (True, ["default/web-1"])
    assert done.returncode == 1
    assert (
        'error when evicting pods/"web-1" -n "default" (will retry after 5s): Cannot evict pod as '
        "it would violate the pod's disruption budget." in done.stderr
    )
    assert (
        'error when evicting pods/"web-1" -n "default": global timeout reached: 1s' in done.stderr
    )


def test_both_leave_a_pod_that_will_not_terminate(servers):
    ours, theirs, kubectl = servers(never_terminates)
    result = lib_drain(ours, timeout=10)
    done = kubectl.run(*KUBECTL_DRAIN, "--timeout=2s", check=False)
    assert left_on_node(ours) == left_on_node(theirs) == ["default/stuck"]
    assert result is not None and (result.timed_out, result.remaining) == (True, ["default/stuck"])
    for api in (ours, theirs):  # evicted: terminating, held by its finalizer, and disrupted
        stuck = api.get_object("/api/v1/namespaces/default/pods/stuck")
        assert stuck["metadata"]["deletionTimestamp"]
        assert [
            (c["status"], c["reason"])
            for c in stuck["status"]["conditions"]
            if c["type"] == "DisruptionTarget"
        ] == [("True", "EvictionByEvictionAPI")]
    assert done.returncode == 1
    assert (
        'error when waiting for pod "stuck" in namespace "default" to terminate: context deadline '
        "exceeded" in done.stderr
    )


def test_a_server_dry_run_drain_keeps_everything(servers):
    _ours, theirs, kubectl = servers(mixed)
    before = left_on_node(theirs)
    done = kubectl.run(*KUBECTL_DRAIN, "--dry-run=server")
    assert done.stdout.splitlines()[0] == "node/n1 cordoned (server dry run)"
    assert left_on_node(theirs) == before
    assert not (theirs.get_object(f"/api/v1/nodes/{NODE}").get("spec") or {}).get("unschedulable")


def test_differs_kubectl_evicts_a_finished_daemonset_pod_the_lib_keeps_it(servers):
    ours, theirs, kubectl = servers(finished_daemonset_pod)
    lib_drain(ours)
    kubectl.run(*KUBECTL_DRAIN)
    assert left_on_node(ours) == ["kube-system/agent-done"]
    assert left_on_node(theirs) == []


def test_differs_kubectl_evicts_an_orphaned_daemonset_pod_the_lib_keeps_it(servers):
    ours, theirs, kubectl = servers(orphaned_daemonset_pod)
    lib_drain(ours)
    done = kubectl.run(*KUBECTL_DRAIN)
    assert left_on_node(ours) == ["kube-system/agent-left"]
    assert left_on_node(theirs) == []
    assert "evicting pod kube-system/agent-left" in done.stdout
    assert done.stderr == ""  # its warning is dropped: only the last filter's is kept
