# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""NetworkPolicies of each kube-api consumer's namespace: ingress denied, egress listed (no ops).

A team's pods accept no connection from any other pod, in its namespace or another,
until a policy of the team's own allows it (the tensorflow charm allows a job's pods to
reach each other on the TensorFlow port, and TensorBoard and serving from the team's
namespace). kubernetes.io/docs/concepts/services-networking/network-policies/, "Default
deny all ingress traffic": an empty podSelector with policyTypes [Ingress] and no rules
isolates every pod of the namespace for ingress; policies are additive, so a team's own
allow policies open exactly what they name. Egress is an allow-list
(`deny_instance_metadata`): other pods, the internet, and of the private address space
only the API servers' port on their own addresses (and what `team-egress` names); a
node's own listeners (the COS collector, node-exporter, the DCGM exporter, sshd,
kubelet), EC2's instance metadata service and every other private address stay out of
reach. No pod needs a node's port but the API server's:
DNS is CoreDNS's pods, and the scrapers are hosts (each machine's COS collector reads
its own node on localhost; the tensorflow unit's machine reads its jobs' pods and
nodes), whose traffic no policy selects. Only the control plane writes a consumer's egress
(admission_policies.CONSUMER_EGRESS: a consumer's own policies isolate ingress only and it
may not change or delete this one), so a team cannot open them again.

