# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The cluster's etcd members, read and pruned through this node's etcd (no ops).

kubeadm runs etcd as a static pod on every control-plane node ("stacked" etcd), each
member named after its node. `kubeadm reset` on a leaving node removes its member, but
when it cannot (etcd unreachable, the cluster's configuration unreadable) it only logs a
warning and exits 0 (cmd/kubeadm/app/cmd/phases/reset/removeetcdmember.go), which leaves
a dead voter behind: one more lost node and etcd has no quorum. The surviving control
plane therefore checks the membership itself and removes what departed units left.

etcd serves its v3 API as JSON through the gRPC gateway on its client port (etcd-io/etcd
api/etcdserverpb/rpc.proto: `POST /v3/cluster/member/list`, `/v3/cluster/member/remove`;
uint64 IDs are JSON strings, zero values are left out). kubeadm's etcd requires a client
certificate signed by the etcd CA; the one kubeadm itself uses to add and remove members
is used here (cmd/kubeadm/app/util/etcd/etcd.go NewFromCluster: etcd/healthcheck-client).
A member that was added but has not started yet has no name.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

from charms.gpu_k8s.v0.system import Host

logger = logging.getLogger(__name__)

URL = "https://127.0.0.1:2379"
# kubeadm runs the stacked etcd with --listen-metrics-urls=http://127.0.0.1:2381: plain
# HTTP on loopback, no client certificate (kubernetes cmd/kubeadm/app/constants
# EtcdMetricsPort, phases/etcd/local.go), which the machine's COS agent scrapes.
METRICS_PORT = 2381
CA_CERT = "/etc/kubernetes/pki/etcd/ca.crt"
CLIENT_CERT = "/etc/kubernetes/pki/etcd/healthcheck-client.crt"
CLIENT_KEY = "/etc/kubernetes/pki/etcd/healthcheck-client.key"
TIMEOUT = 10.0
# How long etcd may take to commit a membership change. A member with no quorum of voters
# up has no leader and takes no proposal; the gateway gives a request no deadline of its
# own (grpc-gateway v1 runtime DefaultContextTimeout 0), so without one the request waits
# until the client hangs up. Its `Grpc-Timeout` header sets the gRPC deadline (runtime
# AnnotateContext, gRPC's timeout format: an integer and a unit, S for seconds), after
# which etcd answers DeadlineExceeded, HTTP 504 (checked against a real 3-member etcd
# 3.5.1 in tests/functional/test_fake_etcd.py). The same as etcd's own request timeout
# (etcdserver ReqTimeout: 5 s plus two election timeouts) and within TIMEOUT.
DEADLINE = 5


class EtcdError(Exception):
    """etcd refused or could not be reached; the message says what it answered."""


@dataclasses.dataclass(frozen=True)
class Member:
    """One etcd member: its ID (decimal string), name (the node name) and role."""

    id: str
    name: str
    learner: bool = False


class Etcd:
    """This node's etcd, spoken to over mutual TLS with kubeadm's certificates."""

    def __init__(self, host: Host, url: str = URL):
        self.host = host
        self.url = url

    def _context(self) -> ssl.SSLContext:
        import ssl  # only the leader talks to etcd, rarely: no import cost for other hooks

        context = ssl.create_default_context(cafile=str(self.host.path(CA_CERT)))
        context.load_cert_chain(self.host.path(CLIENT_CERT), self.host.path(CLIENT_KEY))
        return context

    def _post(self, path: str, body: dict) -> dict:
        import http.client
        import ssl
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        try:
            conn = http.client.HTTPSConnection(
                parts.hostname or "127.0.0.1",
                parts.port or 2379,
                context=self._context(),
                timeout=TIMEOUT,
            )
            try:
                headers = {"Content-Type": "application/json", "Grpc-Timeout": f"{DEADLINE}S"}
                conn.request("POST", path, json.dumps(body), headers)
                response = conn.getresponse()
                data = response.read()
            finally:
                conn.close()
        except (OSError, ssl.SSLError) as e:
            raise EtcdError(f"cannot reach etcd at {self.url}: {e}") from None
        try:
            answer = json.loads(data or b"{}")
        except ValueError:
            raise EtcdError(f"etcd answered {response.status} with no JSON") from None
        if response.status != 200:
            message = answer.get("message") or answer.get("error") or str(response.status)
            # nothing committed within DEADLINE: the gateway's DeadlineExceeded (504) or
            # etcd's own Unknown (500), whichever comes first, both with this message
            if message == "context deadline exceeded":
                message = (
                    f"no answer within {DEADLINE} s ({message}): etcd may have fewer than "
                    "a quorum of its members up"
                )
            raise EtcdError(message)
        return answer

    def members(self) -> list[Member]:
        """Every member of the cluster, as this node's etcd sees it.

        Raises:
            EtcdError: etcd could not be reached or refused.
        """
        answer = self._post("/v3/cluster/member/list", {})
        return [
            Member(str(m["ID"]), m.get("name", ""), bool(m.get("isLearner", False)))
            for m in answer.get("members", [])
        ]

    def remove(self, member: Member) -> None:
        """Remove `member` from the cluster.

        Raises:
            EtcdError: etcd refused (for example when that would cost its quorum).
        """
        self._post("/v3/cluster/member/remove", {"ID": member.id})


@dataclasses.dataclass(frozen=True)
class Problem:
    """What pruning could not do; `operator`: only the operator can fix it (else retried).

    Either way a voter that is gone still counts towards etcd's quorum (raft: a majority
    of the voting members), so one more lost member stops the cluster: no control-plane
    unit reports Active while there is one (review deploy.md N15).
    """

    message: str
    operator: bool = False


def prune(client: Etcd, current: set[str], gone: set[str]) -> dict[str, Problem]:
    """Remove the members of departed nodes (`gone`); {node name: problem} for the rest.

    `current` are the node names of the joined control-plane units. A started voting
    member of no unit is reported, never removed: it may be a unit joining right now, or
    a machine the operator must name as gone.
    """
    try:
        members = client.members()
    except EtcdError as e:
        return dict.fromkeys(gone, Problem(f"etcd members of departed units not checked: {e}"))
    problems = {}
    for member in members:
        if member.name in gone:
            try:
                client.remove(member)
                logger.info("removed etcd member %s of a departed unit", member.name)
            except EtcdError as e:
                problems[member.name] = Problem(
                    f"etcd member {member.name} of a departed unit is still there: {e}; retrying"
                )
        elif member.name and member.name not in current and not member.learner:
            problems[member.name] = Problem(
                f"etcd member {member.name} belongs to no unit: if its machine is gone, "
                f"remove it with `etcdctl member remove {int(member.id):x}`",
                operator=True,
            )
    return problems
