# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""EFS access points, one per consumer, and the file system policy that confines them.

No ops code here. An access point applies its POSIX user (uid/gid) to every request made
through it, whatever the NFS client claims, and exposes its root directory as the
client's `/`: a consumer mounting through its own access point sees only its directory,
as its own user (EFS user guide, "Working with access points"; EFS API reference,
CreateAccessPoint: "The operating system user and group override any identity
information provided by the NFS client ... Applications using the access point can only
access data in the application's own directory and any subdirectories").

Fields sent (EFS API reference, CreateAccessPoint, read 2026-11-27):
- `ClientToken`: up to 64 ASCII characters "to ensure idempotent creation"; a second
  create with the same token answers `AccessPointAlreadyExists` (409, with the
  `AccessPointId`: botocore's efs model). The token is a digest of (model, application,
  consumer, path, uid, gid): a retried create finds its first attempt, a changed request
  is a new access point.
- `PosixUser` {Uid, Gid}: the consumer's owner (`shared_storage.StorageRequest.owner`).
- `RootDirectory` {Path, CreationInfo {OwnerUid, OwnerGid, Permissions}}: EFS creates the
  path with that owner and mode on first mount when it does not exist, and leaves an
  existing one as it is (EFS user guide, "Enforcing a root directory with an access
  point"): a consumer's existing directory keeps its data and owner.
- `Tags`: the charm's model and application and the consumer, so every hook and a new
  leader find the charm's own access points again (`DescribeAccessPoints` by file
  system, paged with `NextToken`). Tags on create are also authorized as
  `elasticfilesystem:TagResource` (CreateAccessPoint).
Errors: `AccessPointLimitExceeded` (403: "the maximum number of access points allowed per
file system", 10,000 unless raised: EFS user guide, "Creating access points"; the API
reference still says 1,000 in one note, the console page 10,000) is the operator's to fix
(Blocked with AWS's words); `AccessPointAlreadyExists` means done; throttling and
`IncorrectFileSystemLifeCycleState` clear by themselves (aws.py).

The file system policy (`policy`): EFS evaluates it for every NFS client, IAM-signed or
anonymous (EFS user guide, "Using IAM to control access to file systems"; the default
policy, used while none is set, allows ClientMount, ClientWrite and ClientRootAccess to
any client that comes through a mount target). Ours keeps mount and write for clients
through a mount target, denies mount and write to a client without an access point
(`Null` on `elasticfilesystem:AccessPointArn`), denies every action without TLS
(`aws:SecureTransport` false: the user guide's "Enforce encryption in transit" example)
and denies ClientRootAccess except through the charm's own access points that act as
root (`elasticfilesystem:AccessPointArn`; a negated string condition matches when the key
is absent, IAM user guide, "Condition operators"). Its
text stays far below the 20,000-character limit ("Creating file system policies") while
fewer than ~150 consumers act as root.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from typing import Any

from aws import Api, AwsApiError, AwsTransientError

logger = logging.getLogger(__name__)

TAG_MODEL = "gpu-k8s:model"
TAG_APP = "gpu-k8s:application"
TAG_CONSUMER = "gpu-k8s:consumer"
# The mode a directory an access point creates gets: as the directory Jobs give it
# (directories.SCRIPT): group-writable, new files keep its group. CreationInfo's
# Permissions is an octal string, `^[0-7]{3,4}$` (EFS API reference, CreationInfo).
DIRECTORY_MODE = "2775"
PAGE_SIZE = 100  # DescribeAccessPoints MaxResults (the API's default is 100)


@dataclasses.dataclass(frozen=True)
class Wanted:
    """The access point one consumer is served through."""

    consumer: str
    path: str
    uid: int
    gid: int

    def token(self, model_uuid: str, app: str) -> str:
        """The ClientToken of this access point (at most 64 ASCII characters)."""
        key = f"{model_uuid}/{app}/{self.consumer}:{self.path}:{self.uid}:{self.gid}"
        return f"gpu-k8s-{hashlib.sha256(key.encode()).hexdigest()[:48]}"


@dataclasses.dataclass(frozen=True)
class AccessPoint:
    """One of the charm's access points as EFS describes it."""

    access_point_id: str
    arn: str
    consumer: str
    path: str
    uid: int
    gid: int
    state: str


def _parse(ap: dict[str, Any]) -> AccessPoint:
    tags = {t["Key"]: t["Value"] for t in ap.get("Tags") or []}
    user = ap.get("PosixUser") or {}
    return AccessPoint(
        access_point_id=ap["AccessPointId"],
        arn=ap.get("AccessPointArn", ""),
        consumer=tags.get(TAG_CONSUMER, ""),
        path=(ap.get("RootDirectory") or {}).get("Path", "/"),
        uid=int(user.get("Uid", -1)),
        gid=int(user.get("Gid", -1)),
        state=ap.get("LifeCycleState", ""),
    )


class AccessPoints:
    """Finds, creates and deletes one application's access points on one file system."""

    def __init__(self, api: Api, model_uuid: str, app: str):
        self._api = api
        self.model_uuid = model_uuid
        self.app = app

    def own(self, fs_id: str) -> list[AccessPoint]:
        """The access points of `fs_id` tagged with this model and application."""
        pages = self._api.pages(
            self._api.efs,
            "DescribeAccessPoints",
            "NextToken",
            "NextToken",
            FileSystemId=fs_id,
            MaxResults=PAGE_SIZE,
        )
        found = []
        for page in pages:
            for ap in page.get("AccessPoints") or []:
                tags = {t["Key"]: t["Value"] for t in ap.get("Tags") or []}
                if tags.get(TAG_MODEL) == self.model_uuid and tags.get(TAG_APP) == self.app:
                    found.append(_parse(ap))
        return found

    def ensure(self, fs_id: str, wanted: list[Wanted]) -> dict[str, AccessPoint | AwsApiError]:
        """Each consumer's access point (made when missing), keyed on the consumer.

        An error AWS will not clear by itself (`AccessPointLimitExceeded`) is that
        consumer's answer: the others are still served. Anything transient raises.
        """
        own = self.own(fs_id)
        out: dict[str, AccessPoint | AwsApiError] = {}
        for want in wanted:
            match = next((ap for ap in own if _serves(ap, want)), None)
            if match is not None:
                out[want.consumer] = match
                continue
            try:
                out[want.consumer] = self._create(fs_id, want)
            except AwsApiError as e:
                if e.retry_later:
                    raise
                out[want.consumer] = e
        return out

    def delete_unused(self, fs_id: str, keep: set[str]) -> list[str]:
        """Delete the charm's access points whose ids are not in `keep`; their ids."""
        gone = []
        for ap in self.own(fs_id):
            if ap.access_point_id in keep or ap.state in ("deleting", "deleted"):
                continue
            logger.info("deleting access point %s of %s", ap.access_point_id, ap.consumer)
            self._api.delete_ignoring(
                self._api.efs,
                "DeleteAccessPoint",
                "AccessPointNotFound",
                AccessPointId=ap.access_point_id,
            )
            gone.append(ap.access_point_id)
        return gone

    def _create(self, fs_id: str, want: Wanted) -> AccessPoint:
        tags = [
            {"Key": "Name", "Value": f"gpu-k8s-{self.app}-{want.consumer}"[:256]},
            {"Key": TAG_MODEL, "Value": self.model_uuid},
            {"Key": TAG_APP, "Value": self.app},
            {"Key": TAG_CONSUMER, "Value": want.consumer},
        ]
        logger.info("creating access point of %s at %s (%s:%s)", want.consumer, want.path,
                    want.uid, want.gid)  # fmt: skip
        try:
            made = self._api.call(
                self._api.efs,
                "CreateAccessPoint",
                ClientToken=want.token(self.model_uuid, self.app),
                FileSystemId=fs_id,
                PosixUser={"Uid": want.uid, "Gid": want.gid},
                RootDirectory={
                    "Path": want.path,
                    "CreationInfo": {
                        "OwnerUid": want.uid,
                        "OwnerGid": want.gid,
                        "Permissions": DIRECTORY_MODE,
                    },
                },
                Tags=tags,
            )
        except AwsApiError as e:
            if e.code != "AccessPointAlreadyExists":
                raise
            # a retry whose first attempt was made: it is ours, find it
            again = next((ap for ap in self.own(fs_id) if _serves(ap, want)), None)
            if again is None:
                raise AwsTransientError(
                    f"EFS says the access point of {want.consumer} exists but does not list it"
                ) from None
            return again
        return _parse(made)


def _serves(ap: AccessPoint, want: Wanted) -> bool:
    return (
        ap.consumer == want.consumer
        and ap.path == want.path
        and (ap.uid, ap.gid) == (want.uid, want.gid)
        and ap.state not in ("deleting", "deleted", "error")
    )


def policy(fs_arn: str, root_access_points: list[str]) -> dict[str, Any]:
    """The file system policy: TLS and an access point only; root only through the given ARNs."""
    statements: list[dict[str, Any]] = [
        {
            "Sid": "MountAndWriteThroughMountTargets",
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": [
                "elasticfilesystem:ClientMount",
                "elasticfilesystem:ClientWrite",
                "elasticfilesystem:ClientRootAccess",
            ],
            "Resource": fs_arn,
            "Condition": {"Bool": {"elasticfilesystem:AccessedViaMountTarget": "true"}},
        },
        {
            "Sid": "EncryptionInTransitOnly",
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Action": "*",
            "Resource": fs_arn,
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        },
    ]
    # Every consumer mounts through its access point (the policy goes on only once no plain
    # NFS volume is left: charm.py _confine), so a client without one is refused outright:
    # a tenant pod speaking NFS over TLS to a mount target itself would otherwise pick any
    # uid and read or write another team's directory. `Null: true` matches when the key is
    # absent (IAM user guide, "Condition operators": "Condition operator to check existence
    # of condition keys"), and EFS sets `elasticfilesystem:AccessPointArn` only for a
    # client that mounts through an access point (EFS user guide, "Using access points in
    # IAM policies", access-points-iam-policy; "Using IAM to control access to file
    # systems", EFS condition keys for clients). Principal `{"AWS": "*"}` takes in the
    # anonymous clients, as the CSI driver's `tls` mounts without `iam` are.
    statements.append(
        {
            "Sid": "MountOnlyThroughAnAccessPoint",
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Action": ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"],
            "Resource": fs_arn,
            "Condition": {"Null": {"elasticfilesystem:AccessPointArn": "true"}},
        }
    )
    root_deny: dict[str, Any] = {
        "Sid": "RootOnlyThroughTheCharmsAccessPoints",
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "elasticfilesystem:ClientRootAccess",
        "Resource": fs_arn,
    }
    if root_access_points:
        root_deny["Condition"] = {
            "StringNotEquals": {"elasticfilesystem:AccessPointArn": sorted(root_access_points)}
        }
    statements.append(root_deny)
    return {"Version": "2012-10-17", "Id": "gpu-k8s-efs-storage", "Statement": statements}


def ensure_policy(api: Api, fs_id: str, wanted: dict[str, Any]) -> bool:
    """Put `wanted` as the file system policy unless it is already; True when it was put."""
    try:
        live = api.call(api.efs, "DescribeFileSystemPolicy", FileSystemId=fs_id).get("Policy")
    except AwsApiError as e:
        if e.code != "PolicyNotFound":
            raise
        live = None
    if live is not None and json.loads(live) == wanted:
        return False
    logger.info("putting the file system policy of %s", fs_id)
    text = json.dumps(wanted, sort_keys=True)
    api.call(api.efs, "PutFileSystemPolicy", FileSystemId=fs_id, Policy=text)
    return True
