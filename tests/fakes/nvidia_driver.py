"""The NVIDIA driver side of a `FakeMachine`: kernels, driver packages, modprobe, nvidia-smi.

`FakeDriver(machine)` makes the machine behave like an EC2 g5 instance running Ubuntu
24.04 as far as the charm can tell; `serve_toolkit()` adds NVIDIA's container toolkit
repository. Shared by the GPU module tests and the kubernetes-worker charm tests.

What it models, and where each rule comes from:

- Kernels. A kernel is an ABI (`6.8.0-1015-aws`) with its `linux-image-<abi>` package
  and `/boot/vmlinuz-<abi>`; the metapackage `linux-image-aws` depends on the newest
  one. The machine boots the highest installed version (grub-mkconfig's 10_linux sorts
  kernels with version_sort, newest first, and Ubuntu's GRUB_DEFAULT is 0); `uname -r`
  names the running one.
- Prebuilt modules (linux-restricted-modules). `linux-modules-nvidia-<b>-<variant>-<abi>`
  holds nvidia.ko for ONE kernel ABI and depends on its `linux-image-<abi>` and tightly
  on one driver version's userspace core (kernel-team list 2021-03, "Make the nvidia abi
  packages depend on nvidia-kernel-common"; ubuntu-drivers-common's test archive:
  `linux-modules-nvidia-440-server-5.4.0-25-generic` Depends `linux-image-5.4.0-25-generic`).
  The flavour metapackage `linux-modules-nvidia-<b>-<variant>-aws` depends on the ABI
  package of the archive's current kernel. apt refuses any install that would leave an
  ABI package, or fabric manager, at another driver version than the userspace, with
  apt's "unmet dependencies ... held broken packages" error.
- The archive keeps one version per pocket: a kernel update (`kernel_update`) or a driver
  SRU (`driver_sru`) replaces what the pockets serve, and unattended-upgrades then moves
  whatever is not held and whose dependencies it can satisfy, as on an EC2 cloud image
  (wiki.ubuntu.com/UsingCloudGuestImages: images update themselves, kernels included).
- modprobe loads nvidia.ko only from the ABI package of the RUNNING kernel; a GPU bound
  to nouveau makes it fail with "No such device" until nouveau is blacklisted, the
  initramfs rebuilt and the machine rebooted (Ubuntu server docs, "No devices were
  found"); nvidia-smi then cannot reach a loaded module and says so (exit 9, as with no
  module). nvidia-smi reports a mismatch when the loaded module's driver version differs
  from the userspace's (Ubuntu server docs, "Driver/library version mismatch").
- nouveau's blacklist comes with the driver (canonical/nvidia-graphics-drivers
  debian/templates, read 2026-11-27): `nvidia-headless-no-dkms-<b>-server[-open]`
  depends on `nvidia-kernel-common-<b>-server` at its version (control.in), which
  installs `/lib/modprobe.d/nvidia-graphics-drivers.conf`
  (nvidia-kernel-common-flavour.install.in; its nouveau lines as the review gpu.md N11
  of 2026-11-26 quotes Ubuntu's and pop-os/nvidia-graphics-drivers, a fork of that
  packaging, has them in debian/nvidia-graphics-drivers.conf) and whose postinst runs
  `update-initramfs -u` "so that the blacklist ends up in the initramfs"
  (nvidia-kernel-common-flavour.postinst.in; inside apt, so the charm's runner sees no
  such command). mkinitramfs copies
  /etc/modprobe.d/*.conf and /lib/modprobe.d/*.conf into the image (initramfs-tools
  mkinitramfs, "module-init-tools"), so a boot after either blacklist leaves nouveau
  unloaded.
- NVSwitch machines (`nvswitch=True`): CUDA needs nvidia-fabricmanager running; the
  service exists once `nvidia-fabricmanager-<b>` is installed and starts only with the
  nvidia module loaded. Hopper and newer GPUs (compute capability 9.0 and up; NVML's
  fabric info is "for Hopper or newer fully supported devices") report their fabric
  registration as `nvidia-smi -q`'s Fabric section and the `fabric.state` /
  `fabric.status` query fields do: `In Progress` / `N/A` while Fabric Manager is not
  running (the recorded outputs in tests/fixtures/gpu/fabric/), `Completed` with
  `fabric_status` (`Success` unless a test says otherwise) once it runs; `N/A` on
  every other machine (tests/fixtures/gpu/h100-sxm5-vm/nvidia-smi-fabric.csv).
- Manual and automatic marks (apt's /var/lib/apt/extended_states, `Auto-Installed: 1`
  stanzas, which `apt-mark showauto` reads): what `apt-get install` is asked for is
  manual, what it pulls in is automatic, `apt-mark auto|manual` change the mark.
  `autoremove` (`apt-get autoremove`, and unattended-upgrades' Remove-Unused-Kernel-
  Packages, on by default on Ubuntu) removes automatic packages no manual one needs
  through the dependencies above (linux-image-aws -> its kernel's image, the modules
  metapackage -> its ABI package -> that kernel's image), except the kernels apt's
  /etc/kernel/postinst.d/apt-auto-removal keeps: the running one, the latest, and the
  second-latest when the latest runs (its header comment, quoted on forum threads of the
  stored pages; Steve Langasek's script in apt). It keeps them as APT::NeverAutoRemove
  patterns `^linux-.*-<abi>$` in /etc/apt/apt.conf.d/01autoremove-kernels, so every
  linux-* package of a kept kernel, its nvidia modules too, stays: that pattern is as
  remembered from apt's debian/apt.auto-removal.sh, not re-read here.
- The container toolkit (NVIDIA/nvidia-container-toolkit v1.20.0 packaging): installing
  nvidia-container-toolkit-base writes the default `/etc/nvidia-container-runtime/
  config.toml` (its postinst runs `nvidia-ctk config --in-place`; the default accepts
  NVIDIA_VISIBLE_DEVICES from unprivileged containers, api/config/v1 `GetDefault`).
- ubuntu-drivers prints what ubuntu-drivers-common's `list --gpgpu [--recommended]`
  prints (canonical/ubuntu-drivers-common d3d78560, 2026-08-11: `ubuntu-drivers` list()
  sorts with `_cmp_gfx_alternatives_gpgpu`, reverse=True): every driver package that
  fits, best first by fit level (`-server-open` 3, `-server` 2, `-open` 1, desktop 0
  where the package prefers open modules, `_is_open_prefered`: `Prefer-Variant: Open`,
  or no such field and branch >= 560; `-server` 3, desktop 2, `-server-open` 1, `-open`
  0 otherwise), then `Support: PB` before any other, then `LTSB`, then the name, with the
  kernel modules metapackage for the installed kernel flavour.
- The branches it lists are noble's (canonical/nvidia-graphics-drivers, branch heads of
  2026-04-28, `debian/control` of each `<b>-server-noble`; read 2026-11-27): 535-server
  (535.288.01; LTSB, no Prefer-Variant), 580-server (580.126.20; LTSB, Prefer-Variant
  Open) and 595-server (595.58.03; PB, Prefer-Variant Open), `SUPPORT`. 570-server and
  590-server are transitional there ("Transitional package for upgrades", depending on
  580 and 595; no Modaliases, so ubuntu-drivers lists neither); this fake still serves
  570 whole, as an older image has it installed. 470-server (LTSB, 2024) is left out:
  whether its Modaliases match these GPUs was not checked. `apt-cache show` prints the
  `Support` and `Prefer-Variant` fields of `nvidia-driver-<b>-<variant>` (the `XB-`
  fields of debian/control, as detect.py `_pkg_get_support` reads them).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable

import gpu
import nvidia
import toolkit

from charms.gpu_k8s.v0.system import DEFAULT_TIMEOUT, CommandError
from fakes.machine import ARMORED_KEY, FakeMachine, Service

KERNEL = "6.8.0-1015-aws"
FLAVOUR = "aws"
BRANCHES = ("535", "570", "580", "595")
# noble's `XB-Support` and `XB-Prefer-Variant` of nvidia-driver-<b>-server[-open] (see the
# docstring); a branch missing here is not listed by ubuntu-drivers (570: transitional).
SUPPORT = {"535": "LTSB", "580": "LTSB", "595": "PB"}
PREFER_VARIANT = {"535": None, "580": "Open", "595": "Open"}
VARIANTS = ("server", "server-open")
# The id of the CUDA process on GPU i is PROCESS_BASE + i (`FakeDriver.gpu_in_use`), and
# the id of its worker thread, the one that calls the driver, THREAD_BASE + i.
PROCESS_BASE = 4200
THREAD_BASE = 5200
# Branches from 560 on prefer open kernel modules (ubuntu-drivers' _is_open_prefered).
OPEN_PREFERRED_FROM = 560
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: %s\n"
NOT_LOADED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
NVIDIA_REPO = "https://nvidia.github.io/libnvidia-container/stable/deb/amd64"
TOOLKIT = {p: {toolkit.TOOLKIT_VERSION, "1.17.8-1"} for p in toolkit.TOOLKIT_PACKAGES}
FABRIC_SERVICE = "nvidia-fabricmanager"
UBUNTU_DRIVERS_COMMON = "ubuntu-drivers-common"
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
# The keys of the default config.toml this fake writes (the real one has more).
DEFAULT_TOOLKIT_CONFIG = """\
accept-nvidia-visible-devices-as-volume-mounts = false
accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false

