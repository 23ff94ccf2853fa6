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

import logging
import time
from typing import TYPE_CHECKING

import driver
import gpu
import gpu_labels
import gpu_node
import mig_layout
import nvidia
import ops
import validation
import worker
from literals import CLUSTER, COS_AGENT, REBOOTS
from reboot_turns import RebootTurns

from charms.gpu_k8s.v0 import api_proxy, apt, drain, kubeadm
from charms.gpu_k8s.v0.cos_agent import (
    DCGM_EXPORTER_PORT,
    CosAgentProvider,
    node_jobs,
    scrape_job,
)
from charms.gpu_k8s.v0.kubernetes_cluster import ClusterRequirer, GpuInfo, JoinInfo
from charms.gpu_k8s.v0.system import CommandError, Host, machine

if TYPE_CHECKING:
    from charms.gpu_k8s.v0.kubeclient import Kube

logger = logging.getLogger(__name__)


class KubernetesWorkerCharm(ops.CharmBase):
    """A Kubernetes worker node (deployed as a CPU app and as a GPU app)."""

    _stored = ops.StoredState()
    # Time source for waits (drain, GPU validation); tests replace them to not wait.
    drain_clock = staticmethod(time.monotonic)
    drain_sleep = staticmethod(time.sleep)

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        # reboot_boot: boot id when this unit asked Juju for a reboot the driver needed;
        # reboot_cordoned: whether it cordoned its node for that reboot.
        # mig_cordoned: whether it cordoned its node to apply a MIG layout; mig_since:
        # when it handed the layout to mig-manager (time.time()).
        self._stored.set_default(
            left_cluster=False,
            reboot_boot=None,
            reboot_cordoned=False,
            mig_cordoned=False,
            mig_since=None,
        )
        self.cluster = ClusterRequirer(self, CLUSTER)
        self.turns = RebootTurns(self, REBOOTS)
        self.cos = CosAgentProvider(self, COS_AGENT, host=self.host_factory)
        self._status: ops.StatusBase | None = None
        # Waiting for a turn to reboot: reported over Active, under any other status
        self._turn_wait: str | None = None
        # A GPU problem, or a node newer than its control plane, reported over any other status
        self._blocked: str | None = None
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

    def host_factory(self) -> Host:
        """The machine this unit manages (tests return a fake one)."""
        return machine()

    # -- events ------------------------------------------------------------------------

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        if self._status is not None:
            event.add_status(self._status)
        if self._blocked is not None:
            event.add_status(ops.BlockedStatus(self._blocked))
        if self._turn_wait is not None:
            event.add_status(ops.WaitingStatus(self._turn_wait))

    def _on_cluster_departed(self, event: ops.RelationDepartedEvent) -> None:
        if event.departing_unit == self.unit:
            self._leave()
        else:
            self._reconcile(event)

    def _on_stop(self, event: ops.StopEvent) -> None:
        self._leave()

    def _reconcile(self, event: ops.EventBase) -> None:
        if self._stored.left_cluster:
            self._status = ops.MaintenanceStatus("left the cluster; this unit is being removed")
            return
        config = self.load_config(worker.WorkerConfig, errors="blocked")
        self.turns.update_grants(config.max_parallel_reboots)
        host = self.host_factory()
        info = self.cluster.join_material()
        installed = self._install(host, config, info)
        if installed is not None:  # served to a COS agent (unit_state), a pending reboot too
            self.cos.set_gauges(installed[0].gauges())
        if installed is None or not self._reboot_step(host, config, info, installed[0]):
            return
        state, plan = installed
        self._telemetry(host, state)
        if info is None or plan is None:
            self._status = ops.WaitingStatus(self.cluster.problem() or "waiting for join material")
            return
        node = kubeadm.node_name(host)
        if not self._proxy(host, info, node) or not self._join(host, info, node, config.labels):
            return
        # joined now: the kubelet's certificate lets HAProxy serve its metrics (no-op after)
        if not self._proxy(host, info, node):
            return
        self._telemetry(host, state)
        version = self._kubernetes(host, config, info, node, plan)
        if version is None:
            return
        running, note = version
        gpus = [GpuInfo(**r) for r in state.records()] or None
        self.cluster.publish_node(node, gpus, kubernetes_version=running)
        if self._label(info, node, config, state):
            waiting = state.waiting()
            self._status = (
                ops.WaitingStatus(waiting)
                if waiting
                else ops.ActiveStatus(state.ready_message() + note)
            )
            self._mig(info, node, config, state)
        self._blocked = self._blocked or state.driver_problem(self.unit.name, config.driver)

    # -- steps -------------------------------------------------------------------------

    def _telemetry(self, host: Host, state: gpu_node.GpuState) -> None:
        """What this machine's COS agent scrapes.

        kubelet through the node's HAProxy once it has its certificate; on a GPU node the
        control plane's DCGM exporter on the host network.
        """
        name = kubeadm.node_name(host)
        jobs = node_jobs(name) if api_proxy.metrics_access(host) else []
        if state.has_gpu:
            jobs.append(scrape_job("dcgm-exporter", DCGM_EXPORTER_PORT, instance=name))
        self.cos.update(jobs)

    def _install(
        self, host: Host, config: worker.WorkerConfig, info: JoinInfo | None
    ) -> tuple[gpu_node.GpuState, worker.VersionPlan | None] | None:
        """containerd, the GPU step, then kubeadm + kubelet at the control plane's version.

        Kubernetes packages are only installed here on a node that has not joined or
        already runs the control plane's minor; a joined node on another minor keeps
        them until its upgrade (`_kubernetes`). The plan is None without join material.
        """
        minor = None
        if info is not None:
            try:
                minor = worker.supported_minor(info.kubernetes_version)
            except ValueError as e:
                self._status = ops.BlockedStatus(str(e))
                return None
        plan = None
        try:
            worker.prepare(host)
            state = gpu_node.setup(host, config, worker.sandbox_image(config, info))
            if minor is not None:
                plan = self._packages(host, config, minor)
        except gpu_node.GpuSetupError as e:
            self._status = ops.BlockedStatus(str(e))
            return None
        except apt.AptError as e:
            self._status = ops.BlockedStatus(str(e))
            return None
        except ValueError as e:  # an unreachable next minor or a corrupt upgrade record
            self._status = ops.BlockedStatus(str(e))
            return None
        return state, plan

    def _packages(self, host: Host, config: worker.WorkerConfig, minor: str) -> worker.VersionPlan:
        """Plan this node's Kubernetes minor; install `minor` when the plan says so."""
        joined = kubeadm.is_joined(host)
        if not joined:
            worker.clear_upgrade(host)  # a record left by a node that was reset since
        plan = worker.plan_version(
            minor,
            joined=joined,
            installed=kubeadm.installed_minor(host),
            upgrade=worker.load_upgrade(host) if joined else None,
        )
        if plan.action is worker.VersionAction.INSTALL:
            worker.install_kubernetes(host, minor, config.mirror)
        return plan

    def _reboot_step(
        self,
        host: Host,
        config: worker.WorkerConfig,
        info: JoinInfo | None,
        state: gpu_node.GpuState,
    ) -> bool:
        """Handle a reboot the driver needs; False when the reconcile stops here."""
        started = self._stored.reboot_boot
        if started is None and state.reboot is None:
            if self._stored.reboot_cordoned:  # drained for an update that is not needed now
                return self._after_reboot(
                    info, kubeadm.node_name(host), config.max_parallel_reboots
                )
            if not self._stored.mig_cordoned:  # a MIG change in flight keeps its turn
                self.turns.done(config.max_parallel_reboots)  # no longer needed, if it asked
            return True
        node = kubeadm.node_name(host)
        action = nvidia.reboot_action(
            state.reboot,
            config.auto_reboot,
            started_at_boot=started,
            current_boot=nvidia.boot_id(host),
        )
        if action is nvidia.RebootAction.NONE:
            self._status = ops.MaintenanceStatus("waiting for Juju to reboot this machine")
            return False
        if action is nvidia.RebootAction.BLOCK:
            self._blocked = nvidia.reboot_blocked_message(
                state.reboot or "",
                self.unit.name,
                node,
                rebooted=started is not None,
                install=state.update,
            )
            return True
        if action is nvidia.RebootAction.UNCORDON:
            return self._after_reboot(info, node, config.max_parallel_reboots)
        reason, limit = state.reboot or "", config.max_parallel_reboots
        if not self.turns.request(reason, limit):
            self._turn_wait = self.turns.waiting_message(reason, limit)
            return True
        return self._drain_and_reboot(host, config, info, node, state)

    def _kube(self, info: JoinInfo | None, waiting_for: str) -> Kube | None:
        """A client for the cluster, or None with a Waiting status saying what waits."""
        from charms.gpu_k8s.v0.kubeclient import Kube

        problem = self.cluster.problem() or "no join material"
        if info is not None:
            try:
                return Kube.from_kubeconfig(info.kubeconfig)
            except ValueError as e:
                problem = f"control plane kubeconfig is unusable: {e}"
        self._status = ops.WaitingStatus(f"{waiting_for}: {problem}")
        return None

    def _drain_and_reboot(
        self,
        host: Host,
        config: worker.WorkerConfig,
        info: JoinInfo | None,
        node: str,
        state: gpu_node.GpuState,
    ) -> bool:
        """Cordon + drain the node (when joined), update the driver, reboot after this hook.

        An API error during the drain fails the hook, so Juju retries it rather than
        rebooting an undrained node; a drain timeout reboots anyway (as removal does).
        A driver update (the driver moving with a new kernel) is installed only once the
        node is drained; if apt fails, the node stays cordoned and the unit Blocked.
        """
        reason = state.reboot or ""
        cordoned = False
        if kubeadm.is_joined(host):
            kube = self._kube(info, f"reboot needed ({reason}); cannot drain node {node} yet")
            if kube is None:
                return False
            with kube:
                result = drain.drain(
                    kube,
                    node,
                    timeout=config.drain_timeout,
                    clock=self.drain_clock,
                    sleep=self.drain_sleep,
                )
            summary = worker.drain_summary(node, result, config.drain_timeout)
            if result is not None and result.remaining:
                logger.warning("%s; they stop with the reboot", summary)
            cordoned = result is not None
        self._stored.reboot_cordoned = cordoned or self._stored.reboot_cordoned
        try:
            driver.apply_update(host, state.update)
        except apt.AptError as e:
            held = f"node {node} stays cordoned; " if cordoned else ""
            self._status = ops.BlockedStatus(f"{held}{driver.apt_blocked_message(e)}")
            return False
        self._stored.reboot_boot = nvidia.boot_id(host)
        logger.info("rebooting for the NVIDIA driver: %s", reason)
        self.unit.reboot()
        self._status = ops.MaintenanceStatus(f"rebooting: {reason}")
        return False

    def _after_reboot(self, info: JoinInfo | None, node: str, limit: int) -> bool:
        """Back on a new boot with a working driver: uncordon (if we cordoned), end the turn."""
        if self._stored.reboot_cordoned:
            kube = self._kube(info, f"rebooted; cannot uncordon node {node} yet")
            if kube is None:
                return False
            with kube:
                if drain.uncordon(kube, node):
                    logger.info("driver works after the reboot; uncordoned node %s", node)
        self._stored.reboot_boot = None
        self._stored.reboot_cordoned = False
        self.turns.done(limit)
        return True

    def _kubernetes(
        self,
        host: Host,
        config: worker.WorkerConfig,
        info: JoinInfo,
        node: str,
        plan: worker.VersionPlan,
    ) -> tuple[str, str] | None:
        """The minor this node runs and a note for its status; None when the reconcile stops.

        A joined node on an older minor upgrades only in its turn (`upgrade-turn` names
        this unit), or when it has an upgrade to finish; a newer one blocks.
        """
        if plan.action is worker.VersionAction.NEWER:
            self._blocked = worker.newer_message(plan.running, plan.target)
            return plan.running, ""
        if plan.action is worker.VersionAction.INSTALL:
            return plan.running, ""
        upgrade = plan.upgrade
        if upgrade is None:
            if info.upgrade_turn != self.unit.name:
                return plan.running, f"; upgrade to {plan.target} waits for its turn"
            upgrade = worker.Upgrade(plan.running, plan.target)
        if not self._upgrade(host, config, info, node, upgrade):
            return None
        published = worker.minor_of(info.kubernetes_version)
        if upgrade.target != published:  # one minor at a time
            return upgrade.target, f"; upgrade to {published} continues on the next update-status"
        return upgrade.target, ""

    def _upgrade(
        self,
        host: Host,
        config: worker.WorkerConfig,
        info: JoinInfo,
        node: str,
        upgrade: worker.Upgrade,
    ) -> bool:
        """Upgrade this node to `upgrade.target`, resuming a partial upgrade; True when done.

        kubeadm, package and kubelet failures wait (retried on the next event, from the
        step that failed); an API error during the drain or the uncordon fails the hook,
        as on the reboot path, and the next hook resumes from the same step.
        """
        kube = self._kube(info, f"upgrading node {node} to Kubernetes {upgrade.target}")
        if kube is None:
            return False
        logger.info(
            "upgrading node %s from Kubernetes %s to %s (steps done: %s)",
            node,
            upgrade.source,
            upgrade.target,
            ", ".join(upgrade.done) or "none",
        )
        try:
            with kube:
                result = worker.upgrade_node(
                    host,
                    kube,
                    node,
                    upgrade,
                    mirror=config.mirror,
                    drain_timeout=config.drain_timeout,
                    clock=self.drain_clock,
                    sleep=self.drain_sleep,
                )
        except (kubeadm.KubeadmError, apt.AptError, CommandError) as e:
            cordoned = f"node {node} stays cordoned; " if upgrade.cordoned else ""
            logger.error("upgrade of node %s to Kubernetes %s: %s", node, upgrade.target, e)
            self._status = ops.WaitingStatus(
                f"upgrade to Kubernetes {upgrade.target} failed: {e}; {cordoned}"
                "retrying on the next update-status"
            )
            return False
        if result is not None and result.remaining:
            summary = worker.drain_summary(node, result, config.drain_timeout)
            logger.warning("%s; upgraded anyway: %s", summary, " ".join(result.remaining))
        logger.info("node %s now runs Kubernetes %s", node, upgrade.target)
        return True

    def _proxy(self, host: Host, info: JoinInfo, node: str) -> bool:
        """Point this node's API proxy (the cluster's control-plane endpoint) at the servers."""
        try:
            api_proxy.configure(host, info.api_servers, api_proxy.metrics_access(host))
        except ValueError as e:
            self._status = ops.WaitingStatus(f"control plane API servers are unusable: {e}")
            return False
        except apt.AptError as e:
            self._status = ops.BlockedStatus(f"{e}; check the machine's Ubuntu archive")
            return False
        except CommandError as e:
            self._status = ops.WaitingStatus(
                f"starting HAProxy: {e.last_line}; retrying on the next event"
            )
            return False
        return True

    def _join(self, host: Host, info: JoinInfo, node: str, labels: dict[str, str]) -> bool:
        if kubeadm.is_joined(host):
            return True
        try:
            material = worker.join_material(info.endpoint, info.ca_cert_hash, info.token)
        except ValueError as e:
            self._status = ops.WaitingStatus(f"control plane join material is invalid: {e}")
            return False
        try:
            kubeadm.join(host, material, node_name=node, labels=labels, control_plane=False)
        except kubeadm.KubeadmError as e:
            logger.error("%s", e)
            self._status = ops.WaitingStatus(f"{e}; retrying on the next update-status")
            return False
        logger.info("node %s joined the cluster at %s", node, material.endpoint)
        return True

    def _label(
        self, info: JoinInfo, node: str, config: worker.WorkerConfig, state: gpu_node.GpuState
    ) -> bool:
        """`node-labels`, GPU labels and the GPU taint on the Node; False while it cannot."""
        from charms.gpu_k8s.v0.kubeclient import Kube, KubeError

        plugin = gpu_labels.PluginConfig(info.mig_strategy, info.gpu_time_slicing_replicas)
        try:
            with Kube.from_kubeconfig(info.kubeconfig) as kube:
                done = worker.apply_labels(kube, node, config.labels)
                if done is not None:
                    gpu_node.apply_node_state(kube, node, state, config.gpu_taint, plugin)
        except ValueError as e:
            self._status = ops.WaitingStatus(f"control plane kubeconfig is unusable: {e}")
            return False
        except KubeError as e:
            self._status = ops.WaitingStatus(f"cannot label node {node}: {e.status} {e.reason}")
            return False
        except LookupError:
            done = None  # deleted between the two calls
        if done is None:
            self._status = ops.WaitingStatus(f"waiting for node {node} to register")
            return False
        return True

    def _mig(
        self, info: JoinInfo, node: str, config: worker.WorkerConfig, state: gpu_node.GpuState
    ) -> None:
        """Bring the node to its `mig-profile` layout through NVIDIA's mig-manager."""
        from charms.gpu_k8s.v0.kubeclient import Kube

        progress = mig_layout.Progress(self._stored.mig_cordoned, self._stored.mig_since)
        with Kube.from_kubeconfig(info.kubeconfig) as kube:
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
            outcome = mig_layout.advance(context, config, state, progress)
        self._stored.mig_cordoned = outcome.progress.cordoned
        self._stored.mig_since = outcome.progress.since
        if outcome.waiting is not None:
            self._status = ops.WaitingStatus(outcome.waiting)
        self._blocked = self._blocked or outcome.blocked
        self._turn_wait = self._turn_wait or outcome.turn_wait

    # -- actions -----------------------------------------------------------------------

    def _on_gpu_info(self, event: ops.ActionEvent) -> None:
        host = self.host_factory()
        report = nvidia.read_smi(host)
        enabled = any(g.mig_mode == "Enabled" for g in report.gpus)
        capable = any(g.mig_mode in ("Enabled", "Disabled") for g in report.gpus)
        try:
            results = gpu.gpu_info(
                report,
                nvidia.read_mig_devices(host) if enabled else None,
                nvidia.read_mig_profiles(host) if capable else None,
            )
        except ValueError as e:
            event.fail(str(e))
            return
        event.set_results(results)

    def _on_validate_gpu(self, event: ops.ActionEvent) -> None:
        from charms.gpu_k8s.v0.kubeclient import Kube, KubeError

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
            image = params.image or self.load_config(worker.WorkerConfig).validation_image
        except ValueError as e:
            event.fail(f"invalid config: {e}")
            return
        node = kubeadm.node_name(host)
        name = validation.validation_pod_name()
        event.log(f"running {image} on node {node} (pod {validation.VALIDATION_NAMESPACE}/{name})")
        try:
            with Kube.from_kubeconfig(info.kubeconfig) as kube:
                outcome = validation.run_validation(
                    kube,
                    node,
                    validation.VALIDATION_NAMESPACE,
                    name,
                    image=image,
                    timeout=params.timeout,
                    poll=validation.VALIDATION_POLL_S,
                    clock=self.drain_clock,
                    sleep=self.drain_sleep,
                    progress=event.log,
                )
        except ValueError as e:
            event.fail(f"control plane kubeconfig is unusable: {e}")
            return
        except KubeError as e:
            event.fail(f"Kubernetes API refused the validation pod: {e.status} {e.reason}")
            return
        event.set_results(
            {
                "passed": str(outcome.passed).lower(),
                "summary": outcome.summary,
                "output": outcome.logs or "(no output)",
            }
        )
        if not outcome.passed:
            event.fail(outcome.summary)

    # -- leaving -----------------------------------------------------------------------

    def _drain_timeout(self) -> int:
        try:
            return self.load_config(worker.WorkerConfig).drain_timeout
        except ValueError as e:
            # Leaving must not stop at a config error: drain with the default instead.
            logger.warning("invalid config while leaving (%s); draining with the default", e)
            return worker.WorkerConfig.model_fields["drain_timeout"].default

    def _leave(self) -> None:
        """Cordon + drain this unit's node, then reset it; at most once per unit."""
        if self._stored.left_cluster:
            self._status = ops.MaintenanceStatus("left the cluster; this unit is being removed")
            return
        host = self.host_factory()
        message = "left the cluster"
        if kubeadm.is_joined(host):
            message = self._drain(kubeadm.node_name(host))
        kubeadm.reset(host)
        api_proxy.remove(host)
        self._stored.left_cluster = True
        logger.info("reset this machine: %s", message)
        self._status = ops.MaintenanceStatus(message)

    def _drain(self, node: str) -> str:
        from charms.gpu_k8s.v0.kubeclient import Kube

        timeout = self._drain_timeout()
        info = self.cluster.join_material()
        kube = None
        if info is not None:
            try:
                kube = Kube.from_kubeconfig(info.kubeconfig)
            except ValueError as e:
                logger.warning("control plane kubeconfig is unusable: %s", e)
        if kube is None:
            logger.warning(
                "cannot drain node %s: no access to the Kubernetes API (%s); its pods stop "
                "with the reset and are rescheduled once Kubernetes marks the node lost",
                node,
                self.cluster.problem() or "unusable kubeconfig",
            )
            return f"reset node {node} without draining it: no access to the Kubernetes API"
        with kube:
            result = drain.drain(
                kube, node, timeout=timeout, clock=self.drain_clock, sleep=self.drain_sleep
            )
        summary = worker.drain_summary(node, result, timeout)
        if result is not None and result.remaining:
            logger.warning("%s; they stop with the reset: %s", summary, " ".join(result.remaining))
            return f"{summary}; see juju debug-log"
        logger.info("%s", summary)
        return summary


if __name__ == "__main__":  # pragma: nocover
    ops.main(KubernetesWorkerCharm)
