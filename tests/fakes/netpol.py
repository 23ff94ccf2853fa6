# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Which pod may reach which pod and port under a set of NetworkPolicies.

An evaluator of `networking.k8s.io/v1` NetworkPolicy as kubernetes.io/docs/concepts/
services-networking/network-policies/ (read 2026-11-27) defines it, for tests that check
what the charms' policies MEAN rather than that objects exist. Each rule names the
section of that page it follows:

- "The two sorts of pod isolation": a pod is isolated for ingress when any NetworkPolicy
  in its namespace selects it and has `Ingress` in its policyTypes (egress likewise);
  a pod isolated in neither direction allows everything. For a connection from a source
  pod to a destination pod to be allowed, the source's egress AND the destination's
  ingress must both allow it. Policies are additive: a connection is allowed in a
  direction when ANY policy selecting the pod allows it (the union).
- "The NetworkPolicy resource": `podSelector` selects pods in the policy's own namespace
  (empty: all of them); `policyTypes` left out means `Ingress`, plus `Egress` when the
  policy has egress rules; an `ingress` rule allows traffic matching both its `from` and
  its `ports`; an empty or missing `from` (or `to`) matches every peer, an empty or
  missing `ports` every port.
- "Behavior of to and from selectors": a peer with only `podSelector` selects pods of the
  policy's namespace; only `namespaceSelector` every pod of the selected namespaces;
  both in ONE element, the selected pods of the selected namespaces (AND); `ipBlock`
  CIDR ranges less `except`, meant for cluster-external addresses (whether pod IPs match
  is left to the plugin; here a pod's IP is matched too, the stricter reading for an
  allow-list test would be to refuse, so tests never rely on it either way).
- "Targeting a range of ports": `endPort` makes `port`..`endPort` a range; `protocol`
  defaults to TCP; a named `port` matches a container port of that name on the
  destination pod.
- "Targeting a Namespace by its name": every namespace carries the immutable label
  `kubernetes.io/metadata.name` (the fake API server sets it too).
