"""What a control-plane unit gives the COS agent: etcd, kube-state-metrics, rules.

Each unit's etcd member, and on the leader's machine kube-state-metrics, with the etcd
and cluster alert rules and dashboards.

kube-state-metrics runs where the leader is: applied to the fake API server by the
leader's reconcile, its objects schema-checked, and scraped by the leader's agent only.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import kube_state_metrics
import kubernetes_validate
import pytest
import yaml
from ops import testing

import charm
from charms.gpu_k8s.v0 import api_proxy
from fakes.control_plane import join_workers, node, peer, peers, worker_bag, workers_relation
from fakes.kube_admission import KUBERNETES_VERSION

DEPLOYMENT = "/apis/apps/v1/namespaces/kube-system/deployments/kube-state-metrics"
ROLE = "/apis/rbac.authorization.k8s.io/v1/clusterroles/kube-state-metrics"
RESOURCES = "/api/v1/namespaces/kube-system/configmaps/kube-state-metrics-resources"
NODE = "ip-10-0-1-17"  # the machine fixture's hostname


def _job(name: str, port: int, path: str = "/metrics") -> dict:
    return {
        "job_name": f"kubernetes-control-plane_{name}",
        "metrics_path": path,
        "static_configs": [{"targets": [f"localhost:{port}"], "labels": {"instance": NODE}}],
    }


def _keep(*names: str) -> dict:
    return {
        "metric_relabel_configs": [
            {"source_labels": ["__name__"], "regex": "|".join(names), "action": "keep"}
        ]
    }


# every joined control-plane unit: etcd, then the kubelet's cAdvisor and its API server
# through the node's HAProxy (api_proxy.MetricsAccess), each keeping only what the
# dashboards read (cos_agent.NODE_METRICS)
MEMBER_JOBS = [
    _job("etcd", 2381),
    {
        **_job("kubelet-cadvisor", 6446, "/metrics/cadvisor"),
        **_keep("container_cpu_usage_seconds_total", "container_memory_working_set_bytes"),
    },
    {**_job("kube-apiserver", 6445), **_keep("apiserver_request_total")},
]
KSM_JOB = _job("kube-state-metrics", 8080)
# every unit, joined or not: its own state (unit_state), served on the machine
STATE_JOB = _job("unit-state", 6447, "/metrics/kubernetes-control-plane-0")


@pytest.fixture
def charm_ctx(tmp_path):
    """A Context whose charm root has the charm's rules and dashboards, as packed."""
    src = Path(charm.__file__).parent
    for part in ("prometheus_alert_rules", "grafana_dashboards"):
        shutil.copytree(src / part, tmp_path / "charm" / "src" / part)
    return testing.Context(charm.KubernetesControlPlaneCharm, charm_root=tmp_path / "charm")


def _agent_config(out: testing.State, agent: testing.Relation) -> dict:
    return json.loads(out.get_relation(agent.id).local_unit_data["config"])


def test_the_leader_has_its_etcd_and_kube_state_metrics_scraped_with_the_rules(
    machine, api, charm_ctx
):
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")

    out = charm_ctx.run(
        charm_ctx.on.relation_joined(agent), testing.State(leader=True, relations=[peers(), agent])
    )

    assert len(machine.inits) == 1  # the same event bootstrapped the cluster
    config = _agent_config(out, agent)
    assert config["metrics_scrape_jobs"] == [*MEMBER_JOBS, KSM_JOB, STATE_JOB]
    alerts = {r["alert"] for g in config["metrics_alert_rules"]["groups"] for r in g["rules"]}
    assert alerts == {
        "EtcdNoLeader",
        "EtcdFrequentLeaderChanges",
        "EtcdDatabaseNearQuota",
        "GpuNodeNotReady",
        "TrainingJobRestartingRepeatedly",
        "TrainingJobQueuedTooLong",
        "GpuK8sNodeMissing",
        "GpuK8sUpgradeStalled",
        "GpuK8sCertificateExpiring",
        "GpuK8sCertificateExpiresSoon",
        "GpuK8sCertificateAuthorityExpiring",
        "KubePodCrashLooping",  # kube-prometheus' kubernetes-apps (workloads.rules)
        "KubeDaemonSetRolloutStuck",
        "KubeDaemonSetNotScheduled",
        "KubeJobFailed",
        "ScrapeTargetDown",  # every charm's (cos_agent.TARGETS_RULES)
        "HostMetricsMissing",
        "GpuK8sUnitBlocked",  # and with its own state (unit_state.RULES)
        "GpuK8sUnitStateStale",
    }
    assert len(config["dashboards"]) == 2  # etcd, cluster
    assert peer(out).local_app_data["kube-state-metrics-node"] == NODE


