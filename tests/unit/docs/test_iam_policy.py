"""The IAM policy the docs print allows every AWS call the charms make, and no more.

Every `efs`/`ec2` operation efs-storage sends (found in its source: the first argument of
`AwsApi.call`, `pages` and `delete_ignoring` is the client, the second the operation),
plus the IAM actions AWS checks inside those calls (`aws._ALSO_NEEDS`, from botocore's
models and the EC2 guide), must be allowed by a statement of the policy on the page that
prints it. A statement whose Resource is `"*"` and has no Condition is named on that page
with the reason it cannot be narrowed, and holds no action the charm could use to change
what another application made.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import docs_pages
from charm_modules import load

ROOT = Path(__file__).resolve().parents[3]
REASONS = "Why each statement is as wide as it is"
SOURCES = ROOT / "charms" / "efs-storage" / "src"
PREFIX = {"efs": "elasticfilesystem", "ec2": "ec2"}
# The value a write's tag must have: the one on the credential's own IAM user or role (IAM
# User Guide, "IAM policy elements: Variables and tags": aws:PrincipalTag/<key> as a policy
# variable in a condition's value)
OWN = "${aws:PrincipalTag/gpu-k8s:application}"
# The statements that may be "*" without a condition, and why (each explained on the page)
UNSCOPED = {
    "EfsStorageDescribe": "read-only Describe calls; EC2's support no resource-level permissions",
    "EfsMountTargetInterfaces": "network interfaces EFS makes for a mount target, untagged",
}


def _page_text() -> str:
    """The page that prints the policy: the one that says why each statement is as wide."""
    return docs_pages.holding(REASONS).read_text()


def _policy() -> dict:
    blocks = re.findall(r"```json\n(.*?)```", _page_text(), re.DOTALL)
    policies = [json.loads(b) for b in blocks if '"EfsStorageDescribe"' in b]
    assert len(policies) == 1, "the IAM policy page has no JSON block with the policy"
    return policies[0]


def _calls() -> set[str]:
    """Every IAM action of an AWS operation efs-storage's source sends."""
    found = set()
    for path in SOURCES.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and len(node.args) >= 2):
                continue
            client, operation = node.args[0], node.args[1]
            if (
                isinstance(client, ast.Attribute)
                and client.attr in PREFIX
                and isinstance(operation, ast.Constant)
                and isinstance(operation.value, str)
            ):
                found.add(f"{PREFIX[client.attr]}:{operation.value}")
    return found


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def _allowed(policy: dict) -> set[str]:
    return {
        action
        for statement in policy["Statement"]
        if statement["Effect"] == "Allow"
        for action in _listed(statement["Action"])
    }


def test_the_source_scan_finds_the_calls_it_should():
    calls = _calls()
    # one of each kind of call site: call, pages, delete_ignoring; both clients
    for action in (
        "elasticfilesystem:CreateFileSystem",
        "elasticfilesystem:DescribeMountTargets",
        "elasticfilesystem:DeleteFileSystem",
        "ec2:DescribeInstances",
        "ec2:DeleteSecurityGroup",
    ):
        assert action in calls


def test_every_aws_call_of_the_charms_is_allowed_by_the_readme_policy():
    aws = load("efs-storage", "aws")
    needed = set(_calls())
    for action in list(needed):
        needed.update(aws._ALSO_NEEDS.get(action, ()))
    missing = sorted(needed - _allowed(_policy()))
    assert not missing, f"the docs' IAM policy lacks {missing}"


def test_the_efs_access_point_actions_are_allowed():
    """What the EFS access-point work calls (issue 29 item 5), allowed ahead of it."""
    allowed = _allowed(_policy())
    for operation in (
        "CreateAccessPoint",
        "DescribeAccessPoints",
        "DeleteAccessPoint",
        "PutFileSystemPolicy",
        "DescribeFileSystemPolicy",
        "TagResource",
    ):
        assert f"elasticfilesystem:{operation}" in allowed


