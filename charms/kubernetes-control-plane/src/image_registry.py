# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Where kubeadm and containerd pull the control plane's images from (no ops imports).

With `image-registry` set, every image keeps its upstream path below the mirror
(`charms.gpu_k8s.v0.images`): `registry.k8s.io/kube-apiserver:v1.36.5` becomes
`<registry>/kube-apiserver:v1.36.5`. kubeadm is told through its ClusterConfiguration
(kubeadm.k8s.io/v1beta4, cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go):

- `imageRepository` replaces `registry.k8s.io` for kube-apiserver,
  kube-controller-manager, kube-scheduler, kube-proxy, etcd and pause
  (cmd/kubeadm/app/images/images.go: `<imageRepository>/<name>:<tag>`);
- `dns.imageRepository` for CoreDNS. Upstream publishes it as
  `registry.k8s.io/coredns/coredns`, and kubeadm adds that `/coredns` only for the
  default repository: under a custom `imageRepository` alone it would pull
  `<registry>/coredns:<tag>` (images.go `GetDNSImage`). Setting `dns.imageRepository` to
  `<registry>/coredns` keeps the upstream path, `<registry>/coredns/coredns:<tag>`, like
  every other image.

`kubeadm init` gets both in the config it is given; `kubeadm join` and `kubeadm upgrade`
read the ClusterConfiguration from the `kubeadm-config` ConfigMap, which the leader keeps
in line with the option (`sync_kubeadm_config`). containerd's sandbox (pause) image moves
the same way.
"""

from __future__ import annotations

from typing import Any

import dcgm_exporter
import device_plugin
import efs_csi
import kube_state_metrics
import mig_manager
import yaml
from literals import (
    CALICO_RELEASE,
    FLANNEL_CNI_PLUGIN_VERSION,
    FLANNEL_VERSION,
    JOBSET,
    KUEUE,
)

from charms.gpu_k8s.v0 import containerd, images

# kubeadm's default imageRepository (v1beta4 defaults.go DefaultImageRepository).
KUBEADM_DEFAULT_REPOSITORY = "registry.k8s.io"
# CoreDNS's path below registry.k8s.io: registry.k8s.io/coredns/coredns (images.go).
COREDNS_DIRECTORY = "coredns"
KUBEADM_CONFIG = "kubeadm-config"
KUBEADM_CONFIG_NAMESPACE = "kube-system"


def upstream_images() -> tuple[str, ...]:
    """Every image the control plane runs besides kubeadm's, as upstream publishes it.

    What a mirror must hold for `image-registry` (each moved by `images.mirrored`), the
    one list the option's help text and docs/how-to/air-gapped.md are checked against
    (tests/unit/docs/test_images.py). The release manifests name the CNI's and the batch
    engines' images: Calico's calico.yaml at the tag (its cni, node and kube-controllers
    workloads, recorded in tests/fixtures/calico), flannel's in files/kube-flannel.yml,
    JobSet's and Kueue's manifests.yaml (their config/default kustomizations at the
    tags); tests/unit/kubernetes_control_plane/test_image_registry.py checks them.
    kubeadm's own images (control-plane components, kube-proxy, etcd, CoreDNS) depend on
    the Kubernetes patch: `kubeadm config images list` names them.
    """
    calico = CALICO_RELEASE.version
    return (
        containerd.SANDBOX_IMAGE,
        f"quay.io/calico/cni:{calico}",
        f"quay.io/calico/node:{calico}",
        f"quay.io/calico/kube-controllers:{calico}",
        f"ghcr.io/flannel-io/flannel:{FLANNEL_VERSION}",
        f"ghcr.io/flannel-io/flannel-cni-plugin:{FLANNEL_CNI_PLUGIN_VERSION}",
        device_plugin.IMAGE,
        dcgm_exporter.IMAGE,
        mig_manager.IMAGE,
        kube_state_metrics.IMAGE,
        f"registry.k8s.io/jobset/jobset:{JOBSET.version}",
        f"registry.k8s.io/kueue/kueue:{KUEUE.version}",
        *efs_csi.image_list(),
    )


def cluster_fields(registry: str) -> dict:
    """The ClusterConfiguration fields for `registry` ({} for the upstream registries)."""
    if not registry:
        return {}
    return {
        "imageRepository": registry,
        "dns": {"imageRepository": f"{registry}/{COREDNS_DIRECTORY}"},
    }


def with_registry(cluster: dict, registry: str) -> dict:
    """`cluster` (a ClusterConfiguration) pulling from `registry`, or from upstream if "".

    Only the image fields change; a configuration that already matches comes back equal.
    """
    out = dict(cluster)
    dns = dict(out.get("dns") or {})
    if registry:
        fields = cluster_fields(registry)
        out["imageRepository"] = fields["imageRepository"]
        dns.update(fields["dns"])
    else:
        if out.get("imageRepository") not in (None, "", KUBEADM_DEFAULT_REPOSITORY):
            out["imageRepository"] = KUBEADM_DEFAULT_REPOSITORY
        dns.pop("imageRepository", None)
    if dns or "dns" in cluster:
        out["dns"] = dns
    return out


def sync_kubeadm_config(kube: Any, registry: str) -> bool | None:
    """Make the cluster's kubeadm-config name `registry`; True when it was patched.

    None when the ConfigMap does not exist (yet). `kube` is the API client.
    """
    cm = kube.get("v1", "ConfigMap", KUBEADM_CONFIG, namespace=KUBEADM_CONFIG_NAMESPACE)
    if cm is None:
        return None
    cluster = yaml.safe_load((cm.get("data") or {}).get("ClusterConfiguration") or "{}") or {}
    wanted = with_registry(cluster, registry)
    if wanted == cluster:
        return False
    patch = {"data": {"ClusterConfiguration": yaml.safe_dump(wanted)}}
    kube.patch("v1", "ConfigMap", KUBEADM_CONFIG, patch, namespace=KUBEADM_CONFIG_NAMESPACE)
    return True


def sandbox_image(registry: str) -> str:
    """The sandbox (pause) image containerd pulls, from `registry` when one is set."""
    return images.mirrored(containerd.SANDBOX_IMAGE, registry)
