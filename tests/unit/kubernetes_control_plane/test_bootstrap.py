"""Leader bootstrap, control-plane joins and certificate re-upload."""

from __future__ import annotations

import dataclasses
import datetime
import json

import pytest
from ops import testing

import charm
from charms.gpu_k8s.v0 import api_proxy
from fakes.control_plane import (
    ADMIN_TOKEN,
    CA_PEM,
    PEER_LABEL,
    leader_member_state,
    member,
    peer,
    peers,
    secret,
    workers_relation,
)


def test_leader_installs_pinned_packages_and_bootstraps(ctx, machine, api):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))

    assert machine.dpkg["kubeadm"] == "1.36.5-1.1"
    assert machine.dpkg["kubectl"] == "1.36.5-1.1"
    assert {"kubeadm", "kubelet", "kubectl", "containerd"} <= machine.held
    assert len(machine.inits) == 1
    init, cluster = machine.inits[0]
    assert cluster["kubernetesVersion"] == "v1.36.5"
    assert cluster["networking"] == {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12"}
    # The endpoint is this node's API proxy, which forwards to the API server kubeadm starts.
    assert cluster["controlPlaneEndpoint"] == "127.0.0.1:6444"
    # the node-local endpoint, and this unit's public address for `juju expose`
    assert cluster["apiServer"]["certSANs"] == ["127.0.0.1", "203.0.113.7"]
    assert init["localAPIEndpoint"] == {"advertiseAddress": "192.0.2.0", "bindPort": 6443}
    assert machine.proxy_servers() == ["192.0.2.0:6443"]
    assert machine.services[api_proxy.SERVICE].active
    args = {a["name"]: a["value"] for a in cluster["apiServer"]["extraArgs"]}
    plugins = args["enable-admission-plugins"].split(",")
    assert {"NodeRestriction", "ExtendedResourceToleration", "DenyServiceExternalIPs"} <= set(
        plugins
    )
    assert init["bootstrapTokens"][0]["ttl"] == "24h0m0s"
    assert not machine.path("/etc/kubernetes/gpu-k8s/kubeadm-init.yaml").exists()
    # Calico, a new cluster's CNI, applied with the pod CIDR, pinned images (test_cni.py)
    ds = api.get_object("/apis/apps/v1/namespaces/kube-system/daemonsets/calico-node")
    images = [c["image"] for c in ds["spec"]["template"]["spec"]["initContainers"]]
    assert "quay.io/calico/cni:v3.32.1" in images
    env = {
        e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["CALICO_IPV4POOL_CIDR"] == "10.244.0.0/16"
    # join material for peers: databag has the public parts, secret has the rest
    bag = peer(out).local_app_data
    assert bag["endpoint"] == "127.0.0.1:6444"
    assert peer(out).local_unit_data["api-server"] == "192.0.2.0:6443"
    assert bag["cluster-version"] == "1.36"
    from charms.gpu_k8s.v0.kubeadm import ca_cert_hash

    assert bag["ca-cert-hash"] == ca_cert_hash(CA_PEM)
    content = secret(out, PEER_LABEL).latest_content
    assert content["token"] == init["bootstrapTokens"][0]["token"]
    assert content["certificate-key"] == init["certificateKey"]
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")


def test_custom_cidrs_and_mirror_are_used(ctx, machine, api):
    machine.add_repository("https://mirror.example.com/k8s")
    config = {
        "pod-cidr": "172.20.0.0/16",
        "service-cidr": "172.21.0.0/16",
        "package-mirror": "https://mirror.example.com/k8s",
        "kubernetes-version": "1.35",
    }
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()], config=config))

    source = machine.read("/etc/apt/sources.list.d/kubernetes.sources")
    assert "URIs: https://mirror.example.com/k8s/core:/stable:/v1.35/deb/" in source
    cluster = machine.inits[0][1]
    assert cluster["networking"] == {
        "podSubnet": "172.20.0.0/16",
        "serviceSubnet": "172.21.0.0/16",
    }
    assert cluster["kubernetesVersion"] == "v1.35.9"
    assert peer(out).local_app_data["cni"] == "calico v3.32.1 172.20.0.0/16"


