# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The workers as the leader sees them: their registry, their Nodes, what they are told.

A hook about one worker unit reads that unit's databag and at most one Node; the
registry (`registry.py`) lets every hook count workers and GPUs without reading the rest.
Nodes of departed workers are deleted once drained or NotReady. Workers are told the
control-plane endpoint, the API servers behind it, the CA pin, the minor to run (the
lowest control-plane minor while an upgrade is under way), during an upgrade whose turn it
is, the image registry, and the device plugin's MIG strategy and time-slicing replicas
(which their GPU node labels describe); the token and their kubeconfig travel in a secret.

Ops code (the workers relation and the peer databag); the decisions are in
`registry.py`, `rolling.py` and `cluster_info.py`.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING

import cluster_info
import ops
import registry
import rolling
from literals import PEERS, TOKEN_ROTATION_MARGIN_HOURS, WORKERS
from membership import parse_time
from settings import Config

if TYPE_CHECKING:
    from charm import KubernetesControlPlaneCharm

logger = logging.getLogger(__name__)

# Events after which the leader lists every Node to see which are Ready.
FULL_NODE_CHECK = (
    ops.UpdateStatusEvent,
    ops.LeaderElectedEvent,
    ops.UpgradeCharmEvent,
    ops.InstallEvent,
    ops.ConfigChangedEvent,
)


class Fleet:
    """The worker nodes: registry, node health, departed nodes, what workers are told."""

    def __init__(self, charm: KubernetesControlPlaneCharm):
        self.charm = charm

    @staticmethod
    def _worker_turn(bag: ops.RelationDataContent, control_plane_done: bool) -> str | None:
        """The worker unit that may upgrade now, once the control plane has finished."""
        versions = registry.Registry.load(bag).versions()
        waiting = rolling.pending(versions, bag["cluster-version"]) if control_plane_done else []
        return rolling.pass_turn(bag, "worker-upgrade-turn", waiting)

    def publish(
        self, config: Config, peers: ops.Relation, token: str, control_plane_done: bool
    ) -> None:
        """Tell every workers relation how to join and which minor to run (leader only)."""
        if not self.charm.workers.relations:
            return
        bag = peers.data[self.charm.app]
        expires = parse_time(bag.get("token-expires"))
        expire = (
            expires - datetime.timedelta(hours=TOKEN_ROTATION_MARGIN_HOURS) if expires else None
        )
        kubeconfig = self.charm.access.worker_kubeconfig(bag)
        endpoint = f"https://{bag['endpoint']}"
        version = bag["cluster-version"]
        if not control_plane_done:  # mid-upgrade: no kubelet newer than any API server
            mine = self.charm._installed().get("kubernetes")
            version = rolling.lowest(self.charm._member_versions(peers, mine, None), version)
        self.charm.workers.publish(
            endpoint,
            self.charm._api_servers(peers),
            bag["ca-cert-hash"],
            version,
            token,
            kubeconfig,
            expire=expire,
            upgrade_turn=self._worker_turn(bag, control_plane_done),
            image_registry=config.image_registry,
            mig_strategy=config.mig_strategy,
            gpu_time_slicing_replicas=config.gpu_time_slicing_replicas,
        )

    def sync(self, bag: ops.RelationDataContent, event: ops.EventBase) -> set[str]:
        """Keep the worker registry in the peer databag current; remove departed nodes.

        A hook about one worker unit reads that unit's databag only; all of them are read
        when there is no registry yet, when leadership moved, or after an upgrade.
        Returns the node names that are new to the registry.
        """
        before = registry.Registry.load(bag) if registry.WORKERS_KEY in bag else None
        if before is None or isinstance(event, (ops.LeaderElectedEvent, ops.UpgradeCharmEvent)):
            workers = self.charm.workers.workers()
            now = registry.Registry.rebuild(
                workers, self.charm.workers.problems(), self._relation_of
            )
        else:
            now = registry.Registry.load(bag)
            if isinstance(event, ops.RelationEvent) and event.relation.name == WORKERS:
                self._update_registry(event, now)
        pending, left = registry.departed_nodes(bag, before, now)
        if left:
            left = self._remove_drained_nodes(left)
        registry.save_pending(bag, pending, left)
        now.save(bag)
        return now.nodes - (before.nodes if before is not None else set())

    def observe_nodes(self, peers: ops.Relation, event: ops.EventBase, added: set[str]) -> None:
        """Record which expected Nodes the API reports not Ready or does not have.

        One list of every Node on the events that come rarely (update-status, a new
        leader, a charm upgrade, the first time); otherwise one GET per node name that is
        new (`added` workers; the control-plane nodes when a peer changed), so a hook
        about one worker costs at most one request however large the cluster.
        """
        bag = peers.data[self.charm.app]
        planes = self.charm._control_plane_nodes(peers)
        expected = planes | registry.Registry.load(bag).nodes
        health = cluster_info.NodeHealth.load(bag)
        kube = self.charm._kube_client()
        if health is None or isinstance(event, FULL_NODE_CHECK):
            health = cluster_info.NodeHealth.from_table(expected, kube.table("v1", "Node"))
        else:
            names = set(added)
            if isinstance(event, ops.RelationEvent) and event.relation.name == PEERS:
                names |= planes
            for name in sorted(names & expected):
                health.observe(name, kube.get("v1", "Node", name))
            health.keep_only(expected)
        health.save(bag)

    def _update_registry(self, event: ops.RelationEvent, known: registry.Registry) -> None:
        """Apply one workers relation event to the registry, reading one databag at most."""
        if isinstance(event, ops.RelationBrokenEvent):
            known.forget(known.units_of_relation(event.relation.id))
            return
        if isinstance(event, ops.RelationDepartedEvent):
            known.forget([event.departing_unit.name] if event.departing_unit else [])
            return
        if event.unit is None:
            return
        known.forget([event.unit.name])
        info, problem = self.charm.workers.read_worker(event.relation, event.unit)
        known.record(event.unit.name, info, problem, event.relation.id)

    def _relation_of(self, unit_name: str) -> int:
        for relation in self.charm.workers.relations:
            if any(u.name == unit_name for u in relation.units):
                return relation.id
        return -1

    def _remove_drained_nodes(self, pending: set[str]) -> set[str]:
        kube = self.charm._kube_client()
        left = set()
        for name in sorted(pending):
            node = kube.get("v1", "Node", name)
            if node is None:
                continue
            pods = kube.list("v1", "Pod", field_selector=f"spec.nodeName={name}")
            ok, why = cluster_info.removable(node, pods)
            if ok:
                kube.delete("v1", "Node", name)
                logger.info("deleted Node %s of a departed worker (%s)", name, why)
            else:
                logger.info("keeping Node %s of a departed worker for now: %s", name, why)
                left.add(name)
        return left
