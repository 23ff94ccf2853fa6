"""An upgraded cluster loses what tenants made before this revision's refusals (issue 29 F2).

What an older cluster's tenants made is seeded into the fake API server directly (no
admission sees a seed, as none saw those objects when an earlier revision allowed them);
then Juju deploys another charm revision and its upgrade-charm hook sweeps the consumers'
namespaces once (tenant_sweep.py).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import tenant_sweep
from charm_modules import load
from ops import testing

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes.control_plane import deployed_charm, granted, kube_api_relation, node, peer, peers

team_quota = load("kubernetes-control-plane", "team_quota")
admission_policies = load("kubernetes-control-plane", "admission_policies")
LOCALQUEUES = [
    {"api-groups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get", "create"]}
]
NS = "/api/v1/namespaces"
CALICO = "/apis/crd.projectcalico.org/v1/namespaces"
NEXT_CHARM = "ch:amd64/kubernetes-control-plane-2"
CP_NODE = "cp-sweep"  # a control-plane node (kubeadm's label)
WORKER = "gpu-1"
GPU = {"key": "nvidia.com/gpu", "operator": "Exists"}
# what DefaultTolerationSeconds gives every pod (CONSUMER_PODS admits them)
LOST = [
    {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
]
LOST_KEYS = ("key", "operator", "effect")  # no tolerationSeconds: for ever
CONTAINER = {"name": "c", "image": "busybox"}


def _pod(name: str, namespace: str = "team-a", phase: str = "Running", **spec) -> dict:
    meta = {"name": name, "namespace": namespace, **spec.pop("meta", {})}
    body = {"containers": [CONTAINER], "nodeName": WORKER, "tolerations": [GPU, *LOST], **spec}
    return {"metadata": meta, "spec": body, "status": {"phase": phase}}


def _service(name: str, **spec) -> dict:
    ports = spec.pop("ports", [{"port": 80, "protocol": "TCP", "targetPort": 80}])
    meta = {"name": name, "namespace": "team-a", **spec.pop("meta", {})}
    body = {"type": "ClusterIP", "ports": ports, "selector": {"app": name}, **spec}
    return {"metadata": meta, "spec": body}


def _calico(kind: str, name: str) -> dict:
    spec = {"ingress": [{"action": "Allow"}], "order": 1} if kind == "NetworkPolicy" else {}
    body = {"apiVersion": "crd.projectcalico.org/v1", "kind": kind}
    return {**body, "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}


# what kube-apiserver records of a server-side apply by the control plane (every revision's
# way of writing a Namespace: rbac.apply_objects), and of `kubectl create namespace`
APPLIED = {"manager": "kubernetes-control-plane", "operation": "Apply", "apiVersion": "v1"}
KUBECTL = {"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1"}


def _namespace(name: str, consumer: str, writers: tuple[dict, ...] = (APPLIED,)) -> dict:
    """A Namespace an earlier revision labelled for `consumer`, as `writers` wrote it."""
    labels = {"app.kubernetes.io/managed-by": "kubernetes-control-plane"}
    when = "2026-11-22T10:00:00Z"
    meta = {
        "name": name,
        "labels": {**labels, "gpu-k8s.io/consumer": consumer},
        "managedFields": [{**w, "time": when, "fieldsType": "FieldsV1"} for w in writers],
    }
    return {"metadata": meta}


def seed_leftovers(api) -> None:
    """What team-a made while an earlier revision let it, and the charms' own objects."""
    api.put_object(f"/api/v1/nodes/{CP_NODE}", node(CP_NODE, control_plane=True))
    api.put_object(f"/api/v1/nodes/{WORKER}", node(WORKER, gpus=1))
    api.put_object(f"{CALICO}/team-a/networkpolicies/allow-imds", _calico("NetworkPolicy", "x"))
    api.put_object(f"{CALICO}/team-a/networksets/anywhere", _calico("NetworkSet", "anywhere"))
    port = {"port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30080}
    api.put_object(f"{NS}/team-a/services/np", _service("np", type="NodePort", ports=[port]))
    lb = _service(
        "lb",
        type="LoadBalancer",
        ports=[{**port, "nodePort": 30081}],
        allocateLoadBalancerNodePorts=True,
        externalTrafficPolicy="Local",
        healthCheckNodePort=30082,
        loadBalancerSourceRanges=["0.0.0.0/0"],
        loadBalancerClass="example.com/lb",
        meta={"annotations": {tenant_sweep.SOURCE_RANGES_ANNOTATION: "0.0.0.0/0"}},
    )
    api.put_object(f"{NS}/team-a/services/lb", lb)
    ext = _service("ext", externalIPs=["203.0.113.9"], externalTrafficPolicy="Cluster")
    api.put_object(f"{NS}/team-a/services/ext", ext)
    api.put_object(f"{NS}/team-a/services/tensorboard", _service("tensorboard"))  # the charm's
    template = {"metadata": {"labels": {"app": "m"}}, "spec": {"containers": [CONTAINER]}}
    daemonset = {
        "metadata": {"name": "miner", "namespace": "team-a"},
        "spec": {"selector": {"matchLabels": {"app": "m"}}, "template": template},
    }
    stored = api.put_object("/apis/apps/v1/namespaces/team-a/daemonsets/miner", daemonset)
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "miner", "controller": True}
    owner["uid"] = stored["metadata"]["uid"]
    cordon = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}
    replicaset = {**owner, "kind": "ReplicaSet", "name": "web-7d9", "uid": "0f1e2d3c-4b5a"}
    pods = [
        _pod("miner-x", meta={"ownerReferences": [owner]}, tolerations=[cordon]),
        _pod("on-cp", nodeName=CP_NODE),
        _pod("through-cordons", meta={"ownerReferences": [replicaset]}, tolerations=[GPU, cordon]),
        _pod("forever", tolerations=[GPU, {k: v for k, v in LOST[0].items() if k in LOST_KEYS}]),
        _pod("elsewhere", schedulerName="my-scheduler"),
        _pod("critical", priorityClassName="system-node-critical", priority=2000001000),
        _pod("as-grant", serviceAccountName="tensorflow"),
        _pod("mirror", meta={"annotations": {tenant_sweep.MIRROR_ANNOTATION: "abc"}}),
        _pod("training"),  # what the charms make: stays
        _pod("ended", phase="Failed", tolerations=[cordon]),  # finished: holds no node
    ]
    for pod in pods:
        api.put_object(f"{NS}/team-a/pods/{pod['metadata']['name']}", pod)
    # a namespace an earlier revision granted to a consumer whose request is refused now,
    # and the workers' namespace an earlier revision labelled for their shared grant
    for name, consumer in (("team-old", "old-app"), ("gpu-k8s-system", "worker")):
        api.put_object(f"{NS}/{name}", _namespace(name, consumer))
    api.put_object(f"{NS}/gpu-k8s-system/pods/validator", _pod("validator", "gpu-k8s-system"))


