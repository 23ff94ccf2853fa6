"""Minor-version upgrades: the leader, then one control-plane unit at a time, then workers."""

from __future__ import annotations

import dataclasses
import json

import pytest
from literals import INSTALL_MARKER
from ops import testing

from charms.gpu_k8s.v0 import kubeadm
from fakes.control_plane import (
    join_workers,
    member,
    peer,
    peers,
    secret,
    worker_bag,
    workers_relation,
)
from fakes.machine import deb

NODE = "ip-10-0-1-17"  # the fake machine's hostname
NEW = kubeadm.RELEASES["1.37"]

# the one command every hook runs: is the node-local API endpoint up (api_proxy.configure)
HAPROXY_RUNNING = ["/usr/bin/systemctl", "is-active", "--quiet", "haproxy"]


def bootstrapped(ctx, members: dict[int, dict] | None = None) -> testing.State:
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    if members:
        relation = dataclasses.replace(peer(out), peers_data=members)
        out = dataclasses.replace(out, relations=[relation])
    return out


def upgrade_to(state: testing.State, minor: str) -> testing.State:
    return dataclasses.replace(state, config={"kubernetes-version": minor})


def add_pod(api, name: str) -> None:
    api.put_object(
        f"/api/v1/namespaces/default/pods/{name}",
        {
            "metadata": {},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"},
        },
    )


def test_the_leader_upgrades_first_in_kubeadm_order(ctx, machine, api):
    out = bootstrapped(ctx)
    add_pod(api, "web-1")

    out = ctx.run(ctx.on.config_changed(), upgrade_to(out, "1.37"))

    assert machine.upgrades == [("apply", NEW.version)]
    assert {p: machine.dpkg[p] for p in ("kubeadm", "kubelet", "kubectl")} == {
        "kubeadm": deb(NEW.kubernetes),
        "kubelet": deb(NEW.kubernetes),
        "kubectl": deb(NEW.kubernetes),
    }
    assert machine.dpkg["kubernetes-cni"] == deb(NEW.cni)
    lines = machine.lines()
    step = {
        "kubeadm package": next(
            i for i, c in enumerate(lines) if f"kubeadm={NEW.kubernetes}-*" in c
        ),
        "upgrade apply": lines.index(f"/usr/bin/kubeadm upgrade apply v{NEW.version} --yes"),
        "kubelet package": next(
            i for i, c in enumerate(lines) if f"kubelet={NEW.kubernetes}-*" in c
        ),
        "kubelet restart": lines.index("/usr/bin/systemctl restart kubelet"),
    }
    assert list(step.values()) == sorted(step.values()), step
    # drained for the kubelet restart, schedulable again after it
    assert api.get_object("/api/v1/namespaces/default/pods/web-1") is None
    assert not api.get_object(f"/api/v1/nodes/{NODE}")["spec"].get("unschedulable")
    assert peer(out).local_app_data["cluster-version"] == "1.37"
    assert peer(out).local_unit_data["kubernetes-version"] == "1.37"
    assert out.unit_status == testing.ActiveStatus("Ready: v1.37, 1 control-plane, 0 workers")

    before = len(machine.calls)
    ctx.run(ctx.on.update_status(), out)
    assert [c.argv for c in machine.calls[before:]] == [HAPROXY_RUNNING]  # nothing else


def test_a_failed_upgrade_resumes_without_going_back(ctx, machine, api):
    out = bootstrapped(ctx)
    machine.fail("/usr/bin/kubeadm upgrade apply", stderr="[ERROR CoreDNSUnsupportedPlugins]: x")

    out = ctx.run(ctx.on.config_changed(), upgrade_to(out, "1.37"))

    assert out.unit_status == testing.WaitingStatus(
        "upgrade to 1.37: kubeadm upgrade apply failed: [ERROR CoreDNSUnsupportedPlugins]: x; "
        "retrying on the next event"
    )
    assert peer(out).local_app_data["cluster-version"] == "1.36"
    assert machine.dpkg["kubeadm"] == deb(NEW.kubernetes)  # not put back to 1.36
    assert machine.dpkg["kubelet"] == deb(kubeadm.RELEASES["1.36"].kubernetes)

    out = ctx.run(ctx.on.update_status(), out)

    assert machine.upgrades == [("apply", NEW.version)]
    assert machine.dpkg["kubelet"] == deb(NEW.kubernetes)
    assert peer(out).local_app_data["cluster-version"] == "1.37"
    assert out.unit_status.name == "active"