def test_a_flannel_cluster_gets_the_pod_cidr(ctx, machine, api):
    config = {"pod-cidr": "172.20.0.0/16", "service-cidr": "172.21.0.0/16", "cni": "flannel"}
    ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()], config=config))

    cm = api.get_object("/api/v1/namespaces/kube-flannel/configmaps/kube-flannel-cfg")
    assert '"Network": "172.20.0.0/16"' in cm["data"]["net-conf.json"]


def test_failed_init_waits_and_resets(ctx, machine, api):
    machine.fail("/usr/bin/kubeadm init", stderr="[ERROR Port-6443]: Port 6443 is in use")
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))

    assert out.unit_status.name == "waiting"
    assert "Port 6443 is in use" in out.unit_status.message
    assert "/usr/bin/kubeadm reset --force" in machine.lines("kubeadm")
    assert "cluster-version" not in peer(out).local_app_data
    # the next event retries and succeeds
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active"


def test_non_leader_waits_for_bootstrap(ctx, machine):
    out = ctx.run(ctx.on.install(), testing.State(leader=False, relations=[peers()]))

    assert out.unit_status == testing.WaitingStatus(
        "waiting for the leader to bootstrap the cluster"
    )
    assert machine.lines("kubeadm") == []


def test_non_leader_joins_as_control_plane_with_secret(ctx, machine):
    state = leader_member_state(leader=False)
    out = ctx.run(ctx.on.relation_changed(peer(state), remote_unit=1), state)

    assert len(machine.joins) == 1
    join = machine.joins[0]
    assert join["controlPlane"]["certificateKey"] == "ab" * 32
    assert join["discovery"]["bootstrapToken"]["token"] == "abcdef.0123456789abcdef"
    # Discovery goes through this node's proxy, set up first with the joined peer's server;
    # once joined, this unit's own API server is added.
    assert join["discovery"]["bootstrapToken"]["apiServerEndpoint"] == "127.0.0.1:6444"
    assert machine.inits == []
    assert peer(out).local_unit_data["joined"] == "true"
    assert peer(out).local_unit_data["api-server"] == "192.0.2.0:6443"
    assert machine.proxy_servers() == ["10.0.0.5:6443", "192.0.2.0:6443"]
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 2 control-plane, 0 workers")


def test_proxies_and_workers_follow_the_control_plane_units_that_come_and_go(ctx, machine, api):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    rel = workers_relation({0: {}})
    members = {
        1: {"joined": "true", "api-server": "10.0.0.6:6443"},
        2: {"joined": "true", "api-server": "10.0.0.7:6443"},
        3: {"joined": "false"},  # still joining: nothing to forward to yet
    }
    grown = dataclasses.replace(peer(out), peers_data=members)
    out = dataclasses.replace(out, relations=[grown, rel])
    out = ctx.run(ctx.on.relation_changed(grown, remote_unit=2), out)

    servers = machine.proxy_servers()
    assert servers == ["10.0.0.6:6443", "10.0.0.7:6443", "192.0.2.0:6443"]
    published = json.loads(out.get_relation(rel.id).local_app_data["api-servers"])
    assert published == servers

    shrunk = dataclasses.replace(peer(out), peers_data={1: members[1]})
    out = dataclasses.replace(out, relations=[shrunk, out.get_relation(rel.id)])
    out = ctx.run(ctx.on.relation_departed(shrunk, remote_unit=2, departing_unit=2), out)

    assert machine.proxy_servers() == ["10.0.0.6:6443", "192.0.2.0:6443"]
    published = json.loads(out.get_relation(rel.id).local_app_data["api-servers"])
    assert published == ["10.0.0.6:6443", "192.0.2.0:6443"]
    service = machine.services[api_proxy.SERVICE]
    # reloaded, never restarted: when the kubelet's metrics came, and for each new list
    assert service.restarts == 1 and service.reloads == 3


def test_new_leader_not_yet_joined_joins_instead_of_init(ctx, machine):
    state = leader_member_state(leader=True)
    ctx.run(ctx.on.leader_elected(), state)

    assert machine.inits == []
    assert len(machine.joins) == 1


def test_non_leader_waits_when_uploaded_certs_are_stale(ctx, machine, clock):
    clock.advance(hours=2)
    state = leader_member_state(leader=False)
    out = ctx.run(ctx.on.relation_changed(peer(state), remote_unit=1), state)

    assert machine.joins == []
    assert "re-upload" in out.unit_status.message
    assert peer(out).local_unit_data["joined"] == "false"


