r"""The README's teardown commands in AWS, run as written by the AWS CLI against moto.

README "Tear down, and what is kept" has the operator list what carries the model's tags,

    aws resourcegroupstaggingapi get-resources --region us-east-1 \
        --tag-filters Key=gpu-k8s:model,Values=$uuid \
        --query 'ResourceTagMappingList[].ResourceARN'

and delete a kept file system by hand (mount targets, then the file system, then the
charm's security group). Here the charm is deployed and removed as in test_removal.py
(`delete-on-remove` false, then true), Juju destroys the model, and the README's own
command lines run in bash with Debian's AWS CLI v2 against the proxy and moto server the
charm talked to (tests/aws_cli.py).

moto (5.2.5) answers GetResources from every backend that mixes in
`moto.core.resource_tagging.TaggableResourcesMixin`
(moto/resourcegroupstaggingapi/models.py `_get_resources_generator` walks
`iter_taggable_backends`): EC2's lists instances (terminated ones too, as EC2 does for
about an hour) and security groups (moto/ec2/models/__init__.py `iter_tagged_resources`),
EFS's lists file systems (`elasticfilesystem:file-system`) and access points
(moto/efs/models.py). Mount targets carry no tags, in AWS as in moto. A resource without
tags is left out, and a deleted one is gone at once (AWS documents GetResources as
listing "tagged or previously tagged" resources, so it may show a deleted one for a
while). A deleted mount target reads `deleting` for one more describe, and meanwhile
DeleteFileSystem answers FileSystemInUse (the proxy's life cycle, fakes.aws.AwsProxy).
"""

from __future__ import annotations

import json
from pathlib import Path

import aws_cli
import efs_model
from efs_env import Env, dying, installed, relation_of
from ops import testing

pytestmark = aws_cli.needs_aws_cli

# what differs from run to run: the ids moto draws
IDS = (r"fs-[0-9a-f]+", r"fsmt-[0-9a-f]+", r"sg-[0-9a-f]+", r"i-[0-9a-f]+")


def _shell(env: Env, tmp_path: Path) -> aws_cli.Shell:
    """A bash as the operator's, with `$uuid` saved before `juju destroy-model`."""
    return aws_cli.Shell(tmp_path, env.aws.url, {"uuid": env.model.uuid})


def _kept(ctx, env: Env) -> None:
    """efs-storage removed with `delete-on-remove` false, then the model destroyed."""
    out = installed(ctx, env)
    env.add_node("us-east-1a")  # the default bundle's third machine: 3 instances in all
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "shared-storage")), dying(out))
    out = ctx.run(ctx.on.remove(), dying(out, drop="shared-storage"))
    assert "kept the EFS file system" in out.unit_status.message
    env.juju_destroys_the_model()


def test_the_instances_juju_terminated_and_the_kept_file_system_and_group_are_listed(
    ctx, env, tmp_path
):
    _kept(ctx, env)
    (fs,) = env.file_systems()
    group = env.our_group()

    by_juju, by_charm = aws_cli.transcript("leftovers-kept", _shell(env, tmp_path), volatile=IDS)

    group_arn = f"arn:aws:ec2:us-east-1:{group['OwnerId']}:security-group/{group['GroupId']}"
    assert sorted(json.loads(by_charm)) == sorted([fs["FileSystemArn"], group_arn])
    instances = [
        f"arn:aws:ec2:us-east-1:{group['OwnerId']}:instance/{i.instance_id}" for i in env.instances
    ]
    assert len(instances) == 3
    assert sorted(json.loads(by_juju)) == sorted(instances)


def test_the_kept_file_system_is_deleted_by_hand_in_the_readme_order(ctx, env, tmp_path):
    _kept(ctx, env)
    (fs,) = env.file_systems()
    mount_targets = [mt["MountTargetId"] for mt in env.mount_targets(fs["FileSystemId"])]
    assert len(mount_targets) == 2
    env.proxy.deleting_describes["mount-target"] = 1
    shell = _shell(env, tmp_path)
    ids = {
        "fs-...": fs["FileSystemId"],
        "fsmt-...": mount_targets,
        "sg-...": env.our_group()["GroupId"],
    }

    outputs = aws_cli.transcript(
        "delete-kept", shell, ids, volatile=IDS, expect_failure=["too soon"]
    )

    listed, deleted, refused, deleting, none, *_ = outputs
    assert sorted(listed.split()) == sorted([*mount_targets, "available", "available"])
    assert deleted == ""
    assert "An error occurred (FileSystemInUse) when calling the DeleteFileSystem" in refused
    assert sorted(deleting.split()) == sorted([*mount_targets, "deleting", "deleting"])
    assert none == ""
    assert env.file_systems() == []
    aws_cli.transcript("leftovers-none", shell)


def test_nothing_is_listed_once_delete_on_remove_deleted_everything(ctx, env, tmp_path):
    out = installed(ctx, env, {"delete-on-remove": True})
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "shared-storage")), dying(out))
    out = dying(out, drop="shared-storage")
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "kube-api")), out)
    out = ctx.run(ctx.on.stop(), dying(out, drop="kube-api"))
    out = ctx.run(ctx.on.remove(), out)
    assert out.unit_status == testing.MaintenanceStatus(
        "removing: EFS file system and security group deleted"
    )
    env.juju_destroys_the_model()

    (listed,) = aws_cli.transcript("leftovers-none", _shell(env, tmp_path))

    assert listed == "[]\n"
    assert efs_model.TAG_MODEL in aws_cli.commands("leftovers-none")[0]