def test_an_upgrade_set_back_before_kubeadm_ran_puts_kubeadm_back(ctx, machine, api):
    out = bootstrapped(ctx)
    old = kubeadm.RELEASES["1.36"]
    machine.fail("/usr/bin/kubeadm upgrade apply", stderr="[ERROR CoreDNSUnsupportedPlugins]: x")
    out = ctx.run(ctx.on.config_changed(), upgrade_to(out, "1.37"))
    assert machine.dpkg["kubeadm"] == deb(NEW.kubernetes)

    out = ctx.run(ctx.on.config_changed(), upgrade_to(out, "1.36"))

    assert machine.dpkg["kubeadm"] == deb(old.kubernetes)
    assert "kubeadm" in machine.held
    assert "/core:/stable:/v1.36/" in machine.read("/etc/apt/sources.list.d/kubernetes.sources")
    assert machine.upgrades == []
    assert peer(out).local_app_data["cluster-version"] == "1.36"
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")
    before = len(machine.calls)
    out = ctx.run(ctx.on.update_status(), out)
    assert [c.argv for c in machine.calls[before:]] == [HAPROXY_RUNNING]  # nothing else

    out = ctx.run(ctx.on.config_changed(), upgrade_to(out, "1.37"))  # and later, for real

    assert machine.upgrades == [("apply", NEW.version)]
    assert peer(out).local_app_data["cluster-version"] == "1.37"


def test_a_mirror_without_the_new_minor_blocks_and_setting_back_undoes(ctx, machine, api):
    mirror = "https://mirror.example.com/k8s"
    machine.add_repository(mirror)
    del machine.remote[f"{mirror}/core:/stable:/v1.37/deb/"]
    out = ctx.run(
        ctx.on.install(),
        testing.State(leader=True, relations=[peers()], config={"package-mirror": mirror}),
    )

    out = ctx.run(
        ctx.on.config_changed(),
        dataclasses.replace(out, config={"package-mirror": mirror, "kubernetes-version": "1.37"}),
    )

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("upgrade to 1.37: cannot use package source")
    assert out.unit_status.message.endswith(
        "; fix package-mirror or set kubernetes-version back to 1.36"
    )
    assert "v1.37" in machine.read("/etc/apt/sources.list.d/kubernetes.sources")

    out = ctx.run(
        ctx.on.config_changed(),
        dataclasses.replace(out, config={"package-mirror": mirror, "kubernetes-version": "1.36"}),
    )

    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")
    assert f"{mirror}/core:/stable:/v1.36/deb/" in machine.read(
        "/etc/apt/sources.list.d/kubernetes.sources"
    )
    assert machine.dpkg["kubeadm"] == deb(kubeadm.RELEASES["1.36"].kubernetes)
    assert machine.upgrades == []


def test_an_upgrade_set_back_after_kubeadm_applied_it_asks_to_finish(ctx, machine, api):
    out = bootstrapped(ctx)
    machine.fail("/usr/bin/systemctl restart kubelet", stderr="Job for kubelet.service failed")
    out = ctx.run(ctx.on.config_changed(), upgrade_to(out, "1.37"))
    assert out.unit_status == testing.WaitingStatus(
        "upgrade to 1.37: /usr/bin/systemctl restart kubelet exited 1: "
        "Job for kubelet.service failed; retrying on the next event"
    )
    assert machine.upgrades == [("apply", NEW.version)]
    before = len(machine.mutations())

    out = ctx.run(ctx.on.config_changed(), upgrade_to(out, "1.36"))

    assert out.unit_status == testing.BlockedStatus(
        "this node's control plane already runs 1.37 (kubeadm upgrade cannot be undone); "
        "set kubernetes-version to 1.37 to finish"
    )
    assert machine.mutations()[before:] == []
    assert machine.dpkg["kubeadm"] == deb(NEW.kubernetes)

    out = ctx.run(ctx.on.config_changed(), upgrade_to(out, "1.37"))

    assert machine.upgrades == [("apply", NEW.version)]  # not applied a second time
    assert machine.dpkg["kubelet"] == deb(NEW.kubernetes)
    assert peer(out).local_app_data["cluster-version"] == "1.37"
    assert out.unit_status.name == "active"


