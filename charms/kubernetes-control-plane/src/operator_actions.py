# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The operator's actions on the control plane.

get-kubeconfig, cluster-info, renew-certificates, backup-etcd and restore-etcd. An ops
component (action events, the admin kubeconfig's secret, the peer data): the charm builds
it with what the actions need of the hook, never the charm, and observes the actions
with its handlers. What they run is in `bootstrap.py`, `cluster_info.py`, `renewal.py`,
`etcd_backup.py` and `etcd_s3.py`; the uploads in `backups.py`.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable

import bootstrap
import certificates
import cluster_info
import etcd
import etcd_backup
import etcd_s3
import ops
import renewal
import rolling
import yaml
from backups import Backups
from charm_config import Config, KubeconfigParams, NoParams, RestoreParams
from context import KubeSession, UnitContext
from literals import ADMIN_SECRET_LABEL, API_PORT, PEERS
from peers import NODE_TURNS, RENEWAL_TURN, Peers
from renewal import Renewal

from charms.gpu_k8s.v0.kubeclient import KubeError
from charms.gpu_k8s.v0.status import StatusError
from charms.gpu_k8s.v0.system import Host

logger = logging.getLogger(__name__)


class OperatorActions(ops.Object):
    """The action handlers, observed by the charm.

    `host`: this machine (made when first asked); `context`: this unit in the hook;
    `peers`: the peer data of a relation (None without one); `renewal_of`: the certificate
    renewal of this unit (`renewal.Renewal`) for a renewal window in days; `config`: the
    charm's config (ValueError: invalid); `ready`: whether this node's API server answers
    /readyz; `clock`: the time (UTC); `etcd_url`: this node's etcd member; `monotonic`,
    `sleep`: the restart's waits.
    """

    def __init__(
        self,
        parent: ops.Object,
        *,
        host: Callable[[], Host],
        context: Callable[[], UnitContext],
        peers: Callable[[ops.Relation | None], Peers | None],
        renewal_of: Callable[[UnitContext, Peers, int], Renewal],
        config: Callable[[], Config],
        ready: Callable[[], bool],
        clock: Callable[[], datetime.datetime],
        etcd_url: str,
        monotonic: Callable[[], float],
        sleep: Callable[[float], None],
    ):
        super().__init__(parent, "operator-actions")
        self._host = host
        self._context = context
        self._peers = peers
        self._renewal = renewal_of
        self._config = config
        self._api_server_ready = ready
        self.clock = clock
        self.etcd_url = etcd_url
        self.drain_clock = monotonic
        self.restart_sleep = sleep
        self.unit = self.model.unit
        self.app = self.model.app

    @property
    def host(self) -> Host:
        """The machine this unit runs on."""
        return self._host()

    def _backups(self) -> Backups:
        return Backups(self.host, self.clock, self.app.name)

    def on_get_kubeconfig(self, event: ops.ActionEvent) -> None:
        """The cluster-admin kubeconfig, in a secret of this unit, for this unit's server."""
        params = event.load_params(KubeconfigParams, errors="fail")
        ctx = self._context()
        text = bootstrap.read_admin_kubeconfig(ctx.host)
        if text is None or not ctx.joined():
            event.fail("this unit has not joined the cluster yet; retry once it is Ready")
            return
        try:
            host = bootstrap.endpoint_host(ctx.public_address or ctx.address)
        except StatusError as e:
            event.fail(f"cannot name this unit's API server: {e}")
            return
        server = params.server or f"https://{host}:{API_PORT}"
        text = bootstrap.with_server(text, server)
        try:
            secret = self.model.get_secret(label=ADMIN_SECRET_LABEL)
            if secret.peek_content().get("kubeconfig") != text:
                secret.set_content({"kubeconfig": text})
        except ops.SecretNotFoundError:
            secret = self.unit.add_secret(
                {"kubeconfig": text},
                label=ADMIN_SECRET_LABEL,
                description="cluster-admin kubeconfig",
            )
        secret_id = secret.id or secret.get_info().id
        event.set_results(
            {
                "secret-id": secret_id,
                "server": server,
                "command": (
                    f"juju show-secret --reveal {secret_id} --format json"
                    " | jq -r '.[].content.Data.kubeconfig' > kubeconfig"
                ),
                "note": (
                    f"from outside the VPC, run `juju expose {self.app.name} --to-cidrs "
                    f"<your network's CIDR>` once: it opens port {API_PORT} of the "
                    "control-plane machines to those addresses only (without --to-cidrs, "
                    "to 0.0.0.0/0: the whole internet)"
                ),
            }
        )

    def refresh_kubeconfig(self) -> None:
        """After a renewal: the `get-kubeconfig` secret gets admin.conf's new client certificate.

        `kubeadm certs renew all` rewrites admin.conf with a new client certificate; the
        copy in the secret keeps the old one, which kube-apiserver refuses once expired.
        A new revision with the server the operator was given; nothing without a secret.
        """
        try:
            secret = self.model.get_secret(label=ADMIN_SECRET_LABEL)
            old = secret.peek_content().get("kubeconfig")
        except ops.SecretNotFoundError:
            return
        text = bootstrap.read_admin_kubeconfig(self.host)
        if text is None or not old:
            return
        try:
            server = yaml.safe_load(old)["clusters"][0]["cluster"]["server"]
        except (yaml.YAMLError, KeyError, IndexError, TypeError):
            logger.warning("the admin-kubeconfig secret names no server; left as it is")
            return
        text = bootstrap.with_server(text, server)
        if text != old:
            secret.set_content({"kubeconfig": text})
            logger.info("admin-kubeconfig secret: the renewed client certificate")

    def on_cluster_info(self, event: ops.ActionEvent) -> None:
        """The cluster as `cluster_info.report` sums it up, and the certificates' expiry."""
        event.load_params(NoParams, errors="fail")
        with KubeSession(self.host) as session:
            try:
                kube = session()
                nodes = cluster_info.summarize_all(kube.list("v1", "Node"))
                pods = kube.list("v1", "Pod", field_selector=cluster_info.HOLDING_PODS)
            except StatusError:
                event.fail("this unit has not joined the cluster yet; retry once it is Ready")
                return
            except KubeError as e:
                event.fail(f"cannot list nodes and pods: {e}")
                return
        results = cluster_info.report(nodes, pods)
        peers = self._peers(self.model.get_relation(PEERS))
        if peers is not None:
            results["certificates"] = renewal.report(peers)
        event.set_results(results)

    def _action_config(self, event: ops.ActionEvent) -> Config | None:
        """The charm's config for an action, or None after failing it with why not."""
        try:
            return self._config()
        except ValueError as e:
            event.fail(f"Invalid config: {e}")
            return None

    def on_renew_certificates(self, event: ops.ActionEvent) -> None:
        """Renew this node's certificates now, in turn (see `renewal.py`)."""
        event.load_params(NoParams, errors="fail")
        ctx = self._context()
        peers = self._peers(self.model.get_relation(PEERS))
        if peers is None or not ctx.joined():
            event.fail("this unit has not joined the cluster yet; retry once it is Ready")
            return
        config = self._action_config(event)
        if config is None:
            return
        days = config.certificate_renewal_days
        cert = self._renewal(ctx, peers, days)
        holder = cert.turn()
        bag = peers.app
        # One node restarts at a time (peers.NODE_TURNS): this unit renews now only in its
        # own renewal turn, or as the leader while no turn at all is out.
        busy = None if holder == ctx.unit else rolling.held(bag, NODE_TURNS)
        if busy is not None:
            key, unit = busy
            event.fail(
                f"{unit} holds the {NODE_TURNS[key]} turn and restarts its control plane; "
                "run this again after it"
            )
            return
        if holder is None and not ctx.leader:
            cert.request()
            event.set_results(
                {
                    "result": "queued: the leader gives this unit the renewal turn in its "
                    "next hook; the unit renews then (see its status and cluster-info)"
                }
            )
            return
        if ctx.leader:
            bag[RENEWAL_TURN] = ctx.unit
        try:
            done = cert.renew()
        except certificates.CertificateError as e:
            event.fail(f"renewal failed, the old certificates stay in use: {e}")
            return
        finally:
            if ctx.leader:
                cert.pass_turn()
        earliest = done.earliest
        event.set_results(
            {
                "renewed": ", ".join(done.renewed),
                "restarted": ", ".join(done.restarted),
                "earliest-expiry": (
                    f"{earliest.name} {earliest.expires:%Y-%m-%d %H:%M} UTC"
                    if earliest and earliest.expires
                    else "none"
                ),
            }
        )

    def on_backup_etcd(self, event: ops.ActionEvent) -> None:
        """Snapshot this node's etcd member into the machine's backup directory."""
        event.load_params(NoParams, errors="fail")
        if not bootstrap.is_bootstrapped(self.host):
            event.fail("this unit has not joined the cluster yet; retry once it is Ready")
            return
        config = self._action_config(event)
        if config is None:
            return
        keep = config.etcd_backups_kept
        event.log("taking a snapshot of this node's etcd member")
        try:
            snapshot = etcd_backup.take(self.host, self.clock(), keep=keep)
        except etcd_backup.BackupError as e:
            event.fail(f"backup failed, the older backups are kept: {e}")
            return
        results: dict[str, object] = {
            "path": snapshot.path,
            "size": snapshot.size,
            "revision": snapshot.revision,
            "hash": f"{snapshot.hash:08x}",
            "keys": snapshot.keys,
            "kept": len(etcd_backup.backups(self.host)),
            "command": etcd_backup.copy_command(self.unit.name, snapshot.path),
        }
        if config.backup_target is not None:
            event.log(f"uploading it to {config.backup_target.url()}")
            try:
                uploaded = self._backups().upload(config, snapshot.path)
            except etcd_s3.S3BackupError as e:
                event.set_results(results)
                event.fail(f"the snapshot is kept on the machine ({snapshot.path}); {e}")
                return
            results.update({"s3-url": uploaded.url, "s3-kept": uploaded.kept})
        event.set_results(results)

    def on_restore_etcd(self, event: ops.ActionEvent) -> None:
        """Bring a one-control-plane cluster back to a snapshot (see `etcd_backup.restore`)."""
        params = event.load_params(RestoreParams, errors="fail")
        if params.confirm != "yes":
            event.fail(
                "a restore replaces the whole cluster state with the snapshot's and restarts "
                "the control plane; run it again with confirm=yes"
            )
            return
        if not bootstrap.is_bootstrapped(self.host):
            event.fail("this unit has not joined the cluster yet; retry once it is Ready")
            return
        relation = self.model.get_relation(PEERS)
        others = len(relation.units) if relation is not None else 0
        try:
            members = etcd.Etcd(self.host, self.etcd_url).members()
        except etcd.EtcdError as e:
            event.fail(f"cannot list etcd's members, so nothing was restored: {e}")
            return
        if others or self.app.planned_units() > 1 or len(members) > 1:
            event.fail(
                f"etcd has {len(members)} members and this application "
                f"{self.app.planned_units()} units: restore-etcd restores one control-plane "
                "node only; restore a multi-member cluster by hand as docs/how-to/etcd-backup.md "
                "says (Restore, several control-plane units)"
            )
            return
        path = self._snapshot(event, params)
        if not path:
            return
        event.log(f"restoring etcd from {path}; the control plane restarts")
        try:
            done = etcd_backup.restore(
                self.host,
                path,
                self.clock(),
                sleep=self.restart_sleep,
                wait_ready=lambda: certificates.wait_ready(
                    self._api_server_ready, clock=self.drain_clock, sleep=self.restart_sleep
                ),
            )
        except etcd_backup.BackupError as e:
            event.fail(f"restore failed: {e}")
            return
        event.set_results(
            {
                "restored-from": done.source,
                "revision": done.revision,
                "previous-data": done.previous,
            }
        )

    def _snapshot(self, event: ops.ActionEvent, params: RestoreParams) -> str:
        """The snapshot restore-etcd restores, of this cluster's keys; '' once it failed."""
        kept = etcd_backup.backups(self.host)
        path = params.path or (kept[-1] if kept else "")
        if params.s3_key:
            path = self._fetch_snapshot(event, params)
            if not path:
                return ""
        if not path:
            event.fail(f"no snapshot in {etcd_backup.BACKUP_DIR}; give path=...")
            return ""
        try:  # before anything stops: a snapshot of another cluster's keys is refused
            if self.host.path(path).is_file():  # else restore says there is none
                recorded = etcd_backup.recorded_identity(self.host, path)
                etcd_backup.check_identity(self.host, recorded, path)
        except etcd_backup.BackupError as e:
            event.fail(f"nothing was restored: {e}")
            return ""
        return path

    def _fetch_snapshot(self, event: ops.ActionEvent, params: RestoreParams) -> str:
        """restore-etcd s3-key=: the snapshot fetched into the backup directory, or ''."""
        config = self._action_config(event)
        if config is None:
            return ""
        target = config.backup_target
        if params.path or target is None:
            event.fail("s3-key needs etcd-backup-s3 set, and not both path and s3-key: give one")
            return ""
        try:
            key = etcd_s3.check_key(params.s3_key, target)
        except ValueError as e:
            event.fail(str(e))
            return ""
        path = f"{etcd_backup.BACKUP_DIR}/{etcd_s3.FETCHED}{key.rsplit('/', 1)[-1]}"
        event.log(f"fetching {target.url(key)}")
        try:
            fetched = etcd_s3.fetch(
                key, target, self._backups().credentials(config), self.host.path(path)
            )
            etcd_backup.check_identity(self.host, fetched.identity, target.url(key))
        except (etcd_s3.S3BackupError, etcd_backup.BackupError) as e:
            for refused in (path, path + etcd_backup.IDENTITY_SUFFIX):  # not kept
                self.host.path(refused).unlink(missing_ok=True)
            event.fail(f"nothing was restored: {e}")
            return ""
        assert fetched.identity is not None  # check_identity refuses None
        etcd_backup.record_identity(self.host, path, fetched.identity)
        return path
