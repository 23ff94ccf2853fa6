# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""ValidatingAdmissionPolicies that fence the cluster-wide rights root on a node could use.

Root on a GPU node (where the teams' images run) can read the ServiceAccount tokens of the
DaemonSet pods on that node. Three of them hold cluster-wide writes their upstream RBAC
needs, because RBAC cannot name "my own node":
- the EFS CSI node plugin (`efs_csi`: nodes patch, to remove its not-ready taint from its
  own Node) and NVIDIA's MIG manager (`mig_manager.CLUSTER_RULES`: nodes patch, labels of
  its own Node): with a stolen token, any Node's labels and taints (move a team's pods
  onto a node the thief owns, or drain the cluster);
- calico-node (Calico's calico.yaml ClusterRole `calico-node`: nodes/status patch and
  update, pods/status patch): any Node's status and any pod's status.
And a storage provisioner (efs-storage, lib kube_api PROVISIONER_RULES) may create any
PersistentVolume: a hostPath volume is root on whichever node mounts it (RBAC good
practices, "Persistent volume creation").

Upstream's answer is a ValidatingAdmissionPolicy keyed on the node a pod-bound token names
(kubernetes test/e2e/auth/e2edata/per_node_validatingadmissionpolicy.yaml, the per-node
example of KEP-4193 "Bound service account token improvements"): kubelet's projected
token of a pod is bound to that pod, and the API server puts the pod's node into the
token and into the authenticated user's extra `authentication.kubernetes.io/node-name`
(ServiceAccountTokenPodNodeInfo: alpha 1.29, beta 1.30, GA and locked on in 1.32,
kubernetes pkg/features/versioned_kube_features.go; the key is k8s.io/apiserver
pkg/authentication/serviceaccount/util.go NodeNameKey). ValidatingAdmissionPolicy is GA
in admissionregistration.k8s.io/v1 since 1.30, so every Kubernetes this charm deploys
has both.

What is applied (`manifests`), each policy with a binding of the same name
(validationActions [Deny]; failurePolicy Fail: a policy that cannot be evaluated refuses):
- per DaemonSet ServiceAccount (NODE_BOUND), matched by its exact username: a request
  from it must carry the node-name extra, and may change only the Node of that name (its
  status included) and, for calico-node, the status only of pods bound to that node. A
  token of that ServiceAccount that names no node (a TokenRequest not bound to a pod, or
  a legacy Secret token) is refused every such write.
- EFS_ONLY: a PersistentVolume created or updated by any ServiceAccount outside
  kube-system (every kube-api consumer, the provisioners included; kube-system's are the
  cluster's own controllers, such as the PersistentVolume binder that writes claimRef) is
  an EFS volume: through the EFS CSI driver with efs-storage's volumeHandle
  `<fs-id>::<fsap-id>` (charms/efs-storage storage.py volume_source), or plain NFS to an
  EFS file system's DNS name (`<fs-id>.efs.<region>.amazonaws.com[.cn]`, efs_model.py
  dns_name), which efs-storage still writes while the driver is not on every node. A
  PersistentVolume has exactly one source (kubernetes pkg/apis/core/validation
  ValidatePersistentVolumeSpec: "may not specify more than 1 volume type"), so no
  hostPath, local or other driver's volume passes.

The denial is what kube-apiserver answers for a policy (k8s.io/apiserver pkg/admission/
plugin/policy/validating/dispatcher.go, admission.NewForbidden with the validation's
reason): `reason: Forbidden` makes it a 403 `nodes "b" is forbidden: ValidatingAdmission
Policy '<policy>' with binding '<binding>' denied request: <message>`.

