# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""NVIDIA driver, container toolkit and Kubernetes objects for a GPU worker.

Decisions are pure functions (`plan_driver`, `node_labels`, `validation_pod`, ...);
the few functions that act take a `Host` and run every program through it. Packages go
through `charms.gpu_k8s.v0.apt` (pinned, held) and the containerd runtime handler through
`charms.gpu_k8s.v0.containerd`. No ops imports: the charm turns errors into statuses.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gpu

from charms.gpu_k8s.v0 import apt
from charms.gpu_k8s.v0.containerd import RuntimeHandler
from charms.gpu_k8s.v0.system import CommandError, Host

NVIDIA_SMI = "/usr/bin/nvidia-smi"
UBUNTU_DRIVERS = "/usr/bin/ubuntu-drivers"
UNAME = "/usr/bin/uname"
DPKG = "/usr/bin/dpkg"
DPKG_QUERY = "/usr/bin/dpkg-query"
MODPROBE = "/usr/sbin/modprobe"
SH = "/bin/sh"

DRIVER_CHOICES = "auto, none or a branch number such as 580"
_BRANCH = re.compile(r"^\d{3}$")

# NVIDIA's container toolkit repository (a flat repository per architecture).
TOOLKIT_SOURCE_NAME = "nvidia-container-toolkit"
TOOLKIT_URI = "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
TOOLKIT_KEY_URL = "https://nvidia.github.io/libnvidia-container/gpgkey"
TOOLKIT_KEY_PATH = "/etc/apt/keyrings/nvidia-container-toolkit.gpg"
# Pinned release; the four packages are released together at the same version.
TOOLKIT_VERSION = "1.18.1-1"
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
RUNTIME_NAME = "nvidia"
RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"

# Node labels (names as NVIDIA's GPU feature discovery uses them) and the taint.
LABEL_PRESENT = "nvidia.com/gpu.present"
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_DRIVER_MAJOR = "nvidia.com/cuda.driver.major"
LABEL_CUDA_MAJOR = "nvidia.com/cuda.runtime.major"
LABEL_MIG_CAPABLE = "nvidia.com/mig.capable"
GPU_LABELS = (
    LABEL_PRESENT,
    LABEL_PRODUCT,
    LABEL_COUNT,
    LABEL_MEMORY,
    LABEL_DRIVER_MAJOR,
    LABEL_CUDA_MAJOR,
    LABEL_MIG_CAPABLE,
)
TAINT_KEY = "nvidia.com/gpu"
TAINT_VALUE = "present"
TAINT_EFFECT = "NoSchedule"
GPU_RESOURCE = "nvidia.com/gpu"

# CUDA vectorAdd sample from NGC; prints "Test PASSED" and exits 0 on success.
VALIDATION_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
VALIDATION_COMMAND = ("/cuda-samples/vectorAdd",)
VALIDATION_TIMEOUT_S = 600
_STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)


class DriverPlanError(ValueError):
    """No driver can be chosen; the message says what the operator should do."""


# ------------------------------------------------------------------------ driver choice


@dataclasses.dataclass(frozen=True)
class DriverChoice:
    """The `nvidia-driver` option: `auto`, `none`, or a branch number such as `580`."""

    mode: str  # "auto" | "none" | "branch"
    branch: str | None = None

    @classmethod
    def parse(cls, value: str) -> DriverChoice:
        """Parse the option value.

        Raises:
            ValueError: the value is none of the allowed forms; the message lists them.
        """
        text = str(value).strip().lower()
        if text in ("auto", "none"):
            return cls(mode=text)
        if _BRANCH.match(text):
            return cls(mode="branch", branch=text)
        raise ValueError(f"nvidia-driver must be {DRIVER_CHOICES}, not {value!r}")


def kernel_flavour(release: str) -> str:
    """Kernel flavour from `uname -r`: `6.8.0-1015-aws` -> `aws`, `...-generic-64k` too.

    Raises:
        ValueError: the release is not an Ubuntu kernel release string.
    """
    match = re.fullmatch(r"\d+\.\d+\.\d+-\d+-([a-z0-9][a-z0-9-]*)", release.strip())
    if not match:
        raise ValueError(f"cannot tell the kernel flavour of {release.strip()!r}")
    return match.group(1)


