# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""This node's Kubernetes version: the control plane's minor when it joins, then upgrades.

`plan_kubernetes` decides (and installs the packages of a node that has not joined; a
joined node's install never moves its kubelet); `run_upgrade` follows the kubeadm
procedure for a joined node, for a new patch of its minor (the pin of this charm
revision, `kubeadm.RELEASES`) as for the next minor (kubernetes.io "Upgrading kubeadm
clusters": kubeadm, `kubeadm upgrade node`, drain, kubelet, kubelet restart, uncordon),
recording each step on the machine so that a failed hook resumes where it stopped. A
kubelet older than its package (an earlier revision moved the package in place, review
deploy.md N1) is brought to it by the same procedure (`plan_restart`). No ops imports: the
charm decides when it is this node's turn (a drain turn, `reboot_turns.py`) and turns the
errors into statuses.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import gpu_health
from worker import drain_summary

from charms.gpu_k8s.v0 import apt, drain, kubeadm
from charms.gpu_k8s.v0.system import CommandError, Host

if TYPE_CHECKING:
    from charms.gpu_k8s.v0.drain import DrainResult
    from charms.gpu_k8s.v0.kubeclient import Kube

logger = logging.getLogger(__name__)


minor_of = kubeadm.minor_of  # "1.33.4" and "v1.33" give "1.33"


def shown(version: str) -> str:
    """A version in a status: its minor when it is this charm's pin for it, else in full."""
    pinned = kubeadm.RELEASES.get(minor_of(version))
    return minor_of(version) if pinned is not None and pinned.version == version else version


def running_version(node: Mapping[str, Any] | None) -> str | None:
    """The version the node's running kubelet posts ("v1.36.5" as "1.36.5"), or None.

    kubelet sets `status.nodeInfo.kubeletVersion` to its own binary's version on every
    status update (kubernetes pkg/kubelet/nodestatus/setters.go MachineInfo:
    `version.Get().String()`): the process that runs, where `kubelet --version` names the
    file on disk, which a package upgrade replaces without a restart.
    """
    info = ((node or {}).get("status") or {}).get("nodeInfo") or {}
    match = re.match(r"v?([0-9]+\.[0-9]+\.[0-9]+)", str(info.get("kubeletVersion") or ""))
    return match.group(1) if match else None


# The running kubelet against its package. The Node says "v1.36.5": kubelet's gitVersion
# (`running_version`). pkgs.k8s.io's deb says "1.36.5-1.1": Debian's
# [epoch:]upstream_version[-debian_revision] (Debian Policy 5.6.12), which kubernetes/release
# cmd/krel/templates/latest/kubelet/kubelet.spec builds from `Version: {{ .RPMVersion }}` (the
# release without its "v") and `Release: {{ .Revision }}` (the package revision, to which the
# Open Build Service adds its build count: "1.1"; a patch published again gets "2.1",
# kubernetes/release#4156), so its upstream part is the kubelet's version
# (`kubeadm.installed_release`, lib `upstream_version`). Both compare as X.Y.Z here, once.
def kubelet_behind(running: str, installed: str) -> bool:
    """True when the running kubelet ("1.36.5", from its Node) is older than its package's."""
    return kubeadm.version_key(running) < kubeadm.version_key(installed)


def supported_minor(version: str) -> str:
    """The minor of the control plane's Kubernetes version, when this charm can install it.

    Raises:
        ValueError: no pinned release for that minor; the message says what to do.
    """
    minor = minor_of(version)
    if minor not in kubeadm.RELEASES:
        raise ValueError(
            f"the control plane runs Kubernetes {minor}, which this charm cannot install "
            f"(it has {', '.join(kubeadm.RELEASES)}): refresh kubernetes-worker to a "
            "revision that supports it"
        )
    return minor


def plan_kubernetes(host: Host, minor: str, mirror: str | None = None) -> VersionPlan:
    """Plan this node's Kubernetes minor against the control plane's `minor`.

    Installs `minor` when the plan says so (a node that has not joined, or one that
    already runs it); forgets an upgrade record left by a node that was reset since.

    Raises:
        ValueError: an unreachable next minor or a corrupt upgrade record.
        apt.AptError: a package or the package source failed.
    """
    joined = kubeadm.is_joined(host)
    if not joined:
        clear_upgrade(host)  # a record left by a node that was reset since
    plan = plan_version(
        minor,
        joined=joined,
        installed=kubeadm.installed_release(host),
        upgrade=load_upgrade(host) if joined else None,
    )
    if plan.action is VersionAction.INSTALL:
        install_kubernetes(host, plan.running, mirror, version=plan.version)
    return plan


def install_kubernetes(
    host: Host, minor: str, mirror: str | None = None, *, version: str | None = None
) -> bool:
    """Install kubeadm + kubelet of `minor` (at `version`, else its pin); True on change.

    Raises:
        apt.AptError: a package or the package source failed.
    """
    return kubeadm.install(host, minor, mirror=mirror, with_kubectl=False, version=version)


# Progress of an upgrade of this node, kept on the machine: a hook that fails half-way
# (an API error during the drain) loses the charm's stored state, not what it did to the
# machine, so the record of what was done must live next to it.
UPGRADE_STATE = "/var/lib/gpu-k8s/kubernetes-upgrade.json"
# The version the last restart of kubelet started (`upgrade_node`): its Node says so only
# once the new kubelet posts its status, so a hook in between must not restart it again.
RESTARTED = "/var/lib/gpu-k8s/kubelet-restarted"
_STEPS = ("node", "drain", "restart")


class VersionAction(enum.Enum):
    """What a reconcile does with this node's Kubernetes packages."""

    INSTALL = "install"  # not joined, or at the control plane's minor and this pin (or newer)
    UPGRADE = "upgrade"  # joined on an older minor or patch: upgrade, in turn
    NEWER = "newer"  # joined on a newer minor than the control plane: the operator decides


@dataclasses.dataclass(frozen=True)
class VersionPlan:
    """The minor this node runs and the one it installs or upgrades to."""

    action: VersionAction
    running: str  # the minor the node's kubelet runs (the published minor for INSTALL)
    target: str  # the minor to install or the next step of the upgrade
    upgrade: Upgrade | None = None  # the upgrade in progress that this plan finishes
    version: str | None = None  # the full version to install, keep or upgrade to
    installed: str | None = None  # the full version installed now (None: nothing yet)

    def start(self) -> Upgrade:
        """The upgrade this plan asks for (UPGRADE): the one in progress, or a new one."""
        if self.upgrade is not None:
            return self.upgrade
        return Upgrade(self.installed or self.running, self.version or self.target)


@dataclasses.dataclass
class Upgrade:
    """An upgrade of this node from version `source` to `target` ("1.36.7"), step by step.

    `target` is a patch of the running minor or the next minor's pin; a record written
    by an earlier charm revision names minors, read as that minor's pin.
    """

    source: str
    target: str
    done: list[str] = dataclasses.field(default_factory=list)  # steps of _STEPS finished
    cordoned: bool = False  # the drain cordoned the node (it was registered)


def load_upgrade(host: Host) -> Upgrade | None:
    """The upgrade in progress on this machine, or None.

    Raises:
        ValueError: the record is unreadable (the message names the file to check).
    """
    text = host.read(UPGRADE_STATE)
    if text is None:
        return None
    try:
        data = json.loads(text)
        upgrade = Upgrade(
            source=str(data["source"]),
            target=str(data["target"]),
            done=[str(step) for step in data["done"] if step in _STEPS],
            cordoned=bool(data["cordoned"]),
        )
        for version in (upgrade.source, upgrade.target):
            kubeadm.version_key(version)
        if upgrade.target.count(".") == 1:  # an earlier revision's record: the minor's pin
            upgrade.target = kubeadm.release(upgrade.target).version
    except (ValueError, KeyError, TypeError):
        raise ValueError(
            f"the record of this node's Kubernetes upgrade ({UPGRADE_STATE}) is corrupt: "
            "finish the upgrade by hand (kubeadm upgrade node, kubelet, uncordon) and delete it"
        ) from None
    return upgrade


def save_upgrade(host: Host, upgrade: Upgrade) -> None:
    """Record the progress of `upgrade` on the machine."""
    host.write(UPGRADE_STATE, json.dumps(dataclasses.asdict(upgrade), sort_keys=True) + "\n")


def clear_upgrade(host: Host) -> None:
    """Forget the upgrade record once the upgrade is complete."""
    host.path(UPGRADE_STATE).unlink(missing_ok=True)


def plan_version(
    published: str, *, joined: bool, installed: str | None, upgrade: Upgrade | None
) -> VersionPlan:
    """Decide what this node does with the control plane's minor `published`.

    `installed`: the Kubernetes version of the installed kubelet ("1.36.5"). A node that
    has not joined installs `published` at this charm's pin. A joined node with an
    upgrade in progress finishes it whatever is published (its kubeadm already moved on).
    Otherwise a joined node keeps what it runs when that is the pin of `published` or
    newer, upgrades to the pin of its minor (a patch) or one minor at a time towards
    `published`, never downgrades; its install never moves an installed kubelet.

    Raises:
        ValueError: the next minor of an old node is one this charm cannot install.
    """
    if not joined or installed is None:
        pin = kubeadm.RELEASES[published].version
        return VersionPlan(VersionAction.INSTALL, published, published, version=pin)
    if upgrade is not None:
        source, target = minor_of(upgrade.source), minor_of(upgrade.target)
        return VersionPlan(
            VersionAction.UPGRADE, source, target, upgrade, upgrade.target, installed
        )
    mine = minor_of(installed)
    if mine == published:
        pin = kubeadm.RELEASES[published].version
        if kubeadm.version_key(installed) < kubeadm.version_key(pin):
            return VersionPlan(VersionAction.UPGRADE, mine, mine, None, pin, installed)
        return VersionPlan(VersionAction.INSTALL, mine, mine, version=installed)
    if kubeadm.minor_key(mine) > kubeadm.minor_key(published):
        return VersionPlan(VersionAction.NEWER, mine, published, version=installed)
    target = kubeadm.next_minor(mine)
    if target not in kubeadm.RELEASES:
        raise ValueError(
            f"this node runs Kubernetes {mine} and upgrades one minor at a time, but this "
            f"charm cannot install {target}: remove this unit and add a new one"
        )
    pin = kubeadm.RELEASES[target].version
    return VersionPlan(VersionAction.UPGRADE, mine, target, None, pin, installed)


def plan_restart(host: Host, running: str | None) -> Upgrade | None:
    """Plan the upgrade procedure for a kubelet older than its package; the plan or None.

    `running`: the version the Node says its kubelet runs (`running_version`); None when
    the Node has no nodeInfo yet, which plans nothing. A joined node whose kubelet is older
    than the installed package (`kubelet_behind`) records an upgrade from the running
    version to the installed one (`UPGRADE_STATE`), which the next reconcile takes in an
    upgrade turn as any upgrade (`plan_version`): `kubeadm upgrade node`, drain, restart,
    uncordon. Not while an upgrade is recorded, nor again for a package this node
    restarted kubelet into (`RESTARTED`: the Node shows it once the new kubelet posts its
    status). A kubelet newer than its package is left alone (logged).

    Drained, though a kubelet restart leaves running containers alone: the kubelet that
    starts is another version, and kubernetes.io "Version Skew Policy" (kubelet) says to
    drain before a minor kubelet upgrade ("In-place minor version kubelet upgrades are not
    supported"), "Upgrading Linux nodes" drains before a patch's restart too, and issue 30
    asks every upgrade to take a turn.
    """
    if running is None or not kubeadm.is_joined(host) or host.read(UPGRADE_STATE) is not None:
        return None
    installed = kubeadm.installed_release(host)
    if installed is None or not kubelet_behind(running, installed):
        if installed is not None and running != installed:
            logger.warning(
                "kubelet runs %s, newer than its package %s: left alone", running, installed
            )
        return None
    if (host.read(RESTARTED) or "").strip() == installed:
        logger.info("kubelet restarted into %s; its Node still says %s", installed, running)
        return None
    upgrade = Upgrade(running, installed)
    save_upgrade(host, upgrade)
    logger.info("kubelet runs %s, its package is %s: restart planned", running, installed)
    return upgrade


def newer_message(running: str, published: str) -> str:
    """The Blocked message of a node newer than its control plane."""
    return (
        f"this node runs Kubernetes {running} but the control plane runs {published}: "
        "upgrade the control plane (juju config kubernetes-control-plane "
        f"kubernetes-version={running})"
    )


def upgrade_node(
    host: Host,
    kube: Kube,
    node: str,
    upgrade: Upgrade,
    *,
    mirror: str | None,
    drain_timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DrainResult | None:
    """Upgrade this joined node to `upgrade.target`, resuming after the last finished step.

    The kubeadm procedure for nodes: kubeadm at the new version, `kubeadm upgrade node`,
    cordon + drain, kubelet (and cri-tools, CNI plugins) at the new version, kubelet
    restart, uncordon. Progress is recorded on the machine after each step that must
    not be repeated, and cleared at the end. A drain that times out carries on; its
    result (pods left) is returned when this call drained, None otherwise.

    Raises:
        kubeadm.KubeadmError: `kubeadm upgrade node` failed.
        apt.AptError: a package could not be installed.
        CommandError: kubelet could not be restarted.
        KubeError: the Kubernetes API refused the drain or the uncordon.
    """
    save_upgrade(host, upgrade)
    minor = minor_of(upgrade.target)
    kubeadm.install_kubeadm(host, minor, mirror=mirror, version=upgrade.target)
    if "node" not in upgrade.done:
        kubeadm.upgrade_node(host)
        upgrade.done.append("node")
        save_upgrade(host, upgrade)
    result = None
    if "drain" not in upgrade.done:
        result = drain.drain(kube, node, timeout=drain_timeout, clock=clock, sleep=sleep)
        upgrade.cordoned = result is not None
        upgrade.done.append("drain")
        save_upgrade(host, upgrade)
    kubeadm.install(host, minor, mirror=mirror, with_kubectl=False, version=upgrade.target)
    if "restart" not in upgrade.done:
        kubeadm.restart_kubelet(host)
        host.write(RESTARTED, upgrade.target + "\n")
        upgrade.done.append("restart")
        save_upgrade(host, upgrade)
    if upgrade.cordoned:
        gpu_health.uncordon(host, kube, node)  # a quarantined GPU keeps it cordoned
    clear_upgrade(host)
    return result


class UpgradeError(Exception):
    """A step of this node's upgrade failed; the message is the Waiting status.

    The next event resumes from that step (`UPGRADE_STATE`).
    """


def run_upgrade(
    host: Host,
    kube: Kube,
    node: str,
    upgrade: Upgrade,
    *,
    mirror: str | None,
    drain_timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """`upgrade_node`, saying in the log what it does and which pods a drain left.

    The version the restarted kubelet runs is the one it posts on its Node
    (`running_version`), which the charm reads with the Node on every hook.

    Raises:
        UpgradeError: kubeadm, a package or the kubelet restart failed; the message says
            whether the node stays cordoned.
        KubeError: the Kubernetes API refused the drain or the uncordon.
    """
    logger.info(
        "upgrading node %s from Kubernetes %s to %s (steps done: %s)",
        node,
        upgrade.source,
        upgrade.target,
        ", ".join(upgrade.done) or "none",
    )
    try:
        result = upgrade_node(
            host,
            kube,
            node,
            upgrade,
            mirror=mirror,
            drain_timeout=drain_timeout,
            clock=clock,
            sleep=sleep,
        )
    except (kubeadm.KubeadmError, apt.AptError, CommandError) as e:
        cordoned = f"node {node} stays cordoned; " if upgrade.cordoned else ""
        logger.error("upgrade of node %s to Kubernetes %s: %s", node, upgrade.target, e)
        raise UpgradeError(
            f"upgrade to Kubernetes {shown(upgrade.target)} failed: {e}; {cordoned}"
            "retrying on the next update-status"
        ) from None
    if result is not None and result.remaining:
        summary = drain_summary(node, result, drain_timeout)
        logger.warning("%s; upgraded anyway: %s", summary, " ".join(result.remaining))
    logger.info("node %s upgraded to Kubernetes %s; kubelet restarted", node, upgrade.target)
