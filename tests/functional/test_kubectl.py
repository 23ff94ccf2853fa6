"""The real kubectl v1.36.3 against the fake API server, through the kubeconfig it hands out.

Each test runs kubectl as a user would and checks what it printed; where kubectl and the fake
disagreed, the fake was made to answer as kube-apiserver 1.36 does (tests/fakes/
kube_discovery.py, kube_openapi.py, kube_tables.py, kube_protobuf.py, kube_watch.py name the
upstream sources). The read-only tests share one server (`cluster`); a test that changes
things has its own.
"""

from __future__ import annotations

import http.client
import http.server
import io
import json
import re
import shutil
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from kubectl_runner import Kubectl

from fakes import kube_stream
from fakes.kube_apiserver import FakeKubeApiServer

# An object made "10 days ago (and an hour)" prints as 10d for the next 23 hours
# (apimachinery duration.HumanDuration), so the tables below can be compared whole.
TEN_DAYS_AGO = (datetime.now(timezone.utc) - timedelta(days=10, hours=1)).strftime(
    "%Y-%m-%dT%H:%M:%SZ"
)


# kubeadm's admin, for the requests a test sends without kubectl (the fake's default token)
ADMIN = {"Authorization": "Bearer admin-token"}


@pytest.fixture
def fresh(kubectl_binary: Path) -> Iterator[tuple[FakeKubeApiServer, Kubectl]]:
    """A server of its own and kubectl for it, for a test that changes things."""
    with FakeKubeApiServer(tls=True) as api:
        client = Kubectl(kubectl_binary, api)
        try:
            yield api, client
        finally:
            client.close()


def pod(name: str, node: str = "n1", phase: str = "Running", **meta: object) -> dict:
    ready = phase == "Running"
    return {
        "metadata": {"name": name, "creationTimestamp": TEN_DAYS_AGO, **meta},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox:1.37"}]},
        "status": {
            "phase": phase,
            "podIP": "10.1.0.7",
            "podIPs": [{"ip": "10.1.0.7"}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "busybox:1.37",
                    "ready": ready,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": TEN_DAYS_AGO}}
                    if ready
                    else {"waiting": {"reason": "ContainerCreating"}},
                }
            ],
        },
    }


def node(name: str, ready: bool = True, role: str | None = None, **spec: object) -> dict:
    labels = {"kubernetes.io/hostname": name}
    if role:
        labels[f"node-role.kubernetes.io/{role}"] = ""
    return {
        "metadata": {"labels": labels, "creationTimestamp": TEN_DAYS_AGO},
        "spec": spec,
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "addresses": [{"type": "InternalIP", "address": f"10.0.0.{len(name)}"}],
            "nodeInfo": {
                "kubeletVersion": "v1.36.3",
                "osImage": "Ubuntu 24.04.3 LTS",
                "kernelVersion": "6.8.0-1040-aws",
                "containerRuntimeVersion": "containerd://2.1.4",
            },
        },
    }


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com", "creationTimestamp": TEN_DAYS_AGO},
    "spec": {
        "group": "example.com",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "shortNames": ["wd"],
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer"}},
                            },
                            "status": {
                                "type": "object",
                                "properties": {"phase": {"type": "string"}},
                            },
                        },
                    }
                },
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
            }
        ],
    },
}


@pytest.fixture(scope="module")
def cluster(kubectl_binary: Path) -> Iterator[tuple[FakeKubeApiServer, Kubectl]]:
    """One server with two nodes, pods in two namespaces and a custom resource, read only."""
    with FakeKubeApiServer(tls=True) as api:
        api.put_object("/api/v1/nodes/cp-0", node("cp-0", role="control-plane"))
        api.put_object("/api/v1/nodes/gpu-1", node("gpu-1", ready=False, unschedulable=True))
        api.put_object(
            "/api/v1/namespaces/work", {"metadata": {"creationTimestamp": TEN_DAYS_AGO}}
        )
        api.put_object("/api/v1/namespaces/work/pods/trainer", pod("trainer", "gpu-1"))
        api.put_object(
            "/api/v1/namespaces/kube-system/pods/etcd-cp-0",
            pod("etcd-cp-0", "cp-0", annotations={"kubernetes.io/config.mirror": "1"}),
        )
        api.put_object("/api/v1/namespaces/work/pods/pending", pod("pending", "", "Pending"))
        api.put_object(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{WIDGET_CRD['metadata']['name']}",
            WIDGET_CRD,
        )
        api.put_object(
            "/apis/example.com/v1/namespaces/work/widgets/w1",
            {
                "metadata": {"creationTimestamp": TEN_DAYS_AGO},
                "spec": {"size": 3},
                "status": {"phase": "Ready"},
            },
        )
        api.set_pod_log("work", "trainer", "epoch 1 loss 0.9\nepoch 2 loss 0.4\n")
        api.put_object(
            "/api/v1/namespaces/work/events/pending.1",
            {
                "involvedObject": {"kind": "Pod", "namespace": "work", "name": "pending"},
                "type": "Warning",
                "reason": "FailedScheduling",
                "message": "0/2 nodes are available: 1 node(s) were unschedulable.",
                "source": {"component": "default-scheduler"},
                "firstTimestamp": TEN_DAYS_AGO,
                "lastTimestamp": TEN_DAYS_AGO,
                "count": 3,
            },
        )
        client = Kubectl(kubectl_binary, api)
        try:
            yield api, client
        finally:
            client.close()


