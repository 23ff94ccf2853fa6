# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The kubernetes-worker options as a typed model, with the rules each value must follow.

`WorkerConfig` is what `load_config` gives the charm (dashed options, underscored
fields); `parse_labels` reads `node-labels` under the rules kubelet's NodeRestriction
admission applies. No ops imports.
"""

from __future__ import annotations

import re

import gpu_gate
import gpu_repair
import mig
import pydantic
import toolkit
from driver import DRIVER_CHOICES, DriverChoice
from validation import VALIDATION_IMAGE, check_image

from charms.gpu_k8s.v0 import containerd, images, kubeadm
from charms.gpu_k8s.v0.config import ActionParams, CharmConfig

MAX_PARALLEL_REBOOTS = 100
MAX_DRAIN_TIMEOUT = 3600

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Kubelets may only set labels in the kubernetes.io / k8s.io namespaces that the
# NodeRestriction admission plugin allows.
_ALLOWED_K8S_PREFIXES = ("kubelet.kubernetes.io", "node.kubernetes.io")
_ALLOWED_K8S_KEYS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    }
)


def _restricted(prefix: str) -> bool:
    for namespace in ("kubernetes.io", "k8s.io"):
        if prefix == namespace or prefix.endswith("." + namespace):
            return not any(
                prefix == allowed or prefix.endswith("." + allowed)
                for allowed in _ALLOWED_K8S_PREFIXES
            )
    return False


def _check_label(key: str, value: str) -> None:
    prefix, _, name = key.rpartition("/")
    if not _LABEL_NAME.match(name):
        raise ValueError(
            f"label name {name!r} must be 1-63 letters, digits, '-', '_' or '.', starting "
            "and ending with a letter or digit"
        )
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ValueError(
            f"label prefix {prefix!r} must be a lowercase DNS name such as example.com"
        )
    if prefix and _restricted(prefix) and key not in _ALLOWED_K8S_KEYS:
        raise ValueError(
            f"kubelets may not set {key!r} (kubernetes.io and k8s.io are reserved); "
            f"use your own prefix such as example.com/{name}"
        )
    if value and not _LABEL_NAME.match(value):
        raise ValueError(
            f"label value {value!r} of {key} must be empty or 1-63 letters, digits, '-', '_' "
            "or '.', starting and ending with a letter or digit"
        )


def parse_labels(text: str) -> dict[str, str]:
    """Parse `node-labels` ("key=value key2=value2") into a dict.

    Raises:
        ValueError: a label is malformed; the message says how to write it.
    """
    labels: dict[str, str] = {}
    for item in text.split():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{item!r} is not key=value; separate labels with spaces")
        if key in labels:
            raise ValueError(f"label {key!r} is given twice; keep one")
        _check_label(key, value)
        labels[key] = value
    return labels


def upstream_images() -> tuple[str, ...]:
    """Every image this charm pulls by default, as upstream publishes it.

    What a mirror must hold for `image-registry`: validate-gpu's CUDA sample, the
    sandbox (pause) image, and the repair gate's DCGM and NCCL images. The option's help
    text and docs/how-to/air-gapped.md are checked against it (tests/unit/docs/
    test_images.py).
    """
    return (VALIDATION_IMAGE, containerd.SANDBOX_IMAGE, gpu_gate.DCGM_IMAGE, gpu_gate.NCCL_IMAGE)


class WorkerConfig(CharmConfig):
    """The kubernetes-worker options (dashed in Juju, underscored here).

    The Kubernetes version is not an option: workers install the minor the control
    plane publishes over the `cluster` relation.
    """

    package_mirror: str = ""
    node_labels: str = ""
    drain_timeout: int = 300
    nvidia_driver: str = "auto"
    nvidia_apt_source: str = ""
    gpu_taint: bool = True
    auto_reboot: bool = False
    max_parallel_reboots: int = 1
    nvidia_default_runtime: bool = False
    gpu_validation_image: str = VALIDATION_IMAGE
    image_registry: str = ""
    mig_profile: str = ""
    gpu_xid_escalation: str = "3/10m"
    gpu_auto_repair: str = "reboot"

    @pydantic.field_validator("nvidia_driver")
    @classmethod
    def _driver(cls, value: str) -> str:
        try:
            DriverChoice.parse(value)
        except ValueError:
            raise ValueError(f"must be {DRIVER_CHOICES}, not {value.strip()[:40]!r}") from None
        return value

    @pydantic.field_validator("mig_profile")
    @classmethod
    def _mig(cls, value: str) -> str:
        return mig.validate(value)

    @pydantic.field_validator("image_registry")
    @classmethod
    def _registry(cls, value: str) -> str:
        return images.validate_registry(value)

    @pydantic.field_validator("nvidia_apt_source")
    @classmethod
    def _toolkit_source(cls, value: str) -> str:
        try:
            toolkit.ToolkitSource.parse(value)
        except ValueError as e:
            raise ValueError(str(e).removeprefix("nvidia-apt-source ")) from None
        return value

    @pydantic.field_validator("gpu_validation_image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image(value)

    @pydantic.field_validator("package_mirror")
    @classmethod
    def _mirror_url(cls, value: str) -> str:
        value = value.strip()
        if value:
            try:
                kubeadm.package_source(kubeadm.DEFAULT_MINOR, value)
            except ValueError:
                raise ValueError(
                    "must be empty (use pkgs.k8s.io) or an http(s) URL serving the "
                    "pkgs.k8s.io layout, such as https://mirror.example/k8s"
                ) from None
        return value

    @pydantic.field_validator("node_labels")
    @classmethod
    def _labels(cls, value: str) -> str:
        parse_labels(value)
        return value

    @pydantic.field_validator("gpu_xid_escalation")
    @classmethod
    def _escalation(cls, value: str) -> str:
        # the watcher's own check (gpu_watcher.parse_escalation), repeated here so that a
        # bad value blocks the unit rather than crash-looping the service
        found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*([smh])\s*", value)
        if not found or int(found[1]) < 1 or int(found[2]) < 1:
            raise ValueError("must be <count>/<window> such as 3/10m (s, m or h)")
        return value.replace(" ", "")

    @pydantic.field_validator("gpu_auto_repair")
    @classmethod
    def _repair(cls, value: str) -> str:
        if value not in gpu_repair.MODES:
            raise ValueError(f"must be one of {', '.join(gpu_repair.MODES)}")
        return value

    @pydantic.field_validator("max_parallel_reboots")
    @classmethod
    def _parallel(cls, value: int) -> int:
        if not 1 <= value <= MAX_PARALLEL_REBOOTS:
            raise ValueError(f"must be a number of nodes from 1 to {MAX_PARALLEL_REBOOTS}")
        return value

    @pydantic.field_validator("drain_timeout")
    @classmethod
    def _timeout(cls, value: int) -> int:
        if not 0 <= value <= MAX_DRAIN_TIMEOUT:
            raise ValueError(f"must be a number of seconds from 0 to {MAX_DRAIN_TIMEOUT}")
        return value

    @property
    def labels(self) -> dict[str, str]:
        """The node labels as a dict."""
        return parse_labels(self.node_labels)

    @property
    def mirror(self) -> str | None:
        """The package mirror, or None for pkgs.k8s.io."""
        return self.package_mirror or None

    @property
    def driver(self) -> DriverChoice:
        """The `nvidia-driver` choice."""
        return DriverChoice.parse(self.nvidia_driver)

    @property
    def validation_image(self) -> str:
        """The image validate-gpu runs by default, from `image-registry` when set."""
        return images.mirrored(self.gpu_validation_image, self.image_registry)

    @property
    def gate_images(self) -> tuple[str, str, str]:
        """The repair gate's CUDA, DCGM and NCCL images, from `image-registry` when set."""
        return (
            self.validation_image,
            images.mirrored(gpu_gate.DCGM_IMAGE, self.image_registry),
            images.mirrored(gpu_gate.NCCL_IMAGE, self.image_registry),
        )

    @property
    def toolkit_source(self) -> toolkit.ToolkitSource:
        """Where nvidia-container-toolkit comes from."""
        return toolkit.ToolkitSource.parse(self.nvidia_apt_source)


class RepairGpuParams(ActionParams):
    """Parameters of `repair-gpu`: each gate container's timeout (its pull and its run)."""

    timeout: int = 600

    @pydantic.field_validator("timeout")
    @classmethod
    def _timeout(cls, value: int) -> int:
        if not 10 <= value <= MAX_DRAIN_TIMEOUT:
            raise ValueError(f"must be a number of seconds from 10 to {MAX_DRAIN_TIMEOUT}")
        return value
