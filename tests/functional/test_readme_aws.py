"""The README's Service Quotas commands, run as written by the AWS CLI (Debian's awscli).

The CLI talks to the proxy of fakes.aws, which answers EC2 quotas as Service Quotas does
(fakes.aws_service_quotas; moto has the VPC quotas only). The printed text is the CLI's: the
`--query` and `--output text` in the README are the ones that ran.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import aws_cli
import docs_pages
import pytest

from fakes.aws import IMAGE_ID, LocalAws, local_aws

pytestmark = aws_cli.needs_aws_cli

G_AND_VT = "L-DB2E81BA"
STANDARD = "L-1216C47A"  # the tutorial's other machines and the controller


@pytest.fixture(scope="module")
def local() -> Iterator[LocalAws]:
    with local_aws() as aws:
        yield aws


@pytest.fixture
def shell(local: LocalAws, tmp_path: Path) -> aws_cli.Shell:
    local.reset()
    return aws_cli.Shell(tmp_path, local.url)


def _read_then_asked(local, outputs: list[str], code: str, read: str, asked: float) -> None:
    """The quota's name and a new account's value, then one PENDING request for `asked`."""
    assert outputs == [f"{read}\n", f"PENDING\t{asked}\n"]
    (change,) = local.proxy.quotas.requests
    assert (change["QuotaCode"], change["DesiredValue"]) == (code, asked)


def test_the_gpu_quota_commands_read_a_new_account_and_ask_for_more(local, shell):
    outputs = aws_cli.transcript("g-instances-quota", shell)
    _read_then_asked(local, outputs, G_AND_VT, "Running On-Demand G and VT instances\t0.0", 12.0)


def test_the_standard_quota_commands_read_a_new_account_and_ask_for_ten(local, shell):
    outputs = aws_cli.transcript("standard-quota", shell)
    name = "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"
    _read_then_asked(local, outputs, STANDARD, f"{name}\t5.0", 10.0)


def test_the_applied_value_changes_only_when_aws_grants_the_request(local, shell):
    get, request = aws_cli.commands("g-instances-quota")
    assert shell.run(request)[0] == 0
    assert shell.run(get) == (0, "Running On-Demand G and VT instances\t0.0\n")

    local.proxy.quotas.approve(G_AND_VT)

    assert shell.run(get) == (0, "Running On-Demand G and VT instances\t12.0\n")


def test_a_second_request_while_one_is_open_is_refused(shell):
    _, request = aws_cli.commands("g-instances-quota")
    assert shell.run(request)[0] == 0

    status, output = shell.run(request)

    assert status == 254
    assert "An error occurred (ResourceAlreadyExistsException) when calling the " in output
    assert "RequestServiceQuotaIncrease operation" in output


def test_the_vpc_quotas_still_come_from_moto(shell):
    status, output = shell.run(
        "aws service-quotas get-service-quota --service-code vpc --quota-code L-F678F1CE"
        " --query Quota.QuotaName --output text"
    )

    assert (status, output) == (0, "VPCs per Region\n")


# what differs from run to run: the key moto draws (id, tab, secret)
ACCESS_KEY = (r"AKIA[0-9A-Z]{16}\t\S+",)


def _policy_of_the_how_to() -> str:
    """The efs-storage policy as docs/how-to/aws-credentials.md shows it (its JSON block)."""
    page = (docs_pages.DOCS / "how-to" / "aws-credentials.md").read_text()
    (policy,) = re.findall(r"^## The policy\n.*?```json\n(.*?)```", page, re.S | re.M)
    return policy


# The Juju user: Juju's Amazon EC2 page (Juju docs, reference, list of supported clouds,
# "Requirements", read 2026-11-27) lists the ec2: actions Juju needs in its JujuEC2Actions
# statement; AWS's managed AmazonEC2FullAccess allows ec2:*. With `--trust` efs-storage
# uses the same key, so it also gets the how-to's policy and the tag that policy checks.
def test_the_tutorials_juju_user_gets_ec2_the_efs_storage_policy_tag_and_a_key(
    local, shell, tmp_path, monkeypatch
):
    # AWS's managed policies exist in every account; moto loads them when asked (moto
    # settings.load_iam_aws_managed_policies), read as IAM's backend starts: at the reset
    monkeypatch.setenv("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
    local.reset()
    # the operator saved the how-to's policy where they run the commands
    monkeypatch.chdir(tmp_path)
    (tmp_path / "efs-storage-policy.json").write_text(_policy_of_the_how_to())

    outputs = aws_cli.transcript("juju-iam-user", shell, volatile=ACCESS_KEY)

    assert outputs[0] == "juju\n"
    key_id, secret = outputs[-1].split()
    iam = local.client("iam")
    assert [
        k["AccessKeyId"] for k in iam.list_access_keys(UserName="juju")["AccessKeyMetadata"]
    ] == [key_id]
    assert len(secret) == 40
    attached = iam.list_attached_user_policies(UserName="juju")["AttachedPolicies"]
    assert [a["PolicyName"] for a in attached] == ["AmazonEC2FullAccess"]
    assert iam.list_user_policies(UserName="juju")["PolicyNames"] == ["efs-storage"]
    assert iam.list_user_tags(UserName="juju")["Tags"] == [
        {"Key": "gpu-k8s:application", "Value": "efs-storage"}
    ]


# `aws` commands the pages give in their prose with their arguments (a bare command name
# is a reference): each runs too
PROSE = re.compile(r"`(aws\s+[a-z0-9-]+\s+[a-z0-9-]+\s+[^`\s][^`]*)`")


def _prose_commands() -> list[tuple[str, str]]:
    """(page, command) of each prose command no transcript of the pages runs already."""
    transcripts = " ".join(
        " ".join(c.replace("\\\n", " ").split())
        for c in re.findall(r"^\$ ((?:.*\\\n)*.*)$", docs_pages.text(), re.M)
    )
    shown = [
        (docs_pages.name(page), " ".join(m.group(1).split()))
        for page, text in docs_pages.texts()
        for m in PROSE.finditer(text)
    ]
    return [(where, c) for where, c in shown if c not in transcripts]


def test_every_aws_command_in_the_pages_prose_runs_against_moto(local, shell):
    iam, efs, s3, ec2 = (local.client(s) for s in ("iam", "efs", "s3", "ec2"))
    iam.create_user(UserName="juju")
    fs = efs.create_file_system(CreationToken="prose")["FileSystemId"]
    s3.create_bucket(Bucket="my-bucket")
    s3.put_object(Bucket="my-bucket", Key="etcd/snapshot-1.db.enc", Body=b"x")
    (instance,) = ec2.run_instances(ImageId=IMAGE_ID, MinCount=1, MaxCount=1)["Instances"]
    ids = {
        "--user-name USER": "--user-name juju",
        "fs-...": fs,
        "i-...": instance["InstanceId"],
    }
    commands = _prose_commands()
    assert {c.split()[2] for _, c in commands} >= {"tag-user", "tag-resource", "ls"}

    printed = {}
    for where, command in commands:
        for text, value in ids.items():
            command = command.replace(text, value)
        status, printed[command] = shell.run(command)
        assert status == 0, f"{where}: `{command}` failed ({status}):\n{printed[command]}"

    assert iam.list_user_tags(UserName="juju")["Tags"] == [
        {"Key": "gpu-k8s:application", "Value": "efs-storage"}
    ]
    assert {"Key": "gpu-k8s:application", "Value": "efs-storage"} in efs.list_tags_for_resource(
        ResourceId=fs
    )["Tags"]
    assert "snapshot-1.db.enc" in printed["aws s3 ls s3://my-bucket/etcd/"]
