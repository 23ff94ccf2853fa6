# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The peer relation as one hook reads it: the cluster's record and the control-plane units.

No ops imports. `charm.py` builds a `Peers` once per hook from the relation's data (the
application databag, this unit's databag and the other units' databags, as mappings), and
hands it to the parts of the reconcile that read or write it.

Two kinds of data live there:
- the cluster's record in the application databag, which the leader writes when it
  bootstraps the cluster (`membership.py`) and keeps (`cluster-version`, the upgrade turn,
  the containerd/runc update turn); other keys of that databag belong to the module that
  writes them (the add-ons in `addons.py`, the grants in `access.py`, etcd's members in
  `membership.py`, the workers in `registry.py` and `fleet.py`, node readiness in
  `cluster_info.py`);
- each control-plane unit's own databag: whether it joined, its node name, its API server
  and its Kubernetes minor, the containerd/runc updates it waits to install, and what it
  made while standing in for the leader (the time it uploaded the certificates, a
  bootstrap token in a unit secret).

What the charm asks of the other units (their API servers, their node names, their minors)
is answered here as functions of that data and of this unit's own values, which the caller
passes in: they change within a hook (a unit that bootstraps or joins starts serving).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping, MutableMapping

from charms.gpu_k8s.v0.databag import write

# The cluster's record in the application databag.
ENDPOINT = "endpoint"  # the controlPlaneEndpoint: every node's API proxy
CA_CERT_HASH = "ca-cert-hash"
JOIN_SECRET_ID = "join-secret-id"  # the application secret with the token and certificate key
CLUSTER_VERSION = "cluster-version"  # the minor the control plane runs (or moves to)
POD_CIDR = "pod-cidr"
SERVICE_CIDR = "service-cidr"
UPGRADE_TURN = "upgrade-turn"  # the control-plane unit that may upgrade now (rolling.py)
# The control-plane unit that may drain its node to install containerd/runc updates now
# (runtime_turns.py, the rolling.py pattern).
RUNTIME_TURN = "runtime-turn"
# The control-plane unit that may renew its certificates now (renewal.py).
RENEWAL_TURN = "certificate-renewal-turn"
# The turns that restart a control-plane node's static pods or containerd, and what each
# is for. At most one of them is out at a time: each takes one etcd member down for a
# while, and etcd keeps its quorum with one of three members down, not two (etcd.io
# docs, FAQ "What is failure tolerance?": 3 members, majority 2, failure tolerance 1).
# `rolling.pass_turn(..., exclusive=NODE_TURNS)` is the one rule.
NODE_TURNS = {
    UPGRADE_TURN: "Kubernetes upgrade",
    RENEWAL_TURN: "certificate renewal",
    RUNTIME_TURN: "containerd/runc update",
}
CLUSTER_RELEASE = "cluster-release"  # the full version the control plane runs ("1.36.5")
IMAGE_REGISTRY = "image-registry"  # the registry kubeadm-config names (JSON), once synced
# In the application databag (the leader's) and in a unit's (one standing in for it).
TOKEN_EXPIRES = "token-expires"
# When the workers' bootstrap token expires; absent while none exists (the leader's only).
WORKER_TOKEN_EXPIRES = "worker-token-expires"
CERTS_UPLOADED_AT = "certs-uploaded-at"

# Each control-plane unit's databag.
JOINED = "joined"  # "true" once it is a member; "false" asks for a re-upload of certificates
NODE_NAME = "node-name"
API_SERVER = "api-server"
KUBERNETES_VERSION = "kubernetes-version"
KUBERNETES_RELEASE = "kubernetes-release"  # the full version its control plane runs
JOIN_TOKEN_SECRET_ID = "join-token-secret-id"  # a unit secret with a token it minted
# {package: version} of containerd/runc updates its node waits to install (JSON); empty
# when none (runtime_turns.py).
RUNTIME_PENDING = "runtime-updates"


def parse_time(text: str | None) -> datetime.datetime | None:
    """An ISO timestamp from a databag, or None when missing or malformed."""
    try:
        return datetime.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class Member:
    """Another control-plane unit, as its peer databag describes it."""

    name: str
    data: Mapping[str, str]

    @property
    def joined(self) -> bool:
        """Whether it says it is a control-plane member."""
        return self.data.get(JOINED) == "true"

    @property
    def number(self) -> int:
        """Its unit number."""
        return int(self.name.rsplit("/", 1)[1])