def lines(text: str) -> list[str]:
    """Output lines with the column padding squeezed to one space."""
    return [re.sub(r"\s{2,}", " ", line).strip() for line in text.strip().splitlines()]


# ---------------------------------------------------------------- reading


def test_version_names_client_and_server(cluster):
    api, kubectl = cluster
    printed = kubectl.run("version").stdout
    assert printed == (
        "Client Version: v1.36.3\nKustomize Version: v5.8.1\nServer Version: v1.36.3\n"
    )
    server = json.loads(kubectl.run("version", "-o", "json").stdout)["serverVersion"]
    assert (server["major"], server["minor"], server["platform"]) == ("1", "36", "linux/amd64")


def test_get_namespaces(cluster):
    _api, kubectl = cluster
    printed = lines(kubectl.run("get", "ns").stdout)
    assert printed[0] == "NAME STATUS AGE"
    assert "work Active 10d" in printed
    assert {row.split()[0] for row in printed[1:]} == {
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
        "work",
    }


def test_get_nodes_plain_and_wide(cluster):
    _api, kubectl = cluster
    assert lines(kubectl.run("get", "nodes").stdout) == [
        "NAME STATUS ROLES AGE VERSION",
        "cp-0 Ready control-plane 10d v1.36.3",
        "gpu-1 NotReady,SchedulingDisabled <none> 10d v1.36.3",
    ]
    assert lines(kubectl.run("get", "nodes", "-o", "wide").stdout) == [
        "NAME STATUS ROLES AGE VERSION INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION "
        "CONTAINER-RUNTIME",
        "cp-0 Ready control-plane 10d v1.36.3 10.0.0.4 <none> Ubuntu 24.04.3 LTS "
        "6.8.0-1040-aws containerd://2.1.4",
        "gpu-1 NotReady,SchedulingDisabled <none> 10d v1.36.3 10.0.0.5 <none> Ubuntu 24.04.3 "
        "LTS 6.8.0-1040-aws containerd://2.1.4",
    ]


def test_get_pods_in_all_namespaces_wide(cluster):
    _api, kubectl = cluster
    assert lines(kubectl.run("get", "pods", "-A", "-o", "wide").stdout) == [
        "NAMESPACE NAME READY STATUS RESTARTS AGE IP NODE NOMINATED NODE READINESS GATES",
        "kube-system etcd-cp-0 1/1 Running 0 10d 10.1.0.7 cp-0 <none> <none>",
        "work pending 0/1 ContainerCreating 0 10d 10.1.0.7 <none> <none> <none>",
        "work trainer 1/1 Running 0 10d 10.1.0.7 gpu-1 <none> <none>",
    ]


def test_pod_states_as_the_pod_printer_words_them(fresh):
    api, kubectl = fresh
    base = "/api/v1/namespaces/default/pods"
    crash = pod("crash")
    crash["status"]["containerStatuses"][0].update(
        ready=False,
        restartCount=3,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={"terminated": {"exitCode": 1, "finishedAt": TEN_DAYS_AGO}},
    )
    api.put_object(f"{base}/crash", crash)
    init = pod("init", phase="Pending")
    init["spec"]["initContainers"] = [{"name": "setup", "image": "busybox:1.37"}]
    init["status"]["initContainerStatuses"] = [
        {"name": "setup", "ready": False, "restartCount": 0, "state": {"running": {}}}
    ]
    api.put_object(f"{base}/init", init)
    done = pod("done", phase="Succeeded")
    done["status"]["containerStatuses"][0].update(
        ready=False, state={"terminated": {"exitCode": 0, "reason": "Completed"}}
    )
    api.put_object(f"{base}/done", done)
    leaving = pod("leaving", finalizers=["example.com/hold"], deletionTimestamp=TEN_DAYS_AGO)
    api.put_object(f"{base}/leaving", leaving)
    assert lines(kubectl.run("get", "pods").stdout) == [
        "NAME READY STATUS RESTARTS AGE",
        "crash 0/1 CrashLoopBackOff 3 (10d ago) 10d",
        "done 0/1 Completed 0 10d",
        "init 0/1 Init:0/1 0 10d",
        "leaving 1/1 Terminating 0 10d",
    ]