def driver_packages(branch: str, flavour: str) -> list[str]:
    """Packages of one `-server` branch: headless userspace, nvidia-smi, prebuilt modules.

    `linux-modules-nvidia-<branch>-server-<flavour>` holds modules built and signed by
    Canonical for that kernel flavour, so nothing is compiled (no DKMS) and Secure Boot
    keeps working.
    """
    return [
        f"nvidia-headless-no-dkms-{branch}-server",
        f"nvidia-utils-{branch}-server",
        f"linux-modules-nvidia-{branch}-server-{flavour}",
    ]


def plan_driver(
    choice: DriverChoice,
    inventory: gpu.GpuInventory,
    smi_ok: bool,
    recommended_branch: str | None,
    kernel_flavour: str,
    *,
    installed_branch: str | None = None,
) -> list[str]:
    """Return the packages to install (empty: leave the host's driver alone).

    - no GPU, or `none`: nothing (the operator manages drivers);
    - `auto`: nothing when a driver already works; else keep the branch already installed
      (it only needs its modules or a reboot), else the recommended `-server` branch;
    - a branch: that branch, unless it is the one already working.

    Raises:
        DriverPlanError: `auto` found no branch to install.
    """
    if not inventory.count or choice.mode == "none":
        return []
    if choice.mode == "auto":
        if smi_ok:
            return []
        branch = installed_branch or recommended_branch
        if branch is None:
            raise DriverPlanError(
                f"ubuntu-drivers recommends no server driver for {inventory.describe()}; "
                "set nvidia-driver to a branch number such as 580"
            )
    else:
        branch = choice.branch
        if smi_ok and installed_branch == branch:
            return []
    assert branch is not None
    return driver_packages(branch, kernel_flavour)


_UD_DRIVER = re.compile(
    r"nvidia-(?:driver|headless-no-dkms)-(?P<branch>\d{3})(?P<server>-server)?(?P<open>-open)?"
    r"(?=[\s,]|$)"
)


def parse_ubuntu_drivers(text: str) -> tuple[str | None, list[str]]:
    """Parse `ubuntu-drivers devices` or `ubuntu-drivers list --gpgpu` output.

    Returns:
        (branch marked `recommended` or None, closed `-server` branches, highest first).
    """
    recommended = None
    server: set[str] = set()
    for line in text.splitlines():
        match = _UD_DRIVER.search(line)
        if not match:
            continue
        if match.group("server") and not match.group("open"):
            server.add(match.group("branch"))
        if re.search(r"\brecommended\b", line):
            recommended = match.group("branch")
    return recommended, sorted(server, key=int, reverse=True)


def choose_branch(recommended: str | None, server_branches: Sequence[str]) -> str | None:
    """The recommended branch when it has a `-server` variant, else the newest one."""
    if recommended in server_branches:
        return recommended
    return server_branches[0] if server_branches else None


def recommended_branch(host: Host) -> str | None:
    """Ask ubuntu-drivers which `-server` branch fits this machine's GPUs.

    Raises:
        CommandError: ubuntu-drivers failed.
    """
    recommended, server = parse_ubuntu_drivers(host.run(UBUNTU_DRIVERS, "devices"))
    if not server:
        _, server = parse_ubuntu_drivers(host.run(UBUNTU_DRIVERS, "list", "--gpgpu"))
    return choose_branch(recommended, server)


def running_kernel(host: Host) -> str:
    """`uname -r` of the machine."""
    return host.run(UNAME, "-r").strip()


def parse_installed_branch(dpkg_output: str) -> str | None:
    """Branch of the installed `nvidia-utils-<branch>[-server]` package, from dpkg-query."""
    for line in dpkg_output.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1].startswith("ii"):
            match = re.fullmatch(r"nvidia-utils-(\d{3})(?:-server)?", fields[0])
            if match:
                return match.group(1)
    return None


def installed_branch(host: Host) -> str | None:
    """The driver branch installed from packages, or None."""
    try:
        out = host.run(
            DPKG_QUERY, "-W", "-f", "${Package} ${db:Status-Abbrev}\n", "nvidia-utils-*"
        )
    except CommandError:
        return None  # dpkg-query exits 1 when no package matches
    return parse_installed_branch(out)


def install_driver(host: Host, packages: Sequence[str]) -> bool:
    """Install and hold the planned driver packages; return True when anything changed.

    Raises:
        apt.AptError: apt failed; `.package` names the failing package.
    """
    if not packages:
        return False
    return apt.install(host, dict.fromkeys(packages), hold=True)