def test_skipping_a_minor_or_going_back_is_refused(ctx, machine, api):
    out = ctx.run(
        ctx.on.install(),
        testing.State(leader=True, relations=[peers()], config={"kubernetes-version": "1.36"}),
    )
    before = len(machine.calls)
    running = dataclasses.replace(out, config={"kubernetes-version": "1.35"})
    older = ctx.run(ctx.on.config_changed(), running)
    bag = {**peer(out).local_app_data, "cluster-version": "1.35"}
    behind = dataclasses.replace(
        out, relations=[dataclasses.replace(peer(out), local_app_data=bag)]
    )
    skipped = ctx.run(ctx.on.config_changed(), upgrade_to(behind, "1.37"))

    assert skipped.unit_status == testing.BlockedStatus(
        "kubernetes-version 1.37 skips a minor: clusters upgrade one minor at a time; "
        "set 1.36 first"
    )
    assert older.unit_status.message.endswith("downgrades are not supported; set it back to 1.36")
    assert machine.calls[before:] == []


def test_members_then_workers_get_the_turn_one_at_a_time(ctx, machine, api):
    members = {
        1: member(api, 1, **{"kubernetes-version": "1.36"}),
        2: member(api, 2, **{"kubernetes-version": "1.36"}),
    }
    out = bootstrapped(ctx, members)
    rel = workers_relation(
        {
            0: {**worker_bag("w0"), "kubernetes-version": "1.36"},
            1: {**worker_bag("w1"), "kubernetes-version": "1.36"},
            2: worker_bag("w2"),  # has not said: not joined yet, installs what is published
        }
    )
    out = join_workers(ctx, out, rel, api)
    out = ctx.run(ctx.on.config_changed(), upgrade_to(out, "1.37"))

    bag = peer(out).local_app_data
    assert bag["cluster-version"] == "1.37"
    assert bag["upgrade-turn"] == "kubernetes-control-plane/1"
    published = out.get_relation(rel.id).local_app_data
    # kubelet must not be newer than any API server it may reach (version skew policy):
    # until every control plane runs 1.37, a worker joining now installs 1.36
    assert published["kubernetes-version"] == "1.36"
    assert "upgrade-turn" not in published  # workers wait for the whole control plane
    assert out.unit_status == testing.ActiveStatus(
        "Ready: v1.37, 3 control-plane, 3 workers; upgrading to v1.37: 4 node(s) to go"
    )

    def member_reports(state, unit: int) -> testing.State:
        data = dict(peer(state).peers_data)
        data[unit] = {**data[unit], "kubernetes-version": "1.37"}
        relation = dataclasses.replace(peer(state), peers_data=data)
        others = [r for r in state.relations if r.endpoint != "peers"]
        state = dataclasses.replace(state, relations=[relation, *others])
        return ctx.run(ctx.on.relation_changed(relation, remote_unit=unit), state)

    out = member_reports(out, 1)
    assert peer(out).local_app_data["upgrade-turn"] == "kubernetes-control-plane/2"
    assert "upgrade-turn" not in out.get_relation(rel.id).local_app_data
    assert out.get_relation(rel.id).local_app_data["kubernetes-version"] == "1.36"

    out = member_reports(out, 2)
    assert "upgrade-turn" not in peer(out).local_app_data
    assert out.get_relation(rel.id).local_app_data["upgrade-turn"] == "kubernetes-worker/0"
    assert out.get_relation(rel.id).local_app_data["kubernetes-version"] == "1.37"

    workers = out.get_relation(rel.id)
    done = dict(workers.remote_units_data)
    done[0] = {**done[0], "kubernetes-version": "1.37"}
    workers = dataclasses.replace(workers, remote_units_data=done)
    state = dataclasses.replace(
        out, relations=[r for r in out.relations if r.endpoint != "workers"] + [workers]
    )
    out = ctx.run(ctx.on.relation_changed(workers, remote_unit=0), state)
    assert out.get_relation(rel.id).local_app_data["upgrade-turn"] == "kubernetes-worker/1"
    assert machine.upgrades == [("apply", NEW.version)]  # the others ran on their machines


