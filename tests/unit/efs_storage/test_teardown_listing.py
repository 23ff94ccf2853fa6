"""What the README's leftover listing prints after efs-storage is removed, against moto.

README "Tear down, and what is kept" has the operator run

    aws resourcegroupstaggingapi get-resources --region us-east-1 \
        --tag-filters Key=gpu-k8s:model,Values=$uuid \
        --query 'ResourceTagMappingList[].ResourceARN'

Here the charm is deployed and removed as in test_removal.py (`delete-on-remove` false,
then true), Juju destroys the model, and the same GetResources call goes to the moto
server the charm talked to. moto (5.2.5) answers it from every backend that mixes in
`moto.core.resource_tagging.TaggableResourcesMixin`
(moto/resourcegroupstaggingapi/models.py `_get_resources_generator` walks
`iter_taggable_backends`): EC2's lists security groups as `ec2:security-group`
(moto/ec2/models/__init__.py `iter_tagged_resources`, with instances, volumes, subnets,
VPCs...) and EFS's lists file systems (`elasticfilesystem:file-system`) and access points
(moto/efs/models.py). Mount targets carry no tags, in AWS as in moto. A resource without
tags is left out, and a deleted one is gone at once (AWS documents GetResources as
listing "tagged or previously tagged" resources, so it may show a deleted one for a
while).

The listing is rendered as the AWS CLI prints it: the paginated result in full, the
JMESPath `--query`, then awscli/formatter.py `JSONFormatter` (`json.dump(response,
indent=4, ensure_ascii=False)` and a newline; only `{}` prints nothing, so `[]` prints).
"""

from __future__ import annotations

import json
from typing import Any

import efs
import jmespath
import readme_examples
from aws_fakes import REGION
from efs_env import Env, dying, installed, relation_of
from ops import testing

QUERY = "ResourceTagMappingList[].ResourceARN"
# what differs from run to run: the ids moto draws
IDS = (r"fs-[0-9a-f]+", r"sg-[0-9a-f]+")


def _get_resources(env: Env, key: str) -> Any:
    """What `get-resources --tag-filters Key=<key>,Values=<uuid> --query ...` finds.

    Every page first, as the CLI's paginated call (build_full_result), then the query.
    """
    tagging = env.aws.client("resourcegroupstaggingapi")
    pages = tagging.get_paginator("get_resources").paginate(
        TagFilters=[{"Key": key, "Values": [env.model.uuid]}]
    )
    return jmespath.search(QUERY, pages.build_full_result())


def _cli_json(value: Any) -> str:
    """awscli/formatter.py JSONFormatter with the default `--output json`."""
    return json.dumps(value, indent=4, ensure_ascii=False) + "\n"


def test_a_kept_file_system_and_its_security_group_are_listed_by_the_model_tag(ctx, env):
    out = installed(ctx, env)
    (fs,) = env.file_systems()
    group = env.our_group()
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "shared-storage")), dying(out))
    out = ctx.run(ctx.on.remove(), dying(out, drop="shared-storage"))
    assert "kept the EFS file system" in out.unit_status.message
    env.juju_destroys_the_model()

    listed = _get_resources(env, efs.TAG_MODEL)

    group_arn = f"arn:aws:ec2:{REGION}:{group['OwnerId']}:security-group/{group['GroupId']}"
    assert sorted(listed) == sorted([fs["FileSystemArn"], group_arn])
    assert fs["FileSystemArn"].endswith(f":file-system/{fs['FileSystemId']}")
    readme_examples.show("leftovers-kept", _cli_json(listed), volatile=IDS)


def test_nothing_is_listed_once_delete_on_remove_deleted_everything(ctx, env):
    out = installed(ctx, env, {"delete-on-remove": True})
    assert len(_get_resources(env, efs.TAG_MODEL)) == 2  # while deployed: the group and EFS
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "shared-storage")), dying(out))
    out = dying(out, drop="shared-storage")
    out = ctx.run(ctx.on.relation_broken(relation_of(out, "kube-api")), out)
    out = ctx.run(ctx.on.stop(), dying(out, drop="kube-api"))
    out = ctx.run(ctx.on.remove(), out)
    assert out.unit_status == testing.MaintenanceStatus(
        "removing: EFS file system and security group deleted"
    )
    env.juju_destroys_the_model()

    listed = _get_resources(env, efs.TAG_MODEL)

    assert listed == []
    readme_examples.show("leftovers-none", _cli_json(listed))
