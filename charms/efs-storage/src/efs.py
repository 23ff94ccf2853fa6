# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Amazon EFS for the efs-storage charm: file system, security group and mount targets.

This module has no ops code: the charm hands it credentials and the desired state and gets
plain data back. Every call to AWS is one non-blocking pass; nothing here sleeps. Long
operations (a file system or mount target becoming ``available``, a deletion finishing)
are reported as progress and checked again on the charm's next event.

:class:`Efs` is the one entry point (``reconcile``, ``describe``, ``teardown``,
``release_rules``). It keeps the file system, its mount targets and the order of a
removal here, and uses the other modules for the rest:

- ``aws.py``: the clients, every call and its errors (``Api``), the credentials;
- ``efs_model.py``: the names, :class:`Desired`, :class:`Observed` and the other data;
- ``network.py``: the EC2 side (where the nodes run, the security group, the VPC's DNS).

Calls that create things are written so that a retry of a request whose response was lost
finds its own first attempt (``FileSystemAlreadyExists``, ``MountTargetConflict``,
``InvalidGroup.Duplicate``, ``InvalidPermission.Duplicate`` all mean "already done").

No credential value is ever logged or put in an error message.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from access_points import AccessPoint, AccessPoints, Wanted, ensure_policy, policy
from aws import (
    Api,
    AwsApiError,
    AwsConfigError,
    AwsTransientError,
    Clients,
    Credentials,
    make_clients,
)
from efs_model import (
    TAG_APP,
    TAG_MODEL,
    Desired,
    MountTarget,
    Observed,
    Placement,
    TeardownProgress,
    ZoneProblem,
    creation_token,
    owner_tags,
)
from network import Network, dns_problem

logger = logging.getLogger(__name__)

_GONE = ("deleting", "deleted")


# -- the manager --------------------------------------------------------------------------
class Efs:
    """Reconciles one application's EFS file system, security group and mount targets."""

    def __init__(self, clients: Clients, region: str, *, redact: Sequence[str] = ()):
        self._api = Api(clients, redact=redact)
        self._network = Network(self._api, region)
        self.region = region

    @classmethod
    def connect(
        cls, credentials: Credentials, region: str, endpoint_url: str | None = None, **kwargs: Any
    ) -> Efs:
        """Make clients for ``credentials`` and a manager that scrubs them from errors."""
        clients = make_clients(credentials, region, endpoint_url, **kwargs)
        return cls(clients, region, redact=credentials.secrets())

    # -- public passes ----------------------------------------------------------------------
    def reconcile(self, desired: Desired) -> Observed:
        """One non-blocking pass towards ``desired``; returns what exists and its progress."""
        desired.validate()
        fs = self._ensure_file_system(desired)
        fs_id, state = fs["FileSystemId"], fs["LifeCycleState"]
        if state == "error":
            raise AwsConfigError(f"EFS {fs_id} is in state error; check it in the AWS console")
        if state in _GONE and desired.adopt:
            raise AwsConfigError(
                f"adopted EFS {fs_id} is being deleted; set file-system-id to another one"
            )
        placement = self._network.locate_nodes(desired)
        dns_off = self._network.dns_off(placement.vpc_id) if placement.vpc_id else ()
        sg_id = (
            self._network.ensure_security_group(desired, placement) if placement.vpc_id else None
        )
        mts: list[dict[str, Any]] = []
        problems: tuple[ZoneProblem, ...] = ()
        if state == "available":
            mts = self._mount_targets(fs_id)
            if sg_id:
                mts, problems = self._ensure_mount_targets(fs_id, placement, sg_id, mts)
                if desired.adopt:
                    problems += self._admit_nodes(mts, placement, sg_id)
        observed = self._observe(desired, fs, mts, placement, sg_id, problems)
        if state == "available":
            observed = dataclasses.replace(
                observed, backup_policy=self._backup_policy(fs_id, desired, observed.owned)
            )
        if dns_off:
            problem = dns_problem(placement.vpc_id or "", dns_off, observed.dns_name, self.region)
            observed = dataclasses.replace(observed, ready=False, dns_problem=problem)
        return observed

    def describe(self, desired: Desired) -> Observed:
        """Read-only view for ``show-filesystem`` (nothing is created).

        Raises:
            AwsConfigError: the adopted file system does not exist.
        """
        desired.validate()
        fs = self._find_adopted(desired) if desired.adopt else self._find_own(desired)
        if fs is None:
            return Observed(
                None, False, "absent", 0, desired.throughput_mode, self.region, (), (), None,
                False, "no EFS file system yet",
            )  # fmt: skip
        mts = self._mount_targets(fs["FileSystemId"]) if fs["LifeCycleState"] not in _GONE else []
        zones = tuple(sorted({mt["AvailabilityZoneName"] for mt in mts}))
        placement = Placement(None, dict.fromkeys(zones, ""), (), ())
        observed = self._observe(desired, fs, mts, placement, None)
        if fs["LifeCycleState"] == "available":
            policy = self._backup_policy(fs["FileSystemId"], desired, owned=False)
            observed = dataclasses.replace(observed, backup_policy=policy)
        return observed

    def access_points(
        self, desired: Desired, fs_id: str, wanted: list[Wanted]
    ) -> dict[str, AccessPoint | AwsApiError]:
        """Each wanted consumer's access point on ``fs_id`` (created when missing)."""
        return AccessPoints(self._api, desired.model_uuid, desired.app).ensure(fs_id, wanted)

    def delete_access_points(self, desired: Desired, fs_id: str, keep: set[str]) -> list[str]:
        """Delete this application's access points on ``fs_id`` but those in ``keep``."""
        points = AccessPoints(self._api, desired.model_uuid, desired.app)
        return points.delete_unused(fs_id, keep)

    def confine(self, observed: Observed, root_access_points: list[str]) -> bool:
        """Put the file system policy (access_points.policy); True when it was changed.

        Only once every volume mounts through an access point with TLS: the policy refuses
        plain NFS, which the volumes of the NFS fallback and the directory Jobs use.
        """
        fs_id = observed.file_system_id or ""
        wanted = policy(observed.file_system_arn, root_access_points)
        return ensure_policy(self._api, fs_id, wanted)

    def release_rules(self, model_uuid: str, app: str) -> bool:
        """Revoke the NFS rules this application added; False when it has no group."""
        group = self._network.own_group(Desired(model_uuid=model_uuid, app=app))
        if group is None:
            return False
        self._network.release(group)
        return True

    def teardown(self, desired: Desired, delete: bool) -> TeardownProgress:
        """One step of removal; call again on later hooks until ``done``.

        Whatever ``delete`` says, the ingress rules this charm added to its security group
        are revoked first: they reference Juju's groups, and AWS refuses to delete a group
        another group's rule references (DependencyViolation), which would make Juju's
        destroy-model fail. Only a file system this application created is deleted, and
        only with ``delete``: first its mount targets, then (once they are gone) the file
        system, then (once it is gone) the security group. An adopted or kept file system
        keeps its mount targets, and the security group stays while they use it.
        """
        desired.validate()
        group = self._network.own_group(desired)
        if group is not None:
            self._network.release(group)
        if desired.adopt:
            return self._network.keep_group(f"kept adopted EFS {desired.file_system_id}", group)
        if not delete:
            return self._network.keep_group(
                "kept the EFS file system (delete-on-remove is false)", group
            )
        fs = self._find_own(desired)
        if fs is not None and not self._is_ours(fs, desired):
            return TeardownProgress(
                True, f"kept EFS {fs['FileSystemId']}: its tags do not name this application"
            )
        if fs is not None:
            return self._teardown_file_system(fs)
        return self._network.teardown_group(desired)

    # -- file system ------------------------------------------------------------------------
    def _ensure_file_system(self, desired: Desired) -> dict[str, Any]:
        if desired.adopt:
            fs = self._find_adopted(desired)
            if fs is None:
                raise AwsConfigError(
                    f"file-system-id {desired.file_system_id} does not exist in {self.region}; "
                    "set file-system-id to an existing EFS file system or unset it"
                )
            return fs
        fs = self._find_own(desired)
        if fs is None:
            fs = self._create_file_system(desired)
        return fs

    def _find_adopted(self, desired: Desired) -> dict[str, Any] | None:
        try:
            found = self._api.call(
                self._api.efs, "DescribeFileSystems", FileSystemId=desired.file_system_id
            )
        except AwsApiError as e:
            if e.code == "FileSystemNotFound":
                return None
            raise
        return found["FileSystems"][0] if found["FileSystems"] else None

    def _find_own(self, desired: Desired) -> dict[str, Any] | None:
        token = creation_token(desired.model_uuid, desired.app)
        found = self._api.call(self._api.efs, "DescribeFileSystems", CreationToken=token)
        return found["FileSystems"][0] if found["FileSystems"] else None

    def _create_file_system(self, desired: Desired) -> dict[str, Any]:
        token = creation_token(desired.model_uuid, desired.app)
        kwargs: dict[str, Any] = {
            "CreationToken": token,
            "PerformanceMode": desired.performance_mode,
            "ThroughputMode": desired.throughput_mode,
            "Encrypted": True,
            "Tags": [{"Key": "Name", "Value": f"gpu-k8s-{desired.app}"}, *owner_tags(desired)],
        }
        if desired.kms_key_id:
            kwargs["KmsKeyId"] = desired.kms_key_id
        if desired.throughput_mode == "provisioned":
            kwargs["ProvisionedThroughputInMibps"] = desired.provisioned_throughput_mibps
        logger.info("creating EFS file system with creation token %s", token)
        try:
            return self._api.call(self._api.efs, "CreateFileSystem", **kwargs)
        except AwsApiError as e:
            if e.code != "FileSystemAlreadyExists":
                raise
        # A retry whose first attempt succeeded, or a concurrent hook: it is ours.
        fs = self._find_own(desired)
        if fs is None:
            raise AwsTransientError(f"EFS reported {token} exists but does not list it yet")
        return fs

    @staticmethod
    def _is_ours(fs: dict[str, Any], desired: Desired) -> bool:
        tags = {t["Key"]: t["Value"] for t in fs.get("Tags") or []}
        return (
            fs.get("CreationToken") == creation_token(desired.model_uuid, desired.app)
            and tags.get(TAG_MODEL) == desired.model_uuid
            and tags.get(TAG_APP) == desired.app
        )

    # -- mount targets ----------------------------------------------------------------------
    def _mount_targets(self, fs_id: str) -> list[dict[str, Any]]:
        pages = self._api.pages(
            self._api.efs, "DescribeMountTargets", "Marker", "NextMarker", FileSystemId=fs_id
        )
        return [mt for page in pages for mt in page.get("MountTargets", [])]

    def _ensure_mount_targets(
        self, fs_id: str, placement: Placement, sg_id: str, mts: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], tuple[ZoneProblem, ...]]:
        """Create the missing mount targets; a zone AWS refuses does not stop the others."""
        # A file system's mount targets all live in one VPC (botocore efs CreateMountTarget:
        # another must "belong to the same VPC as the subnets of the existing mount
        # targets"): one in another VPC than the nodes' means the nodes reach none of them,
        # even when every node zone has one.
        other_vpcs = sorted({mt["VpcId"] for mt in mts if mt.get("VpcId") != placement.vpc_id})
        if other_vpcs and placement.vpc_id:
            raise AwsConfigError(
                f"EFS {fs_id} has mount targets in {', '.join(other_vpcs)} but the cluster "
                f"nodes run in {placement.vpc_id}; use a file system in the cluster's VPC"
            )
        zones = {mt.get("AvailabilityZoneName") for mt in mts}
        missing = {z: s for z, s in sorted(placement.subnets.items()) if z not in zones}
        if not missing:
            return mts, ()
        mts = list(mts)
        problems: list[ZoneProblem] = []
        for zone, subnet in missing.items():
            logger.info("creating mount target of %s in %s (%s)", fs_id, zone, subnet)
            try:
                mts.append(
                    self._api.call(
                        self._api.efs,
                        "CreateMountTarget",
                        FileSystemId=fs_id,
                        SubnetId=subnet,
                        SecurityGroups=[sg_id],
                    )
                )
            except AwsApiError as e:
                if e.code == "MountTargetConflict":
                    mts = self._resolve_conflict(fs_id, zone, e)
                    continue
                logger.warning("no mount target of %s in %s (%s): %s", fs_id, zone, subnet, e)
                problems.append(ZoneProblem(zone, subnet, e.code, e.message, e.retry_later))
        return mts, tuple(problems)

    def _admit_nodes(
        self, mts: list[dict[str, Any]], placement: Placement, sg_id: str
    ) -> tuple[ZoneProblem, ...]:
        """Add the charm's group to an adopted file system's mount targets, keeping theirs.

        Mount targets made before the charm keep their own groups, which need not admit the
        nodes. ModifyMountTargetSecurityGroups replaces the whole list, and needs a mount
        target whose network interface exists (botocore efs model); the number of groups
        per interface is an account quota (SecurityGroupLimitExceeded beyond it).
        """
        problems = []
        for mt in mts:
            zone, mt_id = mt.get("AvailabilityZoneName", ""), mt["MountTargetId"]
            if zone not in placement.subnets or mt.get("LifeCycleState") != "available":
                continue
            groups = self._api.call(
                self._api.efs, "DescribeMountTargetSecurityGroups", MountTargetId=mt_id
            ).get("SecurityGroups", [])
            if sg_id in groups:
                continue
            logger.info("adding security group %s to mount target %s", sg_id, mt_id)
            try:
                self._api.call(
                    self._api.efs,
                    "ModifyMountTargetSecurityGroups",
                    MountTargetId=mt_id,
                    SecurityGroups=[*groups, sg_id],
                )
            except AwsApiError as e:
                problems.append(_admit_problem(mt, groups, sg_id, e, self.region))
        return tuple(problems)

    def _resolve_conflict(self, fs_id: str, zone: str, error: AwsApiError) -> list[dict[str, Any]]:
        """``MountTargetConflict``: fine if the zone has one now (a retried create)."""
        mts = self._mount_targets(fs_id)
        if any(mt.get("AvailabilityZoneName") == zone for mt in mts):
            return mts
        raise AwsConfigError(f"cannot add a mount target of {fs_id} in {zone}: {error}")

    # -- teardown steps ---------------------------------------------------------------------
    def _teardown_file_system(self, fs: dict[str, Any]) -> TeardownProgress:
        fs_id = fs["FileSystemId"]
        if fs["LifeCycleState"] in _GONE:
            return TeardownProgress(False, f"waiting for EFS {fs_id} to be deleted")
        mts = self._mount_targets(fs_id)
        live = [mt for mt in mts if mt.get("LifeCycleState") not in _GONE]
        for mt in live:
            logger.info("deleting mount target %s of %s", mt["MountTargetId"], fs_id)
            self._api.delete_ignoring(
                self._api.efs, "DeleteMountTarget", "MountTargetNotFound",
                MountTargetId=mt["MountTargetId"],
            )  # fmt: skip
        if live:
            return TeardownProgress(
                False,
                f"deleting {len(live)} mount targets of EFS {fs_id}",
                tuple(mt["MountTargetId"] for mt in live),
            )
        if mts:
            return TeardownProgress(
                False, f"waiting for {len(mts)} mount targets of EFS {fs_id} to be deleted"
            )
        logger.info("deleting EFS file system %s", fs_id)
        try:
            self._api.delete_ignoring(
                self._api.efs, "DeleteFileSystem", "FileSystemNotFound", FileSystemId=fs_id
            )
        except AwsApiError as e:
            if e.code != "FileSystemInUse":
                raise
            return TeardownProgress(False, f"waiting for EFS {fs_id} to be released")
        return TeardownProgress(False, f"deleting EFS {fs_id}", (fs_id,))

    # -- automatic backups -------------------------------------------------------------------
    def _backup_policy(self, fs_id: str, desired: Desired, owned: bool) -> str:
        """The file system's BackupPolicy Status; on one we own, set to config aws-backup.

        EFS API reference: PutBackupPolicy (Status ENABLED or DISABLED) turns EFS automatic
        backups on or off; DescribeBackupPolicy answers ENABLED, ENABLING, DISABLED or
        DISABLING, and PolicyNotFound when none was ever set (read as DISABLED:
        aws-samples/service-screener-v2#95). EFS User Guide, "Backing up EFS file
        systems": a file system made through the API has automatic backups off (but One
        Zone ones), and turned on they use AWS Backup's default EFS plan, daily backups
        kept 35 days. An adopted file system's policy is only read: its owner decides.
        """
        try:
            status = self._api.call(self._api.efs, "DescribeBackupPolicy", FileSystemId=fs_id)[
                "BackupPolicy"
            ]["Status"]
        except AwsApiError as e:
            if e.code != "PolicyNotFound":
                raise
            status = "DISABLED"
        if not owned:
            return status
        wanted = "ENABLED" if desired.backup else "DISABLED"
        if status in (wanted, wanted.replace("ED", "ING")):
            return status
        logger.info(
            "turning EFS automatic backups of %s %s", fs_id, "on" if desired.backup else "off"
        )
        answer = self._api.call(
            self._api.efs, "PutBackupPolicy", FileSystemId=fs_id, BackupPolicy={"Status": wanted}
        )
        return answer["BackupPolicy"]["Status"]

    # -- observation ------------------------------------------------------------------------
    def _observe(
        self,
        desired: Desired,
        fs: dict[str, Any],
        mts: list[dict[str, Any]],
        placement: Placement,
        sg_id: str | None,
        problems: tuple[ZoneProblem, ...] = (),
    ) -> Observed:
        fs_id, state = fs["FileSystemId"], fs["LifeCycleState"]
        targets = tuple(
            sorted(
                (
                    MountTarget(
                        zone=mt.get("AvailabilityZoneName", "?"),
                        mount_target_id=mt["MountTargetId"],
                        subnet_id=mt.get("SubnetId", ""),
                        state=mt.get("LifeCycleState", "?"),
                        ip_address=mt.get("IpAddress"),
                    )
                    for mt in mts
                ),
                key=lambda mt: (mt.zone, mt.state in _GONE),
            )
        )
        zones = tuple(sorted(placement.subnets))
        by_zone: dict[str, MountTarget] = {}
        for mt in targets:
            by_zone.setdefault(mt.zone, mt)
        failing = {p.zone for p in problems}
        available = sum(
            1
            for z in zones
            if z in by_zone and by_zone[z].state == "available" and z not in failing
        )
        ready = state == "available" and bool(zones) and available == len(zones)
        if state != "available":
            progress = f"EFS {fs_id}: file system {state}"
        elif not zones:
            progress = f"EFS {fs_id}: waiting for cluster nodes"
        else:
            progress = f"EFS {fs_id}: {available}/{len(zones)} mount targets available"
        return Observed(
            file_system_id=fs_id,
            owned=not desired.adopt and self._is_ours(fs, desired),
            state=state,
            size_bytes=int((fs.get("SizeInBytes") or {}).get("Value") or 0),
            throughput_mode=fs.get("ThroughputMode", ""),
            region=self.region,
            mount_targets=targets,
            zones=zones,
            security_group_id=sg_id,
            ready=ready,
            progress=progress,
            unresolved_nodes=placement.unresolved,
            zone_problems=problems,
            file_system_arn=fs.get("FileSystemArn", ""),
        )


# -- helpers ------------------------------------------------------------------------------
def _admit_problem(
    mt: dict[str, Any], groups: list[str], sg_id: str, error: AwsApiError, region: str
) -> ZoneProblem:
    """An adopted mount target that would not take the charm's group, with the fix."""
    zone, subnet, mt_id = (
        mt.get("AvailabilityZoneName", ""),
        mt.get("SubnetId", ""),
        mt["MountTargetId"],
    )
    text = (
        f"mount target {mt_id} in {zone} ({subnet}) cannot take security group {sg_id} "
        f"({error.code}: {error.message}), so nodes there cannot reach NFS"
    )
    if error.code == "SecurityGroupLimitExceeded":
        keep = " ".join([*groups[:-1], sg_id])
        text += (
            "; replace one of its groups with it: aws efs modify-mount-target-security-groups "
            f"--region {region} --mount-target-id {mt_id} --security-groups {keep}"
        )
    return ZoneProblem(zone, subnet, error.code, error.message, error.retry_later, text)