def load_module(host: Host) -> bool:
    """Try `modprobe nvidia` (works when modules for the running kernel are installed)."""
    if host.path("/sys/module/nvidia").is_dir():
        return True
    try:
        host.run(MODPROBE, "nvidia")
    except CommandError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class DriverResult:
    """What `ensure_driver` did and found."""

    installed: tuple[str, ...]  # packages planned (installed or already there)
    changed: bool  # apt installed or held something
    report: gpu.SmiReport  # nvidia-smi after the change
    reboot: str | None  # why a reboot is needed, or None


def ensure_driver(host: Host, choice: DriverChoice, inventory: gpu.GpuInventory) -> DriverResult:
    """Make the configured driver present: plan, install and hold, load, re-check.

    A host whose driver already works is left alone under `auto`; `none` never installs
    and never asks for a reboot.

    Raises:
        DriverPlanError: `auto` found no branch to install.
        apt.AptError: apt failed; `.package` names the failing package.
        CommandError: ubuntu-drivers or uname failed.
    """
    report = read_smi(host)
    if not inventory.count or choice.mode == "none":
        return DriverResult((), False, report, None)
    have = installed_branch(host)
    needs_recommendation = choice.mode == "auto" and not report.ok and have is None
    recommended = recommended_branch(host) if needs_recommendation else None
    flavour = ""
    if not report.ok or choice.branch:
        try:
            flavour = kernel_flavour(running_kernel(host))
        except ValueError as e:
            raise DriverPlanError(
                f"{e}: no prebuilt NVIDIA modules; install a driver and set nvidia-driver=none"
            ) from None
    packages = plan_driver(
        choice, inventory, report.ok, recommended, flavour, installed_branch=have
    )
    changed = install_driver(host, packages)
    if packages and (changed or not report.ok):
        load_module(host)  # modules for the running kernel load without a reboot
        report = read_smi(host)
    return DriverResult(tuple(packages), changed, report, reboot_reason(host, report))


# ---------------------------------------------------------------------------- nvidia-smi


def _run_combined(host: Host, *argv: str) -> tuple[int, str]:
    # nvidia-smi prints NVML errors on stdout and exits non-zero; a Runner keeps only
    # stderr of a failed command, so capture both streams and the status through sh.
    out = host.run(SH, "-c", '"$@" 2>&1; echo "exit-status=$?"', "sh", *argv)
    body, _, status = out.rstrip("\n").rpartition("exit-status=")
    try:
        return int(status), body
    except ValueError:
        return 1, out


def read_smi(host: Host) -> gpu.SmiReport:
    """Run nvidia-smi (GPU query, then `--version` for CUDA) and report what it said."""
    if not host.path(NVIDIA_SMI).exists():
        return gpu.SmiReport(state=gpu.SmiState.ABSENT, detail=f"{NVIDIA_SMI} not installed")
    query = _run_combined(host, NVIDIA_SMI, *gpu.SMI_QUERY_ARGS)
    version = _run_combined(host, NVIDIA_SMI, "--version") if query[0] == 0 else None
    return gpu.smi_report(query, version)


def reboot_required(host: Host) -> bool:
    """True when `/var/run/reboot-required` asks for a reboot for a kernel or driver package.

    `reboot-required.pkgs` names the packages that asked; a reboot wanted only by other
    packages (say, libc) is not a reason to drain a GPU node. Without the list, any
    request counts.
    """
    if not host.path(gpu.REBOOT_REQUIRED_FILE).exists():
        return False
    pkgs = host.read(gpu.REBOOT_REQUIRED_FILE + ".pkgs")
    if pkgs is None:
        return True
    names = [line.strip() for line in pkgs.splitlines() if line.strip()]
    return not names or any(n.startswith(("linux-", "nvidia-", "libnvidia-")) for n in names)


def reboot_reason(host: Host, report: gpu.SmiReport) -> str | None:
    """Why the machine must reboot for its driver to work (see `gpu.reboot_reason`)."""
    return gpu.reboot_reason(
        module_loaded=host.path("/sys/module/nvidia").is_dir(),
        reboot_required=reboot_required(host),
        smi_state=report.state,
    )


def boot_id(host: Host) -> str:
    """This boot's id (changes on every reboot)."""
    return (host.read("/proc/sys/kernel/random/boot_id") or "").strip()


