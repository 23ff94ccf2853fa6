"""The NVIDIA driver side of a `FakeMachine`: nvidia-smi, modprobe, ubuntu-drivers, uname.

`FakeDriver(machine)` makes the machine behave like an EC2 g5 instance running Ubuntu
24.04 as far as `nvidia.py` can tell; `serve_toolkit()` adds NVIDIA's container toolkit
repository. Shared by the GPU module tests and the kubernetes-worker charm tests.
"""

from __future__ import annotations

import fnmatch
import os

import gpu
import nvidia

from charms.gpu_k8s.v0.system import CommandError
from fakes.machine import ARMORED_KEY, FakeMachine

KERNEL = "6.8.0-1015-aws"
UBUNTU_DRIVERS_DEVICES = """\
== /sys/devices/pci0000:00/0000:00:1e.0 ==
modalias : pci:v000010DEd00002237sv000010DEsd0000152Fbc03sc02i00
vendor   : NVIDIA Corporation
model    : GA102GL [A10G]
driver   : nvidia-driver-535-server - distro non-free
driver   : nvidia-driver-570-server - distro non-free
driver   : nvidia-driver-580-server-open - distro non-free
driver   : nvidia-driver-580 - distro non-free recommended
driver   : nvidia-driver-580-server - distro non-free
driver   : nvidia-driver-570 - distro non-free
driver   : nvidia-driver-535 - distro non-free
driver   : xserver-xorg-video-nouveau - distro free builtin
"""
UBUNTU_DRIVERS_GPGPU = "".join(
    f"nvidia-headless-no-dkms-{b}, (kernel modules provided by linux-modules-nvidia-{b}-aws)\n"
    for b in ("535-server", "570-server", "580-server-open")
)
BRANCHES = ("535", "570", "580")
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: %s\n"
NOT_LOADED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
NVIDIA_REPO = "https://nvidia.github.io/libnvidia-container/stable/deb/amd64"
TOOLKIT = {p: {nvidia.TOOLKIT_VERSION, "1.17.8-1"} for p in nvidia.TOOLKIT_PACKAGES}


