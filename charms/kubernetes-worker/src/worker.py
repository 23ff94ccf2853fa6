# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The kubernetes-worker workload: config, node setup, labels and leaving the cluster.

No ops imports: the charm hands in a `Host` (the machine) and a `Kube` client (the
cluster) and turns what comes back, or what is raised, into a status. Each system has
its own module (`charms.gpu_k8s.v0.containerd`, `.kubeadm`, and `gpu_node.py` for GPUs);
this module only sequences them for a worker node.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import mig
import pydantic
import toolkit
from driver import DRIVER_CHOICES, DriverChoice
from validation import VALIDATION_IMAGE, check_image

from charms.gpu_k8s.v0 import apt, containerd, drain, images, kubeadm
from charms.gpu_k8s.v0.config import CharmConfig
from charms.gpu_k8s.v0.system import CommandError, Host

if TYPE_CHECKING:
    from charms.gpu_k8s.v0.drain import DrainResult
    from charms.gpu_k8s.v0.kubeclient import Kube
    from charms.gpu_k8s.v0.kubernetes_cluster import JoinInfo

logger = logging.getLogger(__name__)

DEFAULT_API_PORT = 6443
NFS_CLIENT = "nfs-common"
MAX_PARALLEL_REBOOTS = 100
MAX_DRAIN_TIMEOUT = 3600
# Annotation recording which labels came from `node-labels`, so that a label removed
# from the config is removed from the node and labels set by others are left alone.
MANAGED_LABELS_ANNOTATION = "gpu-k8s.io/node-labels"

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
    def toolkit_source(self) -> toolkit.ToolkitSource:
        """Where nvidia-container-toolkit comes from."""
        return toolkit.ToolkitSource.parse(self.nvidia_apt_source)


def sandbox_image(config: WorkerConfig, info: JoinInfo | None) -> str:
    """The pause image for containerd: this unit's image-registry, else the control plane's.

    kubeadm names it `<imageRepository>/pause:<tag>` under a custom imageRepository, which
    is what moving `registry.k8s.io/pause:<tag>` below a registry gives.
    """
    registry = config.image_registry or (info.image_registry if info else "")
    return images.mirrored(containerd.SANDBOX_IMAGE, registry)


def minor_of(version: str) -> str:
    """Return the minor of a Kubernetes version: "1.33.4" and "v1.33" give "1.33"."""
    return ".".join(version.strip().lstrip("v").split(".")[:2])


def join_material(endpoint_url: str, ca_cert_hash: str, token: str) -> kubeadm.JoinMaterial:
    """Build kubeadm join material from the control plane's published values.

    Raises:
        ValueError: a value is malformed (the message never contains the token).
    """
    endpoint = re.sub(r"^https://", "", endpoint_url.strip()).rstrip("/")
    if not re.search(r":[0-9]+$", endpoint):
        endpoint = f"{endpoint}:{DEFAULT_API_PORT}"
    return kubeadm.JoinMaterial(endpoint=endpoint, ca_cert_hash=ca_cert_hash, token=token)


class JoinError(Exception):
    """The node could not join (yet); the message is the Waiting status.

    Retried on the next event: the control plane publishes new material, or kubeadm
    gets through.
    """


def join_cluster(
    host: Host,
    endpoint_url: str,
    ca_cert_hash: str,
    token: str,
    *,
    node: str,
    labels: Mapping[str, str],
) -> bool:
    """Join the cluster with the control plane's material unless joined; True when it did.

    Raises:
        JoinError: the material is malformed, or kubeadm failed (message without secrets).
    """
    if kubeadm.is_joined(host):
        return False
    try:
        material = join_material(endpoint_url, ca_cert_hash, token)
    except ValueError as e:
        raise JoinError(f"control plane join material is invalid: {e}") from None
    try:
        kubeadm.join(host, material, node_name=node, labels=labels, control_plane=False)
    except kubeadm.KubeadmError as e:
        logger.error("%s", e)
        raise JoinError(f"{e}; retrying on the next update-status") from None
    logger.info("node %s joined the cluster at %s", node, material.endpoint)
    return True