# what an earlier revision granted and this one refuses in a consumer's own namespace
DAEMONSETS = [{"api-groups": ["apps"], "resources": ["daemonsets"], "verbs": ["create"]}]


@pytest.fixture
def upgraded(ctx, bootstrapped, api, tmp_path):
    """team-a granted, its leftovers seeded, then another charm revision deployed.

    And old-app, whose earlier grant of team-old this revision refuses: its namespace and
    what is in it stay, its grant goes.
    """
    state = granted(ctx, bootstrapped, kube_api_relation("tensorflow", "team-a", LOCALQUEUES))
    seed_leftovers(api)
    state = granted(ctx, state, kube_api_relation("old-app", "team-old", DAEMONSETS))
    deployed_charm(tmp_path / "charm", NEXT_CHARM)
    return state


def _kept(api, path: str) -> tuple:
    """What a write of `path` would change (a quota's status follows the objects counted)."""
    obj = api.get_object(path)
    assert obj is not None, path
    return obj["metadata"].get("generation"), obj.get("spec"), obj["metadata"].get("labels")


def test_the_upgrade_hook_sweeps_what_the_refusals_now_stop(ctx, upgraded, api):
    own = [
        f"{NS}/team-a/services/tensorboard",
        f"{NS}/team-a/resourcequotas/{team_quota.NAME}",
        "/apis/networking.k8s.io/v1/namespaces/team-a/networkpolicies/"
        "gpu-k8s-default-deny-ingress",
        f"{NS}/team-a/pods/training",
        f"{NS}/team-a/pods/ended",
        f"{NS}/gpu-k8s-system/pods/validator",
    ]
    before = {path: _kept(api, path) for path in own}
    out = ctx.run(ctx.on.upgrade_charm(), upgraded)

    assert out.unit_status.name == "active", out.unit_status
    assert "consumer namespaces swept: 13 objects changed" in out.unit_status.message
    assert "refused kube-api request of old-app" in out.unit_status.message
    assert api.objects(f"{CALICO}/team-a/") == []
    for name in ("np", "lb", "ext"):
        spec = api.get_object(f"{NS}/team-a/services/{name}")["spec"]
        assert spec["type"] == "ClusterIP", name
        assert [p.get("nodePort") for p in spec["ports"]] == [None], name
        for field in (
            "externalIPs",
            "externalTrafficPolicy",
            "healthCheckNodePort",
            "allocateLoadBalancerNodePorts",
            "loadBalancerSourceRanges",
            "loadBalancerClass",
        ):
            assert field not in spec, (name, field)
    annotations = api.get_object(f"{NS}/team-a/services/lb")["metadata"].get("annotations")
    assert tenant_sweep.SOURCE_RANGES_ANNOTATION not in (annotations or {})
    assert api.get_object("/apis/apps/v1/namespaces/team-a/daemonsets/miner") is None
    left = {p["metadata"]["name"] for p in api.objects(f"{NS}/team-a/pods/")}
    assert left == {"training", "ended"}
    assert {path: _kept(api, path) for path in own} == before  # the charms' objects untouched
    # the namespace of a consumer refused now holds the object counts too
    quota = api.get_object(f"{NS}/team-old/resourcequotas/{team_quota.NAME}")
    assert quota is not None and quota["spec"]["hard"]["services.nodeports"] == "0"
    assert api.get_object(f"{NS}/gpu-k8s-system/resourcequotas/{team_quota.NAME}") is None
    bag = peer(out).local_app_data
    assert bag[tenant_sweep.SWEEP_KEY] == NEXT_CHARM
    assert json.loads(bag[tenant_sweep.NAMESPACES_KEY]) == ["team-a", "team-old"]