def test_kube_state_metrics_runs_on_the_leaders_node_listening_on_loopback_only(machine, api, ctx):
    ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))

    deployment = api.get_object(DEPLOYMENT)
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["image"] == "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.20.0"
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": NODE}
    assert spec["hostNetwork"] is True
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    # both listeners on loopback (each defaults to "::"); the probes go there too,
    # since without a host they would go to the pod IP, the node's address
    args = container["args"]
    assert {"--host=127.0.0.1", "--telemetry-host=127.0.0.1", "--port=8080"} <= set(args)
    assert container["livenessProbe"]["httpGet"] == {
        "host": "127.0.0.1",
        "path": "/livez",
        "port": 8080,
    }
    assert container["readinessProbe"]["httpGet"]["port"] == 8081
    # node, pod, job and daemonset metrics, plus the JobSet and Workload metrics of our
    # configuration (not --custom-resource-state-only, which would drop the others)
    assert "--resources=nodes,pods,jobs,daemonsets" in args
    assert not any(a.startswith("--custom-resource-state-only") for a in args)
    config = api.get_object(RESOURCES)["data"]["kube-state-metrics-resources.yaml"]
    kinds = {r["groupVersionKind"]["kind"] for r in yaml.safe_load(config)["spec"]["resources"]}
    assert kinds == {"JobSet", "Workload"}
    # it reads, never writes; and finds the kinds through their CRDs
    rules = api.get_object(ROLE)["rules"]
    assert {v for r in rules for v in r["verbs"]} == {"list", "watch"}
    assert {r for rule in rules for r in rule["resources"]} == {
        "nodes",
        "pods",
        "jobs",
        "daemonsets",
        "customresourcedefinitions",
        "jobsets",
        "workloads",
    }


