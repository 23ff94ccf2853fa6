# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The worker's part of a MIG layout change: turn, drain, label, wait, check, uncordon.

`mig.decide` says what to do from the Node's labels; this module does it with the
cluster client and the reboot turns, and returns the statuses for the charm. The node
stays cordoned, and the turn held, from the drain until nvidia-smi shows the layout.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import mig
import nvidia
import ops

from charms.gpu_k8s.v0 import drain

if TYPE_CHECKING:
    from gpu_node import GpuState
    from reboot_turns import RebootTurns
    from worker import WorkerConfig

    from charms.gpu_k8s.v0.system import Host


@dataclasses.dataclass(frozen=True)
class Context:
    """What a step needs from the charm.

    `stored` carries `mig_cordoned` (this unit cordoned the node for a MIG change) and
    `mig_since` (when it handed the layout to mig-manager, `time.time()`).
    """

    kubeconfig: str
    node: str
    unit: str
    mig_strategy: str
    stored: Any
    turns: RebootTurns
    host: Callable[[], Host]
    clock: Callable[[], float]
    sleep: Callable[[float], None]


@dataclasses.dataclass
class Outcome:
    """Statuses for the charm: over Active, Blocked, or waiting for a turn."""

    status: ops.StatusBase | None = None
    blocked: str | None = None
    turn_wait: str | None = None


def _verify(ctx: Context, layout: str, state: GpuState) -> mig.Decision:
    """mig-manager reported success: uncordon only once nvidia-smi shows the layout."""
    devices = nvidia.read_mig_devices(ctx.host())
    modes = [g.mig_mode for g in state.report.gpus]
    if mig.applied(layout, modes, devices, state.mig_profiles):
        return mig.Decision(mig.Act.UNCORDON)
    return mig.Decision(
        mig.Act.WAIT, f"MIG layout {layout}: reported applied, not on the GPUs yet"
    )


def advance(ctx: Context, config: WorkerConfig, state: GpuState) -> Outcome:
    """Take the next step towards `config.mig_profile` on a MIG-capable node.

    Raises:
        KubeError: the API server refused (the hook fails and is retried, as a drain on
            the reboot path does).
    """
    from charms.gpu_k8s.v0.kubeclient import Kube

    stored, outcome = ctx.stored, Outcome()
    if not state.inventory.mig_capable and not stored.mig_cordoned:
        return outcome
    layout, limit = config.mig_profile, config.max_parallel_reboots
    reason = f"MIG layout {layout}"
    with Kube.from_kubeconfig(ctx.kubeconfig) as kube:
        obj = kube.get("v1", "Node", ctx.node) or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        since = stored.mig_since
        decision = mig.decide(
            layout,
            labels,
            ready=state.ready,
            cordoned=stored.mig_cordoned,
            mig_strategy=ctx.mig_strategy,
            profiles=state.mig_profiles,
            elapsed=None if since is None else time.time() - since,
        )
        if decision.act is mig.Act.VERIFY:
            decision = _verify(ctx, layout, state)
        if stored.mig_cordoned and decision.act is not mig.Act.UNCORDON:
            ctx.turns.request(reason, limit)  # keep the turn while it is in flight
        if decision.act is mig.Act.START:
            if not ctx.turns.request(reason, limit):
                outcome.turn_wait = ctx.turns.waiting_message(reason, limit)
                return outcome
            result = drain.drain(
                kube, ctx.node, timeout=config.drain_timeout, clock=ctx.clock, sleep=ctx.sleep
            )
            stored.mig_cordoned = stored.mig_cordoned or result is not None
            stored.mig_since = time.time()
            # mig-manager runs here from now on; a state left by an earlier layout must
            # not read as this one's success.
            patch = {
                mig.LABEL_DEPLOY_MIG_MANAGER: "true",
                mig.LABEL_CONFIG: layout,
                mig.LABEL_STATE: None,
            }
            kube.patch("v1", "Node", ctx.node, {"metadata": {"labels": patch}})
            decision = mig.Decision(mig.Act.WAIT, mig.waiting_message(layout, {}))
        if decision.act is mig.Act.WAIT:
            outcome.status = ops.WaitingStatus(decision.message)
        elif decision.act is mig.Act.BLOCK:
            outcome.blocked = decision.message
        elif decision.act is mig.Act.FAILED:
            outcome.blocked = mig.failed_message(layout, ctx.node, ctx.unit)
        elif decision.act is mig.Act.UNCORDON:
            drain.uncordon(kube, ctx.node)
            stored.mig_cordoned, stored.mig_since = False, None
            ctx.turns.done(limit)
    return outcome
