# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The EFS CSI driver's node plugin, from its pinned upstream files (no ops).

efs-storage serves each consumer through an EFS access point, mounted with TLS, once the
driver `efs.csi.aws.com` runs on every node (charms/efs-storage/src/access_points.py).
This module makes what the leader applies for that, from kubernetes-sigs/
aws-efs-csi-driver at tag v3.4.1 (commit 3fcc6bdd7533a4cfd15643b31593f7ff154584c9, tagged
2026-07-23, the newest release tag in the snapshot read 2026-11-27).

Upstream publishes no single manifest: its install guide (docs/install.md) runs
`kubectl apply -k .../deploy/kubernetes/overlays/stable/?ref=<tag>`, a kustomization
whose base (deploy/kubernetes/base, Helm-rendered files) sets `namespace: kube-system`
and whose overlay sets the image tags. The leader downloads the base files it needs, each
from its raw URL at the tag's commit (content that never changes, so each has its sha256
pinned here, read from the tag's blob: anything else is refused, nothing applied), and
does what kustomize does to them: the namespace on namespaced objects and on the
ClusterRoleBinding's ServiceAccount subject (`kubectl kustomize overlays/stable` at the
tag, kubectl v1.36.3: the subject's `namespace: default` becomes the kustomization's,
through kustomize's name references; tests/fixtures/efs-csi-driver records that output)
and the overlay's image tags.

