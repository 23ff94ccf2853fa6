"""Removal: claims first (never while pods use them), AWS objects only if owned and asked."""

from __future__ import annotations

import dataclasses

import pytest
from efs_env import Env, dying, installed, relation_of, status_texts
from ops import testing

import charm


def _deletes(env: Env) -> list[str]:
    return [a for a in env.mutating_aws_calls() if a.startswith("Delete")]


def test_removal_deletes_claims_and_keeps_the_file_system_by_default(ctx, env, scan):
    out = installed(ctx, env)
    pv_name = env.pvc("training", "efs-storage-tensorflow")["spec"]["volumeName"]
    group_id = env.our_group()["GroupId"]
    kept = (
        "removing: kept the EFS file system (delete-on-remove is false), and security group "
        f"{group_id} for its 2 mount targets (its NFS rules from Juju's groups revoked)"
    )
    scan.start()
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "shared-storage")), dying(out))
    assert env.pvc("training", "efs-storage-tensorflow") is None
    assert env.pv(pv_name) is None
    assert out.unit_status == testing.MaintenanceStatus(kept)
    out = ctx.run(ctx.on.remove(), dying(out, drop="shared-storage"))
    assert out.unit_status == testing.MaintenanceStatus(kept)
    assert _deletes(env) == []
    assert env.mutating_aws_calls().count("RevokeSecurityGroupIngress") == 1
    (fs,) = env.file_systems()
    assert fs["LifeCycleState"] == "available"
    assert len(env.mount_targets(fs["FileSystemId"])) == 2
    assert env.our_group()["IpPermissions"] == []
    env.juju_destroys_the_model()
    scan.check(*status_texts(ctx, out))


def test_removal_with_delete_on_remove_deletes_in_order_across_hooks(ctx, env, scan):
    out = installed(ctx, env, {"delete-on-remove": True})
    fs_id = env.file_systems()[0]["FileSystemId"]
    env.proxy.deleting_describes = {"file-system": 1, "mount-target": 1}
    env.proxy.clear_counts()
    scan.start()

    # the consumer goes first: claims are deleted, then the mount targets
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "shared-storage")), dying(out))
    assert env.pvc("training", "efs-storage-tensorflow") is None
    assert _deletes(env) == ["DeleteMountTarget", "DeleteMountTarget"]
    assert out.unit_status == testing.MaintenanceStatus(
        f"removing: deleting 2 mount targets of EFS {fs_id}"
    )
    # kube-api goes: the claims are already released, AWS teardown goes on
    out = dying(out, drop="shared-storage")
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "kube-api")), out)
    assert "waiting for 2 mount targets" in out.unit_status.message
    out = ctx.run(ctx.on.stop(), dying(out, drop="kube-api"))
    assert _deletes(env)[-1] == "DeleteFileSystem"
    # remove raises while AWS is still deleting, so that Juju retries the hook
    with pytest.raises(testing.errors.UncaughtCharmError) as info:
        ctx.run(ctx.on.remove(), out)
    assert isinstance(info.value.__cause__, charm.TeardownPendingError)
    assert f"waiting for EFS {fs_id} to be deleted" in str(info.value.__cause__)
    final = ctx.run(ctx.on.remove(), out)
    assert _deletes(env) == [
        "DeleteMountTarget",
        "DeleteMountTarget",
        "DeleteFileSystem",
        "DeleteSecurityGroup",
    ]
    assert final.unit_status == testing.MaintenanceStatus(
        "removing: EFS file system and security group deleted"
    )
    assert env.file_systems() == []
    scan.check(*status_texts(ctx, final))


def test_adopted_file_system_is_never_deleted(ctx, env):
    fs_id = env.efs.create_file_system(CreationToken="by-hand", Encrypted=True)["FileSystemId"]
    out = installed(ctx, env, {"file-system-id": fs_id, "delete-on-remove": True})
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "shared-storage")), dying(out))
    out = ctx.run(ctx.on.remove(), dying(out, drop="shared-storage"))
    assert out.unit_status == testing.MaintenanceStatus(
        f"removing: kept adopted EFS {fs_id}, and security group {env.our_group()['GroupId']} "
        "for its 2 mount targets (its NFS rules from Juju's groups revoked)"
    )
    assert _deletes(env) == []
    env.juju_destroys_the_model()
    assert len(env.mount_targets(fs_id)) == 2
    assert env.pvc("training", "efs-storage-tensorflow") is None  # our claim still goes


