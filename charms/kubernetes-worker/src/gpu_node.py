# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The GPU step of a worker's reconcile: detect, driver, toolkit, runtimes, node state.

`setup()` runs on every reconcile. On a machine without NVIDIA GPUs it only writes
containerd's config with runc (which drops the `nvidia` runtime of a worker that lost
its GPUs) and runs no NVIDIA program. On a GPU machine it keeps a working driver or
installs the configured one, installs the container toolkit and registers the `nvidia`
runtime handler. What needs the operator comes back as a `GpuSetupError` whose message
is the Blocked status. `label_node()` then brings the Node's labels (the operator's
`node-labels`, the GPU labels) and the GPU taint in line. No ops imports: the charm turns
results into statuses.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import driver
import gpu
import gpu_labels
import mig
import nvidia
import toolkit
import worker
from charm_config import WorkerConfig

from charms.gpu_k8s.v0 import apt, containerd
from charms.gpu_k8s.v0.kubernetes_cluster import gpu_taint_patch
from charms.gpu_k8s.v0.system import CommandError, Host
from charms.gpu_k8s.v0.unit_state import Gauge

NO_GPU = gpu.SmiReport(state=gpu.SmiState.ABSENT, detail="this machine has no NVIDIA GPU")


class GpuSetupError(Exception):
    """The GPU setup cannot go on; the message is a Blocked status that says what to do."""


@dataclasses.dataclass(frozen=True)
class GpuState:
    """What the GPU step found: the GPUs, what nvidia-smi says, and a pending reboot.

    `update` names the packages to install after draining and before that reboot (the
    driver moving with a new kernel); `pending` says what pods still wait for although
    the driver works (Fabric Manager on an NVSwitch machine), `pending_failed` whether
    that is a failure (Fabric Manager did not start, fabric registration failed) rather
    than a wait; `problem` is
    what the operator must fix; `note` goes after the Ready message; `machine` is the DMI
    product name (the `nvidia.com/gpu.machine` label; None when unreadable).
    """

    inventory: gpu.GpuInventory
    report: gpu.SmiReport = NO_GPU
    reboot: str | None = None
    update: tuple[str, ...] = ()
    pending: str | None = None
    pending_failed: bool = False
    problem: str | None = None
    note: str = ""
    mig_profiles: dict[int, dict[str, int]] = dataclasses.field(default_factory=dict)
    machine: str | None = None

    @property
    def ready(self) -> bool:
        """Pods can get the GPUs: the driver works, and nothing they need is pending."""
        return self.report.ok and self.pending is None

    @property
    def has_gpu(self) -> bool:
        """True on a machine with NVIDIA GPUs."""
        return self.inventory.count > 0

    def records(self) -> list[dict]:
        """The inventory to publish to the control plane (empty without GPUs)."""
        return gpu.inventory_records(self.inventory, self.report, self.mig_profiles)

    def labels(self, plugin: gpu_labels.PluginConfig | None = None) -> dict[str, str | None]:
        """The node's GPU labels (`plugin`: how the device plugin runs); None removes one.

        With them, `nvidia.com/gpu.deploy.device-plugin=true` where the device plugin may
        run (NVIDIA's mig-manager pauses it there during a MIG change).

        Only GPUs pods can use get labels: the device plugin selects
        `nvidia.com/gpu.present=true`, and on a node whose driver waits for a reboot (or
        is broken) or whose Fabric Manager is not running, it would advertise GPUs that
        fail. Without GPUs, every GPU label is removed.
        """
        deploy: dict[str, str | None] = {mig.LABEL_DEPLOY_PLUGIN: "true" if self.ready else None}
        if not self.ready:
            return gpu_labels.node_labels(gpu.GpuInventory(), None, None) | deploy
        labels = gpu_labels.node_labels(
            self.inventory,
            self.report.driver_version,
            self.report.cuda_version,
            machine=self.machine,
            plugin=plugin or gpu_labels.PluginConfig(),
        )
        return labels | deploy

    def gauges(self) -> list[Gauge]:
        """The GPU step's outcome for the unit-state scrape job (zeros without GPUs)."""
        count = self.inventory.count
        return [
            Gauge("gpu_k8s_node_gpus", "NVIDIA GPUs on the machine (PCI).", count),
            Gauge(
                "gpu_k8s_node_gpus_usable",
                "GPUs pods can use: the driver answers and nothing they need is pending.",
                count if self.ready else 0,
            ),
            Gauge(
                "gpu_k8s_node_reboot_required",
                "1 while the GPU driver waits for a reboot into the kernel it was built for.",
                int(self.reboot is not None),
            ),
        ]

    def taints(self, gpu_taint: bool) -> list[dict]:
        """The GPU taint the node should carry (none without GPUs or with gpu-taint off)."""
        return gpu_labels.node_taints(gpu_taint, self.has_gpu)

    def ready_message(self) -> str:
        """`Ready: 4x NVIDIA A10G, driver 580, CUDA 13.0` or `Ready (no GPU)`."""
        return gpu.status_message(self.inventory, self.report) + self.note

    def waiting(self) -> str | None:
        """Why the GPUs are not ready yet although nothing is wrong (a Waiting status)."""
        if self.has_gpu and self.report.ok and self.pending is not None:
            return None if self.pending_failed else f"waiting for {self.pending}"
        return None

    def driver_problem(self, unit: str, node: str, choice: driver.DriverChoice) -> str | None:
        """Blocked message for GPUs without a working driver that the charm will not fix.

        A hung driver names the reboot that clears it (the repair of a quarantined GPU
        takes that reboot itself, gpu_repairs.py, and its status comes first).
        """
        if self.problem:
            return self.problem
        if self.pending_failed and self.report.ok:
            return f"{self.pending}; the GPUs stay unlabelled until it works"
        if not self.has_gpu or self.report.ok or self.reboot:
            return None
        if self.report.state is gpu.SmiState.HUNG:
            return (
                f"NVIDIA driver hung: {self.report.detail}; a reboot clears it: `kubectl "
                f"drain {node} --ignore-daemonsets --delete-emptydir-data`, `juju ssh {unit} "
                f"-- sudo reboot`, then `kubectl uncordon {node}`"
            )
        fix = (
            "install one or set nvidia-driver=auto"
            if choice.mode == "none"
            else (f"check `juju ssh {unit} -- nvidia-smi` and `journalctl -k | grep -i nvidia`")
        )
        return (
            f"NVIDIA driver not working ({self.report.state.value}: {self.report.detail}); {fix}"
        )