def test_a_new_leader_moves_kube_state_metrics_to_its_node(machine, api, ctx, charm_ctx):
    # the old leader ran it on ip-10-0-1-99; this unit becomes the leader
    old = {"kube-state-metrics": "v2.20.0 0123456789abcdef", "kube-state-metrics-node": "x"}
    state = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    bag = {**peer(state).local_app_data, **old, "kube-state-metrics-node": "ip-10-0-1-99"}
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    moved = dataclasses.replace(
        state, relations=[dataclasses.replace(peer(state), local_app_data=bag), agent]
    )

    out = charm_ctx.run(charm_ctx.on.leader_elected(), moved)

    selector = api.get_object(DEPLOYMENT)["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {"kubernetes.io/hostname": NODE}
    assert peer(out).local_app_data["kube-state-metrics-node"] == NODE
    assert KSM_JOB in _agent_config(out, agent)["metrics_scrape_jobs"]


def test_a_unit_that_is_not_the_leader_leaves_kube_state_metrics_to_it(machine, api, ctx):
    state = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    assert peer(state).local_app_data["kube-state-metrics-node"] == NODE
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    follower = dataclasses.replace(state, leader=False, relations=[*state.relations, agent])

    out = ctx.run(ctx.on.relation_joined(agent), follower)

    # (leadership moved away: the new leader's agent scrapes it where it moves it)
    assert _agent_config(out, agent)["metrics_scrape_jobs"] == [*MEMBER_JOBS, STATE_JOB]
    # ... and the cluster's figures: one copy, from the leader
    served = machine.machine.read("/var/lib/gpu-k8s/unit-state/kubernetes-control-plane-0.prom")
    assert "gpu_k8s_cluster_" not in served


def test_kube_state_metrics_objects_are_valid_kubernetes_objects():
    for obj in kube_state_metrics.manifests(NODE, "registry.example.com/mirror"):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    deployment = kube_state_metrics.manifests(NODE, "registry.example.com/mirror")[-1]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.com/mirror/kube-state-metrics/kube-state-metrics:v2.20.0"


def test_a_unit_that_has_not_joined_offers_no_etcd(machine, tmp_path):
    ctx = testing.Context(charm.KubernetesControlPlaneCharm, charm_root=tmp_path)
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    # not the leader, and nobody bootstrapped: it waits, and has no etcd member yet
    out = ctx.run(ctx.on.relation_joined(agent), testing.State(relations=[peers(), agent]))
    config = json.loads(out.get_relation(agent.id).local_unit_data["config"])
    assert config["metrics_scrape_jobs"] == [STATE_JOB]  # its state says it waits
    assert out.unit_status.name == "waiting"
    served = machine.machine.read("/var/lib/gpu-k8s/unit-state/kubernetes-control-plane-0.prom")
    assert 'gpu_k8s_unit_status{status="waiting"} 1' in served.splitlines()


def test_the_leader_serves_what_the_charms_know_of_the_cluster(machine, api, ctx):
    """A worker whose Node the API lacks counts as missing (_gauges; KSM cannot see it)."""
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    state = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers(), agent]))
    api.put_object("/api/v1/nodes/w0", node("w0"))
    rel = workers_relation({0: worker_bag("w0"), 1: worker_bag("w1")})  # w1 never registered

    join_workers(ctx, dataclasses.replace(state, relations=[*state.relations, rel]), rel)

    served = machine.machine.read("/var/lib/gpu-k8s/unit-state/kubernetes-control-plane-0.prom")
    assert {
        'gpu_k8s_unit_status{status="active"} 1',
        "gpu_k8s_cluster_nodes_missing 1",
        "gpu_k8s_cluster_nodes_behind 0",
        "gpu_k8s_cluster_nodes_pending_removal 0",
    } <= set(served.splitlines())


def test_haproxy_serves_the_nodes_metrics_with_the_kubelets_own_certificate(machine, api, ctx):
    ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))

    config = machine.machine.read(api_proxy.CONFIG)
    # the dated file the link names, so that a rotation changes the config and reloads
    dated = "/var/lib/kubelet/pki/kubelet-client-2026-11-24-10-00-00.pem"
    assert f"server kubelet 127.0.0.1:10250 ssl verify none crt {dated}" in config
    assert (
        "server kube-apiserver 127.0.0.1:6443 ssl verify required "
        f"ca-file /etc/kubernetes/pki/ca.crt crt {dated}"
    ) in config
    assert "bind 127.0.0.1:6446" in config and "bind 127.0.0.1:6445" in config
    # ... which the cluster lets every node use for metrics, and for nothing else
    role = api.get_object("/apis/rbac.authorization.k8s.io/v1/clusterroles/gpu-k8s:node-metrics")
    assert role["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
    ]
    binding = api.get_object(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/gpu-k8s:node-metrics"
    )
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}
    ]


def test_a_rotated_kubelet_certificate_reaches_haproxy(machine, api, ctx):
    state = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    reloads = machine.machine.services[api_proxy.SERVICE].reloads
    rotated = machine.machine.kubelet_client_cert(issued="2027-10-01-00-00-00")

    ctx.run(ctx.on.update_status(), state)

    assert f"crt {rotated}" in machine.machine.read(api_proxy.CONFIG)
    assert machine.machine.services[api_proxy.SERVICE].reloads == reloads + 1
