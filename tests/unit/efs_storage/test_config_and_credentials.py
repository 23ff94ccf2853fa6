"""Bad config and AWS credentials: from --trust, from a secret, missing, rejected."""

from __future__ import annotations

import pytest
from efs_env import (
    SECRET_KEY_ID,
    SECRET_SECRET,
    SESSION_TOKEN,
    cloud_spec,
    status_texts,
)
from ops import testing

from fakes.aws import ACCESS_KEY_ID, REGION


@pytest.mark.parametrize(
    "config,fragment",
    [
        ({"throughput-mode": "turbo"}, "throughput-mode"),
        ({"file-system-id": "abc"}, "file-system-id"),
        ({"file-system-id": "fs-XYZ"}, "file-system-id"),
        ({"performance-mode": "fast"}, "performance-mode"),
        ({"throughput-mode": "provisioned"}, "provisioned-throughput"),
        ({"provisioned-throughput": 100}, "only used with throughput-mode provisioned"),
        ({"performance-mode": "maxIO"}, "elastic needs performance-mode generalPurpose"),
        ({"region": "mars-1"}, "region"),
        ({"capacity": "lots"}, "capacity"),
        ({"path": "data"}, "path"),
        ({"path": "/a/../b"}, "path"),
        ({"kms-key-id": "my key"}, "kms-key-id"),
    ],
)
def test_bad_config_blocks_before_any_aws_or_kubernetes_call(ctx, env, config, fragment):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.config_changed(), env.state(config=config, consumers={"tf": "training"}))
    assert out.unit_status.name == "blocked"
    assert fragment in out.unit_status.message
    assert env.proxy.calls == []
    assert env.api.requests == []


def test_good_non_default_config_is_accepted(ctx, env):
    env.add_node("us-east-1a")
    config = {
        "throughput-mode": "provisioned",
        "provisioned-throughput": 64,
        "performance-mode": "maxIO",
        "path": "/shared/data",
        "capacity": "500Gi",
        "region": REGION,
    }
    out = ctx.run(ctx.on.config_changed(), env.state(config=config))
    assert out.unit_status.name != "blocked", out.unit_status.message
    (fs,) = env.file_systems()
    assert fs["ThroughputMode"] == "provisioned"
    assert fs["PerformanceMode"] == "maxIO"
    assert fs["Encrypted"] is True


def test_credentials_from_trust_are_used(ctx, env, scan):
    env.add_node("us-east-1a")
    env.proxy.valid_access_keys = {ACCESS_KEY_ID}
    scan.start()
    out = ctx.run(ctx.on.install(), env.state())
    assert out.unit_status.name == "active", out.unit_status.message
    assert "1/1 mount targets available, 0 claims bound" in out.unit_status.message
    assert len(env.file_systems()) == 1
    assert all(c.fault is None for c in env.proxy.calls)
    scan.check(*status_texts(ctx, out))


def test_credentials_from_a_secret_in_config_win_over_trust(ctx, env, scan):
    env.add_node("us-east-1a")
    env.proxy.valid_access_keys = {SECRET_KEY_ID}
    secret = testing.Secret(
        {
            "access-key-id": SECRET_KEY_ID,
            "secret-access-key": SECRET_SECRET,
            "session-token": SESSION_TOKEN,
        },
        owner=None,
    )
    scan.start()
    state = env.state(config={"credentials": secret.id}, secrets=[secret])
    out = ctx.run(ctx.on.config_changed(), state)
    assert len(env.file_systems()) == 1
    assert env.proxy.calls and all(c.fault is None for c in env.proxy.calls)
    scan.check(*status_texts(ctx, out))


def test_credentials_from_a_secret_without_trust(untrusted_ctx, env):
    ctx = untrusted_ctx
    env.add_node("us-east-1a")
    secret = testing.Secret(
        {"access-key-id": SECRET_KEY_ID, "secret-access-key": SECRET_SECRET}, owner=None
    )
    state = env.state(
        config={"credentials": secret.id, "region": REGION},
        secrets=[secret],
        model=testing.Model(name="gpu"),
    )
    out = ctx.run(ctx.on.config_changed(), state)
    assert out.unit_status.name == "active", out.unit_status.message
    assert len(env.file_systems()) == 1


def test_no_trust_and_no_secret_blocks_with_the_fix(untrusted_ctx, env):
    env.add_node("us-east-1a")
    out = untrusted_ctx.run(untrusted_ctx.on.install(), env.state())
    assert out.unit_status == testing.BlockedStatus(
        "no AWS credentials: run `juju trust efs-storage` or set config credentials to a "
        "Juju secret"
    )
    assert env.proxy.calls == []