def test_leader_reuploads_certs_for_a_joining_unit_after_an_hour(ctx, machine, clock, api):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    key = secret(out, PEER_LABEL).latest_content["certificate-key"]
    rel = dataclasses.replace(peer(out), peers_data={1: {"joined": "false"}})
    state = dataclasses.replace(out, relations=[rel])

    ctx.run(ctx.on.relation_changed(rel, remote_unit=1), state)
    assert machine.uploads == []  # uploaded by init less than an hour ago

    clock.advance(minutes=61)
    out = ctx.run(ctx.on.relation_changed(rel, remote_unit=1), state)
    assert machine.uploads == [key]
    uploaded = datetime.datetime.fromisoformat(peer(out).local_app_data["certs-uploaded-at"])
    assert uploaded == clock.now

    # once every unit has joined, no more uploads
    rel = dataclasses.replace(peer(out), peers_data={1: member(api, 1)})
    clock.advance(hours=3)
    out = ctx.run(ctx.on.update_status(), dataclasses.replace(out, relations=[rel]))
    assert machine.uploads == [key]
    assert out.unit_status.message.startswith("Ready: v1.36, 2 control-plane")


def test_a_reupload_names_the_clusters_version_and_never_prints_the_key(ctx, machine, clock):
    """deploy.md N11: the upload-certs config pins the version; the key is never printed.

    An InitConfiguration alone makes kubeadm default kubernetesVersion to stable-1 (v1beta4
    defaults.go), a lookup at dl.k8s.io an air-gapped site waits out.
    """
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    rel = dataclasses.replace(peer(out), peers_data={1: {"joined": "false"}})
    clock.advance(minutes=61)

    ctx.run(ctx.on.relation_changed(rel, remote_unit=1), dataclasses.replace(out, relations=[rel]))

    assert machine.upload_versions == ["v1.36.5"]
    upload = [c for c in machine.calls if c.argv[1:4] == ["init", "phase", "upload-certs"]]
    init = [c for c in machine.calls if c.argv[1:2] == ["init"] and "--upload-certs" in c.argv]
    assert all("--skip-certificate-key-print" in c.argv for c in [*upload, *init])


def test_admin_kubeconfig_points_at_api(machine, ctx):
    ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    assert ADMIN_TOKEN in machine.read("/etc/kubernetes/admin.conf")


def test_leader_recovers_when_init_ran_but_nothing_was_recorded(ctx, machine, api):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    # the hook that ran kubeadm init failed before Juju committed the join material
    lost = testing.State(leader=True, relations=[peers()])
    out = ctx.run(ctx.on.update_status(), lost)

    assert len(machine.inits) == 1  # no second init on a running control plane
    content = secret(out, PEER_LABEL).latest_content
    assert content["token"] == machine.tokens[-1] and len(machine.tokens) == 2
    assert machine.uploads == [content["certificate-key"]]
    assert peer(out).local_app_data["cluster-version"] == "1.36"
    assert out.unit_status.name == "active"


NODE = "ip-10-0-1-17"  # the fake machine's hostname


def three_units(machine, planned_units: int):
    """A bootstrapped leader (unit 3) with two more joined units, and one pod on its node.

    Unit 3 rather than 0: ops.testing reads `departing_unit=0` as "not given" and would
    name the remote unit as the departing one.
    """
    ctx = testing.Context(charm.KubernetesControlPlaneCharm, unit_id=3)
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    members = {
        1: {"joined": "true", "api-server": "10.0.0.6:6443"},
        2: {"joined": "true", "api-server": "10.0.0.7:6443"},
    }
    relation = dataclasses.replace(peer(out), peers_data=members)
    state = dataclasses.replace(out, relations=[relation], planned_units=planned_units)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=1), state)
    machine.api.put_object(
        "/api/v1/namespaces/default/pods/web-1",
        {
            "metadata": {},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"},
        },
    )
    # Juju tells the departing unit about each peer; relation-list no longer has that one.
    return ctx, state, dataclasses.replace(peer(state), peers_data={2: members[2]})


