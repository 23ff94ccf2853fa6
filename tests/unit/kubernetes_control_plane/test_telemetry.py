"""What a control-plane unit gives the COS agent: its etcd member, etcd rules, a dashboard."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ops import testing

import charm
from fakes.control_plane import peers


def test_a_bootstrapped_unit_has_its_etcd_scraped_with_the_etcd_rules(machine, api, tmp_path):
    src = Path(charm.__file__).parent
    for part in ("prometheus_alert_rules", "grafana_dashboards"):
        shutil.copytree(src / part, tmp_path / "charm" / "src" / part)
    ctx = testing.Context(charm.KubernetesControlPlaneCharm, charm_root=tmp_path / "charm")
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")

    out = ctx.run(
        ctx.on.relation_joined(agent), testing.State(leader=True, relations=[peers(), agent])
    )

    assert len(machine.inits) == 1  # the same event bootstrapped the cluster
    config = json.loads(out.get_relation(agent.id).local_unit_data["config"])
    assert config["metrics_scrape_jobs"] == [
        {
            "job_name": "kubernetes-control-plane_0_etcd",
            "metrics_path": "/metrics",
            "static_configs": [
                {"targets": ["localhost:2381"], "labels": {"instance": "ip-10-0-1-17"}}
            ],
        }
    ]
    alerts = {r["alert"] for g in config["metrics_alert_rules"]["groups"] for r in g["rules"]}
    assert alerts == {"EtcdNoLeader", "EtcdFrequentLeaderChanges", "EtcdDatabaseNearQuota"}
    assert len(config["dashboards"]) == 1


def test_a_unit_that_has_not_joined_offers_no_etcd(machine, tmp_path):
    ctx = testing.Context(charm.KubernetesControlPlaneCharm, charm_root=tmp_path)
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    # not the leader, and nobody bootstrapped: it waits, and has no etcd member yet
    out = ctx.run(ctx.on.relation_joined(agent), testing.State(relations=[peers(), agent]))
    config = json.loads(out.get_relation(agent.id).local_unit_data["config"])
    assert config["metrics_scrape_jobs"] == []
    assert out.unit_status.name == "waiting"
