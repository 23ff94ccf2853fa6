"""Each kube-api consumer's namespace is isolated for ingress (issue 29 item 4, review S3).

The policies the control plane applies are read back from the fake API server (which
validated them as kube-apiserver 1.36 would) and evaluated by tests/fakes/netpol.py, the
NetworkPolicy semantics of the Kubernetes docs: these tests check who may reach whom.
"""

from __future__ import annotations

import dataclasses

import network_policies
import pytest
from ops import testing

from fakes.control_plane import deployed_charm, granted, kube_api_relation, member, peer, peers
from fakes.netpol import Cluster, External, Node, Pod

NETPOL = "/apis/networking.k8s.io/v1"
LOCALQUEUES = [
    {"api-groups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get", "create"]}
]
# Where the cluster's own components run: CoreDNS in kube-system (kubeadm's addon), the
# DCGM exporter and kube-state-metrics on hostNetwork (dcgm_exporter.py, kube_state_metrics.py;
# the GPU components' namespace is gpu-k8s-gpu on the branch moving them out of kube-system).
NODES = (Node("cp-0", "10.0.0.10"), Node("gpu-0", "10.0.0.20"), Node("gpu-1", "10.0.0.21"))
CP0 = testing.Network("peers", ingress_addresses=["10.0.0.10"])
# EC2's instance metadata service (IPv4 and, on Nitro instances, IPv6: EC2 user guide,
# "Access instance metadata for an EC2 instance")
IMDS = (External("169.254.169.254"), External("fd00:ec2::254"))
# What listens on every node's addresses besides the API server (issue 29, review44a G2).
# Canonical's opentelemetry-collector (docs/how-to/observe.md puts one on every machine):
# canonical/opentelemetry-collector-operator src/config_builder.py `Port` at 9f17dec
# (track/2), each bound on 0.0.0.0 (config_builder.py add_default_config, config_manager.py)
# and the node-exporter snap it configures on `:9100` (charm.py _configure_node_exporter).
COLLECTOR_PORTS = {
    "loki_http": 3500,
    "otlp_grpc": 4317,
    "otlp_http": 4318,
    "metrics": 8888,
    "health": 13133,
    "jaeger_grpc": 14250,
    "jaeger_thrift_http": 14268,
    "zipkin": 9411,
    "node_exporter": 9100,
}
# The rest: the DCGM exporter (dcgm_exporter.py, hostNetwork), kubelet's API (10250) and
# kube-proxy's health check (10256, kubeadm's KubeProxyConfiguration healthzBindAddress
# 0.0.0.0:10256), sshd, and a collector port an operator moved with otelcol's `ports`
# option (the same charm's charmcraft.yaml): the fence must not depend on a port list.
NODE_PORTS = {
    **COLLECTOR_PORTS,
    "dcgm-exporter": 9400,
    "kubelet": 10250,
    "kube-proxy": 10256,
    "sshd": 22,
    "otlp_grpc moved": 4320,
}


@pytest.fixture
def bootstrapped(ctx, machine) -> testing.State:
    """The leader bootstrapped at cp-0's address (NODES), which its API server advertises."""
    state = testing.State(leader=True, relations=[peers()], networks={CP0})
    return ctx.run(ctx.on.install(), state)


def policies(api):
    return api.objects(NETPOL, kind="NetworkPolicy")


def cluster(api, pods):
    namespaces = {
        ns["metadata"]["name"]: ns["metadata"].get("labels") or {}
        for ns in api.objects("/api/v1/namespaces", kind="Namespace")
    }
    namespaces.setdefault("kube-system", {})
    namespaces.setdefault("gpu-k8s-gpu", {})
    return Cluster(namespaces, pods, policies(api), NODES)


def team_pods():
    return [
        Pod("a-worker-0", "team-a", {"app": "a"}, "10.244.1.5", "gpu-0"),
        Pod("a-tensorboard", "team-a", {"app": "a-tb"}, "10.244.1.6", "gpu-0"),
        Pod("b-worker-0", "team-b", {"app": "b"}, "10.244.2.5", "gpu-1"),
        Pod("efs-dirs", "storage", {"job": "dirs"}, "10.244.2.9", "gpu-1"),
        Pod("coredns", "kube-system", {"k8s-app": "kube-dns"}, "10.244.0.2", "cp-0"),
        Pod("dcgm", "gpu-k8s-gpu", {"app": "dcgm"}, "10.0.0.20", "gpu-0", host_network=True),
        Pod("ksm", "kube-system", {"app": "ksm"}, "10.0.0.10", "cp-0", host_network=True),
    ]


