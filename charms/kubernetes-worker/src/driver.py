# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The NVIDIA driver from Ubuntu's archive, kept in step with the kernel (no ops imports).

Ubuntu packages a driver series (`580-server`, `580-server-open`) as a userspace
(`nvidia-headless-no-dkms-<series>`, `nvidia-utils-<branch>-server`) and, for each kernel
ABI, prebuilt modules signed by Canonical (`linux-modules-nvidia-<series>-<abi>`, pulled
by the flavour metapackage `linux-modules-nvidia-<series>-<flavour>`). Each ABI package
depends tightly on one driver version's userspace and on its kernel image (Ubuntu
kernel-team list, 2021-03, "Make the nvidia abi packages depend on nvidia-kernel-common";
ubuntu-drivers-common's test archive). So kernel, modules and userspace are one unit:

- The userspace (and fabric manager) is held, so the driver never changes under running
  pods; the module packages are never held, so no held package points at an old kernel,
  and each kernel's ABI package is marked automatically installed (`apt-mark auto`): one
  installed by name is manual, and a manual package depending on `linux-image-<abi>`
  keeps that kernel from `apt autoremove` and unattended-upgrades' removal of unused
  kernels for ever (review gpu.md N4; the dependency: ubuntu-drivers-common's test
  archive, `linux-modules-nvidia-440-server-5.4.0-25-generic` Depends
  `linux-image-5.4.0-25-generic`). The flavour metapackage stays manual: it pulls the
  newest kernel's modules.
- On every reconcile the modules for the running kernel and for the kernel the machine
  boots next (the highest installed, as grub-mkconfig orders them) are installed. When
  the next kernel's modules need a newer driver than the held one (a kernel update
  after a driver update), the driver, its modules and fabric manager move together in
  one `update`, which the charm applies only after draining the node, then reboots.
- The series, and the kernel flavour its modules follow (`aws`, `aws-lts-24.04`,
  `generic-hwe-24.04`), come from `ubuntu-drivers list --gpgpu`, as the Ubuntu Server
  guide recommends (canonical/ubuntu-server-documentation, install-nvidia-drivers.md;
  ubuntu-drivers-common `get_linux_modules_metapackage` reads the flavour from the
  installed linux-image metapackage). `-server-open` is used where ubuntu-drivers ranks
  it first (branches from 560 prefer open modules; `_is_open_prefered`).
- `auto` is NVIDIA's newest long-term branch for the GPUs, not ubuntu-drivers' first
  line: ubuntu-drivers ranks a Production Branch (about a year of fixes) above a Long
  Term Support Branch (ubuntu-drivers-common d3d78560, 2026-08-11, detect.py
  `_cmp_gfx_alternatives_gpgpu`: fit level, then `PB` before anything, then `LTSB`), so
  on noble it recommends 595-server-open, and on a V100 535-server (fit 3) over
  580-server (fit 2). The branch's level is the `Support` field of its
  `nvidia-driver-<series>` package (`XB-Support` in canonical/nvidia-graphics-drivers
  `debian/control`: 535-server and 580-server LTSB, 595-server PB, branch heads of
  2026-04-28), read with `apt-cache show`, as detect.py `_pkg_get_support` reads it.
  A branch past NVIDIA's end of life is refused (`END_OF_LIFE`).
- NVSwitch machines (p4d, p5) need NVIDIA Fabric Manager before CUDA initialises (error
  802 otherwise): `nvidia-fabricmanager-<branch>` and `libnvidia-nscq-<branch>`, which
  match the `-server` driver's version (the same guide), held, their service enabled.
- A GPU bound to nouveau is released by blacklisting nouveau, rebuilding the initramfs
  and rebooting (the same guide, "No devices were found"). Ubuntu's driver does the
  first two itself: `nvidia-kernel-common-<b>-server`, which the headless package
  depends on, installs /lib/modprobe.d/nvidia-graphics-drivers.conf ("blacklist
  nouveau") and its postinst runs `update-initramfs -u` (canonical/nvidia-graphics-drivers
  debian/templates/nvidia-kernel-common-flavour.install.in and .postinst.in); the charm
  writes its own blacklist only when no modprobe.d file blacklists nouveau.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import re
