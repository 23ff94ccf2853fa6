"""Related to a COS agent, the tensorflow unit publishes the documented (empty) telemetry.

Its machine runs no exporter of its own: the agent collects the machine's metrics and
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
    assert config == {
        "dashboards": [],
        "log_alert_rules": {},
        "log_slots": [],
        "metrics_alert_rules": {},
        "metrics_scrape_jobs": [],
    }
