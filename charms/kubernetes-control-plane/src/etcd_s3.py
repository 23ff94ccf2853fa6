# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""etcd snapshots off the machine: upload to S3, retention there, fetch back (no ops).

`etcd-backup-s3` names an `s3://bucket[/prefix]`; `etcd-backup-credentials` a Juju secret
with the keys the tensorflow charm's `dataset-credentials` has (access-key-id,
secret-access-key, optional session-token, region, endpoint). Each snapshot goes to
`<prefix>/<its file name>` (etcd_backup's `etcd-snapshot-<UTC time>[-<n>].db`):

- never over an existing object: PutObject with `If-None-Match: *` (S3 User Guide,
  "How to prevent object overwrites with conditional writes": S3 answers 412
  PreconditionFailed when the key exists; docs.aws.amazon.com/AmazonS3/latest/userguide/
  conditional-writes.html). A 412 means another writer took the name in between (two
  units in one second): the next `-<n>` name is tried, as etcd_backup does on disk;
- server-side encryption requested: `x-amz-server-side-encryption: AES256` (S3 User
  Guide, "Using server-side encryption with Amazon S3 managed keys (SSE-S3)"); the
  snapshot holds every Secret of the cluster;
- the object carries the file's sha256 in its user metadata (`x-amz-meta-sha256`), which
  `fetch` checks before a restore uses the file, and the fingerprints of its cluster's
  CA and ServiceAccount key (etcd_backup's sidecar: `x-amz-meta-cluster-ca`,
  `x-amz-meta-service-account-key`), which `fetch` hands back for restore's check;
- retention: after an upload, the objects directly under the prefix whose names match
  the snapshot pattern, and only those, are kept to the newest `keep` (what else is in
  the bucket or prefix is never listed for deletion).

botocore is imported only here, inside the functions that talk to S3, so no other hook
pays its import cost (DESIGN: heavy clients lazily). Its signer (SigV4) and `standard`
retries do the wire work. No credential value is ever logged or put in a message:
`S3BackupError` texts carry S3's error code and message with the key id scrubbed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import re
import signal
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from etcd_backup import IDENTITY_KEYS, PREFIX, SUFFIX

logger = logging.getLogger(__name__)

# The Juju secret's keys, as tensorflow's dataset-credentials (charms/tensorflow/src/
# datasets.py CREDENTIAL_KEYS): the same words for the same thing.
REQUIRED_KEYS = ("access-key-id", "secret-access-key")
OPTIONAL_KEYS = ("session-token", "region", "endpoint")
DEFAULT_REGION = "us-east-1"
SSE = "AES256"
SHA256_META = "sha256"  # x-amz-meta-sha256
# etcd_backup's file names: etcd-snapshot-20261127T050000Z[-2].db
NAME = re.compile(rf"^{re.escape(PREFIX)}\d{{8}}T\d{{6}}Z(-\d+)?{re.escape(SUFFIX)}$")
MAX_NAME_TRIES = 20
CONNECT_TIMEOUT = 10
READ_TIMEOUT = 120
MAX_ATTEMPTS = 5
# The peer application data key of the leader's scheduled snapshot not uploaded yet (its
# path): the upload is retried on each update-status until it is in S3.
UNSENT = "etcd-backup-unsent"
# A snapshot fetched for restore-etcd lands in etcd_backup.BACKUP_DIR as s3-<name>, out
# of the local retention's `etcd-snapshot-*.db`.
FETCHED = "s3-"


class S3BackupError(Exception):
    """The upload, listing or fetch failed; the message says why (no credential in it)."""


@dataclasses.dataclass(frozen=True)
class Target:
    """`s3://bucket[/prefix]`: the bucket and the key prefix ('' or ending in '/')."""

    bucket: str
    prefix: str

    def url(self, key: str = "") -> str:
        """`s3://bucket/key`."""
        return f"s3://{self.bucket}/{key or self.prefix}"


def parse_url(url: str) -> Target:
    """An `s3://bucket[/prefix]` URL, or ValueError.

    Bucket names: S3 User Guide, "General purpose bucket naming rules" (3-63 lowercase
    letters, digits, '.' and '-', starting and ending with a letter or digit).
    """
    parts = urllib.parse.urlsplit(url.strip())
    if (
        parts.scheme != "s3"
        or not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", parts.netloc or "")
        or parts.query
        or parts.fragment
    ):
        raise ValueError("must be empty or s3://bucket[/prefix] (a bucket name, no query)")
    prefix = parts.path.strip("/")
    return Target(parts.netloc, f"{prefix}/" if prefix else "")


@dataclasses.dataclass(frozen=True)
class Credentials:
    """The secret's content; repr() shows no value."""

    access_key_id: str = dataclasses.field(repr=False)
    secret_access_key: str = dataclasses.field(repr=False)
    session_token: str = dataclasses.field(default="", repr=False)
    region: str = DEFAULT_REGION
    endpoint: str = ""

    @classmethod
    def from_secret(cls, content: Mapping[str, str]) -> Credentials:
        """From the Juju secret's content; ValueError names missing/unknown keys only."""
        missing = [k for k in REQUIRED_KEYS if not str(content.get(k, "")).strip()]
        unknown = sorted(set(content) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
        if missing or unknown:
            raise ValueError(
                "the etcd-backup-credentials secret needs the keys "
                f"{', '.join(REQUIRED_KEYS)} and may have session-token, region, endpoint"
                + (f"; missing: {', '.join(missing)}" if missing else "")
                + (f"; unknown: {', '.join(unknown)}" if unknown else "")
            )
        value = {k: str(content.get(k, "")).strip() for k in (*REQUIRED_KEYS, *OPTIONAL_KEYS)}
        return cls(
            access_key_id=value["access-key-id"],
            secret_access_key=value["secret-access-key"],
            session_token=value["session-token"],
            region=value["region"] or DEFAULT_REGION,
            endpoint=value["endpoint"],
        )


@dataclasses.dataclass(frozen=True)
class Uploaded:
    """Where a snapshot went and how many of ours the prefix keeps now."""

    url: str
    key: str
    kept: int
    removed: tuple[str, ...]


_SESSION: list[Any] = []  # one botocore session per process: its models parsed once


def client(creds: Credentials) -> Any:
    """A botocore S3 client with these credentials (path-style for an `endpoint`)."""
    import botocore.config
    import botocore.session

    if not _SESSION:
        _SESSION.append(botocore.session.get_session())
    session = _SESSION[0]
    config = botocore.config.Config(
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=READ_TIMEOUT,
        retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
        s3={"addressing_style": "path"} if creds.endpoint else None,
    )
    return session.create_client(
        "s3",
        region_name=creds.region,
        endpoint_url=creds.endpoint or None,
        aws_access_key_id=creds.access_key_id,
        aws_secret_access_key=creds.secret_access_key,
        aws_session_token=creds.session_token or None,
        config=config,
    )


def _error(what: str, error: Exception, creds: Credentials) -> S3BackupError:
    """S3's code, HTTP status and message, scrubbed of the key id and secret."""
    response = getattr(error, "response", None) or {}
    err = response.get("Error") or {}
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    if err:
        text = f"{err.get('Code', '?')} (HTTP {status}): {err.get('Message') or 'no message'}"
    else:
        text = str(error)
    for value in (creds.access_key_id, creds.secret_access_key, creds.session_token):
        if value:
            text = text.replace(value, "***")
    return S3BackupError(f"{what}: {text}")


def _code(error: Exception) -> str:
    return str(((getattr(error, "response", None) or {}).get("Error") or {}).get("Code", ""))


def _sha256(path: Any) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _other_names(name: str) -> list[str]:
    """`name`, then `-2`, `-3`... of the same second (etcd_backup's rule on disk)."""
    stem = name[: -len(SUFFIX)]
    base = re.sub(r"-\d+$", "", stem)
    first = int(stem[len(base) + 1 :]) if stem != base else 1
    return [name] + [f"{base}-{n}{SUFFIX}" for n in range(first + 1, first + MAX_NAME_TRIES)]


class _PastDeadline(BaseException):
    """SIGALRM's handler raises it where the upload is when its deadline passes.

    Not an Exception: botocore's endpoint catches Exception from the send and asks its
    retry handler whether to retry (botocore/endpoint.py `_do_get_response`); this goes
    straight out instead, through urllib3's `urlopen`, which closes the connection of a
    request that did not end cleanly (urllib3/connectionpool.py: `clean_exit`).
    """


@contextlib.contextmanager
def _within(seconds: float | None) -> Iterator[None]:
    """Raise _PastDeadline in this (the main) thread `seconds` from now; None: no limit.

    SIGALRM interrupts a blocking send or recv: Python retries a system call that EINTR
    interrupted unless the signal's handler raises (PEP 475), and this one does. The
    previous handler comes back, and the timer is disarmed, whatever happens.
    """
    if seconds is None:
        yield
        return

    def past(_signum: int, _frame: Any) -> None:
        raise _PastDeadline()

    previous = signal.signal(signal.SIGALRM, past)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)


def upload(
    path: Any,
    name: str,
    target: Target,
    creds: Credentials,
    *,
    keep: int,
    identity: Mapping[str, str] | None = None,
    deadline: float | None = None,
) -> Uploaded:
    """Put the snapshot under the prefix, never over an object; keep the newest `keep`.

    The object is `name`, or the next free `-<n>` of the same second, encrypted (SSE-S3),
    with `identity` (etcd_backup's fingerprints of its cluster's keys) in its metadata.

    `deadline` (seconds, main thread only): the whole upload (checksum, PutObject with its
    retries, pruning) stops when it passes, its connection closed. The snapshot goes in
    one PutObject, and "Amazon S3 never adds partial objects; if you receive a success
    response, Amazon S3 added the entire object to the bucket" (S3 API Reference,
    PutObject): a PUT cut short leaves nothing in the bucket, and no multipart upload
    whose parts would stay stored (and billed) until AbortMultipartUpload.

    Raises:
        S3BackupError: S3 refused or stayed unreachable (its code and words), or the
            deadline passed.
    """
    s3 = client(creds)
    sent: list[str] = []
    try:
        with _within(deadline):
            return _upload(s3, path, name, target, creds, keep, identity, sent)
    except _PastDeadline:
        what = (
            f"uploaded to {target.url(sent[0])}, but removing the old snapshots"
            if sent
            else f"upload to {target.url(target.prefix + name)}"
        )
        logger.warning("%s stopped at its %g s deadline", what, deadline)
        raise S3BackupError(f"{what} stopped at its {deadline:g} s deadline") from None


def _upload(
    s3: Any,
    path: Any,
    name: str,
    target: Target,
    creds: Credentials,
    keep: int,
    identity: Mapping[str, str] | None,
    sent: list[str],
) -> Uploaded:
    import botocore.exceptions

    checksum = _sha256(path)
    for candidate in _other_names(name):
        key = target.prefix + candidate
        try:
            with open(path, "rb") as body:
                s3.put_object(
                    Bucket=target.bucket,
                    Key=key,
                    Body=body,
                    IfNoneMatch="*",
                    ServerSideEncryption=SSE,
                    Metadata={SHA256_META: checksum, **dict(identity or {})},
                )
        except botocore.exceptions.ClientError as e:
            if _code(e) == "PreconditionFailed":  # the name is taken: never overwritten
                continue
            raise _error(f"upload to {target.url(key)} failed", e, creds) from None
        except botocore.exceptions.BotoCoreError as e:
            raise _error(f"upload to {target.url(key)} failed", e, creds) from None
        break
    else:
        raise S3BackupError(f"upload to {target.url()} failed: every name for {name} is taken")
    sent.append(key)
    logger.info("etcd snapshot uploaded to %s", target.url(key))
    ours = snapshots(target, creds, s3=s3)
    removed = []
    for old in ours[: -max(keep, 1)]:
        try:
            s3.delete_object(Bucket=target.bucket, Key=old)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise _error(
                f"uploaded to {target.url(key)}, but removing the old {target.url(old)} failed",
                e,
                creds,
            ) from None
        removed.append(old)
        logger.info("removed the old etcd backup %s", target.url(old))
    return Uploaded(
        url=target.url(key), key=key, kept=len(ours) - len(removed), removed=tuple(removed)
    )


def _order(key: str) -> tuple[str, int]:
    name = key.rsplit("/", 1)[-1]
    stamp, _, n = name[len(PREFIX) : -len(SUFFIX)].partition("-")
    return stamp, int(n) if n.isdigit() else 1


def snapshots(target: Target, creds: Credentials, *, s3: Any = None) -> list[str]:
    """The keys of our snapshots directly under the prefix, oldest first."""
    import botocore.exceptions

    s3 = s3 or client(creds)
    keys = []
    try:
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=target.bucket, Prefix=target.prefix + PREFIX
        )
        for page in pages:
            for item in page.get("Contents", []):
                name = item["Key"][len(target.prefix) :]
                if NAME.match(name):  # no '/': only directly under the prefix
                    keys.append(item["Key"])
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
        raise _error(f"listing {target.url()} failed", e, creds) from None
    return sorted(keys, key=_order)


