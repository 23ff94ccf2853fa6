"""The README's Service Quotas commands, run as written by the AWS CLI (Debian's awscli).

The CLI talks to the proxy of fakes.aws, which answers EC2 quotas as Service Quotas does
(fakes.aws_service_quotas; moto has the VPC quotas only). The printed text is the CLI's: the
`--query` and `--output text` in the README are the ones that ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aws_cli
import pytest

from fakes.aws import LocalAws, local_aws

pytestmark = aws_cli.needs_aws_cli

G_AND_VT = "L-DB2E81BA"


@pytest.fixture(scope="module")
def local() -> Iterator[LocalAws]:
    with local_aws() as aws:
        yield aws


@pytest.fixture
def shell(local: LocalAws, tmp_path: Path) -> aws_cli.Shell:
    local.reset()
    return aws_cli.Shell(tmp_path, local.url)


def test_the_gpu_quota_commands_read_a_new_account_and_ask_for_more(local, shell):
    get, request = aws_cli.transcript("g-instances-quota", shell)

    assert get == "Running On-Demand G and VT instances\t0.0\n"
    assert request == "PENDING\t12.0\n"
    (change,) = local.proxy.quotas.requests
    assert (change["QuotaCode"], change["DesiredValue"]) == (G_AND_VT, 12.0)


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
