#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Kubernetes worker charm: joins a kubeadm cluster and leaves it without losing work.

One `_reconcile` installs containerd, enables NVIDIA GPUs when the machine has them
(driver, container toolkit, containerd runtime, a reboot when the driver needs one),
installs kubeadm/kubelet at the control plane's Kubernetes version, joins with the
material the control plane publishes over `cluster`, labels (and for GPUs taints) the
node and publishes its name and GPU inventory. When this unit leaves (`cluster`
departed by this unit, or `stop`), it cordons and drains its node through the
Kubernetes API, honouring PodDisruptionBudgets up to `drain-timeout`, then runs
`kubeadm reset`.

A driver that needs a reboot blocks the unit with the commands to run, or with
`auto-reboot` the unit cordons and drains its node (as for removal), records the boot id
and asks Juju to reboot; on a later boot, once the driver works, it uncordons the node.
A reboot that did not fix the driver blocks instead of rebooting again.

Kubernetes minor upgrades: a node that has not joined installs the control plane's
minor. A joined node on an older minor keeps its packages until `upgrade-turn` names
this unit, then follows the kubeadm procedure one minor at a time: kubeadm at the new
minor, `kubeadm upgrade node`, cordon + drain, kubelet, kubelet restart, uncordon, and
publishes its new minor (the control plane then hands the turn on). Progress is kept
on the machine, so a failed step is retried on the next event from where it stopped,
and a cordoned node is never forgotten. A node newer than the control plane blocks.

A drain that times out does not block removal forever (Juju would wait on the hook
indefinitely): the pods still on the node are named in a warning in the log and in the
unit's status before the node is reset, so no work disappears silently; their
controllers recreate them elsewhere once the node is gone. An API error during the
drain fails the hook instead, so Juju retries it rather than resetting an undrained node.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

import driver
import gpu_health
import gpu_labels
import gpu_node
import mig_layout
import node_identity
import node_upgrade
import nvidia
import ops
import validation
import worker
from charm_config import WorkerConfig
from literals import CLUSTER, COS_AGENT, REBOOTS
from reboot_turns import RUNTIME, UPGRADE, RebootTurns

from charms.gpu_k8s.v0 import api_proxy, apt, containerd, kubeadm
from charms.gpu_k8s.v0.cos_agent import (
    DCGM_EXPORTER_PORT,
    CosAgentProvider,
    node_jobs,
    scrape_job,
)
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import ClusterRequirer, GpuInfo, JoinInfo
from charms.gpu_k8s.v0.status import StatusError, Statuses, on_error, status_of
from charms.gpu_k8s.v0.system import SYSTEMCTL, CommandError, Host, machine

logger = logging.getLogger(__name__)

LEFT = "left the cluster; this unit is being removed"


class NodeMaintenanceError(Exception):
    """The Kubernetes API failed while this node was drained, upgraded or uncordoned."""


@contextlib.contextmanager
def _api_errors_fail_the_hook() -> Iterator[None]:
    """An API error while the node is taken out of service or brought back fails the hook.

    It is not turned into a status (as `Statuses.step` would): Juju retries the hook with
    the stored state from before it, and what was done is where the retry finds it (the
    cordon mark on the Node, the upgrade record on the machine).
    """
    try:
        yield
    except KubeError as e:
        raise NodeMaintenanceError(str(e)) from e


