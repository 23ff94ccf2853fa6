"""EFS's authorization of an NFS client's mount against the file system policy.

What EFS decides when a client connects (EFS user guide, "Using IAM to control access to
file systems", read 2026-11-27): the actions are ClientMount (read), ClientWrite and
ClientRootAccess; the condition keys EFS sets for a client are `aws:SecureTransport`
(TLS), `aws:SourceIp`, `elasticfilesystem:AccessPointArn` (the access point mounted
through, absent without one) and `elasticfilesystem:AccessedViaMountTarget`, and "no other
condition keys are enforced". Without a policy the default one applies: full access for
any anonymous client that reaches a mount target. A client mounting without the mount
helper's `iam` option is anonymous; `Principal: "*"` and `{"AWS": "*"}` match every
principal, anonymous ones included (IAM user guide, "AWS JSON policy elements:
Principal", "All principals").

Evaluation (IAM user guide, "Policy evaluation logic"): an explicit Deny wins, then an
Allow, else the action is denied. Conditions (IAM user guide, "Condition operators"): all
keys of a statement's condition must match; a value list matches when any value does;
`StringNotEquals` and other negated operators match when the key is absent; `Bool` and
`StringEquals` on an absent key do not match; `Null: "true"` matches when the key is
absent, `"false"` when it is present.
"""

from __future__ import annotations

import dataclasses
from typing import Any

ACTIONS = (
    "elasticfilesystem:ClientMount",
    "elasticfilesystem:ClientWrite",
    "elasticfilesystem:ClientRootAccess",
)


@dataclasses.dataclass(frozen=True)
class Client:
    """One NFS client's connection: what EFS knows of it."""

    tls: bool = True
    access_point_arn: str | None = None
    via_mount_target: bool = True
    principal: str | None = None  # an IAM role's ARN with the `iam` mount option, else None

    def keys(self) -> dict[str, str]:
        """The condition keys EFS sets for this client (absent ones left out)."""
        out = {
            "aws:SecureTransport": str(self.tls).lower(),
            "elasticfilesystem:AccessedViaMountTarget": str(self.via_mount_target).lower(),
        }
        if self.access_point_arn:
            out["elasticfilesystem:AccessPointArn"] = self.access_point_arn
        return out


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _principal_matches(principal: Any, client: Client) -> bool:
    if principal == "*":
        return True
    aws = _as_list(principal.get("AWS", [])) if isinstance(principal, dict) else []
    return "*" in aws or (client.principal is not None and client.principal in aws)


def _operator(op: str, key: str, values: list, keys: dict[str, str]) -> bool:
    present = key in keys
    strings = [str(v).lower() if op == "Bool" else str(v) for v in values]
    if op == "Null":
        return (not present) if strings[0].lower() == "true" else present
    if op in ("StringEquals", "Bool"):
        return present and keys[key] in strings
    if op == "StringNotEquals":
        return not present or keys[key] not in strings
    raise NotImplementedError(f"condition operator {op} (EFS's policies here use no other)")


def _conditions_match(condition: dict, client: Client) -> bool:
    keys = client.keys()
    return all(
        _operator(op, key, _as_list(values), keys)
        for op, by_key in condition.items()
        for key, values in by_key.items()
    )


def _applies(statement: dict, action: str, client: Client, fs_arn: str) -> bool:
    actions = _as_list(statement.get("Action", []))
    if not any(a in ("*", action, "elasticfilesystem:*") for a in actions):
        return False
    if fs_arn not in _as_list(statement.get("Resource", fs_arn)) and statement.get(
        "Resource"
    ) not in ("*", None):
        return False
    if not _principal_matches(statement.get("Principal", {}), client):
        return False
    return _conditions_match(statement.get("Condition", {}), client)


def allowed(policy: dict | None, action: str, client: Client, fs_arn: str) -> bool:
    """Whether EFS lets `client` do `action` on the file system under `policy`."""
    assert action in ACTIONS, action
    if policy is None:  # the default policy: any client through a mount target
        return client.via_mount_target
    statements = _as_list(policy["Statement"])
    hits = [s for s in statements if _applies(s, action, client, fs_arn)]
    if any(s["Effect"] == "Deny" for s in hits):
        return False
    return any(s["Effect"] == "Allow" for s in hits)
