"""Related to a COS agent, the efs-storage unit publishes the documented (empty) telemetry."""

from __future__ import annotations

import json

from ops import testing


def test_the_agent_gets_the_cos_agent_config(ctx):
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    out = ctx.run(ctx.on.relation_joined(agent), testing.State(leader=True, relations=[agent]))
    config = json.loads(out.get_relation(agent.id).local_unit_data["config"])
    assert config["metrics_scrape_jobs"] == [] and config["dashboards"] == []
