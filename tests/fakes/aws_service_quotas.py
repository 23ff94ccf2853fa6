"""Service Quotas' EC2 instance quotas, which moto lacks, for the proxy in fakes.aws.

moto 5.2.5 (moto/servicequotas/models.py) knows the `vpc` quotas only and answers
NoSuchResourceException for `ec2`. The README asks a newcomer to read and raise the quota
"Running On-Demand G and VT instances" (L-DB2E81BA) and the Standard instances' quota
(L-1216C47A), so the proxy answers the two calls it names itself:

- GetServiceQuota (JSON 1.1, target ServiceQuotasV20190624.GetServiceQuota): the quota's
  applied value. The shapes and fields are botocore's service model
  (botocore/data/service-quotas/2019-06-24/service-2.json, as shipped by Debian's awscli
  2.9.19: ServiceQuota, MetricInfo); the names, units and usage-metric dimensions are what
  AWS answers for these codes (a ListServiceQuotas answer captured in public test
  fixtures: "Running On-Demand G and VT instances", Unit "None", AWS/Usage ResourceCount
  with Class G/OnDemand, Resource vCPU). A new account's value is what `values` says
  (0 here; the README says it is often 0 on a new account).
- RequestServiceQuotaIncrease: a PENDING request (RequestStatus: PENDING, CASE_OPENED,
  APPROVED, DENIED, CASE_CLOSED); the applied value changes only when AWS approves, which
  a test does with `approve`. A second request while one is open is refused with
  ResourceAlreadyExistsException, and a value not above the applied one with
  IllegalArgumentException (both in the operation's error list).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from typing import Any

Answer = tuple[int, list[tuple[str, str]], bytes]

ACCOUNT = "123456789012"  # moto's default account id
EC2_NAME = "Amazon Elastic Compute Cloud (Amazon EC2)"
# quota code -> (name, usage class): the EC2 quotas the README names
EC2_QUOTAS = {
    "L-DB2E81BA": ("Running On-Demand G and VT instances", "G/OnDemand"),
    "L-417A185B": ("Running On-Demand P instances", "P/OnDemand"),
    # the tutorial's other machines and the controller: the name and code as AWS answers
    # them (Service Quotas answers quoted in public repositories' fixtures and docs, read
    # 2026-11-27); a new account's value is small (5 vCPUs in the quota plans read then)
    "L-1216C47A": (
        "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
        "Standard/OnDemand",
    ),
}
OPEN = ("PENDING", "CASE_OPENED")


@dataclasses.dataclass
class ServiceQuotas:
    """Applied values and increase requests of one account, in one region."""

    region: str
    values: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"L-DB2E81BA": 0.0, "L-417A185B": 0.0, "L-1216C47A": 5.0}
    )
    requests: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def handles(self, action: str, body: bytes) -> bool:
        """Whether this is an EC2 quota call (anything else goes on to moto)."""
        if action not in ("GetServiceQuota", "RequestServiceQuotaIncrease"):
            return False
        return json.loads(body or b"{}").get("ServiceCode") == "ec2"

    def answer(self, action: str, body: bytes) -> Answer:
        request = json.loads(body or b"{}")
        code = request.get("QuotaCode", "")
        if code not in EC2_QUOTAS:
            return _error("NoSuchResourceException", "The specified resource does not exist.")
        if action == "GetServiceQuota":
            return _ok({"Quota": self._quota(code)})
        desired = float(request.get("DesiredValue", 0))
        if any(r["QuotaCode"] == code and r["Status"] in OPEN for r in self.requests):
            return _error(
                "ResourceAlreadyExistsException", "The specified resource already exists."
            )
        if desired <= self.values[code]:
            return _error("IllegalArgumentException", "Invalid input was provided.")
        now = time.time()
        change = {
            "Id": uuid.uuid4().hex + "Example",
            "ServiceCode": "ec2",
            "ServiceName": EC2_NAME,
            "QuotaCode": code,
            "QuotaName": EC2_QUOTAS[code][0],
            "DesiredValue": desired,
            "Status": "PENDING",
            "Created": now,
            "LastUpdated": now,
            "Requester": json.dumps(
                {"accountId": ACCOUNT, "callerArn": f"arn:aws:iam::{ACCOUNT}:user/ci"}
            ),
            "QuotaArn": self._arn(code),
            "GlobalQuota": False,
            "Unit": "None",
        }
        self.requests.append(change)
        return _ok({"RequestedQuota": change})

    def approve(self, code: str) -> None:
        """AWS grants the open request for `code`: the applied value becomes the desired one."""
        (change,) = [r for r in self.requests if r["QuotaCode"] == code and r["Status"] in OPEN]
        change["Status"] = "APPROVED"
        self.values[code] = change["DesiredValue"]

    def _arn(self, code: str) -> str:
        return f"arn:aws:servicequotas:{self.region}:{ACCOUNT}:ec2/{code}"

    def _quota(self, code: str) -> dict[str, Any]:
        name, usage_class = EC2_QUOTAS[code]
        return {
            "ServiceCode": "ec2",
            "ServiceName": EC2_NAME,
            "QuotaArn": self._arn(code),
            "QuotaCode": code,
            "QuotaName": name,
            "Value": self.values[code],
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
            "UsageMetric": {
                "MetricNamespace": "AWS/Usage",
                "MetricName": "ResourceCount",
                "MetricDimensions": {
                    "Class": usage_class,
                    "Resource": "vCPU",
                    "Service": "EC2",
                    "Type": "Resource",
                },
                "MetricStatisticRecommendation": "Maximum",
            },
        }


def _ok(document: dict[str, Any]) -> Answer:
    return 200, [("Content-Type", "application/x-amz-json-1.1")], json.dumps(document).encode()


def _error(code: str, message: str) -> Answer:
    """A JSON 1.1 protocol error: `__type` names it (botocore's JSON error parser)."""
    body = json.dumps({"__type": code, "Message": message}).encode()
    return 400, [("Content-Type", "application/x-amz-json-1.1")], body
