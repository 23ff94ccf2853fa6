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
survives reboots (GPU instances do not persist by themselves).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping

LABEL_CONFIG = "nvidia.com/mig.config"
LABEL_STATE = "nvidia.com/mig.config.state"
LABEL_DEPLOY_MIG_MANAGER = "nvidia.com/gpu.deploy.mig-manager"
LABEL_DEPLOY_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
# What mig-manager sets the plugin's deploy label to while it changes the layout
# (reconfigure.go maybeSetPaused); the worker leaves that value alone.
PAUSED = "paused-for-mig-change"
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
    if not profiles:
        return f"mig-profile {layout}: nvidia-smi lists no MIG profile on this node's GPUs"
    lacking = sorted(i for i, offered in profiles.items() if profile not in offered)
    if lacking:
        offered = sorted(set().union(*(p.keys() for p in profiles.values())))
        return (
            f"mig-profile {layout}: GPU {lacking[0]} offers no {profile} instances; this "
            f"node's GPUs offer {', '.join(offered)}"
        )
    return None


def deploy_labels(ready: bool, mig_capable: bool, layout: str) -> dict[str, str | None]:
    """The deploy labels the worker wants; None removes one.

    The device plugin runs where its label is `true` (mig-manager pauses it there);
    mig-manager runs on MIG-capable nodes whose `mig-profile` names a layout.
    """
    return {
        LABEL_DEPLOY_PLUGIN: "true" if ready else None,
        LABEL_DEPLOY_MIG_MANAGER: "true" if ready and mig_capable and layout else None,
    }


class Step(enum.Enum):
    """Where a node is on the way to its MIG layout."""

    NONE = "none"  # no layout wanted
    START = "start"  # take a turn, drain, label the node
    WAIT = "wait"  # mig-manager is at work
    DONE = "done"  # applied: uncordon, give the turn back
    FAILED = "failed"  # mig-manager could not apply it


def step(layout: str, labels: Mapping[str, str]) -> Step:
    """The next step for `layout`, from the node's labels."""
    if not layout:
        return Step.NONE
    if labels.get(LABEL_CONFIG) != layout:
        return Step.START
    state = labels.get(LABEL_STATE)
    if state == "success":
        return Step.DONE
    if state == "failed":
        return Step.FAILED
    return Step.WAIT


def waiting_message(layout: str, labels: Mapping[str, str]) -> str:
    """Waiting status while mig-manager applies the layout."""
    state = labels.get(LABEL_STATE) or "not started"
    return f"applying MIG layout {layout}: NVIDIA mig-manager reports {state}"


def failed_message(layout: str, node: str, unit: str) -> str:
    """Blocked status when mig-manager failed: where to look and how to retry."""
    return (
        f"MIG layout {layout} failed on node {node}: see `kubectl -n kube-system logs -l "
        f"app=nvidia-mig-manager --field-selector spec.nodeName={node}`; a MIG mode "
        f"change may need a reboot (`juju ssh {unit} -- sudo reboot`: the layout is "
        "applied again at boot); the node stays cordoned and keeps its turn"
    )


# `nvidia-smi -L` with MIG on, as the MIG user guide shows it ("Getting Started with
# MIG"; not captured on hardware here): a GPU line, then one line per MIG device:
#   GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-...)
#     MIG 1g.5gb      Device  0: (UUID: MIG-c6d4f1ef-...)
_GPU_LINE = re.compile(r"^GPU\s+(\d+):")
_MIG_LINE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s+(MIG-[^)\s]+)\)")


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
