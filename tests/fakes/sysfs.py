"""Build sysfs fixture trees of real machines in a temporary directory.

Each machine is a table of PCI functions with the vendor, device, class and subsystem
ids those machines report (NVIDIA ids checked against pciutils' pci.ids; EC2's own
devices as `lspci -nn` shows them on Nitro instances). `build()` lays them out like the
kernel does: the function directories under `devices/pci<domain>:<bus>/`, symlinked from
`bus/pci/devices/`, a `driver` symlink into `bus/pci/drivers/<name>` when bound, and
`module/nvidia/` when the nvidia module is loaded.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Function:
    """One PCI function as sysfs shows it."""

    address: str
    vendor: int
    device: int
    pci_class: int
    subsystem: tuple[int, int] | None = None
    driver: str | None = None


def _ec2_platform(display: bool = True) -> list[Function]:
    """The devices every EC2 Nitro x86 instance has (i440FX-style chipset, EBS, ENA)."""
    functions = [
        Function("0000:00:00.0", 0x8086, 0x1237, 0x060000),  # host bridge
        Function("0000:00:01.0", 0x8086, 0x7000, 0x060100),  # ISA bridge
        Function("0000:00:01.3", 0x8086, 0x7113, 0x068000, driver="piix4_smbus"),  # other bridge
        Function("0000:00:04.0", 0x1D0F, 0x8061, 0x010802, (0x1D0F, 0x8061), "nvme"),  # EBS
        Function("0000:00:05.0", 0x1D0F, 0xEC20, 0x020000, (0x1D0F, 0xEC20), "ena"),  # ENA
    ]
    if display:  # Amazon's own VGA device: a VGA class function that is not NVIDIA
        functions.append(Function("0000:00:03.0", 0x1D0F, 0x1111, 0x030000, (0x1D0F, 0x1111)))
    return functions


def _gpus(addresses: list[str], device: int, subsystem: int, driver: str | None) -> list[Function]:
    return [Function(a, 0x10DE, device, 0x030200, (0x10DE, subsystem), driver) for a in addresses]


def machine(name: str, driver: str | None = "nvidia") -> list[Function]:
    """The PCI functions of a named machine; `driver` is what the GPUs are bound to."""
    if name == "g4dn-t4":  # g4dn.xlarge: 1x Tesla T4
        return _ec2_platform() + _gpus(["0000:00:1e.0"], 0x1EB8, 0x12A2, driver)
    if name == "p3-v100":  # p3.8xlarge: 4x Tesla V100 SXM2 16GB
        addrs = [f"0000:00:{slot:02x}.0" for slot in (0x1B, 0x1C, 0x1D, 0x1E)]
        return _ec2_platform() + _gpus(addrs, 0x1DB1, 0x1212, driver)
    if name == "g5-a10g":  # g5.12xlarge: 4x A10G
        addrs = [f"0000:00:{slot:02x}.0" for slot in (0x1B, 0x1C, 0x1D, 0x1E)]
        return _ec2_platform() + _gpus(addrs, 0x2237, 0x152F, driver)
    if name == "p4d-a100":  # p4d.24xlarge: 8x A100 SXM4 40GB + 6 NVSwitch bridges
        gpus = [f"0000:{bus:02x}:1c.0" for bus in (0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80)]
        switches = [
            Function(f"0000:{bus:02x}:00.0", 0x10DE, 0x1AF1, 0x068000, (0x10DE, 0x1620))
            for bus in (0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5)
        ]
        return _ec2_platform(False) + _gpus(gpus, 0x20B0, 0x134F, driver) + switches
    if name == "p5-h100":  # p5.48xlarge: 8x H100 SXM5 80GB + 4 NVSwitch bridges
        gpus = [f"0000:{bus:02x}:00.0" for bus in (0x53, 0x64, 0x75, 0x86, 0x97, 0xA8, 0xB9, 0xCA)]
        switches = [
            Function(f"0000:{bus:02x}:00.0", 0x10DE, 0x22A3, 0x068000, (0x10DE, 0x1796))
            for bus in (0x05, 0x06, 0x07, 0x08)
        ]
        return _ec2_platform(False) + _gpus(gpus, 0x2330, 0x16C1, driver) + switches
    if name == "desktop-rtx3080":  # a workstation: GeForce RTX 3080 + its HDMI audio function
        return [
            Function("0000:00:00.0", 0x8086, 0x9B33, 0x060000),
            Function("0000:01:00.0", 0x10DE, 0x2206, 0x030000, (0x10DE, 0x1467), driver),
            Function("0000:01:00.1", 0x10DE, 0x1AEF, 0x040300, (0x10DE, 0x1467), "snd_hda_intel"),
        ]
    if name == "m5-cpu":  # a CPU-only instance
        return _ec2_platform()
    raise KeyError(name)


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu"


def recorded(name: str) -> list[Function]:
    """The PCI functions of a recorded machine (`tests/fixtures/gpu/<name>/pci-functions.txt`).

    Each line is what `tools/capture_gpu_fixtures.sh` printed: address, vendor, device,
    class, subsystem vendor, subsystem device and the bound driver (may be missing).
    """
    functions = []
    text = (FIXTURES / name / "pci-functions.txt").read_text()
    for line in text.splitlines():
        address, vendor, device, pci_class, sub_vendor, sub_device, *driver = line.split()
        subsystem = (int(sub_vendor, 16), int(sub_device, 16))
        functions.append(
            Function(
                address,
                int(vendor, 16),
                int(device, 16),
                int(pci_class, 16),
                subsystem if any(subsystem) else None,
                driver[0] if driver else None,
            )
        )
    return functions


MACHINES = ("g4dn-t4", "p3-v100", "g5-a10g", "p4d-a100", "p5-h100", "desktop-rtx3080", "m5-cpu")


def build(root: Path, functions: list[Function], *, module_loaded: bool = True) -> Path:
    """Write a sysfs tree for `functions` under `root` and return `root`."""
    bus_devices = root / "bus" / "pci" / "devices"
    bus_devices.mkdir(parents=True, exist_ok=True)
    for fn in functions:
        domain, bus, _ = fn.address.split(":")
        real = root / "devices" / f"pci{domain}:{bus}" / fn.address
        real.mkdir(parents=True)
        (real / "vendor").write_text(f"0x{fn.vendor:04x}\n")
        (real / "device").write_text(f"0x{fn.device:04x}\n")
        (real / "class").write_text(f"0x{fn.pci_class:06x}\n")
        if fn.subsystem:
            (real / "subsystem_vendor").write_text(f"0x{fn.subsystem[0]:04x}\n")
            (real / "subsystem_device").write_text(f"0x{fn.subsystem[1]:04x}\n")
        if fn.driver:
            drv = root / "bus" / "pci" / "drivers" / fn.driver
            drv.mkdir(parents=True, exist_ok=True)
            (real / "driver").symlink_to(os.path.relpath(drv, real))
        (bus_devices / fn.address).symlink_to(os.path.relpath(real, bus_devices))
    if module_loaded:
        (root / "module" / "nvidia").mkdir(parents=True, exist_ok=True)
    return root


def build_machine(root: Path, name: str, *, module_loaded: bool = True) -> Path:
    """Build the tree of a named machine; GPUs bound to nvidia only when it is loaded."""
    return build(
        root, machine(name, "nvidia" if module_loaded else None), module_loaded=module_loaded
    )


# A pci.ids excerpt in the database's own format (written for these tests): the NVIDIA
# block with the devices above, a subsystem line, and the next vendor and a class
# section after it, so a parser must stop at the end of the vendor block.
PCI_IDS = """\
#
#\tList of PCI ID's (test excerpt)
#
10de  NVIDIA Corporation
\t1aef  GA102 High Definition Audio Controller
\t1af1  GA100 [A100 NVSwitch]
\t1db1  GV100GL [Tesla V100 SXM2 16GB]
\t1eb8  TU104GL [Tesla T4]
\t20b0  GA100 [A100 SXM4 40GB]
\t2206  GA102 [GeForce RTX 3080]
\t\t10de 1467  GA102 [GeForce RTX 3080]
\t2237  GA102GL [A10G]
\t22a3  GH100 [H100 NVSwitch]
\t2330  GH100 [H100 SXM5 80GB]
10df  Emulex Corporation
\t2237  Not an NVIDIA device
1d0f  Amazon.com, Inc.
\tec20  Elastic Network Adapter (ENA)

# List of known device classes, subclasses and programming interfaces
C 03  Display controller
\t02  3D controller
"""


def write_pci_ids(path: Path, text: str = PCI_IDS) -> Path:
    """Write the pci.ids excerpt (or `text`) to `path`."""
    path.write_text(text)
    return path