def detect(host: Host) -> gpu.GpuInventory:
    """The NVIDIA GPUs of the machine, from sysfs (no program runs)."""
    return gpu.detect(host.path("/sys"), host.path(str(gpu.DEFAULT_PCI_IDS)))


def _ensure_driver(
    host: Host, config: WorkerConfig, inventory: gpu.GpuInventory, today: datetime.date
):
    try:
        return driver.ensure(host, config.driver, inventory, today=today)
    except driver.DriverPlanError as e:
        raise GpuSetupError(str(e)) from None
    except apt.AptError as e:
        raise GpuSetupError(driver.apt_blocked_message(e)) from None
    except CommandError as e:
        raise GpuSetupError(
            f"NVIDIA driver setup failed: {e.last_line}; check `juju debug-log` and set "
            "nvidia-driver to a branch such as 580, or to none"
        ) from None


def setup(
    host: Host,
    config: WorkerConfig,
    sandbox_image: str = containerd.SANDBOX_IMAGE,
    *,
    today: datetime.date | None = None,
) -> GpuState:
    """Detect GPUs; on a GPU machine make driver, toolkit and the `nvidia` runtime present.

    `today` (the local date when not given) decides which NVIDIA branches are still
    supported (`driver.END_OF_LIFE`).

    containerd is restarted only when its config changed (`sandbox_image` is its pause
    image, from the image registry when one is set).

    Raises:
        GpuSetupError: the operator must act (the message says how).
    """
    inventory = detect(host)
    if not inventory.count:
        runtimes = toolkit.containerd_runtimes(has_gpu=False)
        containerd.configure(host, *runtimes, sandbox_image=sandbox_image)
        return GpuState(inventory)
    result = _ensure_driver(host, config, inventory, today or datetime.date.today())
    try:
        toolkit.install_toolkit(host, config.toolkit_source)
    except apt.AptError as e:
        raise GpuSetupError(toolkit.toolkit_blocked_message(e)) from None
    runtimes = toolkit.containerd_runtimes(True, default_nvidia=config.nvidia_default_runtime)
    containerd.configure(host, *runtimes, sandbox_image=sandbox_image)
    fabric = result.fabric
    pending = f"NVIDIA Fabric Manager: {fabric.reason}" if fabric else None
    mig = nvidia.read_mig_profiles(host) if result.report.ok and inventory.mig_capable else {}
    return GpuState(
        gpu.with_smi(inventory, result.report),
        result.report,
        reboot=result.reboot,
        update=result.update,
        pending=pending,
        pending_failed=bool(fabric and fabric.failed),
        problem=result.problem,
        note=result.note,
        mig_profiles=mig,
        machine=gpu_labels.machine_type(host),
    )


def apply_node_state(
    kube: Any,
    node: str,
    state: GpuState,
    gpu_taint: bool,
    plugin: gpu_labels.PluginConfig | None = None,
) -> bool:
    """Bring the Node's GPU labels in line with `state`; True when patched.

    The taint is the control plane's to change (`taint_request`).

    `plugin` is how the control plane runs the device plugin (MIG strategy, time-slicing
    replicas), which the sharing labels describe. The device plugin's deploy label is left
    alone while mig-manager has it paused, and when the operator set it to `false`.

    Raises:
        LookupError: the Node is not registered yet.
        KubeError: the API server refused.
    """
    labels = state.labels(plugin)
    keep = {mig.LABEL_DEPLOY_PLUGIN: (mig.PAUSED, "false")}
    return gpu_labels.apply_node_gpu_state(kube, node, labels, None, keep)


def taint_request(obj: dict | None, state: GpuState, gpu_taint: bool) -> bool | None:
    """The GPU taint to ask the control plane for: True/False, None when the Node has it.

    `obj` is the Node as the API returned it (None: gone). A worker acting as its kubelet
    may not change its Node's taints (NodeRestriction); it registered with them
    (`worker.join_cluster`), and the control-plane leader applies a change it asks for
    over the relation (`kubernetes_cluster.gpu_taint_patch`).
    """
    wanted = bool(state.taints(gpu_taint))
    if obj is None or gpu_taint_patch(obj, wanted) is None:
        return None
    return wanted


def label_node(
    kube: Any,
    node: str,
    state: GpuState,
    config: WorkerConfig,
    plugin: gpu_labels.PluginConfig | None = None,
) -> bool:
    """`node-labels`, then the GPU labels, on the Node; False until it registers.

    Raises:
        KubeError: the API server refused.
    """
    try:
        if worker.apply_labels(kube, node, config.labels) is None:
            return False
        apply_node_state(kube, node, state, config.gpu_taint, plugin)
    except LookupError:
        return False  # deleted between the two calls
    return True
