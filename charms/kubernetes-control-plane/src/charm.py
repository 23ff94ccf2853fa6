#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The kubernetes-control-plane charm: kubeadm control plane, join material, access.

One `_reconcile()` handles every event: read config and relation data, compute what
should be, change only what differs, and remember enough in the peer application
databag that an event with nothing new does no command and no API request.

The reconcile reads top to bottom here; its parts live next to it:
- `settings.py`: the config and action parameters;
- `node.py`: this machine's packages and its upgrades, one minor at a time;
- `membership.py`: the join material, the HA duties of the leader (or a joined member
  standing in for it) and etcd membership after a unit leaves;
- `fleet.py`: the workers (registry, node readiness, departed nodes, what they are told);
- `access.py`: kube-api consumers, the workers' credentials, the operator's way in;
- `addons.py`: what the leader runs in the cluster (CNI, NVIDIA add-ons, JobSet, Kueue);
- `bootstrap.py`, `etcd.py`, `rbac.py`, `device_plugin.py`, `mig_manager.py`,
  `flannel.py`, `batch_engines.py`, `kueue.py`, `image_registry.py`, `cluster_info.py`,
  `registry.py`, `rolling.py`: what they run or decide, without ops.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
import urllib.request
from typing import Any

import bootstrap
import cluster_info
import etcd
import image_registry
import kube_state_metrics
import node
import ops
import registry
import rolling
from access import Access
from addons import Addons
from fleet import Fleet
from literals import (
    ADMIN_REFUSED_FIX,
    ADMIN_SECRET_LABEL,
    API_PORT,
    COS_AGENT,
    DRAIN_TIMEOUT_SECONDS,
    KUBE_API,
    PEERS,
    WORKERS,
)
from membership import Membership
from settings import Config, KubeconfigParams, NoParams

from charms.gpu_k8s.v0 import api_proxy, drain, kubeadm
from charms.gpu_k8s.v0.cos_agent import CosAgentProvider, node_jobs, scrape_job
from charms.gpu_k8s.v0.databag import write
from charms.gpu_k8s.v0.kube_api import KubeApiProvider
from charms.gpu_k8s.v0.kubeclient import KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import ClusterProvider
from charms.gpu_k8s.v0.status import (
    StatusError,
    Statuses,
    api_proxy_errors,
    on_error,
    status_of,
)
from charms.gpu_k8s.v0.system import Host, machine
from charms.gpu_k8s.v0.unit_state import Gauge

