#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The kubernetes-control-plane charm: kubeadm control plane, join material, access.

One `_reconcile()` handles every event: read config and relation data, compute what
should be, change only what differs, and remember enough in the peer application
databag that an event with nothing new does no command and no API request.

The reconcile reads top to bottom here (the ops layer); each hook builds the parts it
hands work to, with what they need and nothing of the charm:
- `context.py`: this unit in the hook (`UnitContext`) and the hook's API client;
- `peers.py`: the peer relation's data: the cluster's record and the other units;
- `charm_config.py`: the config and action parameters;
- `node.py`: this machine's packages and its upgrades, one minor at a time;
- `upgrades.py`: the control plane's upgrade, one unit at a time, and the drain;
- `membership.py`: the join material, the HA duties of the leader (or a joined member
  standing in for it) and etcd membership after a unit leaves;
- `fleet.py`: the workers (registry, node readiness, departed nodes, what they are told);
- `access.py`: kube-api consumers, the workers' credentials, the operator's way in;
- `addons.py`: what the leader runs in the cluster (CNI, NVIDIA add-ons, JobSet, Kueue);
- `backups.py`: the leader's scheduled etcd snapshots and their upload to S3;
- `operator_actions.py`: the actions (get-kubeconfig, cluster-info, renew-certificates,
  backup-etcd, restore-etcd);
- `bootstrap.py`, `etcd.py`, `rbac.py`, `device_plugin.py`, `mig_manager.py`,
  `calico.py`, `flannel.py`, `batch_engines.py`, `kueue.py`, `image_registry.py`,
  `cluster_info.py`, `registry.py`, `rolling.py`, `leaving.py`: what they run or decide,
  without ops.

A step that cannot go on raises `StatusError` (`charms.gpu_k8s.v0.status`); the statuses
a reconcile found are kept in StoredState and reported in every hook, and the leader's
are the application's status too.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import time

import batch_engines
import bootstrap
import etcd
import image_registry
import leaving
import node
import ops
import summary
from access import Access
from addons import Addons, team_caps
from backups import Backups
from charm_config import Config
from context import KubeSession, UnitContext, juju_public_address
from fleet import Fleet
from literals import (
    ADMIN_REFUSED_FIX,
    API_PORT,
    CHARM_URL_FILE,
    COS_AGENT,
    KUBE_API,
    PEERS,
    WORKERS,
)
from membership import Membership, etcd_problems
from operator_actions import OperatorActions
from peers import IMAGE_REGISTRY, POD_CIDR, SERVICE_CIDR, Peers
from renewal import Renewal
from runtime_turns import RuntimeTurns
from upgrades import Upgrades

from charms.gpu_k8s.v0 import api_proxy, kubeadm
from charms.gpu_k8s.v0.cos_agent import CosAgentProvider
from charms.gpu_k8s.v0.kube_api import KubeApiProvider, relation_id_of
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import ClusterProvider
from charms.gpu_k8s.v0.status import (
    StatusError,
    Statuses,
    on_error,
    status_of,
)
from charms.gpu_k8s.v0.system import Host, machine

logger = logging.getLogger(__name__)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@dataclasses.dataclass(frozen=True)
class _Hook:
    """What one reconcile works with: this unit, the peer data, the API client, the parts."""

    ctx: UnitContext
    peers: Peers
    kube: KubeSession
    membership: Membership
    access: Access
    fleet: Fleet
    addons: Addons
    upgrades: Upgrades
    renewal: Renewal
    runtime: RuntimeTurns