def test_get_a_custom_resource_by_name_short_name_and_crd(cluster):
    _api, kubectl = cluster
    expected = ["NAME SIZE PHASE AGE", "w1 3 Ready 10d"]
    assert lines(kubectl.run("get", "widgets", "-n", "work").stdout) == expected
    assert lines(kubectl.run("get", "wd", "-n", "work").stdout) == expected
    assert lines(kubectl.run("get", "crd").stdout) == [
        "NAME CREATED AT",
        f"widgets.example.com {TEN_DAYS_AGO}",
    ]


def test_get_events_plain_and_wide(cluster):
    _api, kubectl = cluster
    assert lines(kubectl.run("get", "events", "-n", "work").stdout) == [
        "LAST SEEN TYPE REASON OBJECT MESSAGE",
        "10d Warning FailedScheduling pod/pending 0/2 nodes are available: 1 node(s) were "
        "unschedulable.",
    ]
    wide = lines(kubectl.run("get", "events", "-n", "work", "-o", "wide").stdout)
    assert wide[0] == (
        "LAST SEEN TYPE REASON OBJECT SUBOBJECT SOURCE MESSAGE FIRST SEEN COUNT NAME"
    )
    assert wide[1].endswith(
        "default-scheduler 0/2 nodes are available: 1 node(s) were unschedulable. 10d 3 pending.1"
    )


def test_get_output_name(cluster):
    _api, kubectl = cluster
    assert kubectl.run("get", "pods", "-n", "work", "-o", "name").stdout == (
        "pod/pending\npod/trainer\n"
    )
    assert kubectl.run("get", "widgets", "-A", "-o", "name").stdout == "widget.example.com/w1\n"


def test_api_resources_list_what_the_server_serves(cluster):
    _api, kubectl = cluster
    printed = lines(kubectl.run("api-resources").stdout)
    assert printed[0] == "NAME SHORTNAMES APIVERSION NAMESPACED KIND"
    for row in (
        "pods po v1 true Pod",
        "nodes no v1 false Node",
        "secrets v1 true Secret",
        "deployments deploy apps/v1 true Deployment",
        "customresourcedefinitions crd,crds apiextensions.k8s.io/v1 false "
        "CustomResourceDefinition",
        "poddisruptionbudgets pdb policy/v1 true PodDisruptionBudget",
        "widgets wd example.com/v1 true Widget",
    ):
        assert row in printed
    namespaced = lines(kubectl.run("api-resources", "--namespaced=false", "-o", "name").stdout)
    assert "namespaces" in namespaced and "pods" not in namespaced


def test_describe_pod(cluster):
    _api, kubectl = cluster
    printed = lines(kubectl.run("describe", "pod", "trainer", "-n", "work").stdout)
    for expected in (
        "Name: trainer",
        "Namespace: work",
        "Node: gpu-1/",
        "Status: Running",
        "IP: 10.1.0.7",
        "Image: busybox:1.37",
        "State: Running",
        "Ready: True",
        "Ready True",  # the conditions
        "QoS Class: BestEffort",
        "Events: <none>",  # it listed the pod's events: none
    ):
        assert expected in printed, printed


def test_describe_namespace_lists_its_quotas_and_limit_ranges(cluster):
    _api, kubectl = cluster
    assert lines(kubectl.run("describe", "namespace", "work").stdout) == [
        "Name: work",
        "Labels: kubernetes.io/metadata.name=work",
        "Annotations: <none>",
        "Status: Active",
        "",
        "No resource quota.",
        "",
        "No LimitRange resource.",
    ]


def test_logs(cluster):
    _api, kubectl = cluster
    assert kubectl.run("logs", "trainer", "-n", "work").stdout == (
        "epoch 1 loss 0.9\nepoch 2 loss 0.4\n"
    )
    assert kubectl.run("logs", "trainer", "-n", "work", "--tail=1").stdout == "epoch 2 loss 0.4\n"
    previous = kubectl.run("logs", "trainer", "-n", "work", "--previous", check=False)
    assert previous.returncode == 1
    assert previous.stderr == (
        'Error from server (BadRequest): previous terminated container "main" in pod "trainer" '
        "not found\n"
    )


# ---------------------------------------------------------------- writing


def test_create_namespace_in_protocol_buffers(fresh):
    api, kubectl = fresh
    assert kubectl.run("create", "namespace", "x").stdout == "namespace/x created\n"
    created = [r for r in api.requests if r == ("POST", "/api/v1/namespaces")]
    assert created[-1].query == {"fieldManager": "kubectl-create", "fieldValidation": "Strict"}
    assert api.get_object("/api/v1/namespaces/x")["status"] == {"phase": "Active"}
    again = kubectl.run("create", "namespace", "x", check=False)
    assert again.stderr == 'Error from server (AlreadyExists): namespaces "x" already exists\n'


