# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Constants of the efs-storage charm."""

from typing import Any

KUBE_API = "kube-api"
SHARED_STORAGE = "shared-storage"
PEERS = "peers"
# The peer application data key of who holds which path (JSON consumer -> path).
HOLDINGS_KEY = "directory-holders"
FIELD_MANAGER = "efs-storage"  # also the value of the managed-by label (claims.py)

# AWS's recommended NFS client options for EFS.
MOUNT_OPTIONS = (
    "nfsvers=4.1",
    "rsize=1048576",
    "wsize=1048576",
    "hard",
    "timeo=600",
    "retrans=2",
    "noresvport",
)

# The EFS CSI driver (kubernetes-sigs/aws-efs-csi-driver, deploy/kubernetes/base/
# csidriver.yaml: CSIDriver `efs.csi.aws.com`). Static provisioning of an access point:
# `csi.driver` and `volumeHandle: <fs-id>::<fsap-id>` (the driver's pkg/driver/node.go
# parseVolumeId, "OLD FORMAT ... {fileSystemID}:{mountPath}:{accessPointID}", still read
# by v3.4.1 beside the newer `efs:` prefix), mount option `tls` (node.go adds `tls` with an
# access point anyway; examples/kubernetes/efs/access_points).
CSI_DRIVER = "efs.csi.aws.com"
CSI_MOUNT_OPTIONS = ("tls",)
# kubelet records each CSI driver registered on its node in this Node annotation, a JSON
# map of driver name to node id (kubernetes pkg/volume/csi/nodeinfomanager/
# nodeinfomanager.go, annotationKeyNodeID): the driver's node plugin runs there.
CSI_NODE_ANNOTATION = "csi.volume.kubernetes.io/nodeid"

# What this charm asks the control plane for on kube-api (see storage.py for why). In its
# own namespace: the Jobs that make consumers' directories (directories.py) and their pods,
# read for a failed Job's reason.
NAMESPACED_RULES: list[Any] = [
    {
        "api-groups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["get", "create", "patch", "delete"],
    },
    {"api-groups": [""], "resources": ["pods"], "verbs": ["list"]},
]
CLUSTER_RULES: list[Any] = [
    {"api-groups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
    # a consumer's namespace, read for the label that says whose it is (storage.py)
    {"api-groups": [""], "resources": ["namespaces"], "verbs": ["get"]},
    {
        "api-groups": [""],
        "resources": ["persistentvolumes"],
        "verbs": ["get", "list", "create", "patch", "delete"],
    },
    {
        "api-groups": [""],
        "resources": ["persistentvolumeclaims"],
        "verbs": ["get", "list", "create", "patch", "delete"],
    },
    # No pods: the control plane grants listing them (storage.py pods_using) in the
    # namespace of each consumer it admits (lib kube_api PROVISIONER_RULES), nowhere else.
]
