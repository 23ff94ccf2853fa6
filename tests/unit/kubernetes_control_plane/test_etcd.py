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

    # cp-2's own `kubeadm reset` could not reach etcd: it warned, exited 0, left its
    # member; then it deleted its Node, so it is done (review deploy.md N14)
    etcd.members[2].up = False
    api.delete_object("/api/v1/nodes/cp-2")
    out = departed(ctx, out, 2)

    assert etcd.names() == ["ip-10-0-1-17", "cp-1"]
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 2 control-plane, 0 workers")
    requests = len(etcd.requests)
    ctx.run(ctx.on.update_status(), out)
    assert len(etcd.requests) == requests + 1  # update-status looks, nothing to remove


def test_the_leaving_unit_owns_its_member_until_it_is_done(ctx, machine, api, etcd):
    """deploy.md N14: the leader never removes a member its leaving unit still uses.

    The departing unit drains through its own HAProxy, whose backends include its own API
    server, then its `kubeadm reset` removes its member. Were the leader to remove that
    member in its relation-departed hook, the unit's etcd would stop under its drain. The
    leader waits until the unit is done (its Node deleted or NotReady: kubelet stops with
    the reset) and only then removes what it left.
    """
    out = three_members(ctx, api, etcd)

    out = departed(ctx, out, 2)  # cp-2's Node is still Ready: it is draining right now

    assert etcd.names() == ["ip-10-0-1-17", "cp-1", "cp-2"]
    assert not [p for p, _ in etcd.requests if p.endswith("/remove")]
    # a member of a leaving unit is no stray for the operator
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 2 control-plane, 0 workers")
    out = ctx.run(ctx.on.update_status(), out)
    assert etcd.names() == ["ip-10-0-1-17", "cp-1", "cp-2"]

    # its reset could not remove the member (etcd unreachable from it) and kubelet stopped
    etcd.members[2].up = False
    api.put_object("/api/v1/nodes/cp-2", node("cp-2", control_plane=True, ready=False))
    out = ctx.run(ctx.on.update_status(), out)

    assert etcd.names() == ["ip-10-0-1-17", "cp-1"]
    assert api.get_object("/api/v1/nodes/cp-2") is None
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 2 control-plane, 0 workers")
    removals = len([p for p, _ in etcd.requests if p.endswith("/remove")])
    ctx.run(ctx.on.update_status(), out)
    assert len([p for p, _ in etcd.requests if p.endswith("/remove")]) == removals


def test_a_member_the_departed_unit_removed_itself_needs_nothing(ctx, machine, api, etcd):
    out = three_members(ctx, api, etcd)
    etcd.members = [m for m in etcd.members if m.name != "cp-2"]  # its reset worked

    out = departed(ctx, out, 2)

    assert etcd.names() == ["ip-10-0-1-17", "cp-1"]
    assert not [p for p, _ in etcd.requests if p.endswith("/remove")]
    assert out.unit_status.name == "active"


def test_a_member_etcd_will_not_remove_is_reported_and_retried(ctx, machine, api, etcd):
    out = three_members(ctx, api, etcd)
    # cp-2's reset stopped its etcd and cp-1's is down too: one voter of three is up, so
    # etcd has no leader and takes no proposal: the removal waits until the charm's
    # deadline passes (as a real 3-member etcd does: tests/functional/test_fake_etcd.py).
    # Both stay "started" in etcd's sense (they have names): review deploy.md N12.
    etcd.members[1].up = etcd.members[2].up = False
    api.delete_object("/api/v1/nodes/cp-2")  # done leaving (N14: it owned its member till then)

    out = departed(ctx, out, 2)

    assert "cp-2" in etcd.names()
    # not Active while a voter that is gone still counts for quorum (review deploy.md N15)
    assert out.unit_status == testing.WaitingStatus(
        "etcd member cp-2 of a departed unit is still there: no answer within 5 s (context "
        "deadline exceeded): etcd may have fewer than a quorum of its members up; retrying"
    )
    assert out.app_status == out.unit_status
    etcd.members[1].up = True
    out = ctx.run(ctx.on.update_status(), out)
    assert etcd.names() == ["ip-10-0-1-17", "cp-1"]
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 2 control-plane, 0 workers")


def test_an_unreachable_etcd_is_reported_not_raised(ctx, machine, api, etcd):
    out = three_members(ctx, api, etcd)
    etcd.reachable = False
    api.delete_object("/api/v1/nodes/cp-2")  # done leaving (N14: it owned its member till then)

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