class FakeDriver:
    """The NVIDIA driver side of a FakeMachine.

    Userspace comes from `nvidia-utils-<branch>-server` in the fake dpkg database; the
    kernel module loads (`modprobe nvidia`) only when the matching
    `linux-modules-nvidia-<branch>-server-aws` is installed and built for the running
    kernel (`modules_for_running_kernel`); nvidia-smi reports a mismatch when the
    loaded module and the userspace differ, as the real one does.
    """

    def __init__(self, machine: FakeMachine, gpus: int = 4):
        self.machine = machine
        self.gpus = gpus
        self.loaded_branch: str | None = None
        self.modules_for_running_kernel = True
        self.ubuntu_drivers_devices = UBUNTU_DRIVERS_DEVICES
        for branch in BRANCHES:
            version = f"{branch}.95.05-0ubuntu0.24.04.1"
            for name in nvidia.driver_packages(branch, "aws"):
                machine.publish(name, version)
                machine.lists.setdefault(name, set()).add(version)
        machine.write("/proc/sys/kernel/random/boot_id", "b0b1d000-0000-4000-8000-000000000001\n")
        self._apt_get = machine.runner.handlers["apt-get"]
        self._dpkg_query = machine.runner.handlers["dpkg-query"]
        machine.on("apt-get", self.apt_get)
        machine.on("dpkg-query", self.dpkg_query)
        machine.on("modprobe", self.modprobe)
        machine.on("nvidia-smi", self.nvidia_smi)
        machine.on("ubuntu-drivers", self.ubuntu_drivers)
        machine.on("uname", lambda argv, _: f"{KERNEL}\n")
        machine.on("dpkg", lambda argv, _: "amd64\n")
        machine.on("sh", self.sh)

    # -- state helpers ----------------------------------------------------------------

    def userspace_branch(self) -> str | None:
        for name in self.machine.dpkg:
            if name.startswith("nvidia-utils-"):
                return name.split("-")[2]
        return None

    def preinstall(self, branch: str, *, loaded: bool = True) -> None:
        """A host whose image already has a driver (installed outside the charm)."""
        for name in nvidia.driver_packages(branch, "aws"):
            self.machine.dpkg[name] = f"{branch}.95.05-0ubuntu0.24.04.1"
        self._sync_files()
        if loaded:
            self._load(branch)

    def _sync_files(self) -> None:
        if self.userspace_branch():
            self.machine.write(nvidia.NVIDIA_SMI, "#!fake nvidia-smi\n", 0o755)

    def _load(self, branch: str) -> None:
        self.loaded_branch = branch
        self.machine.path("/sys/module/nvidia").mkdir(parents=True, exist_ok=True)

    # -- programs ---------------------------------------------------------------------

    def apt_get(self, argv, input):
        before = self.userspace_branch()
        out = self._apt_get(argv, input)
        # Branches conflict with each other: installing one removes the others (held
        # ones too, as apt-get does with --allow-change-held-packages).
        new = [n for n in self.machine.dpkg if n.startswith("nvidia-utils-")]
        if before and len(new) > 1:
            for name in nvidia.driver_packages(before, "aws"):
                self.machine.dpkg.pop(name, None)
                self.machine.held.discard(name)
        self._sync_files()
        return out

    def dpkg_query(self, argv, input):
        pattern = argv[-1]
        if "*" not in pattern:
            return self._dpkg_query(argv, input)
        names = sorted(n for n in self.machine.dpkg if fnmatch.fnmatch(n, pattern))
        if not names:
            raise CommandError(argv, 1, f"dpkg-query: no packages found matching {pattern}")
        fmt = argv[argv.index("-f") + 1]
        return "".join(
            fmt.replace("${Package}", n).replace("${db:Status-Abbrev}", "ii ") for n in names
        )

    def modprobe(self, argv, _input):
        if argv[-1] != "nvidia":
            self.machine.path(f"/sys/module/{argv[-1]}").mkdir(parents=True, exist_ok=True)
            return ""
        branch = self.userspace_branch()
        modules = f"linux-modules-nvidia-{branch}-server-aws"
        if (
            branch is None
            or modules not in self.machine.dpkg
            or not self.modules_for_running_kernel
        ):
            raise CommandError(
                argv,
                1,
                f"modprobe: FATAL: Module nvidia not found in directory /lib/modules/{KERNEL}",
            )
        self._load(branch)
        return ""

    def nvidia_smi(self, argv, _input):
        branch = self.userspace_branch()
        if branch is None:
            raise CommandError(argv, 127, "nvidia-smi: not found")
        if self.loaded_branch is None:
            raise CommandError(argv, 9, NOT_LOADED)
        if self.loaded_branch != branch:
            raise CommandError(argv, 18, MISMATCH % f"{branch}.95")
        driver = f"{branch}.95.05"
        if "--version" in argv:
            return (
                f"NVIDIA-SMI version  : {driver}\nNVML version        : {branch}.95\n"
                f"DRIVER version      : {driver}\nCUDA Version        : 13.0\n"
            )
        return "".join(
            f"{i}, NVIDIA A10G, 23028, 0, 0, 30, [N/A], {driver}, 00000000:00:{0x1B + i:02X}.0\n"
            for i in range(self.gpus)
        )

    def ubuntu_drivers(self, argv, _input):
        if argv[1:] == ["devices"]:
            return self.ubuntu_drivers_devices
        if argv[1:] == ["list", "--gpgpu"]:
            return UBUNTU_DRIVERS_GPGPU
        raise CommandError(argv, 2, f"fake ubuntu-drivers does not handle {argv[1:]}")

    def sh(self, argv, _input):
        # Emulates: sh -c '"$@" 2>&1; echo "exit-status=$?"' sh PROGRAM ARGS...
        assert argv[1] == "-c" and argv[2] == '"$@" 2>&1; echo "exit-status=$?"'
        inner = argv[4:]
        handler = self.machine.runner.handlers.get(os.path.basename(inner[0]))
        if handler is None or not self.machine.path(inner[0]).exists():
            return f"sh: 1: {inner[0]}: not found\nexit-status=127\n"
        try:
            out, code = handler(inner, None), 0
        except CommandError as e:
            out, code = e.stderr + "\n", e.returncode
        return f"{out}exit-status={code}\n"

    # -- the machine around the driver ------------------------------------------------

    def serve_toolkit(self) -> None:
        """Serve NVIDIA's container toolkit repository and its signing key."""
        self.machine.remote[NVIDIA_REPO] = {p: set(v) for p, v in TOOLKIT.items()}
        self.machine.urls[nvidia.TOOLKIT_KEY_URL] = ARMORED_KEY

    def reboot(self, boot: str = "b0b1d000-0000-4000-8000-000000000002") -> None:
        """Boot again: a new boot id, and the installed driver's module loads if it can."""
        self.machine.write("/proc/sys/kernel/random/boot_id", f"{boot}\n")
        self.machine.path(gpu.REBOOT_REQUIRED_FILE).unlink(missing_ok=True)
        self.modules_for_running_kernel = True
        self.loaded_branch = None
        module = self.machine.path("/sys/module/nvidia")
        if module.is_dir():
            module.rmdir()
        branch = self.userspace_branch()
        if branch and f"linux-modules-nvidia-{branch}-server-aws" in self.machine.dpkg:
            self._load(branch)
