"""The show-filesystem action."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from efs_env import status_texts
from ops import testing

import charm


def test_show_filesystem_reports_an_owned_file_system_and_its_claims(ctx, env, scan):
    env.add_node("us-east-1a")
    env.add_node("us-east-1b")
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    env.bind("training", "efs-storage-tensorflow")
    fs_id = env.file_systems()[0]["FileSystemId"]
    mts = {m["AvailabilityZoneName"]: m for m in env.mount_targets(fs_id)}
    env.proxy.clear_counts()
    scan.start()
    out = ctx.run(ctx.on.action("show-filesystem"), out)
    results = ctx.action_results
    assert results["file-system-id"] == fs_id
    assert results["ownership"] == "owned"
    assert results["state"] == "available"
    assert results["throughput-mode"] == "elastic"
    assert int(results["size-bytes"]) >= 0
    assert results["dns-name"] == f"{fs_id}.efs.us-east-1.amazonaws.com"
    assert set(results["mount-targets"]) == {"us-east-1a", "us-east-1b"}
    a = mts["us-east-1a"]
    assert results["mount-targets"]["us-east-1a"] == (
        f"{a['MountTargetId']} {a['SubnetId']} available"
    )
    assert results["claims"] == {"tensorflow": "training/efs-storage-tensorflow Bound"}
    assert env.proxy.counts(mutating=True) == {}  # read only
    scan.check(results, *status_texts(ctx, out))


def test_show_filesystem_says_adopted(ctx, env):
    fs_id = env.efs.create_file_system(CreationToken="by-hand")["FileSystemId"]
    ctx.run(ctx.on.action("show-filesystem"), env.state(config={"file-system-id": fs_id}))
    assert ctx.action_results["ownership"] == "adopted"
    assert ctx.action_results["file-system-id"] == fs_id
    assert ctx.action_results["claims"] == "none"
    assert ctx.action_results["mount-targets"] == "none"


def test_show_filesystem_before_anything_exists_creates_nothing(ctx, env):
    ctx.run(ctx.on.action("show-filesystem"), env.state())
    assert ctx.action_results["file-system-id"] == "none"
    assert ctx.action_results["state"] == "absent"
    assert env.proxy.counts(mutating=True) == {}
    assert env.kube_writes() == []


def test_show_filesystem_without_kube_api_still_describes_aws(ctx, env):
    ctx.run(ctx.on.action("show-filesystem"), env.state(relations=[]))
    assert ctx.action_results["claims"] == "unknown (no kube-api access)"


def test_show_filesystem_fails_on_bad_config_without_calling_aws(ctx, env):
    with pytest.raises(testing.ActionFailed) as info:
        ctx.run(ctx.on.action("show-filesystem"), env.state(config={"throughput-mode": "turbo"}))
    assert "throughput-mode" in info.value.message
    assert env.proxy.calls == []


def test_show_filesystem_fails_without_credentials(untrusted_ctx, env):
    with pytest.raises(testing.ActionFailed) as info:
        untrusted_ctx.run(untrusted_ctx.on.action("show-filesystem"), env.state())
    assert "juju trust" in info.value.message
    assert env.proxy.calls == []


def test_show_filesystem_with_rejected_credentials_fails_naming_the_problem(ctx, env, scan):
    env.proxy.valid_access_keys = {"AKIASOMEOTHERKEY0000"}
    scan.start()
    with pytest.raises(testing.ActionFailed) as info:
        ctx.run(ctx.on.action("show-filesystem"), env.state())
    assert "rejected the credentials" in info.value.message
    scan.check(info.value.message, ctx.action_logs)


def test_show_filesystem_says_the_claims_are_unknown_while_the_api_does_not_answer(ctx, env):
    env.api.inject(status=503, times=5, method="GET", path_prefix="/api/v1/persistentvolumes")
    ctx.run(ctx.on.action("show-filesystem"), env.state())
    assert ctx.action_results["claims"] == "unknown (Kubernetes API: 503 ServiceUnavailable)"


def test_show_filesystem_runs_without_the_machine_lock_and_leaves_the_machine(
    ctx, env, unit_machine
):
    """Why it may be `parallel: true` (tests/unit/tensorflow/test_machine_lock.py)."""
    spec = yaml.safe_load((Path(charm.__file__).parents[1] / "charmcraft.yaml").read_text())
    assert spec["actions"]["show-filesystem"].get("parallel") is True
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    out = ctx.run(ctx.on.install(), env.state(relations=[agent]))
    assert unit_machine.calls, "a hook serves the unit's state on the machine"
    before = len(unit_machine.calls)
    ctx.run(ctx.on.action("show-filesystem"), out)
    assert unit_machine.calls[before:] == []
