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
controllers recreate them elsewhere once the node is gone. An API refusal during the
drain fails the hook instead, so Juju retries it rather than resetting an undrained node.
An API that does not answer at all is not waited for when the whole application goes
(`juju destroy-model` may release the control plane's machines first, and a failed stop
hook would hold the model for ever); during a `juju remove-unit` it is asked again for a
minute, then the node is reset undrained with a warning (worker.drain_for_removal).
"""

from __future__ import annotations

import datetime
import logging
import time

import gpu_health
import gpu_labels
import gpu_node
import mig_layout
import node_identity
import node_upgrade
import ops
import worker
from charm_config import WorkerConfig
from drain_turns import DrainTurns, api_errors_fail_the_hook, node_kube
from gpu_repairs import GpuRepairs
from literals import CLUSTER, COS_AGENT, REBOOTS
from operator_actions import OperatorActions
from reboot_turns import UPGRADE, RebootTurns

from charms.gpu_k8s.v0 import api_proxy, apt, kubeadm
from charms.gpu_k8s.v0.cos_agent import (
    DCGM_EXPORTER_PORT,
    CosAgentProvider,
    node_jobs,
    scrape_job,
)
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import ClusterRequirer, GpuInfo, JoinInfo
from charms.gpu_k8s.v0.status import StatusError, Statuses, on_error, status_of
from charms.gpu_k8s.v0.system import Host, machine

logger = logging.getLogger(__name__)

LEFT = "left the cluster; this unit is being removed"
GOING = "the application is being removed; this node leaves the cluster when the unit stops"


class GpuQuarantinedEvent(ops.EventBase):
    """The GPU health watcher quarantined a GPU of this machine (gpu_watcher.py).

    Not a Juju hook: the watcher asks the unit agent for it with `juju-exec -u <unit>
    JUJU_DISPATCH_PATH=hooks/gpu-quarantined ./dispatch` (gpu_watcher.HOOK), and ops emits
    `charm.on.gpu_quarantined` for that path (ops/_main.py _Dispatcher._set_name_from_path).
    """


class WorkerEvents(ops.CharmEvents):
    """Juju's events and the watcher's `gpu_quarantined`."""

    gpu_quarantined = ops.EventSource(GpuQuarantinedEvent)


class KubernetesWorkerCharm(ops.CharmBase):
    """A Kubernetes worker node (deployed as a CPU app and as a GPU app)."""

    on = WorkerEvents()
    _stored = ops.StoredState()
    # Time source for waits (drain, GPU validation); tests replace them to not wait.
    drain_clock = staticmethod(time.monotonic)
    drain_sleep = staticmethod(time.sleep)
    # the base of the Kubernetes client's backoff between retries of one request while
    # leaving, in seconds (kubeclient.py's default; tests that take the API away set 0)
    kube_backoff = 0.5
    wall_clock = staticmethod(time.time)  # when containerd/runc updates were last asked for
    # which NVIDIA branches are still supported (driver.END_OF_LIFE); tests pin a date
    today = staticmethod(datetime.date.today)

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
        self._kubelet: str | None = None  # the version the running kubelet posts on its Node
        self.turns = RebootTurns(self, REBOOTS)
        self.drain_turns = DrainTurns(
            self,
            stored=self._stored,
            turns=self.turns,
            host=lambda: self.host_factory(),
            clock=lambda: self.drain_clock(),
            sleep=lambda seconds: self.drain_sleep(seconds),
            wall_clock=lambda: self.wall_clock(),
        )
        self.repairs = GpuRepairs(
            self,
            turns=self.turns,
            cluster=self.cluster,
            host=lambda: self.host_factory(),
            config=lambda: self.load_config(WorkerConfig),
            clock=lambda: self.drain_clock(),
            sleep=lambda seconds: self.drain_sleep(seconds),
            wall_clock=lambda: self.wall_clock(),
            mig_cordoned=lambda: bool(self._stored.mig_cordoned),
        )
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
            on[REBOOTS].relation_changed,
            on[REBOOTS].relation_departed,
            on[COS_AGENT].relation_joined,
            on[COS_AGENT].relation_changed,
            on.leader_elected,
        ):
            framework.observe(event, self._reconcile)
        framework.observe(on[CLUSTER].relation_departed, self._on_cluster_departed)
        framework.observe(on[CLUSTER].relation_broken, self._on_cluster_departed)
        framework.observe(on.stop, self._on_stop)
        framework.observe(on.gpu_quarantined, self._on_gpu_quarantined)
        framework.observe(on.collect_unit_status, self._on_collect_status)
        self.actions = actions = OperatorActions(
            self,
            host=lambda: self.host_factory(),
            cluster=self.cluster,
            config=lambda: self.load_config(WorkerConfig),
            clock=lambda: self.drain_clock(),
            sleep=lambda seconds: self.drain_sleep(seconds),
            wall_clock=lambda: self.wall_clock(),
            mig_cordoned=lambda: bool(self._stored.mig_cordoned),
        )
        framework.observe(on.gpu_info_action, actions.on_gpu_info)
        framework.observe(on.validate_gpu_action, actions.on_validate_gpu)
        framework.observe(on.gpu_health_action, actions.on_gpu_health)
        framework.observe(on.readmit_gpu_action, actions.on_readmit_gpu)
        framework.observe(on.repair_gpu_action, self.repairs.on_repair_gpu)

    def host_factory(self) -> Host:
        """The machine this unit manages (tests return a fake one)."""
        return machine()

    # -- events ------------------------------------------------------------------------

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        self._statuses.report(event)

    def _on_cluster_departed(
        self, event: ops.RelationDepartedEvent | ops.RelationBrokenEvent
    ) -> None:
        """Leave on this unit's own departure; converge on another's, unless all go.

        A dying unit leaves its relations (departed, broken) before its stop hook. When
        the whole application goes (planned units 0: `juju destroy-model`, `juju
        remove-application`), converging then would only start what the stop undoes,
        and a maintenance step whose API error fails the hook (an upgrade, a repair,
        a MIG change in its turn) would fail it for ever once the control plane's
        machines are gone, holding the model: nothing is started, stop drains and resets.
        """
        if isinstance(event, ops.RelationDepartedEvent) and event.departing_unit == self.unit:
            self._leave()
        elif not self._stored.left_cluster and self.app.planned_units() == 0:
            logger.info("the application is being removed: %s changes nothing", event.handle.kind)
            self._statuses.add(ops.MaintenanceStatus(GOING))
        else:
            self._reconcile(event)

    def _on_stop(self, event: ops.StopEvent) -> None:
        self._leave()

    def _on_gpu_quarantined(self, event: GpuQuarantinedEvent) -> None:
        """Ask the control plane for the NoExecute taint now, and say what comes next.

        Only `gpu-quarantine` and the status: Juju shares relation data when the hook
        ends, so the repair (a drain, a reset or a reboot, the gate: minutes) is left to
        the next hook (`_gpu_health`), and this one ends within seconds. The control
        plane's leader taints the Node in its `workers` relation-changed (fleet.py).
        """
        if self._stored.left_cluster:
            return
        host = self.host_factory()
        held = gpu_health.quarantined(host)
        request = gpu_health.quarantine_request(host, None)  # the UUIDs, None: readmitted
        if not held or request is None:
            return
        try:
            self.cluster.publish_quarantine(request)
        except ValueError as e:  # not a GPU UUID or PCI address: a state file edited by hand
            logger.warning("cannot ask for the quarantine taint: %s", e)
        try:
            config = self.load_config(WorkerConfig, errors="raise")
        except ValueError:
            config = None  # the next reconcile blocks on it
        node = kubeadm.node_name(host)
        self._statuses.add(self.repairs.announce(host, config, node, held))
        logger.info("GPU quarantine taint asked for node %s: %s", node, ", ".join(request))

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
        self.drain_turns.reboot_step(host, config, info, state, notes)
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
        self._kubelet_serving_certificate(host)
        self._telemetry(host, state)
        if state.has_gpu:  # a repair holds its turn before an upgrade or update takes one
            self._gpu_health(host, node, config, notes)
        running, note = self._kubernetes(host, config, info, node, plan, notes)
        self.drain_turns.runtime_updates(host, config, node, notes, upgrading=self._upgrading)
        gpus = [GpuInfo(**r) for r in state.records()] or None
        with self._statuses.step():  # a node that is not labelled yet still reports below
            note += gpu_health.repair_note(host, self.wall_clock()) if state.has_gpu else ""
            self._statuses.add(self._node_state(host, info, node, config, state, note, notes))
        if self._kubelet is not None:  # what runs, not the package on disk
            self.unit.set_workload_version(self._kubelet)
            running = node_upgrade.minor_of(self._kubelet)
        if plan.action is node_upgrade.VersionAction.INSTALL:  # no upgrade moves it now
            node_upgrade.plan_restart(host, self._kubelet)  # taken in turn from the next hook
        self.cluster.publish_node(
            node,
            gpus,
            kubernetes_version=running,
            node_identity=True,
            gpu_taint=self._taint,
            gpu_quarantine=self._quarantine,
        )
        problem = state.driver_problem(self.unit.name, node, config.driver)
        if problem is not None:
            notes.append(ops.BlockedStatus(problem))

    # -- steps -------------------------------------------------------------------------

    def _gpu_health(
        self, host: Host, node: str, config: WorkerConfig, notes: list[ops.StatusBase]
    ) -> None:
        """Keep the GPU health watcher running; repair a quarantined GPU (gpu_repairs.py).

        Blocked while a GPU stays quarantined with no automatic repair under way.
        """
        with self._statuses.step(), on_error(ops.WaitingStatus, gpu_health.GpuHealthError):
            if gpu_health.ensure(host, node, config.gpu_xid_escalation, self.unit.name):
                logger.info("GPU health watcher (re)started")
        found = gpu_health.quarantined(host)
        status = self.repairs.step(host, config, node, found)  # Juju reboots: the hook ends
        if status is not None:
            notes.append(status)
        elif found:
            message = gpu_health.status_message(node, self.unit.name, found)
            notes.append(ops.BlockedStatus(message or ""))

    def _kubelet_serving_certificate(self, host: Host) -> None:
        """Within 30 days of its expiry, kubelet's serving certificate is renewed.

        A new pair of kubelet's shape in its files, which the running kubelet loads: no
        kubelet restart (kubeadm.rotate_kubelet_serving_certificate).
        """
        now = datetime.datetime.fromtimestamp(self.wall_clock(), datetime.timezone.utc)
        kubeadm.rotate_kubelet_serving_certificate(host, now)

    def _telemetry(self, host: Host, state: gpu_node.GpuState) -> None:
        """What this machine's COS agent scrapes: only targets that answer (review F-19).

        Every job is a target that `ScrapeTargetDown` (cos_agent.py, 15 minutes) watches, so
        none is published before its server runs: the kubelet through the node's HAProxy
        once it has its certificate; on a GPU node that joined, the GPU health watcher
        (`_gpu_health` starts it then), and the control plane's DCGM exporter (host
        network) once pods can use the GPUs: its DaemonSet runs only on nodes labelled
        `nvidia.com/gpu.present=true`, which this hook labels exactly then
        (`GpuState.labels`), not while the driver is missing, broken or waits for a
        reboot, or Fabric Manager is pending.
        """
        name = kubeadm.node_name(host)
        jobs = node_jobs(name) if api_proxy.metrics_access(host) else []
        if state.has_gpu and kubeadm.is_joined(host):
            if state.ready:
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
            state = gpu_node.setup(
                host, config, worker.sandbox_image(config, info), today=self.today()
            )
            plan = (
                None if minor is None else node_upgrade.plan_kubernetes(host, minor, config.mirror)
            )
        return state, plan

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
        self._upgrade(host, config, info, node, upgrade)
        self.turns.done(limit, UPGRADE)
        published = node_upgrade.minor_of(info.kubernetes_version)
        if plan.target != published:  # one minor at a time
            return plan.target, f"; upgrade to {published} continues on the next update-status"
        return plan.target, ""

    def _upgrade(
        self,
        host: Host,
        config: WorkerConfig,
        info: JoinInfo,
        node: str,
        upgrade: node_upgrade.Upgrade,
    ) -> None:
        """Upgrade this node to `upgrade.target`, resuming a partial upgrade.

        kubeadm, package and kubelet failures wait (retried on the next event, from the
        step that failed); an API error during the drain or the uncordon fails the hook,
        as on the reboot path, and the next hook resumes from the same step.
        """
        waiting_for = f"upgrading node {node} to Kubernetes {node_upgrade.shown(upgrade.target)}"
        with (
            node_kube(host, waiting_for) as kube,
            api_errors_fail_the_hook(),
            on_error(ops.WaitingStatus, node_upgrade.UpgradeError),
        ):
            node_upgrade.run_upgrade(
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
        self._taint = self._quarantine = self._kubelet = None
        current: dict | None = None
        with node_kube(host, f"cannot label node {node}") as kube:
            failed = f"cannot label node {node}: {{error.status}} {{error.reason}}"
            with on_error(ops.WaitingStatus, KubeError, message=failed):
                registered = gpu_node.label_node(kube, node, state, config, plugin)
                current = kube.get("v1", "Node", node) if registered else None
            if current is None:
                raise StatusError.waiting(f"waiting for node {node} to register")
            self._kubelet = node_upgrade.running_version(current)
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
        with api_errors_fail_the_hook():
            outcome = mig_layout.advance(context, config, state, progress)
        self._stored.mig_cordoned = outcome.progress.cordoned
        self._stored.mig_since = outcome.progress.since
        return outcome

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
            kube = Kube.from_kubeconfig(node_identity.kubeconfig(host), backoff=self.kube_backoff)
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
        # Juju's goal state names every unit of a dying application `dying` (juju/juju
        # apiserver/facades/agent/uniter goalStateUnits), and ops counts the others
        # (ops/model.py `planned_units`): 0 while `juju remove-application` or `juju
        # destroy-model` takes them all, or `juju remove-unit` the last one. Then an
        # unreachable API is not waited for: in destroy-model the control plane skips its
        # reset and its machines may be released first, and a stop hook that failed for
        # ever would hold the model (Juju removes no unit with a failed hook without
        # --force: cmd/juju/application/removeunit.go, cmd/juju/model/destroy.go).
        everyone_leaves = self.app.planned_units() == 0
        with kube:
            return worker.drain_for_removal(
                kube,
                node,
                timeout,
                everyone_leaves=everyone_leaves,
                clock=self.drain_clock,
                sleep=self.drain_sleep,
            )


if __name__ == "__main__":  # pragma: nocover
    ops.main(KubernetesWorkerCharm)
