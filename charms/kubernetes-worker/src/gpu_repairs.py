# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""A quarantined GPU repaired and proven through Juju (issue 32 items 3-5).

An ops component (the `reboots` turns, `juju-reboot`, the `repair-gpu` action, the
hook's availability zone): the charm builds it with what it needs of the hook and calls
`step` from its reconcile on a joined GPU node. With `gpu-auto-repair` other than `off`,
a unit whose GPU the watcher quarantined takes a turn in the one turn mechanism
(`reboot_turns.py`, purpose `repair`: never more than `max-parallel-reboots` nodes
drained at once, with driver reboots, upgrades, runtime updates and MIG changes), drains
its node as its kubelet, tries a GPU reset where the catalog says one suffices (its GPU clients
paused meanwhile: gpu_repair.gpu_clients_paused), else reboots through Juju
(gpu_repair.py). Then the gate (gpu_gate.py) on every GPU; only if
it passes: the watcher's state cleared, GpuHealthy=True, the cordon lifted, the
NoExecute taint's removal asked of the control plane, the turn given back, the repair
recorded (gpu_health.py keeps the history). A failed repair is recorded too; two within
24 hours leave the node cordoned and the unit Blocked with the commands that replace
the machine. A gate that could not run (gpu_gate.PullError: its images cannot be pulled,
the registry's fault; validation.CtrMissingError: no containerd client on the machine yet;
any validation.ValidationError: the check could not run, never the GPU's answer) is no
failed repair: the quarantine stays, the unit says so, the turn is given back and the
next hook (whose reconcile installs containerd first) proves again, without repairing
again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import NoReturn

import gpu_gate
import gpu_health
import gpu_node
import gpu_repair
import mig
import nvidia
import ops
import validation
import worker
from charm_config import RepairGpuParams, WorkerConfig
from drain_turns import NodeMaintenanceError, api_errors_fail_the_hook, node_kube
from gpu_watcher import PAUSE_GATE, PAUSE_RESET
from reboot_turns import REPAIR, RebootTurns

from charms.gpu_k8s.v0 import kubeadm
from charms.gpu_k8s.v0.kubeclient import KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import ClusterRequirer
from charms.gpu_k8s.v0.status import StatusError
from charms.gpu_k8s.v0.system import Host

logger = logging.getLogger(__name__)

HOOK_GATE_TIMEOUT = 600  # seconds per gate container in a hook
REBOOT_ASKED = "reboot-asked"  # repair-gpu left a reboot to the next hook
# the repair (`gate:reset`, `gate:reboot`) is done but its gate's images could not be
# pulled: the next hook pulls and proves again, with no new repair and no failure counted
GATE_PENDING = "gate:"


class GpuRepairs(ops.Object):
    """Repairs of this machine's quarantined GPUs, in turns; the `repair-gpu` action.

    `turns`: the `reboots` turns; `cluster`: the `cluster` relation (the taint's removal
    is asked there); `host`: this machine; `config`: the charm's config (ValueError:
    invalid); `clock`, `sleep`: the drain's and the gate's waits; `wall_clock`: repair
    times; `mig_cordoned`: this unit cordoned the node for a MIG change still under way
    (gpu_health.readmit leaves that cordon to it).
    """

    def __init__(
        self,
        parent: ops.Object,
        *,
        turns: RebootTurns,
        cluster: ClusterRequirer,
        host: Callable[[], Host],
        config: Callable[[], WorkerConfig],
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        wall_clock: Callable[[], float],
        mig_cordoned: Callable[[], bool],
    ):
        super().__init__(parent, "gpu-repairs")
        self._mig_cordoned = mig_cordoned
        self.turns = turns
        self._cluster = cluster
        self._host = host
        self._config = config
        self._clock = clock
        self._sleep = sleep
        self._wall_clock = wall_clock

    # -- the reconcile's step ------------------------------------------------------------

    def step(
        self, host: Host, config: WorkerConfig, node: str, held: list[dict]
    ) -> ops.StatusBase | None:
        """Advance the repair of the quarantined GPUs `held`; the unit's status for it.

        None: nothing is repaired automatically (gpu-auto-repair=off, a fault NVIDIA
        only supports by hand): the quarantine's Blocked status stays. Raises
        StatusError.maintenance while Juju reboots the machine for a repair.
        """
        limit, now = config.max_parallel_reboots, self._wall_clock()
        if gpu_repair.paused(host):  # a hook killed mid-pause left its GPU clients paused
            with node_kube(host, f"cannot resume the GPU clients of node {node}") as kube:
                with api_errors_fail_the_hook():
                    gpu_repair.resume_gpu_clients(host, kube, node)
        progress = gpu_repair.load_progress(host)
        if not held:
            if progress is not None:
                gpu_repair.clear_progress(host)
            self.turns.done(limit, REPAIR)  # no longer needed, if it asked
            return None
        boot = nvidia.boot_id(host)
        if progress and progress.get("method") == gpu_repair.REBOOT:
            if progress.get("boot") == boot:
                raise StatusError.maintenance("waiting for Juju to reboot this machine")
            gpu_repair.clear_progress(host)  # back on a new boot: prove it
            return self._prove(host, config, node, held, gpu_repair.REBOOT, "rebooted")
        pending = str((progress or {}).get("method") or "")
        if pending.startswith(GATE_PENDING):  # repaired; the gate waits for its images
            method = pending.removeprefix(GATE_PENDING)
            said = f"{method} done at {progress.get('started')}" if progress else method
            return self._prove(host, config, node, held, method, said)
        records = gpu_health.repairs(host)
        asked = progress is not None and progress.get("method") == REBOOT_ASKED
        if gpu_repair.escalated(records, now) and not asked:
            self.turns.done(limit, REPAIR)
            return self._escalation(node, held, records, now)
        unproven = None if asked else self._unproven(host, node, held, records)
        if unproven is not None:  # the layout is as the last gate found it: no new repair
            self.turns.done(limit, REPAIR)
            return unproven
        method = (
            gpu_repair.REBOOT
            if asked
            else gpu_repair.choose(held, config.gpu_auto_repair, records, now)
        )
        method, blocked = self._possible(host, node, held, config.gpu_auto_repair, method, records)
        if blocked is not None:
            self.turns.done(limit, REPAIR)
            return blocked
        return None if method is None else self._repair(host, config, node, held, method)

    @staticmethod
    def _possible(
        host: Host,
        node: str,
        held: list[dict],
        mode: str,
        method: str | None,
        records: list[dict] | None = None,
    ) -> tuple[str | None, ops.StatusBase | None]:
        """`method`, or a reboot where no reset is possible now; Blocked without reboots.

        gpu_repair.reset_blocker says whether a reset is possible; `mode` whether a reboot
        is allowed instead. Under `reset`, a reset refused before while its holder is still
        there (gpu_repair.still_held) is not tried again: no new drain, no new pause.
        """
        if method != gpu_repair.RESET:
            return method, None
        blocker = gpu_repair.reset_blocker(host, gpu_node.detect(host).nvswitches)
        held_by = (
            None if mode != gpu_repair.RESET else gpu_repair.still_held(host, held, records or [])
        )
        if held_by is not None:
            return None, ops.BlockedStatus(gpu_repair.reset_refused_message(node, held, held_by))
        if blocker is None:
            return method, None
        if mode == gpu_repair.REBOOT:
            logger.info("no GPU reset: %s; a reboot instead", blocker)
            return gpu_repair.REBOOT, None
        return None, ops.BlockedStatus(gpu_repair.reset_blocked_message(node, held, blocker))

    def announce(
        self, host: Host, config: WorkerConfig | None, node: str, held: list[dict]
    ) -> ops.StatusBase:
        """The unit's status right after a quarantine (the `gpu-quarantined` hook).

        That hook only asks for the taint (Juju shares relation data when a hook ends, and
        a repair takes minutes): it says which GPU and what comes next, as `step` would
        decide it, changing nothing. `config` None: invalid (no automatic repair said).
        """
        records, now = gpu_health.repairs(host), self._wall_clock()
        if gpu_repair.escalated(records, now):
            return self._escalation(node, held, records, now)
        unproven = self._unproven(host, node, held, records)
        if unproven is not None:
            return unproven
        mode = "off" if config is None else config.gpu_auto_repair
        method, blocked = self._possible(
            host, node, held, mode, gpu_repair.choose(held, mode, records, now)
        )
        if blocked is not None:
            return blocked
        if method is None:
            return ops.BlockedStatus(
                gpu_health.status_message(node, self.model.unit.name, held) or ""
            )
        return ops.WaitingStatus(gpu_health.repair_pending_message(node, held, method))

    def _unproven(
        self, host: Host, node: str, held: list[dict], records: list[dict]
    ) -> ops.StatusBase | None:
        """Blocked while the last gate was unproven and the layout still has no MIG device."""
        bare = gpu_repair.still_bare(host, held, records, gpu_node.detect(host).count)
        if bare is None:
            return None
        return ops.BlockedStatus(gpu_repair.unproven_message(node, self.model.app.name, bare))

    def _escalation(
        self, node: str, held: list[dict], records: list[dict], now: float
    ) -> ops.StatusBase:
        """Blocked with the commands that replace the machine, and the reboot if none was tried.

        The reboot is what `repair-gpu` would do now (gpu_repair.choose as the action calls it).
        """
        failures = gpu_repair.recent_failures(records, now)
        zone = os.environ.get("JUJU_AVAILABILITY_ZONE")
        app, unit = self.model.app.name, self.model.unit.name
        untried = gpu_repair.choose(held, gpu_repair.REBOOT, records, now) == gpu_repair.REBOOT
        untried = untried and all(f.get("method") != gpu_repair.REBOOT for f in failures)
        return ops.BlockedStatus(
            gpu_repair.escalation_message(node, unit, app, zone, failures, reboot_untried=untried)
        )

    def _repair(
        self, host: Host, config: WorkerConfig, node: str, held: list[dict], method: str
    ) -> ops.StatusBase:
        """In a turn: drain, reset (then the gate) or reboot (the gate on the next boot)."""
        limit, first = config.max_parallel_reboots, held[0]
        reason = f"GPU {first.get('index')} ({first.get('uuid')}) repair by {method}"
        if not self.turns.request(reason, limit, REPAIR):
            return ops.WaitingStatus(self.turns.waiting_message(reason, limit, REPAIR))
        self._drain(host, config, node, reason)
        if method == gpu_repair.RESET:
            done = self._reset(host, node, held, reason)
            if done.done:
                return self._prove(host, config, node, held, gpu_repair.RESET, done.said)
            if config.gpu_auto_repair != gpu_repair.REBOOT:
                return self._reset_failed(host, limit, node, held, done)
            # With `reboot` any refusal is followed by the reboot, and the gate judges it:
            # none ran, no failed repair (whatever holds the GPU ends with the reboot); a
            # reset nvidia-smi did not answer (a hung driver) is a failed one.
            result = "failed" if done.hung else gpu_repair.REFUSED
            self._record_failure(host, held, gpu_repair.RESET, done.said, result)
        self._reboot(host, node, held, reason)

    def _reset_failed(
        self, host: Host, limit: int, node: str, held: list[dict], done: gpu_repair.Reset
    ) -> ops.StatusBase:
        """Under `reset`: the unit's status after a reset that did not run or did not work.

        Refused because something holds the GPU: none ran, no failed repair (which would
        count toward escalation); the operator stops it, and no reset is tried while it
        holds (gpu_repair.still_held). A holder stuck in the kernel (gpu_repair.unkillable,
        watched here) or a hung driver (gpu_repair.Reset.hung) makes it a failed repair
        that only a reboot repairs: said, counted, and tried again at the next hook (the
        holder may be gone), then escalated.
        """
        if done.holders is not None:
            done = gpu_repair.watch_holders(host, held, done, sleep=self._sleep)
        refused = done.holders is not None and not done.stuck and not done.hung
        result = gpu_repair.REFUSED if refused else "failed"
        self._record_failure(host, held, gpu_repair.RESET, done.said, result=result)
        if done.holders is None and not done.hung:
            return ops.WaitingStatus(f"node {node} stays cordoned: {done.said}; retried")
        self.turns.done(limit, REPAIR)  # the node stays cordoned
        if refused:
            return ops.BlockedStatus(gpu_repair.reset_refused_message(node, held, done))
        records, now = gpu_health.repairs(host), self._wall_clock()
        if gpu_repair.escalated(records, now):
            return self._escalation(node, held, records, now)
        unit = self.model.unit.name
        return ops.BlockedStatus(gpu_repair.unkillable_message(node, unit, held, done))

    def _drain(self, host: Host, config: WorkerConfig, node: str, reason: str) -> None:
        with node_kube(host, f"{reason}: cannot drain node {node}") as kube:
            with api_errors_fail_the_hook():
                worker.drain_for_reboot(
                    kube, node, config.drain_timeout, clock=self._clock, sleep=self._sleep
                )

    def _reset(self, host: Host, node: str, held: list[dict], reason: str) -> gpu_repair.Reset:
        """The reset with the node's GPU clients paused (gpu_repair.gpu_clients_paused)."""
        paused = f"{reason}: {gpu_repair.cannot_pause(node, PAUSE_RESET)}"
        with node_kube(host, paused) as kube:
            with api_errors_fail_the_hook():
                gpu_repair.forget_mig_answer(kube, node)  # its pod is paused too
                with gpu_repair.gpu_clients_paused(
                    host,
                    kube,
                    node,
                    purpose=PAUSE_RESET,
                    clock=self._clock,
                    sleep=self._sleep,
                ) as left:
                    done = gpu_repair.reset(host, held)
        if done.holders is None:
            return done
        pods = tuple(c for c in left if c.startswith("pod "))  # they did not leave in time
        return done._replace(holders=(*pods, *done.holders))

    def _reboot(self, host: Host, node: str, held: list[dict], reason: str) -> NoReturn:
        with node_kube(host, f"{reason}: cannot read node {node}'s MIG layout") as kube:
            with api_errors_fail_the_hook():
                gpu_repair.forget_mig_answer(kube, node)
        gpu_repair.save_progress(
            host,
            method=gpu_repair.REBOOT,
            boot=nvidia.boot_id(host),
            started=gpu_repair.iso(self._wall_clock()),
            gpus=[str(q.get("uuid")) for q in held],
        )
        logger.info("rebooting to repair: %s", reason)
        self.model.unit.reboot()
        raise StatusError.maintenance(f"rebooting: {reason}")

    def _record_failure(
        self, host: Host, held: list[dict], method: str, detail: str, result: str = "failed"
    ) -> None:
        now = gpu_repair.iso(self._wall_clock())
        gpu_health.record_repairs(
            host,
            gpu_health.repair_records(
                held, now=now, method=method, result=result, detail=detail, gate={}
            ),
        )

    def _prove(
        self,
        host: Host,
        config: WorkerConfig,
        node: str,
        held: list[dict],
        method: str,
        said: str,
        *,
        timeout: float = HOOK_GATE_TIMEOUT,
        progress: Callable[[str], None] = lambda line: None,
        mig_wait_s: float = 0.0,
    ) -> ops.StatusBase:
        """The gate on every GPU; readmitted when it passes, else the failure recorded.

        On a node with a MIG layout the gate first waits for mig-manager to apply it again
        after the repair (its devices do not survive a reboot, mig.GATE_WAIT_S; a reset
        pauses mig-manager with the other GPU clients, and its new pod checks the layout):
        at most `mig_wait_s` here (the action's), then at each hook (gpu_repair.mig_wait),
        GATE_WAIT_S in all. The unit says so meanwhile, the node stays cordoned and the
        repair keeps its turn. A wait is no failed repair; one that ends in
        mig-manager's `failed` or past GATE_WAIT_S is (the gate's `mig` check): the node
        could not be brought back in its layout, and two such within 24 hours escalate
        like any failed repair, since a mig-manager that does not come back on one node
        while it does on others is that node's problem.
        """
        inventory = gpu_node.detect(host)
        gate_started = self._wall_clock()  # what the gate proves: the quarantines held by then
        now = gpu_repair.iso(gate_started)
        missing = [q for q in held if not str(q.get("index", "")).isdigit()]
        missing += [
            q
            for q in held
            if str(q.get("index", "")).isdigit() and int(q["index"]) >= inventory.count
        ]
        detail = f"GPU {missing[0].get('index')} is not on the machine" if missing else ""
        # by UUID: nvidia-smi numbers the GPUs it finds from 0, so another GPU may now hold
        # a lost one's index (None: nvidia-smi failed, the gate says what is wrong)
        found = None if missing else nvidia.read_gpu_uuids(host)
        gone = [
            q
            for q in held
            if found is not None
            and str(q.get("uuid")).startswith("GPU-")
            and q["uuid"] not in found
        ]
        if gone:
            detail = f"GPU {gone[0].get('index')} ({gone[0].get('uuid')}) is not on the machine"
        if detail:  # fell off the bus for good: nothing to prove it on
            gpu_repair.clear_progress(host)
            detail += f" after the {method}"
            detail += ": nvidia-smi does not list its UUID" if gone else ""
            self._record_failure(host, held, method, detail)
            return ops.WaitingStatus(f"node {node} stays cordoned: {detail}")
        saved = gpu_repair.load_progress(host) or {}
        since = gpu_health.epoch(saved.get("mig_since"))
        waited = 0.0 if since is None else max(0.0, self._wall_clock() - since)
        try:
            with node_kube(host, gpu_repair.cannot_pause(node, PAUSE_GATE)) as kube:
                with api_errors_fail_the_hook():
                    ready = gpu_repair.mig_wait(
                        host,
                        kube,
                        node,
                        waited=waited,
                        wait_s=mig_wait_s,
                        clock=self._clock,
                        sleep=self._sleep,
                        progress=progress,
                    )
                    if ready.act is mig.Act.WAIT:  # the next hook reads it again
                        gpu_repair.save_progress(
                            host,
                            method=f"{GATE_PENDING}{method}",
                            boot=nvidia.boot_id(host),
                            started=str(saved.get("started") or now),
                            gpus=[str(q.get("uuid")) for q in held],
                            mig_since=gpu_repair.iso(self._wall_clock() - waited),
                        )
                        logger.info("node %s stays cordoned: %s", node, ready.message)
                        return ops.WaitingStatus(f"node {node} stays cordoned: {ready.message}")
                    if ready.act is mig.Act.FAILED:  # a failed repair (the docstring)
                        failed = gpu_gate.Check("mig", False, ready.message)
                        result = gpu_gate.GateResult((failed,))
                    else:
                        result = gpu_repair.gate(
                            host,
                            kube,
                            node,
                            inventory,
                            config.gate_images,
                            timeout=timeout,
                            clock=self._clock,
                            sleep=self._sleep,
                            progress=progress,
                        )
        except validation.ValidationError as e:  # not the GPU's answer: not counted
            gpu_repair.save_progress(
                host,
                method=f"{GATE_PENDING}{method}",
                boot=nvidia.boot_id(host),
                started=now,
                gpus=[str(q.get("uuid")) for q in held],
            )
            self.turns.done(config.max_parallel_reboots, REPAIR)  # the node stays cordoned
            logger.warning("repair gate of node %s not run: %s", node, e)
            again = "pulled and run" if isinstance(e, gpu_gate.PullError) else "run"
            return ops.WaitingStatus(
                f"node {node} stays cordoned: the {method} is done but the gate could not "
                f"run: {e}; {again} again at the next hook (not a failed repair)"
            )
        gpu_repair.clear_progress(host)  # the gate ran: no pending gate left
        unproven = result.unproven  # no MIG device to run on: no failed repair
        records = gpu_health.repair_records(
            held,
            now=now,
            method=method,
            result="ok" if result.passed else gpu_repair.UNPROVEN if unproven else "failed",
            detail=said if result.passed else result.summary(),
            gate=result.record(),
        )
        if unproven:
            gpu_health.record_repairs(host, records)
            self.turns.done(config.max_parallel_reboots, REPAIR)  # the node stays cordoned
            app = self.model.app.name
            return ops.BlockedStatus(gpu_repair.unproven_message(node, app, result.summary()))
        if not result.passed:
            gpu_health.record_repairs(host, records)
            return ops.WaitingStatus(
                f"node {node} stays cordoned: the gate failed after the {method}: "
                f"{result.summary()}"
            )
        proof = f"repaired by {method} at {now}; gate passed: {result.summary()}"
        with node_kube(host, f"{proof}; cannot readmit node {node}") as kube:
            with api_errors_fail_the_hook():
                _, cordoned = gpu_health.readmit(
                    host,
                    kube,
                    node,
                    now=now,
                    proof=proof,
                    action="repair",
                    records=records,
                    mig_change=self._mig_cordoned(),
                    gate_started=gate_started,
                )
        self.turns.done(config.max_parallel_reboots, REPAIR)  # a MIG change keeps its own
        logger.info("node %s readmitted: %s", node, proof)
        still = f"; node {node} stays cordoned: {cordoned}" if cordoned else ""
        return ops.ActiveStatus(f"GPU {held[0].get('index')} {proof}{still}")

    # -- the action ------------------------------------------------------------------------

    def on_repair_gpu(self, event: ops.ActionEvent) -> None:
        """Repair the quarantined GPUs now (a reset here, a reboot in the next hook)."""
        params = event.load_params(RepairGpuParams, errors="fail")
        host = self._host()
        held = gpu_health.quarantined(host)
        if not held:
            event.fail("no GPU of this machine is quarantined: nothing to repair")
            return
        if not gpu_node.detect(host).count or not kubeadm.is_joined(host):
            event.fail("this machine has no NVIDIA GPU or has not joined a cluster")
            return
        try:
            config = self._config()
        except ValueError as e:
            event.fail(f"invalid config: {e}")
            return
        node, limit = kubeadm.node_name(host), config.max_parallel_reboots
        records = gpu_health.repairs(host)
        method = gpu_repair.choose(held, gpu_repair.REBOOT, records, self._wall_clock())
        if method is None:
            event.fail(
                f"GPU {held[0].get('index')} ({held[0].get('uuid')}): NVIDIA's catalog knows "
                "no automatic repair for its fault; contact NVIDIA support or replace the machine"
            )
            return
        method = self._possible(host, node, held, gpu_repair.REBOOT, method)[0] or method
        reason = f"GPU {held[0].get('index')} ({held[0].get('uuid')}) repair by {method}"
        if method == gpu_repair.REBOOT:  # juju-reboot is refused in an action
            gpu_repair.save_progress(
                host,
                method=REBOOT_ASKED,
                boot=nvidia.boot_id(host),
                started=gpu_repair.iso(self._wall_clock()),
                gpus=[str(q.get("uuid")) for q in held],
            )
            self.turns.request(reason, limit, REPAIR)
            event.set_results({"repair": "reboot", "node": node})
            event.log("only a reboot can repair it: the next hook reboots in a turn")
            return
        if not self.turns.request(reason, limit, REPAIR):
            self.turns.done(limit, REPAIR)  # no turn kept for a node not drained
            event.fail(self.turns.waiting_message(reason, limit, REPAIR) + "; run it again")
            return
        status = self._action_repair(event, host, config, node, held, reason, params.timeout)
        if not isinstance(status, ops.ActiveStatus):
            pending = str((gpu_repair.load_progress(host) or {}).get("method") or "")
            if not pending.startswith(GATE_PENDING):  # only a gate that waits keeps the turn
                self.turns.done(limit, REPAIR)  # the node stays cordoned
            if status is not None:
                event.fail(status.message)
            return
        # the leader lifts the NoExecute taint, unless a fault came during the gate
        self._cluster.publish_quarantine(gpu_health.quarantine_request(host, None) or [])
        event.set_results({"repair": "reset", "node": node, "readmitted": status.message})

    def _action_repair(
        self,
        event: ops.ActionEvent,
        host: Host,
        config: WorkerConfig,
        node: str,
        held: list[dict],
        reason: str,
        timeout: float,
    ) -> ops.StatusBase | None:
        """The action's drain, reset and gate: the unit's status, or None with it failed."""
        try:
            event.log(f"draining node {node}")
            self._drain(host, config, node, reason)
            event.log(gpu_repair.pausing(node, PAUSE_RESET))
            said = self._action_reset(event, host, node, held, reason)
            if said is None:
                return None
            event.log(said)
            return self._prove(
                host,
                config,
                node,
                held,
                gpu_repair.RESET,
                said,
                timeout=timeout,
                progress=event.log,
                mig_wait_s=timeout,
            )
        except (StatusError, NodeMaintenanceError, KubeError) as e:
            event.fail(f"repair of node {node} stopped: {e}")
            return None

    def _action_reset(
        self, event: ops.ActionEvent, host: Host, node: str, held: list[dict], reason: str
    ) -> str | None:
        """The action's reset: what nvidia-smi said, or None with the action failed."""
        done = self._reset(host, node, held, reason)
        if done.holders is not None and done.pids:  # is one stuck in the kernel?
            event.log(f"{done.said}; watching {', '.join(done.holders)}")
            done = gpu_repair.watch_holders(host, held, done, sleep=self._sleep)
        if done.stuck or done.hung:  # a failed repair only a reboot ends (unkillable)
            self._record_failure(host, held, gpu_repair.RESET, done.said)
            unit = self.model.unit.name
            event.fail(gpu_repair.unkillable_message(node, unit, held, done))
            return None
        if done.holders is not None:  # none ran: no failed repair
            self._record_failure(host, held, gpu_repair.RESET, done.said, gpu_repair.REFUSED)
            then = " and run repair-gpu again"
            event.fail(gpu_repair.reset_refused_message(node, held, done, then))
            return None
        if not done.done:
            self._record_failure(host, held, gpu_repair.RESET, done.said)
            event.fail(f"{done.said}; node {node} stays cordoned")
            return None
        return done.said