def test_remove_unit_drains_resets_and_deletes_its_node_keeping_the_others(machine):
    ctx, state, relation = three_units(machine, planned_units=2)
    state = dataclasses.replace(state, relations=[relation])

    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=1, departing_unit=3), state)

    api = machine.api
    assert api.get_object("/api/v1/namespaces/default/pods/web-1") is None  # evicted
    assert api.get_object(f"/api/v1/nodes/{NODE}") is None
    resets = [c for c in machine.lines("kubeadm") if " reset " in c]
    assert len(resets) == 1  # kubeadm reset removes this unit's etcd member
    assert not machine.path("/etc/kubernetes/admin.conf").exists()
    assert not machine.services[api_proxy.SERVICE].active
    assert machine.read(api_proxy.CONFIG) is None
    assert out.unit_status == testing.MaintenanceStatus(
        "left the cluster; this unit is being removed"
    )
    before = len(machine.calls)
    out = ctx.run(ctx.on.update_status(), out)
    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=2, departing_unit=3), out)
    assert machine.calls[before:] == []
    assert out.unit_status.name == "maintenance"


def test_a_proxy_removal_that_fails_is_retried_on_the_reset_machine(machine):
    # issue 30 item 7: the reset ran, then `systemctl disable --now haproxy` failed, so
    # the hook fails and Juju runs the same relation-departed again on the reset machine
    ctx, state, relation = three_units(machine, planned_units=2)
    state = dataclasses.replace(state, relations=[relation])
    departed = ctx.on.relation_departed(relation, remote_unit=1, departing_unit=3)
    machine.fail(f"/usr/bin/systemctl disable --now {api_proxy.SERVICE}", stderr="timed out")

    with pytest.raises(testing.errors.UncaughtCharmError, match="timed out"):
        ctx.run(departed, state)
    assert not machine.path("/etc/kubernetes/admin.conf").exists()  # reset already
    assert machine.services[api_proxy.SERVICE].active

    out = ctx.run(departed, state)  # Juju's retry, from the state before the failed hook

    assert len([c for c in machine.lines("kubeadm") if " reset " in c]) == 1
    assert not machine.services[api_proxy.SERVICE].active
    assert machine.read(api_proxy.CONFIG) is None
    assert machine.read(api_proxy.DROP_IN) is None
    assert out.unit_status == testing.MaintenanceStatus(
        "left the cluster; this unit is being removed"
    )
    before = len(machine.calls)
    ctx.run(ctx.on.update_status(), out)
    assert machine.calls[before:] == []  # no reconcile of the reset machine


def test_a_node_deletion_that_fails_does_not_strand_the_leaving_unit(machine, caplog, monkeypatch):
    # review deploy.md N6: the API refuses past the client's retries (taken without
    # their backoff's waits here)
    from charms.gpu_k8s.v0 import kubeclient

    real = kubeclient._retry
    monkeypatch.setattr(
        kubeclient, "_retry", lambda retries, backoff, **kw: real(retries, 0.0, **kw)
    )
    ctx, state, relation = three_units(machine, planned_units=2)
    state = dataclasses.replace(state, relations=[relation])
    api = machine.api
    api.inject(status=503, times=50, method="DELETE", path_prefix=f"/api/v1/nodes/{NODE}")

    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=1, departing_unit=3), state)

    # reset and left all the same; the leader deletes the Node once it is NotReady
    assert len([c for c in machine.lines("kubeadm") if " reset " in c]) == 1
    assert api.get_object(f"/api/v1/nodes/{NODE}") is not None
    assert machine.read(api_proxy.CONFIG) is None
    assert not machine.services[api_proxy.SERVICE].active
    assert out.unit_status == testing.MaintenanceStatus(
        "left the cluster; this unit is being removed"
    )
    assert f"could not delete Node {NODE}" in caplog.text


def test_remove_application_keeps_etcd_and_the_node(machine, caplog):
    ctx, state, relation = three_units(machine, planned_units=0)
    state = dataclasses.replace(state, relations=[relation])

    ctx.run(ctx.on.relation_departed(relation, remote_unit=1, departing_unit=3), state)

    assert [c for c in machine.lines("kubeadm") if " reset " in c] == []
    assert machine.api.get_object(f"/api/v1/nodes/{NODE}") is not None
    assert machine.path("/etc/kubernetes/admin.conf").exists()
    assert "etcd data stays on this machine" in caplog.text