def test_without_policies_every_pod_reaches_every_team_pod(api):
    """The probe of review S3: what a cluster without the control plane's policies allows."""
    c = cluster(api, team_pods())
    assert c.allowed(c.pod("team-b", "b-worker-0"), c.pod("team-a", "a-worker-0"), 2222)


def test_every_consumer_namespace_denies_ingress_from_every_other_pod(ctx, bootstrapped, api):
    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    b = kube_api_relation("tensorflow-b", "team-b", LOCALQUEUES)
    storage = kube_api_relation("efs-storage", "storage")
    granted(ctx, bootstrapped, a, b, storage)

    names = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in policies(api)}
    assert {
        ("storage", "gpu-k8s-default-deny-ingress"),
        ("team-a", "gpu-k8s-default-deny-ingress"),
        ("team-b", "gpu-k8s-default-deny-ingress"),
    } <= names
    c = cluster(api, team_pods())
    a0, tb, b0 = (
        c.pod("team-a", "a-worker-0"),
        c.pod("team-a", "a-tensorboard"),
        c.pod("team-b", "b-worker-0"),
    )
    for port in (2222, 6006, 8500, 8501, 22):
        assert not c.allowed(b0, a0, port), port  # another team's pod
        assert not c.allowed(c.pod("kube-system", "coredns"), a0, port)
        assert not c.allowed(b0, c.pod("storage", "efs-dirs"), port)
    # default-deny holds inside the namespace too: a team's own policies open what it needs
    assert not c.allowed(tb, a0, 2222)
    assert not c.allowed(a0, b0, 2222)
    # what it leaves open: DNS, the scrapers' targets, and each pod's own node
    coredns = c.pod("kube-system", "coredns")
    assert c.allowed(a0, coredns, 53, "UDP") and c.allowed(a0, coredns, 53, "TCP")
    # egress is open but for the metadata service and the DCGM exporter's port (below)
    assert not c.allowed(a0, c.pod("gpu-k8s-gpu", "dcgm"), 9400)
    # the exporters are hostNetwork: no NetworkPolicy selects them, from a system pod
    assert c.allowed(c.pod("kube-system", "ksm"), c.pod("gpu-k8s-gpu", "dcgm"), 9400)
    # kubelet (probes, port-forward) on the pod's own node; not another node
    assert c.allowed(NODES[1], a0, 6006)
    assert not c.allowed(NODES[2], a0, 6006)


def test_no_consumer_pod_reaches_the_instance_metadata_service(ctx, bootstrapped, api):
    """The node's IAM role credentials are at 169.254.169.254 (issue 29 item 8, review)."""
    c = cluster(api, team_pods())
    assert c.allowed(c.pod("team-a", "a-worker-0"), IMDS[0], 80)  # the probe: open before

    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    storage = kube_api_relation("efs-storage", "storage")
    granted(ctx, bootstrapped, a, storage)
    c = cluster(api, team_pods())
    a0, dirs = c.pod("team-a", "a-worker-0"), c.pod("storage", "efs-dirs")
    for pod in (a0, dirs):
        for imds in IMDS:
            assert not c.allowed(pod, imds, 80), (pod.name, imds)
        # everything else stays open: DNS, other pods as their ingress allows, the API
        # server on a node, S3 and https outside
        coredns = c.pod("kube-system", "coredns")
        assert c.allowed(pod, coredns, 53, "UDP") and c.allowed(pod, coredns, 53, "TCP")
        assert c.allowed(pod, External("10.0.0.10"), 6443)
        assert c.allowed(pod, External("52.216.8.1"), 443)
        assert c.allowed(pod, External("2600:1f18::1"), 443)
    # the nodes' own processes (kubelet, the charms) still read it: no policy selects them
    assert c.allowed(NODES[1], IMDS[0], 80)


