"""A local AWS for the tests: moto's server behind a thin fault-injecting proxy.

moto answers EC2 and EFS on one loopback port. In front of it, :class:`AwsProxy` (also on
127.0.0.1) forwards every request and adds what moto does not model:

- faults for the next N requests of one action: throttling with the body the real service
  sends (EC2 ``RequestLimitExceeded``, EFS ``ThrottlingException``), HTTP 500, a connection
  reset before the request reaches moto, a reset *after* moto handled it (the response is
  lost, so a retried create meets its own first attempt), IAM denials, "dependency"
  (EC2 ``DependencyViolation`` / EFS ``FileSystemInUse``, as while ENIs are released),
  and "stall": the request is received and never answered, as from a peer that stopped
  responding, until the client hangs up (:attr:`AwsProxy.stalls` says after how long);
- life cycles: moto reports every file system and mount target ``available`` at once and
  forgets deleted ones at once. The proxy rewrites the JSON so new ones report ``creating``
  for their first N describes, and deleted ones keep appearing as ``deleting`` for N
  describes (during which DeleteFileSystem answers ``FileSystemInUse`` and
  DeleteSecurityGroup ``DependencyViolation``, like AWS while ENIs are released);
- access keys: when ``valid_access_keys`` is set, a request signed with any other key gets
  the error AWS returns for an unknown key (its message names the key id, as some AWS
  error messages do, so callers that echo AWS messages are caught);
- counters of every request by service and action, split into mutating and read calls.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import os
import re
import socket
import struct
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from fakes import serving
from fakes.aws_service_quotas import ServiceQuotas

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
ACCESS_KEY_ID = "AKIAFUNCTESTKEY00001"
IMAGE_ID = "ami-0123456789abcdef0"
SECRET_ACCESS_KEY = "fUnCtIoNaL/TeSt+SeCrEt0123456789abcdefXY"

_CREDENTIAL_RE = re.compile(r"Credential=([^/,\s]+)/\d{8}/([^/]+)/([^/]+)/aws4_request")
_EFS_ROUTES = (
    ("POST", r"/2015-02-01/file-systems", "CreateFileSystem"),
    ("GET", r"/2015-02-01/file-systems", "DescribeFileSystems"),
    ("DELETE", r"/2015-02-01/file-systems/[^/]+", "DeleteFileSystem"),
    ("PUT", r"/2015-02-01/file-systems/[^/]+", "UpdateFileSystem"),
    ("POST", r"/2015-02-01/mount-targets", "CreateMountTarget"),
    ("GET", r"/2015-02-01/mount-targets", "DescribeMountTargets"),
    ("DELETE", r"/2015-02-01/mount-targets/[^/]+", "DeleteMountTarget"),
    (
        "GET",
        r"/2015-02-01/mount-targets/[^/]+/security-groups",
        "DescribeMountTargetSecurityGroups",
    ),
    ("PUT", r"/2015-02-01/mount-targets/[^/]+/security-groups", "ModifyMountTargetSecurityGroups"),
    # Access points and the file system policy (EFS API reference: CreateAccessPoint
    # POST /2015-02-01/access-points, DescribeAccessPoints GET, DeleteAccessPoint DELETE
    # /2015-02-01/access-points/{id}, PutFileSystemPolicy PUT and DescribeFileSystemPolicy
    # GET /2015-02-01/file-systems/{id}/policy). moto keeps PosixUser, RootDirectory (with
    # CreationInfo) and tags as sent, but neither ClientToken idempotency nor the limit per
    # file system: a test injects AccessPointLimitExceeded with `fail`.
    ("POST", r"/2015-02-01/access-points", "CreateAccessPoint"),
    ("GET", r"/2015-02-01/access-points", "DescribeAccessPoints"),
    ("DELETE", r"/2015-02-01/access-points/[^/]+", "DeleteAccessPoint"),
    ("PUT", r"/2015-02-01/file-systems/[^/]+/policy", "PutFileSystemPolicy"),
    ("GET", r"/2015-02-01/file-systems/[^/]+/policy", "DescribeFileSystemPolicy"),
    # EFS API reference: PutBackupPolicy and DescribeBackupPolicy, PUT and GET
    # /2015-02-01/file-systems/{id}/backup-policy. moto 5.2 has Describe only (PolicyNotFound
    # unless the file system was created with Backup, as AWS answers for a file system whose
    # automatic backups were never set: aws-samples/service-screener-v2#95); the proxy
    # keeps what PutBackupPolicy sets (see AwsProxy._backup_policy).
    ("PUT", r"/2015-02-01/file-systems/[^/]+/backup-policy", "PutBackupPolicy"),
    ("GET", r"/2015-02-01/file-systems/[^/]+/backup-policy", "DescribeBackupPolicy"),
    ("GET", r"/2015-02-01/resource-tags/[^/]+", "ListTagsForResource"),
    ("POST", r"/2015-02-01/resource-tags/[^/]+", "TagResource"),
)
# moto's text when a file system still has mount targets (moto/efs/models.py
# delete_file_system); botocore documents the code only ("Returned if a file system has
# mount targets.")
FS_IN_USE = "Must delete all mount targets before deleting file system."
FAULT_KINDS = ("throttle", "500", "reset", "reset-after", "deny", "dependency", "stall")
# The longest a stalled request is held when its client never hangs up (then it is closed
# without an answer): longer than any deadline a test gives the code under test.
STALL_MAX = 30.0


@dataclasses.dataclass(frozen=True)
class Call:
    """One request the proxy received."""

    service: str
    action: str
    mutating: bool
    fault: str | None


@dataclasses.dataclass
class _Fault:
    kind: str
    times: int
    code: str = ""
    message: str = ""
    status: int = 400
    when: str = ""  # only requests whose path or body contain this text


@dataclasses.dataclass
class _Ghost:
    """A deleted object that AWS would still list as ``deleting``."""

    body: dict[str, Any]
    remaining: int


class _ResetError(Exception):
    """Raised inside the handler after the connection was reset on purpose."""


def _action_of(service: str, method: str, path: str, body: bytes, target: str = "") -> str:
    if target:  # JSON 1.1 protocol (Service Quotas): X-Amz-Target is <prefix>.<action>
        return target.rpartition(".")[2]
    if service == "ec2":
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        return form.get("Action", ["?"])[0]
    for route_method, pattern, action in _EFS_ROUTES:
        if method == route_method and re.fullmatch(pattern, path):
            return action
    return f"{method} {path}"


def _is_mutating(service: str, method: str, action: str) -> bool:
    if service in ("ec2", "servicequotas"):
        return not action.startswith(("Describe", "Get", "List"))
    return method != "GET"


class AwsProxy:
    """Fault-injecting, life-cycle-faking HTTP proxy in front of a moto server."""

    def __init__(self, upstream: tuple[str, int]):
        self._upstream = upstream
        self._lock = threading.Lock()
        self._faults: dict[str, list[_Fault]] = {}
        self.calls: list[Call] = []
        self.valid_access_keys: set[str] | None = None
        self.creating_describes = {"file-system": 0, "mount-target": 0}
        self.deleting_describes = {"file-system": 0, "mount-target": 0}
        self._creating: dict[str, int] = {}
        self._ghost_fs: dict[str, _Ghost] = {}
        self._ghost_mt: dict[str, _Ghost] = {}
        self._mt_cache: dict[str, dict[str, Any]] = {}
        self._fs_cache: dict[str, dict[str, Any]] = {}
        self.backup_policies: dict[str, str] = {}  # file system id -> what Put set
        self.quotas = ServiceQuotas(REGION)
        # each stalled request: seconds until its client hung up (None: it never did)
        self.stalls: list[float | None] = []
        self._server = serving.ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The endpoint URL to give boto3."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def reset(self) -> None:
        """Forget faults, life cycles, keys and counters (between tests)."""
        with self._lock:
            self._faults.clear()
            self.calls.clear()
            self.valid_access_keys = None
            self.creating_describes = {"file-system": 0, "mount-target": 0}
            self.deleting_describes = {"file-system": 0, "mount-target": 0}
            self._creating.clear()
            self._ghost_fs.clear()
            self._ghost_mt.clear()
            self._mt_cache.clear()
            self._fs_cache.clear()
            self.backup_policies.clear()
            self.quotas = ServiceQuotas(REGION)
            self.stalls.clear()

    # -- test controls ---------------------------------------------------------------------
    def inject(self, action: str, kind: str, times: int = 1) -> None:
        """Make the next ``times`` requests of ``action`` fail with ``kind``."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; use one of {FAULT_KINDS}")
        with self._lock:
            self._faults.setdefault(action, []).append(_Fault(kind, times))

    def fail(
        self,
        action: str,
        code: str,
        message: str,
        *,
        status: int = 400,
        times: int = 1,
        when: str = "",
    ) -> None:
        """Answer the next ``times`` requests of ``action`` with AWS error ``code``.

        The error has the service's wire format (EC2 XML, EFS JSON with x-amzn-ErrorType)
        and the HTTP status AWS documents for the code (botocore's service model gives it
        for EFS errors, e.g. ``UnsupportedAvailabilityZone`` 400,
        ``NoFreeAddressesInSubnet`` 409, ``DependencyTimeout`` 504). With ``when``, only
        requests whose path or body contain that text fail (e.g. one subnet id), so one
        zone can fail while the others work.
        """
        with self._lock:
            fault = _Fault("error", times, code, message, status, when)
            self._faults.setdefault(action, []).append(fault)

    def deny(self, action: str, style: str = "named", denied: str = "", times: int = 1) -> None:
        """Refuse the next ``times`` requests of ``action`` as IAM does, in one of its styles.

        - ``named``: the message names the action IAM refused, ``denied`` (default: the
          called one), as in "User: arn:... is not authorized to perform: <action> on
          resource: ... because no identity-based policy allows the <action> action".
          EFS refuses CreateFileSystem with tags for elasticfilesystem:TagResource this
          way (botocore efs CreateFileSystem doc: IAM "performs additional authorization on
          the elasticfilesystem:TagResource action").
        - ``opaque``: no action named. EC2 answers "You are not authorized to perform this
          operation." (aws/aws-cli#5628, rebuy-de/aws-nuke#517); EFS answers "User is not
          authorized to perform that action on the specified resource"
          (aws-samples/eks-workshop-v2#1106, CreateMountTarget).
        - ``encoded``: EC2's "You are not authorized to perform this operation. Encoded
          authorization failure message: <blob>", which only ``aws sts
          decode-authorization-message`` reads (AWS knowledge center ec2-not-auth-launch).
        """
        if style not in ("named", "opaque", "encoded"):
            raise ValueError(f"unknown deny style {style!r}")
        with self._lock:
            fault = _Fault("deny", times, code=style, message=denied)
            self._faults.setdefault(action, []).append(fault)

    def clear_counts(self) -> None:
        """Reset the request counters only."""
        with self._lock:
            self.calls.clear()

    def counts(self, *, mutating: bool | None = None) -> Counter[str]:
        """Requests per action (optionally only mutating or only read ones)."""
        with self._lock:
            return Counter(
                c.action for c in self.calls if mutating is None or c.mutating == mutating
            )

    def count(self, action: str) -> int:
        """Requests received for one action, faulted ones included."""
        return self.counts()[action]

    def pending_faults(self) -> int:
        """Injected faults not consumed yet."""
        with self._lock:
            return sum(f.times for faults in self._faults.values() for f in faults)

    # -- request path ----------------------------------------------------------------------
    def _take_fault(self, action: str, text: str = "") -> _Fault | None:
        faults = self._faults.get(action)
        fault = next((f for f in faults or [] if not f.when or f.when in text), None)
        if fault is None or faults is None:
            return None
        fault.times -= 1
        if fault.times <= 0:
            faults.remove(fault)
        return fault

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # no 40 ms Nagle stall: tests/fakes/__init__.py
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def do_GET(self) -> None:  # noqa: N802
                self._handle()

            do_POST = do_PUT = do_DELETE = do_HEAD = do_GET  # noqa: N815

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    status, headers, payload = proxy._serve(self, body)
                except _ResetError:
                    self.close_connection = True
                    return
                self.send_response(status)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def reset_connection(self) -> None:
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
                self.wfile = _Sink()
                raise _ResetError()

            def stall(self) -> None:
                """Answer nothing until the client hangs up (at most STALL_MAX s), then close."""
                started = time.monotonic()
                self.connection.settimeout(STALL_MAX)
                hung_up: float | None = None
                try:
                    while self.connection.recv(1 << 16):  # what else it sends is dropped
                        pass
                    hung_up = time.monotonic() - started
                except OSError:  # the client reset the connection, or STALL_MAX passed
                    waited = time.monotonic() - started
                    hung_up = waited if waited < STALL_MAX else None
                with proxy._lock:
                    proxy.stalls.append(hung_up)
                self.close_connection = True
                raise _ResetError()

        return Handler

    def _serve(self, handler: Any, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        match = _CREDENTIAL_RE.search(handler.headers.get("Authorization", ""))
        key_id, service = (match.group(1), match.group(3)) if match else ("", "unknown")
        service = "efs" if service == "elasticfilesystem" else service
        parsed = urllib.parse.urlsplit(handler.path)
        target = handler.headers.get("X-Amz-Target", "")
        action = _action_of(service, handler.command, parsed.path, body, target)
        mutating = _is_mutating(service, handler.command, action)
        with self._lock:
            taken = self._take_fault(action, handler.path + body.decode("utf-8", "replace"))
            fault = taken.kind if taken else None
            if fault is None and self.valid_access_keys is not None:
                fault = None if key_id in self.valid_access_keys else "bad-key"
            self.calls.append(Call(service, action, mutating, fault))
            conflict = self._lifecycle_conflict(action, parsed, body)
        if fault in ("reset", "stall"):  # no answer: reset now, or once the client hangs up
            (handler.reset_connection if fault == "reset" else handler.stall)()
        refusal = _fault_answer(service, action, key_id, fault, taken) or conflict
        if refusal is None and action == "DeleteSecurityGroup":
            refusal = self._group_in_use(body)
        if refusal is None and action == "ModifyMountTargetSecurityGroups":
            refusal = _over_group_quota(body)
        if refusal is not None:
            return refusal
        answer = self._answer_here(service, action, parsed, body)
        if answer is not None:
            return answer
        if action == "RevokeSecurityGroupIngress":
            body = self._with_rule_descriptions(body)
        status, headers, payload = self._forward(handler, body)
        if service == "efs" and 200 <= status < 300:
            payload = self._rewrite_efs(action, parsed, body, payload)
        if fault == "reset-after":
            handler.reset_connection()
        return status, headers, payload

    def _answer_here(
        self, service: str, action: str, parsed: urllib.parse.SplitResult, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """What the proxy answers itself, for what moto lacks (else None: moto answers)."""
        if action in ("PutBackupPolicy", "DescribeBackupPolicy"):
            return self._backup_policy(action, parsed, body)
        if service == "servicequotas" and self.quotas.handles(action, body):
            with self._lock:
                return self.quotas.answer(action, body)
        return None

    def _backup_policy(
        self, action: str, parsed: urllib.parse.SplitResult, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """PutBackupPolicy, which moto lacks, and Describe once a Put was made.

        EFS API reference, PutBackupPolicy: the request's BackupPolicy Status is ENABLED or
        DISABLED (ValidationException otherwise: BackupPolicy says ENABLING and DISABLING
        are EFS's transitions, not requests); an unknown file system is 404
        FileSystemNotFound. The answer is the transition (ENABLING/DISABLING), and the
        next Describe the state reached, so callers meet both.
        """
        fs_id = parsed.path.split("/")[3]
        from moto.efs.models import efs_backends

        backend = efs_backends["123456789012"][REGION]
        if fs_id not in backend.file_systems_by_id:
            return _efs_error(404, "FileSystemNotFound", f"File system '{fs_id}' does not exist.")
        with self._lock:
            if action == "DescribeBackupPolicy":
                status = self.backup_policies.get(fs_id)
                if status is None:
                    return None  # moto's answer
                self.backup_policies[fs_id] = status.replace("ING", "ED")
                return (
                    200,
                    [("Content-Type", "application/json")],
                    json.dumps({"BackupPolicy": {"Status": self.backup_policies[fs_id]}}).encode(),
                )
            wanted = (json.loads(body or b"{}").get("BackupPolicy") or {}).get("Status")
            if wanted not in ("ENABLED", "DISABLED"):
                return _efs_error(
                    400, "ValidationException", "BackupPolicy.Status must be ENABLED or DISABLED"
                )
            status = wanted.replace("ED", "ING")
            self.backup_policies[fs_id] = status
        return (
            200,
            [("Content-Type", "application/json")],
            json.dumps({"BackupPolicy": {"Status": status}}).encode(),
        )

    def _forward(self, handler: Any, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self._upstream, timeout=30)
        try:
            skip_headers = ("connection", "content-length")  # the body may be rewritten
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in skip_headers}
            conn.request(handler.command, handler.path, body=body, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            skip = {"content-length", "transfer-encoding", "connection", "server", "date"}
            out = [(k, v) for k, v in resp.getheaders() if k.lower() not in skip]
            return resp.status, out, payload
        finally:
            conn.close()

    def _moto_ec2(self) -> Any:
        import boto3

        return boto3.client(
            "ec2",
            region_name=REGION,
            endpoint_url=f"http://{self._upstream[0]}:{self._upstream[1]}",
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        )

    def _with_rule_descriptions(self, body: bytes) -> bytes:
        """Add each revoked rule's description, which AWS does not need but moto matches on.

        AWS: "If the security group rule has a description, you do not need to specify the
        description to revoke the rule" (botocore ec2 RevokeSecurityGroupIngress doc).
        moto 5 compares the whole source-group entry, description included, and answers
        InvalidPermission.NotFound without it.
        """
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        group_id = form.get("GroupId", [""])[0]
        try:
            groups = self._moto_ec2().describe_security_groups(GroupIds=[group_id])
        except Exception:  # noqa: BLE001 (an unknown group: moto answers the revoke itself)
            return body
        descriptions = {
            (perm.get("IpProtocol"), perm.get("FromPort"), pair.get("GroupId")): pair[
                "Description"
            ]
            for group in groups["SecurityGroups"]
            for perm in group.get("IpPermissions") or []
            for pair in perm.get("UserIdGroupPairs") or []
            if pair.get("Description")
        }
        for key in list(form):
            match = re.fullmatch(r"(IpPermissions\.\d+)\.Groups\.(\d+)\.GroupId", key)
            if not match:
                continue
            perm, pair = match.group(1), f"{match.group(1)}.Groups.{match.group(2)}"
            from_port = form.get(f"{perm}.FromPort", [""])[0]
            rule = (
                form.get(f"{perm}.IpProtocol", [""])[0],
                int(from_port) if from_port.lstrip("-").isdigit() else None,
                form[key][0],
            )
            if f"{pair}.Description" not in form and rule in descriptions:
                form[f"{pair}.Description"] = [descriptions[rule]]
        return urllib.parse.urlencode(form, doseq=True).encode()

    def _group_in_use(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """DependencyViolation while another group's rule or a network interface uses it.

        AWS: deleting a group "associated with an instance or network interface, [or]
        referenced by another security group in the same VPC ... fails with
        DependencyViolation" (botocore ec2 DeleteSecurityGroup doc). moto 5 deletes it
        anyway. A terminated instance's primary interface goes with it in AWS (it is
        deleted on termination) but stays listed in moto, so it does not count here.
        """
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        group_id = form.get("GroupId", [""])[0]
        if not group_id:
            return None
        ec2 = self._moto_ec2()
        referencing = [
            g["GroupId"]
            for g in ec2.describe_security_groups(
                Filters=[{"Name": "ip-permission.group-id", "Values": [group_id]}]
            )["SecurityGroups"]
            if g["GroupId"] != group_id
        ]
        enis = ec2.describe_network_interfaces(
            Filters=[{"Name": "group-id", "Values": [group_id]}]
        )["NetworkInterfaces"]
        attached = {
            e["Attachment"]["InstanceId"]
            for e in enis
            if e.get("Attachment", {}).get("InstanceId")
        }
        gone = set()
        if attached:
            reservations = ec2.describe_instances(InstanceIds=sorted(attached))["Reservations"]
            gone = {
                i["InstanceId"]
                for r in reservations
                for i in r["Instances"]
                if i["State"]["Name"] in ("shutting-down", "terminated")
            }
        live = [e for e in enis if e.get("Attachment", {}).get("InstanceId") not in gone]
        if not referencing and not live:
            return None
        return _ec2_error(
            400, "DependencyViolation", f"resource {group_id} has a dependent object"
        )

    # -- life cycles -----------------------------------------------------------------------
    def _lifecycle_conflict(
        self, action: str, parsed: urllib.parse.SplitResult, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """AWS refuses these while deleted mount targets are still being released."""
        live = {mt_id: g for mt_id, g in self._ghost_mt.items() if g.remaining > 0}
        if action == "DeleteFileSystem":
            fs_id = parsed.path.rsplit("/", 1)[-1]
            if any(g.body.get("FileSystemId") == fs_id for g in live.values()):
                return _efs_error(409, "FileSystemInUse", FS_IN_USE)
        if action == "DeleteSecurityGroup":
            form = urllib.parse.parse_qs(body.decode())
            group_id = form.get("GroupId", [""])[0]
            if any(group_id in (g.body.get("SecurityGroups") or []) for g in live.values()):
                return _ec2_error(
                    400,
                    "DependencyViolation",
                    f"resource {group_id} has a dependent object",
                )
        return None

    def _rewrite_efs(
        self, action: str, parsed: urllib.parse.SplitResult, body: bytes, payload: bytes
    ) -> bytes:
        with self._lock:
            if action == "CreateFileSystem":
                doc = json.loads(payload)
                return json.dumps(self._born(doc, "FileSystemId", "file-system")).encode()
            if action == "CreateMountTarget":
                doc = json.loads(payload)
                doc.setdefault("SecurityGroups", json.loads(body).get("SecurityGroups"))
                return json.dumps(self._born(doc, "MountTargetId", "mount-target")).encode()
            if action == "DescribeFileSystems":
                doc = json.loads(payload)
                query = urllib.parse.parse_qs(parsed.query)
                doc["FileSystems"] = self._describe(
                    doc["FileSystems"], "FileSystemId", self._fs_cache, self._ghost_fs, query
                )
                return json.dumps(doc).encode()
            if action == "DescribeMountTargetSecurityGroups":
                return self._default_group_if_none(parsed, payload)
            if action == "DescribeMountTargets":
                doc = json.loads(payload)
                query = urllib.parse.parse_qs(parsed.query)
                doc["MountTargets"] = self._describe(
                    doc["MountTargets"], "MountTargetId", self._mt_cache, self._ghost_mt, query
                )
                return json.dumps(doc).encode()
            if action == "DeleteMountTarget":
                self._bury(parsed, self._mt_cache, self._ghost_mt, "mount-target")
            elif action == "DeleteFileSystem":
                self._bury(parsed, self._fs_cache, self._ghost_fs, "file-system")
        return payload

    def _default_group_if_none(self, parsed: urllib.parse.SplitResult, payload: bytes) -> bytes:
        """A mount target made without SecurityGroups is in its VPC's default group.

        botocore efs CreateMountTarget: "If the request provides SecurityGroups, this
        network interface is associated with those security groups. Otherwise, it belongs
        to the default security group for the subnet's VPC." moto 5 lists no group.
        """
        doc = json.loads(payload or b"{}")
        if doc.get("SecurityGroups"):
            return payload
        mt_id = parsed.path.split("/")[-2]
        vpc_id = (self._mt_cache.get(mt_id) or {}).get("VpcId")
        if not vpc_id:
            return payload
        groups = self._moto_ec2().describe_security_groups(
            Filters=[
                {"Name": "vpc-id", "Values": [vpc_id]},
                {"Name": "group-name", "Values": ["default"]},
            ]
        )["SecurityGroups"]
        doc["SecurityGroups"] = [g["GroupId"] for g in groups]
        return json.dumps(doc).encode()

    def _born(self, doc: dict[str, Any], id_key: str, kind: str) -> dict[str, Any]:
        cache = self._fs_cache if kind == "file-system" else self._mt_cache
        cache[doc[id_key]] = dict(doc)
        if self.creating_describes[kind] > 0:
            self._creating[doc[id_key]] = self.creating_describes[kind]
            doc["LifeCycleState"] = "creating"
        return doc

    def _describe(
        self,
        items: list[dict[str, Any]],
        id_key: str,
        cache: dict[str, dict[str, Any]],
        ghosts: dict[str, _Ghost],
        query: dict[str, list[str]],
    ) -> list[dict[str, Any]]:
        for item in items:
            obj_id = item[id_key]
            cache[obj_id] = {**cache.get(obj_id, {}), **item}
            if self._creating.get(obj_id, 0) > 0:
                self._creating[obj_id] -= 1
                item["LifeCycleState"] = "creating"
        for ghost_id, ghost in ghosts.items():
            if ghost.remaining <= 0 or not _ghost_matches(ghost.body, query):
                continue
            ghost.remaining -= 1
            items.append({**ghost.body, "LifeCycleState": "deleting"})
        return items

    def _bury(
        self,
        parsed: urllib.parse.SplitResult,
        cache: dict[str, dict[str, Any]],
        ghosts: dict[str, _Ghost],
        kind: str,
    ) -> None:
        obj_id = parsed.path.rsplit("/", 1)[-1]
        self._creating.pop(obj_id, None)
        if self.deleting_describes[kind] > 0 and obj_id in cache:
            ghosts[obj_id] = _Ghost(cache.pop(obj_id), self.deleting_describes[kind])


def _ghost_matches(body: dict[str, Any], query: dict[str, list[str]]) -> bool:
    for key in ("FileSystemId", "CreationToken", "MountTargetId"):
        if key in query and body.get(key) != query[key][0]:
            return False
    return True


class _Sink:
    """Stands in for the socket file after a deliberate reset."""

    closed = False

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


def _efs_error(status: int, code: str, message: str) -> tuple[int, list[tuple[str, str]], bytes]:
    body = json.dumps({"ErrorCode": code, "Message": message}).encode()
    return status, [("Content-Type", "application/json"), ("x-amzn-ErrorType", code)], body


def _ec2_error(status: int, code: str, message: str) -> tuple[int, list[tuple[str, str]], bytes]:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
        f"<Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        "<RequestID>59dbff89-35bd-4eac-99ed-be587EXAMPLE</RequestID></Response>"
    ).encode()
    return status, [("Content-Type", "text/xml")], body


# Security groups per network interface: 5 by default, adjustable up to 16 (Amazon VPC
# quotas, "Security groups per network interface"); EFS answers SecurityGroupLimitExceeded
# (botocore efs ModifyMountTargetSecurityGroups errors). moto does not check.
GROUPS_PER_INTERFACE = 5


def _over_group_quota(body: bytes) -> tuple[int, list[tuple[str, str]], bytes] | None:
    groups = json.loads(body or b"{}").get("SecurityGroups") or []
    if len(groups) <= GROUPS_PER_INTERFACE:
        return None
    return _efs_error(
        400,
        "SecurityGroupLimitExceeded",
        f"The number of security groups exceeds the limit of {GROUPS_PER_INTERFACE}.",
    )


def _fault_answer(
    service: str, action: str, key_id: str, fault: str | None, taken: _Fault | None
) -> tuple[int, list[tuple[str, str]], bytes] | None:
    """The error answer of an injected fault, or None (no fault, or one after forwarding)."""
    if taken is not None and fault == "error":
        make = _ec2_error if service == "ec2" else _efs_error
        return make(taken.status, taken.code, taken.message)
    if fault == "deny" and taken is not None and taken.code:
        return _denied(service, action, taken.code, taken.message)
    if fault in ("throttle", "500", "deny", "bad-key", "dependency"):
        return _error(service, fault, action, key_id)
    return None


ENCODED_BLOB = "Ab3dEnCoDeDaUtHoRiZaTiOnFaIlUrE-0123456789_xyz"


def _denied(
    service: str, action: str, style: str, denied: str
) -> tuple[int, list[tuple[str, str]], bytes]:
    iam = denied or f"{'ec2' if service == 'ec2' else 'elasticfilesystem'}:{action}"
    named = (
        "User: arn:aws:iam::123456789012:user/ci is not authorized to perform: "
        f"{iam} on resource: arn:aws:{iam.split(':')[0]}:us-east-1:123456789012:* "
        f"because no identity-based policy allows the {iam} action"
    )
    if service == "ec2":
        message = {
            "named": f"You are not authorized to perform this operation. {named}",
            "opaque": "You are not authorized to perform this operation.",
            "encoded": "You are not authorized to perform this operation. Encoded "
            f"authorization failure message: {ENCODED_BLOB}",
        }[style]
        return _ec2_error(403, "UnauthorizedOperation", message)
    message = {
        "named": named,
        "opaque": "User is not authorized to perform that action on the specified resource",
        "encoded": named,
    }[style]
    return _efs_error(403, "AccessDeniedException", message)


def _error(
    service: str, fault: str, action: str, key_id: str
) -> tuple[int, list[tuple[str, str]], bytes]:
    iam = f"{'ec2' if service == 'ec2' else 'elasticfilesystem'}:{action}"
    denied = (
        "User: arn:aws:iam::123456789012:user/ci is not authorized to perform: "
        f"{iam} because no identity-based policy allows the {iam} action"
    )
    if service == "ec2":
        return {
            "throttle": lambda: _ec2_error(503, "RequestLimitExceeded", "Request limit exceeded."),
            "500": lambda: _ec2_error(500, "InternalError", "An internal error has occurred"),
            "deny": lambda: _ec2_error(403, "UnauthorizedOperation", denied),
            "dependency": lambda: _ec2_error(
                400, "DependencyViolation", "resource has a dependent object"
            ),
            "bad-key": lambda: _ec2_error(
                401,
                "AuthFailure",
                f"AWS was not able to validate the provided access credentials ({key_id})",
            ),
        }[fault]()
    return {
        "throttle": lambda: _efs_error(429, "ThrottlingException", "Rate exceeded"),
        "500": lambda: _efs_error(500, "InternalServerError", "Internal server error"),
        "deny": lambda: _efs_error(403, "AccessDeniedException", denied),
        "dependency": lambda: _efs_error(409, "FileSystemInUse", FS_IN_USE),
        "bad-key": lambda: _efs_error(
            403,
            "UnrecognizedClientException",
            f"The security token included in the request is invalid: {key_id}",
        ),
    }[fault]()


# -- moto server + fixtures ---------------------------------------------------------------
class LocalAws:
    """A moto server and the proxy in front of it, both on 127.0.0.1."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        # moto loads thousands of public AMIs into every region backend (seconds per test);
        # instances only need an image id, which moto does not validate by default.
        self._saved_amis_env = os.environ.get("MOTO_EC2_LOAD_DEFAULT_AMIS")
        os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._moto.start()
        host, port = self._moto.get_host_and_port()
        self.moto_url = f"http://{host}:{port}"
        self.proxy = AwsProxy((host, port))
        self.proxy.start()
        self._clients: dict[str, Any] = {}

    @property
    def url(self) -> str:
        """Endpoint for the code under test (through the proxy)."""
        return self.proxy.url

    def reset(self) -> None:
        """Empty moto's state and the proxy's."""
        req = urllib.request.Request(f"{self.moto_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 (loopback only)
            resp.read()
        self.proxy.reset()

    def stop(self) -> None:
        """Stop the proxy and moto."""
        self.proxy.stop()
        self._moto.stop()
        if self._saved_amis_env is None:
            os.environ.pop("MOTO_EC2_LOAD_DEFAULT_AMIS", None)
        else:
            os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = self._saved_amis_env

    def client(self, service: str, *, through_proxy: bool = False) -> Any:
        """A boto3 client straight to moto (for fixtures; not counted by the proxy).

        ``through_proxy``: through the proxy instead, to meet AWS's refusals that moto
        lacks (e.g. Juju deleting its groups at destroy-model).
        """
        import boto3

        key = f"{service}+proxy" if through_proxy else service
        if key not in self._clients:
            self._clients[key] = boto3.client(
                service,
                region_name=REGION,
                endpoint_url=self.proxy.url if through_proxy else self.moto_url,
                aws_access_key_id=ACCESS_KEY_ID,
                aws_secret_access_key=SECRET_ACCESS_KEY,
            )
        return self._clients[key]


@contextmanager
def local_aws() -> Iterator[LocalAws]:
    """Start moto and the proxy; stop both afterwards."""
    aws = LocalAws()
    try:
        yield aws
    finally:
        aws.stop()


@dataclasses.dataclass(frozen=True)
class Network:
    """A VPC with subnets per zone and the security group the cluster nodes use.

    ``node_sg`` is named as Juju names its model group, ``juju-<model uuid>``; every machine
    is in it, plus a group of its own, ``juju-<model uuid>-<machine id>`` (juju/juju
    provider/ec2/environ.go: jujuGroupName, machineGroupName, setUpGroups).
    """

    vpc_id: str
    subnets: dict[str, tuple[str, ...]]
    node_sg: str
    node_sg_name: str = ""

    def machine_group(self, ec2: Any, machine: int) -> str:
        """The group Juju makes for one machine (created on first use)."""
        name = f"{self.node_sg_name}-{machine}"
        found = ec2.describe_security_groups(
            Filters=[
                {"Name": "group-name", "Values": [name]},
                {"Name": "vpc-id", "Values": [self.vpc_id]},
            ]
        )["SecurityGroups"]
        if found:
            return found[0]["GroupId"]
        return ec2.create_security_group(
            GroupName=name, Description=f"juju machine {machine}", VpcId=self.vpc_id
        )["GroupId"]

    def run_machine(self, ec2: Any, subnet_id: str, machine: int) -> Instance:
        """Start one instance as Juju does: in the model group and its own machine group.

        Tagged as Juju tags instances (juju/juju provider/ec2 tests: `Name`,
        `juju-model-uuid`, `juju-controller-uuid` on every instance).
        """
        model_uuid = self.node_sg_name.removeprefix("juju-")
        tags = {"Name": f"juju-model-machine-{machine}", "juju-model-uuid": model_uuid}
        groups = [self.node_sg, self.machine_group(ec2, machine)]
        return run_nodes(ec2, subnet_id, groups, tags=tags)[0]


@dataclasses.dataclass(frozen=True)
class Instance:
    """An EC2 instance standing in for a Kubernetes node."""

    instance_id: str
    zone: str
    subnet_id: str
    private_dns: str
    private_ip: str

    @property
    def provider_id(self) -> str:
        """What a Kubernetes Node on AWS reports in spec.providerID."""
        return f"aws:///{self.zone}/{self.instance_id}"


def build_network(
    ec2: Any,
    subnets_per_zone: int = 2,
    zones: tuple[str, ...] = ZONES,
    *,
    dns_hostnames: bool = True,
    model_uuid: str | None = None,
) -> Network:
    """Create a VPC with ``subnets_per_zone`` subnets in each zone and a node group.

    A VPC made through the API has DNS resolution on and DNS hostnames off, in AWS as in
    moto; the default VPC Juju deploys into has both on (Amazon VPC User Guide, "DNS
    attributes for your VPC"). ``dns_hostnames`` (default on) gives the Juju case.
    """
    vpc_id = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    if dns_hostnames:
        ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})
    subnets: dict[str, tuple[str, ...]] = {}
    index = 0
    for zone in zones:
        ids = []
        for _ in range(subnets_per_zone):
            sub = ec2.create_subnet(
                VpcId=vpc_id, CidrBlock=f"10.20.{index}.0/24", AvailabilityZone=zone
            )
            ids.append(sub["Subnet"]["SubnetId"])
            index += 1
        subnets[zone] = tuple(ids)
    name = f"juju-{model_uuid or uuid.uuid4()}"
    node_sg = ec2.create_security_group(GroupName=name, Description="juju group", VpcId=vpc_id)[
        "GroupId"
    ]
    return Network(vpc_id, subnets, node_sg, name)


def run_nodes(
    ec2: Any,
    subnet_id: str,
    security_groups: list[str],
    count: int = 1,
    *,
    tags: dict[str, str] | None = None,
) -> list[Instance]:
    """Start ``count`` instances in one subnet with the given security groups and tags."""
    extra: dict[str, Any] = {}
    if tags:
        extra["TagSpecifications"] = [
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ]
    resp = ec2.run_instances(
        ImageId=IMAGE_ID,
        MinCount=count,
        MaxCount=count,
        InstanceType="g5.xlarge",
        SubnetId=subnet_id,
        SecurityGroupIds=security_groups,
        **extra,
    )
    return [
        Instance(
            instance_id=i["InstanceId"],
            zone=i["Placement"]["AvailabilityZone"],
            subnet_id=i["SubnetId"],
            private_dns=i["PrivateDnsName"],
            private_ip=i["PrivateIpAddress"],
        )
        for i in resp["Instances"]
    ]


def juju_hostname(model_uuid: str, machine: int) -> str:
    """The hostname Juju gives a machine: ``juju-`` + the model uuid's last 6 hex + ``-<id>``."""
    return f"juju-{model_uuid.replace('-', '')[-6:]}-{machine}"


def node_object(
    inst: Instance, machine: int, model_uuid: str, provider_id: bool = False
) -> tuple[str, dict[str, Any]]:
    """A Kubernetes ``v1/Node`` for ``inst`` as the API server lists it: (name, object).

    kubeadm-shaped by default, as every node of this bundle is: kubelet runs without a
    cloud provider, so ``spec.providerID`` stays empty, the name is the machine's hostname
    (charms.gpu_k8s.v0.kubeadm.node_name) and ``status.addresses`` holds the InternalIP
    and Hostname kubelet found. ``provider_id=True`` is the shape under the AWS cloud
    provider: the private DNS name and ``aws:///<zone>/<instance id>``.
    """
    if provider_id:
        name = inst.private_dns
        spec: dict[str, Any] = {"providerID": inst.provider_id}
    else:
        name, spec = juju_hostname(model_uuid, machine), {}
    addresses = [
        {"type": "InternalIP", "address": inst.private_ip},
        {"type": "Hostname", "address": name},
    ]
    return name, {"spec": spec, "status": {"addresses": addresses}}