def test_a_member_upgrades_only_on_its_turn(ctx, machine, api):
    join = testing.Secret(
        {"token": "abcdef.0123456789abcdef", "certificate-key": "ab" * 32},
        owner="app",
        label="control-plane-join",
    )
    app = {
        "endpoint": "127.0.0.1:6444",
        "ca-cert-hash": "sha256:" + "a" * 64,
        "join-secret-id": join.id,
        "cluster-version": "1.36",
        "certs-uploaded-at": "2026-11-21T10:00:00+00:00",
        "token-expires": "2026-11-22T10:00:00+00:00",
        "node-health": json.dumps({"missing": [], "not-ready": []}),
    }
    leader = member(api, 0, **{"kubernetes-version": "1.36"})
    state = testing.State(relations=[peers(app, {1: leader})], secrets=[join])
    out = ctx.run(ctx.on.update_status(), state)  # joins at 1.36
    assert peer(out).local_unit_data["kubernetes-version"] == "1.36"

    def leader_says(state, **changes) -> testing.State:
        relation = dataclasses.replace(
            peer(state), local_app_data={**peer(state).local_app_data, **changes}
        )
        state = upgrade_to(dataclasses.replace(state, relations=[relation]), "1.37")
        return ctx.run(ctx.on.relation_changed(relation, remote_unit=1), state)

    out = leader_says(
        out, **{"cluster-version": "1.37", "upgrade-turn": "kubernetes-control-plane/4"}
    )
    assert machine.upgrades == []
    assert machine.dpkg["kubelet"] == deb(kubeadm.RELEASES["1.36"].kubernetes)
    assert out.unit_status == testing.ActiveStatus(
        "Ready: v1.37, 2 control-plane, 0 workers; upgrading to v1.37: 2 node(s) to go"
    )

    out = leader_says(out, **{"upgrade-turn": "kubernetes-control-plane/0"})
    assert machine.upgrades == [("node", NEW.version)]
    assert machine.dpkg["kubelet"] == deb(NEW.kubernetes)
    assert peer(out).local_unit_data["kubernetes-version"] == "1.37"
    assert secret(out, "control-plane-join").latest_content["token"] not in json.dumps(
        peer(out).local_unit_data
    )


def test_a_new_leader_behind_the_cluster_upgrades_with_upgrade_node(ctx, machine, api):
    out = bootstrapped(ctx)  # this unit runs 1.36 ...
    relation = peer(out)
    done = {1: member(api, 1, **{"kubernetes-version": "1.37"})}
    app = {**relation.local_app_data, "cluster-version": "1.37"}  # ... another led the upgrade
    relation = dataclasses.replace(relation, local_app_data=app, peers_data=done)
    state = upgrade_to(dataclasses.replace(out, relations=[relation]), "1.37")

    out = ctx.run(ctx.on.leader_elected(), state)

    assert machine.upgrades == [("node", NEW.version)]
    assert machine.dpkg["kubelet"] == deb(NEW.kubernetes)
    assert "upgrade-turn" not in peer(out).local_app_data
    assert out.unit_status == testing.ActiveStatus("Ready: v1.37, 2 control-plane, 0 workers")