class RebootAction(enum.Enum):
    """What the charm does about a reboot the driver needs."""

    NONE = "none"  # nothing needed, or a reboot we asked for has not happened yet
    BLOCK = "block"  # tell the operator (auto-reboot off, or a reboot did not help)
    DRAIN_AND_REBOOT = "drain-and-reboot"  # cordon, drain, then `unit.reboot()`
    UNCORDON = "uncordon"  # back from our reboot and the driver works: uncordon


def reboot_action(
    reason: str | None, auto_reboot: bool, *, started_at_boot: str | None, current_boot: str
) -> RebootAction:
    """Decide the reboot step.

    Args:
        reason: `reboot_reason()` now (None: the driver works).
        auto_reboot: the `auto-reboot` option.
        started_at_boot: boot id the charm recorded when it cordoned the node to reboot
            (None when it has not).
        current_boot: `boot_id()` now.
    """
    if started_at_boot is not None:
        if started_at_boot == current_boot:
            return RebootAction.NONE  # the reboot is still to come
        return RebootAction.BLOCK if reason else RebootAction.UNCORDON
    if reason is None:
        return RebootAction.NONE
    return RebootAction.DRAIN_AND_REBOOT if auto_reboot else RebootAction.BLOCK


def reboot_blocked_message(reason: str, unit: str, node: str, *, rebooted: bool = False) -> str:
    """Blocked status for a reboot the charm will not do: the reason and what to run."""
    if rebooted:
        return (
            f"driver still not working after reboot: {reason}; check `journalctl -k | grep "
            f"-i nvidia` on {unit}, then `kubectl uncordon {node}`"
        )
    return (
        f"reboot needed: {reason}; run `kubectl drain {node} --ignore-daemonsets "
        f"--delete-emptydir-data`, `juju ssh {unit} -- sudo reboot`, then "
        f"`kubectl uncordon {node}` (or set auto-reboot=true)"
    )


def apt_blocked_message(error: apt.AptError) -> str:
    """Blocked status for a failed install: the package, apt's words, what to check."""
    return (
        f"failed to install {error.package}: {error.detail}; check the package source and "
        "that the nvidia-driver branch exists for this kernel, or set nvidia-driver=none"
    )


# ----------------------------------------------------------------------- container toolkit


@dataclasses.dataclass(frozen=True)
class ToolkitSource:
    """Where nvidia-container-toolkit comes from (the `nvidia-apt-source` option).

    Empty means NVIDIA's repository. Otherwise `<uri> [<suite> [<component>...]]
    [key=<url>]`: a mirror of it (suite `/` when omitted); without `key=` the signing
    key must already be at `TOOLKIT_KEY_PATH` (air-gapped machines). `$(ARCH)` in the URI
    becomes the machine's Debian architecture.
    """

    uri: str = TOOLKIT_URI
    suite: str = "/"
    components: tuple[str, ...] = ()
    key_url: str | None = TOOLKIT_KEY_URL

    @classmethod
    def parse(cls, value: str) -> ToolkitSource:
        """Parse the option value.

        Raises:
            ValueError: the value has no URI or an unknown key; the message shows the form.
        """
        tokens = str(value).split()
        if not tokens:
            return cls()
        key_url = None
        rest = []
        for token in tokens:
            if token.startswith("key="):
                key_url = token.removeprefix("key=")
            else:
                rest.append(token)
        form = "nvidia-apt-source must be '<uri> [<suite> [<component>...]] [key=<url>]'"
        if not rest or not re.match(r"^(https?|file)://\S+$", rest[0]):
            raise ValueError(f"{form}, such as 'http://mirror.example/nvidia/deb/$(ARCH) /'")
        if key_url is not None and not re.match(r"^(https?|file)://\S+$", key_url):
            raise ValueError(f"{form}; key= must be an http(s) or file URL")
        return cls(
            uri=rest[0],
            suite=rest[1] if len(rest) > 1 else "/",
            components=tuple(rest[2:]),
            key_url=key_url,
        )


