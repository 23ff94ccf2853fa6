# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""This control-plane machine's Kubernetes packages, and its upgrades: a patch or one minor.

No ops imports. What is installed is recorded in a marker file, so that a hook with
nothing new runs no command and a failed hook (whose StoredState Juju discards, but not
the packages it changed) resumes an upgrade where it stopped:

    {"kubernetes": "1.36", "version": "1.36.5", "mirror": ""}          installed
    {..., "upgrading": "1.36.7"}                                        kubeadm moved, no more
    {..., "upgrading": "1.36.7", "applied": "1.36.7"}                   `kubeadm upgrade` ran

The full version is recorded, so that a charm revision pinning a new patch of the same
minor is seen and reached by `kubeadm upgrade` (kubernetes.io "Upgrading kubeadm
clusters" runs patch upgrades as minor ones: apply/node, drain, kubelet, restart,
uncordon). A marker of an earlier revision says the minor only (`{"kubernetes": "1.36"}`):
its version is read from the installed kubelet package (`installed_version`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import bootstrap
import image_registry
from literals import INSTALL_MARKER

from charms.gpu_k8s.v0 import containerd, kubeadm
from charms.gpu_k8s.v0.apt import AptError
from charms.gpu_k8s.v0.system import CommandError, Host

logger = logging.getLogger(__name__)


class NodeError(Exception):
    """A step failed; `blocked` when the operator must act, else it clears on a retry."""

    def __init__(self, message: str, *, blocked: bool):
        super().__init__(message)
        self.blocked = blocked


class Node:
    """The packages of one control-plane machine."""

    def __init__(self, host: Host):
        self.host = host

    def installed(self) -> dict:
        """The marker: {"kubernetes": minor, "version": full, "mirror": url}, plus progress."""
        return json.loads(self.host.read(INSTALL_MARKER) or "{}")

    def installed_version(self) -> str | None:
        """The Kubernetes version ("1.36.5") this node was installed or upgraded to, or None.

        A per-minor marker (an earlier charm revision) has no "version": the kubelet
        package says which patch that revision installed.
        """
        marker = self.installed()
        if not marker.get("kubernetes"):
            return None
        version = marker.get("version") or kubeadm.installed_release(self.host)
        return version or kubeadm.RELEASES[marker["kubernetes"]].version

    def _record(self, marker: dict) -> None:
        self.host.write(INSTALL_MARKER, json.dumps(marker, sort_keys=True))

    def minor(self, joined: bool, fallback: str) -> str:
        """The minor this node runs: a joined node keeps its own until it upgrades."""
        installed = self.installed().get("kubernetes")
        return installed if installed and joined else fallback

    def install(self, minor: str, mirror: str, *, registry: str = "") -> None:
        """Install containerd and kubeadm/kubelet/kubectl once per minor and mirror.

        containerd's sandbox image comes from `registry` (the `image-registry` option)
        when one is set; `configure_containerd` keeps it current afterwards. A node in the
        middle of an upgrade is left to `upgrade`, which owns the order in which its
        packages change.

        Raises:
            NodeError: a package could not be installed (blocked: the mirror or archive).
        """
        marker = self.installed()
        if marker.get("upgrading"):
            return
        # a joined node keeps its patch: a newer pin is reached by `upgrade`, in turn
        same = marker.get("kubernetes") == minor
        kept = self.installed_version() if same and kubeadm.is_joined(self.host) else None
        version = kept or kubeadm.RELEASES[minor].version
        want = {"kubernetes": minor, "version": version, "mirror": mirror}
        if marker == want:
            return
        if kept and marker.get("mirror") == mirror and "version" not in marker:
            self._record(want)  # a per-minor marker: record the version, change nothing
            return
        logger.info("installing containerd and Kubernetes %s", version)
        try:
            containerd.prepare_kernel(self.host)
            containerd.install(self.host)
            containerd.configure(self.host, sandbox_image=image_registry.sandbox_image(registry))
            kubeadm.install(
                self.host, minor, mirror=mirror or None, with_kubectl=True, version=version
            )
        except AptError as e:
            raise NodeError(f"{e}; or fix package-mirror", blocked=True) from None
        self._record(want)

    def configure_containerd(self, registry: str) -> bool:
        """Render containerd's config for `registry`; True when it changed (and restarted).

        Nothing before `install` put containerd on the machine. containerd restarts only
        when the file changed: running containers carry on under their shims.
        """
        if not self.installed().get("kubernetes"):
            return False
        sandbox = image_registry.sandbox_image(registry)
        if not containerd.configure(self.host, sandbox_image=sandbox):
            return False
        logger.info("containerd pulls its sandbox image %s", sandbox)
        return True

    def settle_abandoned_upgrade(self, wanted: str, running: str | None, mirror: str) -> None:
        """Undo an upgrade of this node that `kubernetes-version` no longer asks for.

        The operator may set the version back while the first node's upgrade is stuck
        (say the mirror lacks the new packages, or kubeadm's preflight fails). Until
        `kubeadm upgrade` has run, only the kubeadm package and its source changed: both go
        back to this node's minor. After it, the control plane runs the new minor and
        kubeadm cannot go back, so the operator is asked to finish the upgrade instead.

        Raises:
            NodeError: blocked, with what to set or fix.
        """
        marker = self.installed()
        started = marker.get("upgrading")
        if not started or kubeadm.minor_of(started) in (running, wanted):
            return
        if marker.get("applied") == started:
            minor = kubeadm.minor_of(started)
            raise NodeError(
                f"this node's control plane already runs {minor} (kubeadm upgrade "
                f"cannot be undone); set kubernetes-version to {minor} to finish",
                blocked=True,
            )
        minor = marker["kubernetes"]
        version = self.installed_version()
        logger.info("upgrade to %s abandoned; putting kubeadm %s back", started, version)
        try:
            kubeadm.install_kubeadm(self.host, minor, mirror=mirror or None, version=version)
        except AptError as e:
            raise NodeError(
                f"putting kubeadm {minor} back: {e}; or fix package-mirror", blocked=True
            ) from None
        del marker["upgrading"]
        self._record(marker)

    def upgrade(
        self,
        version: str,
        mirror: str,
        *,
        first: bool,
        drain: Callable[[], bool],
        uncordon: Callable[[], object],
    ) -> None:
        """Upgrade this node to `version` (a patch, or the next minor) as kubeadm documents it.

        kubernetes.io "Upgrading kubeadm clusters": kubeadm first, then `kubeadm upgrade
        apply` (the first node: the cluster's configuration and this node) or `kubeadm
        upgrade node` (the others), then `drain()` (False: the node is not registered,
        nothing to uncordon), kubelet and kubectl, restart kubelet (the deb does not:
        `kubeadm.restart_kubelet`), `uncordon()`. Every step can run again: the marker
        says an upgrade is under way and whether `kubeadm upgrade` already ran.

        Raises:
            NodeError: blocked when packages cannot be had, else retried on the next event.
        """
        minor = kubeadm.minor_of(version)
        marker = self.installed()
        if marker.get("kubernetes") and "version" not in marker:
            marker["version"] = self.installed_version()
        for key in ("upgrading", "applied"):  # an earlier revision recorded minors here
            if marker.get(key) == minor:
                marker[key] = version
        marker["upgrading"] = version
        self._record(marker)
        node = kubeadm.node_name(self.host)
        logger.info("upgrading node %s to Kubernetes %s", node, version)
        pinned = {"mirror": mirror or None, "version": version}
        try:
            kubeadm.install_kubeadm(self.host, minor, **pinned)
            if marker.get("applied") != version:
                if first:
                    bootstrap.upgrade_apply(self.host, version)
                else:
                    kubeadm.upgrade_node(self.host)
                # From here on the node's control plane runs `version`: no way back.
                marker["applied"] = version
                self._record(marker)
            registered = drain()
            kubeadm.install(self.host, minor, with_kubectl=True, **pinned)
            kubeadm.restart_kubelet(self.host)
            if registered:
                uncordon()
        except (bootstrap.BootstrapError, kubeadm.KubeadmError, CommandError) as e:
            raise NodeError(
                f"upgrade to {_shown(version)}: {e}; retrying on the next event", blocked=False
            ) from None
        except AptError as e:
            back = ""
            if first and marker.get("kubernetes") != minor:
                back = f" or set kubernetes-version back to {marker['kubernetes']}"
            raise NodeError(
                f"upgrade to {_shown(version)}: {e}; fix package-mirror{back}", blocked=True
            ) from None
        self._record({"kubernetes": minor, "version": version, "mirror": mirror})
        logger.info("node %s runs Kubernetes %s", node, version)


def _shown(version: str) -> str:
    """A version in a status: the minor when it is the minor's pin (what the option says)."""
    minor = kubeadm.minor_of(version)
    pinned = kubeadm.RELEASES.get(minor)
    return minor if pinned is not None and pinned.version == version else version