def new_patch(monkeypatch, machine, minor: str = "1.36", patch: int = 7) -> str:
    """A charm revision that pins a new patch of `minor`, which pkgs.k8s.io now serves."""
    version = f"{minor}.{patch}"
    pinned = dataclasses.replace(kubeadm.RELEASES[minor], kubernetes=version)
    monkeypatch.setitem(kubeadm.RELEASES, minor, pinned)
    machine.serve_kubernetes(version)
    return version


def test_a_new_patch_pin_reaches_the_control_plane_in_turns(ctx, machine, api, monkeypatch):
    # review deploy.md N1, probe P5: the per-minor marker never moved a running node
    old = kubeadm.RELEASES["1.36"].version
    members = {1: member(api, 1, **{"kubernetes-version": "1.36", "kubernetes-release": old})}
    out = bootstrapped(ctx, members)
    add_pod(api, "web-1")
    # the marker an earlier revision wrote: the minor only
    machine.write(INSTALL_MARKER, '{"kubernetes": "1.36", "mirror": ""}')
    patch = new_patch(monkeypatch, machine)

    out = ctx.run(ctx.on.upgrade_charm(), out)

    assert machine.upgrades == [("apply", patch)]
    lines = machine.lines()
    step = [
        next(i for i, c in enumerate(lines) if f"kubeadm={patch}-*" in c),
        lines.index(f"/usr/bin/kubeadm upgrade apply v{patch} --yes"),
        next(i for i, c in enumerate(lines) if f"kubelet={patch}-*" in c),
        lines.index("/usr/bin/systemctl restart kubelet"),
    ]
    assert step == sorted(step)
    assert {p: machine.dpkg[p] for p in ("kubeadm", "kubelet", "kubectl")} == dict.fromkeys(
        ("kubeadm", "kubelet", "kubectl"), deb(patch)
    )
    assert machine.running("kubelet") == deb(patch)  # restarted: the new binary runs
    assert json.loads(machine.read(INSTALL_MARKER)) == {
        "kubernetes": "1.36",
        "version": patch,
        "mirror": "",
    }
    assert api.get_object("/api/v1/namespaces/default/pods/web-1") is None  # drained
    assert not api.get_object(f"/api/v1/nodes/{NODE}")["spec"].get("unschedulable")
    bag = peer(out).local_app_data
    assert (bag["cluster-version"], bag["cluster-release"]) == ("1.36", patch)
    assert bag["upgrade-turn"] == "kubernetes-control-plane/1"  # then the member, in turn
    assert peer(out).local_unit_data["kubernetes-release"] == patch

    before = len(machine.calls)
    out = ctx.run(ctx.on.update_status(), out)
    assert [c.argv for c in machine.calls[before:]] == [HAPROXY_RUNNING]  # nothing else
    assert peer(out).local_app_data["upgrade-turn"] == "kubernetes-control-plane/1"


def test_a_member_takes_its_turn_for_a_patch(ctx, machine, api, monkeypatch):
    old = kubeadm.RELEASES["1.36"].version
    join = testing.Secret(
        {"token": "abcdef.0123456789abcdef", "certificate-key": "ab" * 32},
        owner="app",
        label="control-plane-join",
    )
    app = {
        "endpoint": "127.0.0.1:6444",
        "ca-cert-hash": "sha256:" + "a" * 64,
        "join-secret-id": join.id,
        "cluster-version": "1.36",
        "certs-uploaded-at": "2026-11-21T10:00:00+00:00",
        "token-expires": "2026-11-22T10:00:00+00:00",
        "node-health": json.dumps({"missing": [], "not-ready": []}),
    }
    leader = member(api, 0, **{"kubernetes-version": "1.36"})
    state = testing.State(relations=[peers(app, {1: leader})], secrets=[join])
    out = ctx.run(ctx.on.update_status(), state)  # joins at the pin, 1.36.5
    assert peer(out).local_unit_data["kubernetes-release"] == old
    patch = new_patch(monkeypatch, machine)
    out = ctx.run(ctx.on.upgrade_charm(), out)
    assert machine.upgrades == [] and machine.dpkg["kubelet"] == deb(old)  # no turn, no move

    relation = peer(out)
    turn = {"cluster-release": patch, "upgrade-turn": "kubernetes-control-plane/0"}
    relation = dataclasses.replace(relation, local_app_data={**relation.local_app_data, **turn})
    out = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=1),
        dataclasses.replace(out, relations=[relation]),
    )

    assert machine.upgrades == [("node", patch)]
    assert machine.running("kubelet") == deb(patch)
    assert peer(out).local_unit_data["kubernetes-release"] == patch