def test_each_change_is_logged_by_kind_namespace_and_name(ctx, upgraded, caplog):
    caplog.set_level("INFO", logger="tenant_sweep")
    ctx.run(ctx.on.upgrade_charm(), upgraded)
    lines = [r.getMessage() for r in caplog.records if r.name == "tenant_sweep"]
    for what in (
        "networkpolicies team-a/allow-imds deleted",
        "Service team-a/np set from NodePort to ClusterIP",
        "Service team-a/ext kept ClusterIP, without node ports, load balancer or external IPs",
        "DaemonSet team-a/miner deleted",
        f"Pod team-a/on-cp deleted (on the control-plane node {CP_NODE})",
        "Pod team-a/through-cordons deleted (tolerates node.kubernetes.io/unschedulable);"
        " its ReplicaSet web-7d9 makes it again through admission, refused while its template is",
        "Pod team-a/elsewhere deleted (names the scheduler my-scheduler)",
        "Pod team-a/mirror deleted (a mirror pod",
        "Pod team-a/as-grant deleted (runs as the consumer's own ServiceAccount)",
    ):
        assert any(what in line for line in lines), what
    assert lines[-1] == "swept 2 consumer namespaces: 13 objects changed, 0 failed"


def test_the_next_hooks_send_no_request_for_the_sweep(ctx, upgraded, api):
    out = ctx.run(ctx.on.upgrade_charm(), upgraded)
    api.requests.clear()
    out = ctx.run(ctx.on.update_status(), out)
    ctx.run(ctx.on.config_changed(), out)
    swept = [
        r
        for r in api.requests
        if "/team-a/" in r[1] or "projectcalico" in r[1] or r == ("GET", f"{NS}")
    ]
    assert swept == []


def _swept(api) -> list[tuple]:
    """The requests of the sweep: team-a's and team-old's objects, its Namespace and Node lists."""
    return [
        tuple(r)
        for r in api.requests
        if "/team-a/" in r[1]
        or "/team-old/" in r[1]
        or (r[1] == NS and "gpu-k8s.io/consumer" in str(r.query))
        or (r[1] == "/api/v1/nodes" and "control-plane" in str(r.query))
    ]