def test_no_consumer_pod_reads_the_dcgm_exporters_page(ctx, bootstrapped, api):
    """Issue 29: the exporter's page names every GPU workload of its node (and its use).

    It runs with the host's network on port 9400 of every GPU node (dcgm_exporter.py),
    where no NetworkPolicy selects it: the consumers' pods are kept from it on their way
    out, to every address (the node's own, its Calico tunnel address, a Service that
    forwards there: policed after kube-proxy's DNAT), and cannot reopen it (the functional
    test_the_control_planes_egress_policy_stands_against_its_consumer). Its readers are no
    pods: the COS agent on the node and the tensorflow charm's job-status from its unit's
    machine, whose traffic no policy selects.
    """
    c = cluster(api, team_pods())
    dcgm = c.pod("gpu-k8s-gpu", "dcgm")
    assert c.allowed(c.pod("team-b", "b-worker-0"), dcgm, 9400)  # the probe: open before

    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    b = kube_api_relation("tensorflow-b", "team-b", LOCALQUEUES)
    storage = kube_api_relation("efs-storage", "storage")
    granted(ctx, bootstrapped, a, b, storage)
    c = cluster(api, team_pods())
    dcgm = c.pod("gpu-k8s-gpu", "dcgm")
    tunnel = External("10.244.1.0")  # gpu-0's vxlan.calico address, from the pod pool
    for pod in (c.pod("team-a", "a-worker-0"), c.pod("team-b", "b-worker-0")):
        assert not c.allowed(pod, dcgm, 9400), pod.name  # same node (a) and another (b)
        for node in NODES:
            assert not c.allowed(pod, External(node.ip), 9400), (pod.name, node.name)
        assert not c.allowed(pod, tunnel, 9400)
        # what the pods use: the API server, DNS, S3 (a node's other ports: below)
        assert c.allowed(pod, External("10.0.0.10"), 6443)
        assert c.allowed(pod, External("52.216.8.1"), 443)
        assert c.allowed(pod, c.pod("kube-system", "coredns"), 53, "UDP")
    assert not c.allowed(c.pod("storage", "efs-dirs"), dcgm, 9400)
    # the readers: the node's own agent (COS) and the tensorflow unit's machine (cp-0 in
    # the bundle) are hosts; no policy selects a host's traffic
    assert c.allowed(NODES[1], External("10.0.0.20"), 9400)
    assert c.allowed(NODES[0], External("10.0.0.20"), 9400)


def test_no_consumer_pod_reaches_a_nodes_own_listeners(ctx, bootstrapped, api):
    """A team pod pushes no forged telemetry into a node's COS collector (review44a G2).

    Every node runs the collector and node-exporter on all of its addresses, with the
    host's network, which no NetworkPolicy selects: each port, on the pod's own node (on
    Calico the pod's egress policy decides that too: fakes/netpol.py), on another node, on
    a node's Calico tunnel address (from the pod CIDR, no pod's), is refused. Only the API
    servers' port is open on the nodes.
    """
    nodes = [External(n.ip) for n in NODES] + [External("10.244.1.0")]
    c = cluster(api, team_pods())
    a0 = c.pod("team-a", "a-worker-0")
    for name, port in NODE_PORTS.items():  # the probe: every one open before
        assert c.allowed(a0, nodes[1], port), name

    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    storage = kube_api_relation("efs-storage", "storage")
    granted(ctx, bootstrapped, a, storage)
    c = cluster(api, team_pods())
    for pod in (c.pod("team-a", "a-worker-0"), c.pod("storage", "efs-dirs")):
        for node in nodes:
            for name, port in NODE_PORTS.items():
                assert not c.allowed(pod, node, port), (pod.name, node.ip, name)
            assert not c.allowed(pod, node, 4317, "UDP")
            assert not c.allowed(pod, node, 53, "UDP")  # no node serves DNS: CoreDNS does
        assert c.allowed(pod, nodes[0], 6443)  # the API server (the kubernetes Service)
        assert not c.allowed(pod, nodes[0], 6443, "UDP")
        # any other private address too (documented: a private service in the VPC), an
        # EFS mount target among them (NFS from the pod itself: kubelet mounts volumes)
        assert not c.allowed(pod, External("172.31.5.9"), 5432)
        assert not c.allowed(pod, External("172.31.20.7"), 2049)
        assert not c.allowed(pod, External("100.64.0.5"), 4317)
    # the scrapers are hosts, which no policy selects: a node's collector, the tensorflow
    # unit's machine
    for name, port in NODE_PORTS.items():
        assert c.allowed(NODES[0], nodes[1], port), name