def test_create_the_kinds_the_fake_reads_in_protocol_buffers(fresh):
    api, kubectl = fresh
    ns = "/api/v1/namespaces/default"
    assert kubectl.run("create", "configmap", "c", "--from-literal=a=b").stdout == (
        "configmap/c created\n"
    )
    assert api.get_object(f"{ns}/configmaps/c")["data"] == {"a": "b"}
    kubectl.run("create", "secret", "generic", "s", "--from-literal=k=v")
    assert api.get_object(f"{ns}/secrets/s")["data"] == {"k": "dg=="}  # bytes: base64
    kubectl.run("create", "serviceaccount", "robot")
    assert api.get_object(f"{ns}/serviceaccounts/robot")["metadata"]["name"] == "robot"
    posts = [r for r in api.requests if r.method == "POST"]
    assert len(posts) == 3
    # a kind the fake has no protobuf message for: said plainly (the real server reads it)
    refused = kubectl.run("create", "deployment", "web", "--image=nginx", check=False)
    assert refused.stderr == (
        "error: failed to create deployment: no protobuf message known for apps/v1 Deployment\n"
    )


MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: default
data:
  mode: fast
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w2
  namespace: default
spec:
  size: 5
"""


def test_apply_server_side_with_server_field_validation(fresh):
    api, kubectl = fresh
    api.put_object(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{WIDGET_CRD['metadata']['name']}",
        WIDGET_CRD,
    )
    printed = kubectl.run("apply", "--server-side", "-f", "-", stdin=MANIFEST).stdout
    assert printed == (
        "configmap/settings serverside-applied\nwidget.example.com/w2 serverside-applied\n"
    )
    patches = [r for r in api.requests if r.method == "PATCH"]
    assert [r.query for r in patches] == [
        {"fieldManager": "kubectl", "fieldValidation": "Strict", "force": "false"}
    ] * 2  # the OpenAPI v3 documents say the server validates: kubectl leaves it to it
    settings = api.get_object("/api/v1/namespaces/default/configmaps/settings")
    assert settings["data"] == {"mode": "fast"}
    assert [m["manager"] for m in settings["metadata"]["managedFields"]] == ["kubectl"]
    printed = kubectl.run("apply", "--server-side", "-f", "-", stdin=MANIFEST).stdout
    assert printed.count("serverside-applied") == 2
    widgets = kubectl.run("get", "widgets").stdout.splitlines()
    assert re.fullmatch(r"w2 +5 +\d+s", widgets[1])  # no phase: a null cell, printed empty


def test_server_dry_run_answers_without_keeping_anything(fresh):
    api, kubectl = fresh
    kubectl.run("create", "namespace", "x")
    last = int(api.get_object("/api/v1/namespaces/x")["metadata"]["resourceVersion"])
    before = api.get_object("/api/v1/namespaces/default")["metadata"]["resourceVersion"]
    printed = kubectl.run("create", "namespace", "y", "--dry-run=server").stdout
    assert printed == "namespace/y created (server dry run)\n"
    assert api.get_object("/api/v1/namespaces/y") is None
    printed = kubectl.run("delete", "namespace", "default", "--dry-run=server").stdout
    assert printed == 'namespace "default" deleted (server dry run)\n'
    assert api.get_object("/api/v1/namespaces/default")["metadata"]["resourceVersion"] == before
    kubectl.run("create", "namespace", "z")  # the next write gets the next resourceVersion
    assert api.get_object("/api/v1/namespaces/z")["metadata"]["resourceVersion"] == str(last + 1)


def test_write_options_kube_apiserver_refuses(kube_api: FakeKubeApiServer):
    def post(query: str) -> dict:
        request = urllib.request.Request(
            f"{kube_api.url}/api/v1/namespaces?{query}",
            data=json.dumps({"metadata": {"name": "q"}}).encode(),
            method="POST",
            headers={"Content-Type": "application/json", **ADMIN},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        return json.loads(refused.value.read())

    status = post("dryRun=Some")
    assert (status["code"], status["reason"], status["message"]) == (
        422,
        "Invalid",
        'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ["Some"]: '
        'supported values: "All"',
    )
    assert post("fieldValidation=Loose")["message"] == (
        'CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Loose": '
        'supported values: "", "Ignore", "Strict", "Warn"'
    )
    assert kube_api.get_object("/api/v1/namespaces/q") is None


# ---------------------------------------------------------------- waiting and watching


def once_watching(api: FakeKubeApiServer, path: str, obj: dict) -> threading.Thread:
    """Store `obj` at `path` once a watch request has come in (kubectl is watching)."""

    def store() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(r.query.get("watch") == "true" for r in list(api.requests)):
                time.sleep(0.1)  # the first events are on their way: a change comes after
                api.put_object(path, obj)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=store, daemon=True)
    thread.start()
    return thread


def test_wait_for_a_condition_set_while_kubectl_watches(fresh):
    api, kubectl = fresh
    api.put_object("/api/v1/namespaces/default/pods/p", pod("p", phase="Pending"))
    once_watching(api, "/api/v1/namespaces/default/pods/p", pod("p"))
    done = kubectl.run("wait", "--for=condition=Ready", "pod/p", "--timeout=20s")
    assert done.stdout == "pod/p condition met\n"
    watches = [r for r in api.requests if r.query.get("watch") == "true"]
    assert watches[0].query["sendInitialEvents"] == "true"  # a watch-list stream, as client-go
    assert watches[0].query["fieldSelector"] == "metadata.name=p"


def test_wait_times_out_on_a_condition_never_met(fresh):
    api, kubectl = fresh
    api.put_object("/api/v1/namespaces/default/pods/p", pod("p", phase="Pending"))
    done = kubectl.run("wait", "--for=condition=Ready", "pod/p", "--timeout=1s", check=False)
    assert done.returncode == 1
    assert done.stderr == "error: timed out waiting for the condition on pods/p\n"


def test_get_watch_prints_the_changes(fresh):
    api, kubectl = fresh
    api.put_object("/api/v1/namespaces/default/pods/p", pod("p", phase="Pending"))
    once_watching(api, "/api/v1/namespaces/default/pods/p", pod("p"))
    done = kubectl.run("get", "pods", "--watch", "--request-timeout=2s", check=False)
    assert lines(done.stdout) == [
        "NAME READY STATUS RESTARTS AGE",
        "p 0/1 ContainerCreating 0 10d",
        "p 1/1 Running 0 10d",
    ]
    watch = next(r for r in api.requests if r.query.get("watch") == "true")
    assert "sendInitialEvents" not in watch.query  # from the list's resourceVersion


def test_over_tls_with_the_ca_the_kubeconfig_carries(kubectl_binary: Path):
    with FakeKubeApiServer(tls=True) as api:
        kubectl = Kubectl(kubectl_binary, api)
        try:
            api.put_object("/api/v1/namespaces/default/pods/p", pod("p", phase="Pending"))
            once_watching(api, "/api/v1/namespaces/default/pods/p", pod("p"))
            done = kubectl.run("wait", "--for=condition=Ready", "pod/p", "--timeout=20s")
            assert done.stdout == "pod/p condition met\n"
            assert api.url.startswith("https://")
        finally:
            kubectl.close()


# ---------------------------------------------------------------- authorization


def test_auth_can_i(fresh):
    _api, kubectl = fresh
    assert kubectl.run("auth", "can-i", "list", "pods").stdout == "yes\n"


def test_auth_whoami_and_can_i_as_a_node(fresh, kubectl_binary: Path):
    """A SelfSubjectReview and a SelfSubjectAccessReview, both sent in protobuf."""
    api, kubectl = fresh
    printed = kubectl.run("auth", "whoami").stdout
    assert lines(printed) == [
        "ATTRIBUTE VALUE",
        "Username kubernetes-admin",
        "Groups [kubeadm:cluster-admins system:authenticated]",
    ]
    node = Kubectl(kubectl_binary, api, token=api.node_token("n1"))
    try:
        assert lines(node.run("auth", "whoami").stdout)[1:] == [
            "Username system:node:n1",
            "Groups [system:nodes system:authenticated]",
        ]
        # the Node authorizer: a node may not create pods (only mirror pods, by admission)
        refused = node.run("auth", "can-i", "create", "deployments", check=False)
        assert (refused.returncode, refused.stdout) == (1, "no\n")
    finally:
        node.close()


# ---------------------------------------------------------------- what kube-apiserver answers


def _request(api: FakeKubeApiServer, path: str, **headers: str) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(api.url + path, headers={**ADMIN, **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _watch(api: FakeKubeApiServer, path: str, until: int = 100) -> list[dict]:
    """The events of a watch (read until it ends, or `until` events came)."""
    request = urllib.request.Request(
        api.url + path, headers={"Accept": "application/json", **ADMIN}
    )
    events = []
    with urllib.request.urlopen(request, timeout=10) as stream:
        assert stream.headers["Content-Type"] == "application/json"
        assert stream.headers["Transfer-Encoding"] == "chunked"
        for line in stream:
            events.append(json.loads(line))
            if len(events) >= until:
                break
    return events


def test_aggregated_discovery_is_served_to_who_asks_for_it(kube_api: FakeKubeApiServer):
    v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    code, headers, body = _request(kube_api, "/apis", Accept=f"{v2},application/json")
    assert (code, headers["Content-Type"], headers["Vary"]) == (200, v2, "Accept")
    groups = [item["metadata"]["name"] for item in json.loads(body)["items"]]
    assert groups[:5] == [  # by APIService priority (kube_discovery.GROUP_PRIORITY)
        "apiregistration.k8s.io",
        "apps",
        "events.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
    ]
    code, _, body = _request(kube_api, "/apis", Accept=v2, **{"If-None-Match": headers["ETag"]})
    assert (code, body) == (304, b"")
    # v2beta1 is gone (AggregatedDiscoveryRemoveBetaType): the legacy document instead
    beta = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    code, headers, body = _request(kube_api, "/apis", Accept=f"{beta},application/json")
    assert (code, json.loads(body)["kind"]) == (200, "APIGroupList")


def test_media_types_kube_apiserver_cannot_answer_or_read(kube_api: FakeKubeApiServer):
    code, _, body = _request(kube_api, "/api/v1/namespaces", Accept="text/html")
    assert (code, json.loads(body)["message"]) == (
        406,
        "only the following media types are accepted: application/json, application/yaml, "
        "application/vnd.kubernetes.protobuf",
    )
    code, headers, _ = _request(
        kube_api,
        "/api/v1/namespaces",
        Accept="application/vnd.kubernetes.protobuf,application/json",
    )
    assert (code, headers["Content-Type"]) == (200, "application/json")
    code, headers, body = _request(
        kube_api, "/api/v1/namespaces/default", Accept="application/yaml"
    )
    assert (code, headers["Content-Type"]) == (200, "application/yaml")
    assert body.startswith(b"apiVersion: v1\nkind: Namespace\n")
    request = urllib.request.Request(
        kube_api.url + "/api/v1/namespaces",
        data=b"name: x",
        method="POST",
        headers={"Content-Type": "text/plain", **ADMIN},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    status = json.loads(refused.value.read())
    assert (status["code"], status["reason"], status["message"]) == (
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml, application/vnd.kubernetes.protobuf",
    )


def test_watch_from_a_resource_version_with_selector_transitions(kube_api: FakeKubeApiServer):
    path = "/api/v1/namespaces/default/configmaps"
    kube_api.put_object(f"{path}/a", {"metadata": {"labels": {"team": "ml"}}})
    start = kube_api.get_object(f"{path}/a")["metadata"]["resourceVersion"]
    kube_api.put_object(f"{path}/b", {"metadata": {"labels": {"team": "ml"}}})  # ADDED
    kube_api.put_object(f"{path}/a", {"metadata": {"labels": {"team": "web"}}})  # leaves: DELETED
    kube_api.put_object(f"{path}/c", {"metadata": {"labels": {"team": "web"}}})  # never matches
    kube_api.delete_object(f"{path}/b")  # DELETED
    events = _watch(
        kube_api,
        f"{path}?watch=true&resourceVersion={start}&labelSelector=team%3Dml&timeoutSeconds=1",
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"),
        ("DELETED", "a"),
        ("DELETED", "b"),
    ]
    assert events[1]["object"]["metadata"]["labels"] == {"team": "ml"}  # as it was, last seen
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_watch_list_sends_the_state_then_the_initial_events_end_bookmark(
    kube_api: FakeKubeApiServer,
):
    kube_api.put_object("/api/v1/namespaces/default/configmaps/a", {"data": {"k": "v"}})
    events = _watch(
        kube_api,
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1",
        until=2,
    )
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    bookmark = events[1]["object"]
    assert bookmark["kind"] == "ConfigMap"
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_watch_refusals_as_kube_apiserver_words_them(kube_api: FakeKubeApiServer):
    code, _, body = _request(
        kube_api, "/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=Exact"
    )
    status = json.loads(body)
    assert (code, status["reason"], status["message"]) == (
        422,
        "Invalid",
        'ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: '
        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan, "
        'resourceVersionMatch: Unsupported value: "Exact": supported values: "NotOlderThan"]',
    )
    for i in range(1001):  # more changes than the watch window holds
        kube_api.put_object("/api/v1/namespaces/default/configmaps/churn", {"data": {"i": str(i)}})
    (error,) = _watch(kube_api, "/api/v1/configmaps?watch=true&resourceVersion=2")
    assert error["type"] == "ERROR"
    assert (error["object"]["code"], error["object"]["reason"]) == (410, "Expired")
    assert error["object"]["message"].startswith("too old resource version: 2 (")


# ---------------------------------------------------------------- cp and port-forward


def _export(root: Path, path: str) -> None:
    """A SavedModel export at `path` inside a container whose `/` is `root`."""
    export = root / path.lstrip("/")
    (export / "variables").mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"\x08\x01saved model")
    (export / "variables" / "variables.index").write_bytes(b"index")
    (export / "variables" / "variables.data-00000-of-00001").write_bytes(b"\x00" * 70000)


def _files(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()}


@pytest.fixture
def tensorflow(fresh, tmp_path: Path) -> Iterator[tuple[FakeKubeApiServer, Kubectl, Path]]:
    """A running pod `fetch` in namespace tensorflow whose container's `/` is `tmp_path/pod`."""
    api, kubectl = fresh
    api.put_object("/api/v1/namespaces/tensorflow", {"metadata": {}})
    api.put_object(
        "/api/v1/namespaces/tensorflow/pods/fetch", pod("fetch", uid="0b4f", labels={"a": "b"})
    )
    root = tmp_path / "pod"
    _export(root, "/data/export/1000")
    api.set_pod_files("tensorflow", "fetch", "main", root)
    yield api, kubectl, tmp_path


