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

The workers' bootstrap token is their own (never the control plane's join token) and
exists only while a related worker unit has not registered its node: the leader mints it
(`WORKER_TOKEN_TTL_HOURS`) when such a unit appears, replaces it before it expires, and
deletes it (`kubeadm token delete`, which deletes its `bootstrap-token-<id>` Secret) once
every unit registered. Each joining unit reads it from a secret granted to that unit alone,
removed once it registered (lib kubernetes_cluster.py). Root on a joined worker reads
what that worker's agent may read, and a token that outlived the joins would let it have a
client certificate approved for any node name (`literals.WORKER_TOKEN_TTL_HOURS`).

An ops component (the workers relation and the peer data): it takes the workers
endpoint, this unit's `context.UnitContext`, the hook's API client and the way to the
workers' kubeconfig, never the charm. The decisions are in `registry.py`, `rolling.py` and
`cluster_info.py`.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Callable, MutableMapping
from typing import Any

import bootstrap
import cluster_info
import ops
import registry
import rolling
from charm_config import Config
from context import UnitContext
from listing import shown
from literals import (
    CONTROL_PLANE_LABEL,
    PEERS,
    TOKEN_ROTATION_MARGIN_HOURS,
    WORKER_TOKEN_TTL_HOURS,
    WORKER_UPGRADE_TURN_SECONDS,
    WORKERS,
)
from peers import CA_CERT_HASH, CLUSTER_VERSION, ENDPOINT, WORKER_TOKEN_EXPIRES, Peers, parse_time

from charms.gpu_k8s.v0.kubeclient import Kube
from charms.gpu_k8s.v0.kubernetes_cluster import (
    ClusterProvider,
    WorkerInfo,
    gpu_taint_patch,
    quarantine_taint_patch,
    retry_on_conflict,
)

logger = logging.getLogger(__name__)

# The peer application databag: the worker unit that may upgrade now (rolling.py), since
# when it holds the turn, and the units that held it past WORKER_UPGRADE_TURN_SECONDS
# without reaching the cluster's minor (they come last, after every other waiting unit).
WORKER_UPGRADE_TURN_KEY = "worker-upgrade-turn"
WORKER_TURN_SINCE_KEY = "worker-upgrade-turn-since"
WORKER_TURN_OVERDUE_KEY = "worker-upgrade-overdue"

# Events after which the leader lists every Node to see which are Ready.
FULL_NODE_CHECK = (
    ops.UpdateStatusEvent,
    ops.LeaderElectedEvent,
    ops.UpgradeCharmEvent,
    ops.InstallEvent,
    ops.ConfigChangedEvent,
)


