"""What root on a worker can ask of the leader over `workers`, and about which node.

Root on a worker machine can rewrite that unit's databag (`relation-set`): every key the
leader reads there (lib kubernetes_cluster.py RequirerUnitData: node-name, node-identity,
gpu-taint, gpu-quarantine, gpu-inventory, kubernetes-version) is a request from a
possibly hostile unit. Each test below was a reviewer's probe that passed (the request
was honoured) before the leader refused it (issue 29 item 2). The requests run against
the fake API server with the identities the charms really have.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from ops import testing

from fakes.control_plane import (
    JOIN_LABEL,
    join_workers,
    peers,
    secret,
    worker_bag,
    workers_relation,
)

BAD_GPU = "GPU-7f3e9a2c-5d41-4b8e-9c0a-1e2f3a4b5c6d"
QUARANTINE = {"gpu-quarantine": json.dumps([BAD_GPU])}
QUARANTINE_TAINT = {"key": "gpu-k8s.io/gpu-unhealthy", "effect": "NoExecute"}
GRANT_SA = "/api/v1/namespaces/kube-system/serviceaccounts/gpu-k8s-worker"


@pytest.fixture
def bootstrapped(ctx, machine):
    return ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))


def legacy_bag(name: str) -> dict:
    """A worker of a revision before node-identity (or one whose root dropped the flag)."""
    return worker_bag(name, identity=False)


def rewrite(ctx, state: testing.State, rel_id: int, unit: int, bag: dict) -> testing.State:
    """Root on `unit` rewrites its databag (relation-set); the leader's relation-changed."""
    rel = state.get_relation(rel_id)
    changed = dataclasses.replace(rel, remote_units_data={**rel.remote_units_data, unit: bag})
    state = dataclasses.replace(
        state, relations=[r for r in state.relations if r.id != rel_id] + [changed]
    )
    return ctx.run(ctx.on.relation_changed(changed, remote_unit=unit), state)


def quarantined(api, name: str) -> bool:
    """Whether Node `name` carries the quarantine taint."""
    taints = (api.get_object(f"/api/v1/nodes/{name}").get("spec") or {}).get("taints") or []
    return any(t["key"] == QUARANTINE_TAINT["key"] for t in taints)


def test_a_worker_dropping_node_identity_gets_no_shared_credential(ctx, bootstrapped, api):
    """Once the shared grant is gone it never comes back; the unit is named, with the fix."""
    rel = workers_relation({0: worker_bag("w0"), 1: worker_bag("w1")})
    out = join_workers(ctx, bootstrapped, rel, api)
    assert "kubeconfig" not in secret(out, JOIN_LABEL).latest_content

    out = rewrite(ctx, out, rel.id, 0, legacy_bag("w0"))

    assert "kubeconfig" not in secret(out, JOIN_LABEL).latest_content
    assert api.get_object(GRANT_SA) is None
    assert out.unit_status == testing.BlockedStatus(
        "kubernetes-worker/0 does not act as its kubelet (no node-identity) and gets no "
        "shared worker credential: juju refresh kubernetes-worker"
    )
    # idempotent: the next hook asks nothing of the API for the grant either
    requests = len(api.requests)
    again = ctx.run(ctx.on.update_status(), out)
    assert [r for r in api.requests[requests:] if "gpu-k8s-worker" in r[1]] == []
    assert again.unit_status == out.unit_status
    # the flag back: the line goes
    out = rewrite(ctx, again, rel.id, 0, worker_bag("w0"))
    assert out.unit_status.name == "active"


def test_a_fresh_cluster_never_makes_the_shared_grant(ctx, bootstrapped, api):
    """No worker revision without node-identity can join a cluster this revision made.

    node-identity (917e912) came before the per-unit join-token secrets (a9c33ec); a worker
    of an earlier revision reads its token from the join secret, which holds none here.
    """
    rel = workers_relation({0: legacy_bag("w0")})
    out = join_workers(ctx, bootstrapped, rel, api)

    assert "kubeconfig" not in secret(out, JOIN_LABEL).latest_content
    assert api.get_object(GRANT_SA) is None
    assert out.unit_status.name == "blocked"
    assert "kubernetes-worker/0 does not act as its kubelet" in out.unit_status.message