def test_cp_copies_a_directory_out_of_a_pod_as_tar_gives_it(tensorflow):
    """The exec of `tar cf - <path>` over WebSocket v5; kubectl untars the archive here."""
    api, kubectl, tmp = tensorflow
    done = kubectl.run("-n", "tensorflow", "cp", "fetch:/data/export/1000", str(tmp / "m"))
    # tar's stderr goes to kubectl's stdout (cp.go: ErrOut is o.Out)
    assert (done.stdout, done.stderr) == ("tar: Removing leading `/' from member names\n", "")
    assert _files(tmp / "m") == _files(tmp / "pod" / "data" / "export" / "1000")
    exec_path = "/api/v1/namespaces/tensorflow/pods/fetch/exec"
    assert [r.method for r in api.requests if r.path == exec_path] == ["GET"]  # no SPDY
    # with --retries the command is `sh -c "tar cf - '<path>' | tail -c+<n>"`
    kubectl.run("-n", "tensorflow", "cp", "--retries=2", "fetch:/data/export/1000", str(tmp / "r"))
    assert _files(tmp / "r") == _files(tmp / "m")


def test_cp_of_a_missing_path_prints_what_tar_says(tensorflow):
    _api, kubectl, tmp = tensorflow
    done = kubectl.run(
        "-n", "tensorflow", "cp", "fetch:/data/export/7", str(tmp / "x"), check=False
    )
    said = [
        "tar: Removing leading `/' from member names",
        "tar: /data/export/7: Cannot stat: No such file or directory",
        "tar: Exiting with failure status due to previous errors",
    ]
    # kubectl stops at the archive's end (tar writes an empty one) and exits 0 before tar's
    # exit status arrives, and may exit before it printed tar's stderr (cp.go's goroutines)
    printed = done.stdout.splitlines()
    assert (done.returncode, said[: len(printed)]) == (0, printed)
    assert not (tmp / "x").exists()


