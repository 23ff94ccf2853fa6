# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""containerd from the Ubuntu archive, its CRI config, and the kernel settings it needs.

The config is rendered from data: `runc` (systemd cgroups) is always there, and more
runtime handlers are added through `runtimes`; this is where GPU enablement registers
the `nvidia` handler without touching anything else:

```python
containerd.configure(host, {"nvidia": RuntimeHandler("/usr/bin/nvidia-container-runtime")})
```
Ubuntu 24.04 (noble-updates) ships containerd 2.x, so the file uses config version 3
(`io.containerd.cri.v1.*` plugin names, sandbox image under `pinned_images`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping

from charms.gpu_k8s.v0 import apt
from charms.gpu_k8s.v0.system import SYSTEMCTL, CommandError, Host

LIBID = "d05ade75775e4907ae5bd11555f9b6b6"
LIBAPI = 0
LIBPATCH = 7

# Ubuntu 24.04 (noble) series, pinned with apt preferences and held (see apt.py: the
# archive keeps one version per pocket, so an exact pin breaks at the next update).
# 2026-11-22: noble-updates has containerd 2.2.1-0ubuntu1~24.04.3 (source containerd-app)
# and runc 1.3.4-0ubuntu1~24.04.1; noble-security runc 1.3.3-0ubuntu1~24.04.3; the
# release pocket containerd 1.7.12 and runc 1.1.12 (packages.ubuntu.com, public EC2 apt
# logs). containerd 2.x is what Kubernetes 1.36 needs (1.35 was the last minor to support
# containerd 1.x); containerd's Depends on runc carries no version, so runc gets its own.
# The series is the MAJOR version: Ubuntu's SRU exception for containerd-app and runc-app
# brings new upstream minors (".0 releases are eligible") to stable releases
# (documentation.ubuntu.com/project/SRU/reference/exception-Docker-Updates), so a minor
# pin (2.2.*) would fail on new units once 2.3 replaces 2.2 in noble-updates.
CONTAINERD_PACKAGE = "containerd"
CONTAINERD_SERIES = "2.*"
RUNC_PACKAGE = "runc"
RUNC_SERIES = "1.*"
# The pause image kubeadm 1.34+ expects; pinned so every node runs the same sandbox.
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10.1"
CONFIG_PATH = "/etc/containerd/config.toml"
MODULES_PATH = "/etc/modules-load.d/gpu-k8s.conf"
SYSCTL_PATH = "/etc/sysctl.d/99-gpu-k8s.conf"
MODULES = ("overlay", "br_netfilter")
SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
}
MODPROBE = "/usr/sbin/modprobe"
SYSCTL = "/usr/sbin/sysctl"
SWAPOFF = "/usr/sbin/swapoff"
RUNC = "runc"

_HANDLER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class RuntimeHandler:
    """A CRI runtime handler: the shim type and the OCI runtime binary it runs."""

    binary_path: str
    runtime_type: str = "io.containerd.runc.v2"

    def __post_init__(self):
        if not self.binary_path.startswith("/"):
            raise ValueError(f"runtime binary {self.binary_path!r} must be an absolute path")


def install(host: Host) -> bool:
    """Install containerd and runc from their pinned series and hold both; True when changed.

    The first install takes the newest of each series the archive has (a runc the image
    already had, from the release pocket, moves up too); later calls change nothing
    while the installed versions are in their series.
    """
    packages = {CONTAINERD_PACKAGE: CONTAINERD_SERIES, RUNC_PACKAGE: RUNC_SERIES}
    changed = apt.pin(host, "containerd", packages)
    first = apt.installed_version(host, CONTAINERD_PACKAGE) is None
    return apt.install(host, packages, hold=True, upgrade=first) or changed


# `apt-get -s` (apt-get(8) --simulate) prints what an install would do without doing
# it, one "Inst <package> [<installed>] (<candidate> <archive> [<arch>])" line per
# package it would change (apt's simulation output, apt-pkg/algorithms.cc pkgSimulate).
_SIMULATED = re.compile(r"^Inst (?P<name>\S+) \[(?P<old>[^\]]+)\] \((?P<new>\S+)", re.M)


def pending_updates(host: Host, *, refresh: bool = True) -> dict[str, str]:
    """{package: newer version} the archive has for containerd/runc within their series.

    Held packages never move by themselves (apt-mark(8) "hold: ... will not be
    automatically installed, upgraded or removed", and unattended-upgrades skips them),
    so a security update in noble-security or -updates waits for `update`, which the
    charms run on a drained node in its turn. `refresh` runs `apt-get update` first.

    Raises:
        apt.AptError: the package lists could not be refreshed or apt failed.
    """
    if apt.installed_version(host, CONTAINERD_PACKAGE) is None:
        return {}
    if refresh:
        apt.update(host)
    specs = [f"{CONTAINERD_PACKAGE}={CONTAINERD_SERIES}", f"{RUNC_PACKAGE}={RUNC_SERIES}"]
    argv = [apt.APT_GET, "-s", "install", "--allow-change-held-packages", *specs]
    try:
        out = host.runner.run(argv, env=apt.APT_ENV)
    except CommandError as e:
        raise apt.AptError(CONTAINERD_PACKAGE, e.last_line) from None
    return {m["name"]: m["new"] for m in _SIMULATED.finditer(out) if m["old"] != m["new"]}