class Peers:
    """The peer relation's data in one hook, seen from this unit.

    `app`: the application databag (writable by the leader); `me`: this unit's name;
    `mine`: this unit's databag; `others`: the other units' databags by unit name.
    """

    def __init__(
        self,
        app: MutableMapping[str, str],
        me: str,
        mine: MutableMapping[str, str],
        others: Mapping[str, Mapping[str, str]],
    ):
        self.app = app
        self.me = me
        self.mine = mine
        self.members = [Member(name, data) for name, data in others.items()]

    # -- the cluster's record -------------------------------------------------------------

    @property
    def cluster_version(self) -> str | None:
        """The minor the cluster runs, once a leader bootstrapped it."""
        return self.app.get(CLUSTER_VERSION) or None

    @property
    def endpoint(self) -> str | None:
        """The control-plane endpoint (host:port) joining nodes reach the API through."""
        return self.app.get(ENDPOINT) or None

    @property
    def join_secret_id(self) -> str | None:
        """The ID of the application secret with the join material, once recorded."""
        return self.app.get(JOIN_SECRET_ID) or None

    # -- the other units ------------------------------------------------------------------

    def joined(self) -> list[Member]:
        """The other units that joined the control plane."""
        return [m for m in self.members if m.joined]

    def waiting(self) -> list[Member]:
        """The other units that have not joined yet."""
        return [m for m in self.members if not m.joined]

    def member(self, name: str) -> Member | None:
        """Another unit by name."""
        return next((m for m in self.members if m.name == name), None)

    def api_servers(self, mine: str | None) -> list[str]:
        """API servers (host:port) of the joined units, and `mine` when this unit serves one."""
        servers = {m.data.get(API_SERVER, "") for m in self.joined()}
        if mine:
            servers.add(mine)
        return sorted(s for s in servers if s)

    def control_plane_nodes(self, mine: str | None) -> set[str]:
        """Node names of the joined units, and `mine` once this unit joined."""
        names = {m.data[NODE_NAME] for m in self.joined() if m.data.get(NODE_NAME)}
        if mine:
            names.add(mine)
        return names

    def member_versions(self, mine: str | None, unknown: str | None) -> dict[str, str | None]:
        """The minor of each joined unit, this one's being `mine`.

        A joined unit that did not publish its minor counts as `unknown`.
        """
        versions = {m.name: m.data.get(KUBERNETES_VERSION, unknown) for m in self.joined()}
        versions[self.me] = mine
        return versions

    def member_releases(
        self, mine: str | None, unknown: str, of_minor: Callable[[str], str]
    ) -> dict[str, str | None]:
        """The full version ("1.36.5") of each joined unit, this one's being `mine`.

        A joined unit of an earlier charm revision publishes its minor only: it counts as
        `of_minor(minor)` until its upgrade-charm hook publishes its version; one that
        publishes neither counts as `unknown`.
        """
        versions: dict[str, str | None] = {}
        for m in self.joined():
            minor = m.data.get(KUBERNETES_VERSION)
            fallback = of_minor(minor) if minor else unknown
            versions[m.name] = m.data.get(KUBERNETES_RELEASE) or fallback
        versions[self.me] = mine
        return versions

    def newest(self, key: str) -> tuple[datetime.datetime, str | None] | None:
        """The latest time under `key`: in the application databag (None) or a unit's (name)."""
        found: list[tuple[datetime.datetime | None, str | None]] = [
            (parse_time(self.app.get(key)), None),
            (parse_time(self.mine.get(key)), self.me),
        ]
        found += [(parse_time(m.data.get(key)), m.name) for m in self.members]
        known = [(when, unit) for when, unit in found if when is not None]
        return max(known, key=lambda item: item[0]) if known else None

    def data_of(self, name: str) -> Mapping[str, str]:
        """The databag of unit `name` (this one's included)."""
        if name == self.me:
            return self.mine
        member = self.member(name)
        return member.data if member is not None else {}

    # -- this unit ------------------------------------------------------------------------

    def mark_member(
        self, node_name: str, api_server: str, minor: str | None, release: str | None = None
    ) -> None:
        """Say that this unit joined: its node name, its API server, its minor and version."""
        mine = {JOINED: "true", NODE_NAME: node_name, API_SERVER: api_server}
        if minor:
            mine[KUBERNETES_VERSION] = minor
        if release:
            mine[KUBERNETES_RELEASE] = release
        write(self.mine, mine)

    def ask_for_certificates(self) -> None:
        """Say that this unit waits to join, which asks for a re-upload of certificates."""
        if self.mine.get(JOINED) != "false":
            self.mine[JOINED] = "false"