from collections.abc import Iterable, Sequence

import gpu
import nvidia

from charms.gpu_k8s.v0 import apt
from charms.gpu_k8s.v0.system import SYSTEMCTL, CommandError, Host

logger = logging.getLogger(__name__)

UBUNTU_DRIVERS = "/usr/bin/ubuntu-drivers"
UBUNTU_DRIVERS_PACKAGE = "ubuntu-drivers-common"
APT_CACHE = "/usr/bin/apt-cache"
# The `Support` values ubuntu-drivers knows (detect.py `_pkg_get_support`: PB, NFB, LTSB,
# Legacy); only a Long Term Support Branch is chosen by `auto`.
LONG_TERM = "LTSB"
# NVIDIA's support matrix, "Supported Drivers and CUDA Toolkit Versions"
# (docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html,
# read 2026-11-27): R535 LTSB ends June 2026, R570 PB February 2026, R580 LTSB August 2028
# (the last day of that month is used); "All other previous driver branches not listed in
# the table above (such as R575, R565, R560, R550, R525, ...) are end of life", so a branch
# older than the newest one listed and not in it has ended too.
END_OF_LIFE = {
    "535": datetime.date(2026, 6, 30),
    "570": datetime.date(2026, 2, 28),
    "580": datetime.date(2028, 8, 31),
}
UNAME = "/usr/bin/uname"
DPKG_QUERY = "/usr/bin/dpkg-query"
MODPROBE = "/usr/sbin/modprobe"
APT_MARK = "/usr/bin/apt-mark"
# apt's record of automatically installed packages (`Auto-Installed: 1` stanzas), which
# `apt-mark showauto` reads; read here directly, so a reconcile runs no program for it.
EXTENDED_STATES = "/var/lib/apt/extended_states"
UPDATE_INITRAMFS = "/usr/sbin/update-initramfs"
FABRIC_SERVICE = "nvidia-fabricmanager"
DPKG_FORMAT = "${db:Status-Abbrev} ${Package} ${Version}\n"
NOUVEAU_BLACKLIST = "/etc/modprobe.d/gpu-k8s-blacklist-nouveau.conf"
# Where modprobe (kmod's modprobe.d(5)) and mkinitramfs (initramfs-tools) read it from.
MODPROBE_DIRS = ("/etc/modprobe.d", "/lib/modprobe.d")
_BLACKLISTS_NOUVEAU = re.compile(r"^\s*blacklist\s+nouveau\s*$", re.MULTILINE)
# The guide's two lines: no nouveau, and no nouveau modesetting should something load it.
NOUVEAU_BLACKLIST_TEXT = (
    "# Written by the kubernetes-worker charm: the NVIDIA driver needs the GPUs.\n"
    "blacklist nouveau\noptions nouveau modeset=0\n"
)
VARIANTS = ("server", "server-open")
DRIVER_CHOICES = "auto, none, or a branch such as 580, 580-server or 580-server-open"
_CHOICE = re.compile(r"^(?P<branch>\d{3})(?:-(?P<variant>server|server-open))?$")
# An Ubuntu kernel ABI as `uname -r` prints it: 6.8.0-1015-aws, 6.14.0-1012-aws, ...
_ABI = re.compile(r"^\d+\.\d+\.\d+-\d+-[a-z0-9][a-z0-9-]*$")
_ABI_SUFFIX = re.compile(r"-\d+\.\d+\.\d+-\d+-[a-z0-9][a-z0-9-]*$")  # an ABI package
# One line of `ubuntu-drivers list --gpgpu [--recommended]`.
_LISTED = re.compile(
    r"^nvidia-(?:driver|headless-no-dkms)-(?P<branch>\d{3})-(?P<variant>server(?:-open)?)"
    r"(?:,\s*\(kernel modules provided by |\s+)"
    r"linux-modules-nvidia-(?P=branch)-(?P=variant)-(?P<flavour>[a-z0-9][a-z0-9.-]*)\)?\s*$"
)


