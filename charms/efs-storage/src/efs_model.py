# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The data of efs-storage's AWS side: names, what the charm asks for, what a pass saw.

No ops code and no AWS call here. The names are deterministic per (model, application),
so every hook finds what an earlier one made: the file system by its CreationToken, the
security group by its name, both also by their tags. :class:`Desired` is what the
configuration and the cluster ask for (checked by :meth:`Desired.validate` before any AWS
call), :class:`Placement` where the cluster's nodes run (``network.py`` finds it),
:class:`Observed` what one pass found and :class:`TeardownProgress` where a removal
stands (``efs.py`` returns both).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence
from typing import Any

from aws import AwsConfigError

TAG_MODEL = "gpu-k8s:model"
TAG_APP = "gpu-k8s:application"
PERFORMANCE_MODES = ("generalPurpose", "maxIO")
THROUGHPUT_MODES = ("elastic", "bursting", "provisioned")
_PROVIDER_ID_RE = re.compile(r"^aws://[^/]*/(?:([a-z0-9-]*)/)?(i-[0-9a-f]{8,17})$")
_FS_ID_RE = re.compile(r"^fs-[0-9a-f]{8,40}$")


# -- names --------------------------------------------------------------------------------
def _digest(model_uuid: str, app: str) -> str:
    if not model_uuid or not app:
        raise AwsConfigError("model uuid and application name are both required")
    return hashlib.sha256(f"{model_uuid}/{app}".encode()).hexdigest()


def creation_token(model_uuid: str, app: str) -> str:
    """The CreationToken of the file system owned by ``app`` in model ``model_uuid``.

    Deterministic, unique per (model, application), at most 64 characters.
    """
    return f"gpu-k8s-{app[:20]}-{_digest(model_uuid, app)[:32]}"


def security_group_name(model_uuid: str, app: str) -> str:
    """Name of the security group guarding the mount targets of ``app``."""
    return f"gpu-k8s-efs-{app[:30]}-{_digest(model_uuid, app)[:12]}"


def dns_name(file_system_id: str, region: str) -> str:
    """The file system's DNS name (resolves to the mount target in the client's zone)."""
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{file_system_id}.efs.{region}.{suffix}"


def parse_provider_id(provider_id: str) -> tuple[str | None, str] | None:
    """Split a Kubernetes Node ``spec.providerID`` such as ``aws:///us-east-1a/i-0abc``.

    Returns:
        (zone or None, instance id), or None when it is not an AWS EC2 provider id.
    """
    match = _PROVIDER_ID_RE.match(provider_id.strip())
    if not match:
        return None
    return (match.group(1) or None, match.group(2))


# -- desired and observed state -----------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Node:
    """A cluster node as Kubernetes reports it.

    Attributes:
        name: ``metadata.name`` (on AWS often the private DNS name ``ip-10-0-1-5...``).
        provider_id: ``spec.providerID`` (``aws:///us-east-1a/i-0abc``) when set.
        addresses: the node's InternalIP addresses, used when there is no provider id.
    """

    name: str
    provider_id: str | None = None
    addresses: tuple[str, ...] = ()


def nodes_from_kubernetes(items: Sequence[dict[str, Any]]) -> tuple[Node, ...]:
    """Build :class:`Node` values from Kubernetes ``v1/Node`` objects (as the API lists them)."""
    nodes = []
    for item in items:
        status = item.get("status") or {}
        addresses = tuple(
            a.get("address", "")
            for a in status.get("addresses") or []
            if a.get("type") == "InternalIP" and a.get("address")
        )
        nodes.append(
            Node(
                name=(item.get("metadata") or {}).get("name", ""),
                provider_id=(item.get("spec") or {}).get("providerID") or None,
                addresses=addresses,
            )
        )
    return tuple(sorted(nodes, key=lambda n: n.name))


