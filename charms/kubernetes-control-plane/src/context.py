# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What one hook knows about this unit, and the hook's Kubernetes API client.

`charm.py` builds a `UnitContext` at the start of a hook from what Juju and the machine
say (the unit's name and leadership, its address on the peers binding, its public
address, the machine and its node name) and hands it to the parts of the reconcile,
which need no charm to ask. The fields do not change within the hook; whether this unit
joined the control plane does (bootstrap, join, leave), so `joined()` reads the machine
each time.

`juju_public_address` asks Juju for the public address (the charm's boundary for it,
replaced in tests). `KubeSession` is the hook's cluster-admin client, made from the admin
kubeconfig the first time a part asks for it (a hook with nothing new to apply makes no
connection) and closed at the end of the hook.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import bootstrap
import node
from literals import API_PORT

from charms.gpu_k8s.v0.kubeclient import Kube
from charms.gpu_k8s.v0.status import StatusError
from charms.gpu_k8s.v0.system import Host


def juju_public_address() -> str | None:
    """This unit's public address as Juju knows it (`unit-get public-address`), or None.

    ops has no call for it (network-get gives the bound addresses, which on AWS are the
    VPC's); canonical/k8s-operator asks the same hook tool for its external kubeconfig.
    """
    tool = shutil.which("unit-get")
    if tool is None:
        return None
    try:
        done = subprocess.run(
            [tool, "public-address"], capture_output=True, text=True, check=True, timeout=60
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


@dataclasses.dataclass(frozen=True)
class UnitContext:
    """This unit in one hook.

    `ingress_address`: its address on the peers binding (None until Juju has one);
    `public_address`: what `unit-get public-address` answered (None when nothing).
    """

    host: Host
    unit: str
    leader: bool
    node_name: str
    ingress_address: str | None
    public_address: str | None

    @property
    def address(self) -> str:
        """The address this unit's API server advertises; Waiting until Juju gives one."""
        if self.ingress_address is None:
            raise StatusError.waiting("waiting for a network address")
        return self.ingress_address

    @property
    def api_server(self) -> str:
        """This unit's API server as host:port (what the node proxies and consumers reach)."""
        return f"{bootstrap.endpoint_host(self.address)}:{API_PORT}"

    @property
    def node(self) -> node.Node:
        """This machine's Kubernetes packages."""
        return node.Node(self.host)

    def joined(self) -> bool:
        """Whether this machine is a control-plane member (read from the machine)."""
        return bootstrap.is_bootstrapped(self.host)

    def installed_minor(self) -> str | None:
        """The Kubernetes minor installed on this machine, if any."""
        return self.node.installed().get("kubernetes")

    def own_node(self) -> str | None:
        """This unit's node name once it joined, as the peers count control-plane nodes."""
        return self.node_name if self.joined() else None

    def own_api_server(self, cluster_version: str | None) -> str | None:
        """This unit's API server once it serves one, as the peers list API servers.

        The leader about to bootstrap lists itself: its API server is what `kubeadm init`
        starts behind the proxy.
        """
        bootstrapping = self.leader and not cluster_version
        return self.api_server if self.joined() or bootstrapping else None


class KubeSession:
    """The hook's cluster-admin API client: made on first call, closed by `close()`."""

    def __init__(self, host: Host):
        self._host = host
        self._kube: Kube | None = None

    def __call__(self) -> Kube:
        """The client; Waiting while this machine has no admin kubeconfig."""
        if self._kube is None:
            text = bootstrap.read_admin_kubeconfig(self._host)
            if text is None:
                raise StatusError.waiting("waiting for the admin kubeconfig")
            self._kube = Kube.from_kubeconfig(text)
        return self._kube

    def close(self) -> None:
        """Close the client, if one was made; the next call makes a new one."""
        if self._kube is not None:
            self._kube.close()
            self._kube = None

    def __enter__(self) -> KubeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
