"""etcd membership after control-plane units leave: pruned from a surviving unit, or reported."""

from __future__ import annotations

import dataclasses

from ops import testing

from fakes.control_plane import member, node, peer, peers


def three_members(ctx, api, etcd):
    """A bootstrapped leader with two joined peers, cp-1 and cp-2, in etcd too."""
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    joined = {1: member(api, 1), 2: member(api, 2)}
    for index in joined:
        etcd.add(f"cp-{index}")
    relation = dataclasses.replace(peer(out), peers_data=joined)
    out = dataclasses.replace(out, relations=[relation])
    return ctx.run(ctx.on.relation_changed(relation, remote_unit=2), out)


def departed(ctx, out, unit: int):
    data = {k: v for k, v in peer(out).peers_data.items() if k != unit}
    relation = dataclasses.replace(peer(out), peers_data=data)
    state = dataclasses.replace(out, relations=[relation])
    return ctx.run(
        ctx.on.relation_departed(relation, remote_unit=unit, departing_unit=unit), state
    )


def test_the_member_a_departed_unit_left_behind_is_removed(ctx, machine, api, etcd):
    out = three_members(ctx, api, etcd)
    assert etcd.names() == ["ip-10-0-1-17", "cp-1", "cp-2"]

    # cp-2's own `kubeadm reset` could not reach etcd: it warned, exited 0, left its member
    out = departed(ctx, out, 2)

    assert etcd.names() == ["ip-10-0-1-17", "cp-1"]
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 2 control-plane, 0 workers")
    requests = len(etcd.requests)
    ctx.run(ctx.on.update_status(), out)
    assert len(etcd.requests) == requests + 1  # update-status looks, nothing to remove


def test_a_member_the_departed_unit_removed_itself_needs_nothing(ctx, machine, api, etcd):
    out = three_members(ctx, api, etcd)
    etcd.members = [m for m in etcd.members if m.name != "cp-2"]  # its reset worked

    out = departed(ctx, out, 2)

    assert etcd.names() == ["ip-10-0-1-17", "cp-1"]
    assert not [p for p, _ in etcd.requests if p.endswith("/remove")]
    assert out.unit_status.name == "active"


def test_a_member_etcd_will_not_remove_is_reported_and_retried(ctx, machine, api, etcd):
    out = three_members(ctx, api, etcd)
    etcd.members[1].started = False  # cp-1 is down too: removing cp-2 would cost quorum

    out = departed(ctx, out, 2)

    assert "cp-2" in etcd.names()
    # not Active while a voter that is gone still counts for quorum (review deploy.md N15)
    assert out.unit_status == testing.WaitingStatus(
        "etcd member cp-2 of a departed unit is still there: etcdserver: re-configuration "
        "failed due to not enough started members; retrying"
    )
    assert out.app_status == out.unit_status
    etcd.members[1].started = True
    out = ctx.run(ctx.on.update_status(), out)
    assert etcd.names() == ["ip-10-0-1-17", "cp-1"]
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 2 control-plane, 0 workers")


def test_an_unreachable_etcd_is_reported_not_raised(ctx, machine, api, etcd):
    out = three_members(ctx, api, etcd)
    etcd.reachable = False

    out = departed(ctx, out, 2)

    assert out.unit_status == testing.WaitingStatus(
        "etcd members of departed units not checked: etcdserver: request timed out"
    )
    etcd.reachable = True
    out = ctx.run(ctx.on.update_status(), out)
    assert "cp-2" not in etcd.names()


def test_a_voting_member_no_unit_runs_is_reported_never_removed(ctx, machine, api, etcd):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    stray = etcd.add("old-node")
    etcd.add("joining-node", learner=True)  # a unit joining right now: not a problem

    out = ctx.run(ctx.on.update_status(), out)

    assert etcd.names() == ["ip-10-0-1-17", "old-node", "joining-node"]
    # the operator must act: a voter of no unit counts for quorum (review deploy.md N15)
    blocked = testing.BlockedStatus(
        f"etcd member old-node belongs to no unit: if its machine is gone, remove it with "
        f"`etcdctl member remove {stray.id:x}`"
    )
    assert out.unit_status == blocked
    assert out.app_status == blocked
    etcd.members.remove(stray)  # the operator removed it
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")


def test_the_leader_deletes_the_node_a_departed_control_plane_unit_left(ctx, machine, api, etcd):
    # review deploy.md N6: the unit could not delete its own Node as it left
    out = three_members(ctx, api, etcd)

    out = departed(ctx, out, 2)
    # still Ready: the unit may be draining it right now, so it stays
    assert api.get_object("/api/v1/nodes/cp-2") is not None

    api.put_object("/api/v1/nodes/cp-2", node("cp-2", control_plane=True, ready=False))
    out = ctx.run(ctx.on.update_status(), out)
    assert api.get_object("/api/v1/nodes/cp-2") is None
    assert api.get_object("/api/v1/nodes/cp-1") is not None
    requests = len(api.requests)
    ctx.run(ctx.on.update_status(), out)
    assert not [r for r in api.requests[requests:] if r[0] == "DELETE"]