def prepare(host: Host) -> bool:
    """Prepare the kernel, install containerd and the NFS client; True when anything changed.

    Raises:
        apt.AptError: containerd or nfs-common could not be installed.
    """
    changed = containerd.prepare_kernel(host)
    changed = containerd.install(host) or changed
    # kubelet mounts NFS volumes (the shared EFS claim) with mount(8), which needs
    # /sbin/mount.nfs from nfs-common; without it every such pod stays ContainerCreating
    # with "mount failed: exit status 32 ... you might need a /sbin/mount.<type> helper"
    # (kubernetes/kubernetes#30310). Charmed Kubernetes' worker installs it the same way
    # (charm-kubernetes-worker layer.yaml). Not pinned and not held: unattended-upgrades
    # keeps it current.
    return apt.install(host, {NFS_CLIENT: None}, hold=False) or changed


def supported_minor(version: str) -> str:
    """The minor of the control plane's Kubernetes version, when this charm can install it.

    Raises:
        ValueError: no pinned release for that minor; the message says what to do.
    """
    minor = minor_of(version)
    if minor not in kubeadm.RELEASES:
        raise ValueError(
            f"the control plane runs Kubernetes {minor}, which this charm cannot install "
            f"(it has {', '.join(kubeadm.RELEASES)}): refresh kubernetes-worker to a "
            "revision that supports it"
        )
    return minor


def plan_kubernetes(host: Host, minor: str, mirror: str | None = None) -> VersionPlan:
    """Plan this node's Kubernetes minor against the control plane's `minor`.

    Installs `minor` when the plan says so (a node that has not joined, or one that
    already runs it); forgets an upgrade record left by a node that was reset since.

    Raises:
        ValueError: an unreachable next minor or a corrupt upgrade record.
        apt.AptError: a package or the package source failed.
    """
    joined = kubeadm.is_joined(host)
    if not joined:
        clear_upgrade(host)  # a record left by a node that was reset since
    plan = plan_version(
        minor,
        joined=joined,
        installed=kubeadm.installed_minor(host),
        upgrade=load_upgrade(host) if joined else None,
    )
    if plan.action is VersionAction.INSTALL:
        install_kubernetes(host, minor, mirror)
    return plan


def install_kubernetes(host: Host, minor: str, mirror: str | None = None) -> bool:
    """Install kubeadm + kubelet pinned for `minor` (the control plane's); True on change.

    Raises:
        apt.AptError: a package or the package source failed.
    """
    return kubeadm.install(host, minor, mirror=mirror, with_kubectl=False)


# -- Kubernetes minor upgrades -----------------------------------------------------------

# Progress of an upgrade of this node, kept on the machine: a hook that fails half-way
# (an API error during the drain) loses the charm's stored state, not what it did to the
# machine, so the record of what was done must live next to it.
UPGRADE_STATE = "/var/lib/gpu-k8s/kubernetes-upgrade.json"
_STEPS = ("node", "drain", "restart")


class VersionAction(enum.Enum):
    """What a reconcile does with this node's Kubernetes packages."""

    INSTALL = "install"  # not joined, or already at the control plane's minor
    UPGRADE = "upgrade"  # joined on an older minor: upgrade one minor, in turn
    NEWER = "newer"  # joined on a newer minor than the control plane: the operator decides


@dataclasses.dataclass(frozen=True)
class VersionPlan:
    """The minor this node runs and the one it installs or upgrades to."""

    action: VersionAction
    running: str  # what the node's kubelet runs (the published minor for INSTALL)
    target: str  # the minor to install or the next step of the upgrade
    upgrade: Upgrade | None = None  # the upgrade in progress that this plan finishes


@dataclasses.dataclass
class Upgrade:
    """An upgrade of this node from `source` to the next minor `target`, step by step."""

    source: str
    target: str
    done: list[str] = dataclasses.field(default_factory=list)  # steps of _STEPS finished
    cordoned: bool = False  # the drain cordoned the node (it was registered)


def load_upgrade(host: Host) -> Upgrade | None:
    """The upgrade in progress on this machine, or None.

    Raises:
        ValueError: the record is unreadable (the message names the file to check).
    """
    text = host.read(UPGRADE_STATE)
    if text is None:
        return None
    try:
        data = json.loads(text)
        upgrade = Upgrade(
            source=str(data["source"]),
            target=str(data["target"]),
            done=[str(step) for step in data["done"] if step in _STEPS],
            cordoned=bool(data["cordoned"]),
        )
        for minor in (upgrade.source, upgrade.target):
            kubeadm.minor_key(minor)
    except (ValueError, KeyError, TypeError):
        raise ValueError(
            f"the record of this node's Kubernetes upgrade ({UPGRADE_STATE}) is corrupt: "
            "finish the upgrade by hand (kubeadm upgrade node, kubelet, uncordon) and delete it"
        ) from None
    return upgrade


