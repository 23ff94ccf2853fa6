# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""MIG layouts through NVIDIA's k8s-mig-manager (no ops imports).

The control plane runs NVIDIA's mig-manager (NVIDIA/mig-parted v0.15.0) on nodes
labelled `nvidia.com/gpu.deploy.mig-manager=true`, with a mig-parted config whose named
layouts (`all-disabled`, `all-enabled`, `all-<profile>`) it writes from the GPU models the
workers report. A worker whose `mig-profile` option names a layout takes a reboot turn,
drains its node, and sets `nvidia.com/mig.config=<layout>`; mig-manager then pauses the
device plugin (`nvidia.com/gpu.deploy.device-plugin=paused-for-mig-change`), applies the
layout with nvidia-mig-parted, brings the plugin back and reports in
`nvidia.com/mig.config.state`: `pending`, `rebooting`, `success` or `failed`
(pkg/mig/reconfigure/reconfigure.go). On `success` the worker uncordons the node and
gives its turn back. mig-manager applies the labelled layout again when it starts, so it
survives reboots (GPU instances do not persist by themselves); an empty `mig-profile`
therefore leaves the last layout in place, and `all-disabled` turns MIG off.

The worker labels the node for mig-manager only after draining it, keeps it cordoned
(and keeps its turn) while a change is in flight whatever else happens, starts no new
layout while mig-manager still works on another, and uncordons only once nvidia-smi shows
the layout: mig-manager reports `success` for a layout with no entry for this GPU model
(mig-parted's assert walks only the entries whose device filter matches).

A GPU quarantine mid-change (issue 32): mig-manager tolerates the quarantine's NoExecute
taint (the control plane's mig_manager.py; GPU Operator v26.7.0's DaemonSet tolerates only
`nvidia.com/gpu` NoSchedule), so it stays on the node, but a repair may stop it mid-apply
(the gate's and a reset's pause of the GPU clients, a reboot): reconfigure.go `Run` writes
the state only at its end (`setState`), so `pending` and the device plugin's
`paused-for-mig-change` stay. Nothing needs to finish them: when its container starts
again, nvidia-mig-manager's informer hands the label's value to its loop (mig-parted
v0.15.0 cmd/nvidia-mig-manager/main.go `ContinuouslySyncMigConfigChanges` AddFunc, then
`start` -> `migReconfigure`), and `Run` looks at the old state only for `rebooting`
(`checkMigModeChangeRequired`): it asserts the layout, applies it again when the GPUs do
not hold it, brings the plugin back (`maybeSetTrue` turns the `paused-for-mig-change` it
read into `true`) and ends in `success` or `failed`. The worker keeps the node cordoned
and its turn through the readmission until then (gpu_health.readmit), and mig-manager's
clock (`TIMEOUT_S`) starts again while a GPU is quarantined (mig_layout.advance). After a
repair (a reboot, or a reset and its pause of mig-manager) the gate itself waits for the
layout (`gate_wait`).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence

LABEL_CONFIG = "nvidia.com/mig.config"
LABEL_STATE = "nvidia.com/mig.config.state"
LABEL_DEPLOY_MIG_MANAGER = "nvidia.com/gpu.deploy.mig-manager"
LABEL_DEPLOY_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
# What mig-manager sets the plugin's deploy label to while it changes the layout
# (reconfigure.go maybeSetPaused); the worker leaves that value alone.
PAUSED = "paused-for-mig-change"
# Where the control plane runs NVIDIA's MIG manager (its literals.GPU_NAMESPACE: the
# privileged GPU components' namespace, kube-system before issue 29).
MIG_MANAGER_NAMESPACE = "gpu-k8s-gpu"
# Layout names as mig-parted's own configs name them (deployments/systemd/
# config-default.yaml): all-disabled, all-enabled, all-<profile> such as all-1g.10gb;
# a profile's `+me` is written `.me` (pkg/mig/builder/builder.go normalizeProfileName),
# a label value cannot hold `+`.
_LAYOUT = re.compile(r"^all-(disabled|enabled|\d+g\.\d+gb(\.me)?)$")
CHOICES = "empty (leave MIG alone), all-disabled, all-enabled or all-<profile> such as all-1g.10gb"


def validate(value: str) -> str:
    """The `mig-profile` option, stripped; ValueError saying the forms when it is none."""
    value = value.strip()
    if value and not _LAYOUT.match(value):
        raise ValueError(f"must be {CHOICES}, not {value[:40]!r}")
    return value


def unavailable(layout: str, profiles: Mapping[int, Mapping[str, int]]) -> str | None:
    """Why this node's GPUs cannot take `layout`, or None when every MIG GPU offers it."""
    if layout in ("all-disabled", "all-enabled"):
        return None
    profile = layout.removeprefix("all-").replace(".me", "+me")
    if not profiles:  # drivers up to 535 list profiles only with MIG mode on
        return (
            f"mig-profile {layout}: nvidia-smi lists no MIG profile on this node's GPUs; "
            "set mig-profile=all-enabled first, then the layout"
        )
    lacking = sorted(i for i, offered in profiles.items() if profile not in offered)
    if lacking:
        offered = sorted(set().union(*(p.keys() for p in profiles.values())))
        return (
            f"mig-profile {layout}: GPU {lacking[0]} offers no {profile} instances; this "
            f"node's GPUs offer {', '.join(offered)}"
        )
    return None


class Act(enum.Enum):
    """What the worker does about its node's MIG layout now."""

    NOTHING = "nothing"
    START = "start"  # take a turn, drain, label the node for mig-manager
    WAIT = "wait"  # mig-manager is at work (or has to finish another layout first)
    VERIFY = "verify"  # mig-manager says success: check nvidia-smi, then uncordon
    UNCORDON = "uncordon"  # done (or no longer wanted): uncordon, give the turn back
    BLOCK = "block"  # the operator must act; the node stays as it is
    FAILED = "failed"  # mig-manager failed: Blocked with `failed_message`


@dataclasses.dataclass(frozen=True)
class Decision:
    """An `Act` and the status message that goes with it."""

    act: Act
    message: str = ""


# How long mig-manager may leave a change unanswered before the unit says so: it leaves
# the state `pending` when the device plugin does not go away, and sets none when it
# cannot reach systemd (reconfigure.go Run, reconfigure.New).
TIMEOUT_S = 30 * 60


def in_flight_layout(labels: Mapping[str, str]) -> str | None:
    """The layout mig-manager has not finished (no `success` or `failed` yet), or None."""
    current, state = labels.get(LABEL_CONFIG), labels.get(LABEL_STATE)
    return current if current is not None and state not in ("success", "failed") else None


def decide(
    layout: str,
    labels: Mapping[str, str],
    *,
    ready: bool,
    cordoned: bool,
    mig_strategy: str,
    profiles: Mapping[int, Mapping[str, int]],
    elapsed: float | None,
) -> Decision:
    """The next step towards `layout` (the `mig-profile` option) on a MIG-capable node.

    Args:
        layout: the wanted layout, empty when none is.
        labels: the Node's labels now.
        ready: the driver works (a change is only started then).
        cordoned: this unit cordoned the node for a MIG change.
        mig_strategy: the control plane's device plugin strategy.
        profiles: `nvidia-smi mig -lgip` per GPU index.
        elapsed: seconds since this unit handed the change to mig-manager, if it did.
    """
    current, state = labels.get(LABEL_CONFIG), labels.get(LABEL_STATE)
    in_flight = in_flight_layout(labels) is not None
    if not layout:
        if cordoned and in_flight:
            return Decision(Act.WAIT, waiting_message(current or "", labels))
        return Decision(Act.UNCORDON if cordoned else Act.NOTHING)
    if layout != "all-disabled" and mig_strategy == "none":
        return Decision(
            Act.BLOCK,
            f"mig-profile {layout} needs the control plane's mig-strategy set to single or "
            "mixed: with none the device plugin offers MIG GPUs as whole GPUs",
        )
    if in_flight and current != layout:
        return Decision(
            Act.WAIT, f"MIG layout {layout} waits for NVIDIA mig-manager to finish {current}"
        )
    if current != layout:
        problem = unavailable(layout, profiles)
        if problem:
            return Decision(Act.BLOCK, problem)
        return Decision(Act.START if ready else Act.NOTHING)
    if state == "failed":
        return Decision(Act.FAILED)
    if state == "success":
        return Decision(Act.VERIFY if cordoned else Act.NOTHING)
    if elapsed is not None and elapsed > TIMEOUT_S:
        return Decision(
            Act.BLOCK,
            f"MIG layout {layout}: NVIDIA mig-manager has not answered for "
            f"{int(elapsed // 60)} minutes (state: {state or 'not started'}); check its pod "
            f"in {MIG_MANAGER_NAMESPACE}",
        )
    return Decision(Act.WAIT, waiting_message(layout, labels))


# The repair gate on a node with a MIG layout (issue 32): MIG devices do not survive a
# reboot (mig-parted v0.15.0 README.md: nvidia-mig-parted "does not ensure that MIG device
# configurations will persist across node reboots"; only the MIG mode is kept, written by a
# GPU reset, deployments/systemd/README.md), and mig-manager makes them again when its pod
# starts after the boot: cmd/nvidia-mig-manager/main.go `start` runs `migReconfigure` for
# the label's value, then pkg/mig/reconfigure/reconfigure.go `Run` (e2d5ad1f): `assert`
# finds the devices missing, so `pending` (line 158), the GPU clients paused (each waited
# for up to 5 minutes, `waitForPodsToBeDeleted`), the apply, the clients back, then
# `success` (line 239); any step's error writes `failed`. A `success` left from before
# the repair says nothing of this boot, so the gate waits for both: the state `success` and
# nvidia-smi showing the layout (`applied`). Bounded by TIMEOUT_S, the time the worker
# gives mig-manager for any change: its two pod waits, the apply and its pod's start fit.
GATE_WAIT_S = TIMEOUT_S


def gate_wait(labels: Mapping[str, str], *, shown: bool, waited: float) -> Decision:
    """Whether the repair gate may run on this node's MIG layout now.

    Act.NOTHING: no layout is labelled (the gate runs as on any node), or mig-manager
    reports `success` and nvidia-smi shows the layout (`shown`: `applied`). Act.WAIT with
    what it waits for; Act.FAILED with the line the gate reports, when mig-manager reports
    `failed` or `waited` (seconds since the wait began) passed GATE_WAIT_S.
    """
    layout, state = labels.get(LABEL_CONFIG), labels.get(LABEL_STATE)
    if not layout:
        return Decision(Act.NOTHING)
    if state == "success" and shown:
        return Decision(Act.NOTHING)
    pod = f"the nvidia-mig-manager pod's log in {MIG_MANAGER_NAMESPACE}"
    if state == "failed":
        return Decision(
            Act.FAILED,
            f"NVIDIA mig-manager reports failed for MIG layout {layout} (not a GPU check): "
            f"see {pod}",
        )
    said = state or "not started"
    if state == "success":
        said = "success, not on the GPUs yet"
    if waited > GATE_WAIT_S:
        return Decision(
            Act.FAILED,
            f"NVIDIA mig-manager did not apply MIG layout {layout} within "
            f"{int(waited // 60)} minutes (reports {said}): see {pod}",
        )
    return Decision(
        Act.WAIT,
        f"the repair gate waits for NVIDIA mig-manager to apply MIG layout {layout} "
        f"(reports {said}, {int(waited // 60)} of {GATE_WAIT_S // 60} minutes)",
    )


def applied(
    layout: str,
    modes: Sequence[str | None],
    devices: Mapping[int, Sequence[Mapping[str, str]]],
    profiles: Mapping[int, Mapping[str, int]],
) -> bool:
    """Whether nvidia-smi shows `layout` on every MIG-capable GPU.

    `modes` are the GPUs' `mig.mode.current` by index (None for GPUs without MIG).
    """
    capable = [i for i, mode in enumerate(modes) if mode in ("Enabled", "Disabled")]
    if layout == "all-disabled":
        return all(modes[i] == "Disabled" for i in capable)
    if not all(modes[i] == "Enabled" for i in capable):
        return False
    if layout == "all-enabled":
        return True
    profile = layout.removeprefix("all-").replace(".me", "+me")
    return all(
        sum(d["profile"] == profile for d in devices.get(i, ()))
        == profiles.get(i, {}).get(profile, -1)
        for i in capable
    )


def waiting_message(layout: str, labels: Mapping[str, str]) -> str:
    """Waiting status while mig-manager applies the layout."""
    state = labels.get(LABEL_STATE) or "not started"
    return f"applying MIG layout {layout}: NVIDIA mig-manager reports {state}"


def failed_message(layout: str, node: str, unit: str) -> str:
    """Blocked status when mig-manager failed: where to look and how to retry."""
    return (
        f"MIG layout {layout} failed on node {node}: see `kubectl -n {MIG_MANAGER_NAMESPACE} "
        f"logs $(kubectl -n {MIG_MANAGER_NAMESPACE} get pod -l app=nvidia-mig-manager "
        "--field-selector "
        f"spec.nodeName={node} -o name)`; a MIG mode change may need a reboot (`juju ssh "
        f"{unit} -- sudo reboot`: the layout is applied again at boot); the node stays "
        "cordoned and keeps its turn"
    )


# `nvidia-smi -L` with MIG on, as the MIG user guide shows it ("Getting Started with
# MIG"; not captured on hardware here): a GPU line, then one line per MIG device:
#   GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-...)
#     MIG 1g.5gb      Device  0: (UUID: MIG-c6d4f1ef-...)
_GPU_LINE = re.compile(r"^GPU\s+(\d+):")
_MIG_LINE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s+(MIG-[^)\s]+)\)")


_GPU_UUID = re.compile(r"^GPU\s+\d+:.*\(UUID:\s+(GPU-[^)\s]+)\)")


def parse_gpu_uuids(text: str) -> set[str]:
    """The UUIDs of the GPUs `nvidia-smi -L` lists (not their MIG devices')."""
    return {m.group(1) for m in map(_GPU_UUID.match, text.splitlines()) if m}


def parse_devices(text: str) -> dict[int, list[dict[str, str]]]:
    """{GPU index: [{"profile", "device", "uuid"}]} of the MIG devices `nvidia-smi -L` lists."""
    devices: dict[int, list[dict[str, str]]] = {}
    gpu = None
    for line in text.splitlines():
        head = _GPU_LINE.match(line)
        if head:
            gpu = int(head.group(1))
            continue
        mig = _MIG_LINE.match(line)
        if mig and gpu is not None:
            devices.setdefault(gpu, []).append(
                {"profile": mig.group(1), "device": mig.group(2), "uuid": mig.group(3)}
            )
    return devices
