# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The worker's part of a MIG layout change: turn, drain, label, wait, check, uncordon.

`mig.decide` says what to do from the Node's labels; `advance` does it with the
collaborators the charm hands in (a cluster client, the reboot turns, the machine, the
clocks) and returns what the charm records (`Progress`) and reports (`Outcome`). The
node stays cordoned, and the turn held, from the drain until nvidia-smi shows the
layout. No ops imports: the charm keeps the progress in its stored state and turns the
outcome into statuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import gpu_health
import mig
import nvidia

from charms.gpu_k8s.v0 import drain

if TYPE_CHECKING:
    from charm_config import WorkerConfig
    from gpu_node import GpuState

    from charms.gpu_k8s.v0.kubeclient import Kube
    from charms.gpu_k8s.v0.system import Host


class Turns(Protocol):
    """Turns to drain (`reboot_turns.RebootTurns`): a MIG change takes one, as a reboot does."""

    def request(self, reason: str, limit: int) -> bool:
        """Ask for a turn (kept while asking); True when this unit holds one now."""
        ...

    def done(self, limit: int) -> None:
        """Give the turn back."""
        ...

    def asked_for(self) -> str | None:
        """Why this unit asks for a turn, or None when it does not."""
        ...

    def waiting_message(self, reason: str, limit: int) -> str:
        """What the unit waits for while another holds the turn."""
        ...


@dataclasses.dataclass(frozen=True)
class Progress:
    """What the charm keeps between hooks about a MIG change of its node.

    Attributes:
        cordoned: this unit cordoned the node for a MIG change.
        since: when it handed the layout to mig-manager (`wall_clock()`), or None.
    """

    cordoned: bool = False
    since: float | None = None


@dataclasses.dataclass(frozen=True)
class Context:
    """The collaborators of a step: the node, the cluster, the turns, the machine, clocks.

    `clock`/`sleep` pace the drain (monotonic); `wall_clock` dates the hand-over to
    mig-manager, which outlives the hook (`time.time`).
    """

    kube: Kube
    node: str
    unit: str
    mig_strategy: str
    turns: Turns
    host: Host
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    wall_clock: Callable[[], float]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one step did: the progress to record, and at most one thing to report.

    Attributes:
        progress: what the charm records (as it was when nothing changed).
        waiting: the layout is on its way; what the node waits for.
        blocked: what the operator must fix.
        turn_wait: the change waits for a turn to drain.
    """

    progress: Progress
    waiting: str | None = None
    blocked: str | None = None
    turn_wait: str | None = None


REASON_PREFIX = "MIG layout "


def is_mig_request(reason: str | None) -> bool:
    """Whether a turn request was filed for a MIG change (only this module gives it back).

    A MIG waiter files once and keeps its request (and its `since`, its place in the
    oldest-first order) until it no longer wants the turn: withdrawing and re-filing it
    every hook would send it to the back of the queue and, as each rewrite of the unit
    databag fires `reboots-relation-changed` on every peer, two waiters would wake each
    other without end (review gpu.md N1).
    """
    return reason is not None and reason.startswith(REASON_PREFIX)


def _withdraw(ctx: Context, limit: int) -> None:
    """Give back a MIG request this unit no longer needs (a reboot's is the charm's)."""
    if is_mig_request(ctx.turns.asked_for()):
        ctx.turns.done(limit)


def _keep_or_withdraw(
    ctx: Context, progress: Progress, act: mig.Act, reason: str, limit: int
) -> None:
    """Keep the turn while a change is in flight; give back a place nothing will use."""
    if progress.cordoned and act is not mig.Act.UNCORDON:
        ctx.turns.request(reason, limit)
    elif not progress.cordoned and act is not mig.Act.START:
        _withdraw(ctx, limit)


def _verify(ctx: Context, layout: str, state: GpuState) -> mig.Decision:
    """mig-manager reported success: uncordon only once nvidia-smi shows the layout."""
    devices = nvidia.read_mig_devices(ctx.host)
    modes = [g.mig_mode for g in state.report.gpus]
    if mig.applied(layout, modes, devices, state.mig_profiles):
        return mig.Decision(mig.Act.UNCORDON)
    return mig.Decision(
        mig.Act.WAIT, f"MIG layout {layout}: reported applied, not on the GPUs yet"
    )


def _start(ctx: Context, config: WorkerConfig, progress: Progress) -> Progress:
    """Drain the node, then label it for mig-manager with the layout; the new progress."""
    layout = config.mig_profile
    result = drain.drain(
        ctx.kube, ctx.node, timeout=config.drain_timeout, clock=ctx.clock, sleep=ctx.sleep
    )
    started = Progress(progress.cordoned or result is not None, ctx.wall_clock())
    # mig-manager runs here from now on; a state left by an earlier layout must not read
    # as this one's success.
    patch = {
        mig.LABEL_DEPLOY_MIG_MANAGER: "true",
        mig.LABEL_CONFIG: layout,
        mig.LABEL_STATE: None,
    }
    ctx.kube.patch("v1", "Node", ctx.node, {"metadata": {"labels": patch}})
    return started


def advance(ctx: Context, config: WorkerConfig, state: GpuState, progress: Progress) -> Outcome:
    """Take the next step towards `config.mig_profile` on a MIG-capable node.

    Raises:
        KubeError: the API server refused (the charm fails the hook, so that it is
            retried, as a drain on the reboot path does).
    """
    layout, limit = config.mig_profile, config.max_parallel_reboots
    if not state.inventory.mig_capable and not progress.cordoned:
        _withdraw(ctx, limit)
        return Outcome(progress)
    reason = f"{REASON_PREFIX}{layout}"
    obj = ctx.kube.get("v1", "Node", ctx.node) or {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    in_flight = progress.cordoned and mig.in_flight_layout(labels) is not None
    if in_flight and gpu_health.quarantined(ctx.host):
        # a repair may stop mig-manager mid-apply, and it starts over when it starts again
        # (mig.py): so does the clock that says it has not answered
        progress = Progress(progress.cordoned, ctx.wall_clock())
    since = progress.since
    decision = mig.decide(
        layout,
        labels,
        ready=state.ready,
        cordoned=progress.cordoned,
        mig_strategy=ctx.mig_strategy,
        profiles=state.mig_profiles,
        elapsed=None if since is None else ctx.wall_clock() - since,
    )
    if decision.act is mig.Act.VERIFY:
        decision = _verify(ctx, layout, state)
    _keep_or_withdraw(ctx, progress, decision.act, reason, limit)
    if decision.act is mig.Act.START:
        if not ctx.turns.request(reason, limit):
            return Outcome(progress, turn_wait=ctx.turns.waiting_message(reason, limit))
        progress = _start(ctx, config, progress)
        decision = mig.Decision(mig.Act.WAIT, mig.waiting_message(layout, {}))
    if decision.act is mig.Act.WAIT:
        return Outcome(progress, waiting=decision.message)
    if decision.act is mig.Act.BLOCK:
        return Outcome(progress, blocked=decision.message)
    if decision.act is mig.Act.FAILED:
        return Outcome(progress, blocked=mig.failed_message(layout, ctx.node, ctx.unit))
    if decision.act is mig.Act.UNCORDON:
        gpu_health.uncordon(ctx.host, ctx.kube, ctx.node)  # a quarantine keeps it cordoned
        ctx.turns.done(limit)
        return Outcome(Progress())
    return Outcome(progress)
