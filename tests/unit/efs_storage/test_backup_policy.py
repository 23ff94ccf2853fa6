"""config aws-backup: EFS automatic backups (PutBackupPolicy) on the file system we made.

moto 5.2 answers DescribeBackupPolicy but lacks PutBackupPolicy; the fault proxy
(tests/fakes/aws.py) keeps what Put sets, answering ENABLING/DISABLING first as EFS's
BackupPolicy documents, and PolicyNotFound for a file system whose backups were never set.
"""

from __future__ import annotations

import dataclasses

import pytest

DAILY = "(AWS Backup's default EFS plan: daily, kept 35 days)"


def test_aws_backup_turns_automatic_backups_on_and_off_again(ctx, env):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state(config={"aws-backup": True}))
    fs_id = env.file_systems()[0]["FileSystemId"]
    assert env.proxy.count("PutBackupPolicy") == 1
    assert env.proxy.backup_policies[fs_id] == "ENABLING"

    out = ctx.run(ctx.on.update_status(), out)  # enabled now: nothing more to put
    assert env.proxy.count("PutBackupPolicy") == 1
    ctx.run(ctx.on.action("show-filesystem"), out)
    assert ctx.action_results["backup-policy"] == f"enabled {DAILY}"

    off = dataclasses.replace(out, config={**out.config, "aws-backup": False})
    out = ctx.run(ctx.on.config_changed(), off)
    assert env.proxy.count("PutBackupPolicy") == 2
    out = ctx.run(ctx.on.update_status(), out)
    assert env.proxy.backup_policies[fs_id] == "DISABLED"
    ctx.run(ctx.on.action("show-filesystem"), out)
    assert ctx.action_results["backup-policy"] == "disabled"


def test_without_aws_backup_a_new_file_system_has_none_and_nothing_is_put(ctx, env):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state())
    ctx.run(ctx.on.update_status(), out)
    assert env.proxy.count("PutBackupPolicy") == 0
    ctx.run(ctx.on.action("show-filesystem"), out)
    assert ctx.action_results["backup-policy"] == "disabled"  # PolicyNotFound


@pytest.mark.parametrize("backup", [True, False])
def test_an_adopted_file_systems_policy_is_reported_never_changed(ctx, env, backup):
    fs_id = env.efs.create_file_system(CreationToken="by-hand", Backup=backup)["FileSystemId"]
    env.add_node("us-east-1a")
    config = {"file-system-id": fs_id, "aws-backup": not backup}
    out = ctx.run(ctx.on.install(), env.state(config=config))
    ctx.run(ctx.on.action("show-filesystem"), out)
    assert env.proxy.count("PutBackupPolicy") == 0
    want = f"enabled {DAILY}" if backup else "disabled"
    assert ctx.action_results["backup-policy"] == want


def test_a_refused_put_backup_policy_blocks_naming_the_action(ctx, env):
    env.add_node("us-east-1a")
    env.proxy.deny("PutBackupPolicy", times=10)
    out = ctx.run(ctx.on.install(), env.state(config={"aws-backup": True}))
    assert out.unit_status.name == "blocked"
    assert "elasticfilesystem:PutBackupPolicy" in out.unit_status.message


def test_show_filesystem_puts_nothing(ctx, env):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state())
    env.proxy.clear_counts()
    on = dataclasses.replace(out, config={**out.config, "aws-backup": True})
    ctx.run(ctx.on.action("show-filesystem"), on)
    assert env.proxy.counts(mutating=True) == {}
    assert isinstance(ctx.action_results, dict)