[nvidia-container-runtime]
mode = "auto"
runtimes = ["runc", "crun"]
"""
_ABI = re.compile(r"^(?P<base>\d+\.\d+\.\d+)-(?P<num>\d+)-(?P<flavour>[a-z0-9-]+)$")
EXTENDED_STATES = "/var/lib/apt/extended_states"
# What nvidia-kernel-common-<b>-server installs (see the docstring).
GRAPHICS_DRIVERS_CONF = "/lib/modprobe.d/nvidia-graphics-drivers.conf"
GRAPHICS_DRIVERS_CONF_TEXT = (
    "blacklist nouveau\nblacklist lbm-nouveau\nalias nouveau off\nalias lbm-nouveau off\n"
)
MODPROBE_DIRS = ("/etc/modprobe.d", "/lib/modprobe.d")


def userspace_version(driver: str) -> str:
    """The Ubuntu version of the driver userspace (and fabric manager) for a driver version."""
    return f"{driver}-0ubuntu0.24.04.1"


def image_version(abi: str) -> str:
    """`6.8.0-1015-aws` -> `6.8.0-1015.15` (the kernel's package version)."""
    match = _ABI.match(abi)
    assert match, abi
    return f"{match['base']}-{match['num']}.{int(match['num']) % 100}"


def abi_key(abi: str) -> tuple[int, ...]:
    """Order kernel ABIs as version_sort does."""
    return tuple(int(n) for n in re.findall(r"\d+", abi))


class FakeDriver:
    """The NVIDIA driver side of a FakeMachine (see the module docstring for the rules)."""

    def __init__(
        self,
        machine: FakeMachine,
        gpus: int = 4,
        *,
        nvswitch: bool = False,
        open_modules: bool = True,
        nouveau: bool = False,
        model: tuple[str, int, str] = ("NVIDIA A10G", 23028, "8.6"),
        mig_profiles: dict[str, int] | None = None,
    ):
        self.machine = machine
        self.gpus = gpus
        # (name, memory MiB, compute capability) as nvidia-smi reports them; MIG-capable
        # models list their GPU instance profiles (`nvidia-smi mig -lgip`), and
        # `mig_devices` is what `nvidia-smi -L` lists once a layout is applied.
        self.model = model
        self.mig_profiles = mig_profiles
        self.mig_devices: dict[int, list[str]] = {}
        # MIG mode kept over a reboot that dropped the devices (see `reboot`)
        self.mig_enabled = False
        self.nvswitch = nvswitch
        self.open_modules = open_modules  # the GPUs are Turing or newer
        self.nouveau = nouveau  # the GPUs are bound to nouveau at boot
        self.nouveau_bound = nouveau
        self.initramfs_blacklists_nouveau = False
        self.loaded: tuple[str, str] | None = None  # (branch, driver version) of nvidia.ko
        self.running = KERNEL
        self.archive_kernel = KERNEL
        self.drivers = {b: f"{b}.95.05" for b in BRANCHES}  # driver version per branch
        self.fabric_starts = True
        # fabric.status once Fabric Manager registered the GPUs (an nvmlReturn_t's text)
        self.fabric_status = "Success"
        self.fabric_registering = False  # Fabric Manager runs, registration not done yet
        # {(package, version): driver version} of ABI module packages the archive built;
        # {(package, version): abi} of the flavour metapackages
        self.module_driver: dict[tuple[str, str], str] = {}
        self.meta_abi: dict[tuple[str, str], str] = {}
        self.respin = 0
        # GPU reset (`nvidia-smi -r -i <index>`): the indexes whose GPU a CUDA process uses
        # (listed by --query-compute-apps; the reset is refused), and the resets done.
        # Each such process is process PROCESS_BASE + index, with its /proc entries
        # (`_processes`); those in `stuck` hang in the kernel, state D (see `_processes`),
        # those in `waking` sleep in state D but wake now and then (`tick`), and those
        # `kill`ed whose driver call never returns are zombies (`Z`) still listed.
        self._in_use: set[int] = set()
        self._stuck: set[int] = set()
        self.waking: set[int] = set()
        self._killed: set[int] = set()
        self._switches: dict[int, int] = {}  # context switches per thread id
        # GPUs the driver no longer answers for (`hung`): every nvidia-smi hangs in state
        # D; each call is recorded with the timeout it was given (`hung_calls`)
        self._hung: set[int] = set()
        self.hung_calls: list[tuple[list[str], float]] = []
        # GPUs whose reset alone never returns (`nvidia-smi -r -i <index>` waits on a GPU
        # that does not come back; every other call answers): hangs as `hung` does
        self.reset_hangs: set[int] = set()
        # Other clients that hold the GPUs open without being compute apps (NVML
        # monitors: the device plugin, the DCGM exporter, another nvidia-smi): each a
        # callable naming the GPU indexes it holds now; a reset is refused on those too
        self.clients: list[Callable[[], set[int]]] = []
        self.resets: list[int] = []
        # GPUs (by their index at boot) that do not come back from their reset (lost for
        # good: off the bus), and those nvidia-smi no longer finds. nvidia-smi numbers the
        # GPUs it finds from 0 in PCI bus order, so a lost middle GPU shifts the indexes of
        # those after it while each keeps its UUID (nvidia-smi(1): "-i, --id=ID ... It is
        # recommended that users desiring consistency use either UUID or PCI bus ID, since
        # device enumeration ordering is not guaranteed to be consistent")
        self.lost_on_reset: set[int] = set()
        self.absent: set[int] = set()
        self.auto: set[str] = set()  # packages marked automatically installed
        self.image_meta_abi: dict[str, str] = {}  # linux-image-aws version: its kernel
        self._publish_kernel(KERNEL)
        # Version not checked against the archive: nothing depends on it.
        machine.publish(UBUNTU_DRIVERS_COMMON, "1:0.9.7.6ubuntu3", "release")
        for branch in BRANCHES:
            self._publish_driver(branch)
        self._refresh_lists()  # the first boot's apt-get update saw all of it
        # The cloud image: its kernel and the image metapackage are installed.
        self._install_kernel(KERNEL)
        machine.dpkg["linux-image-aws"] = self._pocket("linux-image-aws")
        self._mark_auto(f"linux-image-{KERNEL}")  # pulled in by linux-image-aws
        machine.write("/proc/sys/kernel/random/boot_id", "b0b1d000-0000-4000-8000-000000000001\n")
        self._apt_get = machine.runner.handlers["apt-get"]
        self._dpkg_query = machine.runner.handlers["dpkg-query"]
        self._systemctl = machine.runner.handlers["systemctl"]
        machine.on("apt-get", self.apt_get)
        machine.on("dpkg-query", self.dpkg_query)
        machine.on("modprobe", self.modprobe)
        machine.on("nvidia-smi", self.nvidia_smi)
        machine.on("ubuntu-drivers", self.ubuntu_drivers)
        machine.on("apt-cache", self.apt_cache)
        self._apt_mark = machine.runner.handlers["apt-mark"]
        machine.on("apt-mark", self.apt_mark)
        machine.on("uname", lambda argv, _: f"{self.running}\n")
        machine.on("dpkg", lambda argv, _: "amd64\n")
        machine.on("sh", self.sh)
        machine.on("systemctl", self.systemctl)
        machine.on("update-initramfs", self.update_initramfs)
        machine.on("rmmod", self.rmmod)
        machine.on("nvidia-ctk", self.nvidia_ctk)

    # -- the archive ------------------------------------------------------------------

    def _pocket(self, name: str) -> str:
        """The version the archive serves (updates over security over release)."""
        pockets = self.machine.archive[name]
        return pockets.get("updates") or pockets.get("security") or pockets["release"]

    def _publish_kernel(self, abi: str) -> None:
        self.machine.publish(f"linux-image-{abi}", image_version(abi))
        self.machine.publish("linux-image-aws", image_version(abi).replace("-", "."))
        self.image_meta_abi[image_version(abi).replace("-", ".")] = abi
        self.archive_kernel = abi

    def _publish_driver(self, branch: str) -> None:
        """Userspace, fabric manager and modules of `branch` for the archive's kernel."""
        driver = self.drivers[branch]
        version = userspace_version(driver)
        for variant in VARIANTS:
            self.machine.publish(f"nvidia-headless-no-dkms-{branch}-{variant}", version)
        self.machine.publish(f"nvidia-utils-{branch}-server", version)
        self.machine.publish(f"nvidia-kernel-common-{branch}-server", version)
        self.machine.publish(f"nvidia-fabricmanager-{branch}", version)
        self.machine.publish(f"libnvidia-nscq-{branch}", version)
        self._publish_modules(branch, self.archive_kernel)

    def _publish_modules(self, branch: str, abi: str) -> None:
        self.respin += 1
        version = f"{image_version(abi)}+{self.respin}"
        for variant in VARIANTS:
            package = f"linux-modules-nvidia-{branch}-{variant}-{abi}"
            self.machine.publish(package, version)
            self.module_driver[(package, version)] = self.drivers[branch]
            meta = f"linux-modules-nvidia-{branch}-{variant}-{FLAVOUR}"
            self.machine.publish(meta, version)
            self.meta_abi[(meta, version)] = abi

    def _refresh_lists(self) -> None:
        for name, pockets in self.machine.archive.items():
            self.machine.lists.setdefault(name, set()).update(pockets.values())

    # -- state helpers ----------------------------------------------------------------

    def userspace(self) -> tuple[str, str] | None:
        """(branch, driver version) of the installed userspace, or None."""
        for name, version in self.machine.dpkg.items():
            match = re.fullmatch(r"nvidia-utils-(\d{3})-server", name)
            if match:
                return match.group(1), version.split("-", 1)[0]
        return None

    def userspace_branch(self) -> str | None:
        found = self.userspace()
        return found[0] if found else None

    def kernels(self) -> list[str]:
        """Installed kernel ABIs, oldest first."""
        names = [n.removeprefix("linux-image-") for n in self.machine.dpkg]
        return sorted((n for n in names if _ABI.match(n)), key=abi_key)

    def next_boot(self) -> str:
        return self.kernels()[-1]

    def modules_for(self, abi: str) -> tuple[str, str] | None:
        """(package, driver version) of the installed nvidia modules for kernel `abi`."""
        for name, version in self.machine.dpkg.items():
            if name.startswith("linux-modules-nvidia-") and name.endswith(f"-{abi}"):
                return name, self.module_driver.get((name, version), "")
        return None

    def preinstall(self, branch: str, *, loaded: bool = True, variant: str = "server") -> None:
        """A host whose image already has a driver installed (outside the charm)."""
        version = userspace_version(self.drivers[branch])
        dpkg = self.machine.dpkg
        dpkg[f"nvidia-headless-no-dkms-{branch}-{variant}"] = version
        dpkg[f"nvidia-utils-{branch}-server"] = version
        dpkg[f"nvidia-kernel-common-{branch}-server"] = version
        meta = f"linux-modules-nvidia-{branch}-{variant}-{FLAVOUR}"
        dpkg[meta] = self._pocket(meta)
        abi_package = f"linux-modules-nvidia-{branch}-{variant}-{self.running}"
        dpkg[abi_package] = self._pocket(abi_package)
        self._kernel_common_postinst()
        self._sync_files()
        if loaded:
            self._load()

    def _sync_files(self) -> None:
        if UBUNTU_DRIVERS_COMMON in self.machine.dpkg:
            self.machine.write("/usr/bin/ubuntu-drivers", "#!fake ubuntu-drivers\n", 0o755)
        if self.userspace_branch():
            self.machine.write(nvidia.NVIDIA_SMI, "#!fake nvidia-smi\n", 0o755)
        else:
            self.machine.path(nvidia.NVIDIA_SMI).unlink(missing_ok=True)
        for abi in self.kernels():
            self.machine.write(f"/boot/vmlinuz-{abi}", "kernel\n")
        if any(n.startswith("nvidia-fabricmanager-") for n in self.machine.dpkg):
            # The package ships the unit, disabled and stopped until enabled.
            self.machine.services.setdefault(FABRIC_SERVICE, Service(enabled=False, active=False))

    def _load(self) -> None:
        modules = self.modules_for(self.running)
        assert modules is not None
        branch = modules[0].split("-")[3]
        self.loaded = (branch, modules[1])
        self.machine.path("/sys/module/nvidia").mkdir(parents=True, exist_ok=True)

    def _install_kernel(self, abi: str) -> None:
        self.machine.dpkg[f"linux-image-{abi}"] = self._pocket(f"linux-image-{abi}")
        self.machine.write(f"/boot/vmlinuz-{abi}", "kernel\n")

    # -- marks and autoremove ---------------------------------------------------------

    def _mark_auto(self, *names: str) -> None:
        self.auto.update(names)
        self._sync_marks()

    def _sync_marks(self) -> None:
        self.auto &= set(self.machine.dpkg)
        self.machine.write(
            EXTENDED_STATES,
            "".join(
                f"Package: {n}\nArchitecture: amd64\nAuto-Installed: 1\n\n"
                for n in sorted(self.auto)
            ),
        )

    def manual(self) -> set[str]:
        """Installed packages marked manually installed."""
        return set(self.machine.dpkg) - self.auto

    def _depends(self, name: str) -> list[str]:
        version = self.machine.dpkg.get(name, "")
        headless = re.fullmatch(r"nvidia-headless-no-dkms-(\d+)-server(-open)?", name)
        if headless:
            return [f"nvidia-kernel-common-{headless.group(1)}-server"]
        if name == "linux-image-aws" and version in self.image_meta_abi:
            return [f"linux-image-{self.image_meta_abi[version]}"]
        abi = self.meta_abi.get((name, version))
        if abi is not None:
            return [f"{name.removesuffix(f'-{FLAVOUR}')}-{abi}"]
        match = re.search(r"-(\d+\.\d+\.\d+-\d+-[a-z0-9-]+)$", name)
        if name.startswith("linux-modules-nvidia-") and match:
            return [f"linux-image-{match.group(1)}"]
        return []

    def _kept_kernels(self) -> set[str]:
        """Every installed `linux-.*-<abi>` package of the kernels apt-auto-removal keeps.

        The running one, the latest, and the second-latest when the latest runs.
        """
        kernels = self.kernels()
        kept = {self.running, kernels[-1]}
        if self.running == kernels[-1] and len(kernels) > 1:
            kept.add(kernels[-2])
        return {
            n
            for n in self.machine.dpkg
            if n.startswith("linux-") and n.endswith(tuple(f"-{abi}" for abi in kept))
        }

    def autoremove(self) -> str:
        """Remove automatic packages no manual one needs (`apt-get autoremove`)."""
        needed, todo = set(), [*self.manual(), *self._kept_kernels()]
        while todo:
            name = todo.pop()
            if name in needed or name not in self.machine.dpkg:
                continue
            needed.add(name)
            todo.extend(self._depends(name))
        removed = sorted(set(self.machine.dpkg) - needed)
        for name in removed:
            self.machine.dpkg.pop(name)
            match = re.fullmatch(r"linux-image-(.+)", name)
            if match:
                self.machine.path(f"/boot/vmlinuz-{match.group(1)}").unlink(missing_ok=True)
        self._sync_marks()
        return "".join(f"Removing {n} ...\n" for n in removed)

    def apt_mark(self, argv, input):
        verb, names = argv[1], argv[2:]
        if verb not in ("auto", "manual"):
            return self._apt_mark(argv, input)
        for name in names:
            if name not in self.machine.dpkg:
                raise CommandError(argv, 100, f"E: Unable to locate package {name}")
        if verb == "auto":
            self.auto.update(names)
        else:
            self.auto.difference_update(names)
        self._sync_marks()
        kind = "automatically" if verb == "auto" else "manually"
        return "".join(f"{n} set to {kind} installed.\n" for n in names)

    # -- apt --------------------------------------------------------------------------

    def apt_get(self, argv, input):
        if "autoremove" in argv:
            return self.autoremove()
        dpkg, held = dict(self.machine.dpkg), set(self.machine.held)
        before = self.userspace_branch()
        out = self._apt_get(argv, input)
        if "install" not in argv:
            return out
        try:
            self._dependencies(argv)
            self._conflicts(before, dpkg)
            self._check_versions(argv)
        except CommandError:
            self.machine.dpkg, self.machine.held = dpkg, held
            raise
        configured = [
            n
            for n, v in self.machine.dpkg.items()
            if n.startswith("nvidia-kernel-common-") and dpkg.get(n) != v
        ]
        if configured:
            self._kernel_common_postinst()
        requested = {a.split("=", 1)[0] for a in self.machine._apt_args(argv)[1:]}
        for name in self.machine.dpkg:
            if name in requested:
                self.auto.discard(name)  # asked for: manual, even if it was automatic
            elif name not in dpkg:
                self.auto.add(name)  # pulled in as a dependency
        self._sync_marks()
        self._sync_files()
        if (
            "nvidia-container-toolkit-base" in self.machine.dpkg
            and "nvidia-container-toolkit-base" not in dpkg
        ):
            if self.machine.read(TOOLKIT_CONFIG) is None:
                self.machine.write(TOOLKIT_CONFIG, DEFAULT_TOOLKIT_CONFIG)
        return out

    def nvidia_ctk(self, argv, _input):
        """`nvidia-ctk config --in-place --set key=value ...` on config.toml."""
        if argv[1:3] != ["config", "--in-place"] or "--set" not in argv:
            raise CommandError(argv, 1, f"fake nvidia-ctk does not handle {argv[1:]}")
        text = self.machine.read(TOOLKIT_CONFIG) or DEFAULT_TOOLKIT_CONFIG
        for i, arg in enumerate(argv):
            if arg == "--set":
                key, _, value = argv[i + 1].partition("=")
                line = f"{key} = {value or 'true'}"
                pattern = re.compile(rf"^{re.escape(key)} = .*$", re.MULTILINE)
                text = pattern.sub(line, text) if pattern.search(text) else f"{line}\n{text}"
        self.machine.write(TOOLKIT_CONFIG, text)
        return ""

    def _dependencies(self, argv) -> None:
        """Install what the installed metapackages and module packages depend on."""
        dpkg = self.machine.dpkg
        for name, version in list(dpkg.items()):
            abi = self.meta_abi.get((name, version))
            if abi is not None:
                variant_branch = name.removesuffix(f"-{FLAVOUR}")
                dependency = f"{variant_branch}-{abi}"
                if dependency not in self.machine.archive and dependency not in dpkg:
                    raise CommandError(
                        argv,
                        100,
                        "The following packages have unmet dependencies:\n"
                        f" {name} : Depends: {dependency} but it is not installable\n"
                        "E: Unable to correct problems, you have held broken packages.",
                    )
                dpkg.setdefault(dependency, self._pocket(dependency))
        for name in list(dpkg):
            match = re.search(r"-(\d+\.\d+\.\d+-\d+-[a-z0-9-]+)$", name)
            if name.startswith("linux-modules-nvidia-") and match:
                image = f"linux-image-{match.group(1)}"
                dpkg.setdefault(image, self._pocket(image))
            headless = re.fullmatch(r"nvidia-headless-no-dkms-(\d+)-server(-open)?", name)
            if headless:  # kernel-common at the headless package's own version
                dpkg[f"nvidia-kernel-common-{headless.group(1)}-server"] = dpkg[name]

    def _conflicts(self, before: str | None, previous: dict[str, str]) -> None:
        """Installing one branch or variant removes the other (held ones too, with the flag).

        Both variants of a branch ship nvidia.ko for the same kernel, so they conflict.
        """
        for branch in BRANCHES:
            headless = [f"nvidia-headless-no-dkms-{branch}-{v}" for v in VARIANTS]
            if all(h in self.machine.dpkg for h in headless):
                old = next(
                    v for v in VARIANTS if f"nvidia-headless-no-dkms-{branch}-{v}" in previous
                )
                for name in list(self.machine.dpkg):
                    if name.startswith(f"linux-modules-nvidia-{branch}-{old}-") or name == (
                        f"nvidia-headless-no-dkms-{branch}-{old}"
                    ):
                        if old == "server" and "-server-open-" in name:
                            continue
                        self.machine.dpkg.pop(name)
                        self.machine.held.discard(name)
        branches = {
            m.group(1)
            for n in self.machine.dpkg
            if (m := re.fullmatch(r"nvidia-utils-(\d{3})-server", n))
        }
        if before and len(branches) > 1:
            for name in list(self.machine.dpkg):
                if re.search(rf"nvidia[a-z-]*-{before}(-|$)", name):
                    self.machine.dpkg.pop(name)
                    self.machine.held.discard(name)

    def _check_versions(self, argv) -> None:
        """Every module and fabric package at the userspace's driver version, or apt's error.

        As apt's resolver does, an installed module package nobody asked for moves to the
        archive's version when that one fits the new userspace, and is removed when none
        does ("The following packages will be REMOVED"); one that was asked for, or a held
        fabric manager, makes apt give up.
        """
        found = self.userspace()
        if found is None:
            return
        branch, driver = found
        requested = {a.split("=", 1)[0] for a in self.machine._apt_args(argv)[1:]}
        for name, version in list(self.machine.dpkg.items()):
            if (name, version) in self.module_driver:
                needs = self.module_driver[(name, version)]
            elif name.startswith(("nvidia-fabricmanager-", "libnvidia-nscq-")):
                needs = version.split("-", 1)[0]
            else:
                continue
            if needs == driver:
                continue
            if name not in requested and name not in self.machine.held:
                candidate = self._pocket(name) if name in self.machine.archive else None
                if (name, candidate) in self.module_driver:
                    if self.module_driver[(name, candidate)] == driver:
                        self.machine.dpkg[name] = candidate
                    else:
                        self.machine.dpkg.pop(name)
                    continue
            raise CommandError(
                argv,
                100,
                "Some packages could not be installed. This may mean that you have\n"
                "requested an impossible situation or if you are using the unstable\n"
                "distribution that some required packages have not yet been created\n"
                "or been moved out of Incoming.\n"
                "The following packages have unmet dependencies:\n"
                f" {name} : Depends: nvidia-kernel-common-{branch}-server (= {needs}...) "
                f"but {userspace_version(driver)} is to be installed\n"
                "E: Unable to correct problems, you have held broken packages.",
            )

    def dpkg_query(self, argv, input):
        pattern = argv[-1]
        if "*" not in pattern:
            return self._dpkg_query(argv, input)
        names = sorted(n for n in self.machine.dpkg if fnmatch.fnmatch(n, pattern))
        if not names:
            raise CommandError(argv, 1, f"dpkg-query: no packages found matching {pattern}")
        fmt = argv[argv.index("-f") + 1]
        return "".join(
            fmt.replace("${Package}", n)
            # dpkg's abbreviated status: desired action (`h` hold, `i` install), then
            # the state (`i` installed); a held package prints `hi `, not `ii `.
            .replace("${db:Status-Abbrev}", "hi " if n in self.machine.held else "ii ")
            .replace("${Version}", self.machine.dpkg[n])
            for n in names
        )

    # -- the kernel -------------------------------------------------------------------

    def modprobe(self, argv, _input):
        if argv[-1] != "nvidia":
            self.machine.path(f"/sys/module/{argv[-1]}").mkdir(parents=True, exist_ok=True)
            return ""
        if self.modules_for(self.running) is None:
            raise CommandError(
                argv,
                1,
                f"modprobe: FATAL: Module nvidia not found in directory /lib/modules/"
                f"{self.running}",
            )
        if self.nouveau_bound:
            raise CommandError(
                argv, 1, "modprobe: ERROR: could not insert 'nvidia': No such device"
            )
        self._load()
        return ""

    def rmmod(self, argv, _input):
        if argv[-1] == "nouveau" and self.nouveau_bound:
            raise CommandError(argv, 1, "rmmod: ERROR: Module nouveau is in use")
        return ""

    def update_initramfs(self, argv, _input):
        self._build_initramfs()
        return f"update-initramfs: Generating /boot/initrd.img-{self.running}\n"

    def _build_initramfs(self) -> None:
        """What the next boot's initramfs holds of the modprobe configuration."""
        text = ""
        for name in MODPROBE_DIRS:
            directory = self.machine.path(name)
            for f in sorted(directory.glob("*.conf")) if directory.is_dir() else []:
                text += f.read_text()
        self.initramfs_blacklists_nouveau = bool(
            re.search(r"^\s*blacklist\s+nouveau\s*$", text, re.MULTILINE)
        )

    def _kernel_common_postinst(self) -> None:
        """nvidia-kernel-common's files and postinst: the blacklist, in the initramfs."""
        self.machine.write(GRAPHICS_DRIVERS_CONF, GRAPHICS_DRIVERS_CONF_TEXT)
        self._build_initramfs()

    def reboot(self, boot: str = "b0b1d000-0000-4000-8000-000000000002") -> None:
        """Boot again: the newest installed kernel, and nvidia.ko if it has its modules."""
        self.machine.write("/proc/sys/kernel/random/boot_id", f"{boot}\n")
        self._in_use, self._stuck = set(), set()  # no process outlives a reboot
        self._hung, self._killed, self.waking, self.reset_hangs = set(), set(), set(), set()
        self._processes()
        self.machine.path(gpu.REBOOT_REQUIRED_FILE).unlink(missing_ok=True)
        self.machine.path(gpu.REBOOT_REQUIRED_FILE + ".pkgs").unlink(missing_ok=True)
        self.running = self.next_boot()
        self.loaded = None
        # MIG devices do not survive a reboot, the MIG mode does (mig-parted v0.15.0
        # README.md: nvidia-mig-parted "does not ensure that MIG device configurations will
        # persist across node reboots"; deployments/systemd/README.md: a GPU reset
        # persists the MIG mode): mig-manager makes the devices again when it starts
        self.mig_enabled = self.mig_enabled or bool(self.mig_devices)
        self.mig_devices = {}
        self.nouveau_bound = self.nouveau and not self.initramfs_blacklists_nouveau
        module = self.machine.path("/sys/module/nvidia")
        if module.is_dir():
            module.rmdir()
        fabric = self.machine.services.get(FABRIC_SERVICE)
        if fabric is not None:
            fabric.active = False
        if self.userspace() and self.modules_for(self.running) and not self.nouveau_bound:
            self._load()
            if fabric is not None and fabric.enabled and self.fabric_starts:
                fabric.active = True

    # -- what the archive and unattended-upgrades do -----------------------------------

    def kernel_update(self, abi: str = "6.8.0-1016-aws") -> None:
        """A new kernel reaches -security and unattended-upgrades installs it.

        The kernel team publishes the nvidia modules for the new ABI with it, built
        against each branch's current driver; the modules metapackage follows when it is
        not held and its new ABI package fits the installed userspace.
        """
        self._publish_kernel(abi)
        for branch in BRANCHES:
            self._publish_modules(branch, abi)
        self._refresh_lists()
        self._unattended_upgrade()
        pkgs = f"linux-image-{abi}\nlinux-base\n"
        self.machine.write(gpu.REBOOT_REQUIRED_FILE, "*** System restart required ***\n")
        self.machine.write(gpu.REBOOT_REQUIRED_FILE + ".pkgs", pkgs)

    def stale_kernel(self, abi: str = "6.8.0-1016-aws", *, os_upgrade: bool = True) -> None:
        """The machine runs its image's kernel while the archive has moved on.

        The archive has a newer kernel, and since then a driver update rebuilt every
        branch's modules for that kernel; the image's kernel keeps the modules it had,
        built for the older driver. With `os_upgrade` (Juju's default
        enable-os-upgrade) the newer kernel is installed, not yet booted.
        """
        self._publish_kernel(abi)
        for branch in BRANCHES:
            self._publish_modules(branch, abi)
            major, minor, rev = self.drivers[branch].split(".")
            self.drivers[branch] = f"{major}.{int(minor) + 10}.{rev}"
            self._publish_driver(branch)
        self._refresh_lists()
        if os_upgrade:
            self._unattended_upgrade()

    def driver_sru(self, branch: str, driver: str) -> None:
        """A new driver version of `branch` reaches the archive, modules rebuilt with it."""
        self.drivers[branch] = driver
        self._publish_driver(branch)
        self._refresh_lists()
        self._unattended_upgrade()

    def _unattended_upgrade(self) -> None:
        dpkg = self.machine.dpkg
        before = set(dpkg)
        self._upgrade_packages()
        self._mark_auto(*(set(dpkg) - before))  # new kernels and ABI packages: dependencies

    def _upgrade_packages(self) -> None:
        dpkg = self.machine.dpkg
        dpkg["linux-image-aws"] = self._pocket("linux-image-aws")
        self._install_kernel(self.archive_kernel)
        found = self.userspace()
        for name in list(dpkg):
            if name in self.machine.held or name not in self.machine.archive:
                continue
            new = self._pocket(name)
            abi = self.meta_abi.get((name, new))
            if abi is None:
                continue
            dependency = f"{name.removesuffix(f'-{FLAVOUR}')}-{abi}"
            dep_version = self._pocket(dependency)
            if found and self.module_driver.get((dependency, dep_version)) == found[1]:
                dpkg[name] = new
                dpkg[dependency] = dep_version

    # -- programs ---------------------------------------------------------------------

    def systemctl(self, argv, input):
        args = [a for a in argv[1:] if not a.startswith("-")]
        if args[1:] == [FABRIC_SERVICE] and args[0] in ("start", "restart", "enable"):
            service = self.machine.services.get(FABRIC_SERVICE)
            starting = args[0] != "enable" or "--now" in argv
            if (
                service is not None
                and starting
                and (self.loaded is None or not self.fabric_starts)
            ):
                service.enabled = service.enabled or args[0] == "enable"
                service.active = False
                raise CommandError(
                    argv,
                    1,
                    f"Job for {FABRIC_SERVICE}.service failed because the control process "
                    "exited with error code.",
                )
        return self._systemctl(argv, input)

    def fabric_active(self) -> bool:
        service = self.machine.services.get(FABRIC_SERVICE)
        return bool(service and service.active)

    def nvidia_smi(self, argv, _input):
        if self._hung:
            self._hang(argv)
        return self._smi(argv)

    def _smi(self, argv: list[str]) -> str:
        found = self.userspace()
        if found is None:
            raise CommandError(argv, 127, "nvidia-smi: not found")
        branch, driver = found
        if self.loaded is None:  # nouveau holds the GPUs: nvidia.ko did not load either
            raise CommandError(argv, 9, NOT_LOADED)
        if self.loaded[1] != driver:
            raise CommandError(argv, 18, MISMATCH % driver.rsplit(".", 1)[0])
        if argv[1:2] in (["-r"], ["--gpu-reset"]):
            return self._reset(argv)
        if "--version" in argv:
            return (
                f"NVIDIA-SMI version  : {driver}\n"
                f"NVML version        : {driver.rsplit('.', 1)[0]}\n"
                f"DRIVER version      : {driver}\nCUDA Version        : 13.0\n"
            )
        if argv[1:] == ["--query-gpu=index,fabric.state,fabric.status", "--format=csv,noheader"]:
            return "".join(f"{i}, {state}, {status}\n" for i, (state, status) in self._fabric())
        # one `<pid>, <uuid>` row per CUDA process (field names: nvidia-smi
        # --help-query-compute-apps; NVML monitors are no compute apps, never listed)
        if argv[1:] == ["--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"]:
            return "".join(
                f"{PROCESS_BASE + i}, {self.uuid(i)}\n" for i in sorted(self.gpu_in_use)
            )
        if argv[1:] == ["mig", "-lgip"]:
            return self._lgip(argv)
        if argv[1:] == ["-L"]:
            return self._list()
        name, memory, compute = self.model
        mode = (
            "[N/A]"
            if self.mig_profiles is None
            else ("Enabled" if self.mig_devices or self.mig_enabled else "Disabled")
        )
        buses = self._bus_ids()
        return "".join(
            f"{n}, {name}, {memory}, 0, 0, 30, {mode}, {driver}, {buses[i]}, {compute}\n"
            for n, i in enumerate(self.present())
        )

    @property
    def gpu_in_use(self) -> set[int]:
        """The GPUs (by index) a CUDA process holds; each process has its /proc entry."""
        return self._in_use

    @gpu_in_use.setter
    def gpu_in_use(self, indexes: set[int]) -> None:
        self._in_use = set(indexes)
        self._processes()

    @property
    def stuck(self) -> set[int]:
        """The GPUs whose CUDA process hangs in the kernel (state D): it holds them on."""
        return self._stuck

    @stuck.setter
    def stuck(self, indexes: set[int]) -> None:
        self._stuck = set(indexes)
        self._processes()

    @property
    def hung(self) -> set[int]:
        """The GPUs the driver waits on for ever: their processes, and nvidia-smi, hang.

        leptonai/gpud#117: "nvidia-smi may get stuck forever, when the nvidia-smi process
        goes into D (uninterruptible) state"; NVIDIA/gpu-monitoring-tools#46 (NVIDIA):
        nvidia-smi "unkillable (stuck in 'D' state)" means "the driver is hung". Which
        calls hang on a real machine is not recorded: here every nvidia-smi does (each
        opens every GPU), and the CUDA processes on these GPUs are stuck.
        """
        return self._hung

    @hung.setter
    def hung(self, indexes: set[int]) -> None:
        self._hung = set(indexes)
        self._processes()

    def _hang(self, argv: list[str]) -> None:
        """nvidia-smi never returns: the runner kills it at the caller's timeout.

        The timeout is the one the code asked of the runner for this command (for
        `sh -c nvidia-smi ...`, the shell's), else the real runner's DEFAULT_TIMEOUT;
        the answer is the real runner's (system.SubprocessRunner: exit status -1).
        """
        timeout = self.machine.runner.calls[-1].timeout or DEFAULT_TIMEOUT
        self.hung_calls.append((list(argv), timeout))
        raise CommandError(argv, -1, f"timed out after {timeout}s")

    def kill(self, index: int) -> None:
        """SIGKILL the CUDA process on GPU `index` (an operator's `kill -9`).

        A process whose driver call returns ends, and nvidia-smi lists it no more. One
        stuck in the kernel does not: its main thread exits and, as the thread group's
        leader, stays a zombie (`Z`) until the stuck (or `waking`) thread leaves the
        kernel (kernel exit.c: a group leader is reaped only once its group is empty),
        holding the GPU.
        """
        if index in self._stuck | self._hung | self.waking:
            self._killed.add(index)
        else:
            self._in_use.discard(index)
        self._processes()

    def tick(self) -> None:
        """Time passes: every thread not stuck in the kernel switches (`waking` ones too)."""
        for index in self._in_use:
            for tid in (PROCESS_BASE + index, THREAD_BASE + index):
                blocked = tid == THREAD_BASE + index and index in self._stuck | self._hung
                if not blocked or index in self.waking:
                    self._switches[tid] = self._switches.get(tid, 0) + 1
        self._processes()

    def _processes(self) -> None:
        """Each CUDA process's /proc entries: two threads, each with its state and switches.

        proc_pid_stat(5) (Linux man-pages 6.16): (1) pid, (2) comm "in parentheses", up
        to 15 bytes and any bytes a process names itself with (prctl PR_SET_NAME), so
        spaces and parentheses too, (3) state: `S` "Sleeping in an interruptible wait"
        for a thread waiting on its GPU, `D` "Waiting in uninterruptible disk sleep" for
        one whose driver call never returns: a GPU that stops answering leaves them so
        (NVIDIA/nvidia-docker#1553: a container on a GPU fallen off the bus survives
        `docker kill`; leptonai/gpud#117: "task ... blocked for more than 120 seconds",
        `state:D`, after XID 45). /proc/<pid>/stat is the main thread's (fs/proc/array.c
        do_task_stat), which waits in `S` while a worker thread (THREAD_BASE + index, as
        TensorFlow's calls the driver) is the one in `D`; each thread's own is under
        /proc/<pid>/task/<tid>/, with its `voluntary_ctxt_switches` and
        `nonvoluntary_ctxt_switches` in `status` (proc_pid_status(5)). A thread in `D`
        that wakes and sleeps again (`waking`: a driver's polling wait) switches. A
        process that ends loses its entries, and a reboot ends them all. The rest of
        each stat line is a plausible tail.
        """
        self._killed &= self._in_use
        procs = self.machine.path("/proc")
        for entry in list(procs.iterdir()) if procs.is_dir() else []:
            if entry.name.isdigit() and int(entry.name) >= PROCESS_BASE:
                for path in sorted(entry.rglob("*"), key=lambda p: -len(p.parts)):
                    path.rmdir() if path.is_dir() else path.unlink()
                entry.rmdir()
        for index in sorted(self._in_use):
            pid, worker = PROCESS_BASE + index, THREAD_BASE + index
            lead = "Z" if index in self._killed else "S"
            work = "D" if index in self._stuck | self._hung | self.waking else "S"
            comm = f"train (rank {index})"
            self.machine.write(f"/proc/{pid}/stat", self._stat(pid, comm, lead))
            for tid, state in ((pid, lead), (worker, work)):
                base = f"/proc/{pid}/task/{tid}"
                self.machine.write(f"{base}/stat", self._stat(tid, comm, state))
                switches = self._switches.get(tid, 0)
                self.machine.write(
                    f"{base}/status",
                    f"Name:\t{comm}\nState:\t{state}\nTgid:\t{pid}\nPid:\t{tid}\n"
                    f"voluntary_ctxt_switches:\t{switches * 3}\n"
                    f"nonvoluntary_ctxt_switches:\t{switches}\n",
                )

    @staticmethod
    def _stat(tid: int, comm: str, state: str) -> str:
        return f"{tid} ({comm}) {state} 1 {tid} {tid} 0 -1 4194560 0 0\n"

    def present(self) -> list[int]:
        """The GPUs nvidia-smi finds, by their index at boot (`absent` left out)."""
        return [i for i in range(self.gpus) if i not in self.absent]

    def _reset(self, argv: list[str]) -> str:
        """`nvidia-smi -r -i <index>`: reset one GPU, refused while a process uses it.

        nvidia-smi's manual (-r, --gpu-reset): "There can't be any applications using
        these devices (e.g. CUDA application ...)". What it prints, success and refusal,
        as recorded on a real machine in public notes (the stored code corpus: "Unable to
        reset GPU 00000000:18:00.0 because it's being used by some other process (e.g.
        CUDA application). Please first kill all processes using this GPU." then "Some
        GPUs could not be reset."; "GPU 00000000:18:00.0 was successfully reset."). The
        exit status of a refusal is not documented: 1 here, the charm reads the text.
        A GPU held open by a client that is no compute app (`clients`: an NVML monitor
        such as the device plugin, the DCGM exporter or the watcher's nvidia-smi) is
        refused with the text and exit status NVIDIA/NVSentinel#1690 recorded ("The
        following GPUs could not be reset: / GPU <bus id>: In use by another client",
        exit=255; the same words in NVIDIA/gpu-operator#118 for nvidia-persistenced).

        On an NVSwitch machine one GPU alone is reset only from Ampere on and with Fabric
        Manager running; else every GPU NVLink connects to it (on an NVSwitch baseboard:
        all of them) must be reset in the same command, and a `-i` that names fewer gets
        "an error identifying the additional GPUs that must be included" (the manual's
        table "NVSwitch systems": Pre-Ampere, all PEER connected GPUs in the same command
        whether Fabric Manager runs or not; Ampere+, each GPU individually with Fabric
        Manager running, all PEER connected GPUs without). That error's exact text is not
        recorded anywhere we could read: the one below names the GPUs as the manual says.
        """
        index = int(argv[argv.index("-i") + 1]) if "-i" in argv else None
        targets = list(range(self.gpus)) if index is None else [index]
        buses = self._bus_ids()
        if any(i >= self.gpus for i in targets):
            raise CommandError(argv, 6, f"No devices were found matching -i {index}")
        ampere = float(self.model[2]) >= 8.0
        if self.nvswitch and len(targets) < self.gpus and not (ampere and self.fabric_active()):
            peers = ", ".join(buses[i] for i in range(self.gpus) if i not in targets)
            raise CommandError(
                argv,
                1,
                f"Unable to reset GPU {buses[targets[0]]}: the NVLink peer GPUs {peers} must "
                "be reset in the same command.\nSome GPUs could not be reset.",
            )
        held = set().union(*(client() for client in self.clients))
        monitored = [i for i in targets if i in held and i not in self.gpu_in_use]
        if monitored:
            raise CommandError(
                argv,
                255,
                "The following GPUs could not be reset:\n"
                f"  GPU {buses[monitored[0]]}: In use by another client\n\n"
                "1 device is currently being used by one or more other processes (e.g. "
                "Fabric Manager, CUDA application, graphics application such as an X server, "
                "or a monitoring application such as another instance of nvidia-smi). Please "
                "first kill all processes using this device and all compute applications "
                "running in the system.",
            )
        if set(targets) & self.reset_hangs:
            self._hang(argv)
        busy = [i for i in targets if i in self.gpu_in_use]
        if busy:
            raise CommandError(
                argv,
                1,
                f"Unable to reset GPU {buses[busy[0]]} because it's being used by some other "
                "process (e.g. CUDA application). Please first kill all processes using this "
                "GPU.\nSome GPUs could not be reset.",
            )
        self.resets += targets
        self.absent |= set(targets) & self.lost_on_reset
        return "".join(f"GPU {buses[i]} was successfully reset.\n" for i in targets)

    def _fabric(self) -> list[tuple[int, tuple[str, str]]]:
        """Each GPU's (fabric state, status) as nvidia-smi prints them."""
        hopper = float(self.model[2]) >= 9.0
        if not (self.nvswitch and hopper):
            row = ("N/A", "N/A")
        elif not self.fabric_active() or self.fabric_registering:
            row = ("In Progress", "N/A")
        else:
            row = ("Completed", self.fabric_status)
        return [(i, row) for i in range(self.gpus)]

    def _bus_ids(self) -> list[str]:
        """The GPUs' PCI addresses as nvidia-smi prints them, from the machine's sysfs.

        nvidia-smi numbers GPUs in PCI bus order and prints an 8-digit domain
        (`00000000:53:00.0` for sysfs `0000:53:00.0`; the recorded H100 output).
        Without a sysfs tree, A10G-like addresses.
        """
        devices = self.machine.path("/sys/bus/pci/devices")
        found = []
        for function in sorted(devices.iterdir()) if devices.is_dir() else []:
            klass = (
                (function / "class").read_text().strip() if (function / "class").exists() else ""
            )
            vendor = (
                (function / "vendor").read_text().strip() if (function / "vendor").exists() else ""
            )
            if vendor == "0x10de" and klass[:6] in ("0x0300", "0x0302"):
                domain, rest = function.name.split(":", 1)
                found.append(f"{int(domain, 16):08X}:{rest.upper()}")
        found += [f"00000000:00:{0x1B + i:02X}.0" for i in range(len(found), self.gpus)]
        return found

    def _lgip(self, argv) -> str:
        """The GPU instance profile table, in the layout of the recorded H100 output."""
        if self.mig_profiles is None:
            raise CommandError(argv, 6, "No MIG-supported devices found.")
        rows = ["+" + "-" * 79 + "+", "| GPU instance profiles:" + " " * 56 + "|"]
        for i in range(self.gpus):
            for pid, (profile, total) in enumerate(self.mig_profiles.items()):
                rows.append(
                    f"|  {i:2d}  MIG {profile:<14} {pid:3d}     {total}/{total}        9.75       "
                    "No     16     1     0   |"
                )
                rows.append("+" + "-" * 79 + "+")
        return "\n".join(rows) + "\n"

    @staticmethod
    def uuid(index: int) -> str:
        """GPU `index`'s UUID, as `nvidia-smi -L` lists it."""
        return f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd"

    def _list(self) -> str:
        """`nvidia-smi -L`: GPUs, each followed by its MIG devices (MIG user guide layout)."""
        lines = []
        for n, i in enumerate(self.present()):
            lines.append(f"GPU {n}: {self.model[0]} (UUID: {self.uuid(i)})")
            for n, profile in enumerate(self.mig_devices.get(i, [])):
                uuid = f"MIG-{i}{n}000000-1111-2222-3333-444444444444"
                lines.append(f"  MIG {profile:<12} Device {n:2d}: (UUID: {uuid})")
        return "\n".join(lines) + "\n"

    def gpgpu_drivers(self) -> list[tuple[str, str]]:
        """(driver package, modules metapackage) that fit, best first, as ubuntu-drivers sorts.

        `_cmp_gfx_alternatives_gpgpu` with reverse=True: the fit level, then PB first,
        then LTSB, then the package name (see the module docstring).
        """
        rows = []
        for branch in BRANCHES:
            if branch not in SUPPORT:
                continue
            preference = PREFER_VARIANT[branch]
            open_first = preference == "Open" or (
                preference is None and int(branch) >= OPEN_PREFERRED_FROM
            )
            support = SUPPORT[branch]
            for suffix, fits in (
                ("-server-open", (3, 1)),
                ("-server", (2, 3)),
                ("-open", (1, 0)),
                ("", (0, 2)),
            ):
                if "open" in suffix and not self.open_modules:
                    continue
                fit = fits[0] if open_first else fits[1]
                package = f"nvidia-driver-{branch}{suffix}"
                modules = f"linux-modules-nvidia-{branch}{suffix}-{FLAVOUR}"
                rank = (fit, support == "PB", support == "LTSB", package)
                rows.append((rank, package, modules))
        rows.sort(reverse=True)
        return [(package, modules) for _, package, modules in rows]

    def apt_cache(self, argv, _input):
        """`apt-cache show --no-all-versions nvidia-driver-...`: what ubuntu-drivers reads."""
        if argv[1:3] != ["show", "--no-all-versions"]:
            raise CommandError(argv, 100, f"fake apt-cache does not handle {argv[1:]}")
        stanzas = []
        for name in argv[3:]:
            match = re.fullmatch(r"nvidia-driver-(\d{3})-server(?:-open)?", name)
            if not match or match.group(1) not in SUPPORT:
                raise CommandError(argv, 100, f"E: No packages found\nN: Unable to locate {name}")
            branch = match.group(1)
            fields = [f"Package: {name}", f"Version: {userspace_version(self.drivers[branch])}"]
            if PREFER_VARIANT[branch]:
                fields.append(f"Prefer-Variant: {PREFER_VARIANT[branch]}")
            fields.append(f"Support: {SUPPORT[branch]}")
            stanzas.append("\n".join(fields) + "\n")
        return "\n".join(stanzas) + "\n"

    def ubuntu_drivers(self, argv, _input):
        drivers = self.gpgpu_drivers()
        if argv[1:] == ["list", "--gpgpu", "--recommended"]:
            package, modules = drivers[0]
            return f"{package} {modules}\n"
        if argv[1:] == ["list", "--gpgpu"]:
            return "".join(
                f"{package}, (kernel modules provided by {modules})\n"
                for package, modules in drivers
            )
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
            if e.returncode == -1:  # it hung (`_hang`): the shell waits with it
                raise CommandError(argv, -1, e.stderr) from None
            out, code = e.stderr + "\n", e.returncode
        return f"{out}exit-status={code}\n"

    # -- the machine around the driver ------------------------------------------------

    def serve_toolkit(self) -> None:
        """Serve NVIDIA's container toolkit repository and its signing key."""
        self.machine.remote[NVIDIA_REPO] = {p: set(v) for p, v in TOOLKIT.items()}
        self.machine.urls[toolkit.TOOLKIT_KEY_URL] = ARMORED_KEY