@pytest.mark.skipif(not shutil.which("tar"), reason="no tar here to compare with")
@pytest.mark.parametrize(
    "path",
    [
        "/data/export/1000",
        "/data/export/1000/",
        "/data/./export/1000",
        "/data/../data/export",
        "/data//export/1000/saved_model.pb",
        "/data/export/7",
    ],
)
def test_the_fakes_tar_is_gnu_tars(tmp_path: Path, path: str):
    """Member names, types, stderr and exit code as GNU tar gives them for kubectl cp's path."""
    version = subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout
    if "GNU tar" not in version:
        pytest.skip("tar here is not GNU tar")
    _export(tmp_path, "/data/export/1000")
    out, err, code = kube_stream.tar_cf(tmp_path, path)
    # the same path under tmp_path, as `tar -C <root>` cannot keep a leading "/"
    real = subprocess.run(
        ["tar", "cf", "-", str(tmp_path) + path], capture_output=True, check=False
    )
    prefix = str(tmp_path).lstrip("/") + "/"

    def members(archive: bytes) -> list[tuple[str, bytes]]:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            return [(m.name.removeprefix(prefix), m.type) for m in tar.getmembers()]

    expected = members(real.stdout)  # with "..", tar strips up to it: tmp_path goes too
    assert members(out) in (expected, sorted(expected))  # tar's order is the directory's
    assert (len(out), code) == (len(real.stdout), real.returncode)
    assert err.decode() == real.stderr.decode().replace(str(tmp_path), "")