class KubernetesControlPlaneCharm(ops.CharmBase):
    """Runs a kubeadm control plane and serves workers and kube-api consumers."""

    # Boundaries that tests replace: the machine, the API client factory and the clocks.
    host_factory = staticmethod(machine)
    public_address = staticmethod(juju_public_address)
    etcd_url = etcd.URL
    clock = staticmethod(_now)
    drain_clock = staticmethod(time.monotonic)
    drain_sleep = staticmethod(time.sleep)
    url_opener = staticmethod(batch_engines.https_open)
    # This node's own API server, for /readyz after a restart: kube-apiserver listens on
    # every address, and the certificate names 127.0.0.1 (the proxy's endpoint host is
    # one of the cluster's certSANs, access.py).
    local_api_server = f"https://127.0.0.1:{API_PORT}"
    restart_sleep = staticmethod(time.sleep)
    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        # statuses: [[name, message], ...] as the last reconcile found them (see
        # _on_collect_status); status: the one [name, message] revisions before
        # 2026-11-27 kept, taken over once
        # certificates: this unit's certificate checks (renewal.py: last check, failures)
        # runtime: its containerd/runc update checks and turn (runtime_turns.py)
        self._stored.set_default(
            left_cluster=False, statuses=None, status=None, certificates={}, runtime={}
        )
        if self._stored.status is not None:
            self._stored.statuses = self._stored.statuses or [list(self._stored.status)]
            self._stored.status = None
        self.workers = ClusterProvider(self, WORKERS)
        self.kube_api = KubeApiProvider(self, KUBE_API)
        self.cos = CosAgentProvider(self, COS_AGENT, host=lambda: self.host)
        self._host: Host | None = None
        on = self.on
        for event in (
            on.install,
            on.config_changed,
            on.upgrade_charm,
            on.update_status,
            on.leader_elected,
            on[PEERS].relation_created,
            on[PEERS].relation_changed,
            on[WORKERS].relation_joined,
            on[WORKERS].relation_changed,
            on[WORKERS].relation_departed,
            on[WORKERS].relation_broken,
            on[KUBE_API].relation_changed,
            on[KUBE_API].relation_broken,
            on[COS_AGENT].relation_joined,
            on[COS_AGENT].relation_changed,
        ):
            framework.observe(event, self._on_event)
        framework.observe(on.secret_expired, self._on_secret_expired)
        framework.observe(on[PEERS].relation_departed, self._on_peer_departed)
        framework.observe(on.secret_remove, self._on_secret_remove)
        framework.observe(on.secret_rotate, self._on_event)  # a consumer's token is due
        framework.observe(on.collect_unit_status, self._on_collect_status)
        framework.observe(on.collect_app_status, self._on_collect_app_status)
        self.actions = actions = OperatorActions(
            self,
            host=lambda: self.host,
            context=self._context,
            peers=self._peers,
            renewal_of=self._renewal,
            config=lambda: self.load_config(Config, errors="raise"),
            ready=self._api_server_ready,
            clock=self.clock,
            etcd_url=self.etcd_url,
            monotonic=self.drain_clock,
            sleep=self.restart_sleep,
        )
        framework.observe(on.get_kubeconfig_action, actions.on_get_kubeconfig)
        framework.observe(on.cluster_info_action, actions.on_cluster_info)
        framework.observe(on.renew_certificates_action, actions.on_renew_certificates)
        framework.observe(on.backup_etcd_action, actions.on_backup_etcd)
        framework.observe(on.restore_etcd_action, actions.on_restore_etcd)

    # -- what one hook knows --------------------------------------------------------------

    @property
    def host(self) -> Host:
        """The machine this unit runs on."""
        if self._host is None:
            self._host = type(self).host_factory()
        return self._host

    def _context(self) -> UnitContext:
        binding = self.model.get_binding(PEERS)
        address = binding.network.ingress_address if binding else None
        return UnitContext(
            host=self.host,
            unit=self.unit.name,
            leader=self.unit.is_leader(),
            node_name=kubeadm.node_name(self.host),
            ingress_address=str(address) if address is not None else None,
            public_address=self.public_address(),
        )

    def _peers(self, relation: ops.Relation | None) -> Peers | None:
        if relation is None:
            return None
        return Peers(
            relation.data[self.app],
            self.unit.name,
            relation.data[self.unit],
            {unit.name: relation.data[unit] for unit in relation.units},
        )

    def _hook(
        self,
        ctx: UnitContext,
        relation: ops.Relation,
        peers: Peers,
        kube: KubeSession,
        config: Config,
    ) -> _Hook:
        access = Access(self.kube_api, self.model, ctx, kube, clock=self.clock)
        return _Hook(
            ctx=ctx,
            peers=peers,
            kube=kube,
            membership=Membership(
                self.model, relation, ctx, clock=self.clock, etcd_url=self.etcd_url
            ),
            access=access,
            fleet=Fleet(
                self.workers,
                ctx,
                kube,
                worker_kubeconfig=access.worker_kubeconfig,
                clock=self.clock,
            ),
            addons=Addons(kube, self.url_opener, self._deployed_charm()),
            upgrades=Upgrades(
                ctx,
                kube,
                clock=self.drain_clock,
                sleep=self.drain_sleep,
                upgraded=lambda: self.actions.refresh_kubeconfig(),
            ),
            renewal=self._renewal(ctx, peers, config.certificate_renewal_days),
            runtime=RuntimeTurns(
                ctx,
                peers,
                self._stored.runtime,
                kube,
                wall_clock=lambda: self.clock().timestamp(),
                upgrading=self._upgrading,
                monotonic=self.drain_clock,
                sleep=self.drain_sleep,
            ),
        )

    def _renewal(self, ctx: UnitContext, peers: Peers, days: int) -> Renewal:
        return Renewal(
            ctx,
            peers,
            self._stored.certificates,
            ready=self._api_server_ready,
            clock=self.clock,
            days=days,
            monotonic=self.drain_clock,
            sleep=self.restart_sleep,
            renewed=lambda: self.actions.refresh_kubeconfig(),
        )

    def _deployed_charm(self) -> str:
        """The charm URL Juju deployed this code as (CHARM_URL_FILE); "" where it wrote none."""
        try:
            return (self.charm_dir / CHARM_URL_FILE).read_text().strip()
        except FileNotFoundError:
            return ""

    def _api_server_ready(self) -> bool:
        """Whether this node's API server answers GET /readyz with ok (as admin)."""
        text = bootstrap.read_admin_kubeconfig(self.host)
        if text is None:
            return False
        try:
            config = bootstrap.with_server(text, self.local_api_server)
            with Kube.from_kubeconfig(config, retries=0, timeout=10) as kube:
                return kube.request("GET", "/readyz", accept="text/plain") == "ok"
        except (KubeError, ValueError):
            return False

    # -- event handling -------------------------------------------------------------------

    def _on_event(self, event: ops.EventBase) -> None:
        if self._stored.left_cluster:
            return  # see _on_collect_status
        ctx = self._context()
        relation = self.model.get_relation(PEERS)
        peers = self._peers(relation)
        statuses = Statuses(kube_refused_fix=ADMIN_REFUSED_FIX)
        notes: list[str] = []
        self._blocked_lines: list[str] = []
        self._waiting_lines: list[str] = []
        self._upgrading = isinstance(event, ops.UpgradeCharmEvent)
        with KubeSession(self.host) as kube, statuses.step():
            notes = self._reconcile(event, ctx, relation, peers, kube)
        for line in self._blocked_lines:
            statuses.add(ops.BlockedStatus(line))
        for line in self._waiting_lines:
            statuses.add(ops.WaitingStatus(line))
        self.cos.update(summary.scrape_jobs(ctx, peers), gauges=summary.gauges(ctx, peers))
        if not statuses.found:
            statuses.add(self._ready_status(ctx, peers, notes))
        self._stored.statuses = [[s.name, s.message] for s in statuses.found]

    def _on_secret_expired(self, event: ops.SecretExpiredEvent) -> None:
        """Rotate what expired; remove the expired revision once a newer one replaced it.

        Juju fires secret-expired until the owner removes the revision. The hook that
        rotates the token writes a new revision, which Juju commits when the hook ends;
        the next firing finds the expired revision replaced, moves this unit's own
        tracking to the latest one (owners track revisions since Juju 3.3.1,
        LP#2037120) and removes it. A revision nothing replaced yet (rotation not due or
        failed) stays, so the event comes back and rotation is retried.
        """
        replaced = event.secret.get_info().revision > event.revision
        self._on_event(event)
        if replaced:
            event.secret.get_content(refresh=True)
            event.remove_revision()
            logger.info("removed the expired revision %d of %s", event.revision, event.secret.id)

    def _on_peer_departed(self, event: ops.RelationDepartedEvent) -> None:
        if event.departing_unit == self.unit:
            self._leave()
        else:
            self._on_event(event)

    def _leave(self) -> None:
        """Take this unit out of the control plane when `juju remove-unit` removes it."""
        if self._stored.left_cluster:
            return
        removed = self.app.planned_units() == 0
        clock, sleep = self.drain_clock, self.drain_sleep
        if leaving.leave(self.host, app_removed=removed, clock=clock, sleep=sleep):
            self._stored.left_cluster = True

    def _on_secret_remove(self, event: ops.SecretRemoveEvent) -> None:
        # Nobody tracks this old revision (rotated token, older kubeconfig) any more: a
        # consumer's long-lived token Secret it held can go (access.legacy_token_unused).
        relation_id = relation_id_of(event.secret.label)
        relation = self.model.get_relation(PEERS)
        peers = self._peers(relation)
        if relation_id is not None and peers is not None and self.unit.is_leader():
            with KubeSession(self.host) as kube:
                access = Access(self.kube_api, self.model, self._context(), kube)
                access.legacy_token_unused(peers, relation_id, event.revision)
        # owners track revisions as consumers do (juju/juju#16598, Juju 3.3.1): move this
        # unit's own tracking to the latest before removing an older one
        event.secret.get_content(refresh=True)
        event.remove_revision()

    # -- the reconcile --------------------------------------------------------------------

    def _reconcile(
        self,
        event: ops.EventBase,
        ctx: UnitContext,
        relation: ops.Relation | None,
        peers: Peers | None,
        kube: KubeSession,
    ) -> list[str]:
        """Bring this unit to what config and relations ask for; notes for the status.

        `event` only narrows which worker databags need reading (see `Fleet.sync`).
        """
        try:
            config = self.load_config(Config, errors="raise")
        except ValueError as e:  # as errors="blocked" words it, but kept past this hook
            raise StatusError.blocked(f"Invalid config: {e}") from None
        if relation is None or peers is None:
            raise StatusError.waiting("waiting for the peers relation")
        cluster_version = peers.cluster_version
        if cluster_version:
            with on_error(ops.BlockedStatus, ValueError):
                kubeadm.check_upgrade(cluster_version, config.kubernetes_version)
        fixed = (
            ("pod-cidr", config.pod_cidr, peers.app.get(POD_CIDR)),
            ("service-cidr", config.service_cidr, peers.app.get(SERVICE_CIDR)),
        )
        for option, wanted, running in fixed:
            if running and wanted != running:
                raise StatusError.blocked(
                    f"{option} {wanted} differs from the running cluster's {running}; "
                    f"set it back to {running}"
                )
        hook = self._hook(ctx, relation, peers, kube, config)
        with status_of(node.NodeError):
            ctx.node.settle_abandoned_upgrade(
                config.kubernetes_version, cluster_version, config.package_mirror
            )
            ctx.node.install(
                hook.upgrades.node_minor(config, cluster_version),
                config.package_mirror,
                registry=config.image_registry,
            )
            ctx.node.configure_containerd(config.image_registry)
        if ctx.leader and not (cluster_version and not ctx.joined()):
            return self._reconcile_leader(config, hook, event)
        return self._reconcile_member(config, hook)

    def _reconcile_leader(self, config: Config, hook: _Hook, event: ops.EventBase) -> list[str]:
        peers, membership, addons = hook.peers, hook.membership, hook.addons
        bag = peers.app
        self._configure_api_proxy(hook)
        if not hook.ctx.joined():
            membership.bootstrap(config, peers)
            self._configure_api_proxy(hook)  # the new kubelet's certificate serves metrics
        elif not peers.join_secret_id:
            membership.recover(config, peers)
        self._mark_member(hook)
        join = membership.join_secret()
        content = join.get_content(refresh=True)
        # earlier revisions gave the workers this token: replaced at once, so that what
        # their agents read joins no more control-plane (or worker) nodes
        shared = hook.fleet.published_token() == content["token"]
        token = membership.rotate_token_if_due(config, peers, join, content, now=shared)
        membership.reupload_certs_if_needed(peers, content["certificate-key"])
        self._keep_image_registry(config, hook)
        addons.apply_admission_policies(bag)  # before what they fence
        cni_notes = addons.apply_cni(config, bag)
        upgrade = hook.upgrades.control_plane(config, peers)
        self._mark_member(hook)  # with the minor this node runs now
        cert_notes, cert_blocked = hook.renewal.reconcile(leader=True)
        runtime_notes, self._waiting_lines = hook.runtime.reconcile(leader=True)
        membership.remove_departed_nodes(peers, hook.kube)
        membership.prune_etcd(peers, check=isinstance(event, ops.UpdateStatusEvent))
        added = hook.fleet.sync(peers, event)
        resize = isinstance(event, ops.UpdateStatusEvent)
        # update-status sizes Kueue's cohort from every whole Node (addons.py); that one
        # list, read after this hook's last write to a Node (sync's taints and removals),
        # gives the Node health too, and serves this hook only (issue 29's cost rule)
        nodes = hook.kube().list("v1", "Node") if resize and config.batch_engines else None
        hook.fleet.observe_nodes(peers, event, added, nodes)
        cni_notes += addons.cni_scale(bag, peers.control_plane_nodes(hook.ctx.own_node()))
        with on_error(ops.WaitingStatus, bootstrap.BootstrapError):
            worker_token = hook.fleet.worker_token(peers, token)
        turn_notes = hook.fleet.publish(config, peers, worker_token, upgrade.done)
        addons.apply_device_plugin(config, bag)
        addons.apply_dcgm_exporter(config, bag)
        mig_notes = addons.apply_mig_manager(config, bag)
        addons.apply_kube_state_metrics(config, bag, hook.ctx.node_name)
        addons.apply_node_metrics_access(bag)
        notes = [upgrade.note] if upgrade.note else []
        notes += cni_notes + cert_notes + runtime_notes + mig_notes + turn_notes
        rotating = isinstance(event, ops.SecretRotateEvent)
        rotate = relation_id_of(event.secret.label) if rotating else None
        notes += hook.access.serve_kube_api(peers, config.storage_provisioners, rotate=rotate)
        admitted = addons.apply_provisioner_claims_policy(bag, config.storage_provisioners)
        hook.access.admit_storage(admitted)  # once the policy names them
        notes += addons.apply_team_network_policies(
            config, bag, peers.api_servers(hook.ctx.api_server)
        )
        notes += addons.sweep_consumer_namespaces(bag, retry=resize)  # before the quotas
        addons.apply_team_quotas(config, bag)
        self._blocked_lines = [*hook.access.blocked, *cert_blocked, *hook.fleet.refused(peers)]
        hook.access.reach(config, peers, leader=True)
        if isinstance(event, ops.UpdateStatusEvent):
            notes += Backups(self.host, self.clock, self.app.name).scheduled(
                config, hook.peers.app
            )
        addons.apply_efs_csi_driver(config, bag)  # may block, like the batch engines
        try:
            pending = addons.apply_batch_engines(config, bag, resize, nodes)  # last: may block
        finally:  # the teams hear what capped their asks, also while Blocked on them
            hook.access.announce_quotas(peers, team_caps(bag) if config.batch_engines else {})
        if pending:
            notes.append(f"waiting for {', '.join(pending)}")
        hook.access.raise_skipped()  # a consumer an API error skipped, once the rest ran
        return notes

    def _keep_image_registry(self, config: Config, hook: _Hook) -> None:
        """Keep kubeadm-config's image repositories on `image-registry` for joins and upgrades."""
        bag = hook.peers.app
        want = json.dumps(config.image_registry)
        if bag.get(IMAGE_REGISTRY) == want:
            return
        patched = image_registry.sync_kubeadm_config(hook.kube(), config.image_registry)
        if patched is None:
            raise StatusError.waiting("waiting for kubeadm's kubeadm-config ConfigMap")
        if patched:
            where = config.image_registry or "the upstream registries"
            logger.info("kubeadm-config: joins and upgrades pull from %s", where)
        bag[IMAGE_REGISTRY] = want

    def _reconcile_member(self, config: Config, hook: _Hook) -> list[str]:
        """Join, or as a member: follow the API servers, take an upgrade turn, help joiners.

        Returns notes for the status (a certificate renewal that waits for its turn).
        """
        if not hook.ctx.joined():
            self._join(config, hook)
            notes, self._blocked_lines = hook.renewal.reconcile(leader=False)  # first read
            runtime_notes, self._waiting_lines = hook.runtime.reconcile(leader=False)
            return notes + runtime_notes
        self._configure_api_proxy(hook)
        hook.upgrades.take_turn(config, hook.peers)
        self._mark_member(hook)
        notes, self._blocked_lines = hook.renewal.reconcile(leader=False)
        runtime_notes, self._waiting_lines = hook.runtime.reconcile(leader=False)
        notes += runtime_notes
        hook.membership.help_joining_units(config, hook.peers)
        hook.access.reach(config, hook.peers, leader=False)
        return notes

    def _join(self, config: Config, hook: _Hook) -> None:
        """Join this unit to the control plane with what the leader (or a member) made."""
        ctx = hook.ctx
        material = hook.membership.join_material(hook.peers)
        self._configure_api_proxy(hook)
        logger.info(
            "joining the control plane through the local API proxy at %s", material.endpoint
        )
        retry = "{error}; retrying on the next event"
        with on_error(ops.WaitingStatus, kubeadm.KubeadmError, message=retry):
            bootstrap.begin_join(ctx.host)
            kubeadm.join(
                ctx.host,
                material,
                node_name=ctx.node_name,
                labels={},
                control_plane=True,
                advertise_address=ctx.address,
            )
        bootstrap.mark_joined(ctx.host, "join")
        self._configure_api_proxy(hook)  # this node's own API server now answers too
        self._mark_member(hook)
        logger.info("joined the control plane")
        # its public address is not in the certificate yet
        hook.access.reach(config, hook.peers, leader=False)

    def _configure_api_proxy(self, hook: _Hook) -> None:
        """Point this node's API proxy (the cluster's controlPlaneEndpoint) at the API servers."""
        ctx = hook.ctx
        servers = hook.peers.api_servers(ctx.own_api_server(hook.peers.cluster_version))
        if not servers:
            raise StatusError.waiting(
                "waiting for a joined control-plane unit to publish its address"
            )
        with status_of(api_proxy.ProxyError):
            metrics = api_proxy.metrics_access(ctx.host, api_server=f"127.0.0.1:{API_PORT}")
            api_proxy.configure(ctx.host, servers, metrics)

    def _mark_member(self, hook: _Hook) -> None:
        ctx = hook.ctx
        release = ctx.node.installed_version()
        hook.peers.mark_member(ctx.node_name, ctx.api_server, ctx.installed_minor(), release)

    # -- status -----------------------------------------------------------------------------

    def _ready_status(
        self, ctx: UnitContext, peers: Peers | None, notes: list[str]
    ) -> ops.StatusBase:
        """The cluster's line, Active only when it is so (`summary.unit_status`)."""
        problems = etcd_problems(peers.app) if peers is not None else []
        found = summary.unit_status(ctx, peers, notes, problems)
        if found is None:
            return ops.WaitingStatus("waiting to join the cluster")
        return ops.StatusBase.from_name(*found)

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        """Report what the last reconcile found, in every hook (actions included).

        Hooks that do not reconcile (actions, secret-remove) must not replace a Blocked
        status with a fresh Ready one, so the statuses are found at the end of each
        reconcile and kept in StoredState.
        """
        if self._stored.left_cluster:
            event.add_status(ops.MaintenanceStatus("left the cluster; this unit is being removed"))
            return
        for status in self._last_statuses():
            event.add_status(status)

    def _on_collect_app_status(self, event: ops.CollectStatusEvent) -> None:
        """The leader's view is the application's: the cluster's line, or what stops it.

        ops asks the leader alone. A leader that left the cluster says nothing: the next
        leader reports.
        """
        if self._stored.left_cluster:
            return
        for status in self._last_statuses():
            event.add_status(status)

    def _last_statuses(self) -> list[ops.StatusBase]:
        """What the last reconcile of this unit found (Waiting before the first one)."""
        if not self._stored.statuses:
            return [ops.WaitingStatus("waiting to join the cluster")]
        return [ops.StatusBase.from_name(name, message) for name, message in self._stored.statuses]


if __name__ == "__main__":  # pragma: nocover
    ops.main(KubernetesControlPlaneCharm)
