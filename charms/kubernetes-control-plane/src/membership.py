# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Control-plane membership: the cluster's join material and who keeps it fresh.

The leader bootstraps the cluster and keeps what joining units need: a bootstrap token
and the certificate key in an application secret, the uploaded control-plane
certificates (kubeadm deletes them after two hours) and their times in the peer
application databag. A leader that has not joined itself cannot do that, so the joined
unit with the lowest number steps in, writing to its own unit databag and a unit
secret. After a unit leaves, the leader removes the etcd member it left behind.

An ops component: it reads and writes the peer relation (through `peers.Peers`) and
secrets, and takes what it uses (the model for secrets, the peer relation to grant a
secret to, this unit's `context.UnitContext`, a clock), never the charm. What it runs on
the machine is in `bootstrap.py` and `etcd.py`.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
from collections.abc import Callable, Mapping

import bootstrap
import etcd
import ops
from charm_config import Config
from context import UnitContext
from literals import (
    CERTS_REUPLOAD_AFTER_SECONDS,
    CERTS_VALID_SECONDS,
    MEMBER_REUPLOAD_AFTER_SECONDS,
    MEMBER_TOKEN_LABEL,
    MEMBER_TOKEN_MARGIN_MINUTES,
    PEER_SECRET_LABEL,
    TOKEN_ROTATION_MARGIN_HOURS,
)
from peers import (
    CA_CERT_HASH,
    CERTS_UPLOADED_AT,
    CLUSTER_VERSION,
    ENDPOINT,
    JOIN_SECRET_ID,
    JOIN_TOKEN_SECRET_ID,
    POD_CIDR,
    SERVICE_CIDR,
    TOKEN_EXPIRES,
    Peers,
    parse_time,
)

from charms.gpu_k8s.v0 import api_proxy, kubeadm
from charms.gpu_k8s.v0.databag import write
from charms.gpu_k8s.v0.kube_objects import node_ready
from charms.gpu_k8s.v0.kubeclient import Kube
from charms.gpu_k8s.v0.status import StatusError, on_error

logger = logging.getLogger(__name__)

# The leader's record of etcd membership in the peer application databag (`prune_etcd`).
CONTROL_PLANE_NODES_KEY = "control-plane-nodes"
ETCD_PROBLEMS_KEY = "etcd-problems"  # {node name: what could not be done}
# [node name, ...] of those problems only the operator can fix (Blocked; the others
# wait). A key of its own, so that a unit of an older revision still reads the problems.
ETCD_BLOCKED_KEY = "etcd-blocked"
# [node name, ...] of departed control-plane units whose Node is still to be deleted
DEPARTED_NODES_KEY = "control-plane-departed"

# A kubeadm step that failed is tried again on the next event.
_RETRY = "{error}; retrying on the next event"


def _kubeadm_retried() -> contextlib.AbstractContextManager[None]:
    """A failed kubeadm step (`bootstrap.BootstrapError`) waits for the next event."""
    return on_error(ops.WaitingStatus, bootstrap.BootstrapError, message=_RETRY)


def etcd_problems(bag: Mapping[str, str]) -> list[etcd.Problem]:
    """What the last pruning of etcd members could not do, for every unit's status."""
    problems: dict[str, str] = json.loads(bag.get(ETCD_PROBLEMS_KEY, "{}"))
    blocked = set(json.loads(bag.get(ETCD_BLOCKED_KEY, "[]")))
    found = {etcd.Problem(text, name in blocked) for name, text in problems.items()}
    return sorted(found, key=lambda p: p.message)


class Membership:
    """The join material of the control plane, kept by the leader or a joined member.

    `model`: where secrets are found and added; `relation`: the peer relation, to which a
    member's token is granted; `ctx`: this unit; `clock`: now, in UTC; `etcd_url`: this
    machine's etcd.
    """

    def __init__(
        self,
        model: ops.Model,
        relation: ops.Relation,
        ctx: UnitContext,
        *,
        clock: Callable[[], datetime.datetime],
        etcd_url: str,
    ):
        self._model = model
        self._relation = relation
        self._ctx = ctx
        self._clock = clock
        self._etcd_url = etcd_url

    def bootstrap(self, config: Config, peers: Peers) -> None:
        """Run `kubeadm init` on this (leader) unit and record the join material."""
        address = self._ctx.address
        public = self._ctx.public_address
        spec = bootstrap.InitSpec(
            node_name=self._ctx.node_name,
            advertise_address=address,
            control_plane_endpoint=api_proxy.ENDPOINT,
            kubernetes_version="v" + kubeadm.RELEASES[config.kubernetes_version].version,
            pod_cidr=config.pod_cidr,
            service_cidr=config.service_cidr,
            # this node's public address too: its first certificate needs no renewal
            cert_sans=tuple(sorted({*config.extra_sans, *filter(None, [public])})),
            image_registry=config.image_registry,
        )
        token = bootstrap.generate_token()
        key = bootstrap.generate_certificate_key()
        text = bootstrap.render_init_config(
            spec, token=token, ttl_hours=config.join_token_ttl, certificate_key=key
        )
        logger.info("bootstrapping the cluster with kubeadm init")
        with _kubeadm_retried():
            bootstrap.init(self._ctx.host, text)
        self._record_cluster(config, peers, token, key)
        logger.info("bootstrapped Kubernetes %s at %s", spec.kubernetes_version, address)

    def recover(self, config: Config, peers: Peers) -> None:
        """Make new join material when kubeadm init ran but its material was never recorded."""
        key = bootstrap.generate_certificate_key()
        with _kubeadm_retried():
            token = bootstrap.create_token(self._ctx.host, config.join_token_ttl)
            bootstrap.upload_certs(self._ctx.host, key)
        self._record_cluster(config, peers, token, key)
        logger.info("recorded new join material for the running cluster")

    def _record_cluster(self, config: Config, peers: Peers, token: str, key: str) -> None:
        now = self._clock()
        secret = self._store_join_secret({"token": token, "certificate-key": key})
        ca = bootstrap.read_ca(self._ctx.host) or ""
        peers.app.update(
            {
                ENDPOINT: api_proxy.ENDPOINT,
                CA_CERT_HASH: kubeadm.ca_cert_hash(ca),
                JOIN_SECRET_ID: secret.id or secret.get_info().id,
                CLUSTER_VERSION: config.kubernetes_version,
                POD_CIDR: config.pod_cidr,
                SERVICE_CIDR: config.service_cidr,
                TOKEN_EXPIRES: bootstrap.token_expiry(now, config.join_token_ttl).isoformat(),
                CERTS_UPLOADED_AT: now.isoformat(),
            }
        )

    def _store_join_secret(self, content: dict[str, str]) -> ops.Secret:
        try:
            secret = self._model.get_secret(label=PEER_SECRET_LABEL)
            secret.set_content(content)
            return secret
        except ops.SecretNotFoundError:
            return self._model.app.add_secret(
                content, label=PEER_SECRET_LABEL, description="control-plane join material"
            )

    def join_secret(self) -> ops.Secret:
        """The application secret with the bootstrap token and the certificate key."""
        try:
            return self._model.get_secret(label=PEER_SECRET_LABEL)
        except ops.SecretNotFoundError:
            raise StatusError.blocked(
                "control-plane join secret is missing; remove this unit and add a new one"
            ) from None

    def rotate_token_if_due(
        self, config: Config, peers: Peers, secret: ops.Secret, content: dict, *, now: bool = False
    ) -> str:
        """Mint a new bootstrap token an hour before the current one expires; the valid one.

        `now`: rotate at once (the token was given to workers by an earlier revision).
        """
        expires = parse_time(peers.app.get(TOKEN_EXPIRES))
        margin = datetime.timedelta(hours=TOKEN_ROTATION_MARGIN_HOURS)
        due, clock = now, self._clock()
        if not due and expires is not None and clock < expires - margin:
            return content["token"]
        old = content["token"]
        with _kubeadm_retried():
            new = bootstrap.create_token(self._ctx.host, config.join_token_ttl)
        secret.set_content({**content, "token": new})
        peers.app[TOKEN_EXPIRES] = bootstrap.token_expiry(clock, config.join_token_ttl).isoformat()
        try:
            bootstrap.delete_token(self._ctx.host, old)
        except bootstrap.BootstrapError:
            logger.warning("could not delete the previous bootstrap token; it expires by itself")
        logger.info("rotated the bootstrap token (valid %d h)", config.join_token_ttl)
        return new

    def reupload_certs_if_needed(self, peers: Peers, key: str) -> None:
        """Upload the certificates again for units waiting to join (after an hour)."""
        waiting = peers.waiting()
        if not waiting:
            return
        uploaded = parse_time(peers.app.get(CERTS_UPLOADED_AT))
        now = self._clock()
        if uploaded and (now - uploaded).total_seconds() < CERTS_REUPLOAD_AFTER_SECONDS:
            return
        with _kubeadm_retried():
            bootstrap.upload_certs(self._ctx.host, key)
        peers.app[CERTS_UPLOADED_AT] = now.isoformat()
        logger.info("re-uploaded control-plane certificates for %d joining units", len(waiting))

    def join_material(self, peers: Peers) -> kubeadm.JoinMaterial:
        """The endpoint, CA pin, token and certificate key a joining control plane needs."""
        bag = peers.app
        if not peers.join_secret_id or not peers.endpoint:
            raise StatusError.waiting("waiting for the leader to bootstrap the cluster")
        uploaded = peers.newest(CERTS_UPLOADED_AT)
        fresh = datetime.timedelta(seconds=CERTS_VALID_SECONDS - 600)
        if uploaded is None or self._clock() - uploaded[0] > fresh:
            peers.ask_for_certificates()
            raise StatusError.waiting(
                "waiting for a joined unit to re-upload control-plane certificates"
            )
        try:
            secret = self._model.get_secret(id=bag[JOIN_SECRET_ID])
            content = secret.get_content(refresh=True)
            material = kubeadm.JoinMaterial(
                endpoint=bag[ENDPOINT],
                ca_cert_hash=bag.get(CA_CERT_HASH, ""),
                token=self._join_token(peers, content.get("token", "")),
                certificate_key=content.get("certificate-key", ""),
            )
        except (ops.SecretNotFoundError, ops.ModelError):
            raise StatusError.waiting("waiting for access to the join secret") from None
        except ValueError as e:
            raise StatusError.waiting(f"join material from the leader: {e}") from None
        return material

    def _join_token(self, peers: Peers, leader_token: str) -> str:
        """The leader's bootstrap token while it is valid, else the newest a member minted."""
        newest = peers.newest(TOKEN_EXPIRES)
        if newest is None or newest[1] is None:
            return leader_token
        secret_id = peers.data_of(newest[1]).get(JOIN_TOKEN_SECRET_ID, "")
        return self._model.get_secret(id=secret_id).get_content(refresh=True).get("token", "")

    def help_joining_units(self, config: Config, peers: Peers) -> None:
        """Re-upload certificates and mint a token for joining units the leader lets down.

        Only the leader uploads certificates and rotates the token, and only once it has
        joined itself. A leader that has not (leadership moved to a unit still joining)
        would wait for itself for ever, so the joined unit with the lowest number steps in
        when units wait and the leader let the upload or the token lapse. What it does
        goes to its own unit databag: the upload time, and the ID of a unit secret holding
        the token, granted to the peers.
        """
        number = int(self._ctx.unit.rsplit("/", 1)[1])
        lower = [m for m in peers.joined() if m.number < number]
        if not peers.waiting() or lower:
            return
        now = self._clock()
        mine = peers.mine
        uploaded = peers.newest(CERTS_UPLOADED_AT)
        with _kubeadm_retried():
            if (
                uploaded is None
                or (now - uploaded[0]).total_seconds() >= MEMBER_REUPLOAD_AFTER_SECONDS
            ):
                key = self.join_secret().get_content(refresh=True)["certificate-key"]
                bootstrap.upload_certs(self._ctx.host, key)
                mine[CERTS_UPLOADED_AT] = now.isoformat()
                logger.info("re-uploaded control-plane certificates in the leader's stead")
            expires = peers.newest(TOKEN_EXPIRES)
            margin = datetime.timedelta(minutes=MEMBER_TOKEN_MARGIN_MINUTES)
            if expires is None or now >= expires[0] - margin:
                token = bootstrap.create_token(self._ctx.host, config.join_token_ttl)
                secret = self._store_member_token(token)
                mine[JOIN_TOKEN_SECRET_ID] = secret.id or secret.get_info().id
                mine[TOKEN_EXPIRES] = bootstrap.token_expiry(
                    now, config.join_token_ttl
                ).isoformat()
                logger.info("minted a bootstrap token for joining units in the leader's stead")

    def _store_member_token(self, token: str) -> ops.Secret:
        content = {"token": token}
        try:
            secret = self._model.get_secret(label=MEMBER_TOKEN_LABEL)
            secret.set_content(content)
        except ops.SecretNotFoundError:
            secret = self._model.unit.add_secret(
                content, label=MEMBER_TOKEN_LABEL, description="bootstrap token for joining peers"
            )
        secret.grant(self._relation)
        return secret

    def remove_departed_nodes(self, peers: Peers, kube: Callable[[], Kube]) -> None:
        """Delete the Nodes departed control-plane units left, once they are NotReady.

        A leaving unit deletes its own Node after its `kubeadm reset`; when that request
        fails it cannot try again (the reset took its admin.conf), so the leader does.
        Only a NotReady Node: a Ready one may still be draining under its unit (Node
        deletion evicts nothing, the pod GC just deletes its pods); kubelet stops with
        the reset, and the node lifecycle controller marks the Node NotReady after its
        grace period. Before `prune_etcd` records the departure: this reads the nodes it
        knew. No API request unless a unit departed.
        """
        bag = peers.app
        current = peers.control_plane_nodes(self._ctx.own_node())
        known = set(json.loads(bag.get(CONTROL_PLANE_NODES_KEY, "[]")))
        pending = set(json.loads(bag.get(DEPARTED_NODES_KEY, "[]")))
        todo = ((known - current) | pending) - current
        if not todo:
            return
        client, left = kube(), set()
        for name in sorted(todo):
            node = client.get("v1", "Node", name)
            if node is None:
                continue
            if node_ready(node):
                left.add(name)
                continue
            client.delete("v1", "Node", name)
            logger.info("deleted Node %s of a departed control-plane unit", name)
        values = {DEPARTED_NODES_KEY: json.dumps(sorted(left))} if left else {}
        write(bag, values, remove=[DEPARTED_NODES_KEY])

    def prune_etcd(self, peers: Peers, *, check: bool) -> None:
        """Remove the etcd members that departed control-plane units left behind.

        `kubeadm reset` on a leaving unit removes its member, or only warns when it cannot.
        The leader remembers the joined control-plane nodes (`control-plane-nodes`); one
        that is no longer among them departed, and a member by its name is removed here.
        Members of no unit at all are reported, never removed: a unit joining right now
        has its member before its databag says so. What could not be done is kept in
        `etcd-problems` for every unit's status and retried on later events. `check`:
        ask etcd even when no node departed (update-status).

        The leaving unit owns its member until it is done (review deploy.md N14): it
        drains through its own HAProxy, whose backends include its own API server, and
        its `kubeadm reset` removes the member. Removed any earlier, its etcd would stop
        under the drain (a removed member stops itself) and the drain's requests fail
        until HAProxy's health check drops that server. So a departed node whose Node is
        still Ready (`control-plane-departed`, kept by `remove_departed_nodes`, which runs
        first) stays among the known nodes, neither pruned nor reported; the leader
        removes its member once the Node is gone or NotReady (kubelet stops with the
        reset).
        """
        bag = peers.app
        current = peers.control_plane_nodes(self._ctx.own_node())
        known = set(json.loads(bag.get(CONTROL_PLANE_NODES_KEY, "[]")))
        leaving = set(json.loads(bag.get(DEPARTED_NODES_KEY, "[]"))) - current
        listed: dict[str, str] = json.loads(bag.get(ETCD_PROBLEMS_KEY, "{}"))
        gone = ((known - current) | {n for n in listed if n not in current}) - leaving
        values = {CONTROL_PLANE_NODES_KEY: json.dumps(sorted(current | leaving))}
        if gone or check:
            problems = self._check_etcd(current | leaving, gone)
            if problems:
                texts = {name: p.message for name, p in problems.items()}
                values[ETCD_PROBLEMS_KEY] = json.dumps(texts, sort_keys=True)
            blocked = sorted(name for name, p in problems.items() if p.operator)
            if blocked:
                values[ETCD_BLOCKED_KEY] = json.dumps(blocked)
            remove = [k for k in (ETCD_PROBLEMS_KEY, ETCD_BLOCKED_KEY) if k not in values]
            write(bag, values, remove=remove)
        else:
            write(bag, values)

    def _check_etcd(self, current: set[str], gone: set[str]) -> dict[str, etcd.Problem]:
        """{node name: problem} after removing the members of `gone` nodes."""
        return etcd.prune(etcd.Etcd(self._ctx.host, self._etcd_url), current, gone)