def test_consumer_pods_still_reach_pods_dns_the_api_and_the_internet(ctx, bootstrapped, api):
    """The egress allow-list keeps what the charms' pods use (review44a G2)."""
    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    granted(ctx, bootstrapped, a)
    extra = Pod("otel", "observability", {"app": "otel"}, "10.244.3.7", "gpu-1")
    c = cluster(api, [*team_pods(), extra])
    a0 = c.pod("team-a", "a-worker-0")
    coredns = c.pod("kube-system", "coredns")
    assert c.allowed(a0, coredns, 53, "UDP") and c.allowed(a0, coredns, 53, "TCP")
    assert c.allowed(a0, External("10.0.0.10"), 6443)
    # a pod, wherever its ingress lets it in, on any port and protocol (an operator's
    # collector in its own namespace, here)
    for port, protocol in ((4317, "TCP"), (4318, "TCP"), (9400, "TCP"), (6831, "UDP")):
        assert c.allowed(a0, c.pod("observability", "otel"), port, protocol), port
    # the internet on any port: S3, https, an OTLP endpoint outside
    for ip, port in (("52.216.8.1", 443), ("3.5.1.1", 80), ("34.120.0.1", 4317)):
        assert c.allowed(a0, External(ip), port), (ip, port)
    for imds in IMDS:
        assert not c.allowed(a0, imds, 80)


def test_a_pod_cidr_outside_the_private_space_is_excepted_too(ctx, machine, api):
    """A node's tunnel address lies in the pod CIDR, wherever the operator put it."""
    state = testing.State(leader=True, relations=[peers()], config={"pod-cidr": "198.18.0.0/16"})
    state = ctx.run(ctx.on.install(), state)
    granted(ctx, state, kube_api_relation("tensorflow", "team-a", LOCALQUEUES))
    a0 = Pod("a-worker-0", "team-a", {"app": "a"}, "198.18.1.5", "gpu-0")
    b0 = Pod("b-worker-0", "team-b", {"app": "b"}, "198.18.2.5", "gpu-1")
    c = cluster(api, [a0, b0])
    for port in (4317, 9100, 9400):
        assert not c.allowed(a0, External("198.18.2.0"), port), port  # gpu-1's tunnel
    assert c.allowed(a0, b0, 4317)  # team-b's pods are isolated by nothing here
    assert c.allowed(a0, External("52.216.8.1"), 443)


def test_policies_are_applied_once_and_follow_new_namespaces(ctx, bootstrapped, api):
    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    state = granted(ctx, bootstrapped, a)
    api.requests.clear()
    state = ctx.run(ctx.on.update_status(), state)
    assert not [r for r in api.requests if "networkpolicies" in r[1]]
    api.requests.clear()
    state = granted(ctx, state, kube_api_relation("tensorflow-b", "team-b", LOCALQUEUES))
    assert {p["metadata"]["namespace"] for p in policies(api)} == {"team-a", "team-b"}
    assert peer(state).local_app_data["team-network-policies"]
    # relating team-b applied team-b's policies only, not team-a's again (bench_kube_api:
    # relating the Nth team sent every namespace's policies again)
    written = {r[1] for r in api.requests if "networkpolicies" in r[1] and r[0] == "PATCH"}
    assert written and all("/namespaces/team-b/" in path for path in written), written


def _reworded(monkeypatch) -> list[list[str]]:
    """Another charm's policies (one more label on each) from now on; each build's namespaces."""
    real, built = network_policies.manifests, []

    def manifests(*args):
        built.append(list(args[0]))
        objects = real(*args)
        for o in objects:
            o["metadata"].setdefault("labels", {})["reworded"] = "true"
        return objects

    monkeypatch.setattr(network_policies, "manifests", manifests)
    return built


def test_a_steady_hook_builds_no_policy_and_a_refreshed_charm_applies_its_own(
    ctx, bootstrapped, api, tmp_path, monkeypatch
):
    """Built again only for a new namespace or another charm (Juju's charm URL)."""
    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    state = granted(ctx, bootstrapped, a)
    built = _reworded(monkeypatch)
    state = ctx.run(ctx.on.relation_changed(state.get_relation(a.id)), state)
    state = ctx.run(ctx.on.update_status(), state)
    assert built == []
    assert not any("reworded" in (p["metadata"].get("labels") or {}) for p in policies(api))

    deployed_charm(tmp_path / "charm", "ch:amd64/kubernetes-control-plane-2")
    ctx.run(ctx.on.upgrade_charm(), state)
    assert built and all(p["metadata"]["labels"]["reworded"] == "true" for p in policies(api))