What still reaches a team's pods (the same page): their own node (kubelet's probes,
`kubectl port-forward`, which kubelet serves inside the pod's network namespace), and
hostNetwork pods (the DCGM exporter and kube-state-metrics run with hostNetwork in their
own namespaces; no policy here selects them and none selects what they scrape, which is
the nodes' GPUs and the API server, not team pods).

A team may change or delete the ingress policy in its own namespace (kube-api grants any
rule there but RBAC's): that opens only its own pods, never another team's, since a
NetworkPolicy selects pods of its own namespace only. The egress policy is the control
plane's alone (see above). The control plane applies them again when the grants change,
not on every hook.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from literals import API_PORT, FIELD_MANAGER, MANAGED_BY_LABEL

NAME = "gpu-k8s-default-deny-ingress"
# The egress allow-list's name, kept from the revision that denied the metadata service
# only: policies are additive, so a renamed one would leave the old one in place and its
# rules open.
METADATA_NAME = "gpu-k8s-deny-instance-metadata"
# Every port of each protocol a pod may send (networking/v1 NetworkPolicyPort: "If this
# field [port] is not provided, this matches all port names and numbers"). Other
# protocols (ICMP) leave a consumer's pods no more: a rule with `ports` matches those
# protocols only.
ANY_PORT = ({"protocol": "TCP"}, {"protocol": "UDP"}, {"protocol": "SCTP"})
# The private IPv4 space a VPC and its machines use: RFC 1918's three blocks and RFC
# 6598's 100.64.0.0/10 (the Amazon VPC user guide, "VPC CIDR blocks", allows both for a
# VPC), and RFC 3927's link-local 169.254.0.0/16, where EC2 serves the instance metadata
# (169.254.169.254: it hands out the node's IAM role credentials; EC2 user guide, "Access
# instance metadata for an EC2 instance"), its DNS resolver and time service.
PRIVATE_V4 = ("10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16")
# IPv6's unique local (RFC 4193: EC2's metadata on Nitro instances, [fd00:ec2::254], is
# one) and link-local addresses. The cluster's pods have IPv4 only (calico.py: no IPv6
# pool), so this rule is belt and braces.
PRIVATE_V6 = ("fc00::/7", "fe80::/10")
# Where the API servers listen: every control-plane node's address, kubeadm's
# advertiseAddress, on API_PORT; pods reach them through the `kubernetes` Service, whose
# endpoints are those addresses (a policy sees the address after kube-proxy's DNAT). The
# leader names each joined unit's (peers.api_servers, what each publishes once joined):
# a joining API server enters the Service's endpoints as it starts (kube-apiserver's lease
# endpoint reconciler), so until the leader's next hook (the joiner's peer-relation-changed)
# a team pod's connection sent to it is dropped; kube-proxy sends the others to the rest.
# `team-egress`: what the operator opens to every team's pods beyond the allow-list, a
# private service in the VPC (an S3-compatible store such as MinIO or Ceph RGW, an S3
# interface endpoint, an air-gapped site's mirror or proxy). Each entry is an IPv4 network
# (a team's pods have IPv4 addresses only: calico.py makes no IPv6 pool) with an optional
# TCP port or range (networking/v1 NetworkPolicyPort `endPort`); without a port, every
# port of every protocol.
EGRESS_FORM = "<ipv4-network>[:<port>[-<port>]]"
_EGRESS_ENTRY = re.compile(r"^([0-9./]+)(?::([0-9]{1,5})(?:-([0-9]{1,5}))?)?$")
# An operator's list stays short; each entry is one rule in every team's policy.
MAX_EGRESS = 32
# What no entry may overlap: the blocks the fence is for, or that no service lives in.
# 169.254.0.0/16 is where EC2 serves the instance metadata (169.254.169.254: the node's
# IAM role credentials), its DNS resolver (169.254.169.253) and time service
# (169.254.169.123) (EC2 user guide, "Access instance metadata for an EC2 instance";
# RFC 3927 link-local); a wider entry (0.0.0.0/0, 169.0.0.0/8) would open them too. The
# rest are RFC 6890's "this network", loopback (the pod's own), multicast and reserved
# blocks. The pod CIDR is refused as well (Config: it holds the nodes' Calico tunnel
# addresses, which ipBlock matches). The nodes' own addresses cannot be known here (a
# worker joins later, on any subnet): an entry that spans them opens their listeners on
# its ports, which the docs leave to the operator (name the service's address, /32).
REFUSED_EGRESS = (
    ("169.254.0.0/16", "link-local: EC2's instance metadata, DNS and time service"),
    ("0.0.0.0/8", "this network"),
    ("127.0.0.0/8", "loopback"),
    ("224.0.0.0/3", "multicast and reserved"),
)


@dataclass(frozen=True)
class Egress:
    """One `team-egress` entry: a network and a TCP port range (None: every port)."""

    cidr: str
    port: int | None = None
    end_port: int | None = None

    def rule(self) -> dict:
        """The egress rule that opens it (networking/v1 NetworkPolicyEgressRule)."""
        if self.port is None:
            ports = [dict(p) for p in ANY_PORT]
        else:
            ports = [{"protocol": "TCP", "port": self.port}]
            if self.end_port is not None:
                ports[0]["endPort"] = self.end_port
        return {"to": [{"ipBlock": {"cidr": self.cidr}}], "ports": ports}


def parse_egress(text: str, pod_cidr: str = "") -> tuple[Egress, ...]:
    """`team-egress` as entries, or ValueError naming the first bad entry and why.

    Entries are separated by spaces or commas (EGRESS_FORM); REFUSED_EGRESS and the pod
    CIDR `pod_cidr` may not overlap any.
    """
    entries = [e for e in re.split(r"[\s,]+", text.strip()) if e]
    if len(entries) > MAX_EGRESS:
        raise ValueError(f"{len(entries)} entries: at most {MAX_EGRESS}")
    parsed = [_egress(entry, pod_cidr) for entry in entries]
    return tuple(dict.fromkeys(parsed))


def _egress(entry: str, pod_cidr: str) -> Egress:
    match = _EGRESS_ENTRY.match(entry)
    try:
        if not match:
            raise ValueError
        network = ipaddress.IPv4Network(match[1], strict=True)
    except ValueError:
        raise ValueError(f"{entry!r} is not {EGRESS_FORM}, e.g. 10.0.5.20/32:9000") from None
    refused = [*REFUSED_EGRESS, *([(pod_cidr, "the pod network")] if pod_cidr else [])]
    for block, why in refused:
        if network.overlaps(ipaddress.ip_network(block, strict=False)):
            raise ValueError(f"{entry!r} overlaps {block} ({why}), which teams may not reach")
    port = int(match[2]) if match[2] else None
    end = int(match[3]) if match[3] else None
    if port is not None and not (1 <= port <= 65535 and (end is None or port <= end <= 65535)):
        raise ValueError(f"{entry!r}: ports are 1-65535, a range low-high")
    return Egress(str(network), port, end)


# flannel enforces no NetworkPolicy ("Flannel is focused on networking. For network policy,
# other projects such as Calico can be used", flannel-io/flannel README): while it is the
# cluster's CNI the policies are stored and do nothing, and the status says so.
NOT_ENFORCED = "teams not isolated on the network: flannel enforces no NetworkPolicy"
API_VERSION = "networking.k8s.io/v1"


def default_deny_ingress(namespace: str) -> dict:
    """The policy that isolates every pod of `namespace` for ingress."""
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: FIELD_MANAGER},
        },
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }


def api_blocks(api_servers: Iterable[str]) -> list[str]:
    """The one-address networks of the API servers `host:port` ("[v6]:port" too), sorted.

    A host that is no IP address (Juju's ingress addresses are) is left out, never widened.
    """
    blocks = set()
    for server in api_servers:
        host = server.rsplit(":", 1)[0].strip("[]")
        try:
            blocks.add(str(ipaddress.ip_network(host)))
        except ValueError:
            continue
    return sorted(blocks)