@dataclasses.dataclass(frozen=True)
class Desired:
    """What the charm's configuration and the cluster ask for.

    ``file_system_id`` set means adopt that file system; ``vpc_id`` (optional) restricts
    the node lookup to one VPC when nodes are only known by private IP.
    """

    model_uuid: str
    app: str
    nodes: tuple[Node, ...] = ()
    file_system_id: str | None = None
    performance_mode: str = "generalPurpose"
    throughput_mode: str = "elastic"
    provisioned_throughput_mibps: float | None = None
    kms_key_id: str | None = None
    vpc_id: str | None = None
    backup: bool = False  # config aws-backup: EFS automatic backups on a file system we own

    @property
    def adopt(self) -> bool:
        """True when an existing file system is adopted (never deleted)."""
        return bool(self.file_system_id)

    def validate(self) -> None:
        """Check the combination before any AWS call.

        Raises:
            AwsConfigError: with the fix in the message.
        """
        _digest(self.model_uuid, self.app)
        if self.file_system_id and not _FS_ID_RE.match(self.file_system_id):
            raise AwsConfigError(
                f"file-system-id {self.file_system_id!r} is not an EFS id; "
                "use the form fs-0123456789abcdef0 or unset it"
            )
        if self.performance_mode not in PERFORMANCE_MODES:
            raise AwsConfigError(f"performance-mode must be one of {', '.join(PERFORMANCE_MODES)}")
        if self.throughput_mode not in THROUGHPUT_MODES:
            raise AwsConfigError(f"throughput-mode must be one of {', '.join(THROUGHPUT_MODES)}")
        if self.throughput_mode == "elastic" and self.performance_mode == "maxIO":
            raise AwsConfigError(
                "throughput-mode elastic needs performance-mode generalPurpose; change one of them"
            )
        if self.throughput_mode == "provisioned" and not self.provisioned_throughput_mibps:
            raise AwsConfigError(
                "throughput-mode provisioned needs a provisioned throughput in MiB/s; "
                "set it or use throughput-mode elastic"
            )


@dataclasses.dataclass(frozen=True)
class MountTarget:
    """One mount target of the file system."""

    zone: str
    mount_target_id: str
    subnet_id: str
    state: str
    ip_address: str | None = None


@dataclasses.dataclass(frozen=True)
class ZoneProblem:
    """A zone with nodes where AWS refused to create the mount target."""

    zone: str
    subnet_id: str
    code: str
    message: str
    retry_later: bool
    summary: str = ""

    def __str__(self) -> str:
        if self.summary:
            return self.summary
        return f"no mount target in {self.zone} ({self.subnet_id}): {self.code}: {self.message}"


@dataclasses.dataclass(frozen=True)
class Observed:
    """The outcome of one pass: what exists in AWS now and whether it is ready."""

    file_system_id: str | None
    owned: bool
    state: str
    size_bytes: int
    throughput_mode: str
    region: str
    mount_targets: tuple[MountTarget, ...]
    zones: tuple[str, ...]
    security_group_id: str | None
    ready: bool
    progress: str
    unresolved_nodes: tuple[str, ...] = ()
    zone_problems: tuple[ZoneProblem, ...] = ()
    dns_problem: str = ""
    file_system_arn: str = ""
    backup_policy: str = ""  # EFS's BackupPolicy Status, DISABLED when none was ever set

    @property
    def dns_name(self) -> str | None:
        """``<fs-id>.efs.<region>.amazonaws.com`` once the file system exists."""
        return dns_name(self.file_system_id, self.region) if self.file_system_id else None

    def mount_targets_by_zone(self) -> dict[str, MountTarget]:
        """Mount targets keyed by availability zone."""
        return {mt.zone: mt for mt in self.mount_targets}

    def action_result(self) -> dict[str, Any]:
        """The ``show-filesystem`` action result (strings and nested dicts only)."""
        result: dict[str, Any] = {
            "file-system-id": self.file_system_id or "none",
            "ownership": "owned" if self.owned else "adopted",
            "state": self.state,
            "size-bytes": str(self.size_bytes),
            "throughput-mode": self.throughput_mode,
            "ready": str(self.ready).lower(),
            "progress": self.progress,
        }
        if self.dns_name:
            result["dns-name"] = self.dns_name
        if self.backup_policy:
            result["backup-policy"] = backup_line(self.backup_policy)
        result["mount-targets"] = {
            mt.zone: f"{mt.mount_target_id} {mt.subnet_id} {mt.state}" for mt in self.mount_targets
        }
        return result


def backup_line(status: str) -> str:
    """What show-filesystem says of the backup policy.

    EFS User Guide, "Backing up EFS file systems": automatic backups use the default EFS
    backup plan of AWS Backup (daily backups kept 35 days) in the default EFS backup vault.
    """
    if status in ("ENABLED", "ENABLING"):
        return f"{status.lower()} (AWS Backup's default EFS plan: daily, kept 35 days)"
    return status.lower()


@dataclasses.dataclass(frozen=True)
class TeardownProgress:
    """Where a removal stands. Call :meth:`Efs.teardown` again until ``done``."""

    done: bool
    message: str
    deleted: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the cluster's nodes run."""

    vpc_id: str | None
    subnets: dict[str, str]  # zone -> subnet chosen for its mount target
    node_groups: tuple[str, ...]
    unresolved: tuple[str, ...]


def owner_tags(desired: Desired) -> list[dict[str, str]]:
    """The tags that name this application on what it creates (file system, group)."""
    return [
        {"Key": TAG_MODEL, "Value": desired.model_uuid},
        {"Key": TAG_APP, "Value": desired.app},
    ]
