"""Related to a COS agent, the efs-storage unit publishes the documented telemetry.

It also serves its own state (lib charms.gpu_k8s.v0.unit_state): the file system as it
saw it.
"""

from __future__ import annotations

import json

from ops import testing

from charms.gpu_k8s.v0 import unit_state


def test_the_agent_gets_the_cos_agent_config(ctx):
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    out = ctx.run(ctx.on.relation_joined(agent), testing.State(leader=True, relations=[agent]))
    config = json.loads(out.get_relation(agent.id).local_unit_data["config"])
    assert config["dashboards"] == []
    assert [j["job_name"] for j in config["metrics_scrape_jobs"]] == ["efs-storage_unit-state"]
    assert config["metrics_scrape_jobs"][0]["metrics_path"] == "/metrics/efs-storage-0"


def test_the_leader_serves_the_file_system_it_reconciled(ctx, env, unit_machine):
    env.add_node("us-east-1a")
    env.add_node("us-east-1b")
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    state = env.state(relations=[env.kube_api_relation(), agent])
    out = ctx.run(ctx.on.update_status(), state)
    fs_id = env.file_systems()[0]["FileSystemId"]
    assert out.unit_status.name == "active"

    text = unit_machine.host().read(f"{unit_state.DIRECTORY}/efs-storage-0.prom")
    lines = text.splitlines()
    assert 'gpu_k8s_unit_status{status="active"} 1' in lines
    assert f'gpu_k8s_efs_mount_targets{{file_system_id="{fs_id}"}} 2' in lines
    assert f'gpu_k8s_efs_zones_unserved{{file_system_id="{fs_id}"}} 0' in lines
    assert f'gpu_k8s_efs_claims_bound{{file_system_id="{fs_id}"}} 0' in lines
    assert any(line.startswith("gpu_k8s_efs_size_bytes{") for line in lines)

    # a unit that is not the leader serves its status, not a second copy of the gauges
    out = ctx.run(ctx.on.update_status(), env.state(relations=[agent], leader=False))
    text = unit_machine.host().read(f"{unit_state.DIRECTORY}/efs-storage-0.prom")
    assert "gpu_k8s_efs_" not in text
    assert 'gpu_k8s_unit_status{status="active"} 1' in text.splitlines()


def test_a_config_blocked_unit_serves_blocked(ctx, env, unit_machine):
    """Review observability.md F-3: ops' errors="blocked" ended the hook before commit.

    The unit-state file kept its last status, so GpuK8sUnitBlocked could never fire for
    the most common operator-fixable block.
    """
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    state = env.state(relations=[env.kube_api_relation(), agent], config={"region": "mars-1"})
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("Invalid config: region")
    text = unit_machine.host().read(f"{unit_state.DIRECTORY}/efs-storage-0.prom")
    assert text is not None
    assert 'gpu_k8s_unit_status{status="blocked"} 1' in text.splitlines()