def install_toolkit(host: Host, source: ToolkitSource, version: str = TOOLKIT_VERSION) -> bool:
    """Configure the package source, then install and hold the pinned toolkit.

    Returns True when anything changed.

    Raises:
        apt.AptError: the source or a package failed; `.package` names it.
    """
    uri = source.uri
    if "$(ARCH)" in uri:
        uri = uri.replace("$(ARCH)", host.run(DPKG, "--print-architecture").strip())
    try:
        changed = apt.add_source(
            host,
            TOOLKIT_SOURCE_NAME,
            uri=uri,
            suite=source.suite,
            components=list(source.components),
            key_url=source.key_url,
            key_path=TOOLKIT_KEY_PATH,
        )
    except ValueError as e:  # no key URL and no keyring on the machine
        raise apt.AptError(TOOLKIT_SOURCE_NAME, str(e), source=True) from None
    return apt.install(host, dict.fromkeys(TOOLKIT_PACKAGES, version), hold=True) or changed


def containerd_runtimes(
    has_gpu: bool, default_nvidia: bool = False
) -> tuple[dict[str, RuntimeHandler], str]:
    """Runtime handlers and default runtime to pass to `containerd.configure`.

    GPU nodes get an `nvidia` handler; pods use it through the `nvidia` RuntimeClass,
    and it becomes the default for every pod only when `default_nvidia` is set.
    """
    if not has_gpu:
        return {}, "runc"
    runtimes = {RUNTIME_NAME: RuntimeHandler(RUNTIME_BINARY)}
    return runtimes, RUNTIME_NAME if default_nvidia else "runc"


# ---------------------------------------------------------------------- labels and taints


def _label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text.strip())[:63]
    return value.strip("-_.")


def node_labels(
    inventory: gpu.GpuInventory, driver: str | None, cuda: str | None
) -> dict[str, str | None]:
    """Every GPU label this charm manages; None means remove it (merge-patch ready).

    A node without GPUs (or one that lost them) gets all of them removed.
    """
    labels: dict[str, str | None] = dict.fromkeys(GPU_LABELS)
    if not inventory.count:
        return labels
    labels[LABEL_PRESENT] = "true"
    labels[LABEL_PRODUCT] = _label_value(inventory.model or "unknown") or None
    labels[LABEL_COUNT] = str(inventory.count)
    if inventory.memory_mib:
        labels[LABEL_MEMORY] = str(inventory.memory_mib)
    if driver:
        labels[LABEL_DRIVER_MAJOR] = driver.split(".", 1)[0]
    if cuda:
        labels[LABEL_CUDA_MAJOR] = cuda.split(".", 1)[0]
    labels[LABEL_MIG_CAPABLE] = "true" if inventory.mig_capable else "false"
    return labels


def node_taints(gpu_taint: bool, has_gpu: bool = True) -> list[dict]:
    """The taints this charm wants on the node (`nvidia.com/gpu=present:NoSchedule`)."""
    if not (gpu_taint and has_gpu):
        return []
    return [{"key": TAINT_KEY, "value": TAINT_VALUE, "effect": TAINT_EFFECT}]


def merge_taints(existing: Sequence[Mapping], wanted: Sequence[Mapping]) -> list[dict]:
    """The node's full taint list: others' taints kept, ours replaced by `wanted`."""
    kept = [dict(t) for t in existing if t.get("key") != TAINT_KEY]
    return kept + [dict(t) for t in wanted]


def apply_node_gpu_state(
    kube: Any, node: str, labels: Mapping[str, str | None], taints: Sequence[Mapping]
) -> bool:
    """Bring the Node's GPU labels and taint to `labels`/`taints`; True when it changed.

    `kube` is a `charms.gpu_k8s.v0.kubeclient.Kube`. Labels set to None are removed;
    taints of other owners are kept. One merge patch, only when something differs.

    Raises:
        LookupError: the Node is not registered (yet).
        KubeError: the API server refused.
    """
    obj = kube.get("v1", "Node", node)
    if obj is None:
        raise LookupError(f"node {node} is not registered")
    current = (obj.get("metadata") or {}).get("labels") or {}
    label_patch = {
        key: value
        for key, value in labels.items()
        if current.get(key) != value and not (value is None and key not in current)
    }
    existing = (obj.get("spec") or {}).get("taints") or []
    merged = merge_taints(existing, taints)
    patch: dict[str, Any] = {}
    if label_patch:
        patch["metadata"] = {"labels": label_patch}
    if merged != existing:
        patch["spec"] = {"taints": merged or None}
    if patch:
        kube.patch("v1", "Node", node, patch)
    return bool(patch)


# ------------------------------------------------------------------------- validate-gpu


