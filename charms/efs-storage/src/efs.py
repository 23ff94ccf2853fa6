"""Amazon EFS for the efs-storage charm: file system, security group and mount targets.

This module has no ops code: the charm hands it credentials and the desired state and gets
plain data back. Every call to AWS is one non-blocking pass; nothing here sleeps. Long
operations (a file system or mount target becoming ``available``, a deletion finishing)
are reported as progress and checked again on the charm's next event.

boto3 is imported lazily, inside :func:`make_clients`, so hooks that never talk to AWS do
not pay for importing it. Every client retries transient errors (throttling, 5xx,
connection resets) with botocore's ``standard`` retry mode; calls that create things are
written so that a retry of a request whose response was lost finds its own first attempt
(``FileSystemAlreadyExists``, ``MountTargetConflict``, ``InvalidGroup.Duplicate``,
``InvalidPermission.Duplicate`` all mean "already done").

No credential value is ever logged or put in an error message.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import re
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

TAG_MODEL = "gpu-k8s:model"
# The tag Juju puts on every instance it starts (juju/juju provider/ec2: instances carry
# `juju-model-uuid` and `juju-controller-uuid`). Only read: Juju's `destroy-model` picks the
# instances it terminates by this tag, so nobody should be told to set it by hand.
JUJU_MODEL_TAG = "juju-model-uuid"
TAG_APP = "gpu-k8s:application"
NFS_PORT = 2049
PERFORMANCE_MODES = ("generalPurpose", "maxIO")
THROUGHPUT_MODES = ("elastic", "bursting", "provisioned")
DEFAULT_MAX_ATTEMPTS = 5
MAX_PAGES = 100

_KEY_REJECTED = {
    "InvalidClientTokenId": "the access key id is not a valid AWS access key",
    "UnrecognizedClientException": "the access key id is not a valid AWS access key",
    "AuthFailure": "AWS could not validate the access key id and secret access key",
    "SignatureDoesNotMatch": "the secret access key does not match the access key id",
    "IncompleteSignature": "the request signature is incomplete (check the secret access key)",
    "InvalidAccessKeyId": "the access key id is not a valid AWS access key",
    "ExpiredToken": "the session token has expired",
    "ExpiredTokenException": "the session token has expired",
    "MissingAuthenticationToken": "no access key was sent",
}
_PERMISSION_DENIED = {"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"}
_TRANSIENT = {
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "InternalError",
    "InternalServerError",
    "ServiceUnavailable",
    "Unavailable",
    "RequestTimeout",
    "RequestTimeoutException",
}
# Codes after which AWS itself says to try again: botocore's EFS model documents
# DependencyTimeout as "the client should try the call again" and
# InsufficientThroughputCapacity as "Try again later"; Incorrect*State means the object is
# between two states, which clears by itself. SecurityGroupNotFound (EFS) and
# InvalidGroup.NotFound (EC2) can only concern the group this very pass found or created,
# so they are EC2's eventual consistency: a new group may not be visible to every API at
# once (see the README's troubleshooting; not reproduced on AWS).
_RETRY_LATER = {
    "DependencyTimeout",
    "InsufficientThroughputCapacity",
    "IncorrectFileSystemLifeCycleState",
    "IncorrectMountTargetState",
    "SecurityGroupNotFound",
    "InvalidGroup.NotFound",
}
_IAM_PREFIX = {"ec2": "ec2", "efs": "elasticfilesystem"}
# The other IAM actions AWS checks inside a call, as botocore's service models document
# them: efs CreateFileSystem ("additional authorization on the
# elasticfilesystem:TagResource action" when tags are given), CreateMountTarget,
# DeleteMountTarget, ModifyMountTargetSecurityGroups and DescribeMountTargetSecurityGroups
# ("also requires permissions for the following Amazon EC2 actions"); EC2 tags given on
# creation (TagSpecifications) are authorized as ec2:CreateTags (EC2 User Guide, "Grant
# permission to tag Amazon EC2 resources during creation").
_ALSO_NEEDS = {
    "elasticfilesystem:CreateFileSystem": ("elasticfilesystem:TagResource",),
    "elasticfilesystem:CreateMountTarget": (
        "ec2:DescribeSubnets",
        "ec2:DescribeNetworkInterfaces",
        "ec2:CreateNetworkInterface",
    ),
    "elasticfilesystem:DeleteMountTarget": ("ec2:DeleteNetworkInterface",),
    "elasticfilesystem:ModifyMountTargetSecurityGroups": ("ec2:ModifyNetworkInterfaceAttribute",),
    "elasticfilesystem:DescribeMountTargetSecurityGroups": (
        "ec2:DescribeNetworkInterfaceAttribute",
    ),
    "ec2:CreateSecurityGroup": ("ec2:CreateTags",),
}
# IAM's denial text: "User: arn:... is not authorized to perform: ec2:CreateTags on
# resource: ... because no identity-based policy allows the ec2:CreateTags action" (also
# with the action in parentheses, as STS writes it).
_DENIED_ACTION_RE = re.compile(r"not authorized to perform:?\s*\(?([A-Za-z0-9-]+:[A-Za-z0-9*]+)")
# EC2 may hide the details: "... Encoded authorization failure message: <blob>", readable
# only through `aws sts decode-authorization-message` (AWS knowledge center,
# ec2-not-auth-launch).
_ENCODED_RE = re.compile(r"Encoded authorization failure message:\s*(\S+)")
_POLICY_HINT = "in the IAM policy of the credentials (README: IAM policy)"
_PROVIDER_ID_RE = re.compile(r"^aws://[^/]*/(?:([a-z0-9-]*)/)?(i-[0-9a-f]{8,17})$")
_NODE_NAME_IP_RE = re.compile(r"^ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})(?:\..*)?$")
_FS_ID_RE = re.compile(r"^fs-[0-9a-f]{8,40}$")
# Juju's model security group is "juju-" + the model uuid, which every machine of the model
# is in; each machine also has "juju-<uuid>-<machine id>" (or "-global"), juju/juju
# provider/ec2/environ.go: jujuGroupName, machineGroupName, globalGroupName, setUpGroups.
_JUJU_MODEL_GROUP_RE = re.compile(
    r"^juju-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)
# The description of the ingress rules this charm adds; only rules with it are revoked.
RULE_DESCRIPTION = "cluster nodes (NFS)"
_RELEASED = "its NFS rules from Juju's groups revoked"
_GONE = ("deleting", "deleted")


# -- errors -------------------------------------------------------------------------------
class AwsError(Exception):
    """Base class of every error this module raises."""


class AwsAuthError(AwsError):
    """AWS rejected the credentials or denied an action; the operator must fix the IAM side."""


class AwsConfigError(AwsError):
    """Something the operator must fix in the charm's configuration or the AWS account."""