def test_claims_in_use_stop_the_removal_and_the_file_system_stays(ctx, env):
    out = installed(ctx, env, {"delete-on-remove": True})
    env.add_pod("training", "mnist-worker-1", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "shared-storage")), dying(out))
    assert out.unit_status == testing.BlockedStatus(
        "removing: claim training/efs-storage-tensorflow is used by pods mnist-worker-1; "
        "delete them to finish removal"
    )
    assert env.pvc("training", "efs-storage-tensorflow") is not None
    assert _deletes(env) == []
    # kube-api goes before the pods did: the file system and its claim are kept
    out = dying(out, drop="shared-storage")
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "kube-api")), out)
    out = ctx.run(ctx.on.remove(), dying(out, drop="kube-api"))
    assert out.unit_status.name == "maintenance"
    assert "kept EFS and claims training/efs-storage-tensorflow" in out.unit_status.message
    assert "its NFS rules from Juju's groups revoked" in out.unit_status.message
    assert _deletes(env) == []
    env.juju_destroys_the_model()
    assert env.file_systems()[0]["LifeCycleState"] == "available"


def test_claims_released_once_the_pods_are_gone(ctx, env):
    out = installed(ctx, env, {"delete-on-remove": True})
    env.add_pod("training", "mnist-worker-1", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "shared-storage")), dying(out))
    assert out.unit_status.name == "blocked"
    env.api.delete_object("/api/v1/namespaces/training/pods/mnist-worker-1")
    out = ctx.run(ctx.on.update_status(), dying(out, drop="shared-storage"))
    assert env.pvc("training", "efs-storage-tensorflow") is None
    assert _deletes(env) == ["DeleteMountTarget", "DeleteMountTarget"]


def test_removing_one_unit_of_a_remaining_application_deletes_nothing(ctx, env):
    out = installed(ctx, env, {"delete-on-remove": True})
    out = ctx.run(ctx.on.remove(), dataclasses.replace(out, planned_units=1))
    assert _deletes(env) == []
    assert env.pvc("training", "efs-storage-tensorflow") is not None


def test_bad_config_during_removal_deletes_nothing_but_frees_jujus_groups(ctx, env):
    out = installed(ctx, env, {"delete-on-remove": True})
    bad = dataclasses.replace(dying(out), config={"delete-on-remove": True, "path": "x"})
    out = ctx.run(ctx.on.remove(), bad)
    assert out.unit_status.name == "blocked"
    assert _deletes(env) == []
    assert env.pvc("training", "efs-storage-tensorflow") is not None
    env.juju_destroys_the_model()  # the rules that referenced Juju's groups are gone


def test_a_blocked_removal_that_cannot_revoke_the_rules_fails_until_it_can(ctx, env):
    out = installed(ctx, env, {"delete-on-remove": True})
    bad = dataclasses.replace(dying(out), config={"delete-on-remove": True, "path": "x"})
    env.proxy.deny("RevokeSecurityGroupIngress")

    with pytest.raises(testing.errors.UncaughtCharmError) as info:
        ctx.run(ctx.on.remove(), bad)

    error = info.value.__cause__
    assert isinstance(error, charm.TeardownPendingError)
    assert "the NFS rules that reference Juju's security groups could not be revoked" in str(error)
    assert "RevokeSecurityGroupIngress" in str(error)
    ctx.run(ctx.on.remove(), bad)  # Juju retries the hook; the denial is gone
    env.juju_destroys_the_model()


def test_claims_in_use_at_removal_keep_the_rules_and_retry(ctx, env):
    out = installed(ctx, env, {"delete-on-remove": True})
    env.add_pod("training", "mnist-worker-1", "efs-storage-tensorflow")

    with pytest.raises(testing.errors.UncaughtCharmError) as info:
        ctx.run(ctx.on.remove(), dying(out))

    assert "is used by pods mnist-worker-1" in str(info.value.__cause__)
    group = env.our_group()
    assert [p for p in group["IpPermissions"] if p.get("FromPort") == 2049]  # NFS still up