def save_upgrade(host: Host, upgrade: Upgrade) -> None:
    """Record the progress of `upgrade` on the machine."""
    host.write(UPGRADE_STATE, json.dumps(dataclasses.asdict(upgrade), sort_keys=True) + "\n")


def clear_upgrade(host: Host) -> None:
    """Forget the upgrade record once the upgrade is complete."""
    host.path(UPGRADE_STATE).unlink(missing_ok=True)


def plan_version(
    published: str, *, joined: bool, installed: str | None, upgrade: Upgrade | None
) -> VersionPlan:
    """Decide what this node does with the control plane's minor `published`.

    A node that has not joined installs `published`. A joined node with an upgrade in
    progress finishes it whatever is published (its kubeadm already moved on). Otherwise
    a joined node upgrades one minor at a time towards `published`, never downgrades.

    Raises:
        ValueError: the next minor of an old node is one this charm cannot install.
    """
    if not joined or installed is None:
        return VersionPlan(VersionAction.INSTALL, published, published)
    if upgrade is not None:
        return VersionPlan(VersionAction.UPGRADE, upgrade.source, upgrade.target, upgrade)
    if installed == published:
        return VersionPlan(VersionAction.INSTALL, published, published)
    if kubeadm.minor_key(installed) > kubeadm.minor_key(published):
        return VersionPlan(VersionAction.NEWER, installed, published)
    target = kubeadm.next_minor(installed)
    if target not in kubeadm.RELEASES:
        raise ValueError(
            f"this node runs Kubernetes {installed} and upgrades one minor at a time, but this "
            f"charm cannot install {target}: remove this unit and add a new one"
        )
    return VersionPlan(VersionAction.UPGRADE, installed, target)


def newer_message(running: str, published: str) -> str:
    """The Blocked message of a node newer than its control plane."""
    return (
        f"this node runs Kubernetes {running} but the control plane runs {published}: "
        "upgrade the control plane (juju config kubernetes-control-plane "
        f"kubernetes-version={running})"
    )


