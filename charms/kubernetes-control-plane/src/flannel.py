# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""flannel, the cluster's CNI: the pinned upstream manifest, made this cluster's (no ops).

`files/kube-flannel.yml` is flannel's release manifest with its pod network replaced by
a placeholder. At apply time the placeholder becomes `pod-cidr` and, with
`image-registry` set, each container and init container image moves to the mirror
(`ghcr.io/flannel-io/flannel:v0.27.4` -> `<registry>/flannel-io/flannel:v0.27.4`); the
file itself stays as upstream wrote it.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from literals import FLANNEL_VERSION, POD_CIDR_PLACEHOLDER

from charms.gpu_k8s.v0 import images

MANIFEST = Path(__file__).parent.parent / "files" / "kube-flannel.yml"
_POD_KINDS = ("DaemonSet", "Deployment", "StatefulSet", "Job")


def manifests(pod_cidr: str, image_registry: str = "") -> list[dict]:
    """The flannel objects for `pod_cidr`, pulling from `image_registry` when one is set."""
    text = MANIFEST.read_text().replace(POD_CIDR_PLACEHOLDER, pod_cidr)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, in PyYAML's wheels
    objects = [doc for doc in yaml.load_all(text, Loader=loader) if doc]
    if image_registry:
        for obj in objects:
            if obj.get("kind") in _POD_KINDS:
                spec = obj["spec"]["template"]["spec"]
                for container in spec.get("initContainers", []) + spec.get("containers", []):
                    container["image"] = images.mirrored(container["image"], image_registry)
    return objects


def fingerprint(pod_cidr: str, image_registry: str) -> str:
    """What was applied, for the peer data; a change of either makes the charm apply again.

    Without a registry it reads as it did before the option existed, so a charm upgrade
    alone does not apply flannel again.
    """
    want = f"flannel {FLANNEL_VERSION} {pod_cidr}"
    return f"{want} {image_registry}" if image_registry else want
