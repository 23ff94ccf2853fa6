# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""AWS access for efs-storage: clients, the error vocabulary, and one call at a time.

No ops code here. :func:`make_clients` builds the EC2 and EFS clients; :class:`Api` makes
every call of the other modules (``network.py`` for EC2, ``efs.py`` for EFS) and turns a
failure into one of this module's errors, which the charm maps to a status: credentials
or permissions the operator must fix (:class:`AwsAuthError`), configuration
(:class:`AwsConfigError`), what stayed failing after the retries
(:class:`AwsTransientError`), and any other answer with AWS's code
(:class:`AwsApiError`, ``retry_later`` when AWS says the same call may work later).

boto3 is imported lazily, inside :func:`make_clients`, so hooks that never talk to AWS do
not pay for importing it. Every client retries transient errors (throttling, 5xx,
connection resets) with botocore's ``standard`` retry mode.

No credential value is ever logged or put in an error message: :class:`Credentials` hides
its values, :class:`Api` scrubs them from AWS's messages, and botocore's DEBUG records
(signed headers) are never emitted.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any

logger = logging.getLogger(__name__)

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
# once (not reproduced on AWS).
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
    # ENABLED in an account without AWSServiceRoleForBackup: AWS Backup creates it on the
    # caller's behalf (AWS Backup Developer Guide, "Service-linked roles for AWS Backup";
    # IAM User Guide, "Service-linked role permissions"), for backup.amazonaws.com
    "elasticfilesystem:PutBackupPolicy": ("iam:CreateServiceLinkedRole",),
}
# IAM's denial text: "User: arn:... is not authorized to perform: ec2:CreateTags on
# resource: ... because no identity-based policy allows the ec2:CreateTags action" (also
# with the action in parentheses, as STS writes it).
_DENIED_ACTION_RE = re.compile(r"not authorized to perform:?\s*\(?([A-Za-z0-9-]+:[A-Za-z0-9*]+)")
# EC2 may hide the details: "... Encoded authorization failure message: <blob>", readable
# only through `aws sts decode-authorization-message` (AWS knowledge center,
# ec2-not-auth-launch).
_ENCODED_RE = re.compile(r"Encoded authorization failure message:\s*(\S+)")
_POLICY_HINT = "in the IAM policy of the credentials (docs/how-to/aws-credentials.md)"


# -- errors -------------------------------------------------------------------------------
class AwsError(Exception):
    """Base class of every AWS-side error of efs-storage (here and in the modules using it)."""


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
_SEARCH_PATHS: list[str] = []  # its search paths as botocore made them


def _botocore_session() -> Any:
    """A new botocore session that shares this process's model loader.

    Each botocore session parses the JSON models it needs (EC2's service model, the
    endpoints) in its own loader, which caches them: about 0.5 s for the two clients. A
    hook is a process of its own, so this changes nothing there; the tests run hundreds of
    hooks in one process. Credentials stay per session: only parsed models are shared.
    Every boto3 session appends boto3's own data directory to the loader's search paths
    (boto3/session.py `_setup_loader`), so they are set back first, not grown each time.
    """
    import botocore.session

    global _LOADER
    session = botocore.session.get_session()
    if _LOADER is None:
        _LOADER = session.get_component("data_loader")
        _SEARCH_PATHS[:] = _LOADER.search_paths
    else:
        _LOADER.search_paths[:] = _SEARCH_PATHS
        session.register_component("data_loader", _LOADER)
    return session


def _quiet_botocore() -> None:
    """Botocore's DEBUG records carry signed headers (key id, session token): never emit them."""
    for name in ("botocore", "boto3", "s3transfer"):
        log = logging.getLogger(name)
        if log.getEffectiveLevel() < logging.INFO:
            log.setLevel(logging.INFO)


# -- calls --------------------------------------------------------------------------------
class Api:
    """The EC2 and EFS clients of one manager; every call's failure becomes an error here.

    ``redact`` holds the values (the credentials) scrubbed from any text AWS sends back.
    """

    def __init__(self, clients: Clients, *, redact: Sequence[str] = ()):
        self.ec2 = clients.ec2
        self.efs = clients.efs
        self._redact_values = tuple(v for v in redact if v)

    def call(self, client: Any, operation: str, **kwargs: Any) -> dict[str, Any]:
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
                f"{iam_action} failed after retries: {self.redact(str(e))}"
            ) from None

    def pages(
        self, client: Any, operation: str, marker: str, next_marker: str, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        """Each page of a listing (at most ``MAX_PAGES``), ``marker`` given back as sent."""
        token: str | None = None
        for _ in range(MAX_PAGES):
            page = self.call(client, operation, **kwargs, **_page(marker, token))
            yield page
            token = page.get(next_marker)
            if not token:
                break

    def delete_ignoring(self, client: Any, operation: str, gone_code: str, **kwargs: Any) -> None:
        """Call a deletion; ``gone_code`` (the object is gone already) counts as done."""
        try:
            self.call(client, operation, **kwargs)
        except AwsApiError as e:
            if e.code != gone_code:
                raise

    def redact(self, text: str) -> str:
        """``text`` without any of the values to scrub."""
        for value in self._redact_values:
            text = text.replace(value, "<hidden>")
        return text

    def _translate(self, iam_action: str, code: str, message: str) -> AwsError:
        if code in _KEY_REJECTED:
            return AwsAuthError(
                f"AWS rejected the credentials calling {iam_action} ({code}): "
                f"{_KEY_REJECTED[code]}; update the AWS credentials"
            )
        if code in _PERMISSION_DENIED:
            return self._denied(iam_action, code, self.redact(message))
        if code in _TRANSIENT:
            return AwsTransientError(f"{iam_action} still failing after retries ({code})")
        return AwsApiError(iam_action, code, self.redact(message))

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


def _page(key: str, value: str | None) -> dict[str, str]:
    return {key: value} if value else {}


def _snake(operation: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()