What is applied, and why only that:
- the node plugin: the DaemonSet `efs-csi-node` (privileged, host network; the plugin
  `aws-efs-csi-driver`, the registrar that registers it with kubelet, which then names it
  in the Node's `csi.volume.kubernetes.io/nodeid` annotation, and a liveness probe), its
  ServiceAccount and ClusterRole (nodes get/list/watch/patch: on start the plugin removes
  the taint `efs.csi.aws.com/agent-not-ready` from its own node, pkg/driver/node.go
  removeNotReadyTaint), and the CSIDriver `efs.csi.aws.com` (attachRequired false);
- not the controller (controller-deployment.yaml, controller-serviceaccount.yaml): it
  serves CreateVolume/DeleteVolume, dynamic provisioning, which needs AWS credentials
  (docs/iam-policy-create.md: the controller's role holds AmazonEFSCSIDriverPolicy).
  Static provisioning, which efs-storage does (its PersistentVolumes name `volumeHandle:
  fs-...::fsap-...`), needs no controller: "the file system needs to be created manually
  first, then it can be mounted ... using the driver" (docs/README.md; examples/
  kubernetes/efs/static_provisioning and access_points apply PVs, no StorageClass
  provisioning).

The node plugin needs no AWS credentials for these mounts: access points need no IAM
permission by default (examples/kubernetes/efs/access_points/README.md); efs-utils signs
a mount with the node's IAM identity only with the `iam` mount option, which efs-storage
does not set (its mountOptions are [tls]). TLS is efs-utils' own: the image installs
amazon-efs-utils (its mount helper and efs-proxy, the TLS tunnel) and /usr/bin/stunnel
(Dockerfile at the tag: `clean_install amazon-efs-utils`, `install_binary ...
/usr/bin/stunnel`), so the machine needs nothing installed; the plugin adds `tls` to an
access point mount anyway (node.go NodePublishVolume).

Where it runs: NAMESPACE, a namespace of its own labelled Pod Security `privileged`, not
upstream's kube-system. The plugin needs privileged, host network and hostPath volumes,
which only `privileged` admits; kube-system admits them only because it carries no label
(the cluster's default level, privileged under kubeadm), and `gpu-k8s-gpu` holds the GPU
components and nothing else (literals.GPU_NAMESPACE). Its own namespace says what it
allows in its labels, holds nothing but this plugin, and is reserved from kube-api
consumers (kube_api.SYSTEM_NAMESPACES).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml
from literals import MANAGED_BY_LABEL, PRIVILEGED_POD_SECURITY

from charms.gpu_k8s.v0 import images

NAME = "aws-efs-csi-driver"
VERSION = "v3.4.1"
COMMIT = "3fcc6bdd7533a4cfd15643b31593f7ff154584c9"  # the tag v3.4.1
UPSTREAM = (
    f"https://raw.githubusercontent.com/kubernetes-sigs/aws-efs-csi-driver/{COMMIT}/"
    "deploy/kubernetes/base"
)
# The base files of the node plugin and their sha256 (`git show v3.4.1:deploy/kubernetes/
# base/<file> | sha256sum`, 2026-11-27). Applied in this order.
FILES = (
    ("csidriver.yaml", "8f9fef2a0300359a068d77a61ae39baf66bbadc491cfe6c6384ca7bc93173429"),
    (
        "node-serviceaccount.yaml",
        "0373d8f965f0a875ff8cc3577bc09ef2184d1bc159c64805fc06f12923febebb",
    ),
    ("node-daemonset.yaml", "79172b07e9567c6084454309740ca2bd81a3bd761d9cfb352c617429943cd04b"),
)
# deploy/kubernetes/overlays/stable/kustomization.yaml at the tag: `images` (name, newTag).
IMAGE_TAGS = {
    "public.ecr.aws/efs-csi-driver/amazon/aws-efs-csi-driver": "v3.4.1",
    "public.ecr.aws/csi-components/livenessprobe": "v2.19.0-eksbuild.3",
    "public.ecr.aws/csi-components/csi-node-driver-registrar": "v2.17.0-eksbuild.3",
}
NAMESPACE = "gpu-k8s-efs-csi"
DAEMONSET = "efs-csi-node"
# The CSIDriver csidriver.yaml makes lists no volumeLifecycleModes: the API server defaults
# it to [Persistent] (kubernetes pkg/apis/storage/v1beta1, and v1, defaults.go
# SetDefaults_CSIDriver),
# and kubelet mounts an inline `csi` volume of a pod only for a driver whose CSIDriver
# lists Ephemeral (pkg/volume/csi/csi_plugin.go supportsVolumeLifecycleMode: "volume mode
# ... not supported by driver"). So no pod mounts EFS but through a claim and the
# PersistentVolume efs-storage made for its namespace, with its access point: an inline
# volume, which Pod Security `restricted` admits and whose volumeHandle the pod names
# itself, could name any access point or the file system's root. Checked on the pinned
# file (test_efs_csi.py): a new pin that lists Ephemeral fails there.
DRIVER = "efs.csi.aws.com"
# What only the controller uses: never applied (see the module docstring).
CONTROLLER_FILES = ("controller-deployment.yaml", "controller-serviceaccount.yaml")
# Cluster-scoped kinds among the files (kustomize leaves their namespace alone).
_CLUSTER_KINDS = ("ClusterRole", "ClusterRoleBinding", "CSIDriver", "Namespace")


class DriverError(Exception):
    """A file is not the pinned one, or not what it should hold; nothing was applied."""


def url(file: str, mirror: str = "") -> str:
    """Where `file` comes from: upstream at the tag's commit, or `<mirror>/<NAME>/<VERSION>/`."""
    if mirror:
        return f"{mirror.rstrip('/')}/{NAME}/{VERSION}/{file}"
    return f"{UPSTREAM}/{file}"


def verify(file: str, data: bytes, pinned: str) -> str:
    """The sha256 of `data`; DriverError unless it is the one pinned for `file`."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != pinned:
        raise DriverError(
            f"{NAME} {VERSION} {file} has sha256 {digest}, not the {pinned} pinned for it; "
            "nothing applied"
        )
    return digest


def want_key(mirror: str, registry: str) -> str:
    """What decides whether the driver must be (re)applied; stored once it was."""
    return json.dumps([VERSION, url("", mirror), [s for _, s in FILES], registry, NAMESPACE])


def _namespace() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": NAMESPACE,
            "labels": {MANAGED_BY_LABEL: "kubernetes-control-plane", **PRIVILEGED_POD_SECURITY},
        },
    }


def _retag(image: str) -> str:
    """The overlay's `images` transform: the tag of a listed image set to its newTag."""
    name, sep, _tag = image.rpartition(":")
    if sep and "/" not in _tag and name in IMAGE_TAGS:
        return f"{name}:{IMAGE_TAGS[name]}"
    return image


def kustomized(docs: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """What kustomize makes of the base objects with `namespace` (see the module docstring)."""
    out = json.loads(json.dumps(docs))
    service_accounts = {o["metadata"]["name"] for o in out if o["kind"] == "ServiceAccount"}
    for obj in out:
        if obj["kind"] not in _CLUSTER_KINDS:
            obj["metadata"]["namespace"] = namespace
        if obj["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            for subject in obj.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount" and (
                    subject.get("name") in service_accounts or subject.get("name") == "default"
                ):
                    subject["namespace"] = namespace
        if obj["kind"] == "DaemonSet":
            pod = obj["spec"]["template"]["spec"]
            for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
                c["image"] = _retag(c["image"])
    return out


def parse(files: dict[str, bytes]) -> list[dict[str, Any]]:
    """The objects of the downloaded files, in FILES' order; DriverError when one is odd."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, in PyYAML's wheels
    docs: list[dict[str, Any]] = []
    for file, _sha in FILES:
        try:
            found = [d for d in yaml.load_all(files[file].decode(), Loader=loader) if d]
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise DriverError(f"{NAME} {file} is not YAML: {e}") from None
        for doc in found:
            if not (isinstance(doc, dict) and doc.get("kind") and doc.get("metadata")):
                raise DriverError(f"{NAME} {file} holds something that is not an object")
        docs += found
    kinds = {(d["kind"], d["metadata"].get("name")) for d in docs}
    for want in (("DaemonSet", DAEMONSET), ("CSIDriver", DRIVER)):
        if want not in kinds:
            raise DriverError(f"{NAME} {VERSION} files hold no {want[0]} {want[1]}")
    return docs


def manifests(files: dict[str, bytes], registry: str = "") -> list[dict[str, Any]]:
    """The objects to apply, in order: namespace, CSIDriver, RBAC, the node DaemonSet.

    `files`: each of FILES' names to its verified bytes. Images move below `registry`.
    """
    objects = kustomized(parse(files), NAMESPACE)
    for obj in objects:
        if obj["kind"] == "DaemonSet":
            pod = obj["spec"]["template"]["spec"]
            for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
                c["image"] = images.mirrored(c["image"], registry)
    return [_namespace(), *objects]


def image_list(registry: str = "") -> list[str]:
    """The images the node plugin runs (what a mirror must hold), sorted."""
    return sorted(images.mirrored(f"{n}:{t}", registry) for n, t in IMAGE_TAGS.items())
