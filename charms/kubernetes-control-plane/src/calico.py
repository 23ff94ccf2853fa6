# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Calico, the CNI of new clusters, from its pinned upstream manifest (no ops).

Why Calico: flannel enforces no NetworkPolicy, and the team namespaces' policies
(network_policies.py, the tensorflow charm's) mean nothing without a CNI that does.
Calico enforces them, runs on kubeadm clusters from one manifest and offers a VXLAN
overlay that AWS passes as it is (below).

Why the manifest and not the Tigera operator: the leader downloads one file over https,
checks its sha256 (batch_engines.download/verify: the one `calico-sha256` pins, or the one
first applied from that URL) and applies exactly those objects, as for JobSet and Kueue.
With the operator, what runs is generated later by a controller with cluster-wide write
rights, from an Installation resource, and upgraded on the operator's schedule: nothing the
charm verified. Calico's docs recommend the operator for new clusters and keep the
manifests "for clusters that require highly specific modifications" (tigera/docs
calico/getting-started/kubernetes/self-managed-onprem/onpremises.mdx); the price here is
that the charm, not an operator, applies Calico's upgrades (a new pin). `calico.yaml` is
the manifest for "Kubernetes API datastore, 50 nodes or less" (no Typha); the same page
gives `calico-typha.yaml` for more nodes, which this charm does not apply yet: above
MANIFEST_NODES nodes the control plane's status says so (`scale_note`). Not Typha yet,
because that manifest "leaves scaling up to you and, by default, it does not secure
Typha's port" (the same page): Typha would serve every node's Felix its view of the
datastore (every pod, endpoint and policy) on a host port with no client check, its
replicas would have to follow the node count, and moving a running cluster's calico-node
onto it restarts every node's agent; Typha with mutual TLS ("Secure Calico component
communications") is the way on, untested here.

What is changed in the upstream objects (`transform`), and nothing else:
- VXLAN for all pod traffic between nodes, IP-in-IP off: the calico-node DaemonSet's
  CALICO_IPV4POOL_VXLAN=Always and CALICO_IPV4POOL_IPIP=Never, and `calico_backend: vxlan`
  with the BIRD liveness/readiness checks removed, as "Configure overlay networking" says
  for VXLAN-only pools, which need no BGP (tigera/docs calico/networking/configuring/
  vxlan-ipip.mdx). Why Always and not CrossSubnet: within one subnet CrossSubnet sends pod
  addresses unencapsulated, and AWS drops those unless each instance's source/destination
  check is disabled ("Since Calico assigns IP addresses outside the range used by AWS for
  EC2 instances, you must disable AWS src/dst checks", docs.tigera.io/calico/latest/
  reference/public-cloud/AWS); with Always every packet between nodes carries the nodes'
  own addresses, in UDP port 4789, which Juju's model security group passes between the
  model's machines (juju/juju internal/provider/ec2/environ.go setUpGroups: tcp, udp
  0-65535 and icmp from the group itself, ensureGroup/newPermSetForGroup). IP-in-IP
  (IP protocol 4) is not among those rules.
- The IPv4 pool is the cluster's pod CIDR (CALICO_IPV4POOL_CIDR = `pod-cidr`, kubeadm's
  podSubnet, bootstrap.py), set explicitly rather than left to Calico's detection.
- The MTU stays upstream's `veth_mtu: "0"`: Calico detects it from the node's interface
  less the encapsulation, which for IPv4 VXLAN is "physical network MTU size minus 50":
  8951 on AWS's jumbo-frame interfaces (9001) and 1450 on 1500-byte ones (tigera/docs
  calico/networking/configuring/mtu.mdx, "Common MTU sizes"). A fixed 8951 would be
  wrong on an instance type whose interface is 1500.
- Images move below `image-registry`, and the kube-controllers Deployment tolerates the
  control-plane taint and runs on control-plane nodes only (batch_engines.customise and
  CONTROL_PLANE_SELECTOR, shared with the batch engines).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from batch_engines import AddonError
from literals import CALICO, CALICO_RELEASE

CONFIG_MAP = "calico-config"
DAEMONSET = "calico-node"
BACKEND = "vxlan"
# The calico-node container's settings of the default IPv4 pool (and no IPv6 VXLAN: the
# cluster is IPv4), as "Configure overlay networking" names them for manifest installs.
POOL_ENV = {
    "CALICO_IPV4POOL_IPIP": "Never",
    "CALICO_IPV4POOL_VXLAN": "Always",
    "CALICO_IPV6POOL_VXLAN": "Never",
}
CIDR_ENV = "CALICO_IPV4POOL_CIDR"
# The most nodes calico.yaml is for: "Install Calico with Kubernetes API datastore, 50
# nodes or less"; more take calico-typha.yaml ("Install Calico networking and network
# policy for on-premises deployments", tigera/docs calico/getting-started/kubernetes/
# self-managed-onprem/onpremises.mdx at 02b80e8, the Manifest tab).
MANIFEST_NODES = 50
_BIRD_CHECKS = ("-bird-live", "-bird-ready")


def fingerprint(pod_cidr: str) -> str:
    """What the peer data records once Calico is applied (its first word names the CNI)."""
    return f"{CALICO} {CALICO_RELEASE.version} {pod_cidr}"


def scale_note(nodes: int) -> str | None:
    """The status note of a Calico cluster of `nodes` nodes, None within calico.yaml's size."""
    if nodes <= MANIFEST_NODES:
        return None
    return f"{nodes} nodes: calico.yaml is for {MANIFEST_NODES} or less (no Typha yet)"


def transform(pod_cidr: str) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """The change of the release's objects for `pod_cidr` (see the module docstring)."""

    def apply(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        config = _one(objects, "ConfigMap", CONFIG_MAP)
        data = config.get("data") or {}
        if "calico_backend" not in data:
            raise AddonError(f"calico ConfigMap {CONFIG_MAP} has no calico_backend")
        data["calico_backend"] = BACKEND
        node = _one(objects, "DaemonSet", DAEMONSET)
        containers = node["spec"]["template"]["spec"].get("containers") or []
        container = next((c for c in containers if c.get("name") == DAEMONSET), None)
        if container is None:
            raise AddonError(f"calico DaemonSet {DAEMONSET} has no {DAEMONSET} container")
        _set_env(container, {**POOL_ENV, CIDR_ENV: pod_cidr})
        for probe in ("livenessProbe", "readinessProbe"):
            command = ((container.get(probe) or {}).get("exec") or {}).get("command")
            if command:
                command[:] = [arg for arg in command if arg not in _BIRD_CHECKS]
        return objects

    return apply


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AddonError(f"calico manifest has no {kind} {name}: is it the release's calico.yaml?")


def _set_env(container: dict[str, Any], values: dict[str, str]) -> None:
    """Set each variable in place (keeping upstream's order), appending the ones it lacks."""
    env = container.setdefault("env", [])
    left = dict(values)
    for var in env:
        if var.get("name") in left:
            var.pop("valueFrom", None)
            var["value"] = left.pop(var["name"])
    env.extend({"name": name, "value": value} for name, value in left.items())
