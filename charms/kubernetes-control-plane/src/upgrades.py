# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The control plane's upgrade to `kubernetes-version`, one unit at a time, and the drain.

The leader goes first (`kubeadm upgrade apply`) once every unit runs the cluster's minor;
then the turn passes through the others (`kubeadm upgrade node`), each taking it when the
peer data names it (`upgrade-turn`, `rolling.py`). Each node is drained for its kubelet's
restart and uncordoned after it (`charms.gpu_k8s.v0.drain`); what the machine does is
in `node.py`.

Takes this unit's `context.UnitContext`, the hook's API client and the drain's clock; its
workload errors (`node.NodeError`) become the statuses they say (`status_of`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import NamedTuple

import node
import rolling
from charm_config import Config
from context import UnitContext
from literals import DRAIN_TIMEOUT_SECONDS
from peers import CLUSTER_VERSION, UPGRADE_TURN, Peers

from charms.gpu_k8s.v0 import drain
from charms.gpu_k8s.v0.kubeclient import Kube
from charms.gpu_k8s.v0.status import status_of

logger = logging.getLogger(__name__)


def drain_node(
    kube: Kube,
    name: str,
    fate: str,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Cordon and drain node `name`; False when it is not registered (nothing to do).

    Pods still there after `DRAIN_TIMEOUT_SECONDS` are named in a warning: they `fate`.
    """
    result = drain.drain(kube, name, timeout=DRAIN_TIMEOUT_SECONDS, clock=clock, sleep=sleep)
    if result is None:
        return False
    if result.remaining:
        logger.warning("pods left on %s %s: %s", name, fate, " ".join(result.remaining))
    return True


class Progress(NamedTuple):
    """Where the control plane's upgrade stands after the leader's step."""

    done: bool  # every control-plane unit runs the cluster's minor: workers may start
    note: str | None  # what it waits for, for the status


class Upgrades:
    """This node's upgrades, and the control plane's as the leader passes the turn.

    `ctx`: this unit; `kube`: the hook's API client (for the drain); `clock`, `sleep`: the
    drain's.
    """

    def __init__(
        self,
        ctx: UnitContext,
        kube: Callable[[], Kube],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._ctx = ctx
        self._kube = kube
        self._clock = clock
        self._sleep = sleep

    def node_minor(self, config: Config, cluster_version: str | None) -> str:
        """The minor this node runs: a joined node keeps its own until it upgrades."""
        return self._ctx.node.minor(
            self._ctx.joined(), cluster_version or config.kubernetes_version
        )

    def control_plane(self, config: Config, peers: Peers) -> Progress:
        """Move the control plane to `kubernetes-version`, one unit at a time (the leader).

        The leader upgrades first, once no unit is behind the running minor; then it
        passes the turn, taking it itself when leadership changed in the middle of an
        upgrade.
        """
        bag = peers.app
        running = bag[CLUSTER_VERSION]
        wanted = config.kubernetes_version
        me = self._ctx.unit
        # A joined unit that does not say its minor is taken as behind: it gets a turn.
        versions = peers.member_versions(self.node_minor(config, running), "")
        if wanted != running:
            behind = rolling.pending(versions, running)
            if behind:
                return Progress(False, f"upgrade to v{wanted} waits for {', '.join(behind)}")
            self.upgrade_node(config, wanted, first=True)
            bag[CLUSTER_VERSION] = running = versions[me] = wanted
            logger.info("the cluster runs Kubernetes %s; the other nodes follow in turn", wanted)
        holder = rolling.pass_turn(bag, UPGRADE_TURN, rolling.pending(versions, running))
        if holder == me:  # the leader changed in the middle of an upgrade
            self.upgrade_node(config, running, first=False)
            versions[me] = running
            holder = rolling.pass_turn(bag, UPGRADE_TURN, rolling.pending(versions, running))
        return Progress(holder is None, None)

    def take_turn(self, config: Config, peers: Peers) -> None:
        """Upgrade this (joined, not leading) node when the peer data says it is its turn."""
        running = peers.cluster_version
        mine = self.node_minor(config, running)
        if running and mine != running and peers.app.get(UPGRADE_TURN) == self._ctx.unit:
            self.upgrade_node(config, running, first=False)

    def upgrade_node(self, config: Config, minor: str, *, first: bool) -> None:
        """Upgrade this node to `minor` (see `node.Node.upgrade`), draining it for kubelet."""
        name = self._ctx.node_name
        with status_of(node.NodeError):
            self._ctx.node.upgrade(
                minor,
                config.package_mirror,
                first=first,
                drain=lambda: drain_node(
                    self._kube(),
                    name,
                    "restart with kubelet",
                    clock=self._clock,
                    sleep=self._sleep,
                ),
                uncordon=lambda: drain.uncordon(self._kube(), name),
            )