def test_a_failed_change_leaves_the_rest_done_and_is_tried_again(ctx, upgraded, api):
    """Only what failed is tried again, at update-status (rereview44a F4)."""
    daemonset = "/apis/apps/v1/namespaces/team-a/daemonsets"
    refused = 'daemonsets.apps "miner" is forbidden: by a webhook'
    api.inject(status=403, method="DELETE", path_prefix=f"{daemonset}/miner", message=refused)
    out = ctx.run(ctx.on.upgrade_charm(), upgraded)
    assert "13 objects changed, 1 failed (tried again at update-status" in out.unit_status.message
    assert api.get_object(f"{daemonset}/miner") is not None
    assert api.get_object(f"{NS}/team-a/pods/miner-x") is None  # judged as any pod
    assert api.get_object(f"{NS}/team-a/services/np")["spec"]["type"] == "ClusterIP"
    assert peer(out).local_app_data.get(tenant_sweep.SWEEP_KEY) != NEXT_CHARM
    api.requests.clear()
    out = ctx.run(ctx.on.config_changed(), out)  # not a retry
    assert _swept(api) == []
    out = ctx.run(ctx.on.update_status(), out)  # tried again: only the DaemonSets of team-a
    assert _swept(api) == [("GET", daemonset), ("DELETE", f"{daemonset}/miner")]
    assert "consumer namespaces swept: 1 objects changed" in out.unit_status.message
    assert api.get_object(f"{daemonset}/miner") is None
    assert peer(out).local_app_data[tenant_sweep.SWEEP_KEY] == NEXT_CHARM
    assert tenant_sweep.PROGRESS_KEY not in peer(out).local_app_data


def test_a_lasting_failure_is_tried_a_bounded_number_of_times(ctx, upgraded, api):
    daemonset = "/apis/apps/v1/namespaces/team-a/daemonsets/miner"
    tries = tenant_sweep.MAX_TRIES
    api.inject(status=403, method="DELETE", path_prefix=daemonset, times=tries, message="no")
    out = ctx.run(ctx.on.upgrade_charm(), upgraded)
    for _ in range(tries - 1):
        out = ctx.run(ctx.on.update_status(), out)
    api.requests.clear()
    out = ctx.run(ctx.on.update_status(), out)
    assert _swept(api) == []
    assert (
        f"consumer namespaces not swept after {tries} tries: 1 steps left"
        in out.unit_status.message
    )
    assert api.get_object(daemonset) is not None
    assert peer(out).local_app_data.get(tenant_sweep.SWEEP_KEY) != NEXT_CHARM


def test_a_listing_that_fails_is_tried_again_next_hook(ctx, upgraded, api):
    api.inject(status=403, method="GET", path_prefix=f"{NS}/team-a/pods", message="no")
    out = ctx.run(ctx.on.upgrade_charm(), upgraded)
    assert "1 failed" in out.unit_status.message
    assert api.get_object(f"{NS}/team-a/pods/on-cp") is not None
    out = ctx.run(ctx.on.update_status(), out)
    assert api.get_object(f"{NS}/team-a/pods/on-cp") is None
    assert peer(out).local_app_data[tenant_sweep.SWEEP_KEY] == NEXT_CHARM


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"tolerations": [GPU, *LOST]}, None),
        ({"tolerations": [{"operator": "Exists"}]}, "tolerates <every taint>"),
        ({"tolerations": [{**LOST[0], "tolerationSeconds": 301}]}, "tolerates node"),
        ({"tolerations": [{**LOST[0], "effect": "NoSchedule"}]}, "tolerates node"),
        ({"schedulerName": "default-scheduler"}, None),
        ({"priority": 0}, None),
        ({"priority": 1}, "has a priority above the teams'"),
        ({"serviceAccountName": "other"}, None),
        ({"serviceAccount": "team"}, "runs as the consumer's own ServiceAccount"),
        ({"nodeName": "cp-0"}, "on the control-plane node cp-0"),
    ],
)
def test_a_pod_is_judged_as_consumer_pods_would_admit_it(spec: dict, why: str | None):
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [CONTAINER], **spec}}
    found = tenant_sweep.refusal(pod, "team", frozenset({"cp-0"}))
    assert found == why if why is None else found is not None and found.startswith(why)


