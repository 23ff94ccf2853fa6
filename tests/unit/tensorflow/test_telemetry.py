"""Related to a COS agent, the tensorflow unit publishes the documented telemetry.

Its machine runs no exporter of its own but the unit's state (unit_state: its status
and, from the leader, its jobs by phase): the agent collects the machine's metrics and
logs by itself; GPU use per training pod comes from the GPU nodes' DCGM exporters (the
worker's `gpu-k8s / training jobs` dashboard).
"""

from __future__ import annotations

import dataclasses
import json

from ops import testing


def test_the_agent_gets_the_cos_agent_config_and_nothing_secret(ctx, state):
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    out = ctx.run(
        ctx.on.relation_joined(agent),
        dataclasses.replace(state, relations=[*state.relations, agent]),
    )
    config = json.loads(out.get_relation(agent.id).local_unit_data["config"])
    assert config["dashboards"] == [] and config["log_slots"] == []
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
    }
    assert "secret" not in json.dumps(config).lower()