def test_exec_of_other_commands_says_the_fake_runs_no_containers(tensorflow):
    api, kubectl, _tmp = tensorflow
    done = kubectl.run("-n", "tensorflow", "exec", "fetch", "--", "ls", "/", check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("error: Internal error occurred: the fake API server runs no")
    missing = kubectl.run("-n", "tensorflow", "exec", "fetch", "-c", "x", "--", "ls", check=False)
    # kubectl checks the container itself (exec.go), before any request
    assert missing.stderr == "error: container x is not valid for pod fetch out of: main\n"
    api.put_object("/api/v1/namespaces/tensorflow/pods/done", pod("done", phase="Succeeded"))
    done = kubectl.run("-n", "tensorflow", "exec", "done", "--", "ls", check=False)
    assert done.stderr == (
        "error: cannot exec into a container in a completed pod; current phase is Succeeded\n"
    )


def test_exec_and_port_forward_need_create_on_the_subresource(tensorflow, kubectl_binary):
    """`get` on pods/exec is not enough since 1.35: the registry also asks for `create`."""
    api, _kubectl, tmp = tensorflow
    api.add_token("viewer-token", "viewer")
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/exec", "pods/portforward"], "verbs": ["get"]},
    ]
    api.put_object(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/tensorflow/roles/viewer",
        {"metadata": {"name": "viewer", "namespace": "tensorflow"}, "rules": rules},
    )
    api.put_object(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/tensorflow/rolebindings/viewer",
        {
            "metadata": {"name": "viewer", "namespace": "tensorflow"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "viewer"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "viewer"}
            ],
        },
    )
    viewer = Kubectl(kubectl_binary, api, token="viewer-token")
    try:
        path = "/api/v1/namespaces/tensorflow/pods/fetch/exec"
        done = viewer.run(
            "-n", "tensorflow", "cp", "fetch:/data/1000", str(tmp / "v"), check=False
        )
        # the WebSocket GET is refused (403 is an upgrade failure), so kubectl tries SPDY's
        # POST, which the authorization filter refuses as `create`: what kubectl prints
        assert (done.returncode, done.stderr) == (
            1,
            'error: unable to upgrade connection: pods "fetch" is forbidden: User "viewer" '
            'cannot create resource "pods/exec" in API group "" in the namespace "tensorflow"\n',
        )
        assert [r.method for r in api.requests if r.path == path] == ["GET", "POST"]
        assert not (tmp / "v").exists()
        done = viewer.run("-n", "tensorflow", "port-forward", "pod/fetch", "0:8501", check=False)
        assert (done.returncode, done.stderr) == (
            1,
            'error: error upgrading connection: unable to upgrade connection: pods "fetch" is '
            'forbidden: User "viewer" cannot create resource "pods/portforward" in API group "" '
            'in the namespace "tensorflow"\n',
        )
    finally:
        viewer.close()