- "What you can't do with network policies": a pod cannot block access to itself, nor
  traffic from its resident node ("traffic to and from the node where a Pod is running is
  always allowed", "Behavior of to and from selectors" / the identifiers list).
- A pod's own traffic to its node's addresses: the page's identifiers list says traffic
  "to and from the node where a Pod is running is always allowed"; Calico, the bundle's
  CNI, applies the pod's egress policy to it first and only then its
  DefaultEndpointToHostAction (projectcalico/calico api/pkg/apis/projectcalico/v3/
  felixconfig.go: "after the traffic hits the endpoint egress policy"; calico.yaml sets
  ACCEPT). Here, as on Calico, a pod's egress to its node's address (an `External`) is
  decided by its egress policies like any other address.
- "NetworkPolicy and hostNetwork pods": their behaviour is undefined; the plugins this
  bundle uses (Calico) do not apply NetworkPolicy to them. Here a hostNetwork pod is never
  isolated, and as a source it has its node's address and matches no podSelector.

Label selectors: matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist) ANDed;
an empty selector matches everything (kubernetes.io/docs/concepts/overview/working-with-
objects/labels/#resources-that-support-set-based-requirements).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

NAME_LABEL = "kubernetes.io/metadata.name"


@dataclasses.dataclass(frozen=True)
class Node:
    """A node: a host address, the source of kubelet probes and hostNetwork pods."""

    name: str
    ip: str


@dataclasses.dataclass(frozen=True)
class Pod:
    """A pod as the policies see it: namespace, labels, address, node, named ports."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    ip: str
    node: str = "node-0"
    host_network: bool = False
    # container port name -> (number, protocol)
    ports: Mapping[str, tuple[int, str]] = dataclasses.field(default_factory=dict)


def pod_from_manifest(
    manifest: Mapping[str, Any], ip: str, node: str = "node-0", name: str = ""
) -> Pod:
    """A Pod from a pod template or Pod manifest (labels, namespace, named ports)."""
    meta = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}
    ports = {
        p["name"]: (p["containerPort"], p.get("protocol", "TCP"))
        for c in spec.get("containers") or []
        for p in c.get("ports") or []
        if p.get("name")
    }
    return Pod(
        name=name or meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        labels=dict(meta.get("labels") or {}),
        ip=ip,
        node=node,
        host_network=bool(spec.get("hostNetwork")),
        ports=ports,
    )


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector matches `labels` (an empty selector matches all)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown selector operator {op}")
    return True


@dataclasses.dataclass(frozen=True)
class External:
    """An address off the pod network as a destination (the metadata service, S3).

    No NetworkPolicy selects it, so only the source's egress decides; it matches `ipBlock`
    peers only ("Behavior of to and from selectors": ipBlock for cluster-external IPs).
    """

    ip: str
    ports: Mapping[str, tuple[int, str]] = dataclasses.field(default_factory=dict)


class Cluster:
    """Namespaces (with labels), nodes, pods and NetworkPolicy manifests."""

    def __init__(
        self,
        namespaces: Mapping[str, Mapping[str, str]],
        pods: Iterable[Pod],
        policies: Iterable[Mapping[str, Any]],
        nodes: Iterable[Node] = (Node("node-0", "192.168.0.10"),),
    ):
        self.namespaces = {
            name: {**labels, NAME_LABEL: name} for name, labels in namespaces.items()
        }
        self.pods = list(pods)
        self.nodes = {n.name: n for n in nodes}
        self.policies = list(policies)
        for policy in self.policies:
            if policy.get("kind") != "NetworkPolicy":
                raise ValueError(f"not a NetworkPolicy: {policy.get('kind')}")

    def pod(self, namespace: str, name: str) -> Pod:
        """The pod `namespace/name`."""
        for pod in self.pods:
            if (pod.namespace, pod.name) == (namespace, name):
                return pod
        raise KeyError(f"{namespace}/{name}")

    # -- the question tests ask ----------------------------------------------------------

    def allowed(
        self, source: Pod | Node, dest: Pod | External, port: int, protocol: str = "TCP"
    ) -> bool:
        """Whether `source` may open a connection to `dest` on `port`/`protocol`."""
        if isinstance(dest, External):
            if isinstance(source, Node):
                return True  # a node's own traffic is no pod's: no policy selects it
            return self._egress_allows(source, dest, port, protocol)
        if isinstance(source, Pod) and source == dest:
            return True  # a pod cannot block access to itself
        if isinstance(source, Node) and source.name == dest.node:
            return True  # nor from its resident node
        if isinstance(source, Pod) and not self._egress_allows(source, dest, port, protocol):
            return False
        return self._ingress_allows(source, dest, port, protocol)

    # -- isolation and rules -------------------------------------------------------------

    def _selecting(self, pod: Pod, direction: str) -> list[Mapping[str, Any]]:
        """The policies that select `pod` and isolate it in `direction`."""
        if pod.host_network:
            return []
        out = []
        for policy in self.policies:
            meta, spec = policy["metadata"], policy.get("spec") or {}
            if meta.get("namespace") != pod.namespace:
                continue
            if not selects(spec.get("podSelector"), pod.labels):
                continue
            if direction in _policy_types(spec):
                out.append(policy)
        return out

    def _ingress_allows(self, source: Pod | Node, dest: Pod, port: int, protocol: str) -> bool:
        policies = self._selecting(dest, "Ingress")
        if not policies:
            return True  # not isolated for ingress
        for policy in policies:
            namespace = policy["metadata"]["namespace"]
            for rule in policy["spec"].get("ingress") or []:
                if _ports_match(rule.get("ports"), dest, port, protocol) and self._peers_match(
                    rule.get("from"), source, namespace
                ):
                    return True
        return False

    def _egress_allows(self, source: Pod, dest: Pod | External, port: int, protocol: str) -> bool:
        policies = self._selecting(source, "Egress")
        if not policies:
            return True
        for policy in policies:
            namespace = policy["metadata"]["namespace"]
            for rule in policy["spec"].get("egress") or []:
                if _ports_match(rule.get("ports"), dest, port, protocol) and self._peers_match(
                    rule.get("to"), dest, namespace
                ):
                    return True
        return False

    def _peers_match(
        self, peers: list[Mapping[str, Any]] | None, other: Pod | Node | External, namespace: str
    ) -> bool:
        """Whether `other` is one of `peers` for a policy in `namespace` (None/[]: anyone)."""
        if not peers:
            return True
        return any(self._peer_matches(peer, other, namespace) for peer in peers)

    def _peer_matches(
        self, peer: Mapping[str, Any], other: Pod | Node | External, namespace: str
    ) -> bool:
        if "ipBlock" in peer:
            return _in_block(peer["ipBlock"], self._address(other))
        if isinstance(other, (Node, External)) or other.host_network:
            return False  # selectors pick pods on the pod network
        pod_selector = peer.get("podSelector")
        ns_selector = peer.get("namespaceSelector")
        if ns_selector is None:
            return other.namespace == namespace and selects(pod_selector, other.labels)
        if not selects(ns_selector, self.namespaces.get(other.namespace, {})):
            return False
        return pod_selector is None or selects(pod_selector, other.labels)

    def _address(self, other: Pod | Node | External) -> str:
        if isinstance(other, (Node, External)):
            return other.ip
        if other.host_network:
            return self.nodes[other.node].ip
        return other.ip


def _policy_types(spec: Mapping[str, Any]) -> list[str]:
    if spec.get("policyTypes"):
        return list(spec["policyTypes"])
    return ["Ingress", *(["Egress"] if spec.get("egress") else [])]


def _ports_match(
    ports: list[Mapping[str, Any]] | None, dest: Pod | External, port: int, protocol: str
) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        want = entry.get("port")
        if want is None:
            return True  # every port of that protocol
        if isinstance(want, str):
            named = dest.ports.get(want)
            if named and named == (port, protocol):
                return True
            continue
        if want <= port <= entry.get("endPort", want):
            return True
    return False


def _in_block(block: Mapping[str, Any], address: str) -> bool:
    ip = ipaddress.ip_address(address)
    network = ipaddress.ip_network(block["cidr"], strict=False)
    if ip.version != network.version or ip not in network:
        return False
    return not any(ip in ipaddress.ip_network(e, strict=False) for e in block.get("except") or [])