class DriverPlanError(ValueError):
    """No driver can be chosen; the message says what the operator should do."""


@dataclasses.dataclass(frozen=True)
class DriverChoice:
    """The `nvidia-driver` option: auto, none, or a branch with an optional variant."""

    mode: str  # "auto" | "none" | "branch"
    branch: str | None = None
    variant: str | None = None  # None: the variant ubuntu-drivers ranks first

    @classmethod
    def parse(cls, value: str) -> DriverChoice:
        """Parse the option value.

        Raises:
            ValueError: the value is none of the allowed forms; the message lists them.
        """
        text = str(value).strip().lower()
        if text in ("auto", "none"):
            return cls(mode=text)
        match = _CHOICE.match(text)
        if match:
            return cls(mode="branch", branch=match["branch"], variant=match["variant"])
        raise ValueError(f"nvidia-driver must be {DRIVER_CHOICES}, not {value!r}")

    def accepts(self, series: Series) -> bool:
        """Whether an installed series is what this choice asks for."""
        if self.mode != "branch":
            return True
        return series.branch == self.branch and self.variant in (None, series.variant)


@dataclasses.dataclass(frozen=True)
class Series:
    """One driver series as Ubuntu packages it, and the kernel flavour its modules follow."""

    branch: str  # "580"
    variant: str  # "server" or "server-open"
    flavour: str  # "aws": the kernel metapackage's flavour

    @property
    def name(self) -> str:
        """`580-server-open`."""
        return f"{self.branch}-{self.variant}"

    @property
    def userspace(self) -> tuple[str, str]:
        """The headless userspace (CUDA libraries, no X) and nvidia-smi."""
        return (f"nvidia-headless-no-dkms-{self.name}", f"nvidia-utils-{self.branch}-server")

    @property
    def modules_meta(self) -> str:
        """The metapackage that follows the flavour's newest kernel."""
        return f"linux-modules-nvidia-{self.name}-{self.flavour}"

    def modules(self, abi: str) -> str:
        """The prebuilt modules for one kernel ABI."""
        return f"linux-modules-nvidia-{self.name}-{abi}"

    @property
    def fabric(self) -> tuple[str, str]:
        """Fabric Manager and NSCQ, for NVSwitch machines."""
        return (f"nvidia-fabricmanager-{self.branch}", f"libnvidia-nscq-{self.branch}")


def parse_gpgpu_list(text: str) -> list[Series]:
    """The server series `ubuntu-drivers list --gpgpu [--recommended]` printed, best first.

    Desktop drivers and lines without prebuilt modules (DKMS only) are left out.
    """
    found = []
    for line in text.splitlines():
        match = _LISTED.match(line.strip())
        if match:
            found.append(Series(match["branch"], match["variant"], match["flavour"]))
    return found


def pick(choice: DriverChoice, listed: Sequence[Series]) -> Series | None:
    """The first listed series the choice accepts (ubuntu-drivers' order), or None."""
    return next((s for s in listed if choice.accepts(s)), None)


def end_of_life(branch: str, today: datetime.date) -> str | None:
    """`June 2026` when NVIDIA's support for the branch ended by `today`, else None."""
    ends = END_OF_LIFE.get(branch)
    if ends is None:
        if int(branch) >= max(int(b) for b in END_OF_LIFE):
            return None  # newer than NVIDIA's table: not known to have ended
        return "before 2026"  # an older branch the table no longer lists
    return ends.strftime("%B %Y") if ends < today else None


