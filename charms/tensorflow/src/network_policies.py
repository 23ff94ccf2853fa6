# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What may reach a team's training, TensorBoard and serving pods (NetworkPolicy; no ops).

The control plane isolates every pod of a team's namespace for ingress (its default-deny
policy, `gpu-k8s-default-deny-ingress`); these policies, applied with each job and each
served model, open exactly what the charm's own workloads need. NetworkPolicies are
additive and select pods of their own namespace only (kubernetes.io/docs/concepts/
services-networking/network-policies/, "The two sorts of pod isolation", "Behavior of to
and from selectors"), so:

- `<job>-training`: a job's training pods (every role: chief, worker, ps) accept the
  TensorFlow port only from the pods of the same job. TensorFlow's server runs whatever
  graph it is sent (tensorflow/tensorflow SECURITY.md, "Running a TensorFlow server"), so
  nothing else, not even the team's own TensorBoard or another of its jobs, reaches it.
- `<job>-tensorboard`: TensorBoard's port from any pod of the team's namespace.
- `<app>-training-metrics`: the launcher's metrics port (METRICS_PORT) of every training
  pod of the application from the node the charm's leader runs on, whose COS agent scrapes
  the pods (job_metrics.py), and from nothing else: the same /32 ipBlocks as below, of
  that node only.
- `<job>-serving`: TF Serving's gRPC and REST ports from any pod of the team's namespace,
  and the REST port from the control-plane nodes, whose API servers proxy the `serve`
  action's requests (serving.py; the services/proxy subresource dials the pod from the
  API server's host). A host's traffic to a pod on another node arrives from the host's
  address or, through Calico's VXLAN overlay, from its tunnel address, which calico-node
  records on the Node as the annotation below; both are allowed as /32 ipBlocks.

What reaches these pods besides (same page, "What you can't do with network policies"):
their own node, which kubelet's probes and `kubectl port-forward` come from (kubelet
forwards inside the pod's network namespace), so the docs' port-forward commands keep
working for operators.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from literals import (
    LABEL_COMPONENT,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    METRICS_PORT,
    TENSORBOARD_PORT,
    TF_PORT,
)

API_VERSION = "networking.k8s.io/v1"
# kubeadm labels each control-plane node with this (kubernetes.io/docs/reference/labels-
# annotations-taints/#node-role-kubernetes-io-control-plane).
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# The tunnel addresses calico-node writes on each Node (VXLAN, IP-in-IP, WireGuard), as
# `kubectl describe node` shows them on Calico clusters; hosts send from them to remote pods.
CALICO_TUNNEL_ANNOTATIONS = (
    "projectcalico.org/IPv4VXLANTunnelAddr",
    "projectcalico.org/IPv4IPIPTunnelAddr",
    "projectcalico.org/IPv4WireguardInterfaceAddr",
)


def _policy(
    name: str, namespace: str, labels: Mapping[str, str], pods: Mapping[str, str], ingress: list
) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "podSelector": {"matchLabels": dict(pods)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def training(app: str, job: str, namespace: str, component: str) -> dict:
    """`<job>-training`: the job's pods reach each other on TF_PORT, nothing else does."""
    pods = {LABEL_MANAGED_BY: app, LABEL_JOB: job, LABEL_COMPONENT: component}
    peers = [{"podSelector": {"matchLabels": dict(pods)}}]
    own = {LABEL_MANAGED_BY: app, LABEL_JOB: job}
    return _policy(
        f"{job}-training", namespace, own, pods, [{"from": peers, "ports": _tcp(TF_PORT)}]
    )


def tensorboard(app: str, job: str, namespace: str, pods: Mapping[str, str]) -> dict:
    """`<job>-tensorboard`: TensorBoard from the team's own namespace."""
    rule = {"from": [{"podSelector": {}}], "ports": _tcp(TENSORBOARD_PORT)}
    own = {LABEL_MANAGED_BY: app, LABEL_JOB: job}
    return _policy(f"{job}-tensorboard", namespace, own, pods, [rule])


def serving(
    name: str,
    namespace: str,
    pods: Mapping[str, str],
    ports: tuple[int, int],
    api_servers: Iterable[str],
) -> dict:
    """`<name>`: gRPC and REST from the namespace, REST from the API servers' hosts."""
    grpc, rest = ports
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": {}}], "ports": _tcp(grpc, rest)}]
    blocks = [{"ipBlock": {"cidr": f"{a}/32"}} for a in sorted(set(api_servers))]
    if blocks:
        ingress.append({"from": blocks, "ports": _tcp(rest)})
    return _policy(name, namespace, pods, pods, ingress)


def metrics(app: str, namespace: str, component: str, scrapers: Iterable[str]) -> dict:
    """`<app>-training-metrics`: METRICS_PORT of the app's training pods from `scrapers` only.

    With no scraper address the policy allows nothing (an empty `from` would allow all).
    """
    pods = {LABEL_MANAGED_BY: app, LABEL_COMPONENT: component}
    blocks = [{"ipBlock": {"cidr": f"{a}/32"}} for a in sorted(set(scrapers))]
    ingress = [{"from": blocks, "ports": _tcp(METRICS_PORT)}] if blocks else []
    return _policy(f"{app}-training-metrics", namespace, {LABEL_MANAGED_BY: app}, pods, ingress)


def _addresses(node: Mapping[str, Any]) -> set[str]:
    """A node's IPv4 InternalIPs and Calico tunnel addresses (what it reaches pods from)."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    candidates = [annotations.get(a, "") for a in CALICO_TUNNEL_ANNOTATIONS]
    candidates += [
        a.get("address", "")
        for a in (node.get("status") or {}).get("addresses") or []
        if a.get("type") == "InternalIP"
    ]
    found: set[str] = set()
    for candidate in candidates:
        address = candidate.split("/")[0]
        try:
            if ipaddress.ip_address(address).version == 4:
                found.add(address)
        except ValueError:
            continue
    return found


def api_server_addresses(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The IPv4 addresses the control-plane nodes reach pods from (InternalIP, tunnels)."""
    found: set[str] = set()
    for node in nodes:
        if CONTROL_PLANE_LABEL in ((node.get("metadata") or {}).get("labels") or {}):
            found |= _addresses(node)
    return sorted(found)


def own_node_addresses(nodes: Iterable[Mapping[str, Any]], own: Iterable[str]) -> list[str]:
    """The addresses the node this unit runs on reaches pods from; [] if it is no node.

    The unit's machine is the Node with one of `own` (the unit's addresses) as InternalIP.
    """
    mine = set(own)
    found: set[str] = set()
    for node in nodes:
        internal = {
            a.get("address", "")
            for a in (node.get("status") or {}).get("addresses") or []
            if a.get("type") == "InternalIP"
        }
        if internal & mine:
            found |= _addresses(node)
    return sorted(found)