Not fenced here (say so when touching it): DELETE of PersistentVolumes (the provisioner
deletes its own; Retain keeps the data), Calico's IPAM objects (blocks may be borrowed
across nodes, so they cannot be keyed on one node), the calico-cni-plugin ServiceAccount
(its token is requested by calico-node for the CNI binary, not bound to a pod, so it names
no node).
"""

from __future__ import annotations

from typing import Any

import efs_csi
import mig_manager
from literals import FIELD_MANAGER, MANAGED_BY_LABEL

API_VERSION = "admissionregistration.k8s.io/v1"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
SA_PREFIX = "system:serviceaccount:"

# calico.yaml at CALICO_RELEASE: the DaemonSet `calico-node` runs as the ServiceAccount
# `calico-node` in kube-system (the manifest's namespace).
CALICO_NODE = ("kube-system", "calico-node")
EFS_CSI_NODE = (efs_csi.NAMESPACE, "efs-csi-node-sa")  # node-serviceaccount.yaml at the tag
MIG_MANAGER = (mig_manager.NAMESPACE, mig_manager.NAME)

_NODES = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"]}
# ServiceAccount -> (short name, resources it may touch only on its own node)
NODE_BOUND: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {
    EFS_CSI_NODE: ("efs-csi-node", ("nodes",)),
    MIG_MANAGER: ("mig-manager", ("nodes",)),
    CALICO_NODE: ("calico-node", ("nodes", "nodes/status", "pods/status")),
}
NODE_BOUND_PREFIX = "gpu-k8s-node-bound-"
EFS_ONLY = "gpu-k8s-efs-volumes-only"

# The EFS identifiers efs-storage writes: fs-<hex> and fsap-<hex> (AWS: 8 or 17 hex
# digits today; the range leaves room) and the file system's DNS name.
_EFS_HANDLE = r"^fs-[0-9a-f]{8,40}::fsap-[0-9a-f]{8,40}$"
# `[.]`, not `\.`: CEL's string literals have no `\.` escape (cel-spec doc/langdef.md,
# "String and Bytes Values"), so kube-apiserver would refuse the policy's compilation.
_EFS_DNS = r"^fs-[0-9a-f]{8,40}[.]efs[.][a-z0-9-]+[.]amazonaws[.]com([.]cn)?$"
_EXTRA = f"request.userInfo.extra['{NODE_NAME_EXTRA}']"


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "labels": {MANAGED_BY_LABEL: FIELD_MANAGER}}


def _binding(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(name),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


def node_bound_policy(account: tuple[str, str]) -> dict[str, Any]:
    """The policy that keeps `account`'s writes on the node its token names."""
    short, resources = NODE_BOUND[account]
    username = f"{SA_PREFIX}{account[0]}:{account[1]}"
    validations = [
        {
            "expression": "variables.nodeName != ''",
            "message": f'this user must have a "{NODE_NAME_EXTRA}" claim',
            "reason": "Forbidden",
        },
        {
            "expression": (
                "!(request.resource.resource == 'nodes') || "
                "object.metadata.name == variables.nodeName"
            ),
            "message": "this user may only modify the node its pod runs on",
            "reason": "Forbidden",
        },
    ]
    if "pods/status" in resources:
        validations.append(
            {
                "expression": (
                    "!(request.resource.resource == 'pods') || "
                    "(has(object.spec.nodeName) && object.spec.nodeName == variables.nodeName)"
                ),
                "message": "this user may only modify pods on the node its pod runs on",
                "reason": "Forbidden",
            }
        )
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(NODE_BOUND_PREFIX + short),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{**_NODES, "resources": list(resources)}]},
            "matchConditions": [
                {
                    "name": "from-the-daemonset",
                    "expression": f"request.userInfo.username == '{username}'",
                }
            ],
            "variables": [
                {
                    "name": "nodeName",
                    "expression": (
                        f"'{NODE_NAME_EXTRA}' in request.userInfo.extra && "
                        f"size({_EXTRA}) > 0 ? {_EXTRA}[0] : ''"
                    ),
                }
            ],
            "validations": validations,
        },
    }


def efs_only_policy() -> dict[str, Any]:
    """The policy that lets ServiceAccounts outside kube-system write only EFS volumes."""
    efs_csi_volume = (
        f"object.spec.csi.driver == '{efs_csi.DRIVER}' && has(object.spec.csi.volumeHandle) "
        f"&& object.spec.csi.volumeHandle.matches('{_EFS_HANDLE}')"
    )
    efs_nfs_volume = f"has(object.spec.nfs) && object.spec.nfs.server.matches('{_EFS_DNS}')"
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(EFS_ONLY),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["persistentvolumes"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "a-service-account-outside-kube-system",
                    "expression": (
                        f"request.userInfo.username.startsWith('{SA_PREFIX}') && "
                        f"!request.userInfo.username.startsWith('{SA_PREFIX}kube-system:')"
                    ),
                }
            ],
            "validations": [
                {
                    "expression": (
                        f"has(object.spec.csi) ? ({efs_csi_volume}) : ({efs_nfs_volume})"
                    ),
                    "message": (
                        f"a PersistentVolume must be an EFS access point through {efs_csi.DRIVER}"
                        " (volumeHandle <fs-id>::<fsap-id>) or NFS to an EFS file system's DNS"
                        " name"
                    ),
                    "reason": "Forbidden",
                }
            ],
        },
    }


def manifests() -> list[dict[str, Any]]:
    """Every policy and its binding, policies first (a binding names its policy)."""
    policies = [*(node_bound_policy(a) for a in NODE_BOUND), efs_only_policy()]
    return [*policies, *(_binding(p["metadata"]["name"]) for p in policies)]