def pick_long_term(
    listed: Sequence[Series], support: dict[str, str], today: datetime.date
) -> Series | None:
    """`auto`: the newest listed LTSB NVIDIA still supports, in the variant listed first."""
    fit = [
        s
        for s in listed
        if support.get(s.name) == LONG_TERM and end_of_life(s.branch, today) is None
    ]
    if not fit:
        return None
    newest = max(int(s.branch) for s in fit)
    return next(s for s in fit if int(s.branch) == newest)


def parse_support(text: str) -> dict[str, str]:
    """{series name: Support} from `apt-cache show` stanzas of `nvidia-driver-<series>`."""
    found, package = {}, None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "Package":
            package = value.strip()
        elif key == "Support" and package and package.startswith("nvidia-driver-"):
            found[package.removeprefix("nvidia-driver-")] = value.strip()
        elif not line.strip():
            package = None
    return found


def support_levels(host: Host, listed: Sequence[Series]) -> dict[str, str]:
    """The `Support` of each listed series' `nvidia-driver-<series>` (one apt-cache show)."""
    names = [f"nvidia-driver-{name}" for name in dict.fromkeys(s.name for s in listed)]
    if not names:
        return {}
    try:
        return parse_support(host.run(APT_CACHE, "show", "--no-all-versions", *names))
    except CommandError as e:
        logger.info("apt-cache show %s: %s", " ".join(names), e.last_line)
        return {}


# ------------------------------------------------------------------------ what is there


@dataclasses.dataclass(frozen=True)
class Installed:
    """NVIDIA packages dpkg has installed: {name: version}."""

    packages: dict[str, str]

    @property
    def series(self) -> Series | None:
        """The installed series (flavour empty when no modules metapackage is installed)."""
        branch = next(
            (
                m.group(1)
                for name in self.packages
                if (m := re.fullmatch(r"nvidia-utils-(\d{3})-server", name))
            ),
            None,
        )
        if branch is None:
            return None
        variant = (
            "server-open"
            if f"nvidia-headless-no-dkms-{branch}-server-open" in self.packages
            else "server"
        )
        prefix = f"linux-modules-nvidia-{branch}-{variant}-"
        flavours = [
            name.removeprefix(prefix)
            for name in self.packages
            if name.startswith(prefix) and not _ABI.match(name.removeprefix(prefix))
        ]
        return Series(branch, variant, flavours[0] if flavours else "")

    @property
    def driver_version(self) -> str | None:
        """Upstream version of the installed userspace: `580.95.05`."""
        series = self.series
        if series is None:
            return None
        version = self.packages.get(series.userspace[1], "")
        return version.split("-", 1)[0] or None


def parse_installed(text: str) -> Installed:
    """Parse `dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}'` lines."""
    packages = {}
    for line in text.splitlines():
        fields = line.split()
        # The abbreviated status is the desired action then the state: `ii` installed,
        # `hi` installed and held (the charm holds the driver), `rc` removed.
        if len(fields) == 3 and fields[0][1:2] == "i":
            packages[fields[1]] = fields[2]
    return Installed(packages)


def installed(host: Host) -> Installed:
    """The NVIDIA packages installed (one dpkg-query)."""
    try:
        out = host.run(DPKG_QUERY, "-W", "-f", DPKG_FORMAT, "*nvidia*")
    except CommandError:
        return Installed({})  # dpkg-query exits 1 when no package matches
    return parse_installed(out)


