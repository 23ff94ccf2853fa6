"""Related to a COS agent, the tensorflow unit publishes the documented telemetry.

Its machine runs no exporter of its own but the unit's state (unit_state: its status
and, from the leader, its jobs by phase); the leader's agent also scrapes every running
training pod's launcher at the pod's IP (job_metrics.py), with the training rules. The
agent collects the machine's metrics and logs by itself; GPU use per training pod comes
from the GPU nodes' DCGM exporters (the worker's `gpu-k8s / training jobs` dashboard).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from conftest import NS, add_nodes, node, run_action, training_pods
from cosl import LZMABase64
from ops import testing

import charm


@pytest.fixture
def charm_ctx(tmp_path, fake_time):
    """A Context whose charm root has the charm's rules and dashboards, as packed."""
    src = Path(charm.__file__).parent
    for part in ("prometheus_alert_rules", "grafana_dashboards"):
        shutil.copytree(src / part, tmp_path / "charm" / "src" / part)
    return testing.Context(charm.TensorflowCharm, charm_root=tmp_path / "charm")


def test_the_agent_gets_the_cos_agent_config_and_nothing_secret(charm_ctx, state):
    ctx = charm_ctx
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    out = ctx.run(
        ctx.on.relation_joined(agent),
        dataclasses.replace(state, relations=[*state.relations, agent]),
    )
    config = json.loads(out.get_relation(agent.id).local_unit_data["config"])
    assert config["log_slots"] == []
    (board,) = [json.loads(LZMABase64.decompress(d)) for d in config["dashboards"]]
    assert board["title"] == "gpu-k8s / training progress"
    assert [v["name"] for v in board["templating"]["list"]] == [
        "prometheusds",
        "lokids",  # the job's pod logs
        "namespace",  # a team
        "job",
        "node",
    ]
    assert config["metrics_scrape_jobs"] == [
        {
            "job_name": "tensorflow_unit-state",
            "metrics_path": "/metrics/tensorflow-0",
            "static_configs": [
                {"targets": ["localhost:6447"], "labels": {"instance": "ip-10-0-1-17"}}
            ],
        }
    ]
    groups = config["metrics_alert_rules"]["groups"]
    assert {r["alert"] for g in groups for r in g["rules"]} == {
        "GpuK8sUnitBlocked",
        "GpuK8sUnitStateStale",
        "ScrapeTargetDown",
        "HostMetricsMissing",
        "TrainingJobNoProgress",  # the training pods' (prometheus_alert_rules/training.rules)
        "TrainingCheckpointStale",
    }
    assert "secret" not in json.dumps(config).lower()


# ---------------------------------------------------- the training pods' progress metrics

UNIT_ADDRESS = "192.0.2.0"  # ops.testing's default address of every binding


def _running_with_ips(api) -> dict[str, str]:
    """As kubelet does once a pod's sandbox runs: phase Running and status.podIP."""
    ips = {}
    for i, pod in enumerate(sorted(training_pods(api), key=lambda p: p["metadata"]["name"])):
        name = pod["metadata"]["name"]
        pod["status"] = {**pod.get("status", {}), "phase": "Running", "podIP": f"10.244.1.{i}"}
        api.put_object(f"/api/v1/namespaces/{NS}/pods/{name}", pod)
        ips[name] = f"10.244.1.{i}"
    return ips


def _with_agent(state):
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    return agent, dataclasses.replace(state, relations=[*state.relations, agent])


def test_the_leader_has_its_agent_scrape_every_running_training_pod(ctx, state, api):
    """Pods are not on the host network: the agent on the leader's node reaches their IPs.

    The node is found by the unit's address; the pods' metrics port opens to it alone.
    """
    me = node("cp-0")
    me["status"]["addresses"] = [{"type": "InternalIP", "address": UNIT_ADDRESS}]
    me["metadata"]["annotations"] = {"projectcalico.org/IPv4VXLANTunnelAddr": "10.244.0.1"}
    add_nodes(api, me, node("gpu-0", 4))
    run_action(ctx, state, "train", job="mnist", workers=2)
    ips = _running_with_ips(api)
    agent, related = _with_agent(state)

    out = ctx.run(ctx.on.update_status(), related)

    config = json.loads(out.get_relation(agent.id).local_unit_data["config"])
    (job,) = [j for j in config["metrics_scrape_jobs"] if j["job_name"] == "tensorflow_training"]
    assert {c["targets"][0]: c["labels"]["pod"] for c in job["static_configs"]} == {
        f"{ip}:9464": name for name, ip in ips.items()
    }
    labels = job["static_configs"][0]["labels"]
    assert labels["namespace"] == NS and labels["training_job"] == "mnist"
    assert labels["role"] == "worker" and "job" not in labels  # Prometheus' own label
    policy = api.get_object(
        f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/tensorflow-training-metrics"
    )
    assert policy["spec"]["ingress"] == [
        {
            "from": [
                {"ipBlock": {"cidr": "10.244.0.1/32"}},
                {"ipBlock": {"cidr": f"{UNIT_ADDRESS}/32"}},
            ],
            "ports": [{"protocol": "TCP", "port": 9464}],
        }
    ]
    # a cos-agent hook publishes the same, and a second update-status writes nothing
    again = ctx.run(ctx.on.relation_changed(out.get_relation(agent.id)), out)
    assert again.get_relation(agent.id).local_unit_data["config"] == json.dumps(
        config, sort_keys=True
    )
    writes = [r for r in api.requests if r.method != "GET"]
    ctx.run(ctx.on.update_status(), again)
    assert [r for r in api.requests if r.method != "GET"] == writes


def test_a_unit_on_no_node_of_the_cluster_scrapes_no_pod_and_opens_nothing(ctx, state, api):
    add_nodes(api, node("gpu-0", 4))  # no Node has the unit's address
    run_action(ctx, state, "train", job="mnist", workers=1)
    _running_with_ips(api)
    agent, related = _with_agent(state)

    out = ctx.run(ctx.on.update_status(), related)

    config = json.loads(out.get_relation(agent.id).local_unit_data["config"])
    assert [j["job_name"] for j in config["metrics_scrape_jobs"]] == ["tensorflow_unit-state"]
    policy = api.get_object(
        f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/tensorflow-training-metrics"
    )
    assert policy["spec"]["ingress"] == []