class AwsTransientError(AwsError):
    """AWS stayed unreachable, throttled or failing after the client's retries."""


class AwsApiError(AwsError):
    """Any other error answer from AWS (callers inspect ``code``; ``message`` is redacted)."""

    def __init__(self, operation: str, code: str, message: str):
        super().__init__(f"{operation} failed: {code}: {message}")
        self.operation = operation
        self.code = code
        self.message = message

    @property
    def retry_later(self) -> bool:
        """True when AWS says the same call may work later without anyone acting."""
        return self.code in _RETRY_LATER


# -- credentials and clients --------------------------------------------------------------
@dataclasses.dataclass(frozen=True, repr=False)
class Credentials:
    """An AWS access key (and optional session token). Its repr never shows the values."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None
    source: str = "credentials"

    def __repr__(self) -> str:
        token = ", session_token=<hidden>" if self.session_token else ""
        return (
            f"Credentials(access_key_id=<hidden>, secret_access_key=<hidden>{token}, "
            f"source={self.source!r})"
        )

    __str__ = __repr__

    def secrets(self) -> tuple[str, ...]:
        """The values to scrub from any text that leaves this module."""
        values = (self.access_key_id, self.secret_access_key, self.session_token or "")
        return tuple(v for v in values if v)

    @classmethod
    def from_cloud_credential(cls, attributes: dict[str, str]) -> Credentials:
        """Build from Juju's cloud credential attributes (``access-key``, ``secret-key``).

        Raises:
            AwsConfigError: an attribute is missing (names the attribute, not its value).
        """
        return cls._build(
            attributes,
            ("access-key", "secret-key", "session-token"),
            "the Juju cloud credential (--trust)",
        )

    @classmethod
    def from_secret(cls, content: dict[str, str]) -> Credentials:
        """Build from the content of the Juju secret named by config ``credentials``.

        Keys: ``access-key-id``, ``secret-access-key`` and optionally ``session-token``
        (``access-key``/``secret-key`` are accepted too, as in Juju cloud credentials).

        Raises:
            AwsConfigError: a key is missing (names the key, not any value).
        """
        aliased = dict(content)
        aliased.setdefault("access-key-id", content.get("access-key", ""))
        aliased.setdefault("secret-access-key", content.get("secret-key", ""))
        return cls._build(
            aliased,
            ("access-key-id", "secret-access-key", "session-token"),
            "the secret in config 'credentials'",
        )

    @classmethod
    def _build(cls, data: dict[str, str], keys: tuple[str, str, str], source: str) -> Credentials:
        key_id, secret, token = (str(data.get(k) or "").strip() for k in keys)
        missing = [k for k, v in zip(keys[:2], (key_id, secret), strict=True) if not v]
        if missing:
            raise AwsConfigError(
                f"{source} has no {' and no '.join(missing)}; add {', '.join(missing)} to {source}"
            )
        return cls(key_id, secret, token or None, source)


@dataclasses.dataclass(frozen=True)
class Clients:
    """The two boto3 clients the manager uses."""

    ec2: Any
    efs: Any


def make_clients(
    credentials: Credentials,
    region: str,
    endpoint_url: str | None = None,
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    connect_timeout: float = 5.0,
    read_timeout: float = 20.0,
) -> Clients:
    """Create EC2 and EFS clients with standard retries and bounded timeouts.

    Args:
        credentials: the access key to sign with.
        region: AWS region, e.g. ``us-east-1``.
        endpoint_url: override for both services (tests point it at a local server).
        max_attempts: total attempts per call, first one included.
        connect_timeout: seconds to wait for a connection.
        read_timeout: seconds to wait for a response.
    """
    if not region:
        raise AwsConfigError("no AWS region; set config 'region' or deploy with --trust")
    import boto3.session
    from botocore.config import Config

    _quiet_botocore()
    config = Config(
        # total_max_attempts counts the first attempt; the legacy "max_attempts" key counts
        # retries only (max_attempts=N makes N + 1 requests).
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        user_agent_extra="gpu-k8s-efs-storage",
    )
    session = boto3.session.Session(
        botocore_session=_botocore_session(),
        aws_access_key_id=credentials.access_key_id,
        aws_secret_access_key=credentials.secret_access_key,
        aws_session_token=credentials.session_token,
        region_name=region,
    )
    return Clients(
        ec2=session.client("ec2", endpoint_url=endpoint_url, config=config),
        efs=session.client("efs", endpoint_url=endpoint_url, config=config),
    )


_LOADER: Any = None  # botocore's model loader, once this process made one


def _botocore_session() -> Any:
    """A new botocore session that shares this process's model loader.

    Each botocore session parses the JSON models it needs (EC2's service model, the
    endpoints) in its own loader, which caches them: about 0.5 s for the two clients. A
    hook is a process of its own, so this changes nothing there; the tests run hundreds of
    hooks in one process. Credentials stay per session: only parsed models are shared.
    """
    import botocore.session

    global _LOADER
    session = botocore.session.get_session()
    if _LOADER is None:
        _LOADER = session.get_component("data_loader")
    else:
        session.register_component("data_loader", _LOADER)
    return session


def _quiet_botocore() -> None:
    """Botocore's DEBUG records carry signed headers (key id, session token): never emit them."""
    for name in ("botocore", "boto3", "s3transfer"):
        log = logging.getLogger(name)
        if log.getEffectiveLevel() < logging.INFO:
            log.setLevel(logging.INFO)


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
        result["mount-targets"] = {
            mt.zone: f"{mt.mount_target_id} {mt.subnet_id} {mt.state}" for mt in self.mount_targets
        }
        return result