# How often a joined node asks apt for containerd/runc updates (`updates_due`): the
# worker and the control plane both take what is pending in a drain turn. At most once a
# day: the lists refresh and a simulated install cost seconds, and Ubuntu publishes
# security fixes for these packages days apart at the most.
CHECK_INTERVAL = 24 * 3600.0
# upgrade-charm asks apt again, refreshing the lists unless they are this fresh (a second
# upgrade-charm right after the first changes nothing on the machine).
REFRESH_AFTER = 3600.0


def updates_due(last_checked: float | None, now: float, *, upgrading: bool) -> tuple[bool, bool]:
    """(ask apt now, refresh its lists first): a day since the last check, or upgrade-charm."""
    age = None if last_checked is None else now - last_checked
    if age is None or not 0 <= age < CHECK_INTERVAL:
        return True, True
    return upgrading, upgrading and age >= REFRESH_AFTER


def pending_message(pending: Mapping[str, str]) -> str:
    """`containerd/runc security update pending: runc 1.3.4-0ubuntu1~24.04.2`."""
    found = ", ".join(f"{name} {version}" for name, version in sorted(pending.items()))
    return f"containerd/runc security update pending: {found}"


def update(host: Host, versions: Mapping[str, str]) -> bool:
    """Install `versions` (from `pending_updates`), held, and restart containerd.

    Ubuntu's SRU exception for containerd-app and runc-app (see CONTAINERD_SERIES) brings
    security and bug fixes to noble as new versions of the same series: this is how they
    reach a node deployed before them. Running containers carry on under their shims; the
    caller drains the node first (runc runs every container start). True when it changed.

    Raises:
        apt.AptError: apt failed.
    """
    if not apt.install(host, dict(versions), hold=True, refresh=False):
        return False
    host.run(SYSTEMCTL, "restart", "containerd")
    return True


def _toml(value: str) -> str:
    # A TOML basic string has JSON's escaping rules for the characters used here.
    return json.dumps(value)


def render_config(
    runtimes: Mapping[str, RuntimeHandler] | None = None,
    default_runtime: str = RUNC,
    *,
    sandbox_image: str = SANDBOX_IMAGE,
) -> str:
    """Return the containerd 2.x (config version 3) file for these runtime handlers.

    Raises:
        ValueError: a handler name is invalid, overrides `runc`, or the default runtime
            is not one of the handlers.
    """
    extra = dict(runtimes or {})
    if RUNC in extra:
        raise ValueError("the runc handler is built in; register other handlers by name")
    for name in extra:
        if not _HANDLER_NAME.match(name):
            raise ValueError(f"runtime handler name {name!r} must be a DNS label")
    if default_runtime != RUNC and default_runtime not in extra:
        raise ValueError(f"default runtime {default_runtime!r} is not a registered handler")
    cri = "plugins.'io.containerd.cri.v1.runtime'"
    out = [
        "# Managed by the gpu-k8s charms; local changes are overwritten.",
        "version = 3",
        "",
        "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
        f"  sandbox = {_toml(sandbox_image)}",
        "",
        f"[{cri}.containerd]",
        f"  default_runtime_name = {_toml(default_runtime)}",
    ]
    handlers = {RUNC: None, **extra}
    for name, handler in handlers.items():
        runtime_type = handler.runtime_type if handler else "io.containerd.runc.v2"
        out += [
            "",
            f"[{cri}.containerd.runtimes.{name}]",
            f"  runtime_type = {_toml(runtime_type)}",
        ]
        out += ["", f"[{cri}.containerd.runtimes.{name}.options]", "  SystemdCgroup = true"]
        if handler:
            out.append(f"  BinaryName = {_toml(handler.binary_path)}")
    return "\n".join(out) + "\n"


def configure(
    host: Host,
    runtimes: Mapping[str, RuntimeHandler] | None = None,
    default_runtime: str = RUNC,
    *,
    sandbox_image: str = SANDBOX_IMAGE,
) -> bool:
    """Write the config; restart containerd only when the file changed (return True)."""
    content = render_config(runtimes, default_runtime, sandbox_image=sandbox_image)
    if not host.write(CONFIG_PATH, content):
        return False
    host.run(SYSTEMCTL, "restart", "containerd")
    return True


def prepare_kernel(host: Host) -> bool:
    """Load and persist overlay + br_netfilter, set forwarding sysctls, turn swap off.

    Returns True when anything changed. Modules already loaded are not probed again,
    and `sysctl --system` runs only when the drop-in changed.
    """
    changed = host.write(MODULES_PATH, "".join(f"{m}\n" for m in MODULES))
    for module in MODULES:
        if not host.path(f"/sys/module/{module}").exists():
            host.run(MODPROBE, module)
            changed = True
    sysctl = "".join(f"{key} = {value}\n" for key, value in SYSCTLS.items())
    if host.write(SYSCTL_PATH, sysctl):
        host.run(SYSCTL, "--system")
        changed = True
    return disable_swap(host) or changed


def disable_swap(host: Host) -> bool:
    """Turn swap off now and comment it out of /etc/fstab; return True when it changed."""
    changed = False
    swaps = host.read("/proc/swaps") or ""
    if len([line for line in swaps.splitlines() if line.strip()]) > 1:  # header + entries
        host.run(SWAPOFF, "-a")
        changed = True
    fstab = host.read("/etc/fstab") or ""
    lines = fstab.splitlines(keepends=True)
    edited = False
    for i, line in enumerate(lines):
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith("#") and fields[2] == "swap":
            lines[i] = f"# disabled for kubelet by gpu-k8s: {line}"
            edited = True
    if edited:
        host.write("/etc/fstab", "".join(lines))
    return changed or edited
