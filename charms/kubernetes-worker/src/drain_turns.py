# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""This node's drain turns: a reboot the NVIDIA driver needs, containerd/runc updates.

An ops component (the unit's stored state, the `reboots` turns, `juju-reboot`): the
charm builds it with what the steps need of the hook, never the charm, and calls its
steps from the reconcile. Each takes a drain turn (`reboot_turns.py`, at most
`max-parallel-reboots` nodes at once), cordons and drains the node as its kubelet
(`node_kube`), does its work and uncordons the node (`gpu_health.uncordon`: never while a
GPU is quarantined). What they run is in `nvidia.py`, `driver.py` and lib containerd.py.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import driver
import gpu_health
import gpu_node
import mig_layout
import node_identity
import nvidia
import ops
import reboot_turns
import worker
from charm_config import WorkerConfig
from gpu_watcher import PAUSE_DRIVER, PAUSE_FILE, pause_text
from ops.framework import BoundStoredState
from reboot_turns import RUNTIME, RebootTurns

from charms.gpu_k8s.v0 import apt, containerd, kubeadm
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import JoinInfo
from charms.gpu_k8s.v0.status import StatusError
from charms.gpu_k8s.v0.system import SYSTEMCTL, CommandError, Host

logger = logging.getLogger(__name__)

# How long the GPU health watcher's nvidia-smi polls stay paused for a driver update
# (gpu_watcher.pause_text's `longest`): apt's install (its lock waited for up to 300 s,
# lib apt.py; the download; DKMS building the modules), then Juju's reboot once the hook
# ends, which clears the pause with /run. A pause the hook outlives is still bounded.
DRIVER_PAUSE_S = 3600.0


class NodeMaintenanceError(Exception):
    """The Kubernetes API failed while this node was drained, upgraded or uncordoned."""


@contextlib.contextmanager
def api_errors_fail_the_hook() -> Iterator[None]:
    """An API error while the node is taken out of service or brought back fails the hook.

    It is not turned into a status (as `Statuses.step` would): Juju retries the hook with
    the stored state from before it, and what was done is where the retry finds it (the
    cordon mark on the Node, the upgrade record on the machine).
    """
    try:
        yield
    except KubeError as e:
        raise NodeMaintenanceError(str(e)) from e


def node_kube(host: Host, waiting_for: str) -> Kube:
    """A client acting as this node's kubelet; without one, Waiting says what waits and why.

    Everything the worker does at the API for its own node (labels, cordon, drain,
    upgrade, MIG) is done as `system:node:<name>`, which the Node authorizer and
    NodeRestriction confine to this Node and the pods bound to it (node_identity.py).
    """
    try:
        return Kube.from_kubeconfig(node_identity.kubeconfig(host))
    except (node_identity.NodeIdentityError, ValueError) as e:
        raise StatusError.waiting(f"{waiting_for}: {e}") from None


def _gpus(state: gpu_node.GpuState) -> str | None:
    """What GPUs this node has, as the leader's turns tell them apart (reboot_turns.py)."""
    if state.inventory.nvswitches:
        return reboot_turns.NVSWITCH
    return reboot_turns.GPU if state.has_gpu else None


def _failed_after_reboot(
    action: nvidia.RebootAction, started: str | None, state: gpu_node.GpuState
) -> str | None:
    """What still fails on a node back from our reboot (the leader holds others back)."""
    if action is nvidia.RebootAction.BLOCK and started is not None:
        return reboot_turns.DRIVER
    if action is nvidia.RebootAction.UNCORDON and state.pending_failed and state.pending:
        return reboot_turns.FABRIC
    return None


class DrainTurns(ops.Object):
    """The driver's reboot and the containerd/runc updates, each in a drain turn.

    `stored`: the charm's stored state (reboot_boot, reboot_cordoned, mig_cordoned,
    runtime_checked, runtime_pending, runtime_cordoned); `turns`: the `reboots` turns;
    `host`: this machine; `clock`, `sleep`: the drain's waits; `wall_clock`: when
    containerd/runc updates were last asked for.
    """

    def __init__(
        self,
        parent: ops.Object,
        *,
        stored: BoundStoredState,
        turns: RebootTurns,
        host: Callable[[], Host],
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        wall_clock: Callable[[], float],
    ):
        super().__init__(parent, "drain-turns")
        self._stored = stored
        self.turns = turns
        self._host = host
        self._clock = clock
        self._sleep = sleep
        self._wall_clock = wall_clock

    def reboot_step(
        self,
        host: Host,
        config: WorkerConfig,
        info: JoinInfo | None,
        state: gpu_node.GpuState,
        notes: list[ops.StatusBase],
    ) -> None:
        """Handle a reboot the driver needs; a StatusError when the reconcile stops here."""
        started, limit = self._stored.reboot_boot, config.max_parallel_reboots
        gpus = _gpus(state)
        if started is None and state.reboot is None:
            self.turns.describe(gpus, None)
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
        self.turns.describe(gpus, _failed_after_reboot(action, started, state))
        if action is nvidia.RebootAction.NONE:
            raise StatusError.maintenance("waiting for Juju to reboot this machine")
        if action is nvidia.RebootAction.BLOCK:
            message = nvidia.reboot_blocked_message(
                reason,
                self.model.unit.name,
                node,
                rebooted=started is not None,
                install=state.update,
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
        From the update's install to the reboot the new userspace meets the running kernel
        module and nvidia-smi answers "Driver/library version mismatch": the GPU health
        watcher's polls are paused for it (gpu_watcher.PAUSE_FILE, PAUSE_DRIVER), as a GPU
        reset pauses them, and the pause goes again on any failure before the reboot is
        asked for (no reboot comes), so a retried failing hook never keeps them paused.
        Always ends the reconcile (StatusError).
        """
        cordoned = False
        if kubeadm.is_joined(host):
            waiting_for = f"reboot needed ({reason}); cannot drain node {node} yet"
            with node_kube(host, waiting_for) as kube, api_errors_fail_the_hook():
                cordoned = worker.drain_for_reboot(
                    kube,
                    node,
                    config.drain_timeout,
                    clock=self._clock,
                    sleep=self._sleep,
                )
        self._stored.reboot_cordoned = cordoned or self._stored.reboot_cordoned
        if update:
            host.path(PAUSE_FILE).unlink(missing_ok=True)  # a fresh mtime: bounded from now
            host.write(PAUSE_FILE, pause_text(node, PAUSE_DRIVER, DRIVER_PAUSE_S))
        try:
            driver.apply_update(host, update)
            self._stored.reboot_boot = nvidia.boot_id(host)
        except apt.AptError as e:
            host.path(PAUSE_FILE).unlink(missing_ok=True)
            held = f"node {node} stays cordoned; " if cordoned else ""
            raise StatusError.blocked(f"{held}{driver.apt_blocked_message(e)}") from None
        except BaseException:  # any other failure: no reboot comes either (the hook fails)
            host.path(PAUSE_FILE).unlink(missing_ok=True)
            raise
        logger.info("rebooting for the NVIDIA driver: %s", reason)
        self.model.unit.reboot()
        raise StatusError.maintenance(f"rebooting: {reason}")

    def _fabric_after_reboot(self, state: gpu_node.GpuState, node: str) -> ops.StatusBase:
        """Blocked: back from our reboot, Fabric Manager failed; the turn stays ours."""
        message = nvidia.fabric_blocked_message(
            state.pending or "", self.model.unit.name, node, cordoned=self._stored.reboot_cordoned
        )
        return ops.BlockedStatus(message)

    def _after_reboot(self, info: JoinInfo | None, node: str, limit: int) -> None:
        """Back on a new boot with a working driver: uncordon (if we cordoned), end the turn."""
        if self._stored.reboot_cordoned:
            waiting_for = f"rebooted; cannot uncordon node {node} yet"
            with (
                node_kube(self._host(), waiting_for) as kube,
                api_errors_fail_the_hook(),
            ):
                if gpu_health.uncordon(self._host(), kube, node):
                    logger.info("driver works after the reboot; uncordoned node %s", node)
        self._stored.reboot_boot = None
        self._stored.reboot_cordoned = False
        self.turns.done(limit)

    def runtime_updates(
        self,
        host: Host,
        config: WorkerConfig,
        node: str,
        notes: list[ops.StatusBase],
        *,
        upgrading: bool,
    ) -> None:
        """containerd/runc security updates (lib containerd.py), in a drain turn.

        A failed check is logged and asked again the next day; an update apt refuses
        keeps the node cordoned and the turn (Blocked), as a failed driver update does.
        """
        now, limit = self._wall_clock(), config.max_parallel_reboots
        ask, refresh = containerd.updates_due(
            self._stored.runtime_checked, now, upgrading=upgrading
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
        with node_kube(host, reason) as kube, api_errors_fail_the_hook():
            cordoned = worker.drain_for_reboot(
                kube, node, config.drain_timeout, clock=self._clock, sleep=self._sleep
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
