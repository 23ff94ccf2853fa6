# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What a unit says about the cluster: its status line, the leader's gauges, its scrapes.

No ops imports. Read after each reconcile (also one that stopped) from the peer data
(`peers.Peers`: the leader's registry of workers, the node readiness it last saw, the
control-plane units' minors) and this unit (`context.UnitContext`); `charm.py` turns the
line into the unit's status, and the leader's into the application's.
"""

from __future__ import annotations

import cluster_info
import etcd
import kube_state_metrics
import registry
import renewal
import rolling
from context import UnitContext
from literals import KUBE_STATE_METRICS_NODE_KEY
from peers import Peers

from charms.gpu_k8s.v0 import api_proxy
from charms.gpu_k8s.v0.cos_agent import node_jobs, scrape_job
from charms.gpu_k8s.v0.unit_state import Gauge

ACTIVE, WAITING, BLOCKED = "active", "waiting", "blocked"  # ops.StatusBase names


def unit_status(
    ctx: UnitContext, peers: Peers | None, notes: list[str], problems: list[etcd.Problem]
) -> tuple[str, str] | None:
    """The status (name, message) of a unit whose reconcile went through; None unjoined.

    Active with the cluster's line (`ready_line`) only when it is so: Blocked while etcd
    has a voter only the operator can remove, Waiting while a gone voter is still being
    removed (either costs the quorum one more lost member would need), while this unit's
    own node is not Ready (then no node of the cluster may be, and it runs no pods), or
    before the leader first looked at the Nodes (review deploy.md N4, N15).
    """
    if peers is None or not ctx.joined():
        return None
    operator = [p.message for p in problems if p.operator]
    if operator:
        return BLOCKED, "; ".join(operator)
    retried = [p.message for p in problems if not p.operator]
    if retried:
        return WAITING, "; ".join(retried)
    health = cluster_info.NodeHealth.load(peers.app)
    if health is None:
        version = peers.cluster_version or "?"
        return WAITING, f"v{version}: node readiness not checked yet"
    own = ctx.node_name
    if own in health.not_ready or own in health.missing:
        return WAITING, ready_line(ctx, peers, notes, head=f"node {own} not Ready") or ""
    return ACTIVE, ready_line(ctx, peers, notes) or ""


def ready_line(
    ctx: UnitContext, peers: Peers | None, notes: list[str], head: str = "Ready"
) -> str | None:
    """`Ready: v1.36, 3 control-plane, 5 workers (...)` from what the API and etcd said.

    None while this unit has not joined the cluster or the leader never asked the API.
    `notes` follow the line's own.
    """
    if peers is None or not ctx.joined():
        return None
    bag = peers.app
    version = peers.cluster_version or "?"
    health = cluster_info.NodeHealth.load(bag)
    if health is None:
        return None
    known = registry.Registry.load(bag)
    return cluster_info.status_line(
        version,
        health,
        planes=peers.control_plane_nodes(ctx.own_node()),
        workers=known,
        behind=nodes_behind(ctx, peers, version, known),
        pending_removal=registry.pending_count(bag),
        notes=notes,
        head=head,
    )


def nodes_behind(ctx: UnitContext, peers: Peers, version: str, known: registry.Registry) -> int:
    """Nodes (control plane and workers) that still run an older minor than `version`."""
    planes = peers.member_versions(ctx.installed_minor(), None)
    return len(rolling.pending(planes, version)) + len(rolling.pending(known.versions(), version))


def gauges(ctx: UnitContext, peers: Peers | None) -> list[Gauge]:
    """The cluster as the charms know it, from the leader (one copy per cluster)."""
    if not ctx.leader or peers is None or not ctx.joined():
        return []
    bag = peers.app
    version = peers.cluster_version
    known = registry.Registry.load(bag)
    return cluster_info.gauges(
        cluster_info.NodeHealth.load(bag) or cluster_info.NodeHealth(),
        behind=nodes_behind(ctx, peers, version, known) if version else 0,
        pending_removal=registry.pending_count(bag),
    ) + renewal.gauges(peers)


def scrape_jobs(ctx: UnitContext, peers: Peers | None) -> list[dict]:
    """What this machine's COS agent scrapes (also after a reconcile that stopped).

    Its etcd member once it joined, its kubelet and API server (through HAProxy, as
    the node), and kube-state-metrics where the leader runs it.
    """
    if not ctx.joined():
        return []
    name = ctx.node_name
    jobs = [scrape_job("etcd", etcd.METRICS_PORT, instance=name)]
    if api_proxy.metrics_access(ctx.host):
        jobs += node_jobs(name, api_server=True)
    if ctx.leader and peers is not None and peers.app.get(KUBE_STATE_METRICS_NODE_KEY) == name:
        jobs.append(scrape_job(kube_state_metrics.NAME, kube_state_metrics.PORT, instance=name))
    return jobs