def test_the_status_says_teams_are_not_isolated_while_flannel_is_the_cni(ctx, machine):
    """Flannel stores NetworkPolicies and enforces none: the leader's line says so.

    A cluster bootstrapped with flannel (`cni` flannel; every cluster before Calico).
    """
    flannel = testing.State(leader=True, relations=[peers()], config={"cni": "flannel"})
    bootstrapped = ctx.run(ctx.on.install(), flannel)
    assert "not isolated" not in bootstrapped.unit_status.message  # no consumer yet
    state = granted(ctx, bootstrapped, kube_api_relation("tensorflow", "team-a", LOCALQUEUES))
    assert state.unit_status == testing.ActiveStatus(
        "Ready: v1.36, 1 control-plane, 0 workers; "
        "teams not isolated on the network: flannel enforces no NetworkPolicy"
    )


def test_on_calico_the_status_says_nothing_of_isolation(ctx, bootstrapped):
    """Calico, a new cluster's CNI, enforces the policies: no line about it."""
    state = granted(ctx, bootstrapped, kube_api_relation("tensorflow", "team-a", LOCALQUEUES))
    assert state.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")


def test_team_egress_opens_the_services_it_names_on_their_ports_only(ctx, bootstrapped, api):
    """An in-VPC store a tensorflow `endpoint` names, on its port (rereview44a F3).

    Before the option, MinIO at 172.31.5.9:9000 is out of reach like any private address;
    with it, that address and port only: another port, UDP, its neighbour, the nodes'
    listeners and the metadata service stay closed; a network without a port is open on
    every port and protocol, a range on each port of it.
    """
    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    state = granted(ctx, bootstrapped, a)
    minio = External("172.31.5.9")
    assert not cluster(api, team_pods()).allowed(team_pods()[0], minio, 9000)

    config = {"team-egress": "172.31.5.9/32:9000, 10.20.8.0/28 192.168.7.7/32:8000-8100"}
    state = ctx.run(ctx.on.config_changed(), dataclasses.replace(state, config=config))
    assert state.unit_status.name == "active", state.unit_status
    c = cluster(api, team_pods())
    for pod in (c.pod("team-a", "a-worker-0"), c.pod("team-a", "a-tensorboard")):
        assert c.allowed(pod, minio, 9000)
        assert not c.allowed(pod, minio, 9001)
        assert not c.allowed(pod, minio, 9000, "UDP")
        assert not c.allowed(pod, External("172.31.5.10"), 9000)
        for port, protocol in ((443, "TCP"), (5432, "TCP"), (53, "UDP")):
            assert c.allowed(pod, External("10.20.8.3"), port, protocol), port
        assert not c.allowed(pod, External("10.20.8.16"), 443)
        assert c.allowed(pod, External("192.168.7.7"), 8000)
        assert c.allowed(pod, External("192.168.7.7"), 8100)
        assert not c.allowed(pod, External("192.168.7.7"), 8101)
        for node in NODES:
            assert not c.allowed(pod, External(node.ip), 9000)
            assert not c.allowed(pod, External(node.ip), 9100)
        for imds in IMDS:
            assert not c.allowed(pod, imds, 80)

    api.requests.clear()  # the same option again builds nothing
    ctx.run(ctx.on.update_status(), state)
    assert not [r for r in api.requests if "networkpolicies" in r[1]]