def test_secret_not_granted_blocks_with_the_grant_command(ctx, env):
    env.add_node("us-east-1a")
    missing = "secret:0123456789abcdefghij"
    out = ctx.run(ctx.on.config_changed(), env.state(config={"credentials": missing}))
    assert out.unit_status.name == "blocked"
    assert f"juju grant-secret {missing} efs-storage" in out.unit_status.message
    assert env.proxy.calls == []


def test_secret_missing_a_key_names_the_key_not_the_value(ctx, env):
    env.add_node("us-east-1a")
    secret = testing.Secret({"access-key-id": SECRET_KEY_ID}, owner=None)
    out = ctx.run(
        ctx.on.config_changed(), env.state(config={"credentials": secret.id}, secrets=[secret])
    )
    assert out.unit_status.name == "blocked"
    assert "secret-access-key" in out.unit_status.message
    assert SECRET_KEY_ID not in out.unit_status.message
    assert env.proxy.calls == []


def test_rejected_access_key_blocks_naming_the_failure_and_no_value(ctx, env, scan):
    env.add_node("us-east-1a")
    env.proxy.valid_access_keys = {"AKIASOMEOTHERKEY0000"}
    scan.start()
    out = ctx.run(ctx.on.install(), env.state(consumers={"tf": "training"}))
    assert out.unit_status.name == "blocked"
    assert "rejected the credentials" in out.unit_status.message
    assert "update the AWS credentials" in out.unit_status.message
    assert env.mutating_aws_calls() == []
    assert env.kube_writes() == []  # nothing half-created in the cluster either
    scan.check(*status_texts(ctx, out))


@pytest.mark.parametrize(
    "action,permission",
    [
        ("CreateFileSystem", "elasticfilesystem:CreateFileSystem"),
        ("DescribeInstances", "ec2:DescribeInstances"),
        ("CreateMountTarget", "elasticfilesystem:CreateMountTarget"),
    ],
)
def test_denied_permission_is_named_in_blocked(ctx, env, scan, action, permission):
    env.add_node("us-east-1a")
    env.proxy.inject(action, "deny", times=5)
    scan.start()
    out = ctx.run(ctx.on.install(), env.state())
    assert out.unit_status.name == "blocked"
    assert permission in out.unit_status.message
    assert "IAM policy" in out.unit_status.message
    scan.check(*status_texts(ctx, out))


def test_region_from_config_overrides_the_cloud(ctx, env):
    env.add_node("us-east-1a")
    model = testing.Model(
        name="gpu", cloud_spec=cloud_spec(ACCESS_KEY_ID, "x", region="eu-west-1")
    )
    out = ctx.run(ctx.on.install(), env.state(config={"region": REGION}, model=model))
    assert out.unit_status.name == "active", out.unit_status.message
    assert len(env.file_systems()) == 1  # created in us-east-1, where the nodes are


def test_no_region_anywhere_blocks(untrusted_ctx, env):
    secret = testing.Secret(
        {"access-key-id": SECRET_KEY_ID, "secret-access-key": SECRET_SECRET}, owner=None
    )
    state = env.state(
        config={"credentials": secret.id}, secrets=[secret], model=testing.Model(name="gpu")
    )
    out = untrusted_ctx.run(untrusted_ctx.on.install(), state)
    assert out.unit_status == testing.BlockedStatus(
        "no AWS region: set config region (e.g. us-east-1)"
    )
    assert env.proxy.calls == []


def test_a_cloud_that_is_not_aws_blocks(ctx, env):
    model = testing.Model(name="gpu", cloud_spec=cloud_spec("a", "b", kind="openstack"))
    out = ctx.run(ctx.on.install(), env.state(model=model))
    assert out.unit_status.name == "blocked"
    assert "not AWS" in out.unit_status.message
    assert env.proxy.calls == []


def test_an_instance_role_credential_blocks_asking_for_a_key_secret(ctx, env):
    # Juju's EC2 `instance-role` auth type carries `instance-profile-name`, never keys.
    spec = testing.CloudSpec(
        type="ec2",
        name="aws",
        region="us-east-1",
        credential=testing.CloudCredential(
            auth_type="instance-role", attributes={"instance-profile-name": "juju-controller"}
        ),
    )
    out = ctx.run(ctx.on.install(), env.state(model=testing.Model(name="gpu", cloud_spec=spec)))
    assert out.unit_status == testing.BlockedStatus(
        "the model's AWS credential is an instance role, which gives charms no keys; set "
        "config credentials to a Juju secret with access-key-id and secret-access-key"
    )
    assert env.proxy.calls == []
