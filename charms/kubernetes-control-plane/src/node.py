# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""This control-plane machine's Kubernetes packages, and its upgrades one minor at a time.

No ops imports. What is installed is recorded in a marker file, so that a hook with
nothing new runs no command and a failed hook (whose StoredState Juju discards, but not
the packages it changed) resumes an upgrade where it stopped:

    {"kubernetes": "1.36", "mirror": ""}                          installed
    {"kubernetes": "1.36", "mirror": "", "upgrading": "1.37"}     kubeadm moved, no more
    {..., "upgrading": "1.37", "applied": "1.37"}                 `kubeadm upgrade` ran
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
        """The marker: {"kubernetes": minor, "mirror": url}, plus upgrade progress."""
        return json.loads(self.host.read(INSTALL_MARKER) or "{}")

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
        want = {"kubernetes": minor, "mirror": mirror}
        if marker == want:
            return
        logger.info("installing containerd and Kubernetes %s", minor)
        try:
            containerd.prepare_kernel(self.host)
            containerd.install(self.host)
            containerd.configure(self.host, sandbox_image=image_registry.sandbox_image(registry))
            kubeadm.install(self.host, minor, mirror=mirror or None, with_kubectl=True)
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
        if not started or started in (running, wanted):
            return
        if marker.get("applied") == started:
            raise NodeError(
                f"this node's control plane already runs {started} (kubeadm upgrade "
                f"cannot be undone); set kubernetes-version to {started} to finish",
                blocked=True,
            )
        minor = marker["kubernetes"]
        logger.info("upgrade to %s abandoned; putting kubeadm %s back", started, minor)
        try:
            kubeadm.install_kubeadm(self.host, minor, mirror=mirror or None)
        except AptError as e:
            raise NodeError(
                f"putting kubeadm {minor} back: {e}; or fix package-mirror", blocked=True
            ) from None
        del marker["upgrading"]
        self._record(marker)

    def upgrade(
        self,
        minor: str,
        mirror: str,
        *,
        first: bool,
        drain: Callable[[], bool],
        uncordon: Callable[[], object],
    ) -> None:
        """Upgrade this node to `minor` the way kubeadm documents it.

        kubeadm first, then `kubeadm upgrade apply` (the first node: the cluster's
        configuration and this node) or `kubeadm upgrade node` (the others), then
        `drain()` (False: the node is not registered, nothing to uncordon), kubelet and
        kubectl, restart kubelet, `uncordon()`. Every step can run again: the marker says
        an upgrade is under way and whether `kubeadm upgrade` already ran.

        Raises:
            NodeError: blocked when packages cannot be had, else retried on the next event.
        """
        marker = {**self.installed(), "upgrading": minor}
        self._record(marker)
        node = kubeadm.node_name(self.host)
        logger.info("upgrading node %s to Kubernetes %s", node, minor)
        try:
            kubeadm.install_kubeadm(self.host, minor, mirror=mirror or None)
            if marker.get("applied") != minor:
                if first:
                    bootstrap.upgrade_apply(self.host, kubeadm.RELEASES[minor].version)
                else:
                    kubeadm.upgrade_node(self.host)
                # From here on the node's control plane runs `minor`: no way back.
                marker["applied"] = minor
                self._record(marker)
            registered = drain()
            kubeadm.install(self.host, minor, mirror=mirror or None, with_kubectl=True)
            kubeadm.restart_kubelet(self.host)
            if registered:
                uncordon()
        except (bootstrap.BootstrapError, kubeadm.KubeadmError, CommandError) as e:
            raise NodeError(
                f"upgrade to {minor}: {e}; retrying on the next event", blocked=False
            ) from None
        except AptError as e:
            back = f" or set kubernetes-version back to {marker['kubernetes']}" if first else ""
            raise NodeError(
                f"upgrade to {minor}: {e}; fix package-mirror{back}", blocked=True
            ) from None
        self._record({"kubernetes": minor, "mirror": mirror})
        logger.info("node %s runs Kubernetes %s", node, minor)
