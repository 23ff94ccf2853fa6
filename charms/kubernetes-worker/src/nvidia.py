# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What nvidia-smi says on a GPU worker, and what to do about a reboot the driver needs.

The reads (`read_smi`, `read_mig_profiles`, `read_mig_devices`, and `read_gpu_info` for
the gpu-info action) run nvidia-smi through a `Host` and hand its text to the parsers in
`gpu.py` and `mig.py`. The reboot decisions
(`reboot_action`, `reboot_blocked_message`) are pure functions of what the driver step
found (`driver.py`) and of the boot id. The container toolkit is `toolkit.py`, the Node's
GPU labels and taint `gpu_labels.py`, the validate-gpu pod `validation.py`. No ops
imports: the charm turns these into statuses.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

import gpu
import mig

from charms.gpu_k8s.v0.system import CommandError, Host

NVIDIA_SMI = "/usr/bin/nvidia-smi"
SH = "/bin/sh"
# How long any nvidia-smi query may take (seconds). Our choice: NVIDIA documents no
# duration (nvidia-smi(1)); a healthy driver answers in about a second, a hung one never
# (leptonai/gpud#117: "nvidia-smi may get stuck forever, when the nvidia-smi process goes
# into D (uninterruptible) state"). The Host's runner kills it then (its process group,
# then gives a child in D up): every hook's driver step is bounded by it, not by
# system.DEFAULT_TIMEOUT's 30 minutes. A reset (`nvidia-smi -r`) gets longer
# (gpu_repair.RESET_TIMEOUT_S).
SMI_TIMEOUT_S = 30.0
HUNG_DETAIL = f"nvidia-smi did not answer within {SMI_TIMEOUT_S:.0f} s"


def _run_combined(host: Host, *argv: str) -> tuple[int, str]:
    """(exit status, stdout and stderr) of nvidia-smi; (gpu.HUNG_EXIT, HUNG_DETAIL) at timeout.

    nvidia-smi prints NVML errors on stdout and exits non-zero; a Runner keeps only
    stderr of a failed command, so both streams and the status come through sh.
    """
    try:
        out = host.run(
            SH, "-c", '"$@" 2>&1; echo "exit-status=$?"', "sh", *argv, timeout=SMI_TIMEOUT_S
        )
    except CommandError as e:
        if e.returncode != gpu.HUNG_EXIT:
            raise
        return gpu.HUNG_EXIT, HUNG_DETAIL
    body, _, status = out.rstrip("\n").rpartition("exit-status=")
    try:
        return int(status), body
    except ValueError:
        return 1, out


def read_smi(host: Host) -> gpu.SmiReport:
    """Run nvidia-smi (GPU query, then `--version` for CUDA) and report what it said.

    A driver whose nvidia-smi does not know `compute_cap` is asked again without it. One
    that does not answer within SMI_TIMEOUT_S is `SmiState.HUNG`, asked nothing more.
    """
    if not host.path(NVIDIA_SMI).exists():
        return gpu.SmiReport(state=gpu.SmiState.ABSENT, detail=f"{NVIDIA_SMI} not installed")
    query = _run_combined(host, NVIDIA_SMI, *gpu.SMI_QUERY_ARGS)
    if query[0] != 0 and gpu.UNKNOWN_FIELD_TEXT in query[1]:
        query = _run_combined(host, NVIDIA_SMI, *gpu.SMI_QUERY_ARGS_WITHOUT_COMPUTE_CAP)
    version = _run_combined(host, NVIDIA_SMI, "--version") if query[0] == 0 else None
    return gpu.smi_report(query, version)


def read_mig_profiles(host: Host) -> dict[int, dict[str, int]]:
    """{GPU index: {MIG profile: instances}} from `nvidia-smi mig -lgip`; {} when it fails."""
    code, out = _run_combined(host, NVIDIA_SMI, "mig", "-lgip")
    return gpu.parse_mig_profiles(out) if code == 0 else {}


def read_mig_devices(host: Host) -> dict[int, list[dict[str, str]]]:
    """The MIG devices per GPU index from `nvidia-smi -L`; {} when it fails."""
    return list_mig_devices(host) or {}


def list_mig_devices(host: Host) -> dict[int, list[dict[str, str]]] | None:
    """The MIG devices per GPU index from `nvidia-smi -L`; None when it fails."""
    code, out = _run_combined(host, NVIDIA_SMI, "-L")
    return mig.parse_devices(out) if code == 0 else None


def read_gpu_uuids(host: Host) -> set[str] | None:
    """The UUIDs of the GPUs the driver finds (`nvidia-smi -L`); None when it fails.

    By UUID, not index: nvidia-smi numbers the GPUs it finds from 0, so a GPU lost for
    good shifts the indexes of those after it.
    """
    code, out = _run_combined(host, NVIDIA_SMI, "-L")
    return mig.parse_gpu_uuids(out) if code == 0 else None


def read_gpu_info(host: Host) -> dict:
    """The `gpu-info` action's results: nvidia-smi's GPUs, with their MIG profiles and devices.

    Raises:
        ValueError: nvidia-smi did not work; the message says what it reported.
    """
    report = read_smi(host)
    enabled = any(g.mig_mode == "Enabled" for g in report.gpus)
    capable = any(g.mig_mode in ("Enabled", "Disabled") for g in report.gpus)
    return gpu.gpu_info(
        report,
        read_mig_devices(host) if enabled else None,
        read_mig_profiles(host) if capable else None,
    )


