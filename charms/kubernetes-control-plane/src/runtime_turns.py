# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""containerd/runc security updates of the control plane's own nodes, one unit at a time.

containerd and runc are held in their series (lib containerd.py), so a fix Ubuntu
publishes in noble-security or -updates reaches no node by itself. The workers take
theirs in drain turns (kubernetes-worker's `reboot_turns`); here each joined
control-plane unit asks apt what its series has (`containerd.pending_updates`) once a
day and on upgrade-charm (`containerd.updates_due`), and publishes what is pending in its
peer databag (`runtime-updates`). The leader hands the turn (`runtime-turn`, the
`rolling.py` pattern) to one such unit at a time in unit-number order, and never while an
upgrade or a certificate-renewal turn is out (those restart a node's control plane too:
one node at a time keeps etcd's quorum). The unit holding it drains its node, installs
the updates and restarts containerd (`containerd.update`), waits for its static pods'
containers to run again, uncordons and says it has nothing pending; the leader then
passes the turn on. A step that fails keeps the node cordoned and the turn, says why
(Waiting) and is retried from the install on the next hook.

containerd's restart leaves the containers running: each runs under its shim, which
containerd's systemd unit does not kill (containerd/containerd containerd.service
`KillMode=process`); only new container starts fail while it is down (moby/moby
discussion 46449). The static pods are checked with `crictl ps` (cri-tools), which asks
containerd's CRI socket, so it answers only once containerd serves again.

An ops component: it writes the peer data; the charm reports its lines.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, MutableMapping
from typing import NamedTuple

import rolling
from certificates import MANIFESTS
from context import UnitContext
from etcd_backup import CRICTL, RUNTIME_ENDPOINT
from peers import NODE_TURNS, RUNTIME_PENDING, RUNTIME_TURN, Peers
from upgrades import drain_node

from charms.gpu_k8s.v0 import apt, containerd, drain
from charms.gpu_k8s.v0.databag import write
from charms.gpu_k8s.v0.kubeclient import Kube
from charms.gpu_k8s.v0.system import SYSTEMCTL, CommandError, Host, poll_until

logger = logging.getLogger(__name__)

# This unit's stored state (a mapping the charm keeps): when it last asked apt (seconds
# since the epoch), what apt had (JSON), whether the turn cordoned its node, what failed.
CHECKED = "checked"
PENDING = "pending"
CORDONED = "cordoned"
FAILURE = "failure"
# How long the static pods' containers may take to be listed Running after the restart.
STATIC_POD_TIMEOUT = 300.0
STATIC_POD_POLL = 5.0


class Found(NamedTuple):
    """What a reconcile found: notes for the Ready line, Waiting lines."""

    notes: list[str]
    waiting: list[str]


def static_pods_not_running(host: Host) -> list[str]:
    """The static pods (manifest names) whose container containerd does not run.

    kubelet names a static pod's containers as its manifest does, and kubeadm names each
    manifest and its one container after the component (kubernetes.io "kubeadm
    implementation details": etcd.yaml, kube-apiserver.yaml, kube-controller-manager.yaml,
    kube-scheduler.yaml; cmd/kubeadm/app/phases/controlplane/manifests.go).

    Raises:
        CommandError: crictl could not ask containerd (it is not serving).
    """
    manifests = host.path(MANIFESTS)
    names = sorted(p.stem for p in manifests.glob("*.yaml")) if manifests.is_dir() else []
    missing = []
    for name in names:
        out = host.run(
            CRICTL,
            f"--runtime-endpoint={RUNTIME_ENDPOINT}",
            "ps",
            f"--name=^{name}$",
            "--state=Running",
            "--quiet",
            timeout=30,
        )
        if not out.split():
            missing.append(name)
    return missing


class RuntimeTurns:
    """This node's containerd/runc updates, and the turn as the leader passes it.

    `stored`: this unit's own state; `kube`: the hook's API client (for the drain);
    `wall_clock`: seconds since the epoch (the daily check); `upgrading`: this hook is
    upgrade-charm; `monotonic`, `sleep`: the drain's and the static pods' waits.
    """

    def __init__(
        self,
        ctx: UnitContext,
        peers: Peers,
        stored: MutableMapping[str, str],
        kube: Callable[[], Kube],
        *,
        wall_clock: Callable[[], float],
        upgrading: bool,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._ctx = ctx
        self._peers = peers
        self._stored = stored
        self._kube = kube
        self._wall_clock = wall_clock
        self._upgrading = upgrading
        self._monotonic = monotonic
        self._sleep = sleep

    def reconcile(self, *, leader: bool) -> Found:
        """Check (daily), pass the turn (leader), update in turn."""
        if not self._ctx.joined():
            return Found([], [])
        self._check()
        pending = self.pending()
        self._publish(pending)
        if leader:
            self.pass_turn()
        if self._peers.app.get(RUNTIME_TURN) == self._ctx.unit and (
            pending or self._stored.get(CORDONED)
        ):
            self._take_turn(pending)
            if leader:
                self.pass_turn()
        return self._found()

    def pending(self) -> dict[str, str]:
        """{package: version} apt had for this node at its last check and not installed yet."""
        try:
            value = json.loads(self._stored.get(PENDING) or "{}")
        except ValueError:
            return {}
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

    def pass_turn(self) -> str | None:
        """Give the turn to the first unit with updates pending (unit-number order).

        Never while an upgrade or a certificate renewal turn is out (`peers.NODE_TURNS`):
        each restarts a control-plane node, and one node at a time keeps etcd's quorum.
        """
        bag = self._peers.app
        units: dict[str, Mapping[str, str]] = {self._ctx.unit: self._peers.mine}
        units.update({m.name: m.data for m in self._peers.joined()})
        waiting = rolling.wanting(
            {unit: bool(data.get(RUNTIME_PENDING)) for unit, data in units.items()}
        )
        holder = rolling.pass_turn(bag, RUNTIME_TURN, waiting, exclusive=NODE_TURNS)
        if holder:
            logger.info("containerd/runc update turn: %s", holder)
        return holder

    # -- this node ----------------------------------------------------------------------

    def _check(self) -> None:
        now = self._wall_clock()
        last = self._stored.get(CHECKED)
        ask, refresh = containerd.updates_due(
            float(last) if last else None, now, upgrading=self._upgrading
        )
        if not ask:
            return
        if refresh:
            self._stored[CHECKED] = repr(now)
        try:
            found = containerd.pending_updates(self._ctx.host, refresh=refresh)
        except apt.AptError as e:  # asked again the next day (or upgrade-charm)
            logger.warning("cannot check for containerd/runc updates: %s", e)
            return
        self._stored[PENDING] = _encode(found)

    def _take_turn(self, pending: dict[str, str]) -> None:
        """Drain, update and restart containerd, wait for the static pods, uncordon."""
        host, name = self._ctx.host, self._ctx.node_name
        reason = containerd.pending_message(pending) if pending else "containerd/runc update"
        kube = self._kube()
        if drain_node(
            kube,
            name,
            "keep running under their shims",
            clock=self._monotonic,
            sleep=self._sleep,
        ):
            self._stored[CORDONED] = "true"
        stays = f"node {name} stays cordoned" if self._stored.get(CORDONED) else f"node {name}"
        try:
            if not containerd.update(host, pending):  # installed by an earlier try
                host.run(SYSTEMCTL, "restart", "containerd")
        except apt.AptError as e:
            return self._failed(f"{stays}; containerd/runc update failed: {e.package}: {e.detail}")
        except CommandError as e:
            return self._failed(
                f"{stays}; containerd did not restart after its update: {e.last_line}"
            )
        missing = self._wait_for_static_pods()
        if missing:
            return self._failed(
                f"{stays}; static pods not running {int(STATIC_POD_TIMEOUT)} s after "
                f"containerd's restart: {missing}"
            )
        if self._stored.get(CORDONED) and drain.uncordon(kube, name):
            logger.info("%s installed; uncordoned node %s", reason.split(": ", 1)[-1], name)
        for key in (PENDING, CORDONED, FAILURE):
            self._stored.pop(key, None)
        self._publish({})

    def _wait_for_static_pods(self) -> str:
        """'' once every static pod's container runs, else what is missing (crictl's words)."""
        last = {"missing": ""}

        def running() -> bool | None:
            try:
                missing = static_pods_not_running(self._ctx.host)
            except CommandError as e:
                last["missing"] = f"crictl: {e.last_line}"
                return None
            last["missing"] = ", ".join(missing)
            return True if not missing else None

        if poll_until(
            running,
            STATIC_POD_TIMEOUT,
            poll=STATIC_POD_POLL,
            clock=self._monotonic,
            sleep=self._sleep,
        ):
            return ""
        return last["missing"] or "unknown"

    def _publish(self, pending: dict[str, str]) -> None:
        if pending:
            write(self._peers.mine, {RUNTIME_PENDING: _encode(pending)})
        elif RUNTIME_PENDING in self._peers.mine:
            del self._peers.mine[RUNTIME_PENDING]

    def _failed(self, line: str) -> None:
        self._stored[FAILURE] = line
        logger.error("%s", line)

    # -- what it says -------------------------------------------------------------------

    def _found(self) -> Found:
        failure = self._stored.get(FAILURE)
        pending = self.pending()
        if failure and (pending or self._stored.get(CORDONED)):
            return Found([], [f"{failure}; retrying on the next hook"])
        if not pending:
            return Found([], [])
        holder = self._peers.app.get(RUNTIME_TURN)
        note = containerd.pending_message(pending)
        if holder and holder != self._ctx.unit:
            note += f", waiting for {holder}"
        return Found([note], [])


def _encode(pending: dict[str, str]) -> str:
    return json.dumps(pending, sort_keys=True) if pending else ""