def deny_instance_metadata(
    namespace: str,
    pod_cidr: str = "",
    extra: Sequence[Egress] = (),
    api_servers: Sequence[str] = (),
) -> dict:
    """The egress allow-list of `namespace`'s pods: pods, the internet, the API servers.

    Three rules, and one per `extra` entry (`team-egress`, parse_egress), whose union is
    what a pod may open (network-policies page, "The NetworkPolicy resource": policies
    and rules are additive):
    - every pod on the pod network, in any namespace, on any port (a `namespaceSelector`
      that selects all namespaces; whether the peer lets it in is its ingress's matter):
      kube-dns, a job's other pods, serving. Calico matches selectors against workload
      endpoints only, and a hostNetwork pod is none ("NetworkPolicy and hostNetwork
      pods"), so no node is among them. It matches namespaced NetworkSets too: Calico
      turns this peer into the selector `projectcalico.org/orchestrator == 'k8s'` in
      namespaces `all()` (projectcalico/calico v3.32.1, libcalico-go/lib/backend/k8s/
      conversion/conversion.go k8sSelectorToCalico), and Felix indexes NetworkSets'
      labels for rule selectors (felix/labelindex/named_port_index.go), so a NetworkSet
      labelled so would open its `nets` to every team. None can exist in a team's
      namespace (kube-api refuses Calico's groups, team_quota holds 0 networksets,
      tenant_sweep deletes old ones), and outside them only the cluster admin writes one:
      calico.yaml's ClusterRoles give calico-node and calico-kube-controllers get/list/
      watch on networksets and calico-cni-plugin nothing of them;
    - every address outside the private space (PRIVATE_V4, PRIVATE_V6) and the pod CIDR,
      on any port: S3, https, a dataset's source;
    - the API servers' own addresses (api_blocks of `api_servers`) on TCP API_PORT only,
      no rule while none is known (a rule without `to` would match every address);
    - each network the operator named, on its ports (Egress.rule).
    Every node's own listeners are thereby out of reach on every other port, however a
    collector's ports are configured: the COS collector (canonical/opentelemetry-collector-
    operator src/config_builder.py `Port`, 9f17dec on track/2: OTLP 4317/4318, its
    metrics 8888, health 13133, Loki push 3500, Zipkin 9411, Jaeger 14250/14268, all on
    0.0.0.0, and the node-exporter snap it runs on :9100), the DCGM exporter (9400),
    kubelet, sshd; also through a node's Calico tunnel address, which lies in the pod CIDR
    but is no workload endpoint. The pod's own node too: the network-policies page calls
    traffic to a pod's node always allowed, but Calico applies the pod's egress policy to
    it first and its DefaultEndpointToHostAction (calico.yaml: ACCEPT) only after
    (projectcalico/calico api/pkg/apis/projectcalico/v3/felixconfig.go at 61cf1d1).
    Calico matches `ipBlock` against any address, pods' and nodes' too (tigera/docs
    calico/reference/resources/networkpolicy.mdx, EntityRule `nets`), hence the pod CIDR
    among the excepted blocks when it lies outside the private space. Traffic is policed
    after kube-proxy's DNAT, so a Service address is seen as its endpoint's.
    """
    excepted: list[str] = list(PRIVATE_V4)
    if pod_cidr and not _private(pod_cidr):
        excepted.append(pod_cidr)
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": {
            "name": METADATA_NAME,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: FIELD_MANAGER},
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [{"namespaceSelector": {}}], "ports": [dict(p) for p in ANY_PORT]},
                {
                    "to": [
                        {"ipBlock": {"cidr": "0.0.0.0/0", "except": excepted}},
                        {"ipBlock": {"cidr": "::/0", "except": list(PRIVATE_V6)}},
                    ],
                    "ports": [dict(p) for p in ANY_PORT],
                },
                *_api_rules(api_servers),
                *(e.rule() for e in extra),
            ],
        },
    }


def _api_rules(api_servers: Sequence[str]) -> list[dict]:
    """The rule that opens the API servers' port on their addresses; none while none known."""
    api = [{"ipBlock": {"cidr": c}} for c in api_blocks(api_servers)]
    return [{"to": api, "ports": [{"protocol": "TCP", "port": API_PORT}]}] if api else []


def _private(cidr: str) -> bool:
    """Whether the IPv4 network `cidr` lies inside one of PRIVATE_V4's blocks."""
    network = ipaddress.ip_network(cidr, strict=False)
    return any(
        network.version == 4 and network.subnet_of(ipaddress.IPv4Network(block))
        for block in PRIVATE_V4
    )


def enforced(cni: str) -> bool:
    """Whether the CNI applied enforces NetworkPolicy: Calico does, flannel does not.

    `cni`: what the peer data says was applied (`calico v3.32.1 <pod-cidr>`, `flannel
    v0.27.4 <pod-cidr>`). Calico enforces Kubernetes NetworkPolicy on each node (its
    Felix agent in calico-node; the manifest's CNI config has `"policy": {"type": "k8s"}`;
    tigera/docs calico/network-policy/get-started/kubernetes-policy/
    kubernetes-network-policy.mdx). Nothing applied yet counts as not enforced.
    """
    return cni.startswith("calico ")


def manifests(
    namespaces: Iterable[str],
    pod_cidr: str = "",
    extra: Sequence[Egress] = (),
    api_servers: Sequence[str] = (),
) -> list[dict]:
    """The policies of every consumer namespace, in name order.

    `pod_cidr`: the cluster's pod network as the CNI was applied with ("" before);
    `extra`: the operator's `team-egress` entries; `api_servers`: the control plane's
    API servers (host:port).
    """
    return [
        item
        for ns in sorted(set(namespaces))
        for item in (
            default_deny_ingress(ns),
            deny_instance_metadata(ns, pod_cidr, extra, api_servers),
        )
    ]
