# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""NVIDIA's container toolkit on a GPU worker: its source, the pinned install, its config.

The toolkit gives containerd the `nvidia` runtime handler (`containerd_runtimes`), which
pods reach through the `nvidia` RuntimeClass. Packages go through
`charms.gpu_k8s.v0.apt` (pinned, held), the runtime handler through
`charms.gpu_k8s.v0.containerd`; every program runs through a `Host`. No ops imports.
"""

from __future__ import annotations

import dataclasses
import re

from charms.gpu_k8s.v0 import apt
from charms.gpu_k8s.v0.containerd import RuntimeHandler
from charms.gpu_k8s.v0.system import Host

DPKG = "/usr/bin/dpkg"

# NVIDIA's container toolkit repository (a flat repository per architecture).
TOOLKIT_SOURCE_NAME = "nvidia-container-toolkit"
TOOLKIT_URI = "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
TOOLKIT_KEY_URL = "https://nvidia.github.io/libnvidia-container/gpgkey"
TOOLKIT_KEY_PATH = "/etc/apt/keyrings/nvidia-container-toolkit.gpg"
# Pinned release; the four packages are released together at the same version.
# 2026-11-23: v1.20.0 (tagged 2026-08-12) is the newest release tag in
# NVIDIA/nvidia-container-toolkit; its CHANGELOG adds the `update-application-profile`
# CDI hook that the device plugin v0.20.0 (the control plane's pin, built on the same
# toolkit code) writes into CDI specs. Debian packages are versioned `<tag>-1`.
TOOLKIT_VERSION = "1.20.0-1"
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
RUNTIME_NAME = "nvidia"
RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
NVIDIA_CTK = "/usr/bin/nvidia-ctk"
# The toolkit's config (api/config/v1 RelativeFilePath under /etc). Its default accepts
# NVIDIA_VISIBLE_DEVICES from unprivileged containers (`GetDefault`:
# AcceptEnvvarUnprivileged true), so any pod run by the nvidia runtime could claim every
# GPU without asking the scheduler; the charm turns that off with upstream's own
# `nvidia-ctk config --in-place --set`. GPUs then come only from the device plugin (CDI).
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
ENVVAR_UNPRIVILEGED = "accept-nvidia-visible-devices-envvar-when-unprivileged"


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
    changed = apt.install(host, dict.fromkeys(TOOLKIT_PACKAGES, version), hold=True) or changed
    return configure_toolkit(host) or changed


def configure_toolkit(host: Host) -> bool:
    """Refuse NVIDIA_VISIBLE_DEVICES from unprivileged containers; True when changed."""
    text = host.read(TOOLKIT_CONFIG) or ""
    if re.search(rf"^\s*{ENVVAR_UNPRIVILEGED}\s*=\s*false\s*$", text, re.MULTILINE):
        return False
    host.run(NVIDIA_CTK, "config", "--in-place", "--set", f"{ENVVAR_UNPRIVILEGED}=false")
    return True


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


def toolkit_blocked_message(error: apt.AptError) -> str:
    """Blocked status for a failed container toolkit install."""
    return (
        f"failed to install {error.package}: {error.detail}; check that nvidia-apt-source "
        "(empty: NVIDIA's repository) is reachable from this machine and has "
        f"nvidia-container-toolkit {TOOLKIT_VERSION}"
    )
