"""The NetworkPolicy evaluator (tests/fakes/netpol.py) against the Kubernetes docs' own cases.

kubernetes.io/docs/concepts/services-networking/network-policies/, read 2026-11-27.
"""

from __future__ import annotations

from fakes.netpol import Cluster, Node, Pod

DB = Pod("db", "default", {"role": "db"}, "10.244.0.5", "n1", ports={"redis": (6379, "TCP")})
FRONT = Pod("front", "default", {"role": "frontend"}, "10.244.0.6", "n2")
OTHER_NS = Pod("client", "myproject", {"role": "client"}, "10.244.0.7", "n2")
NODES = (Node("n1", "192.168.0.1"), Node("n2", "192.168.0.2"))
NAMESPACES = {"default": {}, "myproject": {"project": "myproject"}}


def policy(spec: dict, namespace: str = "default") -> dict:
    meta = {"name": "p", "namespace": namespace}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta,
        "spec": spec,
    }


def cluster(*policies: dict) -> Cluster:
    return Cluster(NAMESPACES, [DB, FRONT, OTHER_NS], policies, NODES)


def test_no_policy_allows_everything_and_default_deny_denies_all_but_self_and_node():
    assert cluster().allowed(OTHER_NS, DB, 1)
    c = cluster(policy({"podSelector": {}, "policyTypes": ["Ingress"]}))
    assert not c.allowed(FRONT, DB, 6379) and not c.allowed(OTHER_NS, DB, 6379)
    assert c.allowed(DB, DB, 6379)  # a pod cannot block itself
    assert c.allowed(NODES[0], DB, 6379) and not c.allowed(NODES[1], DB, 6379)


def test_namespace_and_pod_selector_in_one_element_is_and_in_two_is_or():
    both = [{"namespaceSelector": {"matchLabels": {"project": "myproject"}},
             "podSelector": {"matchLabels": {"role": "frontend"}}}]  # fmt: skip
    either = [{"namespaceSelector": {"matchLabels": {"project": "myproject"}}},
              {"podSelector": {"matchLabels": {"role": "frontend"}}}]  # fmt: skip
    base = {"podSelector": {"matchLabels": {"role": "db"}}}
    c = cluster(policy({**base, "ingress": [{"from": both}]}))
    assert not c.allowed(OTHER_NS, DB, 6379) and not c.allowed(FRONT, DB, 6379)
    c = cluster(policy({**base, "ingress": [{"from": either}]}))
    assert c.allowed(OTHER_NS, DB, 6379) and c.allowed(FRONT, DB, 6379)


def test_ports_named_ranges_protocols_and_policy_union():
    base = {"podSelector": {"matchLabels": {"role": "db"}}}
    c = cluster(
        policy({**base, "ingress": [{"ports": [{"port": "redis"}]}]}),
        {**policy({**base, "ingress": [{"ports": [{"port": 32000, "endPort": 32768}]}]}),
         "metadata": {"name": "q", "namespace": "default"}},
    )  # fmt: skip
    assert c.allowed(FRONT, DB, 6379) and not c.allowed(FRONT, DB, 6379, "UDP")
    assert c.allowed(FRONT, DB, 32768) and not c.allowed(FRONT, DB, 32769)


def test_egress_isolation_and_ip_blocks():
    block = {"ipBlock": {"cidr": "10.244.0.0/16", "except": ["10.244.0.5/32"]}}
    egress = policy(
        {"podSelector": {"matchLabels": {"role": "frontend"}}, "egress": [{"to": [block]}]}
    )
    c = cluster(egress)
    assert not c.allowed(FRONT, DB, 6379)  # Egress implied by the egress rules
    assert c.allowed(FRONT, OTHER_NS, 80)