def test_another_unit_departing_does_not_reset_this_one(machine):
    ctx, state, relation = three_units(machine, planned_units=2)
    state = dataclasses.replace(state, relations=[relation])

    ctx.run(ctx.on.relation_departed(relation, remote_unit=1, departing_unit=1), state)

    assert [c for c in machine.lines("kubeadm") if " reset " in c] == []
    assert machine.api.get_object(f"/api/v1/nodes/{NODE}") is not None
    assert machine.proxy_servers() == ["10.0.0.7:6443", "192.0.2.0:6443"]


def test_a_join_that_fails_after_writing_admin_conf_is_reset_and_retried(ctx, machine):
    # kubeadm writes admin.conf in control-plane-prepare, long before the etcd member join
    machine.join_error = "etcdserver: can only promote a learner member which is in sync"
    machine.join_fails_in = "etcd-join"
    state = leader_member_state(leader=False)
    out = ctx.run(ctx.on.relation_changed(peer(state), remote_unit=1), state)

    assert out.unit_status == testing.WaitingStatus(
        "kubeadm join failed: error execution phase etcd-join: etcdserver: can only "
        "promote a learner member which is in sync; retrying on the next event"
    )
    assert peer(out).local_unit_data.get("joined") != "true"
    assert "api-server" not in peer(out).local_unit_data
    # the half-joined node is reset at once, so nothing of it looks joined
    assert machine.lines("kubeadm")[-1].startswith("/usr/bin/kubeadm reset --force")
    assert not machine.path("/etc/kubernetes/admin.conf").exists()

    machine.join_error = None
    out = ctx.run(ctx.on.update_status(), out)
    assert len(machine.joins) == 2
    assert peer(out).local_unit_data["joined"] == "true"
    assert out.unit_status.name == "active"


def test_every_kubeadm_command_has_its_own_timeout(ctx, machine, clock):
    # review deploy.md N16: init, the reset after a failed init, certs, tokens, uploads
    machine.fail("/usr/bin/kubeadm init --config")
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    out = ctx.run(ctx.on.update_status(), out)
    clock.advance(hours=30)  # the token and the uploaded certificates are renewed
    out = ctx.run(ctx.on.update_status(), out)
    ctx.run(
        ctx.on.config_changed(), dataclasses.replace(out, config={"api-extra-sans": "a.example"})
    )

    ran = [c for c in machine.calls if c.argv[0] == "/usr/bin/kubeadm"]
    verbs = {" ".join(c.argv[1:3]) for c in ran}
    assert {"init --config", "reset --force", "token create", "token delete"} <= verbs
    assert {"init phase"} <= verbs
    assert [c.line for c in ran if c.timeout is None] == []


def test_the_fake_join_writes_kubelet_conf_only_once_kubelet_bootstrapped(ctx, machine):
    # kubeadm's phases (join/kubelet.go): kubelet-start leaves bootstrap-kubelet.conf; the
    # TLS bootstrap's kubelet.conf comes in kubelet-wait-bootstrap, after etcd-join
    machine.join_error = "etcdserver: unhealthy cluster"
    machine.join_fails_in = "etcd-join"
    machine.reset_error = "the kubelet could not be stopped"  # what is left stays
    state = leader_member_state(leader=False)

    ctx.run(ctx.on.relation_changed(peer(state), remote_unit=1), state)

    assert machine.path("/etc/kubernetes/bootstrap-kubelet.conf").exists()
    assert machine.path("/etc/kubernetes/admin.conf").exists()
    assert not machine.path("/etc/kubernetes/kubelet.conf").exists()
    assert not machine.path("/etc/kubernetes/manifests/etcd.yaml").exists()


def test_a_failed_join_whose_reset_also_fails_is_never_counted_as_joined(ctx, machine):
    # review deploy.md N5: kubelet.conf and etcd's manifest are there (the join failed in
    # control-plane-join), and the reset that should remove them failed too
    machine.join_error = "timed out waiting for the condition"
    machine.join_fails_in = "control-plane-join"
    machine.reset_error = "context deadline exceeded"
    state = leader_member_state(leader=False)
    out = ctx.run(ctx.on.relation_changed(peer(state), remote_unit=1), state)
    assert out.unit_status.name == "waiting"
    assert machine.path("/etc/kubernetes/kubelet.conf").exists()
    assert machine.path("/etc/kubernetes/manifests/etcd.yaml").exists()

    machine.join_error = None
    out = ctx.run(ctx.on.update_status(), out)

    # not joined: the reset must succeed before this unit joins again
    assert peer(out).local_unit_data.get("joined") != "true"
    assert out.unit_status == testing.WaitingStatus(
        "kubeadm reset failed: error execution phase preflight: context deadline exceeded; "
        "retrying on the next event"
    )
    assert len(machine.joins) == 1

    machine.reset_error = None
    out = ctx.run(ctx.on.update_status(), out)
    assert len(machine.joins) == 2
    assert peer(out).local_unit_data["joined"] == "true"
    assert out.unit_status.name == "active"


