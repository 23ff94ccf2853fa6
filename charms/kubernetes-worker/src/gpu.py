# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""NVIDIA GPU detection and nvidia-smi parsing for the kubernetes-worker charm.

Everything here is a pure function of its inputs: `detect()` reads a sysfs tree (the
real `/sys`, or a fixture tree in tests) and a PCI id database; the `parse_*` functions
take nvidia-smi's text output. No ops imports and no subprocesses: `nvidia.py` and
`driver.py` run the programs and hand their output here.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import enum
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

NVIDIA_VENDOR = 0x10DE
# PCI base class 0x03 (display), subclass 0x00 (VGA compatible) or 0x02 (3D controller).
# Audio functions (0x0403), NVSwitch bridges (0x0680) and the rest are not GPUs.
GPU_CLASSES = frozenset({0x0300, 0x0302})
# NVSwitch: an NVIDIA function of class 0x0680 ("other bridge"), as on p4d and p5 (HGX
# boards). Where they exist, CUDA needs NVIDIA Fabric Manager (Ubuntu Server guide,
# install-nvidia-drivers.md); one GPU of such a board passed to a VM shows none
# (tests/fixtures/gpu/h100-sxm5-vm: fabric state N/A).
NVSWITCH_CLASS = 0x0680
DEFAULT_PCI_IDS = Path("/usr/share/misc/pci.ids")

# Models worth naming when no PCI id database is installed (ids and names checked against
# pciutils/pciids pci.ids, c1c1254 2026-08-22). Datacenter models AWS offers, plus their
# close relatives.
KNOWN_MODELS: Mapping[int, str] = {
    0x1DB1: "Tesla V100 SXM2 16GB",
    0x1DB4: "Tesla V100 PCIe 16GB",
    0x1DB5: "Tesla V100 SXM2 32GB",
    0x1EB4: "T4G",
    0x1EB8: "Tesla T4",
    0x20B0: "A100 SXM4 40GB",
    0x20B2: "A100 SXM4 80GB",
    0x20B5: "A100 PCIe 80GB",
    0x20B7: "A30 PCIe",
    0x20F1: "A100 PCIe 40GB",
    0x2236: "A10",
    0x2237: "A10G",
    0x2321: "H100L 94GB",
    0x2330: "H100 SXM5 80GB",
    0x2331: "H100 PCIe",
    0x2335: "H200 SXM 141GB",
    0x233B: "H200 NVL",
    0x2342: "GH200 120GB / 480GB",
    0x26B5: "L40",
    0x26B9: "L40S",
    0x27B8: "L4",
    0x2901: "B200",
    0x3182: "B300 SXM6 AC",
}
# GPUs that support Multi-Instance GPU: the Ampere GA100, Hopper GH100 and Blackwell GB100
# parts of the MIG user guide's "Supported GPUs", and the B300 (GB110), whose layouts
# mig-parted v0.15.0's config-default.yaml has (device-filter 0x318210DE). The control
# plane has NVIDIA's layouts for exactly these ids (its mig_manager.NVIDIA_MIG_PROFILES):
# both charms' suites check them against tests/fixtures/mig/nvidia-mig-models.yaml.
MIG_CAPABLE = frozenset(
    {0x20B0, 0x20B2, 0x20B5, 0x20B7, 0x20F1, 0x2321, 0x2330, 0x2331, 0x2335, 0x233B}
    | {0x2342, 0x2901, 0x3182}
)
# CUDA compute capability of the models above, for drivers whose nvidia-smi cannot report
# it (`compute_cap` below). Values from NVIDIA's "CUDA GPU Compute Capability" table
# (developer.nvidia.com/cuda-gpus): V100 7.0; T4 and T4G 7.5; A100 and A30 8.0; A10,
# A10G 8.6; L4, L40, L40S 8.9; H100, H200, GH200 9.0; B200 10.0; B300 10.3.
KNOWN_COMPUTE: Mapping[int, str] = {
    **dict.fromkeys((0x1DB1, 0x1DB4, 0x1DB5), "7.0"),
    **dict.fromkeys((0x1EB4, 0x1EB8), "7.5"),
    **dict.fromkeys((0x20B0, 0x20B2, 0x20B5, 0x20B7, 0x20F1), "8.0"),
    **dict.fromkeys((0x2236, 0x2237), "8.6"),
    **dict.fromkeys((0x26B5, 0x26B9, 0x27B8), "8.9"),
    **dict.fromkeys((0x2321, 0x2330, 0x2331, 0x2335, 0x233B, 0x2342), "9.0"),
    0x2901: "10.0",
    0x3182: "10.3",
}

