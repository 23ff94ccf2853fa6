# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The NetworkPolicy every kube-api consumer's namespace gets: default-deny ingress (no ops).

A team's pods accept no connection from any other pod, in its namespace or another,
until a policy of the team's own allows it (the tensorflow charm allows a job's pods to
reach each other on the TensorFlow port, and TensorBoard and serving from the team's
namespace). kubernetes.io/docs/concepts/services-networking/network-policies/, "Default
deny all ingress traffic": an empty podSelector with policyTypes [Ingress] and no rules
isolates every pod of the namespace for ingress; policies are additive, so a team's own
allow policies open exactly what they name. Egress is open but for EC2's instance
metadata service (`deny_instance_metadata`), which would hand any pod the node's IAM role
credentials, and the DCGM exporter's port (TCP 9400), whose page names every GPU
workload of its node: pods reach kube-dns, the API server and the outside (the dataset
importer's S3 and https) as before. Only the control plane writes a consumer's egress
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

from collections.abc import Iterable

from literals import FIELD_MANAGER, MANAGED_BY_LABEL

from charms.gpu_k8s.v0.cos_agent import DCGM_EXPORTER_PORT

NAME = "gpu-k8s-default-deny-ingress"
METADATA_NAME = "gpu-k8s-deny-instance-metadata"
# EC2's instance metadata service, IPv4 and IPv6 (EC2 user guide, "Access instance metadata
# for an EC2 instance": http://169.254.169.254 and, on Nitro instances, [fd00:ec2::254]):
# it hands out the node's IAM role credentials to whoever reaches it.
METADATA_ADDRESSES = ("169.254.169.254/32", "fd00:ec2::254/128")
# What a consumer's pods may send: TCP to every port but the DCGM exporter's, UDP and SCTP
# to every port (networking/v1 NetworkPolicyPort: "If this field [port] is not provided,
# this matches all port names and numbers"; `endPort` the range port..endPort inclusive,
# stable since Kubernetes 1.25: network-policies page, "Targeting a range of ports").
# The exporter runs with the host's network on every GPU node (dcgm_exporter.py), where
# no NetworkPolicy selects it ("NetworkPolicy and hostNetwork pods"), and listens on
# all of the node's addresses, its Calico tunnel address included: so the port is refused
# to every destination rather than to a list of node addresses that changes. Its readers
# are no pods: the COS agent on the node (localhost) and the tensorflow charm's job-status
# from its unit's machine. Other protocols (ICMP) leave a consumer's pods no more: a rule
# with `ports` matches those protocols only.
EGRESS_PORTS = (
    {"protocol": "TCP", "port": 1, "endPort": DCGM_EXPORTER_PORT - 1},
    {"protocol": "TCP", "port": DCGM_EXPORTER_PORT + 1, "endPort": 65535},
    {"protocol": "UDP"},
    {"protocol": "SCTP"},
)
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


def deny_instance_metadata(namespace: str) -> dict:
    """The policy that lets `namespace`'s pods reach every address but the metadata service.

    And on EGRESS_PORTS only: never the DCGM exporter's port.

    An egress rule whose `to` is an `ipBlock` of the whole address space `except` the
    metadata addresses (network-policies page, "The NetworkPolicy resource": ipBlock with
    except; policies are additive, so a team's own egress policy could open it again for
    its own pods only). Calico matches ipBlock against pod and node addresses too (its
    NetworkPolicy `ipBlock` becomes a Calico `nets` match on any address: tigera/docs
    calico/reference/resources/networkpolicy.mdx, EntityRule `nets`), so DNS, other pods
    and the API server stay reachable. Traffic is policed after kube-proxy's DNAT, so a
    Service address is seen as its pod's.
    """
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
                {
                    "to": [
                        {"ipBlock": {"cidr": "0.0.0.0/0", "except": [METADATA_ADDRESSES[0]]}},
                        {"ipBlock": {"cidr": "::/0", "except": [METADATA_ADDRESSES[1]]}},
                    ],
                    "ports": [dict(p) for p in EGRESS_PORTS],
                }
            ],
        },
    }


def enforced(cni: str) -> bool:
    """Whether the CNI applied enforces NetworkPolicy: Calico does, flannel does not.

    `cni`: what the peer data says was applied (`calico v3.32.1 <pod-cidr>`, `flannel
    v0.27.4 <pod-cidr>`). Calico enforces Kubernetes NetworkPolicy on each node (its
    Felix agent in calico-node; the manifest's CNI config has `"policy": {"type": "k8s"}`;
    tigera/docs calico/network-policy/get-started/kubernetes-policy/
    kubernetes-network-policy.mdx). Nothing applied yet counts as not enforced.
    """
    return cni.startswith("calico ")


def manifests(namespaces: Iterable[str]) -> list[dict]:
    """The policies of every consumer namespace, in name order."""
    return [
        policy(ns)
        for ns in sorted(set(namespaces))
        for policy in (default_deny_ingress, deny_instance_metadata)
    ]
