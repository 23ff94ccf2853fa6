# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The control plane's upgrade to `kubernetes-version`, one unit at a time, and the drain.

The target is the full version this charm revision pins for that minor
(`kubeadm.RELEASES`): a new minor, or a new patch of the running one (kubernetes.io
"Upgrading kubeadm clusters": the same apply/node, drain, kubelet, restart, uncordon for
1.x.y to 1.x.y+1). The leader goes first (`kubeadm upgrade apply vX.Y.Z`) once every unit
runs the cluster's version; then the turn passes through the others (`kubeadm upgrade
node`), each taking it when the peer data names it (`upgrade-turn`, `rolling.py`).
Neither the leader's own upgrade nor the turn starts while another node's certificate
renewal or containerd/runc update turn is out (`peers.NODE_TURNS`: one node's control
plane restarts at a time).
A pin older than the running patch is not applied (no downgrade). Each node is drained
for its kubelet's restart and uncordoned after it (`charms.gpu_k8s.v0.drain`); what the
machine does is in `node.py`.

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
from peers import CLUSTER_RELEASE, CLUSTER_VERSION, NODE_TURNS, UPGRADE_TURN, Peers

from charms.gpu_k8s.v0 import drain, kubeadm
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


def _pin_of(minor: str) -> str:
    """The version this charm revision pins for `minor` ("" for one it has no pin for)."""
    release = kubeadm.RELEASES.get(minor)
    return release.version if release else ""


def _turn_of(key: str, holder: str) -> str:
    """`kubernetes-control-plane/1's certificate renewal` for a turn that is out."""
    return f"{holder}'s {NODE_TURNS[key]}"


class Progress(NamedTuple):
    """Where the control plane's upgrade stands after the leader's step."""

    done: bool  # every control-plane unit runs the cluster's minor: workers may start
    note: str | None  # what it waits for, for the status


class Upgrades:
    """This node's upgrades, and the control plane's as the leader passes the turn.

    `ctx`: this unit; `kube`: the hook's API client (for the drain); `clock`, `sleep`: the
    drain's; `upgraded`: called once this node upgraded (`kubeadm upgrade apply|node`
    renews the node's certificates, admin.conf's client certificate included: the
    operator's `get-kubeconfig` copy follows).
    """

    def __init__(
        self,
        ctx: UnitContext,
        kube: Callable[[], Kube],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        upgraded: Callable[[], None] = lambda: None,
    ):
        self._ctx = ctx
        self._kube = kube
        self._clock = clock
        self._sleep = sleep
        self._upgraded = upgraded

    def node_minor(self, config: Config, cluster_version: str | None) -> str:
        """The minor this node runs: a joined node keeps its own until it upgrades."""
        return self._ctx.node.minor(
            self._ctx.joined(), cluster_version or config.kubernetes_version
        )

    def node_version(self, config: Config, cluster_version: str | None) -> str:
        """The full version this node runs, or the pin of the minor it installs."""
        minor = self.node_minor(config, cluster_version)
        installed = self._ctx.node.installed_version() if self._ctx.joined() else None
        if installed and kubeadm.minor_of(installed) == minor:
            return installed
        return kubeadm.RELEASES[minor].version

    def cluster_release(self, config: Config, peers: Peers) -> str | None:
        """The full version the control plane runs (or moves to); None before bootstrap.

        A cluster bootstrapped by an earlier charm revision recorded its minor only: the
        leader's own version stands for it while the leader runs that minor.
        """
        recorded = peers.app.get(CLUSTER_RELEASE)
        running = peers.cluster_version
        if recorded and kubeadm.minor_of(recorded) == running:
            return recorded
        if not running:
            return None
        mine = self.node_version(config, running)
        return mine if kubeadm.minor_of(mine) == running else kubeadm.RELEASES[running].version

    def control_plane(self, config: Config, peers: Peers) -> Progress:
        """Move the control plane to `kubernetes-version`'s pin, one unit at a time (the leader).

        The leader upgrades first, once no unit is behind the running version; then it
        passes the turn, taking it itself when leadership changed in the middle of an
        upgrade.
        """
        bag = peers.app
        running = self.cluster_release(config, peers) or ""
        wanted = kubeadm.RELEASES[config.kubernetes_version].version
        me = self._ctx.unit
        # A joined unit that does not say its version is taken as behind: it gets a turn.
        versions = peers.member_releases(
            self.node_version(config, bag[CLUSTER_VERSION]), "", _pin_of
        )
        if bag.get(CLUSTER_RELEASE) != running:
            bag[CLUSTER_RELEASE] = running
        # Another node's renewal or containerd turn restarts its control plane now: the
        # leader neither upgrades itself nor hands the turn out (one node at a time).
        busy = rolling.held(bag, NODE_TURNS, but=UPGRADE_TURN)
        if kubeadm.version_key(wanted) > kubeadm.version_key(running):
            behind = rolling.pending(versions, running)
            if behind:
                rolling.pass_turn(bag, UPGRADE_TURN, behind, exclusive=NODE_TURNS)
                return Progress(False, f"upgrade to v{wanted} waits for {', '.join(behind)}")
            if busy is not None:
                return Progress(False, f"upgrade to v{wanted} waits for {_turn_of(*busy)}")
            self.upgrade_node(config, wanted, first=True)
            bag[CLUSTER_VERSION] = kubeadm.minor_of(wanted)
            bag[CLUSTER_RELEASE] = running = versions[me] = wanted
            logger.info("the cluster runs Kubernetes %s; the other nodes follow in turn", wanted)
        elif wanted != running:
            logger.info("this charm pins Kubernetes %s; the cluster stays on %s", wanted, running)
        behind = rolling.pending(versions, running)
        holder = rolling.pass_turn(bag, UPGRADE_TURN, behind, exclusive=NODE_TURNS)
        if holder == me:  # the leader changed in the middle of an upgrade
            self.upgrade_node(config, running, first=False)
            versions[me] = running
            behind = rolling.pending(versions, running)
            holder = rolling.pass_turn(bag, UPGRADE_TURN, behind, exclusive=NODE_TURNS)
        if behind and holder is None and busy is not None:
            return Progress(False, f"upgrade to v{running} waits for {_turn_of(*busy)}")
        return Progress(not behind, None)

    def take_turn(self, config: Config, peers: Peers) -> None:
        """Upgrade this (joined, not leading) node when the peer data says it is its turn."""
        running = peers.app.get(CLUSTER_RELEASE)
        if not running or kubeadm.minor_of(running) != peers.cluster_version:
            # a leader of an earlier revision: its minor's pin
            running = peers.cluster_version and kubeadm.RELEASES[peers.cluster_version].version
        mine = self.node_version(config, peers.cluster_version)
        if running and mine != running and peers.app.get(UPGRADE_TURN) == self._ctx.unit:
            self.upgrade_node(config, running, first=False)

    def upgrade_node(self, config: Config, version: str, *, first: bool) -> None:
        """Upgrade this node to `version` (see `node.Node.upgrade`), draining it for kubelet."""
        name = self._ctx.node_name
        with status_of(node.NodeError):
            self._ctx.node.upgrade(
                version,
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
        self._upgraded()