SMI_FIELDS = (
    "index",
    "name",
    "memory.total",
    "memory.used",
    "utilization.gpu",
    "temperature.gpu",
    "mig.mode.current",
    "driver_version",
    "pci.bus_id",
    "compute_cap",
)
SMI_QUERY_ARGS = (f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits")
# `compute_cap` ("8.6"; NVIDIA's CUDA Programming Guide, "Obtain the GPU Compute
# Capability": `nvidia-smi --query-gpu=name,compute_cap`) is last so that output of the
# fields before it still parses. Drivers without it (470 does not know it: huggingface/
# candle#733, NVIDIA/TensorRT-LLM#735; 570 does: canonical/inference-snaps#128) refuse
# the whole query with `Field "compute_cap" is not a valid field to query.`; the query
# is then asked again without it.
SMI_QUERY_ARGS_WITHOUT_COMPUTE_CAP = (
    f"--query-gpu={','.join(SMI_FIELDS[:-1])}",
    "--format=csv,noheader,nounits",
)
UNKNOWN_FIELD_TEXT = "is not a valid field to query"
MISMATCH_TEXT = "driver/library version mismatch"
REBOOT_REQUIRED_FILE = "/var/run/reboot-required"


@dataclasses.dataclass(frozen=True)
class GpuDevice:
    """One NVIDIA GPU PCI function found in sysfs.

    Attributes:
        pci_address: the sysfs name, such as `0000:00:1e.0`.
        device_id: PCI device id as 4 lowercase hex digits, such as `2237`.
        subsystem_id: `vendor:device` of the board (subsystem), or None when unreadable.
        model: marketing name, `NVIDIA A10G` (from nvidia-smi once it runs, else pci.ids).
        kernel_driver: the driver bound to the function (`nvidia`, `nouveau`, `vfio-pci`).
        mig_capable: whether the model supports Multi-Instance GPU.
        memory_mib: total memory, known only once nvidia-smi reports it.
        compute_capability: CUDA compute capability, `8.6` (nvidia-smi's, else the
            built-in table's), or None when unknown.
        pci_class: PCI base class and subclass, 0x0302 (3D controller) or 0x0300 (VGA).
    """

    pci_address: str
    device_id: str
    subsystem_id: str | None
    model: str
    kernel_driver: str | None = None
    mig_capable: bool = False
    memory_mib: int | None = None
    compute_capability: str | None = None
    pci_class: int | None = None


@dataclasses.dataclass(frozen=True)
class GpuInventory:
    """The NVIDIA GPUs of one machine and whether the `nvidia` kernel module is loaded."""

    devices: tuple[GpuDevice, ...] = ()
    module_loaded: bool = False
    nvswitches: int = 0

    @property
    def count(self) -> int:
        """Number of GPUs."""
        return len(self.devices)

    @property
    def models(self) -> dict[str, int]:
        """GPU count per model, most common first (ties by name)."""
        counts = collections.Counter(d.model for d in self.devices)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def model(self) -> str | None:
        """The most common model, or None without GPUs."""
        return next(iter(self.models), None)

    @property
    def mig_capable(self) -> bool:
        """True when any GPU supports MIG."""
        return any(d.mig_capable for d in self.devices)

    @property
    def memory_mib(self) -> int | None:
        """Memory of one GPU of the most common model (None until nvidia-smi reported it)."""
        known = [d.memory_mib for d in self.devices if d.model == self.model and d.memory_mib]
        return max(known) if known else None

    @property
    def compute_capability(self) -> str | None:
        """CUDA compute capability of the most common model, `8.6`, or None when unknown."""
        known = [d.compute_capability for d in self.devices if d.model == self.model]
        return next((c for c in known if c), None)

    @property
    def pci_classes(self) -> frozenset[int]:
        """The PCI classes (0x0300, 0x0302) of the GPUs whose class is known."""
        return frozenset(d.pci_class for d in self.devices if d.pci_class is not None)

    def describe(self) -> str:
        """Human summary: `4x NVIDIA A10G`, or `2x NVIDIA A10G + 1x NVIDIA Tesla T4`."""
        return " + ".join(f"{n}x {model}" for model, n in self.models.items())


# ---------------------------------------------------------------------------- detection


def _read_hex(path: Path) -> int | None:
    try:
        return int(path.read_text().strip(), 16)
    except (OSError, ValueError):
        return None


def _bound_driver(function: Path) -> str | None:
    link = function / "driver"
    try:
        return Path(link.resolve(strict=True)).name if link.exists() else None
    except OSError:
        return None


def parse_pci_ids(text: str, vendor: int = NVIDIA_VENDOR) -> dict[int, str]:
    """Return {device id: name} for one vendor from pci.ids text (subsystems ignored)."""
    names: dict[int, str] = {}
    header = f"{vendor:04x}  "
    inside = False
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if not line.startswith("\t"):
            if inside:  # the next vendor (or the class section) ends our block
                break
            inside = line.lower().startswith(header)
            continue
        if inside and not line.startswith("\t\t"):
            dev_id, _, name = line.strip().partition("  ")
            try:
                names[int(dev_id, 16)] = name.strip()
            except ValueError:
                continue
    return names


def model_name(device_id: int, pci_names: Mapping[int, str] | None = None) -> str:
    """Marketing name for an NVIDIA device id: `NVIDIA A10G`.

    pci.ids names look like `GA102GL [A10G]`; the bracketed part is the product. Without
    a database entry the built-in table is used, then `NVIDIA device 0x....`.
    """
    raw = (pci_names or {}).get(device_id) or KNOWN_MODELS.get(device_id)
    if not raw:
        return f"NVIDIA device 0x{device_id:04x}"
    match = re.search(r"\[([^\]]+)\]\s*$", raw)
    product = match.group(1) if match else raw
    return product if product.startswith("NVIDIA") else f"NVIDIA {product}"


def _load_pci_names(pci_ids: Path | None) -> dict[int, str]:
    if pci_ids is None:
        return {}
    try:
        return parse_pci_ids(pci_ids.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        logger.debug("no PCI id database at %s; using built-in names", pci_ids)
        return {}


def detect(
    sysfs_root: Path = Path("/sys"), pci_ids: Path | None = DEFAULT_PCI_IDS
) -> GpuInventory:
    """Find the NVIDIA GPUs under `sysfs_root/bus/pci/devices` and the module state.

    A PCI function is a GPU only with vendor 0x10de and class 0x0300xx or 0x0302xx.
    Functions whose files cannot be read are skipped. Memory stays unknown here.
    """
    devices_dir = sysfs_root / "bus" / "pci" / "devices"
    found: list[tuple[Path, int, int, int | None, int | None]] = []
    nvswitches = 0
    if devices_dir.is_dir():
        for function in sorted(devices_dir.iterdir(), key=lambda p: p.name):
            if _read_hex(function / "vendor") != NVIDIA_VENDOR:
                continue
            pci_class = _read_hex(function / "class")
            if pci_class is not None and (pci_class >> 8) == NVSWITCH_CLASS:
                nvswitches += 1
            if pci_class is None or (pci_class >> 8) not in GPU_CLASSES:
                continue
            device = _read_hex(function / "device")
            if device is None:
                continue
            found.append(
                (
                    function,
                    device,
                    pci_class >> 8,
                    _read_hex(function / "subsystem_vendor"),
                    _read_hex(function / "subsystem_device"),
                )
            )
    names = _load_pci_names(pci_ids) if found else {}
    gpus = tuple(
        GpuDevice(
            pci_address=function.name,
            device_id=f"{device:04x}",
            subsystem_id=(
                f"{sub_vendor:04x}:{sub_device:04x}"
                if sub_vendor is not None and sub_device is not None
                else None
            ),
            model=model_name(device, names),
            kernel_driver=_bound_driver(function),
            mig_capable=device in MIG_CAPABLE,
            compute_capability=KNOWN_COMPUTE.get(device),
            pci_class=pci_class,
        )
        for function, device, pci_class, sub_vendor, sub_device in found
    )
    return GpuInventory(
        devices=gpus,
        module_loaded=(sysfs_root / "module" / "nvidia").is_dir(),
        nvswitches=nvswitches if gpus else 0,
    )


# ------------------------------------------------------------------------- nvidia-smi


class SmiState(enum.Enum):
    """What running nvidia-smi told us about the driver."""

    OK = "ok"
    ABSENT = "absent"  # nvidia-smi is not installed
    MISMATCH = "mismatch"  # userspace and loaded kernel module differ: reboot
    NO_DRIVER = "no-driver"  # installed, but the kernel module is not loaded
    HUNG = "hung"  # nvidia-smi did not answer in time (killed): the driver is hung
    FAILED = "failed"  # anything else


@dataclasses.dataclass(frozen=True)
class SmiGpu:
    """One GPU as nvidia-smi's `--query-gpu` reports it (None for `[N/A]`)."""

    index: int
    name: str
    memory_total_mib: int | None
    memory_used_mib: int | None
    utilization_pct: int | None
    temperature_c: int | None
    mig_mode: str | None
    driver_version: str
    pci_bus_id: str | None = None
    compute_cap: str | None = None


@dataclasses.dataclass(frozen=True)
class SmiReport:
    """The outcome of asking nvidia-smi: state, GPUs, driver and CUDA versions."""

    state: SmiState
    gpus: tuple[SmiGpu, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        """True when the driver works (NVML initialised and listed the GPUs)."""
        return self.state is SmiState.OK

    @property
    def driver_branch(self) -> str | None:
        """Driver major version, `580` for `580.95.05`."""
        return self.driver_version.split(".", 1)[0] if self.driver_version else None

    @property
    def cuda_major(self) -> str | None:
        """CUDA major version, `13` for `13.0`."""
        return self.cuda_version.split(".", 1)[0] if self.cuda_version else None


def _optional_int(value: str) -> int | None:
    value = value.strip()
    try:
        return int(float(value))
    except ValueError:
        return None  # "[N/A]", "N/A", "[Not Supported]", ...


def _optional_text(value: str) -> str | None:
    value = value.strip()
    return None if not value or value.strip("[]") in ("N/A", "Not Supported") else value


def _compute_cap(fields: list[str]) -> str | None:
    value = fields[9] if len(fields) > 9 else ""
    return value if re.fullmatch(r"\d+\.\d+", value) else None  # "[N/A]" and the like


def parse_smi_csv(text: str) -> tuple[SmiGpu, ...]:
    """Parse `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`.

    Output without the last fields (`pci.bus_id`, `compute_cap`) parses too.

    Raises:
        ValueError: a line does not have the queried fields (nvidia-smi printed an error).
    """
    gpus = []
    for row in csv.reader(line for line in text.splitlines() if line.strip()):
        fields = [f.strip() for f in row]
        if len(fields) < 8 or not fields[0].isdigit():
            raise ValueError(f"unexpected nvidia-smi output: {','.join(row)[:200]}")
        gpus.append(
            SmiGpu(
                index=int(fields[0]),
                name=fields[1],
                memory_total_mib=_optional_int(fields[2]),
                memory_used_mib=_optional_int(fields[3]),
                utilization_pct=_optional_int(fields[4]),
                temperature_c=_optional_int(fields[5]),
                mig_mode=_optional_text(fields[6]),
                driver_version=fields[7],
                pci_bus_id=_optional_text(fields[8]) if len(fields) > 8 else None,
                compute_cap=_compute_cap(fields),
            )
        )
    return tuple(gpus)


# `nvidia-smi --version`: "CUDA Version : 13.2"; driver 610+ says "CUDA UMD version : 13.3"
# (and "CUDA version : Deprecated, ..."). The table header: "CUDA Version: 13.0" or
# "CUDA UMD Version: 13.3". Only a number counts.
_CUDA_RE = re.compile(r"CUDA(?: UMD)? Version\s*:\s*(\d+\.\d+)", re.IGNORECASE)
_DRIVER_RE = re.compile(r"(?:DRIVER|KMD) version\s*:\s*(\d+\.\d+(?:\.\d+)?)", re.IGNORECASE)


def parse_cuda_version(text: str) -> str | None:
    """Return the CUDA version from `nvidia-smi --version` or the nvidia-smi header."""
    match = _CUDA_RE.search(text)
    return match.group(1) if match else None


def parse_driver_version(text: str) -> str | None:
    """Return the driver version from `nvidia-smi --version` (`DRIVER`/`KMD version`)."""
    match = _DRIVER_RE.search(text)
    return match.group(1) if match else None


# The exit status of a command the Host's runner killed at its timeout
# (charms.gpu_k8s.v0.system.SubprocessRunner: CommandError, exit status -1).
HUNG_EXIT = -1


def classify_failure(returncode: int, output: str) -> SmiState:
    """Classify a failed nvidia-smi run from its exit status and combined output."""
    lowered = output.lower()
    if returncode == HUNG_EXIT:
        return SmiState.HUNG
    if returncode == 127 or ("not found" in lowered and "nvidia-smi" in lowered):
        return SmiState.ABSENT
    if MISMATCH_TEXT in lowered:
        return SmiState.MISMATCH
    if returncode == 9 or "couldn't communicate with the nvidia driver" in lowered:
        return SmiState.NO_DRIVER
    return SmiState.FAILED


def smi_report(query: tuple[int, str], version: tuple[int, str] | None = None) -> SmiReport:
    """Build a report from (exit status, output) of the `--query-gpu` and `--version` runs."""
    code, out = query
    if code != 0:
        state = classify_failure(code, out)
        lines = [line.strip() for line in out.splitlines() if line.strip()]
        return SmiReport(state=state, detail=lines[0] if lines else f"exit status {code}")
    try:
        gpus = parse_smi_csv(out)
    except ValueError as e:
        return SmiReport(state=classify_failure(1, out), detail=str(e))
    version_text = version[1] if version and version[0] == 0 else ""
    driver = gpus[0].driver_version if gpus else parse_driver_version(version_text)
    return SmiReport(
        state=SmiState.OK,
        gpus=gpus,
        driver_version=driver,
        cuda_version=parse_cuda_version(version_text),
    )


def _bus_key(address: str) -> tuple[int, int, int, int] | None:
    # sysfs "0000:00:1e.0"; nvidia-smi "00000000:00:1E.0"
    match = re.fullmatch(r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-7])", address)
    if not match:
        return None
    domain, bus, slot, function = (int(g, 16) for g in match.groups())
    return domain, bus, slot, function


def with_smi(inventory: GpuInventory, report: SmiReport) -> GpuInventory:
    """Fill model names, memory, MIG and compute capability from a working nvidia-smi.

    GPUs are matched by PCI bus id (by position when nvidia-smi gave none).
    """
    if not report.ok or not report.gpus:
        return inventory
    by_bus = {_bus_key(g.pci_bus_id): g for g in report.gpus if g.pci_bus_id}
    by_position = sorted(report.gpus, key=lambda g: g.index)
    devices = []
    for i, device in enumerate(inventory.devices):
        smi = by_bus.get(_bus_key(device.pci_address))
        if smi is None and not by_bus and i < len(by_position):
            smi = by_position[i]
        if smi is None:
            devices.append(device)
            continue
        devices.append(
            dataclasses.replace(
                device,
                model=smi.name or device.model,
                memory_mib=smi.memory_total_mib,
                mig_capable=device.mig_capable or smi.mig_mode in ("Enabled", "Disabled"),
                compute_capability=smi.compute_cap or device.compute_capability,
            )
        )
    return dataclasses.replace(inventory, devices=tuple(devices))


# --------------------------------------------------------------------------- decisions


def status_message(inventory: GpuInventory, report: SmiReport) -> str:
    """`Ready: 4x NVIDIA A10G, driver 580, CUDA 13.0`, or `Ready (no GPU)`."""
    if not inventory.count:
        return "Ready (no GPU)"
    parts = [inventory.describe()]
    if report.driver_branch:
        parts.append(f"driver {report.driver_branch}")
    if report.cuda_version:
        parts.append(f"CUDA {report.cuda_version}")
    return "Ready: " + ", ".join(parts)


def gpu_info(
    report: SmiReport,
    mig_devices: Mapping[int, Sequence[Mapping[str, str]]] | None = None,
    mig_profiles: Mapping[int, Mapping[str, int]] | None = None,
) -> dict:
    """Action results for `gpu-info`: one entry per GPU, keys valid for Juju.

    Raises:
        ValueError: nvidia-smi did not work; the message says what it reported.
    """
    if not report.ok:
        raise ValueError(f"nvidia-smi failed ({report.state.value}): {report.detail}")

    def gib(mib: int | None) -> str:
        return "unknown" if mib is None else f"{mib / 1024:.1f} GiB"

    def opt(value: object, unit: str = "") -> str:
        return "n/a" if value is None else f"{value}{unit}"

    gpus: dict[str, dict[str, Any]] = {
        str(g.index): {
            "name": g.name,
            "memory": f"{gib(g.memory_used_mib)} / {gib(g.memory_total_mib)}",
            "memory-used-mib": opt(g.memory_used_mib),
            "memory-total-mib": opt(g.memory_total_mib),
            "utilization": opt(g.utilization_pct, "%"),
            "temperature": opt(g.temperature_c, "C"),
            "mig-mode": g.mig_mode or "not supported",
        }
        for g in report.gpus
    }
    for index, offered in (mig_profiles or {}).items():
        if str(index) in gpus:  # "1g.10gb x7, 2g.20gb x3, ...": what mig-profile can ask
            gpus[str(index)]["mig-profiles"] = ", ".join(f"{p} x{n}" for p, n in offered.items())
    for index, devices in (mig_devices or {}).items():
        if str(index) in gpus:  # {"0": {"profile": "1g.10gb", "uuid": "MIG-..."}, ...}
            gpus[str(index)]["mig-devices"] = {
                d["device"]: {"profile": d["profile"], "uuid": d["uuid"]} for d in devices
            }
    return {
        "count": str(len(report.gpus)),
        "driver": report.driver_version or "unknown",
        "cuda": report.cuda_version or "unknown",
        "gpus": gpus,
    }


# One GPU instance profile row of `nvidia-smi mig -lgip` (the MIG user guide's "List GPU
# Instance Profiles"; recorded on an H100 in tests/fixtures/gpu/h100-sxm5-vm):
# "|   0  MIG 1g.10gb         19     7/7        9.75       No     16     1     0   |"
_LGIP_ROW = re.compile(r"^\|\s+(\d+)\s+MIG\s+(\S+)\s+\d+\s+\d+/(\d+)\s")


def parse_mig_profiles(text: str) -> dict[int, dict[str, int]]:
    """{GPU index: {profile: GPU instances one GPU holds}} from `nvidia-smi mig -lgip`."""
    found: dict[int, dict[str, int]] = {}
    for line in text.splitlines():
        match = _LGIP_ROW.match(line)
        if match:
            found.setdefault(int(match.group(1)), {})[match.group(2)] = int(match.group(3))
    return found


def inventory_records(
    inventory: GpuInventory,
    report: SmiReport,
    mig_profiles: Mapping[int, Mapping[str, int]] | None = None,
) -> list[dict]:
    """The inventory this worker publishes: one record per model, most common first.

    Keys match `kubernetes_cluster.GpuInfo` (`GpuInfo(**record)`): model, count,
    memory_mib, driver, cuda, mig_capable, pci_device_id, and mig_profiles (from the
    first nvidia-smi GPU index of that model) when `mig_profiles` has them. Empty without
    GPUs.
    """
    by_bus = {_bus_key(g.pci_bus_id): g.index for g in report.gpus if g.pci_bus_id}
    records = []
    for model, count in inventory.models.items():
        same = [d for d in inventory.devices if d.model == model]
        memory = [d.memory_mib for d in same if d.memory_mib]
        indexes = [by_bus.get(_bus_key(d.pci_address)) for d in same]
        known = mig_profiles or {}
        profiles = next((dict(known[i]) for i in indexes if i is not None and i in known), None)
        records.append(
            {
                "model": model,
                "count": count,
                "memory_mib": max(memory) if memory else None,
                "driver": report.driver_version if report.ok else None,
                "cuda": report.cuda_version if report.ok else None,
                "mig_capable": any(d.mig_capable for d in same),
                "pci_device_id": same[0].device_id,
                "mig_profiles": profiles,
            }
        )
    return records