def check_key(key: str, target: Target) -> str:
    """A key `restore-etcd s3-key=` may fetch: one of our snapshot names, under the prefix.

    The bare file name is taken as under the prefix.
    """
    key = key.strip()
    if "/" not in key:
        key = target.prefix + key
    if not key.startswith(target.prefix) or not NAME.match(key[len(target.prefix) :]):
        raise ValueError(
            f"{key!r} is not a snapshot under {target.url()} (etcd-snapshot-<time>.db, as "
            "backup-etcd's s3-url names it)"
        )
    return key


@dataclasses.dataclass(frozen=True)
class Fetched:
    """A snapshot fetched back: its sha256 and the fingerprints its object recorded."""

    sha256: str
    identity: dict[str, str] | None  # None: uploaded without them


def fetch(key: str, target: Target, creds: Credentials, dest: Any) -> Fetched:
    """Download `key` to `dest` (0600), checking the sha256 the upload recorded.

    Returns:
        The file's sha256 and the cluster keys' fingerprints in the object's metadata.

    Raises:
        S3BackupError: S3 refused, or the file is not what was uploaded (dest removed).
    """
    import botocore.exceptions

    s3 = client(creds)
    part = dest.with_name(dest.name + ".part")
    part.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        answer = s3.get_object(Bucket=target.bucket, Key=key)
        with open(part, "wb") as f:
            part.chmod(0o600)
            for chunk in answer["Body"].iter_chunks(1 << 20):
                f.write(chunk)
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
        part.unlink(missing_ok=True)
        raise _error(f"fetching {target.url(key)} failed", e, creds) from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    metadata = answer.get("Metadata") or {}
    want = metadata.get(SHA256_META, "")
    got = _sha256(part)
    if want and want != got:
        part.unlink(missing_ok=True)
        raise S3BackupError(
            f"{target.url(key)} is not the snapshot that was uploaded (sha256 {got}, "
            f"recorded {want})"
        )
    part.rename(dest)
    identity = {k: metadata[k] for k in IDENTITY_KEYS if k in metadata}
    return Fetched(got, identity if len(identity) == len(IDENTITY_KEYS) else None)
