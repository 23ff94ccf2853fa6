# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Taking a control-plane unit out of the cluster when `juju remove-unit` removes it (no ops).

Drain the node, `kubeadm reset` (which removes this etcd member, so the others keep
quorum), then delete the Node through the other API servers, reached through this node's
proxy, which goes last. Juju sends the peer relation-departed this runs in only when
another control-plane unit exists; on application removal nothing is reset, so etcd's
data stays. An API error in the drain fails the hook, so Juju retries it (with the same
event) rather than resetting an undrained node. After the reset this machine has no
admin.conf, so a retry could not delete the Node: a failed deletion is logged and the
leader deletes the departed unit's Node once it is NotReady
(`Membership.remove_departed_nodes`; review deploy.md N6). Juju runs the peer
relation-departed of the removed unit before its stop and remove hooks, so this hook is
the last one with the cluster still reachable.

A hook that fails after the reset (HAProxy's removal) is retried on a machine that is no
longer a member: only the proxy is left to remove then, so the unit has left once no
member is left here and the proxy is gone (issue 30 item 7).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import bootstrap
from context import KubeSession
from upgrades import drain_node

from charms.gpu_k8s.v0 import api_proxy, kubeadm
from charms.gpu_k8s.v0.kubeclient import KubeError
from charms.gpu_k8s.v0.system import Host

logger = logging.getLogger(__name__)


def leave(
    host: Host,
    *,
    app_removed: bool,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> bool:
    """Leave the cluster (module docstring); whether this unit has left it.

    `app_removed`: the whole application is going (planned units 0): nothing is reset.
    """
    member = bootstrap.is_bootstrapped(host)
    if member and app_removed:
        logger.warning("the application is being removed: etcd data stays on this machine")
        return False
    if member:
        name = kubeadm.node_name(host)
        _reset_member(host, name, clock, sleep)
        logger.info("left the control plane: node %s drained, reset and deleted", name)
    # a unit that never joined and has no proxy has nothing to undo
    return api_proxy.remove(host) or member


def _reset_member(
    host: Host, name: str, clock: Callable[[], float], sleep: Callable[[float], None]
) -> None:
    """Drain this node, `kubeadm reset` this machine, then delete its Node."""
    with KubeSession(host) as session:
        kube = session()
        registered = drain_node(kube, name, "stop with it", clock=clock, sleep=sleep)
        kubeadm.reset(host)
        if registered:
            try:
                kube.delete("v1", "Node", name)
            except KubeError as e:
                logger.warning(
                    "could not delete Node %s (%s); the leader deletes it once NotReady",
                    name,
                    e,
                )
        bootstrap.forget_joined(host)