def test_nothing_is_star_without_a_condition_or_a_reason():
    policy = _policy()
    unscoped = {
        s["Sid"]
        for s in policy["Statement"]
        if "*" in _listed(s["Resource"]) and not s.get("Condition")
    }
    assert unscoped == set(UNSCOPED)
    for statement in policy["Statement"]:
        for action in _listed(statement["Action"]):
            assert "*" not in action, f"{statement['Sid']}: wildcard action {action}"
    text = _page_text()
    prose = text[text.index(REASONS) :]
    for sid in UNSCOPED:
        assert f"`{sid}`" in prose, f"the IAM policy page gives no reason for {sid}"
    # the read-only statement holds reads only
    (describe,) = [s for s in policy["Statement"] if s["Sid"] == "EfsStorageDescribe"]
    assert all(a.split(":")[1].startswith("Describe") for a in describe["Action"])


def test_every_write_on_what_exists_requires_the_charms_tag():
    """Deleting or changing a file system, access point or group needs its owner tag."""
    tag = "gpu-k8s:application"
    efs_model = load("efs-storage", "efs_model")
    assert tag == efs_model.TAG_APP  # the tag the charm puts on what it creates
    writes = {
        "elasticfilesystem:DeleteFileSystem",
        "elasticfilesystem:DeleteMountTarget",
        "elasticfilesystem:CreateMountTarget",
        "elasticfilesystem:ModifyMountTargetSecurityGroups",
        "elasticfilesystem:DeleteAccessPoint",
        "elasticfilesystem:PutFileSystemPolicy",
        "ec2:AuthorizeSecurityGroupIngress",
        "ec2:RevokeSecurityGroupIngress",
        "ec2:DeleteSecurityGroup",
    }
    for statement in _policy()["Statement"]:
        granted = writes & set(_listed(statement["Action"]))
        if granted:
            # the tag's value, not only its presence: the credential's own (issue 29)
            condition = statement.get("Condition") or {}
            assert condition == {"StringEquals": {f"aws:ResourceTag/{tag}": OWN}}, (
                statement["Sid"],
                granted,
            )


def test_every_create_tags_with_the_credentials_own_application():
    """A create is allowed only with the tag's value the credential's user or role carries.

    Otherwise a key could make a file system, access point or group tagged as another
    efs-storage application's, and that application's key would then be allowed to write
    it (and this key, writes on the other's: the values would not be compared).
    """
    creates = {
        "elasticfilesystem:CreateFileSystem",
        "elasticfilesystem:CreateAccessPoint",
        "ec2:CreateSecurityGroup",
    }
    found = set()
    for statement in _policy()["Statement"]:
        granted = creates & set(_listed(statement["Action"]))
        if granted and "vpc/" not in json.dumps(statement["Resource"]):
            found |= granted
            condition = statement.get("Condition") or {}
            tag = "aws:RequestTag/gpu-k8s:application"
            assert condition == {"StringEquals": {tag: OWN}}, (statement["Sid"], granted)
    assert found == creates


def test_network_interfaces_are_deleted_or_changed_only_in_the_models_vpc():
    """EFS's mount-target interfaces carry no tag of ours: the VPC bounds them (issue 29)."""
    policy = _policy()
    for action in ("ec2:DeleteNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute"):
        statements = [s for s in policy["Statement"] if action in _listed(s["Action"])]
        assert statements, action
        for statement in statements:
            condition = statement.get("Condition") or {}
            keys = {key for by_key in condition.values() for key in by_key}
            assert keys & {"ec2:Vpc", "ec2:Subnet"}, f"{statement['Sid']}: {action} unscoped"


def test_aws_backup_may_create_its_service_linked_role_and_no_other():
    """aws-backup=true may have AWS Backup create its service-linked role, nothing wider.

    PutBackupPolicy ENABLED makes AWS Backup create AWSServiceRoleForBackup on the
    caller's behalf (AWS Backup Developer Guide, "Service-linked roles for AWS Backup"),
    which needs the caller's iam:CreateServiceLinkedRole for that service only.
    """
    aws = load("efs-storage", "aws")
    assert "iam:CreateServiceLinkedRole" in aws._ALSO_NEEDS["elasticfilesystem:PutBackupPolicy"]
    services = {
        s["Condition"]["StringEquals"]["iam:AWSServiceName"]: s["Resource"]
        for s in _policy()["Statement"]
        if "iam:CreateServiceLinkedRole" in _listed(s["Action"])
    }
    assert services == {
        "elasticfilesystem.amazonaws.com": (
            "arn:aws:iam::*:role/aws-service-role/elasticfilesystem.amazonaws.com/*"
        ),
        "backup.amazonaws.com": "arn:aws:iam::*:role/aws-service-role/backup.amazonaws.com/*",
    }