def upgrade_node(
    host: Host,
    kube: Kube,
    node: str,
    upgrade: Upgrade,
    *,
    mirror: str | None,
    drain_timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DrainResult | None:
    """Upgrade this joined node to `upgrade.target`, resuming after the last finished step.

    The kubeadm procedure for nodes: kubeadm at the new version, `kubeadm upgrade node`,
    cordon + drain, kubelet (and cri-tools, CNI plugins) at the new version, kubelet
    restart, uncordon. Progress is recorded on the machine after each step that must
    not be repeated, and cleared at the end. A drain that times out carries on; its
    result (pods left) is returned when this call drained, None otherwise.

    Raises:
        kubeadm.KubeadmError: `kubeadm upgrade node` failed.
        apt.AptError: a package could not be installed.
        CommandError: kubelet could not be restarted.
        KubeError: the Kubernetes API refused the drain or the uncordon.
    """
    save_upgrade(host, upgrade)
    kubeadm.install_kubeadm(host, upgrade.target, mirror=mirror)
    if "node" not in upgrade.done:
        kubeadm.upgrade_node(host)
        upgrade.done.append("node")
        save_upgrade(host, upgrade)
    result = None
    if "drain" not in upgrade.done:
        result = drain.drain(kube, node, timeout=drain_timeout, clock=clock, sleep=sleep)
        upgrade.cordoned = result is not None
        upgrade.done.append("drain")
        save_upgrade(host, upgrade)
    kubeadm.install(host, upgrade.target, mirror=mirror, with_kubectl=False)
    if "restart" not in upgrade.done:
        kubeadm.restart_kubelet(host)
        upgrade.done.append("restart")
        save_upgrade(host, upgrade)
    if upgrade.cordoned:
        drain.uncordon(kube, node)
    clear_upgrade(host)
    return result


class UpgradeError(Exception):
    """A step of this node's upgrade failed; the message is the Waiting status.

    The next event resumes from that step (`UPGRADE_STATE`).
    """


def run_upgrade(
    host: Host,
    kube: Kube,
    node: str,
    upgrade: Upgrade,
    *,
    mirror: str | None,
    drain_timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """`upgrade_node`, saying in the log what it does and which pods a drain left.

    Raises:
        UpgradeError: kubeadm, a package or the kubelet restart failed; the message says
            whether the node stays cordoned.
        KubeError: the Kubernetes API refused the drain or the uncordon.
    """
    logger.info(
        "upgrading node %s from Kubernetes %s to %s (steps done: %s)",
        node,
        upgrade.source,
        upgrade.target,
        ", ".join(upgrade.done) or "none",
    )
    try:
        result = upgrade_node(
            host,
            kube,
            node,
            upgrade,
            mirror=mirror,
            drain_timeout=drain_timeout,
            clock=clock,
            sleep=sleep,
        )
    except (kubeadm.KubeadmError, apt.AptError, CommandError) as e:
        cordoned = f"node {node} stays cordoned; " if upgrade.cordoned else ""
        logger.error("upgrade of node %s to Kubernetes %s: %s", node, upgrade.target, e)
        raise UpgradeError(
            f"upgrade to Kubernetes {upgrade.target} failed: {e}; {cordoned}"
            "retrying on the next update-status"
        ) from None
    if result is not None and result.remaining:
        summary = drain_summary(node, result, drain_timeout)
        logger.warning("%s; upgraded anyway: %s", summary, " ".join(result.remaining))
    logger.info("node %s now runs Kubernetes %s", node, upgrade.target)


def label_patch(node: Mapping[str, Any], labels: Mapping[str, str]) -> dict | None:
    """The merge patch that makes the node carry `labels`, or None when it already does.

    Labels this charm set before but that are no longer configured are removed; other
    labels (kubelet's, GPU labels, an operator's) are never touched.
    """
    metadata = node.get("metadata") or {}
    current = metadata.get("labels") or {}
    annotation = (metadata.get("annotations") or {}).get(MANAGED_LABELS_ANNOTATION, "")
    managed = {key for key in annotation.split(",") if key}
    wanted_keys = ",".join(sorted(labels))
    patch_labels: dict[str, str | None] = {
        key: value for key, value in labels.items() if current.get(key) != value
    }
    patch_labels.update({key: None for key in managed - set(labels) if key in current})
    if not patch_labels and annotation == wanted_keys:
        return None
    return {
        "metadata": {
            "labels": patch_labels,
            "annotations": {MANAGED_LABELS_ANNOTATION: wanted_keys},
        }
    }


def apply_labels(kube: Kube, node: str, labels: Mapping[str, str]) -> bool | None:
    """Make `node` carry `labels`; True when patched, None when the node is not registered."""
    obj = kube.get("v1", "Node", node)
    if obj is None:
        return None
    patch = label_patch(obj, labels)
    if patch is None:
        return False
    kube.patch("v1", "Node", node, patch)
    return True


def drain_summary(node: str, result: DrainResult | None, timeout: float, limit: int = 5) -> str:
    """One line saying what the drain did, naming pods left behind."""
    if result is None:
        return f"node {node} was not registered; nothing to drain"
    if not result.remaining:
        return f"drained node {node} ({len(result.evicted)} pods evicted)"
    shown = ", ".join(result.remaining[:limit])
    more = len(result.remaining) - limit
    if more > 0:
        shown += f" and {more} more"
    return (
        f"drain of node {node} timed out after {timeout:g}s; "
        f"{len(result.remaining)} pods were still running: {shown}"
    )


def drain_for_removal(
    kube: Kube,
    node: str,
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Drain a node that is about to be reset; what happened, for the unit's status.

    Pods still there at the timeout are named in a warning: they stop with the reset and
    their controllers recreate them elsewhere once the node is gone.

    Raises:
        KubeError: the Kubernetes API refused (the node must not be reset undrained).
    """
    result = drain.drain(kube, node, timeout=timeout, clock=clock, sleep=sleep)
    summary = drain_summary(node, result, timeout)
    if result is not None and result.remaining:
        logger.warning("%s; they stop with the reset: %s", summary, " ".join(result.remaining))
        return f"{summary}; see juju debug-log"
    logger.info("%s", summary)
    return summary