def _abi_key(abi: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", abi))


def kernels(host: Host) -> tuple[str, str]:
    """(running kernel, kernel the next boot runs).

    The next boot runs the highest installed `/boot/vmlinuz-<abi>`: grub-mkconfig's
    10_linux lists kernels newest first (version_sort) and Ubuntu boots entry 0.
    """
    running = host.run(UNAME, "-r").strip()
    boot = host.path("/boot")
    installed_abis = [
        p.name.removeprefix("vmlinuz-")
        for p in (boot.glob("vmlinuz-*") if boot.is_dir() else ())
        if _ABI.match(p.name.removeprefix("vmlinuz-"))
    ]
    upcoming = max([*installed_abis, running], key=_abi_key)
    return running, upcoming


def listed_series(host: Host, *, recommended: bool) -> list[Series]:
    """Ask ubuntu-drivers (installing ubuntu-drivers-common when missing).

    Raises:
        apt.AptError: ubuntu-drivers-common could not be installed.
        CommandError: ubuntu-drivers failed.
    """
    if not host.path(UBUNTU_DRIVERS).exists():
        apt.install(host, {UBUNTU_DRIVERS_PACKAGE: None}, hold=False)
    args = ["list", "--gpgpu"] + (["--recommended"] if recommended else [])
    return parse_gpgpu_list(host.run(UBUNTU_DRIVERS, *args))


# ------------------------------------------------------------------------------ the plan


@dataclasses.dataclass(frozen=True)
class DriverResult:
    """What `ensure` did and found.

    Attributes:
        series: the driver series the charm manages (None: none, or the host's own).
        changed: apt installed or held something.
        report: nvidia-smi after the changes.
        reboot: why the GPUs need a reboot now (the next kernel's modules are in place).
        update: packages to install after draining and before that reboot (the driver
            moving with the kernel), empty when the reboot needs none.
        note: something worth saying in the status (a kernel waiting for a reboot).
        problem: what the operator must fix (a Blocked status), or None.
        fabric: why an NVSwitch machine's GPUs are not on their fabric yet, or None.
    """

    series: Series | None
    changed: bool
    report: gpu.SmiReport
    reboot: str | None = None
    update: tuple[str, ...] = ()
    note: str = ""
    problem: str | None = None
    fabric: nvidia.Fabric | None = None


def _try_install(host: Host, packages: Iterable[str]) -> apt.AptError | None:
    try:
        apt.install(host, dict.fromkeys(packages), hold=False)
    except apt.AptError as e:
        return e
    return None


def _missing(detail: str) -> bool:
    return "Unable to locate package" in detail or "has no installation candidate" in detail


def _choose(
    host: Host, choice: DriverChoice, inventory: gpu.GpuInventory, today: datetime.date
) -> Series:
    """The series to install, from ubuntu-drivers (`auto`: NVIDIA's newest long-term branch).

    Raises:
        DriverPlanError: nothing fits the choice, or the branch asked for has ended.
    """
    try:
        listed = listed_series(host, recommended=False)
    except CommandError as e:
        raise DriverPlanError(
            f"cannot choose an NVIDIA driver: {e.last_line}; set nvidia-driver to a branch "
            "such as 580, or to none"
        ) from None
    if choice.mode == "auto":
        support = support_levels(host, listed)
        series = pick_long_term(listed, support, today)
        if series is None:
            raise DriverPlanError(_no_long_term_message(inventory, listed, support, today))
        return series
    series = pick(choice, listed)
    if series is None:
        raise DriverPlanError(
            f"ubuntu-drivers lists no driver {choice.branch} with prebuilt modules for "
            f"{inventory.describe()} on this kernel; set nvidia-driver to one of "
            f"{', '.join(s.name for s in listed) or 'the branches ubuntu-drivers lists'}, "
            "or install a driver and set nvidia-driver=none"
        )
    ended = end_of_life(series.branch, today)
    if ended is not None:
        raise DriverPlanError(
            f"NVIDIA driver branch {series.branch} reached its end of life ({ended}, NVIDIA's "
            "data center driver support matrix) and gets no more security fixes; set "
            "nvidia-driver=auto for the newest long-term branch, or to a supported branch"
        )
    return series


def _no_long_term_message(
    inventory: gpu.GpuInventory,
    listed: Sequence[Series],
    support: dict[str, str],
    today: datetime.date,
) -> str:
    described = []
    for s in dict.fromkeys(s.name for s in listed):
        level = support.get(s, "no support level")
        ended = end_of_life(s.split("-", 1)[0], today)
        described.append(f"{s} ({level}{f', ended {ended}' if ended else ''})")
    return (
        f"ubuntu-drivers lists no NVIDIA long-term support branch NVIDIA still supports for "
        f"{inventory.describe()}: {', '.join(described) or 'none with prebuilt modules'}; "
        "set nvidia-driver to a listed branch to accept a shorter-lived one, or install a "
        "driver and set nvidia-driver=none"
    )


def _install_fresh(host: Host, series: Series, nvswitch: bool) -> tuple[str, str]:
    """Install a series where no driver works; the kernels (running, next boot) after it.

    The userspace and the flavour metapackage go first, in one transaction: the
    metapackage pulls the modules of the archive's newest kernel, and that kernel with
    them. Then the modules of the running kernel and of the next boot's are tried one
    by one: the archive may still carry them built for an older driver, which apt
    refuses, and then the next boot is what brings the GPUs up.
    """
    apt.install(host, dict.fromkeys((*series.userspace, series.modules_meta)), hold=False)
    apt.install(host, dict.fromkeys(series.userspace), hold=True, refresh=False)
    running, upcoming = kernels(host)
    for abi in dict.fromkeys((upcoming, running)):
        if series.modules(abi) not in installed(host).packages:
            _try_install(host, [series.modules(abi)])
    if nvswitch:
        _ensure_fabric_packages(host, series)
    return running, upcoming


def _ensure_fabric_packages(host: Host, series: Series) -> bool:
    version = installed(host).driver_version
    pins = dict.fromkeys(series.fabric, f"{version}-*" if version else None)
    return apt.install(host, pins, hold=True, refresh=False)


def _release_module_holds(host: Host) -> bool:
    """Unhold module packages (earlier revisions held the metapackage, pinning one ABI)."""
    stale = sorted(p for p in apt.held(host) if p.startswith("linux-modules-nvidia-"))
    if stale:
        host.run(APT_MARK, "unhold", *stale)
    return bool(stale)


def _keep_in_step(
    host: Host, series: Series, have: Installed, upcoming: str
) -> tuple[bool, tuple[str, ...], str | None]:
    """Modules for the kernel the next boot runs; (changed, update, problem)."""
    changed = _release_module_holds(host)
    wanted = [series.modules(upcoming)]
    if series.flavour:
        wanted.append(series.modules_meta)
    missing = [p for p in wanted if p not in have.packages]
    if missing:
        error = _try_install(host, missing)
        if error is None:
            changed = True
        elif _missing(error.detail):
            return (
                False,
                (),
                (
                    f"kernel {upcoming} is installed but Ubuntu has no {series.name} modules for "
                    f"it yet ({error.detail}); a reboot would start it without GPUs: wait for "
                    f"{series.modules(upcoming)}, or remove linux-image-{upcoming}"
                ),
            )
        else:  # the next kernel's modules need a newer driver: move them together
            extra = list(series.fabric) if any(p in have.packages for p in series.fabric) else []
            return False, (*series.userspace, *extra, *missing), None
    # The running kernel needs nothing more: its module is loaded (or, on a first
    # install, `_install_fresh` tried its package), and the next boot runs `upcoming`.
    return changed, (), None


def auto_installed(text: str) -> set[str]:
    """Packages /var/lib/apt/extended_states marks `Auto-Installed: 1`."""
    found, package = set(), None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "Package":
            package = value.strip()
        elif key == "Auto-Installed" and value.strip() == "1" and package:
            found.add(package)
        elif not line.strip():
            package = None
    return found


def _mark_modules_auto(host: Host, have: Installed) -> bool:
    """`apt-mark auto` the installed per-kernel ABI packages still marked manual."""
    auto = auto_installed(host.read(EXTENDED_STATES) or "")
    manual = sorted(
        name
        for name in have.packages
        if name.startswith("linux-modules-nvidia-")
        and _ABI_SUFFIX.search(name)
        and name not in auto
    )
    if manual:
        host.run(APT_MARK, "auto", *manual)
    return bool(manual)


def nouveau_blacklisted(host: Host) -> bool:
    """Whether a modprobe.d file (the driver package's, or ours) blacklists nouveau."""
    for name in MODPROBE_DIRS:
        directory = host.path(name)
        for conf in sorted(directory.glob("*.conf")) if directory.is_dir() else []:
            if _BLACKLISTS_NOUVEAU.search(conf.read_text(errors="replace")):
                return True
    return False


def release_from_nouveau(host: Host) -> bool:
    """Blacklist nouveau and rebuild the initramfs unless done; True when this did it.

    The driver's nvidia-kernel-common package did both when it was installed (its
    postinst), so this acts only where its file is gone.
    """
    if nouveau_blacklisted(host):
        return False
    host.write(NOUVEAU_BLACKLIST, NOUVEAU_BLACKLIST_TEXT)
    host.run(UPDATE_INITRAMFS, "-u")
    return True


def load_module(host: Host) -> None:
    """`modprobe nvidia` unless loaded; a failure is logged (nvidia-smi tells the rest)."""
    if host.path("/sys/module/nvidia").is_dir():
        return
    try:
        host.run(MODPROBE, "nvidia")
    except CommandError as e:
        logger.info("modprobe nvidia: %s", e.last_line)


def fabric_state(host: Host) -> nvidia.Fabric | None:
    """Enable and start Fabric Manager; None once the GPUs' fabric registration is done.

    Ready means registration Completed with Success on every GPU that reports a fabric
    (`nvidia.read_fabric`), not only `systemctl is-active`: a running Fabric Manager
    whose fabric setup failed leaves CUDA failing (error 802; NVIDIA/NVSentinel#883).
    Where the GPUs report no fabric state (pre-Hopper), an active service is all there
    is to check. A service that does not start is a failure (Blocked); it starts only
    with the nvidia module loaded, so the start is retried on the next reconcile.
    """
    try:
        host.run(SYSTEMCTL, "is-active", "--quiet", FABRIC_SERVICE)
    except CommandError:
        try:
            host.run(SYSTEMCTL, "enable", "--now", FABRIC_SERVICE)
        except CommandError as e:
            return nvidia.Fabric(
                f"{FABRIC_SERVICE} did not start ({e.last_line}); check "
                f"`journalctl -u {FABRIC_SERVICE}`",
                failed=True,
            )
    return nvidia.read_fabric(host)


def _reboot_reason(
    report: gpu.SmiReport,
    series: Series,
    have: Installed,
    running: str,
    upcoming: str,
    nouveau: bool,
) -> str | None:
    """Why the GPUs need a reboot, only when the kernel booted next has their modules."""
    if report.ok:
        return None
    if series.modules(upcoming) not in have.packages:
        return None  # a reboot would not help
    if nouveau:
        return "nouveau holds the GPUs (now blacklisted; a reboot releases them)"
    if report.state is gpu.SmiState.MISMATCH:
        return "the loaded NVIDIA kernel module does not match the installed driver"
    if running != upcoming:
        return f"kernel {upcoming} has the NVIDIA {series.name} modules, the running {running} not"
    if report.state is gpu.SmiState.NO_DRIVER:  # one reboot may help; never a second
        return "the nvidia kernel module is not loaded"
    return None


def ensure(
    host: Host,
    choice: DriverChoice,
    inventory: gpu.GpuInventory,
    *,
    today: datetime.date,
) -> DriverResult:
    """Make the configured driver present and in step with the kernels.

    `today` decides which branches NVIDIA still supports (`END_OF_LIFE`): the caller's
    date, so that what `auto` picks follows the caller's clock, not the machine's.

    `none`, and `auto` on a host whose working driver is not from Ubuntu's packages,
    leave the driver alone (Fabric Manager is still required on NVSwitch machines).

    A hung driver (nvidia-smi did not answer: `SmiState.HUNG`) is left as it is: no
    package, module or Fabric Manager change and no reboot reason, as none is known to
    help but the reboot a quarantined GPU's repair takes (gpu_repairs.py) or the
    operator's (`gpu_node.GpuState.driver_problem`).

    Raises:
        DriverPlanError: nothing can be installed; the message says what to set.
        apt.AptError: apt failed; `.package` names the failing package.
    """
    report = nvidia.read_smi(host)
    if not inventory.count:
        return DriverResult(None, False, report)
    nvswitch = inventory.nvswitches > 0
    have = installed(host)
    series = have.series
    if report.state is gpu.SmiState.HUNG:  # only a reboot helps: change nothing
        return DriverResult(series, False, report)
    if choice.mode == "none" or (choice.mode == "auto" and report.ok and series is None):
        fabric = fabric_state(host) if nvswitch and report.ok else None
        return DriverResult(None, False, report, fabric=fabric)
    running, upcoming = kernels(host)
    if series is not None and not series.flavour:
        series = dataclasses.replace(series, flavour=_flavour_of(host, series))
    if series is None or not choice.accepts(series):
        target = _choose(host, choice, inventory, today)
        if report.ok and series is not None:  # switching a working driver: under a drain
            packages = (*target.userspace, target.modules_meta, target.modules(upcoming))
            return DriverResult(
                series, False, report, f"switching to NVIDIA driver {target.name}", packages
            )
        running, upcoming = _install_fresh(host, target, nvswitch)
        series, changed, update, problem = target, True, (), None
    else:
        changed, update, problem = _keep_in_step(host, series, have, upcoming)
        if nvswitch:
            changed = _ensure_fabric_packages(host, series) or changed
    return _settle(host, inventory, series, report, changed, update, problem, running, upcoming)


def _settle(
    host: Host,
    inventory: gpu.GpuInventory,
    series: Series,
    report: gpu.SmiReport,
    changed: bool,
    update: tuple[str, ...],
    problem: str | None,
    running: str,
    upcoming: str,
) -> DriverResult:
    """After the packages: release the GPUs from nouveau, load the module, decide."""
    nouveau = any(d.kernel_driver == "nouveau" for d in inventory.devices)
    if nouveau:
        changed = release_from_nouveau(host) or changed
    if not report.ok:
        load_module(host)
        report = nvidia.read_smi(host)
    have = installed(host)
    changed = _mark_modules_auto(host, have) or changed
    reason = _reboot_reason(report, series, have, running, upcoming, nouveau)
    if update:
        reason = (
            f"kernel {upcoming} needs a newer NVIDIA {series.name} driver than the running "
            f"{have.driver_version}"
        )
    note = ""
    if report.ok and running != upcoming and not update and not problem:
        note = f"; kernel {upcoming} waits for a reboot"
    fabric = fabric_state(host) if inventory.nvswitches and report.ok else None
    return DriverResult(series, changed, report, reason, update, note, problem, fabric)


def _flavour_of(host: Host, series: Series) -> str:
    """The modules flavour for an installed series without its metapackage (a host's own)."""
    try:
        listed = listed_series(host, recommended=False)
    except (CommandError, apt.AptError):
        return ""
    same = [s for s in listed if (s.branch, s.variant) == (series.branch, series.variant)]
    return same[0].flavour if same else ""


def apply_update(host: Host, packages: Sequence[str]) -> None:
    """Install the driver update `ensure` planned (after the drain), holding the userspace.

    Raises:
        apt.AptError: apt failed; `.package` names the failing package.
    """
    if not packages:
        return
    apt.install(host, dict.fromkeys(packages), hold=False, upgrade=True)
    held = [p for p in packages if p.startswith(("nvidia-", "libnvidia-"))]
    apt.install(host, dict.fromkeys(held), hold=True, refresh=False)
    _mark_modules_auto(host, installed(host))


def apt_blocked_message(error: apt.AptError) -> str:
    """Blocked status for a failed install: the package, apt's words, what to check."""
    return (
        f"failed to install {error.package}: {error.detail}; check the package source and "
        "that the nvidia-driver branch exists for this kernel, or set nvidia-driver=none"
    )