class _Backend(http.server.ThreadingHTTPServer):
    """A stand-in for what listens on a pod's port: answers `GET <path>` with its path."""

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = json.dumps({"path": self.path}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


def _local_port(printed: str, remote: int) -> int:
    """The local port of kubectl's `Forwarding from 127.0.0.1:<local> -> <remote>`."""
    found = re.search(rf"^Forwarding from 127\.0\.0\.1:(\d+) -> {remote}$", printed, re.M)
    assert found, printed
    return int(found.group(1))


def test_port_forward_a_service_to_its_pod(tensorflow):
    """svc/x resolves to a Running pod of its selector and its targetPort (kubectl's work)."""
    api, kubectl, _tmp = tensorflow
    api.put_object(
        "/api/v1/namespaces/tensorflow/services/model",
        {
            "metadata": {"name": "model"},
            "spec": {"selector": {"a": "b"}, "ports": [{"port": 80, "targetPort": 8501}]},
        },
    )
    backend = _Backend()
    try:
        api.set_pod_port("tensorflow", "fetch", 8501, backend.address)
        with kubectl.running(
            "-n", "tensorflow", "port-forward", "svc/model", "0:80", until="Forwarding from"
        ) as forwarding:
            local = _local_port(forwarding.stdout, 8501)
            for path in ("/v1/models/mnist", "/v1/models/mnist/metadata"):
                with urllib.request.urlopen(f"http://127.0.0.1:{local}{path}", timeout=10) as r:
                    assert json.loads(r.read()) == {"path": path}
    finally:
        backend.shutdown()
        backend.server_close()
    assert forwarding.stdout.count(f"Handling connection for {local}\n") == 2
    path = "/api/v1/namespaces/tensorflow/pods/fetch/portforward"
    assert [r.method for r in api.requests if r.path == path] == ["GET"]  # one WebSocket


def test_port_forward_to_a_port_nothing_answers(tensorflow):
    api, kubectl, _tmp = tensorflow
    with kubectl.running(
        "-n", "tensorflow", "port-forward", "pod/fetch", "0:9000", until="Forwarding from"
    ) as forwarding:
        local = _local_port(forwarding.stdout, 9000)
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=10)
        time.sleep(0.5)
    assert "error forwarding port 9000 to pod fetch_tensorflow, uid 0b4f" in forwarding.stderr
