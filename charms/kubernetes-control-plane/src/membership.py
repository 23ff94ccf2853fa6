# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Control-plane membership: the cluster's join material and who keeps it fresh.

The leader bootstraps the cluster and keeps what joining units need: a bootstrap token
and the certificate key in an application secret, the uploaded control-plane
certificates (kubeadm deletes them after two hours) and their times in the peer
application databag. A leader that has not joined itself cannot do that, so the joined
unit with the lowest number steps in, writing to its own unit databag and a unit
secret. After a unit leaves, the leader removes the etcd member it left behind.

This part of the charm reads and writes the peer relation and secrets, so it is ops
code; what it runs on the machine is in `bootstrap.py` and `etcd.py`.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
from typing import TYPE_CHECKING

import bootstrap
import etcd
import ops
from literals import (
    CERTS_REUPLOAD_AFTER_SECONDS,
    CERTS_VALID_SECONDS,
    MEMBER_REUPLOAD_AFTER_SECONDS,
    MEMBER_TOKEN_LABEL,
    MEMBER_TOKEN_MARGIN_MINUTES,
    PEER_SECRET_LABEL,
    TOKEN_ROTATION_MARGIN_HOURS,
)
from settings import Config

from charms.gpu_k8s.v0 import api_proxy, kubeadm
from charms.gpu_k8s.v0.databag import write
from charms.gpu_k8s.v0.status import StatusError, on_error

if TYPE_CHECKING:
    from charm import KubernetesControlPlaneCharm

logger = logging.getLogger(__name__)

# A kubeadm step that failed is tried again on the next event.
_RETRY = "{error}; retrying on the next event"


def parse_time(text: str | None) -> datetime.datetime | None:
    """An ISO timestamp from a databag, or None when missing or malformed."""
    try:
        return datetime.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def _kubeadm_retried() -> contextlib.AbstractContextManager[None]:
    """A failed kubeadm step (`bootstrap.BootstrapError`) waits for the next event."""
    return on_error(ops.WaitingStatus, bootstrap.BootstrapError, message=_RETRY)