def test_a_flannel_cluster_has_no_calico_policy_to_sweep(ctx, machine, api, tmp_path):
    """Calico's kinds are not served there (404): the rest is swept, and the sweep is done."""
    state = testing.State(leader=True, relations=[peers()], config={"cni": "flannel"})
    state = ctx.run(ctx.on.install(), state)
    api.put_object(f"{NS}/team-f", _namespace("team-f", "tf"))
    port = {"port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30090}
    service = _service("np", type="NodePort", ports=[port], externalTrafficPolicy="Cluster")
    service["metadata"]["namespace"] = "team-f"
    api.put_object(f"{NS}/team-f/services/np", service)
    deployed_charm(tmp_path / "charm", NEXT_CHARM)
    out = ctx.run(ctx.on.upgrade_charm(), state)
    assert api.get_object(f"{NS}/team-f/services/np")["spec"]["type"] == "ClusterIP"
    assert peer(out).local_app_data[tenant_sweep.SWEEP_KEY] == NEXT_CHARM


def _seed_operator_namespace(api) -> None:
    """ingress-nginx, made by an operator and named by a consumer before f69ccc6.

    An earlier revision applied its Namespace over it, labels included (rereview44a P2).
    """
    api.put_object(f"{NS}/ingress-nginx", _namespace("ingress-nginx", "app", (KUBECTL, APPLIED)))
    port = {"port": 443, "protocol": "TCP", "targetPort": 443, "nodePort": 30443}
    lb = _service("controller", type="LoadBalancer", ports=[port])
    lb["metadata"]["namespace"] = "ingress-nginx"
    api.put_object(f"{NS}/ingress-nginx/services/controller", lb)
    pod = _pod("controller-0", "ingress-nginx", priorityClassName="system-cluster-critical")
    api.put_object(f"{NS}/ingress-nginx/pods/controller-0", pod)


def test_a_namespace_the_control_plane_did_not_make_is_named_not_swept(ctx, upgraded, api, caplog):
    """Labelled by an earlier revision, made by kubectl: nothing changes there (F1)."""
    _seed_operator_namespace(api)
    before = api.objects(f"{NS}/ingress-nginx")
    caplog.set_level("INFO", logger="tenant_sweep")
    out = ctx.run(ctx.on.upgrade_charm(), upgraded)
    assert api.objects(f"{NS}/ingress-nginx") == before
    assert api.get_object(f"{NS}/ingress-nginx/services/controller")["spec"]["type"] == (
        "LoadBalancer"
    )
    assert "not swept, not made by the control plane: ingress-nginx" in out.unit_status.message
    assert any(
        "namespace ingress-nginx is labelled as a consumer's by an earlier revision but was"
        " not made by it (also written by kubectl-create): not swept" in r.getMessage()
        for r in caplog.records
    )
    bag = peer(out).local_app_data
    assert json.loads(bag[tenant_sweep.NAMESPACES_KEY]) == ["team-a", "team-old"]
    assert api.get_object(f"{NS}/ingress-nginx/resourcequotas/{team_quota.NAME}") is None
    assert bag[tenant_sweep.SWEEP_KEY] == NEXT_CHARM  # team-a's done


KEEP = {"finalizers": ["example.com/keep"]}


def _seed_kept(api) -> None:
    """A DaemonSet and Calico objects a tenant gave a finalizer (rereview44a P1)."""
    template = {"metadata": {"labels": {"app": "k"}}, "spec": {"containers": [CONTAINER]}}
    daemonset = {
        "metadata": {"name": "keeper", "namespace": "team-a", **KEEP},
        "spec": {"selector": {"matchLabels": {"app": "k"}}, "template": template},
    }
    api.put_object("/apis/apps/v1/namespaces/team-a/daemonsets/keeper", daemonset)
    for kind, plural in (("NetworkPolicy", "networkpolicies"), ("NetworkSet", "networksets")):
        kept = _calico(kind, f"kept-{plural}")
        kept["metadata"].update(KEEP)
        api.put_object(f"{CALICO}/team-a/{plural}/kept-{plural}", kept)


def test_what_a_finalizer_keeps_is_deleted_and_seen_gone(ctx, upgraded, api):
    _seed_kept(api)
    out = ctx.run(ctx.on.upgrade_charm(), upgraded)
    assert api.get_object("/apis/apps/v1/namespaces/team-a/daemonsets/keeper") is None
    assert api.objects(f"{CALICO}/team-a/") == []
    assert "consumer namespaces swept: 16 objects changed" in out.unit_status.message
    assert peer(out).local_app_data[tenant_sweep.SWEEP_KEY] == NEXT_CHARM


def test_an_object_still_there_after_its_deletion_is_not_counted_and_tried_again(
    ctx, upgraded, api
):
    _seed_kept(api)
    kept = f"{CALICO}/team-a/networksets/kept-networksets"
    api.inject(status=403, method="PATCH", path_prefix=kept, message="no")
    out = ctx.run(ctx.on.upgrade_charm(), upgraded)
    assert api.get_object(kept)["metadata"].get("deletionTimestamp")
    assert "consumer namespaces swept: 15 objects changed, 1 failed" in out.unit_status.message
    assert peer(out).local_app_data.get(tenant_sweep.SWEEP_KEY) != NEXT_CHARM
    out = ctx.run(ctx.on.update_status(), out)
    assert api.get_object(kept) is None
    assert peer(out).local_app_data[tenant_sweep.SWEEP_KEY] == NEXT_CHARM


def test_lists_are_read_a_page_at_a_time(ctx, upgraded, api, monkeypatch):
    """A namespace's many pods cannot stall the hook in one answer (F4)."""
    monkeypatch.setattr(tenant_sweep, "PAGE", 2)
    api.requests.clear()
    out = ctx.run(ctx.on.upgrade_charm(), upgraded)
    assert {p["metadata"]["name"] for p in api.objects(f"{NS}/team-a/pods/")} == {
        "training",
        "ended",
    }
    pages = [r.query for r in api.requests if r == ("GET", f"{NS}/team-a/pods")]
    assert [q.get("limit") for q in pages] == ["2"] * len(pages) and len(pages) > 2
    assert all(q.get("continue") for q in pages[1:]) and "continue" not in pages[0]
    assert "status.phase!=Succeeded" in pages[0]["fieldSelector"]
    assert peer(out).local_app_data[tenant_sweep.SWEEP_KEY] == NEXT_CHARM


def test_the_sweep_waits_a_hook_after_the_admission_policies_change(ctx, upgraded, api, caplog):
    """A changed policy is enforced from the API server's next refresh (F5)."""
    caplog.set_level("INFO")
    bag = dict(peer(upgraded).local_app_data)
    bag["admission-policies"] = "an earlier revision's"  # addons.ADMISSION_POLICIES_KEY
    changed = dataclasses.replace(peer(upgraded), local_app_data=bag)
    others = [r for r in upgraded.relations if r.id != changed.id]
    state = dataclasses.replace(upgraded, relations=[*others, changed])
    out = ctx.run(ctx.on.upgrade_charm(), state)
    assert "consumer namespaces swept next hook: the admission policies changed" in (
        caplog.messages
    )
    assert api.get_object(f"{NS}/team-a/pods/on-cp") is not None
    out = ctx.run(ctx.on.config_changed(), out)  # the first try: any hook
    assert api.get_object(f"{NS}/team-a/pods/on-cp") is None
    assert peer(out).local_app_data[tenant_sweep.SWEEP_KEY] == NEXT_CHARM


# what a pod of a team's namespace may ask (CONSUMER_PODS) and may not, each judged both
# by the policy through the fake API server's admission and by the sweep (F6); nodeName
# and controller references are left out: the sweep cannot judge them from a stored pod
CUTS = [
    {"tolerations": [GPU, *LOST]},
    {"tolerations": [{"operator": "Exists"}]},
    {"tolerations": [{**LOST[0], "tolerationSeconds": 301}]},
    {"tolerations": [{**LOST[0], "effect": "NoSchedule"}]},
    {"tolerations": [{k: v for k, v in LOST[0].items() if k in LOST_KEYS}]},
    {"tolerations": [GPU, {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
    {"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]},
    {"schedulerName": "default-scheduler"},
    {"schedulerName": "my-scheduler"},
    {"priorityClassName": "system-node-critical"},
    {"serviceAccountName": "default"},
    {"serviceAccountName": "tensorflow"},
    {"serviceAccount": "tensorflow"},
]
RESTRICTED = {  # Pod Security's restricted level, which team-a's namespace enforces
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def test_the_sweep_refuses_the_pods_consumer_pods_refuses(upgraded, api):
    kube = Kube.from_kubeconfig(api.kubeconfig())
    admissions = []
    for i, cut in enumerate(CUTS):
        container = {**CONTAINER, "securityContext": RESTRICTED}
        meta = {"name": f"cut-{i}", "namespace": "team-a"}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta}
        pod["spec"] = {"containers": [container], **cut}
        try:
            kube.create(pod)
            admitted = True
        except KubeError as e:
            assert e.status == 403 and admission_policies.CONSUMER_PODS in e.message, (cut, e)
            admitted = False
        judged = tenant_sweep.refusal(pod, "tensorflow", frozenset({CP_NODE}))
        assert (judged is None) == admitted, (cut, judged)
        admissions.append(admitted)
    assert admissions.count(True) == 3 and admissions.count(False) == len(CUTS) - 3
