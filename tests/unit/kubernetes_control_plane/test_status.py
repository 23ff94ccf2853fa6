"""What the unit and the application report: API errors, the leader's cluster line."""

from __future__ import annotations

import dataclasses
import json

import pytest
from ops import testing

from fakes.control_plane import (
    join_workers,
    leader_member_state,
    node,
    peer,
    peers,
    worker_bag,
    workers_relation,
)


def test_refused_admin_credentials_block_naming_what_to_check(ctx, machine, api):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    api.inject(status=401, times=1)  # what an expired admin.conf certificate gets

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "blocked"
    message = out.unit_status.message
    assert message.startswith("Kubernetes refused a request (401 Unauthorized)")
    assert message.endswith(
        "; check /etc/kubernetes/admin.conf on this machine (sudo kubeadm certs check-expiration)"
    )
    # it clears once the API accepts the credentials again
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active"


def test_an_api_error_the_charm_does_not_expect_fails_the_hook(ctx, machine, api):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    api.inject(status=400, times=1, method="GET", path_prefix="/api/v1/nodes")

    with pytest.raises(testing.errors.UncaughtCharmError, match="400"):
        ctx.run(ctx.on.update_status(), out)


def test_the_leader_reports_the_clusters_line_as_the_application_status(ctx, machine, api):
    api.put_object("/api/v1/nodes/w0", node("w0"))
    rel = workers_relation({0: worker_bag("w0", [{"model": "NVIDIA A10G", "count": 1}])})
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))

    out = join_workers(ctx, out, rel, api)

    ready = "Ready: v1.36, 1 control-plane, 1 workers (1 with 1 GPU: 1x NVIDIA A10G)"
    assert out.app_status == testing.ActiveStatus(ready)
    assert out.unit_status == out.app_status


def test_a_unit_that_does_not_lead_leaves_the_application_status_alone(ctx, machine):
    state = leader_member_state(leader=False)

    out = ctx.run(ctx.on.relation_changed(peer(state), remote_unit=1), state)
    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 2 control-plane, 0 workers")
    assert out.app_status == testing.UnknownStatus()


def test_a_unit_that_does_not_lead_reports_the_leaders_etcd_problem(ctx, machine):
    state = leader_member_state(leader=False)
    relation = peer(state)
    # as a revision before 2026-11-27 stored it: {node: message}
    problem = (
        "etcd member cp-9 of a departed unit is still there: etcdserver: unhealthy cluster; "
        "retrying"
    )
    bag = {**relation.local_app_data, "etcd-problems": json.dumps({"cp-9": problem})}
    relation = dataclasses.replace(relation, local_app_data=bag)
    state = dataclasses.replace(state, relations=[relation])

    out = ctx.run(ctx.on.relation_changed(peer(state), remote_unit=1), state)
    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.WaitingStatus(problem)


def test_a_unit_whose_own_node_is_not_ready_waits_while_the_cluster_line_stays(ctx, machine):
    state = leader_member_state(leader=False)
    relation = peer(state)
    out = ctx.run(ctx.on.relation_changed(relation, remote_unit=1), state)
    relation = peer(out)
    health = json.dumps({"missing": [], "not-ready": ["ip-10-0-1-17"]})
    bag = {**relation.local_app_data, "node-health": health}
    out = dataclasses.replace(out, relations=[dataclasses.replace(relation, local_app_data=bag)])

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.WaitingStatus(
        "node ip-10-0-1-17 not Ready: v1.36, 1 control-plane, 0 workers; not Ready: ip-10-0-1-17"
    )


def test_the_application_status_follows_the_leaders_blocked_reconcile(ctx, machine):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    ready = out.app_status
    assert ready.name == "active"

    out = ctx.run(
        ctx.on.config_changed(), dataclasses.replace(out, config={"pod-cidr": "10.1.0.0/16"})
    )
    blocked = testing.BlockedStatus(
        "pod-cidr 10.1.0.0/16 differs from the running cluster's 10.244.0.0/16; "
        "set it back to 10.244.0.0/16"
    )
    assert out.app_status == blocked
    # an action does not reconcile: the application stays Blocked, as the unit does
    out = ctx.run(ctx.on.action("get-kubeconfig"), out)
    assert out.app_status == blocked
    assert out.unit_status == blocked

    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config={}))
    assert out.app_status == ready


def test_the_status_an_earlier_revision_kept_is_reported_until_the_next_reconcile(ctx, machine):
    """Revisions before 2026-11-27 kept one [name, message] as `status`; it is taken over."""
    blocked = ["blocked", "pod-cidr 10.1.0.0/16 differs from the running cluster's 10.244.0.0/16"]
    stored = testing.StoredState(
        owner_path="KubernetesControlPlaneCharm",
        content={"left_cluster": False, "status": blocked},
    )
    state = testing.State(leader=True, relations=[peers()], stored_states={stored})

    with pytest.raises(testing.ActionFailed) as failed:  # an action does not reconcile
        ctx.run(ctx.on.action("get-kubeconfig"), state)
    out = failed.value.state
    assert out is not None

    assert out.unit_status == testing.BlockedStatus(blocked[1])
    content = out.get_stored_state("_stored", owner_path="KubernetesControlPlaneCharm").content
    assert content["status"] is None and content["statuses"] == [blocked]