# -- one node turn at a time: no upgrade while a renewal or containerd turn is out -------

CP1, CP2 = "kubernetes-control-plane/1", "kubernetes-control-plane/2"
RUNC = json.dumps({"runc": "1.3.4-0ubuntu1~24.04.2"})
# a turn another node holds, what keeps it waiting for it, and what the status calls it
OTHER_TURNS = [
    ("runtime-turn", {"runtime-updates": RUNC}, "containerd/runc update"),
    ("certificate-renewal-turn", {"certificates-renewal": "true"}, "certificate renewal"),
]


def with_peer_data(state: testing.State, app: dict, units: dict[int, dict]) -> testing.State:
    relation = peer(state)
    relation = dataclasses.replace(
        relation,
        local_app_data={**relation.local_app_data, **app},
        peers_data={**relation.peers_data, **units},
    )
    others = [r for r in state.relations if r.endpoint != "peers"]
    return dataclasses.replace(state, relations=[relation, *others])


@pytest.mark.parametrize("key, holding, what", OTHER_TURNS)
def test_the_leader_upgrades_only_once_another_nodes_turn_is_back(
    ctx, machine, api, key, holding, what
):
    at_36 = member(api, 1, **{"kubernetes-version": "1.36"})
    out = bootstrapped(ctx, {1: {**at_36, **holding}})
    out = with_peer_data(out, {key: CP1}, {})

    out = ctx.run(ctx.on.config_changed(), upgrade_to(out, "1.37"))

    assert machine.upgrades == []  # the leader's own control plane stays up
    bag = peer(out).local_app_data
    assert "upgrade-turn" not in bag and bag[key] == CP1
    assert f"upgrade to v{NEW.version} waits for {CP1}'s {what}" in out.unit_status.message

    # unit 1 is done: the leader takes its turn back, then upgrades and hands the turn on
    out = ctx.run(ctx.on.update_status(), with_peer_data(out, {}, {1: at_36}))
    assert key not in peer(out).local_app_data
    out = ctx.run(ctx.on.update_status(), out)
    assert machine.upgrades == [("apply", NEW.version)]
    assert peer(out).local_app_data["upgrade-turn"] == CP1


def test_no_upgrade_turn_for_a_member_while_another_nodes_turn_is_out(ctx, machine, api):
    # the rule is the same for either turn (rolling.pass_turn): the renewal turn here
    key, holding, what = OTHER_TURNS[1]
    members = {i: member(api, i, **{"kubernetes-version": "1.36"}) for i in (1, 2)}
    rel = workers_relation({0: {**worker_bag("w0"), "kubernetes-version": "1.36"}})
    out = join_workers(ctx, bootstrapped(ctx, members), rel, api)
    out = ctx.run(ctx.on.config_changed(), upgrade_to(out, "1.37"))
    assert peer(out).local_app_data["upgrade-turn"] == CP1
    # unit 1 is done, and unit 2 holds a turn an earlier revision handed out meanwhile
    reported = {**members[1], "kubernetes-version": "1.37"}
    out = with_peer_data(out, {key: CP2}, {1: reported, 2: {**members[2], **holding}})

    out = ctx.run(ctx.on.relation_changed(peer(out), remote_unit=1), out)

    bag = peer(out).local_app_data
    assert "upgrade-turn" not in bag and bag[key] == CP2
    assert f"upgrade to v{NEW.version} waits for {CP2}'s {what}" in out.unit_status.message
    workers = out.get_relation(rel.id).local_app_data
    assert "upgrade-turn" not in workers  # the control plane is not done yet
    assert workers["kubernetes-version"] == "1.36"