class KubernetesWorkerCharm(ops.CharmBase):
    """A Kubernetes worker node (deployed as a CPU app and as a GPU app)."""

    _stored = ops.StoredState()
    # Time source for waits (drain, GPU validation); tests replace them to not wait.
    drain_clock = staticmethod(time.monotonic)
    drain_sleep = staticmethod(time.sleep)
    wall_clock = staticmethod(time.time)  # when containerd/runc updates were last asked for

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        # reboot_boot: boot id when this unit asked Juju for a reboot the driver needed;
        # reboot_cordoned: whether it cordoned its node for that reboot.
        # mig_cordoned, mig_since: a MIG change in flight (mig_layout.Progress).
        self._stored.set_default(
            left_cluster=False,
            reboot_boot=None,
            reboot_cordoned=False,
            mig_cordoned=False,
            mig_since=None,
            runtime_checked=None,
            runtime_pending={},
            runtime_cordoned=False,
        )
        self._upgrading = False  # this hook is upgrade-charm
        self.cluster = ClusterRequirer(self, CLUSTER)
        self._taint: bool | None = None  # the GPU taint to ask the control plane for
        self._quarantine: list[str] | None = None  # quarantined GPUs (gpu_health.py)
        self.turns = RebootTurns(self, REBOOTS)
        self.cos = CosAgentProvider(self, COS_AGENT, host=self.host_factory)
        # What this hook found; collect-unit-status reports the highest priority.
        # the worker reaches the API as its kubelet (system:node:<name>, node_identity.py)
        self._statuses = Statuses(
            kube_refused_fix="check this node's kubelet certificate (/etc/kubernetes/kubelet.conf)"
        )
        on = self.on
        for event in (
            on.install,
            on.start,
            on.config_changed,
            on.upgrade_charm,
            on.update_status,
            on.secret_changed,
            on[CLUSTER].relation_created,
            on[CLUSTER].relation_joined,
            on[CLUSTER].relation_changed,
            on[CLUSTER].relation_broken,
            on[REBOOTS].relation_changed,
            on[REBOOTS].relation_departed,
            on[COS_AGENT].relation_joined,
            on[COS_AGENT].relation_changed,
            on.leader_elected,
        ):
            framework.observe(event, self._reconcile)
        framework.observe(on[CLUSTER].relation_departed, self._on_cluster_departed)
        framework.observe(on.stop, self._on_stop)
        framework.observe(on.collect_unit_status, self._on_collect_status)
        framework.observe(on.gpu_info_action, self._on_gpu_info)
        framework.observe(on.validate_gpu_action, self._on_validate_gpu)
        framework.observe(on.gpu_health_action, self._on_gpu_health)
        framework.observe(on.readmit_gpu_action, self._on_readmit_gpu)

    def host_factory(self) -> Host:
        """The machine this unit manages (tests return a fake one)."""
        return machine()

    # -- events ------------------------------------------------------------------------

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        self._statuses.report(event)

    def _on_cluster_departed(self, event: ops.RelationDepartedEvent) -> None:
        if event.departing_unit == self.unit:
            self._leave()
        else:
            self._reconcile(event)

    def _on_stop(self, event: ops.StopEvent) -> None:
        self._leave()

    def _reconcile(self, event: ops.EventBase) -> None:
        """Run the steps; the first StatusError stops them and is the unit's status.

        Statuses that do not stop the reconcile (a GPU problem, a node newer than its
        control plane, a wait for a turn to drain) are noted and reported after it, so
        ops' priority decides alone: Blocked over any other status, a turn wait over
        Active but under whatever Waiting or Maintenance the reconcile ended with.
        """
        notes: list[ops.StatusBase] = []
        self._upgrading = isinstance(event, ops.UpgradeCharmEvent)
        with self._statuses.step():
            self._converge(notes)
        for status in notes:
            self._statuses.add(status)

    def _converge(self, notes: list[ops.StatusBase]) -> None:
        """Install, reboot if the driver needs it, join, upgrade, label; the node's status."""
        if self._stored.left_cluster:
            raise StatusError.maintenance(LEFT)
        try:
            config = self.load_config(WorkerConfig, errors="raise")
        except ValueError as e:
            # as errors="blocked" words it, but the hook ends normally: errors="blocked"
            # aborts it before commit, so a related COS agent never heard of the block
            raise StatusError.blocked(f"Invalid config: {e}") from None
        self.turns.update_grants(config.max_parallel_reboots)
        host = self.host_factory()
        info = self.cluster.join_material()
        state, plan = self._install(host, config, info)
        self.cos.set_gauges(state.gauges())  # served to a COS agent, a pending reboot too
        self._reboot_step(host, config, info, state, notes)
        self._telemetry(host, state)
        if info is None or plan is None:
            raise StatusError.waiting(self.cluster.problem() or "waiting for join material")
        node = kubeadm.node_name(host)
        self._proxy(host, info)
        with on_error(ops.WaitingStatus, worker.JoinError):
            worker.join_cluster(
                host,
                info.endpoint,
                info.ca_cert_hash,
                info.token,
                node=node,
                labels=config.labels,
                taints=state.taints(config.gpu_taint),
            )
        # joined now: the kubelet's certificate lets HAProxy serve its metrics (no-op after)
        self._proxy(host, info)
        self._telemetry(host, state)
        running, note = self._kubernetes(host, config, info, node, plan, notes)
        self._runtime_updates(host, config, node, notes)
        gpus = [GpuInfo(**r) for r in state.records()] or None
        with self._statuses.step():  # a node that is not labelled yet still reports below
            self._statuses.add(self._node_state(host, info, node, config, state, note, notes))
        if state.has_gpu:
            self._gpu_health(host, node, config, notes)
        self.cluster.publish_node(
            node,
            gpus,
            kubernetes_version=running,
            node_identity=True,
            gpu_taint=self._taint,
            gpu_quarantine=self._quarantine,
        )
        problem = state.driver_problem(self.unit.name, config.driver)
        if problem is not None:
            notes.append(ops.BlockedStatus(problem))

    # -- steps -------------------------------------------------------------------------

    def _gpu_health(
        self, host: Host, node: str, config: WorkerConfig, notes: list[ops.StatusBase]
    ) -> None:
        """Keep the GPU health watcher running; Blocked while it holds a GPU quarantined."""
        with self._statuses.step(), on_error(ops.WaitingStatus, gpu_health.GpuHealthError):
            if gpu_health.ensure(host, node, config.gpu_xid_escalation):
                logger.info("GPU health watcher (re)started")
        found = gpu_health.quarantined(host)
        message = gpu_health.status_message(node, self.unit.name, found)
        if message is not None:
            notes.append(ops.BlockedStatus(message))

    def _telemetry(self, host: Host, state: gpu_node.GpuState) -> None:
        """What this machine's COS agent scrapes.

        kubelet through the node's HAProxy once it has its certificate; on a GPU node the
        control plane's DCGM exporter on the host network.
        """
        name = kubeadm.node_name(host)
        jobs = node_jobs(name) if api_proxy.metrics_access(host) else []
        if state.has_gpu:
            jobs.append(scrape_job("dcgm-exporter", DCGM_EXPORTER_PORT, instance=name))
            jobs.append(scrape_job("gpu-watcher", gpu_health.METRICS_PORT, instance=name))
        self.cos.update(jobs)

    def _install(
        self, host: Host, config: WorkerConfig, info: JoinInfo | None
    ) -> tuple[gpu_node.GpuState, node_upgrade.VersionPlan | None]:
        """containerd, the GPU step, then kubeadm + kubelet at the control plane's version.

        Kubernetes packages are only installed here on a node that has not joined or
        already runs the control plane's minor; a joined node on another minor keeps
        them until its upgrade (`_kubernetes`). The plan is None without join material.
        A minor this charm cannot install, an unreachable next minor or a corrupt upgrade
        record (ValueError), a GPU setup or a package that fails: Blocked.
        """
        with on_error(ops.BlockedStatus, gpu_node.GpuSetupError, apt.AptError, ValueError):
            minor = None if info is None else node_upgrade.supported_minor(info.kubernetes_version)
            worker.prepare(host)
            state = gpu_node.setup(host, config, worker.sandbox_image(config, info))
            plan = (
                None if minor is None else node_upgrade.plan_kubernetes(host, minor, config.mirror)
            )
        return state, plan

    def _reboot_step(
        self,
        host: Host,
        config: WorkerConfig,
        info: JoinInfo | None,
        state: gpu_node.GpuState,
        notes: list[ops.StatusBase],
    ) -> None:
        """Handle a reboot the driver needs; a StatusError when the reconcile stops here."""
        started, limit = self._stored.reboot_boot, config.max_parallel_reboots
        if started is None and state.reboot is None:
            if self._stored.reboot_cordoned:  # drained for an update that is not needed now
                self._after_reboot(info, kubeadm.node_name(host), limit)
            elif not self._stored.mig_cordoned and not mig_layout.is_mig_request(
                self.turns.asked_for()
            ):  # a MIG change keeps its turn, or its place in the queue (mig_layout's own)
                self.turns.done(limit)  # no longer needed, if it asked
            return
        node, reason = kubeadm.node_name(host), state.reboot or ""
        action = nvidia.reboot_action(
            state.reboot,
            config.auto_reboot,
            started_at_boot=started,
            current_boot=nvidia.boot_id(host),
        )
        if action is nvidia.RebootAction.NONE:
            raise StatusError.maintenance("waiting for Juju to reboot this machine")
        if action is nvidia.RebootAction.BLOCK:
            message = nvidia.reboot_blocked_message(
                reason, self.unit.name, node, rebooted=started is not None, install=state.update
            )
            notes.append(ops.BlockedStatus(message))
        elif action is nvidia.RebootAction.UNCORDON and state.pending is not None:
            # NVSwitch: the driver works, its fabric does not (yet); the turn and the
            # cordon stay, so the next node does not walk into the same failure (a
            # registration under way is the node's Waiting status, `GpuState.waiting`)
            if state.pending_failed:
                notes.append(self._fabric_after_reboot(state, node))
        elif action is nvidia.RebootAction.UNCORDON:
            self._after_reboot(info, node, limit)
        elif not self.turns.request(reason, limit):
            notes.append(ops.WaitingStatus(self.turns.waiting_message(reason, limit)))
        else:
            self._drain_and_reboot(host, config, info, node, reason, state.update)

    def _node_kube(self, host: Host, waiting_for: str) -> Kube:
        """A client acting as this node's kubelet; without one, Waiting says what waits and why.

        Everything the worker does at the API for its own node (labels, cordon, drain,
        upgrade, MIG) is done as `system:node:<name>`, which the Node authorizer and
        NodeRestriction confine to this Node and the pods bound to it (node_identity.py).
        """
        try:
            return Kube.from_kubeconfig(node_identity.kubeconfig(host))
        except (node_identity.NodeIdentityError, ValueError) as e:
            raise StatusError.waiting(f"{waiting_for}: {e}") from None

    def _drain_and_reboot(
        self,
        host: Host,
        config: WorkerConfig,
        info: JoinInfo | None,
        node: str,
        reason: str,
        update: tuple[str, ...],
    ) -> None:
        """Cordon + drain the node (when joined), update the driver, reboot after this hook.

        An API error during the drain fails the hook, so Juju retries it rather than
        rebooting an undrained node; a drain timeout reboots anyway (as removal does).
        A driver update (the driver moving with a new kernel) is installed only once the
        node is drained; if apt fails, the node stays cordoned and the unit Blocked.
        Always ends the reconcile (StatusError).
        """
        cordoned = False
        if kubeadm.is_joined(host):
            waiting_for = f"reboot needed ({reason}); cannot drain node {node} yet"
            with self._node_kube(host, waiting_for) as kube, _api_errors_fail_the_hook():
                cordoned = worker.drain_for_reboot(
                    kube,
                    node,
                    config.drain_timeout,
                    clock=self.drain_clock,
                    sleep=self.drain_sleep,
                )
        self._stored.reboot_cordoned = cordoned or self._stored.reboot_cordoned
        try:
            driver.apply_update(host, update)
        except apt.AptError as e:
            held = f"node {node} stays cordoned; " if cordoned else ""
            raise StatusError.blocked(f"{held}{driver.apt_blocked_message(e)}") from None
        self._stored.reboot_boot = nvidia.boot_id(host)
        logger.info("rebooting for the NVIDIA driver: %s", reason)
        self.unit.reboot()
        raise StatusError.maintenance(f"rebooting: {reason}")

    def _fabric_after_reboot(self, state: gpu_node.GpuState, node: str) -> ops.StatusBase:
        """Blocked: back from our reboot, Fabric Manager failed; the turn stays ours."""
        message = nvidia.fabric_blocked_message(
            state.pending or "", self.unit.name, node, cordoned=self._stored.reboot_cordoned
        )
        return ops.BlockedStatus(message)

    def _after_reboot(self, info: JoinInfo | None, node: str, limit: int) -> None:
        """Back on a new boot with a working driver: uncordon (if we cordoned), end the turn."""
        if self._stored.reboot_cordoned:
            waiting_for = f"rebooted; cannot uncordon node {node} yet"
            with (
                self._node_kube(self.host_factory(), waiting_for) as kube,
                _api_errors_fail_the_hook(),
            ):
                if gpu_health.uncordon(self.host_factory(), kube, node):
                    logger.info("driver works after the reboot; uncordoned node %s", node)
        self._stored.reboot_boot = None
        self._stored.reboot_cordoned = False
        self.turns.done(limit)

    def _kubernetes(
        self,
        host: Host,
        config: WorkerConfig,
        info: JoinInfo,
        node: str,
        plan: node_upgrade.VersionPlan,
        notes: list[ops.StatusBase],
    ) -> tuple[str, str]:
        """The minor this node runs and a note for its status.

        A joined node on an older minor upgrades only in the control plane's turn
        (`upgrade-turn` names this unit); for a minor or a patch it also takes a drain turn
        (`reboot_turns.py`, shared with reboots and MIG changes, `max-parallel-reboots`
        at once), which it gives back once uncordoned. A newer minor blocks.
        """
        if plan.action is node_upgrade.VersionAction.NEWER:
            notes.append(ops.BlockedStatus(node_upgrade.newer_message(plan.running, plan.target)))
            return plan.running, ""
        limit = config.max_parallel_reboots
        if plan.action is node_upgrade.VersionAction.INSTALL:
            self.turns.done(limit, UPGRADE)  # no longer needed, if it asked
            return plan.running, ""
        if plan.upgrade is None and plan.target != plan.running:
            if info.upgrade_turn != self.unit.name:
                return plan.running, f"; upgrade to {plan.target} waits for its turn"
        upgrade = plan.start()
        reason = f"Kubernetes upgrade to {upgrade.target}"
        # a node an earlier revision drained without a turn finishes what it started
        if not self.turns.request(reason, limit, UPGRADE) and "drain" not in upgrade.done:
            notes.append(ops.WaitingStatus(self.turns.waiting_message(reason, limit, UPGRADE)))
            return plan.running, ""
        running = self._upgrade(host, config, info, node, upgrade)
        self.turns.done(limit, UPGRADE)
        if running:
            self.unit.set_workload_version(running)
        published = node_upgrade.minor_of(info.kubernetes_version)
        if plan.target != published:  # one minor at a time
            return plan.target, f"; upgrade to {published} continues on the next update-status"
        return plan.target, ""

    def _runtime_updates(
        self, host: Host, config: WorkerConfig, node: str, notes: list[ops.StatusBase]
    ) -> None:
        """containerd/runc security updates (lib containerd.py), in a drain turn.

        A failed check is logged and asked again the next day; an update apt refuses
        keeps the node cordoned and the turn (Blocked), as a failed driver update does.
        """
        now, limit = self.wall_clock(), config.max_parallel_reboots
        ask, refresh = containerd.updates_due(
            self._stored.runtime_checked, now, upgrading=self._upgrading
        )
        if ask:
            if refresh:
                self._stored.runtime_checked = now
            try:
                self._stored.runtime_pending = containerd.pending_updates(host, refresh=refresh)
            except apt.AptError as e:
                logger.warning("cannot check for containerd/runc updates: %s", e)
        pending = dict(self._stored.runtime_pending)
        if not pending:
            self.turns.done(limit, RUNTIME)  # no longer needed, if it asked
            return
        reason = containerd.pending_message(pending)
        if not self.turns.request(reason, limit, RUNTIME) and not self._stored.runtime_cordoned:
            notes.append(ops.WaitingStatus(self.turns.waiting_message(reason, limit, RUNTIME)))
            return
        with self._node_kube(host, reason) as kube, _api_errors_fail_the_hook():
            cordoned = worker.drain_for_reboot(
                kube, node, config.drain_timeout, clock=self.drain_clock, sleep=self.drain_sleep
            )
            self._stored.runtime_cordoned = cordoned or self._stored.runtime_cordoned
            try:
                if not containerd.update(host, pending):  # installed by an earlier try
                    host.run(SYSTEMCTL, "restart", "containerd")
            except apt.AptError as e:
                raise StatusError.blocked(
                    f"node {node} stays cordoned; containerd/runc update failed: "
                    f"{e.package}: {e.detail}"
                ) from None
            except CommandError as e:  # retried from the restart on the next hook
                raise StatusError.waiting(
                    f"node {node} stays cordoned; containerd did not restart after its "
                    f"update: {e.last_line}"
                ) from None
            if self._stored.runtime_cordoned and gpu_health.uncordon(host, kube, node):
                logger.info("containerd/runc updated (%s); uncordoned node %s", reason, node)
        self._stored.runtime_cordoned = False
        self._stored.runtime_pending = {}
        self.turns.done(limit, RUNTIME)

    def _upgrade(
        self,
        host: Host,
        config: WorkerConfig,
        info: JoinInfo,
        node: str,
        upgrade: node_upgrade.Upgrade,
    ) -> str | None:
        """Upgrade this node to `upgrade.target`, resuming a partial upgrade; kubelet's version.

        kubeadm, package and kubelet failures wait (retried on the next event, from the
        step that failed); an API error during the drain or the uncordon fails the hook,
        as on the reboot path, and the next hook resumes from the same step.
        """
        waiting_for = f"upgrading node {node} to Kubernetes {node_upgrade.shown(upgrade.target)}"
        with (
            self._node_kube(host, waiting_for) as kube,
            _api_errors_fail_the_hook(),
            on_error(ops.WaitingStatus, node_upgrade.UpgradeError),
        ):
            return node_upgrade.run_upgrade(
                host,
                kube,
                node,
                upgrade,
                mirror=config.mirror,
                drain_timeout=config.drain_timeout,
                clock=self.drain_clock,
                sleep=self.drain_sleep,
            )

    def _proxy(self, host: Host, info: JoinInfo) -> None:
        """Point this node's API proxy (the cluster's control-plane endpoint) at the servers."""
        with status_of(api_proxy.ProxyError):
            api_proxy.configure(host, info.api_servers, api_proxy.metrics_access(host))

    def _node_state(
        self,
        host: Host,
        info: JoinInfo,
        node: str,
        config: WorkerConfig,
        state: gpu_node.GpuState,
        note: str,
        notes: list[ops.StatusBase],
    ) -> ops.StatusBase:
        """Label (and for GPUs taint) the Node, then its MIG layout; the node's status.

        Waiting while the Node cannot be labelled (an API error, not registered yet), and
        while it is not Ready (kubelet's reason): Active means the node runs pods. The
        GPU taint the Node lacks (or carries against `gpu-taint`) is asked of the control
        plane (`self._taint`, published after this step).
        """
        plugin = gpu_labels.PluginConfig(info.mig_strategy, info.gpu_time_slicing_replicas)
        self._taint = self._quarantine = None
        current: dict | None = None
        with self._node_kube(host, f"cannot label node {node}") as kube:
            failed = f"cannot label node {node}: {{error.status}} {{error.reason}}"
            with on_error(ops.WaitingStatus, KubeError, message=failed):
                registered = gpu_node.label_node(kube, node, state, config, plugin)
                current = kube.get("v1", "Node", node) if registered else None
            if current is None:
                raise StatusError.waiting(f"waiting for node {node} to register")
            self._taint = gpu_node.taint_request(current, state, config.gpu_taint)
            self._quarantine = gpu_health.quarantine_request(host, current)
            not_ready = worker.not_ready(current)
            outcome = self._mig(kube, info, node, config, state)
        if outcome.blocked is not None:
            notes.append(ops.BlockedStatus(outcome.blocked))
        if outcome.turn_wait is not None:
            notes.append(ops.WaitingStatus(outcome.turn_wait))
        if outcome.waiting is not None:
            return ops.WaitingStatus(outcome.waiting)
        if not_ready is not None:
            return ops.WaitingStatus(f"node {node} is not Ready: {not_ready}")
        waiting = state.waiting()
        return (
            ops.WaitingStatus(waiting)
            if waiting
            else ops.ActiveStatus(state.ready_message() + note)
        )

    def _mig(
        self,
        kube: Kube,
        info: JoinInfo,
        node: str,
        config: WorkerConfig,
        state: gpu_node.GpuState,
    ) -> mig_layout.Outcome:
        """Bring the node to its `mig-profile` layout through NVIDIA's mig-manager."""
        context = mig_layout.Context(
            kube=kube,
            node=node,
            unit=self.unit.name,
            mig_strategy=info.mig_strategy,
            turns=self.turns,
            host=self.host_factory(),
            clock=self.drain_clock,
            sleep=self.drain_sleep,
            wall_clock=time.time,
        )
        progress = mig_layout.Progress(self._stored.mig_cordoned, self._stored.mig_since)
        with _api_errors_fail_the_hook():
            outcome = mig_layout.advance(context, config, state, progress)
        self._stored.mig_cordoned = outcome.progress.cordoned
        self._stored.mig_since = outcome.progress.since
        return outcome

    # -- actions -----------------------------------------------------------------------

    def _on_gpu_info(self, event: ops.ActionEvent) -> None:
        try:
            results = nvidia.read_gpu_info(self.host_factory())
        except ValueError as e:
            event.fail(str(e))
            return
        event.set_results(results)

    def _on_validate_gpu(self, event: ops.ActionEvent) -> None:
        params = event.load_params(validation.ValidateGpuParams, errors="fail")
        host = self.host_factory()
        inventory = gpu_node.detect(host)
        if not inventory.count:
            event.fail("this machine has no NVIDIA GPU: run validate-gpu on a GPU worker")
            return
        info = self.cluster.join_material()
        if info is None or not kubeadm.is_joined(host):
            event.fail(f"not joined to a cluster yet: {self.cluster.problem() or 'not joined'}")
            return
        try:
            image = params.image or self.load_config(WorkerConfig).validation_image
        except ValueError as e:
            event.fail(f"invalid config: {e}")
            return
        try:  # on this machine through containerd: no Kubernetes credential involved
            outcome = validation.validate(
                host, image, timeout=params.timeout, clock=self.drain_clock, progress=event.log
            )
        except validation.ValidationError as e:
            event.fail(str(e))
            return
        event.set_results(outcome.results())
        if not outcome.passed:
            event.fail(outcome.summary)

    def _on_gpu_health(self, event: ops.ActionEvent) -> None:
        event.set_results(gpu_health.history(self.host_factory()))

    def _on_readmit_gpu(self, event: ops.ActionEvent) -> None:
        """The CUDA check on every GPU, one at a time; all passed: the quarantine clears."""
        params = event.load_params(validation.ReadmitGpuParams, errors="fail")
        host = self.host_factory()
        held = gpu_health.quarantined(host)
        if not held:
            event.fail("no GPU of this machine is quarantined: nothing to readmit")
            return
        count = gpu_node.detect(host).count
        if not count or not kubeadm.is_joined(host):
            event.fail("this machine has no working NVIDIA GPU or has not joined a cluster")
            return
        try:
            image = self.load_config(WorkerConfig).validation_image
            for index in range(count):
                outcome = validation.validate(
                    host,
                    image,
                    timeout=params.timeout,
                    clock=self.drain_clock,
                    progress=event.log,
                    devices=str(index),
                )
                if not outcome.passed:
                    event.set_results({"gpu": str(index), **outcome.results()})
                    event.fail(f"GPU {index}: {outcome.summary}; it stays quarantined")
                    return
        except (ValueError, validation.ValidationError) as e:
            event.fail(f"{e}; it stays quarantined")
            return
        node = kubeadm.node_name(host)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.wall_clock()))
        proof = f"CUDA check passed on {count} GPUs ({image})"
        try:
            with Kube.from_kubeconfig(node_identity.kubeconfig(host)) as kube:
                cleared = gpu_health.readmit(host, kube, node, now=now, proof=proof)
        except (node_identity.NodeIdentityError, ValueError, KubeError) as e:
            event.fail(f"the checks passed but node {node} could not be readmitted: {e}")
            return
        self.cluster.publish_quarantine([])  # the leader lifts the NoExecute taint
        event.set_results(
            {
                "readmitted": ", ".join(f"GPU {q['index']} ({q['uuid']})" for q in cleared),
                "proof": proof,
                "node": f"{node}: GpuHealthy=True, uncordoned; NoExecute taint removal asked",
            }
        )

    # -- leaving -----------------------------------------------------------------------

    def _drain_timeout(self) -> int:
        try:
            return self.load_config(WorkerConfig).drain_timeout
        except ValueError as e:
            # Leaving must not stop at a config error: drain with the default instead.
            logger.warning("invalid config while leaving (%s); draining with the default", e)
            return WorkerConfig.model_fields["drain_timeout"].default

    def _leave(self) -> None:
        """Cordon + drain this unit's node, then reset it; at most once per unit."""
        if self._stored.left_cluster:
            self._statuses.add(ops.MaintenanceStatus(LEFT))
            return
        host = self.host_factory()
        message = "left the cluster"
        if kubeadm.is_joined(host):
            message = self._drain(host, kubeadm.node_name(host))
        kubeadm.reset(host)
        api_proxy.remove(host)
        self._stored.left_cluster = True
        logger.info("reset this machine: %s", message)
        self._statuses.add(ops.MaintenanceStatus(message))

    def _drain(self, host: Host, node: str) -> str:
        """Cordon + drain as this node's kubelet (it evicts the pods bound to it)."""
        timeout = self._drain_timeout()
        kube, problem = None, ""
        try:
            kube = Kube.from_kubeconfig(node_identity.kubeconfig(host))
        except (node_identity.NodeIdentityError, ValueError) as e:
            problem = str(e)
        if kube is None:
            logger.warning(
                "cannot drain node %s: no access to the Kubernetes API (%s); its pods stop "
                "with the reset and are rescheduled once Kubernetes marks the node lost",
                node,
                problem,
            )
            return f"reset node {node} without draining it: no access to the Kubernetes API"
        with kube:
            return worker.drain_for_removal(
                kube, node, timeout, clock=self.drain_clock, sleep=self.drain_sleep
            )


if __name__ == "__main__":  # pragma: nocover
    ops.main(KubernetesWorkerCharm)