def test_a_unit_of_an_older_charm_with_a_complete_join_counts_as_joined(ctx, machine):
    """Units joined before the join marker existed: admin.conf plus etcd's manifest."""
    machine.write("/etc/kubernetes/admin.conf", machine.admin_conf, 0o600)
    machine.write("/etc/kubernetes/manifests/etcd.yaml", "# etcd\n")
    machine.write("/etc/kubernetes/kubelet.conf", "apiVersion: v1\nkind: Config\n")
    state = leader_member_state(leader=False)
    out = ctx.run(ctx.on.upgrade_charm(), state)
    assert machine.joins == []
    assert peer(out).local_unit_data["joined"] == "true"


def test_a_joined_member_re_uploads_certs_and_mints_a_token_when_the_leader_cannot(
    ctx, machine, clock
):
    """The leader has not joined (a new leader, say): it cannot upload or mint itself."""
    state = leader_member_state(leader=False)
    out = ctx.run(ctx.on.update_status(), state)  # this unit joins while all is fresh
    assert peer(out).local_unit_data["joined"] == "true"
    tokens = len(machine.tokens)

    clock.advance(hours=30)  # uploaded certificates (2 h) and the token (24 h) are gone
    waiting = dataclasses.replace(peer(out), peers_data={1: {"joined": "false"}})
    out = ctx.run(
        ctx.on.relation_changed(waiting, remote_unit=1),
        dataclasses.replace(out, relations=[waiting]),
    )

    assert machine.uploads == ["ab" * 32]  # the cluster's certificate key, from the secret
    mine = peer(out).local_unit_data
    assert mine["certs-uploaded-at"] == clock.now.isoformat()
    assert len(machine.tokens) == tokens + 1
    minted = next(s for s in out.secrets if s.label == "control-plane-join-token")
    assert minted.owner == "unit"
    assert minted.latest_content == {"token": machine.tokens[-1]}
    assert minted.remote_grants == {waiting.id: {"kubernetes-control-plane"}}
    assert mine["join-token-secret-id"] == minted.id
    assert machine.tokens[-1] not in json.dumps(mine)
    assert datetime.datetime.fromisoformat(
        mine["token-expires"]
    ) == clock.now + datetime.timedelta(hours=24)

    # done once: the next hook finds both fresh
    out = ctx.run(ctx.on.update_status(), out)
    assert machine.uploads == ["ab" * 32] and len(machine.tokens) == tokens + 1


def test_a_leader_that_has_not_joined_joins_with_what_a_member_made(ctx, machine, clock):
    state = leader_member_state(leader=True)
    relation = peer(state)
    stale = {
        **relation.local_app_data,
        "certs-uploaded-at": (clock.now - datetime.timedelta(hours=3)).isoformat(),
        "token-expires": (clock.now - datetime.timedelta(hours=1)).isoformat(),
    }
    helper_token = testing.Secret({"token": "zyxwvu.0123456789zyxwvu"}, owner=None)
    member = {
        **relation.peers_data[1],
        "certs-uploaded-at": clock.now.isoformat(),
        "join-token-secret-id": helper_token.id,
        "token-expires": (clock.now + datetime.timedelta(hours=24)).isoformat(),
    }
    relation = dataclasses.replace(relation, local_app_data=stale, peers_data={1: member})
    state = dataclasses.replace(
        state, relations=[relation], secrets=[*state.secrets, helper_token]
    )

    out = ctx.run(ctx.on.leader_elected(), state)

    assert len(machine.joins) == 1
    assert machine.joins[0]["discovery"]["bootstrapToken"]["token"] == "zyxwvu.0123456789zyxwvu"
    assert machine.joins[0]["controlPlane"]["certificateKey"] == "ab" * 32
    assert peer(out).local_unit_data["joined"] == "true"