class Fleet:
    """The worker nodes: registry, node health, departed nodes, what workers are told.

    `workers`: the workers endpoint; `ctx`: this unit; `kube`: the hook's API client;
    `worker_kubeconfig`: the workers' kubeconfig for the peer data (`Access`).
    """

    def __init__(
        self,
        workers: ClusterProvider,
        ctx: UnitContext,
        kube: Callable[[], Kube],
        *,
        worker_kubeconfig: Callable[[Peers], str],
        clock: Callable[[], datetime.datetime],
    ):
        self._workers = workers
        self._ctx = ctx
        self._kube = kube
        self._worker_kubeconfig = worker_kubeconfig
        self._clock = clock

    def _worker_turn(self, peers: Peers, control_plane_done: bool) -> tuple[str | None, list[str]]:
        """The worker unit that may upgrade now, once the control plane has finished.

        A `kubernetes-version` is what a worker unit says (root on it can say an older
        one and never finish), so a unit holding the turn past WORKER_UPGRADE_TURN_SECONDS
        is overdue: the turn passes to the next waiting unit, and an overdue unit gets it
        again only when no other unit waits. Also returns the status notes naming them.
        """
        bag = peers.app
        versions = registry.Registry.load(bag).versions()
        target = bag[CLUSTER_VERSION]
        waiting = rolling.pending(versions, target) if control_plane_done else []
        overdue = [u for u in json.loads(bag.get(WORKER_TURN_OVERDUE_KEY, "[]")) if u in waiting]
        current, since = (
            bag.get(WORKER_UPGRADE_TURN_KEY),
            parse_time(bag.get(WORKER_TURN_SINCE_KEY)),
        )
        now = self._clock()
        deadline = datetime.timedelta(seconds=WORKER_UPGRADE_TURN_SECONDS)
        if current in waiting and current not in overdue and since and now - since > deadline:
            overdue.append(current)
            logger.warning("%s held the worker upgrade turn past %s: passed on", current, deadline)
        eligible = [u for u in waiting if u not in overdue] or overdue
        holder = rolling.pass_turn(bag, WORKER_UPGRADE_TURN_KEY, eligible)
        if holder is None:
            bag.pop(WORKER_TURN_SINCE_KEY, None)
        elif holder != current or since is None:
            bag[WORKER_TURN_SINCE_KEY] = now.isoformat()
        if overdue:
            bag[WORKER_TURN_OVERDUE_KEY] = json.dumps(overdue)
        else:
            bag.pop(WORKER_TURN_OVERDUE_KEY, None)
        hours = WORKER_UPGRADE_TURN_SECONDS // 3600
        held = [
            f"{unit} held the worker upgrade turn {hours}h without reaching v{target} (passed on)"
            for unit in overdue
        ]
        notes = [shown(held, more="worker(s) overdue with the upgrade turn")] if held else []
        return holder, notes

    @staticmethod
    def refused(peers: Peers) -> list[str]:
        """Blocked lines naming the worker units refused service (`cluster_info.refusal_lines`)."""
        return cluster_info.refusal_lines(registry.Registry.load(peers.app))

    def published_token(self) -> str:
        """The bootstrap token the workers' join secret holds ("" when none)."""
        return self._workers.published_token()

    def joining(self, peers: Peers) -> list[str]:
        """The related worker units that have not registered a node (no databag is read).

        A unit with a problem line published a node name (it joined) or was refused one:
        it gets no bootstrap token (`registry.Registry.record`).
        """
        known = registry.Registry.load(peers.app)
        return [
            u.name
            for r in self._workers.relations
            for u in r.units
            if u.name not in known.workers and u.name not in known.problems
        ]

    def worker_token(self, peers: Peers, shared: str) -> str:
        """The workers' bootstrap token while a unit joins ("" and none in the cluster after).

        `shared` is the control plane's own join token, which earlier revisions published
        to the workers too: it is never deleted here (control-plane units join with it)
        and never kept as the workers' (the caller rotates it away).
        """
        bag = peers.app
        current = self._workers.published_token()
        current = "" if current == shared else current
        expires = parse_time(bag.get(WORKER_TOKEN_EXPIRES))
        now = self._clock()
        if self.joining(peers):
            margin = datetime.timedelta(hours=TOKEN_ROTATION_MARGIN_HOURS)
            # one an earlier revision left where every worker unit reads it is replaced
            readable_by_all = self._workers.token_readable_by_all()
            if current and expires is not None and now < expires - margin and not readable_by_all:
                return current
            new = bootstrap.create_token(self._ctx.host, WORKER_TOKEN_TTL_HOURS)
            bag[WORKER_TOKEN_EXPIRES] = bootstrap.token_expiry(
                now, WORKER_TOKEN_TTL_HOURS
            ).isoformat()
            self._delete_token(current)
            logger.info("minted the workers' bootstrap token (valid %d h)", WORKER_TOKEN_TTL_HOURS)
            return new
        if current and not self._delete_token(current):
            return current  # kept in the secret so that the next hook deletes it
        bag.pop(WORKER_TOKEN_EXPIRES, None)
        return ""

    def _delete_token(self, token: str) -> bool:
        """Delete a bootstrap token; False (and a warning) when kubeadm could not."""
        if not token:
            return True
        try:
            bootstrap.delete_token(self._ctx.host, token)
        except bootstrap.BootstrapError as e:
            logger.warning("could not delete the workers' bootstrap token, retrying: %s", e)
            return False
        logger.info("deleted the workers' bootstrap token: every worker unit registered")
        return True

    def publish(
        self, config: Config, peers: Peers, token: str, control_plane_done: bool
    ) -> list[str]:
        """Tell every workers relation how to join and which minor to run (leader only).

        `token` is the workers' (`worker_token`), "" while no unit joins. Returns notes for
        the status (units overdue with the upgrade turn, `_worker_turn`).
        """
        if not self._workers.relations:
            return []
        bag = peers.app
        expires = parse_time(bag.get(WORKER_TOKEN_EXPIRES)) if token else None
        expire = (
            expires - datetime.timedelta(hours=TOKEN_ROTATION_MARGIN_HOURS) if expires else None
        )
        kubeconfig = self._worker_kubeconfig(peers)
        endpoint = f"https://{bag[ENDPOINT]}"
        version = bag[CLUSTER_VERSION]
        if not control_plane_done:  # mid-upgrade: no kubelet newer than any API server
            mine = self._ctx.installed_minor()
            version = rolling.lowest(peers.member_versions(mine, None), version)
        turn, notes = self._worker_turn(peers, control_plane_done)
        self._workers.publish(
            endpoint,
            peers.api_servers(self._ctx.own_api_server(peers.cluster_version)),
            bag[CA_CERT_HASH],
            version,
            token,
            kubeconfig,
            joining=self.joining(peers),
            expire=expire,
            upgrade_turn=turn,
            image_registry=config.image_registry,
            mig_strategy=config.mig_strategy,
            gpu_time_slicing_replicas=config.gpu_time_slicing_replicas,
        )
        return notes

    def sync(self, peers: Peers, event: ops.EventBase) -> set[str]:
        """Keep the worker registry in the peer databag current; remove departed nodes.

        A hook about one worker unit reads that unit's databag only; all of them are read
        when there is no registry yet, when leadership moved, or after an upgrade.
        Returns the node names that are new to the registry.
        """
        bag = peers.app
        before = registry.Registry.load(bag) if registry.WORKERS_KEY in bag else None
        planes = peers.control_plane_nodes(self._ctx.own_node())
        if before is None or isinstance(event, (ops.LeaderElectedEvent, ops.UpgradeCharmEvent)):
            workers = self._workers.workers()
            now = registry.Registry.rebuild(
                workers, self._workers.problems(), self._relation_of, stored=before, planes=planes
            )
        else:
            now = registry.Registry.load(bag)
            if isinstance(event, ops.RelationEvent) and event.relation.name == WORKERS:
                self._update_registry(event, now, bag, planes)
        held = set(registry.quarantined(bag))
        registry.save_quarantined(bag, held & now.nodes)  # a departed worker's goes with it
        pending, left = registry.departed_nodes(bag, before, now)
        if left:
            left = self._remove_drained_nodes(left)
        registry.save_pending(bag, pending, left)
        now.save(bag)
        return now.nodes - (before.nodes if before is not None else set())

    def observe_nodes(
        self,
        peers: Peers,
        event: ops.EventBase,
        added: set[str],
        nodes: list[dict[str, Any]] | None = None,
    ) -> None:
        """Record which expected Nodes the API reports not Ready or does not have.

        One list of every Node on the events that come rarely (update-status, a new
        leader, a charm upgrade, the first time): `nodes` when the caller read every whole
        Node in this hook (for Kueue's cohort), else the Node table; otherwise one GET per
        node name that is new (`added` workers; the control-plane nodes when a peer
        changed), so a hook about one worker costs at most one request however large the
        cluster.
        """
        bag = peers.app
        planes = peers.control_plane_nodes(self._ctx.own_node())
        expected = planes | registry.Registry.load(bag).nodes
        health = cluster_info.NodeHealth.load(bag)
        if nodes is not None:
            health = cluster_info.NodeHealth.from_nodes(expected, nodes)
        elif health is None or isinstance(event, FULL_NODE_CHECK):
            health = cluster_info.NodeHealth.from_table(expected, self._kube().table("v1", "Node"))
        else:
            names = set(added)
            if isinstance(event, ops.RelationEvent) and event.relation.name == PEERS:
                names |= planes
            for name in sorted(names & expected):  # the client only when a Node is asked for
                health.observe(name, self._kube().get("v1", "Node", name))
            health.keep_only(expected)
        health.save(bag)

    def _update_registry(
        self,
        event: ops.RelationEvent,
        known: registry.Registry,
        bag: MutableMapping[str, str],
        planes: set[str],
    ) -> None:
        """Apply one workers relation event to the registry, reading one databag at most.

        A unit's taint requests are honoured on the node it registered only: its claim
        refused (another unit's node, a control-plane node: `registry.Registry.record`),
        nothing is asked of the API for it.
        """
        if isinstance(event, ops.RelationBrokenEvent):
            known.forget(known.units_of_relation(event.relation.id))
            return
        if isinstance(event, ops.RelationDepartedEvent):
            known.forget([event.departing_unit.name] if event.departing_unit else [])
            return
        if event.unit is None:
            return
        unit = event.unit.name
        info, problem = self._workers.read_worker(event.relation, event.unit)
        known.record(unit, info, problem, event.relation.id, planes)
        if unit in known.problems:
            logger.warning("ignoring worker data: %s", known.problems[unit])
        registered = known.workers.get(unit)
        if (
            info is not None
            and unit not in known.problems
            and registered is not None
            and registered.node == info.node_name
            and (info.gpu_taint is not None or info.gpu_quarantine is not None)
        ):
            self._taint_for(unit, info, known, bag)

    def _taint_for(
        self, unit: str, info: WorkerInfo, known: registry.Registry, bag: MutableMapping[str, str]
    ) -> None:
        """Set or remove the taints a worker asks for, on the node that unit registered.

        The GPU taint (`gpu-taint`), and the quarantine taint (`gpu-quarantine`: set while
        the unit lists quarantined GPUs, removed only when the list is empty, on readmission).
        The Nodes held quarantined are recorded (`registry.QUARANTINED_KEY`): the cohort is
        sized for them in this same hook (addons.py), so Kueue's quota of a quarantined
        node is gone at once, and back with the readmission.

        A worker acts as its kubelet, which NodeRestriction forbids to change its taints
        (kubernetes plugin/pkg/admission/noderestriction/admission.go admitNode). The
        caller honours the request only for the node that unit registered first (root on
        one machine must not taint or untaint another's Node), and never on a Node labelled
        a control-plane node (`CONTROL_PLANE_LABEL`, which no kubelet can set: a refusal,
        the unit's problem line); only the GPU taint and the quarantine taint are touched
        (`kubernetes_cluster.gpu_taint_patch`). One GET, and one PATCH when the Node
        differs, in a hook about that unit only.

        Each patch carries the resourceVersion read (`spec.taints` is replaced whole): a
        409 Conflict, the Node changed meanwhile (an operator's taint, kubelet's status),
        reads it again (`kubernetes_cluster.retry_on_conflict`); then the hook fails.
        """
        retry_on_conflict(lambda: self._patch_taints(unit, info, known, bag))

    def _patch_taints(
        self, unit: str, info: WorkerInfo, known: registry.Registry, bag: MutableMapping[str, str]
    ) -> None:
        """One read of the unit's Node and the patches it needs (`_taint_for`)."""
        kube = self._kube()
        current = kube.get("v1", "Node", info.node_name)
        if current is None:
            return
        if _control_plane(current):
            refusal = f"{unit}: node {info.node_name} is a control-plane node (refused)"
            known.refuse(unit, refusal)
            logger.warning("refused the taint request of %s", refusal)
            return
        if info.gpu_taint is not None:
            patch = gpu_taint_patch(current, bool(info.gpu_taint))
            if patch is not None:
                current = kube.patch("v1", "Node", info.node_name, patch) or current
                logger.info(
                    "GPU taint of node %s set to %s for %s", info.node_name, info.gpu_taint, unit
                )
        if info.gpu_quarantine is not None:
            wanted = bool(info.gpu_quarantine)
            held = set(registry.quarantined(bag))
            held = held | {info.node_name} if wanted else held - {info.node_name}
            registry.save_quarantined(bag, held)
            patch = quarantine_taint_patch(current, wanted)
            if patch is not None:
                kube.patch("v1", "Node", info.node_name, patch)
                logger.info(
                    "quarantine taint of node %s %s for %s (GPUs: %s)",
                    info.node_name,
                    "set" if wanted else "removed",
                    unit,
                    ", ".join(info.gpu_quarantine) or "readmitted",
                )

    def _relation_of(self, unit_name: str) -> int:
        for relation in self._workers.relations:
            if any(u.name == unit_name for u in relation.units):
                return relation.id
        return -1

    def _remove_drained_nodes(self, pending: set[str]) -> set[str]:
        kube = self._kube()
        left = set()
        for name in sorted(pending):
            node = kube.get("v1", "Node", name)
            if node is None:
                continue
            if _control_plane(node):
                logger.warning("not deleting Node %s: a control-plane node, no worker's", name)
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


def _control_plane(node: dict) -> bool:
    """Whether a Node carries kubeadm's control-plane label (`CONTROL_PLANE_LABEL`).

    A kubelet can neither set nor remove it on its Node: NodeRestriction forbids a node any
    `kubernetes.io` label outside the kubelet's own (plugin/pkg/admission/noderestriction/
    admission.go, tests/fakes/kube_noderestriction.py), so such a Node is a control-plane
    node whatever a worker unit claims: the leader never taints or deletes it for a worker.
    """
    return CONTROL_PLANE_LABEL in ((node.get("metadata") or {}).get("labels") or {})