logger = logging.getLogger(__name__)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _juju_public_address() -> str | None:
    """This unit's public address as Juju knows it (`unit-get public-address`), or None.

    ops has no call for it (network-get gives the bound addresses, which on AWS are the
    VPC's); canonical/k8s-operator asks the same hook tool for its external kubeconfig.
    """
    import shutil
    import subprocess

    tool = shutil.which("unit-get")
    if tool is None:
        return None
    try:
        done = subprocess.run(
            [tool, "public-address"], capture_output=True, text=True, check=True, timeout=60
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


class KubernetesControlPlaneCharm(ops.CharmBase):
    """Runs a kubeadm control plane and serves workers and kube-api consumers."""

    # Boundaries that tests replace: the machine, the API client factory and the clocks.
    host_factory = staticmethod(machine)
    public_address = staticmethod(_juju_public_address)
    etcd_url = etcd.URL
    clock = staticmethod(_now)
    drain_clock = staticmethod(time.monotonic)
    drain_sleep = staticmethod(time.sleep)
    url_opener = staticmethod(urllib.request.urlopen)
    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        # statuses: [[name, message], ...] as the last reconcile found them (see
        # _on_collect_status)
        self._stored.set_default(left_cluster=False, statuses=None)
        self.workers = ClusterProvider(self, WORKERS)
        self.kube_api = KubeApiProvider(self, KUBE_API)
        self.membership = Membership(self)
        self.access = Access(self)
        self.fleet = Fleet(self)
        self.addons = Addons(self)
        self.cos = CosAgentProvider(self, COS_AGENT, host=lambda: self.host)
        self._host: Host | None = None
        self._kube: Any = None
        self._notes: list[str] = []
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
        framework.observe(on.collect_unit_status, self._on_collect_status)
        framework.observe(on.get_kubeconfig_action, self._on_get_kubeconfig)
        framework.observe(on.cluster_info_action, self._on_cluster_info)

    # -- boundaries ---------------------------------------------------------------------

    @property
    def host(self) -> Host:
        """The machine this unit runs on."""
        if self._host is None:
            self._host = type(self).host_factory()
        return self._host

    def _kube_client(self) -> Any:
        """An API client authenticated as cluster admin (created once per hook)."""
        if self._kube is None:
            from charms.gpu_k8s.v0.kubeclient import Kube

            text = bootstrap.read_admin_kubeconfig(self.host)
            if text is None:
                raise StatusError.waiting("waiting for the admin kubeconfig")
            self._kube = Kube.from_kubeconfig(text)
        return self._kube

    @property
    def _peers(self) -> ops.Relation | None:
        return self.model.get_relation(PEERS)

    def _address(self) -> str:
        binding = self.model.get_binding(PEERS)
        address = binding.network.ingress_address if binding else None
        if address is None:
            raise StatusError.waiting("waiting for a network address")
        return str(address)

    def _api_server(self) -> str:
        """This unit's API server as host:port (what the node proxies and consumers reach)."""
        return f"{bootstrap.endpoint_host(self._address())}:{API_PORT}"

    def _api_servers(self, peers: ops.Relation) -> list[str]:
        """API servers of the joined control-plane units, this unit's once it serves one.

        The leader about to bootstrap lists itself: its API server is what `kubeadm init`
        starts behind the proxy.
        """
        servers = {
            peers.data[u].get("api-server", "")
            for u in peers.units
            if peers.data[u].get("joined") == "true"
        }
        bootstrapping = self.unit.is_leader() and not peers.data[self.app].get("cluster-version")
        if self._joined() or bootstrapping:
            servers.add(self._api_server())
        return sorted(s for s in servers if s)

    def _configure_api_proxy(self, peers: ops.Relation) -> None:
        """Point this node's API proxy (the cluster's controlPlaneEndpoint) at the API servers."""
        servers = self._api_servers(peers)
        if not servers:
            raise StatusError.waiting(
                "waiting for a joined control-plane unit to publish its address"
            )
        with api_proxy_errors():
            metrics = api_proxy.metrics_access(self.host, api_server=f"127.0.0.1:{API_PORT}")
            api_proxy.configure(self.host, servers, metrics)

    # -- event handling -----------------------------------------------------------------

    def _on_event(self, event: ops.EventBase) -> None:
        if self._stored.left_cluster:
            return  # see _on_collect_status
        statuses = Statuses(kube_refused_fix=ADMIN_REFUSED_FIX)
        try:
            with statuses.step():
                self._reconcile(event)
        finally:
            if self._kube is not None:
                self._kube.close()
                self._kube = None
        self.cos.update(self._scrape_jobs(), gauges=self._gauges())
        if not statuses.found:
            statuses.add(self._ready_status())
        self._stored.statuses = [[s.name, s.message] for s in statuses.found]

    def _scrape_jobs(self) -> list[dict]:
        """What this machine's COS agent scrapes (also after a reconcile that stopped).

        Its etcd member once it joined, its kubelet and API server (through HAProxy, as
        the node), and kube-state-metrics where the leader runs it.
        """
        if not self._joined():
            return []
        name = kubeadm.node_name(self.host)
        jobs = [scrape_job("etcd", etcd.METRICS_PORT, instance=name)]
        if api_proxy.metrics_access(self.host):
            jobs += node_jobs(name, api_server=True)
        peers = self._peers
        if (
            self.unit.is_leader()
            and peers is not None
            and peers.data[self.app].get("kube-state-metrics-node") == name
        ):
            jobs.append(
                scrape_job(kube_state_metrics.NAME, kube_state_metrics.PORT, instance=name)
            )
        return jobs

    def _gauges(self) -> list[Gauge]:
        """The cluster as the charms know it, from the leader (one copy per cluster)."""
        peers = self._peers
        if not self.unit.is_leader() or peers is None or not self._joined():
            return []
        bag = peers.data[self.app]
        version = bag.get("cluster-version")
        known = registry.Registry.load(bag)
        return cluster_info.gauges(
            cluster_info.NodeHealth.load(bag) or cluster_info.NodeHealth(),
            behind=self._nodes_behind(peers, version, known) if version else 0,
            pending_removal=registry.pending_count(bag),
        )

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
        """Take this unit out of the control plane when `juju remove-unit` removes it.

        Drain the node, `kubeadm reset` (which removes this etcd member, so the others keep
        quorum), then delete the Node through the other API servers, reached through this
        node's proxy, which goes last. Juju sends this only when another control-plane
        unit exists; on application removal nothing is reset, so etcd's data stays.
        An API error fails the hook, so Juju retries rather than leaving etcd half-shrunk.
        """
        if self._stored.left_cluster or not self._joined():
            return
        if self.app.planned_units() == 0:
            logger.warning("the application is being removed: etcd data stays on this machine")
            return
        node = kubeadm.node_name(self.host)
        kube = self._kube_client()
        try:
            registered = self._drain(kube, node, "stop with it")
            kubeadm.reset(self.host)
            bootstrap.forget_joined(self.host)
            if registered:
                kube.delete("v1", "Node", node)
        finally:
            kube.close()
            self._kube = None
        api_proxy.remove(self.host)
        self._stored.left_cluster = True
        logger.info("left the control plane: node %s drained, reset and deleted", node)

    def _drain(self, kube: Any, node: str, fate: str) -> bool:
        """Cordon and drain this unit's node; False when it is not registered (nothing to do).

        Pods still there after `DRAIN_TIMEOUT_SECONDS` are named in a warning: they `fate`.
        """
        result = drain.drain(
            kube,
            node,
            timeout=DRAIN_TIMEOUT_SECONDS,
            clock=self.drain_clock,
            sleep=self.drain_sleep,
        )
        if result is None:
            return False
        if result.remaining:
            logger.warning("pods left on %s %s: %s", node, fate, " ".join(result.remaining))
        return True

    def _on_secret_remove(self, event: ops.SecretRemoveEvent) -> None:
        # Nobody tracks this old revision (rotated token, older kubeconfig) any more.
        event.remove_revision()

    def _reconcile(self, event: ops.EventBase) -> None:
        """Bring this unit to what config and relations ask for.

        `event` only narrows which worker databags need reading (see `_sync_workers`).
        """
        try:
            config = self.load_config(Config, errors="raise")
        except ValueError as e:  # as errors="blocked" words it, but kept past this hook
            raise StatusError.blocked(f"Invalid config: {e}") from None
        peers = self._peers
        if peers is None:
            raise StatusError.waiting("waiting for the peers relation")
        bag = peers.data[self.app]
        cluster_version = bag.get("cluster-version")
        if cluster_version:
            with on_error(ops.BlockedStatus, ValueError):
                kubeadm.check_upgrade(cluster_version, config.kubernetes_version)
        fixed = (
            ("pod-cidr", config.pod_cidr, bag.get("pod-cidr")),
            ("service-cidr", config.service_cidr, bag.get("service-cidr")),
        )
        for option, wanted, running in fixed:
            if running and wanted != running:
                raise StatusError.blocked(
                    f"{option} {wanted} differs from the running cluster's {running}; "
                    f"set it back to {running}"
                )
        with status_of(node.NodeError):
            self._node.settle_abandoned_upgrade(
                config.kubernetes_version, cluster_version, config.package_mirror
            )
            self._node.install(
                self._node_minor(config, cluster_version),
                config.package_mirror,
                registry=config.image_registry,
            )
            self._node.configure_containerd(config.image_registry)
        if self.unit.is_leader() and not (cluster_version and not self._joined()):
            self._reconcile_leader(config, peers, event)
        else:
            self._reconcile_member(config, peers)

    @property
    def _node(self) -> node.Node:
        return node.Node(self.host)

    def _installed(self) -> dict:
        """What was installed on this machine (see `node.Node.installed`)."""
        return self._node.installed()

    def _node_minor(self, config: Config, cluster_version: str | None) -> str:
        """The minor this node runs: a joined node keeps its own until it upgrades."""
        return self._node.minor(self._joined(), cluster_version or config.kubernetes_version)

    def _upgrade_node(self, config: Config, minor: str, *, first: bool) -> None:
        """Upgrade this node to `minor` (see `node.Node.upgrade`), draining it for kubelet."""
        name = kubeadm.node_name(self.host)
        with status_of(node.NodeError):
            self._node.upgrade(
                minor,
                config.package_mirror,
                first=first,
                drain=lambda: self._drain(self._kube_client(), name, "restart with kubelet"),
                uncordon=lambda: drain.uncordon(self._kube_client(), name),
            )

    def _joined(self) -> bool:
        return bootstrap.is_bootstrapped(self.host)

    # -- leader -------------------------------------------------------------------------

    def _reconcile_leader(self, config: Config, peers: ops.Relation, event: ops.EventBase) -> None:
        bag = peers.data[self.app]
        self._configure_api_proxy(peers)
        if not self._joined():
            self.membership.bootstrap(config, peers)
            self._configure_api_proxy(peers)  # the new kubelet's certificate serves metrics
        elif not bag.get("join-secret-id"):
            self.membership.recover(config, peers)
        self._mark_member(peers)
        join = self.membership.join_secret()
        content = join.get_content(refresh=True)
        token = self.membership.rotate_token_if_due(config, bag, join, content)
        self.membership.reupload_certs_if_needed(bag, content["certificate-key"], peers)
        self._keep_image_registry(config, bag)
        self.addons.apply_cni(config, bag)
        control_plane_done = self._upgrade_control_plane(config, peers)
        self.membership.prune_etcd(peers, event)
        added = self.fleet.sync(bag, event)
        self.fleet.observe_nodes(peers, event, added)
        self.fleet.publish(config, peers, token, control_plane_done)
        self.addons.apply_device_plugin(config, bag)
        self.addons.apply_dcgm_exporter(config, bag)
        self.addons.apply_mig_manager(config, bag)
        self.addons.apply_kube_state_metrics(config, bag, kubeadm.node_name(self.host))
        self.addons.apply_node_metrics_access(bag)
        self.access.serve_kube_api(bag)
        self.access.reach(config, peers, leader=True)
        pending = self.addons.apply_batch_engines(config, bag)  # last: may block
        if pending:
            self._notes.append(f"waiting for {', '.join(pending)}")

    def _keep_image_registry(self, config: Config, bag: ops.RelationDataContent) -> None:
        """Keep kubeadm-config's image repositories on `image-registry` for joins and upgrades."""
        want = json.dumps(config.image_registry)
        if bag.get("image-registry") == want:
            return
        patched = image_registry.sync_kubeadm_config(self._kube_client(), config.image_registry)
        if patched is None:
            raise StatusError.waiting("waiting for kubeadm's kubeadm-config ConfigMap")
        if patched:
            where = config.image_registry or "the upstream registries"
            logger.info("kubeadm-config: joins and upgrades pull from %s", where)
        bag["image-registry"] = want

    def _upgrade_control_plane(self, config: Config, peers: ops.Relation) -> bool:
        """Move the control plane to `kubernetes-version`, one unit at a time.

        The leader goes first (`kubeadm upgrade apply`) once every unit runs the cluster's
        minor; then the turn passes through the others (`kubeadm upgrade node`), each
        taking it when the peer data names it. Returns True when every control-plane
        unit runs the cluster's minor, which is when workers may start.
        """
        bag = peers.data[self.app]
        running = bag["cluster-version"]
        wanted = config.kubernetes_version
        # A joined unit that does not say its minor is taken as behind: it gets a turn.
        versions = self._member_versions(peers, self._node_minor(config, running), "")
        if wanted != running:
            behind = rolling.pending(versions, running)
            if behind:
                self._notes.append(f"upgrade to v{wanted} waits for {', '.join(behind)}")
                return False
            self._upgrade_node(config, wanted, first=True)
            bag["cluster-version"] = running = versions[self.unit.name] = wanted
            logger.info("the cluster runs Kubernetes %s; the other nodes follow in turn", wanted)
        holder = rolling.pass_turn(bag, "upgrade-turn", rolling.pending(versions, running))
        if holder == self.unit.name:  # the leader changed in the middle of an upgrade
            self._upgrade_node(config, running, first=False)
            versions[self.unit.name] = running
            holder = rolling.pass_turn(bag, "upgrade-turn", rolling.pending(versions, running))
        self._mark_member(peers)
        return holder is None

    def _member_versions(
        self, peers: ops.Relation, mine: str | None, unknown: str | None
    ) -> dict[str, str | None]:
        """The minor of each joined control-plane unit, this one's being `mine`."""
        members = {u.name: peers.data[u] for u in peers.units}
        return rolling.member_versions(members, self.unit.name, mine, unknown)

    def _control_plane_nodes(self, peers: ops.Relation) -> set[str]:
        """Node names of the joined control-plane units, this one's included once joined."""
        names = {
            peers.data[u]["node-name"]
            for u in peers.units
            if peers.data[u].get("joined") == "true" and peers.data[u].get("node-name")
        }
        if self._joined():
            names.add(kubeadm.node_name(self.host))
        return names

    # -- etcd membership ------------------------------------------------------------------

    # -- reaching the API from outside -------------------------------------------------

    # -- other units --------------------------------------------------------------------

    def _mark_member(self, peers: ops.Relation) -> None:
        mine = {
            "joined": "true",
            "node-name": kubeadm.node_name(self.host),
            "api-server": self._api_server(),
        }
        minor = self._installed().get("kubernetes")
        if minor:
            mine["kubernetes-version"] = minor
        write(peers.data[self.unit], mine)

    def _reconcile_member(self, config: Config, peers: ops.Relation) -> None:
        bag = peers.data[self.app]
        if self._joined():
            self._configure_api_proxy(peers)
            running = bag.get("cluster-version")
            mine = self._node_minor(config, running)
            if running and mine != running and bag.get("upgrade-turn") == self.unit.name:
                self._upgrade_node(config, running, first=False)
            self._mark_member(peers)
            self.membership.help_joining_units(config, peers)
            self.access.reach(config, peers, leader=False)
            return
        self._join(config, peers)

    def _join(self, config: Config, peers: ops.Relation) -> None:
        """Join this unit to the control plane with what the leader (or a member) made."""
        material = self.membership.join_material(peers)
        self._configure_api_proxy(peers)
        logger.info(
            "joining the control plane through the local API proxy at %s", material.endpoint
        )
        retry = "{error}; retrying on the next event"
        with on_error(ops.WaitingStatus, kubeadm.KubeadmError, message=retry):
            kubeadm.join(
                self.host,
                material,
                node_name=kubeadm.node_name(self.host),
                labels={},
                control_plane=True,
                advertise_address=self._address(),
            )
        bootstrap.mark_joined(self.host, "join")
        self._configure_api_proxy(peers)  # this node's own API server now answers too
        self._mark_member(peers)
        logger.info("joined the control plane")
        self.access.reach(config, peers, leader=False)  # its public address is not in the cert yet

    # -- status -------------------------------------------------------------------------

    def _nodes_behind(self, peers: ops.Relation, version: str, known: registry.Registry) -> int:
        """Nodes (control plane and workers) that still run an older minor than `version`."""
        planes = self._member_versions(peers, self._installed().get("kubernetes"), None)
        return len(rolling.pending(planes, version)) + len(
            rolling.pending(known.versions(), version)
        )

    def _ready_status(self) -> ops.StatusBase:
        """`Ready: v1.36, 3 control-plane, 5 workers (...)` from what the API and etcd said."""
        peers = self._peers
        if peers is None or not self._joined():
            return ops.WaitingStatus("waiting to join the cluster")
        bag = peers.data[self.app]
        version = bag.get("cluster-version", "?")
        health = cluster_info.NodeHealth.load(bag)
        if health is None:
            return ops.ActiveStatus(f"Ready: v{version}; node readiness not checked yet")
        known = registry.Registry.load(bag)
        notes = [
            *sorted(set(json.loads(bag.get("etcd-problems", "{}")).values())),
            *self._notes,
        ]
        return ops.ActiveStatus(
            cluster_info.status_line(
                version,
                health,
                planes=self._control_plane_nodes(peers),
                workers=known,
                behind=self._nodes_behind(peers, version, known),
                pending_removal=registry.pending_count(bag),
                notes=notes,
            )
        )

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        """Report what the last reconcile found, in every hook (actions included).

        Hooks that do not reconcile (actions, secret-remove) must not replace a Blocked
        status with a fresh Ready one, so the status is computed at the end of each
        reconcile and kept in StoredState.
        """
        if self._stored.left_cluster:
            event.add_status(ops.MaintenanceStatus("left the cluster; this unit is being removed"))
        elif self._stored.statuses:
            for name, message in self._stored.statuses:
                event.add_status(ops.StatusBase.from_name(name, message))
        else:
            event.add_status(ops.WaitingStatus("waiting to join the cluster"))

    # -- actions ------------------------------------------------------------------------

    def _on_get_kubeconfig(self, event: ops.ActionEvent) -> None:
        params = event.load_params(KubeconfigParams, errors="fail")
        text = bootstrap.read_admin_kubeconfig(self.host)
        if text is None or not self._joined():
            event.fail("this unit has not joined the cluster yet; retry once it is Ready")
            return
        public = self.public_address()
        try:
            default = f"https://{bootstrap.endpoint_host(public or self._address())}:{API_PORT}"
        except StatusError as e:
            event.fail(f"cannot name this unit's API server: {e}")
            return
        server = params.server or default
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
                    f"from outside the VPC, run `juju expose {self.app.name}` once: it opens "
                    f"port {API_PORT} of the control-plane machines to the internet (or to "
                    "the CIDRs given with --to-cidrs)"
                ),
            }
        )

    def _on_cluster_info(self, event: ops.ActionEvent) -> None:
        event.load_params(NoParams, errors="fail")
        try:
            kube = self._kube_client()
            nodes = cluster_info.summarize_all(kube.list("v1", "Node"))
            pods = kube.list("v1", "Pod", field_selector=cluster_info.HOLDING_PODS)
        except StatusError:
            event.fail("this unit has not joined the cluster yet; retry once it is Ready")
            return
        except KubeError as e:
            event.fail(f"cannot list nodes and pods: {e}")
            return
        finally:
            if self._kube is not None:
                self._kube.close()
                self._kube = None
        event.set_results(cluster_info.report(nodes, pods))


if __name__ == "__main__":  # pragma: nocover
    ops.main(KubernetesControlPlaneCharm)