@dataclasses.dataclass(frozen=True)
class TeardownProgress:
    """Where a removal stands. Call :meth:`Efs.teardown` again until ``done``."""

    done: bool
    message: str
    deleted: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class _Placement:
    """Where the cluster's nodes run."""

    vpc_id: str | None
    subnets: dict[str, str]  # zone -> subnet chosen for its mount target
    node_groups: tuple[str, ...]
    unresolved: tuple[str, ...]


# -- the manager --------------------------------------------------------------------------
class Efs:
    """Reconciles one application's EFS file system, security group and mount targets."""

    def __init__(self, clients: Clients, region: str, *, redact: Sequence[str] = ()):
        self._ec2 = clients.ec2
        self._efs = clients.efs
        self.region = region
        self._redact_values = tuple(v for v in redact if v)

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
        placement = self._locate_nodes(desired)
        dns_off = self._vpc_dns_off(placement.vpc_id) if placement.vpc_id else ()
        sg_id = self._ensure_security_group(desired, placement) if placement.vpc_id else None
        mts: list[dict[str, Any]] = []
        problems: tuple[ZoneProblem, ...] = ()
        if state == "available":
            mts = self._mount_targets(fs_id)
            if sg_id:
                mts, problems = self._ensure_mount_targets(fs_id, placement, sg_id, mts)
                if desired.adopt:
                    problems += self._admit_nodes(mts, placement, sg_id)
        observed = self._observe(desired, fs, mts, placement, sg_id, problems)
        if dns_off:
            problem = _dns_problem(placement.vpc_id or "", dns_off, observed.dns_name, self.region)
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
        placement = _Placement(None, dict.fromkeys(zones, ""), (), ())
        return self._observe(desired, fs, mts, placement, None)

    def release_rules(self, model_uuid: str, app: str) -> bool:
        """Revoke the NFS rules this application added; False when it has no group."""
        group = self._own_group(Desired(model_uuid=model_uuid, app=app))
        if group is None:
            return False
        self._release(group)
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
        group = self._own_group(desired)
        if group is not None:
            self._release(group)
        if desired.adopt:
            return self._keep(f"kept adopted EFS {desired.file_system_id}", group)
        if not delete:
            return self._keep("kept the EFS file system (delete-on-remove is false)", group)
        fs = self._find_own(desired)
        if fs is not None and not self._is_ours(fs, desired):
            return TeardownProgress(
                True, f"kept EFS {fs['FileSystemId']}: its tags do not name this application"
            )
        if fs is not None:
            return self._teardown_file_system(fs)
        return self._teardown_security_group(desired)

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
            found = self._call(
                self._efs, "DescribeFileSystems", FileSystemId=desired.file_system_id
            )
        except AwsApiError as e:
            if e.code == "FileSystemNotFound":
                return None
            raise
        return found["FileSystems"][0] if found["FileSystems"] else None

    def _find_own(self, desired: Desired) -> dict[str, Any] | None:
        token = creation_token(desired.model_uuid, desired.app)
        found = self._call(self._efs, "DescribeFileSystems", CreationToken=token)
        return found["FileSystems"][0] if found["FileSystems"] else None

    def _create_file_system(self, desired: Desired) -> dict[str, Any]:
        token = creation_token(desired.model_uuid, desired.app)
        kwargs: dict[str, Any] = {
            "CreationToken": token,
            "PerformanceMode": desired.performance_mode,
            "ThroughputMode": desired.throughput_mode,
            "Encrypted": True,
            "Tags": [{"Key": "Name", "Value": f"gpu-k8s-{desired.app}"}, *_tags(desired)],
        }
        if desired.kms_key_id:
            kwargs["KmsKeyId"] = desired.kms_key_id
        if desired.throughput_mode == "provisioned":
            kwargs["ProvisionedThroughputInMibps"] = desired.provisioned_throughput_mibps
        logger.info("creating EFS file system with creation token %s", token)
        try:
            return self._call(self._efs, "CreateFileSystem", **kwargs)
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

    # -- nodes ------------------------------------------------------------------------------
    def _locate_nodes(self, desired: Desired) -> _Placement:
        """Find the EC2 instances behind the cluster's nodes.

        Provider ids name the instance; other nodes are looked up by private IP (from their
        InternalIP addresses or an ``ip-a-b-c-d`` name). Private IPs repeat across VPCs, so
        IP matches count only in the cluster's VPC: ``desired.vpc_id`` when given, else the
        VPC of the nodes found by instance id, else the VPC matching the most nodes. An IP
        that matches instances in several VPCs counts only for those Juju tagged with this
        model (`juju-model-uuid`, on every instance Juju starts), when any is.
        """
        by_id: dict[str, str] = {}
        by_ip: dict[str, str] = {}
        for node in desired.nodes:
            parsed = parse_provider_id(node.provider_id or "")
            if parsed:
                by_id[parsed[1]] = node.name
                continue
            for ip in _node_ips(node):
                by_ip[ip] = node.name
        extra = [{"Name": "vpc-id", "Values": [desired.vpc_id]}] if desired.vpc_id else []
        found = self._instances("instance-id", sorted(by_id), extra) if by_id else []
        candidates: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        if by_ip:
            for inst in self._instances("private-ip-address", sorted(by_ip), extra):
                candidates[by_ip.get(inst.get("PrivateIpAddress", ""), "")].append(inst)
            candidates = {
                name: _ours(insts, desired.model_uuid) for name, insts in candidates.items()
            }
        wanted = set(by_id.values()) | set(by_ip.values())
        if wanted and not found and not candidates:
            raise AwsConfigError(
                f"none of the cluster nodes ({', '.join(sorted(wanted)[:5])}) is an EC2 "
                f"instance in {self.region}; check the region and the AWS account"
            )
        vpc_id = desired.vpc_id or _cluster_vpc(found, candidates)
        unique = {i["InstanceId"]: i for i in found}
        for insts in candidates.values():
            unique.update((i["InstanceId"], i) for i in insts if i.get("VpcId") == vpc_id)
        names = {
            by_id.get(i) or by_ip.get(inst.get("PrivateIpAddress", ""))
            for i, inst in unique.items()
        }
        return _placement(list(unique.values()), tuple(sorted(wanted - names)))

    def _instances(
        self, filter_name: str, values: list[str], extra: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        filters = [
            {"Name": filter_name, "Values": values},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
            *extra,
        ]
        out: list[dict[str, Any]] = []
        token: str | None = None
        for _ in range(MAX_PAGES):
            page = self._call(
                self._ec2, "DescribeInstances", Filters=filters, **_page("NextToken", token)
            )
            out.extend(i for r in page.get("Reservations", []) for i in r.get("Instances", []))
            token = page.get("NextToken")
            if not token:
                break
        return out

    # -- the VPC's DNS -----------------------------------------------------------------------
    def _vpc_dns_off(self, vpc_id: str) -> tuple[str, ...]:
        """The VPC DNS attributes that are off (the PV mounts by the file system's DNS name).

        EFS's DNS name resolves only through the VPC's Amazon DNS server; AWS's EFS guide
        offers mounting by IP address for "VPCs with DNS hostnames disabled" (Mounting by
        IP address). DescribeVpcAttribute takes one attribute per call (botocore ec2
        model: "You can specify only one attribute at a time"; VpcAttributeName enum).
        """
        off = []
        for attribute in ("enableDnsSupport", "enableDnsHostnames"):
            try:
                answer = self._call(
                    self._ec2, "DescribeVpcAttribute", VpcId=vpc_id, Attribute=attribute
                )
            except AwsAuthError as e:  # a diagnostic read: a policy without it still serves
                logger.warning("cannot check VPC %s DNS attributes: %s", vpc_id, e)
                return ()
            key = attribute[0].upper() + attribute[1:]
            if not (answer.get(key) or {}).get("Value", False):
                off.append(attribute)
        return tuple(off)

    # -- security group ---------------------------------------------------------------------
    def _find_group(self, filters: list[dict[str, Any]]) -> dict[str, Any] | None:
        groups = self._call(self._ec2, "DescribeSecurityGroups", Filters=filters)
        return groups["SecurityGroups"][0] if groups["SecurityGroups"] else None

    def _ensure_security_group(self, desired: Desired, placement: _Placement) -> str:
        name = security_group_name(desired.model_uuid, desired.app)
        filters = [
            {"Name": "group-name", "Values": [name]},
            {"Name": "vpc-id", "Values": [placement.vpc_id]},
        ]
        group = self._find_group(filters)
        if group is None:
            group = self._create_group(desired, name, placement.vpc_id or "", filters)
        pairs = _nfs_pairs(group)
        allowed = {pair.get("GroupId") for pair in pairs}
        for source in placement.node_groups:
            if source not in allowed:
                self._allow_nfs(group["GroupId"], source)
        ours = {p.get("GroupId", "") for p in pairs if p.get("Description") == RULE_DESCRIPTION}
        for source in sorted(ours - set(placement.node_groups)):
            self._revoke_nfs(group["GroupId"], source)
        return group["GroupId"]

    def _revoke_nfs(self, group_id: str, source_group: str) -> None:
        """Revoke the NFS rule from ``source_group`` (gone already counts as done).

        botocore ec2 RevokeSecurityGroupIngress: rule properties must match exactly, the
        description need not be given; InvalidPermission.NotFound when nothing matches.
        """
        logger.info("revoking TCP %d to %s from %s", NFS_PORT, group_id, source_group)
        self._delete_ignoring(
            self._ec2, "RevokeSecurityGroupIngress", "InvalidPermission.NotFound",
            GroupId=group_id,
            IpPermissions=[
                {
                    "IpProtocol": "tcp",
                    "FromPort": NFS_PORT,
                    "ToPort": NFS_PORT,
                    "UserIdGroupPairs": [{"GroupId": source_group}],
                }
            ],
        )  # fmt: skip

    def _create_group(
        self, desired: Desired, name: str, vpc_id: str, filters: list[dict[str, Any]]
    ) -> dict[str, Any]:
        logger.info("creating security group %s in %s", name, vpc_id)
        try:
            created = self._call(
                self._ec2,
                "CreateSecurityGroup",
                GroupName=name,
                Description=f"NFS to EFS of {desired.app} from the cluster nodes (gpu-k8s)",
                VpcId=vpc_id,
                TagSpecifications=[
                    {"ResourceType": "security-group", "Tags": _tags(desired)},
                ],
            )
            return {"GroupId": created["GroupId"], "IpPermissions": []}
        except AwsApiError as e:
            if e.code != "InvalidGroup.Duplicate":
                raise
        group = self._find_group(filters)
        if group is None:
            raise AwsTransientError(f"security group {name} exists but is not listed yet")
        return group

    def _allow_nfs(self, group_id: str, source_group: str) -> None:
        logger.info("allowing TCP %d to %s from %s", NFS_PORT, group_id, source_group)
        try:
            self._call(
                self._ec2,
                "AuthorizeSecurityGroupIngress",
                GroupId=group_id,
                IpPermissions=[
                    {
                        "IpProtocol": "tcp",
                        "FromPort": NFS_PORT,
                        "ToPort": NFS_PORT,
                        "UserIdGroupPairs": [
                            {"GroupId": source_group, "Description": RULE_DESCRIPTION}
                        ],
                    }
                ],
            )
        except AwsApiError as e:
            if e.code != "InvalidPermission.Duplicate":
                raise

    # -- mount targets ----------------------------------------------------------------------
    def _mount_targets(self, fs_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        marker: str | None = None
        for _ in range(MAX_PAGES):
            page = self._call(
                self._efs, "DescribeMountTargets", FileSystemId=fs_id, **_page("Marker", marker)
            )
            out.extend(page.get("MountTargets", []))
            marker = page.get("NextMarker")
            if not marker:
                break
        return out

    def _ensure_mount_targets(
        self, fs_id: str, placement: _Placement, sg_id: str, mts: list[dict[str, Any]]
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
                    self._call(
                        self._efs,
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
        self, mts: list[dict[str, Any]], placement: _Placement, sg_id: str
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
            groups = self._call(
                self._efs, "DescribeMountTargetSecurityGroups", MountTargetId=mt_id
            ).get("SecurityGroups", [])
            if sg_id in groups:
                continue
            logger.info("adding security group %s to mount target %s", sg_id, mt_id)
            try:
                self._call(
                    self._efs,
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
            self._delete_ignoring(
                self._efs, "DeleteMountTarget", "MountTargetNotFound",
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
            self._delete_ignoring(
                self._efs, "DeleteFileSystem", "FileSystemNotFound", FileSystemId=fs_id
            )
        except AwsApiError as e:
            if e.code != "FileSystemInUse":
                raise
            return TeardownProgress(False, f"waiting for EFS {fs_id} to be released")
        return TeardownProgress(False, f"deleting EFS {fs_id}", (fs_id,))

    def _own_group(self, desired: Desired) -> dict[str, Any] | None:
        """This application's security group, by name and both tags (in any VPC)."""
        name = security_group_name(desired.model_uuid, desired.app)
        return self._find_group(
            [
                {"Name": "group-name", "Values": [name]},
                {"Name": f"tag:{TAG_MODEL}", "Values": [desired.model_uuid]},
                {"Name": f"tag:{TAG_APP}", "Values": [desired.app]},
            ]
        )

    def _release(self, group: dict[str, Any]) -> None:
        """Revoke the NFS rules this charm added (they reference Juju's groups)."""
        sources = sorted(
            {
                p.get("GroupId", "")
                for p in _nfs_pairs(group)
                if p.get("Description") == RULE_DESCRIPTION
            }
        )
        for source in sources:
            self._revoke_nfs(group["GroupId"], source)

    def _keep(self, kept: str, group: dict[str, Any] | None) -> TeardownProgress:
        """The file system stays; its security group goes unless a network interface uses it.

        EFS mount targets are network interfaces in the group (botocore efs
        CreateMountTarget: "Amazon EFS also creates a new network interface"); AWS refuses
        to delete a group a network interface is associated with (botocore ec2
        DeleteSecurityGroup: DependencyViolation).
        """
        if group is None:
            return TeardownProgress(True, kept)
        group_id = group["GroupId"]
        users = self._group_users(group_id)
        if users:
            return TeardownProgress(
                True,
                f"{kept}, and security group {group_id} for its {len(users)} mount targets "
                f"({_RELEASED})",
            )
        logger.info("deleting security group %s (nothing uses it)", group_id)
        try:
            self._delete_ignoring(
                self._ec2, "DeleteSecurityGroup", "InvalidGroup.NotFound", GroupId=group_id
            )
        except AwsApiError as e:
            if e.code != "DependencyViolation":
                raise
            return TeardownProgress(
                True, f"{kept}, and security group {group_id} (in use; {_RELEASED})"
            )
        return TeardownProgress(
            True, f"{kept}; deleted unused security group {group_id}", (group_id,)
        )

    def _teardown_security_group(self, desired: Desired) -> TeardownProgress:
        group = self._own_group(desired)
        if group is None:
            return TeardownProgress(True, "EFS file system and security group deleted")
        group_id = group["GroupId"]
        logger.info("deleting security group %s", group_id)
        try:
            self._delete_ignoring(
                self._ec2, "DeleteSecurityGroup", "InvalidGroup.NotFound", GroupId=group_id
            )
        except AwsApiError as e:
            if e.code != "DependencyViolation":
                raise
            users = self._group_users(group_id)
            if users:  # the deleted mount targets' interfaces are still going away
                return TeardownProgress(
                    False, f"waiting for AWS to release security group {group_id}"
                )
            # Only a reference from another group is left (botocore ec2 DeleteSecurityGroup:
            # DependencyViolation), which nothing here will remove: keep it, say so, finish.
            return TeardownProgress(
                True,
                f"EFS file system deleted; kept security group {group_id}: another security "
                "group's rule references it",
            )
        return TeardownProgress(True, "EFS file system and security group deleted", (group_id,))

    def _group_users(self, group_id: str) -> list[dict[str, Any]]:
        """The network interfaces in a security group (a mount target is one)."""
        return self._call(
            self._ec2,
            "DescribeNetworkInterfaces",
            Filters=[{"Name": "group-id", "Values": [group_id]}],
        ).get("NetworkInterfaces", [])

    def _delete_ignoring(self, client: Any, operation: str, gone_code: str, **kwargs: Any) -> None:
        try:
            self._call(client, operation, **kwargs)
        except AwsApiError as e:
            if e.code != gone_code:
                raise

    # -- observation ------------------------------------------------------------------------
    def _observe(
        self,
        desired: Desired,
        fs: dict[str, Any],
        mts: list[dict[str, Any]],
        placement: _Placement,
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
        )

    # -- calls ------------------------------------------------------------------------------
    def _call(self, client: Any, operation: str, **kwargs: Any) -> dict[str, Any]:
        """Call one AWS operation; translate failures into this module's errors."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        method = getattr(client, _snake(operation))
        iam_action = f"{_IAM_PREFIX.get(client.meta.service_model.service_name, '?')}:{operation}"
        try:
            return method(**kwargs)
        except ClientError as e:
            error = e.response.get("Error", {})
            raise self._translate(
                iam_action, str(error.get("Code", "")), str(error.get("Message", ""))
            ) from None
        except NoCredentialsError:
            raise AwsAuthError(f"no AWS credentials to call {iam_action}") from None
        except BotoCoreError as e:
            raise AwsTransientError(
                f"{iam_action} failed after retries: {self._redact(str(e))}"
            ) from None

    def _translate(self, iam_action: str, code: str, message: str) -> AwsError:
        if code in _KEY_REJECTED:
            return AwsAuthError(
                f"AWS rejected the credentials calling {iam_action} ({code}): "
                f"{_KEY_REJECTED[code]}; update the AWS credentials"
            )
        if code in _PERMISSION_DENIED:
            return self._denied(iam_action, code, self._redact(message))
        if code in _TRANSIENT:
            return AwsTransientError(f"{iam_action} still failing after retries ({code})")
        return AwsApiError(iam_action, code, self._redact(message))

    @staticmethod
    def _denied(iam_action: str, code: str, message: str) -> AwsAuthError:
        """Name the action IAM refused when AWS's message says it, else what the call needs."""
        needs = ", ".join((iam_action, *_ALSO_NEEDS.get(iam_action, ())))
        encoded = _ENCODED_RE.search(message)
        if encoded:
            logger.warning(
                "AWS denied %s; decode the reason with: aws sts decode-authorization-message "
                "--encoded-message %s",
                iam_action,
                encoded.group(1),
            )
            return AwsAuthError(
                f"AWS denied {iam_action} or an action it needs ({code}); allow {needs} "
                f"{_POLICY_HINT}; to see which, decode the message in juju debug-log with "
                "aws sts decode-authorization-message"
            )
        named = _DENIED_ACTION_RE.search(message)
        if named and named.group(1) != iam_action:
            return AwsAuthError(
                f"AWS denied {named.group(1)} (calling {iam_action}); allow it {_POLICY_HINT}"
            )
        if named:
            return AwsAuthError(f"AWS denied {iam_action} ({code}); allow it {_POLICY_HINT}")
        return AwsAuthError(
            f"AWS denied {iam_action} ({code}: {message}); allow {needs} {_POLICY_HINT}"
        )

    def _redact(self, text: str) -> str:
        for value in self._redact_values:
            text = text.replace(value, "<hidden>")
        return text


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


_DNS_ATTRIBUTES = {
    "enableDnsSupport": ("DNS resolution", "--enable-dns-support"),
    "enableDnsHostnames": ("DNS hostnames", "--enable-dns-hostnames"),
}


def _dns_problem(vpc_id: str, off: tuple[str, ...], name: str | None, region: str) -> str:
    """What is off and the commands that turn it on (support first: hostnames need it).

    ModifyVpcAttribute changes one attribute per call; the AWS CLI takes the value as
    ``'{"Value":true}'`` (aws ec2 modify-vpc-attribute reference, examples).
    """
    what = " and ".join(_DNS_ATTRIBUTES[a][0] for a in off)
    fixes = " && ".join(
        f"aws ec2 modify-vpc-attribute --region {region} --vpc-id {vpc_id} "
        f"{_DNS_ATTRIBUTES[a][1]} '{{\"Value\":true}}'"
        for a in off
    )
    return f"VPC {vpc_id} has {what} off, so nodes cannot resolve {name}; run: {fixes}"


def _tags(desired: Desired) -> list[dict[str, str]]:
    return [
        {"Key": TAG_MODEL, "Value": desired.model_uuid},
        {"Key": TAG_APP, "Value": desired.app},
    ]


def _page(key: str, value: str | None) -> dict[str, str]:
    return {key: value} if value else {}


def _snake(operation: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()


def _node_ips(node: Node) -> list[str]:
    ips = [a for a in node.addresses if a]
    match = _NODE_NAME_IP_RE.match(node.name)
    if match:
        ips.append(".".join(match.groups()))
    return sorted(set(ips))


def _ours(instances: list[dict[str, Any]], model_uuid: str) -> list[dict[str, Any]]:
    """The instances Juju tagged with this model, or all of them when none is."""
    tagged = [
        i
        for i in instances
        if any(
            t.get("Key") == JUJU_MODEL_TAG and t.get("Value") == model_uuid
            for t in i.get("Tags") or []
        )
    ]
    return tagged or instances


def _cluster_vpc(
    found: list[dict[str, Any]], candidates: dict[str, list[dict[str, Any]]]
) -> str | None:
    """The VPC of the nodes found by instance id, else the one most IP-matched nodes are in."""
    by_id = sorted({i.get("VpcId", "") for i in found})
    if len(by_id) > 1:
        raise AwsConfigError(
            f"cluster nodes run in several VPCs ({', '.join(by_id)}); "
            "the mount targets of one EFS file system must all be in one VPC"
        )
    if by_id:
        return by_id[0]
    votes = collections.Counter(
        vpc for insts in candidates.values() for vpc in {i.get("VpcId", "") for i in insts}
    )
    ranked = votes.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        tied = sorted(v for v, n in ranked if n == ranked[0][1])
        raise AwsConfigError(
            f"the cluster nodes' private IPs match instances in several VPCs "
            f"({', '.join(tied)}) and none is a Juju machine of this model (tag "
            f"{JUJU_MODEL_TAG}); register the nodes with their providerID "
            "(aws:///<zone>/<instance id>)"
        )
    return ranked[0][0] if ranked else None


def _placement(instances: list[dict[str, Any]], unresolved: tuple[str, ...]) -> _Placement:
    """Choose one subnet per zone (the one most nodes of that zone use) and the node groups."""
    if not instances:
        return _Placement(None, {}, (), unresolved)
    vpcs = sorted({i.get("VpcId", "") for i in instances})
    if len(vpcs) > 1:
        raise AwsConfigError(
            f"cluster nodes run in several VPCs ({', '.join(vpcs)}); "
            "the mount targets of one EFS file system must all be in one VPC"
        )
    per_zone: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for inst in instances:
        per_zone[inst["Placement"]["AvailabilityZone"]][inst["SubnetId"]] += 1
    subnets = {
        zone: min(counts, key=lambda s, c=counts: (-c[s], s)) for zone, counts in per_zone.items()
    }
    return _Placement(vpcs[0], subnets, _node_groups(instances), unresolved)


def _node_groups(instances: list[dict[str, Any]]) -> tuple[str, ...]:
    """The groups NFS is allowed from: the one group all nodes share.

    On Juju that is the model group (``juju-<model uuid>``), never a machine's own group,
    which a single node would otherwise "share" with itself. Without a Juju model group,
    the groups all nodes share; with none shared, every node's groups.
    """
    group_sets = [
        {(g["GroupId"], g.get("GroupName", "")) for g in i.get("SecurityGroups") or []}
        for i in instances
    ]
    common = set.intersection(*group_sets)
    model = {gid for gid, name in common if _JUJU_MODEL_GROUP_RE.match(name)}
    groups = model or {gid for gid, _ in common} or {gid for s in group_sets for gid, _ in s}
    return tuple(sorted(groups))


def _nfs_pairs(group: dict[str, Any]) -> list[dict[str, Any]]:
    """The source groups of ``group``'s TCP 2049 ingress rules."""
    return [
        pair
        for perm in group.get("IpPermissions") or []
        if perm.get("IpProtocol") == "tcp"
        and perm.get("FromPort") == NFS_PORT
        and perm.get("ToPort") == NFS_PORT
        for pair in perm.get("UserIdGroupPairs") or []
    ]
