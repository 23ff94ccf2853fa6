"""Every event handled twice: the second time changes nothing and sends no request."""

from __future__ import annotations

import dataclasses

import pytest
from ops import testing

from fakes.control_plane import (
    JOIN_LABEL,
    kube_api_relation,
    leader_member_state,
    node,
    peer,
    peers,
    worker_bag,
    workers_relation,
)

GPUS = [{"model": "NVIDIA A10G", "count": 4}]
JOBS = [{"api-groups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get"]}]
EVENTS = [
    "install",
    "config_changed",
    "update_status",
    "leader_elected",
    "upgrade_charm",
    "peers_changed",
    "workers_joined",
    "workers_changed",
    "workers_departed",
    "kube_api_changed",
    "kube_api_broken",
    "secret_expired",
]


def event_for(ctx, name: str, state: testing.State):
    rels = {r.endpoint: r for r in state.relations}
    if name == "peers_changed":
        return ctx.on.relation_changed(rels["peers"], remote_unit=1)
    if name == "workers_joined":
        return ctx.on.relation_joined(rels["workers"], remote_unit=0)
    if name == "workers_changed":
        return ctx.on.relation_changed(rels["workers"], remote_unit=0)
    if name == "workers_departed":
        return ctx.on.relation_departed(rels["workers"], remote_unit=2, departing_unit=2)
    if name == "kube_api_changed":
        return ctx.on.relation_changed(rels["kube-api"], remote_unit=0)
    if name == "kube_api_broken":
        return ctx.on.relation_broken(rels["kube-api"])
    if name == "secret_expired":  # before the token is due: nothing to rotate
        join = next(s for s in state.secrets if s.label == JOIN_LABEL)
        return ctx.on.secret_expired(join, revision=1)
    return getattr(ctx.on, name)()


def snapshot(out: testing.State, api, machine):
    databags = {
        r.endpoint: (dict(r.local_app_data), dict(r.local_unit_data)) for r in out.relations
    }
    secrets = {s.label: (s.latest_content, s.expire, s.remote_grants) for s in out.secrets}
    return databags, secrets, api.objects("/"), list(machine.mutations()), out.unit_status


@pytest.fixture
def settled(ctx, machine, api):
    """A bootstrapped leader with a joined peer, workers and a kube-api consumer."""
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    for name in ("cp-1", "w0", "w1"):
        api.put_object(f"/api/v1/nodes/{name}", node(name, control_plane=name == "cp-1"))
    rels = [
        dataclasses.replace(peer(out), peers_data={1: {"joined": "true", "node-name": "cp-1"}}),
        workers_relation({0: worker_bag("w0"), 1: worker_bag("w1", GPUS)}),
        kube_api_relation("tensorflow", "training", JOBS),
    ]
    out = dataclasses.replace(out, relations=rels)
    out = ctx.run(ctx.on.leader_elected(), out)  # reads every worker, grants kube-api
    # a kube-api consumer on Calico, a new cluster's CNI: its namespace is isolated
    assert out.unit_status.message == (
        "Ready: v1.36, 2 control-plane, 2 workers (1 with 4 GPUs: 4x NVIDIA A10G)"
    )
    return out


@pytest.mark.parametrize("name", EVENTS)
def test_leader_event_twice_is_idempotent(ctx, machine, api, settled, name):
    out1 = ctx.run(event_for(ctx, name, settled), settled)
    first = snapshot(out1, api, machine)
    requests = len(api.requests)

    out2 = ctx.run(event_for(ctx, name, out1), out1)

    assert snapshot(out2, api, machine) == first
    # nothing is written again; the only read is the one list of Nodes that the rare
    # events make to see which nodes are Ready (update-status, a new leader, ...), and on
    # update-status (the periodic hook) what Kueue's cohort is sized by (issue 29 item 6:
    # whole Nodes, running Pods; addons._apply_kueue_objects), once each (the teams'
    # guarantees are their kube-api requests': no ClusterQueue is read back any more; the
    # Namespaces Kueue manages only while a GPU pod Kueue would hold runs, none here:
    # test_batch_engines); update-status's one list of whole Nodes also says which are
    # Ready (it read the Node table too until 2026-11-27: issue 29's cost rule)
    again = api.requests[requests:]
    if name == "update_status":
        cohort = [("GET", "/api/v1/nodes"), ("GET", "/api/v1/pods")]
        sized = [r for r in again if r in cohort]
        assert sorted(sized) == sorted(cohort)
        assert [r.query.get("fieldSelector") for r in sized if r[1] == "/api/v1/pods"] == [
            "status.phase=Running"
        ]
        for r in cohort:
            again.remove(r)
    assert [r for r in again if r[0] != "GET" or not r[1].startswith("/api/v1/nodes")] == []
    if name == "peers_changed":  # the control-plane Nodes, one GET each
        assert sorted(r[1] for r in again) == ["/api/v1/nodes/cp-1", "/api/v1/nodes/ip-10-0-1-17"]
    elif name == "update_status":
        assert again == []
    else:
        assert again in ([], [("GET", "/api/v1/nodes")])
    assert out2.unit_status.name == "active"
    # no duplicate objects: one ServiceAccount per consumer, one Role each
    sas = [
        o["metadata"]["name"] for o in api.objects("/api/v1/namespaces/training/serviceaccounts")
    ]
    assert sas == ([] if name == "kube_api_broken" else ["tensorflow"])
    assert len([s for s in out2.secrets if s.label == JOIN_LABEL]) == 1
    daemon_sets = api.objects("/apis/apps/v1/namespaces/gpu-k8s-gpu/daemonsets/")
    assert sorted(d["metadata"]["name"] for d in daemon_sets) == [
        "dcgm-exporter",
        "nvidia-device-plugin",
    ]


@pytest.mark.parametrize(
    "name", ["install", "config_changed", "update_status", "peers_changed", "upgrade_charm"]
)
def test_member_event_twice_is_idempotent(ctx, machine, api, name):
    state = leader_member_state(leader=False)
    out1 = ctx.run(event_for(ctx, name, state), state)
    first = snapshot(out1, api, machine)
    out2 = ctx.run(event_for(ctx, name, out1), out1)

    assert snapshot(out2, api, machine) == first
    assert len(machine.joins) == 1
    assert out2.unit_status.name == "active"