class Membership:
    """The join material of the control plane, kept by the leader or a joined member."""

    def __init__(self, charm: KubernetesControlPlaneCharm):
        self.charm = charm

    def bootstrap(self, config: Config, peers: ops.Relation) -> None:
        """Run `kubeadm init` on this (leader) unit and record the join material."""
        address = self.charm._address()
        public = self.charm.public_address()
        spec = bootstrap.InitSpec(
            node_name=kubeadm.node_name(self.charm.host),
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
            bootstrap.init(self.charm.host, text)
        self._record_cluster(config, peers, token, key)
        logger.info("bootstrapped Kubernetes %s at %s", spec.kubernetes_version, address)

    def recover(self, config: Config, peers: ops.Relation) -> None:
        """Make new join material when kubeadm init ran but its material was never recorded."""
        key = bootstrap.generate_certificate_key()
        with _kubeadm_retried():
            token = bootstrap.create_token(self.charm.host, config.join_token_ttl)
            bootstrap.upload_certs(self.charm.host, key)
        self._record_cluster(config, peers, token, key)
        logger.info("recorded new join material for the running cluster")

    def _record_cluster(self, config: Config, peers: ops.Relation, token: str, key: str) -> None:
        now = type(self.charm).clock()
        secret = self._store_join_secret({"token": token, "certificate-key": key})
        ca = bootstrap.read_ca(self.charm.host) or ""
        peers.data[self.charm.app].update(
            {
                "endpoint": api_proxy.ENDPOINT,
                "ca-cert-hash": kubeadm.ca_cert_hash(ca),
                "join-secret-id": secret.id or secret.get_info().id,
                "cluster-version": config.kubernetes_version,
                "pod-cidr": config.pod_cidr,
                "service-cidr": config.service_cidr,
                "token-expires": bootstrap.token_expiry(now, config.join_token_ttl).isoformat(),
                "certs-uploaded-at": now.isoformat(),
            }
        )

    def _store_join_secret(self, content: dict[str, str]) -> ops.Secret:
        try:
            secret = self.charm.model.get_secret(label=PEER_SECRET_LABEL)
            secret.set_content(content)
            return secret
        except ops.SecretNotFoundError:
            return self.charm.app.add_secret(
                content, label=PEER_SECRET_LABEL, description="control-plane join material"
            )

    def join_secret(self) -> ops.Secret:
        """The application secret with the bootstrap token and the certificate key."""
        try:
            return self.charm.model.get_secret(label=PEER_SECRET_LABEL)
        except ops.SecretNotFoundError:
            raise StatusError.blocked(
                "control-plane join secret is missing; remove this unit and add a new one"
            ) from None

    def rotate_token_if_due(
        self, config: Config, bag: ops.RelationDataContent, secret: ops.Secret, content: dict
    ) -> str:
        """Mint a new bootstrap token an hour before the current one expires; the valid one."""
        now = type(self.charm).clock()
        expires = parse_time(bag.get("token-expires"))
        margin = datetime.timedelta(hours=TOKEN_ROTATION_MARGIN_HOURS)
        if expires is not None and now < expires - margin:
            return content["token"]
        old = content["token"]
        with _kubeadm_retried():
            new = bootstrap.create_token(self.charm.host, config.join_token_ttl)
        secret.set_content({**content, "token": new})
        bag["token-expires"] = bootstrap.token_expiry(now, config.join_token_ttl).isoformat()
        try:
            bootstrap.delete_token(self.charm.host, old)
        except bootstrap.BootstrapError:
            logger.warning("could not delete the previous bootstrap token; it expires by itself")
        logger.info("rotated the bootstrap token (valid %d h)", config.join_token_ttl)
        return new

    def reupload_certs_if_needed(
        self, bag: ops.RelationDataContent, key: str, peers: ops.Relation
    ) -> None:
        """Upload the certificates again for units waiting to join (after an hour)."""
        waiting = [u for u in peers.units if peers.data[u].get("joined") != "true"]
        if not waiting:
            return
        uploaded = parse_time(bag.get("certs-uploaded-at"))
        now = type(self.charm).clock()
        if uploaded and (now - uploaded).total_seconds() < CERTS_REUPLOAD_AFTER_SECONDS:
            return
        with _kubeadm_retried():
            bootstrap.upload_certs(self.charm.host, key)
        bag["certs-uploaded-at"] = now.isoformat()
        logger.info("re-uploaded control-plane certificates for %d joining units", len(waiting))

    def join_material(self, peers: ops.Relation) -> kubeadm.JoinMaterial:
        """The endpoint, CA pin, token and certificate key a joining control plane needs."""
        bag = peers.data[self.charm.app]
        if not bag.get("join-secret-id") or not bag.get("endpoint"):
            raise StatusError.waiting("waiting for the leader to bootstrap the cluster")
        uploaded = self._newest(peers, "certs-uploaded-at")
        fresh = datetime.timedelta(seconds=CERTS_VALID_SECONDS - 600)
        if uploaded is None or type(self.charm).clock() - uploaded[0] > fresh:
            if peers.data[self.charm.unit].get("joined") != "false":
                peers.data[self.charm.unit]["joined"] = "false"  # asks for a re-upload
            raise StatusError.waiting(
                "waiting for a joined unit to re-upload control-plane certificates"
            )
        try:
            secret = self.charm.model.get_secret(id=bag["join-secret-id"])
            content = secret.get_content(refresh=True)
            material = kubeadm.JoinMaterial(
                endpoint=bag["endpoint"],
                ca_cert_hash=bag.get("ca-cert-hash", ""),
                token=self._join_token(peers, content.get("token", "")),
                certificate_key=content.get("certificate-key", ""),
            )
        except (ops.SecretNotFoundError, ops.ModelError):
            raise StatusError.waiting("waiting for access to the join secret") from None
        except ValueError as e:
            raise StatusError.waiting(f"join material from the leader: {e}") from None
        return material

    def _newest(
        self, peers: ops.Relation, key: str
    ) -> tuple[datetime.datetime, ops.Unit | None] | None:
        """The latest time under `key` in the app databag (unit None) or a unit's databag."""
        found = [(parse_time(peers.data[self.charm.app].get(key)), None)]
        found += [(parse_time(peers.data[u].get(key)), u) for u in {self.charm.unit, *peers.units}]
        known = [(when, unit) for when, unit in found if when is not None]
        return max(known, key=lambda item: item[0]) if known else None

    def _join_token(self, peers: ops.Relation, leader_token: str) -> str:
        """The leader's bootstrap token while it is valid, else the newest a member minted."""
        newest = self._newest(peers, "token-expires")
        if newest is None or newest[1] is None:
            return leader_token
        secret_id = peers.data[newest[1]].get("join-token-secret-id", "")
        return self.charm.model.get_secret(id=secret_id).get_content(refresh=True).get("token", "")

    def help_joining_units(self, config: Config, peers: ops.Relation) -> None:
        """Re-upload certificates and mint a token for joining units the leader lets down.

        Only the leader uploads certificates and rotates the token, and only once it has
        joined itself. A leader that has not (leadership moved to a unit still joining)
        would wait for itself for ever, so the joined unit with the lowest number steps in
        when units wait and the leader let the upload or the token lapse. What it does
        goes to its own unit databag: the upload time, and the ID of a unit secret holding
        the token, granted to the peers.
        """
        waiting = [u for u in peers.units if peers.data[u].get("joined") != "true"]
        number = int(self.charm.unit.name.rsplit("/", 1)[1])
        lower = [
            u
            for u in peers.units
            if peers.data[u].get("joined") == "true" and int(u.name.rsplit("/", 1)[1]) < number
        ]
        if not waiting or lower:
            return
        now = type(self.charm).clock()
        mine = peers.data[self.charm.unit]
        uploaded = self._newest(peers, "certs-uploaded-at")
        with _kubeadm_retried():
            if (
                uploaded is None
                or (now - uploaded[0]).total_seconds() >= MEMBER_REUPLOAD_AFTER_SECONDS
            ):
                key = self.join_secret().get_content(refresh=True)["certificate-key"]
                bootstrap.upload_certs(self.charm.host, key)
                mine["certs-uploaded-at"] = now.isoformat()
                logger.info("re-uploaded control-plane certificates in the leader's stead")
            expires = self._newest(peers, "token-expires")
            margin = datetime.timedelta(minutes=MEMBER_TOKEN_MARGIN_MINUTES)
            if expires is None or now >= expires[0] - margin:
                token = bootstrap.create_token(self.charm.host, config.join_token_ttl)
                secret = self._store_member_token(token, peers)
                mine["join-token-secret-id"] = secret.id or secret.get_info().id
                mine["token-expires"] = bootstrap.token_expiry(
                    now, config.join_token_ttl
                ).isoformat()
                logger.info("minted a bootstrap token for joining units in the leader's stead")

    def _store_member_token(self, token: str, peers: ops.Relation) -> ops.Secret:
        content = {"token": token}
        try:
            secret = self.charm.model.get_secret(label=MEMBER_TOKEN_LABEL)
            secret.set_content(content)
        except ops.SecretNotFoundError:
            secret = self.charm.unit.add_secret(
                content, label=MEMBER_TOKEN_LABEL, description="bootstrap token for joining peers"
            )
        secret.grant(peers)
        return secret

    def prune_etcd(self, peers: ops.Relation, event: ops.EventBase) -> None:
        """Remove the etcd members that departed control-plane units left behind.

        `kubeadm reset` on a leaving unit removes its member, or only warns when it cannot.
        The leader remembers the joined control-plane nodes (`control-plane-nodes`); one
        that is no longer among them departed, and a member by its name is removed here.
        Members of no unit at all are reported, never removed: a unit joining right now
        has its member before its databag says so. What could not be done is kept in
        `etcd-problems` for every unit's status and retried on later events.
        """
        bag = peers.data[self.charm.app]
        current = self.charm._control_plane_nodes(peers)
        known = set(json.loads(bag.get("control-plane-nodes", "[]")))
        problems: dict[str, str] = json.loads(bag.get("etcd-problems", "{}"))
        gone = (known - current) | {n for n in problems if n not in current}
        if gone or isinstance(event, ops.UpdateStatusEvent):
            problems = self._check_etcd(current, gone)
        write(
            bag,
            {
                "control-plane-nodes": json.dumps(sorted(current)),
                **({"etcd-problems": json.dumps(problems, sort_keys=True)} if problems else {}),
            },
            remove=["etcd-problems"],
        )

    def _check_etcd(self, current: set[str], gone: set[str]) -> dict[str, str]:
        """{node name: problem} after removing the members of `gone` nodes."""
        return etcd.prune(etcd.Etcd(self.charm.host, type(self.charm).etcd_url), current, gone)