# The GPUs' NVLink fabric registration on an NVSwitch machine: the `Fabric` section of
# `nvidia-smi -q` ("State", "Status"), asked for as the `--query-gpu` fields
# `fabric.state` and `fabric.status`, which print the same NVML values
# (nvmlDeviceGetGpuFabricInfoV, "for Hopper or newer fully supported devices").
# NVML's states (NVIDIA/go-nvml pkg/nvml/nvml.h, NVML_GPU_FABRIC_STATE_*): Not Supported,
# Not Started, In Progress, Completed; the status is an nvmlReturn_t that "must be
# checked only if state returns complete" (NVML API reference, nvmlGpuFabricInfo_t),
# `Success` when registration worked. Registration is done only at Completed + Success
# (NVIDIA/NVSentinel#883: "Not Started" -> "In Progress" -> "Completed"; CUDA fails
# with error 802 before it). GPUs without a fabric (pre-Hopper, or no NVSwitch) print
# N/A: only Fabric Manager's service state tells there. Recorded examples:
# tests/fixtures/gpu/h100-sxm5-vm/nvidia-smi-fabric.csv (N/A), tests/fixtures/gpu/fabric/.
FABRIC_QUERY_ARGS = ("--query-gpu=index,fabric.state,fabric.status", "--format=csv,noheader")
FABRIC_COMPLETED = "Completed"
FABRIC_SUCCESS = "Success"
FABRIC_NONE = ("N/A", "[N/A]", "Not Supported", "")


@dataclasses.dataclass(frozen=True)
class Fabric:
    """Why an NVSwitch machine's GPUs are not on their fabric yet.

    `failed`: Fabric Manager did not start, or registration completed with an error (the
    operator must look); otherwise registration is still under way.
    """

    reason: str
    failed: bool = False


def parse_fabric(text: str) -> dict[int, tuple[str, str]]:
    """{GPU index: (state, status)} from `nvidia-smi` with `FABRIC_QUERY_ARGS`."""
    found = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            found[int(parts[0])] = (parts[1], parts[2])
    return found


def _gpus(indices: Sequence[int]) -> str:
    return f"GPU {indices[0]}" if len(indices) == 1 else f"GPUs {', '.join(map(str, indices))}"


def fabric_problem(rows: dict[int, tuple[str, str]]) -> Fabric | None:
    """What keeps the GPUs off their fabric (None: Completed + Success, or no fabric)."""
    failed: dict[tuple[str, str], list[int]] = {}
    waiting: dict[tuple[str, str], list[int]] = {}
    for index, (state, status) in sorted(rows.items()):
        if state in FABRIC_NONE:
            continue
        if state == FABRIC_COMPLETED:
            if status != FABRIC_SUCCESS:
                failed.setdefault((state, status), []).append(index)
        else:
            waiting.setdefault((state, status), []).append(index)
    found = failed or waiting
    if not found:
        return None
    text = "; ".join(
        f"{_gpus(indices)}: State {state}, Status {status}"
        for (state, status), indices in found.items()
    )
    what = "fabric registration failed" if failed else "fabric registration not finished"
    return Fabric(f"{what} (`nvidia-smi -q`, Fabric: {text})", failed=bool(failed))


def read_fabric(host: Host) -> Fabric | None:
    """The GPUs' fabric registration (None: done, or not reported by this driver)."""
    code, out = _run_combined(host, NVIDIA_SMI, *FABRIC_QUERY_ARGS)
    return fabric_problem(parse_fabric(out)) if code == 0 else None


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


def fabric_blocked_message(reason: str, unit: str, node: str, *, cordoned: bool) -> str:
    """Blocked status for Fabric Manager failing after the charm's reboot; it keeps its turn.

    The leader holds back the other NVSwitch nodes meanwhile (`reboot_turns.held_back`).
    """
    held = f"node {node} stays cordoned; " if cordoned else ""
    return (
        f"{reason} after the reboot; check `juju ssh {unit} -- nvidia-smi -q` (Fabric) "
        f"and `journalctl -u nvidia-fabricmanager`; {held}no other NVSwitch node of this "
        "application gets a turn to reboot or reset its GPUs until this one works or is removed"
    )


def reboot_blocked_message(
    reason: str,
    unit: str,
    node: str,
    *,
    rebooted: bool = False,
    install: Sequence[str] = (),
) -> str:
    """Blocked status for a reboot the charm will not do: the reason and what to run.

    `install` names packages to install after the drain and before the reboot.
    """
    if rebooted:  # it keeps its turn; the leader holds back the other GPU nodes' reboots
        return (
            f"driver still not working after reboot: {reason}; check `journalctl -k | grep "
            f"-i nvidia` on {unit}, then `kubectl uncordon {node}`; no other GPU node of this "
            "application gets a turn to reboot or reset its GPUs until this one works or is "
            "removed"
        )
    apt_step = (
        f"`juju ssh {unit} -- sudo apt-get install -y --allow-change-held-packages "
        f"{' '.join(install)}`, "
        if install
        else ""
    )
    return (
        f"reboot needed: {reason}; run `kubectl drain {node} --ignore-daemonsets "
        f"--delete-emptydir-data`, {apt_step}`juju ssh {unit} -- sudo reboot`, then "
        f"`kubectl uncordon {node}` (or set auto-reboot=true)"
    )