def validation_pod(
    node_name: str,
    namespace: str,
    image: str = VALIDATION_IMAGE,
    name: str = "gpu-validation",
    command: Sequence[str] | None = VALIDATION_COMMAND,
) -> dict:
    """A pod pinned to `node_name` that asks for one GPU and runs a CUDA check.

    Pinning goes through the scheduler (node affinity on `metadata.name`) rather than
    `spec.nodeName`, so a node whose GPUs are all taken leaves the pod Pending with a
    reason instead of the kubelet rejecting it.
    """
    if not node_name or not namespace or not image:
        raise ValueError("validation pod needs a node name, a namespace and an image")
    container: dict = {
        "name": "cuda-check",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {GPU_RESOURCE: "1"}},
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    if command:
        container["command"] = list(command)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "gpu-validation",
                "app.kubernetes.io/managed-by": "kubernetes-worker",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "runtimeClassName": RUNTIME_NAME,
            "activeDeadlineSeconds": VALIDATION_TIMEOUT_S,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [node_name],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "tolerations": [
                {"key": TAINT_KEY, "operator": "Exists", "effect": TAINT_EFFECT},
            ],
            "containers": [container],
        },
    }


def validation_progress(pod: Mapping) -> tuple[str, str | None]:
    """(progress line, reason it cannot finish or None) for a validation pod's state."""
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = condition.get("message") or condition.get("reason") or "unschedulable"
            return f"{phase}: not scheduled: {message}", None
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            reason = waiting.get("reason", "waiting")
            line = f"{phase}: {reason}" + (
                f": {waiting['message']}" if waiting.get("message") else ""
            )
            return line, (line if reason in _STUCK_REASONS else None)
    return phase, None


def parse_validation_result(phase: str, logs: str) -> tuple[bool, str]:
    """Pass/fail and a one-line summary from a finished validation pod.

    Passes when the pod Succeeded and its output does not report a failed test.

    Raises:
        ValueError: the pod has not finished (phase other than Succeeded/Failed).
    """
    if phase not in ("Succeeded", "Failed"):
        raise ValueError(f"validation pod has not finished (phase {phase})")
    lines = [line.strip() for line in logs.splitlines() if line.strip()]
    failed_marker = any("FAILED" in line or "error" in line.lower() for line in lines)
    passed = phase == "Succeeded" and not failed_marker
    tail = lines[-1] if lines else "no output"
    verdict = "passed" if passed else "failed"
    return passed, f"CUDA check {verdict} (pod {phase}): {tail}"


@dataclasses.dataclass(frozen=True)
class ValidationOutcome:
    """The result of a `validate-gpu` run."""

    passed: bool
    summary: str
    phase: str
    logs: str


def run_validation(
    kube: Any,
    node: str,
    namespace: str,
    name: str,
    *,
    image: str = VALIDATION_IMAGE,
    timeout: float = 300.0,
    poll: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] = lambda line: None,
) -> ValidationOutcome:
    """Run the validation pod on `node`, wait for it, and delete it whatever happens.

    `progress` gets each new state line (for `event.log`). Stops early when the pod
    cannot finish (image pull failure and the like) and at `timeout`.

    Raises:
        KubeError: the API server refused to create or read the pod.
    """
    from charms.gpu_k8s.v0.kubeclient import poll_until

    kube.create(validation_pod(node, namespace, image, name))
    last = ""

    def outcome() -> ValidationOutcome | None:
        nonlocal last
        pod = kube.get("v1", "Pod", name, namespace)
        if pod is None:
            return ValidationOutcome(False, "validation pod was deleted", "Unknown", "")
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase in ("Succeeded", "Failed"):
            logs = kube.pod_logs(name, namespace, tail_lines=50)
            passed, summary = parse_validation_result(phase, logs)
            return ValidationOutcome(passed, summary, phase, logs)
        line, stuck = validation_progress(pod)
        if line != last:
            progress(line)
            last = line
        if stuck:
            return ValidationOutcome(False, f"CUDA check failed: {stuck}", phase, "")
        return None

    try:
        done = poll_until(outcome, timeout, poll=poll, clock=clock, sleep=sleep)
        return done or ValidationOutcome(
            False, f"CUDA check timed out after {timeout:.0f}s: {last}", "Pending", ""
        )
    finally:
        kube.delete("v1", "Pod", name, namespace)