# team-egress values the control plane refuses, and what its Blocked line says of each
REFUSED_EGRESS = [
    ("169.254.169.254/32:80", "overlaps 169.254.0.0/16 (link-local"),
    ("10.0.5.20/32:9000 169.254.0.0/16", "'169.254.0.0/16' overlaps 169.254.0.0/16"),
    ("0.0.0.0/0", "'0.0.0.0/0' overlaps 169.254.0.0/16"),
    ("169.0.0.0/8:443", "overlaps 169.254.0.0/16"),
    ("10.0.0.0/8:9000", "'10.0.0.0/8:9000' overlaps 10.244.0.0/16 (the pod network)"),
    ("127.0.0.1/32", "overlaps 127.0.0.0/8 (loopback)"),
    ("10.0.5.20/24:9000", "'10.0.5.20/24:9000' is not <ipv4-network>"),
    ("fd00::/8:443", "is not <ipv4-network>"),
    ("10.0.5.20/32:http", "is not <ipv4-network>"),
    ("10.0.5.20/32:0", "ports are 1-65535"),
    ("10.0.5.20/32:70000", "ports are 1-65535"),
    ("10.0.5.20/32:9000-8000", "ports are 1-65535, a range low-high"),
    (" ".join(f"10.0.5.{i}/32" for i in range(33)), "33 entries: at most 32"),
]


def test_team_egress_refuses_what_the_fence_is_for(ctx, bootstrapped, api):
    """The metadata service (the node's IAM credentials) and the pod network stay closed.

    The charm is Blocked naming the entry, and the policies applied stay as they were.
    """
    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    state = granted(ctx, bootstrapped, a)
    before = policies(api)
    for value, why in REFUSED_EGRESS:
        out = ctx.run(
            ctx.on.config_changed(), dataclasses.replace(state, config={"team-egress": value})
        )
        message = out.unit_status.message
        assert out.unit_status.name == "blocked", value
        assert message.startswith("Invalid config: team-egress: ") and why in message, message
        assert policies(api) == before
    for imds in IMDS:
        assert not cluster(api, team_pods()).allowed(team_pods()[0], imds, 80)


def test_the_api_port_is_open_on_the_api_servers_only(ctx, bootstrapped, api):
    """6443 on the control-plane nodes' addresses, not the private space (rereview44a F8).

    Another private host's 6443 (another cluster's API server, a worker) is refused; a
    control-plane unit that joins is named in the hook its address reaches the leader in,
    and a steady hook after sends no policy.
    """
    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    state = granted(ctx, bootstrapped, a)
    c = cluster(api, team_pods())
    a0 = c.pod("team-a", "a-worker-0")
    assert c.allowed(a0, External("10.0.0.10"), 6443)  # cp-0, the leader
    for other in ("10.0.0.20", "10.0.0.6", "172.31.5.9", "192.168.1.1", "100.64.0.5"):
        assert not c.allowed(a0, External(other), 6443), other

    joined = dataclasses.replace(peer(state), peers_data={1: member(api, 1)})  # 10.0.0.6
    others = [r for r in state.relations if r.endpoint != "peers"]
    state = dataclasses.replace(state, relations=[*others, joined])
    state = ctx.run(ctx.on.relation_changed(peer(state), remote_unit=1), state)
    c = cluster(api, team_pods())
    for server in ("10.0.0.10", "10.0.0.6"):
        assert c.allowed(c.pod("team-a", "a-worker-0"), External(server), 6443), server
    assert not c.allowed(c.pod("team-a", "a-worker-0"), External("10.0.0.20"), 6443)
    api.requests.clear()
    ctx.run(ctx.on.update_status(), state)
    assert not [r for r in api.requests if "networkpolicies" in r[1]]


def test_no_api_server_known_opens_no_rule_for_every_address():
    """A rule without `to` matches every address: none is written while none is known."""
    for servers in ([], ["cp-0.example:6443"]):
        egress = network_policies.deny_instance_metadata("team-a", "", (), servers)
        rules = egress["spec"]["egress"]
        assert all(rule.get("to") for rule in rules), servers
        assert not any({"protocol": "TCP", "port": 6443} in rule["ports"] for rule in rules)
    assert network_policies.api_blocks(["10.0.0.5:6443", "[fd00::5]:6443", "10.0.0.5:6443"]) == [
        "10.0.0.5/32",
        "fd00::5/128",
    ]


def test_team_egress_takes_a_range_of_one_port():
    """final44a N3: endPort may equal port.

    kubernetes pkg/apis/networking/validation ValidateNetworkPolicyPort: endPort "must be
    greater than or equal to `port`".
    """
    (entry,) = network_policies.parse_egress("10.0.5.20/32:9000-9000")
    assert entry.rule()["ports"] == [{"protocol": "TCP", "port": 9000, "endPort": 9000}]
